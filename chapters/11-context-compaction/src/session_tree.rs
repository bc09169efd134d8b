//! The session log: a tree of facts kept as JSON Lines, one entry per line.
//!
//! Each entry names its parent, so one file holds a tree: a branch is the path from the root
//! to a leaf, and what the model sees is the messages on that path.
//!
//! Invariants:
//! - the newline is the commit marker: a line without its `\n` was never written, so it is
//!   reported as a torn tail and never becomes an entry;
//! - reading is strict: an unknown field, an unknown entry type or a number other JSON readers
//!   cannot hold exactly is refused with the field's name and the physical line number;
//! - an append is decided when it is called: the entry is checked (known parent, fresh id) and
//!   serialised at the call, and lines reach the file in call order through one writer;
//! - a file with a torn tail opens read-only until the user asks for `repair`, which cuts it
//!   back to the last newline; an append never follows a fragment;
//! - after an I/O failure the writer is closed for good (fail-closed): what the file holds is
//!   no longer known, so only a fresh `open` decides again.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::OpenOptions;
use std::future::Future;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use crate::types::{
    AgentMessage, AssistantContent, AssistantMessage, StopReason, SystemMessage, TextContent,
    ToolCall, ToolResultMessage, Usage, UserMessage,
};

/// The largest integer every JSON reader holds exactly (2^53 - 1): upstream pi reads the same
/// files with JavaScript numbers.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// One line of a session file.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionEntry {
    pub id: String,
    /// `None` for a root; written as `null`, never omitted.
    pub parent_id: Option<String>,
    pub timestamp: u64,
    #[serde(flatten)]
    pub body: EntryBody,
}

/// What an entry records: a message of the transcript, or a named fact about the session.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum EntryBody {
    Message { message: AgentMessage },
    Metadata { key: String, value: Value },
    Compaction(Compaction),
}

/// Chapter 11: for the model, the messages before `first_kept_entry_id` are replaced by
/// `summary`; the history itself keeps every entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Compaction {
    pub summary: String,
    pub first_kept_entry_id: String,
    pub tokens_before: u64,
}

impl SessionEntry {
    pub fn message(
        id: &str,
        parent_id: Option<&str>,
        timestamp: u64,
        message: AgentMessage,
    ) -> Self {
        SessionEntry {
            id: id.to_string(),
            parent_id: parent_id.map(str::to_string),
            timestamp,
            body: EntryBody::Message { message },
        }
    }

    pub fn metadata(
        id: &str,
        parent_id: Option<&str>,
        timestamp: u64,
        key: &str,
        value: Value,
    ) -> Self {
        SessionEntry {
            id: id.to_string(),
            parent_id: parent_id.map(str::to_string),
            timestamp,
            body: EntryBody::Metadata {
                key: key.to_string(),
                value,
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lab 10.1: the branch from the root to a leaf
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    DuplicateId(String),
    UnknownLeaf(String),
    MissingParent { id: String, parent: String },
    Cycle(String),
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathError::DuplicateId(id) => write!(f, "id {id} 出现了不止一次"),
            PathError::UnknownLeaf(id) => write!(f, "找不到叶子 {id}"),
            PathError::MissingParent { id, parent } => {
                write!(f, "{id} 的父节点 {parent} 不存在")
            }
            PathError::Cycle(id) => write!(f, "从 {id} 往上走回到了自己：祖先链成环"),
        }
    }
}

impl std::error::Error for PathError {}

/// The entries from the root down to `leaf`, owned. Duplicate ids are refused anywhere in the
/// file (an id must name one fact); a broken parent link only matters on the chosen branch.
pub fn path_to(entries: &[SessionEntry], leaf: &str) -> Result<Vec<SessionEntry>, PathError> {
    let mut by_id = HashMap::with_capacity(entries.len());
    for entry in entries {
        if by_id.insert(entry.id.as_str(), entry).is_some() {
            return Err(PathError::DuplicateId(entry.id.clone()));
        }
    }
    let mut branch = Vec::new();
    let mut seen = HashSet::new();
    let mut current = by_id
        .get(leaf)
        .copied()
        .ok_or_else(|| PathError::UnknownLeaf(leaf.to_string()))?;
    loop {
        if !seen.insert(current.id.as_str()) {
            return Err(PathError::Cycle(current.id.clone()));
        }
        branch.push(current.clone());
        let Some(parent) = &current.parent_id else {
            break;
        };
        current = by_id
            .get(parent.as_str())
            .copied()
            .ok_or_else(|| PathError::MissingParent {
                id: current.id.clone(),
                parent: parent.clone(),
            })?;
    }
    branch.reverse();
    Ok(branch)
}

// ---------------------------------------------------------------------------------------------
// Lab 10.2: the strict narrowing parser
// ---------------------------------------------------------------------------------------------

/// Why a JSON value is no session entry: the field (a path such as `message.content[0].text`)
/// and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryError {
    pub field: String,
    pub problem: String,
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "字段 {}：{}", self.field, self.problem)
    }
}

