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
        "AGENT_GUIDE.md",
        ".gitignore",
    ] {
        assert!(target.join(file).is_file(), "{file} missing");
    }
    assert!(!target.join(".git").exists());
    let learning = fs::read_to_string(target.join("LEARNING.md")).unwrap();
    assert!(
        learning.contains("AGENT_GUIDE.md"),
        "LEARNING.md points to the tutor guide"
    );
    let stamp = Stamp::from_json_bytes(&fs::read(target.join(STAMP_FILE)).unwrap()).unwrap();
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
    let stamp = Stamp::from_json_bytes(&fs::read(target.join(STAMP_FILE)).unwrap()).unwrap();
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
    // The target is still free: a fresh run succeeds and sweeps the dead run's staging dir.
    let output = practice(&[&id, target.to_str().unwrap()], scratch.path());
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        entries(scratch.path()),
        std::slice::from_ref(&target),
        "the staging dir of a provably dead run is removed"
    );
}

/// Starts a slow `practice` run and sends `signal` once its staging dir has files in it.
fn interrupt_midway(args: &[&str], cwd: &Path, watch: &Path, signal: &str) -> Output {
    let child = Command::new(BIN)
        .args(args)
        .env(SLOW_WRITE_ENV, "20")
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let busy = walkdir_has_staging(watch);
        if busy {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "staging directory never appeared"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.wait_with_output().unwrap()
}

fn walkdir_has_staging(dir: &Path) -> bool {
    let Ok(read) = fs::read_dir(dir) else {
        return false;
    };
    read.flatten().any(|entry| {
        let name = entry.file_name().to_string_lossy().into_owned();
        (name.starts_with(STAGING_PREFIX)
            && fs::read_dir(entry.path()).is_ok_and(|mut d| d.nth(1).is_some()))
            || (entry.path().is_dir() && walkdir_has_staging(&entry.path()))
    })
}

#[cfg(unix)]
#[test]
fn sigint_and_sigterm_roll_back_staging_and_created_parents() {
    let id = rebuild_chapter();
    for (signal, code) in [("-INT", 130), ("-TERM", 143), ("-HUP", 129)] {
        let scratch = tempfile::tempdir().unwrap();
        let target = scratch.path().join("a/b/ws");
        let output = interrupt_midway(
            &[&id, target.to_str().unwrap()],
            scratch.path(),
            scratch.path(),
            signal,
        );
        assert_eq!(
            output.status.code(),
            Some(code),
            "{signal}: exit 128 + signal; {}",
            stderr(&output)
        );
        assert_refused(&output, "已中断");
        assert!(
            entries(scratch.path()).is_empty(),
            "{signal}: no staging dir and no created parent remain"
        );
    }
}

#[cfg(unix)]
#[test]
fn an_empty_directory_is_filled_in_place_and_emptied_again_on_interrupt() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let id = rebuild_chapter();
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("ws");
    fs::create_dir(&target).unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o750)).unwrap();
    let before = fs::metadata(&target).unwrap();

    let output = interrupt_midway(&[&id, "."], &target, scratch.path(), "-INT");
    assert_eq!(output.status.code(), Some(130), "{}", stderr(&output));
    assert!(
        entries(&target).is_empty(),
        "interrupted: the directory is empty again"
    );
    assert_eq!(
        entries(scratch.path()),
        std::slice::from_ref(&target),
        "no staging dir left beside it"
    );

    // `mkdir ws && cd ws && practice 06 .`: filled where it stands.
    let output = practice(&[&id, "."], &target);
    assert!(output.status.success(), "{}", stderr(&output));
    let after = fs::metadata(&target).unwrap();
    assert_eq!(
        after.ino(),
        before.ino(),
        "same inode: a shell inside it stays valid"
    );
    assert_eq!(after.mode() & 0o777, 0o750, "the directory keeps its mode");
    assert_eq!(after.uid(), before.uid(), "and its owner");
    assert!(target.join(STAMP_FILE).is_file());
    assert!(
        !target.join(course_cli::write::CLAIM_FILE).exists(),
        "the claim file is gone"
    );
    assert_eq!(entries(scratch.path()), [target]);
}

