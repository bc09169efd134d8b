//! pi-course engine: the course catalog, pure workspace assembly, and the atomic writer.
//!
//! Both the `practice` binary and the course xtask use this library, so what CI verifies is
//! byte for byte what learners receive.

pub mod assemble;
pub mod catalog;
pub mod files;
pub mod learning;
pub mod runner;
pub mod write;
