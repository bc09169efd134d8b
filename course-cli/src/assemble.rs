//! Pure assembly of workspaces as in-memory file sets. Nothing here touches the disk.
//!
//! A workspace is the base (`chapters/_crate` plus the carried runner and watch crates),
//! then, for every chapter of the plan's chain in order: its overlay, its files, its tests.
//! Earlier chapters give their reference (markers stripped); the practised chapter gives its
//! edit files as the plan's [`Solved`] says. The learner crate's `src/lib.rs` and, with added
//! packages, the root `Cargo.toml` are derived (see [`crate::derive`]). The documents and the
//! stamp that make a workspace a learner's are laid on top by [`crate::handout`].

use std::collections::BTreeMap;
use std::fmt;

use crate::catalog::{Chapter, Mistake, Mode, BASE_DIR, CRATE_ROOT, WORKSPACE_MANIFEST};
use crate::derive::{self, ManifestError};
use crate::files::{under, FileSet};
use crate::paths::{CrateFile, RepoPath, WorkspacePath};
use crate::plan::{Solved, WorkspacePlan};
use crate::sources::{SourceError, Sources};

/// Crates of the course repository that every workspace carries: (source dir, workspace dir).
/// They are siblings in both places, so their relative path dependencies hold in both.
pub const CARRIED_CRATES: &[(&str, &str)] = &[
    ("course-cli/runner", "xtask/runner"),
    ("course-cli/watch", "xtask/watch"),
];

/// Workspace-relative path → content.
pub type Snapshot = BTreeMap<WorkspacePath, Vec<u8>>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssembleError {
    Source(SourceError),
    NoBase,
    Manifest(ManifestError),
    Mistake { name: String, reason: String },
}

impl fmt::Display for AssembleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssembleError::Source(error) => error.fmt(f),
            AssembleError::NoBase => write!(f, "课程数据缺少基础工作区 {BASE_DIR}"),
            AssembleError::Manifest(error) => error.fmt(f),
            AssembleError::Mistake { name, reason } => {
                write!(f, "错误实现 {name} 无法应用：{reason}")
            }
        }
    }
}

impl std::error::Error for AssembleError {}

impl From<SourceError> for AssembleError {
    fn from(error: SourceError) -> Self {
        AssembleError::Source(error)
    }
}

impl From<ManifestError> for AssembleError {
    fn from(error: ManifestError) -> Self {
        AssembleError::Manifest(error)
    }
}

/// The base workspace's root manifest, inside the course data.
fn base_manifest() -> String {
    format!("{BASE_DIR}/{}", WORKSPACE_MANIFEST)
}

/// The base workspace: root manifest, lock file, cargo alias, the practice xtask with its
/// runner and watch crates, the empty learner crate.
fn base(data: &FileSet) -> Result<Snapshot, AssembleError> {
    let mut snapshot: Snapshot = under(data, BASE_DIR)
        .map(|(path, bytes)| {
            // Stored without the dot, so tooling that honours `.gitignore` still packages it.
            let path = if path == "gitignore" {
                ".gitignore"
            } else {
                path
            };
            (WorkspacePath::new(path), bytes.to_vec())
        })
        .collect();
    if snapshot.is_empty() {
        return Err(AssembleError::NoBase);
    }
    for (source, destination) in CARRIED_CRATES {
        for (path, bytes) in under(data, source) {
            snapshot.insert(
                WorkspacePath::new(format!("{destination}/{path}")),
                bytes.to_vec(),
            );
        }
    }
    Ok(snapshot)
}

/// The code and acceptance tests of the plan's workspace.
pub fn workspace(sources: &Sources, plan: &WorkspacePlan) -> Result<Snapshot, AssembleError> {
    let data = sources.data();
    let mut snapshot = base(data)?;
    for step in &plan.chain {
        // Laid over the workspace root; a later chapter's file replaces an earlier one's.
        for (path, bytes) in under(data, &step.overlay_dir()) {
            snapshot.insert(WorkspacePath::new(path), bytes.to_vec());
        }
        let practised = step.id == plan.chapter.id && plan.solved != Solved::All;
        for file in &step.files {
            let bytes = if practised && step.is_edit(file) && file.is_rust() {
                sources
                    .regions(step, file)?
                    .learner_file(|lab| plan.solved.covers(lab))
                    .into_bytes()
            } else {
                sources.reference(step, file)?
            };
            snapshot.insert(file.in_workspace(), bytes);
        }
        let tests = WorkspacePath::new(step.tests().test_file());
        snapshot.insert(tests, sources.read(&step.test_source())?.to_vec());
    }
    snapshot.insert(
        CrateFile::new(CRATE_ROOT).in_workspace(),
        derive::crate_root(&plan.chain).into_bytes(),
    );
    if !plan.packages.is_empty() {
        let base = String::from_utf8_lossy(sources.read(&RepoPath::new(base_manifest()))?);
        snapshot.insert(
            WorkspacePath::new(WORKSPACE_MANIFEST),
            derive::workspace_manifest(&base, &plan.packages)?.into_bytes(),
        );
    }
    Ok(snapshot)
}