impl std::error::Error for EntryError {}

/// Narrows a JSON value to an entry, refusing anything the writer would not have produced.
pub fn parse_session_entry(value: &Value) -> Result<SessionEntry, EntryError> {
    let entry = Fields::of(value, "")?;
    let kind = entry.string("type")?;
    let body = match kind.as_str() {
        "message" => {
            entry.only(&["id", "parentId", "timestamp", "type", "message"])?;
            EntryBody::Message {
                message: parse_message(entry.get("message")?, "message")?,
            }
        }
        "metadata" => {
            entry.only(&["id", "parentId", "timestamp", "type", "key", "value"])?;
            EntryBody::Metadata {
                key: entry.non_empty("key")?,
                value: entry.json("value")?,
            }
        }
        "compaction" => crate::context_compaction::parse_compaction(value)?,
        other => return Err(entry.error("type", format!("未知的 entry 类型 {other:?}"))),
    };
    Ok(SessionEntry {
        id: entry.non_empty("id")?,
        parent_id: entry.optional_string("parentId")?,
        timestamp: entry.integer("timestamp")?,
        body,
    })
}

fn parse_message(value: &Value, path: &str) -> Result<AgentMessage, EntryError> {
    let message = Fields::of(value, path)?;
    let role = message.string("role")?;
    Ok(match role.as_str() {
        "system" => {
            message.only(&["role", "content", "sections", "timestamp"])?;
            AgentMessage::System(SystemMessage {
                content: message.string("content")?,
                sections: message.sections("sections")?,
                timestamp: message.integer("timestamp")?,
            })
        }
        "user" => {
            message.only(&["role", "content", "timestamp"])?;
            AgentMessage::User(UserMessage {
                content: message.texts("content")?,
                timestamp: message.integer("timestamp")?,
            })
        }
        "assistant" => {
            message.only(&[
                "role",
                "content",
                "thinking",
                "provider",
                "model",
                "usage",
                "stopReason",
                "errorMessage",
                "timestamp",
            ])?;
            AgentMessage::Assistant(AssistantMessage {
                content: message.assistant_content("content")?,
                thinking: message.absent_or(|m| m.string("thinking"), "thinking")?,
                provider: message.string("provider")?,
                model: message.string("model")?,
                usage: message.usage("usage")?,
                stop_reason: message.stop_reason("stopReason")?,
                error_message: message.absent_or(|m| m.string("errorMessage"), "errorMessage")?,
                timestamp: message.integer("timestamp")?,
            })
        }
        "toolResult" => {
            message.only(&[
                "role",
                "toolCallId",
                "toolName",
                "content",
                "details",
                "isError",
                "timestamp",
            ])?;
            AgentMessage::ToolResult(ToolResultMessage {
                tool_call_id: message.non_empty("toolCallId")?,
                tool_name: message.string("toolName")?,
                content: message.texts("content")?,
                details: message.absent_or(|m| m.json("details"), "details")?,
                is_error: message.boolean("isError")?,
                timestamp: message.integer("timestamp")?,
            })
        }
        other => return Err(message.error("role", format!("未知的消息角色 {other:?}"))),
    })
}

