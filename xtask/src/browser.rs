//! The course book in a real browser: Debian's headless Chromium, driven by its own command
//! line (`--dump-dom` prints the DOM after the page's scripts ran, `--screenshot` saves a PNG),
//! so no driver or extra dependency is needed. The site is opened from `file://` URLs: mdBook
//! loads its search index with a `<script>` tag, which works without a server.
//!
//! Checked: every page opens, its sidebar (built by mdBook's `toc.js`) lists every page of the
//! book in order and marks the page itself; the page shows its heading (and, for a chapter,
//! the manifest card's commands); Rust code blocks are highlighted; the search box, opened by
//! the URL query `?search=`, finds a Chinese term of chapter 06 and nothing for an absent one.
//! A screenshot of chapter 06 is saved under `target/book/screenshots/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use scraper::Html;

use crate::book::{selector, Built, Page};
use crate::checkout::Failure;

/// The chapter whose page is searched from and photographed.
pub const SEARCH_CHAPTER: &str = "06";
/// A Chinese term of that chapter (the glossary's 不变量).
pub const SEARCH_TERM: &str = "不变量";
/// A term no page contains: the search must not simply list everything.
const ABSENT_TERM: &str = "龘靐齉";
/// Virtual time each page gets to run its scripts before the DOM is read.
const VIRTUAL_TIME_MS: u32 = 5000;
/// Wall-clock limit of one Chromium run.
const TIMEOUT: Duration = Duration::from_secs(120);
const WINDOW: &str = "1280,1800";

/// Debian's Chromium on `PATH`.
pub fn find_chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromium"))
        .find(|candidate| candidate.is_file())
}

pub fn missing_hint() -> String {
    "未找到 chromium：在 Debian 上运行 `apt-get install -y chromium fonts-noto-cjk` 安装".into()
}

/// `file://` URL of an absolute path, percent-encoded.
pub fn file_url(path: &Path) -> String {
    format!("file://{}", percent_encode(&path.to_string_lossy(), true))
}

