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
        self.materialize_in(Lane::MAIN, label, snapshot)
    }

    /// [`Course::materialize`] in one of several independent scratch pairs, so that states
    /// can be judged side by side (the mistake catalogue). Lane 0 is the main pair; lane k
    /// is `target/course/workspace-k` with its own target dir `build-k`, seeded by
    /// [`Course::seed_lanes`] with a copy of `build`: the workspace has the same layout, so
    /// cargo's path-relative hashes find the compiled dependencies and only the course's own
    /// crates rebuild.
    pub fn materialize_in(
        &self,
        lane: Lane,
        label: &str,
        snapshot: &Snapshot,
    ) -> Result<CargoRunner, Failure> {
        let scratch = self.claim_scratch()?;
        let (dir, build) = if lane == Lane::MAIN {
            (scratch.join("workspace"), scratch.join("build"))
        } else {
            // Seeded by `seed_lanes`; unseeded, cargo simply builds the lane from scratch.
            (
                scratch.join(format!("workspace-{}", lane.0)),
                scratch.join(format!("build-{}", lane.0)),
            )
        };
        sync_scratch_dir(snapshot, &dir).map_err(|error| {
            Failure(format!(
                "写入快照 {label} 到 {} 失败：{error}",
                dir.display()
            ))
        })?;
        let mut runner = CargoRunner::new(dir);
        runner.target_dir = Some(build);
        Ok(runner)
    }
}

impl Course {
    /// Gives lanes 1..`lanes` their target dirs. Call it while no cargo runs in lane 0: the
    /// copy reads `build`, and a build writing there at the same time could hand it a file
    /// that is gone by the time it is copied.
    pub fn seed_lanes(&self, lanes: usize) -> Result<(), Failure> {
        let scratch = self.claim_scratch()?;
        for lane in 1..lanes {
            let build = scratch.join(format!("build-{lane}"));
            if !build.exists() {
                seed_build_dir(&scratch.join("build"), &build).map_err(|error| {
                    Failure(format!("复制构建目录到 {} 失败：{error}", build.display()))
                })?;
            }
        }
        Ok(())
    }
}

/// One of the scratch workspace/target pairs under `target/course/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane(pub usize);

impl Lane {
    pub const MAIN: Lane = Lane(0);

    /// How many lanes judge side by side: one more than there are cores, at most four. A
    /// lane is idle for part of each state (a test waiting out its own timeout, a link on one
    /// thread), and the extra lane fills that time: measured on 2 cores, chapter 08's 85
    /// mistakes and 6 Lab states took 133 s in 3 lanes against 153 s in 2. Each lane is a
    /// full target dir on disk, hence the cap. `PI_COURSE_VERIFY_LANES` overrides it, e.g.
    /// `1` to judge strictly one state at a time.
    pub fn count() -> usize {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        std::env::var("PI_COURSE_VERIFY_LANES")
            .ok()
            .and_then(|value| value.trim().parse::<usize>().ok())
            .filter(|&lanes| lanes > 0)
            .unwrap_or_else(|| (cores + 1).min(4))
    }
}

/// Copies a target dir into a fresh one, written under a temporary name and renamed into
/// place, so an interrupted copy never leaves a half-filled `build-k` that later runs trust.
/// Artifacts keep their modification times: cargo then compares them with the lane's newly
/// written sources exactly as it would in the directory they came from.
fn seed_build_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    let partial = to.with_extension("partial");
    if partial.exists() {
        std::fs::remove_dir_all(&partial)?;
    }
    std::fs::create_dir_all(&partial)?;
    if from.is_dir() {
        for entry in walkdir::WalkDir::new(from).min_depth(1) {
            let entry = entry.map_err(std::io::Error::other)?;
            let relative = entry
                .path()
                .strip_prefix(from)
                .expect("walk stays under from");
            let target = partial.join(relative);
            let kind = entry.file_type();
            if kind.is_dir() {
                std::fs::create_dir_all(&target)?;
            } else if kind.is_file() {
                std::fs::copy(entry.path(), &target)?;
                let modified = entry
                    .metadata()
                    .map_err(std::io::Error::other)?
                    .modified()?;
                std::fs::File::options()
                    .write(true)
                    .open(&target)?
                    .set_modified(modified)?;
            } else if kind.is_symlink() {
                #[cfg(unix)]
                std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
            }
        }
    }
    std::fs::rename(&partial, to)
}