/// One JSON object being narrowed, with the path that names its fields in errors.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Fields<'a> {
    fn of(value: &'a Value, path: &str) -> Result<Self, EntryError> {
        match value {
            Value::Object(map) => Ok(Fields {
                map,
                path: path.to_string(),
            }),
            _ => Err(EntryError {
                field: if path.is_empty() {
                    "(整行)".into()
                } else {
                    path.into()
                },
                problem: "必须是 JSON object".into(),
            }),
        }
    }

    fn name(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn error(&self, key: &str, problem: impl Into<String>) -> EntryError {
        EntryError {
            field: self.name(key),
            problem: problem.into(),
        }
    }

    /// Refuses every field outside `allowed`: a field we do not know is a file we do not know.
    fn only(&self, allowed: &[&str]) -> Result<(), EntryError> {
        match self.map.keys().find(|key| !allowed.contains(&key.as_str())) {
            Some(unknown) => Err(self.error(unknown, "未知字段")),
            None => Ok(()),
        }
    }

    fn get(&self, key: &str) -> Result<&'a Value, EntryError> {
        self.map
            .get(key)
            .ok_or_else(|| self.error(key, "缺少这个字段"))
    }

    /// An optional field: absent is `None`; present, it must parse (even `null` is refused).
    fn absent_or<T>(
        &self,
        parse: impl FnOnce(&Self) -> Result<T, EntryError>,
        key: &str,
    ) -> Result<Option<T>, EntryError> {
        match self.map.contains_key(key) {
            true => parse(self).map(Some),
            false => Ok(None),
        }
    }

    fn string(&self, key: &str) -> Result<String, EntryError> {
        match self.get(key)? {
            Value::String(text) => Ok(text.clone()),
            _ => Err(self.error(key, "必须是字符串")),
        }
    }

    fn non_empty(&self, key: &str) -> Result<String, EntryError> {
        let text = self.string(key)?;
        match text.is_empty() {
            true => Err(self.error(key, "不能是空字符串")),
            false => Ok(text),
        }
    }

    /// A required field that is a string or `null`.
    fn optional_string(&self, key: &str) -> Result<Option<String>, EntryError> {
        match self.get(key)? {
            Value::Null => Ok(None),
            Value::String(text) if !text.is_empty() => Ok(Some(text.clone())),
            _ => Err(self.error(key, "必须是非空字符串或 null")),
        }
    }

    fn boolean(&self, key: &str) -> Result<bool, EntryError> {
        self.get(key)?
            .as_bool()
            .ok_or_else(|| self.error(key, "必须是 true 或 false"))
    }

    fn integer(&self, key: &str) -> Result<u64, EntryError> {
        match self.get(key)?.as_u64() {
            Some(number) if number <= MAX_SAFE_INTEGER => Ok(number),
            _ => Err(self.error(key, "必须是不超过 2^53 - 1 的非负整数")),
        }
    }

    /// Any JSON value every reader holds exactly: no integer beyond the safe range.
    fn json(&self, key: &str) -> Result<Value, EntryError> {
        let value = self.get(key)?;
        json_safe(value, &self.name(key))?;
        Ok(value.clone())
    }

    fn sections(&self, key: &str) -> Result<Option<Map<String, Value>>, EntryError> {
        let Some(value) = self.map.get(key) else {
            return Ok(None);
        };
        let sections = Fields::of(value, &self.name(key))?;
        for (name, section) in sections.map {
            if !(section.is_string() || section.is_null()) {
                return Err(sections.error(name, "section 必须是字符串或 null"));
            }
        }
        Ok(Some(sections.map.clone()))
    }

    fn array(&self, key: &str) -> Result<&'a [Value], EntryError> {
        match self.get(key)? {
            Value::Array(items) => Ok(items),
            _ => Err(self.error(key, "必须是数组")),
        }
    }

    fn texts(&self, key: &str) -> Result<Vec<TextContent>, EntryError> {
        let items = self.array(key)?;
        let mut texts = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let block = Fields::of(item, &format!("{}[{index}]", self.name(key)))?;
            if block.string("type")? != "text" {
                return Err(block.error("type", "这里只能是 text 块"));
            }
            texts.push(parse_text(&block)?);
        }
        Ok(texts)
    }

    fn assistant_content(&self, key: &str) -> Result<Vec<AssistantContent>, EntryError> {
        let items = self.array(key)?;
        let mut blocks = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let block = Fields::of(item, &format!("{}[{index}]", self.name(key)))?;
            blocks.push(match block.string("type")?.as_str() {
                "text" => AssistantContent::Text(parse_text(&block)?),
                "toolCall" => {
                    block.only(&["type", "id", "name", "arguments", "rawArguments"])?;
                    AssistantContent::ToolCall(ToolCall {
                        id: block.non_empty("id")?,
                        name: block.non_empty("name")?,
                        arguments: block.json("arguments")?,
                        raw_arguments: block
                            .absent_or(|b| b.string("rawArguments"), "rawArguments")?,
                    })
                }
                other => return Err(block.error("type", format!("未知的内容块类型 {other:?}"))),
            });
        }
        Ok(blocks)
    }

    fn usage(&self, key: &str) -> Result<Usage, EntryError> {
        let usage = Fields::of(self.get(key)?, &self.name(key))?;
        usage.only(&["input", "output", "totalTokens"])?;
        Ok(Usage {
            input: usage.integer("input")?,
            output: usage.integer("output")?,
            total_tokens: usage.integer("totalTokens")?,
        })
    }

    fn stop_reason(&self, key: &str) -> Result<StopReason, EntryError> {
        // StopReason's serde names are the wire names; a unit variant reads from a plain string.
        serde_json::from_value(self.get(key)?.clone())
            .map_err(|_| self.error(key, "必须是 stop、length、toolUse、error 或 aborted"))
    }
}

