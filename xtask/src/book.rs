//! `cargo xtask book [--check-browser]`: the whole course as one static site, built the way
//! Rust books are built — with mdBook, run as its own binary at a pinned version.
//!
//! The book's source is generated, never written by hand: a front page from the Chinese part
//! of `README.md`, every chapter guide in course order, each opened by a card rendered from the
//! manifest (mode, Labs, commands, `n/n`, first reds — the same facts as the workspace's
//! `LEARNING.md`), the tutor guide and the style guide's glossary. It goes to
//! `target/book/src`, the site to `target/book/html`. After mdBook has run, every internal
//! link and anchor of the site is resolved; a broken one, or any mdBook warning, fails the
//! build. `--check-browser` then opens the site in headless Chromium (`browser.rs`).
//!
//! Chinese search: mdBook 0.5.4 splits its search index at whitespace, so a Chinese term is
//! found nowhere. `book/cjk-search.js`, loaded from the page head, answers queries that
//! contain Chinese characters by substring match over the index's stored section text.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use course_cli::catalog::{Catalog, Chapter, Kind};
use course_cli::files::{self, FileSet};
use course_cli::learning::stub_messages;
use course_cli::runner::{ChapterId, LabId};

use html5ever::tendril::TendrilSink as _;
use scraper::{Html, HtmlTreeSink, Selector};

use crate::browser;
use crate::checkout::{self, Failure};

/// The mdBook release the book is built and tested with. `.ci/run` installs the same one.
pub const MDBOOK_VERSION: &str = "0.5.4";

const BOOK_TOML: &str = include_str!("../book/book.toml");
const HEAD_HBS: &str = include_str!("../book/head.hbs");
const CJK_SEARCH_JS: &str = include_str!("../book/cjk-search.js");
const BOOK_CSS: &str = include_str!("../book/book.css");

/// Sources of the pages that are not chapter guides, relative to the repository root.
pub const README: &str = "README.md";
pub const TUTOR_GUIDE: &str = "chapters/_crate/AGENT_GUIDE.md";
pub const STYLE_GUIDE: &str = "chapters/STYLE.md";
/// The section of the style guide that the book carries.
const GLOSSARY: &str = "术语表";
/// The heading of the card that opens every chapter page.
pub const CARD_HEADING: &str = "本章练习一览";
/// The CSS class of the card (`book/book.css`).
const CARD_CLASS: &str = "manifest-card";

/// Where the book goes, relative to the repository root.
pub const BOOK_DIR: &str = "target/book";

/// The command that installs the pinned mdBook.
pub fn install_hint() -> String {
    format!("cargo install mdbook --locked --version {MDBOOK_VERSION}")
}

/// The sidebar's parts, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The front page, before any part title.
    Front,
    Chapters,
    Reference,
}

impl Part {
    fn title(self) -> Option<&'static str> {
        match self {
            Part::Front => None,
            Part::Chapters => Some("章节"),
            Part::Reference => Some("参考"),
        }
    }
}

/// One page of the book, in reading order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// The Markdown file under `src/`, e.g. `06-tool-contract.md`.
    pub file: String,
    /// The entry in the sidebar.
    pub label: String,
    /// The text of the page's `#` heading.
    pub heading: String,
    pub part: Part,
    pub chapter: Option<ChapterId>,
    /// Texts the rendered page must show: the card's commands.
    pub must_show: Vec<String>,
    pub markdown: String,
}

impl Page {
    /// The page in the site, e.g. `06-tool-contract.html`.
    pub fn html(&self) -> String {
        let stem = self.file.strip_suffix(".md").unwrap_or(&self.file);
        format!("{stem}.html")
    }
}

/// `06-tool-contract.md`
fn chapter_file(chapter: &Chapter) -> String {
    format!("{}-{}.md", chapter.id, chapter.slug)
}

/// Repository file → the page that shows it, for rewriting links between the sources.
fn link_targets(catalog: &Catalog) -> BTreeMap<String, String> {
    let mut targets: BTreeMap<String, String> = catalog
        .chapters()
        .iter()
        .map(|chapter| (chapter.guide().to_string(), chapter_file(chapter)))
        .collect();
    targets.insert(README.into(), "index.md".into());
    targets.insert(TUTOR_GUIDE.into(), "agent-guide.md".into());
    targets.insert(STYLE_GUIDE.into(), "glossary.md".into());
    targets
}

