//! pi-course: build a coding agent ("pi") one chapter at a time.

pub mod event_stream;
pub mod survival;
