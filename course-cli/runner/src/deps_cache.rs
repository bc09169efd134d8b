//! A per-user cache of compiled *registry* dependencies, so a learner's second workspace does
//! not compile tokio and serde from scratch again.
//!
//! Why this is safe:
//! - Only registry crates go in. Their artifact names carry cargo's metadata hash (package id,
//!   version, features, profile, compiler), and cargo hashes a registry crate's sources by
//!   their registry path, which is the same in every workspace of one user. The workspace's own
//!   crates (the learner crate, its tests, `xtask`) are never cached, so every verdict is of
//!   code compiled in the workspace being judged.
//! - Cargo still decides what is fresh: a cached artifact that does not fit is rebuilt, never
//!   trusted. The cache only saves work.
//! - Files are copied, not linked, with their modification times kept (cargo compares them),
//!   so two workspaces built at once share nothing, and a copied or moved workspace carries its
//!   own `target/`.
//! - One cache directory per toolchain and lock file; it is published with one rename, so two
//!   runs filling it at once leave one complete copy, never a mix.
//!
//! Where: `$PI_COURSE_DEPS_CACHE`, else `$XDG_CACHE_HOME/pi-course/deps`, else
//! `~/.cache/pi-course/deps`. Every step is best effort: a cache that cannot be read or written
//! costs a cold build, never a verdict.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::spec::content_hash;

/// Overrides the cache's root directory (the engine's tests point it at a temporary one).
pub const CACHE_ENV: &str = "PI_COURSE_DEPS_CACHE";
/// The profile directories of `target/debug` that hold per-crate artifacts, fingerprints
/// last: a copy cut short leaves outputs without the fingerprint that vouches for them (cargo
/// rebuilds), never a fingerprint vouching for a missing output.
const KINDS: [&str; 3] = ["deps", "build", ".fingerprint"];

/// The cache root: [`CACHE_ENV`], else the XDG cache home, else `~/.cache`.
pub fn cache_root() -> Option<PathBuf> {
    let from = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(dir) = from(CACHE_ENV) {
        return Some(PathBuf::from(dir));
    }
    let base = from("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| from("HOME").map(|home| Path::new(&home).join(".cache")))?;
    Some(base.join("pi-course").join("deps"))
}

/// The cache directory for `workspace`: one per toolchain (`rustc -vV`, run where the
/// workspace's toolchain file applies) and `Cargo.lock`.
pub fn cache_dir(workspace: &Path) -> Option<PathBuf> {
    let lock = fs::read(workspace.join("Cargo.lock")).ok()?;
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let version = Command::new(rustc)
        .arg("-vV")
        .current_dir(workspace)
        .output()
        .ok()
        .filter(|output| output.status.success())?
        .stdout;
    let key = content_hash(&[version, lock].concat());
    Some(cache_root()?.join(key))
}

/// Seeds `<workspace>/target/debug` from the cache, if the cache has an entry for it.
/// Returns whether it did. A fresh workspace only: nothing already in `target/` is replaced.
pub fn seed(workspace: &Path) -> bool {
    // A learner who sends every build to one target directory of their own choosing gets
    // nothing seeded: that directory is theirs.
    if std::env::var_os("CARGO_TARGET_DIR").is_some() {
        return false;
    }
    let Some(cached) = cache_dir(workspace).filter(|dir| dir.is_dir()) else {
        return false;
    };
    let profile = workspace.join("target").join("debug");
    copy_tree(&cached, &profile, &|_| true).is_ok()
}

/// After a successful build of `workspace` (whose build output is in `target_debug`), puts its
/// registry crates' artifacts in the cache, unless the cache already has them.
/// `own` holds the workspace's own package and target names, which are never cached.
pub fn fill(workspace: &Path, target_debug: &Path, own: &BTreeSet<String>) -> io::Result<()> {
    let Some(cached) = cache_dir(workspace) else {
        return Ok(());
    };
    if cached.exists() {
        return Ok(());
    }
    let parent = cached.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(parent)?;
    let staging = tempfile_dir(parent)?;
    let result = copy_tree(target_debug, &staging.0, &|name| {
        is_registry_entry(name, own)
    })
    .and_then(|()| fs::rename(&staging.0, &cached));
    match result {
        // Another run published the same key first: its copy is as good as ours.
        Err(_) if cached.is_dir() => Ok(()),
        other => other,
    }
}

/// After a successful build by `runner`, fills the cache from its target directory. Asks
/// cargo (offline, no resolution) for the target directory and the workspace's own names.
pub fn fill_after_build(runner: &crate::cargo::CargoRunner) {
    // A target directory shared on purpose (the learner's own setting, the course's verify)
    // is not a fresh workspace's build: it is left alone, like in `seed`.
    if runner.target_dir.is_some() || std::env::var_os("CARGO_TARGET_DIR").is_some() {
        return;
    }
    // The common case, every run after the first: the cache already has this workspace's
    // key, so cargo is not even asked.
    if cache_dir(&runner.workspace).is_none_or(|cached| cached.exists()) {
        return;
    }
    let Ok(output) = runner
        .command("metadata")
        .args(["--format-version", "1", "--no-deps", "--offline"])
        .output()
    else {
        return;
    };
    let Ok(metadata) = serde_json::from_slice::<serde_json::Value>(&output.stdout) else {
        return;
    };
    let Some(target) = metadata["target_directory"].as_str() else {
        return;
    };
    let mut own = BTreeSet::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        own.extend(package["name"].as_str().map(String::from));
        for target in package["targets"].as_array().into_iter().flatten() {
            own.extend(target["name"].as_str().map(String::from));
        }
    }
    if !own.is_empty() {
        let _ = fill(&runner.workspace, &Path::new(target).join("debug"), &own);
    }
}

