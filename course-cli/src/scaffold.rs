//! `cargo xtask new-chapter NN slug [--title …]`: the files an author writes for a new rebuild
//! chapter, and nothing else — everything else (the crate root, skeletons, the README's
//! chapter table, workspace manifests) is derived or generated.
//!
//! What it produces already passes the tree check, assembles into a practice workspace whose
//! first red is the one Lab's marker, and meets the guide contract's structure, so an author
//! starts from a chapter that works and replaces its placeholder content.

use std::collections::BTreeMap;
use std::fmt;

use course_runner::ChapterId;

use crate::catalog::{Catalog, MANIFEST, MISTAKES_FILE};
use crate::files::HELD_OUT_DIR;
use crate::paths::RepoPath;

/// The chapter to scaffold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewChapter {
    pub id: ChapterId,
    pub slug: String,
    pub title: String,
}

/// The one group the scaffold starts with.
pub const FIRST_GROUP: &str = "basics";

/// The manifest entry to append and the new files, by repository path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scaffold {
    pub manifest_entry: String,
    pub files: BTreeMap<RepoPath, String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScaffoldError {
    Slug(String),
    Title,
    Exists(ChapterId),
    NotLast { id: ChapterId, last: ChapterId },
}

impl fmt::Display for ScaffoldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScaffoldError::Slug(slug) => write!(
                f,
                "slug `{slug}` 无效：只能用小写字母、数字和 -，并以字母开头，例如 session-store"
            ),
            ScaffoldError::Title => write!(f, "标题不能为空，也不能含有引号或反斜杠"),
            ScaffoldError::Exists(id) => write!(f, "{MANIFEST} 里已经有第 {id} 章"),
            ScaffoldError::NotLast { id, last } => write!(
                f,
                "新章节排在课程最后：第 {id} 章的编号要大于现有的最后一章 {last}"
            ),
        }
    }
}

impl std::error::Error for ScaffoldError {}

