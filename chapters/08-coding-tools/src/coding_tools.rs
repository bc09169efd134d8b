//! The coding tools: `read`, `write`, `edit` and `bash`, the four actions that let the agent
//! loop work on a real directory.
//!
//! Each one is an ordinary chapter 06 [`Tool`] with upstream pi's tool and argument names, its
//! arguments described by an [`object_schema`] of the course validators, so the four register in
//! one [`ToolRegistry`] and run through chapter 07's loop unchanged.
//!
//! Invariants:
//! - every path is resolved against the workspace root; a path that leaves it — through `..`,
//!   as an absolute path or through a symlink — is refused (a course guardrail, not a sandbox);
//! - a file is replaced by writing a temporary file beside it and renaming it over the target,
//!   so a reader sees the old file or the new one, never half of one;
//! - mutations of one path run one at a time, in arrival order; other paths proceed;
//! - an edit batch is checked against the file in memory before its one write, so a failing
//!   batch writes nothing;
//! - `bash` owns a process group: on timeout or cancellation the group gets SIGTERM, then
//!   SIGKILL, and no process of it outlives the call.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Component, Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Child;
use tokio_util::sync::CancellationToken;

use crate::tool::{
    field, object_schema, optional_positive_integer, optional_string, string_value, RegistryError,
    SharedTool, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, ValidationError, Validator,
};
use crate::types::text;

// ---------------------------------------------------------------------------------------
// Limits, descriptions and messages
// ---------------------------------------------------------------------------------------

pub const DEFAULT_MAX_READ_BYTES: usize = 50 * 1024;
pub const DEFAULT_MAX_BASH_OUTPUT_BYTES: usize = 50 * 1024;
/// How long a command may run when its call gives no `timeout`.
pub const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(120);
/// Between SIGTERM and SIGKILL: the time a command gets to clean up after itself.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);

/// What the tools may consume. Tests shrink them; the defaults suit a real session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of file content one `read` shows.
    pub max_read_bytes: usize,
    /// Bytes of output one `bash` call returns, its truncation note included.
    pub max_bash_output_bytes: usize,
    pub bash_timeout: Duration,
    pub kill_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
            max_bash_output_bytes: DEFAULT_MAX_BASH_OUTPUT_BYTES,
            bash_timeout: DEFAULT_BASH_TIMEOUT,
            kill_grace: DEFAULT_KILL_GRACE,
        }
    }
}

pub const READ_DESCRIPTION: &str = "Read a text file of the workspace. offset is the first \
line to show (1-based), limit the number of lines. Long output is cut at a whole line, with a \
note that says which offset continues it.";
pub const WRITE_DESCRIPTION: &str = "Write a file of the workspace: creates parent \
directories and replaces the whole file.";
pub const EDIT_DESCRIPTION: &str = "Edit a file by exact text replacement: oldText and \
newText, or edits: [{oldText, newText}, ...]. Every oldText must occur exactly once in the \
original file and the edits must not overlap; the file changes only if every edit applies.";
pub const BASH_DESCRIPTION: &str = "Run a shell command in the workspace root and return its \
output (stdout and stderr) and exit code. timeout is in seconds.";

/// Prefix of every refusal of a path outside the workspace.
pub const OUTSIDE_WORKSPACE: &str = "路径在 workspace 之外";
/// An edit call must name its replacements in exactly one of the two forms.
pub const EDIT_NEEDS_EDITS: &str = "edit 需要 oldText 与 newText，或者一个非空的 edits 数组";
pub const MUST_BE_EDITS: &str = "必须是 {oldText, newText} 对象的数组";
/// Part of every temporary file's name, so a leftover one is easy to find.
pub const TEMP_MARKER: &str = ".pi-tmp-";
/// What `bash` returns for a successful command that printed nothing.
pub const NO_OUTPUT: &str = "（无输出）";
pub const CANCELLED_BEFORE_START: &str = "[命令在启动前已取消，没有运行]";
pub const CANCELLED: &str = "[命令被取消，已终止它的进程组]";

fn outside(path: &str) -> ToolError {
    ToolError::new(format!("{OUTSIDE_WORKSPACE}：{path}"))
}

// ---------------------------------------------------------------------------------------
// The workspace and its tools
// ---------------------------------------------------------------------------------------