fn parse_text(block: &Fields<'_>) -> Result<TextContent, EntryError> {
    block.only(&["type", "text"])?;
    Ok(TextContent {
        text: block.string("text")?,
    })
}

fn json_safe(value: &Value, field: &str) -> Result<(), EntryError> {
    match value {
        Value::Number(number) => {
            let exact = match (number.as_u64(), number.as_i64()) {
                (Some(n), _) => n <= MAX_SAFE_INTEGER,
                (None, Some(n)) => n.unsigned_abs() <= MAX_SAFE_INTEGER,
                // A float: serde_json never holds NaN or infinity.
                (None, None) => true,
            };
            match exact {
                true => Ok(()),
                false => Err(EntryError {
                    field: field.to_string(),
                    problem: "整数超出 2^53 - 1，别的 JSON 读者无法精确保存".into(),
                }),
            }
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(index, item)| json_safe(item, &format!("{field}[{index}]"))),
        Value::Object(map) => map
            .iter()
            .try_for_each(|(key, item)| json_safe(item, &format!("{field}.{key}"))),
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Lab 10.3: the in-memory store
// ---------------------------------------------------------------------------------------------

/// Why an append was refused. Nothing is written for a refused append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendError {
    DuplicateId(String),
    MissingParent {
        id: String,
        parent: String,
    },
    /// The file ends in a torn line (1-based): read-only until `repair`.
    NeedsRepair {
        tail_line: usize,
    },
    /// An earlier write failed; this writer is closed for good.
    Tainted,
    /// This append's own write failed.
    Io(String),
}

impl fmt::Display for AppendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppendError::DuplicateId(id) => write!(f, "id {id} 已经存在，不能再追加"),
            AppendError::MissingParent { id, parent } => {
                write!(f, "{id} 的父节点 {parent} 不存在，不能追加")
            }
            AppendError::NeedsRepair { tail_line } => write!(
                f,
                "会话文件第 {tail_line} 行没有写完（没有换行），修复之前只能读不能写"
            ),
            AppendError::Tainted => {
                write!(f, "之前的一次写入失败了，这个 writer 已关闭，请重新打开")
            }
            AppendError::Io(error) => write!(f, "写入会话文件失败：{error}"),
        }
    }
}

