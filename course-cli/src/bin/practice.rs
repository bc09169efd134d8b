//! `practice 06 <dir>`: hand a learner a fresh, isolated workspace for one chapter.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::error::ErrorKind;
use clap::Parser;

use course_cli::catalog::{Catalog, Chapter, Mode};
use course_cli::files;
use course_cli::handout::handout;
use course_cli::learning;
use course_cli::plan::{Solved, WorkspacePlan};
use course_cli::sources::Sources;
use course_cli::write::{self, shown, Interrupt, WriteError};

#[derive(Parser, Debug)]
#[command(
    name = "practice",
    version,
    about = "生成 pi-course 某一章的独立练习工作区",
    override_usage = "practice <章节> [目录]\n       practice --list",
    help_template = "{about}\n\n用法：{usage}\n\n{all-args}",
    disable_help_flag = true,
    disable_version_flag = true,
    allow_negative_numbers = true
)]
struct Cli {
    /// 章节编号，例如 06 或 6
    #[arg(help_heading = "参数", value_name = "章节")]
    chapter: Option<String>,
    /// 输出目录（必须不存在或为空）；默认 ../pi-practice-NN
    #[arg(help_heading = "参数", value_name = "目录")]
    dir: Option<PathBuf>,
    /// 按课程顺序列出所有章节、标题与模式
    #[arg(long, help_heading = "选项")]
    list: bool,
    /// 显示帮助
    #[arg(short, long, action = clap::ArgAction::Help, help_heading = "选项")]
    help: Option<bool>,
    /// 显示版本
    #[arg(short = 'V', long, action = clap::ArgAction::Version, help_heading = "选项")]
    version: Option<bool>,
}

/// Why the run stops, and with which status.
struct Stop {
    message: Option<String>,
    code: u8,
}

impl Stop {
    fn refuse(message: impl Into<String>) -> Self {
        Stop {
            message: Some(message.into()),
            code: 2,
        }
    }
}

/// Writes to stdout; a closed pipe (`practice 06 ws | head -1`) ends the run quietly, a full
/// disk or any other output error is one Chinese line.
fn say(text: &str) -> Result<(), Stop> {
    let mut stdout = io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Err(Stop {
            message: None,
            code: 0,
        }),
        Err(error) => Err(Stop::refuse(format!("无法写出输出（{error}）"))),
    }
}

fn main() -> ExitCode {
    let interrupt = Arc::new(Interrupt::new(0));
    if let Err(error) = install_signal_handlers(&interrupt) {
        eprintln!("错误：无法安装信号处理（{error}）");
        return ExitCode::from(2);
    }
    let outcome = match Cli::try_parse() {
        Ok(cli) => run(cli, &interrupt),
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            say(error.to_string().trim_end())
        }
        Err(error) => Err(Stop::refuse(usage_error(&error))),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Stop { message, code }) => {
            if let Some(message) = message {
                let _ = writeln!(io::stderr(), "错误：{message}");
            }
            ExitCode::from(code)
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP set the flag the writer checks between files, so it can roll
/// back before exiting; a second signal of the same kind ends the process the default way.
#[cfg(unix)]
fn install_signal_handlers(interrupt: &Arc<Interrupt>) -> io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        let seen = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register_conditional_default(signal, Arc::clone(&seen))?;
        signal_hook::flag::register(signal, seen)?;
        signal_hook::flag::register_usize(signal, Arc::clone(interrupt), signal as usize)?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn install_signal_handlers(_interrupt: &Arc<Interrupt>) -> io::Result<()> {
    Ok(())
}

/// clap's own messages are English; a learner gets one Chinese line instead.
fn usage_error(error: &clap::Error) -> String {
    let detail = match error.kind() {
        ErrorKind::UnknownArgument => "有无法识别的参数",
        ErrorKind::TooManyValues | ErrorKind::ArgumentConflict => "参数过多",
        ErrorKind::InvalidUtf8 => "参数不是有效的 UTF-8",
        _ => "参数无效",
    };
    format!(
        "{detail}。用法：practice <章节> [目录] 或 practice --list；运行 practice --help 查看说明"
    )
}

fn run(cli: Cli, interrupt: &Interrupt) -> Result<(), Stop> {
    let data = files::embedded();
    let catalog = Catalog::from_files(&data).map_err(|error| Stop::refuse(error.to_string()))?;

    if cli.list {
        if cli.chapter.is_some() {
            return Err(Stop::refuse("--list 不接受章节参数；去掉章节编号再运行"));
        }
        return print_list(&catalog);
    }
    let Some(chapter_arg) = cli.chapter else {
        return Err(Stop::refuse(format!(
            "请指定章节编号，例如 practice 06 ../pi-practice-06；可选章节：{}",
            catalog.ids().join(" ")
        )));
    };
    let chapter = catalog
        .resolve(&chapter_arg)
        .map_err(|error| Stop::refuse(error.to_string()))?;
    let target = cli
        .dir
        .unwrap_or_else(|| PathBuf::from(format!("../pi-practice-{}", chapter.id)));

    let plan = WorkspacePlan::new(&catalog, chapter, Solved::Nothing);
    let sources = Sources::new(&catalog, &data).map_err(|error| Stop::refuse(error.to_string()))?;
    let snapshot = handout(&sources, &plan).map_err(|error| Stop::refuse(error.to_string()))?;
    let written = write::write_new_workspace(&snapshot, &target, interrupt).map_err(|error| {
        let code = error.exit_code();
        let message = match &error {
            WriteError::Interrupted(_) => format!("{error}（{} 保持原样）", shown(&target)),
            _ => error.to_string(),
        };
        Stop {
            message: Some(message),
            code,
        }
    })?;
    let seeded = course_cli::runner::deps_cache::seed(&written);
    print_summary(chapter, &written)?;
    if seeded {
        say("  依赖：已从本机的依赖缓存复制编译好的第三方依赖，第一次构建只编译你的代码")?;
    }
    Ok(())
}

fn print_list(catalog: &Catalog) -> Result<(), Stop> {
    say(&format!("{:<4} {:<6} 标题", "章节", "模式"))?;
    for chapter in catalog.chapters() {
        say(&format!(
            "{:<6} {:<6} {}",
            chapter.id,
            chapter.mode().label(),
            chapter.title
        ))?;
    }
    Ok(())
}

fn print_summary(chapter: &Chapter, dir: &std::path::Path) -> Result<(), Stop> {
    say(&format!(
        "已生成第 {} 章练习工作区：{}",
        chapter.id, chapter.title
    ))?;
    say(&format!("  模式：{}", chapter.mode().label()))?;
    say(&format!("  目录：{}", shown(dir)))?;
    if !chapter.edit().is_empty() {
        let files: Vec<String> = chapter
            .edit()
            .iter()
            .map(|file| file.in_workspace().to_string())
            .collect();
        say(&format!("  要编辑的文件：{}", files.join("、")))?;
    }
    let first = match (chapter.mode(), chapter.groups.first()) {
        (Mode::Rebuild, Some(group)) => {
            format!("cargo xtask test {} --group {}", chapter.id, group.name)
        }
        _ => "cargo run -p pi-course --example prologue".to_string(),
    };
    // The exact path, quoted, so the line works when pasted; the escaped one if no shell line
    // can carry it.
    let cd = write::shell_quoted(dir).unwrap_or_else(|| shown(dir));
    say(&format!("  第一步：cd {cd} && {first}"))?;
    say(&format!(
        "  完整说明见 {}",
        shown(&dir.join(learning::FILE_NAME))
    ))
}
