//! Reading libtest: the test list, the verdict log and the human run format.
//!
//! Verdicts come from the log libtest writes with `--logfile` (one `ok|failed|ignored name`
//! line per finished test), a file the code under test does not write to. The human output on
//! stdout is shared with that code — anything it prints lands between libtest's lines — so it
//! only ever supplies explanations: the captured output and panic of a failed test.

use std::collections::BTreeMap;

use crate::id::LabId;
use crate::process::Status;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    Failed,
    /// Marked `#[ignore]`: it did not run, so it proves nothing.
    Ignored,
    /// The test process ended while this test ran, before libtest logged its verdict.
    Crashed(Status),
    /// No verdict within the time limit, this many seconds; its process group was killed.
    TimedOut(u64),
}

impl Verdict {
    /// Ran and did not pass: an assertion, a crash or a timeout.
    pub fn is_failure(self) -> bool {
        !matches!(self, Verdict::Passed | Verdict::Ignored)
    }
}

/// One panic found in a test's captured output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Panic {
    /// The panicking thread; libtest names a test's own thread after the test.
    pub thread: String,
    /// The whole message, possibly several lines (`left:` / `right:` of `assert_eq!`).
    pub message: String,
}

/// Outcome of one test function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestOutcome {
    pub name: String,
    pub verdict: Verdict,
    /// Captured output of a failed test; for a crash, what the process wrote to stderr last.
    pub output: String,
}

impl TestOutcome {
    pub fn passed(&self) -> bool {
        self.verdict == Verdict::Passed
    }

    /// Every panic in the captured output, in the order they happened.
    pub fn panics(&self) -> Vec<Panic> {
        parse_panics(&self.output)
    }

    /// The test's own failure: the panic of the thread named after the test, not a panic a
    /// tool raised on purpose elsewhere (the executor catches those).
    pub fn own_panic(&self) -> Option<Panic> {
        // A tool may panic on the test's own thread first (a current-thread runtime); the
        // panic that failed the test is the last one on that thread.
        let panics = self.panics();
        panics
            .iter()
            .rev()
            .find(|panic| panic.thread == self.name)
            .or_else(|| panics.first())
            .cloned()
    }

    /// The first Lab stub this test ran into (`Lab 6.3 execute_tool_call 尚未实现`), if any.
    pub fn first_lab_stub(&self) -> Option<(LabId, String)> {
        self.panics().into_iter().find_map(|panic| {
            let first_line = panic.message.lines().next()?.to_string();
            let rest = first_line.strip_prefix("Lab ")?;
            let lab = rest.split_whitespace().next()?.parse().ok()?;
            Some((lab, first_line))
        })
    }

    /// Why a test with no verdict of its own is red: one line naming the test and the cause.
    pub fn reason(&self) -> Option<String> {
        let name = &self.name;
        match self.verdict {
            Verdict::Crashed(status) => {
                let ended = status.describe();
                Some(match status {
                    Status::Code(_) => format!(
                        "测试进程在 {name} 中途退出（{ended}）：被测代码不能调用 process::exit"
                    ),
                    Status::Signal(_) if self.output.contains("has overflowed its stack") => {
                        format!("测试进程在 {name} 中途退出（栈溢出，{ended}）")
                    }
                    Status::Signal(_) => format!("测试进程在 {name} 中途退出（{ended}）"),
                })
            }
            Verdict::TimedOut(seconds) => Some(format!(
                "超时（{seconds} 秒）：{name} 没有结束，可能是死循环，或在等一个永远不来的事件"
            )),
            Verdict::Passed | Verdict::Failed | Verdict::Ignored => None,
        }
    }

    /// What a learner should read first: why the process died or hung, the Lab stub they hit,
    /// or else the test's own failure — its first line plus `left`/`right`, each shortened to
    /// `width` characters.
    pub fn headline(&self, width: usize) -> Option<String> {
        if let Some(reason) = self.reason() {
            return Some(reason);
        }
        if let Some((_, line)) = self.first_lab_stub() {
            return Some(line);
        }
        let panic = self.own_panic()?;
        let mut lines = panic.message.lines();
        let first = lines.next()?.trim();
        // The default hook prints a non-string payload (`panic_any(42)`) as its type name.
        if first == "Box<dyn Any>" {
            return Some(
                "panic 的值不是字符串（例如 panic_any(42)），没有可显示的消息".to_string(),
            );
        }
        let mut headline = shorten(first, width);
        for line in lines {
            let trimmed = line.trim_start();
            if trimmed.starts_with("left:") || trimmed.starts_with("right:") {
                headline.push_str("\n    ");
                headline.push_str(&shorten(trimmed, width));
            }
        }
        Some(headline)
    }
}

