//! The course manifest, `chapters/course.toml`, read into one ordered catalog, plus each
//! chapter's mistake catalogue, `chapters/NN-slug/mistakes.toml`.
//!
//! Pure: it reads a [`FileSet`], never the disk, so the embedded binary and a checkout are
//! judged by the same code. Everything derivable — test file, group prefix, Lab number and
//! marker, chapter directory — is derived, not written in the manifest.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use course_runner::{ChapterId, ChapterTests, GroupSpec, LabId};

use crate::files::{FileSet, HELD_OUT_DIR};
use crate::paths::{CrateFile, RepoPath, WorkspacePath};

/// The manifest, relative to the repository root.
pub const MANIFEST: &str = "chapters/course.toml";
/// The format this engine reads.
pub const MANIFEST_FORMAT: u32 = 1;
/// The base learner workspace every chapter starts from.
pub const BASE_DIR: &str = "chapters/_crate";
/// Inside a chapter directory: files laid over the workspace root from that chapter on (the
/// packages it adds, such as `crates/pi`, and the `Cargo.lock` of the member set they make).
pub const OVERLAY_DIR: &str = "workspace";
/// Where overlays put the packages they add; each one's directory is its package name.
pub const PACKAGES_DIR: &str = "crates";
/// The learner crate's root: derived for every workspace, never written (see `derive`).
pub const CRATE_ROOT: &str = "src/lib.rs";
/// The workspace root manifest: derived from the base's when overlays add packages.
pub const WORKSPACE_MANIFEST: &str = "Cargo.toml";
/// The lock file an overlay carries for its member set (written by `cargo xtask lock NN`).
pub const LOCK_FILE: &str = "Cargo.lock";
/// A chapter's mistake catalogue, inside its directory.
pub const MISTAKES_FILE: &str = "mistakes.toml";

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Read and run finished code, predict, break it on purpose.
    Observe,
    /// Rebuild the chapter's files from a generated skeleton, Lab by Lab.
    Rebuild,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Observe => "观察",
            Mode::Rebuild => "重建",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Mode::Observe => "observe",
            Mode::Rebuild => "rebuild",
        }
    }
}

/// What kind of chapter, with exactly the fields that kind has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Runs the finished code of `shows` (an earlier rebuild chapter) plus its own files.
    Observe { shows: ChapterId },
    /// The learner writes `edit`, one Lab per group.
    Rebuild { edit: Vec<CrateFile> },
}

/// A realistic wrong implementation, written as a small edit of the reference, that the
/// named group must reject with a failure containing `expect`.
#[derive(Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Mistake {
    pub name: String,
    pub group: String,
    pub description: String,
    pub file: CrateFile,
    pub find: String,
    pub replace: String,
    pub expect: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MistakesFile {
    #[serde(default)]
    mistake: Vec<Mistake>,
}

/// One chapter as the manifest declares it, with everything derivable derived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chapter {
    pub id: ChapterId,
    pub slug: String,
    pub title: String,
    /// Files the chapter adds or replaces in the learner crate.
    pub files: Vec<CrateFile>,
    pub kind: Kind,
    /// In order; in a rebuild chapter group k is Lab N.k.
    pub groups: Vec<GroupSpec>,
    pub mistakes: Vec<Mistake>,
    /// Files an earlier chapter also carries that this chapter rewrites on purpose, so they
    /// need not contain the earlier version's lines (`crates/pi/src/main.rs`).
    pub rewrites: Vec<WorkspacePath>,
    /// The chapter's overlay, relative to its `workspace/` directory, in path order.
    pub overlay: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    group: String,
    tests: usize,
    summary: String,
    /// Read as any TOML value so that a wrong one (`"90"`, `-1`, `1.5`) gets the course's own
    /// Chinese line instead of the TOML parser's English one.
    timeout: Option<toml::Value>,
}

/// The longest per-group time limit the manifest may ask for, in seconds. Anything longer is
/// not a test a learner should wait for.
pub const MAX_GROUP_TIMEOUT: u64 = 600;