/// Every page of the book, in order: front page, chapters in course order, tutor guide,
/// glossary. Pure: `data` is the course data, `readme` the text of `README.md`.
pub fn pages(catalog: &Catalog, data: &FileSet, readme: &str) -> Result<Vec<Page>, Failure> {
    let targets = link_targets(catalog);
    let text = |path: &str| -> Result<String, Failure> {
        data.get(path)
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
            .ok_or_else(|| Failure(format!("课程书缺少来源文件 {path}")))
    };
    let mut pages = Vec::new();

    let mut front = rewrite_links(&chinese_part(readme), README, &targets);
    let heading = title_line(&front)
        .ok_or_else(|| Failure(format!("{README} 的中文部分没有 `# ` 标题行")))?
        .to_string();
    front.push_str(&book_contents(catalog));
    pages.push(Page {
        file: "index.md".into(),
        label: "课程首页".into(),
        heading,
        part: Part::Front,
        chapter: None,
        must_show: Vec::new(),
        markdown: front,
    });

    for chapter in catalog.chapters() {
        let guide_path = chapter.guide();
        let guide = rewrite_links(&text(guide_path.as_str())?, guide_path.as_str(), &targets);
        let messages = stub_messages(data, chapter)?;
        let card = manifest_card(catalog, chapter, &messages);
        let (heading, markdown) = open_with_card(&guide, &card)
            .ok_or_else(|| Failure(format!("{guide_path} 的第一行必须是 `# 第 NN 章　标题`")))?;
        let mut must_show = vec![CARD_HEADING.to_string()];
        must_show.extend(
            chapter
                .groups
                .iter()
                .map(|group| format!("cargo xtask test {} --group {}", chapter.id, group.name)),
        );
        pages.push(Page {
            file: chapter_file(chapter),
            label: format!("第 {} 章　{}", chapter.id, chapter.title),
            heading,
            part: Part::Chapters,
            chapter: Some(chapter.id),
            must_show,
            markdown,
        });
    }

    let tutor = rewrite_links(&text(TUTOR_GUIDE)?, TUTOR_GUIDE, &targets);
    let heading = title_line(&tutor)
        .ok_or_else(|| Failure(format!("{TUTOR_GUIDE} 没有 `# ` 标题行")))?
        .to_string();
    pages.push(Page {
        file: "agent-guide.md".into(),
        label: heading.clone(),
        heading,
        part: Part::Reference,
        chapter: None,
        must_show: Vec::new(),
        markdown: tutor,
    });

    let style = text(STYLE_GUIDE)?;
    let glossary = section(&style, GLOSSARY)
        .ok_or_else(|| Failure(format!("{STYLE_GUIDE} 没有 `## {GLOSSARY}` 一节")))?;
    let glossary = format!(
        "# {GLOSSARY}\n\n> 摘自课程写作规范 `{STYLE_GUIDE}`：全课程统一的说法。\n\n{}",
        rewrite_links(&glossary, STYLE_GUIDE, &targets)
    );
    pages.push(Page {
        file: "glossary.md".into(),
        label: GLOSSARY.into(),
        heading: GLOSSARY.into(),
        part: Part::Reference,
        chapter: None,
        must_show: Vec::new(),
        markdown: glossary,
    });
    Ok(pages)
}

/// The front page's list of chapters, from the manifest.
fn book_contents(catalog: &Catalog) -> String {
    let mut out = String::from("\n## 本书章节\n\n| 章 | 标题 | 模式 |\n| --- | --- | --- |\n");
    for chapter in catalog.chapters() {
        let _ = writeln!(
            out,
            "| {} | [{}]({}) | {} |",
            chapter.id,
            escape_link_text(&chapter.title),
            chapter_file(chapter),
            chapter.mode().label()
        );
    }
    out.push_str(
        "\n另有[辅导协议](agent-guide.md)（写给编码助手）和全课程统一说法的[术语表](glossary.md)。\n",
    );
    out
}

/// `SUMMARY.md`: the sidebar, in the order of `pages`.
pub fn summary(pages: &[Page]) -> String {
    let mut out = String::from("# Summary\n\n");
    let mut part: Option<Part> = None;
    for page in pages {
        let link = format!("[{}]({})", escape_link_text(&page.label), page.file);
        if page.part == Part::Front {
            let _ = writeln!(out, "{link}\n");
            continue;
        }
        if part != Some(page.part) {
            if part.is_some() {
                out.push('\n');
            }
            part = Some(page.part);
            if let Some(title) = page.part.title() {
                let _ = writeln!(out, "# {title}\n");
            }
        }
        let _ = writeln!(out, "- {link}");
    }
    out
}

fn escape_link_text(text: &str) -> String {
    escape_html(text).replace('[', "\\[").replace(']', "\\]")
}

/// A table cell: `|` would end it.
fn cell(text: &str) -> String {
    escape_html(text).replace('|', "\\|")
}

