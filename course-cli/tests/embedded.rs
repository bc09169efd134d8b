//! The binary's embedded course data is exactly the checkout's, minus held-out tests, so a
//! stale binary cannot ship.

use course_cli::catalog::Catalog;
use course_cli::files::{self, HELD_OUT_DIR};

#[test]
fn embedded_data_equals_the_checkout_without_held_out_tests() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let mut on_disk = files::load_checkout(repo).unwrap();
    let held_out: Vec<course_cli::paths::RepoPath> = on_disk
        .keys()
        .filter(|path| path.as_str().starts_with(&format!("{HELD_OUT_DIR}/")))
        .cloned()
        .collect();
    for path in &held_out {
        on_disk.remove(path);
    }
    let embedded = files::embedded();
    assert!(embedded
        .keys()
        .all(|path| !path.as_str().starts_with(HELD_OUT_DIR)));
    assert_eq!(
        embedded.keys().collect::<Vec<_>>(),
        on_disk.keys().collect::<Vec<_>>()
    );
    assert!(
        embedded == on_disk,
        "embedded content differs from the checkout"
    );
}

#[test]
fn embedded_catalog_is_consistent_with_its_files() {
    let data = files::embedded();
    let catalog = Catalog::from_files(&data).unwrap();
    // Held-out files are absent from the binary by design.
    let problems = catalog.check_tree(&data, false);
    assert!(problems.is_empty(), "{problems:#?}");
}
