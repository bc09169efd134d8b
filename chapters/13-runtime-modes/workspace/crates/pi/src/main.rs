//! `pi`: the agent you built, as a program.
//!
//! `pi -p "任务"` runs one task and exits; `pi --mode json -p "任务"` does the same and writes
//! every event as one JSON line; plain `pi` reads one task per line until Ctrl-D or `/exit`.
//! It talks to any OpenAI-compatible endpoint (`OPENAI_COMPATIBLE_BASE_URL`, `…_API_KEY`,
//! `…_MODEL`) and works in the current directory, or in the one `-C` names.
//!
//! This file only reads the command line, hands the choices to `wiring` (which builds the
//! learner's chapter-13 `Runtime` and everything it needs) and picks a mode from `modes`.

mod compaction;
mod config;
mod diff;
mod gate;
mod input;
mod interrupt;
mod modes;
mod project;
mod render;
mod session;
mod session_store;
mod steering;
mod wiring;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::Parser;
use pi_course::agent_loop::DEFAULT_MAX_STEPS;
use pi_course::runtime_modes::RuntimeMode;

use crate::config::Flags;
use crate::modes::{Signals, EXIT_FAILED, EXIT_USAGE};
use crate::wiring::{App, Render, Settings};

/// 你自己写的编码 agent：流式调用 OpenAI 兼容的模型，用 read、write、edit、bash 在一个目录里干活。
///
/// 配置来自环境变量 OPENAI_COMPATIBLE_BASE_URL（默认 https://api.openai.com/v1）、
/// OPENAI_COMPATIBLE_API_KEY 和 OPENAI_COMPATIBLE_MODEL。
#[derive(Debug, Parser)]
#[command(name = "pi", version)]
struct Args {
    /// 只运行这一个任务，然后退出（不给就进入交互模式）
    #[arg(short = 'p', long = "print", value_name = "任务")]
    print: Option<String>,
    /// 怎样呈现：interactive、print，或 json（每行一个 JSON 事件，要和 -p 一起用）
    #[arg(long, value_name = "模式", value_parser = ["interactive", "print", "json"])]
    mode: Option<String>,
    /// 在这个目录里工作（默认当前目录）
    #[arg(short = 'C', long = "cwd", value_name = "目录")]
    root: Option<PathBuf>,
    /// OpenAI 兼容端点的 base URL，优先于 OPENAI_COMPATIBLE_BASE_URL
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// 模型名，优先于 OPENAI_COMPATIBLE_MODEL
    #[arg(long, value_name = "名字")]
    model: Option<String>,
    /// 一个任务最多走几步（每步是一次模型回合）
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_STEPS as u32,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    max_steps: u32,
    /// 继续这个目录最近的一次会话
    #[arg(short = 'c', long = "continue", conflicts_with = "session")]
    continue_session: bool,
    /// 打开这个会话文件（不存在就新建）
    #[arg(long, value_name = "文件")]
    session: Option<PathBuf>,
    /// 会话放在哪个目录（默认 $XDG_STATE_HOME/pi/sessions/<工作目录>，未设置时用 ~/.local/state）
    #[arg(long, value_name = "目录")]
    session_dir: Option<PathBuf>,
    /// 会话文件末尾有一行没写完时，截掉它再继续
    #[arg(long)]
    repair: bool,
    /// 列出这个目录最近的会话，然后退出
    #[arg(long, conflicts_with_all = ["print", "continue_session", "session"])]
    resume: bool,
    /// 运行 bash、write、edit 之前先问（交互模式在终端上问；-p 模式下没有匹配 --allow 的一律拒绝）
    #[arg(long)]
    confirm: bool,
    /// 预先允许，格式 工具:模式，* 匹配任意字符，例如 'bash:cargo test*'（可重复；要和 --confirm 一起用）
    #[arg(long, value_name = "工具:模式")]
    allow: Vec<String>,
    /// 模型的上下文窗口（token 数），优先于 PI_CONTEXT_WINDOW；放不下时较早的历史压缩成摘要
    #[arg(long, value_name = "N")]
    context_window: Option<u64>,
}

/// clap's own errors are English paragraphs; pi answers bad input with one Chinese line.
fn usage_line(error: &clap::Error) -> String {
    let shown = |kind| match error.get(kind) {
        Some(ContextValue::String(value)) => value.clone(),
        Some(ContextValue::Strings(values)) => values.join(", "),
        _ => String::new(),
    };
    match error.kind() {
        ErrorKind::UnknownArgument => format!(
            "pi：不认识的参数 {}（pi --help 查看用法）",
            shown(ContextKind::InvalidArg)
        ),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => format!(
            "pi：{} 的值不合法：{}（pi --help 查看用法）",
            shown(ContextKind::InvalidArg),
            shown(ContextKind::InvalidValue)
        ),
        ErrorKind::NoEquals | ErrorKind::MissingRequiredArgument | ErrorKind::InvalidSubcommand
            if !shown(ContextKind::InvalidArg).is_empty() =>
        {
            format!(
                "pi：参数 {} 用法不对（pi --help 查看用法）",
                shown(ContextKind::InvalidArg)
            )
        }
        _ => "pi：命令行参数有误（pi --help 查看用法）".to_string(),
    }
}

