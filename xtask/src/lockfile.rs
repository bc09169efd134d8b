//! `cargo xtask lock NN`: the `Cargo.lock` of the member set a chapter's overlay makes, written
//! by cargo itself, plus the checks `verify` runs on every such lock.
//!
//! A lock may hold only the entries its member set needs (`--locked` refuses extra ones), so
//! each member set has its own file: `chapters/NN-slug/workspace/Cargo.lock`. The command
//! materialises the chapter's reference workspace with the *previous* member set's lock, lets
//! cargo resolve (offline when the local index has everything), and copies the result back:
//! existing entries are never upgraded, new ones are added.

use std::collections::BTreeSet;

use course_cli::catalog::{BASE_DIR, LOCK_FILE};
use course_cli::handout::handout;
use course_cli::paths::WorkspacePath;
use course_cli::plan::{Solved, WorkspacePlan};
use course_cli::runner::CargoRunner;
use course_cli::sources::Sources;
use course_cli::write::sync_scratch_dir;

use crate::checkout::{Course, Failure};
use crate::out;

/// The repository path of the lock the member set before `plan.chapter` uses: the last earlier
/// overlay in the chain that carries one, else the base workspace's.
pub fn previous_lock(plan: &WorkspacePlan) -> String {
    plan.overlays
        .iter()
        .rev()
        .find(|step| {
            step.id != plan.chapter.id && step.overlay.iter().any(|path| path == LOCK_FILE)
        })
        .map(|step| format!("{}/{LOCK_FILE}", step.overlay_dir()))
        .unwrap_or_else(|| format!("{BASE_DIR}/{LOCK_FILE}"))
}

/// `name version source` of every package a lock pins.
fn entries(lock: &str) -> BTreeSet<String> {
    let table: toml::Table = toml::from_str(lock).unwrap_or_default();
    let packages = table
        .get("package")
        .and_then(toml::Value::as_array)
        .cloned()
        .unwrap_or_default();
    packages
        .iter()
        .map(|package| {
            let field = |key: &str| {
                package
                    .get(key)
                    .and_then(toml::Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            format!("{} {} {}", field("name"), field("version"), field("source"))
                .trim_end()
                .to_string()
        })
        .collect()
}

/// Entries of `previous` that `lock` dropped or pinned at another version: a later member set
/// only ever adds.
pub fn changed_entries(previous: &str, lock: &str) -> Vec<String> {
    let now = entries(lock);
    entries(previous)
        .into_iter()
        .filter(|entry| !now.contains(entry))
        .collect()
}

/// `cargo metadata` in a materialised workspace: cargo resolves the member set, offline first
/// (the local index usually has everything), then online. `locked`: refuse instead of writing
/// a changed lock.
fn metadata(runner: &CargoRunner, locked: bool) -> Result<(), String> {
    let mut last = String::new();
    for offline in [true, false] {
        let mut command = if locked {
            runner.command("metadata")
        } else {
            runner.plain("metadata")
        };
        command.args(["--format-version", "1", "--quiet"]);
        if offline {
            command.arg("--offline");
        }
        match command.output() {
            Ok(output) if output.status.success() => return Ok(()),
            Ok(output) => last = String::from_utf8_lossy(&output.stderr).trim().to_string(),
            Err(error) => last = error.to_string(),
        }
    }
    Err(last)
}

/// Whether cargo takes the workspace's lock as it is.
pub fn check_locked(runner: &CargoRunner) -> Result<(), String> {
    metadata(runner, true)
}

pub fn run(input: &str) -> Result<bool, Failure> {
    let course = Course::load()?;
    let chapter = course.chapter(input)?;
    if chapter.packages().next().is_none() {
        return Err(Failure(format!(
            "第 {} 章的 workspace/ 没有新增包，它沿用之前的 Cargo.lock；只有新增包的章节需要自己的锁文件",
            chapter.id
        )));
    }
    let plan = WorkspacePlan::new(&course.catalog, chapter, Solved::All);
    let previous = previous_lock(&plan);
    let sources = Sources::new(&course.catalog, &course.data)?;
    let mut snapshot = handout(&sources, &plan)?;
    let previous_bytes = course
        .data
        .get(previous.as_str())
        .ok_or_else(|| Failure(format!("缺少 {previous}")))?;
    snapshot.insert(WorkspacePath::new(LOCK_FILE), previous_bytes.clone());
    let dir = course.claim_scratch()?.join("lock");
    sync_scratch_dir(&snapshot, &dir)
        .map_err(|error| Failure(format!("写入 {} 失败：{error}", dir.display())))?;
    let mut runner = CargoRunner::new(dir.clone());
    runner.target_dir = Some(course.claim_scratch()?.join("build"));
    metadata(&runner, false).map_err(|error| Failure(format!("cargo 无法解析依赖：{error}")))?;
    let resolved = std::fs::read(dir.join(LOCK_FILE))
        .map_err(|error| Failure(format!("读取解析结果失败：{error}")))?;
    let changed = changed_entries(
        &String::from_utf8_lossy(previous_bytes),
        &String::from_utf8_lossy(&resolved),
    );
    if !changed.is_empty() {
        return Err(Failure(format!(
            "cargo 改动了 {previous} 里已有的依赖（{}）；检查新增包的版本要求",
            changed.join("、")
        )));
    }
    let target = course.root.join(chapter.overlay_dir()).join(LOCK_FILE);
    let old = std::fs::read(&target).ok();
    if old.as_deref() == Some(resolved.as_slice()) {
        out::say(format!("{} 已是最新", target.display()));
        return Ok(true);
    }
    std::fs::write(&target, &resolved)
        .map_err(|error| Failure(format!("写入 {} 失败：{error}", target.display())))?;
    let added = entries(&String::from_utf8_lossy(&resolved)).len()
        - entries(&String::from_utf8_lossy(previous_bytes)).len();
    out::say(format!(
        "写入 {}：在 {previous} 之上新增 {added} 个依赖，已有的一个未改",
        target.display()
    ));
    Ok(true)
}