/// The directory the tools work in. The root is canonical, so every comparison is between
/// real paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Canonicalises `root` once; it must be an existing directory.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, ToolError> {
        let given = root.as_ref();
        let root = given.canonicalize().map_err(|error| {
            ToolError::new(format!(
                "workspace 根目录不可用：{}：{error}",
                given.display()
            ))
        })?;
        if !root.is_dir() {
            return Err(ToolError::new(format!(
                "workspace 根目录不是目录：{}",
                given.display()
            )));
        }
        Ok(Workspace { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where `path` (relative to the root, or absolute) really points, if that is inside the
    /// workspace: `.` and `..` are resolved, then the longest existing prefix is canonicalised,
    /// so a symlink anywhere on the way is followed before the check. A path that does not exist
    /// yet resolves to its real parent plus the missing names.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        // region: Lab 8.2 resolve
        // stub: // For now only plain relative names that are no symlinks pass; anything else stops here.
        // stub: let joined = self.root.join(path);
        // stub: let plain = Path::new(path)
        // stub:     .components()
        // stub:     .all(|part| matches!(part, Component::Normal(_)));
        // stub: if !plain || joined.canonicalize().is_ok_and(|real| real != joined) {
        // stub:     todo!()
        // stub: }
        // stub: Ok(joined)
        // 1. Lexically: `..` may not climb above the root, an absolute path must lie under it.
        let lexical = lexical_join(&self.root, Path::new(path));
        if !lexical.starts_with(&self.root) {
            return Err(outside(path));
        }
        // 2. Really: a symlink on the way may point anywhere.
        let real = real_path(&lexical);
        if !real.starts_with(&self.root) {
            return Err(outside(path));
        }
        Ok(real)
        // endregion
    }
}

// region: Lab 8.2 answer-only lexical_join
/// `root` joined with `path` (an absolute `path` replaces it), `.` dropped and `..` applied
/// without touching the file system.
fn lexical_join(root: &Path, path: &Path) -> PathBuf {
    let mut joined = PathBuf::new();
    for part in root.join(path).components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                joined.pop();
            }
            other => joined.push(other),
        }
    }
    joined
}
// endregion

// region: Lab 8.2 answer-only real_path
/// The longest existing prefix of `path` canonicalised, with the missing names appended.
fn real_path(path: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut existing = path;
    loop {
        if let Ok(real) = existing.canonicalize() {
            return missing
                .iter()
                .rev()
                .fold(real, |real, name| real.join(name));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name);
                existing = parent;
            }
            // Only the file-system root has no parent, and it always exists.
            _ => return path.to_path_buf(),
        }
    }
}
// endregion

/// The four coding tools over one workspace, with one [`MutationQueue`] that every mutating
/// tool shares. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CodingTools {
    workspace: Workspace,
    limits: Limits,
    queue: MutationQueue,
}

impl CodingTools {
    pub fn new(root: impl AsRef<Path>) -> Result<Self, ToolError> {
        Ok(CodingTools {
            workspace: Workspace::new(root)?,
            limits: Limits::default(),
            queue: MutationQueue::default(),
        })
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The queue `write` and `edit` line up in.
    pub fn queue(&self) -> &MutationQueue {
        &self.queue
    }

    /// The registry a coding run uses: `read`, `write`, `edit`, `bash`, in this order.
    pub fn registry(&self) -> Result<ToolRegistry, RegistryError> {
        // region: Lab 8.6 registry
        ToolRegistry::new(vec![
            self.read_tool(),
            self.write_tool(),
            self.edit_tool(),
            self.bash_tool(),
        ])
        // endregion
    }
}

// ---------------------------------------------------------------------------------------
// Lab 8.1 — read
// ---------------------------------------------------------------------------------------

/// One window of a text file, as `read` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadWindow {
    /// The shown lines, byte for byte, each with its own line ending.
    pub content: String,
    /// First shown line, 1-based.
    pub start_line: usize,
    /// Last shown line; `start_line - 1` when no line is shown.
    pub end_line: usize,
    pub total_lines: usize,
    /// The byte cap, not `limit` or the end of the file, ended the window.
    pub truncated: bool,
    /// Told to the model after the content when something is left to read.
    pub note: Option<String>,
}

impl ReadWindow {
    /// The text the model sees: the content, then the note on a line of its own.
    pub fn render(&self) -> String {
        match &self.note {
            None => self.content.clone(),
            Some(note) if self.content.is_empty() => note.clone(),
            Some(note) => format!("{}\n{note}", self.content),
        }
    }
}

