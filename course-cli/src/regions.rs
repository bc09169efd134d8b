//! Lab regions: the reference source marks what the learner writes, and every other view of
//! the file — the clean reference, the skeleton, the state "Labs before k solved" — is a pure
//! function of it.
//!
//! ```text
//! pub fn string_value() -> Validator<String> {
//!     // region: Lab 6.1 string_value            ← the learner writes these lines
//!     Validator::new(…)
//!     // endregion
//! }
//! // region: Lab 6.3 answer-only failed_result  ← gone from the skeleton
//! // stub: if cancelled { todo!() }             ← custom stub, right after `// region:`
//! // skeleton: #[allow(dead_code)]              ← a line only the skeleton has
//! ```
//!
//! A region may hold another (a later Lab's part of an earlier Lab's function): the inner one
//! only matters once the outer one is solved.
//!
//! The comment style is rust-analyzer's folding regions, so editors fold them and the
//! reference stays ordinary, readable Rust. A region's default stub is
//! `panic!("Lab N.k <name> 尚未实现")`; `todo!()` in a custom stub becomes that panic. The
//! marker text is derived here from the Lab number, never typed by an author.

use std::collections::BTreeSet;
use std::fmt;

use course_runner::LabId;

const REGION: &str = "// region:";
const END: &str = "// endregion";
const STUB: &str = "// stub:";
const SKELETON: &str = "// skeleton:";
const ANSWER_ONLY: &str = "answer-only";

/// One Lab region of a source file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    pub lab: LabId,
    pub name: String,
    /// Removed from the skeleton instead of stubbed.
    pub answer_only: bool,
    /// 1-based line of the `// region:` marker.
    pub line: usize,
    indent: String,
    /// Custom stub lines (`// stub:`), empty for the default panic.
    stub: Vec<String>,
    body: Vec<Line>,
}

impl Region {
    /// `Lab 6.1 string_value 尚未实现`: what this region's stub panics with.
    pub fn stub_message(&self) -> String {
        format!("{} {} 尚未实现", self.lab.marker(), self.name)
    }

    /// The reference lines the learner writes, nested markers stripped.
    pub fn body(&self) -> Vec<String> {
        let mut out = Vec::new();
        render_lines(&self.body, &|_| true, false, &mut out);
        out
    }

    /// Regions nested in this one.
    pub fn nested(&self) -> impl Iterator<Item = &Region> {
        self.body.iter().filter_map(|line| match line {
            Line::Region(region) => Some(region),
            _ => None,
        })
    }

    /// Whether the skeleton's stub panics with this region's marker somewhere.
    pub fn stub_panics(&self) -> bool {
        !self.answer_only
            && (self.stub.is_empty() || self.stub.iter().any(|l| l.contains("todo!()")))
    }

    fn stub_lines(&self) -> Vec<String> {
        let panic = format!("panic!(\"{}\")", self.stub_message());
        if self.answer_only {
            Vec::new()
        } else if self.stub.is_empty() {
            vec![format!("{}{panic}", self.indent)]
        } else {
            self.stub
                .iter()
                .map(|code| format!("{}{}", self.indent, code.replace("todo!()", &panic)))
                .collect()
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    Plain(String),
    SkeletonOnly(String),
    Region(Region),
}

/// A reference source split into plain lines, skeleton-only lines and Lab regions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionSource {
    lines: Vec<Line>,
    trailing_newline: bool,
}

/// Why a source's markers cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionError {
    pub line: usize,
    pub problem: String,
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "第 {} 行：{}", self.line, self.problem)
    }
}

impl std::error::Error for RegionError {}

fn error<T>(line: usize, problem: impl Into<String>) -> Result<T, RegionError> {
    Err(RegionError {
        line,
        problem: problem.into(),
    })
}

/// The marker comment a trimmed line is, if any.
fn is_marker(trimmed: &str) -> bool {
    [REGION, END, STUB, SKELETON]
        .iter()
        .any(|marker| trimmed.starts_with(marker))
}

