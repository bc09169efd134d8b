//! The one place that starts cargo for a chapter's tests, and the one judging path: every
//! verdict `test`, `watch` and `verify` show is computed by [`CargoRunner::run_chapter`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::judge::GroupReport;
use crate::libtest::{failure_output, parse_log, parse_test_list, TestOutcome, Verdict};
use crate::process::{is_running, run_bounded, Cancel, Ending, Finished, Status};
use crate::spec::{ChapterTests, GroupSpec, LEARNER_PACKAGE};

/// How long a test binary may run without a single test finishing before its process group
/// is killed. Generous: the slowest acceptance test takes well under a second. A group whose
/// tests need longer says so in the manifest (`timeout = <seconds>`).
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(30);
/// Overrides every limit, the default and the manifest's, in whole seconds (a slow machine;
/// the engine's own tests).
pub const TIME_LIMIT_ENV: &str = "COURSE_TEST_TIMEOUT";

/// Why the groups could not be judged at all.
#[derive(Debug)]
pub enum RunError {
    /// cargo could not be started.
    Spawn(std::io::Error),
    /// The test target did not build. Holds cargo's diagnostics, or nothing when cargo already
    /// printed them to the terminal.
    Build(String),
    /// The run was cancelled (watch mode: the learner saved again).
    Cancelled,
    /// libtest refused `--logfile` (deprecated by rust-lang/rust#134283, still honoured in
    /// 1.95): without its verdict log nothing can be judged, so this is said instead of
    /// blaming every test.
    NoVerdictLog,
    /// The requested group is not one of the chapter's.
    UnknownGroup {
        chapter: String,
        group: String,
        known: Vec<String>,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Spawn(error) => {
                write!(f, "无法启动 cargo（{error}）；请确认 Rust 工具链已安装")
            }
            RunError::Build(diagnostics) if diagnostics.is_empty() => {
                write!(f, "测试目标编译失败：先修复上面 cargo 打印的编译错误")
            }
            RunError::Build(diagnostics) => {
                write!(f, "测试目标编译失败，先修复下面的编译错误：\n{diagnostics}")
            }
            RunError::Cancelled => write!(f, "本次运行已取消"),
            RunError::NoVerdictLog => write!(
                f,
                "这个 Rust 版本的测试框架不再接受 --logfile，无法得到可信的判定；请更新课程工具（practice）"
            ),
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

/// Runs cargo in one workspace.
#[derive(Clone, Debug)]
pub struct CargoRunner {
    /// Workspace root holding `pi-course/`.
    pub workspace: PathBuf,
    /// Shared target directory; `None` uses the workspace's own.
    pub target_dir: Option<PathBuf>,
    /// Let cargo print its build progress to the terminal before the verdict.
    pub show_build: bool,
    /// How long a test binary may go without finishing a test, for every group alike; `None`
    /// leaves it to each group (its manifest `timeout`, else [`DEFAULT_TIME_LIMIT`]).
    pub time_limit: Option<Duration>,
    /// Raised by another thread to abandon the running tests.
    pub cancel: Option<Cancel>,
    /// Start every selected test at once (one libtest thread each, up to
    /// [`MAX_TESTS_AT_ONCE`]) instead of one per core. For runs that look for a failure, not
    /// for a green verdict (`verify` judging a catalogued mistake): a mistake that makes
    /// several tests wait out their own timeouts then costs one wait, not several in turn.
    /// Green verdicts keep libtest's default, the one the learner's own runs see.
    pub all_at_once: bool,
    /// Compiles the workspace members through this program (`RUSTC_WORKSPACE_WRAPPER`);
    /// dependencies still go to plain rustc. `verify` gives its reference state clippy-driver,
    /// so the build its tests need is also the lint, instead of a second front-end pass in
    /// `cargo clippy`'s separate check artifacts.
    pub member_compiler: Option<PathBuf>,
}

/// The most test threads [`CargoRunner::all_at_once`] starts: more than any group has tests,
/// few enough that a group of process-spawning tests cannot swamp a small machine.
pub const MAX_TESTS_AT_ONCE: usize = 16;

impl CargoRunner {
    pub fn new(workspace: PathBuf) -> Self {
        CargoRunner {
            workspace,
            target_dir: None,
            show_build: false,
            time_limit: time_limit_from_env(),
            cancel: None,
            all_at_once: false,
            member_compiler: None,
        }
    }

    /// `cargo <subcommand>` in the workspace with the course's environment, for subcommands
    /// that take no `--locked` (`fmt`, the `xtask` alias).
    pub fn plain(&self, subcommand: &str) -> Command {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(cargo);
        command.current_dir(&self.workspace).arg(subcommand);
        if let Some(target_dir) = &self.target_dir {
            command.env("CARGO_TARGET_DIR", target_dir);
        }
        // A learner's RUSTFLAGS (say `-D warnings`) must not decide the course's verdicts.
        command.env_remove("RUSTFLAGS");
        if let Some(wrapper) = &self.member_compiler {
            command.env("RUSTC_WORKSPACE_WRAPPER", wrapper);
        }
        command
    }

    /// `cargo <subcommand> --locked …` in the workspace, with the course's environment.
    pub fn command(&self, subcommand: &str) -> Command {
        let mut command = self.plain(subcommand);
        command.arg("--locked");
        command
    }

    /// Runs the chapter's groups (one group if `only` names it) and judges each.
    pub fn run_chapter(
        &self,
        chapter: &ChapterTests,
        only: Option<&str>,
    ) -> Result<Vec<GroupReport>, RunError> {
        let groups: Vec<&GroupSpec> = match only {
            Some(name) => vec![chapter.group(name).ok_or_else(|| RunError::UnknownGroup {
                chapter: chapter.id.to_string(),
                group: name.to_string(),
                known: chapter
                    .group_names()
                    .iter()
                    .map(|n| n.to_string())
                    .collect(),
            })?],
            None => chapter.groups.iter().collect(),
        };
        let executable = self.build(&chapter.target)?;
        let listed = self.list_built(&executable)?;
        let filter = match groups.as_slice() {
            [single] => Some(single.prefix()),
            _ => None,
        };
        let outcomes = self.run_built(&executable, filter.as_deref(), &listed, &groups)?;
        Ok(groups
            .into_iter()
            .map(|spec| {
                let prefix = spec.prefix();
                GroupReport {
                    spec: spec.clone(),
                    selected: listed
                        .iter()
                        .filter(|name| name.starts_with(&prefix))
                        .count(),
                    outcomes: outcomes
                        .iter()
                        .filter(|outcome| outcome.name.starts_with(&prefix))
                        .cloned()
                        .collect(),
                }
            })
            .collect())
    }

    /// Builds the test target and returns its executable. With `show_build`, cargo's progress
    /// and diagnostics go to the terminal; otherwise the diagnostics are kept for the error.
    pub fn build(&self, target: &str) -> Result<PathBuf, RunError> {
        let no_run = ["--no-run", "-p", LEARNER_PACKAGE, "--test", target];
        if self.show_build {
            // Cargo prints its progress only in its human format, so the learner's build runs
            // in that format first; the JSON query below then finds everything fresh.
            let status = self
                .command("test")
                .args(no_run)
                .stdout(Stdio::null())
                .status()
                .map_err(RunError::Spawn)?;
            if !status.success() {
                return Err(RunError::Build(String::new()));
            }
        }
        let output = self
            .command("test")
            .args(no_run)
            .args(["--quiet", "--message-format=json-render-diagnostics"])
            .output()
            .map_err(RunError::Spawn)?;
        if !output.status.success() {
            return Err(RunError::Build(
                String::from_utf8_lossy(&output.stderr).into_owned(),
            ));
        }
        executable_of(&String::from_utf8_lossy(&output.stdout), target)
            .ok_or_else(|| RunError::Build(format!("cargo 没有报告测试目标 {target} 的可执行文件")))
    }

    /// The built test binary, run the way `cargo test` runs it: from the package directory.
    fn test_binary(&self, executable: &Path) -> Command {
        let package = self.workspace.join(LEARNER_PACKAGE);
        let mut command = Command::new(executable);
        command
            .current_dir(&package)
            .env("CARGO_MANIFEST_DIR", &package);
        command
    }

    fn list_built(&self, executable: &Path) -> Result<Vec<String>, RunError> {
        let output = self
            .test_binary(executable)
            .args(["--list", "--format", "terse"])
            .output()
            .map_err(RunError::Spawn)?;
        Ok(parse_test_list(&String::from_utf8_lossy(&output.stdout)))
    }

    /// Runs the listed tests `filter` selects and returns their outcomes in name order.
    ///
    /// A verdict counts only when libtest logged it and the process then ended the way a
    /// finished run ends (exit 0 with no failure, 101 with one). When the whole run did not end
    /// that way — a crash, a timeout — every selected test runs again on its own, so the one
    /// that crashed or hung is found and named; when it did but some test has no verdict (the
    /// code called `process::exit(0)`), those tests run again on their own.
    ///
    /// `groups` give each test its time limit; a test outside them gets the default.
    fn run_built(
        &self,
        executable: &Path,
        filter: Option<&str>,
        listed: &[String],
        groups: &[&GroupSpec],
    ) -> Result<Vec<TestOutcome>, RunError> {
        let mut selected: Vec<&String> = listed
            .iter()
            .filter(|name| filter.is_none_or(|filter| name.contains(filter)))
            .collect();
        selected.sort();
        // Any selected test may be the one running when the log stalls, so the whole run
        // waits as long as the most patient of them would.
        let whole_limit = selected
            .iter()
            .map(|name| self.limit_of(name, groups))
            .max()
            .unwrap_or(DEFAULT_TIME_LIMIT);
        let threads = selected.len().clamp(1, MAX_TESTS_AT_ONCE).to_string();
        let mut args: Vec<&str> = filter.into_iter().collect();
        if self.all_at_once {
            args.extend(["--test-threads", &threads]);
        }
        let whole = self.run_logged(executable, args, whole_limit)?;
        let clean = whole.ended_cleanly();
        selected
            .into_iter()
            .map(|name| match whole.verdicts.get(name) {
                Some(&verdict) if clean => Ok(whole.outcome(name, verdict)),
                _ => self.run_alone(executable, name, self.limit_of(name, groups)),
            })
            .collect()
    }

    /// The time limit of one test: the override, else its group's, else the default.
    fn limit_of(&self, name: &str, groups: &[&GroupSpec]) -> Duration {
        time_limit_of(self.time_limit, name, groups)
    }

    /// One test on its own: its logged verdict, or why it has none.
    fn run_alone(
        &self,
        executable: &Path,
        name: &str,
        limit: Duration,
    ) -> Result<TestOutcome, RunError> {
        let run = self.run_logged(executable, vec![name, "--exact"], limit)?;
        let verdict = match (run.verdicts.get(name), run.finished.ending) {
            (Some(&verdict), _) if run.ended_cleanly() => verdict,
            (_, Ending::TimedOut) => Verdict::TimedOut(limit.as_secs()),
            (_, Ending::Exited(status)) => Verdict::Crashed(status),
            (_, Ending::Cancelled) => return Err(RunError::Cancelled),
        };
        Ok(run.outcome(name, verdict))
    }

    /// Runs the binary with `args`, libtest writing its verdicts to a fresh log file.
    fn run_logged(
        &self,
        executable: &Path,
        args: Vec<&str>,
        limit: Duration,
    ) -> Result<LoggedRun, RunError> {
        let log = LogFile::create().map_err(RunError::Spawn)?;
        let mut command = self.test_binary(executable);
        command.args(args).arg("--logfile").arg(&log.0);
        let finished =
            run_bounded(command, &log.0, limit, self.cancel.as_ref()).map_err(RunError::Spawn)?;
        if finished.ending == Ending::Cancelled {
            return Err(RunError::Cancelled);
        }
        if finished.stderr.contains("Unrecognized option: 'logfile'") {
            return Err(RunError::NoVerdictLog);
        }
        Ok(LoggedRun {
            verdicts: parse_log(&std::fs::read_to_string(&log.0).unwrap_or_default()),
            captured: failure_output(&finished.stdout),
            finished,
        })
    }

    /// Builds the target and runs it (optionally filtered), parsing every test's outcome.
    pub fn run_tests(
        &self,
        target: &str,
        filter: Option<&str>,
    ) -> Result<Vec<TestOutcome>, RunError> {
        let executable = self.build(target)?;
        let listed = self.list_built(&executable)?;
        self.run_built(&executable, filter, &listed, &[])
    }
}

/// The override: [`TIME_LIMIT_ENV`] when it holds a positive whole number.
fn time_limit_from_env() -> Option<Duration> {
    std::env::var(TIME_LIMIT_ENV)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .filter(|seconds| *seconds > 0)
        .map(Duration::from_secs)
}

/// The time limit of test `name`: `overriding` when set, else the limit of the group whose
/// module holds it, else [`DEFAULT_TIME_LIMIT`].
fn time_limit_of(overriding: Option<Duration>, name: &str, groups: &[&GroupSpec]) -> Duration {
    overriding
        .or_else(|| {
            groups
                .iter()
                .find(|group| name.starts_with(&group.prefix()))
                .and_then(|group| group.timeout)
        })
        .unwrap_or(DEFAULT_TIME_LIMIT)
}

/// One run of a test binary: what libtest logged and how the process ended.
struct LoggedRun {
    verdicts: BTreeMap<String, Verdict>,
    /// Captured output of failed tests, from stdout: explanations only.
    captured: BTreeMap<String, String>,
    finished: Finished,
}

impl LoggedRun {
    /// Ended the way a finished libtest run ends: status 0 with no failure logged, 101 with one.
    fn ended_cleanly(&self) -> bool {
        let failed = self.verdicts.values().any(|v| *v == Verdict::Failed);
        matches!(
            (self.finished.ending, failed),
            (Ending::Exited(Status::Code(0)), false) | (Ending::Exited(Status::Code(101)), true)
        )
    }

    fn outcome(&self, name: &str, verdict: Verdict) -> TestOutcome {
        let output = match verdict {
            Verdict::Failed => self.captured.get(name).cloned().unwrap_or_default(),
            Verdict::Crashed(_) | Verdict::TimedOut(_) => self.finished.stderr.clone(),
            Verdict::Passed | Verdict::Ignored => String::new(),
        };
        TestOutcome {
            name: name.to_string(),
            verdict,
            output,
        }
    }
}

/// A verdict log in the temp directory, reserved under a fresh name and removed when dropped.
struct LogFile(PathBuf);

impl LogFile {
    fn create() -> std::io::Result<Self> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        static SWEEP: std::sync::Once = std::sync::Once::new();
        let dir = std::env::temp_dir();
        SWEEP.call_once(|| sweep_orphaned_logs(&dir, ORPHAN_AGE));
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("{LOG_PREFIX}{}-{n}.log", std::process::id()));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(_) => return Ok(LogFile(path)),
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(error) => return Err(error),
            }
        }
    }
}

