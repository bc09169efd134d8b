//! Course automation, plain Rust: `cargo xtask test|verify|snapshot|codegen|new-chapter|lock|mutants|book|ci`.

mod book;
mod browser;
mod checkout;
mod codegen;
mod html;
mod lockfile;
mod mutants;
mod new_chapter;
mod out;
mod verdict;
mod verify;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use course_cli::catalog::Mode;
use course_cli::handout::handout;
use course_cli::plan::{Solved, WorkspacePlan};
use course_cli::runner::{ChapterTests, Exit, LabId, RunError};
use course_cli::sources::Sources;

use checkout::{Course, Failure};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "pi-course 课程自动化：测试、验证、快照、生成骨架、CI"
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
    /// 证明章节：参考实现、保留测试、lint、每个 Lab 的第一次红灯、无答案、错误实现目录
    Verify {
        /// 章节编号；省略则验证全部
        chapters: Vec<String>,
        /// 只在标准输出打印一个 JSON 文档
        #[arg(long)]
        json: bool,
    },
    /// 把某一章的参考快照（或“完成到某个 Lab”的练习状态）写到一个新目录
    Snapshot {
        chapter: String,
        dir: PathBuf,
        /// 写出完成了这个 Lab 及其之前各 Lab 的练习工作区，例如 6.2
        #[arg(long)]
        solved: Option<String>,
    },
    /// 生成 skeletons/、README 的章节表和辅导协议里各章的命令块；--check 只检查是否过期
    Codegen {
        #[arg(long)]
        check: bool,
    },
    /// 为新章节生成作者要写的文件并在清单末尾加上条目（不覆盖任何文件）
    NewChapter {
        /// 章节编号，例如 09
        chapter: String,
        /// 目录名里的英文短名，例如 session-store
        slug: String,
        /// 中文标题
        #[arg(long)]
        title: Option<String>,
    },
    /// 用 cargo 写出某一章新增包后的 Cargo.lock：从上一份锁文件出发，只增不改
    Lock { chapter: String },
    /// 用 cargo-mutants 在某一章的参考快照上运行公开测试（讲师用，不在 CI 中）
    Mutants { chapter: String },
    /// 用 mdBook 把整门课生成静态网站 target/book/html，并检查每个站内链接与锚点
    Book {
        /// 再用 headless Chromium 打开每一页：侧栏顺序、代码高亮、中文搜索、第 06 章截图
        #[arg(long)]
        check_browser: bool,
    },
    /// CI 全流程：fmt、clippy、cargo test、codegen --check、课程书与浏览器检查、verify
    Ci,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Test { chapter, group } => test(&chapter, group.as_deref()),
        Command::Verify { chapters, json } => verify::run(&chapters, json),
        Command::Snapshot {
            chapter,
            dir,
            solved,
        } => snapshot(&chapter, &dir, solved.as_deref()),
        Command::Codegen { check } => codegen::run(check),
        Command::Lock { chapter } => lockfile::run(&chapter),
        Command::NewChapter {
            chapter,
            slug,
            title,
        } => new_chapter::run(&chapter, &slug, title.as_deref()),
        Command::Mutants { chapter } => mutants::run(&chapter),
        Command::Book { check_browser } => book::run(check_browser),
        Command::Ci => ci(),
    };
    match result {
        Ok(green) => Exit::from_green(green).into(),
        Err(failure) => {
            out::note(format!("错误：{failure}"));
            Exit::Usage.into()
        }
    }
}

fn test(input: &str, group: Option<&str>) -> Result<bool, Failure> {
    let course = Course::load()?;
    let chapter = course.chapter(input)?;
    let tests = chapter.tests();
    if let Some(name) = group {
        known_group(&tests, name)?;
    }
    let sources = Sources::new(&course.catalog, &course.data)?;
    let plan = WorkspacePlan::new(&course.catalog, chapter, Solved::All);
    let snapshot = handout(&sources, &plan)?;
    let runner = course.materialize(&format!("{}-reference", chapter.id), &snapshot)?;
    let reports = runner.run_chapter(&tests, group)?;
    out::say(format!(
        "第 {} 章（参考实现）：{}",
        chapter.id, chapter.title
    ));
    for report in &reports {
        out::say(format!("  {}", report.summary_line()));
    }
    Ok(reports.iter().all(|report| report.is_green()))
}

/// The one refusal of an unknown group, in the runner's words (the learner's `cargo xtask`
/// says the same).
fn known_group(tests: &ChapterTests, name: &str) -> Result<(), Failure> {
    match tests.group(name) {
        Some(_) => Ok(()),
        None => Err(Failure(
            RunError::UnknownGroup {
                chapter: tests.id.to_string(),
                group: name.to_string(),
                known: tests.group_names().iter().map(|n| n.to_string()).collect(),
            }
            .to_string(),
        )),
    }
}

fn snapshot(input: &str, dir: &Path, solved: Option<&str>) -> Result<bool, Failure> {
    let course = Course::load()?;
    let chapter = course.chapter(input)?;
    let (solved, what) = match solved {
        None => (Solved::All, "参考快照".to_string()),
        Some(lab) => {
            let lab: LabId = lab.parse()?;
            if chapter.mode() != Mode::Rebuild || chapter.group_of_lab(lab).is_none() {
                let labs: Vec<String> = chapter.labs().map(|(lab, _)| lab.to_string()).collect();
                return Err(Failure(format!(
                    "第 {} 章没有 Lab {lab}；可选：{}",
                    chapter.id,
                    if labs.is_empty() {
                        "（观察章节没有 Lab）".to_string()
                    } else {
                        labs.join(" ")
                    }
                )));
            }
            let next = lab.chapter.lab(lab.index + 1);
            (
                Solved::Before(next),
                format!("练习工作区（Lab {lab} 及之前已完成）"),
            )
        }
    };
    let sources = Sources::new(&course.catalog, &course.data)?;
    let snapshot = handout(
        &sources,
        &WorkspacePlan::new(&course.catalog, chapter, solved),
    )?;
    let written = course_cli::write::write_new_workspace(
        &snapshot,
        dir,
        &course_cli::write::Interrupt::new(0),
    )?;
    out::say(format!(
        "已写入第 {} 章{what}：{}",
        chapter.id,
        written.display()
    ));
    out::say(format!(
        "  在其中运行 cargo xtask test {} 查看各组结果",
        chapter.id
    ));
    Ok(true)
}

fn ci() -> Result<bool, Failure> {
    let root = checkout::repo_root()?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let steps: [(&str, &[&str]); 4] = [
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
        (
            "cargo xtask codegen --check",
            &["xtask", "codegen", "--check"],
        ),
    ];
    for (label, args) in steps {
        out::say(format!("== {label}"));
        let status = std::process::Command::new(&cargo)
            .args(args)
            .current_dir(&root)
            .status()
            .map_err(|error| Failure(format!("无法启动 cargo：{error}")))?;
        if !status.success() {
            out::note(format!("CI 失败于：{label}"));
            return Ok(false);
        }
    }
    // The book runs when mdBook and Chromium are installed (.ci/run installs both) and says
    // plainly what it skipped otherwise.
    out::say("== cargo xtask book --check-browser");
    if !book::ci_step()? {
        out::note("CI 失败于：cargo xtask book --check-browser");
        return Ok(false);
    }
    out::say("== cargo xtask verify");
    verify::run(&[], false)
}
