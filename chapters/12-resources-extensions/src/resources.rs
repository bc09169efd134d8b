//! Resources: what a project tells the agent before it acts — instructions (`AGENTS.md`),
//! skills (`SKILL.md`) and prompt templates — and the one system section they enter.
//!
//! Invariants:
//! - instructions are read from the root down to the working directory, root first, one file
//!   per directory (`AGENTS.md`, else `CLAUDE.md`), within a byte budget; a cut says so;
//! - a path is compared only after it is canonical, and only component by component;
//! - the catalog holds a skill's name and description, never its body: the body and the files
//!   a skill names are read when the skill is activated, and only from inside its directory;
//! - a template fills each `{{name}}` once, from the arguments given, and refuses a name it
//!   lacks or an argument it does not use;
//! - everything the model should know enters one named system section, in a fixed order.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::coding_tools::Workspace;
use crate::types::{now_ms, SystemMessage};

/// Looked for in every directory, in this order; the first one present is that directory's.
pub const INSTRUCTION_FILES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];
/// Codex's default for project documents: enough for real instructions, small beside a context.
pub const DEFAULT_INSTRUCTION_BUDGET: usize = 32 * 1024;
pub const SKILL_FILE: &str = "SKILL.md";
/// The name of the system section that carries every resource.
pub const RESOURCE_SECTION: &str = "pi-resources";

pub const NOT_UNDER_ROOT: &str = "工作目录不在项目根目录之内";
pub const UNKNOWN_SKILL: &str = "没有这个技能";
pub const SKILL_FILE_ABSOLUTE: &str = "技能文件必须写成相对路径";
pub const SKILL_FILE_OUTSIDE: &str = "技能文件在技能目录之外";

/// A resource that cannot be used. `Display` is the learner-facing message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceError(pub String);

impl fmt::Display for ResourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ResourceError {}

fn unreadable(path: &Path, error: io::Error) -> ResourceError {
    ResourceError(format!("无法读取 {}：{error}", path.display()))
}

fn canonical(path: &Path) -> Result<PathBuf, ResourceError> {
    path.canonicalize().map_err(|error| unreadable(path, error))
}

// ---------------------------------------------------------------------------------------
// Lab 12.1 — project instructions
// ---------------------------------------------------------------------------------------

/// One instruction file as it enters the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionFile {
    /// Relative to the root, `/`-separated: `AGENTS.md`, `crates/pi/CLAUDE.md`.
    pub path: String,
    /// The whole file, or the prefix the budget left room for.
    pub content: String,
    /// Whether `content` is only a prefix of the file.
    pub truncated: bool,
}

/// The instructions of one working directory, root first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Instructions {
    pub files: Vec<InstructionFile>,
    /// Files found after the budget was spent, root first; none of their bytes was kept.
    pub omitted: Vec<String>,
    pub budget: usize,
}

/// Reads the instruction file of every directory from `root` down to `cwd`, root first, and
/// keeps at most `budget` bytes of them in total: the file that does not fit is cut at a
/// character boundary and every later one is omitted.
/// `cwd` must be `root` or lie below it once both are canonical.
pub fn discover_instructions(
    root: &Path,
    cwd: &Path,
    budget: usize,
) -> Result<Instructions, ResourceError> {
    // region: Lab 12.1 discover_instructions
    // Canonical first: a symlinked working directory is judged by where it really is.
    let root = canonical(root)?;
    let cwd = canonical(cwd)?;
    // `strip_prefix` compares whole components: `/p/app-old` is not below `/p/app`.
    let below = cwd.strip_prefix(&root).map_err(|_| {
        ResourceError(format!(
            "{NOT_UNDER_ROOT}：{} 不在 {} 之下",
            cwd.display(),
            root.display()
        ))
    })?;
    let mut directories = vec![root.clone()];
    for part in below.components() {
        let deeper = directories[directories.len() - 1].join(part);
        directories.push(deeper);
    }

    let mut instructions = Instructions {
        budget,
        ..Instructions::default()
    };
    let mut left = budget;
    for directory in directories {
        let Some((path, content)) = read_instruction_file(&directory)? else {
            continue;
        };
        let relative = relative_name(&root, &path);
        if left == 0 {
            instructions.omitted.push(relative);
            continue;
        }
        let kept = prefix_within(&content, left);
        let truncated = kept.len() < content.len();
        // After a cut the budget is spent, even if a few bytes did not fit a whole character.
        left = if truncated { 0 } else { left - kept.len() };
        instructions.files.push(InstructionFile {
            path: relative,
            content: kept.to_string(),
            truncated,
        });
    }
    Ok(instructions)
    // endregion
}

