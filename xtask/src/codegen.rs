//! `cargo xtask codegen [--check]`: writes what [`course_cli::codegen`] generates — the
//! skeletons, the README's chapter table, the tutor guide's command blocks — or, with
//! `--check`, fails when any of it is stale. A unit test runs the same check, so a bare
//! `cargo test` catches a hand edit too.
//!
//! The generated files are kept in the repository so reviewers can read what a learner
//! receives; `practice` computes the same text from the regions at run time, so none of them
//! is ever an input.

use std::collections::BTreeMap;
use std::path::Path;

use course_cli::catalog::Catalog;
use course_cli::codegen::{self, Stale, README, SKELETONS_DIR, TUTOR_GUIDE};
use course_cli::files;
use course_cli::sources::Sources;

use crate::checkout::{self, Failure};
use crate::out;

/// What codegen would write, and what is there now.
struct Comparison {
    expected: BTreeMap<String, String>,
    stale: Vec<Stale>,
}

/// Reads the checkout (no course lock: codegen never touches `target/`) and compares.
fn compare(root: &Path) -> Result<Comparison, Failure> {
    let data = files::load_checkout(root)
        .map_err(|error| Failure(format!("读取课程数据失败：{error}")))?;
    let catalog = Catalog::from_files(&data)?;
    let sources = Sources::new(&catalog, &data)?;
    let mut present = BTreeMap::new();
    for path in [README, TUTOR_GUIDE] {
        if let Ok(text) = std::fs::read_to_string(root.join(path)) {
            present.insert(path.to_string(), text);
        }
    }
    let hand_written = present.clone();
    let dir = root.join(SKELETONS_DIR);
    if dir.is_dir() {
        for entry in walkdir::WalkDir::new(&dir).sort_by_file_name() {
            let entry =
                entry.map_err(|error| Failure(format!("读取 {SKELETONS_DIR} 失败：{error}")))?;
            if entry.file_type().is_file() {
                let key = entry
                    .path()
                    .strip_prefix(root)
                    .map_err(|error| Failure(error.to_string()))?
                    .to_string_lossy()
                    .replace('\\', "/");
                present.insert(
                    key,
                    std::fs::read_to_string(entry.path()).unwrap_or_default(),
                );
            }
        }
    }
    let expected = codegen::generate(&catalog, &sources, &hand_written)?;
    let stale = codegen::stale(&expected, &present);
    Ok(Comparison { expected, stale })
}

pub fn run(check: bool) -> Result<bool, Failure> {
    let root = checkout::repo_root()?;
    let Comparison { expected, stale } = compare(&root)?;
    if check {
        for problem in &stale {
            out::say(format!("✗ {problem}"));
        }
        if stale.is_empty() {
            out::say(format!(
                "✓ 生成的文件都是最新的（{} 个：{SKELETONS_DIR}/、{README} 的章节表、{TUTOR_GUIDE} 的命令块）",
                expected.len()
            ));
        } else {
            out::say("运行 cargo xtask codegen 重新生成");
        }
        return Ok(stale.is_empty());
    }
    for problem in &stale {
        match problem {
            Stale::NotGenerated(path) => {
                std::fs::remove_file(root.join(path))?;
                out::say(format!("删除 {path}"));
            }
            Stale::Differs(path) | Stale::Missing(path) => {
                let target = root.join(path);
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(&target, &expected[path])?;
                out::say(format!("写入 {path}"));
            }
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    /// `cargo xtask codegen --check` as a test: a stale or hand-edited generated file fails a
    /// bare `cargo test`, not only CI.
    #[test]
    fn every_generated_file_is_what_codegen_writes() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask lives in the repository");
        let comparison = super::compare(root).expect("the checkout reads");
        let stale: Vec<String> = comparison.stale.iter().map(ToString::to_string).collect();
        assert!(
            stale.is_empty(),
            "运行 cargo xtask codegen：\n{}",
            stale.join("\n")
        );
    }
}
