//! The book's source, generated from the course: which pages there are, in which order, and
//! the Markdown of each. Pure: the inputs are the catalog, the course data and the README.
//!
//! - The front page is the learner's part of `README.md`'s Chinese half (everything but the
//!   instructors' section) followed by the chapter list, rendered from the manifest.
//! - Each chapter page is its guide as the learner's `CHAPTER.md` has it. The guide's own card
//!   (`## 重建卡片` / `## 观察卡片`, held to the manifest by the guide contract that `verify`
//!   checks) is the one card of the page, boxed so the page opens with it.
//! - Reference pages: the tutor guide, the style guide's glossary, and the README's
//!   instructors' section.
//!
//! Links between these sources are pointed at the pages that show them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use course_cli::catalog::{Catalog, Chapter, Mode};
use course_cli::files::FileSet;
use course_cli::runner::ChapterId;

use super::markdown;
use super::paths::{is_external, normalize, parent};
use crate::checkout::Failure;

/// Sources of the pages that are not chapter guides, relative to the repository root.
pub const README: &str = "README.md";
pub const TUTOR_GUIDE: &str = "chapters/_crate/AGENT_GUIDE.md";
pub const STYLE_GUIDE: &str = "chapters/STYLE.md";
/// The section of the style guide that the book carries.
const GLOSSARY: &str = "术语表";
/// The section of the README's Chinese half that is for instructors and course developers;
/// the book gives it a page of its own, so the front page shows only the learner's path.
pub const INSTRUCTORS: &str = "讲师与课程开发者";
/// The CSS class of the box around a chapter's card (`xtask/book/book.css`).
pub const CARD_CLASS: &str = "chapter-card";

/// Commands of the learner's path: the front page must show each of them.
pub const LEARNER_COMMANDS: &[&str] = &[
    "practice 06",
    "cargo xtask test 06",
    "cargo xtask watch",
    "cargo run -q -p pi",
];
/// Commands only instructors and course developers run: on the instructors' page, never on
/// the front page.
pub const INSTRUCTOR_COMMANDS: &[&str] = &[
    "cargo xtask verify",
    "cargo xtask snapshot",
    "cargo xtask codegen",
    "cargo xtask mutants",
    "cargo xtask book",
];

/// The heading of a chapter guide's card, as the guide contract (`chapters/STYLE.md`) spells it.
pub fn card_heading(mode: Mode) -> &'static str {
    match mode {
        Mode::Rebuild => "重建卡片",
        Mode::Observe => "观察卡片",
    }
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

/// One page of the book, in reading order, with what a reader must find on it.
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
    /// The heading of the page's one card (chapter pages only).
    pub card: Option<&'static str>,
    /// Texts the rendered page must show.
    pub must_show: Vec<String>,
    /// Texts the rendered page must not show.
    pub must_not_show: Vec<String>,
    pub markdown: String,
}

impl Page {
    /// The page in the site, e.g. `06-tool-contract.html`.
    pub fn html(&self) -> String {
        let stem = self.file.strip_suffix(".md").unwrap_or(&self.file);
        format!("{stem}.html")
    }

    fn new(file: &str, label: String, heading: String, part: Part, markdown: String) -> Page {
        Page {
            file: file.into(),
            label,
            heading,
            part,
            chapter: None,
            card: None,
            must_show: Vec::new(),
            must_not_show: Vec::new(),
            markdown,
        }
    }
}

/// `06-tool-contract.md`
fn chapter_file(chapter: &Chapter) -> String {
    format!("{}-{}.md", chapter.id, chapter.slug)
}

/// Repository file → the page that shows it, for pointing links between the sources at pages.
struct Targets(BTreeMap<String, String>);

impl Targets {
    fn new(catalog: &Catalog) -> Targets {
        let mut targets: BTreeMap<String, String> = catalog
            .chapters()
            .iter()
            .map(|chapter| (chapter.guide().to_string(), chapter_file(chapter)))
            .collect();
        targets.insert(README.into(), "index.md".into());
        targets.insert(TUTOR_GUIDE.into(), "agent-guide.md".into());
        targets.insert(STYLE_GUIDE.into(), "glossary.md".into());
        Targets(targets)
    }

