//! The course book as a learner meets it, in Debian's headless Chromium (`crate::browser`),
//! from `file://` URLs (mdBook loads its search index with a `<script>` tag, which works
//! without a server), in a window 1280 CSS pixels wide.
//!
//! Checked on every page: the sidebar (built by mdBook's `toc.js`) lists every page of the
//! book in order and marks the page itself; the page shows its heading and what it must show
//! (and not what it must not: the front page has the learner's path, no instructor command);
//! Rust code blocks are highlighted; a chapter page has exactly one card, its guide's own, and
//! opens with it; no table hides its first two columns and none widens the page; every
//! box-drawing diagram lines up, wide characters at exactly two columns. The search box,
//! opened by the URL query `?search=`, finds a Chinese term of chapter 06, nothing for an
//! absent one, and says so in Chinese. Screenshots of the front page and chapter 06 are saved
//! under `target/book/screenshots/`.
//!
//! Layout is measured by `book/layout-probe.js`, run in a copy of the site (the real one is
//! never changed) at the end of each page; its report travels in the dumped DOM.

use std::path::Path;
use std::time::Instant;

use scraper::{ElementRef, Html};
use serde::Deserialize;

use super::build::Built;
use super::markdown::has_cjk;
use super::pages::{Page, CARD_CLASS};
use crate::browser::{self, Chromium, Window};
use crate::checkout::Failure;
use crate::html::{self, selector};
use crate::out;

/// The chapter whose page is searched from and photographed.
const SEARCH_CHAPTER: &str = "06";
/// A Chinese term of that chapter (the glossary's 不变量).
const SEARCH_TERM: &str = "不变量";
/// A term no page contains: the search must not simply list everything.
const ABSENT_TERM: &str = "龘靐齉";
/// The search box's placeholder, as `book/zh-search-ui.js` writes it.
const SEARCH_PLACEHOLDER: &str = "搜索本书……";
/// The window every page is opened in: the width the tables must fit.
const WINDOW: Window = Window {
    width: 1280,
    height: 900,
};
/// How much of a page the screenshots show.
const SCREENSHOT_HEIGHT: u32 = 1800;
const LAYOUT_PROBE: &str = include_str!("../../book/layout-probe.js");
/// The fonts the book's code font stack counts on (`book/book.css`): half-width ASCII and
/// full-width CJK from the first, box drawing and arrows from the second.
const CJK_MONO_FONT: &str = "Noto Sans Mono CJK SC";
const NARROW_SYMBOLS_FONT: &str = "DejaVu Sans Mono";

/// What `layout-probe.js` measured on one page.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Layout {
    window: f64,
    page: f64,
    cjk_mono_font: bool,
    diagrams: Vec<Diagram>,
    tables: Vec<Table>,
}

#[derive(Debug, Deserialize)]
struct Diagram {
    font: String,
    /// The width of one column: one ASCII character.
    unit: f64,
    lines: Vec<DiagramLine>,
}

#[derive(Debug, Deserialize)]
struct DiagramLine {
    text: String,
    /// Terminal columns: wide characters count two.
    columns: f64,
    width: f64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Table {
    header: String,
    box_right: f64,
    box_width: f64,
    table_width: f64,
    box_scrolls: bool,
    /// Header cells of the columns that do not fit in the box.
    hidden_columns: Vec<String>,
    /// Cells of the first two columns that are off screen or covered.
    hidden_key_cells: Vec<String>,
}

/// How far a diagram line may be from its columns: a fifth of a column.
const ALIGNMENT_TOLERANCE: f64 = 0.2;

/// The pages the sidebar links to, in order (links within a page left out), with whether
/// each is marked as the current page.
fn sidebar_links(dom: &Html) -> Vec<(String, bool)> {
    let Some(sidebar) = dom.select(&selector("mdbook-sidebar-scrollbox")).next() else {
        return Vec::new();
    };
    sidebar
        .select(&selector("a[href]"))
        .filter_map(|link| {
            let href = link.value().attr("href")?;
            let page = href.split(['#', '?']).next().unwrap_or_default();
            let active = link.value().classes().any(|class| class == "active");
            (!page.is_empty()).then(|| (page.to_string(), active))
        })
        .collect()
}

/// The page content: `<main>`.
fn content(dom: &Html) -> Option<ElementRef<'_>> {
    dom.select(&selector("main")).next()
}

