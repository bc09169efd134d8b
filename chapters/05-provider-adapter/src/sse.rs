//! OpenAI-compatible streaming wire: SSE `data:` framing, payload validation, and an
//! in-memory transport that feeds recorded bytes through both. A real HTTP transport would
//! hand its response body to the same `SseParser` and `ChunkDecoder`.

use std::sync::Mutex;

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::provider_adapter::{
    ChunkReceiver, ChunkResult, FinishReason, ProviderChunk, ProviderRequest, ProviderTransport,
    ProviderUsage, TransportError, REQUEST_ABORTED,
};

/// Prefix of every wire-validation error.
pub const INVALID_CHUNK: &str = "Invalid provider chunk: ";

// region: Lab 5.4 answer-only invalid
fn invalid(detail: impl AsRef<str>) -> TransportError {
    TransportError::new(format!("{INVALID_CHUNK}{}", detail.as_ref()))
}
// endregion

/// Prefix of an error the provider reported in the stream itself (`{"error":{…}}`).
pub const PROVIDER_ERROR: &str = "Provider 返回错误：";

// region: Lab 5.4 answer-only provider_error
/// The provider's own message: `error.message`, a bare string, or the whole value as JSON.
fn provider_error(error: &Value) -> TransportError {
    let message = match error {
        Value::String(message) => message.clone(),
        Value::Object(fields) => match fields.get("message") {
            Some(Value::String(message)) => message.clone(),
            _ => error.to_string(),
        },
        other => other.to_string(),
    };
    TransportError::new(format!("{PROVIDER_ERROR}{message}"))
}
// endregion

// ---------------------------------------------------------------- framing (Lab 5.4)

/// Splits a byte stream into SSE event payloads (the joined `data:` lines of each event).
/// Bytes may arrive in any fragmentation, including mid-line and mid-character.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    data: Vec<String>,
}

impl SseParser {
    pub fn new() -> Self {
        SseParser::default()
    }

    /// Feeds bytes; returns the payloads of every event completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        // region: Lab 5.4 SseParser::push
        self.buffer.extend_from_slice(bytes);
        let mut payloads = Vec::new();
        // Splitting on the byte b'\n' is safe: it never occurs inside a UTF-8 sequence.
        while let Some(end) = self.buffer.iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            self.line(&line[..line.len() - 1], &mut payloads);
        }
        payloads
        // endregion
    }

    /// End of input: an unterminated last line still counts, leftover data is dispatched.
    pub fn finish(&mut self) -> Vec<String> {
        // region: Lab 5.4 SseParser::finish
        let mut payloads = Vec::new();
        if !self.buffer.is_empty() {
            let line = std::mem::take(&mut self.buffer);
            self.line(&line, &mut payloads);
        }
        self.dispatch(&mut payloads);
        payloads
        // endregion
    }

    // region: Lab 5.4 answer-only SseParser::line
    fn line(&mut self, raw: &[u8], payloads: &mut Vec<String>) {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line = String::from_utf8_lossy(raw);
        if line.is_empty() {
            self.dispatch(payloads);
        } else if line == "data" {
            self.data.push(String::new());
        } else if let Some(value) = line.strip_prefix("data:") {
            self.data
                .push(value.strip_prefix(' ').unwrap_or(value).to_string());
        }
        // Comments (":…") and other fields (event:, id:, retry:) carry nothing we use.
    }
    // endregion

    // region: Lab 5.4 answer-only SseParser::dispatch
    fn dispatch(&mut self, payloads: &mut Vec<String>) {
        if !self.data.is_empty() {
            payloads.push(self.data.join("\n"));
            self.data.clear();
        }
    }
    // endregion
}

// ---------------------------------------------------------------- payloads (Lab 5.4)

// region: Lab 5.4 answer-only optional_u64
fn optional_u64(
    object: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<u64>, TransportError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| invalid(format!("{path}.{key} must be a non-negative integer"))),
    }
}
// endregion

// region: Lab 5.4 answer-only optional_str
fn optional_str<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, TransportError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(value)) => Ok(Some(value)),
        Some(_) => Err(invalid(format!("{path}.{key} must be a string"))),
    }
}
// endregion

