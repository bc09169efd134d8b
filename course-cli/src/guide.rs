//! The learning contract, checked: every chapter guide has its card, its Lab cards, its
//! sections, and only commands, groups, counts, Labs and functions that are real.
//!
//! Pure: it reads the guide's text, the catalog and the practice snapshot the guide will sit in.
//! The rules and their exact spellings are written down for authors in `chapters/STYLE.md`.

use std::collections::BTreeSet;

use course_runner::LabId;

use crate::assemble::Snapshot;
use crate::catalog::{Catalog, Chapter, Mode};

/// Bold labels every card needs, in the order authors usually write them.
pub const CARD_FIELDS: &[&str] = &[
    "模式",
    "起终点",
    "教学文件",
    "学习脚手架",
    "动手前只需知道",
    "第一次红灯",
    "第一步",
    "聚焦测试",
    "命令",
    "通过证据",
];
/// Bold labels every Lab card needs.
pub const LAB_FIELDS: &[&str] = &["目标", "文件", "动作", "运行", "预期"];

/// A section: its heading line and the lines up to the next heading of the same or higher level.
fn section<'a>(
    lines: &[&'a str],
    heading: impl Fn(&str) -> bool,
    level: usize,
) -> Option<Vec<&'a str>> {
    let start = lines.iter().position(|line| heading(line))?;
    let end = lines[start + 1..]
        .iter()
        .position(|line| {
            let hashes = line.chars().take_while(|c| *c == '#').count();
            hashes >= 1 && hashes <= level && line[hashes..].starts_with(' ')
        })
        .map_or(lines.len(), |offset| start + 1 + offset);
    Some(lines[start..end].to_vec())
}

/// The line that starts a bold field (`**模式：**`, possibly as a list item).
fn field<'a>(lines: &[&'a str], label: &str) -> Option<&'a str> {
    let bold = format!("**{label}：**");
    lines
        .iter()
        .map(|line| line.trim_start().trim_start_matches("- ").trim_start())
        .find(|line| line.starts_with(&bold))
}

/// Text in single backticks on a line.
fn inline_code(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// `(k, n)` pairs written as `k/n`.
fn fractions(line: &str) -> Vec<(usize, usize)> {
    let bytes = line.as_bytes();
    let mut found = Vec::new();
    for (index, _) in line.match_indices('/') {
        let before = line[..index]
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .count();
        let after = line[index + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .count();
        let clean_left = index == before || !bytes[index - before - 1].is_ascii_alphanumeric();
        if before > 0 && after > 0 && clean_left {
            let k = line[index - before..index].parse().unwrap_or(0);
            let n = line[index + 1..index + 1 + after].parse().unwrap_or(0);
            found.push((k, n));
        }
    }
    found
}

/// `cargo xtask test NN [--group G]` occurrences on a line.
fn xtask_commands(line: &str) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(index) = rest.find("cargo xtask test ") {
        rest = &rest[index + "cargo xtask test ".len()..];
        let mut words = rest.split_whitespace();
        let leading = |word: &str, keep: fn(&char) -> bool| -> String {
            word.chars().take_while(keep).collect()
        };
        let chapter = leading(words.next().unwrap_or_default(), char::is_ascii_digit);
        let group = match words.next() {
            Some("--group") => words
                .next()
                .map(|g| leading(g, |c| c.is_ascii_alphanumeric() || *c == '_')),
            _ => None,
        };
        found.push((chapter, group));
    }
    found
}

/// Every `Lab N.k` written in the text.
fn labs_mentioned(text: &str) -> BTreeSet<String> {
    text.match_indices("Lab ")
        .filter_map(|(index, _)| {
            let rest = &text[index + 4..];
            let token: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let token = token.trim_end_matches('.');
            token.contains('.').then(|| token.to_string())
        })
        .collect()
}

/// Names a Rust source defines (`fn x`, `struct X`, …).
fn defined_names(snapshot: &Snapshot) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (path, bytes) in snapshot {
        if !path.as_str().starts_with("pi-course/src/") {
            continue;
        }
        let text = String::from_utf8_lossy(bytes);
        for keyword in [
            "fn ",
            "struct ",
            "enum ",
            "trait ",
            "type ",
            "const ",
            "macro_rules! ",
        ] {
            for (index, _) in text.match_indices(keyword) {
                let at_word_start =
                    index == 0 || !text.as_bytes()[index - 1].is_ascii_alphanumeric();
                if !at_word_start {
                    continue;
                }
                let name: String = text[index + keyword.len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    names.insert(name);
                }
            }
        }
    }
    names
}