/// Manifest text as Markdown: `<`, `>` and `&` outside code spans are escaped, so a summary
/// such as `Arc<dyn Fn>` is shown as written instead of being taken for an HTML tag.
fn escape_html(text: &str) -> String {
    let escape = |plain: &str| {
        plain
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut at = 0;
    while let Some(found) = text[at..].find('`') {
        let tick = at + found;
        out.push_str(&escape(&text[copied..tick]));
        at = skip_code_span(text, tick);
        out.push_str(&text[tick..at]);
        copied = at;
    }
    out.push_str(&escape(&text[copied..]));
    out
}

/// Inline code whose fence is longer than any backtick run inside.
fn code(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    if longest == 0 {
        format!("{fence}{text}{fence}")
    } else {
        format!("{fence} {text} {fence}")
    }
}

/// The card that opens a chapter page, rendered from the manifest and the Lab regions'
/// stub messages (`first_reds`, from `course_cli::learning::stub_messages`): the same facts
/// as the practice workspace's `LEARNING.md`.
pub fn manifest_card(
    catalog: &Catalog,
    chapter: &Chapter,
    first_reds: &BTreeMap<LabId, Vec<String>>,
) -> String {
    let id = chapter.id;
    // The blank lines keep the Markdown inside the <div> Markdown; book.css styles the card.
    let mut out = format!("<div class=\"{CARD_CLASS}\">\n\n## {CARD_HEADING}\n\n");
    out.push_str(
        "> 这张卡片由课程清单 `chapters/course.toml` 和参考实现的 Lab 区域生成，\
         与练习工作区里的 `LEARNING.md` 出自同一份数据。\n\n",
    );
    let _ = writeln!(out, "- **模式：** {}", chapter.mode().label());
    match &chapter.kind {
        Kind::Observe { shows } => {
            let _ = writeln!(
                out,
                "- **内容：** 第 {shows} 章完成时的代码加上本章的演示；本章不需要重写任何文件"
            );
        }
        Kind::Rebuild { edit } => {
            match catalog.previous(chapter) {
                Some(previous) => {
                    let _ = writeln!(out, "- **起点：** 第 {} 章完成时的参考实现", previous.id);
                }
                None => out.push_str("- **起点：** 空的 pi-course crate\n"),
            }
            let files: Vec<String> = edit
                .iter()
                .map(|file| code(file.in_workspace().as_str()))
                .collect();
            let _ = writeln!(out, "- **要编辑的文件：** {}", files.join("、"));
        }
    }
    let _ = writeln!(
        out,
        "- **练习工作区：** `practice {id} <新目录>`，下面的命令都在新目录里运行\n"
    );
    let total: usize = chapter.groups.iter().map(|group| group.tests).sum();
    let rebuild = matches!(chapter.kind, Kind::Rebuild { .. });
    if rebuild {
        out.push_str("| Lab | 内容 | 命令 | 完成时 |\n| --- | --- | --- | --- |\n");
    } else {
        out.push_str("| 测试组 | 内容 | 命令 | 通过时 |\n| --- | --- | --- | --- |\n");
    }
    for group in &chapter.groups {
        let name = match group.lab {
            Some(lab) if rebuild => format!("Lab {lab}"),
            _ => code(&group.name),
        };
        let _ = writeln!(
            out,
            "| {name} | {} | `cargo xtask test {id} --group {}` | {n}/{n} |",
            cell(&group.summary),
            group.name,
            n = group.tests,
        );
    }
    let _ = writeln!(
        out,
        "| 整章 | 全部测试组 | `cargo xtask test {id}` | {total}/{total} |"
    );
    if rebuild {
        out.push_str(
            "\n**第一次红灯**（做到这个 Lab、之前的 Lab 都已完成时，命令首先报出的占位信息；\
             有几处占位时是其中之一）：\n\n",
        );
        for (lab, _) in chapter.labs() {
            let reds: Vec<String> = first_reds
                .get(&lab)
                .map(|list| list.iter().map(|m| code(m)).collect())
                .unwrap_or_default();
            let _ = writeln!(out, "- Lab {lab}：{}", reds.join(" 或 "));
        }
    }
    out.push_str("\n</div>\n");
    out
}

/// Lines of `markdown` with whether each is inside a fenced code block (fence lines count
/// as inside).
fn fenced_lines(markdown: &str) -> Vec<(&str, bool)> {
    let mut fence: Option<(char, usize)> = None;
    markdown
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            let indent = line.len() - trimmed.len();
            let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
            let run = marker.map_or(0, |c| trimmed.chars().take_while(|x| *x == c).count());
            match (fence, marker) {
                (None, Some(c)) if run >= 3 && indent <= 3 => {
                    fence = Some((c, run));
                    (line, true)
                }
                (Some((c, len)), Some(m))
                    if m == c && run >= len && trimmed[run..].trim().is_empty() =>
                {
                    fence = None;
                    (line, true)
                }
                (Some(_), _) => (line, true),
                (None, _) => (line, false),
            }
        })
        .collect()
}