/// Validates OpenAI chat-completion chunks and turns them into `ProviderChunk`s. The finish
/// reason and usage are remembered across payloads, because providers send usage in a
/// trailing payload after `finish_reason`; `finish()` yields the single `Finish` chunk.
#[derive(Debug, Default)]
pub struct ChunkDecoder {
    finish_reason: Option<FinishReason>,
    usage: ProviderUsage,
    done: bool,
    /// The tool call the last tool delta went to: its index and id (if one was seen).
    last_tool: Option<(usize, Option<String>)>,
    /// One past the highest tool-call index seen: where a call without `index` opens.
    next_tool: usize,
}

impl ChunkDecoder {
    pub fn new() -> Self {
        ChunkDecoder::default()
    }

    /// True once `[DONE]` was seen: nothing after it is read.
    pub fn is_done(&self) -> bool {
        self.done
    }

    pub fn decode(&mut self, payload: &str) -> Result<Vec<ProviderChunk>, TransportError> {
        // region: Lab 5.4 ChunkDecoder::decode
        if payload.trim() == "[DONE]" {
            self.done = true;
            return Ok(Vec::new());
        }
        let value: Value =
            serde_json::from_str(payload).map_err(|_| invalid("data line is not valid JSON"))?;
        let Value::Object(object) = value else {
            return Err(invalid("payload must be an object"));
        };
        if let Some(error) = object.get("error") {
            // The provider's own words, not a validation complaint about the payload's shape.
            return Err(provider_error(error));
        }
        let has_usage = self.merge_usage(&object)?;
        let Some(Value::Array(choices)) = object.get("choices") else {
            return Err(invalid("choices must be an array"));
        };
        match choices.as_slice() {
            [] if has_usage => Ok(Vec::new()),
            [] => Err(invalid("empty choices require usage")),
            [choice] => self.choice(choice),
            // Merging several choices would silently mix two different answers.
            _ => Err(invalid("only one streamed choice is supported")),
        }
        // endregion
    }

    /// The `Finish` chunk, if a finish reason was seen.
    pub fn finish(&self) -> Option<ProviderChunk> {
        // region: Lab 5.4 ChunkDecoder::finish
        self.finish_reason.map(|reason| ProviderChunk::Finish {
            reason,
            usage: self.usage,
        })
        // endregion
    }

    // region: Lab 5.4 answer-only ChunkDecoder::merge_usage
    fn merge_usage(&mut self, object: &Map<String, Value>) -> Result<bool, TransportError> {
        let usage = match object.get("usage") {
            None | Some(Value::Null) => return Ok(false),
            Some(Value::Object(usage)) => usage,
            Some(_) => return Err(invalid("usage must be an object")),
        };
        let input = optional_u64(usage, "prompt_tokens", "usage")?;
        let output = optional_u64(usage, "completion_tokens", "usage")?;
        let total = optional_u64(usage, "total_tokens", "usage")?;
        self.usage.input = input.or(self.usage.input);
        self.usage.output = output.or(self.usage.output);
        self.usage.total_tokens = total.or(self.usage.total_tokens);
        Ok(true)
    }
    // endregion

