//! Reading the course's Markdown the way mdBook reads it: with `pulldown-cmark`, the parser
//! mdBook 0.5.4 itself uses, at the same version and with the same extensions. Headings,
//! sections, code and link destinations are what that parser says they are, so a `#` line
//! inside a fenced block or a `](` inside a code span is never mistaken for structure.
//!
//! Everything here is pure text in, text (or byte ranges of it) out.

use std::ops::Range;

use pulldown_cmark::{Event, HeadingLevel, LinkType, Options, Parser, Tag, TagEnd};

/// The extensions mdBook 0.5.4 turns on with its default settings (`mdbook-markdown`'s
/// `new_cmark_parser`): what we read as a heading is exactly what the book shows as one.
fn parser(markdown: &str) -> Parser<'_> {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_HEADING_ATTRIBUTES
        | Options::ENABLE_SMART_PUNCTUATION
        | Options::ENABLE_DEFINITION_LIST
        | Options::ENABLE_GFM;
    Parser::new_ext(markdown, options)
}

/// A heading of a Markdown text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heading {
    /// 1 for `#`, 2 for `##`, …
    pub level: usize,
    /// The heading as a reader sees it: text and code, without emphasis marks.
    pub text: String,
    /// Where the heading's source is, line break excluded.
    pub range: Range<usize>,
}

fn level_number(level: HeadingLevel) -> usize {
    match level {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

/// Every heading of `markdown`, in order.
pub fn headings(markdown: &str) -> Vec<Heading> {
    let mut found = Vec::new();
    let mut open: Option<Heading> = None;
    for (event, range) in parser(markdown).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                open = Some(Heading {
                    level: level_number(level),
                    text: String::new(),
                    range,
                });
            }
            Event::Text(text) | Event::Code(text) => {
                if let Some(heading) = open.as_mut() {
                    heading.text.push_str(&text);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(mut heading) = open.take() {
                    heading.text = heading.text.trim().to_string();
                    heading.range.end = markdown[..heading.range.end].trim_end().len();
                    found.push(heading);
                }
            }
            _ => {}
        }
    }
    found
}

/// The text of the first `#` heading.
pub fn title(markdown: &str) -> Option<String> {
    headings(markdown)
        .into_iter()
        .find(|heading| heading.level == 1)
        .map(|heading| heading.text)
}

/// The `## {title}` heading and where its section ends: at the next heading of level 1 or 2
/// (or the end of the text).
fn section(markdown: &str, title: &str) -> Option<(Heading, usize)> {
    let mut headings = headings(markdown).into_iter();
    let heading = headings.find(|heading| heading.level == 2 && heading.text == title)?;
    let end = headings
        .find(|heading| heading.level <= 2)
        .map_or(markdown.len(), |heading| heading.range.start);
    Some((heading, end))
}

/// The byte range of the `## {title}` section, its heading included.
pub fn section_range(markdown: &str, title: &str) -> Option<Range<usize>> {
    let (heading, end) = section(markdown, title)?;
    Some(heading.range.start..end)
}

/// The body of the `## {title}` section, heading left out, trimmed, ending in a newline.
pub fn section_body(markdown: &str, title: &str) -> Option<String> {
    let (heading, end) = section(markdown, title)?;
    Some(markdown[heading.range.end..end].trim().to_string() + "\n")
}

/// Whether `text` has a Chinese or Japanese character.
pub fn has_cjk(text: &str) -> bool {
    text.chars().any(|c| {
        matches!(c,
            '\u{3040}'..='\u{30ff}' | '\u{3400}'..='\u{4dbf}' | '\u{4e00}'..='\u{9fff}' | '\u{f900}'..='\u{faff}')
    })
}

/// The Chinese part of a bilingual text: everything before its first `##` heading without
/// a Chinese character (the README's `## Quick start (English)`).
pub fn chinese_part(markdown: &str) -> String {
    let end = headings(markdown)
        .into_iter()
        .find(|heading| heading.level == 2 && !has_cjk(&heading.text))
        .map_or(markdown.len(), |heading| heading.range.start);
    markdown[..end].trim_end().to_string() + "\n"
}

/// Where a link's destination is written in the source, and what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// The destination's bytes in the source (inside `<…>` when it is written so).
    pub range: Range<usize>,
    /// The destination as the parser reads it (escapes resolved).
    pub url: String,
}