impl std::error::Error for AppendError {}

/// Checks `entry` against the ids already taken and takes its id. Both stores decide this at
/// the call, so the answer depends on call order only.
fn admit(ids: &mut HashSet<String>, entry: &SessionEntry) -> Result<(), AppendError> {
    if ids.contains(&entry.id) {
        return Err(AppendError::DuplicateId(entry.id.clone()));
    }
    if let Some(parent) = &entry.parent_id {
        if !ids.contains(parent) {
            return Err(AppendError::MissingParent {
                id: entry.id.clone(),
                parent: parent.clone(),
            });
        }
    }
    ids.insert(entry.id.clone());
    Ok(())
}

/// Locks a mutex whose data stays consistent even if a holder panicked (every critical
/// section here is a single push or insert).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug, Default)]
struct MemoryState {
    ids: HashSet<String>,
    entries: Vec<SessionEntry>,
}

/// A session kept in memory: the same rules as the file store, no file.
#[derive(Debug, Default)]
pub struct InMemorySessionStore {
    state: Mutex<MemoryState>,
}

impl InMemorySessionStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks and records `entry` now, in call order; the future only reports the outcome.
    /// It borrows nothing (`'static`), so the caller may change its copy right away.
    pub fn append(
        &self,
        entry: &SessionEntry,
    ) -> impl Future<Output = Result<(), AppendError>> + Send + 'static {
        let outcome = {
            let mut state = lock(&self.state);
            let admitted = admit(&mut state.ids, entry);
            if admitted.is_ok() {
                state.entries.push(entry.clone());
            }
            admitted
        };
        async move { outcome }
    }

    /// The committed entries, in commit order.
    pub fn entries(&self) -> Vec<SessionEntry> {
        lock(&self.state).entries.clone()
    }
}

// ---------------------------------------------------------------------------------------------
// Lab 10.4: recovering a JSON Lines text
// ---------------------------------------------------------------------------------------------

/// Something a reader should know that is not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// The last line (1-based) has no newline: it was never committed.
    UnterminatedTail { line: usize },
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionRead {
    pub entries: Vec<SessionEntry>,
    pub warnings: Vec<Warning>,
}

impl SessionRead {
    /// The 1-based line of a torn tail, if the text has one.
    pub fn torn_tail(&self) -> Option<usize> {
        self.warnings
            .iter()
            .map(|warning| match warning {
                Warning::UnterminatedTail { line } => *line,
            })
            .next()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineProblem {
    NotUtf8,
    NotJson(String),
    NotEntry(EntryError),
}

/// A committed line that is no entry: the file is damaged there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoverError {
    /// 1-based physical line number, blank lines counted.
    pub line: usize,
    pub problem: LineProblem,
}

impl fmt::Display for RecoverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = self.line;
        match &self.problem {
            LineProblem::NotUtf8 => write!(f, "第 {line} 行不是 UTF-8 文本"),
            LineProblem::NotJson(error) => write!(f, "第 {line} 行不是 JSON：{error}"),
            LineProblem::NotEntry(error) => write!(f, "第 {line} 行不是会话 entry：{error}"),
        }
    }
}

impl std::error::Error for RecoverError {}

