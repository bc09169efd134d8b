//! The imperative shell: putting a snapshot on disk without ever harming what the user owns.
//!
//! The whole tree is built in a staging directory beside the target (same filesystem). A missing
//! target receives it with one rename(2), the commit point; an existing empty directory is
//! filled in place — same inode, mode and owner — under a claim file that makes two racing runs
//! have exactly one winner. Interrupted (a signal flag set) or failed, everything this run
//! created is removed again: the staging directory, the entries moved into an empty target, the
//! parent directories it made. A staging directory left by a killed run carries its owner's
//! pid and start time; the next run removes it once it can prove that process is gone. The
//! claim file of an in-place fill carries the same owner line and, before each move, the name
//! about to be moved: a run killed mid-fill (SIGKILL runs no handler) leaves a journal from
//! which the next run for that target removes exactly what the dead run put there, and nothing
//! else.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::assemble::Snapshot;

/// Test hook: pause this long after each file, so tests can interrupt a write midway.
pub const SLOW_WRITE_ENV: &str = "PI_COURSE_TEST_SLOW_WRITE_MS";
/// Prefix of the staging directory created beside the target.
pub const STAGING_PREFIX: &str = ".pi-practice-staging-";
/// Inside a staging directory: who owns it (`pid start-time`).
const OWNER_FILE: &str = ".pi-practice-owner";
/// Inside an empty target being filled: the one run allowed to fill it.
pub const CLAIM_FILE: &str = ".pi-practice-filling";

/// Set to a signal number by the binary's signal handlers; 0 means "carry on".
pub type Interrupt = AtomicUsize;

#[derive(Debug)]
pub enum WriteError {
    TargetIsFile(PathBuf),
    /// A symlink, device, FIFO or socket: `kind` names it.
    TargetIsSpecial {
        path: PathBuf,
        kind: &'static str,
    },
    TargetNotEmpty(PathBuf),
    InsideCourseRepo {
        target: PathBuf,
        repo: PathBuf,
    },
    /// A signal arrived before the commit point; everything was rolled back.
    Interrupted(usize),
    /// An OS error, reported against the user's path (never the hidden staging path).
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// Paths longer than this many characters are shown with their middle left out.
const SHOWN_PATH_MAX: usize = 160;

/// A path as one readable line: control characters (a newline in a name) are escaped, and a
/// very long path keeps its head and its tail (where the names the user typed are) with the
/// middle left out, so one refusal never fills a screen.
pub fn shown(path: &Path) -> String {
    let line = path.display().to_string().escape_debug().to_string();
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= SHOWN_PATH_MAX {
        return line;
    }
    let (head, tail) = (48, 96);
    let left_out = chars.len() - head - tail;
    format!(
        "{}…（省略 {left_out} 个字符）…{}",
        chars[..head].iter().collect::<String>(),
        chars[chars.len() - tail..].iter().collect::<String>()
    )
}

/// The path exactly, quoted for a POSIX shell, so a printed `cd <path>` works when pasted even
/// with a space or a quote in it. `None` when no pasted line could carry it faithfully (not
/// UTF-8, or a control character such as a newline in a name).
pub fn shell_quoted(path: &Path) -> Option<String> {
    let text = path.to_str()?;
    if text.chars().any(char::is_control) {
        return None;
    }
    shlex::try_quote(text)
        .ok()
        .map(|quoted| quoted.into_owned())
}

/// The OS's reason in Chinese. The OS's own (English) words are kept only for a kind we have
/// no phrase for, so the line still says something concrete.
fn reason(error: &io::Error) -> String {
    let chinese = match error.kind() {
        io::ErrorKind::PermissionDenied => "权限不足",
        io::ErrorKind::StorageFull => "磁盘空间不足",
        io::ErrorKind::QuotaExceeded => "超出了磁盘配额",
        io::ErrorKind::ReadOnlyFilesystem => "文件系统只读",
        io::ErrorKind::NotADirectory => "路径中有一段不是目录",
        io::ErrorKind::IsADirectory => "这是一个目录",
        io::ErrorKind::InvalidFilename => "路径或文件名太长，或含有无效字符",
        io::ErrorKind::ResourceBusy => "资源正忙",
        io::ErrorKind::NotFound => "路径不存在",
        io::ErrorKind::AlreadyExists => "已经存在同名的文件或目录",
        io::ErrorKind::DirectoryNotEmpty => "目录不为空",
        io::ErrorKind::CrossesDevices => "不能跨文件系统移动",
        io::ErrorKind::TooManyLinks => "链接数超出了文件系统的上限",
        io::ErrorKind::FileTooLarge => "文件超出了文件系统允许的大小",
        io::ErrorKind::OutOfMemory => "内存不足",
        io::ErrorKind::Interrupted => "操作被信号打断",
        _ => return format!("系统错误（{error}）"),
    };
    chinese.to_string()
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::TargetIsFile(path) => {
                write!(
                    f,
                    "目标 {} 是一个文件，不是目录；请换一个新目录",
                    shown(path)
                )
            }
            WriteError::TargetIsSpecial { path, kind } => {
                write!(f, "目标 {} 是{kind}，不是目录；请换一个新目录", shown(path))
            }
            WriteError::TargetNotEmpty(path) => write!(
                f,
                "目标目录 {} 已存在且不为空；为避免覆盖你的文件，请指定一个新目录或空目录",
                shown(path)
            ),
            WriteError::InsideCourseRepo { target, repo } => {
                let outside = repo
                    .parent()
                    .map(|parent| parent.join("pi-practice-NN"))
                    .unwrap_or_else(|| PathBuf::from("/tmp/pi-practice-NN"));
                write!(
                    f,
                    "目标 {} 位于课程仓库 {} 内；练习目录必须独立，请放到仓库之外，例如 {}",
                    shown(target),
                    shown(repo),
                    shown(&outside)
                )
            }
            WriteError::Interrupted(_) => write!(f, "已中断：没有留下任何写了一半的文件"),
            WriteError::Io {
                action,
                path,
                source,
            } => write!(f, "{action} {} 失败：{}", shown(path), reason(source)),
        }
    }
}

