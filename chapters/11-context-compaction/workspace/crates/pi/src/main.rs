//! `pi`: the agent you built, as a program.
//!
//! `pi -p "任务"` runs one task and exits; plain `pi` reads one task per line until Ctrl-D,
//! with line editing and history when it runs in a terminal.
//! Chapter 09: a line typed while a task runs is steering for it, `/followup …` queues a message
//! for after its natural stop, and Ctrl-C aborts it; the session goes on.
//! It talks to any OpenAI-compatible endpoint (`OPENAI_COMPATIBLE_BASE_URL`, `…_API_KEY`,
//! `…_MODEL`) and works in the current directory, or in the one `-C` names.

mod compaction;
mod config;
mod diff;
mod input;
mod render;
mod session;
mod session_store;
mod steering;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::Parser;
use pi_course::agent_loop::{AgentRunResult, RunReason, DEFAULT_MAX_STEPS};
use pi_course::types::AgentMessage;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_util::sync::CancellationToken;

use crate::config::Flags;
use crate::input::{Input, Read};
use crate::render::ending_line;
use crate::session::Session;
use crate::steering::Steering;

/// The run ended with an error, a cut answer or the step bound.
const EXIT_FAILED: u8 = 1;
/// Bad command line or configuration: nothing was run.
const EXIT_USAGE: u8 = 2;
/// Cancelled with Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_CANCELLED: u8 = 130;
/// Ended by SIGHUP (128 + 1): the terminal went away.
const EXIT_HUNG_UP: u8 = 129;
/// Ended by SIGTERM (128 + 15).
const EXIT_TERMINATED: u8 = 143;

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

fn exit_code(result: &AgentRunResult, max_steps: usize) -> ExitCode {
    let last = result
        .messages
        .iter()
        .rev()
        .find_map(|message| match message {
            AgentMessage::Assistant(assistant) => Some(assistant),
            _ => None,
        });
    match ending_line(result.reason, last, max_steps) {
        None => ExitCode::SUCCESS,
        Some(line) => {
            eprintln!("{line}");
            if result.reason == RunReason::Aborted {
                ExitCode::from(EXIT_CANCELLED)
            } else {
                ExitCode::from(EXIT_FAILED)
            }
        }
    }
}

/// A signal that stops work. Ctrl-C cancels the running turn; SIGTERM and SIGHUP cancel it
/// the same way (the tools' process groups are killed) and then end pi.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Interrupt,
    Terminate,
    HangUp,
}

impl Stop {
    fn name(self) -> &'static str {
        match self {
            Stop::Interrupt => "SIGINT",
            Stop::Terminate => "SIGTERM",
            Stop::HangUp => "SIGHUP",
        }
    }

    fn code(self) -> u8 {
        match self {
            Stop::Interrupt => EXIT_CANCELLED,
            Stop::Terminate => EXIT_TERMINATED,
            Stop::HangUp => EXIT_HUNG_UP,
        }
    }

    fn exit_code(self) -> ExitCode {
        ExitCode::from(self.code())
    }
}

/// The three signals pi handles itself, installed before the first turn.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hang_up: Signal,
    /// Chapter 09: in interactive mode, the line reader lent for the length of a turn. A line
    /// typed then interrupts the work as a signal does, only more gently: it steers.
    typing: Option<Typing>,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hang_up: signal(SignalKind::hangup())?,
            typing: None,
        })
    }

    async fn recv(&mut self) -> Stop {
        tokio::select! {
            _ = self.interrupt.recv() => Stop::Interrupt,
            _ = self.terminate.recv() => Stop::Terminate,
            _ = self.hang_up.recv() => Stop::HangUp,
            stop = typed(&mut self.typing) => stop,
        }
    }
}

