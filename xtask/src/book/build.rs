//! One build of the book: generate `target/book/src`, run mdBook into `target/book/html`,
//! resolve every internal link and anchor of the result.

use std::path::{Path, PathBuf};
use std::time::Instant;

use course_cli::catalog::Catalog;
use course_cli::files;

use super::pages::{self, Page, README};
use super::{links, mdbook};
use crate::checkout::{self, Failure};

/// Where the book goes, relative to the repository root.
pub const BOOK_DIR: &str = "target/book";

/// A built book.
pub struct Built {
    /// `target/book/html`.
    pub html_dir: PathBuf,
    /// `target/book`.
    pub dir: PathBuf,
    pub pages: Vec<Page>,
    /// Internal links and anchors checked.
    pub links: usize,
    /// mdBook warnings and broken links; empty when the book is good.
    pub problems: Vec<String>,
    pub seconds: f64,
}

fn write(path: &Path, text: &str) -> Result<(), Failure> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|error| Failure(format!("创建 {} 失败：{error}", dir.display())))?;
    }
    std::fs::write(path, text)
        .map_err(|error| Failure(format!("写入 {} 失败：{error}", path.display())))
}

fn remove_dir(dir: &Path) -> Result<(), Failure> {
    match std::fs::remove_dir_all(dir) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(Failure(format!("清理 {} 失败：{error}", dir.display())))
        }
        _ => Ok(()),
    }
}

/// Generates `target/book/src`, runs mdBook, and checks every link of the site. Needs the
/// pinned mdBook (see [`mdbook::problem`]); takes no course lock, since it runs no snapshot.
pub fn build() -> Result<Built, Failure> {
    let started = Instant::now();
    let root = checkout::repo_root()?;
    let data = files::load_checkout(&root)
        .map_err(|error| Failure(format!("读取课程数据失败：{error}")))?;
    let catalog = Catalog::from_files(&data)?;
    let readme = std::fs::read_to_string(root.join(README))
        .map_err(|error| Failure(format!("读取 {README} 失败：{error}")))?;
    let pages = pages::pages(&catalog, &data, &readme)?;

    let dir = root.join(BOOK_DIR);
    let src = dir.join("src");
    let html_dir = dir.join("html");
    for stale in [&src, &dir.join("theme"), &html_dir] {
        remove_dir(stale)?;
    }
    for (path, text) in mdbook::ASSETS {
        write(&dir.join(path), text)?;
    }
    write(&src.join("SUMMARY.md"), &pages::summary(&pages))?;
    for page in &pages {
        write(&src.join(&page.file), &page.markdown)?;
    }

    let (mut problems, built) = mdbook::build(&dir)?;
    let mut links = 0;
    if built {
        let site = links::Site::read(&html_dir)?;
        for page in &pages {
            if !site.pages.contains_key(&page.html()) {
                problems.push(format!("mdbook 没有生成 {}", page.html()));
            }
        }
        let (checked, broken) = links::check(&site);
        links = checked;
        problems.extend(
            broken
                .iter()
                .map(|b| format!("{}：链接 `{}` 断了：{}", b.page, b.link, b.reason)),
        );
    }
    Ok(Built {
        html_dir,
        dir,
        pages,
        links,
        problems,
        seconds: started.elapsed().as_secs_f64(),
    })
}
