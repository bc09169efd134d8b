//! Where pi's settings come from: flags first, then the environment, then defaults.
//! Pure: the environment is passed in, so every rule is testable without touching it.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pi_course::http_transport::{DEFAULT_BASE_URL, REDACTED};
use pi_http::{HttpOptions, RetryNotice, RetryPolicy};

pub const BASE_URL_VAR: &str = "OPENAI_COMPATIBLE_BASE_URL";
pub const API_KEY_VAR: &str = "OPENAI_COMPATIBLE_API_KEY";
pub const MODEL_VAR: &str = "OPENAI_COMPATIBLE_MODEL";
/// How many times one model request is sent at most (1 = never retried).
pub const MAX_ATTEMPTS_VAR: &str = "PI_MAX_ATTEMPTS";
/// How many seconds a model response may send nothing before it is given up.
pub const STREAM_IDLE_VAR: &str = "PI_STREAM_IDLE_SECS";
/// The accepted values of `PI_MAX_ATTEMPTS`.
pub const MAX_ATTEMPTS_RANGE: (u64, u64) = (1, 20);
/// The accepted values of `PI_STREAM_IDLE_SECS`: a second to a day.
pub const STREAM_IDLE_RANGE: (u64, u64) = (1, 86_400);

/// What the command line said; `None` where a flag was not given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub root: Option<PathBuf>,
}

/// Everything a run needs, complete.
#[derive(Clone, PartialEq, Eq)]
pub struct Config {
    pub base_url: String,
    pub api_key: String,
    pub model: String,
    pub root: PathBuf,
    /// Requests sent at most per model turn, the first included.
    pub max_attempts: u32,
    /// How long a response may stall before the turn fails.
    pub stream_idle: Duration,
}