/// The destination written at the start of `text` (after optional blanks): `<…>` or a run
/// up to a blank or an unbalanced `)`. Its range is relative to `text`.
fn destination_at(text: &str) -> Option<Range<usize>> {
    let start = text.len() - text.trim_start().len();
    let rest = &text[start..];
    if let Some(inner) = rest.strip_prefix('<') {
        let len = inner.find('>')?;
        return Some(start + 1..start + 1 + len);
    }
    let mut depth = 0usize;
    let mut escaped = false;
    for (at, c) in rest.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '(' => depth += 1,
            ')' if depth == 0 => return Some(start..start + at),
            ')' => depth -= 1,
            c if c.is_whitespace() => return Some(start..start + at),
            _ => {}
        }
    }
    Some(start..start + rest.len())
}

/// The destinations of every inline link and image and every link reference definition of
/// `markdown`, in source order. Autolinks and links inside code are not included.
pub fn link_destinations(markdown: &str) -> Vec<Destination> {
    struct Open {
        url: String,
        inline: bool,
        /// Where the link text's source ends so far: the `](` follows it.
        text_end: usize,
    }
    let mut found = Vec::new();
    let mut open: Vec<Open> = Vec::new();
    let mut events = parser(markdown).into_offset_iter();
    for (event, range) in events.by_ref() {
        if let Some(innermost) = open.last_mut() {
            if !matches!(event, Event::End(TagEnd::Link | TagEnd::Image)) {
                innermost.text_end = innermost.text_end.max(range.end);
            }
        }
        match event {
            Event::Start(
                Tag::Link {
                    link_type,
                    dest_url,
                    ..
                }
                | Tag::Image {
                    link_type,
                    dest_url,
                    ..
                },
            ) => {
                let opening = if markdown[range.start..].starts_with('!') {
                    2
                } else {
                    1
                };
                open.push(Open {
                    url: dest_url.to_string(),
                    inline: link_type == LinkType::Inline,
                    text_end: range.start + opening,
                });
            }
            Event::End(TagEnd::Link | TagEnd::Image) => {
                let Some(link) = open.pop() else { continue };
                if let Some(outer) = open.last_mut() {
                    outer.text_end = outer.text_end.max(range.end);
                }
                if !link.inline {
                    continue;
                }
                // `text_end` is the `]` that closes the link text; `(` follows it.
                let after = link.text_end + "](".len();
                let Some(tail) = markdown.get(after..range.end) else {
                    continue;
                };
                if let Some(relative) = destination_at(tail) {
                    found.push(Destination {
                        range: after + relative.start..after + relative.end,
                        url: link.url,
                    });
                }
            }
            _ => {}
        }
    }
    for (_, definition) in events.reference_definitions().iter() {
        let span = definition.span.clone();
        let Some(colon) = markdown[span.clone()].find("]:") else {
            continue;
        };
        let after = span.start + colon + "]:".len();
        if let Some(relative) = destination_at(&markdown[after..span.end]) {
            found.push(Destination {
                range: after + relative.start..after + relative.end,
                url: definition.dest.to_string(),
            });
        }
    }
    found.sort_by_key(|destination| destination.range.start);
    found
}

/// `markdown` with each link destination replaced by what `rewrite` returns for it (`None`
/// keeps it as written).
pub fn rewrite_destinations(markdown: &str, rewrite: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut copied = 0;
    for destination in link_destinations(markdown) {
        let Some(new) = rewrite(&destination.url) else {
            continue;
        };
        out.push_str(&markdown[copied..destination.range.start]);
        out.push_str(&new);
        copied = destination.range.end;
    }
    out.push_str(&markdown[copied..]);
    out
}

