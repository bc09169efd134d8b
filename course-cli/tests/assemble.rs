//! Pure assembly over a small fixture course: course order, Lab regions turned into skeletons
//! and "solved before" states, answer-free practice, stamps, held-out isolation, mistakes and
//! the typed manifest/tree check.

use course_cli::assemble::{self, Snapshot};
use course_cli::catalog::{Catalog, CatalogError, ChapterIdError, Problem};
use course_cli::files::FileSet;
use course_cli::handout::handout;
use course_cli::paths::{RepoPath, WorkspacePath};
use course_cli::plan::{Solved, Start, WorkspacePlan};
use course_cli::runner::{content_hash, ChapterId, LabId, Stamp, STAMP_FILE};
use course_cli::sources::Sources;

const MANIFEST: &str = r#"
format = 1

[[chapter]]
id = "00"
slug = "zero"
title = "序章"
mode = "observe"
shows = "02"
files = ["src/zero.rs"]
groups = [{ group = "tour", tests = 1, summary = "看一看" }]

[[chapter]]
id = "01"
slug = "one"
title = "第一章"
mode = "rebuild"
files = ["src/one.rs"]
edit = ["src/one.rs"]
labs = [{ group = "alpha", tests = 1, summary = "甲" }]

[[chapter]]
id = "02"
slug = "two"
title = "第二章"
mode = "rebuild"
files = ["src/two.rs"]
edit = ["src/two.rs"]
labs = [
    { group = "alpha", tests = 2, summary = "甲" },
    { group = "beta", tests = 1, summary = "乙" },
]
"#;

const TWO: &str = "\
//! Chapter two.

pub fn first() -> u32 {
    // region: Lab 2.1 first
    helper() + 40
    // endregion
}

// region: Lab 2.1 answer-only helper
fn helper() -> u32 {
    2
}
// endregion

pub fn second() -> u32 {
    // region: Lab 2.2 second
    first() * 2
    // endregion
}
";

const BASE_MANIFEST: &str = "[workspace]\nmembers = [\"pi-course\", \"xtask\"]\n";

const MISTAKES: &str = r#"
[[mistake]]
name = "off-by-one"
group = "alpha"
description = "差一"
file = "src/two.rs"
find = "helper() + 40"
replace = "helper() + 41"
expect = "first 必须是 42"
"#;

fn put(files: &mut FileSet, path: &str, content: &str) {
    files.insert(RepoPath::new(path), content.as_bytes().to_vec());
}

fn fixture() -> FileSet {
    let mut files = FileSet::new();
    put(&mut files, "chapters/course.toml", MANIFEST);
    put(&mut files, "chapters/_crate/Cargo.toml", BASE_MANIFEST);
    put(&mut files, "chapters/_crate/Cargo.lock", "# lock\n");
    put(&mut files, "chapters/_crate/gitignore", "target/\n");
    put(
        &mut files,
        "chapters/_crate/pi-course/src/lib.rs",
        "// base\n",
    );
    put(&mut files, "course-cli/runner/Cargo.toml", "[package]\n");
    put(&mut files, "course-cli/runner/src/lib.rs", "// runner\n");
    for (id, slug) in [("00", "zero"), ("01", "one"), ("02", "two")] {
        let dir = format!("chapters/{id}-{slug}");
        put(
            &mut files,
            &format!("{dir}/README.md"),
            &format!("# guide {id}\n"),
        );
        put(
            &mut files,
            &format!("tests/{id}_{slug}.rs"),
            &format!("// tests {id}\n"),
        );
        put(
            &mut files,
            &format!("tests/held-out/{id}_{slug}.rs"),
            &format!("// held {id}\n"),
        );
    }
    put(
        &mut files,
        "chapters/01-one/src/one.rs",
        "pub fn one() -> u8 {\n    // region: Lab 1.1 one\n    1\n    // endregion\n}\n",
    );
    put(&mut files, "chapters/02-two/src/two.rs", TWO);
    put(
        &mut files,
        "chapters/00-zero/src/zero.rs",
        "pub fn tour() {}\n",
    );
    put(&mut files, "chapters/02-two/mistakes.toml", MISTAKES);
    files
}