/// Written by hand so the key never reaches a log or a panic message.
impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("base_url", &self.base_url)
            .field("api_key", &REDACTED)
            .field("model", &self.model)
            .field("root", &self.root)
            .field("max_attempts", &self.max_attempts)
            .field("stream_idle", &self.stream_idle)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    MissingKey,
    MissingModel,
    NotADirectory(PathBuf),
    /// A variable that must be a whole number in `range` is not.
    BadNumber {
        var: &'static str,
        value: String,
        range: (u64, u64),
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::MissingKey => write!(f, "缺少 API 密钥：请设置环境变量 {API_KEY_VAR}"),
            ConfigError::MissingModel => write!(
                f,
                "缺少模型名：请设置环境变量 {MODEL_VAR}，或者用 --model 指定"
            ),
            ConfigError::NotADirectory(path) => {
                write!(f, "工作目录不存在或不是目录：{}", path.display())
            }
            ConfigError::BadNumber { var, value, range } => write!(
                f,
                "环境变量 {var} 的值不合法：“{value}”（应为 {} 到 {} 之间的整数）",
                range.0, range.1
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A set, non-blank value.
fn present(value: Option<String>) -> Option<String> {
    value.filter(|value| !value.trim().is_empty())
}

/// A whole number in `range` from `var`, `default` when it is unset or blank.
fn number(
    env: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    range: (u64, u64),
    default: u64,
) -> Result<u64, ConfigError> {
    let Some(value) = present(env(var)) else {
        return Ok(default);
    };
    match value.trim().parse::<u64>() {
        Ok(number) if (range.0..=range.1).contains(&number) => Ok(number),
        _ => Err(ConfigError::BadNumber { var, value, range }),
    }
}

/// Resolves the settings. `env` looks a variable up; `cwd` is the directory pi was started in.
/// The key comes only from the environment: a key on the command line would show up in
/// `ps` and in the shell's history.
pub fn resolve(
    flags: Flags,
    env: impl Fn(&str) -> Option<String>,
    cwd: PathBuf,
) -> Result<Config, ConfigError> {
    let api_key = present(env(API_KEY_VAR)).ok_or(ConfigError::MissingKey)?;
    let model = present(flags.model)
        .or_else(|| present(env(MODEL_VAR)))
        .ok_or(ConfigError::MissingModel)?;
    let base_url = present(flags.base_url)
        .or_else(|| present(env(BASE_URL_VAR)))
        .unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
    let root = match flags.root {
        Some(root) if root.is_absolute() => root,
        Some(root) => cwd.join(root),
        None => cwd,
    };
    if !root.is_dir() {
        return Err(ConfigError::NotADirectory(root));
    }
    let max_attempts = number(
        &env,
        MAX_ATTEMPTS_VAR,
        MAX_ATTEMPTS_RANGE,
        RetryPolicy::default().max_attempts.into(),
    )?;
    let stream_idle = number(
        &env,
        STREAM_IDLE_VAR,
        STREAM_IDLE_RANGE,
        pi_http::DEFAULT_STREAM_IDLE.as_secs(),
    )?;
    Ok(Config {
        base_url,
        api_key,
        model,
        root,
        // In range, so it fits.
        max_attempts: max_attempts as u32,
        stream_idle: Duration::from_secs(stream_idle),
    })
}

impl Config {
    /// How the model's HTTP client retries and times out: the default policy with this
    /// run's attempts and idle limit, each retry announced as one line on stderr.
    pub fn http_options(&self) -> HttpOptions {
        HttpOptions {
            retry: RetryPolicy {
                max_attempts: self.max_attempts,
                ..RetryPolicy::default()
            },
            stream_idle: self.stream_idle,
            on_retry: Some(Arc::new(|notice: &RetryNotice| eprintln!("pi：{notice}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn cwd() -> PathBuf {
        std::env::temp_dir()
    }

    #[test]
    fn flags_beat_the_environment_and_the_default_url_is_openai() {
        let config = resolve(
            Flags {
                model: Some("flag-model".into()),
                ..Flags::default()
            },
            env(&[(API_KEY_VAR, "k"), (MODEL_VAR, "env-model")]),
            cwd(),
        )
        .expect("密钥和模型都有时配置完整");
        assert_eq!(config.model, "flag-model", "--model 优先于环境变量");
        assert_eq!(
            config.base_url, DEFAULT_BASE_URL,
            "没给 base URL 时用公开的 OpenAI 地址"
        );
        assert_eq!(config.root, cwd(), "没给 -C 时在当前目录工作");

        let config = resolve(
            Flags {
                base_url: Some("http://flag/v1".into()),
                ..Flags::default()
            },
            env(&[
                (API_KEY_VAR, "k"),
                (MODEL_VAR, "m"),
                (BASE_URL_VAR, "http://env/v1"),
            ]),
            cwd(),
        )
        .expect("配置完整");
        assert_eq!(
            config.base_url, "http://flag/v1",
            "--base-url 优先于环境变量"
        );
    }

    #[test]
    fn a_missing_or_blank_key_or_model_names_the_variable() {
        let error = resolve(Flags::default(), env(&[(MODEL_VAR, "m")]), cwd())
            .expect_err("没有密钥不能运行");
        assert_eq!(error, ConfigError::MissingKey, "缺密钥");
        assert!(
            error.to_string().contains(API_KEY_VAR),
            "提示要说出变量名：{error}"
        );

        let error = resolve(
            Flags::default(),
            env(&[(API_KEY_VAR, "  "), (MODEL_VAR, "m")]),
            cwd(),
        )
        .expect_err("空白的密钥等于没有");
        assert_eq!(error, ConfigError::MissingKey, "空白密钥");

        let error = resolve(Flags::default(), env(&[(API_KEY_VAR, "k")]), cwd())
            .expect_err("没有模型名不能运行");
        assert!(
            error.to_string().contains(MODEL_VAR),
            "提示要说出变量名：{error}"
        );
    }

    #[test]
    fn the_root_is_resolved_against_the_start_directory_and_must_exist() {
        let error = resolve(
            Flags {
                root: Some("no-such-dir-for-pi".into()),
                ..Flags::default()
            },
            env(&[(API_KEY_VAR, "k"), (MODEL_VAR, "m")]),
            cwd(),
        )
        .expect_err("不存在的目录不能当 workspace");
        assert_eq!(
            error,
            ConfigError::NotADirectory(cwd().join("no-such-dir-for-pi")),
            "相对路径按启动目录解析"
        );
    }

    #[test]
    fn retries_and_the_idle_limit_default_and_are_validated() {
        let config = resolve(
            Flags::default(),
            env(&[(API_KEY_VAR, "k"), (MODEL_VAR, "m")]),
            cwd(),
        )
        .expect("配置完整");
        assert_eq!(
            (config.max_attempts, config.stream_idle),
            (5, Duration::from_secs(300)),
            "默认最多发 5 次，流空闲 300 秒放弃"
        );
        let options = config.http_options();
        assert_eq!(
            (options.retry.max_attempts, options.stream_idle),
            (5, Duration::from_secs(300)),
            "HTTP 客户端拿到的就是这两个值"
        );
        assert!(options.on_retry.is_some(), "每次重试都要打印一行");

        let config = resolve(
            Flags::default(),
            env(&[
                (API_KEY_VAR, "k"),
                (MODEL_VAR, "m"),
                (MAX_ATTEMPTS_VAR, "1"),
                (STREAM_IDLE_VAR, " 30 "),
            ]),
            cwd(),
        )
        .expect("合法的值");
        assert_eq!(
            (config.max_attempts, config.stream_idle),
            (1, Duration::from_secs(30)),
            "环境变量覆盖默认值，两边空白不算"
        );

        for (var, value) in [
            (MAX_ATTEMPTS_VAR, "0"),
            (MAX_ATTEMPTS_VAR, "21"),
            (MAX_ATTEMPTS_VAR, "three"),
            (STREAM_IDLE_VAR, "0"),
            (STREAM_IDLE_VAR, "-5"),
            (STREAM_IDLE_VAR, "1.5"),
        ] {
            let error = resolve(
                Flags::default(),
                env(&[(API_KEY_VAR, "k"), (MODEL_VAR, "m"), (var, value)]),
                cwd(),
            )
            .expect_err("范围之外或不是整数的值不能用");
            assert!(
                matches!(&error, ConfigError::BadNumber { var: named, value: shown, .. }
                    if *named == var && shown == value),
                "错误要说出变量和它的值：{error:?}"
            );
        }
        let error = resolve(
            Flags::default(),
            env(&[
                (API_KEY_VAR, "k"),
                (MODEL_VAR, "m"),
                (MAX_ATTEMPTS_VAR, "0"),
            ]),
            cwd(),
        )
        .expect_err("0 次不合法");
        assert_eq!(
            error.to_string(),
            "环境变量 PI_MAX_ATTEMPTS 的值不合法：“0”（应为 1 到 20 之间的整数）",
            "一行中文说清变量、值和范围"
        );
    }

    #[test]
    fn debug_output_never_shows_the_key() {
        let config = resolve(
            Flags::default(),
            env(&[(API_KEY_VAR, "sk-secret-123"), (MODEL_VAR, "m")]),
            cwd(),
        )
        .expect("配置完整");
        assert!(
            !format!("{config:?}").contains("sk-secret-123"),
            "Debug 输出不能带密钥"
        );
    }
}
