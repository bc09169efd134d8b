//! Instructor-only tests for chapter 05: other ids, orders and wire shapes.

use std::sync::Arc;
use std::time::Duration;

use pi_course::provider_adapter::{
    to_provider_messages, FinishReason, InboundState, OpenAiCompatibleModel, ProviderChunk,
    ProviderUsage,
};
use pi_course::sse::{decode_sse, SseTransport};
use pi_course::types::{
    assistant_message, text, user_message, AgentContext, AgentMessage, AssistantContent, Model,
    StopReason, StreamOptions, SystemMessage, ToolCall, Usage,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn sse(payloads: &[&str]) -> Vec<Vec<u8>> {
    // One byte per read: the harshest fragmentation.
    let body: String = payloads
        .iter()
        .map(|p| format!("data:{p}\r\n\r\n"))
        .collect();
    body.into_bytes()
        .into_iter()
        .map(|byte| vec![byte])
        .collect()
}

#[test]
fn empty_system_prompt_sends_no_system_message() {
    let mut context = AgentContext::default();
    context.messages.push(AgentMessage::System(SystemMessage {
        content: String::new(),
        sections: None,
        timestamp: 1,
    }));
    context.messages.push(user_message("hi"));
    context
        .messages
        .push(AgentMessage::Assistant(assistant_message(
            vec![
                AssistantContent::Text(text("a")),
                AssistantContent::Text(text("b")),
            ],
            StopReason::Stop,
        )));
    assert_eq!(
        to_provider_messages(&context),
        vec![
            json!({"role": "user", "content": "hi"}),
            json!({"role": "assistant", "content": "a\nb"}),
        ],
        "空的 system prompt 不发送；assistant 的多个文本块用换行连接"
    );
}

#[test]
fn ids_default_by_index_and_names_arrive_late() {
    let mut state = InboundState::new("p", "m");
    for chunk in [
        ProviderChunk::Tool {
            index: 7,
            id: None,
            name: None,
            arguments_delta: None,
        },
        ProviderChunk::Tool {
            index: 7,
            id: None,
            name: Some("ls".into()),
            arguments_delta: Some(String::new()),
        },
        ProviderChunk::Finish {
            reason: FinishReason::ToolCalls,
            usage: ProviderUsage {
                input: None,
                output: Some(2),
                total_tokens: None,
            },
        },
    ] {
        state.apply(chunk);
    }
    let (_, message) = state
        .finish()
        .expect("没有参数片段的调用参数是 {}，不能报不完整 JSON");
    assert_eq!(
        message.content,
        vec![AssistantContent::ToolCall(ToolCall {
            id: "call-7".into(),
            name: "ls".into(),
            arguments: json!({}),
            raw_arguments: Some(String::new()),
        })],
        "没有 id 的调用用 call-<provider index> 补齐，后到的 name 要记下，没有参数时是 {{}}"
    );
    assert_eq!(
        message.usage,
        Usage {
            input: 0,
            output: 2,
            total_tokens: 2
        },
        "缺少的 input 记为 0，缺少 totalTokens 时用 input + output 补齐"
    );
    assert_eq!(
        message.provider, "p",
        "消息带着构造 InboundState 时给的 provider"
    );
}

#[test]
fn usage_merges_across_payloads_with_byte_sized_reads() {
    let chunks = decode_sse(
        sse(&[
            r#"{"choices":[{"index":0,"delta":{"content":"你好"}}],"usage":{"prompt_tokens":5}}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"completion_tokens":3}}"#,
        ])
        .iter()
        .map(Vec::as_slice),
    );
    assert_eq!(
        chunks,
        vec![
            Ok(ProviderChunk::Text {
                delta: "你好".into()
            }),
            Ok(ProviderChunk::Finish {
                reason: FinishReason::Stop,
                usage: ProviderUsage {
                    input: Some(5),
                    output: Some(3),
                    total_tokens: None
                },
            }),
        ],
        "逐字节读取也要拼出完整帧；多个 payload 的 usage 按字段合并"
    );
}

#[tokio::test]
async fn pre_cancelled_request_over_sse_is_aborted() {
    tokio::time::timeout(Duration::from_secs(1), async {
        let transport = Arc::new(SseTransport::new(sse(&[
            r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}"#,
        ])));
        let model = OpenAiCompatibleModel::new("p", "m", transport.clone());
        let token = CancellationToken::new();
        token.cancel();
        let mut context = AgentContext::default();
        context.messages.push(user_message("q"));
        let result = model
            .stream(
                &context,
                StreamOptions {
                    cancel: Some(token),
                },
            )
            .result()
            .await;
        assert_eq!(
            result.stop_reason,
            StopReason::Aborted,
            "调用前已取消：biased select 先看令牌，终态是 aborted"
        );
        assert_eq!(
            result.error_message.as_deref(),
            Some("Request was aborted"),
            "取消的 errorMessage 是固定文本"
        );
        assert_eq!(
            transport.requests()[0].messages,
            vec![json!({"role": "user", "content": "q"})],
            "请求照常构造并交给 transport"
        );
    })
    .await
    .expect("1 秒内没有等到终态事件");
}

