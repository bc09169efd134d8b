//! Pure assembly over a small fixture course: overlay order, answer-free practice, stamps,
//! held-out isolation, mutations and the manifest/tree check.

use course_cli::assemble::{self, Snapshot};
use course_cli::catalog::{Catalog, ChapterIdError};
use course_cli::files::FileSet;
use course_cli::runner::{content_hash, Stamp, STAMP_FILE};

fn group(name: &str, lab: &str) -> serde_json::Value {
    serde_json::json!({"name": name, "lab": lab, "prefix": format!("{name}::"), "count": 1,
        "summary": "组", "marker": format!("Lab {lab}")})
}

fn manifest(id: &str, slug: &str, mode: &str, previous: Option<&str>, edit: &[&str]) -> Vec<u8> {
    let files: Vec<String> = std::iter::once("src/lib.rs".to_string())
        .chain(edit.iter().map(|file| file.to_string()))
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "id": id, "slug": slug, "title": format!("标题 {id}"), "mode": mode,
        "previous": previous, "files": files, "edit": edit,
        "test": format!("{id}_{slug}.rs"), "held_out": format!("{id}_{slug}.rs"),
        "groups": [group("alpha", &format!("{}.1", id.trim_start_matches('0')))],
        "mutations": [{"name": "m", "description": "弄坏", "file": "src/lib.rs",
            "find": format!("chapter {id}"), "replace": "broken", "group": "alpha", "expect": "x"}]
    }))
    .unwrap()
}

fn put(files: &mut FileSet, path: &str, content: &str) {
    files.insert(path.to_string(), content.as_bytes().to_vec());
}

/// 01 (rebuild, first) → 02 (rebuild) → 00 (observe).
fn fixture() -> FileSet {
    let mut files = FileSet::new();
    put(&mut files, "chapters/_crate/Cargo.toml", "[workspace]\n");
    put(&mut files, "chapters/_crate/Cargo.lock", "# lock\n");
    put(&mut files, "chapters/_crate/gitignore", "target/\n");
    put(
        &mut files,
        "chapters/_crate/pi-course/src/lib.rs",
        "// base\n",
    );
    for (id, slug, mode, previous, edit) in [
        ("01", "one", "rebuild", None, "src/one.rs"),
        ("02", "two", "rebuild", Some("01"), "src/two.rs"),
        ("00", "zero", "observe", Some("02"), ""),
    ] {
        let edit: Vec<&str> = if edit.is_empty() { vec![] } else { vec![edit] };
        let dir = format!("chapters/{id}-{slug}");
        files.insert(
            format!("{dir}/chapter.json"),
            manifest(id, slug, mode, previous, &edit),
        );
        put(
            &mut files,
            &format!("{dir}/README.md"),
            &format!("# guide {id}\n"),
        );
        put(
            &mut files,
            &format!("{dir}/src/lib.rs"),
            &format!("// lib as of chapter {id}\n"),
        );
        for file in &edit {
            put(
                &mut files,
                &format!("{dir}/{file}"),
                &format!("// ANSWER {id}\n"),
            );
            put(
                &mut files,
                &format!("skeletons/{id}-{slug}/{file}"),
                &format!("// Lab {id} 尚未实现\n"),
            );
        }
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
    files
}

fn text<'a>(snapshot: &'a Snapshot, path: &str) -> &'a str {
    std::str::from_utf8(
        snapshot
            .get(path)
            .unwrap_or_else(|| panic!("{path} missing")),
    )
    .unwrap()
}

#[test]
fn catalog_follows_previous_links_and_resolves_ids() {
    let catalog = Catalog::from_files(&fixture()).unwrap();
    let order: Vec<&str> = catalog
        .chapters()
        .iter()
        .map(|chapter| chapter.id.as_str())
        .collect();
    assert_eq!(order, ["01", "02", "00"]);
    assert_eq!(catalog.resolve("2").unwrap().id, "02");
    assert_eq!(catalog.resolve("02").unwrap().id, "02");
    for bad in ["abc", "6.0", "-1", "123", ""] {
        assert!(
            matches!(catalog.resolve(bad), Err(ChapterIdError::Malformed { .. })),
            "{bad}"
        );
    }
    let unknown = catalog.resolve("09").unwrap_err();
    assert!(unknown.to_string().contains("00 01 02"), "{unknown}");
}

#[test]
fn reference_layers_overlays_in_course_order() {
    let data = fixture();
    let catalog = Catalog::from_files(&data).unwrap();
    let reference = assemble::reference(&catalog, &data, "02").unwrap();
    assert_eq!(
        text(&reference, "pi-course/src/lib.rs"),
        "// lib as of chapter 02\n"
    );
    assert_eq!(text(&reference, "pi-course/src/one.rs"), "// ANSWER 01\n");
    assert_eq!(text(&reference, "pi-course/src/two.rs"), "// ANSWER 02\n");
    assert!(reference.contains_key("pi-course/tests/01_one.rs"));
    assert!(reference.contains_key("pi-course/tests/02_two.rs"));
    assert!(reference.contains_key(".gitignore"));
    assert!(reference.contains_key(assemble::RUNNER_PATH));
    assert!(!reference.keys().any(|path| path.contains("held_out")));

    let with_held_out = assemble::reference_with_held_out(&catalog, &data, "02").unwrap();
    assert_eq!(
        text(&with_held_out, "pi-course/tests/held_out_02_two.rs"),
        "// held 02\n"
    );
}