/// Chapter 09: the line reader while a turn runs, and what it read that is not for this run.
struct Typing {
    input: Input,
    steering: Steering,
    /// Lines and ends of input to handle after the turn, in the order they came.
    deferred: VecDeque<Read>,
    /// A read was started and not answered: it may still be in flight when the turn ends.
    reading: bool,
    /// Input ended or failed: nothing more is read during this turn.
    closed: bool,
}

impl Typing {
    fn new(input: Input, steering: Steering) -> Typing {
        Typing {
            input,
            steering,
            deferred: VecDeque::new(),
            reading: false,
            closed: false,
        }
    }

    /// A line typed while the run works: `/followup …` is queued for after its natural stop,
    /// anything else steers it. A line the run can no longer take becomes the next task.
    fn deliver(&mut self, line: String) {
        if line.trim().is_empty() {
            return;
        }
        if let Some(text) = follow_up_text(&line) {
            match self.steering.follow_up(text) {
                Ok(()) => eprintln!("pi：追加消息已排队，这次运行自然结束后交给模型：{text}"),
                Err(refusal) => eprintln!("{refusal}"),
            }
            return;
        }
        // Chapter 11: `/compact` is for pi, not the model: it runs once this turn is over.
        if line.trim() == "/compact" {
            eprintln!("pi：/compact 等这次运行结束后再执行");
            self.deferred.push_back(Read::Line(line));
            return;
        }
        match self.steering.steer(&line) {
            Ok(()) => {
                eprintln!("pi：插话已排队，当前这批工具调用结束后（或模型停下时）交给模型：{line}")
            }
            Err(_) => {
                eprintln!("pi：现在没有可以插话的运行，这一行留作下一个任务：{line}");
                self.deferred.push_back(Read::Line(line));
            }
        }
    }
}

/// Chapter 09: lines typed while a turn runs, each handed to `Typing::deliver`. Never ready
/// when no reader is lent or input has ended. At the line editor Ctrl-C arrives as a key, not
/// as SIGINT (the terminal is in raw mode), and it means what SIGINT means: cancel the turn.
async fn typed(typing: &mut Option<Typing>) -> Stop {
    let Some(typing) = typing.as_mut().filter(|typing| !typing.closed) else {
        return std::future::pending().await;
    };
    loop {
        typing.reading = true;
        let read = typing.input.read().await;
        typing.reading = false;
        match read {
            Read::Line(line) => typing.deliver(line),
            Read::Cleared => return Stop::Interrupt,
            Read::End | Read::Failed(_) => {
                typing.deferred.push_back(read);
                typing.closed = true;
                return std::future::pending().await;
            }
        }
    }
}

/// The text of a `/followup <text>` line; `None` for any other line.
fn follow_up_text(line: &str) -> Option<&str> {
    let rest = line.trim().strip_prefix("/followup")?;
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then(|| rest.trim())
}

/// Runs one task; a signal cancels it, and the turn still runs to its end so that every call
/// already made gets its paired result. Also says whether SIGTERM or SIGHUP came, after which
/// pi ends.
async fn cancellable_turn(
    session: &mut Session,
    task: &str,
    signals: &mut Signals,
) -> (Result<AgentRunResult, String>, Option<Stop>) {
    let cancel = CancellationToken::new();
    let turn = session.turn(task, cancel.clone());
    tokio::pin!(turn);
    let mut fatal = None;
    loop {
        tokio::select! {
            result = &mut turn => return (result, fatal),
            stop = signals.recv() => {
                if stop != Stop::Interrupt {
                    fatal = Some(stop);
                }
                cancel.cancel();
            }
        }
    }
}

/// `/compact`, with Ctrl-C cancelling the summary; nothing is written then. SIGTERM or SIGHUP
/// cancel it too and are handed back, so pi then exits as it does after a turn.
async fn cancellable_compaction(
    session: &mut Session,
    signals: &mut Signals,
) -> (Result<(), String>, Option<Stop>) {
    let cancel = CancellationToken::new();
    let mut fatal = None;
    let compaction = session.compact_now(&cancel);
    tokio::pin!(compaction);
    loop {
        tokio::select! {
            result = &mut compaction => return (result, fatal),
            stop = signals.recv() => {
                if stop != Stop::Interrupt {
                    fatal = Some(stop);
                }
                cancel.cancel();
            }
        }
    }
}

