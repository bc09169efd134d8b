//! 200 interrupted `practice` runs: SIGINT or SIGTERM after 0–20 ms, with and without the
//! slow-write hook, into a new nested path or an existing empty directory. Every time: no
//! staging dir, no created parent left, and the target absent, empty or complete.
//!
//! Slow (about a minute), so it is ignored by default:
//! `cargo test -p course-cli --test interrupt_stress -- --ignored --nocapture`

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use course_cli::runner::STAMP_FILE;
use course_cli::write::{CLAIM_FILE, SLOW_WRITE_ENV, STAGING_PREFIX};

const BIN: &str = env!("CARGO_BIN_EXE_practice");
const RUNS: u64 = 200;

/// The number of files a complete workspace of chapter 06 has, from one clean run.
fn complete_file_count(scratch: &Path) -> usize {
    let reference = scratch.join("reference");
    let status = Command::new(BIN)
        .args(["06", reference.to_str().unwrap()])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let count = count_files(&reference);
    fs::remove_dir_all(&reference).unwrap();
    count
}

fn count_files(dir: &Path) -> usize {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| {
                    if entry.path().is_dir() {
                        count_files(&entry.path())
                    } else {
                        1
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(unix)]
#[test]
#[ignore = "stress run, about a minute"]
fn two_hundred_interrupted_runs_leave_nothing_behind() {
    let scratch = tempfile::tempdir().unwrap();
    let complete = complete_file_count(scratch.path());
    let (mut interrupted, mut completed) = (0, 0);
    for run in 0..RUNS {
        let dir = scratch.path().join(format!("run-{run}"));
        fs::create_dir(&dir).unwrap();
        let fill_empty = run % 4 >= 2;
        let target = if fill_empty {
            dir.join("ws")
        } else {
            dir.join("a/b/ws")
        };
        if fill_empty {
            fs::create_dir(&target).unwrap();
        }
        let mut command = Command::new(BIN);
        command
            .args(["06", target.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if run % 2 == 1 {
            command.env(SLOW_WRITE_ENV, "1");
        }
        let child = command.spawn().unwrap();
        // A deterministic spread of delays over 0–20 ms.
        std::thread::sleep(Duration::from_micros((run * 7919) % 20_000));
        let signal = if run % 8 < 4 { "-INT" } else { "-TERM" };
        let _ = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status();
        let output = child.wait_with_output().unwrap();

        let leftovers: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(STAGING_PREFIX))
            .collect();
        assert!(
            leftovers.is_empty(),
            "run {run}: staging left: {leftovers:?}"
        );
        let files = count_files(&target);
        let is_complete = target.join(STAMP_FILE).is_file() && files == complete;
        if output.status.success() {
            completed += 1;
            assert!(
                is_complete,
                "run {run}: success but {files}/{complete} files"
            );
        } else {
            interrupted += 1;
            if fill_empty {
                assert_eq!(
                    files, 0,
                    "run {run}: the empty directory must be empty again"
                );
                assert!(
                    !target.join(CLAIM_FILE).exists(),
                    "run {run}: claim file left"
                );
            } else {
                assert!(
                    !dir.join("a").exists(),
                    "run {run}: created parents must be removed"
                );
            }
        }
        fs::remove_dir_all(&dir).unwrap();
    }
    println!("{RUNS} runs: {interrupted} interrupted and rolled back, {completed} completed before the signal");
    assert_eq!(interrupted + completed, RUNS);
}
