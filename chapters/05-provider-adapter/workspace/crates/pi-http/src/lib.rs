//! The HTTP client the course gives you: [`ReqwestClient`] implements the learner crate's
//! [`HttpClient`] seam with reqwest (rustls, bundled web roots).
//!
//! It only moves bytes. Building the request, reading the status, redacting the key and
//! decoding the SSE stream are the learner's `pi_course::http_transport`; this file never
//! looks inside a body.
//!
//! Two things a real provider needs are done here, below the seam, so the learner's transport
//! never sees them:
//!
//! - **Retries** ([`RetryPolicy`]): a 429, 500, 502, 503 or 504, or a connection that fails
//!   before the first body byte, is tried again after a backoff (or the server's `Retry-After`).
//!   Once a body byte has gone to the caller nothing is ever sent again. When the attempts run
//!   out the last answer goes to the caller as it came, so the transport reports it as before.
//! - **A stream-idle timeout** ([`HttpOptions::stream_idle`]): a response that sends nothing
//!   for that long ends with an error item instead of waiting forever.
//!
//! Both waits are futures: dropping the request (cancelling the turn) ends them at once.

use std::error::Error as _;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use pi_course::http_transport::{
    BodyChunk, BodyReceiver, Endpoint, HttpClient, HttpFuture, HttpRequest, HttpResponse,
    HttpTransport,
};
use pi_course::provider_adapter::OpenAiCompatibleModel;
use tokio::sync::mpsc;

/// How long connecting (TCP and TLS) may take. There is no limit on the whole response: a
/// streamed answer may legitimately run for minutes, and cancellation ends it instead.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Body reads buffered between the connection and the decoder.
const BODY_BUFFER: usize = 16;
/// How long a response may send nothing (no status line, no body bytes) by default.
pub const DEFAULT_STREAM_IDLE: Duration = Duration::from_secs(300);
/// The longest `Retry-After` that is waited for by default; a server asking for more is not
/// retried, since a wait that long is a quota, not a hiccup.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// When and how often a failed request is sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Requests sent at most, the first included; 1 never retries.
    pub max_attempts: u32,
    /// The wait before the first retry; each later one waits twice as long as the one before.
    pub base_delay: Duration,
    /// No backoff wait is longer than this.
    pub max_delay: Duration,
    /// The longest `Retry-After` honoured; a longer one ends the retries.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// Five attempts waiting 1, 2, 4 and 8 seconds between them.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            max_retry_after: MAX_RETRY_AFTER,
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retries.
    pub fn never() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// How many retries follow the first attempt.
    pub fn max_retries(&self) -> u32 {
        self.max_attempts.max(1) - 1
    }

    /// The backoff before retry `retry` (1 for the first): `base_delay · 2^(retry-1)`, capped
    /// by `max_delay`.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32 << retry.saturating_sub(1).min(20);
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }

    /// The wait before retry `retry`: the server's `Retry-After` when it sent one (`None`
    /// when that is longer than `max_retry_after`), the backoff otherwise.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Option<Duration> {
        match retry_after {
            Some(wait) if wait > self.max_retry_after => None,
            Some(wait) => Some(wait),
            None => Some(self.backoff(retry)),
        }
    }
}

/// Statuses that say "try again later": rate limited, or the server or a gateway failed.
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504)
}

/// A `Retry-After` value in seconds. The HTTP-date form is not parsed (`None`): the backoff
/// is used instead.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Why a request is being sent again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryCause {
    /// The server answered with this retryable status.
    Status(u16),
    /// No answer: the connection failed (refused, reset, DNS, TLS), with the client's reason.
    Connection(String),
}

/// One retry about to happen, for the program to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryNotice {
    /// Which retry this is, from 1.
    pub retry: u32,
    /// How many retries the policy allows.
    pub max_retries: u32,
    /// How long the client waits before sending again.
    pub delay: Duration,
    pub cause: RetryCause,
}

/// One Chinese line: `服务器返回 429（请求过多），3 秒后重试（第 1/4 次）…`.
impl fmt::Display for RetryNotice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            RetryCause::Status(status) => match status_meaning(*status) {
                Some(meaning) => write!(f, "服务器返回 {status}（{meaning}）")?,
                None => write!(f, "服务器返回 {status}")?,
            },
            RetryCause::Connection(reason) => write!(f, "连接失败（{reason}）")?,
        }
        write!(
            f,
            "，{}后重试（第 {}/{} 次）…",
            spoken_duration(self.delay),
            self.retry,
            self.max_retries
        )
    }
}

fn status_meaning(status: u16) -> Option<&'static str> {
    Some(match status {
        429 => "请求过多",
        500 => "服务器内部错误",
        502 => "网关错误",
        503 => "服务暂不可用",
        504 => "网关超时",
        _ => return None,
    })
}

