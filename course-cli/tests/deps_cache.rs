//! The per-user dependency cache, end to end: a learner's first workspace pays the cold build
//! and fills the cache; the second chapter's fresh workspace starts from copies of the compiled
//! registry crates and compiles only the learner's own code, with verdicts of its own code.
//!
//! The cache lives in a temporary directory (`PI_COURSE_DEPS_CACHE`): tests never write the
//! real user cache.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use course_cli::runner::deps_cache::CACHE_ENV;
use course_cli::runner::Exit;

const BIN: &str = env!("CARGO_BIN_EXE_practice");

fn practice(chapter: &str, target: &Path, cache: &Path) -> String {
    let output = Command::new(BIN)
        .arg(chapter)
        .arg(target)
        .env(CACHE_ENV, cache)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    assert!(output.status.success(), "practice {chapter} 写出工作区");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `cargo xtask test <args>` in `workspace`, building into the workspace's own `target/`.
fn xtask(workspace: &Path, cache: &Path, args: &[&str]) -> Output {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    Command::new(cargo)
        .arg("xtask")
        .args(args)
        .current_dir(workspace)
        .env(CACHE_ENV, cache)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap()
}

/// Every file under `dir`, relative to it.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in fs::read_dir(&next).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    found.sort();
    found
}

#[test]
fn a_second_workspace_starts_from_cached_registry_crates_and_judges_its_own_code() {
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("cache");

    let first = scratch.path().join("w02");
    let said = practice("02", &first, &cache);
    assert!(
        !said.contains("依赖缓存"),
        "缓存还是空的，不能说复制了：{said}"
    );
    let output = xtask(&first, &cache, &["test", "02", "--group", "queue"]);
    assert_eq!(
        output.status.code(),
        Some(Exit::Red.code().into()),
        "新工作区的第一次判定是红的：{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let entries: Vec<PathBuf> = fs::read_dir(&cache)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "一个工具链加一份锁文件，一个缓存目录：{entries:?}"
    );
    let cached = files_under(&entries[0]);
    let named = |needle: &str| {
        cached
            .iter()
            .any(|path| path.to_string_lossy().contains(needle))
    };
    assert!(named("deps/libtokio-"), "编译好的 tokio 进了缓存");
    assert!(
        named(".fingerprint/tokio-"),
        "连同 cargo 判断新鲜度用的指纹"
    );
    for own in [
        "pi_course",
        "pi-course",
        "02_event_stream",
        "xtask",
        "course_runner",
    ] {
        assert!(
            !named(own),
            "工作区自己的 crate（{own}）绝不进缓存，判定只能来自本工作区编译的代码"
        );
    }

    let second = scratch.path().join("w03");
    let said = practice("03", &second, &cache);
    assert!(said.contains("依赖缓存"), "第二个工作区从缓存起步：{said}");
    let output = xtask(&second, &cache, &["test", "03", "--group", "projection"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let compiled: Vec<&str> = stderr
        .lines()
        .filter(|line| line.trim_start().starts_with("Compiling "))
        .collect();
    assert_eq!(
        compiled.len(),
        1,
        "第二个工作区只编译学习者自己的 crate：{compiled:?}"
    );
    assert!(compiled[0].contains("pi-course"), "{compiled:?}");
    assert_eq!(
        output.status.code(),
        Some(Exit::Red.code().into()),
        "{stdout}"
    );
    assert!(
        stdout.contains("Lab 3.1") && stdout.contains("尚未实现"),
        "判定来自第二个工作区自己的骨架代码：{stdout}"
    );

    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let deps = second.join("target/debug/deps");
        let tokio = fs::read_dir(&deps)
            .unwrap()
            .flatten()
            .find(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                name.starts_with("libtokio-") && name.ends_with(".rlib")
            })
            .expect("tokio 在第二个工作区里");
        assert_eq!(
            tokio.metadata().unwrap().nlink(),
            1,
            "是复制，不是硬链接：两个工作区同时构建也互不影响"
        );
    }
}
