//! The coding tools: `read`, `write`, `edit` and `bash`, the four actions that let the agent
//! loop work on a real directory.
//!
//! Each one is an ordinary chapter 06 [`Tool`] with upstream pi's tool and argument names, its
//! arguments described by an [`object_schema`] of the course validators, so the four register in
//! one [`ToolRegistry`] and run through chapter 07's loop unchanged.
//!
//! Invariants:
//! - every path is resolved against the workspace root; a path that leaves it — through `..`,
//!   as an absolute path or through a symlink — is refused (a course guardrail, not a sandbox),
//!   and the root itself is no file to write;
//! - a file is replaced by writing a temporary file beside it and renaming it over the target,
//!   so a reader sees the old file or the new one, never half of one; the new file keeps the old
//!   one's permissions;
//! - mutations of one path run one at a time, in arrival order; other paths proceed;
//! - an edit batch is checked against the file in memory before its one write, so a failing
//!   batch writes nothing; an edit keeps the file's line endings and byte order mark;
//! - `bash` owns a process group: on timeout or cancellation the group gets SIGTERM, then
//!   SIGKILL; no process of it outlives the call, and the call ends even while a process that
//!   left the group holds the output open;
//! - the model reads the end of a command's output, cleaned of control characters and within a
//!   byte cap; a cut output is saved whole to a file outside the workspace.