/// A manifest value echoed back in an error, roughly as it was written.
fn shown_value(value: &toml::Value) -> String {
    match value {
        toml::Value::Integer(number) => number.to_string(),
        toml::Value::Float(number) => number.to_string(),
        toml::Value::Boolean(flag) => flag.to_string(),
        toml::Value::String(text) => format!("{text:?}"),
        other => other.type_str().to_string(),
    }
}

/// A group's `timeout`: whole seconds, 1 to [`MAX_GROUP_TIMEOUT`].
fn group_timeout(value: &toml::Value) -> Option<Duration> {
    value
        .as_integer()
        .and_then(|seconds| u64::try_from(seconds).ok())
        .filter(|seconds| (1..=MAX_GROUP_TIMEOUT).contains(seconds))
        .map(Duration::from_secs)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChapter {
    #[serde(deserialize_with = "chapter_id")]
    id: ChapterId,
    slug: String,
    title: String,
    mode: Mode,
    files: Vec<CrateFile>,
    edit: Option<Vec<CrateFile>>,
    #[serde(default, deserialize_with = "optional_chapter_id")]
    shows: Option<ChapterId>,
    labs: Option<Vec<RawGroup>>,
    groups: Option<Vec<RawGroup>>,
    #[serde(default)]
    rewrites: Vec<WorkspacePath>,
}

/// `"06"` in the manifest, read with the one chapter-id rule.
fn chapter_id<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<ChapterId, D::Error> {
    let text = String::deserialize(deserializer)?;
    text.parse().map_err(serde::de::Error::custom)
}

fn optional_chapter_id<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<ChapterId>, D::Error> {
    chapter_id(deserializer).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    format: u32,
    chapter: Vec<RawChapter>,
}

impl RawChapter {
    fn into_chapter(self) -> Result<Chapter, CatalogError> {
        let id = self.id;
        let (kind, groups, with_labs) =
            match (self.mode, self.edit, self.labs, self.shows, self.groups) {
                (Mode::Rebuild, Some(edit), Some(labs), None, None) => {
                    (Kind::Rebuild { edit }, labs, true)
                }
                (Mode::Observe, None, None, Some(shows), Some(groups)) => {
                    (Kind::Observe { shows }, groups, false)
                }
                (mode, ..) => return Err(CatalogError::FieldsForMode { chapter: id, mode }),
            };
        let groups = groups
            .into_iter()
            .enumerate()
            .map(|(index, raw)| {
                let index = u8::try_from(index + 1).map_err(|_| CatalogError::TooManyLabs(id))?;
                let timeout = match &raw.timeout {
                    None => None,
                    Some(value) => {
                        Some(
                            group_timeout(value).ok_or_else(|| CatalogError::BadTimeout {
                                chapter: id,
                                group: raw.group.clone(),
                                found: shown_value(value),
                            })?,
                        )
                    }
                };
                Ok(GroupSpec {
                    name: raw.group,
                    lab: with_labs.then(|| id.lab(index)),
                    tests: raw.tests,
                    summary: raw.summary,
                    timeout,
                })
            })
            .collect::<Result<_, CatalogError>>()?;
        Ok(Chapter {
            id,
            slug: self.slug,
            title: self.title,
            files: self.files,
            kind,
            groups,
            mistakes: Vec::new(),
            rewrites: self.rewrites,
            overlay: Vec::new(),
        })
    }
}

impl Chapter {
    pub fn mode(&self) -> Mode {
        match self.kind {
            Kind::Observe { .. } => Mode::Observe,
            Kind::Rebuild { .. } => Mode::Rebuild,
        }
    }

    /// Files the learner writes (none in an observe chapter).
    pub fn edit(&self) -> &[CrateFile] {
        match &self.kind {
            Kind::Rebuild { edit } => edit,
            Kind::Observe { .. } => &[],
        }
    }

    pub fn is_edit(&self, file: &CrateFile) -> bool {
        self.edit().contains(file)
    }

    /// `chapters/06-tool-contract`
    pub fn dir(&self) -> String {
        format!("chapters/{}-{}", self.id, self.slug)
    }

    /// `chapters/08-coding-tools/workspace`: laid over the workspace root from this chapter on.
    pub fn overlay_dir(&self) -> String {
        format!("{}/{OVERLAY_DIR}", self.dir())
    }

    /// The packages this chapter's overlay adds (`crates/<name>/Cargo.toml`), in path order.
    pub fn packages(&self) -> impl Iterator<Item = String> + '_ {
        self.overlay.iter().filter_map(|path| {
            let rest = path.strip_prefix(PACKAGES_DIR)?.strip_prefix('/')?;
            let name = rest.strip_suffix("/Cargo.toml")?;
            (!name.contains('/')).then(|| name.to_string())
        })
    }

    /// `skeletons/06-tool-contract`
    pub fn skeleton_dir(&self) -> String {
        format!("skeletons/{}-{}", self.id, self.slug)
    }

    /// `06_tool_contract`: the test target, in the course and in every workspace.
    pub fn test_target(&self) -> String {
        format!("{}_{}", self.id, self.slug.replace('-', "_"))
    }

    /// `tests/06_tool_contract.rs`
    pub fn test_source(&self) -> RepoPath {
        RepoPath::new(format!("tests/{}.rs", self.test_target()))
    }

    /// `tests/held-out/06_tool_contract.rs`
    pub fn held_out_source(&self) -> RepoPath {
        RepoPath::new(format!("{HELD_OUT_DIR}/{}.rs", self.test_target()))
    }

    /// The reference source of one of the chapter's files.
    pub fn source(&self, file: &CrateFile) -> RepoPath {
        RepoPath::join(&self.dir(), file.as_str())
    }

    pub fn guide(&self) -> RepoPath {
        RepoPath::join(&self.dir(), "README.md")
    }

    pub fn labs(&self) -> impl Iterator<Item = (LabId, &GroupSpec)> {
        self.groups.iter().filter_map(|g| g.lab.map(|lab| (lab, g)))
    }

    pub fn group_of_lab(&self, lab: LabId) -> Option<&GroupSpec> {
        self.groups.iter().find(|group| group.lab == Some(lab))
    }

    pub fn tests(&self) -> ChapterTests {
        ChapterTests {
            id: self.id,
            title: self.title.clone(),
            target: self.test_target(),
            groups: self.groups.clone(),
        }
    }
}