/// The text of the first `# ` heading outside code, as a reader sees it.
fn title_line(markdown: &str) -> Option<String> {
    fenced_lines(markdown)
        .into_iter()
        .find(|(line, fenced)| !fenced && line.starts_with("# "))
        .map(|(line, _)| plain_heading(&line[2..]))
}

/// A heading's Markdown without the code and emphasis marks the page does not show.
fn plain_heading(markdown: &str) -> String {
    markdown.trim().replace(['`', '*'], "")
}

/// Inserts `card` right after the guide's title line; returns the title and the page.
fn open_with_card(guide: &str, card: &str) -> Option<(String, String)> {
    let body = guide.trim_start_matches(['\n', '\r']);
    let (first, rest) = body.split_once('\n').unwrap_or((body, ""));
    let heading = plain_heading(first.trim_end().strip_prefix("# ")?);
    let page = format!(
        "{}\n\n{card}\n{}",
        first.trim_end(),
        rest.trim_start_matches('\n')
    );
    Some((heading, page))
}

fn has_cjk(text: &str) -> bool {
    text.chars().any(|c| {
        matches!(c,
            '\u{3040}'..='\u{30ff}' | '\u{3400}'..='\u{4dbf}' | '\u{4e00}'..='\u{9fff}' | '\u{f900}'..='\u{faff}')
    })
}