use std::collections::{HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs::DirBuilder;
use std::future::Future;
use std::io;
use std::iter::Peekable;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Component, Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::str::Chars;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
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
/// A command that prints without end (`yes`) must not fill the disk before its timeout.
pub const DEFAULT_MAX_SAVED_OUTPUT_BYTES: usize = 64 * 1024 * 1024;
/// How long a command may run when its call gives no `timeout`.
pub const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(120);
/// Between SIGTERM and SIGKILL: the time a command gets to clean up after itself.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);
/// How long the output is still read once the command's process group is gone. Only a process
/// that left the group can hold the pipes open that long; waiting for it would never end.
pub const DEFAULT_OUTPUT_GRACE: Duration = Duration::from_millis(500);

/// What the tools may consume. Tests shrink them; the defaults suit a real session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of file content one `read` shows.
    pub max_read_bytes: usize,
    /// Bytes of output one `bash` call returns, its truncation note included.
    pub max_bash_output_bytes: usize,
    /// Bytes of one command's output its output file keeps.
    pub max_saved_output_bytes: usize,
    pub bash_timeout: Duration,
    pub kill_grace: Duration,
    pub output_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
            max_bash_output_bytes: DEFAULT_MAX_BASH_OUTPUT_BYTES,
            max_saved_output_bytes: DEFAULT_MAX_SAVED_OUTPUT_BYTES,
            bash_timeout: DEFAULT_BASH_TIMEOUT,
            kill_grace: DEFAULT_KILL_GRACE,
            output_grace: DEFAULT_OUTPUT_GRACE,
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
pub const BASH_DESCRIPTION: &str = "Run a command with bash (sh where bash is missing) in the \
workspace root and return its output (stdout and stderr, control characters removed) and exit \
code. Long output keeps its end; the whole output is then saved to a file the result names. \
timeout is in seconds.";

/// Prefix of every refusal of a path outside the workspace.
pub const OUTSIDE_WORKSPACE: &str = "路径在 workspace 之外";
/// Prefix of the refusal to write a path that resolves to the workspace root itself.
pub const ROOT_IS_NO_FILE: &str = "这个路径就是 workspace 根目录，不能当作文件写入";
/// An edit call must name its replacements in exactly one of the two forms.
pub const EDIT_NEEDS_EDITS: &str = "edit 需要 oldText 与 newText，或者一个非空的 edits 数组";
pub const MUST_BE_EDITS: &str = "必须是 {oldText, newText} 对象的数组";
/// Part of every temporary file's name, so a leftover one is easy to find.
pub const TEMP_MARKER: &str = ".pi-tmp-";
/// The byte order mark an edit keeps in front of the text.
pub const BOM: &str = "\u{feff}";
/// What `bash` returns for a successful command that printed nothing.
pub const NO_OUTPUT: &str = "（无输出）";
pub const CANCELLED_BEFORE_START: &str = "[命令在启动前已取消，没有运行]";
pub const CANCELLED: &str = "[命令被取消，已终止它的进程组]";
/// The status line of a run whose end could not be observed (`wait()` failed).
pub const ENDING_UNKNOWN: &str = "[无法得知命令是怎样结束的，已终止它的进程组]";
/// The shell `bash` runs commands with where no `bash` is on the `PATH`.
pub const FALLBACK_SHELL: &str = "/bin/sh";
/// A variable whose name holds one of these (in any case) never reaches a command.
pub const SECRET_NAME_PARTS: [&str; 4] = ["KEY", "TOKEN", "SECRET", "PASSWORD"];

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
        // 1. Lexically: with `.` and `..` applied, the path must lie under the root. Only where
        //    it ends counts: `../ws/a.txt` leaves and re-enters, and is inside.
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
/// tool shares. Cheap to clone; clones share the queue and the directory of saved outputs.
#[derive(Debug, Clone)]
pub struct CodingTools {
    workspace: Workspace,
    limits: Limits,
    queue: MutationQueue,
    /// The environment commands start from, captured once; secrets are removed at each spawn.
    environment: Arc<[(OsString, OsString)]>,
    outputs: Arc<OutputDir>,
}

impl CodingTools {
    /// The tools over `root`, with the default limits, this process's environment, and saved
    /// outputs under the system temp dir.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, ToolError> {
        Ok(CodingTools {
            workspace: Workspace::new(root)?,
            limits: Limits::default(),
            queue: MutationQueue::default(),
            environment: std::env::vars_os().collect(),
            outputs: Arc::new(OutputDir::new(std::env::temp_dir())),
        })
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Commands start from `variables` instead of this process's environment (secret-named
    /// ones are still removed); the shell is looked up on their `PATH`.
    pub fn with_environment<K, V>(mut self, variables: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<OsString>,
        V: Into<OsString>,
    {
        self.environment = variables
            .into_iter()
            .map(|(name, value)| (name.into(), value.into()))
            .collect();
        self
    }

    /// Saved outputs go into a directory of their own under `parent` instead of the system temp
    /// dir.
    pub fn with_output_dir(mut self, parent: impl Into<PathBuf>) -> Self {
        self.outputs = Arc::new(OutputDir::new(parent.into()));
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

    /// The shell `bash` runs commands with: [`find_shell`] on the environment's `PATH`.
    pub fn shell(&self) -> PathBuf {
        find_shell(self.variable("PATH"))
    }

    fn variable(&self, name: &str) -> Option<&OsStr> {
        self.environment
            .iter()
            .find(|(each, _)| each == name)
            .map(|(_, value)| value.as_os_str())
    }

    /// The registry a coding run uses: `read`, `write`, `edit`, `bash`, in this order.
    pub fn registry(&self) -> Result<ToolRegistry, RegistryError> {
        // region: Lab 8.7 registry
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

/// A fresh name for the temporary file of a write to `target`: hidden, in the target's own
/// directory (a rename is atomic only within one file system), and never the same twice in
/// this process, so two writes in one directory cannot share it. `None` for a path without a
/// parent or a file name.
pub fn temp_path(target: &Path) -> Option<PathBuf> {
    // region: Lab 8.3 temp_path
    let (dir, name) = (target.parent()?, target.file_name()?);
    Some(dir.join(format!(
        ".{}{TEMP_MARKER}{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        TEMP_FILES.fetch_add(1, Ordering::Relaxed)
    )))
    // endregion
}

/// Writes `content` to `target` through a temporary file ([`temp_path`]) that is then renamed
/// over the target. Parent directories are created; an existing target's permissions carry
/// over, a new file gets the default ones; on failure the temporary file is removed.
pub async fn write_atomically(target: &Path, content: &[u8]) -> io::Result<()> {
    // region: Lab 8.3 write_atomically
    let (Some(dir), Some(temp)) = (target.parent(), temp_path(target)) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "不是文件路径"));
    };
    tokio::fs::create_dir_all(dir).await?;
    let kept = match tokio::fs::metadata(target).await {
        Ok(metadata) => Some(metadata.permissions()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => None,
        Err(error) => return Err(error),
    };
    let written = async {
        // A replacement is private until it has the old file's exact mode (which the umask
        // cannot trim); a new file gets the usual 0666 less the umask.
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if kept.is_some() { 0o600 } else { 0o666 })
            .open(&temp)
            .await?;
        file.write_all(content).await?;
        file.flush().await?;
        if let Some(permissions) = kept {
            file.set_permissions(permissions).await?;
        }
        drop(file);
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
                    // Its parent lies outside: not even a temporary file may go there.
                    if target == workspace.root() {
                        return Err(ToolError::new(format!("{ROOT_IS_NO_FILE}：{path}")));
                    }
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

/// `original` with `edits` applied the way the file is written: a byte order mark stays in
/// front and is no part of the text; `oldText` and `newText` take the file's line ending — the
/// one its first line ends with — whichever ending they came with. Bytes outside the replaced
/// spans never change.
pub fn edit_text(original: &str, edits: &[Replacement], path: &str) -> Result<String, ToolError> {
    // region: Lab 8.4 edit_text
    let (bom, body) = match original.strip_prefix(BOM) {
        Some(body) => (BOM, body),
        None => ("", original),
    };
    let crlf = body
        .split_inclusive('\n')
        .next()
        .is_some_and(|line| line.ends_with("\r\n"));
    let in_file_endings = |text: &str| {
        let lf = text.replace("\r\n", "\n");
        if crlf {
            lf.replace('\n', "\r\n")
        } else {
            lf
        }
    };
    let edits: Vec<Replacement> = edits
        .iter()
        .map(|edit| Replacement {
            old_text: in_file_endings(&edit.old_text),
            new_text: in_file_endings(&edit.new_text),
        })
        .collect();
    Ok(format!("{bom}{}", apply_edits(body, &edits, path)?))
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
                            let edited = edit_text(&original, &edits, &path)?;
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
// Lab 8.5 — what the model reads of a command
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
    /// Waiting for the shell failed, so how it ended is unknown; its group was killed anyway.
    Unknown,
    TimedOut,
    Cancelled,
}

/// Where the whole output of a cut run is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FullOutput {
    /// Every byte the command wrote is in this file.
    Saved(PathBuf),
    /// The file holds only the first `bytes` bytes: the output passed
    /// [`Limits::max_saved_output_bytes`].
    Partial { path: PathBuf, bytes: usize },
    /// No file could be written, for this reason.
    Unsaved(String),
}

impl FullOutput {
    pub fn path(&self) -> Option<&Path> {
        match self {
            FullOutput::Saved(path) | FullOutput::Partial { path, .. } => Some(path),
            FullOutput::Unsaved(_) => None,
        }
    }
}

/// Everything a finished run reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRun {
    pub ending: Ending,
    /// What the model reads of stdout and stderr (in arrival order): within the cap, its
    /// truncation note included.
    pub output: String,
    /// Bytes the command wrote, shown or not.
    pub output_bytes: usize,
    pub truncated: bool,
    /// Where the whole output went; only a cut output has one.
    pub full_output: Option<FullOutput>,
    /// The shell that ran the command, or would have.
    pub shell: PathBuf,
}

/// The end of a command's output — its last `cap` bytes — and how many bytes there were in all.
/// While the output fits the cap, the capture holds all of it.
#[derive(Debug, Clone)]
pub struct OutputCapture {
    tail: VecDeque<u8>,
    total: usize,
    cap: usize,
}

impl OutputCapture {
    pub fn new(cap: usize) -> Self {
        OutputCapture {
            tail: VecDeque::new(),
            total: 0,
            cap,
        }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Bytes pushed so far, kept or not.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The bytes kept, oldest first.
    pub fn kept(&self) -> Vec<u8> {
        self.tail.iter().copied().collect()
    }

    /// Counts every byte; keeps the last `cap` of all bytes pushed so far.
    pub fn push(&mut self, bytes: &[u8]) {
        // region: Lab 8.5 OutputCapture::push
        self.total += bytes.len();
        // Only the end of a chunk larger than the cap can survive it.
        let bytes = &bytes[bytes.len().saturating_sub(self.cap)..];
        self.tail.extend(bytes);
        let surplus = self.tail.len().saturating_sub(self.cap);
        self.tail.drain(..surplus);
        // endregion
    }

    /// The text the model reads, and whether it was cut. Invalid UTF-8 becomes U+FFFD, then
    /// [`clean_output`] runs. A cut output starts with its note and keeps the end of the
    /// output, no more raw bytes than the cap leaves beside the note, starting at a whole
    /// character; a note longer than the cap is all that is shown.
    pub fn finish(&self, full_output: Option<&FullOutput>) -> (String, bool) {
        // region: Lab 8.5 OutputCapture::finish
        let kept = self.kept();
        if self.total <= self.cap {
            return (clean_output(&String::from_utf8_lossy(&kept)), false);
        }
        let note = bash_truncation_note(self.total, self.cap, full_output);
        let room = self.cap.saturating_sub(note.len()).min(kept.len());
        let mut tail = &kept[kept.len() - room..];
        // A cut inside a character leaves up to three continuation bytes: not worth a U+FFFD.
        let partial = tail
            .iter()
            .take(3)
            .take_while(|byte| *byte & 0b1100_0000 == 0b1000_0000)
            .count();
        tail = &tail[partial..];
        let shown = clean_output(&String::from_utf8_lossy(tail));
        (format!("{note}{shown}"), true)
        // endregion
    }
}

/// The note that opens a cut output, on a line of its own.
pub fn bash_truncation_note(total: usize, cap: usize, full_output: Option<&FullOutput>) -> String {
    let whole = match full_output {
        Some(FullOutput::Saved(path)) => format!("完整输出在 {}", path.display()),
        Some(FullOutput::Partial { path, bytes }) => {
            format!("{} 只保存了前 {bytes} 字节", path.display())
        }
        Some(FullOutput::Unsaved(reason)) => format!("完整输出没能保存：{reason}"),
        None => "完整输出没有保存".to_string(),
    };
    format!("[输出共 {total} 字节，超过 {cap} 字节上限，下面只是结尾；{whole}]\n")
}

/// `text` as the model may read it: escape sequences (colours, cursor moves, window titles)
/// and control characters removed, `\n` and `\t` kept. `\r\n` ends a line like `\n`; a lone
/// `\r` followed by more of its line erases what came before it on that line, the way a
/// progress bar redraws itself, so only the last state shows.
pub fn clean_output(text: &str) -> String {
    // region: Lab 8.5 clean_output
    let mut clean = String::with_capacity(text.len());
    // Where the current line starts in `clean`: a `\r` rewinds to it.
    let mut line_start = 0;
    let mut chars = text.chars().peekable();
    while let Some(char) = chars.next() {
        match char {
            '\n' => {
                clean.push('\n');
                line_start = clean.len();
            }
            '\t' => clean.push('\t'),
            '\r' => {
                while chars.next_if_eq(&'\r').is_some() {}
                if chars.peek().is_some_and(|next| *next != '\n') {
                    clean.truncate(line_start);
                }
            }
            '\u{1b}' => skip_escape(&mut chars),
            control if control.is_control() => {}
            other => clean.push(other),
        }
    }
    clean
    // endregion
}

// region: Lab 8.5 answer-only skip_escape
/// Skips the rest of an escape sequence whose ESC was just read: CSI (`ESC [`, parameter and
/// intermediate bytes, one final byte `@`…`~`), OSC (`ESC ]` up to BEL or `ESC \`), or ESC and
/// the one character after it. A malformed sequence ends at the first character that cannot
/// belong to it, which is kept.
fn skip_escape(chars: &mut Peekable<Chars<'_>>) {
    match chars.next() {
        Some('[') => {
            while chars
                .next_if(|c| ('\u{20}'..='\u{3f}').contains(c))
                .is_some()
            {}
            chars.next_if(|c| ('@'..='~').contains(c));
        }
        Some(']') => {
            while let Some(char) = chars.next() {
                if char == '\u{7}' {
                    break;
                }
                if char == '\u{1b}' {
                    chars.next_if_eq(&'\\');
                    break;
                }
            }
        }
        _ => {}
    }
}
// endregion

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
        Ending::Exited { .. } | Ending::Unknown => Some(ENDING_UNKNOWN.to_string()),
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
    let (exit_code, signal) = match run.ending {
        Ending::Exited { code, signal } => (code, signal),
        _ => (None, None),
    };
    ToolOutput {
        content: vec![text(&shown)],
        details: Some(json!({
            "command": command,
            "shell": run.shell.display().to_string(),
            "exitCode": exit_code,
            "signal": signal,
            "timedOut": run.ending == Ending::TimedOut,
            "aborted": matches!(run.ending, Ending::Cancelled | Ending::NotStarted),
            "truncated": run.truncated,
            "outputBytes": run.output_bytes,
            "fullOutputPath": run
                .full_output
                .as_ref()
                .and_then(FullOutput::path)
                .map(|path| path.display().to_string()),
        })),
        is_error: Some(status.is_some()),
    }
    // endregion
}

// ---------------------------------------------------------------------------------------
// Lab 8.6 — bash
// ---------------------------------------------------------------------------------------

/// The shell for `bash`: the first `bash` on `path` (a `PATH` value) that is an executable
/// file, else [`FALLBACK_SHELL`]. Relative entries are skipped: they would name a different
/// directory for every working directory.
pub fn find_shell(path: Option<&OsStr>) -> PathBuf {
    // region: Lab 8.6 find_shell
    path.into_iter()
        .flat_map(std::env::split_paths)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("bash"))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|metadata| {
                metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
            })
        })
        .unwrap_or_else(|| PathBuf::from(FALLBACK_SHELL))
    // endregion
}

