//! The three ways pi presents a run: print (`-p`), interactive, and `--mode json`. They differ
//! only in what they show; every task goes through the learner's `Runtime` (`wiring.rs`), and
//! a signal becomes `control.abort()`.

use std::collections::VecDeque;
use std::io;
use std::process::ExitCode;

use pi_course::agent_loop::{AgentRunResult, RunReason};
use pi_course::runtime_modes::{run_mode, ModeError};
use pi_course::types::AgentMessage;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_util::sync::CancellationToken;

use crate::input::{Input, Read};
use crate::render::ending_line;
use crate::steering::{deliver, later_task, no_run_for_follow_up};
use crate::wiring::App;

/// The run ended with an error, a cut answer or the step bound.
pub const EXIT_FAILED: u8 = 1;
/// Bad command line or configuration: nothing was run.
pub const EXIT_USAGE: u8 = 2;
/// Cancelled with Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_CANCELLED: u8 = 130;
/// Ended by SIGHUP (128 + 1): the terminal went away.
const EXIT_HUNG_UP: u8 = 129;
/// Ended by SIGTERM (128 + 15).
const EXIT_TERMINATED: u8 = 143;

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
}

/// The three signals pi handles itself, installed before the first turn.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hang_up: Signal,
}

impl Signals {
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hang_up: signal(SignalKind::hangup())?,
        })
    }

    async fn recv(&mut self) -> Stop {
        tokio::select! {
            _ = self.interrupt.recv() => Stop::Interrupt,
            _ = self.terminate.recv() => Stop::Terminate,
            _ = self.hang_up.recv() => Stop::HangUp,
        }
    }
}

/// pi ends because of `stop`: one line, and the signal's exit code.
fn stopped(stop: Stop) -> ExitCode {
    eprintln!("pi：收到 {}，已取消并退出", stop.name());
    ExitCode::from(stop.code())
}

/// pi ends at the prompt because of `stop`, at once: a read of stdin may still be in flight on
/// tokio's blocking pool, and shutting the runtime down would wait for it.
fn exit_at_prompt(stop: Stop, input: &mut Input) -> ! {
    input.close();
    eprintln!();
    eprintln!("pi：收到 {}，退出", stop.name());
    std::process::exit(i32::from(stop.code()))
}

/// A panic is a bug or an unfinished Lab (`Lab N.k … 尚未实现`): one line saying which, and
/// what to do about the second kind, instead of Rust's English report.
pub fn install_panic_hook() {
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
            eprintln!("pi：这部分还没写完；先让 cargo xtask test 13 全部变绿，再运行 pi");
        }
    }));
}

/// Makes room before a task (chapter 11), with signals cancelling the summary. `Err` when
/// the task must not run: the line to show, and the signal that ends pi, if one came.
async fn prepare(app: &mut App, signals: &mut Signals) -> Result<(), (String, Option<Stop>)> {
    let cancel = CancellationToken::new();
    let mut fatal = None;
    let fitted = {
        let fit = app.fit_context(&cancel);
        tokio::pin!(fit);
        loop {
            tokio::select! {
                fitted = &mut fit => break fitted,
                stop = signals.recv() => {
                    if stop != Stop::Interrupt {
                        fatal = Some(stop);
                    }
                    cancel.cancel();
                }
            }
        }
    };
    match fitted {
        Err(message) => Err((message, fatal)),
        Ok(()) if cancel.is_cancelled() => Err(("已取消".to_string(), fatal)),
        Ok(()) => Ok(()),
    }
}

/// The next line a person types while a run works, when lines are read then at all.
async fn typed(input: &mut Option<&mut Input>) -> Read {
    match input {
        Some(input) => input.read().await,
        None => std::future::pending().await,
    }
}