impl std::error::Error for WriteError {}

impl WriteError {
    /// The conventional exit status of a run ended by this error: 128 + signal, or 2.
    pub fn exit_code(&self) -> u8 {
        match self {
            WriteError::Interrupted(signal) => 128u8.saturating_add(*signal as u8),
            _ => 2,
        }
    }
}

fn io_error<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> WriteError + 'a {
    move |source| WriteError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Makes `path` absolute and removes `.`/`..` lexically (the target may not exist yet).
pub fn absolute(path: &Path) -> io::Result<PathBuf> {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let mut normal = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    Ok(normal)
}

/// The course checkout containing `path`, if any: an ancestor holding both `course-cli/`
/// and `chapters/`. Symlinks in the existing part of the path are resolved first.
pub fn enclosing_course_repo(path: &Path) -> Option<PathBuf> {
    let mut existing = path;
    let mut rest = Vec::new();
    while !existing.exists() {
        rest.push(existing.file_name()?.to_os_string());
        existing = existing.parent()?;
    }
    let mut resolved = existing.canonicalize().ok()?;
    resolved.extend(rest.iter().rev());
    resolved
        .ancestors()
        .find(|dir| dir.join("course-cli/Cargo.toml").is_file() && dir.join("chapters").is_dir())
        .map(Path::to_path_buf)
}

/// What is at the target now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetState {
    Missing,
    EmptyDir,
}

/// Refuses targets that are files, special files, non-empty directories, or inside a course
/// checkout.
pub fn check_target(target: &Path) -> Result<TargetState, WriteError> {
    if let Some(repo) = enclosing_course_repo(target) {
        return Err(WriteError::InsideCourseRepo {
            target: target.to_path_buf(),
            repo,
        });
    }
    let meta = match fs::symlink_metadata(target) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(TargetState::Missing),
        Err(error) => return Err(io_error("读取", target)(error)),
        Ok(meta) => meta,
    };
    let file_type = meta.file_type();
    if file_type.is_dir() {
        let mut entries = fs::read_dir(target).map_err(io_error("读取目录", target))?;
        return match entries.next() {
            None => Ok(TargetState::EmptyDir),
            Some(_) => Err(WriteError::TargetNotEmpty(target.to_path_buf())),
        };
    }
    if file_type.is_file() {
        return Err(WriteError::TargetIsFile(target.to_path_buf()));
    }
    let kind = if file_type.is_symlink() {
        "一个符号链接"
    } else {
        special_kind(&file_type)
    };
    Err(WriteError::TargetIsSpecial {
        path: target.to_path_buf(),
        kind,
    })
}

#[cfg(unix)]
fn special_kind(file_type: &fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        "一个命名管道（FIFO）"
    } else if file_type.is_socket() {
        "一个套接字"
    } else if file_type.is_char_device() || file_type.is_block_device() {
        "一个设备文件"
    } else {
        "一个特殊文件"
    }
}

#[cfg(not(unix))]
fn special_kind(_file_type: &fs::FileType) -> &'static str {
    "一个特殊文件"
}

/// Directories this run creates above the target; removed again (if still empty) unless the
/// run commits.
struct CreatedParents {
    dirs: Vec<PathBuf>,
    keep: bool,
}

