//! The `practice` binary on a real filesystem: success, every refusal, a race for one target,
//! and an interrupted write.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use course_cli::catalog::{Catalog, Mode};
use course_cli::files;
use course_cli::runner::{Stamp, STAMP_FILE};
use course_cli::write::{SLOW_WRITE_ENV, STAGING_PREFIX};

const BIN: &str = env!("CARGO_BIN_EXE_practice");

fn practice(args: &[&str], cwd: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("practice runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A rebuild chapter of the embedded course (the seed chapter when present).
fn rebuild_chapter() -> String {
    let catalog = Catalog::from_files(&files::embedded()).expect("embedded catalog");
    let chapter = catalog
        .resolve("06")
        .ok()
        .or_else(|| {
            catalog
                .chapters()
                .iter()
                .find(|chapter| chapter.mode() == Mode::Rebuild)
        })
        .expect("the course has a rebuild chapter");
    chapter.id.to_string()
}

fn assert_refused(output: &Output, needle: &str) {
    assert!(!output.status.success(), "expected refusal, got success");
    let message = stderr(output);
    assert_eq!(message.trim_end().lines().count(), 1, "one line: {message}");
    assert!(message.starts_with("错误："), "{message}");
    assert!(
        message.contains(needle),
        "expected `{needle}` in: {message}"
    );
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut list: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    list.sort();
    list
}

#[test]
fn writes_a_complete_workspace_into_a_new_directory() {
    let id = rebuild_chapter();
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("p");
    let output = practice(&[&id, target.to_str().unwrap()], scratch.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains(&format!("第 {id} 章")), "{stdout}");
    assert!(stdout.contains("LEARNING.md"), "{stdout}");
    assert!(
        stdout.contains(&format!("cargo xtask test {id} --group")),
        "{stdout}"
    );
    for file in [
        "Cargo.toml",
        "Cargo.lock",
        ".cargo/config.toml",
        "LEARNING.md",
        "CHAPTER.md",
        ".gitignore",
    ] {
        assert!(target.join(file).is_file(), "{file} missing");
    }
    assert!(!target.join(".git").exists());
    let stamp: Stamp = serde_json::from_slice(&fs::read(target.join(STAMP_FILE)).unwrap()).unwrap();
    assert_eq!(stamp.chapter.to_string(), id);
    // Nothing but the workspace was left beside it.
    assert_eq!(entries(scratch.path()), [target]);
}

#[test]
fn single_digit_id_and_empty_directory_are_accepted() {
    let id = rebuild_chapter();
    let short = id.trim_start_matches('0').to_string();
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("empty");
    fs::create_dir(&target).unwrap();
    let output = practice(&[&short, target.to_str().unwrap()], scratch.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let stamp: Stamp = serde_json::from_slice(&fs::read(target.join(STAMP_FILE)).unwrap()).unwrap();
    assert_eq!(stamp.chapter.to_string(), id);
}

#[test]
fn default_directory_is_beside_the_current_one() {
    let id = rebuild_chapter();
    let scratch = tempfile::tempdir().unwrap();
    let cwd = scratch.path().join("work");
    fs::create_dir(&cwd).unwrap();
    let output = practice(&[&id], &cwd);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(scratch
        .path()
        .join(format!("pi-practice-{id}"))
        .join(STAMP_FILE)
        .is_file());
}

#[test]
fn list_prints_every_chapter_with_title_and_mode() {
    let catalog = Catalog::from_files(&files::embedded()).unwrap();
    let output = practice(&["--list"], Path::new("."));
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    for chapter in catalog.chapters() {
        let line = stdout
            .lines()
            .find(|line| line.starts_with(&chapter.id.to_string()))
            .expect("listed");
        assert!(
            line.contains(&chapter.title) && line.contains(chapter.mode().label()),
            "{line}"
        );
    }
}

#[test]
fn refuses_unknown_and_malformed_chapters() {
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("p");
    let target = target.to_str().unwrap();
    assert_refused(&practice(&["99", target], scratch.path()), "没有第 99 章");
    for bad in ["abc", "6.0", "-1"] {
        assert_refused(&practice(&[bad, target], scratch.path()), "格式无效");
    }
    assert_refused(&practice(&[], scratch.path()), "请指定章节编号");
    assert_refused(&practice(&["--bogus"], scratch.path()), "无法识别");
    assert!(entries(scratch.path()).is_empty(), "nothing written");
}

#[test]
fn refuses_a_file_target_and_leaves_it_alone() {
    let id = rebuild_chapter();
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("notes.txt");
    fs::write(&target, "mine").unwrap();
    assert_refused(
        &practice(&[&id, target.to_str().unwrap()], scratch.path()),
        "是一个文件",
    );
    assert_eq!(fs::read_to_string(&target).unwrap(), "mine");
    assert_eq!(entries(scratch.path()), [target]);
}

#[test]
fn refuses_a_non_empty_directory_and_touches_nothing() {
    let id = rebuild_chapter();
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("old");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("keep.rs"), "fn main() {}").unwrap();
    assert_refused(
        &practice(&[&id, target.to_str().unwrap()], scratch.path()),
        "不为空",
    );
    assert_eq!(entries(&target), [target.join("keep.rs")]);
    assert_eq!(
        fs::read_to_string(target.join("keep.rs")).unwrap(),
        "fn main() {}"
    );
    assert_eq!(entries(scratch.path()), [target]);
}

#[test]
fn refuses_a_target_inside_a_course_checkout() {
    let id = rebuild_chapter();
    let scratch = tempfile::tempdir().unwrap();
    let repo = scratch.path().join("course");
    fs::create_dir_all(repo.join("course-cli")).unwrap();
    fs::create_dir_all(repo.join("chapters")).unwrap();
    fs::write(repo.join("course-cli/Cargo.toml"), "").unwrap();
    let target = repo.join("chapters/../practice-here");
    assert_refused(
        &practice(&[&id, target.to_str().unwrap()], scratch.path()),
        "课程仓库",
    );
    assert!(!repo.join("practice-here").exists());
    // Relative paths are resolved against the current directory.
    assert_refused(&practice(&[&id, "sub/p"], &repo), "课程仓库");
    assert!(!repo.join("sub").exists());
}

#[test]
fn two_racing_runs_for_one_target_have_exactly_one_winner() {
    let id = rebuild_chapter();
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("raced");
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let (id, target, cwd) = (id.clone(), target.clone(), scratch.path().to_path_buf());
            std::thread::spawn(move || {
                Command::new(BIN)
                    .args([id.as_str(), target.to_str().unwrap()])
                    .env(SLOW_WRITE_ENV, "1")
                    .current_dir(cwd)
                    .output()
                    .unwrap()
            })
        })
        .collect();
    let outputs: Vec<Output> = runs.into_iter().map(|run| run.join().unwrap()).collect();
    let winners = outputs
        .iter()
        .filter(|output| output.status.success())
        .count();
    assert_eq!(
        winners,
        1,
        "{:?}",
        outputs.iter().map(stderr).collect::<Vec<_>>()
    );
    let loser = outputs
        .iter()
        .find(|output| !output.status.success())
        .unwrap();
    assert_refused(loser, "不为空");
    assert!(target.join(STAMP_FILE).is_file());
    assert_eq!(
        entries(scratch.path()),
        [target],
        "no staging dir left behind"
    );
}

#[test]
fn an_interrupted_write_leaves_no_workspace_at_the_target() {
    let id = rebuild_chapter();
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("interrupted");
    let mut child = Command::new(BIN)
        .args([id.as_str(), target.to_str().unwrap()])
        .env(SLOW_WRITE_ENV, "200")
        .current_dir(scratch.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the staging tree is being filled, then kill the writer mid-way.
    let deadline = Instant::now() + Duration::from_secs(20);
    let staging = loop {
        let found = entries(scratch.path()).into_iter().find(|path| {
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(STAGING_PREFIX)
                && fs::read_dir(path)
                    .map(|mut dir| dir.next().is_some())
                    .unwrap_or(false)
        });
        if let Some(path) = found {
            break path;
        }
        assert!(
            Instant::now() < deadline,
            "staging directory never appeared"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!target.exists(), "a partial workspace reached the target");
    assert!(
        staging.exists(),
        "the kill happened before the rename, as intended"
    );
    // The target is still free: a fresh run succeeds.
    let output = practice(&[&id, target.to_str().unwrap()], scratch.path());
    assert!(output.status.success(), "{}", stderr(&output));
}