impl Drop for LogFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Verdict logs are `course-verdicts-<pid>-<n>.log` in the temp dir.
const LOG_PREFIX: &str = "course-verdicts-";

/// How old a dead judge's log must be before another judge removes it: far longer than any
/// run, so a log whose writer only looks dead (it lives in another PID namespace, a
/// container sharing /tmp) is never taken from under it.
const ORPHAN_AGE: Duration = Duration::from_secs(60 * 60);

/// Removes the verdict logs in `dir` that killed judges left behind: a log is removed on
/// drop, which SIGKILL skips. Only logs whose process is gone and that are older than `age`.
fn sweep_orphaned_logs(dir: &Path, age: Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(owner) = entry.file_name().to_str().and_then(log_owner) else {
            continue;
        };
        let old = entry
            .metadata()
            .and_then(|metadata| metadata.modified())
            .ok()
            .and_then(|modified| modified.elapsed().ok())
            .is_some_and(|elapsed| elapsed >= age);
        if old && !is_running(owner) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The pid in a verdict log's name; `None` for any other file.
fn log_owner(name: &str) -> Option<u32> {
    let (pid, n) = name
        .strip_prefix(LOG_PREFIX)?
        .strip_suffix(".log")?
        .split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// The executable of test target `target` in cargo's JSON messages.
fn executable_of(messages: &str, target: &str) -> Option<PathBuf> {
    messages.lines().find_map(|line| {
        let message: serde_json::Value = serde_json::from_str(line).ok()?;
        let is_it = message["reason"] == "compiler-artifact" && message["target"]["name"] == target;
        is_it.then(|| message["executable"].as_str().map(PathBuf::from))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn only_old_logs_of_gone_processes_are_swept() {
        let dir = std::env::temp_dir().join(format!("course-sweep-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut finished = Command::new("true").spawn().unwrap();
        let gone = finished.id();
        finished.wait().unwrap();
        let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(2 * 60 * 60);
        let write = |name: &str, old: bool| {
            let file = std::fs::File::create(dir.join(name)).unwrap();
            if old {
                file.set_modified(two_hours_ago).unwrap();
            }
        };
        write(&format!("course-verdicts-{gone}-0.log"), true);
        write(&format!("course-verdicts-{gone}-1.log"), false);
        write(
            &format!("course-verdicts-{}-0.log", std::process::id()),
            true,
        );
        write(&format!("course-verdicts-{gone}.log"), true);
        sweep_orphaned_logs(&dir, ORPHAN_AGE);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        std::fs::remove_dir_all(&dir).unwrap();
        let mut expected = vec![
            format!("course-verdicts-{gone}-1.log"),
            format!("course-verdicts-{gone}.log"),
            format!("course-verdicts-{}-0.log", std::process::id()),
        ];
        expected.sort();
        assert_eq!(
            left, expected,
            "只清理进程已经不在、且超过一小时的判定日志；正在运行的和刚写的都留着，名字不对的文件不碰"
        );
    }

    fn group(name: &str, timeout: Option<u64>) -> GroupSpec {
        GroupSpec {
            name: name.into(),
            lab: None,
            tests: 1,
            summary: String::new(),
            timeout: timeout.map(Duration::from_secs),
        }
    }

    #[test]
    fn a_group_limit_applies_to_its_tests_and_the_override_beats_it() {
        let slow = group("slow", Some(120));
        let quick = group("quick", None);
        let groups = [&slow, &quick];
        assert_eq!(
            time_limit_of(None, "slow::a", &groups),
            Duration::from_secs(120),
            "清单里的 timeout 只管它自己那一组的测试"
        );
        assert_eq!(
            time_limit_of(None, "quick::a", &groups),
            DEFAULT_TIME_LIMIT,
            "没写 timeout 的组用默认时限"
        );
        assert_eq!(
            time_limit_of(None, "slowly::a", &groups),
            DEFAULT_TIME_LIMIT,
            "组靠完整的模块前缀认领测试，不靠名字的开头几个字"
        );
        assert_eq!(
            time_limit_of(Some(Duration::from_secs(5)), "slow::a", &groups),
            Duration::from_secs(5),
            "COURSE_TEST_TIMEOUT 压过清单"
        );
    }
}
