//! `cargo xtask book [--check-browser]`: the whole course as one static site, built the way
//! Rust books are built — with mdBook, run as its own binary at a pinned version.
//!
//! The book's source is generated, never written by hand (`pages`): a front page with the
//! learner's path from the Chinese part of `README.md`, every chapter guide in course order
//! (its own card boxed at the top), the tutor guide, the style guide's glossary and a page
//! for instructors. It goes to `target/book/src`, the site to `target/book/html` (`build`).
//! After mdBook has run, every internal link and anchor of the site is resolved (`links`); a
//! broken one, or any mdBook warning, fails the build. `--check-browser` then opens the site
//! in headless Chromium and checks what a reader sees (`in_browser`).
//!
//! Layers, each file using only those before it: `markdown` (reading Markdown with mdBook's own
//! parser), `paths` → `pages` → `mdbook`, `links` → `build` → `in_browser` → this command. The HTML
//! reading shared with the browser check is `crate::html`, the Chromium driver `crate::browser`.
//!
//! Chinese search: mdBook 0.5.4 splits its search index at whitespace, so a Chinese term is
//! found nowhere. `book/cjk-search.js`, loaded from the page head, answers queries that
//! contain Chinese characters by substring match over the index's stored section text;
//! `book/zh-search-ui.js` puts the search box and its results header into Chinese.

mod build;
mod in_browser;
mod links;
mod markdown;
mod mdbook;
mod pages;
mod paths;

use crate::browser;
use crate::checkout::Failure;
use crate::out;

/// Builds, reports, and returns the book when it is good.
fn build_and_report() -> Result<Option<build::Built>, Failure> {
    let built = build::build()?;
    if !built.problems.is_empty() {
        out::say("✗ 课程书有问题：");
        for problem in &built.problems {
            out::say(format!("  ✗ {problem}"));
        }
        return Ok(None);
    }
    out::say(format!(
        "✓ 课程书：{} 页，{} 个站内链接与锚点全部可达，用时 {:.1}s",
        built.pages.len(),
        built.links,
        built.seconds
    ));
    out::say(format!(
        "  打开：{}",
        built.html_dir.join("index.html").display()
    ));
    Ok(Some(built))
}

/// `cargo xtask book [--check-browser]`.
pub fn run(check_browser: bool) -> Result<bool, Failure> {
    if let Some(problem) = mdbook::problem() {
        return Err(Failure(problem));
    }
    let Some(built) = build_and_report()? else {
        return Ok(false);
    };
    if !check_browser {
        return Ok(true);
    }
    let chromium = browser::find_chromium().ok_or_else(|| Failure(browser::missing_hint()))?;
    in_browser::check(&built, &chromium)
}

/// The book step of `cargo xtask ci`: builds and browser-checks the book when mdBook and
/// Chromium are present, and says plainly what it skipped when they are not.
pub fn ci_step() -> Result<bool, Failure> {
    if let Some(problem) = mdbook::problem() {
        out::say(format!("⚠ 已跳过课程书与浏览器检查：{problem}"));
        return Ok(true);
    }
    let Some(built) = build_and_report()? else {
        return Ok(false);
    };
    match browser::find_chromium() {
        Some(chromium) => in_browser::check(&built, &chromium),
        None => {
            out::say(format!("⚠ 已跳过浏览器检查：{}", browser::missing_hint()));
            Ok(true)
        }
    }
}
