//! pi-course: build a coding agent ("pi") one chapter at a time.

pub mod agent_loop;
pub mod event_stream;
pub mod http_transport;
pub mod provider_adapter;
pub mod scripted_model;
pub mod sse;
pub mod survival;
pub mod tool;
pub mod types;
