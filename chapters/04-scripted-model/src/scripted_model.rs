//! A deterministic `Model` test double: it plays scripted assistant turns through the same
//! event protocol a real provider adapter uses, so upper layers cannot tell the difference.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::types::{
    assistant_message, assistant_message_event_stream, text, AgentContext, AssistantContent,
    AssistantMessage, AssistantMessageEventStream, Model, ModelEvent, StopReason, StreamOptions,
    ToolCall,
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

// skeleton: // Lab 4.1 keeps the cursor and the recorded requests here; add fields if you need more.
#[derive(Debug, Default)]
struct ScriptState {
    cursor: usize,
    requests: Vec<AgentContext>,
}

/// Plays its turns in order, one per `stream()` call. Clones share the script and the
/// recorded requests, so a test can hand one clone to the agent and inspect the other.
#[derive(Debug, Clone)]
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
        // region: Lab 4.1 requests
        self.lock().requests.clone()
        // endregion
    }

    // region: Lab 4.1 answer-only lock and take_turn
    fn lock(&self) -> std::sync::MutexGuard<'_, ScriptState> {
        // A panicking test thread must not hide the script from the other assertions.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a snapshot and consumes one script slot, even when the call will be refused:
    /// the Nth call always answers with the Nth turn.
    fn take_turn(&self, context: &AgentContext) -> Option<ScriptedTurn> {
        let mut state = self.lock();
        state.requests.push(context.clone());
        let turn = self.turns.get(state.cursor).cloned();
        state.cursor += 1;
        turn
    }
    // endregion
}

impl Model for ScriptedModel {
    // skeleton: /// Lab 4.1: record a copy of `context`, take the next turn, replay it as events
    // skeleton: /// (start → one delta per block → done). Lab 4.2: failure turns, running out of script
    // skeleton: /// and a pre-cancelled token all end in an `error` terminal instead of a panic.
    fn stream(
        &self,
        context: &AgentContext,
        options: StreamOptions,
    ) -> AssistantMessageEventStream {
        // region: Lab 4.1 ScriptedModel::stream
        let stream = assistant_message_event_stream();
        let turn = self.take_turn(context);
        let cancelled = options
            .cancel
            .as_ref()
            .is_some_and(|token| token.is_cancelled());
        // region: Lab 4.2 pre-cancelled or out of script
        // stub: if cancelled { todo!() }
        // stub: let Some(turn) = turn else { todo!() };
        if cancelled {
            refuse(&stream, StopReason::Aborted, REQUEST_ABORTED);
            return stream;
        }
        let Some(turn) = turn else {
            refuse(&stream, StopReason::Error, NO_MORE_RESPONSES);
            return stream;
        };
        // endregion
        replay(&stream, final_message(turn));
        stream
        // endregion
    }
}

// region: Lab 4.2 answer-only refuse
/// A call that never started: a single `error` terminal, no `start`.
fn refuse(stream: &AssistantMessageEventStream, reason: StopReason, message: &str) {
    let mut error = assistant_message(Vec::new(), reason);
    error.error_message = Some(message.to_string());
    stream.push(ModelEvent::Error {
        reason,
        error: error.clone(),
    });
    stream.end(error);
}
// endregion

// region: Lab 4.1 answer-only final_message and replay
fn final_message(turn: ScriptedTurn) -> AssistantMessage {
    match turn {
        ScriptedTurn::Message(message) => message,
        ScriptedTurn::Failure {
            stop_reason,
            error_message,
            partial_text,
        } => {
            // region: Lab 4.2 failure turns
            let content = partial_text
                .map(|value| vec![AssistantContent::Text(text(&value))])
                .unwrap_or_default();
            let mut message = assistant_message(content, stop_reason);
            message.error_message = Some(error_message);
            message
            // endregion
        }
    }
}

/// Streams `message` block by block; every event carries its own copy of the partial.
fn replay(stream: &AssistantMessageEventStream, message: AssistantMessage) {
    let mut partial = message.clone();
    partial.content.clear();
    partial.stop_reason = StopReason::Stop;
    partial.error_message = None;
    stream.push(ModelEvent::Start {
        partial: partial.clone(),
    });

    for (content_index, block) in message.content.iter().enumerate() {
        match block {
            AssistantContent::Text(block) => {
                partial.content.push(AssistantContent::Text(block.clone()));
                stream.push(ModelEvent::TextDelta {
                    content_index,
                    delta: block.text.clone(),
                    partial: partial.clone(),
                });
            }
            AssistantContent::ToolCall(call) => {
                // While streaming, a real adapter only has raw text; parsed arguments arrive
                // with `toolcall_end`.
                let raw = call
                    .raw_arguments
                    .clone()
                    .unwrap_or_else(|| call.arguments.to_string());
                partial.content.push(AssistantContent::ToolCall(ToolCall {
                    arguments: Value::Object(Default::default()),
                    raw_arguments: Some(raw.clone()),
                    ..call.clone()
                }));
                stream.push(ModelEvent::ToolcallDelta {
                    content_index,
                    delta: raw,
                    partial: partial.clone(),
                });
                partial.content[content_index] = AssistantContent::ToolCall(call.clone());
                stream.push(ModelEvent::ToolcallEnd {
                    content_index,
                    tool_call: call.clone(),
                    partial: partial.clone(),
                });
            }
        }
    }

    let reason = message.stop_reason;
    match reason {
        StopReason::Error | StopReason::Aborted => stream.push(ModelEvent::Error {
            reason,
            error: message.clone(),
        }),
        _ => stream.push(ModelEvent::Done {
            reason,
            message: message.clone(),
        }),
    }
    stream.end(message);
}
// endregion
