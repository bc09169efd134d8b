//! Runs a chapter's acceptance tests group by group and judges each group.
//!
//! This file is shared verbatim by the course xtask and by the xtask written into every
//! practice workspace, so it depends on std, serde and serde_json only. What a learner's
//! `cargo xtask test 06` reports is computed by exactly the code instructors verify with.
//!
//! A filtered `cargo test` exits 0 when the filter matches nothing, so the runner lists the
//! tests first and insists on the manifest's exact count per group.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// The learner crate inside every snapshot and practice workspace.
pub const LEARNER_PACKAGE: &str = "pi-course";
/// Where the practice stamp lives, relative to the workspace root.
pub const STAMP_FILE: &str = ".practice.json";

/// One Lab group of a chapter's acceptance tests.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct GroupSpec {
    pub name: String,
    pub lab: String,
    /// Exact module prefix, e.g. `validator::`.
    pub prefix: String,
    /// Exact number of tests the prefix must select.
    pub count: usize,
    #[serde(default)]
    pub summary: String,
    /// Text every failing test of this group prints when run against the skeleton.
    #[serde(default)]
    pub marker: String,
}

/// The tests of one chapter: which file, which groups.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ChapterTests {
    pub id: String,
    pub title: String,
    /// File name under `pi-course/tests/`, e.g. `06_tool_contract.rs`.
    pub test: String,
    pub groups: Vec<GroupSpec>,
}

impl ChapterTests {
    /// The cargo test target, i.e. the file name without `.rs`.
    pub fn target(&self) -> &str {
        self.test.strip_suffix(".rs").unwrap_or(&self.test)
    }

    pub fn group(&self, name: &str) -> Option<&GroupSpec> {
        self.groups.iter().find(|group| group.name == name)
    }
}

/// `.practice.json`: what a practice workspace is, written by `practice`, read by its xtask.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub chapter: String,
    pub title: String,
    pub mode: String,
    pub course_version: String,
    /// Every chapter whose tests the workspace carries, in course order, the practised one last.
    pub chapters: Vec<ChapterTests>,
    /// Injected test files (workspace-relative path) and the FNV-1a hash of their content.
    pub injected: BTreeMap<String, String>,
}

impl Stamp {
    pub fn chapter_tests(&self, id: &str) -> Option<&ChapterTests> {
        self.chapters.iter().find(|chapter| chapter.id == id)
    }

    /// Injected files whose content no longer matches the stamp.
    pub fn edited_injected_files(&self, workspace: &Path) -> Vec<String> {
        self.injected
            .iter()
            .filter(|(path, hash)| match std::fs::read(workspace.join(path)) {
                Ok(bytes) => &content_hash(&bytes) != *hash,
                Err(_) => true,
            })
            .map(|(path, _)| path.clone())
            .collect()
    }
}

/// A stable 64-bit FNV-1a digest, hex encoded. Only detects accidental edits; not a security
/// boundary, so no cryptographic hash (and no extra dependency) is warranted.
pub fn content_hash(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Outcome of one test function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestOutcome {
    pub name: String,
    pub passed: bool,
    /// Captured output of a failed test (its panic message lives here).
    pub output: String,
}

impl TestOutcome {
    /// The panic message of a failed test, first line only.
    pub fn panic_message(&self) -> Option<&str> {
        let mut lines = self.output.lines();
        while let Some(line) = lines.next() {
            if let Some((_, rest)) = line.split_once("panicked at ") {
                // Since Rust 1.73 the message follows the location on the next line.
                if rest.trim_end().ends_with(':') {
                    return lines.next().map(str::trim);
                }
                return rest.split_once(": ").map(|(_, message)| message.trim());
            }
        }
        None
    }
}

/// How one group fared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupReport {
    pub spec: GroupSpec,
    pub selected: usize,
    pub outcomes: Vec<TestOutcome>,
}

