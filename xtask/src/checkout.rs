//! The course checkout this xtask runs in, and the scratch space under `target/`.

use std::path::{Path, PathBuf};

use course_cli::assemble::Snapshot;
use course_cli::catalog::Catalog;
use course_cli::files::{self, FileSet};
use course_cli::runner::RunSettings;
use course_cli::write::sync_scratch_dir;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the repo")
        .to_path_buf()
}

pub fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// Course data read from disk (held-out tests included) and its catalog.
pub struct Course {
    pub data: FileSet,
    pub catalog: Catalog,
    scratch: PathBuf,
    /// Held for the whole run: every snapshot shares `target/course/workspace`, so two xtask
    /// runs in one checkout must not interleave. The OS releases it if the process dies.
    _lock: std::fs::File,
}

impl Course {
    pub fn load() -> Result<Self, String> {
        let root = repo_root();
        let data =
            files::load_checkout(&root).map_err(|error| format!("读取课程数据失败：{error}"))?;
        let catalog = Catalog::from_files(&data).map_err(|error| error.to_string())?;
        let scratch = root.join("target").join("course");
        std::fs::create_dir_all(&scratch)
            .map_err(|error| format!("创建 {} 失败：{error}", scratch.display()))?;
        let lock_path = scratch.join(".lock");
        let lock = std::fs::File::create(&lock_path)
            .map_err(|error| format!("创建锁文件 {} 失败：{error}", lock_path.display()))?;
        if lock.try_lock().is_err() {
            eprintln!(
                "另一个 cargo xtask 正在使用 {}，等待它结束……",
                scratch.display()
            );
            lock.lock()
                .map_err(|error| format!("等待锁 {} 失败：{error}", lock_path.display()))?;
        }
        Ok(Course {
            data,
            catalog,
            scratch,
            _lock: lock,
        })
    }

    /// Makes `target/course/workspace` hold `snapshot` and returns how to run cargo there.
    ///
    /// Every snapshot goes through this one directory on purpose. Cargo hashes a workspace
    /// member by its path relative to the workspace root, so snapshots in sibling directories
    /// sharing one target dir would collide on the same artifacts and fingerprints, and a
    /// stale binary could be judged. In one directory, rewriting the changed files is enough
    /// for cargo to rebuild exactly what changed, while the compiled dependencies are reused.
    /// `label` only names the snapshot in messages.
    pub fn materialize(&self, label: &str, snapshot: &Snapshot) -> Result<RunSettings, String> {
        let dir = self.scratch.join("workspace");
        sync_scratch_dir(snapshot, &dir)
            .map_err(|error| format!("写入快照 {label} 到 {} 失败：{error}", dir.display()))?;
        Ok(RunSettings {
            workspace: dir,
            target_dir: Some(self.shared_target_dir()),
        })
    }

    pub fn shared_target_dir(&self) -> PathBuf {
        self.scratch.join("build")
    }
}
