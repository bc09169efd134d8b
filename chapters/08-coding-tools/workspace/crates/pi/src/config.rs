//! Where pi's settings come from: flags first, then the environment, then defaults.
//! Pure: the environment is passed in, so every rule is testable without touching it.

use std::fmt;
use std::path::PathBuf;

use pi_course::http_transport::{DEFAULT_BASE_URL, REDACTED};

pub const BASE_URL_VAR: &str = "OPENAI_COMPATIBLE_BASE_URL";
pub const API_KEY_VAR: &str = "OPENAI_COMPATIBLE_API_KEY";
pub const MODEL_VAR: &str = "OPENAI_COMPATIBLE_MODEL";

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
}

/// Written by hand so the key never reaches a log or a panic message.
impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("base_url", &self.base_url)
            .field("api_key", &REDACTED)
            .field("model", &self.model)
            .field("root", &self.root)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    MissingKey,
    MissingModel,
    NotADirectory(PathBuf),
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
        }
    }
}

impl std::error::Error for ConfigError {}

/// A set, non-blank value.
fn present(value: Option<String>) -> Option<String> {
    value.filter(|value| !value.trim().is_empty())
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
    Ok(Config {
        base_url,
        api_key,
        model,
        root,
    })
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