/// Reads the committed lines of a session file. Blank lines are skipped; a last line without
/// its newline is a warning and never an entry; a committed line that is not an entry is an
/// error naming its physical line.
pub fn recover_jsonl(bytes: &[u8]) -> Result<SessionRead, RecoverError> {
    let mut read = SessionRead::default();
    let mut lines = bytes.split(|byte| *byte == b'\n').enumerate().peekable();
    while let Some((index, line)) = lines.next() {
        let number = index + 1;
        // `split` yields one segment after the last `\n`: empty after a complete file, the
        // torn tail otherwise. Either way it is not a committed line.
        if lines.peek().is_none() {
            if !line.is_empty() {
                read.warnings
                    .push(Warning::UnterminatedTail { line: number });
            }
            break;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let failed = |problem| RecoverError {
            line: number,
            problem,
        };
        let text = std::str::from_utf8(line).map_err(|_| failed(LineProblem::NotUtf8))?;
        let value: Value = serde_json::from_str(text)
            .map_err(|error| failed(LineProblem::NotJson(error.to_string())))?;
        let entry =
            parse_session_entry(&value).map_err(|error| failed(LineProblem::NotEntry(error)))?;
        read.entries.push(entry);
    }
    Ok(read)
}

// ---------------------------------------------------------------------------------------------
// Lab 10.5: the JSON Lines store
// ---------------------------------------------------------------------------------------------

/// The file operations the store needs, so tests can inject faults without a real disk.
pub trait SessionFileIo: Send + Sync + 'static {
    /// Creates the file if it is missing; never truncates an existing one.
    fn ensure_file(&self, path: &Path) -> io::Result<()>;
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Appends `bytes` at the end. On error, any prefix of `bytes` may have reached the file.
    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Cuts the file to `len` bytes.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdFileIo;

impl SessionFileIo for StdFileIo {
    fn ensure_file(&self, path: &Path) -> io::Result<()> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(drop)
    }

    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        // One `write_all` per line on an O_APPEND handle: the line lands at the end even if
        // another handle wrote meanwhile.
        OpenOptions::new().append(true).open(path)?.write_all(bytes)
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        OpenOptions::new().write(true).open(path)?.set_len(len)
    }
}

/// An in-memory file system for tests: its next append can be told to fail after writing a
/// prefix, and appends can be held back until released, so a test decides what is queued
/// before anything is written (a gate, not a sleep).
#[derive(Debug, Default)]
pub struct MemoryFileIo {
    state: Mutex<MemoryFiles>,
    released: Condvar,
}

#[derive(Debug, Default)]
struct MemoryFiles {
    files: HashMap<PathBuf, Vec<u8>>,
    /// Bytes the next append writes before it fails.
    fail_next_append: Option<usize>,
    held: bool,
}

impl MemoryFileIo {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_file(path: &Path, bytes: &[u8]) -> Self {
        let io = Self::new();
        lock(&io.state)
            .files
            .insert(path.to_path_buf(), bytes.to_vec());
        io
    }

    /// The next append writes its first `keep` bytes (at most the whole line), then fails.
    pub fn fail_next_append(&self, keep: usize) {
        lock(&self.state).fail_next_append = Some(keep);
    }

    /// Appends wait from now on until `release`.
    pub fn hold(&self) {
        lock(&self.state).held = true;
    }

    pub fn release(&self) {
        lock(&self.state).held = false;
        self.released.notify_all();
    }

    pub fn bytes(&self, path: &Path) -> Option<Vec<u8>> {
        lock(&self.state).files.get(path).cloned()
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} 不存在", path.display()),
    )
}

impl SessionFileIo for MemoryFileIo {
    fn ensure_file(&self, path: &Path) -> io::Result<()> {
        lock(&self.state)
            .files
            .entry(path.to_path_buf())
            .or_default();
        Ok(())
    }

    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.bytes(path).ok_or_else(|| not_found(path))
    }

    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut state = lock(&self.state);
        while state.held {
            state = self
                .released
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let fault = state.fail_next_append.take();
        let file = state.files.get_mut(path).ok_or_else(|| not_found(path))?;
        match fault {
            None => {
                file.extend_from_slice(bytes);
                Ok(())
            }
            Some(keep) => {
                file.extend_from_slice(&bytes[..keep.min(bytes.len())]);
                Err(io::Error::other("注入的写入故障"))
            }
        }
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut state = lock(&self.state);
        let file = state.files.get_mut(path).ok_or_else(|| not_found(path))?;
        file.truncate(usize::try_from(len).unwrap_or(usize::MAX));
        Ok(())
    }
}

