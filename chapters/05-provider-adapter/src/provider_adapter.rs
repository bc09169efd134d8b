//! The provider boundary: canonical messages out, OpenAI-compatible wire in.
//!
//! Outbound mapping is pure (`to_provider_messages`, `to_provider_tools`). Inbound, a
//! transport yields normalized `ProviderChunk`s and `InboundState` turns them into the same
//! `ModelEvent` protocol `ScriptedModel` speaks. The HTTP transport is `http_transport`, behind
//! its `HttpClient` seam; every test here runs offline over in-memory transports.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::types::{
    assistant_message, assistant_message_event_stream, current_system_prompt, AgentContext,
    AgentMessage, AssistantContent, AssistantMessage, AssistantMessageEventStream, Model,
    ModelEvent, StopReason, StreamOptions, TextContent, ToolCall, ToolDefinition, Usage,
};

/// Error text of a stream cancelled through `StreamOptions.cancel`.
pub const REQUEST_ABORTED: &str = "Request was aborted";
/// Error text of a stream that ended without telling us why it stopped.
pub const MISSING_FINISH: &str = "Provider stream ended without a finish chunk";
/// Error text of a turn the provider's content filter stopped (`finish_reason: content_filter`).
pub const CONTENT_FILTERED: &str =
    "Provider 的内容过滤拦下了这次回答（finish_reason: content_filter）";

// ---------------------------------------------------------------- outbound (Lab 5.1)

// region: Lab 5.1 answer-only join_texts
fn join_texts(blocks: &[TextContent]) -> String {
    blocks
        .iter()
        .map(|block| block.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}
// endregion

/// Canonical transcript → OpenAI chat messages. System messages are folded into one leading
/// `system` message (the replayed prompt); the transcript itself is never rewritten.
pub fn to_provider_messages(context: &AgentContext) -> Vec<Value> {
    // region: Lab 5.1 to_provider_messages
    let mut wire = Vec::new();
    if let Some(prompt) = current_system_prompt(&context.messages) {
        if !prompt.is_empty() {
            wire.push(json!({"role": "system", "content": prompt}));
        }
    }
    for message in &context.messages {
        match message {
            AgentMessage::System(_) => {}
            AgentMessage::User(user) => {
                wire.push(json!({"role": "user", "content": join_texts(&user.content)}));
            }
            AgentMessage::Assistant(assistant) => wire.push(assistant_to_wire(assistant)),
            AgentMessage::ToolResult(result) => wire.push(json!({
                "role": "tool",
                "tool_call_id": result.tool_call_id,
                "name": result.tool_name,
                "content": join_texts(&result.content),
            })),
        }
    }
    wire
    // endregion
}

// region: Lab 5.1 answer-only assistant_to_wire
fn assistant_to_wire(message: &AssistantMessage) -> Value {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for block in &message.content {
        match block {
            AssistantContent::Text(block) => texts.push(block.text.as_str()),
            AssistantContent::ToolCall(call) => calls.push(json!({
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": wire_arguments(call)},
            })),
        }
    }
    let text = texts.join("\n");
    let mut wire = json!({
        "role": "assistant",
        "content": if text.is_empty() { Value::Null } else { Value::String(text) },
    });
    if !calls.is_empty() {
        // DeepSeek's thinking mode rejects the next request of a tool turn unless the turn's
        // reasoning comes back with it; other turns never send it.
        if let Some(thinking) = message.thinking.as_deref().filter(|t| !t.is_empty()) {
            wire["reasoning_content"] = Value::String(thinking.to_string());
        }
        wire["tool_calls"] = Value::Array(calls);
    }
    wire
}
// endregion

// region: Lab 5.1 answer-only wire_arguments
/// The provider's own text wins: re-serialising could change what the model said. Text that is
/// not JSON (cut by `length` or an abort, or malformed by the model) never goes back: strict
/// servers (vLLM, several gateways) answer 400 to the whole request. `{}` goes instead; the
/// paired tool result already quotes what was received.
fn wire_arguments(call: &ToolCall) -> String {
    match (&call.raw_arguments, &call.arguments) {
        (Some(raw), _) if serde_json::from_str::<Value>(raw).is_ok() => raw.clone(),
        (Some(_), _) | (None, Value::Null) => "{}".to_string(),
        (None, arguments) => arguments.to_string(),
    }
}
// endregion

/// `None` for no tools, so the request carries no empty `tools` array.
pub fn to_provider_tools(tools: &[ToolDefinition]) -> Option<Vec<Value>> {
    // region: Lab 5.1 to_provider_tools
    if tools.is_empty() {
        return None;
    }
    Some(
        tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                })
            })
            .collect(),
    )
    // endregion
}