/// The window of `text` that starts at line `offset` (1-based) and holds at most `limit`
/// lines and at most `max_bytes` bytes — whole lines only, so a continuation at
/// `end_line + 1` neither skips nor repeats a line.
pub fn read_window(
    text: &str,
    offset: usize,
    limit: Option<usize>,
    max_bytes: usize,
) -> Result<ReadWindow, ToolError> {
    // region: Lab 8.1 read_window
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let total = lines.len();
    let start = offset.max(1);
    // An empty file has one place to start: line 1.
    if start > total.max(1) {
        return Err(ToolError::new(format!(
            "offset={offset} 超出文件范围（文件共 {total} 行）"
        )));
    }
    let wanted_end = limit.map_or(total, |limit| total.min((start - 1).saturating_add(limit)));
    let mut content = String::new();
    let mut end = start - 1;
    while end < wanted_end && content.len() + lines[end].len() <= max_bytes {
        content.push_str(lines[end]);
        end += 1;
    }
    let truncated = end < wanted_end;
    let note = if truncated && end < start {
        Some(format!(
            "[第 {start} 行有 {} 字节，超过 {max_bytes} 字节上限；请用 bash 分段查看]",
            lines[start - 1].len()
        ))
    } else if truncated {
        Some(format!(
            "[第 {start}-{end} 行，共 {total} 行；已达 {max_bytes} 字节上限，用 offset={} 继续读取]",
            end + 1
        ))
    } else if end < total {
        Some(format!(
            "[第 {start}-{end} 行，共 {total} 行；用 offset={} 继续读取]",
            end + 1
        ))
    } else {
        None
    };
    Ok(ReadWindow {
        content,
        start_line: start,
        end_line: end,
        total_lines: total,
        truncated,
        note,
    })
    // endregion
}

/// The whole file at `target` as UTF-8 text; errors name the path as the model wrote it.
async fn read_text(target: &Path, path: &str) -> Result<String, ToolError> {
    // region: Lab 8.1 read_text
    let bytes = tokio::fs::read(target)
        .await
        .map_err(|error| ToolError::new(format!("无法读取 {path}：{error}")))?;
    String::from_utf8(bytes).map_err(|_| ToolError::new(format!("{path} 不是 UTF-8 文本")))
    // endregion
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

impl CodingTools {
    /// `read {path, offset?, limit?}`.
    pub fn read_tool(&self) -> SharedTool {
        // region: Lab 8.1 read_tool
        let workspace = self.workspace.clone();
        let max_bytes = self.limits.max_read_bytes;
        let schema = object_schema((
            field("path", string_value()),
            field("offset", optional_positive_integer()),
            field("limit", optional_positive_integer()),
        ));
        Tool::new(
            "read",
            READ_DESCRIPTION,
            schema,
            move |(path, offset, limit): (String, Option<u64>, Option<u64>), _context| {
                let workspace = workspace.clone();
                async move {
                    let target = workspace.resolve(&path)?;
                    let file = read_text(&target, &path).await?;
                    let window = read_window(
                        &file,
                        offset.map_or(1, to_usize),
                        limit.map(to_usize),
                        max_bytes,
                    )?;
                    Ok(ToolOutput {
                        content: vec![text(&window.render())],
                        details: Some(json!({
                            "path": path,
                            "startLine": window.start_line,
                            "endLine": window.end_line,
                            "totalLines": window.total_lines,
                            "bytes": window.content.len(),
                            "truncated": window.truncated,
                        })),
                        is_error: None,
                    })
                }
            },
        )
        .shared()
        // endregion
    }
}

// ---------------------------------------------------------------------------------------
// Lab 8.3 — write and the mutation queue
// ---------------------------------------------------------------------------------------

/// Serialises the mutations of one path, in arrival order; mutations of different paths run
/// concurrently. Keys are resolved paths, so two spellings of one file share a turn. Clones
/// share one queue.
#[derive(Debug, Clone, Default)]
pub struct MutationQueue {
    slots: Arc<Mutex<HashMap<PathBuf, Slot>>>,
}

/// One path's turn: the lock its mutations take in order, and how many hold or wait for it.
#[derive(Debug, Default)]
struct Slot {
    lock: Arc<tokio::sync::Mutex<()>>,
    pending: usize,
}

impl MutationQueue {
    /// Runs `operation` once every earlier operation on `path` has finished.
    pub async fn run<T>(&self, path: &Path, operation: impl Future<Output = T>) -> T {
        // region: Lab 8.3 MutationQueue::run
        let lock = self.enter(path);
        // Leaves the slot however this future ends: finished, panicked or dropped while waiting.
        let _leave = Leave { queue: self, path };
        let _turn = lock.lock().await;
        operation.await
        // endregion
    }

    /// How many operations on `path` are running or waiting right now.
    pub fn pending(&self, path: &Path) -> usize {
        // region: Lab 8.3 MutationQueue::pending
        self.slots().get(path).map_or(0, |slot| slot.pending)
        // endregion
    }

    // region: Lab 8.3 answer-only queue bookkeeping
    fn slots(&self) -> MutexGuard<'_, HashMap<PathBuf, Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one more operation on `path` and hands out the path's lock.
    fn enter(&self, path: &Path) -> Arc<tokio::sync::Mutex<()>> {
        let mut slots = self.slots();
        let slot = slots.entry(path.to_path_buf()).or_default();
        slot.pending += 1;
        Arc::clone(&slot.lock)
    }

    /// Counts one operation less; the last one out removes the slot.
    fn leave(&self, path: &Path) {
        let mut slots = self.slots();
        if let Some(slot) = slots.get_mut(path) {
            slot.pending -= 1;
            if slot.pending == 0 {
                slots.remove(path);
            }
        }
    }
    // endregion
}

// region: Lab 8.3 answer-only Leave
struct Leave<'a> {
    queue: &'a MutationQueue,
    path: &'a Path,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.queue.leave(self.path);
    }
}
// endregion