// region: Lab 12.1 answer-only instruction helpers
/// The first of [`INSTRUCTION_FILES`] present in `directory`, with its text.
fn read_instruction_file(directory: &Path) -> Result<Option<(PathBuf, String)>, ResourceError> {
    for name in INSTRUCTION_FILES {
        let path = directory.join(name);
        match fs::read_to_string(&path) {
            Ok(content) => return Ok(Some((path, content))),
            Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(unreadable(&path, error)),
        }
    }
    Ok(None)
}

/// The longest prefix of `text` within `limit` bytes that ends on a character boundary.
fn prefix_within(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let end = (0..=limit)
        .rev()
        .find(|&index| text.is_char_boundary(index))
        .unwrap_or(0);
    &text[..end]
}

fn relative_name(root: &Path, path: &Path) -> String {
    let relative = path.strip_prefix(root).unwrap_or(path);
    relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}
// endregion

// ---------------------------------------------------------------------------------------
// Lab 12.2 — skills: front matter and the catalog
// ---------------------------------------------------------------------------------------

/// The two keys the course reads from a `SKILL.md` front matter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontMatter {
    pub name: String,
    pub description: String,
}

/// A front matter the subset parser refuses, with the 1-based line it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontMatterError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for FrontMatterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "第 {} 行：{}", self.line, self.message)
    }
}

impl std::error::Error for FrontMatterError {}

pub const FENCE: &str = "---";

/// Parses the course's front matter subset and returns it with the body after it.
///
/// The subset: a first line `---`, then `key: value` lines up to the next `---`; blank lines
/// and `#` comments are skipped; a value may be wrapped in one pair of `"` or `'`; keys other
/// than `name` and `description` are ignored. A repeated key, a line without `:`, a YAML block
/// scalar (`|`, `>`), an empty or missing `name`/`description` and a missing closing fence are
/// errors naming their line.
pub fn parse_front_matter(text: &str) -> Result<(FrontMatter, &str), FrontMatterError> {
    // region: Lab 12.2 parse_front_matter
    let error = |line: usize, message: String| FrontMatterError { line, message };
    let mut lines = text.split_inclusive('\n');
    let mut consumed = 0;
    let mut next_line = |consumed: &mut usize| {
        lines.next().map(|line| {
            *consumed += line.len();
            line.trim_end_matches(['\n', '\r'])
        })
    };
    if next_line(&mut consumed) != Some(FENCE) {
        return Err(error(1, "SKILL.md 必须以一行 --- 开始 front matter".into()));
    }
    let mut values: BTreeMap<&str, String> = BTreeMap::new();
    let mut number = 1;
    let closing = loop {
        number += 1;
        let Some(line) = next_line(&mut consumed) else {
            return Err(error(number, "front matter 缺少结束的 ---".into()));
        };
        let trimmed = line.trim();
        if trimmed == FENCE {
            break number;
        }
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(error(
                number,
                format!("应为 key: value，实际是 {trimmed:?}"),
            ));
        };
        let key = key.trim();
        let value = unquote(value.trim());
        if matches!(value, "|" | "|-" | "|+" | ">" | ">-" | ">+") {
            return Err(error(
                number,
                format!("{key} 用了 YAML 块标量，课程的解析器只读单行值"),
            ));
        }
        if values.insert(key, value.to_string()).is_some() {
            return Err(error(number, format!("键 {key} 重复出现")));
        }
    };
    let mut take = |key: &str| match values.remove(key) {
        Some(value) if !value.is_empty() => Ok(value),
        Some(_) => Err(error(closing, format!("{key} 不能为空"))),
        None => Err(error(closing, format!("front matter 缺少 {key}"))),
    };
    let front_matter = FrontMatter {
        name: take("name")?,
        description: take("description")?,
    };
    Ok((front_matter, &text[consumed..]))
    // endregion
}

// region: Lab 12.2 answer-only unquote
/// `"x"` and `'x'` become `x`; anything else is returned as it is.
fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(quote) && value.ends_with(quote) {
            return &value[1..value.len() - 1];
        }
    }
    value
}
// endregion