/// One task through the runtime. A signal aborts the run; the run still ends and is
/// persisted, so every call already made keeps its paired result. With `typing`, a line
/// typed meanwhile steers the run and `/followup …` queues a follow-up; Ctrl-C in the line
/// editor (which sees it as a key, not a signal) cancels the run, and Ctrl-D sets `ended`.
async fn run_task(
    app: &mut App,
    task: &str,
    signals: &mut Signals,
    mut typing: Option<&mut Input>,
    later: &mut VecDeque<String>,
    ended: &mut bool,
) -> (Result<AgentRunResult, String>, Option<Stop>) {
    if let Err((message, fatal)) = prepare(app, signals).await {
        return (Err(message), fatal);
    }
    let control = app.control();
    let interrupter = app.interrupter();
    let mark = app.mark();
    let run = app.runtime().prompt(task);
    tokio::pin!(run);
    let mut fatal = None;
    // Once the run is being stopped, a typed line is for the next task, not for this run.
    let mut stopping = false;
    let outcome = loop {
        tokio::select! {
            outcome = &mut run => break outcome,
            stop = signals.recv() => {
                if stop != Stop::Interrupt {
                    fatal = Some(stop);
                }
                stopping = true;
                interrupter.interrupt(&control);
            }
            line = typed(&mut typing) => match line {
                Read::Line(line) if stopping => later_task(line, later),
                Read::Line(line) => deliver(&control, line, later),
                Read::Cleared => {
                    stopping = true;
                    interrupter.interrupt(&control);
                }
                // The session ends once this task has.
                Read::End | Read::Failed(_) => {
                    *ended = true;
                    typing = None;
                }
            },
        }
    };
    match outcome {
        Ok(result) => {
            app.finish(&result, mark);
            (Ok(result), fatal)
        }
        Err(error) => (Err(error.to_string()), fatal),
    }
}