/// The text of the first `<h1>` in the page content.
fn first_heading(dom: &Html) -> Option<String> {
    content(dom)?.select(&selector("h1")).next().map(html::text)
}

/// Rust code blocks of the page: (all, highlighted by highlight.js).
fn rust_blocks(dom: &Html) -> (usize, usize) {
    (
        dom.select(&selector("code.language-rust")).count(),
        dom.select(&selector("code.language-rust.hljs")).count(),
    )
}

/// Whether highlight.js marked up tokens (it wraps keywords in `hljs-keyword` spans).
fn has_highlighted_tokens(dom: &Html) -> bool {
    dom.select(&selector("span.hljs-keyword")).next().is_some()
}

/// The search results header and the result links, once the searcher has run.
fn search_results(dom: &Html) -> Option<(String, Vec<String>)> {
    let header = dom
        .select(&selector("#mdbook-searchresults-header"))
        .next()?;
    let links = dom
        .select(&selector(r#"a[aria-details^="mdbook-teaser"][href]"#))
        .filter_map(|link| link.value().attr("href").map(str::to_string))
        .collect();
    Some((html::text(header), links))
}

fn search_placeholder(dom: &Html) -> Option<String> {
    dom.select(&selector("#mdbook-searchbar"))
        .next()?
        .value()
        .attr("placeholder")
        .map(str::to_string)
}

/// The header the search shows for `term` with `count` results (`book/zh-search-ui.js`).
fn search_header(term: &str, count: usize) -> String {
    if count == 0 {
        format!("没有找到包含“{term}”的内容。")
    } else {
        format!("找到 {count} 条包含“{term}”的结果：")
    }
}

fn layout(dom: &Html) -> Result<Layout, String> {
    let probe = dom
        .select(&selector("#layout-probe"))
        .next()
        .ok_or("没有布局测量结果（layout-probe.js 没有运行完）")?;
    serde_json::from_str(&probe.text().collect::<String>())
        .map_err(|error| format!("读不懂布局测量结果：{error}"))
}

/// What is wrong with a chapter page's card: exactly one card box, the guide's own card
/// inside, and no other card heading on the page; the card is the page's first section.
fn card_problems(dom: &Html, heading: &str) -> Vec<String> {
    let Some(main) = content(dom) else {
        return vec!["页面没有 <main>".into()];
    };
    let mut problems = Vec::new();
    let boxes: Vec<ElementRef> = main
        .select(&selector(&format!("div.{CARD_CLASS}")))
        .collect();
    if boxes.len() != 1 {
        problems.push(format!("应有 1 张卡片，实际有 {} 张", boxes.len()));
    }
    let sections: Vec<(String, bool)> = main
        .select(&selector("h2"))
        .map(|h2| {
            let boxed = h2
                .ancestors()
                .filter_map(ElementRef::wrap)
                .any(|parent| parent.value().classes().any(|class| class == CARD_CLASS));
            (html::text(h2), boxed)
        })
        .collect();
    let cards: Vec<&String> = sections
        .iter()
        .filter(|(text, _)| text.ends_with("卡片"))
        .map(|(text, _)| text)
        .collect();
    if cards != [heading] {
        problems.push(format!(
            "卡片标题应只有“{heading}”一个，实际是 [{}]",
            cards
                .iter()
                .map(|text| text.as_str())
                .collect::<Vec<_>>()
                .join("、")
        ));
    }
    if sections.first() != Some(&(heading.to_string(), true)) {
        problems.push(format!("页面的第一节应是框里的“{heading}”"));
    }
    problems
}

/// What is wrong with the layout at the window's width.
fn layout_problems(layout: &Layout) -> Vec<String> {
    let mut problems = Vec::new();
    if layout.page > layout.window + 1.0 {
        problems.push(format!(
            "页面宽 {:.0} px，超过 {:.0} px 的窗口，整页会横向滚动",
            layout.page, layout.window
        ));
    }
    for table in &layout.tables {
        let name = format!("表格“{}”", shorten(&table.header, 40));
        if !table.hidden_columns.is_empty() {
            problems.push(format!(
                "{name}比它的框宽（{:.0} > {:.0} px），{} 列要横向滚动才看得见：{}",
                table.table_width,
                table.box_width,
                table.hidden_columns.len(),
                table
                    .hidden_columns
                    .iter()
                    .map(|column| format!("“{}”", shorten(column, 12)))
                    .collect::<Vec<_>>()
                    .join("、")
            ));
        }
        if !table.hidden_key_cells.is_empty() {
            problems.push(format!(
                "{name}的前两列有 {} 个单元格看不见，例如“{}”",
                table.hidden_key_cells.len(),
                shorten(&table.hidden_key_cells[0], 20)
            ));
        }
        if table.box_right > layout.window + 1.0 {
            problems.push(format!(
                "{name}的框伸到了窗口外（右边缘 {:.0} px）",
                table.box_right
            ));
        }
        if table.table_width > table.box_width + 1.0 && !table.box_scrolls {
            problems.push(format!(
                "{name}比它的框宽（{:.0} > {:.0} px），框却不能横向滚动",
                table.table_width, table.box_width
            ));
        }
    }
    for diagram in &layout.diagrams {
        let ragged: Vec<&DiagramLine> = diagram
            .lines
            .iter()
            .filter(|line| {
                (line.width - line.columns * diagram.unit).abs()
                    > ALIGNMENT_TOLERANCE * diagram.unit
            })
            .collect();
        let Some(first) = ragged.first() else {
            continue;
        };
        let mut problem = format!(
            "字符画“{}”有 {} 行没有对齐：例如“{}”应占 {} 列 = {:.1} px，实际 {:.1} px（字体 {}）",
            shorten(diagram.lines[0].text.trim(), 24),
            ragged.len(),
            shorten(first.text.trim(), 24),
            first.columns,
            first.columns * diagram.unit,
            first.width,
            diagram.font
        );
        if layout.cjk_mono_font {
            problem.push_str(&format!(
                "；框线与箭头要用 {NARROW_SYMBOLS_FONT}（fonts-dejavu-core）"
            ));
        } else {
            problem.push_str(&format!(
                "；没有找到字体 {CJK_MONO_FONT}，请安装 fonts-noto-cjk"
            ));
        }
        problems.push(problem);
    }
    problems
}

fn shorten(text: &str, chars: usize) -> String {
    let mut short: String = text.chars().take(chars).collect();
    if text.chars().count() > chars {
        short.push('…');
    }
    short
}

/// Tallies and prints the checks.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
}

impl Tally {
    fn record(&mut self, problems: Vec<String>, ok_line: String) {
        if problems.is_empty() {
            self.passed += 1;
            out::say(format!("  ✓ {ok_line}"));
        } else {
            self.failed += 1;
            for problem in problems {
                out::say(format!("  ✗ {problem}"));
            }
        }
    }
}

/// What one page must show in the browser. `page` is `None` for mdBook's own pages.
fn check_page(
    dom: &Html,
    page: Option<&Page>,
    html_name: &str,
    expected: &[String],
) -> Vec<String> {
    let mut problems = Vec::new();
    let links = sidebar_links(dom);
    let sidebar: Vec<String> = links.iter().map(|(href, _)| href.clone()).collect();
    if sidebar != expected {
        problems.push(format!(
            "侧栏是 [{}]，应按课程顺序列出 [{}]",
            sidebar.join(", "),
            expected.join(", ")
        ));
    }
    let Some(page) = page else {
        return problems;
    };
    let active: Vec<&str> = links
        .iter()
        .filter(|(_, active)| *active)
        .map(|(href, _)| href.as_str())
        .collect();
    if active != [html_name] {
        problems.push(format!(
            "侧栏标为当前页的是 [{}]，应是它自己",
            active.join(", ")
        ));
    }
    match first_heading(dom) {
        Some(heading) if heading == page.heading => {}
        other => problems.push(format!(
            "第一个标题是 {:?}，应是 {:?}",
            other.unwrap_or_default(),
            page.heading
        )),
    }
    let text: String = content(dom)
        .map(|main| main.text().collect())
        .unwrap_or_default();
    for wanted in &page.must_show {
        if !text.contains(wanted.as_str()) {
            problems.push(format!("页面上没有“{wanted}”"));
        }
    }
    for unwanted in &page.must_not_show {
        if text.contains(unwanted.as_str()) {
            problems.push(format!("页面上不该有“{unwanted}”"));
        }
    }
    if let Some(card) = page.card {
        problems.extend(card_problems(dom, card));
    }
    problems
}

/// A copy of the site under `copy`, with the layout probe at the end of every page.
fn probe_copy(site: &Path, copy: &Path) -> Result<(), Failure> {
    let _ = std::fs::remove_dir_all(copy);
    let script = format!("<script>\n{LAYOUT_PROBE}</script>\n");
    for entry in walkdir::WalkDir::new(site) {
        let entry =
            entry.map_err(|error| Failure(format!("读取 {} 失败：{error}", site.display())))?;
        let Ok(relative) = entry.path().strip_prefix(site) else {
            continue;
        };
        let target = copy.join(relative);
        let failed =
            |error: std::io::Error| Failure(format!("复制到 {} 失败：{error}", target.display()));
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&target).map_err(failed)?;
            continue;
        }
        let mut bytes = std::fs::read(entry.path()).map_err(failed)?;
        if relative.extension().is_some_and(|ext| ext == "html") {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let at = text.rfind("</body>").unwrap_or(text.len());
            bytes = format!("{}{script}{}", &text[..at], &text[at..]).into_bytes();
        }
        std::fs::write(&target, bytes).map_err(failed)?;
    }
    Ok(())
}

