//! The HTTP side of an OpenAI-compatible provider: build the request, call a given HTTP
//! client, and turn its response bytes into the chunks `SseParser` and `ChunkDecoder` make.
//!
//! The client itself is not written here. `HttpClient` is the seam: the course's `pi-http`
//! package implements it with reqwest, and the tests implement it in memory. Keeping the
//! client behind a trait keeps this crate's test build free of any HTTP or TLS stack.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::provider_adapter::{
    ChunkReceiver, ChunkResult, ProviderRequest, ProviderTransport, TransportError, REQUEST_ABORTED,
};
use crate::sse::{ChunkDecoder, SseParser};

/// The public OpenAI endpoint; any OpenAI-compatible server works the same way.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// What a secret becomes in every error text.
pub const REDACTED: &str = "[REDACTED]";
/// How many characters of an error body an error message keeps.
pub const ERROR_EXCERPT_CHARS: usize = 200;
/// How many bytes of an error body are read at most; the rest is never downloaded.
pub const ERROR_BODY_LIMIT: usize = 4096;
/// Prefix of a failure to reach the server at all.
pub const NETWORK_ERROR: &str = "Network error: ";
/// Prefix of a response body that broke off after the status arrived.
pub const STREAM_INTERRUPTED: &str = "Provider stream interrupted: ";

/// Where to send requests, and the key that authorises them.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub base_url: String,
    pub api_key: String,
}

impl Endpoint {
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>) -> Self {
        Endpoint {
            base_url: base_url.into(),
            api_key: api_key.into(),
        }
    }
}

/// Written by hand so that `{:?}` — in a log line, a panic, a test failure — never shows
/// the key.
impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url)
            .field("api_key", &REDACTED)
            .finish()
    }
}

/// One HTTP request, complete and client-neutral: any client can send it as it is.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub url: String,
    /// Header names in lower case, in the order they are sent.
    pub headers: Vec<(String, String)>,
    /// The JSON body, serialised.
    pub body: Vec<u8>,
}

impl HttpRequest {
    /// The value of the first header called `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// The `authorization` header carries the key, so `{:?}` prints every header but that one.
impl fmt::Debug for HttpRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, value)| {
                let shown = if name == "authorization" {
                    REDACTED
                } else {
                    value.as_str()
                };
                (name.as_str(), shown)
            })
            .collect();
        f.debug_struct("HttpRequest")
            .field("url", &self.url)
            .field("headers", &headers)
            .field("body", &String::from_utf8_lossy(&self.body))
            .finish()
    }
}

/// One read of a response body, or the reason reading failed.
pub type BodyChunk = Result<Vec<u8>, String>;
/// The response body as its reads arrive; the channel closing is the end of the body.
/// Dropping the receiver tells the client to stop reading and release the connection.
pub type BodyReceiver = mpsc::Receiver<BodyChunk>;

/// Status line first, body later: a streamed answer's body is still arriving when this exists.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub body: BodyReceiver,
}

pub type HttpFuture = Pin<Box<dyn Future<Output = Result<HttpResponse, String>> + Send>>;

/// The given part: sends one POST and answers with the status and a body channel, or with
/// the reason no answer came (refused, DNS, TLS, timeout).
pub trait HttpClient: Send + Sync {
    fn post(&self, request: HttpRequest) -> HttpFuture;
}

// ---------------------------------------------------------------- the request (Lab 5.5)

/// `{base}/chat/completions`, whether or not the base URL ends in `/`.
pub fn chat_completions_url(base_url: &str) -> String {
    // region: Lab 5.5 chat_completions_url
    format!("{}/chat/completions", base_url.trim_end_matches('/'))
    // endregion
}

/// The JSON body: the adapter's request plus the streaming switches. The key is not here.
pub fn request_body(request: &ProviderRequest) -> Value {
    // region: Lab 5.5 request_body
    let mut body = json!({
        "model": request.model,
        "messages": request.messages,
        "stream": true,
        // Without this, OpenAI-compatible servers send no usage on a streamed answer.
        "stream_options": {"include_usage": true},
    });
    if let Some(tools) = &request.tools {
        body["tools"] = Value::Array(tools.clone());
    }
    body
    // endregion
}

/// The whole HTTP request: URL, headers (the key only in `authorization`), body.
pub fn build_request(endpoint: &Endpoint, request: &ProviderRequest) -> HttpRequest {
    // region: Lab 5.5 build_request
    HttpRequest {
        url: chat_completions_url(&endpoint.base_url),
        headers: vec![
            (
                "authorization".to_string(),
                format!("Bearer {}", endpoint.api_key),
            ),
            ("content-type".to_string(), "application/json".to_string()),
            ("accept".to_string(), "text/event-stream".to_string()),
        ],
        body: request_body(request).to_string().into_bytes(),
    }
    // endregion
}

/// Every occurrence of `secret` in `text` replaced by `[REDACTED]`. An empty secret
/// redacts nothing: there is nothing to hide, and replacing "" would garble every text.
pub fn redact(text: &str, secret: &str) -> String {
    // region: Lab 5.5 redact
    if secret.is_empty() {
        return text.to_string();
    }
    text.replace(secret, REDACTED)
    // endregion
}

// ---------------------------------------------------------------- the answer (Lab 5.6)