impl RegionSource {
    pub fn parse(text: &str) -> Result<Self, RegionError> {
        let mut lines = Vec::new();
        // Regions still open, outermost first.
        let mut open: Vec<Region> = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let number = index + 1;
            let trimmed = raw.trim_start();
            let indent = raw[..raw.len() - trimmed.len()].to_string();
            let line = if let Some(header) = trimmed.strip_prefix(REGION) {
                open.push(parse_header(header.trim(), number, indent)?);
                continue;
            } else if trimmed.starts_with(END) {
                if trimmed != END {
                    return error(number, "// endregion 后面不能再写内容");
                }
                let Some(region) = open.pop() else {
                    return error(number, "// endregion 没有对应的 // region:");
                };
                Line::Region(region)
            } else if let Some(code) = trimmed.strip_prefix(STUB) {
                match open.last_mut() {
                    Some(region) if region.body.is_empty() && !region.answer_only => {
                        region
                            .stub
                            .push(code.strip_prefix(' ').unwrap_or(code).to_string());
                        continue;
                    }
                    Some(_) => {
                        return error(
                            number,
                            "// stub: 只能紧跟在 // region: 之后，且不能用于 answer-only 区域",
                        )
                    }
                    None => return error(number, "// stub: 必须写在区域里"),
                }
            } else if let Some(code) = trimmed.strip_prefix(SKELETON) {
                if !open.is_empty() {
                    return error(number, "// skeleton: 不能写在区域里");
                }
                let code = code.strip_prefix(' ').unwrap_or(code);
                Line::SkeletonOnly(format!("{indent}{code}"))
            } else {
                Line::Plain(raw.to_string())
            };
            match open.last_mut() {
                Some(region) => region.body.push(line),
                None => lines.push(line),
            }
        }
        if let Some(region) = open.last() {
            return error(region.line, "区域没有以 // endregion 结束");
        }
        Ok(RegionSource {
            lines,
            trailing_newline: text.ends_with('\n'),
        })
    }

    /// Every region, nested ones included, in source order.
    pub fn regions(&self) -> Vec<&Region> {
        fn collect<'a>(lines: &'a [Line], into: &mut Vec<&'a Region>) {
            for line in lines {
                if let Line::Region(region) = line {
                    into.push(region);
                    collect(&region.body, into);
                }
            }
        }
        let mut all = Vec::new();
        collect(&self.lines, &mut all);
        all
    }

    /// Labs that own at least one region here.
    pub fn labs(&self) -> BTreeSet<LabId> {
        self.regions()
            .into_iter()
            .map(|region| region.lab)
            .collect()
    }

    /// Whether the file has any marker at all.
    pub fn has_markers(&self) -> bool {
        self.lines
            .iter()
            .any(|line| !matches!(line, Line::Plain(_)))
    }

    /// The finished code with every marker line removed: what a later chapter starts from.
    pub fn reference(&self) -> String {
        self.render(|_| true, false)
    }

    /// The learner's file: regions of Labs for which `solved` holds keep their reference
    /// body, the others become stubs (answer-only ones vanish); skeleton-only lines appear.
    pub fn skeleton(&self, solved: impl Fn(LabId) -> bool) -> String {
        self.render(solved, true)
    }

    /// The file a learner edits: [`skeleton`](Self::skeleton) plus, after the module docs, an
    /// `allow` for what stays unused until every Lab is done — otherwise the first build
    /// drowns the Lab marker in warnings.
    pub fn learner_file(&self, solved: impl Fn(LabId) -> bool) -> String {
        let skeleton = self.skeleton(solved);
        let mut lines: Vec<&str> = skeleton.lines().collect();
        let docs_end = lines
            .iter()
            .position(|line| !line.starts_with("//!"))
            .unwrap_or(lines.len());
        let allow = [
            "",
            "// Until every Lab is done, some imports, parameters (and their `mut`) and helpers are unused.",
            "#![allow(unused_imports, unused_variables, unused_mut, dead_code)]",
        ];
        let at_start = docs_end == 0;
        let insert: &[&str] = if at_start { &allow[1..] } else { &allow };
        lines.splice(docs_end..docs_end, insert.iter().copied());
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }

    fn render(&self, solved: impl Fn(LabId) -> bool, skeleton: bool) -> String {
        let mut out: Vec<String> = Vec::new();
        render_lines(&self.lines, &solved, skeleton, &mut out);
        if skeleton {
            // A vanished item leaves the blank lines that framed it; keep rustfmt's one.
            out.dedup_by(|next, previous| next.trim().is_empty() && previous.trim().is_empty());
            let closes_after_blank: Vec<bool> = (0..out.len())
                .map(|i| {
                    out[i].trim().is_empty()
                        && out
                            .get(i + 1)
                            .is_some_and(|n| n.trim_start().starts_with('}'))
                })
                .collect();
            let mut index = 0;
            out.retain(|_| {
                index += 1;
                !closes_after_blank[index - 1]
            });
            while out.last().is_some_and(|line| line.trim().is_empty()) {
                out.pop();
            }
        }
        let mut text = out.join("\n");
        if self.trailing_newline {
            text.push('\n');
        }
        text
    }
}

