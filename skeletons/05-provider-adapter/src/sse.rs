//! OpenAI-compatible streaming wire: SSE `data:` framing, payload validation, and an
//! in-memory transport that feeds recorded bytes through both. A real HTTP transport would
//! hand its response body to the same `SseParser` and `ChunkDecoder`.

use std::sync::Mutex;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::provider_adapter::{
    ChunkReceiver, ChunkResult, FinishReason, ProviderChunk, ProviderRequest, ProviderTransport,
    ProviderUsage, TransportError, REQUEST_ABORTED,
};

/// Prefix of every wire-validation error.
pub const INVALID_CHUNK: &str = "Invalid provider chunk: ";

// ---------------------------------------------------------------- framing (Lab 5.4)

/// Splits a byte stream into SSE event payloads (the joined `data:` lines of each event).
/// Bytes may arrive in any fragmentation, including mid-line and mid-character.
#[derive(Debug, Default)]
#[allow(dead_code)] // read by your Lab 5.4 code
pub struct SseParser {
    buffer: Vec<u8>,
    data: Vec<String>,
}

impl SseParser {
    pub fn new() -> Self {
        SseParser::default()
    }

    /// Feeds bytes; returns the payloads of every event completed by them.
    pub fn push(&mut self, _bytes: &[u8]) -> Vec<String> {
        panic!("Lab 5.4 SseParser::push 尚未实现")
    }

    /// End of input: an unterminated last line still counts, leftover data is dispatched.
    pub fn finish(&mut self) -> Vec<String> {
        panic!("Lab 5.4 SseParser::finish 尚未实现")
    }
}

// ---------------------------------------------------------------- payloads (Lab 5.4)

/// Validates OpenAI chat-completion chunks and turns them into `ProviderChunk`s. The finish
/// reason and usage are remembered across payloads, because providers send usage in a
/// trailing payload after `finish_reason`; `finish()` yields the single `Finish` chunk.
#[derive(Debug, Default)]
#[allow(dead_code)] // read by your Lab 5.4 code
pub struct ChunkDecoder {
    finish_reason: Option<FinishReason>,
    usage: ProviderUsage,
    done: bool,
}

impl ChunkDecoder {
    pub fn new() -> Self {
        ChunkDecoder::default()
    }

    /// True once `[DONE]` was seen: nothing after it is read.
    pub fn is_done(&self) -> bool {
        self.done
    }

    pub fn decode(&mut self, _payload: &str) -> Result<Vec<ProviderChunk>, TransportError> {
        panic!("Lab 5.4 ChunkDecoder::decode 尚未实现")
    }

    /// The `Finish` chunk, if a finish reason was seen.
    pub fn finish(&self) -> Option<ProviderChunk> {
        panic!("Lab 5.4 ChunkDecoder::finish 尚未实现")
    }
}

/// Runs recorded response bytes through framing and validation, exactly as a live
/// transport would: stops at `[DONE]` or at the first error, and appends the `Finish`
/// chunk at the end.
pub fn decode_sse<'a>(_fragments: impl IntoIterator<Item = &'a [u8]>) -> Vec<ChunkResult> {
    panic!("Lab 5.4 decode_sse 尚未实现")
}

// ---------------------------------------------------------------- in-memory transport

/// Replays recorded SSE response bytes (split into fragments, as reads would deliver them)
/// for every request, and records the requests.
#[derive(Debug, Default)]
pub struct SseTransport {
    fragments: Vec<Vec<u8>>,
    requests: Mutex<Vec<ProviderRequest>>,
}

impl SseTransport {
    pub fn new(fragments: Vec<Vec<u8>>) -> Self {
        SseTransport {
            fragments,
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

impl ProviderTransport for SseTransport {
    fn stream(&self, request: ProviderRequest, cancel: CancellationToken) -> ChunkReceiver {
        self.requests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(request);
        let (sender, receiver) = mpsc::unbounded_channel();
        if cancel.is_cancelled() {
            let _ = sender.send(Err(TransportError::new(REQUEST_ABORTED)));
            return receiver;
        }
        for item in decode_sse(self.fragments.iter().map(Vec::as_slice)) {
            // A closed receiver means the adapter stopped listening; nothing to report.
            let _ = sender.send(item);
        }
        receiver
    }
}
