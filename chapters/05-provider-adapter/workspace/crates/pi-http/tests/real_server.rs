//! Your `HttpTransport` over the given reqwest client, against a real OpenAI-compatible
//! server on 127.0.0.1: real TCP, real chunked SSE, real disconnects. No test leaves the
//! machine.

use std::time::Duration;

use openai_mock::{delta, finish, usage, MockServer, Reply, Step, CHAT_PATH};
use std::sync::Arc;

use pi_course::http_transport::{Endpoint, HttpTransport, REDACTED};
use pi_course::provider_adapter::{ProviderRequest, ProviderTransport};
use pi_course::types::{
    user_message, AgentContext, AssistantContent, AssistantMessage, Model, StopReason,
    StreamOptions, ToolDefinition,
};
use pi_http::{is_loopback, openai_compatible_model_with, HttpOptions, ReqwestClient, RetryPolicy};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const KEY: &str = "sk-local-test-7f3a9c";
const MODEL: &str = "mock-model";
const LIMIT: Duration = Duration::from_secs(10);

fn context() -> AgentContext {
    AgentContext {
        messages: vec![user_message("你好")],
        tools: Vec::new(),
    }
}

async fn ask(
    server: &MockServer,
    context: &AgentContext,
    cancel: CancellationToken,
) -> AssistantMessage {
    ask_at(server.base_url(), context, cancel).await
}

/// One model turn against whatever listens at `base_url`, over the given reqwest client.
/// Without retries: these tests are about your transport, and every failure here must reach
/// it on the first request (`tests/resilience.rs` tests the retries).
async fn ask_at(
    base_url: String,
    context: &AgentContext,
    cancel: CancellationToken,
) -> AssistantMessage {
    let options = HttpOptions {
        retry: RetryPolicy::never(),
        ..HttpOptions::default()
    };
    let model = openai_compatible_model_with(Endpoint::new(base_url, KEY), MODEL, options)
        .expect("reqwest 客户端应当能建立");
    let stream = model.stream(
        context,
        StreamOptions {
            cancel: Some(cancel),
        },
    );
    tokio::time::timeout(LIMIT, stream.result())
        .await
        .expect("真实服务器上的一个回合必须在 10 秒内结束")
}

fn plain_text(message: &AssistantMessage) -> String {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            AssistantContent::Text(block) => Some(block.text.as_str()),
            AssistantContent::ToolCall(_) => None,
        })
        .collect()
}

#[tokio::test]
async fn a_streamed_answer_arrives_over_real_http() {
    let server = MockServer::start(vec![Reply::text("你好，我是 pi。")])
        .await
        .expect("本地服务器应当能启动");
    let mut context = context();
    context.tools = vec![ToolDefinition {
        name: "read".to_string(),
        description: "Read a file".to_string(),
        parameters: json!({"type": "object", "properties": {}}),
    }];
    let message = ask(&server, &context, CancellationToken::new()).await;

    assert_eq!(
        message.stop_reason,
        StopReason::Stop,
        "完整的流以 stop 结束：{message:?}"
    );
    assert_eq!(
        plain_text(&message),
        "你好，我是 pi。",
        "两段 delta 拼回完整文本"
    );
    assert_eq!(
        (message.usage.input, message.usage.output),
        (12, 5),
        "finish 之后才到的 usage 也要进最终消息"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "一个回合只发一个请求");
    let request = &requests[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", CHAT_PATH),
        "请求是 POST {{base}}/chat/completions"
    );
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {KEY}").as_str()),
        "密钥放在 authorization header 里"
    );
    let body = request.json();
    assert_eq!(body["model"], MODEL, "请求体带模型名");
    assert_eq!(body["stream"], true, "请求体要求流式回答");
    assert_eq!(
        body["stream_options"],
        json!({"include_usage": true}),
        "请求体要求流末尾带 usage"
    );
    assert_eq!(
        body["tools"][0]["function"]["name"], "read",
        "工具定义随请求发出"
    );
    assert!(
        !String::from_utf8_lossy(&request.body).contains(KEY),
        "密钥绝不能出现在请求体里"
    );
}

#[tokio::test]
async fn a_trailing_slash_on_the_base_url_changes_nothing() {
    let server = MockServer::start(vec![Reply::text("ok")])
        .await
        .expect("本地服务器应当能启动");
    let message = ask_at(
        format!("{}/", server.base_url()),
        &context(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(
        message.stop_reason,
        StopReason::Stop,
        "带斜杠的 base URL 也能用：{message:?}"
    );
    assert_eq!(
        server.requests()[0].path,
        CHAT_PATH,
        "不会出现 //chat/completions"
    );
}

#[tokio::test]
async fn a_401_that_echoes_the_key_is_reported_redacted() {
    let body = json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}});
    let server = MockServer::start(vec![Reply::Status {
        status: 401,
        body: body.to_string(),
    }])
    .await
    .expect("本地服务器应当能启动");
    let message = ask(&server, &context(), CancellationToken::new()).await;
    let error = message.error_message.clone().unwrap_or_default();

    assert_eq!(message.stop_reason, StopReason::Error, "401 是 error 终态");
    assert!(error.starts_with("HTTP 401: "), "错误以状态码开头：{error}");
    assert!(!error.contains(KEY), "回显的密钥必须被脱敏：{error}");
    assert!(error.contains(REDACTED), "脱敏处写 [REDACTED]：{error}");
}