/// pi ends because of `stop`: one line, and the signal's exit code.
fn stopped(stop: Stop) -> ExitCode {
    eprintln!("pi：收到 {}，已取消并退出", stop.name());
    stop.exit_code()
}

/// pi ends at the prompt because of `stop`, at once: a read of stdin may still be in flight on
/// tokio's blocking pool, and shutting the runtime down would wait for it.
fn exit_at_prompt(stop: Stop, input: &mut Input) -> ! {
    input.close();
    eprintln!();
    eprintln!("pi：收到 {}，退出", stop.name());
    std::process::exit(i32::from(stop.code()))
}

/// Chapter 09: pi ends after a turn during which lines were read. A read may still be in
/// flight, as at the prompt, so pi ends at once and gives the terminal back.
fn end_while_reading(stop: Stop, input: &mut Input) -> ! {
    input.close();
    eprintln!("pi：收到 {}，已取消并退出", stop.name());
    std::process::exit(i32::from(stop.code()))
}

async fn print_mode(
    mut session: Session,
    prompt: &str,
    mut signals: Signals,
    max_steps: usize,
) -> ExitCode {
    let (outcome, fatal) = cancellable_turn(&mut session, prompt, &mut signals).await;
    if let Some(stop) = fatal {
        return stopped(stop);
    }
    match outcome {
        Ok(result) => exit_code(&result, max_steps),
        Err(message) => {
            eprintln!("pi：{message}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

async fn interactive_mode(
    mut session: Session,
    mut signals: Signals,
    max_steps: usize,
) -> ExitCode {
    let mut input = Input::open();
    eprintln!("pi 交互模式：每行一个任务；Ctrl-C 取消正在运行的回合，Ctrl-D 退出。");
    eprintln!("运行中输入的一行是插话，当前这批工具调用结束后交给模型；/followup <文字> 等这次运行结束后再追加。");
    // Chapter 09: what a turn read but did not take, handled before the next read.
    let mut deferred: VecDeque<Read> = VecDeque::new();
    eprintln!("输入 /compact 把较早的历史压缩成摘要（只保留最近一次交互的原文）。");
    loop {
        let line = tokio::select! {
            biased;
            Some(read) = std::future::ready(deferred.pop_front()) => read,
            line = input.read() => line,
            stop = signals.recv() => {
                if stop != Stop::Interrupt {
                    exit_at_prompt(stop, &mut input);
                }
                eprintln!();
                eprintln!("（没有正在运行的回合；按 Ctrl-D 退出）");
                continue;
            }
        };
        let task = match line {
            Read::Line(task) => task,
            // Ctrl-C at the line editor's prompt: the line is dropped, the session goes on.
            Read::Cleared => continue,
            Read::End => {
                eprintln!();
                return ExitCode::SUCCESS;
            }
            Read::Failed(error) => {
                eprintln!("pi：读不了标准输入：{error}");
                return ExitCode::from(EXIT_FAILED);
            }
        };
        if task.trim().is_empty() {
            continue;
        }
        // Chapter 09: `/followup` is for a running task; with none it is refused, not run.
        if let Some(text) = follow_up_text(&task) {
            if let Err(refusal) = session.steering().follow_up(text) {
                eprintln!("{refusal}");
            }
            continue;
        }
        // Chapter 11: `/compact` summarises the history now, keeping the newest interaction.
        if task.trim() == "/compact" {
            let (outcome, fatal) = cancellable_compaction(&mut session, &mut signals).await;
            if let Err(message) = outcome {
                eprintln!("pi：{message}");
            }
            if let Some(stop) = fatal {
                return stopped(stop);
            }
            continue;
        }
        signals.typing = Some(Typing::new(input, session.steering()));
        let (outcome, fatal) = cancellable_turn(&mut session, &task, &mut signals).await;
        let typing = signals
            .typing
            .take()
            .expect("回合结束后，借出的输入一定还在");
        input = typing.input;
        if let Some(stop) = fatal.filter(|_| typing.reading) {
            end_while_reading(stop, &mut input);
        }
        if let Some(stop) = fatal {
            return stopped(stop);
        }
        // Messages the run ended without taking: after a natural stop they are the next
        // tasks (they came too late for this one); after anything else they are only shown.
        let stopped_naturally = matches!(&outcome, Ok(result) if result.reason == RunReason::Stop);
        for text in session.steering().take_unsent() {
            if stopped_naturally {
                eprintln!("pi：运行在这一行送达之前结束了，它作为下一个任务：{text}");
                deferred.push_back(Read::Line(text));
            } else {
                eprintln!("pi：运行没有正常结束，这一行没有交给模型：{text}");
            }
        }
        deferred.extend(typing.deferred);
        match outcome {
            // The session goes on after a failed or cancelled turn; only its line is shown.
            Ok(result) => {
                let _ = exit_code(&result, max_steps);
            }
            Err(message) => eprintln!("pi：{message}"),
        }
    }
}

/// A panic is a bug or an unfinished Lab (`Lab 8.k … 尚未实现`): one line saying which, and
/// what to do about the second kind, instead of Rust's English report.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|text| text.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let place = info
            .location()
            .map(|location| format!("（{}:{}）", location.file(), location.line()))
            .unwrap_or_default();
        eprintln!("pi：panic：{message}{place}");
        if message.contains("尚未实现") {
            eprintln!("pi：这部分还没写完；先让 cargo xtask test 08 全部变绿，再运行 pi");
        }
    }));
}