/// `3 秒`, `250 毫秒`, `1.5 秒`: whole seconds as seconds, short waits in milliseconds.
pub fn spoken_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis.is_multiple_of(1000) {
        format!("{} 秒", millis / 1000)
    } else if millis < 1000 {
        format!("{millis} 毫秒")
    } else {
        format!("{:.1} 秒", duration.as_secs_f64())
    }
}

/// The error item a response ends with when it sent nothing for `idle`.
pub fn idle_reason(idle: Duration) -> String {
    format!("流式响应空闲超过 {}，已放弃", spoken_duration(idle))
}

/// Called once per retry, before its wait.
pub type RetryCallback = Arc<dyn Fn(&RetryNotice) + Send + Sync>;

/// How a [`ReqwestClient`] retries and how long a response may stall.
#[derive(Clone)]
pub struct HttpOptions {
    pub retry: RetryPolicy,
    /// How long a response may send nothing, whether its status line or its next body bytes.
    pub stream_idle: Duration,
    /// Told about every retry; `None` retries silently.
    pub on_retry: Option<RetryCallback>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            retry: RetryPolicy::default(),
            stream_idle: DEFAULT_STREAM_IDLE,
            on_retry: None,
        }
    }
}

impl fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpOptions")
            .field("retry", &self.retry)
            .field("stream_idle", &self.stream_idle)
            .field("on_retry", &self.on_retry.as_ref().map(|_| "Fn"))
            .finish()
    }
}

/// reqwest behind the course's `HttpClient` trait. Cheap to clone; clones share connections.
#[derive(Debug, Clone)]
pub struct ReqwestClient {
    client: reqwest::Client,
    options: HttpOptions,
}

impl ReqwestClient {
    /// A client for requests to `base_url` with the default [`HttpOptions`]. Proxies from the
    /// environment (`HTTPS_PROXY`, …) are honoured, except for a loopback host: a local server
    /// is never behind a proxy.
    pub fn new(base_url: &str) -> Result<Self, String> {
        ReqwestClient::with_options(base_url, HttpOptions::default())
    }

    /// A client for requests to `base_url` that retries and times out as `options` say.
    pub fn with_options(base_url: &str, options: HttpOptions) -> Result<Self, String> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("pi-course/", env!("CARGO_PKG_VERSION")));
        if is_loopback(base_url) {
            builder = builder.no_proxy();
        }
        let client = builder.build().map_err(|error| describe(&error))?;
        Ok(ReqwestClient { client, options })
    }
}

/// Whether `url` names this machine: `localhost`, `127.0.0.0/8` or `::1`.
pub fn is_loopback(url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(url) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.is_loopback())
}

/// A reqwest error with its causes: "error sending request" alone does not say that the
/// connection was refused.
fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// What one request came to.
enum Attempt {
    /// A status line arrived. For a 2xx, the first body read is already in `response.body`.
    Answered {
        response: HttpResponse,
        retry_after: Option<Duration>,
    },
    /// A 2xx whose connection failed before any body byte: nothing reached the caller, so it
    /// may be sent again. `response` carries the failure as its only body item.
    CutBeforeBody {
        response: HttpResponse,
        reason: String,
    },
    /// No status line. `retryable` is false for a request that could not be built and for a
    /// server that accepted the connection but stayed silent past the idle timeout.
    Failed { reason: String, retryable: bool },
}

impl Attempt {
    fn into_result(self) -> Result<HttpResponse, String> {
        match self {
            Attempt::Answered { response, .. } | Attempt::CutBeforeBody { response, .. } => {
                Ok(response)
            }
            Attempt::Failed { reason, .. } => Err(reason),
        }
    }

    /// Why this attempt may be retried, and the server's `Retry-After`; `None` if it may not.
    fn retry_cause(&self) -> Option<(RetryCause, Option<Duration>)> {
        match self {
            Attempt::Answered {
                response,
                retry_after,
            } if is_retryable_status(response.status) => {
                Some((RetryCause::Status(response.status), *retry_after))
            }
            Attempt::Answered { .. } => None,
            Attempt::CutBeforeBody { reason, .. } => {
                Some((RetryCause::Connection(reason.clone()), None))
            }
            Attempt::Failed {
                reason,
                retryable: true,
            } => Some((RetryCause::Connection(reason.clone()), None)),
            Attempt::Failed { .. } => None,
        }
    }
}