#[tokio::test]
async fn gemini_style_calls_without_index_ending_in_stop_are_a_tool_turn() {
    tokio::time::timeout(Duration::from_secs(1), async {
        let transport = Arc::new(SseTransport::new(sse(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"id":"g-1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"g-2","type":"function","function":{"name":"read","arguments":"{\"path\":\"b\"}"}}]},"finish_reason":"stop"}]}"#,
        ])));
        let model = OpenAiCompatibleModel::new("p", "m", transport);
        let mut context = AgentContext::default();
        context.messages.push(user_message("q"));
        let result = model
            .stream(&context, StreamOptions::default())
            .result()
            .await;
        assert_eq!(
            result.stop_reason,
            StopReason::ToolUse,
            "没有 index、以 stop 结束的两个调用仍是一个 toolUse 回合"
        );
        let ids: Vec<(&str, serde_json::Value)> = result
            .content
            .iter()
            .filter_map(|block| match block {
                AssistantContent::ToolCall(call) => Some((call.id.as_str(), call.arguments.clone())),
                AssistantContent::Text(_) => None,
            })
            .collect();
        assert_eq!(
            ids,
            vec![("g-1", json!({"path": "a"})), ("g-2", json!({"path": "b"}))],
            "两个不同 id 的调用各自成块，参数不会拼在一起"
        );
    })
    .await
    .expect("1 秒内没有等到终态事件");
}

#[tokio::test]
async fn a_deepseek_tool_turn_keeps_its_reasoning_for_the_next_request() {
    tokio::time::timeout(Duration::from_secs(1), async {
        let transport = Arc::new(SseTransport::new(sse(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":"需要"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"读文件"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"d-1","type":"function","function":{"name":"read","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
        ])));
        let model = OpenAiCompatibleModel::new("p", "m", transport);
        let mut context = AgentContext::default();
        context.messages.push(user_message("q"));
        let result = model
            .stream(&context, StreamOptions::default())
            .result()
            .await;
        assert_eq!(
            result.thinking.as_deref(),
            Some("需要读文件"),
            "跨 payload 的 reasoning_content 累积成一段 thinking"
        );
        context.messages.push(AgentMessage::Assistant(result));
        let wire = to_provider_messages(&context);
        assert_eq!(
            wire[1]["reasoning_content"],
            json!("需要读文件"),
            "下一次请求里，这个工具回合带着自己的 reasoning_content"
        );
        assert_eq!(
            wire[1]["content"],
            serde_json::Value::Null,
            "思考不进 content：没有文本时 content 仍是 null"
        );
    })
    .await
    .expect("1 秒内没有等到终态事件");
}

mod http_labs {
    use super::*;
    use pi_course::http_transport::{
        BodyChunk, Endpoint, HttpClient, HttpFuture, HttpRequest, HttpResponse, HttpTransport,
    };
    use pi_course::provider_adapter::{
        ChunkResult, ProviderRequest, ProviderTransport, TransportError,
    };
    use pi_course::types::ToolDefinition;
    use serde_json::Value;
    use std::sync::Mutex;
    use tokio::sync::mpsc;

    enum Read {
        Bytes(Vec<u8>),
        Fail(String),
    }

    enum Reply {
        Status(u16, Vec<Read>),
        Refused(String),
    }

    /// In-memory `HttpClient`: records the request and plays one scripted reply.
    struct FakeHttp {
        reply: Mutex<Option<Reply>>,
        requests: Mutex<Vec<HttpRequest>>,
    }

    impl FakeHttp {
        fn new(reply: Reply) -> Arc<FakeHttp> {
            Arc::new(FakeHttp {
                reply: Mutex::new(Some(reply)),
                requests: Mutex::new(Vec::new()),
            })
        }
    }

    impl HttpClient for FakeHttp {
        fn post(&self, request: HttpRequest) -> HttpFuture {
            self.requests
                .lock()
                .expect("测试替身的锁不会中毒")
                .push(request);
            let reply = self.reply.lock().expect("测试替身的锁不会中毒").take();
            Box::pin(async move {
                match reply {
                    None => Err("the fake answers one request only".to_string()),
                    Some(Reply::Refused(error)) => Err(error),
                    Some(Reply::Status(status, reads)) => {
                        let (sender, body) = mpsc::channel::<BodyChunk>(1);
                        tokio::spawn(async move {
                            for read in reads {
                                let item = match read {
                                    Read::Bytes(bytes) => Ok(bytes),
                                    Read::Fail(error) => Err(error),
                                };
                                if sender.send(item).await.is_err() {
                                    return;
                                }
                            }
                        });
                        Ok(HttpResponse { status, body })
                    }
                }
            })
        }
    }

    fn request() -> ProviderRequest {
        ProviderRequest {
            model: "m".into(),
            messages: vec![json!({"role": "user", "content": "q"})],
            tools: None,
        }
    }