/// Workspace path of a chapter's held-out tests, named apart from the acceptance tests.
pub fn held_out_path(chapter: &Chapter) -> WorkspacePath {
    CrateFile::new(format!("tests/{}.rs", held_out_target(chapter))).in_workspace()
}

/// The held-out test target name inside a workspace.
pub fn held_out_target(chapter: &Chapter) -> String {
    format!("held_out_{}", chapter.test_target())
}

/// Adds the held-out tests of the plan's whole chain (instructor only).
pub fn add_held_out(
    sources: &Sources,
    plan: &WorkspacePlan,
    snapshot: &mut Snapshot,
) -> Result<(), AssembleError> {
    for step in &plan.chain {
        snapshot.insert(
            held_out_path(step),
            sources.read(&step.held_out_source())?.to_vec(),
        );
    }
    Ok(())
}

/// Applies one entry of the mistake catalogue; its `find` must occur exactly once.
pub fn apply_mistake(snapshot: &mut Snapshot, mistake: &Mistake) -> Result<(), AssembleError> {
    let path = mistake.file.in_workspace();
    let failure = |reason: String| AssembleError::Mistake {
        name: mistake.name.clone(),
        reason,
    };
    let bytes = snapshot
        .get(&path)
        .ok_or_else(|| failure(format!("{path} 不在快照中")))?;
    let text =
        String::from_utf8(bytes.clone()).map_err(|_| failure(format!("{path} 不是 UTF-8")))?;
    let occurrences = text.matches(&mistake.find).count();
    if occurrences != 1 {
        return Err(failure(format!(
            "find 片段在 {path} 中出现 {occurrences} 次，应恰好 1 次"
        )));
    }
    snapshot.insert(
        path,
        text.replacen(&mistake.find, &mistake.replace, 1)
            .into_bytes(),
    );
    Ok(())
}

/// Region bodies shorter than this (whitespace removed) are too generic to count as a leak:
/// `&self.tools` may legitimately appear in the skeleton.
const LEAK_MIN_CHARS: usize = 24;

fn squeeze(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Why a practice snapshot gives away an answer: a region body of the practised chapter found
/// in one of its files, a held-out test, or git history. Empty means answer-free.
pub fn answer_leaks(
    sources: &Sources,
    chapter: &Chapter,
    practice: &Snapshot,
) -> Result<Vec<String>, AssembleError> {
    let mut leaks: Vec<String> = practice
        .keys()
        .filter(|path| path.as_str().contains("held_out") || path.as_str().starts_with(".git/"))
        .map(|path| format!("{path} 不应出现在练习目录"))
        .collect();
    if chapter.mode() == Mode::Observe {
        return Ok(leaks);
    }
    let practice_text: Vec<(&WorkspacePath, String)> = practice
        .iter()
        .filter(|(path, _)| path.as_str().ends_with(".rs") || path.as_str().ends_with(".md"))
        .map(|(path, bytes)| (path, squeeze(&String::from_utf8_lossy(bytes))))
        .collect();
    for file in chapter.edit().iter().filter(|file| file.is_rust()) {
        for region in sources.regions(chapter, file)?.regions() {
            let body = squeeze(&region.body().join("\n"));
            if body.chars().count() < LEAK_MIN_CHARS {
                continue;
            }
            for (path, text) in &practice_text {
                if text.contains(&body) {
                    leaks.push(format!(
                        "{path} 含有 Lab {} {} 的答案（{}:{}）",
                        region.lab,
                        region.name,
                        chapter.source(file),
                        region.line
                    ));
                }
            }
        }
    }
    Ok(leaks)
}
