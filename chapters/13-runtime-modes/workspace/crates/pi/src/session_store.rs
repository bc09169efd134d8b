//! Where pi keeps its sessions, and how a run reads and extends one.
//!
//! A session is one JSON Lines file written through the learner's `JsonlSessionStore`
//! (chapter 10): a header metadata entry (`format`, `cwd`, `model`), then one entry per
//! message, each the child of the one before. Files live in
//! `$XDG_STATE_HOME/pi/sessions/<escaped cwd>/<ms>-<hex>.jsonl` (`~/.local/state` when the
//! variable is unset), or under `--session-dir`. pi never rewrites a file: a torn tail is cut
//! only with `--repair`, a damaged file is left alone, and a second pi on the same file is
//! refused while the first holds its lock.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pi_course::context_compaction::{
    create_compaction_entry, group_interactions, resume_context, summary_message, Budget,
    BuiltContext,
};
use pi_course::session_tree::{
    messages_on_path, recover_jsonl, EntryBody, Health, JsonlSessionStore, OpenError, SessionEntry,
    StdFileIo,
};
use pi_course::session_tree::{path_to, Compaction};
use pi_course::types::{now_ms, text_of, AgentMessage};
use serde_json::json;

use crate::compaction::estimate_tokens;
use crate::config::Config;

/// The version of the header's layout.
pub const SESSION_FORMAT: u64 = 1;
const HEADER_KEY: &str = "session";

/// The directory of this working directory's sessions. `env` looks a variable up.
pub fn sessions_dir(
    override_dir: Option<&Path>,
    env: impl Fn(&str) -> Option<String>,
    cwd: &Path,
) -> Result<PathBuf, String> {
    let base = match override_dir {
        Some(dir) => return Ok(dir.to_path_buf()),
        None => match (env("XDG_STATE_HOME"), env("HOME")) {
            (Some(state), _) if Path::new(&state).is_absolute() => PathBuf::from(state),
            (_, Some(home)) if !home.is_empty() => Path::new(&home).join(".local/state"),
            _ => return Err("找不到会话目录：HOME 和 XDG_STATE_HOME 都没有设置".into()),
        },
    };
    Ok(base.join("pi/sessions").join(escape(cwd)))
}

/// `/home/ana/my proj` → `-home-ana-my-proj`: one directory name per working directory.
fn escape(cwd: &Path) -> String {
    cwd.to_string_lossy()
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' => c,
            _ => '-',
        })
        .collect()
}

/// A new file name: creation time first, so names sort by age.
pub fn new_session_path(dir: &Path) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    let tag = nanos ^ std::process::id().rotate_left(16);
    dir.join(format!("{:013}-{tag:08x}.jsonl", now_ms()))
}

/// The most recent session file in `dir`, by the time in its name.
pub fn newest_session(dir: &Path) -> Result<PathBuf, String> {
    let entries = std::fs::read_dir(dir).map_err(|_| {
        format!(
            "这个目录还没有会话（{}）；去掉 -c 开始一个新会话",
            dir.display()
        )
    })?;
    entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .max()
        .ok_or_else(|| {
            format!(
                "这个目录还没有会话（{}）；去掉 -c 开始一个新会话",
                dir.display()
            )
        })
}

/// `pi --resume`: this directory's sessions, newest first, each with its first task. Reads
/// only; a damaged file is listed as damaged instead of failing the whole list.
pub fn list_sessions(dir: Option<&Path>, config: &Config) -> Result<String, String> {
    let cwd = std::fs::canonicalize(&config.root)
        .map_err(|error| format!("读不到工作目录 {}：{error}", config.root.display()))?;
    let dir = sessions_dir(dir, |name| std::env::var(name).ok(), &cwd)?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    if files.is_empty() {
        return Err(format!("这个目录还没有会话（{}）", dir.display()));
    }
    files.sort_by(|a, b| b.cmp(a));
    let mut listing = String::new();
    for (number, file) in files.iter().enumerate() {
        listing.push_str(&format!(
            "{}. {}  {}\n",
            number + 1,
            file.display(),
            first_task(file)
        ));
    }
    listing.push_str("用 pi --session <文件> 继续其中一个，pi -c 继续第 1 个\n");
    Ok(listing)
}

