//! pi-course engine: the course catalog, Lab regions, the workspace plan, pure workspace
//! assembly, generated files, and the atomic writer. The group runner is its own crate,
//! `course-runner`, because every practice workspace carries it.
//!
//! Both the `practice` binary and the course xtask use this library, so what CI verifies is
//! byte for byte what learners receive.

pub mod assemble;
pub mod catalog;
pub mod codegen;
pub mod copies;
pub mod derive;
pub mod files;
pub mod guide;
pub mod handout;
pub mod learning;
pub mod paths;
pub mod plan;
pub mod regions;
pub mod scaffold;
pub mod sources;
pub mod write;

pub use course_runner as runner;