/// Opens the built book in headless Chromium and checks it; prints one line per check.
pub fn check(built: &Built, chromium: &Path) -> Result<bool, Failure> {
    let started = Instant::now();
    let browser = Chromium::new(chromium, &built.dir.join("browser"), WINDOW)?;
    let tally = run_checks(built, &browser)?;
    out::say(format!(
        "浏览器检查：{} 项通过，{} 项失败，用时 {:.1}s（DOM 与日志在 {}）",
        tally.passed,
        tally.failed,
        started.elapsed().as_secs_f64(),
        browser.logs().display()
    ));
    Ok(tally.failed == 0)
}

fn run_checks(built: &Built, browser: &Chromium) -> Result<Tally, Failure> {
    out::say(format!(
        "== 浏览器检查：{}，headless，窗口宽 {} px",
        browser.version(),
        WINDOW.width
    ));
    let probed = built.dir.join("browser").join("site");
    probe_copy(&built.html_dir, &probed)?;
    let mut tally = Tally::default();
    let expected: Vec<String> = built.pages.iter().map(Page::html).collect();
    let url = |name: &str| browser::file_url(&probed.join(name));

    let mut visits: Vec<(String, Option<&Page>)> = built
        .pages
        .iter()
        .map(|page| (page.html(), Some(page)))
        .collect();
    visits.push(("print.html".to_string(), None));
    let mut rust_total = 0;
    let mut rust_highlighted = 0;
    for (name, page) in &visits {
        let dom = html::parse(&browser.dom(&url(name), name)?);
        let mut problems = check_page(&dom, *page, name, &expected);
        let (total, highlighted) = rust_blocks(&dom);
        if highlighted != total {
            problems.push(format!(
                "{total} 个 Rust 代码块中只有 {highlighted} 个被高亮"
            ));
        }
        if page.is_some() {
            rust_total += total;
            rust_highlighted += highlighted;
        }
        let is_search_chapter = page.and_then(|p| p.chapter).map(|id| id.to_string())
            == Some(SEARCH_CHAPTER.to_string());
        if is_search_chapter && (total == 0 || !has_highlighted_tokens(&dom)) {
            problems.push("没有高亮的 Rust 代码块".into());
        }
        let mut measured = String::new();
        match layout(&dom) {
            Ok(layout) => {
                problems.extend(layout_problems(&layout));
                measured = format!(
                    "，{} 个表格不藏列，{} 幅字符画对齐",
                    layout.tables.len(),
                    layout.diagrams.len()
                );
            }
            Err(problem) => problems.push(problem),
        }
        let problems = problems
            .into_iter()
            .map(|problem| format!("{name}：{problem}"))
            .collect();
        let what = match page {
            Some(page) if page.card.is_some() => "侧栏按课程顺序、标题与内容都在、一张卡片",
            Some(_) => "侧栏按课程顺序、标题与内容都在",
            None => "侧栏按课程顺序",
        };
        tally.record(
            problems,
            format!("{name}：{what}{measured}，Rust 代码块 {highlighted}/{total} 已高亮"),
        );
    }
    if rust_total == 0 {
        tally.record(vec!["全书没有一个 Rust 代码块".into()], String::new());
    } else {
        out::say(format!(
            "  （全书 Rust 代码块 {rust_highlighted}/{rust_total} 已高亮）"
        ));
    }

    let chapter_page = built
        .pages
        .iter()
        .find(|page| page.chapter.map(|id| id.to_string()).as_deref() == Some(SEARCH_CHAPTER))
        .ok_or_else(|| Failure(format!("书里没有第 {SEARCH_CHAPTER} 章")))?;
    if !chapter_page.markdown.contains(SEARCH_TERM) {
        return Err(Failure(format!(
            "第 {SEARCH_CHAPTER} 章不再包含“{SEARCH_TERM}”：请在 xtask/src/book/in_browser.rs 里换一个本章的中文词"
        )));
    }
    if built
        .pages
        .iter()
        .any(|page| page.markdown.contains(ABSENT_TERM))
    {
        return Err(Failure(format!(
            "书里出现了“{ABSENT_TERM}”：请在 xtask/src/book/in_browser.rs 里换一个不存在的词"
        )));
    }
    let chapter_html = chapter_page.html();
    for (term, name) in [
        (SEARCH_TERM, "search-found"),
        (ABSENT_TERM, "search-absent"),
    ] {
        let query = format!(
            "{}?search={}",
            url("index.html"),
            browser::query_value(term)
        );
        let dom = html::parse(&browser.dom(&query, name)?);
        let (problems, ok_line) = search_problems(&dom, term, &chapter_html);
        tally.record(problems, ok_line);
    }

    let shots = built.dir.join("screenshots");
    std::fs::create_dir_all(&shots)
        .map_err(|error| Failure(format!("创建 {} 失败：{error}", shots.display())))?;
    for name in ["index.html", chapter_html.as_str()] {
        let png = shots.join(name.replace(".html", ".png"));
        let real = browser::file_url(&built.html_dir.join(name));
        match browser.screenshot(&real, SCREENSHOT_HEIGHT, &png) {
            Ok(()) => tally.record(Vec::new(), format!("截图：{}", png.display())),
            Err(error) => tally.record(vec![error.0], String::new()),
        }
    }
    Ok(tally)
}

