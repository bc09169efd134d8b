//! Course data as an in-memory file set, loaded from the binary or from a checkout.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use crate::paths::RepoPath;

/// Instructor-only tests: in the checkout, never embedded, never in a practice workspace.
pub const HELD_OUT_DIR: &str = "tests/held-out";

/// Repository-relative path → content.
pub type FileSet = BTreeMap<RepoPath, Vec<u8>>;

/// What makes up the course: the chapters with their manifest, the tests, and the runner and
/// watch crates that every workspace carries. `skeletons/` is generated from `chapters/` and so is
/// not course data.
pub const DATA_DIRS: &[&str] = &["chapters", "tests", "course-cli/runner", "course-cli/watch"];

mod generated {
    include!(concat!(env!("OUT_DIR"), "/embedded_files.rs"));
}

/// The course data compiled into this binary (held-out tests excluded by the build script).
pub fn embedded() -> FileSet {
    generated::FILES
        .iter()
        .map(|(path, bytes)| (RepoPath::new(*path), bytes.to_vec()))
        .collect()
}

/// Whether a repository path belongs to the course data the binary embeds.
pub fn is_embedded_path(path: &str) -> bool {
    !path.starts_with(&format!("{HELD_OUT_DIR}/"))
}

/// The course data of a checkout, held-out tests included.
pub fn load_checkout(repo_root: &Path) -> io::Result<FileSet> {
    let mut files = FileSet::new();
    for dir in DATA_DIRS {
        let root = repo_root.join(dir);
        if !root.is_dir() {
            continue;
        }
        for entry in walkdir::WalkDir::new(&root).sort_by_file_name() {
            let entry = entry.map_err(io::Error::other)?;
            if !entry.file_type().is_file() {
                continue;
            }
            let relative = entry
                .path()
                .strip_prefix(repo_root)
                .map_err(io::Error::other)?
                .components()
                .map(|component| component.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            files.insert(RepoPath::new(relative), std::fs::read(entry.path())?);
        }
    }
    Ok(files)
}

/// Files below `dir/`, keyed by the path relative to it.
pub fn under<'a>(files: &'a FileSet, dir: &'a str) -> impl Iterator<Item = (&'a str, &'a [u8])> {
    files
        .iter()
        .filter_map(move |(path, bytes)| path.strip_dir(dir).map(|rest| (rest, bytes.as_slice())))
}
