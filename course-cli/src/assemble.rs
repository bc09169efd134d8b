//! Pure assembly of workspaces as in-memory file sets. Nothing here touches the disk.
//!
//! - reference N  = base + the files of every chapter in N's chain (markers stripped) + their tests
//! - lab state    = reference of N's previous chapter + N's files, where each edit file keeps the
//!   regions of the solved Labs and stubs the rest, + the tests of N's chain
//! - practice N   = the lab state with no Lab solved + LEARNING.md, CHAPTER.md, stamp
//!   (observe mode: reference N + the same documents)

use std::collections::BTreeMap;
use std::fmt;

use course_runner::practice::PRISTINE_DIR;
use course_runner::{content_hash, LabId, Stamp, STAMP_FILE};

use crate::catalog::{Catalog, Chapter, Kind, Mistake, Mode, BASE_DIR};
use crate::files::{under, FileSet};
use crate::learning;
use crate::paths::{CrateFile, RepoPath, WorkspacePath};
use crate::regions::RegionSource;

pub const COURSE_VERSION: &str = env!("CARGO_PKG_VERSION");
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
    MissingFile(RepoPath),
    NoBase,
    Regions { path: RepoPath, problem: String },
    Mistake { name: String, reason: String },
}

impl fmt::Display for AssembleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssembleError::MissingFile(path) => write!(f, "课程数据缺少文件 {path}"),
            AssembleError::NoBase => write!(f, "课程数据缺少基础工作区 {BASE_DIR}"),
            AssembleError::Regions { path, problem } => {
                write!(f, "{path} 的 Lab 区域有误：{problem}")
            }
            AssembleError::Mistake { name, reason } => {
                write!(f, "错误实现 {name} 无法应用：{reason}")
            }
        }
    }
}

impl std::error::Error for AssembleError {}

/// Which Labs of the practised chapter count as solved in a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Solved {
    None,
    /// Every Lab before this one: the state a learner has when starting it.
    Before(LabId),
}

impl Solved {
    fn covers(self, lab: LabId) -> bool {
        match self {
            Solved::None => false,
            Solved::Before(first_open) => lab < first_open,
        }
    }
}

fn read<'a>(data: &'a FileSet, path: &RepoPath) -> Result<&'a [u8], AssembleError> {
    data.get(path.as_str())
        .map(Vec::as_slice)
        .ok_or_else(|| AssembleError::MissingFile(path.clone()))
}

