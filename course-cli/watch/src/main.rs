//! `cargo xtask watch [NN]` in a practice workspace: runs the current Lab's group, then again
//! after every save under `pi-course/src/`, and moves on to the next Lab when one turns green.
//!
//! Every verdict comes from the same judging path as `cargo xtask test` (integrity check
//! included: edited tests end watch with exit 3). One run at a time: a save while the tests
//! run — hung or not — cancels that run (its process group is killed) and starts a new one;
//! a save during the build queues one more run. Saves in quick succession are debounced.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};

use course_runner::practice::{self, Cancelled, Refusal};
use course_runner::process::Cancel;
use course_runner::{ChapterId, ChapterTests, Exit};

/// Saves closer together than this are one change (editors write files in several steps).
const DEBOUNCE: Duration = Duration::from_millis(150);

fn say(text: &str) {
    let _ = writeln!(std::io::stdout(), "{text}");
}

fn main() -> ExitCode {
    match run() {
        Ok(exit) => exit.into(),
        Err(Refusal(message)) => {
            let _ = writeln!(std::io::stderr(), "错误：{message}");
            Exit::Usage.into()
        }
    }
}

fn run() -> Result<Exit, Refusal> {
    let chapter = match std::env::args().nth(1) {
        Some(arg) => Some(
            arg.parse::<ChapterId>()
                .map_err(|e| Refusal(e.to_string()))?,
        ),
        None => None,
    };
    let (root, stamp) = practice::locate()?;
    let id = chapter.unwrap_or(stamp.chapter);
    let tests = stamp
        .chapter_tests(id)
        .ok_or_else(|| {
            Refusal(format!(
                "本工作区没有第 {id} 章的测试；可选：{}",
                stamp.chapter_ids().join(" ")
            ))
        })?
        .clone();

    let (sender, saves) = mpsc::channel();
    let cancel: Cancel = Arc::new(AtomicBool::new(false));
    let saved = cancel.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event {
            if matches!(
                event.kind,
                EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_)
            ) {
                saved.store(true, Ordering::SeqCst);
                let _ = sender.send(());
            }
        }
    })
    .map_err(|e| Refusal(format!("无法启动文件监视（{e}）")))?;
    let sources = root.join("pi-course/src");
    watcher
        .watch(&sources, RecursiveMode::Recursive)
        .map_err(|e| Refusal(format!("无法监视 {}（{e}）", sources.display())))?;

    say(&format!(
        "监视 {}：保存文件后自动运行当前 Lab 的测试组；按 Ctrl-C 退出。",
        sources.display()
    ));
    // Edited tests: no silent run first; the judging path below refuses at once.
    let mut current = if stamp.edited_injected_files(&root).is_empty() {
        first_open_group(&root, &tests, &cancel)
    } else {
        None
    };
    loop {
        let group = current.clone();
        // Saves so far are part of this run; a later one cancels it.
        cancel.store(false, Ordering::SeqCst);
        while saves.try_recv().is_ok() {}
        let verdict = match practice::judge_chapter(
            &root,
            &stamp,
            &tests,
            group.as_deref(),
            Some(cancel.clone()),
        ) {
            Ok(verdict) => verdict,
            Err(Cancelled) => {
                say("检测到新的保存：停止这次运行，重新开始。");
                settle(&saves)?;
                continue;
            }
        };
        if verdict == Exit::Tampered {
            return Ok(Exit::Tampered);
        }
        if verdict == Exit::Green {
            match group.as_deref().and_then(|name| next_group(&tests, name)) {
                Some(next) => {
                    say(&format!("✓ 下一个：--group {next}"));
                    current = Some(next);
                    continue;
                }
                None if group.is_some() => {
                    say("✓ 最后一组也通过了；再跑一遍整章确认。");
                    current = None;
                    continue;
                }
                None => say("✓ 整章通过。继续监视；改动后会再跑一遍。"),
            }
        }
        wait_for_save(&saves)?;
    }
}

/// The first group of the chapter that is not green yet, or `None` when all are.
/// Only picks where to start; the verdicts shown come from the judging path that follows.
fn first_open_group(root: &Path, tests: &ChapterTests, cancel: &Cancel) -> Option<String> {
    let mut runner = course_runner::CargoRunner::new(root.to_path_buf());
    runner.cancel = Some(cancel.clone());
    match runner.run_chapter(tests, None) {
        Err(course_runner::RunError::Cancelled) => {
            say("检测到新的保存：停止这次运行，重新开始。");
            tests.groups.first().map(|group| group.name.clone())
        }
        Ok(reports) => reports
            .iter()
            .find(|report| !report.is_green())
            .map(|report| report.spec.name.clone()),
        // Does not compile yet (or a save interrupted): start at the first group, whose run
        // shows the errors.
        Err(_) => tests.groups.first().map(|group| group.name.clone()),
    }
}

fn next_group(tests: &ChapterTests, name: &str) -> Option<String> {
    let position = tests.groups.iter().position(|group| group.name == name)?;
    tests
        .groups
        .get(position + 1)
        .map(|group| group.name.clone())
}

/// Blocks until a save, then swallows the burst that follows it. Saves that happened while
/// the last run was going are already queued and count as one.
fn wait_for_save(saves: &Receiver<()>) -> Result<(), Refusal> {
    saves
        .recv()
        .map_err(|_| Refusal("文件监视意外停止".to_string()))?;
    settle(saves)
}

/// Swallows a burst of saves: returns once none came for [`DEBOUNCE`].
fn settle(saves: &Receiver<()>) -> Result<(), Refusal> {
    loop {
        match saves.recv_timeout(DEBOUNCE) {
            Ok(()) => continue,
            Err(RecvTimeoutError::Timeout) => return Ok(()),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Refusal("文件监视意外停止".to_string()))
            }
        }
    }
}