impl CreatedParents {
    fn create(parent: &Path) -> Result<Self, WriteError> {
        let mut missing: Vec<PathBuf> = parent
            .ancestors()
            .take_while(|dir| fs::symlink_metadata(dir).is_err())
            .map(Path::to_path_buf)
            .collect();
        missing.reverse();
        let mut created = CreatedParents {
            dirs: Vec::new(),
            keep: false,
        };
        for dir in missing {
            match fs::create_dir(&dir) {
                Ok(()) => created.dirs.push(dir),
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(io_error("创建目录", &dir)(error)),
            }
        }
        Ok(created)
    }
}

impl Drop for CreatedParents {
    fn drop(&mut self) {
        if !self.keep {
            for dir in self.dirs.iter().rev() {
                // remove_dir refuses a non-empty directory: someone else's files stay.
                let _ = fs::remove_dir(dir);
            }
        }
    }
}

fn interrupted(interrupt: &Interrupt) -> Result<(), WriteError> {
    match interrupt.load(Ordering::SeqCst) {
        0 => Ok(()),
        signal => Err(WriteError::Interrupted(signal)),
    }
}

/// `pid start-time` of this process, when the platform lets us prove it later.
fn owner_stamp() -> Option<String> {
    let pid = std::process::id();
    start_time(pid).map(|start| format!("{pid} {start}"))
}

