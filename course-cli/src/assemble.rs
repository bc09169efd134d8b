//! Pure assembly of workspaces as in-memory file sets.
//!
//! - reference N = base + overlays of every chapter up to N + their acceptance tests
//! - practice N  = reference of N's previous chapter + N's tests + N's non-edit files
//!   + N's skeleton + LEARNING.md + stamp (observe mode: reference N + LEARNING.md + stamp)
//!
//! Nothing here touches the disk; writing is `write`'s job, running is xtask's.

use std::collections::BTreeMap;
use std::fmt;

use crate::catalog::{Catalog, Chapter, Mode, Mutation, BASE_DIR};
use crate::files::{under, FileSet, HELD_OUT_DIR};
use crate::learning;
use crate::runner::{content_hash, Stamp, LEARNER_PACKAGE, STAMP_FILE};

/// The runner shared with every practice workspace's xtask.
const RUNNER_SOURCE: &str = include_str!("runner.rs");
/// Where the runner lands in a generated workspace.
pub const RUNNER_PATH: &str = "xtask/src/runner.rs";
pub const COURSE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Workspace-relative path → content.
pub type Snapshot = BTreeMap<String, Vec<u8>>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssembleError {
    UnknownChapter(String),
    MissingFile(String),
    NoBase,
    Mutation { name: String, reason: String },
}

impl fmt::Display for AssembleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssembleError::UnknownChapter(id) => write!(f, "课程数据中没有第 {id} 章"),
            AssembleError::MissingFile(path) => write!(f, "课程数据缺少文件 {path}"),
            AssembleError::NoBase => write!(f, "课程数据缺少基础工作区 {BASE_DIR}"),
            AssembleError::Mutation { name, reason } => write!(f, "变异 {name} 无法应用：{reason}"),
        }
    }
}

impl std::error::Error for AssembleError {}

/// Learner-crate path → workspace path.
pub fn crate_path(file: &str) -> String {
    format!("{LEARNER_PACKAGE}/{file}")
}

/// Workspace path of a chapter's acceptance tests.
pub fn test_path(test: &str) -> String {
    crate_path(&format!("tests/{test}"))
}

/// Workspace path of held-out tests, kept apart from the acceptance tests by name.
pub fn held_out_path(held_out: &str) -> String {
    crate_path(&format!("tests/held_out_{held_out}"))
}

fn read<'a>(data: &'a FileSet, path: &str) -> Result<&'a [u8], AssembleError> {
    data.get(path)
        .map(Vec::as_slice)
        .ok_or_else(|| AssembleError::MissingFile(path.to_string()))
}

fn chapter<'a>(catalog: &'a Catalog, id: &str) -> Result<&'a Chapter, AssembleError> {
    catalog
        .get(id)
        .ok_or_else(|| AssembleError::UnknownChapter(id.to_string()))
}

/// The base workspace: root manifest, lock file, cargo alias, xtask, empty learner crate.
fn base(data: &FileSet) -> Result<Snapshot, AssembleError> {
    let mut snapshot: Snapshot = under(data, BASE_DIR)
        .map(|(path, bytes)| {
            // A file literally named `.gitignore` would be ignored by tooling that honours it
            // while packaging, so the base stores it without the dot.
            let path = if path == "gitignore" {
                ".gitignore"
            } else {
                path
            };
            (path.to_string(), bytes.to_vec())
        })
        .collect();
    if snapshot.is_empty() {
        return Err(AssembleError::NoBase);
    }
    snapshot.insert(RUNNER_PATH.to_string(), RUNNER_SOURCE.as_bytes().to_vec());
    Ok(snapshot)
}

fn add_chapter_overlay(
    snapshot: &mut Snapshot,
    data: &FileSet,
    chapter: &Chapter,
    skeleton: bool,
) -> Result<(), AssembleError> {
    for file in &chapter.files {
        let source = if skeleton && chapter.edit.contains(file) {
            format!("{}/{file}", chapter.skeleton_dir())
        } else {
            format!("{}/{file}", chapter.dir())
        };
        snapshot.insert(crate_path(file), read(data, &source)?.to_vec());
    }
    let test = format!("tests/{}", chapter.test);
    snapshot.insert(test_path(&chapter.test), read(data, &test)?.to_vec());
    Ok(())
}

/// The code as it stands when chapter `id` is done, with every acceptance test up to it.
pub fn reference(catalog: &Catalog, data: &FileSet, id: &str) -> Result<Snapshot, AssembleError> {
    chapter(catalog, id)?;
    let mut snapshot = base(data)?;
    for step in catalog.chain(id) {
        add_chapter_overlay(&mut snapshot, data, step, false)?;
    }
    Ok(snapshot)
}

