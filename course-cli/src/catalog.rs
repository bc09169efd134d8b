//! The course manifest: every `chapters/NN-slug/chapter.json`, read into one ordered catalog.
//!
//! Pure: it reads a [`FileSet`], never the disk, so the embedded binary and a checkout are
//! judged by the same code.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;

use crate::files::{under, FileSet, HELD_OUT_DIR};
use crate::runner::{ChapterTests, GroupSpec};

/// The base learner workspace every chapter starts from.
pub const BASE_DIR: &str = "chapters/_crate";

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Chapter 00: read and run the finished loop, predict, break it on purpose.
    Observe,
    /// Every other chapter: rebuild the chapter's files from a skeleton.
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

/// A deliberate break ("故意把它弄坏") that the named group must catch.
#[derive(Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Mutation {
    pub name: String,
    pub description: String,
    /// Learner-crate-relative path, e.g. `src/tool.rs`.
    pub file: String,
    pub find: String,
    pub replace: String,
    pub group: String,
    pub expect: String,
}

#[derive(Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct Manifest {
    id: String,
    slug: String,
    title: String,
    mode: Mode,
    previous: Option<String>,
    files: Vec<String>,
    edit: Vec<String>,
    test: String,
    held_out: Option<String>,
    groups: Vec<GroupSpec>,
    #[serde(default)]
    mutations: Vec<Mutation>,
}

/// One chapter as the manifest declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chapter {
    pub id: String,
    pub slug: String,
    pub title: String,
    pub mode: Mode,
    pub previous: Option<String>,
    /// Files the chapter adds or replaces (learner-crate-relative).
    pub files: Vec<String>,
    /// Files the learner writes; the skeleton provides each.
    pub edit: Vec<String>,
    pub test: String,
    pub held_out: Option<String>,
    pub groups: Vec<GroupSpec>,
    pub mutations: Vec<Mutation>,
}

impl Chapter {
    /// `chapters/06-tool-contract`
    pub fn dir(&self) -> String {
        format!("chapters/{}-{}", self.id, self.slug)
    }

    /// `skeletons/06-tool-contract`
    pub fn skeleton_dir(&self) -> String {
        format!("skeletons/{}-{}", self.id, self.slug)
    }

    pub fn tests(&self) -> ChapterTests {
        ChapterTests {
            id: self.id.clone(),
            title: self.title.clone(),
            test: self.test.clone(),
            groups: self.groups.clone(),
        }
    }
}

/// Why the manifest could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogError {
    Unreadable { path: String, reason: String },
    DuplicateId(String),
    MisplacedManifest { path: String, expected: String },
    BrokenChain(String),
}

impl fmt::Display for CatalogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CatalogError::Unreadable { path, reason } => {
                write!(f, "课程清单 {path} 无法解析：{reason}")
            }
            CatalogError::DuplicateId(id) => write!(f, "课程清单中章节编号 {id} 重复"),
            CatalogError::MisplacedManifest { path, expected } => {
                write!(f, "课程清单 {path} 应位于 {expected}")
            }
            CatalogError::BrokenChain(reason) => write!(f, "章节顺序无效：{reason}"),
        }
    }
}

impl std::error::Error for CatalogError {}

/// Why a chapter argument was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChapterIdError {
    Malformed { input: String, known: Vec<String> },
    Unknown { id: String, known: Vec<String> },
}

impl fmt::Display for ChapterIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChapterIdError::Malformed { input, known } => write!(
                f,
                "章节编号 `{input}` 格式无效：请写一到两位数字，例如 06 或 6；可选章节：{}",
                known.join(" ")
            ),
            ChapterIdError::Unknown { id, known } => write!(
                f,
                "没有第 {id} 章；可选章节：{}（运行 practice --list 查看标题）",
                known.join(" ")
            ),
        }
    }
}

impl std::error::Error for ChapterIdError {}

/// All chapters in course order (following `previous` links from the first chapter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Catalog {
    chapters: Vec<Chapter>,
}