// ---------------------------------------------------------------- the seam

/// What the provider is asked: the transport serialises it however its wire needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderRequest {
    pub model: String,
    pub messages: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    /// The provider's content filter cut the answer (`content_filter`).
    ContentFilter,
}

impl FinishReason {
    pub fn stop_reason(self) -> StopReason {
        // region: Lab 5.2 FinishReason::stop_reason
        match self {
            FinishReason::Stop => StopReason::Stop,
            FinishReason::Length => StopReason::Length,
            FinishReason::ToolCalls => StopReason::ToolUse,
            // Not an answer: the turn ends in error, with `CONTENT_FILTERED` as its message.
            FinishReason::ContentFilter => StopReason::Error,
        }
        // endregion
    }
}

/// Token counts as the provider reports them; any of them may be missing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProviderUsage {
    pub input: Option<u64>,
    pub output: Option<u64>,
    pub total_tokens: Option<u64>,
}

impl ProviderUsage {
    pub fn normalize(self) -> Usage {
        // region: Lab 5.2 ProviderUsage::normalize
        let input = self.input.unwrap_or(0);
        let output = self.output.unwrap_or(0);
        Usage {
            input,
            output,
            total_tokens: self.total_tokens.unwrap_or(input + output),
        }
        // endregion
    }
}

/// One normalized piece of a provider stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderChunk {
    Text {
        delta: String,
    },
    /// A reasoning delta (`reasoning_content` or `reasoning`): kept apart from the text.
    Thinking {
        delta: String,
    },
    /// `index` is the provider's tool-call index, not a content index.
    Tool {
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments_delta: Option<String>,
    },
    Finish {
        reason: FinishReason,
        usage: ProviderUsage,
    },
}

/// A transport failure, carried as a value; `Display` is the message the learner sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportError(pub String);