static TEMP_FILES: AtomicU64 = AtomicU64::new(0);

/// Writes `content` to `target` through a temporary file in the same directory that is then
/// renamed over the target. Parent directories are created; on failure the temporary file is
/// removed.
pub async fn write_atomically(target: &Path, content: &[u8]) -> io::Result<()> {
    // region: Lab 8.3 write_atomically
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "不是文件路径"));
    };
    tokio::fs::create_dir_all(dir).await?;
    let temp = dir.join(format!(
        ".{}{TEMP_MARKER}{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        TEMP_FILES.fetch_add(1, Ordering::Relaxed)
    ));
    let written = async {
        tokio::fs::write(&temp, content).await?;
        tokio::fs::rename(&temp, target).await
    }
    .await;
    if written.is_err() {
        // Best effort: the error worth reporting is the write's own.
        let _ = tokio::fs::remove_file(&temp).await;
    }
    written
    // endregion
}

impl CodingTools {
    /// `write {path, content}`.
    pub fn write_tool(&self) -> SharedTool {
        // region: Lab 8.3 write_tool
        let workspace = self.workspace.clone();
        let queue = self.queue.clone();
        let schema = object_schema((
            field("path", string_value()),
            field("content", string_value()),
        ));
        Tool::new(
            "write",
            WRITE_DESCRIPTION,
            schema,
            move |(path, content): (String, String), _context| {
                let workspace = workspace.clone();
                let queue = queue.clone();
                async move {
                    let target = workspace.resolve(&path)?;
                    queue
                        .run(&target, write_atomically(&target, content.as_bytes()))
                        .await
                        .map_err(|error| ToolError::new(format!("无法写入 {path}：{error}")))?;
                    let bytes = content.len();
                    Ok(ToolOutput {
                        content: vec![text(&format!("已写入 {bytes} 字节：{path}"))],
                        details: Some(json!({"path": path, "bytes": bytes})),
                        is_error: None,
                    })
                }
            },
        )
        .shared()
        // endregion
    }
}

// ---------------------------------------------------------------------------------------
// Lab 8.4 — edit
// ---------------------------------------------------------------------------------------

/// One exact-text replacement of an edit call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    pub old_text: String,
    pub new_text: String,
}