/// Why the manifest could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogError {
    Missing,
    Unreadable {
        path: String,
        reason: String,
    },
    Format(u32),
    DuplicateId(ChapterId),
    UnknownShows {
        chapter: ChapterId,
        shows: ChapterId,
    },
    /// A rebuild chapter needs `edit` and `labs` only; an observe chapter `shows` and `groups`.
    FieldsForMode {
        chapter: ChapterId,
        mode: Mode,
    },
    TooManyLabs(ChapterId),
    /// A group's `timeout` is not a whole number of seconds in range.
    BadTimeout {
        chapter: ChapterId,
        group: String,
        found: String,
    },
}

impl fmt::Display for CatalogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CatalogError::Missing => write!(f, "课程数据缺少清单 {MANIFEST}"),
            CatalogError::Unreadable { path, reason } => {
                write!(f, "{path} 无法解析：{}", reason.trim().replace('\n', " "))
            }
            CatalogError::Format(found) => write!(
                f,
                "{MANIFEST} 的格式版本是 {found}，本工具只认识 {MANIFEST_FORMAT}"
            ),
            CatalogError::DuplicateId(id) => write!(f, "{MANIFEST} 中章节编号 {id} 重复"),
            CatalogError::FieldsForMode {
                chapter,
                mode: Mode::Rebuild,
            } => write!(
                f,
                "{MANIFEST}：第 {chapter} 章（rebuild）需要 edit 与 labs，不能有 shows 与 groups"
            ),
            CatalogError::FieldsForMode {
                chapter,
                mode: Mode::Observe,
            } => write!(
                f,
                "{MANIFEST}：第 {chapter} 章（observe）需要 shows 与 groups，不能有 edit 与 labs"
            ),
            CatalogError::TooManyLabs(chapter) => {
                write!(f, "{MANIFEST}：第 {chapter} 章的 Lab 太多")
            }
            CatalogError::BadTimeout {
                chapter,
                group,
                found,
            } => write!(
                f,
                "{MANIFEST}：第 {chapter} 章测试组 {group} 的 timeout = {} 不对：要写 1 到 {MAX_GROUP_TIMEOUT} 之间的整数秒数",
                course_runner::id::one_line(found, 24)
            ),
            CatalogError::UnknownShows { chapter, shows } => write!(
                f,
                "第 {chapter} 章的 shows = \"{shows}\" 不是它之前的重建章节"
            ),
        }
    }
}

