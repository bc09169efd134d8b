//! A practice workspace judged by its own `cargo xtask`, with real cargo builds: a copied
//! workspace judges the copy, a moved one judges itself, edited tests get no verdict.
//! Slow (one dependency build), so it exercises every case on one workspace.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::OnceLock;

use course_cli::runner::deps_cache::CACHE_ENV;
use course_cli::runner::Exit;

const BIN: &str = env!("CARGO_BIN_EXE_practice");

/// This suite's own dependency cache: the real user cache is never read or written here.
fn deps_cache() -> &'static Path {
    static CACHE: OnceLock<tempfile::TempDir> = OnceLock::new();
    CACHE.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

fn run(program: &str, args: &[&str], cwd: &Path) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(cwd)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env(CACHE_ENV, deps_cache())
        .output()
        .unwrap_or_else(|error| panic!("{program} runs: {error}"))
}

fn xtask(args: &[&str], cwd: &Path) -> (Option<i32>, String, String) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut all = vec!["xtask"];
    all.extend_from_slice(args);
    let output = run(&cargo, &all, cwd);
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success(), "cp -a works");
}

#[test]
fn a_copied_or_moved_workspace_judges_itself_and_edited_tests_get_no_verdict() {
    let scratch = tempfile::tempdir().unwrap();
    let a = scratch.path().join("a");
    let output = run(BIN, &["02", a.to_str().unwrap()], scratch.path());
    assert!(output.status.success(), "practice 02 writes a workspace");

    let (code, stdout, stderr) = xtask(&["test", "02", "--group", "queue"], &a);
    assert_eq!(
        code,
        Some(Exit::Red.code().into()),
        "the skeleton is red: {stdout}"
    );
    assert!(
        stdout.contains("Lab 2.1"),
        "red on its Lab marker: {stdout}"
    );
    assert!(
        stderr.contains("Compiling pi-course"),
        "the first build shows cargo's progress instead of silence: {stderr}"
    );
    assert!(
        stdout.contains("完整输出：cargo test -p pi-course --test 02_event_stream -- queue::"),
        "a red verdict names the command that shows everything: {stdout}"
    );
    let (code, stdout, _) = xtask(&["test", "--help"], &a);
    assert_eq!(
        code,
        Some(0),
        "`cargo xtask test --help` is help, not an error"
    );
    assert!(stdout.contains("用法："), "{stdout}");

    // The copy keeps `target/` with a's build; its verdict must still be about b.
    let b = scratch.path().join("b");
    copy_dir(&a, &b);
    let source = b.join("pi-course/src/event_stream.rs");
    let mut text = fs::read_to_string(&source).unwrap();
    text.push_str("\nfn broken( {\n");
    fs::write(&source, text).unwrap();
    let (code, stdout, stderr) = xtask(&["test", "02"], &b);
    assert_eq!(code, Some(Exit::Red.code().into()), "a broken copy is red");
    assert!(
        stderr.contains("编译失败"),
        "the copy reports its own compile error: {stderr}"
    );
    assert!(
        !stdout.contains("Lab 2.1"),
        "no verdict from another directory: {stdout}"
    );

    // Run from a subdirectory of a moved workspace: it finds itself.
    let c = scratch.path().join("c");
    fs::rename(&a, &c).unwrap();
    let (code, stdout, stderr) = xtask(
        &["test", "02", "--group", "queue"],
        &c.join("pi-course/src"),
    );
    assert_eq!(code, Some(Exit::Red.code().into()), "{stderr}");
    assert!(
        stdout.contains("Lab 2.1"),
        "the moved workspace tests itself: {stdout}"
    );

    // Edited injected tests: no verdict, the file named, the way back offered.
    let tests = c.join("pi-course/tests/02_event_stream.rs");
    let original = fs::read_to_string(&tests).unwrap();
    fs::write(
        &tests,
        original.replace("async fn", "#[allow(unused)] async fn"),
    )
    .unwrap();
    let (code, stdout, stderr) = xtask(&["test", "02"], &c);
    assert_eq!(
        code,
        Some(Exit::Tampered.code().into()),
        "tampered tests get no verdict"
    );
    assert!(!stdout.contains("全部通过"), "{stdout}");
    assert!(
        stderr.contains("pi-course/tests/02_event_stream.rs"),
        "{stderr}"
    );
    assert!(stderr.contains("cargo xtask restore-tests"), "{stderr}");
    let (code, stdout, _) = xtask(&["restore-tests"], &c);
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(
        fs::read_to_string(&tests).unwrap(),
        original,
        "restored byte for byte"
    );
}
