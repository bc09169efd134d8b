//! A deterministic `Model` test double: it plays scripted assistant turns through the same
//! event protocol a real provider adapter uses, so upper layers cannot tell the difference.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::types::{
    assistant_message, text, AgentContext, AssistantContent, AssistantMessage,
    AssistantMessageEventStream, Model, StopReason, StreamOptions, ToolCall,
};

/// Error text of a call made after the script ran out.
pub const NO_MORE_RESPONSES: &str = "ScriptedModel 没有更多响应";
/// Error text of a call whose cancellation token was already cancelled.
pub const REQUEST_ABORTED: &str = "Request was aborted";

/// One scripted answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptedTurn {
    /// Replayed as-is: start, one delta per content block, then `done` (or `error` when the
    /// message's own stop reason is `error`/`aborted`).
    Message(AssistantMessage),
    /// A failed turn: optional partial text, then an `error` terminal carrying the diagnostic.
    Failure {
        stop_reason: StopReason,
        error_message: String,
        partial_text: Option<String>,
    },
}

impl ScriptedTurn {
    pub fn message(message: AssistantMessage) -> Self {
        ScriptedTurn::Message(message)
    }

    /// A plain text answer that ends with `stop`.
    pub fn text(value: &str) -> Self {
        ScriptedTurn::Message(assistant_message(
            vec![AssistantContent::Text(text(value))],
            StopReason::Stop,
        ))
    }

    /// An answer that asks for tools and ends with `toolUse`.
    pub fn tool_calls(calls: Vec<ToolCall>) -> Self {
        ScriptedTurn::text_and_tool_calls("", calls)
    }

    /// Text followed by tool calls (empty `value` means no text block), ending with `toolUse`.
    pub fn text_and_tool_calls(value: &str, calls: Vec<ToolCall>) -> Self {
        let mut content = Vec::new();
        if !value.is_empty() {
            content.push(AssistantContent::Text(text(value)));
        }
        content.extend(calls.into_iter().map(AssistantContent::ToolCall));
        ScriptedTurn::Message(assistant_message(content, StopReason::ToolUse))
    }

    /// A provider-side failure (`stopReason: "error"`).
    pub fn error(error_message: &str) -> Self {
        ScriptedTurn::Failure {
            stop_reason: StopReason::Error,
            error_message: error_message.to_string(),
            partial_text: None,
        }
    }

    /// A turn that reports cancellation (`stopReason: "aborted"`).
    pub fn aborted(error_message: &str) -> Self {
        ScriptedTurn::Failure {
            stop_reason: StopReason::Aborted,
            error_message: error_message.to_string(),
            partial_text: None,
        }
    }

    /// Adds streamed text before a failure; no effect on a `Message` turn.
    pub fn with_partial_text(mut self, value: &str) -> Self {
        if let ScriptedTurn::Failure { partial_text, .. } = &mut self {
            *partial_text = Some(value.to_string());
        }
        self
    }
}

impl From<AssistantMessage> for ScriptedTurn {
    fn from(message: AssistantMessage) -> Self {
        ScriptedTurn::Message(message)
    }
}

/// Builds a tool call whose arguments are already parsed (no raw text), as a script needs it.
pub fn tool_call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: id.to_string(),
        name: name.to_string(),
        arguments,
        raw_arguments: None,
    }
}

// Lab 4.1 keeps the cursor and the recorded requests here; add fields if you need more.
#[derive(Debug, Default)]
#[allow(dead_code)] // read by your Lab 4.1 code
struct ScriptState {
    cursor: usize,
    requests: Vec<AgentContext>,
}

/// Plays its turns in order, one per `stream()` call. Clones share the script and the
/// recorded requests, so a test can hand one clone to the agent and inspect the other.
#[derive(Debug, Clone)]
#[allow(dead_code)] // read by your Lab 4.1 code
pub struct ScriptedModel {
    turns: Arc<Vec<ScriptedTurn>>,
    state: Arc<Mutex<ScriptState>>,
}

impl ScriptedModel {
    pub fn new(turns: Vec<ScriptedTurn>) -> Self {
        ScriptedModel {
            turns: Arc::new(turns),
            state: Arc::new(Mutex::new(ScriptState::default())),
        }
    }

    /// Copies of every context received, in call order (refused calls included).
    pub fn requests(&self) -> Vec<AgentContext> {
        panic!("Lab 4.1 requests 尚未实现")
    }
}

impl Model for ScriptedModel {
    /// Lab 4.1: record a copy of `context`, take the next turn, replay it as events
    /// (start → one delta per block → done). Lab 4.2: failure turns, running out of script
    /// and a pre-cancelled token all end in an `error` terminal instead of a panic.
    fn stream(
        &self,
        _context: &AgentContext,
        _options: StreamOptions,
    ) -> AssistantMessageEventStream {
        panic!("Lab 4.1 ScriptedModel::stream 尚未实现（Lab 4.2 的失败终态也从这里出发）")
    }
}
