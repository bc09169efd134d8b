//! What a workspace carries: the chapters whose tests it holds and their Lab groups.
//! The course engine derives these from its manifest; the practice stamp stores them.
//!
//! The stamp is read and written through `serde_json::Value` by hand rather than with serde's
//! derive macros: the learner's `cargo xtask` is built before anything else on a fresh
//! workspace, and keeping proc macros (syn, serde_derive) out of it lets them compile in
//! parallel with tokio during the learner crate's build instead of in front of it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::id::{ChapterId, LabId};

/// The learner crate inside every snapshot and practice workspace.
pub const LEARNER_PACKAGE: &str = "pi-course";
/// The practice stamp, relative to the workspace root.
pub const STAMP_FILE: &str = ".practice.json";
/// Bumped whenever the stamp's shape changes.
pub const STAMP_FORMAT: u32 = 2;

/// One group of a chapter's acceptance tests: the tests of one Lab (or, in an observe chapter,
/// one topic). The module prefix and the failure marker are derived, never written by hand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSpec {
    /// Test module name, e.g. `validator`.
    pub name: String,
    /// The Lab this group proves; `None` in observe chapters.
    pub lab: Option<LabId>,
    /// Exact number of tests the module must hold.
    pub tests: usize,
    pub summary: String,
    /// How long one of its tests may run, when the manifest gives the group more (or less)
    /// than the runner's default; `COURSE_TEST_TIMEOUT` still overrides it.
    pub timeout: Option<Duration>,
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
#[derive(Clone, Debug, PartialEq, Eq)]
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
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// Why a stamp could not be read: the first field that is missing or has the wrong shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StampError(pub String);

impl std::fmt::Display for StampError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "字段 {} 缺失或格式不对", self.0)
    }
}

impl std::error::Error for StampError {}

fn field<'a>(object: &'a Map<String, Value>, name: &str) -> Result<&'a Value, StampError> {
    object.get(name).ok_or_else(|| StampError(name.to_string()))
}

fn text(object: &Map<String, Value>, name: &str) -> Result<String, StampError> {
    field(object, name)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| StampError(name.to_string()))
}

fn number(object: &Map<String, Value>, name: &str) -> Result<u64, StampError> {
    field(object, name)?
        .as_u64()
        .ok_or_else(|| StampError(name.to_string()))
}

fn parsed<T: std::str::FromStr>(object: &Map<String, Value>, name: &str) -> Result<T, StampError> {
    text(object, name)?
        .parse()
        .map_err(|_| StampError(name.to_string()))
}

fn object<'a>(value: &'a Value, name: &str) -> Result<&'a Map<String, Value>, StampError> {
    value
        .as_object()
        .ok_or_else(|| StampError(name.to_string()))
}

fn list<'a>(object: &'a Map<String, Value>, name: &str) -> Result<&'a Vec<Value>, StampError> {
    field(object, name)?
        .as_array()
        .ok_or_else(|| StampError(name.to_string()))
}

impl GroupSpec {
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "lab": self.lab.map(|lab| lab.to_string()),
            "tests": self.tests,
            "summary": self.summary,
            "timeout": self.timeout.map(|limit| limit.as_secs()),
        })
    }

    pub fn from_json(value: &Value) -> Result<Self, StampError> {
        let group = object(value, "groups[]")?;
        let lab = match field(group, "lab")? {
            Value::Null => None,
            _ => Some(parsed(group, "lab")?),
        };
        // Absent in stamps written before per-group limits existed: those keep the default.
        let timeout = match group.get("timeout") {
            None | Some(Value::Null) => None,
            Some(_) => Some(Duration::from_secs(number(group, "timeout")?)),
        };
        Ok(GroupSpec {
            name: text(group, "name")?,
            lab,
            tests: number(group, "tests")? as usize,
            summary: text(group, "summary")?,
            timeout,
        })
    }
}