/// The code and tests of chapter `chapter` with `solved`, as assembly gives them.
fn code(data: &FileSet, chapter: &str, solved: Solved) -> Snapshot {
    let catalog = Catalog::from_files(data).unwrap();
    let sources = Sources::new(&catalog, data).unwrap();
    let plan = WorkspacePlan::new(&catalog, catalog.resolve(chapter).unwrap(), solved);
    assemble::workspace(&sources, &plan).unwrap()
}

/// The workspace a person receives (documents and stamp included).
fn handed_out(data: &FileSet, chapter: &str, solved: Solved) -> Snapshot {
    let catalog = Catalog::from_files(data).unwrap();
    let sources = Sources::new(&catalog, data).unwrap();
    let plan = WorkspacePlan::new(&catalog, catalog.resolve(chapter).unwrap(), solved);
    handout(&sources, &plan).unwrap()
}

fn leaks(data: &FileSet, chapter: &str, practice: &Snapshot) -> Vec<String> {
    let catalog = Catalog::from_files(data).unwrap();
    let sources = Sources::new(&catalog, data).unwrap();
    assemble::answer_leaks(&sources, catalog.resolve(chapter).unwrap(), practice).unwrap()
}

fn text<'a>(snapshot: &'a Snapshot, path: &str) -> &'a str {
    std::str::from_utf8(
        snapshot
            .get(path)
            .unwrap_or_else(|| panic!("{path} missing")),
    )
    .unwrap()
}

fn id(text: &str) -> ChapterId {
    text.parse().unwrap()
}

fn lab(text: &str) -> LabId {
    text.parse().unwrap()
}

#[test]
fn catalog_keeps_manifest_order_and_derives_labs() {
    let catalog = Catalog::from_files(&fixture()).unwrap();
    let order: Vec<String> = catalog
        .chapters()
        .iter()
        .map(|c| c.id.to_string())
        .collect();
    assert_eq!(
        order,
        ["00", "01", "02"],
        "course order is the manifest's order"
    );
    let two = catalog.resolve("2").unwrap();
    assert_eq!(two.test_target(), "02_two");
    let markers: Vec<String> = two.groups.iter().filter_map(|g| g.marker()).collect();
    assert_eq!(
        markers,
        ["Lab 2.1", "Lab 2.2"],
        "markers come from the Lab position"
    );
    assert_eq!(two.mistakes.len(), 1);
    let zero = catalog.resolve("0").unwrap();
    assert_eq!(zero.groups[0].marker(), None, "observe groups have no Lab");
    let chain: Vec<String> = catalog
        .chain(zero)
        .iter()
        .map(|c| c.id.to_string())
        .collect();
    assert_eq!(
        chain,
        ["01", "02", "00"],
        "observe chapters run the code they show"
    );
    for bad in ["abc", "6.0", "-1", "123", ""] {
        assert!(
            matches!(catalog.resolve(bad), Err(ChapterIdError::Malformed { .. })),
            "{bad}"
        );
    }
    let unknown = catalog.resolve("09").unwrap_err().to_string();
    assert!(unknown.contains("00 01 02"), "{unknown}");
}