/// Cuts `text` to `width` characters, marking the cut.
pub fn shorten(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let head: String = text.chars().take(width.saturating_sub(1)).collect();
        format!("{head}…")
    }
}

/// Names from `--list --format terse` (`name: test` lines).
pub fn parse_test_list(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .map(str::to_string)
        .collect()
}

/// The verdict log of `--logfile`: `ok name`, `failed name`, `ignored name`, one per line.
/// A torn last line (the process died mid-write) or any other text is not a verdict.
pub fn parse_log(log: &str) -> BTreeMap<String, Verdict> {
    log.lines()
        .filter_map(|line| {
            let (word, name) = line.split_once(' ')?;
            let verdict = match word {
                "ok" => Verdict::Passed,
                "failed" => Verdict::Failed,
                "ignored" => Verdict::Ignored,
                _ => return None,
            };
            Some((name.to_string(), verdict))
        })
        .collect()
}

/// The captured output of each failed test, from libtest's human run output.
pub fn failure_output(stdout: &str) -> BTreeMap<String, String> {
    parse_failure_sections(stdout)
}

/// Result lines plus the captured output of failures. Only for output the course's own
/// code produced (the added packages' tests in verify); learners' runs are judged from the log.
pub fn parse_test_run(stdout: &str) -> Vec<TestOutcome> {
    let mut outcomes: Vec<TestOutcome> = stdout
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("test ")?;
            let (name, verdict) = rest.rsplit_once(" ... ")?;
            let verdict = match verdict.trim() {
                "ok" => Verdict::Passed,
                "FAILED" => Verdict::Failed,
                text if text.starts_with("ignored") => Verdict::Ignored,
                _ => return None,
            };
            Some(TestOutcome {
                name: name.to_string(),
                verdict,
                output: String::new(),
            })
        })
        .collect();
    let captured = parse_failure_sections(stdout);
    for outcome in outcomes.iter_mut().filter(|o| o.verdict == Verdict::Failed) {
        if let Some(output) = captured.get(&outcome.name) {
            outcome.output.clone_from(output);
        }
    }
    outcomes
}