impl std::error::Error for CatalogError {}

/// Why a chapter argument was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChapterIdError {
    Malformed {
        error: course_runner::IdError,
        known: Vec<String>,
    },
    Unknown {
        id: ChapterId,
        known: Vec<String>,
    },
}

impl fmt::Display for ChapterIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChapterIdError::Malformed { error, known } => {
                write!(f, "{error}；可选章节：{}", known.join(" "))
            }
            ChapterIdError::Unknown { id, known } => write!(
                f,
                "没有第 {id} 章；可选章节：{}（运行 practice --list 查看标题）",
                known.join(" ")
            ),
        }
    }
}

impl std::error::Error for ChapterIdError {}

/// A disagreement between the manifest and the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    MissingFile {
        chapter: ChapterId,
        path: RepoPath,
    },
    UnlistedFile {
        chapter: ChapterId,
        path: RepoPath,
    },
    EditNotInFiles {
        chapter: ChapterId,
        file: CrateFile,
    },
    NoEditFiles(ChapterId),
    NoGroups(ChapterId),
    DuplicateGroup {
        chapter: ChapterId,
        group: String,
    },
    EmptyGroup {
        chapter: ChapterId,
        group: String,
    },
    UnclaimedTest(RepoPath),
    Regions {
        path: RepoPath,
        problem: String,
    },
    MarkersOutsideEdit {
        path: RepoPath,
        lines: Vec<usize>,
    },
    ForeignLab {
        path: RepoPath,
        lab: LabId,
    },
    LabWithoutStub {
        chapter: ChapterId,
        lab: LabId,
    },
    MistakesUnreadable {
        path: RepoPath,
        reason: String,
    },
    MistakeGroup {
        chapter: ChapterId,
        mistake: String,
        group: String,
    },
    MistakeFile {
        chapter: ChapterId,
        mistake: String,
        file: CrateFile,
    },
    DuplicateMistake {
        chapter: ChapterId,
        mistake: String,
    },
    /// A hand-written copy of a file the engine derives (`src/lib.rs`, an overlay's root
    /// `Cargo.toml`).
    DerivedFile {
        chapter: ChapterId,
        path: RepoPath,
    },
    /// A later chapter's copy of a file lost a line of the earlier chapter's copy.
    CopyDiverged {
        chapter: ChapterId,
        earlier: ChapterId,
        file: WorkspacePath,
        line: usize,
        text: String,
    },
    /// `rewrites` names a file no earlier chapter of the chain carries.
    UnknownRewrite {
        chapter: ChapterId,
        file: WorkspacePath,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::MissingFile { chapter, path } => write!(f, "第 {chapter} 章：缺少 {path}"),
            Problem::UnlistedFile { chapter, path } => {
                write!(f, "第 {chapter} 章：{path} 未在 {MANIFEST} 的 files 中列出")
            }
            Problem::EditNotInFiles { chapter, file } => {
                write!(f, "第 {chapter} 章：edit 中的 {file} 不在 files 中")
            }
            Problem::NoEditFiles(chapter) => {
                write!(f, "第 {chapter} 章：重建章节至少要有一个 edit 文件")
            }
            Problem::NoGroups(chapter) => write!(f, "第 {chapter} 章：没有测试组"),
            Problem::DuplicateGroup { chapter, group } => {
                write!(f, "第 {chapter} 章：测试组 {group} 重复")
            }
            Problem::EmptyGroup { chapter, group } => {
                write!(f, "第 {chapter} 章：测试组 {group} 的 tests 不能为 0")
            }
            Problem::UnclaimedTest(path) => write!(f, "{path} 不属于任何章节"),
            Problem::Regions { path, problem } => write!(f, "{path} 的 Lab 区域有误：{problem}"),
            Problem::MarkersOutsideEdit { path, lines } => write!(
                f,
                "{path} 不是学习者要编辑的文件，却有区域标记（第 {} 行）",
                lines
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join("、")
            ),
            Problem::ForeignLab { path, lab } => {
                write!(f, "{path} 的区域属于 Lab {lab}，但本章没有这个 Lab")
            }
            Problem::LabWithoutStub { chapter, lab } => write!(
                f,
                "第 {chapter} 章：Lab {lab} 没有任何会 panic 的区域，学习者看不到它的第一次红灯"
            ),
            Problem::MistakesUnreadable { path, reason } => {
                write!(f, "{path} 无法解析：{}", reason.trim().replace('\n', " "))
            }
            Problem::MistakeGroup {
                chapter,
                mistake,
                group,
            } => {
                write!(
                    f,
                    "第 {chapter} 章：错误 {mistake} 指向不存在的测试组 {group}"
                )
            }
            Problem::MistakeFile {
                chapter,
                mistake,
                file,
            } => {
                write!(
                    f,
                    "第 {chapter} 章：错误 {mistake} 修改的 {file} 不是本章的文件"
                )
            }
            Problem::DuplicateMistake { chapter, mistake } => {
                write!(f, "第 {chapter} 章：错误 {mistake} 重名")
            }
            Problem::DerivedFile { chapter, path } => write!(
                f,
                "第 {chapter} 章：{path} 由引擎生成，不要手写；删除它（并从 {MANIFEST} 的 files 中删去）"
            ),
            Problem::CopyDiverged {
                chapter,
                earlier,
                file,
                line,
                text,
            } => write!(
                f,
                "第 {chapter} 章的 {file} 缺少第 {earlier} 章同一文件的第 {line} 行 `{}`：\
                 把第 {earlier} 章的改动带到第 {chapter} 章，或在清单里声明 rewrites = [\"{file}\"]",
                text.trim()
            ),
            Problem::UnknownRewrite { chapter, file } => write!(
                f,
                "第 {chapter} 章的 rewrites 列出 {file}，但它之前的章节没有这个文件"
            ),
        }
    }
}