/// The optional `edits` field: an array of `{oldText, newText}` objects.
pub fn edits_value() -> Validator<Option<Vec<Replacement>>> {
    // region: Lab 8.4 edits_value
    let item = object_schema((
        field("oldText", string_value()),
        field("newText", string_value()),
    ));
    let json_schema = json!({"type": "array", "items": item.json_schema()});
    Validator::new(json_schema, true, move |value| match value {
        None => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|each| match item.parse(each) {
                Ok((old_text, new_text)) => Ok(Replacement { old_text, new_text }),
                Err(_) => Err(ValidationError(MUST_BE_EDITS.into())),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(ValidationError(MUST_BE_EDITS.into())),
    })
    // endregion
}

/// The replacements an edit call asks for: a non-empty `edits` array, or the single
/// `oldText`/`newText` pair — exactly one of the two forms.
pub fn edit_batch(
    old_text: Option<String>,
    new_text: Option<String>,
    edits: Option<Vec<Replacement>>,
) -> Result<Vec<Replacement>, ToolError> {
    // region: Lab 8.4 edit_batch
    match (old_text, new_text, edits) {
        (Some(old_text), Some(new_text), None) => Ok(vec![Replacement { old_text, new_text }]),
        (None, None, Some(edits)) if !edits.is_empty() => Ok(edits),
        _ => Err(ToolError::new(EDIT_NEEDS_EDITS)),
    }
    // endregion
}

/// `content` with every replacement applied, or the first reason one cannot be: each
/// `old_text` must be non-empty and occur exactly once in the original `content`, and no two
/// may overlap. All or nothing; nothing is written here.
pub fn apply_edits(content: &str, edits: &[Replacement], path: &str) -> Result<String, ToolError> {
    // region: Lab 8.4 apply_edits
    // (start, end, index) of each match in the original content.
    let mut spans = Vec::with_capacity(edits.len());
    for (index, edit) in edits.iter().enumerate() {
        let number = index + 1;
        if edit.old_text.is_empty() {
            return Err(ToolError::new(format!("第 {number} 个修改的 oldText 为空")));
        }
        let mut matches = content.match_indices(edit.old_text.as_str());
        let Some((start, _)) = matches.next() else {
            return Err(ToolError::new(format!(
                "第 {number} 个修改的 oldText 在 {path} 中找不到"
            )));
        };
        let count = 1 + matches.count();
        if count > 1 {
            return Err(ToolError::new(format!(
                "第 {number} 个修改的 oldText 在 {path} 中出现了 {count} 次，必须恰好一次"
            )));
        }
        spans.push((start, start + edit.old_text.len(), index));
    }
    spans.sort_unstable();
    for pair in spans.windows(2) {
        let ((_, end, left), (start, _, right)) = (pair[0], pair[1]);
        if start < end {
            return Err(ToolError::new(format!(
                "第 {} 个和第 {} 个修改的 oldText 相互重叠",
                left.min(right) + 1,
                left.max(right) + 1
            )));
        }
    }
    let mut edited = String::with_capacity(content.len());
    let mut copied = 0;
    for (start, end, index) in spans {
        edited.push_str(&content[copied..start]);
        edited.push_str(&edits[index].new_text);
        copied = end;
    }
    edited.push_str(&content[copied..]);
    Ok(edited)
    // endregion
}

/// `path`, `oldText`, `newText`, `edits`, as the edit schema parses them.
type EditArguments = (
    String,
    Option<String>,
    Option<String>,
    Option<Vec<Replacement>>,
);

impl CodingTools {
    /// `edit {path, oldText?, newText?, edits?}`.
    pub fn edit_tool(&self) -> SharedTool {
        // region: Lab 8.4 edit_tool
        let workspace = self.workspace.clone();
        let queue = self.queue.clone();
        let schema = object_schema((
            field("path", string_value()),
            field("oldText", optional_string()),
            field("newText", optional_string()),
            field("edits", edits_value()),
        ));
        Tool::new(
            "edit",
            EDIT_DESCRIPTION,
            schema,
            move |(path, old_text, new_text, edits): EditArguments, _context| {
                let workspace = workspace.clone();
                let queue = queue.clone();
                async move {
                    let edits = edit_batch(old_text, new_text, edits)?;
                    let target = workspace.resolve(&path)?;
                    // Read, check and write in one turn: nobody changes the file in between.
                    let (old_bytes, new_bytes) = queue
                        .run(&target, async {
                            let original = read_text(&target, &path).await?;
                            let edited = apply_edits(&original, &edits, &path)?;
                            write_atomically(&target, edited.as_bytes()).await.map_err(
                                |error| ToolError::new(format!("无法写入 {path}：{error}")),
                            )?;
                            Ok::<_, ToolError>((original.len(), edited.len()))
                        })
                        .await?;
                    Ok(ToolOutput {
                        content: vec![text(&format!("已在 {path} 中替换 {} 处", edits.len()))],
                        details: Some(json!({
                            "path": path,
                            "edits": edits.len(),
                            "oldBytes": old_bytes,
                            "newBytes": new_bytes,
                        })),
                        is_error: None,
                    })
                }
            },
        )
        .shared()
        // endregion
    }
}

// ---------------------------------------------------------------------------------------
// Lab 8.5 — bash
// ---------------------------------------------------------------------------------------

/// How a command's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The token was cancelled before anything was spawned.
    NotStarted,
    /// The shell ended by itself: an exit code, or the signal that killed it.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    TimedOut,
    Cancelled,
}

