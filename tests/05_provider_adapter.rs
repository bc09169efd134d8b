//! Chapter 05 acceptance tests: the OpenAI-compatible provider boundary, fully offline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pi_course::provider_adapter::{
    to_provider_messages, to_provider_tools, ChunkReceiver, FinishReason, FixedTransport,
    InboundState, OpenAiCompatibleModel, ProviderChunk, ProviderRequest, ProviderTransport,
    ProviderUsage, TransportError,
};
use pi_course::sse::{decode_sse, ChunkDecoder, SseParser, SseTransport};
use pi_course::types::{
    assistant_message, text, user_message, AgentContext, AgentMessage, AssistantContent,
    AssistantMessageEventStream, Model, ModelEvent, StopReason, StreamOptions, SystemMessage,
    ToolCall, ToolDefinition, ToolResultMessage, Usage,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

async fn within<F: std::future::Future>(body: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(1), body)
        .await
        .expect("1 秒内没有等到终态事件：adapter 是否忘了 push 终态或 end()？")
}

async fn collect(stream: &AssistantMessageEventStream) -> Vec<ModelEvent> {
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event);
    }
    events
}

fn kind(event: &ModelEvent) -> &'static str {
    match event {
        ModelEvent::Start { .. } => "start",
        ModelEvent::TextDelta { .. } => "text_delta",
        ModelEvent::ToolcallDelta { .. } => "toolcall_delta",
        ModelEvent::ToolcallEnd { .. } => "toolcall_end",
        ModelEvent::Done { .. } => "done",
        ModelEvent::Error { .. } => "error",
    }
}

fn kinds(events: &[ModelEvent]) -> Vec<&'static str> {
    events.iter().map(kind).collect()
}

fn context_of(messages: Vec<AgentMessage>) -> AgentContext {
    let mut context = AgentContext::default();
    context.messages.extend(messages);
    context
}

fn system(content: &str, timestamp: u64) -> AgentMessage {
    AgentMessage::System(SystemMessage {
        content: content.into(),
        sections: None,
        timestamp,
    })
}

fn tool_chunk(index: usize, id: Option<&str>, name: Option<&str>, args: &str) -> ProviderChunk {
    ProviderChunk::Tool {
        index,
        id: id.map(str::to_string),
        name: name.map(str::to_string),
        arguments_delta: Some(args.to_string()),
    }
}

fn text_chunk(delta: &str) -> ProviderChunk {
    ProviderChunk::Text {
        delta: delta.into(),
    }
}

fn raw_call(id: &str, name: &str, raw: &str) -> AssistantContent {
    AssistantContent::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: Value::String(raw.into()),
        raw_arguments: Some(raw.into()),
    })
}

fn parsed_call(id: &str, name: &str, arguments: Value, raw: &str) -> AssistantContent {
    AssistantContent::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
        raw_arguments: Some(raw.into()),
    })
}

fn text_block(value: &str) -> AssistantContent {
    AssistantContent::Text(text(value))
}

/// SSE bytes for the payloads, split at the byte midpoint so frames (and even a UTF-8
/// character) straddle two reads.
fn sse_halves(payloads: &[&str]) -> Vec<Vec<u8>> {
    let body: String = payloads.iter().map(|p| format!("data: {p}\n\n")).collect();
    let bytes = body.into_bytes();
    let (left, right) = bytes.split_at(bytes.len() / 2);
    vec![left.to_vec(), right.to_vec()]
}

mod outbound {
    use super::*;