#[test]
fn reference_strips_markers_and_layers_chapters() {
    let data = fixture();
    let reference = code(&data, "02", Solved::All);
    assert_eq!(
        text(&reference, "pi-course/src/lib.rs"),
        "//! pi-course: build a coding agent (\"pi\") one chapter at a time.\n\npub mod one;\npub mod two;\n",
        "lib.rs is derived: one `pub mod` per module of the chain, sorted"
    );
    assert_eq!(
        text(&reference, "pi-course/src/one.rs"),
        "pub fn one() -> u8 {\n    1\n}\n"
    );
    assert!(!text(&reference, "pi-course/src/two.rs").contains("region"));
    assert!(reference.contains_key("pi-course/tests/01_one.rs"));
    assert_eq!(text(&reference, "xtask/runner/src/lib.rs"), "// runner\n");
    assert!(reference.contains_key(".gitignore"));
    assert!(!reference
        .keys()
        .any(|path| path.as_str().contains("held_out")));
    let catalog = Catalog::from_files(&data).unwrap();
    let sources = Sources::new(&catalog, &data).unwrap();
    let plan = WorkspacePlan::new(&catalog, catalog.get(id("02")).unwrap(), Solved::All);
    let mut with_held_out = reference.clone();
    assemble::add_held_out(&sources, &plan, &mut with_held_out).unwrap();
    assert_eq!(
        text(&with_held_out, "pi-course/tests/held_out_02_two.rs"),
        "// held 02\n"
    );
}

#[test]
fn practice_stubs_every_lab_and_leaks_nothing() {
    let data = fixture();
    let practice = handed_out(&data, "02", Solved::Nothing);
    let skeleton = text(&practice, "pi-course/src/two.rs");
    assert!(
        skeleton.contains("panic!(\"Lab 2.1 first 尚未实现\")"),
        "{skeleton}"
    );
    assert!(
        skeleton.contains("panic!(\"Lab 2.2 second 尚未实现\")"),
        "{skeleton}"
    );
    assert!(
        !skeleton.contains("fn helper"),
        "answer-only helpers vanish: {skeleton}"
    );
    assert!(skeleton.contains("#![allow(unused_imports, unused_variables, unused_mut, dead_code)]"));
    assert_eq!(
        text(&practice, "pi-course/src/one.rs"),
        "pub fn one() -> u8 {\n    1\n}\n"
    );
    assert_eq!(text(&practice, "CHAPTER.md"), "# guide 02\n");
    let learning = text(&practice, "LEARNING.md");
    assert!(
        learning.contains("cargo xtask test 02 --group beta"),
        "{learning}"
    );
    assert!(
        learning.contains("`Lab 2.2 second 尚未实现`"),
        "first red per Lab: {learning}"
    );
    assert_eq!(leaks(&data, "02", &practice), Vec::<String>::new());
}

#[test]
fn a_leaked_region_body_is_found_anywhere_in_practice() {
    let mut data = fixture();
    let long = "    let total: u32 = (1..=10).map(|n| n * n).sum();\n    total\n";
    put(
        &mut data,
        "chapters/02-two/src/two.rs",
        &TWO.replace("    first() * 2\n", long),
    );
    let mut practice = handed_out(&data, "02", Solved::Nothing);
    practice.insert(
        WorkspacePath::new("pi-course/src/extra.rs"),
        format!("fn x() -> u32 {{\n{long}}}\n").into_bytes(),
    );
    let leaks = leaks(&data, "02", &practice);
    assert_eq!(leaks.len(), 1, "{leaks:?}");
    assert!(
        leaks[0].contains("pi-course/src/extra.rs 含有 Lab 2.2 second 的答案"),
        "{leaks:?}"
    );
}

#[test]
fn solved_before_keeps_earlier_labs_from_the_reference() {
    let data = fixture();
    let state = code(&data, "02", Solved::Before(lab("2.2")));
    let file = text(&state, "pi-course/src/two.rs");
    assert!(file.contains("    helper() + 40\n"), "{file}");
    assert!(file.contains("fn helper() -> u32"), "{file}");
    assert!(
        file.contains("panic!(\"Lab 2.2 second 尚未实现\")"),
        "{file}"
    );

    let snapshot = handed_out(&data, "02", Solved::Before(lab("2.2")));
    let stamp = Stamp::from_json_bytes(&snapshot[STAMP_FILE]).unwrap();
    assert_eq!(stamp.state, "solved before Lab 2.2");
}