/// The search for `term`, opened as `dom`: results where they should be, header and box in
/// Chinese. Returns the problems and the line to print when there are none.
fn search_problems(dom: &Html, term: &str, chapter_html: &str) -> (Vec<String>, String) {
    let Some((header, links)) = search_results(dom) else {
        return (
            vec![format!("搜索“{term}”：页面上没有搜索结果区")],
            String::new(),
        );
    };
    let mut problems = Vec::new();
    let in_chapter = links
        .iter()
        .filter(|link| link.split(['?', '#']).next() == Some(chapter_html))
        .count();
    if term == ABSENT_TERM && !links.is_empty() {
        problems.push(format!("搜索不存在的“{term}”却有 {} 条结果", links.len()));
    }
    if term != ABSENT_TERM && in_chapter == 0 {
        problems.push(format!(
            "搜索“{term}”没有找到 {chapter_html}（{header}，结果：{}）",
            links.join(", ")
        ));
    }
    let wanted = search_header(term, links.len());
    if header != wanted {
        problems.push(format!("搜索结果的标题是“{header}”，应是“{wanted}”"));
    }
    let placeholder = search_placeholder(dom).unwrap_or_default();
    if placeholder != SEARCH_PLACEHOLDER || !has_cjk(&placeholder) {
        problems.push(format!(
            "搜索框的提示是“{placeholder}”，应是“{SEARCH_PLACEHOLDER}”"
        ));
    }
    let ok_line = format!("搜索“{term}”：{header}（{in_chapter} 条在 {chapter_html}）");
    (problems, ok_line)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOM: &str = r##"<html><body><nav><mdbook-sidebar-scrollbox class="sidebar-scrollbox"><ol class="chapter">
<li class="chapter-item"><a href="index.html" tabindex="0">课程首页</a></li>
<li class="part-title">章节</li>
<li class="chapter-item"><a href="06-tool-contract.html" class="active">第 06 章</a>
<div class="on-this-page"><ol class="section"><li><a href="#重建卡片" class="header-in-summary">重建卡片</a></li></ol></div></li>
<li class="chapter-item"><a href="glossary.html">术语表</a></li></ol></mdbook-sidebar-scrollbox></nav>
<input type="search" id="mdbook-searchbar" placeholder="搜索本书……">
<div id="mdbook-searchresults-header" class="searchresults-header">找到 2 条包含“不变量”的结果：</div>
<ul id="mdbook-searchresults"><li><a href="06-tool-contract.html?highlight=%E4%B8%8D#你将得到什么" aria-details="mdbook-teaser_1">第 06 章 » 你将得到什么</a></li>
<li><a href="glossary.html?highlight=%E4%B8%8D#术语表" aria-details="mdbook-teaser_2">术语表</a></li></ul>
<main><h1 id="x"><a class="header" href="#x">第 06 章　Tool &amp; 环境</a></h1>
<div class="chapter-card"><h2 id="重建卡片">重建卡片</h2><ul><li><code>cargo xtask test 06 --group validator</code></li></ul></div>
<h2 id="全景">全景</h2>
<pre><code class="language-rust hljs"><span class="hljs-keyword">fn</span> main() {}</code></pre>
<pre><code class="language-rust">fn plain() {}</code></pre><code class="hljs">inline</code></main>
<pre hidden id="layout-probe">{"window":1280,"page":1280,"cjkMonoFont":true,"diagrams":[{"font":"pi","unit":7,
"lines":[{"text":"a ─ b","columns":5,"width":35},{"text":"中 │","columns":4,"width":35}]}],
"tables":[{"header":"Lab | 内容","boxRight":1300,"boxWidth":700,"tableWidth":900,
"boxScrolls":false,"hiddenColumns":["命令"],"hiddenKeyCells":["Lab 6.1"]}]}</pre></body></html>"##;

    fn dom() -> Html {
        html::parse(DOM)
    }

    #[test]
    fn reads_the_sidebar_pages_in_order_and_the_active_one() {
        let links = sidebar_links(&dom());
        let pages: Vec<&str> = links.iter().map(|(href, _)| href.as_str()).collect();
        assert_eq!(
            pages,
            ["index.html", "06-tool-contract.html", "glossary.html"]
        );
        let active: Vec<&str> = links
            .iter()
            .filter(|(_, active)| *active)
            .map(|(href, _)| href.as_str())
            .collect();
        assert_eq!(active, ["06-tool-contract.html"]);
    }

    #[test]
    fn reads_heading_code_blocks_and_the_chinese_search() {
        let dom = dom();
        assert_eq!(
            first_heading(&dom).as_deref(),
            Some("第 06 章　Tool & 环境")
        );
        assert_eq!(rust_blocks(&dom), (2, 1));
        assert!(has_highlighted_tokens(&dom));
        let (header, links) = search_results(&dom).expect("results area");
        assert_eq!(header, search_header("不变量", 2));
        assert_eq!(links.len(), 2);
        assert!(links[0].starts_with("06-tool-contract.html?"));
        assert_eq!(
            search_placeholder(&dom).as_deref(),
            Some(SEARCH_PLACEHOLDER)
        );
        assert_eq!(search_header("龘", 0), "没有找到包含“龘”的内容。");
        assert_eq!(
            search_problems(&dom, "不变量", "06-tool-contract.html").0,
            Vec::<String>::new()
        );
        let english = DOM.replace(
            "找到 2 条包含“不变量”的结果：",
            "2 search results for '不变量':",
        );
        assert_eq!(
            search_problems(&html::parse(&english), "不变量", "06-tool-contract.html").0,
            ["搜索结果的标题是“2 search results for '不变量':”，应是“找到 2 条包含“不变量”的结果：”"]
        );
    }

    #[test]
    fn one_boxed_card_that_opens_the_page_passes_and_anything_else_is_named() {
        assert_eq!(card_problems(&dom(), "重建卡片"), Vec::<String>::new());
        let two = DOM.replace(
            "<h2 id=\"全景\">全景</h2>",
            "<div class=\"chapter-card\"><h2>练习卡片</h2></div>",
        );
        assert_eq!(
            card_problems(&html::parse(&two), "重建卡片"),
            [
                "应有 1 张卡片，实际有 2 张",
                "卡片标题应只有“重建卡片”一个，实际是 [重建卡片、练习卡片]"
            ]
        );
        let unboxed = DOM.replace("<div class=\"chapter-card\">", "<div>");
        assert_eq!(
            card_problems(&html::parse(&unboxed), "重建卡片"),
            [
                "应有 1 张卡片，实际有 0 张",
                "页面的第一节应是框里的“重建卡片”"
            ]
        );
    }

    #[test]
    fn hidden_key_columns_unscrollable_tables_and_ragged_diagrams_are_named() {
        let measured = layout(&dom()).expect("the probe's report");
        assert_eq!(
            layout_problems(&measured),
            [
                "表格“Lab | 内容”比它的框宽（900 > 700 px），1 列要横向滚动才看得见：“命令”",
                "表格“Lab | 内容”的前两列有 1 个单元格看不见，例如“Lab 6.1”",
                "表格“Lab | 内容”的框伸到了窗口外（右边缘 1300 px）",
                "表格“Lab | 内容”比它的框宽（900 > 700 px），框却不能横向滚动",
                "字符画“a ─ b”有 1 行没有对齐：例如“中 │”应占 4 列 = 28.0 px，实际 35.0 px（字体 pi）；\
                 框线与箭头要用 DejaVu Sans Mono（fonts-dejavu-core）",
            ]
        );
        let good = Layout {
            window: 1280.0,
            page: 1280.0,
            cjk_mono_font: false,
            diagrams: vec![Diagram {
                font: "pi".into(),
                unit: 7.0,
                lines: vec![DiagramLine {
                    text: "中 │".into(),
                    columns: 4.0,
                    width: 28.5,
                }],
            }],
            tables: Vec::new(),
        };
        assert_eq!(layout_problems(&good), Vec::<String>::new());
        let missing = html::parse("<main></main>");
        assert_eq!(
            layout(&missing).expect_err("no report"),
            "没有布局测量结果（layout-probe.js 没有运行完）"
        );
    }
}