/// Whether a `deps`, `.fingerprint` or `build` entry is a cargo artifact of a crate that is
/// not the workspace's own: `lib<crate>-<hash>.<ext>`, `<crate>-<hash>[.d]`, `<package>-<hash>`.
fn is_registry_entry(name: &str, own: &BTreeSet<String>) -> bool {
    let stem = name.split('.').next().unwrap_or(name);
    let Some((crate_part, hash)) = stem.rsplit_once('-') else {
        return false;
    };
    let is_hash = hash.len() == 16 && hash.bytes().all(|byte| byte.is_ascii_hexdigit());
    let normal = crate_part.replace('-', "_");
    let owned = own.iter().any(|own| {
        let own = own.replace('-', "_");
        normal == own || normal.strip_prefix("lib") == Some(own.as_str())
    });
    is_hash && !owned
}

/// Copies the entries of `KINDS` under `from` that `keep` accepts (by top-level name) into
/// `to`, keeping modification times; existing files in `to` are left alone.
fn copy_tree(from: &Path, to: &Path, keep: &dyn Fn(&str) -> bool) -> io::Result<()> {
    for kind in KINDS {
        let Ok(entries) = fs::read_dir(from.join(kind)) else {
            continue;
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_str().is_some_and(keep) {
                copy_entry(&entry.path(), &to.join(kind).join(&name))?;
            }
        }
    }
    Ok(())
}

/// Copies a file or a directory tree, each file with its modification time. Symbolic links
/// are skipped: cargo's artifacts are regular files, and a link could lead anywhere.
fn copy_entry(from: &Path, to: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(from)?;
    if meta.is_dir() {
        fs::create_dir_all(to)?;
        for entry in fs::read_dir(from)? {
            let entry = entry?;
            copy_entry(&entry.path(), &to.join(entry.file_name()))?;
        }
    } else if meta.is_file() && fs::symlink_metadata(to).is_err() {
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)?;
        }
        // Copied under a name cargo never reads, then renamed: a kill mid-copy leaves no
        // truncated artifact under a real name.
        let mut partial = to.as_os_str().to_owned();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        fs::copy(from, &partial)?;
        // Cargo judges freshness by comparing these times: a copy must not look newer than
        // the fingerprints that were recorded after it.
        fs::File::options()
            .write(true)
            .open(&partial)?
            .set_modified(meta.modified()?)?;
        fs::rename(&partial, to)?;
    }
    Ok(())
}

/// A new private directory beside the published ones, removed on drop unless renamed away.
struct StagingDir(PathBuf);

fn tempfile_dir(parent: &Path) -> io::Result<StagingDir> {
    for attempt in 0u32.. {
        let path = parent.join(format!(".filling-{}-{attempt}", std::process::id()));
        match fs::create_dir(&path) {
            Ok(()) => return Ok(StagingDir(path)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
    unreachable!("u32 attempts are never exhausted")
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_registry_artifacts_are_cached() {
        let own: BTreeSet<String> = ["pi-course", "xtask", "course-runner", "02_event_stream"]
            .map(String::from)
            .into();
        for registry in [
            "libtokio-0123456789abcdef.rlib",
            "libtokio-0123456789abcdef.rmeta",
            "tokio-0123456789abcdef.d",
            "serde_json-0123456789abcdef",
            "proc-macro2-0123456789abcdef",
            "liblibc-0123456789abcdef.rlib",
        ] {
            assert!(
                is_registry_entry(registry, &own),
                "依赖的产物要进缓存：{registry}"
            );
        }
        for workspace in [
            "libpi_course-0123456789abcdef.rlib",
            "pi-course-0123456789abcdef",
            "02_event_stream-0123456789abcdef",
            "libcourse_runner-0123456789abcdef.rmeta",
            "xtask-0123456789abcdef.d",
            ".cargo-lock",
            "tokio-not-a-hash",
        ] {
            assert!(
                !is_registry_entry(workspace, &own),
                "工作区自己的产物和不认识的文件绝不进缓存：{workspace}"
            );
        }
    }
}
