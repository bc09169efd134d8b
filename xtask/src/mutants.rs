//! `cargo xtask mutants NN`: cargo-mutants on a chapter's learner-edited files, in a reference
//! snapshot with the public tests. An instructor tool: far too slow for CI on two cores.

use std::process::Command;

use course_cli::handout::handout;
use course_cli::plan::{Solved, WorkspacePlan};
use course_cli::sources::Sources;

use crate::checkout::{Course, Failure};
use crate::out;

pub fn run(input: &str) -> Result<bool, Failure> {
    let installed = Command::new("cargo")
        .args(["mutants", "--version"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !installed {
        return Err(Failure(
            "没有找到 cargo-mutants；先运行 cargo install --locked cargo-mutants 再试".to_string(),
        ));
    }
    // The course lock is held only while the snapshot is written: mutants run in their own
    // directory and must not block `verify` for half an hour.
    let course = Course::load()?;
    let chapter = course.chapter(input)?.clone();
    let chapter = &chapter;
    if chapter.edit().is_empty() {
        return Err(Failure(format!(
            "第 {} 章是观察章节，没有学习者编辑的文件",
            chapter.id
        )));
    }
    let sources = Sources::new(&course.catalog, &course.data)?;
    let snapshot = handout(
        &sources,
        &WorkspacePlan::new(&course.catalog, chapter, Solved::All),
    )?;
    let dir = course
        .claim_scratch()?
        .join("mutants")
        .join(chapter.id.to_string());
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    for (path, bytes) in &snapshot {
        let target = dir.join(path.as_str());
        std::fs::create_dir_all(target.parent().expect("files have a parent"))?;
        std::fs::write(target, bytes)?;
    }
    drop(course);
    let mut command = Command::new("cargo");
    command
        .current_dir(&dir)
        .args([
            "mutants",
            "--package",
            course_cli::runner::LEARNER_PACKAGE,
            "--test-package",
        ])
        .arg(course_cli::runner::LEARNER_PACKAGE);
    for file in chapter.edit() {
        command.args(["--file", &file.in_workspace().to_string()]);
    }
    // Only the chapter's public tests judge its mutants: `cargo test --test NN_slug`.
    command.arg(format!("--cargo-test-arg=--test={}", chapter.test_target()));
    out::say(format!(
        "在 {} 中运行 cargo mutants（只针对 {} 的公开测试）",
        dir.display(),
        chapter.test_target()
    ));
    let status = command.status()?;
    out::say(format!(
        "结果在 {}/mutants.out（caught / missed / unviable 见 outcomes.json）",
        dir.display()
    ));
    Ok(status.success())
}
