//! Embeds the course data (chapters, learner-visible tests, the runner crate) into the binary.
//!
//! include_dir cannot leave out a subtree, and instructor-only tests under `tests/held-out`
//! must never ship, so the file list is generated here instead. Each file is pulled in with
//! `include_bytes!`, which makes rustc itself track it; the `rerun-if-changed` lines on the
//! directories catch files that are added or removed.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// Data directories, relative to the repository root.
/// Keep in step with `files::DATA_DIRS` (the embedded-data test compares the two sets).
const DATA_DIRS: &[&str] = &["chapters", "tests", "course-cli/runner", "course-cli/watch"];
/// Never embedded: instructor-only material.
const EXCLUDED: &[&str] = &["tests/held-out"];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let repo_root = manifest_dir
        .parent()
        .expect("course-cli lives inside the repo")
        .to_path_buf();

    let mut entries = Vec::new();
    for dir in DATA_DIRS {
        let root = repo_root.join(dir);
        println!("cargo:rerun-if-changed={}", root.display());
        if !root.is_dir() {
            continue;
        }
        for entry in walkdir::WalkDir::new(&root).sort_by_file_name() {
            let entry = entry.expect("readable course data");
            if !entry.file_type().is_file() {
                continue;
            }
            let relative = relative_slash_path(&repo_root, entry.path());
            if EXCLUDED
                .iter()
                .any(|excluded| relative.starts_with(&format!("{excluded}/")))
            {
                continue;
            }
            entries.push((relative, entry.path().to_path_buf()));
        }
    }

    let mut generated = String::from("pub static FILES: &[(&str, &[u8])] = &[\n");
    for (relative, absolute) in &entries {
        writeln!(
            generated,
            "    ({relative:?}, include_bytes!({:?})),",
            absolute.display().to_string()
        )
        .expect("write to string");
    }
    generated.push_str("];\n");

    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("embedded_files.rs");
    fs::write(out, generated).expect("write embedded file list");
}

fn relative_slash_path(root: &Path, path: &Path) -> String {
    let relative = path
        .strip_prefix(root)
        .expect("data file under the repo root");
    relative
        .components()
        .map(|component| component.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}
