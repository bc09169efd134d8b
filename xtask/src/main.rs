//! Course automation, plain Rust: `cargo xtask test|verify|snapshot|ci`.

mod checkout;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use course_cli::assemble;
use course_cli::catalog::Chapter;
use course_cli::runner::run_chapter;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "pi-course 课程自动化：测试、验证、快照、CI"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// 在参考实现上运行某一章的测试组，逐组打印 k/n
    Test {
        /// 章节编号，例如 06
        chapter: String,
        /// 只运行一个测试组
        #[arg(long)]
        group: Option<String>,
    },
    /// 验证章节：参考实现、保留测试、lint、练习骨架、无答案、变异（默认全部章节）
    Verify {
        /// 章节编号；省略则验证全部
        chapters: Vec<String>,
    },
    /// 把某一章的参考快照写到一个新目录，供讲师在 IDE 中打开
    Snapshot { chapter: String, dir: PathBuf },
    /// CI 全流程：fmt、clippy、cargo test、verify
    Ci,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Test { chapter, group } => test(&chapter, group.as_deref()),
        Command::Verify { chapters } => verify::run(&chapters),
        Command::Snapshot { chapter, dir } => snapshot(&chapter, &dir),
        Command::Ci => ci(),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("错误：{message}");
            ExitCode::from(2)
        }
    }
}

/// The course, the resolved chapter, and its reference snapshot with a stamp.
fn instructor_snapshot(
    input: &str,
) -> Result<(checkout::Course, Chapter, assemble::Snapshot), String> {
    let course = checkout::Course::load()?;
    let chapter = course
        .catalog
        .resolve(input)
        .map_err(|error| error.to_string())?
        .clone();
    let snapshot = assemble::instructor_snapshot(&course.catalog, &course.data, &chapter.id)
        .map_err(|error| error.to_string())?;
    Ok((course, chapter, snapshot))
}

fn test(input: &str, group: Option<&str>) -> Result<bool, String> {
    let (course, chapter, snapshot) = instructor_snapshot(input)?;
    let settings = course.materialize(&format!("{}-reference", chapter.id), &snapshot)?;
    println!("第 {} 章（参考实现）：{}", chapter.id, chapter.title);
    let reports =
        run_chapter(&settings, &chapter.tests(), group).map_err(|error| error.to_string())?;
    for report in &reports {
        println!("  {}", report.summary_line());
    }
    Ok(reports.iter().all(|report| report.is_green()))
}

fn snapshot(input: &str, dir: &std::path::Path) -> Result<bool, String> {
    let (_, chapter, snapshot) = instructor_snapshot(input)?;
    let written = course_cli::write::write_new_workspace(&snapshot, dir)
        .map_err(|error| error.to_string())?;
    println!("已写入第 {} 章参考快照：{}", chapter.id, written.display());
    println!(
        "  在其中运行 cargo xtask test {} 可复现验收结果",
        chapter.id
    );
    Ok(true)
}

fn ci() -> Result<bool, String> {
    let root = checkout::repo_root();
    let steps: [(&str, &[&str]); 3] = [
        ("cargo fmt --check", &["fmt", "--all", "--check"]),
        (
            "cargo clippy -D warnings",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--locked",
                "--",
                "-D",
                "warnings",
            ],
        ),
        (
            "cargo test --workspace",
            &["test", "--workspace", "--locked"],
        ),
    ];
    for (label, args) in steps {
        println!("== {label}");
        let status = std::process::Command::new(checkout::cargo())
            .args(args)
            .current_dir(&root)
            .status()
            .map_err(|error| format!("无法启动 cargo：{error}"))?;
        if !status.success() {
            eprintln!("CI 失败于：{label}");
            return Ok(false);
        }
    }
    println!("== cargo xtask verify");
    verify::run(&[])
}
