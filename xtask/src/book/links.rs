//! The built site's internal links and anchors, resolved: every `href` and `src` that stays in
//! the book must name a file of the site, and its fragment an `id` (or `<a name>`) on that page.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use percent_encoding::percent_decode_str;
use scraper::Html;

use super::paths::{is_external, normalize, parent};
use crate::checkout::Failure;
use crate::html;

/// A link or anchor of the built site that does not resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokenLink {
    pub page: String,
    pub link: String,
    pub reason: String,
}

/// The files of a built site: every path (relative, `/`-separated) and the text of every page.
#[derive(Debug, Default)]
pub struct Site {
    pub files: BTreeSet<String>,
    pub pages: BTreeMap<String, String>,
}

impl Site {
    /// Reads the site under `dir`.
    pub fn read(dir: &Path) -> Result<Site, Failure> {
        let mut site = Site::default();
        for entry in walkdir::WalkDir::new(dir) {
            let entry =
                entry.map_err(|error| Failure(format!("读取 {} 失败：{error}", dir.display())))?;
            if !entry.file_type().is_file() {
                continue;
            }
            let Ok(relative) = entry.path().strip_prefix(dir) else {
                continue;
            };
            let relative = relative
                .components()
                .map(|part| part.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            if relative.ends_with(".html") {
                let text = std::fs::read_to_string(entry.path())
                    .map_err(|error| Failure(format!("读取 {relative} 失败：{error}")))?;
                site.pages.insert(relative.clone(), text);
            }
            site.files.insert(relative);
        }
        Ok(site)
    }
}

fn decode(text: &str) -> String {
    percent_decode_str(text).decode_utf8_lossy().into_owned()
}

/// Resolves every internal `href` and `src` of every page of the site. Pages are read as a
/// browser without JavaScript reads them, so `<noscript>` links count and script text does
/// not. Returns the number of internal links checked and the broken ones.
pub fn check(site: &Site) -> (usize, Vec<BrokenLink>) {
    let parsed: BTreeMap<&str, Html> = site
        .pages
        .iter()
        .map(|(path, text)| (path.as_str(), html::parse_without_scripts(text)))
        .collect();
    let with_anchor = html::selector("[id], a[name]");
    let anchors: BTreeMap<&str, BTreeSet<&str>> = parsed
        .iter()
        .map(|(path, document)| {
            let ids = document
                .select(&with_anchor)
                .flat_map(|element| {
                    let element = element.value();
                    let name = (element.name() == "a")
                        .then(|| element.attr("name"))
                        .flatten();
                    element.attr("id").into_iter().chain(name)
                })
                .collect();
            (*path, ids)
        })
        .collect();
    let with_link = html::selector("[href], [src]");
    let mut checked = 0;
    let mut broken = Vec::new();
    for (page, document) in &parsed {
        let links = document.select(&with_link).flat_map(|element| {
            ["href", "src"]
                .into_iter()
                .filter_map(move |name| element.value().attr(name))
        });
        for link in links {
            if link.is_empty() || is_external(link) {
                continue;
            }
            checked += 1;
            if let Err(reason) = resolve(page, link, &site.files, &anchors) {
                broken.push(BrokenLink {
                    page: page.to_string(),
                    link: link.to_string(),
                    reason,
                });
            }
        }
    }
    (checked, broken)
}

/// Why the internal `link` of `page` does not resolve, if it does not.
fn resolve(
    page: &str,
    link: &str,
    files: &BTreeSet<String>,
    anchors: &BTreeMap<&str, BTreeSet<&str>>,
) -> Result<(), String> {
    let (path, fragment) = match link.split_once('#') {
        Some((path, fragment)) => (path, decode(fragment)),
        None => (link, String::new()),
    };
    let path = path.split('?').next().unwrap_or_default();
    let target = if path.is_empty() {
        Some(page.to_string())
    } else if let Some(absolute) = path.strip_prefix('/') {
        normalize("", &decode(absolute))
    } else {
        normalize(parent(page), &decode(path))
    };
    let Some(mut target) = target else {
        return Err("指向书外".into());
    };
    if (target.is_empty() || path.ends_with('/')) && !files.contains(&target) {
        target = normalize(&target, "index.html").unwrap_or_default();
    }
    if !files.contains(&target) {
        return Err(format!("{target} 不在书里"));
    }
    let found = fragment.is_empty()
        || anchors
            .get(target.as_str())
            .is_some_and(|ids| ids.contains(fragment.as_str()));
    if found {
        Ok(())
    } else {
        Err(format!("{target} 上没有锚点 #{fragment}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(pages: &[(&str, &str)], others: &[&str]) -> Site {
        let pages: BTreeMap<String, String> = pages
            .iter()
            .map(|(path, text)| (path.to_string(), text.to_string()))
            .collect();
        let mut files: BTreeSet<String> = pages.keys().cloned().collect();
        files.extend(others.iter().map(|f| f.to_string()));
        Site { files, pages }
    }

    fn found(broken: &[BrokenLink]) -> Vec<(&str, &str, &str)> {
        broken
            .iter()
            .map(|b| (b.page.as_str(), b.link.as_str(), b.reason.as_str()))
            .collect()
    }

    #[test]
    fn good_links_pass_and_a_broken_anchor_page_or_escape_is_found() {
        let site = site(
            &[
                (
                    "index.html",
                    r##"<a href="06.html#%E4%B8%8D%E5%8F%98%E9%87%8F">ok</a><a href="06.html#小结">ok</a>
                    <a href="#top">ok</a><h1 id="top">t</h1><script src="book-1.js"></script>
                    <a href="https://example.org/#nope">external</a><a href="06.html?highlight=x#小结">ok</a>"##,
                ),
                (
                    "06.html",
                    r##"<h2 id="不变量">x</h2><h2 id="小结">y</h2><a href="06.html#没有这一节">bad</a>
                    <pre><code>&lt;a href="nowhere.html"&gt;</code></pre><a href="nope.html">bad</a>
                    <a href="../outside.md">bad</a>"##,
                ),
            ],
            &["book-1.js"],
        );
        let (checked, broken) = check(&site);
        assert_eq!(checked, 8);
        assert_eq!(
            found(&broken),
            [
                (
                    "06.html",
                    "06.html#没有这一节",
                    "06.html 上没有锚点 #没有这一节"
                ),
                ("06.html", "nope.html", "nope.html 不在书里"),
                ("06.html", "../outside.md", "指向书外"),
            ]
        );
    }

    #[test]
    fn pages_are_read_as_html_without_scripts() {
        let site = site(
            &[
                (
                    "index.html",
                    r##"<script>if (a<b) { x = "<a href='gone.html'>"; }</script><!-- <a href="gone.html"> -->
                    <a href="06.html#&#x4E0D;&#21464;&#37327;">entities</a><a href='06.html#旧锚点'>a name</a>
                    <noscript><iframe class="sidebar-iframe-outer" src="toc.html"></iframe></noscript>"##,
                ),
                (
                    "06.html",
                    r##"<h2 id="不变量">x</h2><a name="旧锚点"></a><span name="不算">y</span>
                    <a href="#不算">bad</a>"##,
                ),
            ],
            &[],
        );
        let (checked, broken) = check(&site);
        assert_eq!(checked, 4, "script text and comments hold no links");
        assert_eq!(
            found(&broken),
            [
                ("06.html", "#不算", "06.html 上没有锚点 #不算"),
                ("index.html", "toc.html", "toc.html 不在书里"),
            ]
        );
    }

    #[test]
    fn a_directory_link_means_its_index_page() {
        let site = site(
            &[(
                "index.html",
                r#"<a href="guide/">ok</a><a href="/guide/index.html">ok</a><a href="empty/">bad</a>"#,
            )],
            &["guide/index.html"],
        );
        let (checked, broken) = check(&site);
        assert_eq!(checked, 3);
        assert_eq!(
            found(&broken),
            [("index.html", "empty/", "empty/index.html 不在书里")]
        );
    }
}