impl ReqwestClient {
    /// Sends `request` once. Only the status line and, for a 2xx, the first body read are
    /// awaited here; the rest of the body is read by a spawned task as the caller takes it.
    async fn attempt(&self, request: &HttpRequest) -> Attempt {
        let idle = self.options.stream_idle;
        let mut builder = self.client.post(&request.url).body(request.body.clone());
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        let sent = match tokio::time::timeout(idle, builder.send()).await {
            Ok(sent) => sent,
            Err(_) => {
                return Attempt::Failed {
                    reason: format!("等待响应超过 {}，已放弃", spoken_duration(idle)),
                    retryable: false,
                }
            }
        };
        let mut response = match sent {
            Ok(response) => response,
            Err(error) => {
                return Attempt::Failed {
                    reason: describe(&error),
                    retryable: !error.is_builder(),
                }
            }
        };
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(parse_retry_after);
            let body = spawn_body_reader(response, None, idle);
            return Attempt::Answered {
                response: HttpResponse { status, body },
                retry_after,
            };
        }
        // A 2xx: wait for the first read, so that a connection lost before any byte can still
        // be retried. The caller would be waiting for these bytes anyway.
        let first = match tokio::time::timeout(idle, response.chunk()).await {
            Ok(Ok(Some(bytes))) => Some(Ok(bytes.to_vec())),
            Ok(Ok(None)) => None,
            Ok(Err(error)) => {
                let reason = describe(&error);
                let (sender, body) = mpsc::channel(1);
                let _ = sender.try_send(Err(reason.clone()));
                return Attempt::CutBeforeBody {
                    response: HttpResponse { status, body },
                    reason,
                };
            }
            Err(_) => Some(Err(idle_reason(idle))),
        };
        let body = match first {
            // The body ended before it began: an empty channel, already closed.
            None => mpsc::channel(1).1,
            Some(first) => spawn_body_reader(response, Some(first), idle),
        };
        Attempt::Answered {
            response: HttpResponse { status, body },
            retry_after: None,
        }
    }

    /// Sends `request` until an attempt is not retryable or the policy's attempts run out.
    async fn send_with_retries(&self, request: HttpRequest) -> Result<HttpResponse, String> {
        let policy = self.options.retry;
        let max_retries = policy.max_retries();
        let mut retry = 0;
        loop {
            let attempt = self.attempt(&request).await;
            if retry >= max_retries {
                return attempt.into_result();
            }
            let Some((cause, retry_after)) = attempt.retry_cause() else {
                return attempt.into_result();
            };
            retry += 1;
            let Some(delay) = policy.delay(retry, retry_after) else {
                return attempt.into_result();
            };
            // Dropping the answer closes its connection before the wait.
            drop(attempt);
            if let Some(on_retry) = &self.options.on_retry {
                on_retry(&RetryNotice {
                    retry,
                    max_retries,
                    delay,
                    cause,
                });
            }
            tokio::time::sleep(delay).await;
        }
    }
}

/// The body channel: `first` (if any) and then every later read, each within `idle` of the
/// one before. The task stops, dropping the response and so its connection, once the reader
/// is gone, the body ends or a read fails.
fn spawn_body_reader(
    mut response: reqwest::Response,
    first: Option<BodyChunk>,
    idle: Duration,
) -> BodyReceiver {
    let (sender, body) = mpsc::channel(BODY_BUFFER);
    tokio::spawn(async move {
        if let Some(item) = first {
            let failed = item.is_err();
            if sender.send(item).await.is_err() || failed {
                return;
            }
        }
        loop {
            let read = tokio::select! {
                // The reader is gone: dropping `response` closes the connection.
                _ = sender.closed() => return,
                read = tokio::time::timeout(idle, response.chunk()) => read,
            };
            let item = match read {
                Ok(Ok(Some(bytes))) => Ok(bytes.to_vec()),
                Ok(Ok(None)) => return,
                Ok(Err(error)) => Err(describe(&error)),
                Err(_) => Err(idle_reason(idle)),
            };
            let failed = item.is_err();
            if sender.send(item).await.is_err() || failed {
                return;
            }
        }
    });
    body
}

impl HttpClient for ReqwestClient {
    fn post(&self, request: HttpRequest) -> HttpFuture {
        let client = self.clone();
        Box::pin(async move { client.send_with_retries(request).await })
    }
}

/// The provider name a model built here reports in its messages.
pub const PROVIDER: &str = "openai-compatible";

/// An `OpenAiCompatibleModel` that talks to `endpoint` over real HTTP, with the default
/// [`HttpOptions`]: retries as [`RetryPolicy::default`] says, silently.
pub fn openai_compatible_model(
    endpoint: Endpoint,
    model: &str,
) -> Result<OpenAiCompatibleModel, String> {
    openai_compatible_model_with(endpoint, model, HttpOptions::default())
}

/// An `OpenAiCompatibleModel` over a client that retries and times out as `options` say.
pub fn openai_compatible_model_with(
    endpoint: Endpoint,
    model: &str,
    options: HttpOptions,
) -> Result<OpenAiCompatibleModel, String> {
    let client = Arc::new(ReqwestClient::with_options(&endpoint.base_url, options)?);
    let transport = Arc::new(HttpTransport::new(endpoint, client));
    Ok(OpenAiCompatibleModel::new(PROVIDER, model, transport))
}