/// Whether the store may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Ready,
    /// Read-only: the file ends in a torn line (1-based) that only `repair` may remove.
    NeedsRepair {
        tail_line: usize,
    },
    /// A write failed; closed until the file is opened again.
    Tainted,
}

#[derive(Debug)]
pub enum OpenError {
    Io(io::Error),
    Damaged(RecoverError),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Io(error) => write!(f, "打不开会话文件：{error}"),
            OpenError::Damaged(error) => write!(f, "会话文件已损坏：{error}"),
        }
    }
}

impl std::error::Error for OpenError {}

#[derive(Debug)]
pub enum RepairError {
    /// The writer failed during this run: reopen the file, then decide.
    Tainted,
    Io(io::Error),
    Damaged(RecoverError),
}

impl fmt::Display for RepairError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepairError::Tainted => write!(f, "写入失败过的 writer 不能修复文件，请重新打开"),
            RepairError::Io(error) => write!(f, "修复会话文件失败：{error}"),
            RepairError::Damaged(error) => write!(f, "修复后会话文件仍然损坏：{error}"),
        }
    }
}

impl std::error::Error for RepairError {}

#[derive(Debug)]
struct StoreState {
    health: Health,
    /// Ids of committed entries and of entries queued for the writer.
    ids: HashSet<String>,
    /// Committed entries: the ones whose line reached the file.
    entries: Vec<SessionEntry>,
}

/// A line on its way to the file, and where to report the outcome.
struct Pending {
    line: Vec<u8>,
    entry: SessionEntry,
    done: oneshot::Sender<Result<(), AppendError>>,
}

/// A session file. One writer thread owns all writes; `append` hands it a finished line.
pub struct JsonlSessionStore {
    path: PathBuf,
    io: Arc<dyn SessionFileIo>,
    state: Arc<Mutex<StoreState>>,
    writer: mpsc::Sender<Pending>,
}

impl JsonlSessionStore {
    /// Opens (or creates) the file, keeping every byte it holds. A torn tail makes the store
    /// read-only (`NeedsRepair`); a damaged committed line refuses to open.
    pub fn open(path: &Path, io: Arc<dyn SessionFileIo>) -> Result<Self, OpenError> {
        io.ensure_file(path).map_err(OpenError::Io)?;
        let bytes = io.read_file(path).map_err(OpenError::Io)?;
        let read = recover_jsonl(&bytes).map_err(OpenError::Damaged)?;
        let health = match read.torn_tail() {
            Some(tail_line) => Health::NeedsRepair { tail_line },
            None => Health::Ready,
        };
        let state = Arc::new(Mutex::new(StoreState {
            health,
            ids: read.entries.iter().map(|entry| entry.id.clone()).collect(),
            entries: read.entries,
        }));
        let (writer, queue) = mpsc::channel();
        let (thread_path, thread_io, thread_state) =
            (path.to_path_buf(), io.clone(), state.clone());
        thread::spawn(move || write_lines(&thread_path, &*thread_io, &thread_state, queue));
        Ok(JsonlSessionStore {
            path: path.to_path_buf(),
            io,
            state,
            writer,
        })
    }