#[test]
fn stamp_records_chain_hashes_and_pristine_copies() {
    let data = fixture();
    let practice = handed_out(&data, "02", Solved::Nothing);
    let stamp = Stamp::from_json_bytes(&practice[STAMP_FILE]).unwrap();
    assert_eq!(stamp.chapter, id("02"));
    assert_eq!(stamp.state, "rebuild");
    let ids: Vec<String> = stamp.chapters.iter().map(|t| t.id.to_string()).collect();
    assert_eq!(ids, ["01", "02"]);
    assert_eq!(
        stamp.injected["pi-course/tests/02_two.rs"],
        content_hash(b"// tests 02\n")
    );
    assert_eq!(stamp.injected.len(), 2);
    assert_eq!(
        text(&practice, "xtask/pristine-tests/02_two.rs"),
        "// tests 02\n"
    );
}

#[test]
fn observe_mode_gives_the_finished_code_of_the_chapter_it_shows() {
    let data = fixture();
    let practice = handed_out(&data, "00", Solved::Nothing);
    assert!(text(&practice, "pi-course/src/two.rs").contains("helper() + 40"));
    assert!(
        text(&practice, "pi-course/src/lib.rs")
            .ends_with("\npub mod one;\npub mod two;\npub mod zero;\n"),
        "an observe chapter's modules join the chain's"
    );
    assert!(practice.contains_key("pi-course/tests/00_zero.rs"));
    assert!(text(&practice, "LEARNING.md").contains("观察"));
}

#[test]
fn a_mistake_must_match_exactly_once() {
    let data = fixture();
    let catalog = Catalog::from_files(&data).unwrap();
    let two = catalog.get(id("02")).unwrap();
    let mut snapshot = code(&data, "02", Solved::All);
    assemble::apply_mistake(&mut snapshot, &two.mistakes[0]).unwrap();
    assert!(text(&snapshot, "pi-course/src/two.rs").contains("helper() + 41"));
    let error = assemble::apply_mistake(&mut snapshot, &two.mistakes[0]).unwrap_err();
    assert!(error.to_string().contains("出现 0 次"), "{error}");
}

#[test]
fn tree_check_returns_typed_problems() {
    let mut data = fixture();
    let catalog = Catalog::from_files(&data).unwrap();
    assert_eq!(catalog.check_tree(&data, true), Vec::<Problem>::new());
    data.remove("tests/held-out/02_two.rs");
    put(&mut data, "chapters/01-one/src/stray.rs", "");
    put(&mut data, "tests/99_orphan.rs", "");
    put(
        &mut data,
        "chapters/02-two/src/lib.rs",
        "// region: Lab 2.1 x\n// endregion\n",
    );
    let problems = catalog.check_tree(&data, true);
    assert!(problems.contains(&Problem::MissingFile {
        chapter: id("02"),
        path: RepoPath::new("tests/held-out/02_two.rs")
    }));
    assert!(problems.contains(&Problem::UnlistedFile {
        chapter: id("01"),
        path: RepoPath::new("chapters/01-one/src/stray.rs")
    }));
    assert!(problems.contains(&Problem::UnclaimedTest(RepoPath::new("tests/99_orphan.rs"))));
    assert!(problems.contains(&Problem::DerivedFile {
        chapter: id("02"),
        path: RepoPath::new("chapters/02-two/src/lib.rs")
    }));
    assert_eq!(problems.len(), 4, "{problems:?}");
    assert!(
        catalog.check_tree(&data, false).len() == 3,
        "without held-out tests they are not required"
    );

    let mut broken = fixture();
    put(
        &mut broken,
        "chapters/02-two/src/two.rs",
        &TWO.replace("// region: Lab 2.2 second", "// region: Lab 2.3 second"),
    );
    put(
        &mut broken,
        "chapters/02-two/mistakes.toml",
        &MISTAKES.replace("group = \"alpha\"", "group = \"gamma\""),
    );
    let catalog = Catalog::from_files(&broken).unwrap();
    let problems = catalog.check_tree(&broken, true);
    let two = RepoPath::new("chapters/02-two/src/two.rs");
    assert!(
        problems.contains(&Problem::ForeignLab {
            path: two,
            lab: lab("2.3")
        }),
        "{problems:?}"
    );
    assert!(
        problems.contains(&Problem::LabWithoutStub {
            chapter: id("02"),
            lab: lab("2.2")
        }),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| matches!(p, Problem::MistakeGroup { group, .. } if group == "gamma")),
        "{problems:?}"
    );
}