    async fn drain(transport: &HttpTransport) -> Vec<ChunkResult> {
        let mut chunks = transport.stream(request(), CancellationToken::new());
        tokio::time::timeout(Duration::from_secs(5), async {
            let mut items = Vec::new();
            while let Some(item) = chunks.recv().await {
                items.push(item);
            }
            items
        })
        .await
        .expect("5 秒内 transport 的通道没有关闭")
    }

    #[tokio::test]
    async fn byte_sized_reads_carry_a_tool_call_and_trailing_usage() {
        let body = [
            r#"{"choices":[{"index":0,"delta":{"content":"读一下","tool_calls":[{"index":0,"id":"call-1","type":"function","function":{"name":"read","arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"说明.md\"}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":9,"total_tokens":39}}"#,
            "[DONE]",
        ]
        .iter()
        .map(|payload| format!("data:{payload}\r\n\r\n"))
        .collect::<String>()
        .into_bytes();
        let reads = body
            .into_iter()
            .map(|byte| Read::Bytes(vec![byte]))
            .collect();
        let client = FakeHttp::new(Reply::Status(200, reads));
        let transport =
            HttpTransport::new(Endpoint::new("http://localhost:1/v1/", "k"), client.clone());
        let model = OpenAiCompatibleModel::new("p", "m", Arc::new(transport));
        let mut context = AgentContext::default();
        context.messages.push(user_message("q"));
        context.tools.push(ToolDefinition {
            name: "read".into(),
            description: "Read".into(),
            parameters: json!({"type": "object"}),
        });
        let result = tokio::time::timeout(
            Duration::from_secs(2),
            model.stream(&context, StreamOptions::default()).result(),
        )
        .await
        .expect("2 秒内没有等到终态");
        assert_eq!(
            (result.stop_reason, result.error_message.as_deref()),
            (StopReason::ToolUse, None),
            "逐字节读取也要拼出完整的回答，以 tool_calls 正常结束"
        );
        assert_eq!(
            result.content,
            vec![
                AssistantContent::Text(text("读一下")),
                AssistantContent::ToolCall(ToolCall {
                    id: "call-1".into(),
                    name: "read".into(),
                    arguments: json!({"path": "说明.md"}),
                    raw_arguments: Some(r#"{"path":"说明.md"}"#.into()),
                }),
            ],
            "切在汉字中间的参数片段拼回原样，解析成完整调用"
        );
        assert_eq!(
            result.usage,
            Usage {
                input: 30,
                output: 9,
                total_tokens: 39
            },
            "finish_reason 之后的 usage 进入最终消息"
        );
        let requests = client
            .requests
            .lock()
            .expect("测试替身的锁不会中毒")
            .clone();
        assert_eq!(
            requests.iter().map(|r| r.url.as_str()).collect::<Vec<_>>(),
            vec!["http://localhost:1/v1/chat/completions"],
            "一次 stream() 一个请求，URL 里没有 //"
        );
        let body: Value = serde_json::from_slice(&requests[0].body).expect("请求体是合法 JSON");
        assert_eq!(
            body["tools"][0]["function"]["name"],
            json!("read"),
            "有工具时请求体带上 tools"
        );
    }

    #[tokio::test]
    async fn an_empty_key_redacts_nothing() {
        let transport = |reply| {
            HttpTransport::new(
                Endpoint::new("http://localhost:1/v1", ""),
                FakeHttp::new(reply),
            )
        };
        assert_eq!(
            drain(&transport(Reply::Refused("connection refused".into()))).await,
            vec![Err(TransportError::new(
                "Network error: connection refused"
            ))],
            "空密钥什么也不替换：网络错误的原文保持可读"
        );
        assert_eq!(
            drain(&transport(Reply::Status(
                404,
                vec![Read::Bytes(b"model   not\nfound".to_vec())]
            )))
            .await,
            vec![Err(TransportError::new("HTTP 404: model not found"))],
            "空密钥什么也不替换：状态错误的摘录保持可读，空白合成一个空格"
        );
    }

    #[tokio::test]
    async fn an_error_body_that_breaks_off_keeps_what_arrived() {
        let key = "sk-held-out-42";
        let echoed = format!("quota exceeded for {key}; retry with {key}");
        let (left, right) = echoed.as_bytes().split_at(22);
        let client = FakeHttp::new(Reply::Status(
            429,
            vec![
                Read::Bytes(left.to_vec()),
                Read::Bytes(right.to_vec()),
                Read::Fail(format!("reset while reading {key}")),
            ],
        ));
        let transport = HttpTransport::new(Endpoint::new("http://localhost:1/v1", key), client);
        assert_eq!(
            drain(&transport).await,
            vec![Err(TransportError::new(
                "HTTP 429: quota exceeded for [REDACTED]; retry with [REDACTED]"
            ))],
            "错误响应体中途断开时，用已经收到的部分；密钥跨两次读取、出现两次也都要脱敏"
        );
    }
}