#[tokio::test]
async fn a_500_keeps_a_short_excerpt_of_its_body() {
    let server = MockServer::start(vec![Reply::Status {
        status: 500,
        body: format!("upstream exploded {}", "x".repeat(1000)),
    }])
    .await
    .expect("本地服务器应当能启动");
    let message = ask(&server, &context(), CancellationToken::new()).await;
    let error = message.error_message.clone().unwrap_or_default();
    assert_eq!(message.stop_reason, StopReason::Error, "500 是 error 终态");
    assert!(
        error.starts_with("HTTP 500: upstream exploded "),
        "错误带状态码和正文开头：{error}"
    );
    assert!(
        error.ends_with('…') && error.chars().count() < 250,
        "长正文只留一段摘录：{} 个字符",
        error.chars().count()
    );
}

#[tokio::test]
async fn a_stream_cut_mid_event_is_an_error_that_keeps_the_partial_text() {
    let server = MockServer::start(vec![Reply::Stream(vec![
        Step::event(&delta(json!({"role": "assistant", "content": "半句"}))),
        Step::Send(b"data: {\"choices\":[{\"index\":0,\"del".to_vec()),
        Step::Cut,
    ])])
    .await
    .expect("本地服务器应当能启动");
    let message = ask(&server, &context(), CancellationToken::new()).await;
    let error = message.error_message.clone().unwrap_or_default();
    assert_eq!(
        message.stop_reason,
        StopReason::Error,
        "断流是 error 终态：{message:?}"
    );
    assert!(
        error.starts_with("Provider stream interrupted: "),
        "断流要说明是流中断了：{error}"
    );
    assert_eq!(
        plain_text(&message),
        "半句",
        "断流前已经收到的文本保留在消息里"
    );
}

#[tokio::test]
async fn cancelling_a_slow_stream_aborts_and_closes_the_connection() {
    let server = MockServer::start(vec![Reply::Stream(vec![
        Step::event(&delta(json!({"role": "assistant", "content": "慢"}))),
        Step::Hang,
    ])])
    .await
    .expect("本地服务器应当能启动");
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let message = ask(&server, &context(), cancel).await;
    assert_eq!(
        message.stop_reason,
        StopReason::Aborted,
        "取消后是 aborted 终态：{message:?}"
    );
    assert_eq!(
        message.error_message.as_deref(),
        Some("Request was aborted"),
        "取消的错误文本"
    );
    assert!(
        server.wait_for_disconnects(1, LIMIT).await,
        "取消之后连接必须关闭，服务器要能看到客户端离开"
    );
}

#[tokio::test]
async fn a_reader_that_goes_away_releases_the_connection_without_a_cancel() {
    let server = MockServer::start(vec![Reply::Stream(vec![
        Step::event(&delta(json!({"role": "assistant", "content": "没人听"}))),
        Step::Hang,
    ])])
    .await
    .expect("本地服务器应当能启动");
    let endpoint = Endpoint::new(server.base_url(), KEY);
    let client = ReqwestClient::new(&endpoint.base_url).expect("reqwest 客户端应当能建立");
    let transport = HttpTransport::new(endpoint, Arc::new(client));
    let request = ProviderRequest {
        model: MODEL.to_string(),
        messages: vec![json!({"role": "user", "content": "你好"})],
        tools: None,
    };
    let mut chunks = transport.stream(request, CancellationToken::new());
    let first = tokio::time::timeout(LIMIT, chunks.recv())
        .await
        .expect("第一段应当很快到达");
    assert!(
        matches!(first, Some(Ok(_))),
        "先收到一段正常的 chunk：{first:?}"
    );
    drop(chunks);
    assert!(
        server.wait_for_disconnects(1, LIMIT).await,
        "没有人再读 chunk 时，即使没有取消，连接也要关闭"
    );
}

#[tokio::test]
async fn a_refused_connection_is_a_network_error() {
    // Bind, learn the port, close: nothing listens there any more.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("能拿到一个空闲端口");
        listener.local_addr().expect("有本地地址").port()
    };
    let message = ask_at(
        format!("http://127.0.0.1:{port}/v1"),
        &context(),
        CancellationToken::new(),
    )
    .await;
    let error = message.error_message.clone().unwrap_or_default();
    assert_eq!(
        message.stop_reason,
        StopReason::Error,
        "连不上是 error 终态"
    );
    assert!(
        error.starts_with("Network error: "),
        "连不上是网络错误：{error}"
    );
}

#[tokio::test]
async fn a_usage_only_tail_and_tool_calls_come_through() {
    let server = MockServer::start(vec![Reply::events(vec![
        delta(
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "index": 0, "id": "call_1", "type": "function",
                "function": {"name": "read", "arguments": "{\"path\":"},
            }]}),
        ),
        delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"a.txt\"}"}}]})),
        finish("tool_calls"),
        usage(3, 4),
    ])])
    .await
    .expect("本地服务器应当能启动");
    let message = ask(&server, &context(), CancellationToken::new()).await;
    assert_eq!(
        message.stop_reason,
        StopReason::ToolUse,
        "工具调用回合：{message:?}"
    );
    let AssistantContent::ToolCall(call) = &message.content[0] else {
        panic!("第一个内容块应当是工具调用：{message:?}");
    };
    assert_eq!(
        (call.id.as_str(), call.name.as_str(), &call.arguments),
        ("call_1", "read", &json!({"path": "a.txt"})),
        "分段到达的参数拼成完整 JSON"
    );
    assert_eq!(message.usage.total_tokens, 7, "usage 合计");
}

#[test]
fn only_loopback_hosts_bypass_proxies() {
    assert!(is_loopback("http://127.0.0.1:8080/v1"), "127.0.0.1 是本机");
    assert!(is_loopback("http://localhost:11434/v1"), "localhost 是本机");
    assert!(is_loopback("http://[::1]:8080/v1"), "::1 是本机");
    assert!(
        !is_loopback("https://api.openai.com/v1"),
        "公网地址不是本机"
    );
    assert!(!is_loopback("not a url"), "解析不了的 URL 不是本机");
}