#[test]
fn malformed_manifests_are_refused_with_a_reason() {
    let mut data = fixture();
    put(
        &mut data,
        "chapters/course.toml",
        &MANIFEST.replace("id = \"01\"", "id = \"02\""),
    );
    assert_eq!(
        Catalog::from_files(&data).unwrap_err(),
        CatalogError::DuplicateId(id("02"))
    );

    let mut data = fixture();
    put(
        &mut data,
        "chapters/course.toml",
        &MANIFEST.replace("format = 1", "format = 9"),
    );
    assert_eq!(
        Catalog::from_files(&data).unwrap_err(),
        CatalogError::Format(9)
    );

    let mut data = fixture();
    put(
        &mut data,
        "chapters/course.toml",
        &MANIFEST.replace("shows = \"02\"", "shows = \"07\""),
    );
    assert!(matches!(
        Catalog::from_files(&data),
        Err(CatalogError::UnknownShows { .. })
    ));

    let mut data = fixture();
    put(
        &mut data,
        "chapters/course.toml",
        &MANIFEST.replace("edit = [\"src/one.rs\"]", "shows = \"00\""),
    );
    let error = Catalog::from_files(&data).unwrap_err().to_string();
    assert!(
        error.contains("rebuild") && error.contains("edit"),
        "{error}"
    );

    let mut data = fixture();
    put(
        &mut data,
        "chapters/course.toml",
        &MANIFEST.replace("slug = \"one\"", "slug = \"one\"\nprevious = \"00\""),
    );
    let error = Catalog::from_files(&data).unwrap_err().to_string();
    assert!(
        error.contains("previous"),
        "unknown keys are refused: {error}"
    );
}

#[test]
fn a_group_timeout_reaches_the_stamp_and_a_bad_one_is_refused_in_chinese() {
    let slow = "{ group = \"beta\", tests = 1, summary = \"乙\" }";
    assert_eq!(MANIFEST.matches(slow).count(), 1);
    let with = |timeout: &str| {
        let mut data = fixture();
        put(
            &mut data,
            "chapters/course.toml",
            &MANIFEST.replace(
                slow,
                &slow.replace(" }", &format!(", timeout = {timeout} }}")),
            ),
        );
        data
    };

    let practice = handed_out(&with("90"), "02", Solved::Nothing);
    let stamp = Stamp::from_json_bytes(&practice[STAMP_FILE]).unwrap();
    let limits: Vec<(String, Option<u64>)> = stamp.chapters[1]
        .groups
        .iter()
        .map(|g| (g.name.clone(), g.timeout.map(|t| t.as_secs())))
        .collect();
    assert_eq!(
        limits,
        [("alpha".to_string(), None), ("beta".to_string(), Some(90))],
        "清单里一组的 timeout 原样写进练习工作区的印记，别的组不受影响"
    );

    for bad in ["0", "-5", "601", "1.5", "\"90\""] {
        let error = Catalog::from_files(&with(bad)).unwrap_err();
        assert!(
            matches!(&error, CatalogError::BadTimeout { group, .. } if group == "beta"),
            "timeout = {bad} 必须被拒绝：{error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "chapters/course.toml：第 02 章测试组 beta 的 timeout = {bad} 不对：要写 1 到 600 之间的整数秒数"
            ),
            "错误的 timeout 用一行中文说清该写什么"
        );
    }
}