impl Catalog {
    pub fn from_files(files: &FileSet) -> Result<Self, CatalogError> {
        let mut by_id: BTreeMap<String, Chapter> = BTreeMap::new();
        for (path, bytes) in files {
            let Some(rest) = path.strip_prefix("chapters/") else {
                continue;
            };
            if !rest.ends_with("/chapter.json") || rest.matches('/').count() != 1 {
                continue;
            }
            let manifest: Manifest =
                serde_json::from_slice(bytes).map_err(|error| CatalogError::Unreadable {
                    path: path.clone(),
                    reason: error.to_string(),
                })?;
            let chapter = Chapter {
                id: manifest.id,
                slug: manifest.slug,
                title: manifest.title,
                mode: manifest.mode,
                previous: manifest.previous,
                files: manifest.files,
                edit: manifest.edit,
                test: manifest.test,
                held_out: manifest.held_out,
                groups: manifest.groups,
                mutations: manifest.mutations,
            };
            let expected = format!("{}/chapter.json", chapter.dir());
            if &expected != path {
                return Err(CatalogError::MisplacedManifest {
                    path: path.clone(),
                    expected,
                });
            }
            if by_id.contains_key(&chapter.id) {
                return Err(CatalogError::DuplicateId(chapter.id));
            }
            by_id.insert(chapter.id.clone(), chapter);
        }
        Ok(Catalog {
            chapters: course_order(by_id)?,
        })
    }

    /// Chapters in course order.
    pub fn chapters(&self) -> &[Chapter] {
        &self.chapters
    }

    pub fn get(&self, id: &str) -> Option<&Chapter> {
        self.chapters.iter().find(|chapter| chapter.id == id)
    }