/// Whether a variable of this name must not reach a command: its name holds one of
/// [`SECRET_NAME_PARTS`], in any case (`OPENAI_API_KEY`, `github_token`, `PGPASSWORD`).
pub fn is_secret_name(name: &OsStr) -> bool {
    // region: Lab 8.6 is_secret_name
    let name = name.to_string_lossy().to_ascii_uppercase();
    SECRET_NAME_PARTS.iter().any(|part| name.contains(part))
    // endregion
}

impl CodingTools {
    /// Runs `command` with [`CodingTools::shell`] `-c` in the workspace root, in a process group
    /// of its own, with the captured environment minus its secrets and an empty stdin, until
    /// it exits, the timeout passes or `cancel` fires; a pre-cancelled token spawns nothing.
    pub async fn run_command(
        &self,
        command: &str,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<CommandRun, ToolError> {
        // region: Lab 8.6 run_command
        let shell = self.shell();
        if cancel.is_cancelled() {
            return Ok(CommandRun {
                ending: Ending::NotStarted,
                output: String::new(),
                output_bytes: 0,
                truncated: false,
                full_output: None,
                shell,
            });
        }
        let variables = self
            .environment
            .iter()
            .filter(|(name, _)| !is_secret_name(name))
            .map(|(name, value)| (name, value));
        let mut child = tokio::process::Command::new(&shell)
            .arg("-c")
            .arg(command)
            .current_dir(self.workspace.root())
            .env_clear()
            .envs(variables)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, whose id is the shell's pid: one signal reaches them all.
            .process_group(0)
            .spawn()
            .map_err(|error| ToolError::new(format!("无法启动 {}：{error}", shell.display())))?;
        // Until the shell is waited for, it has an id.
        let Some(id) = child.id() else {
            return Err(ToolError::new("命令刚启动就找不到了"));
        };
        let mut group = ProcessGroup::new(id);
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(ToolError::new("无法连接命令的输出"));
        };
        let mut sink = OutputSink::new(&self.outputs, self.limits.max_saved_output_bytes);
        let mut capture = OutputCapture::new(self.limits.max_bash_output_bytes);
        let ended = CancellationToken::new();
        let supervised = async {
            let ending = supervise(
                &mut child,
                &mut group,
                timeout,
                self.limits.kill_grace,
                cancel,
            )
            .await;
            ended.cancel();
            ending
        };
        let (ending, ()) = tokio::join!(
            supervised,
            capture_output(
                stdout,
                stderr,
                &mut capture,
                &mut sink,
                &ended,
                self.limits.output_grace
            ),
        );
        let full_output = sink.finish().await;
        let (output, truncated) = capture.finish(full_output.as_ref());
        Ok(CommandRun {
            ending,
            output,
            output_bytes: capture.total(),
            truncated,
            full_output,
            shell,
        })
        // endregion
    }
}

