//! The one place that starts cargo for a chapter's tests.

use std::fmt;
use std::path::PathBuf;
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

    /// `cargo <subcommand> --locked …` in the workspace, with the course's environment.
    pub fn command(&self, subcommand: &str) -> Command {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(cargo);
        command
            .current_dir(&self.workspace)
            .arg(subcommand)
            .arg("--locked");
        if let Some(target_dir) = &self.target_dir {
            command.env("CARGO_TARGET_DIR", target_dir);
        }
        // A learner's RUSTFLAGS (say `-D warnings`) must not decide the course's verdicts.
        command.env_remove("RUSTFLAGS");
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
        if self.show_build {
            self.build(&chapter.target)?;
        }
        let listed = self.list_tests(&chapter.target)?;
        let filter = match groups.as_slice() {
            [single] => Some(single.prefix()),
            _ => None,
        };
        let outcomes = self.run_tests(&chapter.target, filter.as_deref())?;
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

    /// Builds the test target with cargo's progress on the terminal.
    pub fn build(&self, target: &str) -> Result<(), RunError> {
        let status = self
            .command("test")
            .args(["--no-run", "-p", LEARNER_PACKAGE, "--test", target])
            .stdout(Stdio::null())
            .status()
            .map_err(RunError::Spawn)?;
        if status.success() {
            Ok(())
        } else {
            Err(RunError::Build(String::new()))
        }
    }

    /// Names of every test in the target.
    pub fn list_tests(&self, target: &str) -> Result<Vec<String>, RunError> {
        let output = self
            .command("test")
            .args(["--quiet", "-p", LEARNER_PACKAGE, "--test", target])
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
        &self,
        target: &str,
        filter: Option<&str>,
    ) -> Result<Vec<TestOutcome>, RunError> {
        let mut command = self.command("test");
        command.args([
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
}
