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