fn render_lines(
    lines: &[Line],
    solved: &dyn Fn(LabId) -> bool,
    skeleton: bool,
    out: &mut Vec<String>,
) {
    for line in lines {
        match line {
            Line::Plain(text) => out.push(text.clone()),
            Line::SkeletonOnly(text) if skeleton => out.push(text.clone()),
            Line::SkeletonOnly(_) => {}
            Line::Region(region) if !skeleton || solved(region.lab) => {
                render_lines(&region.body, solved, skeleton, out)
            }
            Line::Region(region) => out.extend(region.stub_lines()),
        }
    }
}

fn parse_header(header: &str, line: usize, indent: String) -> Result<Region, RegionError> {
    let Some(rest) = header.strip_prefix("Lab ") else {
        return error(line, "区域标记应写成 // region: Lab N.k 名称");
    };
    let (lab, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let lab: LabId = lab
        .parse()
        .map_err(|e: course_runner::IdError| RegionError {
            line,
            problem: e.to_string(),
        })?;
    let rest = rest.trim();
    let (answer_only, name) = match rest.strip_prefix(ANSWER_ONLY) {
        Some(name) => (true, name.trim()),
        None => (false, rest),
    };
    if name.is_empty() {
        return error(
            line,
            "区域需要一个名称，例如 // region: Lab 6.1 string_value",
        );
    }
    if name.contains(['"', '\\', '{', '}']) {
        return error(
            line,
            "区域名称里不能有引号、反斜杠或花括号（它会进入 panic! 消息）",
        );
    }
    Ok(Region {
        lab,
        name: name.to_string(),
        answer_only,
        line,
        indent,
        stub: Vec::new(),
        body: Vec::new(),
    })
}

/// Lines of `text` that look like region markers: a non-region file must have none.
pub fn marker_lines(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| is_marker(line.trim_start()))
        .map(|(index, _)| index + 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "\
use std::fmt;
// skeleton: #[allow(dead_code)]
pub struct Registry {
    tools: Vec<String>,
}

pub fn get(name: &str) -> bool {
    // region: Lab 6.2 get
    lookup(name)
    // endregion
}

// region: Lab 6.2 answer-only lookup
fn lookup(name: &str) -> bool {
    name == \"echo\"
}
// endregion

pub async fn run(cancelled: bool) -> u8 {
    // region: Lab 6.3 cancel check
    // stub: if cancelled { todo!() }
    if cancelled {
        return 0;
    }
    // endregion
    1
}

pub fn both() -> u8 {
    // region: Lab 6.2 outer
    let base = 1;
    // region: Lab 6.3 inner
    // stub: let extra = 0;
    let extra = 2;
    // endregion
    base + extra
    // endregion
}
";

    #[test]
    fn reference_strips_every_marker() {
        let source = RegionSource::parse(SOURCE).unwrap();
        let reference = source.reference();
        assert!(!reference.contains("// region"), "{reference}");
        assert!(!reference.contains("// stub"), "{reference}");
        assert!(!reference.contains("#[allow(dead_code)]"), "{reference}");
        assert!(reference.contains("    lookup(name)\n"), "{reference}");
        assert!(reference.ends_with("    base + extra\n}\n"), "{reference}");
    }

    #[test]
    fn skeleton_stubs_unsolved_labs_with_derived_markers() {
        let source = RegionSource::parse(SOURCE).unwrap();
        let skeleton = source.skeleton(|_| false);
        assert!(
            skeleton.contains("#[allow(dead_code)]\npub struct"),
            "{skeleton}"
        );
        assert_eq!(source.regions().len(), 5, "nested regions are listed too");
        assert!(
            skeleton.contains("pub fn both() -> u8 {\n    panic!(\"Lab 6.2 outer 尚未实现\")\n}"),
            "{skeleton}"
        );
        assert!(
            skeleton.contains(
                "pub fn get(name: &str) -> bool {\n    panic!(\"Lab 6.2 get 尚未实现\")\n}"
            ),
            "{skeleton}"
        );
        assert!(
            !skeleton.contains("fn lookup"),
            "answer-only vanishes: {skeleton}"
        );
        assert!(
            skeleton.contains(
                "    if cancelled { panic!(\"Lab 6.3 cancel check 尚未实现\") }\n    1\n"
            ),
            "{skeleton}"
        );
    }

    #[test]
    fn solved_labs_keep_their_reference_body() {
        let source = RegionSource::parse(SOURCE).unwrap();
        let six_two: LabId = "6.2".parse().unwrap();
        let state = source.skeleton(|lab| lab < six_two.chapter.lab(3));
        assert!(state.contains("    lookup(name)\n"), "{state}");
        assert!(state.contains("fn lookup"), "{state}");
        assert!(state.contains("Lab 6.3 cancel check 尚未实现"), "{state}");
        assert!(
            state.contains("    let base = 1;\n    let extra = 0;\n    base + extra\n"),
            "an open inner region inside a solved outer one is stubbed: {state}"
        );
        assert!(source
            .reference()
            .contains("    let extra = 2;\n    base + extra\n"));
        assert_eq!(
            source
                .labs()
                .into_iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>(),
            ["6.2", "6.3"]
        );
    }

    #[test]
    fn malformed_markers_are_refused_with_their_line() {
        let cases = [
            (
                "// region: Lab 6.1 a\n// region: Lab 6.2 b\n// endregion\n",
                1,
            ),
            ("// endregion\n", 1),
            ("x\n// region: Lab 6.1 open\n", 2),
            ("// region: Lab six a\n// endregion\n", 1),
            ("// region: Lab 6.1\n// endregion\n", 1),
            (
                "// region: Lab 6.1 a\nbody\n// stub: late\n// endregion\n",
                3,
            ),
            ("// region: Lab 6.1 a\n// skeleton: x\n// endregion\n", 2),
            ("// region: Lab 6.1 say \"hi\"\n// endregion\n", 1),
        ];
        for (text, line) in cases {
            let error = RegionSource::parse(text).expect_err(text);
            assert_eq!(error.line, line, "{text:?}: {error}");
        }
    }

    #[test]
    fn marker_lines_are_found_in_plain_files() {
        assert_eq!(marker_lines("a\n  // region: x\n// endregion\n"), [2, 3]);
        assert!(marker_lines("// regional note\n").is_empty());
    }
}