/// A process's start time in clock ticks since boot (Linux `/proc/<pid>/stat`, field 22).
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the owner recorded in a staging directory is provably gone.
fn owner_is_gone(stamp: &str) -> bool {
    let mut parts = stamp.split_whitespace();
    let (Some(pid), Some(start)) = (parts.next(), parts.next()) else {
        return false;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    // Only where /proc works for us at all is "missing" a proof of death.
    start_time(std::process::id()).is_some() && start_time(pid) != Some(start)
}

/// Removes staging directories beside the target whose owner run is provably dead.
fn sweep_stale_staging(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(STAGING_PREFIX) {
            continue;
        }
        let path = entry.path();
        let owned =
            fs::read_to_string(path.join(OWNER_FILE)).is_ok_and(|stamp| owner_is_gone(&stamp));
        if owned {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// Undoes an in-place fill whose run was killed outright: when `target` holds a claim file
/// whose owner is provably dead, removes the entries its journal names, then the claim. Entries
/// it does not name stay, so a target that also holds the user's files is still refused.
fn undo_abandoned_fill(target: &Path) {
    let claim = target.join(CLAIM_FILE);
    let Ok(journal) = fs::read_to_string(&claim) else {
        return;
    };
    let mut lines = journal.lines();
    if !lines.next().is_some_and(owner_is_gone) {
        return;
    }
    for name in lines {
        // Only a plain entry name of the target: never a path that leads elsewhere.
        let mut components = Path::new(name).components();
        let (Some(Component::Normal(entry)), None) = (components.next(), components.next()) else {
            continue;
        };
        let path = target.join(entry);
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => {
                let _ = fs::remove_dir_all(&path);
            }
            Ok(_) => {
                let _ = fs::remove_file(&path);
            }
            Err(_) => {}
        }
    }
    let _ = fs::remove_file(&claim);
}

fn slow_write_pause() -> Option<Duration> {
    std::env::var(SLOW_WRITE_ENV)
        .ok()
        .and_then(|value| value.parse().ok())
        .map(Duration::from_millis)
}

/// Writes `snapshot` as a complete workspace at `target` (missing or an empty directory).
/// On error or interrupt, nothing the run created remains.
pub fn write_new_workspace(
    snapshot: &Snapshot,
    target: &Path,
    interrupt: &Interrupt,
) -> Result<PathBuf, WriteError> {
    let target = absolute(target).map_err(io_error("解析路径", target))?;
    undo_abandoned_fill(&target);
    let state = check_target(&target)?;
    let parent = target.parent().unwrap_or(Path::new("/")).to_path_buf();
    let mut parents = CreatedParents::create(&parent)?;
    sweep_stale_staging(&parent);

    let staging = tempfile::Builder::new()
        .prefix(STAGING_PREFIX)
        .tempdir_in(&parent)
        .map_err(io_error("在此目录中创建文件", &parent))?;
    let owner = staging.path().join(OWNER_FILE);
    if let Some(stamp) = owner_stamp() {
        fs::write(&owner, stamp).map_err(io_error("写入", &target))?;
    }
    let pause = slow_write_pause();
    for (relative, bytes) in snapshot {
        interrupted(interrupt)?;
        let path = staging.path().join(relative.as_str());
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(io_error("写入", &target))?;
        }
        fs::write(&path, bytes).map_err(io_error("写入", &target))?;
        if let Some(pause) = pause {
            std::thread::sleep(pause);
        }
    }
    interrupted(interrupt)?;

    match state {
        TargetState::Missing => {
            // The owner line stays until the commit point: a kill before it leaves a staging
            // directory the next run can prove dead and sweep.
            let _ = fs::remove_file(&owner);
            make_world_readable(staging.path(), &target)?;
            fs::rename(staging.path(), &target).map_err(|error| match error.kind() {
                // Someone else filled the target first (a lost race).
                io::ErrorKind::DirectoryNotEmpty | io::ErrorKind::AlreadyExists => {
                    WriteError::TargetNotEmpty(target.clone())
                }
                io::ErrorKind::NotADirectory => WriteError::TargetIsFile(target.clone()),
                _ => io_error("移动到", &target)(error),
            })?;
            // The staging path is gone; dropping the guard finds nothing to delete.
        }
        TargetState::EmptyDir => fill_in_place(staging.path(), &target, interrupt, pause)?,
    }
    parents.keep = true;
    Ok(target)
}

/// Moves the staged entries into an existing empty directory, keeping its inode, mode and
/// owner. A claim file created with `O_EXCL` admits exactly one run.
fn fill_in_place(
    staging: &Path,
    target: &Path,
    interrupt: &Interrupt,
    pause: Option<Duration>,
) -> Result<(), WriteError> {
    let claim = target.join(CLAIM_FILE);
    let mut journal = match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&claim)
    {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            return Err(WriteError::TargetNotEmpty(target.to_path_buf()))
        }
        Err(error) => return Err(io_error("写入", target)(error)),
    };
    if let Some(stamp) = owner_stamp() {
        writeln!(journal, "{stamp}").map_err(io_error("写入", target))?;
    }
    // Files may have appeared between the emptiness check and the claim.
    let others = fs::read_dir(target)
        .map_err(io_error("读取目录", target))?
        .flatten()
        .any(|entry| entry.file_name() != CLAIM_FILE);
    if others {
        let _ = fs::remove_file(&claim);
        return Err(WriteError::TargetNotEmpty(target.to_path_buf()));
    }
    let mut moved: Vec<PathBuf> = Vec::new();
    let result = (|| {
        let entries = fs::read_dir(staging).map_err(io_error("读取", target))?;
        for entry in entries {
            interrupted(interrupt)?;
            let entry = entry.map_err(io_error("读取", target))?;
            let name = entry.file_name();
            if name == OWNER_FILE {
                continue;
            }
            let destination = target.join(&name);
            // Journal first, move second: a kill between the two leaves a name that names
            // nothing in the target, never an entry of ours the journal does not name.
            if let Some(name) = name.to_str() {
                writeln!(journal, "{name}").map_err(io_error("写入", target))?;
            }
            fs::rename(entry.path(), &destination).map_err(io_error("写入", target))?;
            moved.push(destination);
            if let Some(pause) = pause {
                std::thread::sleep(pause);
            }
        }
        interrupted(interrupt)
    })();
    if result.is_err() {
        for path in moved.iter().rev() {
            let _ = fs::remove_dir_all(path).or_else(|_| fs::remove_file(path));
        }
    }
    let _ = fs::remove_file(&claim);
    result
}

/// tempfile creates staging directories with mode 0700; a new workspace should look like any
/// directory the user made.
#[cfg(unix)]
fn make_world_readable(dir: &Path, target: &Path) -> Result<(), WriteError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))
        .map_err(io_error("设置权限", target))
}

#[cfg(not(unix))]
fn make_world_readable(_dir: &Path, _target: &Path) -> Result<(), WriteError> {
    Ok(())
}

/// Makes `dir` (a scratch directory the course tooling owns, under `target/`) hold exactly
/// `snapshot`. Unchanged files are left alone so cargo's incremental builds stay warm.
pub fn sync_scratch_dir(snapshot: &Snapshot, dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    for (relative, bytes) in snapshot {
        let path = dir.join(relative.as_str());
        if fs::read(&path).ok().as_deref() == Some(bytes.as_slice()) {
            continue;
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&path, bytes)?;
    }
    let stale: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_file())
        .filter(|entry| {
            let relative = entry
                .path()
                .strip_prefix(dir)
                .expect("walk stays under dir");
            let key = relative
                .components()
                .map(|component| component.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            !snapshot.contains_key(key.as_str()) && !key.starts_with("target/")
        })
        .map(|entry| entry.into_path())
        .collect();
    for path in stale {
        fs::remove_file(path)?;
    }
    Ok(())
}
