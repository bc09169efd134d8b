//! The course's group runner: the one place that knows how a chapter's acceptance tests are
//! named, listed, run and judged.
//!
//! The course xtask uses it to verify chapters; every practice workspace carries it as a crate
//! and runs [`practice::main`] as its `cargo xtask`. What a learner's `cargo xtask test 06`
//! reports is therefore computed by exactly the code instructors verify with.
//!
//! Depends on std, serde_json and libc only (see `Cargo.toml`).

pub mod cargo;
pub mod deps_cache;
pub mod exit;
pub mod id;
pub mod judge;
pub mod libtest;
pub mod practice;
pub mod process;
pub mod spec;

pub use cargo::{CargoRunner, RunError, MAX_TESTS_AT_ONCE};
pub use exit::Exit;
pub use id::{ChapterId, IdError, LabId};
pub use judge::GroupReport;
pub use libtest::{TestOutcome, Verdict};
pub use spec::{
    content_hash, ChapterTests, GroupSpec, Stamp, StampError, LEARNER_PACKAGE, STAMP_FILE,
};
