//! `cargo xtask test [NN] [--group NAME]` inside a practice workspace.
//!
//! Reads `.practice.json` (written by `practice`) to learn which chapters and groups this
//! workspace carries, then judges the learner's code with the course's own runner.

// Shared verbatim with the course xtask, which uses every item.
#[allow(dead_code)]
mod runner;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use runner::{run_chapter, RunSettings, Stamp, STAMP_FILE};

const USAGE: &str = "用法：cargo xtask test [章节] [--group 组名]";

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("错误：{message}");
            ExitCode::from(2)
        }
    }
}

fn workspace_root() -> PathBuf {
    // CARGO_MANIFEST_DIR is xtask/; the workspace root is its parent.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent")
        .to_path_buf()
}

fn run() -> Result<bool, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, rest) = args.split_first().ok_or_else(|| USAGE.to_string())?;
    if command != "test" {
        return Err(format!("练习工作区只支持 test 命令。{USAGE}"));
    }
    let mut chapter = None;
    let mut group = None;
    let mut rest = rest.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--group" => {
                group = Some(
                    rest.next()
                        .ok_or_else(|| format!("--group 需要组名。{USAGE}"))?,
                );
            }
            value if value.starts_with('-') => {
                return Err(format!("无法识别的参数 {value}。{USAGE}"))
            }
            value if chapter.is_none() => chapter = Some(value),
            value => return Err(format!("多余的参数 {value}。{USAGE}")),
        }
    }

    let root = workspace_root();
    let stamp_path = root.join(STAMP_FILE);
    let stamp_text = std::fs::read_to_string(&stamp_path).map_err(|error| {
        format!(
            "读取 {} 失败（{error}）；这不是 practice 生成的工作区吗？",
            stamp_path.display()
        )
    })?;
    let stamp: Stamp = serde_json::from_str(&stamp_text).map_err(|error| {
        format!(
            "{} 已损坏（{error}）；请用 practice 重新生成工作区",
            stamp_path.display()
        )
    })?;

    let wanted = match chapter {
        Some(value) if value.len() <= 2 && value.bytes().all(|byte| byte.is_ascii_digit()) => {
            format!("{value:0>2}")
        }
        Some(value) => return Err(format!("章节编号 `{value}` 格式无效，例如 06 或 6")),
        None => stamp.chapter.clone(),
    };
    let known: Vec<&str> = stamp
        .chapters
        .iter()
        .map(|tests| tests.id.as_str())
        .collect();
    let tests = stamp.chapter_tests(&wanted).ok_or_else(|| {
        format!(
            "本工作区没有第 {wanted} 章的测试；可选：{}",
            known.join(" ")
        )
    })?;

    for edited in stamp.edited_injected_files(&root) {
        eprintln!("警告：注入的测试 {edited} 已被修改；结果可能不可信，请不要修改测试文件");
    }

    let settings = RunSettings {
        workspace: root,
        target_dir: None,
    };
    println!("第 {} 章：{}", tests.id, tests.title);
    let reports = run_chapter(&settings, tests, group.map(String::as_str))
        .map_err(|error| error.to_string())?;
    for report in &reports {
        println!("  {}", report.summary_line());
    }
    let green = reports.iter().all(|report| report.is_green());
    if green {
        println!("全部通过。");
    }
    Ok(green)
}