impl GroupReport {
    pub fn passed(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|outcome| outcome.passed)
            .count()
    }

    pub fn failures(&self) -> impl Iterator<Item = &TestOutcome> {
        self.outcomes.iter().filter(|outcome| !outcome.passed)
    }

    /// The group selects the manifest's count of tests.
    pub fn count_matches(&self) -> bool {
        self.selected == self.spec.count && self.outcomes.len() == self.spec.count
    }

    pub fn is_green(&self) -> bool {
        self.count_matches() && self.passed() == self.spec.count
    }

    /// Every test ran and failed, each naming the group's Lab marker: the skeleton's state.
    pub fn is_red_with_marker(&self) -> bool {
        self.count_matches()
            && self.passed() == 0
            && self
                .failures()
                .all(|outcome| outcome.output.contains(&self.spec.marker))
    }

    /// `validator  Lab 6.1  1/1 ✓`
    pub fn summary_line(&self) -> String {
        let mark = if self.is_green() { "✓" } else { "✗" };
        let mut line = format!(
            "{:<14} Lab {:<5} {}/{} {mark}",
            self.spec.name,
            self.spec.lab,
            self.passed(),
            self.spec.count
        );
        if self.selected != self.spec.count {
            line.push_str(&format!(
                "  （筛选 `{}` 选中了 {} 个测试，清单要求 {} 个）",
                self.spec.prefix, self.selected, self.spec.count
            ));
        } else if let Some(first) = self.failures().next() {
            let message = first.panic_message().unwrap_or("见上方测试输出");
            line.push_str(&format!("  首个失败 {}：{message}", first.name));
        }
        line
    }
}

/// Why the runner could not judge the groups at all.
#[derive(Debug)]
pub enum RunError {
    /// cargo could not be started.
    Spawn(std::io::Error),
    /// The test target did not build; carries cargo's diagnostics.
    Build(String),
    /// Selected group name is not one of the chapter's.
    UnknownGroup {
        chapter: String,
        group: String,
        known: Vec<String>,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Spawn(error) => write!(f, "无法启动 cargo：{error}"),
            RunError::Build(diagnostics) => {
                write!(f, "测试目标编译失败，先修复下面的编译错误：\n{diagnostics}")
            }
            RunError::UnknownGroup {
                chapter,
                group,
                known,
            } => write!(
                f,
                "第 {chapter} 章没有名为 `{group}` 的测试组；可选：{}",
                known.join("、")
            ),
        }
    }
}

impl std::error::Error for RunError {}

/// Where and how cargo runs.
#[derive(Clone, Debug)]
pub struct RunSettings {
    /// Workspace root holding `pi-course/`.
    pub workspace: PathBuf,
    /// Shared target directory; `None` uses the workspace's own.
    pub target_dir: Option<PathBuf>,
}

impl RunSettings {
    fn cargo(&self) -> Command {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(cargo);
        command.current_dir(&self.workspace);
        if let Some(target_dir) = &self.target_dir {
            command.env("CARGO_TARGET_DIR", target_dir);
        }
        // A learner's RUSTFLAGS must not make warnings fatal in the course's own checks.
        command.env_remove("RUSTFLAGS");
        command
    }
}

/// Runs the chapter's groups (one group if `only` names it) and reports each.
pub fn run_chapter(
    settings: &RunSettings,
    chapter: &ChapterTests,
    only: Option<&str>,
) -> Result<Vec<GroupReport>, RunError> {
    let groups: Vec<&GroupSpec> = match only {
        Some(name) => vec![chapter.group(name).ok_or_else(|| RunError::UnknownGroup {
            chapter: chapter.id.clone(),
            group: name.to_string(),
            known: chapter
                .groups
                .iter()
                .map(|group| group.name.clone())
                .collect(),
        })?],
        None => chapter.groups.iter().collect(),
    };

    let listed = list_tests(settings, chapter.target())?;
    let filter = match groups.as_slice() {
        [single] => Some(single.prefix.as_str()),
        _ => None,
    };
    let outcomes = run_tests(settings, chapter.target(), filter)?;

    Ok(groups
        .into_iter()
        .map(|spec| GroupReport {
            spec: spec.clone(),
            selected: listed
                .iter()
                .filter(|name| name.starts_with(&spec.prefix))
                .count(),
            outcomes: outcomes
                .iter()
                .filter(|outcome| outcome.name.starts_with(&spec.prefix))
                .cloned()
                .collect(),
        })
        .collect())
}

/// Names of every test in the target.
pub fn list_tests(settings: &RunSettings, target: &str) -> Result<Vec<String>, RunError> {
    let output = settings
        .cargo()
        .args(["test", "--quiet", "-p", LEARNER_PACKAGE, "--test", target])
        .args(["--", "--list", "--format", "terse"])
        .output()
        .map_err(RunError::Spawn)?;
    if !output.status.success() {
        return Err(RunError::Build(
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ));
    }
    Ok(parse_test_list(&String::from_utf8_lossy(&output.stdout)))
}