    /// Checks and serialises `entry` now and queues its line; lines reach the file in call
    /// order. The future reports whether this line was written.
    pub fn append(
        &self,
        entry: &SessionEntry,
    ) -> impl Future<Output = Result<(), AppendError>> + Send + 'static {
        let queued = enqueue(&self.state, &self.writer, entry);
        async move {
            match queued?.await {
                Ok(outcome) => outcome,
                // The writer thread is gone without answering: treat it like a failed write.
                Err(_) => Err(AppendError::Tainted),
            }
        }
    }

    /// The committed entries, in file order.
    pub fn entries(&self) -> Vec<SessionEntry> {
        lock(&self.state).entries.clone()
    }

    pub fn health(&self) -> Health {
        lock(&self.state).health
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Cuts a torn tail back to the last newline, the user's explicit choice. Returns how many
    /// bytes were dropped; a file without a torn tail is left alone.
    pub fn repair(&self) -> Result<u64, RepairError> {
        let mut state = lock(&self.state);
        match state.health {
            Health::Ready => return Ok(0),
            Health::Tainted => return Err(RepairError::Tainted),
            Health::NeedsRepair { .. } => {}
        }
        let bytes = self.io.read_file(&self.path).map_err(RepairError::Io)?;
        let keep = bytes
            .iter()
            .rposition(|byte| *byte == b'\n')
            .map_or(0, |newline| newline + 1);
        self.io
            .truncate(&self.path, keep as u64)
            .map_err(RepairError::Io)?;
        let read = recover_jsonl(&bytes[..keep]).map_err(RepairError::Damaged)?;
        state.ids = read.entries.iter().map(|entry| entry.id.clone()).collect();
        state.entries = read.entries;
        state.health = Health::Ready;
        Ok((bytes.len() - keep) as u64)
    }
}

/// Admits and serialises `entry` and hands its line to the writer, all under the state lock.
fn enqueue(
    state: &Mutex<StoreState>,
    writer: &mpsc::Sender<Pending>,
    entry: &SessionEntry,
) -> Result<oneshot::Receiver<Result<(), AppendError>>, AppendError> {
    let mut state = lock(state);
    match state.health {
        Health::Ready => {}
        Health::NeedsRepair { tail_line } => return Err(AppendError::NeedsRepair { tail_line }),
        Health::Tainted => return Err(AppendError::Tainted),
    }
    admit(&mut state.ids, entry)?;
    let mut line = serde_json::to_vec(entry).map_err(|error| AppendError::Io(error.to_string()))?;
    line.push(b'\n');
    let (done, outcome) = oneshot::channel();
    let pending = Pending {
        line,
        entry: entry.clone(),
        done,
    };
    // Sent while the state lock is held, so the queue order is the admission order.
    writer.send(pending).map_err(|_| AppendError::Tainted)?;
    Ok(outcome)
}

/// The writer thread: one line at a time, in queue order. The first failure closes the store;
/// every line still queued is refused, not written after a possibly torn one.
fn write_lines(
    path: &Path,
    io: &dyn SessionFileIo,
    state: &Mutex<StoreState>,
    queue: mpsc::Receiver<Pending>,
) {
    for pending in queue {
        if lock(state).health != Health::Ready {
            let _ = pending.done.send(Err(AppendError::Tainted));
            continue;
        }
        let outcome = match io.append(path, &pending.line) {
            Ok(()) => {
                lock(state).entries.push(pending.entry);
                Ok(())
            }
            Err(error) => {
                lock(state).health = Health::Tainted;
                Err(AppendError::Io(error.to_string()))
            }
        };
        // The caller may have dropped its future; the line is written either way.
        let _ = pending.done.send(outcome);
    }
}

// ---------------------------------------------------------------------------------------------
// Lab 10.6: what the model sees
// ---------------------------------------------------------------------------------------------

/// The messages on the branch ending at `leaf`, in order, owned; metadata entries are not
/// messages and are left out.
pub fn messages_on_path(
    entries: &[SessionEntry],
    leaf: &str,
) -> Result<Vec<AgentMessage>, PathError> {
    Ok(path_to(entries, leaf)?
        .into_iter()
        .filter_map(|entry| match entry.body {
            EntryBody::Message { message } => Some(message),
            EntryBody::Metadata { .. } => None,
            EntryBody::Compaction { .. } => None,
        })
        .collect())
}