/// Where a chapter's file comes from: a learner-crate file or an overlay file.
enum CarriedSource {
    Crate(CrateFile),
    Overlay(String),
}

/// The files a chapter lays into a workspace, by workspace path, minus the derived and
/// generated ones.
fn carried_files(chapter: &Chapter) -> BTreeMap<WorkspacePath, CarriedSource> {
    let crate_files = chapter
        .files
        .iter()
        .filter(|file| file.as_str() != CRATE_ROOT)
        .map(|file| (file.in_workspace(), CarriedSource::Crate(file.clone())));
    let overlay_files = chapter
        .overlay
        .iter()
        .filter(|path| path.as_str() != WORKSPACE_MANIFEST && path.as_str() != LOCK_FILE)
        .map(|path| {
            (
                WorkspacePath::new(path.clone()),
                CarriedSource::Overlay(path.clone()),
            )
        });
    crate_files.chain(overlay_files).collect()
}

/// A carried file's text with Lab markers stripped; `None` if it is missing or its regions
/// do not parse (both reported by their own checks).
fn marker_free(chapter: &Chapter, source: &CarriedSource, files: &FileSet) -> Option<String> {
    let (path, edit) = match source {
        CarriedSource::Crate(file) => (
            chapter.source(file),
            chapter.is_edit(file) && file.is_rust(),
        ),
        CarriedSource::Overlay(path) => (RepoPath::join(&chapter.overlay_dir(), path), false),
    };
    let text = String::from_utf8_lossy(files.get(path.as_str())?).into_owned();
    if edit {
        crate::regions::RegionSource::parse(&text)
            .ok()
            .map(|source| source.reference())
    } else {
        Some(text)
    }
}

/// Every chapter, in course order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Catalog {
    chapters: Vec<Chapter>,
}

