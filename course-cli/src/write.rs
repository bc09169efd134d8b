//! The imperative shell: putting a snapshot on disk.
//!
//! [`write_new_workspace`] never touches anything the user owns. The whole tree is built in a
//! staging directory beside the target (same filesystem) and renamed into place in one step:
//! rename(2) onto a missing path or an empty directory succeeds, onto a non-empty directory
//! fails. So an interrupted run leaves no partial workspace at the target, and of two runs
//! racing for one target exactly one wins.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::assemble::Snapshot;

/// Test hook: pause this long after each file, so tests can interrupt a write midway.
pub const SLOW_WRITE_ENV: &str = "PI_COURSE_TEST_SLOW_WRITE_MS";
/// Prefix of the staging directory created beside the target.
pub const STAGING_PREFIX: &str = ".pi-practice-staging-";

#[derive(Debug)]
pub enum WriteError {
    TargetIsFile(PathBuf),
    TargetNotEmpty(PathBuf),
    InsideCourseRepo {
        target: PathBuf,
        repo: PathBuf,
    },
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::TargetIsFile(path) => {
                write!(f, "目标 {} 是一个文件，不是目录；请换一个新目录", path.display())
            }
            WriteError::TargetNotEmpty(path) => write!(
                f,
                "目标目录 {} 已存在且不为空；为避免覆盖你的文件，请指定一个新目录或空目录",
                path.display()
            ),
            WriteError::InsideCourseRepo { target, repo } => write!(
                f,
                "目标 {} 位于课程仓库 {} 内；练习目录必须独立，请放到仓库之外，例如 ../pi-practice-06",
                target.display(),
                repo.display()
            ),
            WriteError::Io { action, path, source } => {
                write!(f, "{action} {} 失败：{source}", path.display())
            }
        }
    }
}

impl std::error::Error for WriteError {}

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

/// Refuses targets that are files, non-empty directories, or inside a course checkout.
pub fn check_target(target: &Path) -> Result<(), WriteError> {
    if let Some(repo) = enclosing_course_repo(target) {
        return Err(WriteError::InsideCourseRepo {
            target: target.to_path_buf(),
            repo,
        });
    }
    match fs::symlink_metadata(target) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(WriteError::Io {
            action: "读取",
            path: target.to_path_buf(),
            source: error,
        }),
        Ok(meta) if meta.is_dir() => {
            let mut entries = fs::read_dir(target).map_err(io_error("读取目录", target))?;
            if entries.next().is_some() {
                Err(WriteError::TargetNotEmpty(target.to_path_buf()))
            } else {
                Ok(())
            }
        }
        Ok(_) => Err(WriteError::TargetIsFile(target.to_path_buf())),
    }
}

/// Writes `snapshot` as a brand-new directory at `target` (missing or empty), atomically.
pub fn write_new_workspace(snapshot: &Snapshot, target: &Path) -> Result<PathBuf, WriteError> {
    let target = absolute(target).map_err(io_error("解析路径", target))?;
    check_target(&target)?;
    let parent = target.parent().unwrap_or(Path::new("/")).to_path_buf();
    fs::create_dir_all(&parent).map_err(io_error("创建目录", &parent))?;

    let staging = tempfile::Builder::new()
        .prefix(STAGING_PREFIX)
        .tempdir_in(&parent)
        .map_err(io_error("创建临时目录于", &parent))?;
    let pause = std::env::var(SLOW_WRITE_ENV)
        .ok()
        .and_then(|value| value.parse().ok())
        .map(Duration::from_millis);
    for (relative, bytes) in snapshot {
        let path = staging.path().join(relative.as_str());
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(io_error("创建目录", dir))?;
        }
        fs::write(&path, bytes).map_err(io_error("写入", &path))?;
        if let Some(pause) = pause {
            std::thread::sleep(pause);
        }
    }
    make_world_readable(staging.path())?;

    match fs::rename(staging.path(), &target) {
        Ok(()) => {
            // The staging path is gone; dropping the guard only finds nothing to delete.
            drop(staging);
            Ok(target)
        }
        Err(error) => Err(match error.raw_os_error() {
            // ENOTEMPTY / EEXIST: someone else filled the target first (lost race).
            Some(39) | Some(17) => WriteError::TargetNotEmpty(target),
            // ENOTDIR: a file appeared at the target meanwhile.
            Some(20) => WriteError::TargetIsFile(target),
            _ => WriteError::Io {
                action: "移动到",
                path: target,
                source: error,
            },
        }),
    }
}

/// tempfile creates staging directories with mode 0700; a workspace should look like any
/// directory the user made.
#[cfg(unix)]
fn make_world_readable(dir: &Path) -> Result<(), WriteError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).map_err(io_error("设置权限", dir))
}

#[cfg(not(unix))]
fn make_world_readable(_dir: &Path) -> Result<(), WriteError> {
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
