//! `LEARNING.md`: the practice workspace's own instructions, generated from the manifest.

use std::fmt::Write as _;

use crate::assemble::crate_path;
use crate::catalog::{Catalog, Chapter, Mode};

pub const FILE_NAME: &str = "LEARNING.md";
/// The chapter guide, copied into the workspace so the learner can read it offline.
pub const GUIDE_FILE_NAME: &str = "CHAPTER.md";

/// Renders the Chinese learning card for `chapter`.
pub fn render(catalog: &Catalog, chapter: &Chapter) -> String {
    let mut out = String::new();
    let id = &chapter.id;
    let _ = writeln!(out, "# 第 {id} 章练习：{}\n", chapter.title);
    let _ = writeln!(out, "- 模式：{}", chapter.mode.label());
    match (chapter.mode, &chapter.previous) {
        (Mode::Observe, _) => {
            let _ = writeln!(
                out,
                "- 内容：已完成的代码，供你运行、预测和有控制地破坏；本章不需要重写任何文件"
            );
        }
        (Mode::Rebuild, Some(previous)) => {
            let _ = writeln!(
                out,
                "- 起点：第 {previous} 章完成时的参考实现，加上第 {id} 章的测试与代码骨架"
            );
            let _ = writeln!(
                out,
                "- 终点：第 {id} 章的每个测试组都变绿，之前各章的测试保持绿色"
            );
        }
        (Mode::Rebuild, None) => {
            let _ = writeln!(
                out,
                "- 起点：空的 pi-course crate，加上第 {id} 章的测试与代码骨架"
            );
            let _ = writeln!(out, "- 终点：第 {id} 章的每个测试组都变绿");
        }
    }
    let _ = writeln!(
        out,
        "- 章节指南：CHAPTER.md（与课程仓库 {}/README.md 相同）",
        chapter.dir()
    );
    if !chapter.edit.is_empty() {
        let _ = writeln!(out, "- 你要编辑的文件：");
        for file in &chapter.edit {
            let _ = writeln!(out, "  - `{}`", crate_path(file));
        }
    }

    if chapter.mode == Mode::Rebuild {
        let _ = writeln!(out, "\n## 按 Lab 推进\n");
        let _ = writeln!(
            out,
            "| Lab | 内容 | 命令 | 完成时 | 第一次运行看到的红色信息 |"
        );
        let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
        for group in &chapter.groups {
            let _ = writeln!(
                out,
                "| {} | {} | `cargo xtask test {id} --group {}` | {n}/{n} ✓ | 含 `{}` 的“尚未实现” panic |",
                group.lab,
                group.summary,
                group.name,
                group.marker,
                n = group.count,
            );
        }
        let _ = writeln!(
            out,
            "\n按表格顺序一个 Lab 一个 Lab 地做：先运行命令，读第一条红色信息，再改代码。"
        );
    } else {
        let _ = writeln!(out, "\n## 先预测，再运行\n");
        let _ = writeln!(out, "1. 读 CHAPTER.md，写下你对输出的预测。");
        let _ = writeln!(
            out,
            "2. 运行演示：`cargo run -p pi-course --example prologue`，对照你的预测。"
        );
        let _ = writeln!(
            out,
            "3. 运行本章测试：`cargo xtask test {id}`，每组都应显示 ✓。"
        );
        for mutation in &chapter.mutations {
            let _ = writeln!(
                out,
                "4. 有控制地破坏：{}（改 `{}`），预测哪个测试组会变红，再运行 `cargo xtask test {id} --group {}` 验证，最后改回来。",
                mutation.description,
                crate_path(&mutation.file),
                mutation.group,
            );
        }
    }

    let _ = writeln!(out, "\n## 什么算“绿”\n");
    let _ = writeln!(
        out,
        "- `cargo xtask test {id}`：本章每组显示 `k/n ✓` 且 k = n，命令退出码为 0。"
    );
    let earlier: Vec<&str> = catalog
        .chain(id)
        .iter()
        .filter(|step| step.id != *id)
        .map(|step| step.id.as_str())
        .collect();
    if !earlier.is_empty() {
        let _ = writeln!(
            out,
            "- 之前各章（{}）的测试保持绿色，例如 `cargo xtask test {}`；`cargo test` 会一次运行全部测试。",
            earlier.join("、"),
            earlier.last().expect("non-empty"),
        );
    }

    let _ = writeln!(out, "\n## 规则\n");
    let _ = writeln!(
        out,
        "- 不要修改 `pi-course/tests/` 下注入的测试；`cargo xtask test` 发现改动会发出警告。"
    );
    let _ = writeln!(out, "- 想从头再来，就用 `practice {id} <新目录>` 生成另一个目录；这里没有 Git 历史，不要尝试恢复提交。");
    let _ = writeln!(out, "- 本目录不含本章的参考答案，也不含讲师的保留测试。");
    out
}