/// Text written into generated Markdown as inline content, shown as written: `&`, `<` and
/// `>` outside code spans become entities (so `Arc<dyn Fn>` is not taken for an HTML tag),
/// and `[`, `]` and `|` are escaped (so the text can be a link's text or a table cell).
pub fn escape_inline(text: &str) -> String {
    let code: Vec<Range<usize>> = parser(text)
        .into_offset_iter()
        .filter(|(event, _)| matches!(event, Event::Code(_)))
        .map(|(_, range)| range)
        .collect();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let escape = |plain: &str, out: &mut String| {
        for c in plain.chars() {
            match c {
                '&' => out.push_str("&amp;"),
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '[' | ']' | '|' => {
                    out.push('\\');
                    out.push(c);
                }
                c => out.push(c),
            }
        }
    };
    for span in code {
        escape(&text[at..span.start], &mut out);
        out.push_str(&text[span.clone()].replace('|', "\\|"));
        at = span.end;
    }
    escape(&text[at..], &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUIDE: &str = "# 第 02 章　`EventStream` 与 *终态*\n\n\
        ```bash\n# not a heading\n## nor this\n```\n\n\
        ## 重建卡片\n\n- **模式：** 重建\n\n### Lab 2.1 queue\n\n正文。\n\n\
        ## 小结 {#summary}\n\n最后。\n";

    #[test]
    fn headings_are_what_the_parser_says_not_lines_that_start_with_a_hash() {
        let found: Vec<(usize, String)> = headings(GUIDE)
            .into_iter()
            .map(|heading| (heading.level, heading.text))
            .collect();
        assert_eq!(
            found,
            [
                (1, "第 02 章　EventStream 与 终态".to_string()),
                (2, "重建卡片".to_string()),
                (3, "Lab 2.1 queue".to_string()),
                (2, "小结".to_string()),
            ]
        );
        assert_eq!(
            title(GUIDE).as_deref(),
            Some("第 02 章　EventStream 与 终态")
        );
        let setext = "Title\n=====\n\ntext\n";
        assert_eq!(title(setext).as_deref(), Some("Title"));
    }

    #[test]
    fn a_section_runs_to_the_next_heading_of_its_level_or_higher() {
        let range = section_range(GUIDE, "重建卡片").expect("the card section");
        let section = &GUIDE[range];
        assert!(section.starts_with("## 重建卡片\n"));
        assert!(
            section.contains("### Lab 2.1 queue"),
            "a ### heading stays inside"
        );
        assert!(!section.contains("小结"));
        assert_eq!(
            section_body(GUIDE, "小结").as_deref(),
            Some("最后。\n"),
            "heading attributes are not part of the title"
        );
        assert_eq!(section_range(GUIDE, "nor this"), None);
    }

    #[test]
    fn the_chinese_part_ends_at_the_first_heading_without_chinese() {
        let readme =
            "# pi-course（Rust 版）\n\n简介。\n\n```bash\n## Quick start (English)\n```\n\n\
                      ## 快速开始\n\n一。\n\n## Quick start (English)\n\nEnglish.\n";
        let part = chinese_part(readme);
        assert!(part.ends_with("## 快速开始\n\n一。\n"));
        assert!(part.contains("```bash\n## Quick start (English)\n```"));
        assert!(!part.contains("English."));
    }

    #[test]
    fn link_destinations_are_found_where_they_are_written() {
        let text = "[a](x.md) ![图](img/a.png \"t\") [`](no)`](y.md#小结) [c](<z w.md>)\n\
                    [![i](i.png)](outer.md) [ref][r] <https://auto.example> `[no](code.md)`\n\n\
                    ```\n[no](block.md)\n```\n\n[r]: ../STYLE.md#术语表 \"title\"\n";
        let found: Vec<(&str, String)> = link_destinations(text)
            .into_iter()
            .map(|d| (&text[d.range], d.url))
            .collect();
        let expected = [
            ("x.md", "x.md"),
            ("img/a.png", "img/a.png"),
            ("y.md#小结", "y.md#小结"),
            ("z w.md", "z w.md"),
            ("i.png", "i.png"),
            ("outer.md", "outer.md"),
            ("../STYLE.md#术语表", "../STYLE.md#术语表"),
        ];
        let expected: Vec<(&str, String)> = expected
            .iter()
            .map(|(written, url)| (*written, url.to_string()))
            .collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn rewriting_touches_only_the_destinations() {
        let text = "见 [第 02 章](../02/README.md#小结) 和 [外部](https://x.example/a.md)。\n";
        let rewritten = rewrite_destinations(text, |url| {
            url.starts_with("../")
                .then(|| url.replace("../02/README.md", "02.md"))
        });
        assert_eq!(
            rewritten,
            "见 [第 02 章](02.md#小结) 和 [外部](https://x.example/a.md)。\n"
        );
    }

    #[test]
    fn inline_text_is_escaped_outside_code_spans() {
        assert_eq!(
            escape_inline("等待：Arc<dyn Fn> 与 `Vec<T>` | [x] & `a|b`"),
            "等待：Arc&lt;dyn Fn&gt; 与 `Vec<T>` \\| \\[x\\] &amp; `a\\|b`"
        );
    }
}