/// What the catalog knows about a skill: enough to list it, not its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// The skill's canonical directory; everything it may read lies inside.
    pub dir: PathBuf,
}

/// A `SKILL.md` that could not join the catalog; discovery goes on without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillProblem {
    pub path: PathBuf,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SkillCatalog {
    /// Sorted by name.
    pub skills: Vec<Skill>,
    /// In discovery order: roots as given, directories by name.
    pub problems: Vec<SkillProblem>,
}

impl SkillCatalog {
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|skill| skill.name == name)
    }
}

/// Finds `<root>/<dir>/SKILL.md` for every root in order. A name seen in an earlier root wins;
/// a missing root is skipped; a bad file becomes a problem, not an error.
pub fn discover_skills(roots: &[PathBuf]) -> SkillCatalog {
    // region: Lab 12.2 discover_skills
    let mut catalog = SkillCatalog::default();
    for root in roots {
        let Ok(entries) = fs::read_dir(root) else {
            continue;
        };
        // The order of `read_dir` is whatever the file system gives: sort it.
        let mut directories: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.join(SKILL_FILE).is_file())
            .collect();
        directories.sort();
        for directory in directories {
            let path = directory.join(SKILL_FILE);
            let parsed = fs::read_to_string(&path)
                .map_err(|error| error.to_string())
                .and_then(|text| {
                    parse_front_matter(&text)
                        .map(|(front_matter, _body)| front_matter)
                        .map_err(|error| error.to_string())
                });
            let front_matter = match parsed {
                Ok(front_matter) => front_matter,
                Err(message) => {
                    catalog.problems.push(SkillProblem { path, message });
                    continue;
                }
            };
            if catalog.get(&front_matter.name).is_some() {
                continue;
            }
            let Ok(dir) = directory.canonicalize() else {
                continue;
            };
            catalog.skills.push(Skill {
                name: front_matter.name,
                description: front_matter.description,
                dir,
            });
        }
    }
    catalog
        .skills
        .sort_by(|left, right| left.name.cmp(&right.name));
    catalog
    // endregion
}

// ---------------------------------------------------------------------------------------
// Lab 12.3 — activation: the body, read late, and files from inside the skill
// ---------------------------------------------------------------------------------------

/// A file a skill asked for, read at activation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    /// As requested.
    pub path: String,
    /// Canonical.
    pub source: PathBuf,
    pub content: String,
}

/// A skill in use: its body and the files it asked for, each with the real path it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivatedSkill {
    pub name: String,
    /// The canonical `SKILL.md`.
    pub source: PathBuf,
    pub body: String,
    pub files: Vec<SkillFile>,
}

/// Reads the body of skill `name` now, and each of `files` relative to the skill's directory.
/// A file must be named by a relative path and really lie inside the directory: `..` that
/// leaves it, an absolute path and a symlink that points out are refused.
pub fn activate_skill(
    catalog: &SkillCatalog,
    name: &str,
    files: &[&str],
) -> Result<ActivatedSkill, ResourceError> {
    // region: Lab 12.3 activate_skill
    let skill = catalog
        .get(name)
        .ok_or_else(|| ResourceError(format!("{UNKNOWN_SKILL}：{name}")))?;
    let workspace = Workspace::new(&skill.dir).map_err(|error| ResourceError(error.message))?;
    let inside = |path: &str| {
        if Path::new(path).is_absolute() {
            return Err(ResourceError(format!("{SKILL_FILE_ABSOLUTE}：{path}")));
        }
        // Chapter 08's guard: lexical `..` first, then the real path of every symlink.
        workspace
            .resolve(path)
            .map_err(|_| ResourceError(format!("{SKILL_FILE_OUTSIDE}：{path}")))
    };

    let source = inside(SKILL_FILE)?;
    let text = fs::read_to_string(&source).map_err(|error| unreadable(&source, error))?;
    let (_, body) = parse_front_matter(&text)
        .map_err(|error| ResourceError(format!("{}：{error}", source.display())))?;
    let body = body.to_string();

    let mut read = Vec::with_capacity(files.len());
    for &path in files {
        let source = inside(path)?;
        let content = fs::read_to_string(&source).map_err(|error| unreadable(&source, error))?;
        read.push(SkillFile {
            path: path.to_string(),
            source,
            content,
        });
    }
    Ok(ActivatedSkill {
        name: skill.name.clone(),
        source,
        body,
        files: read,
    })
    // endregion
}