/// Runs the target (optionally filtered) and parses every test's outcome.
pub fn run_tests(
    settings: &RunSettings,
    target: &str,
    filter: Option<&str>,
) -> Result<Vec<TestOutcome>, RunError> {
    let mut command = settings.cargo();
    command.args([
        "test",
        "-p",
        LEARNER_PACKAGE,
        "--test",
        target,
        "--no-fail-fast",
        "--",
    ]);
    if let Some(filter) = filter {
        command.arg(filter);
    }
    let output = command.output().map_err(RunError::Spawn)?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !stdout.contains("running ") {
        return Err(RunError::Build(
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ));
    }
    Ok(parse_test_run(&stdout))
}

/// Parses `name: test` lines of `--list --format terse`.
pub fn parse_test_list(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .map(str::to_string)
        .collect()
}

/// Parses libtest's human output: result lines plus the captured output of failures.
pub fn parse_test_run(stdout: &str) -> Vec<TestOutcome> {
    let mut outcomes: Vec<TestOutcome> = stdout
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("test ")?;
            let (name, verdict) = rest.rsplit_once(" ... ")?;
            let passed = match verdict.trim() {
                "ok" => true,
                "FAILED" => false,
                _ => return None,
            };
            Some(TestOutcome {
                name: name.to_string(),
                passed,
                output: String::new(),
            })
        })
        .collect();

    let captured = parse_failure_sections(stdout);
    for outcome in outcomes.iter_mut().filter(|outcome| !outcome.passed) {
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

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\nrunning 3 tests\ntest registry::keeps_order ... ok\n\
test validator::schema_is_exact ... FAILED\ntest executor::pairs ... FAILED\n\n\
failures:\n\n---- validator::schema_is_exact stdout ----\n\n\
thread 'validator::schema_is_exact' panicked at src/tool.rs:12:5:\n\
Lab 6.1 objectSchema 尚未实现\nnote: run with `RUST_BACKTRACE=1`\n\n\
---- executor::pairs stdout ----\nthread 'executor::pairs' panicked at tests/x.rs:3:9:\n\
assertion failed\n\nfailures:\n    validator::schema_is_exact\n    executor::pairs\n\n\
test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out\n";

    fn spec(name: &str, count: usize, marker: &str) -> GroupSpec {
        GroupSpec {
            name: name.into(),
            lab: "6.1".into(),
            prefix: format!("{name}::"),
            count,
            summary: String::new(),
            marker: marker.into(),
        }
    }

    fn report(name: &str, count: usize, marker: &str) -> GroupReport {
        let spec = spec(name, count, marker);
        let outcomes: Vec<_> = parse_test_run(RUN)
            .into_iter()
            .filter(|outcome| outcome.name.starts_with(&spec.prefix))
            .collect();
        GroupReport {
            selected: outcomes.len(),
            spec,
            outcomes,
        }
    }

    #[test]
    fn parses_verdicts_and_captured_panics() {
        let outcomes = parse_test_run(RUN);
        assert_eq!(outcomes.len(), 3);
        assert!(outcomes[0].passed);
        assert_eq!(
            outcomes[1].panic_message(),
            Some("Lab 6.1 objectSchema 尚未实现")
        );
        assert_eq!(outcomes[2].panic_message(), Some("assertion failed"));
        assert!(!outcomes[1].output.contains("executor::pairs stdout"));
    }

    #[test]
    fn judges_groups_by_exact_count_and_marker() {
        assert!(report("registry", 1, "Lab 6.2").is_green());
        assert!(
            !report("registry", 2, "Lab 6.2").is_green(),
            "count mismatch is red"
        );
        assert!(report("validator", 1, "Lab 6.1").is_red_with_marker());
        assert!(
            !report("executor", 1, "Lab 6.3").is_red_with_marker(),
            "wrong failure"
        );
        assert!(
            !report("registry", 1, "Lab 6.2").is_red_with_marker(),
            "passing is not red"
        );
        let empty = report("missing", 0, "");
        assert_eq!(empty.selected, 0);
    }

    #[test]
    fn summary_line_names_the_first_failure() {
        let line = report("validator", 1, "Lab 6.1").summary_line();
        assert!(line.starts_with("validator"), "{line}");
        assert!(line.contains("0/1 ✗"), "{line}");
        assert!(line.contains("Lab 6.1 objectSchema 尚未实现"), "{line}");
        assert!(report("registry", 1, "").summary_line().contains("1/1 ✓"));
    }

    #[test]
    fn parses_terse_listing() {
        let listed = parse_test_list("validator::a: test\nregistry::b: test\n\n2 tests\n");
        assert_eq!(listed, ["validator::a", "registry::b"]);
    }

    #[test]
    fn content_hash_is_stable_and_sensitive() {
        assert_eq!(content_hash(b""), "cbf29ce484222325");
        assert_ne!(content_hash(b"a"), content_hash(b"b"));
    }
}
