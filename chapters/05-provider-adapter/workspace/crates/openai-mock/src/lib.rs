//! A scripted OpenAI-compatible `/chat/completions` server on 127.0.0.1.
//!
//! Real TCP and real HTTP/1.1 chunked streaming (hyper), so a client under test meets the
//! same framing, disconnects and timing a provider gives it, without leaving the machine.
//! Each request gets the next scripted [`Reply`]; every request is recorded, and a client that
//! goes away in the middle of a streamed answer is counted.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;

/// The path every OpenAI-compatible client posts to, below the base URL's `/v1`.
pub const CHAT_PATH: &str = "/v1/chat/completions";

/// One step of a streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Bytes sent as one HTTP chunk.
    Send(Vec<u8>),
    /// A pause before the next step.
    Wait(Duration),
    /// The connection is torn down here, without the terminating chunk.
    Cut,
    /// Nothing more is ever sent; the server waits until the client goes away.
    Hang,
}

impl Step {
    /// One SSE event whose data line is `payload`.
    pub fn event(payload: &Value) -> Step {
        Step::Send(sse_event(&payload.to_string()))
    }
}

/// A scripted answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `200 OK`, `content-type: text/event-stream`, body streamed step by step.
    Stream(Vec<Step>),
    /// Any status with a whole body, sent at once.
    Status { status: u16, body: String },
    /// Like `Status`, with extra response headers (`retry-after`, …) in this order.
    StatusWithHeaders {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// The connection is closed without any answer, not even a status line.
    Disconnect,
}

impl Reply {
    /// A `status` answer that asks the client to wait `seconds` before trying again.
    pub fn retry_after(status: u16, seconds: u64) -> Reply {
        Reply::StatusWithHeaders {
            status,
            headers: vec![("retry-after".to_string(), seconds.to_string())],
            body: format!("openai-mock: {status}, retry after {seconds} s"),
        }
    }

    /// A complete streamed answer from SSE payloads: one chunk per payload, then `[DONE]`.
    pub fn events(payloads: Vec<Value>) -> Reply {
        let mut steps: Vec<Step> = payloads.iter().map(Step::event).collect();
        steps.push(Step::Send(sse_event("[DONE]")));
        Reply::Stream(steps)
    }

    /// An assistant turn that says `text` (in two deltas) and stops, with usage last.
    pub fn text(text: &str) -> Reply {
        let cut = text
            .char_indices()
            .nth(text.chars().count() / 2)
            .map_or(text.len(), |(index, _)| index);
        let (first, second) = text.split_at(cut);
        Reply::events(vec![
            delta(json!({"role": "assistant", "content": first})),
            delta(json!({"content": second})),
            finish("stop"),
            usage(12, 5),
        ])
    }

    /// An assistant turn that calls tools, `(id, name, arguments)` in order, each call's
    /// arguments split across two deltas as providers do.
    pub fn tool_calls<S: AsRef<str>>(calls: &[(S, S, Value)]) -> Reply {
        let mut payloads = vec![delta(json!({"role": "assistant", "content": null}))];
        for (index, (id, name, arguments)) in calls.iter().enumerate() {
            let (id, name) = (id.as_ref(), name.as_ref());
            let arguments = arguments.to_string();
            let (head, tail) = arguments.split_at(arguments.len() / 2);
            payloads.push(delta(json!({"tool_calls": [{
                "index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": head},
            }]})));
            payloads.push(delta(json!({"tool_calls": [{
                "index": index, "function": {"arguments": tail},
            }]})));
        }
        payloads.push(finish("tool_calls"));
        payloads.push(usage(20, 8));
        Reply::events(payloads)
    }
}

/// One SSE event carrying `payload` as its data line.
pub fn sse_event(payload: &str) -> Vec<u8> {
    format!("data: {payload}\n\n").into_bytes()
}

/// A chat-completion chunk whose only choice carries `delta`.
pub fn delta(delta: Value) -> Value {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]})
}