impl TransportError {
    pub fn new(message: impl Into<String>) -> Self {
        TransportError(message.into())
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TransportError {}

pub type ChunkResult = Result<ProviderChunk, TransportError>;
pub type ChunkReceiver = mpsc::UnboundedReceiver<ChunkResult>;

/// Moves a request to a provider and its answer back as chunks. The channel closing is the
/// end of the stream; an `Err` item is a failure after which nothing more is read.
pub trait ProviderTransport: Send + Sync {
    fn stream(&self, request: ProviderRequest, cancel: CancellationToken) -> ChunkReceiver;
}

/// In-memory transport: yields the same chunks for every request and records the requests.
#[derive(Debug, Default)]
pub struct FixedTransport {
    chunks: Vec<ChunkResult>,
    requests: Mutex<Vec<ProviderRequest>>,
}

impl FixedTransport {
    pub fn new(chunks: Vec<ProviderChunk>) -> Self {
        FixedTransport::with_results(chunks.into_iter().map(Ok).collect())
    }

    /// Chunks and failures in order; everything after the first `Err` is never sent.
    pub fn with_results(chunks: Vec<ChunkResult>) -> Self {
        FixedTransport {
            chunks,
            requests: Mutex::new(Vec::new()),
        }
    }

    pub fn requests(&self) -> Vec<ProviderRequest> {
        self.requests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl ProviderTransport for FixedTransport {
    fn stream(&self, request: ProviderRequest, _cancel: CancellationToken) -> ChunkReceiver {
        self.requests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(request);
        let (sender, receiver) = mpsc::unbounded_channel();
        for chunk in &self.chunks {
            let failed = chunk.is_err();
            // The receiver may be gone already; a test double has nobody to tell.
            let _ = sender.send(chunk.clone());
            if failed {
                break;
            }
        }
        receiver
    }
}

// ---------------------------------------------------------------- inbound (Lab 5.2)

#[derive(Debug, Clone)]
struct ToolBuffer {
    id: String,
    name: String,
    arguments_text: String,
    content_index: usize,
}

// region: Lab 5.2 answer-only ToolBuffer::streaming_call
impl ToolBuffer {
    fn streaming_call(&self) -> ToolCall {
        ToolCall {
            id: self.id.clone(),
            name: self.name.clone(),
            arguments: Value::String(self.arguments_text.clone()),
            raw_arguments: Some(self.arguments_text.clone()),
        }
    }
}
// endregion

/// Per-request state of the inbound state machine. Pure: no I/O, no clock except the
/// timestamps `assistant_message` stamps.
#[derive(Debug, Clone)]
pub struct InboundState {
    provider: String,
    model: String,
    content: Vec<AssistantContent>,
    text_slot: Option<usize>,
    thinking: String,
    tools: HashMap<usize, ToolBuffer>,
    finish: Option<(FinishReason, ProviderUsage)>,
}

impl InboundState {
    pub fn new(provider: &str, model: &str) -> Self {
        InboundState {
            provider: provider.to_string(),
            model: model.to_string(),
            content: Vec::new(),
            text_slot: None,
            thinking: String::new(),
            tools: HashMap::new(),
            finish: None,
        }
    }

    // region: Lab 5.2 answer-only InboundState::message
    fn message(&self, content: Vec<AssistantContent>, stop_reason: StopReason) -> AssistantMessage {
        let mut message = assistant_message(content, stop_reason);
        if !self.thinking.is_empty() {
            message.thinking = Some(self.thinking.clone());
        }
        message.provider = self.provider.clone();
        message.model = self.model.clone();
        message
    }
    // endregion

    /// The message as it stands: what every delta event carries.
    pub fn partial(&self) -> AssistantMessage {
        // region: Lab 5.2 InboundState::partial
        self.message(self.content.clone(), StopReason::Stop)
        // endregion
    }

    /// Applies one chunk; text and tool chunks yield their delta event, `Finish` is kept
    /// for `finish()`.
    pub fn apply(&mut self, chunk: ProviderChunk) -> Option<ModelEvent> {
        // region: Lab 5.2 InboundState::apply
        match chunk {
            ProviderChunk::Text { delta } => {
                // One text block per message, even when text and tool calls interleave.
                let content_index = match self.text_slot {
                    Some(slot) => slot,
                    None => {
                        self.content.push(AssistantContent::Text(TextContent {
                            text: String::new(),
                        }));
                        self.text_slot = Some(self.content.len() - 1);
                        self.content.len() - 1
                    }
                };
                if let AssistantContent::Text(block) = &mut self.content[content_index] {
                    block.text.push_str(&delta);
                }
                Some(ModelEvent::TextDelta {
                    content_index,
                    delta,
                    partial: self.partial(),
                })
            }
            ProviderChunk::Thinking { delta } => {
                // Never mixed into the text. The protocol has no thinking event: the next
                // event's `partial` (and the final message) carry it.
                self.thinking.push_str(&delta);
                None
            }
            ProviderChunk::Tool {
                index,
                id,
                name,
                arguments_delta,
            } => {
                let next_slot = self.content.len();
                let buffer = self.tools.entry(index).or_insert_with(|| ToolBuffer {
                    id: format!("call-{index}"),
                    name: String::new(),
                    arguments_text: String::new(),
                    content_index: next_slot,
                });
                if let Some(id) = id {
                    buffer.id = id;
                }
                if let Some(name) = name {
                    buffer.name = name;
                }
                let delta = arguments_delta.unwrap_or_default();
                buffer.arguments_text.push_str(&delta);
                let content_index = buffer.content_index;
                let call = AssistantContent::ToolCall(buffer.streaming_call());
                if content_index == self.content.len() {
                    self.content.push(call);
                } else {
                    self.content[content_index] = call;
                }
                Some(ModelEvent::ToolcallDelta {
                    content_index,
                    delta,
                    partial: self.partial(),
                })
            }
            ProviderChunk::Finish { reason, usage } => {
                self.finish = Some((reason, usage));
                None
            }
        }
        // endregion
    }

    /// After the transport ended: one `toolcall_end` per buffered call (in content order)
    /// and the final message, or the error text when the stream cannot be completed.
    pub fn finish(&mut self) -> Result<(Vec<ModelEvent>, AssistantMessage), String> {
        // region: Lab 5.2 InboundState::finish
        let Some((reason, usage)) = self.finish else {
            return Err(MISSING_FINISH.to_string());
        };
        if reason == FinishReason::ContentFilter {
            return Err(CONTENT_FILTERED.to_string());
        }
        // Tool calls run whenever they are present: vLLM, SGLang, older Ollama (and OpenAI at
        // times) finish a tool turn with `stop`.
        let stop_reason = match reason {
            FinishReason::Stop if !self.tools.is_empty() => StopReason::ToolUse,
            reason => reason.stop_reason(),
        };
        let mut buffers: Vec<ToolBuffer> = self.tools.values().cloned().collect();
        buffers.sort_by_key(|buffer| buffer.content_index);

        let mut events = Vec::new();
        for buffer in buffers {
            // Only a tool turn's arguments are parsed; a `length` cut keeps the truncated text
            // so nothing downstream mistakes it for real arguments. Text that does not parse
            // stays the raw string too: the turn goes on, and the tool contract answers the
            // call with an error that quotes it (chapter 06).
            let arguments = if stop_reason == StopReason::ToolUse {
                let text = if buffer.arguments_text.is_empty() {
                    "{}"
                } else {
                    buffer.arguments_text.as_str()
                };
                serde_json::from_str(text)
                    .unwrap_or_else(|_| Value::String(buffer.arguments_text.clone()))
            } else {
                Value::String(buffer.arguments_text.clone())
            };
            let tool_call = ToolCall {
                id: buffer.id.clone(),
                name: buffer.name.clone(),
                arguments,
                raw_arguments: Some(buffer.arguments_text.clone()),
            };
            self.content[buffer.content_index] = AssistantContent::ToolCall(tool_call.clone());
            events.push(ModelEvent::ToolcallEnd {
                content_index: buffer.content_index,
                tool_call,
                partial: self.message(self.content.clone(), stop_reason),
            });
        }
        let mut message = self.message(self.content.clone(), stop_reason);
        message.usage = usage.normalize();
        Ok((events, message))
        // endregion
    }

    /// The terminal message of a failed stream: partial content kept, zero usage.
    pub fn fail(&self, reason: StopReason, error_message: &str) -> AssistantMessage {
        // region: Lab 5.2 InboundState::fail
        let mut message = self.message(self.content.clone(), reason);
        message.error_message = Some(error_message.to_string());
        message
        // endregion
    }
}

// ---------------------------------------------------------------- the model (Lab 5.3)

/// A `Model` backed by any OpenAI-compatible transport.
#[derive(Clone)]
pub struct OpenAiCompatibleModel {
    provider: String,
    model: String,
    transport: Arc<dyn ProviderTransport>,
}

impl OpenAiCompatibleModel {
    pub fn new(provider: &str, model: &str, transport: Arc<dyn ProviderTransport>) -> Self {
        OpenAiCompatibleModel {
            provider: provider.to_string(),
            model: model.to_string(),
            transport,
        }
    }
}

impl Model for OpenAiCompatibleModel {
    /// Needs a tokio runtime: the chunks are consumed by a spawned task.
    fn stream(
        &self,
        context: &AgentContext,
        options: StreamOptions,
    ) -> AssistantMessageEventStream {
        // region: Lab 5.3 OpenAiCompatibleModel::stream
        let stream = assistant_message_event_stream();
        let mut state = InboundState::new(&self.provider, &self.model);
        stream.push(ModelEvent::Start {
            partial: state.partial(),
        });
        let cancel = options.cancel.unwrap_or_default();
        let request = ProviderRequest {
            model: self.model.clone(),
            messages: to_provider_messages(context),
            tools: to_provider_tools(&context.tools),
        };
        let mut chunks = self.transport.stream(request, cancel.clone());
        let output = stream.clone();
        tokio::spawn(async move {
            let failure = loop {
                let next = tokio::select! {
                    biased;
                    _ = cancel.cancelled() => break (StopReason::Aborted, REQUEST_ABORTED.to_string()),
                    next = chunks.recv() => next,
                };
                match next {
                    Some(Ok(chunk)) => {
                        if let Some(event) = state.apply(chunk) {
                            output.push(event);
                        }
                    }
                    // A transport that noticed the cancellation first still means "aborted".
                    Some(Err(_)) if cancel.is_cancelled() => {
                        break (StopReason::Aborted, REQUEST_ABORTED.to_string())
                    }
                    Some(Err(error)) => break (StopReason::Error, error.to_string()),
                    None => match state.finish() {
                        Ok((events, message)) => {
                            for event in events {
                                output.push(event);
                            }
                            output.push(ModelEvent::Done {
                                reason: message.stop_reason,
                                message: message.clone(),
                            });
                            output.end(message);
                            return;
                        }
                        Err(error) => break (StopReason::Error, error),
                    },
                }
            };
            let (reason, error_message) = failure;
            let error = state.fail(reason, &error_message);
            output.push(ModelEvent::Error {
                reason,
                error: error.clone(),
            });
            output.end(error);
        });
        stream
        // endregion
    }
}