#[cfg(target_os = "linux")]
#[test]
fn a_fill_killed_outright_is_undone_by_the_next_run_for_that_target() {
    let id = rebuild_chapter();
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("ws");
    fs::create_dir(&target).unwrap();
    let mut child = Command::new(BIN)
        .args([id.as_str(), "."])
        .env(SLOW_WRITE_ENV, "20")
        .current_dir(&target)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the fill has moved something besides its claim into the target, then SIGKILL:
    // no handler runs, nothing is rolled back.
    let deadline = Instant::now() + Duration::from_secs(60);
    while entries(&target).len() < 2 {
        assert!(Instant::now() < deadline, "the in-place fill never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        target.join(course_cli::write::CLAIM_FILE).is_file(),
        "the kill happened mid-fill, as intended"
    );
    assert!(!target.join(STAMP_FILE).exists(), "the fill was cut short");

    let output = practice(&[&id, "."], &target);
    assert!(
        output.status.success(),
        "被强行终止的填充由下一次运行撤销，目标可以再用：{}",
        stderr(&output)
    );
    assert!(target.join(STAMP_FILE).is_file());
    assert!(!target.join(course_cli::write::CLAIM_FILE).exists());
    assert_eq!(
        entries(scratch.path()),
        std::slice::from_ref(&target),
        "死掉的那次运行留下的暂存目录被清理，旁边不留任何东西"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn an_abandoned_fill_next_to_the_users_own_file_is_refused_and_the_file_kept() {
    let id = rebuild_chapter();
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("ws");
    fs::create_dir(&target).unwrap();
    // A claim whose owner is provably dead (a pid above Linux's largest pid_max), whose journal
    // names one entry and one path outside the target, beside a file of the user's.
    fs::write(
        target.join(course_cli::write::CLAIM_FILE),
        "4194304999 1\nCargo.toml\n../escape\n",
    )
    .unwrap();
    fs::write(target.join("Cargo.toml"), "ours").unwrap();
    fs::write(scratch.path().join("escape"), "outside").unwrap();
    fs::write(target.join("notes.txt"), "mine").unwrap();
    let output = practice(&[&id, "."], &target);
    assert_refused(&output, "不为空");
    assert_eq!(
        fs::read_to_string(target.join("notes.txt")).unwrap(),
        "mine",
        "日志没有点名的文件绝不能动"
    );
    assert!(
        scratch.path().join("escape").is_file(),
        "日志里指向目标之外的名字被忽略"
    );
    assert!(!target.join("Cargo.toml").exists(), "日志点名的条目被撤销");
}

#[cfg(unix)]
#[test]
fn the_first_step_line_is_shell_quoted_and_works_when_pasted() {
    let id = rebuild_chapter();
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("my dir's \"ws\" $HOME");
    let output = practice(&[&id, target.to_str().unwrap()], scratch.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("第一步："))
        .expect("practice prints the first step");
    let cd = line.split(" && ").next().unwrap();
    let pasted = Command::new("sh")
        .arg("-c")
        .arg(format!("{cd} && pwd -P"))
        .output()
        .unwrap();
    assert!(
        pasted.status.success(),
        "粘贴 `{cd}` 要能用：{}",
        stderr(&pasted)
    );
    assert_eq!(
        String::from_utf8_lossy(&pasted.stdout).trim_end(),
        target.canonicalize().unwrap().to_str().unwrap(),
        "第一步里的 cd 要进到刚生成的工作区：{line}"
    );
}

#[test]
fn a_very_long_path_is_elided_and_the_reason_is_chinese() {
    let id = rebuild_chapter();
    let scratch = tempfile::tempdir().unwrap();
    // 25 components of 200 characters: 5000 characters, beyond PATH_MAX.
    let mut target = scratch.path().to_path_buf();
    for index in 0..25 {
        target.push(format!("{index:02}{}", "d".repeat(198)));
    }
    let output = practice(&[&id, target.to_str().unwrap()], scratch.path());
    assert_refused(&output, "省略");
    let message = stderr(&output);
    assert!(
        message.chars().count() < 400,
        "很长的路径只显示头尾：{message}"
    );
    assert!(
        message
            .trim_end()
            .ends_with("路径或文件名太长，或含有无效字符"),
        "拒绝的原因用中文结尾，不接英文的系统原文：{message}"
    );
    assert!(
        !message.contains(STAGING_PREFIX),
        "不显示隐藏的暂存目录：{message}"
    );
    assert_eq!(
        entries(scratch.path()),
        [] as [PathBuf; 0],
        "创建的父目录都撤掉了"
    );
}

#[cfg(unix)]
#[test]
fn output_errors_never_panic() {
    // A pipe whose reader is already gone: the first write fails with EPIPE.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = Command::new(BIN)
        .arg("--list")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "a closed pipe ends quietly");
    assert_eq!(stderr(&output), "", "no panic, no message");

    if Path::new("/dev/full").exists() {
        let full = fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let output = Command::new(BIN)
            .arg("--list")
            .stdout(full)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_refused(&output, "无法写出输出");
    }
}

#[cfg(unix)]
#[test]
fn special_targets_and_odd_inputs_get_one_precise_line() {
    let id = rebuild_chapter();
    let scratch = tempfile::tempdir().unwrap();
    let link = scratch.path().join("link");
    std::os::unix::fs::symlink(scratch.path(), &link).unwrap();
    assert_refused(
        &practice(&[&id, link.to_str().unwrap()], scratch.path()),
        "符号链接",
    );
    assert_refused(&practice(&[&id, "/dev/null"], scratch.path()), "设备文件");
    let fifo = scratch.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    assert_refused(
        &practice(&[&id, fifo.to_str().unwrap()], scratch.path()),
        "命名管道",
    );

    let newline = scratch.path().join("a\nb");
    fs::write(&newline, "mine").unwrap();
    assert_refused(
        &practice(&[&id, newline.to_str().unwrap()], scratch.path()),
        "a\\nb",
    );

    let huge = "9".repeat(100_000);
    let output = practice(&[&huge], scratch.path());
    assert_refused(&output, "格式无效");
    assert!(
        stderr(&output).chars().count() < 200,
        "the id is not echoed in full"
    );

    let repo = scratch.path().join("course");
    fs::create_dir_all(repo.join("course-cli")).unwrap();
    fs::create_dir_all(repo.join("chapters")).unwrap();
    fs::write(repo.join("course-cli/Cargo.toml"), "").unwrap();
    let output = practice(&[&id], &repo.join("chapters"));
    assert_refused(&output, "课程仓库");
    let suggestion = scratch.path().join("pi-practice-NN");
    assert!(
        stderr(&output).contains(&suggestion.display().to_string()),
        "suggests a path outside the repo: {}",
        stderr(&output)
    );
}

#[test]
fn version_and_help_are_chinese_and_succeed() {
    for flag in ["--version", "-V"] {
        let output = practice(&[flag], Path::new("."));
        assert!(output.status.success(), "{flag}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.starts_with("practice "), "{flag}: {stdout}");
    }
    let output = practice(&["--help"], Path::new("."));
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("用法：practice <章节> [目录]"), "{stdout}");
    assert!(
        !stdout.contains("Usage") && !stdout.contains("[OPTIONS]"),
        "{stdout}"
    );
}