/// The regions of one reference source.
pub fn region_source(data: &FileSet, path: &RepoPath) -> Result<RegionSource, AssembleError> {
    let text = String::from_utf8_lossy(read(data, path)?).into_owned();
    RegionSource::parse(&text).map_err(|error| AssembleError::Regions {
        path: path.clone(),
        problem: error.to_string(),
    })
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

/// One chapter file as a finished chapter has it: markers stripped from edit files.
fn reference_file(
    data: &FileSet,
    chapter: &Chapter,
    file: &CrateFile,
) -> Result<Vec<u8>, AssembleError> {
    let path = chapter.source(file);
    if chapter.is_edit(file) && file.is_rust() {
        Ok(region_source(data, &path)?.reference().into_bytes())
    } else {
        Ok(read(data, &path)?.to_vec())
    }
}

/// Lays the chapter's workspace overlay (root manifest, lock file, added packages) over the
/// workspace root. Later chapters in a chain overlay earlier ones, file by file.
fn add_overlay(snapshot: &mut Snapshot, data: &FileSet, chapter: &Chapter) {
    let dir = chapter.overlay_dir();
    for (path, bytes) in under(data, &dir) {
        snapshot.insert(WorkspacePath::new(path), bytes.to_vec());
    }
}

/// Where overlays put the packages they add; each one's directory is its package name.
pub const PACKAGES_DIR: &str = "crates";

/// The packages a snapshot carries besides the learner crate and the xtask (`pi-http`, `pi`,
/// …), in name order.
pub fn added_packages(snapshot: &Snapshot) -> Vec<String> {
    let mut names = snapshot
        .keys()
        .filter_map(|path| {
            let rest = path
                .as_str()
                .strip_prefix(PACKAGES_DIR)?
                .strip_prefix('/')?;
            let name = rest.strip_suffix("/Cargo.toml")?;
            (!name.contains('/')).then(|| name.to_string())
        })
        .collect::<Vec<_>>();
    // Path order puts `pi-http` before `pi` (`-` sorts before `/`); names read better sorted.
    names.sort();
    names
}

fn add_tests(
    snapshot: &mut Snapshot,
    data: &FileSet,
    chapter: &Chapter,
) -> Result<(), AssembleError> {
    let path = WorkspacePath::new(chapter.tests().test_file());
    snapshot.insert(path, read(data, &chapter.test_source())?.to_vec());
    Ok(())
}

/// The code as it stands when `chapter` is done, with every acceptance test of its chain.
pub fn reference(
    catalog: &Catalog,
    data: &FileSet,
    chapter: &Chapter,
) -> Result<Snapshot, AssembleError> {
    let mut snapshot = base(data)?;
    for step in catalog.chain(chapter) {
        add_overlay(&mut snapshot, data, step);
        for file in &step.files {
            snapshot.insert(file.in_workspace(), reference_file(data, step, file)?);
        }
        add_tests(&mut snapshot, data, step)?;
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

/// Reference plus the held-out tests of the whole chain (instructor only).
pub fn reference_with_held_out(
    catalog: &Catalog,
    data: &FileSet,
    chapter: &Chapter,
) -> Result<Snapshot, AssembleError> {
    let mut snapshot = reference(catalog, data, chapter)?;
    for step in catalog.chain(chapter) {
        snapshot.insert(
            held_out_path(step),
            read(data, &step.held_out_source())?.to_vec(),
        );
    }
    Ok(snapshot)
}

/// A rebuild chapter's workspace with the Labs `solved` covers taken from the reference and
/// every other Lab region stubbed.
pub fn lab_state(
    catalog: &Catalog,
    data: &FileSet,
    chapter: &Chapter,
    solved: Solved,
) -> Result<Snapshot, AssembleError> {
    let mut snapshot = match catalog.previous(chapter) {
        Some(previous) => reference(catalog, data, previous)?,
        None => base(data)?,
    };
    add_overlay(&mut snapshot, data, chapter);
    for file in &chapter.files {
        let bytes = if chapter.is_edit(file) && file.is_rust() {
            region_source(data, &chapter.source(file))?
                .learner_file(|lab| solved.covers(lab))
                .into_bytes()
        } else {
            reference_file(data, chapter, file)?
        };
        snapshot.insert(file.in_workspace(), bytes);
    }
    add_tests(&mut snapshot, data, chapter)?;
    Ok(snapshot)
}

/// The workspace a learner receives for `chapter`.
pub fn practice(
    catalog: &Catalog,
    data: &FileSet,
    chapter: &Chapter,
) -> Result<Snapshot, AssembleError> {
    let mut snapshot = match chapter.kind {
        Kind::Observe { .. } => reference(catalog, data, chapter)?,
        Kind::Rebuild { .. } => lab_state(catalog, data, chapter, Solved::None)?,
    };
    add_documents(&mut snapshot, catalog, data, chapter)?;
    stamp(
        &mut snapshot,
        catalog,
        chapter,
        chapter.mode().key().to_string(),
    );
    Ok(snapshot)
}

/// A working practice workspace in which the Labs before `lab` are done: what a learner has
/// when starting `lab` (`cargo xtask snapshot 06 <dir> --solved 6.2` writes the 6.3 state).
pub fn practice_solved_before(
    catalog: &Catalog,
    data: &FileSet,
    chapter: &Chapter,
    lab: LabId,
) -> Result<Snapshot, AssembleError> {
    let mut snapshot = lab_state(catalog, data, chapter, Solved::Before(lab))?;
    add_documents(&mut snapshot, catalog, data, chapter)?;
    stamp(
        &mut snapshot,
        catalog,
        chapter,
        format!("solved before Lab {lab}"),
    );
    Ok(snapshot)
}

/// A reference snapshot that carries a stamp, so `cargo xtask test` works inside it.
pub fn instructor_snapshot(
    catalog: &Catalog,
    data: &FileSet,
    chapter: &Chapter,
) -> Result<Snapshot, AssembleError> {
    let mut snapshot = reference(catalog, data, chapter)?;
    stamp(&mut snapshot, catalog, chapter, "reference".to_string());
    Ok(snapshot)
}

fn add_documents(
    snapshot: &mut Snapshot,
    catalog: &Catalog,
    data: &FileSet,
    chapter: &Chapter,
) -> Result<(), AssembleError> {
    let learning = learning::render(catalog, data, chapter, snapshot)?;
    snapshot.insert(
        WorkspacePath::new(learning::FILE_NAME),
        learning.into_bytes(),
    );
    snapshot.insert(
        WorkspacePath::new(learning::GUIDE_FILE_NAME),
        read(data, &chapter.guide())?.to_vec(),
    );
    Ok(())
}

/// Writes the stamp and the pristine copies of the injected tests.
fn stamp(snapshot: &mut Snapshot, catalog: &Catalog, chapter: &Chapter, state: String) {
    let chain = catalog.chain(chapter);
    let mut injected = BTreeMap::new();
    for step in &chain {
        let tests = step.tests();
        let path = tests.test_file();
        if let Some(bytes) = snapshot.get(path.as_str()).cloned() {
            injected.insert(path, content_hash(&bytes));
            let pristine = WorkspacePath::new(format!("{PRISTINE_DIR}/{}.rs", tests.target));
            snapshot.insert(pristine, bytes);
        }
    }
    let stamp = Stamp {
        format: course_runner::spec::STAMP_FORMAT,
        chapter: chapter.id,
        title: chapter.title.clone(),
        state,
        course_version: COURSE_VERSION.to_string(),
        chapters: chain.iter().map(|step| step.tests()).collect(),
        injected,
    };
    let mut json = serde_json::to_vec_pretty(&stamp.to_json()).expect("a stamp always serialises");
    json.push(b'\n');
    snapshot.insert(WorkspacePath::new(STAMP_FILE), json);
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
    data: &FileSet,
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
    for file in chapter.edit() {
        let source = region_source(data, &chapter.source(file))?;
        for region in source.regions() {
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
