//! What a workspace carries: the chapters whose tests it holds and their Lab groups.
//! The course engine derives these from its manifest; the practice stamp stores them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::id::{ChapterId, LabId};

/// The learner crate inside every snapshot and practice workspace.
pub const LEARNER_PACKAGE: &str = "pi-course";
/// The practice stamp, relative to the workspace root.
pub const STAMP_FILE: &str = ".practice.json";
/// Bumped whenever the stamp's shape changes.
pub const STAMP_FORMAT: u32 = 2;

/// One group of a chapter's acceptance tests: the tests of one Lab (or, in an observe chapter,
/// one topic). The module prefix and the failure marker are derived, never written by hand.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct GroupSpec {
    /// Test module name, e.g. `validator`.
    pub name: String,
    /// The Lab this group proves; `None` in observe chapters.
    pub lab: Option<LabId>,
    /// Exact number of tests the module must hold.
    pub tests: usize,
    pub summary: String,
}

impl GroupSpec {
    /// `validator::` — the exact module prefix that selects the group.
    pub fn prefix(&self) -> String {
        format!("{}::", self.name)
    }

    /// `Lab 6.1` — what every test of this group fails with before the Lab is done.
    pub fn marker(&self) -> Option<String> {
        self.lab.map(LabId::marker)
    }
}

/// The acceptance tests of one chapter.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ChapterTests {
    pub id: ChapterId,
    pub title: String,
    /// The cargo test target, e.g. `06_tool_contract`.
    pub target: String,
    pub groups: Vec<GroupSpec>,
}

impl ChapterTests {
    pub fn group(&self, name: &str) -> Option<&GroupSpec> {
        self.groups.iter().find(|group| group.name == name)
    }

    pub fn group_names(&self) -> Vec<&str> {
        self.groups
            .iter()
            .map(|group| group.name.as_str())
            .collect()
    }

    /// `pi-course/tests/06_tool_contract.rs`, relative to the workspace root.
    pub fn test_file(&self) -> String {
        format!("{LEARNER_PACKAGE}/tests/{}.rs", self.target)
    }
}

/// `.practice.json`: what a workspace is. Written by `practice` and the instructor snapshots,
/// read by the workspace's own `cargo xtask`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub format: u32,
    pub chapter: ChapterId,
    pub title: String,
    /// `rebuild`, `observe`, `reference` or `solved before Lab N.k`; informational.
    pub state: String,
    pub course_version: String,
    /// Every chapter whose tests the workspace carries, in course order, the practised one last.
    pub chapters: Vec<ChapterTests>,
    /// Injected test files (workspace-relative path) → FNV-1a hash of their content.
    pub injected: BTreeMap<String, String>,
}

impl Stamp {
    pub fn chapter_tests(&self, id: ChapterId) -> Option<&ChapterTests> {
        self.chapters.iter().find(|chapter| chapter.id == id)
    }

    pub fn chapter_ids(&self) -> Vec<String> {
        self.chapters.iter().map(|c| c.id.to_string()).collect()
    }

    /// Injected files whose content no longer matches the stamp (edited or deleted).
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

/// A stable 64-bit FNV-1a digest, hex encoded. It detects accidental edits; it is not a
/// security boundary, so neither a cryptographic hash nor a dependency is warranted.
pub fn content_hash(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_and_marker_are_derived_from_name_and_lab() {
        let group = GroupSpec {
            name: "executor".into(),
            lab: Some("6.3".parse().unwrap()),
            tests: 3,
            summary: String::new(),
        };
        assert_eq!(group.prefix(), "executor::");
        assert_eq!(group.marker().as_deref(), Some("Lab 6.3"));
    }

    #[test]
    fn content_hash_is_stable_and_sensitive() {
        assert_eq!(content_hash(b""), "cbf29ce484222325");
        assert_ne!(content_hash(b"a"), content_hash(b"b"));
    }
}