    /// Ids sorted numerically, for messages.
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .chapters
            .iter()
            .map(|chapter| chapter.id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// Accepts `06` and `6`; refuses `abc`, `6.0`, `-1`, `123` and unknown chapters.
    pub fn resolve(&self, input: &str) -> Result<&Chapter, ChapterIdError> {
        let trimmed = input.trim();
        let well_formed =
            (1..=2).contains(&trimmed.len()) && trimmed.bytes().all(|byte| byte.is_ascii_digit());
        if !well_formed {
            return Err(ChapterIdError::Malformed {
                input: input.to_string(),
                known: self.ids(),
            });
        }
        let id = format!("{trimmed:0>2}");
        self.get(&id).ok_or(ChapterIdError::Unknown {
            id,
            known: self.ids(),
        })
    }

    /// The chapters whose work `id` builds on, first chapter first, `id` last.
    pub fn chain(&self, id: &str) -> Vec<&Chapter> {
        let Some(position) = self.chapters.iter().position(|chapter| chapter.id == id) else {
            return Vec::new();
        };
        self.chapters[..=position].iter().collect()
    }

    /// Problems between the manifest and the tree: missing or unlisted files, groups or
    /// mutations that point nowhere. Empty means consistent.
    pub fn check_tree(&self, files: &FileSet) -> Vec<String> {
        let mut problems = Vec::new();
        let mut claimed_tests = BTreeSet::new();
        let mut claimed_held_out = BTreeSet::new();

        for chapter in &self.chapters {
            let id = &chapter.id;
            let dir = chapter.dir();
            let listed: BTreeSet<&str> = chapter.files.iter().map(String::as_str).collect();
            for file in &chapter.files {
                if !files.contains_key(&format!("{dir}/{file}")) {
                    problems.push(format!("第 {id} 章：清单列出的 {dir}/{file} 不存在"));
                }
            }
            for (file, _) in under(files, &dir) {
                if file != "chapter.json" && file != "README.md" && !listed.contains(file) {
                    problems.push(format!("第 {id} 章：{dir}/{file} 未在清单 files 中列出"));
                }
            }
            if !files.contains_key(&format!("{dir}/README.md")) {
                problems.push(format!("第 {id} 章：缺少章节指南 {dir}/README.md"));
            }

            let skeleton_dir = chapter.skeleton_dir();
            let edit: BTreeSet<&str> = chapter.edit.iter().map(String::as_str).collect();
            for file in &chapter.edit {
                if !listed.contains(file.as_str()) {
                    problems.push(format!("第 {id} 章：edit 中的 {file} 不在 files 中"));
                }
                if !files.contains_key(&format!("{skeleton_dir}/{file}")) {
                    problems.push(format!("第 {id} 章：缺少骨架文件 {skeleton_dir}/{file}"));
                }
            }
            for (file, _) in under(files, &skeleton_dir) {
                if !edit.contains(file) {
                    problems.push(format!(
                        "第 {id} 章：{skeleton_dir}/{file} 未在清单 edit 中列出"
                    ));
                }
            }
            if chapter.mode == Mode::Rebuild && chapter.edit.is_empty() {
                problems.push(format!(
                    "第 {id} 章：重建模式的章节必须至少有一个 edit 文件"
                ));
            }

            let test_path = format!("tests/{}", chapter.test);
            if !files.contains_key(&test_path) {
                problems.push(format!("第 {id} 章：测试文件 {test_path} 不存在"));
            }
            claimed_tests.insert(test_path);
            if let Some(held_out) = &chapter.held_out {
                let path = format!("{HELD_OUT_DIR}/{held_out}");
                if !files.contains_key(&path) {
                    problems.push(format!("第 {id} 章：保留测试 {path} 不存在"));
                }
                claimed_held_out.insert(path);
            }

            let mut group_names = BTreeSet::new();
            for group in &chapter.groups {
                if !group_names.insert(group.name.as_str()) {
                    problems.push(format!("第 {id} 章：测试组 {} 重复", group.name));
                }
                if group.count == 0 {
                    problems.push(format!(
                        "第 {id} 章：测试组 {} 的 count 不能为 0",
                        group.name
                    ));
                }
                if chapter.mode == Mode::Rebuild && group.marker.is_empty() {
                    problems.push(format!("第 {id} 章：测试组 {} 缺少 Lab 标记", group.name));
                }
            }
            if chapter.groups.is_empty() {
                problems.push(format!("第 {id} 章：没有测试组"));
            }
            for mutation in &chapter.mutations {
                if !group_names.contains(mutation.group.as_str()) {
                    problems.push(format!(
                        "第 {id} 章：变异 {} 指向不存在的测试组 {}",
                        mutation.name, mutation.group
                    ));
                }
            }
            if chapter.mutations.is_empty() {
                problems.push(format!("第 {id} 章：没有声明“故意把它弄坏”的变异"));
            }
        }

        for path in files.keys() {
            let is_test_file = path.starts_with("tests/") && path.ends_with(".rs");
            if !is_test_file {
                continue;
            }
            let claimed = if path.starts_with(&format!("{HELD_OUT_DIR}/")) {
                claimed_held_out.contains(path)
            } else {
                claimed_tests.contains(path)
            };
            if !claimed {
                problems.push(format!("{path} 不属于任何章节的清单"));
            }
        }
        problems
    }
}

/// Orders chapters by their `previous` links; the chain must be one line covering them all.
fn course_order(mut by_id: BTreeMap<String, Chapter>) -> Result<Vec<Chapter>, CatalogError> {
    if by_id.is_empty() {
        return Ok(Vec::new());
    }
    let roots: Vec<String> = by_id
        .values()
        .filter(|chapter| chapter.previous.is_none())
        .map(|chapter| chapter.id.clone())
        .collect();
    let [root] = roots.as_slice() else {
        return Err(CatalogError::BrokenChain(format!(
            "必须恰好有一个没有 previous 的起始章节，实际为 {}",
            roots.len()
        )));
    };
    let mut ordered = vec![by_id.remove(root).expect("root is present")];
    while !by_id.is_empty() {
        let last = &ordered.last().expect("non-empty").id;
        let next: Vec<String> = by_id
            .values()
            .filter(|chapter| chapter.previous.as_deref() == Some(last.as_str()))
            .map(|chapter| chapter.id.clone())
            .collect();
        match next.as_slice() {
            [one] => ordered.push(by_id.remove(one).expect("present")),
            [] => {
                let stranded: Vec<&str> = by_id.keys().map(String::as_str).collect();
                return Err(CatalogError::BrokenChain(format!(
                    "章节 {} 无法从起始章节沿 previous 到达",
                    stranded.join(" ")
                )));
            }
            _ => {
                return Err(CatalogError::BrokenChain(format!(
                    "多个章节的 previous 都是 {last}：{}",
                    next.join(" ")
                )))
            }
        }
    }
    Ok(ordered)
}