    // Kills: re-serialising parsed arguments instead of sending the raw text, `"null"` for
    // absent arguments, `""` instead of `null` for a text-less assistant, an empty
    // `tool_calls` array, leaking `isError`, and text blocks glued together without `\n`.
    #[test]
    fn canonical_messages_map_to_wire_roles() {
        let mut user = user_message("read a.txt");
        if let AgentMessage::User(message) = &mut user {
            message.content.push(text("then search"));
        }
        let assistant = assistant_message(
            vec![
                text_block("I will read"),
                AssistantContent::ToolCall(ToolCall {
                    id: "call-1".into(),
                    name: "read".into(),
                    arguments: json!({"path": "other.txt"}),
                    raw_arguments: Some(r#"{"path":"a.txt"}"#.into()),
                }),
                AssistantContent::ToolCall(ToolCall {
                    id: "call-2".into(),
                    name: "search".into(),
                    arguments: json!({"query": "pi"}),
                    raw_arguments: None,
                }),
            ],
            StopReason::ToolUse,
        );
        let tools_only = assistant_message(
            vec![AssistantContent::ToolCall(ToolCall {
                id: "call-3".into(),
                name: "ls".into(),
                arguments: Value::Null,
                raw_arguments: None,
            })],
            StopReason::ToolUse,
        );
        let result = AgentMessage::ToolResult(ToolResultMessage {
            tool_call_id: "call-1".into(),
            tool_name: "read".into(),
            content: vec![text("A"), text("B")],
            details: Some(json!({"bytes": 3})),
            is_error: true,
            timestamp: 5,
        });
        let plain = assistant_message(
            vec![text_block("done"), text_block("really")],
            StopReason::Stop,
        );
        let context = context_of(vec![
            user,
            AgentMessage::Assistant(assistant),
            result,
            AgentMessage::Assistant(tools_only),
            AgentMessage::Assistant(plain),
        ]);
        let before = context.clone();

        let wire = to_provider_messages(&context);
        assert_eq!(wire.len(), 5, "每条非 system 消息对应一条 wire 消息");
        assert_eq!(
            wire[0],
            json!({"role": "user", "content": "read a.txt\nthen search"}),
            "user 的多个文本块用换行连接成一个 content"
        );
        assert_eq!(
            wire[1]["tool_calls"][0]["function"]["arguments"],
            json!(r#"{"path":"a.txt"}"#),
            "调用参数优先用 rawArguments：原样发回模型说过的话，不重新序列化 arguments"
        );
        assert_eq!(
            wire[1],
            json!({"role": "assistant", "content": "I will read", "tool_calls": [
                {"id": "call-1", "type": "function",
                 "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}},
                {"id": "call-2", "type": "function",
                 "function": {"name": "search", "arguments": "{\"query\":\"pi\"}"}},
            ]}),
            "assistant 的文本与调用进入同一条 wire 消息；没有原文时把 arguments 序列化"
        );
        assert_eq!(
            wire[2],
            json!({"role": "tool", "tool_call_id": "call-1", "name": "read", "content": "A\nB"}),
            "tool result 只发送 tool_call_id、name 和 content（isError / details 不发送）"
        );
        assert_eq!(
            wire[3]["content"],
            Value::Null,
            "assistant 没有文本时 content 是 null，不是空字符串"
        );
        assert_eq!(
            wire[3]["tool_calls"][0]["function"]["arguments"],
            json!("{}"),
            "没有原文且 arguments 为 null 时发送 \"{{}}\""
        );
        assert_eq!(
            wire[3],
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call-3", "type": "function",
                 "function": {"name": "ls", "arguments": "{}"}},
            ]}),
            "只有调用的 assistant：content 为 null，tool_calls 照常发送"
        );
        assert_eq!(
            wire[4],
            json!({"role": "assistant", "content": "done\nreally"}),
            "没有调用的 assistant 不带 tool_calls；多个文本块用换行连接"
        );
        assert_eq!(context, before, "出站转换不能修改 canonical transcript");
    }

    // Kills: sending every system message as-is, sending only the first one (patches lost),
    // and sending an empty system prompt.
    #[test]
    fn system_messages_fold_into_one_leading_message() {
        let context = context_of(vec![
            system("BASE", 1),
            user_message("first"),
            AgentMessage::Assistant(assistant_message(vec![text_block("ok")], StopReason::Stop)),
            system("PATCH", 2),
            user_message("second"),
        ]);
        let before = context.clone();
        let wire = to_provider_messages(&context);
        let systems = wire
            .iter()
            .filter(|message| message["role"] == "system")
            .count();
        assert_eq!(
            (systems, wire[0]["role"].clone()),
            (1, json!("system")),
            "所有 system message 折叠成开头一条，中途的 system 不进入 wire"
        );
        assert_eq!(
            wire[0],
            json!({"role": "system", "content": "BASE\n\nPATCH"}),
            "system 消息是重放出的完整 prompt（current_system_prompt，含后来的补丁）"
        );
        assert_eq!(
            wire,
            vec![
                json!({"role": "system", "content": "BASE\n\nPATCH"}),
                json!({"role": "user", "content": "first"}),
                json!({"role": "assistant", "content": "ok"}),
                json!({"role": "user", "content": "second"}),
            ],
            "system 之后按原顺序发送其余消息"
        );
        assert_eq!(context, before, "折叠不能写回 transcript");

        let empty = context_of(vec![system("", 3), user_message("hi")]);
        assert_eq!(
            to_provider_messages(&empty),
            vec![json!({"role": "user", "content": "hi"})],
            "system prompt 为空时不发送 system 消息"
        );

        let roles: Vec<Value> = to_provider_messages(&context_of(vec![user_message("hi")]))
            .into_iter()
            .map(|message| message["role"].clone())
            .collect();
        assert_eq!(
            roles,
            vec![json!("user")],
            "没有 system message 就没有 system wire 消息"
        );
    }

    // Kills: `Some(vec![])` for no tools (the body would carry an empty `tools` array).
    #[test]
    fn tools_wrap_as_functions_and_none_when_empty() {
        assert_eq!(to_provider_tools(&[]), None, "没有工具时必须是 None");
        let read = ToolDefinition {
            name: "read".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        };
        assert_eq!(
            to_provider_tools(std::slice::from_ref(&read)),
            Some(vec![json!({"type": "function", "function": {
                "name": "read",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }})]),
            "每个工具包成 {{\"type\":\"function\",\"function\":{{name, description, parameters}}}}"
        );
    }
}

mod inbound {
    use super::*;

    fn apply_all(state: &mut InboundState, chunks: Vec<ProviderChunk>) -> Vec<ModelEvent> {
        chunks
            .into_iter()
            .filter_map(|chunk| state.apply(chunk))
            .collect()
    }