/// Checks one chapter's guide. `reference` is the chapter's finished code (to know which
/// names belong to the course crate), `practice` the workspace the learner gets.
pub fn check(
    catalog: &Catalog,
    chapter: &Chapter,
    guide: &str,
    first_reds: &[String],
    reference: &Snapshot,
    practice: &Snapshot,
) -> Vec<String> {
    let mut problems = Vec::new();
    let lines: Vec<&str> = guide.lines().collect();
    let id = chapter.id;

    let title = format!("# 第 {id} 章　{}", chapter.title);
    if lines.first().map(|line| line.trim_end()) != Some(title.as_str()) {
        problems.push(format!("第一行应是 `{title}`"));
    }

    let card_heading = match chapter.mode() {
        Mode::Rebuild => "## 重建卡片",
        Mode::Observe => "## 观察卡片",
    };
    match section(&lines, |line| line.trim_end() == card_heading, 2) {
        None => problems.push(format!("缺少 `{card_heading}` 一节")),
        Some(card) => check_card(chapter, &card, first_reds, &mut problems),
    }

    let labs: Vec<(LabId, &course_runner::GroupSpec)> = chapter.labs().collect();
    let lab_headings: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|line| line.starts_with("### Lab "))
        .collect();
    let expected: Vec<String> = labs
        .iter()
        .map(|(lab, _)| format!("### Lab {lab} "))
        .collect();
    let matches_in_order = lab_headings.len() == expected.len()
        && lab_headings
            .iter()
            .zip(&expected)
            .all(|(line, prefix)| line.starts_with(prefix.as_str()));
    if !matches_in_order {
        problems.push(format!(
            "Lab 卡片应依次是 {}，实际是 {}",
            if expected.is_empty() {
                "（无）".to_string()
            } else {
                expected
                    .iter()
                    .map(|e| e.trim())
                    .collect::<Vec<_>>()
                    .join("、")
            },
            if lab_headings.is_empty() {
                "（无）".to_string()
            } else {
                lab_headings.join("、")
            }
        ));
    }
    for (lab, group) in &labs {
        let prefix = format!("### Lab {lab} ");
        let Some(card) = section(&lines, |line| line.starts_with(&prefix), 3) else {
            continue;
        };
        for label in LAB_FIELDS {
            if field(&card, label).is_none() {
                problems.push(format!("Lab {lab} 卡片缺少 **{label}：**"));
            }
        }
        let command = format!("cargo xtask test {id} --group {}", group.name);
        if !field(&card, "运行").is_some_and(|line| line.contains(&command)) {
            problems.push(format!("Lab {lab} 卡片的 **运行：** 应包含 `{command}`"));
        }
        let count = format!("{n}/{n}", n = group.tests);
        if !field(&card, "预期").is_some_and(|line| line.contains(&count)) {
            problems.push(format!("Lab {lab} 卡片的 **预期：** 应写明 {count}"));
        }
    }

    if !lines
        .iter()
        .any(|line| line.starts_with('#') && line.contains("检查点"))
    {
        problems.push("缺少含“检查点”的标题".to_string());
    }
    for heading in ["## 与上游 pi 的对照", "## 测试没有证明什么", "## 小结"] {
        if !lines.iter().any(|line| line.trim_end() == heading) {
            problems.push(format!("缺少 `{heading}` 一节"));
        }
    }
    if !lines
        .iter()
        .any(|line| line.starts_with("## ") && line.trim_end().ends_with("验收"))
    {
        problems.push("缺少以“验收”结尾的 `## ` 标题".to_string());
    }
    check_predictions(&lines, &mut problems);
    check_commands(catalog, guide, &mut problems);
    check_calls(guide, reference, practice, &mut problems);
    problems
}

fn check_card(chapter: &Chapter, card: &[&str], first_reds: &[String], problems: &mut Vec<String>) {
    for label in CARD_FIELDS {
        if field(card, label).is_none() {
            problems.push(format!("卡片缺少 **{label}：**"));
        }
    }
    if let Some(mode) = field(card, "模式") {
        if !mode.contains(chapter.mode().label()) {
            problems.push(format!("**模式：** 应为“{}”", chapter.mode().label()));
        }
    }
    if let Some(ends) = field(card, "起终点") {
        if !(ends.contains("起点") && ends.contains("终点")) {
            problems.push("**起终点：** 应同时说明起点与终点".to_string());
        }
    }
    let text = card.join("\n");
    for file in chapter.edit() {
        let path = file.in_workspace();
        if !text.contains(path.as_str()) {
            problems.push(format!("卡片没有列出要编辑的文件 `{path}`"));
        }
    }
    let tests = chapter.tests().test_file();
    if !text.contains(&tests) {
        problems.push(format!("卡片的 **聚焦测试：** 应写明 `{tests}`"));
    }
    if chapter.mode() == Mode::Rebuild && !first_reds.iter().any(|red| text.contains(red.as_str()))
    {
        problems.push(format!(
            "**第一次红灯：** 应写出 Lab {}.1 的真实信息，例如 `{}`",
            chapter.id.number(),
            first_reds.first().map(String::as_str).unwrap_or("?")
        ));
    }
    if !text.contains("先不看答案") {
        problems.push("卡片应提醒“先不看答案”".to_string());
    }
}

