//! Course data as an in-memory file set, loaded from the binary or from a checkout.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// Repository-relative, `/`-separated path → content.
pub type FileSet = BTreeMap<String, Vec<u8>>;

/// The data directories that make up the course.
pub const DATA_DIRS: &[&str] = &["chapters", "skeletons", "tests"];
/// Instructor-only tests: on disk in the course repo, never embedded, never in practice.
pub const HELD_OUT_DIR: &str = "tests/held-out";

mod generated {
    include!(concat!(env!("OUT_DIR"), "/embedded_files.rs"));
}

/// The course data compiled into this binary (held-out tests excluded by the build script).
pub fn embedded() -> FileSet {
    generated::FILES
        .iter()
        .map(|(path, bytes)| ((*path).to_string(), bytes.to_vec()))
        .collect()
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
            files.insert(relative, std::fs::read(entry.path())?);
        }
    }
    Ok(files)
}

/// Files below `dir/`, keyed by the path relative to it.
pub fn under<'a>(files: &'a FileSet, dir: &str) -> impl Iterator<Item = (&'a str, &'a [u8])> {
    let prefix = format!("{dir}/");
    files.iter().filter_map(move |(path, bytes)| {
        path.strip_prefix(&prefix)
            .map(|rest| (rest, bytes.as_slice()))
    })
}