/// Everything a finished run reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRun {
    pub ending: Ending,
    /// stdout and stderr in arrival order, within the cap, its truncation note included.
    pub output: String,
    /// Bytes the command wrote, shown or not.
    pub output_bytes: usize,
    pub truncated: bool,
}

/// Runs `command` with `sh -c` in `root`, in a process group of its own, until it exits, the
/// timeout passes or `cancel` fires; a pre-cancelled token spawns nothing.
pub async fn run_command(
    command: &str,
    root: &Path,
    timeout: Duration,
    limits: &Limits,
    cancel: &CancellationToken,
) -> Result<CommandRun, ToolError> {
    // region: Lab 8.5 run_command
    if cancel.is_cancelled() {
        return Ok(CommandRun {
            ending: Ending::NotStarted,
            output: String::new(),
            output_bytes: 0,
            truncated: false,
        });
    }
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, whose id is the shell's pid: one signal reaches them all.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| ToolError::new(format!("无法启动 sh：{error}")))?;
    let (Some(group), Some(stdout), Some(stderr)) =
        (child.id(), child.stdout.take(), child.stderr.take())
    else {
        return Err(ToolError::new("无法连接命令的输出"));
    };
    let group = group as libc::pid_t;
    let mut capture = OutputCapture::new(limits.max_bash_output_bytes);
    let (ending, ()) = tokio::join!(
        supervise(&mut child, group, timeout, limits.kill_grace, cancel),
        capture_output(stdout, stderr, &mut capture),
    );
    let (output, truncated) = capture.finish();
    Ok(CommandRun {
        ending,
        output,
        output_bytes: capture.total,
        truncated,
    })
    // endregion
}

/// Waits for the shell, the timeout or the token, whichever comes first. On timeout or
/// cancellation the group gets SIGTERM and `grace` to exit; then whatever is left of the group
/// — background jobs, processes that ignore SIGTERM — gets SIGKILL, on every path.
async fn supervise(
    child: &mut Child,
    group: libc::pid_t,
    timeout: Duration,
    grace: Duration,
    cancel: &CancellationToken,
) -> Ending {
    // region: Lab 8.5 supervise
    let ending = tokio::select! {
        status = child.wait() => exited(status),
        () = tokio::time::sleep(timeout) => Ending::TimedOut,
        () = cancel.cancelled() => Ending::Cancelled,
    };
    if !matches!(ending, Ending::Exited { .. }) {
        signal_group(group, libc::SIGTERM);
        let _ = tokio::time::timeout(grace, child.wait()).await;
    }
    signal_group(group, libc::SIGKILL);
    let _ = child.wait().await;
    ending
    // endregion
}

fn exited(status: io::Result<ExitStatus>) -> Ending {
    match status {
        Ok(status) => Ending::Exited {
            code: status.code(),
            signal: status.signal(),
        },
        Err(_) => Ending::Exited {
            code: None,
            signal: None,
        },
    }
}

/// Sends `signal` to every process of the group. A group that is already gone is fine.
fn signal_group(group: libc::pid_t, signal: libc::c_int) {
    // region: Lab 8.5 signal_group
    // SAFETY: killpg only sends a signal; its failure (ESRCH: no such group) is ignored.
    unsafe {
        libc::killpg(group, signal);
    }
    // endregion
}

/// The first bytes of a command's output, and how many there were in all.
struct OutputCapture {
    kept: Vec<u8>,
    total: usize,
    cap: usize,
}

impl OutputCapture {
    fn new(cap: usize) -> Self {
        OutputCapture {
            kept: Vec::new(),
            total: 0,
            cap,
        }
    }

    /// Counts every byte, keeps no more than the cap.
    fn push(&mut self, bytes: &[u8]) {
        // region: Lab 8.5 OutputCapture::push
        self.total += bytes.len();
        let room = self.cap.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
        // endregion
    }