    // region: Lab 5.4 answer-only ChunkDecoder::choice
    fn choice(&mut self, choice: &Value) -> Result<Vec<ProviderChunk>, TransportError> {
        let Value::Object(choice) = choice else {
            return Err(invalid("choices[0] must be an object"));
        };
        optional_u64(choice, "index", "choices[0]")?;
        let Some(Value::Object(delta)) = choice.get("delta") else {
            return Err(invalid("choices[0].delta must be an object"));
        };

        let mut chunks = Vec::new();
        // DeepSeek and Qwen name it `reasoning_content`, vLLM and OpenRouter `reasoning`.
        let reasoning = match optional_str(delta, "reasoning_content", "choices[0].delta")? {
            Some(reasoning) => Some(reasoning),
            None => optional_str(delta, "reasoning", "choices[0].delta")?,
        };
        if let Some(reasoning) = reasoning.filter(|reasoning| !reasoning.is_empty()) {
            chunks.push(ProviderChunk::Thinking {
                delta: reasoning.to_string(),
            });
        }
        if let Some(content) = optional_str(delta, "content", "choices[0].delta")? {
            if !content.is_empty() {
                chunks.push(ProviderChunk::Text {
                    delta: content.to_string(),
                });
            }
        }
        match delta.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) => {
                for (i, call) in calls.iter().enumerate() {
                    chunks
                        .push(self.tool_chunk(call, &format!("choices[0].delta.tool_calls[{i}]"))?);
                }
            }
            Some(_) => return Err(invalid("choices[0].delta.tool_calls must be an array")),
        }
        if !chunks.is_empty() && self.finish_reason.is_some() {
            return Err(invalid("content arrived after finish_reason"));
        }

        let reason = match optional_str(choice, "finish_reason", "choices[0]") {
            Ok(reason) => reason,
            Err(_) => return Err(invalid("finish_reason is not supported")),
        };
        if let Some(reason) = reason {
            let reason = match reason {
                "stop" => FinishReason::Stop,
                "length" => FinishReason::Length,
                "tool_calls" => FinishReason::ToolCalls,
                "content_filter" => FinishReason::ContentFilter,
                _ => return Err(invalid("finish_reason is not supported")),
            };
            match self.finish_reason {
                Some(previous) if previous != reason => {
                    return Err(invalid("finish_reason changed during the stream"));
                }
                _ => self.finish_reason = Some(reason),
            }
        }
        Ok(chunks)
    }
    // endregion

    // region: Lab 5.4 answer-only ChunkDecoder::tool_chunk
    fn tool_chunk(&mut self, call: &Value, path: &str) -> Result<ProviderChunk, TransportError> {
        let Value::Object(call) = call else {
            return Err(invalid(format!("{path} must be an object")));
        };
        let index = match call.get("index") {
            None | Some(Value::Null) => None,
            Some(index) => {
                let index = index.as_u64().ok_or_else(|| {
                    invalid(format!("{path}.index must be a non-negative integer"))
                })?;
                Some(index as usize)
            }
        };
        match call.get("type") {
            None | Some(Value::Null) => {}
            Some(Value::String(kind)) if kind == "function" => {}
            Some(_) => return Err(invalid(format!("{path}.type must be function"))),
        }
        let id = optional_str(call, "id", path)?;
        let (name, arguments) = match call.get("function") {
            None | Some(Value::Null) => (None, None),
            Some(Value::Object(function)) => {
                let function_path = format!("{path}.function");
                (
                    optional_str(function, "name", &function_path)?,
                    optional_str(function, "arguments", &function_path)?,
                )
            }
            Some(_) => return Err(invalid(format!("{path}.function must be an object"))),
        };
        if id.is_none() && name.is_none() && arguments.is_none() {
            return Err(invalid(format!("{path} has no tool-call delta")));
        }
        let index = index.unwrap_or_else(|| self.infer_tool_index(id));
        let known_id = match &self.last_tool {
            Some((last, last_id)) if *last == index => last_id.clone(),
            _ => None,
        };
        self.last_tool = Some((index, id.map(str::to_string).or(known_id)));
        self.next_tool = self.next_tool.max(index + 1);
        Ok(ProviderChunk::Tool {
            index,
            id: id.map(str::to_string),
            name: name.map(str::to_string),
            arguments_delta: arguments.map(str::to_string),
        })
    }
    // endregion

    // region: Lab 5.4 answer-only ChunkDecoder::infer_tool_index
    /// Some providers (Gemini's compatible endpoint) omit `index`: a delta with a new `id`
    /// opens the next call, a delta without one (or with the same id) continues the last.
    fn infer_tool_index(&self, id: Option<&str>) -> usize {
        match (&self.last_tool, id) {
            (Some((last, _)), None) => *last,
            (Some((last, Some(last_id))), Some(id)) if last_id == id => *last,
            _ => self.next_tool,
        }
    }
    // endregion
}

/// Runs recorded response bytes through framing and validation, exactly as a live
/// transport would: stops at `[DONE]` or at the first error, and appends the `Finish`
/// chunk at the end.
pub fn decode_sse<'a>(fragments: impl IntoIterator<Item = &'a [u8]>) -> Vec<ChunkResult> {
    // region: Lab 5.4 decode_sse
    let mut parser = SseParser::new();
    let mut decoder = ChunkDecoder::new();
    let mut out = Vec::new();
    let mut feed = |payloads: Vec<String>, out: &mut Vec<ChunkResult>| -> bool {
        for payload in payloads {
            match decoder.decode(&payload) {
                Ok(chunks) => out.extend(chunks.into_iter().map(Ok)),
                Err(error) => {
                    out.push(Err(error));
                    return false;
                }
            }
            if decoder.is_done() {
                return false;
            }
        }
        true
    };
    let mut open = true;
    for fragment in fragments {
        open = feed(parser.push(fragment), &mut out);
        if !open {
            break;
        }
    }
    if open {
        open = feed(parser.finish(), &mut out);
    }
    if open || decoder.is_done() {
        if let Some(finish) = decoder.finish() {
            out.push(Ok(finish));
        }
    }
    out
    // endregion
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
