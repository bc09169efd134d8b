//! Files of a workspace that follow from the plan and are never written by hand: the learner
//! crate's `src/lib.rs` and, once overlays add packages, the workspace root's `Cargo.toml`.
//!
//! A chapter directory that carries one of them is a problem of the tree check: a hand copy
//! would be one more thing to keep in step with the manifest.

use std::fmt;

use crate::catalog::{Chapter, PACKAGES_DIR};
use crate::paths::CrateFile;

/// The one line of crate documentation above the modules.
pub const CRATE_DOC: &str = "//! pi-course: build a coding agent (\"pi\") one chapter at a time.";

/// The module a learner-crate file declares: `src/tool.rs` → `tool`, `src/tool/mod.rs` →
/// `tool`. Crate roots, examples and nested files declare none here.
fn module_of(file: &CrateFile) -> Option<&str> {
    let rest = file.as_str().strip_prefix("src/")?;
    let name = match rest.strip_suffix("/mod.rs") {
        Some(directory) => directory,
        None => rest.strip_suffix(".rs")?,
    };
    let is_module = !name.contains('/') && name != "lib" && name != "main";
    is_module.then_some(name)
}

/// `src/lib.rs` for a workspace carrying `chain`: the doc line, then `pub mod m;` for every
/// module of the chain's files, sorted.
pub fn crate_root(chain: &[&Chapter]) -> String {
    let mut modules: Vec<&str> = chain
        .iter()
        .flat_map(|step| step.files.iter().filter_map(module_of))
        .collect();
    modules.sort_unstable();
    modules.dedup();
    let mut text = format!("{CRATE_DOC}\n\n");
    for module in modules {
        text.push_str(&format!("pub mod {module};\n"));
    }
    text
}

/// Why the base manifest cannot be extended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError(pub String);

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "基础工作区的 Cargo.toml 无法扩展：{}", self.0)
    }
}

impl std::error::Error for ManifestError {}

/// The workspace root manifest for a member set: the base manifest with `crates/<name>` of
/// every added package appended to `[workspace] members`, sorted. Comments and layout of the
/// base stay as written (toml_edit), so learners read the same file with a longer list.
pub fn workspace_manifest(base: &str, packages: &[String]) -> Result<String, ManifestError> {
    if packages.is_empty() {
        return Ok(base.to_string());
    }
    let mut document: toml_edit::DocumentMut = base
        .parse()
        .map_err(|error: toml_edit::TomlError| ManifestError(error.to_string()))?;
    let members = document
        .get_mut("workspace")
        .and_then(|workspace| workspace.get_mut("members"))
        .and_then(|members| members.as_array_mut())
        .ok_or_else(|| ManifestError("没有 [workspace] members 数组".to_string()))?;
    let mut added: Vec<String> = packages
        .iter()
        .map(|name| format!("{PACKAGES_DIR}/{name}"))
        .collect();
    added.sort();
    for member in added {
        if !members
            .iter()
            .any(|existing| existing.as_str() == Some(&member))
        {
            members.push(member);
        }
    }
    // One member a line, as a person would write the longer list.
    for member in members.iter_mut() {
        member.decor_mut().set_prefix("\n    ");
        member.decor_mut().set_suffix("");
    }
    members.set_trailing_comma(true);
    members.set_trailing("\n");
    Ok(document.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_come_from_top_level_sources_only() {
        let module = |path: &str| module_of(&CrateFile::new(path)).map(str::to_string);
        assert_eq!(module("src/tool.rs").as_deref(), Some("tool"));
        assert_eq!(module("src/tool/mod.rs").as_deref(), Some("tool"));
        assert_eq!(module("src/lib.rs"), None);
        assert_eq!(module("src/tool/inner.rs"), None);
        assert_eq!(module("examples/prologue.rs"), None);
    }

    #[test]
    fn packages_extend_the_members_and_keep_the_comments() {
        let base = "# Practice workspace root.\n[workspace]\nmembers = [\"pi-course\", \"xtask\"]\n# tail\n";
        assert_eq!(workspace_manifest(base, &[]).unwrap(), base);
        let derived =
            workspace_manifest(base, &["pi-http".to_string(), "openai-mock".to_string()]).unwrap();
        assert_eq!(
            derived,
            "# Practice workspace root.\n[workspace]\nmembers = [\n    \"pi-course\",\n    \"xtask\",\n    \"crates/openai-mock\",\n    \"crates/pi-http\",\n]\n# tail\n"
        );
        assert!(workspace_manifest("[package]\n", &["x".to_string()]).is_err());
    }
}