// ---------------------------------------------------------------------------------------
// Lab 12.4 — templates and the resource section
// ---------------------------------------------------------------------------------------

/// Why a template cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// `{{name}}` appears but no argument `name` was given.
    Missing(String),
    /// An argument no placeholder uses: most likely a typo on one side.
    Unused(String),
    /// `{{` without a closing `}}`, or a name that is not `[A-Za-z0-9_-]+`.
    Malformed(String),
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateError::Missing(name) => write!(f, "模板变量 {name} 没有提供值"),
            TemplateError::Unused(name) => write!(f, "参数 {name} 在模板里没有用到"),
            TemplateError::Malformed(near) => write!(f, "模板占位写法不对：{near}"),
        }
    }
}

impl std::error::Error for TemplateError {}

fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Replaces every `{{name}}` with `arguments[name]` in one left-to-right pass: a value is
/// inserted as it is and never scanned again.
pub fn render_template(
    template: &str,
    arguments: &BTreeMap<String, String>,
) -> Result<String, TemplateError> {
    // region: Lab 12.4 render_template
    let mut rendered = String::with_capacity(template.len());
    let mut used = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        rendered.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(TemplateError::Malformed(rest[start..].to_string()));
        };
        let name = &after[..end];
        if !is_variable_name(name) {
            return Err(TemplateError::Malformed(format!("{{{{{name}}}}}")));
        }
        let value = arguments
            .get(name)
            .ok_or_else(|| TemplateError::Missing(name.to_string()))?;
        rendered.push_str(value);
        used.push(name);
        rest = &after[end + 2..];
    }
    rendered.push_str(rest);
    if let Some(unused) = arguments.keys().find(|key| !used.contains(&key.as_str())) {
        return Err(TemplateError::Unused(unused.clone()));
    }
    Ok(rendered)
    // endregion
}

/// The text of the resource section: instructions root first, then the skill list by name,
/// then each activated skill by name. Empty parts are left out; no resource at all is `""`.
pub fn format_resource_section(
    instructions: &Instructions,
    catalog: &SkillCatalog,
    activated: &[ActivatedSkill],
) -> String {
    // region: Lab 12.4 format_resource_section
    let mut parts = Vec::new();
    for file in &instructions.files {
        let mut part = format!("## {}\n\n{}", file.path, file.content.trim_end());
        if file.truncated {
            part.push_str(&format!(
                "\n\n[说明文件超出 {} 字节的预算，后面的内容已截断]",
                instructions.budget
            ));
        }
        parts.push(part);
    }
    if !instructions.omitted.is_empty() {
        parts.push(format!(
            "[预算已用完，这些说明文件没有载入：{}]",
            instructions.omitted.join("、")
        ));
    }
    if !catalog.skills.is_empty() {
        let lines: Vec<String> = catalog
            .skills
            .iter()
            .map(|skill| format!("- {}: {}", skill.name, skill.description))
            .collect();
        parts.push(format!("## Skills\n\n{}", lines.join("\n")));
    }
    let mut activated: Vec<&ActivatedSkill> = activated.iter().collect();
    activated.sort_by(|left, right| left.name.cmp(&right.name));
    for skill in activated {
        let mut part = format!("## Skill {}\n\n{}", skill.name, skill.body.trim());
        for file in &skill.files {
            part.push_str(&format!(
                "\n\n### {}\n\n{}",
                file.path,
                file.content.trim_end()
            ));
        }
        parts.push(part);
    }
    parts.join("\n\n")
    // endregion
}

/// The system patch that puts `section` under [`RESOURCE_SECTION`]. An empty section is a
/// `null`, which removes an earlier resource section instead of leaving a stale one.
pub fn resource_patch(section: &str) -> SystemMessage {
    // region: Lab 12.4 resource_patch
    let value = if section.is_empty() {
        Value::Null
    } else {
        Value::String(section.to_string())
    };
    let mut sections = Map::new();
    sections.insert(RESOURCE_SECTION.to_string(), value);
    SystemMessage {
        content: String::new(),
        sections: Some(sections),
        timestamp: now_ms(),
    }
    // endregion
}