/// A guide that meets the learning contract for chapter 02 of the fixture.
const GOOD_GUIDE: &str = "# 第 02 章　第二章

## 重建卡片

- **模式：** 重建
- **起终点：** 起点是第 01 章的参考实现，终点是本章两组测试全绿。
- **教学文件：** `pi-course/src/two.rs`
- **学习脚手架：** 骨架里每个入口都会 panic。
- **动手前只需知道：** `first()` 返回 42。
- **第一次红灯：** `Lab 2.1 first 尚未实现`
- **第一步：** 运行 `cargo xtask test 02 --group alpha`，应看到 0/2。
- **聚焦测试：** `pi-course/tests/02_two.rs`
- **命令：** `cargo xtask test 02`（完成时 3/3）；新目录用 `practice 02 <新目录>`。
- **通过证据：** 两组都显示 ✓。先不看答案。

### Lab 2.1 first

**目标：** 42。
**文件：** `pi-course/src/two.rs`
**动作：** 写 `first()`。
**运行：** `cargo xtask test 02 --group alpha`
**预期：** 2/2 ✓

### Lab 2.2 second

**目标：** 84。
**文件：** `pi-course/src/two.rs`
**动作：** 写 `second()`。
**运行：** `cargo xtask test 02 --group beta`
**预期：** 1/1 ✓

## 检查点

> **预测：** 第一次运行哪个组先红？
> **答案：** alpha，以 Lab 2.1 失败。

## 与上游 pi 的对照

上游没有这一章。

## 本章验收

`cargo xtask test 02` 显示 3/3。

## 测试没有证明什么

性能。

## 小结

- 写了两个函数。
";

fn guide_problems(guide: &str) -> Vec<String> {
    let data = fixture();
    let catalog = Catalog::from_files(&data).unwrap();
    let two = catalog.get(id("02")).unwrap();
    let reference = code(&data, "02", Solved::All);
    let practice = handed_out(&data, "02", Solved::Nothing);
    let first_reds = vec!["Lab 2.1 first 尚未实现".to_string()];
    course_cli::guide::check(&catalog, two, guide, &first_reds, &reference, &practice)
}

#[test]
fn a_guide_that_meets_the_contract_passes() {
    assert_eq!(guide_problems(GOOD_GUIDE), Vec::<String>::new());
}

#[test]
fn a_broken_guide_fails_the_contract_with_a_reason() {
    let cases = [
        (
            GOOD_GUIDE.replace("- **第一次红灯：** `Lab 2.1 first 尚未实现`\n", ""),
            "卡片缺少 **第一次红灯：**",
        ),
        (
            GOOD_GUIDE.replace("`Lab 2.1 first 尚未实现`", "`Lab 2.1 something 尚未实现`"),
            "**第一次红灯：** 应写出 Lab 2.1 的真实信息",
        ),
        (
            GOOD_GUIDE.replace("**预期：** 1/1 ✓", "**预期：** 2/2 ✓"),
            "Lab 2.2 卡片的 **预期：** 应写明 1/1",
        ),
        (
            GOOD_GUIDE.replace("（完成时 3/3）", "（完成时 4/4）"),
            "4/4 与清单不符",
        ),
        (
            GOOD_GUIDE.replace("--group beta", "--group gamma"),
            "第 02 章没有测试组 `gamma`",
        ),
        (
            GOOD_GUIDE.replace("## 小结", "## 总结"),
            "缺少 `## 小结` 一节",
        ),
        (
            GOOD_GUIDE.replace("> **答案：**", "> 答案："),
            "预测：** 没有跟着 **答案：**",
        ),
        (GOOD_GUIDE.replace("先不看答案", ""), "先不看答案"),
        (
            GOOD_GUIDE.replace("### Lab 2.2 second", "### Lab 2.3 second"),
            "Lab 卡片应依次是",
        ),
        (
            GOOD_GUIDE.replace("上游没有这一章。", "见 Lab 2.9。"),
            "提到的 Lab 2.9 不存在",
        ),
        (
            GOOD_GUIDE.replace(
                "`practice 02 <新目录>`",
                "`cargo run -p course-cli --bin practice -- 02 x`",
            ),
            "在练习目录里无法运行",
        ),
        (
            GOOD_GUIDE.replace("写 `second()`", "写 `helper()`"),
            "练习目录里没有 `helper`",
        ),
    ];
    for (guide, expected) in cases {
        let problems = guide_problems(&guide);
        assert!(
            problems.iter().any(|problem| problem.contains(expected)),
            "expected a problem containing `{expected}`, got {problems:?}"
        );
    }
}

