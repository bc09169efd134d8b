//! The canonical message IR: what every later layer (model, provider, tools, loop) speaks.
//!
//! The serde attributes give exactly pi's wire JSON: `role` / `type` tags, camelCase fields,
//! optional fields omitted when absent.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::event_stream::EventStream;

/// `{"type":"text","text":…}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "text")]
pub struct TextContent {
    pub text: String,
}

/// A tool call proposed by the model. `arguments` stays untyped until a tool's schema parses
/// it (chapter 06); `raw_arguments` keeps the provider's original text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "toolCall", rename_all = "camelCase")]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_arguments: Option<String>,
}

/// A block of assistant content. Each block carries its own `type` tag, so the enum itself
/// adds none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AssistantContent {
    Text(TextContent),
    ToolCall(ToolCall),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub total_tokens: u64,
}

impl Usage {
    pub const EMPTY: Usage = Usage {
        input: 0,
        output: 0,
        total_tokens: 0,
    };
}

/// Five reasons; upstream pi has more, the course deliberately keeps these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    Stop,
    Length,
    ToolUse,
    Error,
    Aborted,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    pub content: Vec<TextContent>,
    pub timestamp: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssistantMessage {
    pub content: Vec<AssistantContent>,
    /// What a reasoning model thought before it answered (`reasoning_content` or `reasoning`
    /// on the wire). Never part of the text; omitted from JSON when there is none, so a
    /// transcript without thinking is byte for byte what it was before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    pub provider: String,
    pub model: String,
    pub usage: Usage,
    pub stop_reason: StopReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    pub timestamp: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultMessage {
    pub tool_call_id: String,
    pub tool_name: String,
    pub content: Vec<TextContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    pub is_error: bool,
    pub timestamp: u64,
}

/// The first system message is the base prompt; later ones are patches: non-empty `content`
/// is appended, `sections` replace by name, a `null` section deletes it. Section order is
/// insertion order (serde_json's `preserve_order`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemMessage {
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sections: Option<Map<String, Value>>,
    pub timestamp: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "camelCase")]
pub enum AgentMessage {
    System(SystemMessage),
    User(UserMessage),
    Assistant(AssistantMessage),
    ToolResult(ToolResultMessage),
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AgentContext {
    pub messages: Vec<AgentMessage>,
    /// Tools the model may call; omitted from JSON when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
}

/// A tool as the model sees it: name, description and a JSON Schema for its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// What a model stream emits. Tags are snake_case, fields camelCase, as in pi.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum ModelEvent {
    Start {
        partial: AssistantMessage,
    },
    TextDelta {
        content_index: usize,
        delta: String,
        partial: AssistantMessage,
    },
    ToolcallDelta {
        content_index: usize,
        delta: String,
        partial: AssistantMessage,
    },
    ToolcallEnd {
        content_index: usize,
        tool_call: ToolCall,
        partial: AssistantMessage,
    },
    Done {
        reason: StopReason,
        message: AssistantMessage,
    },
    Error {
        reason: StopReason,
        error: AssistantMessage,
    },
}

/// Message text of the error raised when a non-terminal event reaches the extractor.
pub const NOT_TERMINAL: &str = "非终态事件不能生成最终消息";

pub type AssistantMessageEventStream = EventStream<ModelEvent, AssistantMessage>;

/// A model stream: `done` and `error` are both terminal, and both settle `result()`.
pub fn assistant_message_event_stream() -> AssistantMessageEventStream {
    EventStream::new(
        |event: &ModelEvent| matches!(event, ModelEvent::Done { .. } | ModelEvent::Error { .. }),
        |event: &ModelEvent| match event {
            ModelEvent::Done { message, .. } => message.clone(),
            ModelEvent::Error { error, .. } => error.clone(),
            // Unreachable: the stream only extracts from events it judged terminal.
            _ => panic!("{NOT_TERMINAL}"),
        },
    )
}

#[derive(Debug, Clone, Default)]
pub struct StreamOptions {
    pub cancel: Option<CancellationToken>,
}

pub trait Model: Send + Sync {
    fn stream(&self, context: &AgentContext, options: StreamOptions)
        -> AssistantMessageEventStream;
}

/// Unix time in milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

pub fn text(value: &str) -> TextContent {
    TextContent {
        text: value.to_string(),
    }
}

pub fn user_message(value: &str) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: vec![text(value)],
        timestamp: now_ms(),
    })
}

/// An assistant message with the scripted defaults (`scripted` / `scripted-v1`, empty usage).
pub fn assistant_message(
    content: Vec<AssistantContent>,
    stop_reason: StopReason,
) -> AssistantMessage {
    AssistantMessage {
        content,
        thinking: None,
        provider: "scripted".into(),
        model: "scripted-v1".into(),
        usage: Usage::EMPTY,
        stop_reason,
        error_message: None,
        timestamp: now_ms(),
    }
}

fn join_texts<'a>(texts: impl Iterator<Item = &'a str>) -> String {
    texts.collect::<Vec<_>>().join("\n")
}

/// A lossy text projection: text blocks joined by newlines, tool calls left out.
pub fn text_of(message: &AgentMessage) -> String {
    match message {
        AgentMessage::System(system) => system_message_text(system),
        AgentMessage::User(user) => {
            join_texts(user.content.iter().map(|block| block.text.as_str()))
        }
        AgentMessage::ToolResult(result) => {
            join_texts(result.content.iter().map(|block| block.text.as_str()))
        }
        AgentMessage::Assistant(assistant) => {
            join_texts(assistant.content.iter().filter_map(|block| match block {
                AssistantContent::Text(text) => Some(text.text.as_str()),
                AssistantContent::ToolCall(_) => None,
            }))
        }
    }
}

/// `content`, then each non-null section in order; empty parts skipped; joined by blank lines.
pub fn system_message_text(message: &SystemMessage) -> String {
    let sections = message
        .sections
        .iter()
        .flat_map(|sections| sections.values());
    std::iter::once(message.content.as_str())
        .chain(sections.filter_map(Value::as_str))
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Ordered replay of every system message into one. Pure: inputs are not modified.
pub fn current_system_message(messages: &[AgentMessage]) -> Option<SystemMessage> {
    let mut systems = messages.iter().filter_map(|message| match message {
        AgentMessage::System(system) => Some(system),
        _ => None,
    });
    let first = systems.next()?;
    let mut contents = Vec::new();
    let mut sections = Map::new();
    for system in std::iter::once(first).chain(systems) {
        if !system.content.is_empty() {
            contents.push(system.content.as_str());
        }
        for (name, value) in system.sections.iter().flatten() {
            if value.is_null() {
                sections.shift_remove(name);
            } else {
                sections.insert(name.clone(), value.clone());
            }
        }
    }
    Some(SystemMessage {
        content: contents.join("\n\n"),
        sections: if sections.is_empty() {
            None
        } else {
            Some(sections)
        },
        timestamp: first.timestamp,
    })
}

/// The system prompt the model should see now, or `None` without any system message.
pub fn current_system_prompt(messages: &[AgentMessage]) -> Option<String> {
    current_system_message(messages).map(|message| system_message_text(&message))
}