    /// A link of `source` (a repository path) to another source that is in the book, pointed
    /// at its page; `None` for any other link (the link check reports what leaves the book).
    fn page_of(&self, link: &str, source: &str) -> Option<String> {
        if link.is_empty() || link.starts_with('#') || is_external(link) {
            return None;
        }
        let (path, fragment) = match link.split_once('#') {
            Some((path, fragment)) => (path, Some(fragment)),
            None => (link, None),
        };
        let target = self.0.get(&normalize(parent(source), path)?)?;
        Some(match fragment {
            Some(fragment) => format!("{target}#{fragment}"),
            None => target.clone(),
        })
    }

    /// `markdown`, read from `source`, with its links between the book's sources pointed at
    /// the book's pages.
    fn rewrite(&self, markdown: &str, source: &str) -> String {
        markdown::rewrite_destinations(markdown, |link| self.page_of(link, source))
    }
}

/// Every page of the book, in order: front page, chapters in course order, tutor guide,
/// glossary, instructors. `data` is the course data, `readme` the text of `README.md`.
pub fn pages(catalog: &Catalog, data: &FileSet, readme: &str) -> Result<Vec<Page>, Failure> {
    let targets = Targets::new(catalog);
    let text = |path: &str| -> Result<String, Failure> {
        data.get(path)
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
            .ok_or_else(|| Failure(format!("课程书缺少来源文件 {path}")))
    };
    let (front, instructors) = readme_pages(catalog, &targets.rewrite(readme, README))?;
    let mut pages = vec![front];
    for chapter in catalog.chapters() {
        let path = chapter.guide();
        let guide = targets.rewrite(&text(path.as_str())?, path.as_str());
        pages.push(chapter_page(chapter, &guide)?);
    }

    let tutor = targets.rewrite(&text(TUTOR_GUIDE)?, TUTOR_GUIDE);
    let heading = markdown::title(&tutor)
        .ok_or_else(|| Failure(format!("{TUTOR_GUIDE} 没有 `# ` 标题行")))?;
    pages.push(Page::new(
        "agent-guide.md",
        heading.clone(),
        heading,
        Part::Reference,
        tutor,
    ));

    let glossary = markdown::section_body(&text(STYLE_GUIDE)?, GLOSSARY)
        .ok_or_else(|| Failure(format!("{STYLE_GUIDE} 没有 `## {GLOSSARY}` 一节")))?;
    let glossary = format!(
        "# {GLOSSARY}\n\n> 摘自课程写作规范 `{STYLE_GUIDE}`：全课程统一的说法。\n\n{}",
        targets.rewrite(&glossary, STYLE_GUIDE)
    );
    pages.push(Page::new(
        "glossary.md",
        GLOSSARY.into(),
        GLOSSARY.into(),
        Part::Reference,
        glossary,
    ));
    pages.push(instructors);
    Ok(pages)
}

/// The front page and the instructors' page, from the README (links already pointed at
/// pages): its Chinese half without the instructors' section, then the chapter list; and
/// that section on a page of its own.
fn readme_pages(catalog: &Catalog, readme: &str) -> Result<(Page, Page), Failure> {
    let chinese = markdown::chinese_part(readme);
    let section = markdown::section_range(&chinese, INSTRUCTORS).ok_or_else(|| {
        Failure(format!(
            "{README} 的中文部分没有 `## {INSTRUCTORS}` 一节（讲师命令放在这一节，课程书把它放到单独一页）"
        ))
    })?;
    let learner = format!(
        "{}\n\n{}",
        chinese[..section.start].trim_end(),
        chinese[section.end..].trim_start()
    );
    // The README's links to its own instructors' section now lead to that section's page.
    let to_section = format!("#{INSTRUCTORS}");
    let learner = markdown::rewrite_destinations(&learner, |link| {
        (link == to_section).then(|| "instructors.md".to_string())
    });
    let heading = markdown::title(&learner)
        .ok_or_else(|| Failure(format!("{README} 的中文部分没有 `# ` 标题行")))?;
    let markdown = learner.trim_end().to_string() + "\n" + &book_contents(catalog);
    let mut front = Page::new(
        "index.md",
        "课程首页".into(),
        heading,
        Part::Front,
        markdown,
    );
    front.must_show = LEARNER_COMMANDS.iter().map(|c| c.to_string()).collect();
    front.must_not_show = INSTRUCTOR_COMMANDS.iter().map(|c| c.to_string()).collect();

    let body = markdown::section_body(&chinese, INSTRUCTORS).unwrap_or_default();
    let mut instructors = Page::new(
        "instructors.md",
        INSTRUCTORS.into(),
        INSTRUCTORS.into(),
        Part::Reference,
        format!("# {INSTRUCTORS}\n\n{body}"),
    );
    instructors.must_show = INSTRUCTOR_COMMANDS.iter().map(|c| c.to_string()).collect();
    Ok((front, instructors))
}