fn check_predictions(lines: &[&str], problems: &mut Vec<String>) {
    let mut open = false;
    let mut answered = 0;
    for line in lines {
        if line.starts_with("> **预测：**") {
            if open {
                problems.push("一个 **预测：** 没有跟着 **答案：**".to_string());
            }
            open = true;
        } else if line.starts_with("> **答案：**") && open {
            open = false;
            answered += 1;
        }
    }
    if open {
        problems.push("最后一个 **预测：** 没有跟着 **答案：**".to_string());
    }
    if answered == 0 {
        problems.push("至少需要一个 `> **预测：**` 及其 `> **答案：**`".to_string());
    }
}

/// Commands, groups, counts and Labs that a guide (or the tutor guide) names must be real.
pub fn check_commands(catalog: &Catalog, text: &str, problems: &mut Vec<String>) {
    for (number, line) in text.lines().enumerate() {
        let at = number + 1;
        for forbidden in ["-p course-cli", "--bin practice"] {
            if line.contains(forbidden) {
                problems.push(format!(
                    "第 {at} 行：`{forbidden}` 在练习目录里无法运行；请写 `practice NN <新目录>`"
                ));
            }
        }
        for (chapter, group) in xtask_commands(line) {
            if chapter.is_empty() {
                // `cargo xtask test` alone, or a placeholder (`NN`): the workspace's own chapter.
                continue;
            }
            let Ok(found) = catalog.resolve(&chapter) else {
                problems.push(format!(
                    "第 {at} 行：`cargo xtask test {chapter}` 不是课程里的章节"
                ));
                continue;
            };
            let expected = match &group {
                Some(name) => match found.tests().group(name) {
                    Some(spec) => spec.tests,
                    None => {
                        problems.push(format!("第 {at} 行：第 {} 章没有测试组 `{name}`", found.id));
                        continue;
                    }
                },
                None => found.groups.iter().map(|group| group.tests).sum(),
            };
            for (k, n) in fractions(line) {
                if n != expected || k > n {
                    problems.push(format!(
                        "第 {at} 行：{k}/{n} 与清单不符（{}应为 {expected} 个测试）",
                        group
                            .as_deref()
                            .map(|g| format!("测试组 {g} "))
                            .unwrap_or_default()
                    ));
                }
            }
        }
    }
    let known: BTreeSet<String> = catalog
        .chapters()
        .iter()
        .flat_map(|chapter| {
            chapter
                .labs()
                .map(|(lab, _)| lab.to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    for lab in labs_mentioned(text) {
        if !known.contains(&lab) {
            problems.push(format!("提到的 Lab {lab} 不存在"));
        }
    }
}

fn check_calls(guide: &str, reference: &Snapshot, practice: &Snapshot, problems: &mut Vec<String>) {
    let crate_names = defined_names(reference);
    let workspace_names = defined_names(practice);
    let mut reported = BTreeSet::new();
    for line in guide.lines() {
        for code in inline_code(line) {
            let Some(call) = code.strip_suffix("()") else {
                continue;
            };
            let name = call.rsplit("::").next().unwrap_or(call);
            let is_identifier =
                !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_');
            if is_identifier
                && crate_names.contains(name)
                && !workspace_names.contains(name)
                && reported.insert(name.to_string())
            {
                problems.push(format!(
                    "指南让学习者调用 `{code}`，但练习目录里没有 `{name}`"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_and_commands_are_found() {
        assert_eq!(
            fractions("完成时 3/3 ✓，首次 0/3；路径 a/b 与 v2/3 不算"),
            [(3, 3), (0, 3)]
        );
        assert_eq!(
            xtask_commands("`cargo xtask test 06 --group executor`（9/9）"),
            [("06".to_string(), Some("executor".to_string()))]
        );
        assert_eq!(
            labs_mentioned("见 Lab 6.3。还有 Lab 7.10 与 Lab 9"),
            BTreeSet::from(["6.3".to_string(), "7.10".to_string()])
        );
    }
}