#[test]
fn workspace_overlays_apply_from_their_chapter_on_and_learning_lists_added_packages() {
    let mut data = fixture();
    put(
        &mut data,
        "chapters/01-one/workspace/Cargo.lock",
        "# lock 01\n",
    );
    put(
        &mut data,
        "chapters/01-one/workspace/crates/helper/Cargo.toml",
        "[package]\nname = \"helper\"\ndescription = \"一个帮手包\"\n\n[package.metadata.pi-course]\ntry = \"`cargo run -p helper`\"\n",
    );
    put(
        &mut data,
        "chapters/01-one/workspace/crates/helper/src/main.rs",
        "fn main() {}\n",
    );
    put(
        &mut data,
        "chapters/02-two/workspace/Cargo.lock",
        "# lock 02\n",
    );
    let catalog = Catalog::from_files(&data).unwrap();
    assert_eq!(
        catalog.check_tree(&data, true),
        Vec::<Problem>::new(),
        "files under a chapter's workspace/ are part of the chapter"
    );
    let plan = WorkspacePlan::new(&catalog, catalog.resolve("02").unwrap(), Solved::Nothing);
    assert_eq!(
        plan.packages,
        ["helper"],
        "crates/<name>/Cargo.toml is an added package"
    );
    let overlays: Vec<String> = plan.overlays.iter().map(|c| c.id.to_string()).collect();
    assert_eq!(overlays, ["01", "02"], "overlays in chain order");
    assert!(matches!(plan.start, Start::Reference(one) if one.id == id("01")));

    let reference_one = code(&data, "01", Solved::All);
    assert_eq!(
        text(&reference_one, "Cargo.toml"),
        "[workspace]\nmembers = [\n    \"pi-course\",\n    \"xtask\",\n    \"crates/helper\",\n]\n",
        "the root manifest is the base's with the added packages as members"
    );
    assert_eq!(text(&reference_one, "Cargo.lock"), "# lock 01\n");
    let practice_two = handed_out(&data, "02", Solved::Nothing);
    assert_eq!(
        text(&practice_two, "Cargo.lock"),
        "# lock 02\n",
        "a later chapter's overlay wins, in the practice state too"
    );
    assert!(
        practice_two.contains_key("crates/helper/src/main.rs"),
        "an earlier chapter's packages are carried on"
    );
    let learning = text(&practice_two, "LEARNING.md");
    assert!(
        learning.contains("- `crates/helper`：一个帮手包。试试：`cargo run -p helper`"),
        "LEARNING.md lists the package from its own Cargo.toml:\n{learning}"
    );

    let plain_two = handed_out(&fixture(), "02", Solved::Nothing);
    assert_eq!(
        text(&plain_two, "Cargo.toml"),
        BASE_MANIFEST,
        "without added packages the base manifest stays as written"
    );
    assert!(
        !text(&plain_two, "LEARNING.md").contains("工作区里的其它包"),
        "without added packages LEARNING.md has no package section"
    );

    put(
        &mut data,
        "chapters/02-two/workspace/Cargo.toml",
        "[workspace]\n",
    );
    assert_eq!(
        catalog.check_tree(&data, true),
        [Problem::DerivedFile {
            chapter: id("02"),
            path: RepoPath::new("chapters/02-two/workspace/Cargo.toml")
        }],
        "an overlay's root manifest is derived, never written"
    );
}