/// Reference `id` plus the held-out tests of every chapter up to it (instructor only).
pub fn reference_with_held_out(
    catalog: &Catalog,
    data: &FileSet,
    id: &str,
) -> Result<Snapshot, AssembleError> {
    let mut snapshot = reference(catalog, data, id)?;
    for step in catalog.chain(id) {
        if let Some(held_out) = &step.held_out {
            let source = format!("{HELD_OUT_DIR}/{held_out}");
            snapshot.insert(held_out_path(held_out), read(data, &source)?.to_vec());
        }
    }
    Ok(snapshot)
}

/// The workspace a learner receives for chapter `id`.
pub fn practice(catalog: &Catalog, data: &FileSet, id: &str) -> Result<Snapshot, AssembleError> {
    let target = chapter(catalog, id)?;
    let mut snapshot = match target.mode {
        // Observe mode: the finished code, nothing to rebuild.
        Mode::Observe => reference(catalog, data, id)?,
        Mode::Rebuild => {
            let mut snapshot = match &target.previous {
                Some(previous) => reference(catalog, data, previous)?,
                None => base(data)?,
            };
            add_chapter_overlay(&mut snapshot, data, target, true)?;
            snapshot
        }
    };
    add_stamp_and_guide(&mut snapshot, catalog, target, target.mode.key());
    let guide = format!("{}/README.md", target.dir());
    snapshot.insert(
        learning::GUIDE_FILE_NAME.to_string(),
        read(data, &guide)?.to_vec(),
    );
    Ok(snapshot)
}

/// A reference snapshot that also carries a stamp, so `cargo xtask test` works inside it.
pub fn instructor_snapshot(
    catalog: &Catalog,
    data: &FileSet,
    id: &str,
) -> Result<Snapshot, AssembleError> {
    let target = chapter(catalog, id)?;
    let mut snapshot = reference(catalog, data, id)?;
    let stamp = stamp_for(&snapshot, catalog, target, "reference");
    snapshot.insert(STAMP_FILE.to_string(), stamp_json(&stamp));
    Ok(snapshot)
}

fn stamp_for(snapshot: &Snapshot, catalog: &Catalog, target: &Chapter, mode: &str) -> Stamp {
    let chain = catalog.chain(&target.id);
    let injected = chain
        .iter()
        .map(|step| test_path(&step.test))
        .filter_map(|path| {
            let hash = content_hash(snapshot.get(&path)?);
            Some((path, hash))
        })
        .collect();
    Stamp {
        chapter: target.id.clone(),
        title: target.title.clone(),
        mode: mode.to_string(),
        course_version: COURSE_VERSION.to_string(),
        chapters: chain.iter().map(|step| step.tests()).collect(),
        injected,
    }
}

fn stamp_json(stamp: &Stamp) -> Vec<u8> {
    let mut json = serde_json::to_vec_pretty(stamp).expect("stamp serialises");
    json.push(b'\n');
    json
}

fn add_stamp_and_guide(snapshot: &mut Snapshot, catalog: &Catalog, target: &Chapter, mode: &str) {
    let stamp = stamp_for(snapshot, catalog, target, mode);
    snapshot.insert(STAMP_FILE.to_string(), stamp_json(&stamp));
    snapshot.insert(
        learning::FILE_NAME.to_string(),
        learning::render(catalog, target).into_bytes(),
    );
}

/// Applies a declared mutation to a snapshot; its `find` must occur exactly once.
pub fn apply_mutation(snapshot: &mut Snapshot, mutation: &Mutation) -> Result<(), AssembleError> {
    let path = crate_path(&mutation.file);
    let failure = |reason: String| AssembleError::Mutation {
        name: mutation.name.clone(),
        reason,
    };
    let bytes = snapshot
        .get(&path)
        .ok_or_else(|| failure(format!("{path} 不在快照中")))?;
    let text =
        String::from_utf8(bytes.clone()).map_err(|_| failure(format!("{path} 不是 UTF-8")))?;
    let occurrences = text.matches(&mutation.find).count();
    if occurrences != 1 {
        return Err(failure(format!(
            "find 片段在 {path} 中出现 {occurrences} 次，应恰好 1 次"
        )));
    }
    let mutated = text.replacen(&mutation.find, &mutation.replace, 1);
    snapshot.insert(path, mutated.into_bytes());
    Ok(())
}

/// Paths in a practice snapshot that give away chapter `id`'s answer: an edit file whose
/// content equals the reference, or any held-out test. Empty means answer-free.
pub fn answer_leaks(
    catalog: &Catalog,
    data: &FileSet,
    id: &str,
    practice: &Snapshot,
) -> Result<Vec<String>, AssembleError> {
    let target = chapter(catalog, id)?;
    let mut leaks = Vec::new();
    if target.mode == Mode::Rebuild {
        for file in &target.edit {
            let answer = read(data, &format!("{}/{file}", target.dir()))?;
            if practice.get(&crate_path(file)).map(Vec::as_slice) == Some(answer) {
                leaks.push(crate_path(file));
            }
        }
    }
    leaks.extend(
        practice
            .keys()
            .filter(|path| path.contains("held_out") || path.starts_with(".git/"))
            .cloned(),
    );
    Ok(leaks)
}