/// `---- name stdout ----` blocks, keyed by test name.
fn parse_failure_sections(stdout: &str) -> BTreeMap<String, String> {
    let mut sections = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in stdout.lines() {
        let header = line
            .strip_prefix("---- ")
            .and_then(|rest| rest.strip_suffix(" stdout ----"));
        if header.is_some() || line == "failures:" {
            if let Some((name, body)) = current.take() {
                sections.insert(name, body);
            }
        }
        if let Some(name) = header {
            current = Some((name.to_string(), String::new()));
        } else if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    if let Some((name, body)) = current {
        sections.insert(name, body);
    }
    sections
}

/// `thread 'name' panicked at location:` followed by the message, up to the `note:` line,
/// a backtrace, the next panic, or the end.
fn parse_panics(output: &str) -> Vec<Panic> {
    let mut panics = Vec::new();
    let mut lines = output.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("thread '") else {
            continue;
        };
        // `thread 'name' panicked at …`, since Rust 1.88 `thread 'name' (1234) panicked at …`.
        let Some((thread, after)) = rest.split_once('\'') else {
            continue;
        };
        let after = after.trim_start();
        let after = match after.strip_prefix('(') {
            Some(id) => id
                .split_once(')')
                .filter(|(digits, _)| digits.bytes().all(|b| b.is_ascii_digit()))
                .map_or("", |(_, rest)| rest.trim_start()),
            None => after,
        };
        let Some(after) = after.strip_prefix("panicked at ") else {
            continue;
        };
        let mut message = Vec::new();
        // Before Rust 1.73 the message followed the location on the same line.
        if let Some((_, inline)) = after.split_once(": ") {
            if !inline.trim().is_empty() {
                message.push(inline.to_string());
            }
        }
        while let Some(next) = lines.peek() {
            if next.starts_with("note: ")
                || next.starts_with("stack backtrace:")
                || next.starts_with("thread '")
            {
                break;
            }
            message.push(lines.next().expect("peeked").to_string());
        }
        while message.last().is_some_and(|line| line.trim().is_empty()) {
            message.pop();
        }
        panics.push(Panic {
            thread: thread.to_string(),
            message: message.join("\n"),
        });
    }
    panics
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\nrunning 4 tests\ntest registry::keeps_order ... ok\n\
test validator::schema_is_exact ... FAILED\ntest executor::pairs ... FAILED\n\
test executor::slow ... ignored, needs a network\n\n\
failures:\n\n---- validator::schema_is_exact stdout ----\n\n\
thread 'validator::schema_is_exact' panicked at src/tool.rs:12:5:\n\
Lab 6.1 object_schema 尚未实现\nnote: run with `RUST_BACKTRACE=1`\n\n\
---- executor::pairs stdout ----\n\
thread 'tokio-runtime-worker' panicked at tests/x.rs:9:9:\nSTACK_SECRET\n\
thread 'executor::pairs' panicked at tests/x.rs:8:9:\nfragile tool gave up\n\
thread 'executor::pairs' (77) panicked at tests/x.rs:3:9:\n\
assertion `left == right` failed: 未知工具的结果必须保留原调用的 id\n  left: \"a\"\n right: \"b\"\n\n\
failures:\n    validator::schema_is_exact\n    executor::pairs\n\n\
test result: FAILED. 1 passed; 2 failed; 1 ignored; 0 measured; 0 filtered out\n";

    #[test]
    fn parses_verdicts_including_ignored() {
        let verdicts: Vec<_> = parse_test_run(RUN)
            .into_iter()
            .map(|o| (o.name, o.verdict))
            .collect();
        assert_eq!(
            verdicts,
            [
                ("registry::keeps_order".to_string(), Verdict::Passed),
                ("validator::schema_is_exact".to_string(), Verdict::Failed),
                ("executor::pairs".to_string(), Verdict::Failed),
                ("executor::slow".to_string(), Verdict::Ignored),
            ]
        );
    }

    #[test]
    fn a_lab_stub_is_the_headline() {
        let outcome = &parse_test_run(RUN)[1];
        let (lab, line) = outcome.first_lab_stub().expect("stub panic found");
        assert_eq!(lab.to_string(), "6.1");
        assert_eq!(line, "Lab 6.1 object_schema 尚未实现");
        assert_eq!(
            outcome.headline(80).as_deref(),
            Some("Lab 6.1 object_schema 尚未实现")
        );
    }

    #[test]
    fn the_tests_own_failure_wins_over_a_tools_deliberate_panic() {
        let outcome = &parse_test_run(RUN)[2];
        assert_eq!(outcome.panics().len(), 3);
        assert_eq!(outcome.first_lab_stub(), None);
        assert_eq!(
            outcome.headline(80).as_deref(),
            Some(
                "assertion `left == right` failed: 未知工具的结果必须保留原调用的 id\n    left: \"a\"\n    right: \"b\""
            )
        );
        let short = outcome.headline(12).unwrap();
        assert!(short.starts_with("assertion `…"), "{short}");
    }

    #[test]
    fn the_log_gives_verdicts_and_ignores_anything_else() {
        let log =
            parse_log("ok queue::a\nfailed queue::b\nignored queue::c\ntest queue::d ... ok\nok");
        assert_eq!(
            log.into_iter().collect::<Vec<_>>(),
            [
                ("queue::a".to_string(), Verdict::Passed),
                ("queue::b".to_string(), Verdict::Failed),
                ("queue::c".to_string(), Verdict::Ignored),
            ],
            "只有日志里 ok/failed/ignored 开头的完整行才算判定"
        );
    }

    #[test]
    fn a_crash_or_timeout_names_its_test_and_cause() {
        let crashed = |status, output: &str| TestOutcome {
            name: "queue::a".into(),
            verdict: Verdict::Crashed(status),
            output: output.into(),
        };
        assert_eq!(
            crashed(Status::Code(0), "").headline(80).as_deref(),
            Some("测试进程在 queue::a 中途退出（退出码 0）：被测代码不能调用 process::exit")
        );
        let overflow = crashed(
            Status::Signal(libc::SIGABRT),
            "\nthread 'queue::a' has overflowed its stack\nfatal runtime error: stack overflow\n",
        );
        assert!(
            overflow
                .headline(80)
                .unwrap()
                .contains("（栈溢出，信号 SIGABRT）"),
            "栈溢出要说出来：{:?}",
            overflow.headline(80)
        );
        let hung = TestOutcome {
            name: "queue::a".into(),
            verdict: Verdict::TimedOut(30),
            output: String::new(),
        };
        assert!(
            hung.headline(80)
                .unwrap()
                .starts_with("超时（30 秒）：queue::a 没有结束"),
            "{:?}",
            hung.headline(80)
        );
    }

    #[test]
    fn a_non_string_panic_is_explained_not_shown_as_a_type_name() {
        let run = parse_test_run(
            "test g::a ... FAILED\n\nfailures:\n\n---- g::a stdout ----\n\
thread 'g::a' (9) panicked at tests/x.rs:1:1:\nBox<dyn Any>\n",
        );
        assert_eq!(
            run[0].headline(80).as_deref(),
            Some("panic 的值不是字符串（例如 panic_any(42)），没有可显示的消息")
        );
    }

    #[test]
    fn parses_terse_listing() {
        let listed = parse_test_list("validator::a: test\nregistry::b: test\n\n2 tests\n");
        assert_eq!(listed, ["validator::a", "registry::b"]);
    }
}