impl Catalog {
    pub fn from_files(files: &FileSet) -> Result<Self, CatalogError> {
        let bytes = files.get(MANIFEST).ok_or(CatalogError::Missing)?;
        let text = String::from_utf8_lossy(bytes);
        let raw: RawManifest = toml::from_str(&text).map_err(|error| CatalogError::Unreadable {
            path: MANIFEST.to_string(),
            reason: error.to_string(),
        })?;
        if raw.format != MANIFEST_FORMAT {
            return Err(CatalogError::Format(raw.format));
        }
        let mut chapters: Vec<Chapter> = Vec::new();
        for raw_chapter in raw.chapter {
            let mut chapter = raw_chapter.into_chapter()?;
            if chapters.iter().any(|c| c.id == chapter.id) {
                return Err(CatalogError::DuplicateId(chapter.id));
            }
            chapter.overlay = crate::files::under(files, &chapter.overlay_dir())
                .map(|(path, _)| path.to_string())
                .collect();
            let mistakes = RepoPath::join(&chapter.dir(), MISTAKES_FILE);
            if let Some(bytes) = files.get(mistakes.as_str()) {
                // Unreadable catalogues are reported by `check_tree`, with their reason.
                if let Ok(parsed) = toml::from_str::<MistakesFile>(&String::from_utf8_lossy(bytes))
                {
                    chapter.mistakes = parsed.mistake;
                }
            }
            chapters.push(chapter);
        }
        let catalog = Catalog { chapters };
        for chapter in &catalog.chapters {
            if let Kind::Observe { shows } = chapter.kind {
                let known = catalog
                    .get(shows)
                    .is_some_and(|shown| shown.mode() == Mode::Rebuild);
                if !known {
                    return Err(CatalogError::UnknownShows {
                        chapter: chapter.id,
                        shows,
                    });
                }
            }
        }
        Ok(catalog)
    }

    /// Chapters in course order.
    pub fn chapters(&self) -> &[Chapter] {
        &self.chapters
    }

    pub fn get(&self, id: ChapterId) -> Option<&Chapter> {
        self.chapters.iter().find(|chapter| chapter.id == id)
    }

    /// Ids in course order, for messages.
    pub fn ids(&self) -> Vec<String> {
        self.chapters.iter().map(|c| c.id.to_string()).collect()
    }

    /// The one chapter-id rule (`6` → `06`), then the lookup.
    pub fn resolve(&self, input: &str) -> Result<&Chapter, ChapterIdError> {
        let id: ChapterId = input.parse().map_err(|error| ChapterIdError::Malformed {
            error,
            known: self.ids(),
        })?;
        self.get(id).ok_or(ChapterIdError::Unknown {
            id,
            known: self.ids(),
        })
    }

    /// The chapters whose code and tests a workspace of `chapter` carries, in order, `chapter`
    /// last: the rebuild chapters up to it; for an observe chapter, those up to the chapter it
    /// shows, then itself.
    pub fn chain<'a>(&'a self, chapter: &'a Chapter) -> Vec<&'a Chapter> {
        let until = match chapter.kind {
            Kind::Observe { shows } => shows,
            Kind::Rebuild { .. } => chapter.id,
        };
        let mut chain: Vec<&Chapter> = Vec::new();
        for step in &self.chapters {
            if step.mode() == Mode::Rebuild {
                chain.push(step);
            }
            if step.id == until {
                break;
            }
        }
        if chapter.mode() == Mode::Observe {
            chain.push(chapter);
        }
        chain
    }

    /// The rebuild chapter a rebuild chapter starts from, if any.
    pub fn previous<'a>(&'a self, chapter: &'a Chapter) -> Option<&'a Chapter> {
        let chain = self.chain(chapter);
        match chapter.kind {
            Kind::Rebuild { .. } => chain.len().checked_sub(2).map(|i| chain[i]),
            Kind::Observe { .. } => None,
        }
    }

    /// Whether `chapter` only adds modules to what its predecessor left: a rebuild chapter
    /// none of whose files an earlier chapter of its chain carries. Code of earlier chapters
    /// cannot name a module written after it, so their tests see exactly the predecessor's
    /// code, whatever state this chapter's own files are in; `verify` reuses their verdicts.
    pub fn only_adds_modules(&self, chapter: &Chapter) -> bool {
        if chapter.mode() != Mode::Rebuild {
            return false;
        }
        let chain = self.chain(chapter);
        let earlier = &chain[..chain.len().saturating_sub(1)];
        !chapter
            .files
            .iter()
            .any(|file| earlier.iter().any(|step| step.files.contains(file)))
    }