fn percent_encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric()
            || matches!(byte, b'-' | b'.' | b'_' | b'~')
            || (keep_slash && byte == b'/')
        {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The pages the sidebar links to, in order (links within a page left out), with whether
/// each is marked as the current page.
pub fn sidebar_links(dom: &Html) -> Vec<(String, bool)> {
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

/// The visible text of an element, trimmed.
fn text(element: scraper::ElementRef) -> String {
    element.text().collect::<String>().trim().to_string()
}

/// The text of the first `<h1>` in the page content.
pub fn first_heading(dom: &Html) -> Option<String> {
    let h1 = selector("h1");
    let heading = match dom.select(&selector("main")).next() {
        Some(main) => main.select(&h1).next(),
        None => dom.select(&h1).next(),
    }?;
    Some(text(heading))
}

/// Rust code blocks of the page: (all, highlighted by highlight.js).
pub fn rust_blocks(dom: &Html) -> (usize, usize) {
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
pub fn search_results(dom: &Html) -> Option<(String, Vec<String>)> {
    let header = dom
        .select(&selector("#mdbook-searchresults-header"))
        .next()?;
    let links = dom
        .select(&selector(r#"a[aria-details^="mdbook-teaser"][href]"#))
        .filter_map(|link| link.value().attr("href").map(str::to_string))
        .collect();
    Some((text(header), links))
}

/// One headless Chromium, run once per page.
struct Chromium {
    binary: PathBuf,
    profile: PathBuf,
    /// Where DOM dumps and Chromium's own logs go, for reading after a failure.
    logs: PathBuf,
}

impl Chromium {
    fn version(&self) -> String {
        Command::new(&self.binary)
            .arg("--version")
            .stderr(Stdio::null())
            .output()
            .ok()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .filter(|version| !version.is_empty())
            .unwrap_or_else(|| "Chromium（版本未知）".into())
    }

    /// Runs Chromium headless on `url` with `extra` switches; stdout goes to `name.out`.
    fn run(&self, url: &str, extra: &[String], name: &str) -> Result<PathBuf, Failure> {
        let out_path = self.logs.join(format!("{name}.out"));
        let err_path = self.logs.join(format!("{name}.log"));
        let create = |path: &Path| {
            std::fs::File::create(path)
                .map_err(|error| Failure(format!("创建 {} 失败：{error}", path.display())))
        };
        let mut command = Command::new(&self.binary);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--mute-audio",
            ])
            .arg(format!("--user-data-dir={}", self.profile.display()))
            .arg(format!("--virtual-time-budget={VIRTUAL_TIME_MS}"))
            .args(extra)
            .arg(url)
            .stdin(Stdio::null())
            .stdout(create(&out_path)?)
            .stderr(create(&err_path)?);
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command
            .spawn()
            .map_err(|error| Failure(format!("无法启动 {}：{error}", self.binary.display())))?;
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child
                .try_wait()
                .map_err(|error| Failure(format!("等待 Chromium 失败：{error}")))?
            {
                break status;
            }
            if started.elapsed() > TIMEOUT {
                // The browser and its helper processes share the group we gave it.
                #[cfg(unix)]
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(format!("-{}", child.id()))
                    .status();
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failure(format!(
                    "Chromium 打开 {url} 超过 {} 秒未结束，日志：{}",
                    TIMEOUT.as_secs(),
                    err_path.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if !status.success() {
            let log = std::fs::read_to_string(&err_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            return Err(Failure(format!(
                "Chromium 打开 {url} 失败（{status}）：\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )));
        }
        Ok(out_path)
    }

    fn dom(&self, url: &str, name: &str) -> Result<String, Failure> {
        let path = self.run(url, &["--dump-dom".to_string()], name)?;
        std::fs::read_to_string(&path)
            .map_err(|error| Failure(format!("读取 {} 失败：{error}", path.display())))
    }

    fn screenshot(&self, url: &str, png: &Path) -> Result<(), Failure> {
        let _ = std::fs::remove_file(png);
        self.run(
            url,
            &[
                format!("--screenshot={}", png.display()),
                format!("--window-size={WINDOW}"),
            ],
            "screenshot",
        )?;
        let bytes = std::fs::read(png).unwrap_or_default();
        if !bytes.starts_with(b"\x89PNG\r\n\x1a\n") || bytes.len() < 10_000 {
            return Err(Failure(format!("截图 {} 不是有效的 PNG", png.display())));
        }
        Ok(())
    }
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
            println!("  ✓ {ok_line}");
        } else {
            self.failed += 1;
            for problem in problems {
                println!("  ✗ {problem}");
            }
        }
    }
}

/// What one page must show in the browser; `raw` is the dumped DOM as text, `dom` parsed.
fn check_page(
    raw: &str,
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
            "{html_name}：侧栏是 [{}]，应按课程顺序列出 [{}]",
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
            "{html_name}：侧栏标为当前页的是 [{}]，应是它自己",
            active.join(", ")
        ));
    }
    match first_heading(dom) {
        Some(heading) if heading == page.heading => {}
        other => problems.push(format!(
            "{html_name}：第一个标题是 {:?}，应是 {:?}",
            other.unwrap_or_default(),
            page.heading
        )),
    }
    for text in &page.must_show {
        if !raw.contains(text.as_str()) {
            problems.push(format!("{html_name}：页面上没有“{text}”"));
        }
    }
    problems
}

/// Opens the built book in headless Chromium and checks it; prints one line per check.
pub fn check(built: &Built, chromium: &Path) -> Result<bool, Failure> {
    let started = Instant::now();
    let logs = built.dir.join("browser");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs)
        .map_err(|error| Failure(format!("创建 {} 失败：{error}", logs.display())))?;
    let browser = Chromium {
        binary: chromium.to_path_buf(),
        profile: built
            .dir
            .join(format!("chromium-profile-{}", std::process::id())),
        logs: logs.clone(),
    };
    let result = run_checks(built, &browser);
    let _ = std::fs::remove_dir_all(&browser.profile);
    let tally = result?;
    println!(
        "浏览器检查：{} 项通过，{} 项失败，用时 {:.1}s（DOM 与日志在 {}）",
        tally.passed,
        tally.failed,
        started.elapsed().as_secs_f64(),
        logs.display()
    );
    Ok(tally.failed == 0)
}

fn run_checks(built: &Built, browser: &Chromium) -> Result<Tally, Failure> {
    println!("== 浏览器检查：{}，headless", browser.version());
    let mut tally = Tally::default();
    let expected: Vec<String> = built.pages.iter().map(Page::html).collect();
    let url = |name: &str| file_url(&built.html_dir.join(name));

    let mut visits: Vec<(String, Option<&Page>)> = built
        .pages
        .iter()
        .map(|page| (page.html(), Some(page)))
        .collect();
    visits.push(("print.html".to_string(), None));
    let mut rust_total = 0;
    let mut rust_highlighted = 0;
    for (name, page) in &visits {
        let raw = browser.dom(&url(name), name)?;
        let dom = Html::parse_document(&raw);
        let mut problems = check_page(&raw, &dom, *page, name, &expected);
        let (total, highlighted) = rust_blocks(&dom);
        if highlighted != total {
            problems.push(format!(
                "{name}：{total} 个 Rust 代码块中只有 {highlighted} 个被高亮"
            ));
        }
        if page.is_some() {
            rust_total += total;
            rust_highlighted += highlighted;
        }
        let is_search_chapter = page.and_then(|p| p.chapter).map(|id| id.to_string())
            == Some(SEARCH_CHAPTER.to_string());
        if is_search_chapter && (total == 0 || !has_highlighted_tokens(&dom)) {
            problems.push(format!("{name}：没有高亮的 Rust 代码块"));
        }
        let what = if page.is_some() {
            "侧栏按课程顺序、标题与内容都在"
        } else {
            "侧栏按课程顺序"
        };
        tally.record(
            problems,
            format!("{name}：{what}，Rust 代码块 {highlighted}/{total} 已高亮"),
        );
    }
    if rust_total == 0 {
        tally.record(vec!["全书没有一个 Rust 代码块".into()], String::new());
    } else {
        println!("  （全书 Rust 代码块 {rust_highlighted}/{rust_total} 已高亮）");
    }

    let chapter_page = built
        .pages
        .iter()
        .find(|page| page.chapter.map(|id| id.to_string()).as_deref() == Some(SEARCH_CHAPTER))
        .ok_or_else(|| Failure(format!("书里没有第 {SEARCH_CHAPTER} 章")))?;
    if !chapter_page.markdown.contains(SEARCH_TERM) {
        return Err(Failure(format!(
            "第 {SEARCH_CHAPTER} 章不再包含“{SEARCH_TERM}”：请在 xtask/src/browser.rs 里换一个本章的中文词"
        )));
    }
    if built
        .pages
        .iter()
        .any(|page| page.markdown.contains(ABSENT_TERM))
    {
        return Err(Failure(format!(
            "书里出现了“{ABSENT_TERM}”：请在 xtask/src/browser.rs 里换一个不存在的词"
        )));
    }
    let search = |term: &str, name: &str| -> Result<Option<(String, Vec<String>)>, Failure> {
        let query = format!(
            "{}?search={}",
            url("index.html"),
            percent_encode(term, false)
        );
        Ok(search_results(&Html::parse_document(
            &browser.dom(&query, name)?,
        )))
    };
    let chapter_html = chapter_page.html();
    let mut problems = Vec::new();
    let mut ok_line = String::new();
    match search(SEARCH_TERM, "search-found")? {
        Some((header, links)) => {
            let hits: Vec<&String> = links
                .iter()
                .filter(|link| link.split(['?', '#']).next() == Some(chapter_html.as_str()))
                .collect();
            if hits.is_empty() {
                problems.push(format!(
                    "搜索“{SEARCH_TERM}”没有找到 {chapter_html}（{header}，结果：{}）",
                    links.join(", ")
                ));
            }
            ok_line = format!(
                "搜索“{SEARCH_TERM}”：{} 条结果，其中 {} 条在第 {SEARCH_CHAPTER} 章（{header}）",
                links.len(),
                hits.len()
            );
        }
        None => problems.push(format!("搜索“{SEARCH_TERM}”：页面上没有搜索结果区")),
    }
    tally.record(problems, ok_line);
    let mut problems = Vec::new();
    match search(ABSENT_TERM, "search-absent")? {
        Some((header, links)) if links.is_empty() => tally.record(
            problems,
            format!("搜索不存在的“{ABSENT_TERM}”：0 条结果（{header}）"),
        ),
        Some((_, links)) => {
            problems.push(format!(
                "搜索不存在的“{ABSENT_TERM}”却有 {} 条结果",
                links.len()
            ));
            tally.record(problems, String::new());
        }
        None => {
            problems.push(format!("搜索“{ABSENT_TERM}”：页面上没有搜索结果区"));
            tally.record(problems, String::new());
        }
    }

    let png = built
        .dir
        .join("screenshots")
        .join(format!("{}.png", chapter_html.trim_end_matches(".html")));
    std::fs::create_dir_all(png.parent().expect("screenshots dir"))
        .map_err(|error| Failure(format!("创建截图目录失败：{error}")))?;
    match browser.screenshot(&url(&chapter_html), &png) {
        Ok(()) => tally.record(
            Vec::new(),
            format!("第 {SEARCH_CHAPTER} 章截图：{}", png.display()),
        ),
        Err(error) => tally.record(vec![error.0], String::new()),
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOM: &str = r##"<html><body><nav><mdbook-sidebar-scrollbox class="sidebar-scrollbox"><ol class="chapter">
<li class="chapter-item"><a href="index.html" tabindex="0">课程首页</a></li>
<li class="part-title">章节</li>
<li class="chapter-item"><a href="06-tool-contract.html" class="active">第 06 章</a>
<div class="on-this-page"><ol class="section"><li><a href="#本章练习一览" class="header-in-summary">本章练习一览</a></li></ol></div></li>
<li class="chapter-item"><a href="glossary.html">术语表</a></li></ol></mdbook-sidebar-scrollbox></nav>
<div id="mdbook-searchresults-header" class="searchresults-header">2 search results for '不变量':</div>
<ul id="mdbook-searchresults"><li><a href="06-tool-contract.html?highlight=%E4%B8%8D#你将得到什么" aria-details="mdbook-teaser_1">第 06 章 » 你将得到什么</a></li>
<li><a href="glossary.html?highlight=%E4%B8%8D#术语表" aria-details="mdbook-teaser_2">术语表</a></li></ul>
<main><h1 id="x"><a class="header" href="#x">第 06 章　Tool &amp; 环境</a></h1>
<pre><code class="language-rust hljs"><span class="hljs-keyword">fn</span> main() {}</code></pre>
<pre><code class="language-rust">fn plain() {}</code></pre><code class="hljs">inline</code></main></body></html>"##;

    fn dom() -> Html {
        Html::parse_document(DOM)
    }

    #[test]
    fn reads_the_sidebar_pages_in_order_and_the_active_one() {
        let pages: Vec<String> = sidebar_links(&dom())
            .into_iter()
            .map(|(href, _)| href)
            .collect();
        assert_eq!(
            pages,
            ["index.html", "06-tool-contract.html", "glossary.html"]
        );
        let active: Vec<String> = sidebar_links(&dom())
            .into_iter()
            .filter(|(_, active)| *active)
            .map(|(href, _)| href)
            .collect();
        assert_eq!(active, ["06-tool-contract.html"]);
    }

    #[test]
    fn reads_heading_code_blocks_and_search_results() {
        let dom = dom();
        assert_eq!(
            first_heading(&dom).as_deref(),
            Some("第 06 章　Tool & 环境")
        );
        assert_eq!(rust_blocks(&dom), (2, 1));
        assert!(has_highlighted_tokens(&dom));
        let (header, links) = search_results(&dom).expect("results area");
        assert_eq!(header, "2 search results for '不变量':");
        assert_eq!(links.len(), 2);
        assert!(links[0].starts_with("06-tool-contract.html?"));
    }

    #[test]
    fn urls_are_percent_encoded() {
        assert_eq!(
            file_url(Path::new("/work/main/target/book/html/a b.html")),
            "file:///work/main/target/book/html/a%20b.html"
        );
        assert_eq!(
            percent_encode(SEARCH_TERM, false),
            "%E4%B8%8D%E5%8F%98%E9%87%8F"
        );
    }
}
