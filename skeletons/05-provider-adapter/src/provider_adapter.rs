//! The provider boundary: canonical messages out, OpenAI-compatible wire in.
//!
//! Outbound mapping is pure (`to_provider_messages`, `to_provider_tools`). Inbound, a
//! transport yields normalized `ProviderChunk`s and `InboundState` turns them into the same
//! `ModelEvent` protocol `ScriptedModel` speaks. The HTTP transport is deliberately absent:
//! every test runs offline over in-memory transports.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::types::{
    AgentContext, AssistantContent, AssistantMessage, AssistantMessageEventStream, Model,
    ModelEvent, StopReason, StreamOptions, ToolDefinition, Usage,
};

/// Error text of a stream cancelled through `StreamOptions.cancel`.
pub const REQUEST_ABORTED: &str = "Request was aborted";
/// Error text of a stream that ended without telling us why it stopped.
pub const MISSING_FINISH: &str = "Provider stream ended without a finish chunk";

// ---------------------------------------------------------------- outbound (Lab 5.1)

/// Canonical transcript → OpenAI chat messages. System messages are folded into one leading
/// `system` message (the replayed prompt); the transcript itself is never rewritten.
pub fn to_provider_messages(_context: &AgentContext) -> Vec<Value> {
    panic!("Lab 5.1 to_provider_messages 尚未实现")
}

/// `None` for no tools, so the request carries no empty `tools` array.
pub fn to_provider_tools(_tools: &[ToolDefinition]) -> Option<Vec<Value>> {
    panic!("Lab 5.1 to_provider_tools 尚未实现")
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
}

impl FinishReason {
    pub fn stop_reason(self) -> StopReason {
        panic!("Lab 5.2 FinishReason::stop_reason 尚未实现")
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
        panic!("Lab 5.2 ProviderUsage::normalize 尚未实现")
    }
}

/// One normalized piece of a provider stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderChunk {
    Text {
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
#[allow(dead_code)] // read by your Lab 5.2 code
struct ToolBuffer {
    id: String,
    name: String,
    arguments_text: String,
    content_index: usize,
}

/// Per-request state of the inbound state machine. Pure: no I/O, no clock except the
/// timestamps `assistant_message` stamps.
#[derive(Debug, Clone)]
#[allow(dead_code)] // read by your Lab 5.2 code
pub struct InboundState {
    provider: String,
    model: String,
    content: Vec<AssistantContent>,
    text_slot: Option<usize>,
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
            tools: HashMap::new(),
            finish: None,
        }
    }

    /// The message as it stands: what every delta event carries.
    pub fn partial(&self) -> AssistantMessage {
        panic!("Lab 5.2 InboundState::partial 尚未实现")
    }

    /// Applies one chunk; text and tool chunks yield their delta event, `Finish` is kept
    /// for `finish()`.
    pub fn apply(&mut self, _chunk: ProviderChunk) -> Option<ModelEvent> {
        panic!("Lab 5.2 InboundState::apply 尚未实现")
    }

    /// After the transport ended: one `toolcall_end` per buffered call (in content order)
    /// and the final message, or the error text when the stream cannot be completed.
    pub fn finish(&mut self) -> Result<(Vec<ModelEvent>, AssistantMessage), String> {
        panic!("Lab 5.2 InboundState::finish 尚未实现")
    }

    /// The terminal message of a failed stream: partial content kept, zero usage.
    pub fn fail(&self, _reason: StopReason, _error_message: &str) -> AssistantMessage {
        panic!("Lab 5.2 InboundState::fail 尚未实现")
    }
}

// ---------------------------------------------------------------- the model (Lab 5.3)

/// A `Model` backed by any OpenAI-compatible transport.
#[derive(Clone)]
#[allow(dead_code)] // read by your Lab 5.3 code
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
        _context: &AgentContext,
        _options: StreamOptions,
    ) -> AssistantMessageEventStream {
        panic!("Lab 5.3 OpenAiCompatibleModel::stream 尚未实现")
    }
}