fn valid_slug(slug: &str) -> bool {
    slug.starts_with(|c: char| c.is_ascii_lowercase())
        && !slug.ends_with('-')
        && slug
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Scaffolds `new` for a course whose manifest is `catalog`.
pub fn scaffold(catalog: &Catalog, new: &NewChapter) -> Result<Scaffold, ScaffoldError> {
    if !valid_slug(&new.slug) {
        return Err(ScaffoldError::Slug(new.slug.clone()));
    }
    if new.title.trim().is_empty() || new.title.contains(['"', '\\', '\n']) {
        return Err(ScaffoldError::Title);
    }
    if catalog.get(new.id).is_some() {
        return Err(ScaffoldError::Exists(new.id));
    }
    if let Some(last) = catalog.chapters().last() {
        if last.id >= new.id {
            return Err(ScaffoldError::NotLast {
                id: new.id,
                last: last.id,
            });
        }
    }
    let id = new.id;
    let module = new.slug.replace('-', "_");
    let source = format!("src/{module}.rs");
    let target = format!("{id}_{module}");
    let dir = format!("chapters/{id}-{}", new.slug);
    let lab = id.lab(1);
    let title = new.title.trim();

    let manifest_entry = format!(
        r#"
[[chapter]]
id = "{id}"
slug = "{slug}"
title = "{title}"
mode = "rebuild"
files = ["{source}"]
edit = ["{source}"]
labs = [
    {{ group = "{FIRST_GROUP}", tests = 1, summary = "一句话说明这个 Lab 做什么" }},
]
"#,
        slug = new.slug,
    );

    let reference = format!(
        "//! 第 {id} 章：{title}。\n\
         //!\n\
         //! The reference solution. Each `// region: Lab {id_number}.k name` … `// endregion`\n\
         //! is what the learner writes in Lab {id_number}.k; the skeleton stubs it.\n\
         \n\
         /// The answer the first Lab computes.\n\
         pub fn answer() -> u32 {{\n\
         \x20   // region: Lab {lab} answer\n\
         \x20   6 * 7\n\
         \x20   // endregion\n\
         }}\n",
        id_number = id.number(),
    );

    let tests = format!(
        "//! 第 {id} 章验收测试：{title}。每个 `mod` 是一个测试组，第 k 个组是 Lab {id_number}.k。\n\
         \n\
         mod {FIRST_GROUP} {{\n\
         \x20   use pi_course::{module}::answer;\n\
         \n\
         \x20   #[test]\n\
         \x20   fn the_answer_is_forty_two() {{\n\
         \x20       assert_eq!(answer(), 42, \"answer() 必须返回 42\");\n\
         \x20   }}\n\
         }}\n",
        id_number = id.number(),
    );

    let held_out = format!(
        "//! 第 {id} 章保留测试：只在讲师的 verify 里运行，从不进入练习目录。\n\
         \n\
         use pi_course::{module}::answer;\n\
         \n\
         #[test]\n\
         fn the_answer_does_not_change_between_calls() {{\n\
         \x20   assert_eq!(answer(), answer(), \"answer() 每次都返回同一个值\");\n\
         }}\n"
    );

    let mistakes = format!(
        "# 第 {id} 章的错误实现目录：每条是参考实现的一处 find/replace，指定的测试组必须失败，\n\
         # 且失败信息包含 expect。rebuild 章节至少需要 12 条，公开测试要捕获 95% 以上。\n\
         \n\
         [[mistake]]\n\
         name = \"off-by-one\"\n\
         group = \"{FIRST_GROUP}\"\n\
         description = \"算错一位\"\n\
         file = \"{source}\"\n\
         find = \"6 * 7\"\n\
         replace = \"6 * 7 + 1\"\n\
         expect = \"answer() 必须返回 42\"\n"
    );

    let guide = format!(
        "# 第 {id} 章　{title}\n\
         \n\
         一段话：这一章造什么，为什么需要它。\n\
         \n\
         ## 重建卡片\n\
         \n\
         - **模式：** 重建\n\
         - **起终点：** 起点是上一章完成时的参考实现，终点是本章每个测试组都变绿。\n\
         - **教学文件：** `pi-course/{source}`\n\
         - **学习脚手架：** 骨架里每个 Lab 的入口都会 panic。\n\
         - **动手前只需知道：** `answer()` 返回什么。\n\
         - **第一次红灯：** `{lab_marker} answer 尚未实现`\n\
         - **第一步：** 运行 `cargo xtask test {id} --group {FIRST_GROUP}`，应看到 0/1。\n\
         - **聚焦测试：** `pi-course/tests/{target}.rs`\n\
         - **命令：** `cargo xtask test {id}`（完成时 1/1）；新目录用 `practice {id} <新目录>`。\n\
         - **通过证据：** 每组都显示 ✓。先不看答案。\n\
         \n\
         ### Lab {lab} answer\n\
         \n\
         **目标：** 一句话。\n\
         **文件：** `pi-course/{source}`\n\
         **动作：** 写 `answer()`。\n\
         **运行：** `cargo xtask test {id} --group {FIRST_GROUP}`\n\
         **预期：** 1/1 ✓\n\
         \n\
         ## 检查点\n\
         \n\
         > **预测：** 第一次运行时哪个组先红？\n\
         > **答案：** {FIRST_GROUP}，以 {lab_marker} 失败。\n\
         \n\
         ## 与上游 pi 的对照\n\
         \n\
         上游 pi 怎样做，课程在哪里简化或补充。\n\
         \n\
         ## 本章验收\n\
         \n\
         `cargo xtask test {id}` 显示 1/1。\n\
         \n\
         ## 测试没有证明什么\n\
         \n\
         测试覆盖不到的地方。\n\
         \n\
         ## 小结\n\
         \n\
         - 本章的要点。\n",
        lab_marker = lab.marker(),
    );

    let files = BTreeMap::from([
        (RepoPath::new(format!("{dir}/README.md")), guide),
        (RepoPath::new(format!("{dir}/{MISTAKES_FILE}")), mistakes),
        (RepoPath::new(format!("{dir}/{source}")), reference),
        (RepoPath::new(format!("tests/{target}.rs")), tests),
        (
            RepoPath::new(format!("{HELD_OUT_DIR}/{target}.rs")),
            held_out,
        ),
    ]);
    Ok(Scaffold {
        manifest_entry,
        files,
    })
}

/// What to do after scaffolding, for the author (Chinese, one step a line).
pub fn next_steps(new: &NewChapter) -> Vec<String> {
    let id = new.id;
    let dir = format!("chapters/{id}-{}", new.slug);
    vec![
        format!("在 {dir}/src/ 里写参考实现，用 // region: Lab {}.k 名称 … // endregion 标出学习者要写的部分", id.number()),
        format!("在 {MANIFEST} 的新条目里列出 files、edit 和每个 Lab 的测试组（group、tests、summary）"),
        format!("在 tests/ 与 {HELD_OUT_DIR}/ 的同名文件里写测试：每个测试组一个 mod"),
        format!("在 {dir}/{MISTAKES_FILE} 里写至少 12 条错误实现，在 {dir}/README.md 里写指南（见 chapters/STYLE.md）"),
        "运行 cargo xtask codegen 生成骨架和章节表".to_string(),
        format!("运行 cargo xtask verify {id} 证明这一章"),
    ]
}
