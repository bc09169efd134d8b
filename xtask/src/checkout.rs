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
}

impl Course {
    pub fn load() -> Result<Self, String> {
        let root = repo_root();
        let data =
            files::load_checkout(&root).map_err(|error| format!("读取课程数据失败：{error}"))?;
        let catalog = Catalog::from_files(&data).map_err(|error| error.to_string())?;
        Ok(Course {
            data,
            catalog,
            scratch: root.join("target").join("course"),
        })
    }

    /// Writes `snapshot` into `target/course/<name>`; every snapshot shares one target dir,
    /// so dependencies are compiled once.
    pub fn materialize(&self, name: &str, snapshot: &Snapshot) -> Result<RunSettings, String> {
        let dir = self.scratch.join(name);
        sync_scratch_dir(snapshot, &dir)
            .map_err(|error| format!("写入 {} 失败：{error}", dir.display()))?;
        Ok(RunSettings {
            workspace: dir,
            target_dir: Some(self.shared_target_dir()),
        })
    }

    pub fn shared_target_dir(&self) -> PathBuf {
        self.scratch.join("build")
    }
}