pub async fn print_mode(mut app: App, task: &str, mut signals: Signals) -> ExitCode {
    let mut nothing_later = VecDeque::new();
    let (outcome, fatal) = run_task(
        &mut app,
        task,
        &mut signals,
        None,
        &mut nothing_later,
        &mut false,
    )
    .await;
    app.close().await;
    if let Some(stop) = fatal {
        return stopped(stop);
    }
    match outcome {
        Ok(result) => exit_code(&result, app.max_steps()),
        Err(message) => {
            eprintln!("pi：{message}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// `--mode json`: stdout is the learner's `run_mode` JSON Lines, `final` last; stderr carries
/// errors only.
pub async fn json_mode(mut app: App, task: &str, mut signals: Signals) -> ExitCode {
    if let Err((message, fatal)) = prepare(&mut app, &mut signals).await {
        if let Some(stop) = fatal {
            return stopped(stop);
        }
        eprintln!("pi：{message}");
        return ExitCode::from(EXIT_FAILED);
    }
    let runtime = app.runtime().clone();
    let control = runtime.control();
    let interrupter = app.interrupter();
    let mark = app.mark();
    let mut stdout = JsonOut {
        stdout: std::io::stdout(),
        reader_gone: Some(Box::new(|| interrupter.interrupt(&control))),
    };
    let mut fatal = None;
    let outcome = {
        let run = run_mode(&runtime, "json", task, &mut stdout);
        tokio::pin!(run);
        loop {
            tokio::select! {
                outcome = &mut run => break outcome,
                stop = signals.recv() => {
                    if stop != Stop::Interrupt {
                        fatal = Some(stop);
                    }
                    interrupter.interrupt(&control);
                }
            }
        }
    };
    app.close().await;
    if let Some(stop) = fatal {
        return stopped(stop);
    }
    match outcome {
        Ok(result) => {
            app.finish(&result, mark);
            exit_code(&result, app.max_steps())
        }
        // The reader stopped reading (`pi --mode json … | head -3`): it has what it wanted,
        // and the run was cut when it left. Quiet, like any Unix filter at a closed pipe.
        Err(ModeError::Io(error)) if error.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(ModeError::Io(error)) => {
            eprintln!("pi：写不了标准输出：{error}");
            ExitCode::from(EXIT_FAILED)
        }
        Err(error) => {
            eprintln!("pi：{error}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// Standard output for `--mode json`. When the reader goes away, nobody sees the rest of the
/// run, so the run is cut then (`reader_gone`) instead of going on unseen: the learner's
/// `run_mode` reports an output error only once the run has ended.
struct JsonOut<'a> {
    stdout: io::Stdout,
    reader_gone: Option<Box<dyn FnOnce() + 'a>>,
}

impl JsonOut<'_> {
    fn watch<T>(&mut self, written: io::Result<T>) -> io::Result<T> {
        if let Err(error) = &written {
            if error.kind() == io::ErrorKind::BrokenPipe {
                if let Some(cut) = self.reader_gone.take() {
                    cut();
                }
            }
        }
        written
    }
}

impl io::Write for JsonOut<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let written = self.stdout.write(bytes);
        self.watch(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        let flushed = self.stdout.flush();
        self.watch(flushed)
    }
}

/// What a line typed at the prompt asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Task(String),
    New,
    List,
    Resume(usize),
    Compact,
    Session,
    Exit,
    /// A line that cannot run; the one line to show.
    Refused(String),
    /// `/followup text` with no run to take it.
    NoRun(String),
}

/// `/new`, `/resume [N]`, `/compact`, `/session`, `/exit`, a prompt template `/name …`, or a
/// task. `template` says whether the project has a template of that name.
fn command(line: &str, template: impl Fn(&str) -> bool) -> Command {
    let Some(rest) = line.trim().strip_prefix('/') else {
        return Command::Task(line.to_string());
    };
    let mut words = rest.split_whitespace();
    let name = words.next().unwrap_or_default();
    let argument: Vec<&str> = words.collect();
    match (name, argument.as_slice()) {
        ("new", []) => Command::New,
        ("resume", []) => Command::List,
        ("resume", [number]) => match number.parse::<usize>() {
            Ok(number) if number > 0 => Command::Resume(number),
            _ => Command::Refused(format!("/resume 后面是会话的编号（从 1 开始），不是 {number}")),
        },
        ("compact", []) => Command::Compact,
        ("session", []) => Command::Session,
        ("exit", []) => Command::Exit,
        ("new" | "resume" | "compact" | "session" | "exit", _) => {
            Command::Refused(format!("/{name} 不接受这些参数：{}", argument.join(" ")))
        }
        ("followup", []) => {
            Command::Refused("/followup 后面要跟要追加的文字，例如 /followup 再跑一遍测试".into())
        }
        ("followup", _) => Command::NoRun(rest.trim_start_matches("followup").trim().to_string()),
        _ if template(name) => Command::Task(line.trim().to_string()),
        _ => Command::Refused(format!(
            "没有 /{name} 这个命令：可用 /new、/resume、/compact、/session、/exit，或 .pi/prompts/ 里的模板"
        )),
    }
}

/// `/compact`, with Ctrl-C cancelling the summary; nothing is written then. SIGTERM or SIGHUP
/// cancel it too and are handed back, so pi then exits as it does after a turn.
async fn cancellable_compaction(
    app: &mut App,
    signals: &mut Signals,
) -> (Result<(), String>, Option<Stop>) {
    let cancel = CancellationToken::new();
    let mut fatal = None;
    let compaction = app.compact_now(&cancel);
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

pub async fn interactive_mode(mut app: App, mut signals: Signals) -> ExitCode {
    let mut input = Input::open();
    // Chapter 09: a line typed while a run works steers it. The confirmation gate asks on
    // the terminal, so nothing else reads input while it may.
    let steering = !app.asks();
    eprintln!("pi 交互模式：每行一个任务；Ctrl-C 取消正在运行的回合，Ctrl-D 退出。");
    eprintln!("输入 /compact 把较早的历史压缩成摘要（只保留最近一次交互的原文）。");
    eprintln!("/new 新会话，/resume 列出并切换会话，/session 查看当前会话，/exit 退出。");
    if steering {
        eprintln!("运行中输入的一行是插话，当前这批工具调用结束后交给模型；/followup <文字> 等这次运行结束后再追加。");
    }
    // Lines typed during a run that run after it, in the order they came.
    let mut later: VecDeque<String> = VecDeque::new();
    // Input ended while a run worked: what was typed before still runs, then pi ends.
    let mut input_ended = false;
    loop {
        let line = if let Some(line) = later.pop_front() {
            Read::Line(line)
        } else if input_ended {
            Read::End
        } else {
            tokio::select! {
            line = input.read() => line,
            stop = signals.recv() => {
                if stop != Stop::Interrupt {
                    exit_at_prompt(stop, &mut input);
                }
                eprintln!();
                eprintln!("（没有正在运行的回合；按 Ctrl-D 退出）");
                continue;
            }
            }
        };
        let line = match line {
            Read::Line(line) => line,
            // Ctrl-C at the line editor's prompt: the line is dropped, the session goes on.
            Read::Cleared => continue,
            Read::End => {
                eprintln!();
                app.close().await;
                return ExitCode::SUCCESS;
            }
            Read::Failed(error) => {
                eprintln!("pi：读不了标准输入：{error}");
                app.close().await;
                return ExitCode::from(EXIT_FAILED);
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let task = match command(&line, |name| app.has_template(name)) {
            Command::Task(task) => task,
            Command::Exit => {
                app.close().await;
                return ExitCode::SUCCESS;
            }
            Command::Refused(message) => {
                eprintln!("pi：{message}");
                continue;
            }
            Command::NoRun(text) => {
                eprintln!("{}", no_run_for_follow_up(&text));
                continue;
            }
            Command::Session => {
                match app.describe() {
                    Ok(lines) => lines.iter().for_each(|line| eprintln!("{line}")),
                    Err(message) => eprintln!("pi：{message}"),
                }
                continue;
            }
            Command::List => {
                match app.listing() {
                    Ok(listing) => eprint!("{listing}"),
                    Err(message) => eprintln!("pi：{message}"),
                }
                continue;
            }
            Command::New => {
                match app.new_session().await {
                    Ok(file) => eprintln!("pi：新会话 {}", file.display()),
                    Err(message) => eprintln!("pi：{message}"),
                }
                continue;
            }
            Command::Resume(number) => {
                match app.resume(number).await {
                    Ok(file) => eprintln!("pi：继续会话 {}", file.display()),
                    Err(message) => eprintln!("pi：{message}"),
                }
                continue;
            }
            // Chapter 11: `/compact` summarises the history now, keeping the newest interaction.
            Command::Compact => {
                let (outcome, fatal) = cancellable_compaction(&mut app, &mut signals).await;
                if let Err(message) = outcome {
                    eprintln!("pi：{message}");
                }
                if let Some(stop) = fatal {
                    return stopped(stop);
                }
                continue;
            }
        };
        // `/name key=value …` runs the prompt template .pi/prompts/name.md.
        let task = match app.expand(&task) {
            Ok(task) => task,
            Err(message) => {
                eprintln!("pi：{message}");
                continue;
            }
        };
        let typing = steering.then_some(&mut input);
        let mut ended = false;
        let mut typed_later = VecDeque::new();
        let (outcome, fatal) = run_task(
            &mut app,
            &task,
            &mut signals,
            typing,
            &mut typed_later,
            &mut ended,
        )
        .await;
        if let Some(stop) = fatal {
            // A read of stdin may still be in flight on tokio's blocking pool, and shutting
            // the runtime down would wait for it; the run is already on disk.
            app.close().await;
            input.close();
            let _ = stopped(stop);
            std::process::exit(i32::from(stop.code()));
        }
        // Messages the run ended without taking: after a natural stop they are the next
        // tasks (they came too late for this one); after anything else they are only shown.
        let natural = matches!(&outcome, Ok(result) if result.reason == RunReason::Stop);
        for text in app.take_unsent() {
            if natural {
                eprintln!("pi：运行在这一行送达之前结束了，它作为下一个任务：{text}");
                later.push_back(text);
            } else {
                eprintln!("pi：运行没有正常结束，这一行没有交给模型：{text}");
            }
        }
        later.extend(typed_later);
        match outcome {
            // The session goes on after a failed or cancelled turn; only its line is shown.
            Ok(result) => {
                let _ = exit_code(&result, app.max_steps());
            }
            Err(message) => eprintln!("pi：{message}"),
        }
        input_ended |= ended;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_commands_templates_and_tasks_are_told_apart() {
        let templates = |name: &str| name == "review";
        assert_eq!(command("/new", templates), Command::New, "/new");
        assert_eq!(
            command(" /resume ", templates),
            Command::List,
            "/resume 列出"
        );
        assert_eq!(
            command("/resume 2", templates),
            Command::Resume(2),
            "/resume N 切换"
        );
        assert_eq!(
            command("/resume 0", templates),
            Command::Refused("/resume 后面是会话的编号（从 1 开始），不是 0".into()),
            "编号从 1 开始"
        );
        assert_eq!(
            command("/review file=a.rs", templates),
            Command::Task("/review file=a.rs".into()),
            "模板行原样交给模板展开"
        );
        assert_eq!(
            command("/x", templates),
            Command::Refused(
                "没有 /x 这个命令：可用 /new、/resume、/compact、/session、/exit，或 .pi/prompts/ 里的模板".into()
            ),
            "未知命令：一行中文"
        );
        assert_eq!(
            command("修一下 /tmp 的权限", templates),
            Command::Task("修一下 /tmp 的权限".into()),
            "不以 / 开头的行是任务"
        );
    }
}