    // Kills: using the provider index as contentIndex, opening a new text block per text
    // chunk, `{}` (or parsed JSON) as streaming arguments, emitting toolcall_end mid-stream,
    // losing provider/model, and dropping the finish usage.
    #[test]
    fn first_appearance_order_and_cumulative_partials() {
        let mut state = InboundState::new("fixture", "fixture-1");
        let events = apply_all(
            &mut state,
            vec![
                tool_chunk(4, Some("call-read"), Some("read"), r#"{"path":"#),
                text_chunk("先读"),
                tool_chunk(2, Some("call-search"), Some("search"), r#"{"query":"#),
                tool_chunk(4, None, None, r#""README.md"}"#),
                text_chunk("，再查"),
                tool_chunk(2, None, None, r#""pi"}"#),
                ProviderChunk::Finish {
                    reason: FinishReason::ToolCalls,
                    usage: ProviderUsage {
                        input: Some(7),
                        output: Some(5),
                        total_tokens: Some(12),
                    },
                },
            ],
        );
        assert_eq!(
            kinds(&events),
            [
                "toolcall_delta",
                "text_delta",
                "toolcall_delta",
                "toolcall_delta",
                "text_delta",
                "toolcall_delta"
            ],
            "delta 按到达顺序产生；toolcall_end 要等到流结束"
        );
        let indexes: Vec<usize> = events
            .iter()
            .map(|event| match event {
                ModelEvent::TextDelta { content_index, .. }
                | ModelEvent::ToolcallDelta { content_index, .. } => *content_index,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(
            indexes,
            [0, 1, 2, 0, 1, 2],
            "contentIndex 按首次出现分配（provider index 4→0，文本→1，2→2），不是 provider index；一条消息只有一个文本块"
        );

        let read_raw = r#"{"path":"README.md"}"#;
        let search_raw = r#"{"query":"pi"}"#;
        let ModelEvent::TextDelta { delta, partial, .. } = &events[4] else {
            unreachable!()
        };
        assert_eq!(delta, "，再查", "text_delta 的 delta 是这次到达的文本片段");
        assert_eq!(
            partial.content,
            vec![
                raw_call("call-read", "read", read_raw),
                text_block("先读，再查"),
                raw_call("call-search", "search", r#"{"query":"#),
            ],
            "partial 累积完整内容：一个文本块，工具参数在流式阶段是原始字符串（arguments 与 rawArguments 相同）"
        );
        assert_eq!(
            (partial.provider.as_str(), partial.model.as_str()),
            ("fixture", "fixture-1"),
            "消息带着构造 InboundState 时给的 provider 与 model"
        );
        assert_eq!(partial.usage, Usage::default(), "partial 的 usage 是零");
        assert_eq!(
            partial.stop_reason,
            StopReason::Stop,
            "流式 partial 的 stopReason 是 stop"
        );
        let ModelEvent::ToolcallDelta { delta, .. } = &events[5] else {
            unreachable!()
        };
        assert_eq!(
            delta, r#""pi"}"#,
            "toolcall_delta 的 delta 是这次到达的参数片段"
        );

        let (ends, message) = state.finish().expect("有 finish chunk 的流必须正常完成");
        let read_final = parsed_call("call-read", "read", json!({"path": "README.md"}), read_raw);
        let search_final = parsed_call("call-search", "search", json!({"query": "pi"}), search_raw);
        assert_eq!(
            kinds(&ends),
            ["toolcall_end", "toolcall_end"],
            "每个调用在流结束后各有一个 toolcall_end"
        );
        let ModelEvent::ToolcallEnd {
            content_index,
            tool_call,
            partial,
        } = &ends[0]
        else {
            unreachable!()
        };
        assert_eq!(*content_index, 0, "toolcall_end 按内容顺序：先是槽位 0");
        assert_eq!(
            AssistantContent::ToolCall(tool_call.clone()),
            read_final,
            "toolcall_end 交出解析后的调用，rawArguments 保留原文"
        );
        assert_eq!(
            partial.content,
            vec![
                read_final.clone(),
                text_block("先读，再查"),
                raw_call("call-search", "search", search_raw)
            ],
            "toolcall_end 按内容顺序逐个替换成解析后的调用"
        );
        assert_eq!(
            partial.stop_reason,
            StopReason::ToolUse,
            "toolcall_end 的 partial 已带上最终的 stopReason"
        );
        let ModelEvent::ToolcallEnd { content_index, .. } = &ends[1] else {
            unreachable!()
        };
        assert_eq!(*content_index, 2, "toolcall_end 按内容顺序：再是槽位 2");
        assert_eq!(
            message.content,
            vec![read_final, text_block("先读，再查"), search_final],
            "最终消息的调用全部解析完成"
        );
        assert_eq!(
            message.stop_reason,
            StopReason::ToolUse,
            "tool_calls 映射为 toolUse"
        );
        assert_eq!(
            (message.provider.as_str(), message.model.as_str()),
            ("fixture", "fixture-1"),
            "消息带着构造 InboundState 时给的 provider 与 model"
        );
        assert_eq!(
            message.usage,
            Usage {
                input: 7,
                output: 5,
                total_tokens: 12
            },
            "最终消息的 usage 来自 finish chunk"
        );
    }

    // Kills: leaving a missing id empty, parsing `""` instead of treating no arguments as
    // `{}`, forgetting a name that arrives in a later chunk, and a zero input/total when the
    // provider omits them.
    #[test]
    fn missing_ids_names_and_arguments_get_defaults() {
        let mut state = InboundState::new("fixture", "fixture-1");
        apply_all(
            &mut state,
            vec![
                ProviderChunk::Tool {
                    index: 3,
                    id: None,
                    name: Some("ls".into()),
                    arguments_delta: None,
                },
                ProviderChunk::Tool {
                    index: 1,
                    id: Some("call-x".into()),
                    name: None,
                    arguments_delta: Some(r#"{"q":"#.into()),
                },
                tool_chunk(1, None, Some("grep"), "1}"),
                ProviderChunk::Finish {
                    reason: FinishReason::ToolCalls,
                    usage: ProviderUsage {
                        input: None,
                        output: Some(2),
                        total_tokens: None,
                    },
                },
            ],
        );
        let (ends, message) = state
            .finish()
            .expect("没有参数片段的调用参数是 {}，不能报不完整 JSON");
        assert_eq!(ends.len(), 2, "每个调用都有一个 toolcall_end");
        let ids: Vec<&str> = message
            .content
            .iter()
            .map(|block| match block {
                AssistantContent::ToolCall(call) => call.id.as_str(),
                AssistantContent::Text(_) => "",
            })
            .collect();
        assert_eq!(
            ids,
            ["call-3", "call-x"],
            "没有 id 的调用用 call-<provider index> 补齐；有 id 的保持原样"
        );
        assert_eq!(
            message.content,
            vec![
                parsed_call("call-3", "ls", json!({}), ""),
                parsed_call("call-x", "grep", json!({"q": 1}), r#"{"q":1}"#),
            ],
            "没有参数片段的调用参数是 {{}}（rawArguments 为空串）；后到的 name 也要记下"
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
    }

    // Kills: parsing (or "repairing") arguments that a `length` cut left incomplete, and
    // mapping `length` to `stop`.
    #[test]
    fn length_keeps_raw_arguments() {
        let mut state = InboundState::new("fixture", "fixture-1");
        apply_all(
            &mut state,
            vec![
                tool_chunk(0, Some("call-1"), Some("read"), r#"{"path":"a"#),
                ProviderChunk::Finish {
                    reason: FinishReason::Length,
                    usage: ProviderUsage::default(),
                },
            ],
        );
        let (ends, message) = state.finish().expect("length 也是正常结束");
        assert_eq!(ends.len(), 1, "每个调用都有一个 toolcall_end");
        assert_eq!(
            message.stop_reason,
            StopReason::Length,
            "finish_reason length 映射为 length"
        );
        assert_eq!(
            message.content,
            vec![raw_call("call-1", "read", r#"{"path":"a"#)],
            "length 截断的参数必须保留原始文本，arguments 与 rawArguments 都是原始字符串"
        );
    }

    // Kills: treating unparsable `tool_calls` arguments as `{}` or as a string, naming the
    // call by anything but its tool name, and a failure message without the partial.
    #[test]
    fn incomplete_json_for_tool_calls_is_an_error() {
        let mut state = InboundState::new("fixture", "fixture-1");
        apply_all(
            &mut state,
            vec![
                text_chunk("看看"),
                tool_chunk(0, Some("call-1"), Some("read"), r#"{"path":"#),
                ProviderChunk::Finish {
                    reason: FinishReason::ToolCalls,
                    usage: ProviderUsage::default(),
                },
            ],
        );
        let error = state
            .finish()
            .expect_err("tool_calls 的参数必须是完整 JSON");
        assert_eq!(
            error, "Tool read arguments 不是完整 JSON",
            "报错写明是哪个工具：Tool <name> arguments 不是完整 JSON"
        );
        let failed = state.fail(StopReason::Error, &error);
        assert_eq!(
            failed.stop_reason,
            StopReason::Error,
            "fail 的消息带着给定的终态原因"
        );
        assert_eq!(
            failed.error_message.as_deref(),
            Some(error.as_str()),
            "fail 的消息带着给定的 errorMessage"
        );
        assert_eq!(
            failed.content,
            vec![
                text_block("看看"),
                raw_call("call-1", "read", r#"{"path":"#)
            ],
            "失败时保留 partial 内容"
        );
        assert_eq!(failed.usage, Usage::default(), "失败的消息 usage 为零");
    }

    // Kills: inventing a stop reason when the provider never sent one, and a zero total when
    // the provider omits `total_tokens`.
    #[test]
    fn missing_finish_fails_and_usage_normalises() {
        let mut state = InboundState::new("fixture", "fixture-1");
        apply_all(&mut state, vec![text_chunk("partial")]);
        assert_eq!(
            state.finish().expect_err("没有 finish chunk 不能算完成"),
            "Provider stream ended without a finish chunk",
            "没有 finish chunk 的错误文本是固定的"
        );

        let mut state = InboundState::new("fixture", "fixture-1");
        apply_all(
            &mut state,
            vec![
                text_chunk("hi"),
                ProviderChunk::Finish {
                    reason: FinishReason::Stop,
                    usage: ProviderUsage {
                        input: Some(3),
                        output: Some(4),
                        total_tokens: None,
                    },
                },
            ],
        );
        let (ends, message) = state.finish().expect("有 finish chunk 的流必须正常完成");
        assert_eq!(ends, vec![], "没有调用就没有 toolcall_end");
        assert_eq!(message.stop_reason, StopReason::Stop, "stop 映射为 stop");
        assert_eq!(
            message.content,
            vec![text_block("hi")],
            "最终消息保留全部文本"
        );
        assert_eq!(
            message.usage,
            Usage {
                input: 3,
                output: 4,
                total_tokens: 7
            },
            "缺少 totalTokens 时用 input + output 补齐"
        );
    }
}

mod adapter {
    use super::*;

    /// A transport whose chunks the test sends by hand, to cancel between two of them.
    struct ManualTransport {
        receiver: Mutex<Option<ChunkReceiver>>,
        cancel_seen: Mutex<Option<CancellationToken>>,
    }

    impl ProviderTransport for ManualTransport {
        fn stream(&self, _request: ProviderRequest, cancel: CancellationToken) -> ChunkReceiver {
            *self.cancel_seen.lock().expect("测试替身的锁不会中毒") = Some(cancel);
            self.receiver
                .lock()
                .expect("测试替身的锁不会中毒")
                .take()
                .expect("每次 stream() 只调用 transport 一次")
        }
    }

    fn model_over(transport: Arc<dyn ProviderTransport>) -> OpenAiCompatibleModel {
        OpenAiCompatibleModel::new("fixture", "fixture-1", transport)
    }

    // Kills: a missing `start`, `done` pushed before the `toolcall_end`s, sending no tools or an
    // empty `tools` array, building the request from anything but the outbound mapping, and a
    // terminal that differs from `result()`.
    #[tokio::test]
    async fn model_sends_the_request_and_streams_the_protocol() {
        within(async {
            let transport = Arc::new(FixedTransport::new(vec![
                text_chunk("先读"),
                tool_chunk(0, Some("call-1"), Some("read"), r#"{"path":"a.txt"}"#),
                ProviderChunk::Finish {
                    reason: FinishReason::ToolCalls,
                    usage: ProviderUsage::default(),
                },
            ]));
            let model = model_over(transport.clone());
            let context = context_of(vec![system("SYS", 1), user_message("read a.txt")]);
            let stream = model.stream(&context, StreamOptions::default());
            let events = collect(&stream).await;
            assert_eq!(
                kinds(&events),
                [
                    "start",
                    "text_delta",
                    "toolcall_delta",
                    "toolcall_end",
                    "done"
                ],
                "adapter 的事件序列与 ScriptedModel 相同：start、delta、流结束后的 toolcall_end、done"
            );
            let ModelEvent::Start { partial } = &events[0] else {
                unreachable!()
            };
            assert_eq!(partial.content, vec![], "start 的 partial 是空内容");
            assert_eq!(
                (partial.provider.as_str(), partial.model.as_str()),
                ("fixture", "fixture-1"),
                "start 的 partial 带着 adapter 的 provider 与 model"
            );
            let ModelEvent::Done { reason, message } = &events[4] else {
                unreachable!()
            };
            assert_eq!(
                *reason,
                StopReason::ToolUse,
                "done 的 reason 是最终消息的 stopReason"
            );
            assert_eq!(&stream.result().await, message, "done 的消息就是 result()");
            assert_eq!(
                message.content,
                vec![
                    text_block("先读"),
                    parsed_call(
                        "call-1",
                        "read",
                        json!({"path": "a.txt"}),
                        r#"{"path":"a.txt"}"#
                    )
                ],
                "最终消息由 InboundState 组装：文本块加解析后的调用"
            );

            let requests = transport.requests();
            assert_eq!(requests.len(), 1, "每次 stream() 向 transport 发一个请求");
            assert_eq!(requests[0].model, "fixture-1", "请求的 model 是构造时的 model 名");
            assert_eq!(
                requests[0].messages,
                to_provider_messages(&context),
                "请求的 messages 就是 to_provider_messages 的结果"
            );
            assert_eq!(requests[0].tools, None, "没有工具时请求不带 tools");

            let mut with_tools = context.clone();
            with_tools.tools.push(ToolDefinition {
                name: "read".into(),
                description: "Read".into(),
                parameters: json!({"type": "object"}),
            });
            collect(&model.stream(&with_tools, StreamOptions::default())).await;
            assert_eq!(
                transport.requests()[1].tools,
                to_provider_tools(&with_tools.tools),
                "有工具时请求带上 to_provider_tools 的结果"
            );
        })
        .await;
    }

    // Kills: panicking, skipping the failed item, or dropping the streamed text when the
    // transport fails mid-stream.
    #[tokio::test]
    async fn transport_failure_keeps_partial_in_an_error_terminal() {
        within(async {
            let transport = Arc::new(FixedTransport::with_results(vec![
                Ok(text_chunk("partial")),
                Err(TransportError::new("socket reset")),
                Ok(text_chunk("never")),
            ]));
            let stream = model_over(transport).stream(
                &context_of(vec![user_message("x")]),
                StreamOptions::default(),
            );
            let events = collect(&stream).await;
            assert_eq!(
                kinds(&events),
                ["start", "text_delta", "error"],
                "transport 失败：已经流出的 delta 之后是 error 终态"
            );
            let ModelEvent::Error { reason, error } = &events[2] else {
                unreachable!()
            };
            assert_eq!(
                *reason,
                StopReason::Error,
                "transport 失败的终态原因是 error"
            );
            assert_eq!(
                error.error_message.as_deref(),
                Some("socket reset"),
                "transport 错误的文本就是 errorMessage"
            );
            assert_eq!(
                error.content,
                vec![text_block("partial")],
                "错误终态保留 partial"
            );
            assert_eq!(
                &stream.result().await,
                error,
                "error 终态的消息就是 result()"
            );
        })
        .await;
    }

    // Kills: treating a stream that ends without a finish chunk as a normal answer.
    #[tokio::test]
    async fn missing_finish_is_an_error_terminal() {
        within(async {
            let transport = Arc::new(FixedTransport::new(vec![text_chunk("半句")]));
            let stream = model_over(transport).stream(
                &context_of(vec![user_message("x")]),
                StreamOptions::default(),
            );
            let events = collect(&stream).await;
            assert_eq!(
                kinds(&events),
                ["start", "text_delta", "error"],
                "没有 finish 就结束的流是 error 终态"
            );
            let result = stream.result().await;
            assert_eq!(
                (result.stop_reason, result.error_message.as_deref()),
                (
                    StopReason::Error,
                    Some("Provider stream ended without a finish chunk")
                ),
                "没有 finish 就结束的流是 error 终态，errorMessage 说明原因"
            );
            assert_eq!(
                result.content,
                vec![text_block("半句")],
                "错误终态保留 partial"
            );
        })
        .await;
    }

    // Kills: ignoring the cancellation token, handing the transport another token, reporting
    // the cancellation as a plain error, or losing the partial text received before it.
    #[tokio::test]
    async fn cancellation_mid_stream_is_aborted_with_partial() {
        within(async {
            let (sender, receiver) = mpsc::unbounded_channel();
            let transport = Arc::new(ManualTransport {
                receiver: Mutex::new(Some(receiver)),
                cancel_seen: Mutex::new(None),
            });
            let token = CancellationToken::new();
            let stream = model_over(transport.clone()).stream(
                &context_of(vec![user_message("x")]),
                StreamOptions {
                    cancel: Some(token.clone()),
                },
            );
            let seen_token = transport
                .cancel_seen
                .lock()
                .expect("测试替身的锁不会中毒")
                .clone()
                .expect("stream() 必须调用 transport");
            sender
                .send(Ok(text_chunk("partial")))
                .expect("adapter 在终态之前要一直读 transport 的通道");
            let seen = tokio::time::timeout(Duration::from_millis(500), async {
                let mut seen = Vec::new();
                while let Some(event) = stream.next().await {
                    if matches!(event, ModelEvent::TextDelta { .. }) {
                        token.cancel();
                    }
                    seen.push(event);
                }
                seen
            })
            .await
            .expect("取消之后必须马上给出终态，不能等 transport 自己结束");
            assert_eq!(
                kinds(&seen),
                ["start", "text_delta", "error"],
                "取消后只剩一个 error 终态"
            );
            let ModelEvent::Error { reason, error } = &seen[2] else {
                unreachable!()
            };
            assert_eq!(*reason, StopReason::Aborted, "取消必须形成 aborted 终态");
            assert_eq!(
                error.stop_reason,
                StopReason::Aborted,
                "取消必须形成 aborted 终态"
            );
            assert_eq!(
                error.error_message.as_deref(),
                Some("Request was aborted"),
                "取消的 errorMessage 是固定文本"
            );
            assert_eq!(
                error.content,
                vec![text_block("partial")],
                "取消时保留已经流出的文本"
            );
            assert!(seen_token.is_cancelled(), "transport 要拿到同一个取消令牌");
            drop(sender);
        })
        .await;
    }
}

mod sse {
    use super::*;

    // Kills: keeping the `\r` of CRLF lines, keeping the space after `data:`, joining multi-line
    // data without `\n`, and dropping an unterminated last line at `finish()`.
    #[test]
    fn framing_rules_one_by_one() {
        let mut parser = SseParser::new();
        assert_eq!(
            parser.push(b"data:a\r\n\r\n"),
            vec!["a".to_string()],
            "行尾的回车符（CR）要去掉，CRLF 的空行同样分派事件"
        );
        assert_eq!(
            parser.push(b"data:x\n\ndata: y\n\n"),
            vec!["x".to_string(), "y".to_string()],
            "data: 后面的一个空格不属于 payload"
        );
        assert_eq!(
            parser.push(b"data: 1\ndata: 2\n\n"),
            vec!["1\n2".to_string()],
            "同一事件的多行 data 用换行连接"
        );
        assert_eq!(
            parser.push(b": comment\nevent: message\nid: 7\nretry: 10\n\n"),
            Vec::<String>::new(),
            "注释和其它字段不产生 payload"
        );
        assert_eq!(
            parser.push(b"data: tail"),
            Vec::<String>::new(),
            "没有换行结尾的行要等更多字节"
        );
        assert_eq!(
            parser.finish(),
            vec!["tail".to_string()],
            "finish() 时没有换行结尾的最后一行也算数"
        );
    }

    // Kills: parsing each read on its own (frames straddle reads) and decoding UTF-8 per read
    // (a character cut in half).
    #[test]
    fn data_lines_survive_any_fragmentation() {
        let body = ": keep-alive\r\nevent: message\r\ndata: {\"a\":\r\ndata:1}\r\n\r\ndata\n\ndata: 你好\n\ndata: tail";
        let expected = vec![
            "{\"a\":\n1}".to_string(),
            String::new(),
            "你好".to_string(),
            "tail".to_string(),
        ];
        let bytes = body.as_bytes();
        for cut in 0..=bytes.len() {
            let mut parser = SseParser::new();
            let mut payloads = parser.push(&bytes[..cut]);
            payloads.extend(parser.push(&bytes[cut..]));
            payloads.extend(parser.finish());
            assert_eq!(
                payloads, expected,
                "在第 {cut} 个字节处切开后，payload 不能变（切在多字节字符中间也一样）"
            );
        }
    }

    // Kills: taking arguments in arrival order instead of by index, rejecting `null` fields,
    // and dropping the usage that arrives in a trailing payload after `finish_reason`.
    #[test]
    fn interleaved_tool_arguments_and_trailing_usage() {
        let chunks = decode_sse(
            sse_halves(&[
                concat!(
                    r#"{"choices":[{"index":0,"delta":{"content":null,"tool_calls":["#,
                    r#"{"index":0,"id":"call-a","type":"function","function":{"name":"read","arguments":"{\"path\":"}},"#,
                    r#"{"index":1,"id":"call-b","type":"function","function":{"name":"search","arguments":"{\"query\":"}}]},"finish_reason":null}]}"#
                ),
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"pi\"}"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"README.md\"}"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20}}"#,
                "[DONE]",
            ])
            .iter()
            .map(Vec::as_slice),
        );
        let chunks: Vec<ProviderChunk> = chunks
            .into_iter()
            .collect::<Result<_, _>>()
            .expect("合法的流不能出错");
        assert_eq!(
            chunks,
            vec![
                tool_chunk(0, Some("call-a"), Some("read"), r#"{"path":"#),
                tool_chunk(1, Some("call-b"), Some("search"), r#"{"query":"#),
                tool_chunk(1, None, None, r#""pi"}"#),
                tool_chunk(0, None, None, r#""README.md"}"#),
                ProviderChunk::Finish {
                    reason: FinishReason::ToolCalls,
                    usage: ProviderUsage {
                        input: Some(12),
                        output: Some(8),
                        total_tokens: Some(20),
                    },
                },
            ],
            "按 index 保留 tool 参数片段；尾随 usage 合并进唯一的 finish，finish 在最后"
        );

        let mut state = InboundState::new("fixture", "fixture-1");
        for chunk in chunks {
            state.apply(chunk);
        }
        let (_, message) = state.finish().expect("有 finish chunk 的流必须正常完成");
        assert_eq!(
            message.content,
            vec![
                parsed_call(
                    "call-a",
                    "read",
                    json!({"path": "README.md"}),
                    r#"{"path":"README.md"}"#
                ),
                parsed_call(
                    "call-b",
                    "search",
                    json!({"query": "pi"}),
                    r#"{"query":"pi"}"#
                ),
            ],
            "按 index 拼接的参数片段解析成完整调用"
        );
        assert_eq!(message.usage.total_tokens, 20, "尾随 usage 进入最终消息");
    }

    // Kills: rejecting `null` where a field may be absent (real providers send
    // `"content": null` and `"finish_reason": null`).
    #[test]
    fn null_fields_count_as_absent() {
        let mut decoder = ChunkDecoder::new();
        let chunks = decoder.decode(
            r#"{"choices":[{"index":null,"delta":{"content":null,"tool_calls":null},"finish_reason":null}],"usage":null}"#,
        );
        assert_eq!(
            chunks,
            Ok(vec![]),
            "null 字段等于没有这个字段，不是类型错误"
        );
        assert_eq!(
            decoder.finish(),
            None,
            "finish_reason 为 null 时还没有 finish"
        );
    }

    // Kills: overwriting known usage numbers with the gaps of a later usage payload.
    #[test]
    fn usage_fields_merge_across_payloads() {
        let mut decoder = ChunkDecoder::new();
        for payload in [
            r#"{"choices":[{"index":0,"delta":{"content":"hi"}}],"usage":{"prompt_tokens":9}}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"completion_tokens":4,"total_tokens":13}}"#,
        ] {
            decoder.decode(payload).expect("合法的 payload 不能出错");
        }
        assert_eq!(
            decoder.finish(),
            Some(ProviderChunk::Finish {
                reason: FinishReason::Stop,
                usage: ProviderUsage {
                    input: Some(9),
                    output: Some(4),
                    total_tokens: Some(13),
                },
            }),
            "多个 payload 的 usage 按字段合并：后来缺少的字段不能抹掉已知的数字"
        );
    }

    // Kills: "take the first choice", accepting unknown (or differently cased) finish reasons,
    // a missing tool index, and content after the stream said it was finished.
    #[test]
    fn invalid_shapes_are_rejected_with_a_reason() {
        let cases: &[(&[&str], &str)] = &[
            (&["not json"], "data line is not valid JSON"),
            (&["[1]"], "payload must be an object"),
            (
                &[r#"{"error":{"message":"quota"}}"#],
                "provider returned an error payload",
            ),
            (
                &[r#"{"choices":"not-an-array"}"#],
                "choices must be an array",
            ),
            (&[r#"{"choices":[]}"#], "empty choices require usage"),
            (
                &[
                    r#"{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}"#,
                ],
                "only one streamed choice is supported",
            ),
            (
                &[r#"{"choices":[{"index":0}]}"#],
                "choices[0].delta must be an object",
            ),
            (
                &[r#"{"choices":[{"index":0,"delta":{"content":7}}]}"#],
                "choices[0].delta.content must be a string",
            ),
            (
                &[r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}"#],
                "choices[0].delta.tool_calls[0] has no tool-call delta",
            ),
            (
                &[
                    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"c","function":{"name":"ls"}}]}}]}"#,
                ],
                "choices[0].delta.tool_calls[0].index must be a non-negative integer",
            ),
            (
                &[r#"{"choices":[{"index":0,"delta":{},"finish_reason":"content_filter"}]}"#],
                "finish_reason is not supported",
            ),
            (
                &[r#"{"choices":[{"index":0,"delta":{},"finish_reason":"Stop"}]}"#],
                "finish_reason is not supported",
            ),
            (
                &[
                    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
                    r#"{"choices":[{"index":0,"delta":{"content":"late"}}]}"#,
                ],
                "content arrived after finish_reason",
            ),
            (
                &[
                    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
                    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
                ],
                "finish_reason changed during the stream",
            ),
            (
                &[r#"{"choices":[],"usage":{"prompt_tokens":-1}}"#],
                "usage.prompt_tokens must be a non-negative integer",
            ),
            (
                &[
                    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"type":"custom","function":{"name":"ls"}}]}}]}"#,
                ],
                "choices[0].delta.tool_calls[0].type must be function",
            ),
        ];
        for (payloads, reason) in cases {
            let mut decoder = ChunkDecoder::new();
            let error = payloads
                .iter()
                .find_map(|payload| decoder.decode(payload).err())
                .unwrap_or_else(|| panic!("{payloads:?} 必须被拒绝：{reason}"));
            assert_eq!(
                error.to_string(),
                format!("Invalid provider chunk: {reason}"),
                "payload {payloads:?} 的拒绝原因不对"
            );
        }

        // The same finish_reason again is not a change.
        let mut decoder = ChunkDecoder::new();
        let finish = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        for attempt in 1..=2 {
            let decoded = decoder
                .decode(finish)
                .map(|_| ())
                .map_err(|e| e.to_string());
            assert_eq!(
                decoded,
                Ok(()),
                "第 {attempt} 次收到同一个 finish_reason 时不能报错：只有变成另一个值才算改变"
            );
        }
    }

    // Kills: reading on after `[DONE]`, inventing a `Finish` when the provider never sent a
    // finish reason, and reading on after an invalid chunk.
    #[test]
    fn decode_sse_stops_where_the_stream_stops() {
        let chunks = decode_sse(
            sse_halves(&[
                r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}"#,
                "[DONE]",
                r#"{"choices":[{"index":0,"delta":{"content":"after done"}}]}"#,
            ])
            .iter()
            .map(Vec::as_slice),
        );
        assert_eq!(
            chunks,
            vec![
                Ok(text_chunk("a")),
                Ok(ProviderChunk::Finish {
                    reason: FinishReason::Stop,
                    usage: ProviderUsage::default(),
                }),
            ],
            "[DONE] 之后不再读取；finish 放在最后"
        );

        let chunks = decode_sse(
            sse_halves(&[
                r#"{"choices":[{"index":0,"delta":{"content":"partial"}}]}"#,
                "[DONE]",
            ])
            .iter()
            .map(Vec::as_slice),
        );
        assert_eq!(
            chunks,
            vec![Ok(text_chunk("partial"))],
            "没有 finish_reason 就不能产生 finish"
        );

        let chunks = decode_sse(
            sse_halves(&[
                r#"{"choices":"bad"}"#,
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            ])
            .iter()
            .map(Vec::as_slice),
        );
        assert_eq!(
            chunks,
            vec![Err(TransportError::new(
                "Invalid provider chunk: choices must be an array"
            ))],
            "第一个无效 chunk 之后不再读取"
        );
    }

    // Kills: skipping or panicking on a malformed provider chunk once SSE feeds the adapter.
    #[tokio::test]
    async fn malformed_sse_chunk_becomes_an_error_terminal() {
        within(async {
            let transport = Arc::new(SseTransport::new(sse_halves(&[
                r#"{"choices":[{"index":0,"delta":{"content":"半句"}}]}"#,
                r#"{"choices":"not-an-array"}"#,
            ])));
            let stream = OpenAiCompatibleModel::new("fixture", "fixture-1", transport).stream(
                &context_of(vec![user_message("x")]),
                StreamOptions::default(),
            );
            let events = collect(&stream).await;
            assert_eq!(
                kinds(&events),
                ["start", "text_delta", "error"],
                "无效 chunk 之前的文本照常流出，之后是 error 终态"
            );
            let result = stream.result().await;
            assert_eq!(
                result.stop_reason,
                StopReason::Error,
                "无效 chunk 的终态原因是 error"
            );
            assert_eq!(
                result.error_message.as_deref(),
                Some("Invalid provider chunk: choices must be an array"),
                "无效 chunk 的校验信息就是 errorMessage"
            );
            assert_eq!(
                result.content,
                vec![text_block("半句")],
                "错误终态保留 partial"
            );
        })
        .await;
    }
}