    /// Problems between the manifest and the tree. Empty means consistent.
    /// `with_held_out`: the tree is a checkout, so held-out tests must exist.
    pub fn check_tree(&self, files: &FileSet, with_held_out: bool) -> Vec<Problem> {
        let mut problems = Vec::new();
        let mut claimed: BTreeSet<RepoPath> = BTreeSet::new();
        for chapter in &self.chapters {
            self.check_chapter(chapter, files, with_held_out, &mut problems);
            claimed.insert(chapter.test_source());
            claimed.insert(chapter.held_out_source());
        }
        for path in files.keys() {
            if path.as_str().starts_with("tests/")
                && path.as_str().ends_with(".rs")
                && !claimed.contains(path)
            {
                problems.push(Problem::UnclaimedTest(path.clone()));
            }
        }
        problems
    }

    fn check_chapter(
        &self,
        chapter: &Chapter,
        files: &FileSet,
        with_held_out: bool,
        problems: &mut Vec<Problem>,
    ) {
        let id = chapter.id;
        let dir = chapter.dir();
        let missing = |path: RepoPath| Problem::MissingFile { chapter: id, path };
        for file in &chapter.files {
            if file.as_str() == CRATE_ROOT {
                problems.push(Problem::DerivedFile {
                    chapter: id,
                    path: chapter.source(file),
                });
            } else if !files.contains_key(chapter.source(file).as_str()) {
                problems.push(missing(chapter.source(file)));
            }
        }
        let overlay_manifest = format!("{OVERLAY_DIR}/{}", WORKSPACE_MANIFEST);
        for path in files.keys() {
            let Some(rest) = path.strip_dir(&dir) else {
                continue;
            };
            let derived = rest == CRATE_ROOT || rest == overlay_manifest;
            if derived && !chapter.files.iter().any(|f| f.as_str() == rest) {
                problems.push(Problem::DerivedFile {
                    chapter: id,
                    path: path.clone(),
                });
            } else if !derived
                && rest != "README.md"
                && rest != MISTAKES_FILE
                && !rest.starts_with(&format!("{OVERLAY_DIR}/"))
                && !chapter.files.iter().any(|f| f.as_str() == rest)
            {
                problems.push(Problem::UnlistedFile {
                    chapter: id,
                    path: path.clone(),
                });
            }
        }
        for path in [
            Some(chapter.guide()),
            Some(chapter.test_source()),
            with_held_out.then(|| chapter.held_out_source()),
        ]
        .into_iter()
        .flatten()
        {
            if !files.contains_key(path.as_str()) {
                problems.push(missing(path));
            }
        }
        if chapter.groups.is_empty() {
            problems.push(Problem::NoGroups(id));
        }
        let mut names = BTreeSet::new();
        for group in &chapter.groups {
            if !names.insert(group.name.as_str()) {
                problems.push(Problem::DuplicateGroup {
                    chapter: id,
                    group: group.name.clone(),
                });
            }
            if group.tests == 0 {
                problems.push(Problem::EmptyGroup {
                    chapter: id,
                    group: group.name.clone(),
                });
            }
        }
        if chapter.mode() == Mode::Rebuild && chapter.edit().is_empty() {
            problems.push(Problem::NoEditFiles(id));
        }
        for file in chapter.edit() {
            if !chapter.files.contains(file) {
                problems.push(Problem::EditNotInFiles {
                    chapter: id,
                    file: file.clone(),
                });
            }
        }
        self.check_regions(chapter, files, problems);
        self.check_mistakes(chapter, files, &names, problems);
        self.check_copies(chapter, files, problems);
    }