/// The process group of one command. Dropping it kills the whole group, so a call whose
/// future is dropped mid-run (its task aborted, a caller's timeout) leaves no process behind:
/// `kill_on_drop` would end the shell alone and orphan its children.
struct ProcessGroup {
    id: libc::pid_t,
    /// SIGKILL was sent: the group is gone or going, nothing is left for `drop`.
    killed: bool,
}

impl ProcessGroup {
    fn new(shell: u32) -> Self {
        ProcessGroup {
            // A pid always fits a pid_t; the group's id is its leader's pid.
            id: shell as libc::pid_t,
            killed: false,
        }
    }

    fn signal(&self, signal: libc::c_int) {
        signal_group(self.id, signal);
    }

    fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        self.killed = true;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // region: Lab 8.6 ProcessGroup::drop
        // stub: // A panic while already unwinding would abort the whole process.
        // stub: if !std::thread::panicking() {
        // stub:     todo!()
        // stub: }
        if !self.killed {
            self.kill();
        }
        // endregion
    }
}

/// Waits for the shell, the timeout or the token, whichever comes first. On timeout or
/// cancellation the group gets SIGTERM and `grace` to exit; then whatever is left of the group
/// — background jobs, processes that ignore SIGTERM — gets SIGKILL, on every path.
async fn supervise(
    child: &mut Child,
    group: &mut ProcessGroup,
    timeout: Duration,
    grace: Duration,
    cancel: &CancellationToken,
) -> Ending {
    // region: Lab 8.6 supervise
    let ending = tokio::select! {
        status = child.wait() => exited(status),
        () = tokio::time::sleep(timeout) => Ending::TimedOut,
        () = cancel.cancelled() => Ending::Cancelled,
    };
    if !matches!(ending, Ending::Exited { .. }) {
        group.signal(libc::SIGTERM);
        let _ = tokio::time::timeout(grace, child.wait()).await;
    }
    group.kill();
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
        Err(_) => Ending::Unknown,
    }
}