/// A chapter's page: its guide (links already pointed at pages) with its own card boxed.
fn chapter_page(chapter: &Chapter, guide: &str) -> Result<Page, Failure> {
    let path = chapter.guide();
    let heading = markdown::title(guide)
        .ok_or_else(|| Failure(format!("{path} 的第一行必须是 `# 第 NN 章　标题`")))?;
    let card = card_heading(chapter.mode());
    let markdown =
        boxed_card(guide, card).ok_or_else(|| Failure(format!("{path} 没有 `## {card}` 一节")))?;
    let mut page = Page::new(
        &chapter_file(chapter),
        format!("第 {} 章　{}", chapter.id, chapter.title),
        heading,
        Part::Chapters,
        markdown,
    );
    page.chapter = Some(chapter.id);
    page.card = Some(card);
    page.must_show = chapter
        .groups
        .iter()
        .map(|group| format!("cargo xtask test {} --group {}", chapter.id, group.name))
        .collect();
    Ok(page)
}

/// The guide with its `## {card}` section inside the card box; `None` without that section.
/// The blank lines keep the Markdown inside the `<div>` Markdown.
fn boxed_card(guide: &str, card: &str) -> Option<String> {
    let range = markdown::section_range(guide, card)?;
    Some(format!(
        "{}<div class=\"{CARD_CLASS}\">\n\n{}\n\n</div>\n\n{}",
        &guide[..range.start],
        guide[range.clone()].trim_end(),
        &guide[range.end..]
    ))
}

/// The front page's list of chapters, from the manifest.
fn book_contents(catalog: &Catalog) -> String {
    let mut out = String::from("\n## 本书章节\n\n| 章 | 标题 | 模式 |\n| --- | --- | --- |\n");
    for chapter in catalog.chapters() {
        let _ = writeln!(
            out,
            "| {} | [{}]({}) | {} |",
            chapter.id,
            markdown::escape_inline(&chapter.title),
            chapter_file(chapter),
            chapter.mode().label()
        );
    }
    out.push_str(
        "\n另有[辅导协议](agent-guide.md)（写给编码助手）、全课程统一说法的[术语表](glossary.md)，\
         以及给讲师和课程开发者的[命令一览](instructors.md)。\n",
    );
    out
}