    /// Every file `chapter` carries that an earlier chapter of its chain also carries contains
    /// the nearest earlier copy as a line subsequence, unless declared a rewrite (see
    /// [`crate::copies`]). Derived and generated files (`src/lib.rs`, the root `Cargo.toml`,
    /// `Cargo.lock`) are not copies.
    fn check_copies(&self, chapter: &Chapter, files: &FileSet, problems: &mut Vec<Problem>) {
        let chain = self.chain(chapter);
        let earlier: Vec<&Chapter> = chain
            .iter()
            .copied()
            .filter(|step| step.id != chapter.id)
            .collect();
        for file in &chapter.rewrites {
            if !earlier
                .iter()
                .any(|step| carried_files(step).contains_key(file))
            {
                problems.push(Problem::UnknownRewrite {
                    chapter: chapter.id,
                    file: file.clone(),
                });
            }
        }
        for (file, source) in carried_files(chapter) {
            if chapter.rewrites.contains(&file) {
                continue;
            }
            let Some((previous, previous_source)) = earlier.iter().rev().find_map(|step| {
                carried_files(step)
                    .remove(&file)
                    .map(|source| (*step, source))
            }) else {
                continue;
            };
            let (Some(later), Some(before)) = (
                marker_free(chapter, &source, files),
                marker_free(previous, &previous_source, files),
            ) else {
                continue;
            };
            if let Some((line, text)) = crate::copies::first_missing_line(&before, &later) {
                problems.push(Problem::CopyDiverged {
                    chapter: chapter.id,
                    earlier: previous.id,
                    file: file.clone(),
                    line,
                    text: text.to_string(),
                });
            }
        }
    }

    fn check_regions(&self, chapter: &Chapter, files: &FileSet, problems: &mut Vec<Problem>) {
        let mut stubbed_labs = BTreeSet::new();
        for file in chapter.files.iter().filter(|file| file.is_rust()) {
            let path = chapter.source(file);
            let Some(bytes) = files.get(path.as_str()) else {
                continue;
            };
            let text = String::from_utf8_lossy(bytes);
            if !chapter.is_edit(file) {
                let lines = crate::regions::marker_lines(&text);
                if !lines.is_empty() {
                    problems.push(Problem::MarkersOutsideEdit { path, lines });
                }
                continue;
            }
            match crate::regions::RegionSource::parse(&text) {
                Err(error) => problems.push(Problem::Regions {
                    path,
                    problem: error.to_string(),
                }),
                Ok(source) => {
                    for region in source.regions() {
                        if chapter.group_of_lab(region.lab).is_none() {
                            problems.push(Problem::ForeignLab {
                                path: path.clone(),
                                lab: region.lab,
                            });
                        } else if region.stub_panics() {
                            stubbed_labs.insert(region.lab);
                        }
                    }
                }
            }
        }
        for (lab, _) in chapter.labs() {
            if !stubbed_labs.contains(&lab) {
                problems.push(Problem::LabWithoutStub {
                    chapter: chapter.id,
                    lab,
                });
            }
        }
    }

    fn check_mistakes(
        &self,
        chapter: &Chapter,
        files: &FileSet,
        groups: &BTreeSet<&str>,
        problems: &mut Vec<Problem>,
    ) {
        let path = RepoPath::join(&chapter.dir(), MISTAKES_FILE);
        if let Some(bytes) = files.get(path.as_str()) {
            if let Err(error) = toml::from_str::<MistakesFile>(&String::from_utf8_lossy(bytes)) {
                problems.push(Problem::MistakesUnreadable {
                    path,
                    reason: error.to_string(),
                });
            }
        }
        let mut seen = BTreeSet::new();
        for mistake in &chapter.mistakes {
            if !seen.insert(mistake.name.as_str()) {
                problems.push(Problem::DuplicateMistake {
                    chapter: chapter.id,
                    mistake: mistake.name.clone(),
                });
            }
            if !groups.contains(mistake.group.as_str()) {
                problems.push(Problem::MistakeGroup {
                    chapter: chapter.id,
                    mistake: mistake.name.clone(),
                    group: mistake.group.clone(),
                });
            }
            if !chapter.files.contains(&mistake.file) {
                problems.push(Problem::MistakeFile {
                    chapter: chapter.id,
                    mistake: mistake.name.clone(),
                    file: mistake.file.clone(),
                });
            }
        }
    }
}
