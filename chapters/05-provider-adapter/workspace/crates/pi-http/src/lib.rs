//! The HTTP client the course gives you: [`ReqwestClient`] implements the learner crate's
//! [`HttpClient`] seam with reqwest (rustls, bundled web roots).
//!
//! It only moves bytes. Building the request, reading the status, redacting the key and
//! decoding the SSE stream are the learner's `pi_course::http_transport`; this file never
//! looks inside a body.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use pi_course::http_transport::{
    Endpoint, HttpClient, HttpFuture, HttpRequest, HttpResponse, HttpTransport,
};
use pi_course::provider_adapter::OpenAiCompatibleModel;
use tokio::sync::mpsc;

/// How long connecting (TCP and TLS) may take. There is no limit on the whole response: a
/// streamed answer may legitimately run for minutes, and cancellation ends it instead.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Body reads buffered between the connection and the decoder.
const BODY_BUFFER: usize = 16;

/// reqwest behind the course's `HttpClient` trait. Cheap to clone; clones share connections.
#[derive(Debug, Clone)]
pub struct ReqwestClient {
    client: reqwest::Client,
}

impl ReqwestClient {
    /// A client for requests to `base_url`. Proxies from the environment (`HTTPS_PROXY`, …)
    /// are honoured, except for a loopback host: a local server is never behind a proxy.
    pub fn new(base_url: &str) -> Result<Self, String> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("pi-course/", env!("CARGO_PKG_VERSION")));
        if is_loopback(base_url) {
            builder = builder.no_proxy();
        }
        let client = builder.build().map_err(|error| describe(&error))?;
        Ok(ReqwestClient { client })
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

impl HttpClient for ReqwestClient {
    fn post(&self, request: HttpRequest) -> HttpFuture {
        let mut builder = self.client.post(&request.url).body(request.body);
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        Box::pin(async move {
            let mut response = builder.send().await.map_err(|error| describe(&error))?;
            let status = response.status().as_u16();
            let (sender, body) = mpsc::channel(BODY_BUFFER);
            tokio::spawn(async move {
                loop {
                    let read = tokio::select! {
                        // The reader is gone: dropping `response` closes the connection.
                        _ = sender.closed() => return,
                        read = response.chunk() => read,
                    };
                    let item = match read {
                        Ok(Some(bytes)) => Ok(bytes.to_vec()),
                        Ok(None) => return,
                        Err(error) => Err(describe(&error)),
                    };
                    let failed = item.is_err();
                    if sender.send(item).await.is_err() || failed {
                        return;
                    }
                }
            });
            Ok(HttpResponse { status, body })
        })
    }
}

/// The provider name a model built here reports in its messages.
pub const PROVIDER: &str = "openai-compatible";

/// An `OpenAiCompatibleModel` that talks to `endpoint` over real HTTP.
pub fn openai_compatible_model(
    endpoint: Endpoint,
    model: &str,
) -> Result<OpenAiCompatibleModel, String> {
    let client = Arc::new(ReqwestClient::new(&endpoint.base_url)?);
    let transport = Arc::new(HttpTransport::new(endpoint, client));
    Ok(OpenAiCompatibleModel::new(PROVIDER, model, transport))
}
