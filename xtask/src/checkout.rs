//! The course checkout this xtask runs in, and the scratch space under `target/`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use course_cli::assemble::Snapshot;
use course_cli::catalog::{Catalog, Chapter, MANIFEST};
use course_cli::files::{self, FileSet};
use course_cli::runner::CargoRunner;
use course_cli::write::sync_scratch_dir;

use crate::out;

/// A failure of an instructor command: one Chinese line (or a few, for cargo's diagnostics).
#[derive(Debug)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for Failure {
    fn from(error: E) -> Self {
        Failure(error.to_string())
    }
}

/// The course repository root, found at run time from the current directory upward (so a
/// copied or moved checkout works on itself), else from where cargo says the xtask lives.
pub fn repo_root() -> Result<PathBuf, Failure> {
    let is_root =
        |dir: &Path| dir.join(MANIFEST).is_file() && dir.join("xtask/Cargo.toml").is_file();
    let from_cwd = std::env::current_dir().ok().and_then(|cwd| {
        cwd.ancestors()
            .find(|dir| is_root(dir))
            .map(Path::to_path_buf)
    });
    let from_cargo = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .and_then(|xtask| xtask.parent().map(Path::to_path_buf))
        .filter(|dir| is_root(dir));
    from_cwd.or(from_cargo).ok_or_else(|| {
        Failure(format!(
            "找不到课程仓库：当前目录及其上级都没有 {MANIFEST}；请在课程仓库里运行 cargo xtask"
        ))
    })
}

/// Course data read from disk (held-out tests included) and its catalog.
pub struct Course {
    pub root: PathBuf,
    pub data: FileSet,
    pub catalog: Catalog,
    scratch: PathBuf,
    /// Taken at the first snapshot and held for the rest of the run: every snapshot shares
    /// `target/course/workspace`, so two xtask runs in one checkout must not interleave. The
    /// OS releases it if the process dies. Taken lazily, so a bad argument is refused at
    /// once instead of after another run finishes.
    lock: OnceLock<std::fs::File>,
}

impl Course {
    pub fn load() -> Result<Self, Failure> {
        let root = repo_root()?;
        let data = files::load_checkout(&root)
            .map_err(|error| Failure(format!("读取课程数据失败：{error}")))?;
        let catalog = Catalog::from_files(&data)?;
        let scratch = root.join("target").join("course");
        Ok(Course {
            root,
            data,
            catalog,
            scratch,
            lock: OnceLock::new(),
        })
    }

    /// Claims `target/course/` for this run, waiting for another xtask run that holds it.
    pub fn claim_scratch(&self) -> Result<&Path, Failure> {
        if self.lock.get().is_none() {
            std::fs::create_dir_all(&self.scratch).map_err(|error| {
                Failure(format!("创建 {} 失败：{error}", self.scratch.display()))
            })?;
            let lock_path = self.scratch.join(".lock");
            let lock = std::fs::File::create(&lock_path).map_err(|error| {
                Failure(format!("创建锁文件 {} 失败：{error}", lock_path.display()))
            })?;
            if lock.try_lock().is_err() {
                out::note(format!(
                    "另一个 cargo xtask 正在使用 {}，等待它结束……",
                    self.scratch.display()
                ));
                lock.lock().map_err(|error| {
                    Failure(format!("等待锁 {} 失败：{error}", lock_path.display()))
                })?;
            }
            // Only this thread ever sets it; a value already there is the same claim.
            let _ = self.lock.set(lock);
        }
        Ok(&self.scratch)
    }

    /// Resolves a chapter argument with the one chapter-id rule.
    pub fn chapter(&self, input: &str) -> Result<&Chapter, Failure> {
        Ok(self.catalog.resolve(input)?)
    }

    /// Makes `target/course/workspace` hold `snapshot` and returns how to run cargo there.
    ///
    /// Every snapshot goes through this one directory on purpose. Cargo hashes a workspace
    /// member by its path relative to the workspace root, so snapshots in sibling directories
    /// sharing one target dir would collide on the same artifacts and fingerprints, and a
    /// stale binary could be judged. In one directory, rewriting the changed files is enough
    /// for cargo to rebuild exactly what changed, while the compiled dependencies are reused.
    /// `label` only names the snapshot in messages.
    pub fn materialize(&self, label: &str, snapshot: &Snapshot) -> Result<CargoRunner, Failure> {
        let dir = self.claim_scratch()?.join("workspace");
        sync_scratch_dir(snapshot, &dir).map_err(|error| {
            Failure(format!(
                "写入快照 {label} 到 {} 失败：{error}",
                dir.display()
            ))
        })?;
        let mut runner = CargoRunner::new(dir);
        runner.target_dir = Some(self.scratch.join("build"));
        Ok(runner)
    }
}