/// `SUMMARY.md`: the sidebar, in the order of `pages`.
pub fn summary(pages: &[Page]) -> String {
    let mut out = String::from("# Summary\n\n");
    let mut part: Option<Part> = None;
    for page in pages {
        let link = format!("[{}]({})", markdown::escape_inline(&page.label), page.file);
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
title = "事件流：Arc<dyn Fn> 与 [排队]"
mode = "rebuild"
files = ["src/lib.rs", "src/event_stream.rs"]
edit = ["src/event_stream.rs"]
labs = [
    { group = "queue", tests = 4, summary = "排队 | 终态" },
    { group = "waiter", tests = 6, summary = "等待" },
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
            "# 第 00 章　序章\n\n## 观察卡片\n\n- **模式：** 观察\n\n## 演示\n\n\
             见[第 02 章](../02-event-stream/README.md#小结)。\n",
        );
        add(
            "chapters/02-event-stream/README.md",
            "# 第 02 章　事件流\n\n引子。\n\n## 重建卡片\n\n- **模式：** 重建\n- **命令：** 见下\n\n  \
             ```\n  cargo xtask test 02\n  ```\n\n## 你将得到什么\n\n\
             `[x](../STYLE.md)` 与 [术语](../STYLE.md#术语表)\n\n```\n[y](../STYLE.md)\n```\n",
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

    const README_TEXT: &str = "# pi-course（Rust 版）\n\n简介。\n\n## 快速开始（中文）\n\n\
        ```bash\n## not a heading\npractice 06 /tmp/p\n```\n\n\
        另见[讲师命令](#讲师与课程开发者)。\n\n\
        ## 讲师与课程开发者\n\n- `cargo xtask verify`：证明每一章。见[术语](chapters/STYLE.md#术语表)。\n\n\
        ## 没有网络的教室\n\n带上 registry。\n\n\
        ## Quick start (English)\n\nEnglish.\n";

    fn all_pages() -> Vec<Page> {
        let (catalog, data) = course();
        pages(&catalog, &data, README_TEXT).expect("pages")
    }

    #[test]
    fn summary_lists_front_page_chapters_in_course_order_then_reference() {
        let pages = all_pages();
        let files: Vec<&str> = pages.iter().map(|p| p.file.as_str()).collect();
        assert_eq!(
            files,
            [
                "index.md",
                "00-prologue.md",
                "02-event-stream.md",
                "agent-guide.md",
                "glossary.md",
                "instructors.md"
            ]
        );
        assert_eq!(
            summary(&pages),
            "# Summary\n\n[课程首页](index.md)\n\n# 章节\n\n\
             - [第 00 章　序章](00-prologue.md)\n\
             - [第 02 章　事件流：Arc&lt;dyn Fn&gt; 与 \\[排队\\]](02-event-stream.md)\n\n\
             # 参考\n\n- [辅导协议](agent-guide.md)\n- [术语表](glossary.md)\n\
             - [讲师与课程开发者](instructors.md)\n"
        );
    }

    #[test]
    fn the_front_page_is_the_learners_part_of_the_readme_and_the_instructors_get_a_page() {
        let pages = all_pages();
        let front = &pages[0].markdown;
        assert!(front.starts_with("# pi-course（Rust 版）\n\n简介。\n\n## 快速开始（中文）"));
        assert!(
            front.contains("## not a heading"),
            "a fenced line is not a heading"
        );
        assert!(
            front.contains(
                "practice 06 /tmp/p\n```\n\n另见[讲师命令](instructors.md)。\n\n## 没有网络的教室"
            ),
            "the instructors' section is cut out, what follows it stays: {front}"
        );
        assert!(!front.contains("cargo xtask verify"));
        assert!(!front.contains("English."));
        assert!(front.contains(
            "| 02 | [事件流：Arc&lt;dyn Fn&gt; 与 \\[排队\\]](02-event-stream.md) | 重建 |"
        ));
        assert!(front.contains("[命令一览](instructors.md)"));
        assert_eq!(pages[0].heading, "pi-course（Rust 版）");
        assert!(pages[0]
            .must_show
            .contains(&"cargo xtask watch".to_string()));
        assert!(pages[0]
            .must_not_show
            .contains(&"cargo xtask verify".to_string()));

        let instructors = &pages[5];
        assert_eq!(
            instructors.markdown,
            "# 讲师与课程开发者\n\n- `cargo xtask verify`：证明每一章。见[术语](glossary.md#术语表)。\n"
        );
        assert!(instructors
            .must_show
            .contains(&"cargo xtask verify".to_string()));
    }

    #[test]
    fn a_chapter_page_is_its_guide_with_its_own_card_boxed_and_links_pointing_at_pages() {
        let pages = all_pages();
        let chapter = &pages[2].markdown;
        assert_eq!(
            chapter.split("</div>").next().expect("a box"),
            format!(
                "# 第 02 章　事件流\n\n引子。\n\n<div class=\"{CARD_CLASS}\">\n\n## 重建卡片\n\n\
                 - **模式：** 重建\n- **命令：** 见下\n\n  ```\n  cargo xtask test 02\n  ```\n\n"
            ),
            "the guide's card, and nothing else, is inside the box"
        );
        assert_eq!(chapter.matches("卡片").count(), 1, "one card: {chapter}");
        assert!(chapter.contains("</div>\n\n## 你将得到什么\n"));
        assert_eq!(pages[2].card, Some("重建卡片"));
        assert_eq!(pages[1].card, Some("观察卡片"));
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
        assert_eq!(
            pages[2].must_show,
            [
                "cargo xtask test 02 --group queue",
                "cargo xtask test 02 --group waiter"
            ]
        );
    }

    #[test]
    fn a_guide_without_its_card_or_a_readme_without_the_instructors_section_is_refused() {
        let (catalog, mut data) = course();
        let readme = README_TEXT.replace("## 讲师与课程开发者", "## 其他");
        let refused = pages(&catalog, &data, &readme).expect_err("no instructors' section");
        assert!(
            refused.0.contains("没有 `## 讲师与课程开发者` 一节"),
            "{}",
            refused.0
        );
        data.insert(
            RepoPath::new("chapters/02-event-stream/README.md"),
            "# 第 02 章　事件流\n\n## 卡片\n".as_bytes().to_vec(),
        );
        let refused = pages(&catalog, &data, README_TEXT).expect_err("no card");
        assert_eq!(
            refused.0,
            "chapters/02-event-stream/README.md 没有 `## 重建卡片` 一节"
        );
    }
}