    /// The output as text, and whether it was cut. A cut output ends with a note saying so,
    /// and the note counts against the cap like any other byte.
    fn finish(&self) -> (String, bool) {
        // region: Lab 8.5 OutputCapture::finish
        let text = String::from_utf8_lossy(&self.kept).into_owned();
        if self.total <= self.cap {
            return (text, false);
        }
        let note = bash_truncation_note(self.total, self.cap);
        let mut cut = self.cap.saturating_sub(note.len()).min(text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        (format!("{}{note}", &text[..cut]), true)
        // endregion
    }
}

/// The note that ends a cut output.
pub fn bash_truncation_note(total: usize, cap: usize) -> String {
    format!("\n[输出被截断：共 {total} 字节，超过 {cap} 字节上限]")
}

/// Reads stdout and stderr as they come, into one capture, until both are closed.
async fn capture_output(
    mut stdout: impl AsyncRead + Unpin,
    mut stderr: impl AsyncRead + Unpin,
    capture: &mut OutputCapture,
) {
    // region: Lab 8.5 capture_output
    let (mut out_buffer, mut err_buffer) = ([0_u8; 8192], [0_u8; 8192]);
    let (mut out_open, mut err_open) = (true, true);
    while out_open || err_open {
        tokio::select! {
            read = stdout.read(&mut out_buffer), if out_open => match read {
                Ok(0) | Err(_) => out_open = false,
                Ok(count) => capture.push(&out_buffer[..count]),
            },
            read = stderr.read(&mut err_buffer), if err_open => match read {
                Ok(0) | Err(_) => err_open = false,
                Ok(count) => capture.push(&err_buffer[..count]),
            },
        }
    }
    // endregion
}

/// What the model reads about a run: the output, then a status line unless it exited 0.
pub fn bash_output(command: &str, run: CommandRun, timeout: Duration) -> ToolOutput {
    // region: Lab 8.5 bash_output
    let status = match run.ending {
        Ending::Exited { code: Some(0), .. } => None,
        Ending::Exited {
            code: Some(code), ..
        } => Some(format!("[退出码 {code}]")),
        Ending::Exited {
            signal: Some(signal),
            ..
        } => Some(format!("[命令被信号 {signal} 终止]")),
        Ending::Exited { .. } => Some("[命令异常结束]".to_string()),
        Ending::TimedOut => Some(format!(
            "[命令超时（{} 秒），已终止它的进程组]",
            timeout.as_secs()
        )),
        Ending::Cancelled => Some(CANCELLED.to_string()),
        Ending::NotStarted => Some(CANCELLED_BEFORE_START.to_string()),
    };
    let mut shown = run.output;
    match &status {
        None if shown.is_empty() => shown = NO_OUTPUT.to_string(),
        None => {}
        Some(status) => {
            if !shown.is_empty() && !shown.ends_with('\n') {
                shown.push('\n');
            }
            shown.push_str(status);
        }
    }
    let exit_code = match run.ending {
        Ending::Exited { code, .. } => code,
        _ => None,
    };
    ToolOutput {
        content: vec![text(&shown)],
        details: Some(json!({
            "command": command,
            "exitCode": exit_code,
            "timedOut": run.ending == Ending::TimedOut,
            "aborted": matches!(run.ending, Ending::Cancelled | Ending::NotStarted),
            "truncated": run.truncated,
            "outputBytes": run.output_bytes,
        })),
        is_error: Some(status.is_some()),
    }
    // endregion
}

impl CodingTools {
    /// `bash {command, timeout?}`; `timeout` is in seconds.
    pub fn bash_tool(&self) -> SharedTool {
        // region: Lab 8.5 bash_tool
        let root = self.workspace.root().to_path_buf();
        let limits = self.limits;
        let schema = object_schema((
            field("command", string_value()),
            field("timeout", optional_positive_integer()),
        ));
        Tool::new(
            "bash",
            BASH_DESCRIPTION,
            schema,
            move |(command, timeout): (String, Option<u64>), context: ToolContext| {
                let root = root.clone();
                async move {
                    let timeout = timeout.map_or(limits.bash_timeout, Duration::from_secs);
                    let run =
                        run_command(&command, &root, timeout, &limits, &context.cancel).await?;
                    Ok(bash_output(&command, run, timeout))
                }
            },
        )
        .shared()
        // endregion
    }
}