/// `--mode` and `-p` together: `-p` alone is print mode, neither is interactive; json and
/// print need a task, interactive refuses one.
fn pick_mode(mode: Option<&str>, task: bool) -> Result<RuntimeMode, String> {
    let Some(name) = mode else {
        return Ok(if task {
            RuntimeMode::Print
        } else {
            RuntimeMode::Interactive
        });
    };
    let mode: RuntimeMode = name.parse().map_err(|error| format!("{error}"))?;
    match (mode, task) {
        (RuntimeMode::Json | RuntimeMode::Print, false) => {
            Err(format!("--mode {name} 要和 -p 任务 一起用"))
        }
        (RuntimeMode::Interactive, true) => {
            Err("--mode interactive 不能和 -p 一起用（-p 只运行一个任务）".to_string())
        }
        _ => Ok(mode),
    }
}

/// What this start of pi does, once the command line has been checked.
enum Launch {
    /// `--resume`: the listing to print; nothing runs.
    Sessions(String),
    Run {
        mode: RuntimeMode,
        /// Boxed: it is large, and the other variant is one string.
        settings: Box<Settings>,
        task: Option<String>,
    },
}

/// Every check of the command line and the environment, before anything runs. A refusal is
/// the one line pi prints after `pi：`.
fn plan(args: Args) -> Result<Launch, String> {
    if args
        .print
        .as_deref()
        .is_some_and(|task| task.trim().is_empty())
    {
        return Err("-p 后面的任务不能为空".to_string());
    }
    let mode = pick_mode(args.mode.as_deref(), args.print.is_some())?;
    let cwd = std::env::current_dir().map_err(|error| format!("读不到当前目录：{error}"))?;
    let flags = Flags {
        base_url: args.base_url,
        model: args.model,
        root: args.root,
    };
    let config = config::resolve(flags, |name| std::env::var(name).ok(), cwd)
        .map_err(|error| error.to_string())?;
    if args.resume {
        return session_store::list_sessions(args.session_dir.as_deref(), &config)
            .map(Launch::Sessions);
    }
    if !args.allow.is_empty() && !args.confirm {
        return Err("--allow 只能和 --confirm 一起使用".to_string());
    }
    let rules = args
        .allow
        .iter()
        .map(|rule| gate::Rule::parse(rule))
        .collect::<Result<Vec<_>, _>>()?;
    let context_window =
        compaction::context_window(args.context_window, |name| std::env::var(name).ok())?;
    // In print and json mode nobody is there to answer, so the gate decides by the rules.
    let gate = args.confirm.then_some(gate::Gate {
        rules,
        ask: match mode {
            RuntimeMode::Interactive => gate::Ask::Terminal,
            RuntimeMode::Print | RuntimeMode::Json => gate::Ask::Never,
        },
    });
    let settings = Settings {
        config,
        max_steps: args.max_steps as usize,
        context_window,
        choice: session_store::Choice {
            file: args.session,
            continue_newest: args.continue_session,
            dir: args.session_dir,
            repair: args.repair,
        },
        gate,
        render: match mode {
            RuntimeMode::Json => Render::Errors,
            RuntimeMode::Interactive | RuntimeMode::Print => Render::Terminal,
        },
    };
    Ok(Launch::Run {
        mode,
        settings: Box::new(settings),
        task: args.print,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    modes::install_panic_hook();
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("{}", usage_line(&error));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let (mode, settings, task) = match plan(args) {
        Ok(Launch::Run {
            mode,
            settings,
            task,
        }) => (mode, settings, task),
        Ok(Launch::Sessions(listing)) => {
            print!("{listing}");
            return ExitCode::SUCCESS;
        }
        Err(refusal) => {
            eprintln!("pi：{refusal}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let app = match App::build(*settings).await {
        Ok(app) => app,
        Err(message) => {
            eprintln!("pi：{message}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Installed before the first turn: from here on Ctrl-C, SIGTERM and SIGHUP cancel a turn
    // instead of killing pi, so every call already made still gets its paired result and no
    // command the model started outlives pi.
    let signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("pi：无法接管 Ctrl-C、SIGTERM 和 SIGHUP：{error}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    match (mode, task) {
        (RuntimeMode::Json, Some(task)) => modes::json_mode(app, &task, signals).await,
        (_, Some(task)) => modes::print_mode(app, &task, signals).await,
        (_, None) => modes::interactive_mode(app, signals).await,
    }
}
