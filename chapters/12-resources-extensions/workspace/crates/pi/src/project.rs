//! What a project tells pi, read with the learner's chapter 12 code: `AGENTS.md` (or
//! `CLAUDE.md`) from the repository root down to the working directory, skills from the
//! project's and the user's skill directories, and prompt templates for `/name` lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pi_course::resources::{
    activate_skill, discover_instructions, discover_skills, format_resource_section,
    render_template, Instructions, SkillCatalog, DEFAULT_INSTRUCTION_BUDGET,
};
use pi_course::tool::{
    field, object_schema, string_value, SharedTool, Tool, ToolError, ToolOutput,
};

/// Where the project's own resources live, below the repository root.
pub const PROJECT_DIR: &str = ".pi";

pub const SKILL_TOOL_DESCRIPTION: &str = "Load the full instructions of one skill listed in the \
     system prompt, by its name. Use it before a task the skill describes.";

/// The resources of one working directory, read once when pi starts.
pub struct Project {
    /// The text of the `pi-resources` section; empty when the project has no resources.
    pub section: String,
    pub catalog: SkillCatalog,
    /// One line per `SKILL.md` that could not be read, for stderr.
    pub warnings: Vec<String>,
    prompts: PathBuf,
}

/// The nearest directory from `cwd` upwards that holds `.git`, or `cwd` itself: instructions
/// are read from there down, never from above the repository.
pub fn repository_root(cwd: &Path) -> PathBuf {
    cwd.ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(cwd)
        .to_path_buf()
}

impl Project {
    /// Reads instructions and the skill catalog for `cwd`; `home` adds the user's skills.
    pub fn load(cwd: &Path, home: Option<&Path>) -> Result<Project, String> {
        let root = repository_root(cwd);
        let instructions = discover_instructions(&root, cwd, DEFAULT_INSTRUCTION_BUDGET)
            .map_err(|error| format!("读不了项目说明：{error}"))?;
        // The project's skills come first: a name it defines wins over the user's.
        let mut roots = vec![root.join(PROJECT_DIR).join("skills")];
        if let Some(home) = home {
            let user = home.join(PROJECT_DIR).join("skills");
            if !same_directory(&user, &roots[0]) {
                roots.push(user);
            }
        }
        let catalog = discover_skills(&roots);
        let warnings = catalog
            .problems
            .iter()
            .map(|problem| format!("跳过技能 {}：{}", problem.path.display(), problem.message))
            .collect();
        let mut project = Project {
            section: String::new(),
            catalog,
            warnings,
            prompts: root.join(PROJECT_DIR).join("prompts"),
        };
        project.section = project.render(&instructions);
        Ok(project)
    }

    fn render(&self, instructions: &Instructions) -> String {
        format_resource_section(instructions, &self.catalog, &[])
    }

    /// The `skill` tool, or `None` when there is no skill to load.
    pub fn skill_tool(&self) -> Option<SharedTool> {
        if self.catalog.skills.is_empty() {
            return None;
        }
        let catalog = self.catalog.clone();
        let schema = object_schema((field("name", string_value()),));
        let tool = Tool::new(
            "skill",
            SKILL_TOOL_DESCRIPTION,
            schema,
            move |(name,): (String,), _context| {
                // Read now, not at start-up: the body enters the context only when used.
                let activated = activate_skill(&catalog, &name, &[]);
                async move {
                    let skill = activated.map_err(|error| ToolError::new(error.to_string()))?;
                    Ok(ToolOutput::text(skill.body.trim()))
                }
            },
        );
        Some(tool.shared())
    }

    /// Expands a `/name key=value …` line with the template `.pi/prompts/name.md`; any other
    /// line is returned as it is.
    pub fn expand(&self, line: &str) -> Result<String, String> {
        let Some(command) = line.trim().strip_prefix('/') else {
            return Ok(line.to_string());
        };
        let mut words = command.split_whitespace();
        let name = words.next().unwrap_or_default();
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(format!("模板名不合法：/{name}"));
        }
        let mut arguments = BTreeMap::new();
        for word in words {
            let Some((key, value)) = word.split_once('=') else {
                return Err(format!("模板参数应写成 名字=值：{word}"));
            };
            arguments.insert(key.to_string(), value.to_string());
        }
        let path = self.prompts.join(format!("{name}.md"));
        let template = std::fs::read_to_string(&path)
            .map_err(|error| format!("读不了模板 {}：{error}", path.display()))?;
        render_template(&template, &arguments).map_err(|error| format!("/{name}：{error}"))
    }
}

fn same_directory(left: &Path, right: &Path) -> bool {
    match (left.canonicalize(), right.canonicalize()) {
        (Ok(left), Ok(right)) => left == right,
        _ => left == right,
    }
}
