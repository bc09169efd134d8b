//! `LEARNING.md`: the practice workspace's own instructions, generated from the manifest and
//! the Lab regions, so it can never disagree with what `verify` proves.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use course_runner::LabId;

use crate::assemble::Snapshot;
use crate::catalog::{Chapter, Kind, PACKAGES_DIR};
use crate::files::FileSet;
use crate::plan::{Start, WorkspacePlan};
use crate::sources::{self, SourceError, Sources};

pub const FILE_NAME: &str = "LEARNING.md";
/// The chapter guide, copied into the workspace so the learner can read it offline.
pub const GUIDE_FILE_NAME: &str = "CHAPTER.md";
/// The tutor protocol every workspace carries (from the workspace base).
pub const TUTOR_FILE_NAME: &str = "AGENT_GUIDE.md";

/// The stub messages of each Lab of one chapter, in file order: what its first red can say.
/// For readers outside an assembly (the book); an assembly asks its [`Sources`].
pub fn stub_messages(
    data: &FileSet,
    chapter: &Chapter,
) -> Result<BTreeMap<LabId, Vec<String>>, SourceError> {
    let parsed = chapter
        .edit()
        .iter()
        .filter(|file| file.is_rust())
        .map(|file| sources::parse(data, &chapter.source(file)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(sources::stub_messages_of(&parsed))
}

/// A package an overlay adds to the workspace, as its own `Cargo.toml` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedPackage {
    pub name: String,
    /// `package.description`: what it is, in Chinese.
    pub description: String,
    /// `package.metadata.pi-course.try`: the command to try it, with a note.
    pub try_it: String,
}

/// The packages the plan carries besides the learner crate, in name order, described by their
/// own manifests in `workspace`. A package without a description still appears, so nothing
/// the learner receives goes unmentioned.
pub fn added_packages(plan: &WorkspacePlan, workspace: &Snapshot) -> Vec<AddedPackage> {
    plan.packages
        .iter()
        .cloned()
        .map(|name| {
            let path = format!("{PACKAGES_DIR}/{name}/Cargo.toml");
            let manifest: toml::Value = workspace
                .get(path.as_str())
                .and_then(|bytes| toml::from_str(&String::from_utf8_lossy(bytes)).ok())
                .unwrap_or(toml::Value::Integer(0));
            let field = |value: Option<&toml::Value>| {
                value
                    .and_then(toml::Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let package = manifest.get("package");
            AddedPackage {
                description: field(package.and_then(|p| p.get("description"))),
                try_it: field(
                    package
                        .and_then(|p| p.get("metadata"))
                        .and_then(|m| m.get("pi-course"))
                        .and_then(|m| m.get("try")),
                ),
                name,
            }
        })
        .collect()
}

/// Renders the Chinese learning card for the plan's workspace, whose files are `workspace`.
pub fn render(
    sources: &Sources,
    plan: &WorkspacePlan,
    workspace: &Snapshot,
) -> Result<String, SourceError> {
    let chapter = plan.chapter;
    let mut out = String::new();
    let id = chapter.id;
    let _ = writeln!(out, "# 第 {id} 章练习：{}\n", chapter.title);
    let _ = writeln!(out, "- 模式：{}", chapter.mode().label());
    match (&chapter.kind, plan.start) {
        (Kind::Observe { shows }, _) => {
            let _ = writeln!(
                out,
                "- 内容：第 {shows} 章完成时的代码加上本章的演示，供你运行、预测和有控制地破坏；本章不需要重写任何文件"
            );
        }
        (Kind::Rebuild { .. }, Start::Reference(previous)) => {
            let _ = writeln!(
                out,
                "- 起点：第 {} 章完成时的参考实现，加上第 {id} 章的测试与代码骨架",
                previous.id
            );
            let _ = writeln!(
                out,
                "- 终点：第 {id} 章的每个测试组都变绿，之前各章的测试保持绿色"
            );
        }
        (Kind::Rebuild { .. }, Start::EmptyCrate) => {
            let _ = writeln!(
                out,
                "- 起点：空的 pi-course crate，加上第 {id} 章的测试与代码骨架"
            );
            let _ = writeln!(out, "- 终点：第 {id} 章的每个测试组都变绿");
        }
    }
    let _ = writeln!(
        out,
        "- 章节指南：{GUIDE_FILE_NAME}（与课程仓库 {} 相同）",
        chapter.guide()
    );
    let _ = writeln!(
        out,
        "- 和编程助手一起学：让它先读 {TUTOR_FILE_NAME}（辅导协议；文末有一段可以直接粘贴的开场提示）"
    );
    if !chapter.edit().is_empty() {
        let _ = writeln!(out, "- 你要编辑的文件：");
        for file in chapter.edit() {
            let _ = writeln!(out, "  - `{}`", file.in_workspace());
        }
    }

    match &chapter.kind {
        Kind::Rebuild { .. } => {
            let messages = sources.stub_messages(chapter)?;
            let _ = writeln!(out, "\n## 按 Lab 推进\n");
            let _ = writeln!(
                out,
                "| Lab | 内容 | 命令 | 完成时 | 开始这个 Lab 时的第一次红灯 |"
            );
            let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
            for (lab, group) in chapter.labs() {
                let first_red = messages
                    .get(&lab)
                    .map(|list| {
                        list.iter()
                            .map(|m| format!("`{m}`"))
                            .collect::<Vec<_>>()
                            .join(" 或 ")
                    })
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "| {lab} | {} | `cargo xtask test {id} --group {}` | {n}/{n} ✓ | {first_red} |",
                    group.summary,
                    group.name,
                    n = group.tests,
                );
            }
            let _ = writeln!(
                out,
                "\n按表格顺序一个 Lab 一个 Lab 地做：先运行命令，读第一条红色信息，再改代码。\
                 “第一次红灯”一栏由课程仓库的讲师检查（`cargo xtask verify`）在“之前的 Lab 都已完成”的状态下逐个证明过。\
                 `cargo xtask watch` 会在你每次保存后自动重跑当前 Lab 的测试组。"
            );
        }
        Kind::Observe { .. } => {
            let _ = writeln!(out, "\n## 先预测，再运行\n");
            let _ = writeln!(out, "1. 读 {GUIDE_FILE_NAME}，写下你对输出的预测。");
            let _ = writeln!(
                out,
                "2. 运行演示：`cargo run -p pi-course --example prologue`，对照你的预测。"
            );
            let _ = writeln!(
                out,
                "3. 运行本章测试：`cargo xtask test {id}`，每组都应显示 ✓。"
            );
            for mistake in &chapter.mistakes {
                let _ = writeln!(
                    out,
                    "4. 有控制地破坏：{}（改 `{}`），预测哪个测试组会变红，再运行 `cargo xtask test {id} --group {}` 验证，最后改回来。",
                    mistake.description,
                    mistake.file.in_workspace(),
                    mistake.group,
                );
            }
        }
    }

    let _ = writeln!(out, "\n## 什么算“绿”\n");
    let _ = writeln!(
        out,
        "- `cargo xtask test {id}`：本章每组显示 `k/n ✓` 且 k = n，命令退出码为 0。"
    );
    let earlier: Vec<String> = plan.carried().map(|step| step.id.to_string()).collect();
    if let Some(last) = earlier.last() {
        let _ = writeln!(
            out,
            "- 之前各章（{}）的测试保持绿色，例如 `cargo xtask test {last}`；`cargo test` 会一次运行全部测试。",
            earlier.join("、"),
        );
    }

    let packages = added_packages(plan, workspace);
    if !packages.is_empty() {
        let _ = writeln!(out, "\n## 工作区里的其它包\n");
        let _ = writeln!(
            out,
            "它们不在 `cargo test` 和 `cargo xtask test` 的构建里，只在你运行它们时才编译，所以不会拖慢红灯。\n"
        );
        for package in &packages {
            let _ = write!(out, "- `crates/{}`：{}", package.name, package.description);
            if !package.try_it.is_empty() {
                let _ = write!(out, "。试试：{}", package.try_it);
            }
            let _ = writeln!(out);
        }
    }

    let _ = writeln!(out, "\n## 规则\n");
    let _ = writeln!(
        out,
        "- 不要修改 `pi-course/tests/` 下注入的测试；改动过的测试不会得到判定，`cargo xtask restore-tests` 可把它们恢复原样（不动你的代码）。"
    );
    let _ = writeln!(
        out,
        "- 想从头再来，就用 `practice {id} <新目录>` 生成另一个目录；这里没有 Git 历史。"
    );
    let _ = writeln!(out, "- 本目录不含本章的参考答案，也不含讲师的保留测试。");
    Ok(out)
}