impl ChapterTests {
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id.to_string(),
            "title": self.title,
            "target": self.target,
            "groups": self.groups.iter().map(GroupSpec::to_json).collect::<Vec<_>>(),
        })
    }

    pub fn from_json(value: &Value) -> Result<Self, StampError> {
        let chapter = object(value, "chapters[]")?;
        Ok(ChapterTests {
            id: parsed(chapter, "id")?,
            title: text(chapter, "title")?,
            target: text(chapter, "target")?,
            groups: list(chapter, "groups")?
                .iter()
                .map(GroupSpec::from_json)
                .collect::<Result<_, _>>()?,
        })
    }
}

impl Stamp {
    pub fn to_json(&self) -> Value {
        json!({
            "format": self.format,
            "chapter": self.chapter.to_string(),
            "title": self.title,
            "state": self.state,
            "course_version": self.course_version,
            "chapters": self.chapters.iter().map(ChapterTests::to_json).collect::<Vec<_>>(),
            "injected": self.injected,
        })
    }

    pub fn from_json(value: &Value) -> Result<Self, StampError> {
        let stamp = object(value, "(root)")?;
        let injected = field(stamp, "injected")?
            .as_object()
            .ok_or_else(|| StampError("injected".to_string()))?
            .iter()
            .map(|(path, hash)| {
                hash.as_str()
                    .map(|hash| (path.clone(), hash.to_string()))
                    .ok_or_else(|| StampError(format!("injected.{path}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Stamp {
            format: number(stamp, "format")? as u32,
            chapter: parsed(stamp, "chapter")?,
            title: text(stamp, "title")?,
            state: text(stamp, "state")?,
            course_version: text(stamp, "course_version")?,
            chapters: list(stamp, "chapters")?
                .iter()
                .map(ChapterTests::from_json)
                .collect::<Result<_, _>>()?,
            injected,
        })
    }

    /// Reads a stamp file's bytes.
    pub fn from_json_bytes(bytes: &[u8]) -> Result<Self, StampError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|_| StampError("(JSON)".to_string()))?;
        Stamp::from_json(&value)
    }
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
            timeout: None,
        };
        assert_eq!(group.prefix(), "executor::");
        assert_eq!(group.marker().as_deref(), Some("Lab 6.3"));
    }

    #[test]
    fn a_stamp_round_trips_through_json_and_names_a_bad_field() {
        let stamp = Stamp {
            format: STAMP_FORMAT,
            chapter: "06".parse().unwrap(),
            title: "工具".into(),
            state: "rebuild".into(),
            course_version: "0.1.0".into(),
            chapters: vec![ChapterTests {
                id: "06".parse().unwrap(),
                title: "工具".into(),
                target: "06_tool_contract".into(),
                groups: vec![GroupSpec {
                    name: "validator".into(),
                    lab: Some("6.1".parse().unwrap()),
                    tests: 7,
                    summary: "收窄".into(),
                    timeout: Some(Duration::from_secs(90)),
                }],
            }],
            injected: BTreeMap::from([("pi-course/tests/06.rs".to_string(), "abc".to_string())]),
        };
        let bytes = serde_json::to_vec(&stamp.to_json()).unwrap();
        assert_eq!(Stamp::from_json_bytes(&bytes), Ok(stamp.clone()));
        let mut broken = stamp.to_json();
        broken["chapters"][0]["groups"][0]["lab"] = json!("six");
        assert_eq!(Stamp::from_json(&broken), Err(StampError("lab".into())));
        let mut older = stamp.to_json();
        older["chapters"][0]["groups"][0]
            .as_object_mut()
            .unwrap()
            .remove("timeout");
        let read = Stamp::from_json(&older).expect("旧印记没有 timeout 字段也要能读");
        assert_eq!(read.chapters[0].groups[0].timeout, None);
    }

    #[test]
    fn content_hash_is_stable_and_sensitive() {
        assert_eq!(content_hash(b""), "cbf29ce484222325");
        assert_ne!(content_hash(b"a"), content_hash(b"b"));
    }
}
