//! The one place that starts cargo for a chapter's tests.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::judge::GroupReport;
use crate::libtest::{parse_test_list, parse_test_run, TestOutcome};
use crate::spec::{ChapterTests, GroupSpec, LEARNER_PACKAGE};

/// Why the groups could not be judged at all.
#[derive(Debug)]
pub enum RunError {
    /// cargo could not be started.
    Spawn(std::io::Error),
    /// The test target did not build. Holds cargo's diagnostics, or nothing when cargo already
    /// printed them to the terminal.
    Build(String),
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
}

impl CargoRunner {
    pub fn new(workspace: PathBuf) -> Self {
        CargoRunner {
            workspace,
            target_dir: None,
            show_build: false,
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
        let mut outcomes = self.run_built(&executable, filter.as_deref())?;
        // libtest reports in completion order; sorted, "the first failure" is the same every run.
        outcomes.sort_by(|left, right| left.name.cmp(&right.name));
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

    fn run_built(
        &self,
        executable: &Path,
        filter: Option<&str>,
    ) -> Result<Vec<TestOutcome>, RunError> {
        let mut command = self.test_binary(executable);
        if let Some(filter) = filter {
            command.arg(filter);
        }
        let output = command.output().map_err(RunError::Spawn)?;
        Ok(parse_test_run(&String::from_utf8_lossy(&output.stdout)))
    }

    /// Builds the target and runs it (optionally filtered), parsing every test's outcome.
    pub fn run_tests(
        &self,
        target: &str,
        filter: Option<&str>,
    ) -> Result<Vec<TestOutcome>, RunError> {
        let executable = self.build(target)?;
        self.run_built(&executable, filter)
    }
}

/// The executable of test target `target` in cargo's JSON messages.
fn executable_of(messages: &str, target: &str) -> Option<PathBuf> {
    messages.lines().find_map(|line| {
        let message: serde_json::Value = serde_json::from_str(line).ok()?;
        let is_it = message["reason"] == "compiler-artifact" && message["target"]["name"] == target;
        is_it.then(|| message["executable"].as_str().map(PathBuf::from))?
    })
}
