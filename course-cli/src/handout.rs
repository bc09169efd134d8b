//! Workspaces as people receive them: the assembled code and tests, plus — for a learner —
//! `LEARNING.md` and `CHAPTER.md`, plus the stamp and the pristine copies of the injected
//! tests that let the workspace's own `cargo xtask` judge it.
//!
//! This sits above [`crate::assemble`] and [`crate::learning`]: neither of them imports the
//! other, and both take the one [`WorkspacePlan`] the caller computed.

use std::collections::BTreeMap;

use course_runner::practice::PRISTINE_DIR;
use course_runner::{content_hash, Stamp, STAMP_FILE};

use crate::assemble::{self, AssembleError, Snapshot};
use crate::learning;
use crate::paths::WorkspacePath;
use crate::plan::WorkspacePlan;
use crate::sources::Sources;

/// The course version every stamp records.
pub const COURSE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The workspace of `plan` with its stamp: for a practice plan (nothing or some Labs solved,
/// or an observe chapter) with `LEARNING.md` and `CHAPTER.md`; for a finished reference
/// without them, so `cargo xtask test` works inside an instructor's snapshot.
pub fn handout(sources: &Sources, plan: &WorkspacePlan) -> Result<Snapshot, AssembleError> {
    let mut snapshot = assemble::workspace(sources, plan)?;
    if plan.is_practice() {
        let learning = learning::render(sources, plan, &snapshot)?;
        snapshot.insert(
            WorkspacePath::new(learning::FILE_NAME),
            learning.into_bytes(),
        );
        snapshot.insert(
            WorkspacePath::new(learning::GUIDE_FILE_NAME),
            sources.read(&plan.chapter.guide())?.to_vec(),
        );
    }
    stamp(&mut snapshot, plan);
    Ok(snapshot)
}

/// Writes the stamp and the pristine copies of the injected tests.
fn stamp(snapshot: &mut Snapshot, plan: &WorkspacePlan) {
    let mut injected = BTreeMap::new();
    for step in &plan.chain {
        let tests = step.tests();
        let path = tests.test_file();
        if let Some(bytes) = snapshot.get(path.as_str()).cloned() {
            injected.insert(path, content_hash(&bytes));
            let pristine = WorkspacePath::new(format!("{PRISTINE_DIR}/{}.rs", tests.target));
            snapshot.insert(pristine, bytes);
        }
    }
    let chapter = plan.chapter;
    let stamp = Stamp {
        format: course_runner::spec::STAMP_FORMAT,
        chapter: chapter.id,
        title: chapter.title.clone(),
        state: plan.state(),
        course_version: COURSE_VERSION.to_string(),
        chapters: plan.chain.iter().map(|step| step.tests()).collect(),
        injected,
    };
    let mut json = serde_json::to_vec_pretty(&stamp.to_json()).expect("a stamp always serialises");
    json.push(b'\n');
    snapshot.insert(WorkspacePath::new(STAMP_FILE), json);
}