/// Sends `signal` to every process of the group. A group that is already gone is fine.
fn signal_group(group: libc::pid_t, signal: libc::c_int) {
    // region: Lab 8.6 signal_group
    // SAFETY: killpg only sends a signal; its failure (ESRCH: no such group) is ignored.
    unsafe {
        libc::killpg(group, signal);
    }
    // endregion
}

/// Reads stdout and stderr as they come, until both are closed — or until `grace` has passed
/// after `ended` fired: the group is gone by then, and a process that left it may hold the
/// pipes open for ever. Every chunk goes to the sink, then to the capture.
async fn capture_output(
    mut stdout: impl AsyncRead + Unpin,
    mut stderr: impl AsyncRead + Unpin,
    capture: &mut OutputCapture,
    sink: &mut OutputSink<'_>,
    ended: &CancellationToken,
    grace: Duration,
) {
    // region: Lab 8.6 capture_output
    let (mut out_buffer, mut err_buffer) = ([0_u8; 8192], [0_u8; 8192]);
    let (mut out_open, mut err_open) = (true, true);
    let given_up = async {
        ended.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    tokio::pin!(given_up);
    while out_open || err_open {
        let chunk = tokio::select! {
            read = stdout.read(&mut out_buffer), if out_open => match read {
                Ok(0) | Err(_) => {
                    out_open = false;
                    continue;
                }
                Ok(count) => &out_buffer[..count],
            },
            read = stderr.read(&mut err_buffer), if err_open => match read {
                Ok(0) | Err(_) => {
                    err_open = false;
                    continue;
                }
                Ok(count) => &err_buffer[..count],
            },
            () = &mut given_up => break,
        };
        sink.write(chunk, capture).await;
        capture.push(chunk);
    }
    // endregion
}

static OUTPUT_DIRS: AtomicU64 = AtomicU64::new(0);

/// The directory the saved outputs of one [`CodingTools`] go into: `pi-bash-<pid>-<n>` under
/// a parent, readable by its owner only (outputs may hold secrets), made on first use and
/// removed with its files when the last clone of the tools is dropped.
#[derive(Debug)]
struct OutputDir {
    parent: PathBuf,
    made: Mutex<Option<PathBuf>>,
    files: AtomicU64,
}

impl OutputDir {
    fn new(parent: PathBuf) -> Self {
        OutputDir {
            parent,
            made: Mutex::new(None),
            files: AtomicU64::new(0),
        }
    }

    /// A new, empty file for one run's output: `<n>.log` in the directory.
    async fn create_file(&self) -> io::Result<(PathBuf, tokio::fs::File)> {
        let path = self.dir()?.join(format!(
            "{}.log",
            self.files.fetch_add(1, Ordering::Relaxed) + 1
        ));
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .await?;
        Ok((path, file))
    }

    /// The directory, made on first use. One `mkdir`, done in place: too small to hand off.
    fn dir(&self) -> io::Result<PathBuf> {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(dir) = made.as_ref() {
            return Ok(dir.clone());
        }
        loop {
            let dir = self.parent.join(format!(
                "pi-bash-{}-{}",
                std::process::id(),
                OUTPUT_DIRS.fetch_add(1, Ordering::Relaxed)
            ));
            match DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(made.insert(dir).clone()),
                // A directory of an earlier process with the same pid: take the next name.
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(error),
            }
        }
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        let made = self.made.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(dir) = made.take() {
            // Best effort: nothing is left to report to.
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The output file of one run, which keeps the whole output once it no longer fits the cap.
#[derive(Debug, Default)]
enum OutputFile {
    /// The output still fits the cap: no file.
    #[default]
    Unneeded,
    Writing {
        path: PathBuf,
        file: tokio::fs::File,
        written: usize,
    },
    Ended(FullOutput),
}

/// Where a run's output goes besides the capture: its output file, in the tools' directory,
/// holding at most `limit` bytes.
struct OutputSink<'a> {
    outputs: &'a OutputDir,
    limit: usize,
    file: OutputFile,
}

impl<'a> OutputSink<'a> {
    fn new(outputs: &'a OutputDir, limit: usize) -> Self {
        OutputSink {
            outputs,
            limit,
            file: OutputFile::Unneeded,
        }
    }

    /// Takes the chunk that follows everything `capture` has seen. The first time the output
    /// passes the cap, the file is created with all that came before — the capture still
    /// holds it whole — and from then on every chunk is appended.
    async fn write(&mut self, chunk: &[u8], capture: &OutputCapture) {
        // region: Lab 8.6 OutputSink::write
        if matches!(self.file, OutputFile::Unneeded)
            && capture.total() + chunk.len() > capture.cap()
        {
            self.file = match self.outputs.create_file().await {
                Ok((path, file)) => OutputFile::Writing {
                    path,
                    file,
                    written: 0,
                },
                Err(error) => OutputFile::Ended(FullOutput::Unsaved(error.to_string())),
            };
            self.append(&capture.kept()).await;
        }
        self.append(chunk).await;
        // endregion
    }

    /// Appends to an open file, up to the limit; a failed write removes the file.
    async fn append(&mut self, bytes: &[u8]) {
        let OutputFile::Writing {
            path,
            file,
            written,
        } = &mut self.file
        else {
            return;
        };
        let taken = bytes.len().min(self.limit.saturating_sub(*written));
        let ended = match file.write_all(&bytes[..taken]).await {
            Err(error) => {
                let _ = tokio::fs::remove_file(&path).await;
                Some(FullOutput::Unsaved(error.to_string()))
            }
            Ok(()) => {
                *written += taken;
                if taken < bytes.len() {
                    Some(match file.flush().await {
                        Ok(()) => FullOutput::Partial {
                            path: path.clone(),
                            bytes: *written,
                        },
                        Err(error) => FullOutput::Unsaved(error.to_string()),
                    })
                } else {
                    None
                }
            }
        };
        if let Some(ended) = ended {
            self.file = OutputFile::Ended(ended);
        }
    }

    /// Where the whole output is, once the run is over; `None` if it fit the cap.
    async fn finish(self) -> Option<FullOutput> {
        match self.file {
            OutputFile::Unneeded => None,
            OutputFile::Writing { path, mut file, .. } => Some(match file.flush().await {
                Ok(()) => FullOutput::Saved(path),
                Err(error) => FullOutput::Unsaved(error.to_string()),
            }),
            OutputFile::Ended(full_output) => Some(full_output),
        }
    }
}

impl CodingTools {
    /// `bash {command, timeout?}`; `timeout` is in seconds.
    pub fn bash_tool(&self) -> SharedTool {
        // region: Lab 8.6 bash_tool
        let tools = self.clone();
        let schema = object_schema((
            field("command", string_value()),
            field("timeout", optional_positive_integer()),
        ));
        Tool::new(
            "bash",
            BASH_DESCRIPTION,
            schema,
            move |(command, timeout): (String, Option<u64>), context: ToolContext| {
                let tools = tools.clone();
                async move {
                    let timeout = timeout.map_or(tools.limits.bash_timeout, Duration::from_secs);
                    let run = tools
                        .run_command(&command, timeout, &context.cancel)
                        .await?;
                    Ok(bash_output(&command, run, timeout))
                }
            },
        )
        .shared()
        // endregion
    }
}