#[test]
fn practice_is_previous_reference_plus_skeleton_and_is_answer_free() {
    let data = fixture();
    let catalog = Catalog::from_files(&data).unwrap();
    let practice = assemble::practice(&catalog, &data, "02").unwrap();
    assert_eq!(
        text(&practice, "pi-course/src/two.rs"),
        "// Lab 02 尚未实现\n"
    );
    assert_eq!(
        text(&practice, "pi-course/src/one.rs"),
        "// ANSWER 01\n",
        "carried chapter"
    );
    assert_eq!(
        text(&practice, "pi-course/src/lib.rs"),
        "// lib as of chapter 02\n"
    );
    assert_eq!(text(&practice, "CHAPTER.md"), "# guide 02\n");
    assert!(text(&practice, "LEARNING.md").contains("cargo xtask test 02 --group alpha"));
    assert!(!practice
        .keys()
        .any(|path| path.contains("held_out") || path.starts_with(".git/")));
    assert!(assemble::answer_leaks(&catalog, &data, "02", &practice)
        .unwrap()
        .is_empty());

    let mut leaked = practice.clone();
    leaked.insert("pi-course/src/two.rs".into(), b"// ANSWER 02\n".to_vec());
    assert_eq!(
        assemble::answer_leaks(&catalog, &data, "02", &leaked).unwrap(),
        ["pi-course/src/two.rs"]
    );
}

#[test]
fn stamp_records_chain_and_test_hashes() {
    let data = fixture();
    let catalog = Catalog::from_files(&data).unwrap();
    let practice = assemble::practice(&catalog, &data, "02").unwrap();
    let stamp: Stamp = serde_json::from_slice(&practice[STAMP_FILE]).unwrap();
    assert_eq!(stamp.chapter, "02");
    assert_eq!(stamp.mode, "rebuild");
    let ids: Vec<&str> = stamp
        .chapters
        .iter()
        .map(|tests| tests.id.as_str())
        .collect();
    assert_eq!(ids, ["01", "02"]);
    assert_eq!(
        stamp.injected["pi-course/tests/02_two.rs"],
        content_hash(b"// tests 02\n")
    );
    assert_eq!(stamp.injected.len(), 2);
}

#[test]
fn observe_mode_gives_the_finished_code() {
    let data = fixture();
    let catalog = Catalog::from_files(&data).unwrap();
    let practice = assemble::practice(&catalog, &data, "00").unwrap();
    assert_eq!(text(&practice, "pi-course/src/two.rs"), "// ANSWER 02\n");
    assert_eq!(
        text(&practice, "pi-course/src/lib.rs"),
        "// lib as of chapter 00\n"
    );
    assert!(practice.contains_key("pi-course/tests/00_zero.rs"));
    assert!(text(&practice, "LEARNING.md").contains("观察"));
}

#[test]
fn mutation_must_match_exactly_once() {
    let data = fixture();
    let catalog = Catalog::from_files(&data).unwrap();
    let chapter = catalog.get("02").unwrap();
    let mut snapshot = assemble::reference(&catalog, &data, "02").unwrap();
    assemble::apply_mutation(&mut snapshot, &chapter.mutations[0]).unwrap();
    assert_eq!(
        text(&snapshot, "pi-course/src/lib.rs"),
        "// lib as of broken\n"
    );
    let error = assemble::apply_mutation(&mut snapshot, &chapter.mutations[0]).unwrap_err();
    assert!(error.to_string().contains("出现 0 次"), "{error}");
}

#[test]
fn tree_check_reports_missing_and_unlisted_files() {
    let mut data = fixture();
    let catalog = Catalog::from_files(&data).unwrap();
    assert!(
        catalog.check_tree(&data).is_empty(),
        "{:?}",
        catalog.check_tree(&data)
    );
    data.remove("skeletons/02-two/src/two.rs");
    put(&mut data, "chapters/01-one/src/stray.rs", "");
    put(&mut data, "tests/99_orphan.rs", "");
    let problems = catalog.check_tree(&data).join("\n");
    assert!(
        problems.contains("缺少骨架文件 skeletons/02-two/src/two.rs"),
        "{problems}"
    );
    assert!(
        problems.contains("chapters/01-one/src/stray.rs 未在清单 files 中列出"),
        "{problems}"
    );
    assert!(
        problems.contains("tests/99_orphan.rs 不属于任何章节"),
        "{problems}"
    );
}

#[test]
fn duplicate_ids_and_broken_chains_are_refused() {
    let mut data = fixture();
    data.insert(
        "chapters/02-again/chapter.json".into(),
        manifest("02", "again", "rebuild", Some("01"), &[]),
    );
    assert!(Catalog::from_files(&data)
        .unwrap_err()
        .to_string()
        .contains("重复"));

    let mut data = fixture();
    data.insert(
        "chapters/03-three/chapter.json".into(),
        manifest("03", "three", "rebuild", Some("01"), &[]),
    );
    assert!(Catalog::from_files(&data)
        .unwrap_err()
        .to_string()
        .contains("previous 都是 01"));
}