/// The first user message of a session file, or what is wrong with the file.
fn first_task(file: &Path) -> String {
    let read = match std::fs::read(file).map(|bytes| recover_jsonl(&bytes)) {
        Ok(Ok(read)) => read,
        Ok(Err(error)) => return format!("（已损坏：{error}）"),
        Err(error) => return format!("（读不了：{error}）"),
    };
    read.entries
        .iter()
        .find_map(|entry| match &entry.body {
            EntryBody::Message {
                message: message @ AgentMessage::User(_),
            } => Some(text_of(message).replace('\n', " ")),
            _ => None,
        })
        .unwrap_or_else(|| "（还没有任务）".to_string())
}

/// An open session: the learner's store plus the lock that keeps a second pi out.
pub struct SessionLog {
    store: JsonlSessionStore,
    /// Held for the life of the log; the OS releases it when pi exits, even on SIGKILL.
    _lock: File,
    leaf: Option<String>,
    /// How many transcript messages are already in the file.
    recorded: usize,
    next_id: u64,
}

impl SessionLog {
    /// Opens `path` (creating the file, not its directory), checks it is a session of `cwd`,
    /// and writes the header into a new file. `repair` is the user's consent to cut a torn tail.
    pub async fn open(
        path: &Path,
        cwd: &Path,
        model: &str,
        repair: bool,
    ) -> Result<SessionLog, String> {
        let lock = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|error| format!("打不开会话文件 {}：{error}", path.display()))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(format!("会话文件 {} 正被另一个 pi 使用", path.display()))
            }
            Err(TryLockError::Error(error)) => {
                return Err(format!("无法锁定会话文件 {}：{error}", path.display()))
            }
        }
        let store =
            JsonlSessionStore::open(path, Arc::new(StdFileIo)).map_err(|error| match error {
                OpenError::Damaged(damaged) => format!(
                    "会话文件 {} 已损坏，{damaged}；pi 不会改动它",
                    path.display()
                ),
                OpenError::Io(io) => format!("打不开会话文件 {}：{io}", path.display()),
            })?;
        if let Health::NeedsRepair { tail_line } = store.health() {
            if !repair {
                return Err(format!(
                    "会话文件 {} 第 {tail_line} 行没有写完（上次可能被中断）；加上 --repair 截掉这一行再继续，已写完的内容不会丢",
                    path.display()
                ));
            }
            let dropped = store
                .repair()
                .map_err(|error| format!("修复会话文件 {} 失败：{error}", path.display()))?;
            eprintln!("pi：已截掉会话文件末尾没写完的 {dropped} 字节");
        }
        let entries = store.entries();
        let mut log = SessionLog {
            leaf: entries.last().map(|entry| entry.id.clone()),
            recorded: 0,
            next_id: entries.len() as u64 + 1,
            store,
            _lock: lock,
        };
        match entries.first() {
            None => log.write_header(cwd, model).await?,
            Some(first) => check_header(first, cwd, path)?,
        }
        Ok(log)
    }

    async fn write_header(&mut self, cwd: &Path, model: &str) -> Result<(), String> {
        let value = json!({"format": SESSION_FORMAT, "cwd": cwd.to_string_lossy(), "model": model});
        let header = SessionEntry::metadata("header", None, now_ms(), HEADER_KEY, value);
        self.append(header).await
    }

    /// The conversation so far: the messages on the branch ending at the newest entry.
    // Chapter 13: the runtime resumes from the path itself, so pi no longer calls this.
    #[allow(dead_code)]
    pub fn messages(&mut self) -> Result<Vec<AgentMessage>, String> {
        let messages = match &self.leaf {
            None => Vec::new(),
            Some(leaf) => messages_on_path(&self.store.entries(), leaf).map_err(|error| {
                format!("会话文件 {} 不能恢复：{error}", self.store.path().display())
            })?,
        };
        self.recorded = messages.len();
        Ok(messages)
    }

    /// Appends the transcript's messages that are not in the file yet, each a child of the
    /// one before.
    // Chapter 13: the runtime appends each message itself, so pi no longer calls this.
    #[allow(dead_code)]
    pub async fn record(&mut self, transcript: &[AgentMessage]) -> Result<(), String> {
        for message in transcript.iter().skip(self.recorded) {
            let id = format!("{:x}-{}", now_ms(), self.next_id);
            let entry = SessionEntry::message(&id, self.leaf.as_deref(), now_ms(), message.clone());
            self.append(entry).await?;
            self.recorded += 1;
        }
        Ok(())
    }

    /// Chapter 11: the branch from the root to the newest entry.
    fn path(&self) -> Result<Vec<SessionEntry>, String> {
        match &self.leaf {
            None => Ok(Vec::new()),
            Some(leaf) => path_to(&self.store.entries(), leaf).map_err(|error| {
                format!("会话文件 {} 不能恢复：{error}", self.store.path().display())
            }),
        }
    }

    /// Chapter 11: what the model is sent before the next task, within `budget`: the
    /// learner's `resume_context` on this branch. Everything in it is already in the file.
    pub fn context(&mut self, budget: &Budget) -> Result<BuiltContext, String> {
        let path = self.path()?;
        let mut built = resume_context(&path, budget, &estimate_tokens).map_err(|error| {
            format!("会话文件 {} 不能恢复：{error}", self.store.path().display())
        })?;
        // The learner's `resume_context` sends the newest system message only. pi's prompt may
        // be followed by patches (chapter 12's project resources), and each of them still
        // applies, so the prompt and every patch go in front, in their order.
        let systems: Vec<AgentMessage> = path
            .iter()
            .filter_map(|entry| match &entry.body {
                EntryBody::Message {
                    message: message @ AgentMessage::System(_),
                } => Some(message.clone()),
                _ => None,
            })
            .collect();
        if systems.len() > 1 && matches!(built.messages.first(), Some(AgentMessage::System(_))) {
            built.messages.splice(..1, systems);
        }
        self.recorded = built.messages.len();
        Ok(built)
    }

    /// Chapter 11: the first entry id of every interaction the model still sees, oldest first.
    pub fn visible_interactions(&self) -> Result<Vec<String>, String> {
        let path = self.path()?;
        let (_, start) = self.visible(&path)?;
        let groups = group_interactions(&path[start..]).map_err(|error| {
            format!("会话文件 {} 不能压缩：{error}", self.store.path().display())
        })?;
        Ok(groups
            .iter()
            .map(|group| group.first_id().to_string())
            .collect())
    }

    /// Chapter 11: what a compaction keeping everything from `first_kept` on replaces: the
    /// current summary, if there is one, then the visible messages before `first_kept`.
    pub fn compaction_input(&self, first_kept: &str) -> Result<Vec<AgentMessage>, String> {
        let path = self.path()?;
        let (latest, start) = self.visible(&path)?;
        let mut input: Vec<AgentMessage> = latest
            .map(|compaction| summary_message(&compaction.summary, 0))
            .into_iter()
            .collect();
        for entry in path[start..]
            .iter()
            .take_while(|entry| entry.id != first_kept)
        {
            if let EntryBody::Message { message } = &entry.body {
                if !matches!(message, AgentMessage::System(_)) {
                    input.push(message.clone());
                }
            }
        }
        Ok(input)
    }

    /// Chapter 11: appends the learner's compaction entry under the newest entry. Nothing is
    /// written when the entry is refused.
    pub async fn compact(
        &mut self,
        summary: &str,
        first_kept: &str,
        tokens_before: u64,
    ) -> Result<(), String> {
        let path = self.path()?;
        let id = format!("{:x}-{}", now_ms(), self.next_id);
        let entry =
            create_compaction_entry(&path, &id, now_ms(), summary, first_kept, tokens_before)
                .map_err(|error| format!("不能压缩：{error}"))?;
        self.append(entry).await
    }

    /// The latest compaction on `path` and where the part the model sees begins.
    fn visible<'p>(
        &self,
        path: &'p [SessionEntry],
    ) -> Result<(Option<&'p Compaction>, usize), String> {
        let latest = path
            .iter()
            .enumerate()
            .rev()
            .find_map(|(at, entry)| match &entry.body {
                EntryBody::Compaction(compaction) => Some((at, compaction)),
                _ => None,
            });
        let Some((at, compaction)) = latest else {
            return Ok((None, 0));
        };
        let start = path[..at]
            .iter()
            .position(|entry| entry.id == compaction.first_kept_entry_id)
            .ok_or_else(|| {
                format!(
                    "会话文件 {} 不能恢复：压缩要保留的 {} 不在它之前的路径上",
                    self.store.path().display(),
                    compaction.first_kept_entry_id
                )
            })?;
        Ok((Some(compaction), start))
    }

    async fn append(&mut self, entry: SessionEntry) -> Result<(), String> {
        self.store
            .append(&entry)
            .await
            .map_err(|error| format!("写不进会话文件 {}：{error}", self.store.path().display()))?;
        self.leaf = Some(entry.id);
        self.next_id += 1;
        Ok(())
    }
}