/// The chunk that ends a turn with `reason`.
pub fn finish(reason: &str) -> Value {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

/// The trailing usage-only chunk `stream_options.include_usage` asks for.
pub fn usage(prompt: u64, completion: u64) -> Value {
    json!({"object": "chat.completion.chunk", "choices": [], "usage": {
        "prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }})
}

/// A request as the server received it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Lower-case names, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON (`Null` if it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// How replies are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// Request n gets reply n; requests past the script get `500 script exhausted`.
    InOrder,
    /// A request gets the reply whose index is the number of assistant messages it carries,
    /// so a scripted conversation can be replayed by any number of clients, one after another.
    ByTurn,
}

struct State {
    dispatch: Dispatch,
    script: Vec<Reply>,
    next: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
    disconnects: AtomicUsize,
    disconnected: Notify,
}

impl State {
    fn reply_for(&self, body: &[u8]) -> Reply {
        let exhausted = Reply::Status {
            status: 500,
            body: "openai-mock: script exhausted".to_string(),
        };
        match self.dispatch {
            Dispatch::InOrder => lock(&self.next).pop_front().unwrap_or(exhausted),
            Dispatch::ByTurn => {
                let turn = serde_json::from_slice::<Value>(body)
                    .ok()
                    .and_then(|body| {
                        body["messages"].as_array().map(|messages| {
                            messages
                                .iter()
                                .filter(|message| message["role"] == "assistant")
                                .count()
                        })
                    })
                    .unwrap_or(0);
                self.script.get(turn).cloned().unwrap_or(exhausted)
            }
        }
    }

    fn client_left(&self) {
        self.disconnects.fetch_add(1, Ordering::SeqCst);
        self.disconnected.notify_waiters();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running server; it stops when dropped.
pub struct MockServer {
    address: SocketAddr,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

impl MockServer {
    /// Starts a server answering requests with `replies` in order.
    pub async fn start(replies: Vec<Reply>) -> io::Result<MockServer> {
        MockServer::start_with(Dispatch::InOrder, replies, 0).await
    }

    /// Starts a server on `127.0.0.1:port` (0 picks a free port).
    pub async fn start_with(
        dispatch: Dispatch,
        replies: Vec<Reply>,
        port: u16,
    ) -> io::Result<MockServer> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let address = listener.local_addr()?;
        let state = Arc::new(State {
            dispatch,
            next: Mutex::new(replies.iter().cloned().collect()),
            script: replies,
            requests: Mutex::new(Vec::new()),
            disconnects: AtomicUsize::new(0),
            disconnected: Notify::new(),
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        Ok(MockServer {
            address,
            state,
            accept,
        })
    }

    /// `http://127.0.0.1:<port>/v1`: what `OPENAI_COMPATIBLE_BASE_URL` should be.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state.requests).clone()
    }

    /// How many streamed answers lost their client before they were complete.
    pub fn disconnects(&self) -> usize {
        self.state.disconnects.load(Ordering::SeqCst)
    }

    /// Waits until at least `count` streamed answers have lost their client, or `limit`
    /// passes; returns whether they did.
    pub async fn wait_for_disconnects(&self, count: usize, limit: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.state.disconnected.notified();
                if self.disconnects() >= count {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(move |request| answer(Arc::clone(&state), request));
            // A connection that ends in an error is what some scripts are for.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

type Body = BoxBody<Bytes, io::Error>;

async fn answer(state: Arc<State>, request: Request<Incoming>) -> io::Result<Response<Body>> {
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let headers = request
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes().to_vec(),
        Err(_) => Vec::new(),
    };
    let reply = if method == "POST" && path == CHAT_PATH {
        state.reply_for(&body)
    } else {
        Reply::Status {
            status: 404,
            body: format!("openai-mock: only POST {CHAT_PATH}"),
        }
    };
    lock(&state.requests).push(Recorded {
        method,
        path,
        headers,
        body,
    });
    match reply {
        Reply::Status { status, body } => Ok(whole(status, Vec::new(), body)),
        Reply::StatusWithHeaders {
            status,
            headers,
            body,
        } => Ok(whole(status, headers, body)),
        Reply::Stream(steps) => Ok(streamed(state, steps)),
        // A service error makes hyper close the connection without writing a response.
        Reply::Disconnect => Err(io::Error::other("openai-mock: disconnect")),
    }
}

fn whole(status: u16, headers: Vec<(String, String)>, body: String) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    for (name, value) in headers {
        let name = hyper::header::HeaderName::from_bytes(name.as_bytes())
            .expect("openai-mock：脚本里的响应头名字不合法");
        let value = hyper::header::HeaderValue::from_str(&value)
            .expect("openai-mock：脚本里的响应头值不合法");
        response.headers_mut().append(name, value);
    }
    response
}

fn streamed(state: Arc<State>, steps: Vec<Step>) -> Response<Body> {
    let (sender, receiver) = mpsc::channel::<Result<Frame<Bytes>, io::Error>>(1);
    tokio::spawn(async move {
        for step in steps {
            let delivered = match step {
                Step::Send(bytes) => sender
                    .send(Ok(Frame::data(Bytes::from(bytes))))
                    .await
                    .is_ok(),
                Step::Wait(pause) => tokio::select! {
                    _ = tokio::time::sleep(pause) => true,
                    _ = sender.closed() => false,
                },
                Step::Cut => {
                    // An error frame makes hyper drop the connection mid-body.
                    let _ = sender.send(Err(io::Error::other("openai-mock: cut"))).await;
                    return;
                }
                Step::Hang => {
                    sender.closed().await;
                    false
                }
            };
            if !delivered {
                state.client_left();
                return;
            }
        }
    });
    let body = StreamBody::new(ReceiverStream::new(receiver)).boxed();
    let mut response = Response::new(body);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    response
}