/// A non-2xx answer as one line: `HTTP 401: <excerpt>`. The body is redacted *before* it
/// is cut, so a key straddling the cut cannot leave half of itself behind; whitespace runs
/// become one space, and a cut excerpt ends in `…`.
pub fn status_error(status: u16, body: &[u8], api_key: &str) -> TransportError {
    // region: Lab 5.6 status_error
    let text = String::from_utf8_lossy(body);
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let redacted = redact(&flat, api_key);
    let mut excerpt: String = redacted.chars().take(ERROR_EXCERPT_CHARS).collect();
    if redacted.chars().count() > ERROR_EXCERPT_CHARS {
        excerpt.push('…');
    }
    if excerpt.is_empty() {
        TransportError::new(format!("HTTP {status}"))
    } else {
        TransportError::new(format!("HTTP {status}: {excerpt}"))
    }
    // endregion
}

/// Talks to an OpenAI-compatible `/chat/completions` through any [`HttpClient`].
#[derive(Clone)]
pub struct HttpTransport {
    endpoint: Endpoint,
    client: Arc<dyn HttpClient>,
}

impl HttpTransport {
    pub fn new(endpoint: Endpoint, client: Arc<dyn HttpClient>) -> Self {
        HttpTransport { endpoint, client }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl ProviderTransport for HttpTransport {
    /// Needs a tokio runtime: the request runs on a spawned task.
    fn stream(&self, request: ProviderRequest, cancel: CancellationToken) -> ChunkReceiver {
        let (sender, receiver) = mpsc::unbounded_channel();
        let http_request = build_request(&self.endpoint, &request);
        let client = Arc::clone(&self.client);
        let api_key = self.endpoint.api_key.clone();
        tokio::spawn(async move {
            let outcome = tokio::select! {
                outcome = pump(client, http_request, &api_key, &cancel, &sender) => outcome,
                // Nobody reads the chunks any more: stopping drops the body, which frees the
                // connection instead of downloading an answer no one will see.
                _ = sender.closed() => Ok(()),
            };
            if let Err(error) = outcome {
                // The adapter may have stopped listening; then there is nobody to tell.
                let _ = sender.send(Err(error));
            }
        });
        receiver
    }
}

// region: Lab 5.6 answer-only error_body
/// Reads the whole error body, up to `ERROR_BODY_LIMIT` bytes, unless cancelled first.
async fn error_body(body: &mut BodyReceiver, cancel: &CancellationToken) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    while bytes.len() < ERROR_BODY_LIMIT {
        let next = tokio::select! {
            biased;
            _ = cancel.cancelled() => return None,
            next = body.recv() => next,
        };
        match next {
            Some(Ok(read)) => bytes.extend_from_slice(&read),
            // An error body that breaks off is still worth showing as far as it came.
            Some(Err(_)) | None => break,
        }
    }
    bytes.truncate(ERROR_BODY_LIMIT);
    Some(bytes)
}
// endregion

// region: Lab 5.6 answer-only forward
/// Sends `payloads` on, decoded; `Ok(false)` once the stream is over (`[DONE]`).
fn forward(
    payloads: Vec<String>,
    decoder: &mut ChunkDecoder,
    sender: &mpsc::UnboundedSender<ChunkResult>,
) -> Result<bool, TransportError> {
    for payload in payloads {
        for chunk in decoder.decode(&payload)? {
            let _ = sender.send(Ok(chunk));
        }
        if decoder.is_done() {
            return Ok(false);
        }
    }
    Ok(true)
}
// endregion

/// One request from start to end. Chunks go out on `sender` as they are decoded; the one
/// failure, if any, is the `Err` returned. Every message that could hold the key is redacted.
async fn pump(
    client: Arc<dyn HttpClient>,
    request: HttpRequest,
    api_key: &str,
    cancel: &CancellationToken,
    sender: &mpsc::UnboundedSender<ChunkResult>,
) -> Result<(), TransportError> {
    // region: Lab 5.6 pump
    let aborted = || TransportError::new(REQUEST_ABORTED);
    // A request cancelled before it starts is never sent.
    if cancel.is_cancelled() {
        return Err(aborted());
    }
    let response = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Err(aborted()),
        response = client.post(request) => response,
    };
    let HttpResponse { status, mut body } = response.map_err(|error| {
        TransportError::new(format!("{NETWORK_ERROR}{}", redact(&error, api_key)))
    })?;
    if !(200..300).contains(&status) {
        let bytes = error_body(&mut body, cancel).await.ok_or_else(aborted)?;
        return Err(status_error(status, &bytes, api_key));
    }

    let mut parser = SseParser::new();
    let mut decoder = ChunkDecoder::new();
    loop {
        let next = tokio::select! {
            biased;
            // Returning drops `body`: the client stops reading and frees the connection.
            _ = cancel.cancelled() => return Err(aborted()),
            next = body.recv() => next,
        };
        match next {
            Some(Ok(bytes)) => {
                if !forward(parser.push(&bytes), &mut decoder, sender)? {
                    break;
                }
            }
            Some(Err(error)) => {
                return Err(TransportError::new(format!(
                    "{STREAM_INTERRUPTED}{}",
                    redact(&error, api_key)
                )))
            }
            None => {
                forward(parser.finish(), &mut decoder, sender)?;
                break;
            }
        }
    }
    // Usage may come after finish_reason, so the finish chunk goes out only at the end.
    if let Some(finish) = decoder.finish() {
        let _ = sender.send(Ok(finish));
    }
    Ok(())
    // endregion
}