#[tokio::main]
async fn main() -> ExitCode {
    install_panic_hook();
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
    if args
        .print
        .as_deref()
        .is_some_and(|task| task.trim().is_empty())
    {
        eprintln!("pi：-p 后面的任务不能为空");
        return ExitCode::from(EXIT_USAGE);
    }
    let cwd = match std::env::current_dir() {
        Ok(cwd) => cwd,
        Err(error) => {
            eprintln!("pi：读不到当前目录：{error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let flags = Flags {
        base_url: args.base_url,
        model: args.model,
        root: args.root,
    };
    let config = match config::resolve(flags, |name| std::env::var(name).ok(), cwd) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("pi：{error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if args.resume {
        return match session_store::list_sessions(args.session_dir.as_deref(), &config) {
            Ok(listing) => {
                print!("{listing}");
                ExitCode::SUCCESS
            }
            Err(message) => {
                eprintln!("pi：{message}");
                ExitCode::from(EXIT_USAGE)
            }
        };
    }
    let max_steps = args.max_steps as usize;
    let session = match Session::new(&config, max_steps) {
        Ok(session) => session,
        Err(message) => {
            eprintln!("pi：{message}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mut session = session;
    match compaction::context_window(args.context_window, |name| std::env::var(name).ok()) {
        Ok(window) => session.set_context_window(window),
        Err(message) => {
            eprintln!("pi：{message}");
            return ExitCode::from(EXIT_USAGE);
        }
    }
    let choice = session_store::Choice {
        file: args.session,
        continue_newest: args.continue_session,
        dir: args.session_dir,
        repair: args.repair,
    };
    let attached = match session_store::open_log(choice, &config).await {
        Ok(log) => session.attach_log(log),
        Err(message) => Err(message),
    };
    if let Err(message) = attached {
        eprintln!("pi：{message}");
        return ExitCode::from(EXIT_USAGE);
    }
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
    match args.print {
        Some(task) => print_mode(session, &task, signals, max_steps).await,
        None => interactive_mode(session, signals, max_steps).await,
    }
}