#[test]
fn a_later_copy_must_keep_every_line_of_the_earlier_one_unless_declared_a_rewrite() {
    let mut data = fixture();
    let manifest = MANIFEST.replace(
        "files = [\"src/two.rs\"]",
        "files = [\"src/two.rs\", \"src/one.rs\"]",
    );
    put(&mut data, "chapters/course.toml", &manifest);
    let extended = "pub fn one() -> u8 {\n    1\n}\n\npub fn also() {}\n";
    put(&mut data, "chapters/02-two/src/one.rs", extended);
    let catalog = Catalog::from_files(&data).unwrap();
    assert_eq!(
        catalog.check_tree(&data, true),
        Vec::<Problem>::new(),
        "02's one.rs adds lines to 01's marker-free one.rs"
    );
    assert_eq!(
        text(&code(&data, "02", Solved::All), "pi-course/src/one.rs"),
        extended,
        "the later copy is the one the workspace carries"
    );

    put(
        &mut data,
        "chapters/02-two/src/one.rs",
        "pub fn one() -> u8 {\n    2\n}\n",
    );
    let problems = Catalog::from_files(&data).unwrap().check_tree(&data, true);
    assert_eq!(
        problems,
        [Problem::CopyDiverged {
            chapter: id("02"),
            earlier: id("01"),
            file: WorkspacePath::new("pi-course/src/one.rs"),
            line: 2,
            text: "    1".to_string(),
        }],
        "a fix in 01 that did not reach 02 is caught"
    );
    assert!(
        problems[0].to_string().contains("rewrites"),
        "{}",
        problems[0]
    );

    let declared = manifest.replace(
        "edit = [\"src/two.rs\"]",
        "edit = [\"src/two.rs\"]\nrewrites = [\"pi-course/src/one.rs\"]",
    );
    put(&mut data, "chapters/course.toml", &declared);
    assert_eq!(
        Catalog::from_files(&data).unwrap().check_tree(&data, true),
        Vec::<Problem>::new(),
        "a declared rewrite is exempt"
    );
    put(
        &mut data,
        "chapters/course.toml",
        &declared.replace("pi-course/src/one.rs", "pi-course/src/nothing.rs"),
    );
    assert!(Catalog::from_files(&data)
        .unwrap()
        .check_tree(&data, true)
        .contains(&Problem::UnknownRewrite {
            chapter: id("02"),
            file: WorkspacePath::new("pi-course/src/nothing.rs")
        }));
}

#[test]
fn only_a_chapter_of_new_modules_lets_verify_reuse_the_earlier_verdicts() {
    let data = fixture();
    let catalog = Catalog::from_files(&data).unwrap();
    let chapter = |text: &str| catalog.get(id(text)).unwrap();
    assert!(
        catalog.only_adds_modules(chapter("01")),
        "the first rebuild chapter adds its module to an empty crate"
    );
    assert!(
        catalog.only_adds_modules(chapter("02")),
        "02 adds two.rs only: 01's code cannot reach it"
    );
    assert!(
        !catalog.only_adds_modules(chapter("00")),
        "an observe chapter is judged on its own groups"
    );

    let mut extending = fixture();
    let manifest = MANIFEST.replace(
        "files = [\"src/two.rs\"]",
        "files = [\"src/two.rs\", \"src/one.rs\"]",
    );
    put(&mut extending, "chapters/course.toml", &manifest);
    put(
        &mut extending,
        "chapters/02-two/src/one.rs",
        "pub fn one() -> u8 {\n    1\n}\n",
    );
    let catalog = Catalog::from_files(&extending).unwrap();
    assert!(
        !catalog.only_adds_modules(catalog.get(id("02")).unwrap()),
        "02 carries its own one.rs: 01's tests must run again on it"
    );
}
