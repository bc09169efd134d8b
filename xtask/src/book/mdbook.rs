//! mdBook, run as its own binary at a pinned version (never a dependency): the configuration
//! and theme files it needs next to the generated source, and its verdict.

use std::path::Path;
use std::process::Command;

use crate::checkout::Failure;

/// The mdBook release the book is built and tested with. `.ci/run` installs the same one.
pub const MDBOOK_VERSION: &str = "0.5.4";

/// Files of `xtask/book/` that go into the book directory: (path relative to it, text).
pub const ASSETS: &[(&str, &str)] = &[
    ("book.toml", include_str!("../../book/book.toml")),
    ("book.css", include_str!("../../book/book.css")),
    ("theme/head.hbs", include_str!("../../book/head.hbs")),
    (
        "src/cjk-search.js",
        include_str!("../../book/cjk-search.js"),
    ),
    (
        "src/zh-search-ui.js",
        include_str!("../../book/zh-search-ui.js"),
    ),
];

/// The command that installs the pinned mdBook.
pub fn install_hint() -> String {
    format!("cargo install mdbook --locked --version {MDBOOK_VERSION}")
}

/// Why the pinned mdBook cannot be used, as one Chinese line with the install command.
pub fn problem() -> Option<String> {
    let wanted = format!("mdbook v{MDBOOK_VERSION}");
    match Command::new("mdbook").arg("--version").output() {
        Ok(output) if output.status.success() => {
            let found = String::from_utf8_lossy(&output.stdout).trim().to_string();
            (found != wanted).then(|| {
                format!(
                    "找到的是 {found}，课程书固定使用 mdBook {MDBOOK_VERSION}：请运行 `{}`",
                    install_hint()
                )
            })
        }
        _ => Some(format!(
            "未找到 mdbook：请运行 `{}` 安装（课程书固定使用这个版本）",
            install_hint()
        )),
    }
}

/// Runs `mdbook build` on `dir`. Every line mdBook prints that is not an `INFO` line is a
/// problem, and so is a failed build; the second value says whether it built.
pub fn build(dir: &Path) -> Result<(Vec<String>, bool), Failure> {
    let output = Command::new("mdbook")
        .arg("build")
        .arg(dir)
        .env("NO_COLOR", "1")
        .output()
        .map_err(|error| Failure(format!("无法启动 mdbook：{error}")))?;
    let log = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    let mut problems = problems_in_log(&log);
    if !output.status.success() {
        problems.push(format!("mdbook build 失败（{}）", output.status));
    }
    Ok((problems, output.status.success()))
}

fn problems_in_log(log: &str) -> Vec<String> {
    log.lines()
        .filter(|line| !line.split_whitespace().any(|word| word == "INFO"))
        .filter(|line| !line.trim().is_empty())
        .map(|line| format!("mdbook：{}", line.trim()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_installs_the_pinned_mdbook() {
        let run = include_str!("../../../.ci/run");
        assert!(
            run.contains(&format!("MDBOOK_VERSION={MDBOOK_VERSION}")),
            ".ci/run must install mdBook {MDBOOK_VERSION}, the version the book is built with"
        );
    }

    #[test]
    fn the_markdown_reader_is_the_parser_version_of_the_pinned_mdbook() {
        // mdBook 0.5.4's `mdbook-markdown` depends on pulldown-cmark 0.13.4.
        let manifest = include_str!("../../../Cargo.toml");
        assert!(
            manifest.contains("pulldown-cmark = { version = \"=0.13.4\""),
            "the book reads Markdown with the pulldown-cmark that mdBook {MDBOOK_VERSION} uses"
        );
    }

    #[test]
    fn only_info_lines_are_quiet() {
        // mdBook 0.5.4's own lines, with NO_COLOR set.
        let log = " INFO Book building has started\n\n WARN unclosed HTML tag `<div>` found\n";
        assert_eq!(
            problems_in_log(log),
            ["mdbook：WARN unclosed HTML tag `<div>` found"]
        );
    }
}