/// Chapter 13: the runtime appends through the log's own store, so the two never disagree
/// about what is on disk; the log only has to catch up before it reads its branch again.
impl SessionLog {
    pub fn store(&self) -> &JsonlSessionStore {
        &self.store
    }

    pub fn file(&self) -> &Path {
        self.store.path()
    }

    /// The newest entry is the active leaf again, whoever appended it.
    pub fn follow(&mut self) {
        let entries = self.store.entries();
        self.leaf = entries.last().map(|entry| entry.id.clone());
        self.next_id = entries.len() as u64 + 1;
    }
}

/// The first entry must be pi's header, written for this directory.
fn check_header(first: &SessionEntry, cwd: &Path, path: &Path) -> Result<(), String> {
    let not_ours = || format!("{} 不是 pi 的会话文件（第一行不是会话头）", path.display());
    let EntryBody::Metadata { key, value } = &first.body else {
        return Err(not_ours());
    };
    if key != HEADER_KEY || value["format"] != json!(SESSION_FORMAT) {
        return Err(not_ours());
    }
    match value["cwd"].as_str() {
        Some(dir) if Path::new(dir) == cwd => Ok(()),
        Some(dir) => Err(format!(
            "会话文件 {} 属于目录 {dir}，不是当前目录 {}",
            path.display(),
            cwd.display()
        )),
        None => Err(not_ours()),
    }
}

/// Which session a run uses, from the command line.
#[derive(Debug, Default)]
pub struct Choice {
    pub file: Option<PathBuf>,
    pub continue_newest: bool,
    pub dir: Option<PathBuf>,
    pub repair: bool,
}

/// Opens the session `choice` names for the working directory of `config`: a given file,
/// the newest one (`-c`), or a new one.
pub async fn open_log(choice: Choice, config: &Config) -> Result<SessionLog, String> {
    let cwd = std::fs::canonicalize(&config.root)
        .map_err(|error| format!("读不到工作目录 {}：{error}", config.root.display()))?;
    let dir = sessions_dir(choice.dir.as_deref(), |name| std::env::var(name).ok(), &cwd)?;
    let path = match (choice.file, choice.continue_newest) {
        // A file the user names is opened where it is; pi creates no directories for it.
        (Some(file), _) => file,
        (None, true) => newest_session(&dir)?,
        (None, false) => {
            std::fs::create_dir_all(&dir)
                .map_err(|error| format!("无法创建会话目录 {}：{error}", dir.display()))?;
            new_session_path(&dir)
        }
    };
    SessionLog::open(&path, &cwd, &config.model, choice.repair).await
}