/// The Chinese part of the README: everything before its first `## ` heading without a
/// Chinese character (`## Quick start (English)`).
pub fn chinese_part(readme: &str) -> String {
    let mut out = String::new();
    for (line, fenced) in fenced_lines(readme) {
        if !fenced && line.starts_with("## ") && !has_cjk(line) {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim_end().to_string() + "\n"
}

/// The body of the `## {title}` section, up to the next `## ` or `# ` heading.
fn section(markdown: &str, title: &str) -> Option<String> {
    let lines = fenced_lines(markdown);
    let start = lines
        .iter()
        .position(|(line, fenced)| !fenced && line.trim_end() == format!("## {title}"))?;
    let mut out = String::new();
    for (line, fenced) in &lines[start + 1..] {
        if !fenced && (line.starts_with("## ") || line.starts_with("# ")) {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    Some(out.trim().to_string() + "\n")
}

/// `dir` joined with the relative `path`, `.` and `..` resolved; `None` above the root.
fn normalize(dir: &str, path: &str) -> Option<String> {
    let mut parts: Vec<&str> = dir.split('/').filter(|part| !part.is_empty()).collect();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

fn is_external(link: &str) -> bool {
    link.contains("://")
        || link.starts_with("//")
        || ["mailto:", "data:", "javascript:", "tel:"]
            .iter()
            .any(|scheme| link.starts_with(scheme))
}

/// A link of `source` (a repository path) to another source that is in the book, pointed at
/// its page; other links unchanged (the link check then reports what leaves the book).
fn rewrite_destination(link: &str, source: &str, targets: &BTreeMap<String, String>) -> String {
    if link.is_empty() || link.starts_with('#') || is_external(link) {
        return link.to_string();
    }
    let (path, fragment) = match link.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (link, None),
    };
    let Some(target) = normalize(parent(source), path).and_then(|repo| targets.get(&repo)) else {
        return link.to_string();
    };
    match fragment {
        Some(fragment) => format!("{target}#{fragment}"),
        None => target.clone(),
    }
}

/// Rewrites the inline links and link definitions of `markdown`, outside code, so that links
/// between the book's sources point at the book's pages.
pub fn rewrite_links(markdown: &str, source: &str, targets: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(markdown.len());
    for (line, fenced) in fenced_lines(markdown) {
        if fenced {
            out.push_str(line);
        } else if let Some((label, link)) = link_definition(line) {
            let rest = &line[label.len() + link.len()..];
            out.push_str(label);
            out.push_str(&rewrite_destination(link, source, targets));
            out.push_str(rest);
        } else {
            rewrite_inline(line, source, targets, &mut out);
        }
        out.push('\n');
    }
    out
}

/// `[name]: destination …` → (`[name]: `, `destination`).
fn link_definition(line: &str) -> Option<(&str, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 || !line[indent..].starts_with('[') {
        return None;
    }
    let close = line.find("]:")?;
    let after = &line[close + 2..];
    let spaces = after.len() - after.trim_start().len();
    let link_start = close + 2 + spaces;
    let link_len = line[link_start..]
        .find(char::is_whitespace)
        .unwrap_or(line.len() - link_start);
    (link_len > 0).then(|| {
        (
            &line[..link_start],
            &line[link_start..link_start + link_len],
        )
    })
}

/// At the run of backticks that starts at byte `at` of `text`: where the code span it opens
/// ends (past the closing run of the same length), or just past the run when nothing closes it.
fn skip_code_span(text: &str, at: usize) -> usize {
    let bytes = text.as_bytes();
    let run = bytes[at..].iter().take_while(|b| **b == b'`').count();
    let mut search = at + run;
    while let Some(found) = text[search..].find('`') {
        let start = search + found;
        let len = bytes[start..].iter().take_while(|b| **b == b'`').count();
        if len == run {
            return start + run;
        }
        search = start + len;
    }
    at + run
}

fn rewrite_inline(line: &str, source: &str, targets: &BTreeMap<String, String>, out: &mut String) {
    let bytes = line.as_bytes();
    let mut at = 0;
    let mut copied = 0;
    while at < bytes.len() {
        if bytes[at] == b'`' {
            at = skip_code_span(line, at);
            continue;
        }
        if bytes[at..].starts_with(b"](") && bytes.get(at + 2) != Some(&b'<') {
            let start = at + 2;
            let len = line[start..]
                .find(|c: char| c == ')' || c.is_whitespace())
                .unwrap_or(line.len() - start);
            out.push_str(&line[copied..start]);
            out.push_str(&rewrite_destination(
                &line[start..start + len],
                source,
                targets,
            ));
            copied = start + len;
            at = copied;
            continue;
        }
        at += 1;
    }
    out.push_str(&line[copied..]);
}

/// A link or anchor of the built site that does not resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokenLink {
    pub page: String,
    pub link: String,
    pub reason: String,
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A CSS selector written in this crate; an invalid one is a bug.
pub fn selector(css: &str) -> Selector {
    Selector::parse(css).unwrap_or_else(|error| panic!("CSS selector `{css}`: {error}"))
}

/// A page of the built site as a browser without JavaScript reads it: with scripting off,
/// the content of `<noscript>` (mdBook's sidebar frame, `toc.html`) is markup, and its links
/// are checked too. (`Html::parse_document` parses with scripting on.)
fn parse_page(text: &str) -> Html {
    let options = html5ever::ParseOpts {
        tree_builder: html5ever::tree_builder::TreeBuilderOpts {
            scripting_enabled: false,
            ..Default::default()
        },
        ..Default::default()
    };
    html5ever::parse_document(HtmlTreeSink::new(Html::new_document()), options).one(text)
}

/// Resolves every internal `href` and `src` of every page of the site: the file must exist,
/// and a fragment must name an `id` (or `<a name>`) on the target page. `pages` maps a page's
/// path in the site to its HTML; `files` lists every file of the site. Returns the number of
/// internal links checked and the broken ones.
pub fn check_links(
    pages: &BTreeMap<String, String>,
    files: &BTreeSet<String>,
) -> (usize, Vec<BrokenLink>) {
    let parsed: BTreeMap<&str, Html> = pages
        .iter()
        .map(|(path, text)| (path.as_str(), parse_page(text)))
        .collect();
    let with_anchor = selector("[id], a[name]");
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
    let with_link = selector("[href], [src]");
    let mut checked = 0;
    let mut broken = Vec::new();
    for (page, document) in &parsed {
        for element in document.select(&with_link) {
            for name in ["href", "src"] {
                let Some(link) = element.value().attr(name) else {
                    continue;
                };
                if link.is_empty() || is_external(link) {
                    continue;
                }
                checked += 1;
                let (path, fragment) = match link.split_once('#') {
                    Some((path, fragment)) => (path, percent_decode(fragment)),
                    None => (link, String::new()),
                };
                let path = path.split('?').next().unwrap_or_default();
                let target = if path.is_empty() {
                    Some(page.to_string())
                } else if let Some(absolute) = path.strip_prefix('/') {
                    normalize("", &percent_decode(absolute))
                } else {
                    normalize(parent(page), &percent_decode(path))
                };
                let Some(mut target) = target else {
                    broken.push(BrokenLink {
                        page: page.to_string(),
                        link: link.to_string(),
                        reason: "指向书外".into(),
                    });
                    continue;
                };
                if (target.is_empty() || path.ends_with('/')) && !files.contains(&target) {
                    target = normalize(&target, "index.html").unwrap_or_default();
                }
                if !files.contains(&target) {
                    broken.push(BrokenLink {
                        page: page.to_string(),
                        link: link.to_string(),
                        reason: format!("{target} 不在书里"),
                    });
                    continue;
                }
                if fragment.is_empty() {
                    continue;
                }
                let found = anchors
                    .get(target.as_str())
                    .is_some_and(|ids| ids.contains(fragment.as_str()));
                if !found {
                    broken.push(BrokenLink {
                        page: page.to_string(),
                        link: link.to_string(),
                        reason: format!("{target} 上没有锚点 #{fragment}"),
                    });
                }
            }
        }
    }
    (checked, broken)
}

/// Why the pinned mdBook cannot be used, as one Chinese line with the install command.
pub fn mdbook_problem() -> Option<String> {
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
/// pinned mdBook (see [`mdbook_problem`]); takes no course lock, since it runs no snapshot.
pub fn build() -> Result<Built, Failure> {
    let started = Instant::now();
    let root = checkout::repo_root()?;
    let data = files::load_checkout(&root)
        .map_err(|error| Failure(format!("读取课程数据失败：{error}")))?;
    let catalog = Catalog::from_files(&data)?;
    let readme = std::fs::read_to_string(root.join(README))
        .map_err(|error| Failure(format!("读取 {README} 失败：{error}")))?;
    let pages = pages(&catalog, &data, &readme)?;

    let dir = root.join(BOOK_DIR);
    let src = dir.join("src");
    let html_dir = dir.join("html");
    for stale in [&src, &dir.join("theme"), &html_dir] {
        remove_dir(stale)?;
    }
    write(&dir.join("book.toml"), BOOK_TOML)?;
    write(&dir.join("theme").join("head.hbs"), HEAD_HBS)?;
    write(&dir.join("book.css"), BOOK_CSS)?;
    write(&src.join("cjk-search.js"), CJK_SEARCH_JS)?;
    write(&src.join("SUMMARY.md"), &summary(&pages))?;
    for page in &pages {
        write(&src.join(&page.file), &page.markdown)?;
    }

    let output = Command::new("mdbook")
        .arg("build")
        .arg(&dir)
        .env("NO_COLOR", "1")
        .output()
        .map_err(|error| Failure(format!("无法启动 mdbook：{error}")))?;
    let log = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    let mut problems: Vec<String> = log
        .lines()
        .filter(|line| !line.split_whitespace().any(|word| word == "INFO"))
        .filter(|line| !line.trim().is_empty())
        .map(|line| format!("mdbook：{}", line.trim()))
        .collect();
    if !output.status.success() {
        problems.push(format!("mdbook build 失败（{}）", output.status));
        return Ok(Built {
            html_dir,
            dir,
            pages,
            links: 0,
            problems,
            seconds: started.elapsed().as_secs_f64(),
        });
    }

    let mut site_pages = BTreeMap::new();
    let mut site_files = BTreeSet::new();
    for entry in walkdir::WalkDir::new(&html_dir) {
        let entry =
            entry.map_err(|error| Failure(format!("读取 {} 失败：{error}", html_dir.display())))?;
        if !entry.file_type().is_file() {
            continue;
        }
        let relative = entry
            .path()
            .strip_prefix(&html_dir)
            .expect("below the site")
            .components()
            .map(|part| part.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        if relative.ends_with(".html") {
            let text = std::fs::read_to_string(entry.path())
                .map_err(|error| Failure(format!("读取 {relative} 失败：{error}")))?;
            site_pages.insert(relative.clone(), text);
        }
        site_files.insert(relative);
    }
    for page in &pages {
        if !site_pages.contains_key(&page.html()) {
            problems.push(format!("mdbook 没有生成 {}", page.html()));
        }
    }
    let (links, broken) = check_links(&site_pages, &site_files);
    problems.extend(
        broken
            .iter()
            .map(|b| format!("{}：链接 `{}` 断了：{}", b.page, b.link, b.reason)),
    );
    Ok(Built {
        html_dir,
        dir,
        pages,
        links,
        problems,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Builds, reports, and says whether the book is good.
fn build_and_report() -> Result<Option<Built>, Failure> {
    let built = build()?;
    if !built.problems.is_empty() {
        println!("✗ 课程书有问题：");
        for problem in &built.problems {
            println!("  ✗ {problem}");
        }
        return Ok(None);
    }
    println!(
        "✓ 课程书：{} 页，{} 个站内链接与锚点全部可达，用时 {:.1}s",
        built.pages.len(),
        built.links,
        built.seconds
    );
    println!("  打开：{}", built.html_dir.join("index.html").display());
    Ok(Some(built))
}

/// `cargo xtask book [--check-browser]`.
pub fn run(check_browser: bool) -> Result<bool, Failure> {
    if let Some(problem) = mdbook_problem() {
        return Err(Failure(problem));
    }
    let Some(built) = build_and_report()? else {
        return Ok(false);
    };
    if !check_browser {
        return Ok(true);
    }
    let chromium = browser::find_chromium().ok_or_else(|| Failure(browser::missing_hint()))?;
    browser::check(&built, &chromium)
}

/// The book step of `cargo xtask ci`: builds and browser-checks the book when mdBook and
/// Chromium are present, and says plainly what it skipped when they are not.
pub fn ci_step() -> Result<bool, Failure> {
    if let Some(problem) = mdbook_problem() {
        println!("⚠ 已跳过课程书与浏览器检查：{problem}");
        return Ok(true);
    }
    let Some(built) = build_and_report()? else {
        return Ok(false);
    };
    match browser::find_chromium() {
        Some(chromium) => browser::check(&built, &chromium),
        None => {
            println!("⚠ 已跳过浏览器检查：{}", browser::missing_hint());
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use course_cli::paths::RepoPath;

    const MANIFEST: &str = r#"
format = 1

[[chapter]]
id = "00"
slug = "prologue"
title = "序章"
mode = "observe"
shows = "02"
files = ["src/lib.rs"]
groups = [{ group = "prologue", tests = 2, summary = "演示" }]

[[chapter]]
id = "02"
slug = "event-stream"
title = "事件流"
mode = "rebuild"
files = ["src/lib.rs", "src/event_stream.rs"]
edit = ["src/event_stream.rs"]
labs = [
    { group = "queue", tests = 4, summary = "排队 | 终态" },
    { group = "waiter", tests = 6, summary = "等待：Arc<dyn Fn> 与 `Vec<T>`" },
]
"#;

    fn course() -> (Catalog, FileSet) {
        let mut data = FileSet::new();
        let mut add = |path: &str, text: &str| {
            data.insert(RepoPath::new(path), text.as_bytes().to_vec());
        };
        add("chapters/course.toml", MANIFEST);
        add(
            "chapters/00-prologue/README.md",
            "# 第 00 章　序章\n\n见[第 02 章](../02-event-stream/README.md#小结)。\n",
        );
        add(
            "chapters/02-event-stream/README.md",
            "# 第 02 章　事件流\n\n## 重建卡片\n\n`[x](../STYLE.md)` 与 [术语](../STYLE.md#术语表)\n\n```\n[y](../STYLE.md)\n```\n",
        );
        add(
            "chapters/02-event-stream/src/event_stream.rs",
            "pub fn a() {\n    // region: Lab 2.1 queue\n    todo!()\n    // endregion\n}\npub fn b() {\n    // region: Lab 2.2 waiter\n    todo!()\n    // endregion\n}\n",
        );
        add(
            "chapters/_crate/AGENT_GUIDE.md",
            "# 辅导协议\n\n[回到首页](../../README.md)\n",
        );
        add(
            "chapters/STYLE.md",
            "# 规范\n\n## 术语表\n\n| 英文 | 写法 |\n| --- | --- |\n| invariant | 不变量 |\n\n## 标点与排版\n\n不进书。\n",
        );
        let catalog = Catalog::from_files(&data).expect("manifest parses");
        (catalog, data)
    }

    const README_TEXT: &str =
        "# pi-course（Rust 版）\n\n简介。\n\n## 快速开始（中文）\n\n```bash\n## not a heading\n```\n\n## Quick start (English)\n\nEnglish.\n";

    #[test]
    fn summary_lists_front_page_chapters_in_course_order_then_reference() {
        let (catalog, data) = course();
        let pages = pages(&catalog, &data, README_TEXT).expect("pages");
        let files: Vec<&str> = pages.iter().map(|p| p.file.as_str()).collect();
        assert_eq!(
            files,
            [
                "index.md",
                "00-prologue.md",
                "02-event-stream.md",
                "agent-guide.md",
                "glossary.md"
            ]
        );
        assert_eq!(
            summary(&pages),
            "# Summary\n\n[课程首页](index.md)\n\n# 章节\n\n\
             - [第 00 章　序章](00-prologue.md)\n- [第 02 章　事件流](02-event-stream.md)\n\n\
             # 参考\n\n- [辅导协议](agent-guide.md)\n- [术语表](glossary.md)\n"
        );
    }

    #[test]
    fn front_page_is_the_chinese_part_of_the_readme_plus_the_chapter_list() {
        let (catalog, data) = course();
        let pages = pages(&catalog, &data, README_TEXT).expect("pages");
        let front = &pages[0].markdown;
        assert!(front.starts_with("# pi-course（Rust 版）\n\n简介。\n\n## 快速开始（中文）"));
        assert!(
            front.contains("## not a heading"),
            "a fenced line is not a heading"
        );
        assert!(!front.contains("English."));
        assert!(front.contains("| 02 | [事件流](02-event-stream.md) | 重建 |"));
        assert_eq!(pages[0].heading, "pi-course（Rust 版）");
    }

    #[test]
    fn chapter_pages_open_with_the_manifest_card_and_links_point_at_pages() {
        let (catalog, data) = course();
        let pages = pages(&catalog, &data, README_TEXT).expect("pages");
        let chapter = &pages[2].markdown;
        assert!(chapter.starts_with(&format!(
            "# 第 02 章　事件流\n\n<div class=\"{CARD_CLASS}\">\n\n## {CARD_HEADING}\n"
        )));
        assert!(chapter.find(CARD_HEADING) < chapter.find("## 重建卡片"));
        assert!(chapter.contains("[术语](glossary.md#术语表)"));
        assert!(
            chapter.contains("`[x](../STYLE.md)`"),
            "code spans stay verbatim"
        );
        assert!(
            chapter.contains("\n[y](../STYLE.md)\n"),
            "code blocks stay verbatim"
        );
        assert!(pages[1]
            .markdown
            .contains("[第 02 章](02-event-stream.md#小结)"));
        assert!(pages[3].markdown.contains("[回到首页](index.md)"));
        assert_eq!(
            pages[4].markdown,
            "# 术语表\n\n> 摘自课程写作规范 `chapters/STYLE.md`：全课程统一的说法。\n\n\
             | 英文 | 写法 |\n| --- | --- |\n| invariant | 不变量 |\n"
        );
        assert!(pages[2]
            .must_show
            .contains(&"cargo xtask test 02 --group waiter".to_string()));
    }

    #[test]
    fn card_shows_mode_labs_commands_counts_and_first_reds() {
        let (catalog, data) = course();
        let chapter = catalog.resolve("02").expect("chapter 02");
        let reds = stub_messages(&data, chapter).expect("regions");
        let card = manifest_card(&catalog, chapter, &reds);
        assert!(card.contains("- **模式：** 重建\n"));
        assert!(card.contains("- **要编辑的文件：** `pi-course/src/event_stream.rs`\n"));
        assert!(card.contains(
            "| Lab 2.1 | 排队 \\| 终态 | `cargo xtask test 02 --group queue` | 4/4 |\n\
             | Lab 2.2 | 等待：Arc&lt;dyn Fn&gt; 与 `Vec<T>` | `cargo xtask test 02 --group waiter` | 6/6 |\n\
             | 整章 | 全部测试组 | `cargo xtask test 02` | 10/10 |\n"
        ));
        assert!(card.contains(
            "\n- Lab 2.1：`Lab 2.1 queue 尚未实现`\n- Lab 2.2：`Lab 2.2 waiter 尚未实现`\n"
        ));

        let observe = manifest_card(&catalog, catalog.resolve("00").expect("00"), &reds);
        assert!(observe.contains("- **模式：** 观察\n"));
        assert!(observe.contains("第 02 章完成时的代码"));
        assert!(observe
            .contains("| `prologue` | 演示 | `cargo xtask test 00 --group prologue` | 2/2 |"));
        assert!(!observe.contains("第一次红灯"));
    }

    fn site(
        pages: &[(&str, &str)],
        others: &[&str],
    ) -> (BTreeMap<String, String>, BTreeSet<String>) {
        let html: BTreeMap<String, String> = pages
            .iter()
            .map(|(path, text)| (path.to_string(), text.to_string()))
            .collect();
        let mut files: BTreeSet<String> = html.keys().cloned().collect();
        files.extend(others.iter().map(|f| f.to_string()));
        (html, files)
    }

    #[test]
    fn link_check_passes_good_links_and_finds_a_broken_anchor() {
        let (pages, files) = site(
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
        let (checked, broken) = check_links(&pages, &files);
        assert_eq!(checked, 8);
        let found: Vec<(&str, &str, &str)> = broken
            .iter()
            .map(|b| (b.page.as_str(), b.link.as_str(), b.reason.as_str()))
            .collect();
        assert_eq!(
            found,
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
    fn link_check_reads_pages_as_html_without_scripts() {
        let (pages, files) = site(
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
        let (checked, broken) = check_links(&pages, &files);
        assert_eq!(checked, 4, "script text and comments hold no links");
        let found: Vec<(&str, &str, &str)> = broken
            .iter()
            .map(|b| (b.page.as_str(), b.link.as_str(), b.reason.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                ("06.html", "#不算", "06.html 上没有锚点 #不算"),
                ("index.html", "toc.html", "toc.html 不在书里"),
            ]
        );
    }

    #[test]
    fn ci_installs_the_pinned_mdbook() {
        let run = include_str!("../../.ci/run");
        assert!(
            run.contains(&format!("MDBOOK_VERSION={MDBOOK_VERSION}")),
            ".ci/run must install mdBook {MDBOOK_VERSION}, the version the book is built with"
        );
    }
}
