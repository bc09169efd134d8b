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
    assistant_message, current_system_prompt, text, user_message, AgentContext, AgentMessage,
    AssistantContent, AssistantMessageEventStream, Model, ModelEvent, StopReason, StreamOptions,
    SystemMessage, ToolCall, ToolDefinition, ToolResultMessage, Usage,
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

    // Kills: re-serialising parsed arguments instead of sending the raw text, sending `""`
    // instead of `null` for a text-less assistant, or an empty `tool_calls` array.
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
        let plain = assistant_message(vec![text_block("done")], StopReason::Stop);
        let context = context_of(vec![
            user,
            AgentMessage::Assistant(assistant),
            result,
            AgentMessage::Assistant(tools_only),
            AgentMessage::Assistant(plain),
        ]);
        let before = context.clone();

        let wire = to_provider_messages(&context);
        assert_eq!(
            wire,
            vec![
                json!({"role": "user", "content": "read a.txt\nthen search"}),
                json!({"role": "assistant", "content": "I will read", "tool_calls": [
                    {"id": "call-1", "type": "function",
                     "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}},
                    {"id": "call-2", "type": "function",
                     "function": {"name": "search", "arguments": "{\"query\":\"pi\"}"}},
                ]}),
                json!({"role": "tool", "tool_call_id": "call-1", "name": "read", "content": "A\nB"}),
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call-3", "type": "function",
                     "function": {"name": "ls", "arguments": "{}"}},
                ]}),
                json!({"role": "assistant", "content": "done"}),
            ],
            "wire 消息必须逐字段一致：rawArguments 优先，无文本时 content 为 null，没有调用就不带 tool_calls"
        );
        assert_eq!(context, before, "出站转换不能修改 canonical transcript");
    }

    // Kills: sending every system message as-is, or dropping patches instead of replaying them.
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
        let prompt = current_system_prompt(&context.messages).expect("有 system message");
        assert_eq!(
            wire,
            vec![
                json!({"role": "system", "content": prompt}),
                json!({"role": "user", "content": "first"}),
                json!({"role": "assistant", "content": "ok"}),
                json!({"role": "user", "content": "second"}),
            ],
            "所有 system message 折叠成开头一条，中途的 system 不进入 wire"
        );
        assert!(prompt.contains("BASE") && prompt.contains("PATCH"));
        assert_eq!(context, before, "折叠不能写回 transcript");

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
            }})])
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
    // chunk, parsing arguments before the finish, or emitting toolcall_end mid-stream.
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
            "contentIndex 按首次出现分配（provider index 4→0，文本→1，2→2），不是 provider index"
        );

        let read_raw = r#"{"path":"README.md"}"#;
        let search_raw = r#"{"query":"pi"}"#;
        let ModelEvent::TextDelta { partial, .. } = &events[4] else {
            unreachable!()
        };
        assert_eq!(
            partial.content,
            vec![
                raw_call("call-read", "read", read_raw),
                text_block("先读，再查"),
                raw_call("call-search", "search", r#"{"query":"#),
            ],
            "partial 累积完整内容：一个文本块，工具参数在流式阶段是原始字符串"
        );
        assert_eq!(partial.provider, "fixture");
        assert_eq!(partial.model, "fixture-1");
        assert_eq!(partial.usage, Usage::default(), "partial 的 usage 是零");
        assert_eq!(partial.stop_reason, StopReason::Stop);

        let (ends, message) = state.finish().expect("有 finish chunk");
        let read_final = parsed_call("call-read", "read", json!({"path": "README.md"}), read_raw);
        let search_final = parsed_call("call-search", "search", json!({"query": "pi"}), search_raw);
        assert_eq!(kinds(&ends), ["toolcall_end", "toolcall_end"]);
        let ModelEvent::ToolcallEnd {
            content_index,
            tool_call,
            partial,
        } = &ends[0]
        else {
            unreachable!()
        };
        assert_eq!(*content_index, 0);
        assert_eq!(AssistantContent::ToolCall(tool_call.clone()), read_final);
        assert_eq!(
            partial.content,
            vec![
                read_final.clone(),
                text_block("先读，再查"),
                raw_call("call-search", "search", search_raw)
            ],
            "toolcall_end 按内容顺序逐个替换成解析后的调用"
        );
        assert_eq!(partial.stop_reason, StopReason::ToolUse);
        let ModelEvent::ToolcallEnd { content_index, .. } = &ends[1] else {
            unreachable!()
        };
        assert_eq!(*content_index, 2);
        assert_eq!(
            message.content,
            vec![read_final, text_block("先读，再查"), search_final]
        );
        assert_eq!(
            message.stop_reason,
            StopReason::ToolUse,
            "tool_calls 映射为 toolUse"
        );
        assert_eq!(
            message.usage,
            Usage {
                input: 7,
                output: 5,
                total_tokens: 12
            }
        );
    }

    // Kills: parsing (or "repairing") arguments that a `length` cut left incomplete.
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
        assert_eq!(ends.len(), 1);
        assert_eq!(message.stop_reason, StopReason::Length);
        assert_eq!(
            message.content,
            vec![raw_call("call-1", "read", r#"{"path":"a"#)],
            "length 截断的参数必须保留原始文本，arguments 与 rawArguments 都是原始字符串"
        );
    }

    // Kills: treating unparsable `tool_calls` arguments as `{}` or as a string.
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
        assert_eq!(error, "Tool read arguments 不是完整 JSON");
        let failed = state.fail(StopReason::Error, &error);
        assert_eq!(failed.stop_reason, StopReason::Error);
        assert_eq!(failed.error_message.as_deref(), Some(error.as_str()));
        assert_eq!(
            failed.content[0],
            text_block("看看"),
            "失败时保留 partial 内容"
        );
    }

    // Kills: inventing a stop reason when the provider never sent one, and a zero total when
    // the provider omits `total_tokens`.
    #[test]
    fn missing_finish_fails_and_usage_normalises() {
        let mut state = InboundState::new("fixture", "fixture-1");
        apply_all(&mut state, vec![text_chunk("partial")]);
        assert_eq!(
            state.finish().expect_err("没有 finish chunk 不能算完成"),
            "Provider stream ended without a finish chunk"
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
        let (ends, message) = state.finish().expect("有 finish chunk");
        assert!(ends.is_empty());
        assert_eq!(message.stop_reason, StopReason::Stop);
        assert_eq!(message.content, vec![text_block("hi")]);
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
            *self.cancel_seen.lock().unwrap() = Some(cancel);
            self.receiver.lock().unwrap().take().expect("只调用一次")
        }
    }

    fn model_over(transport: Arc<dyn ProviderTransport>) -> OpenAiCompatibleModel {
        OpenAiCompatibleModel::new("fixture", "fixture-1", transport)
    }

    // Kills: sending an empty `tools` array, building the request from anything but the
    // outbound mapping, and a terminal that differs from `result()`.
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
                ]
            );
            let ModelEvent::Start { partial } = &events[0] else {
                unreachable!()
            };
            assert!(partial.content.is_empty());
            assert_eq!(
                (partial.provider.as_str(), partial.model.as_str()),
                ("fixture", "fixture-1")
            );
            let ModelEvent::Done { reason, message } = &events[4] else {
                unreachable!()
            };
            assert_eq!(*reason, StopReason::ToolUse);
            assert_eq!(&stream.result().await, message, "done 的消息就是 result()");
            assert_eq!(
                message.content[1],
                parsed_call(
                    "call-1",
                    "read",
                    json!({"path": "a.txt"}),
                    r#"{"path":"a.txt"}"#
                )
            );

            let requests = transport.requests();
            assert_eq!(requests.len(), 1);
            assert_eq!(requests[0].model, "fixture-1");
            assert_eq!(requests[0].messages, to_provider_messages(&context));
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
                to_provider_tools(&with_tools.tools)
            );
        })
        .await;
    }

    // Kills: panicking or dropping the streamed text when the transport fails mid-stream.
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
            assert_eq!(kinds(&events), ["start", "text_delta", "error"]);
            let ModelEvent::Error { reason, error } = &events[2] else {
                unreachable!()
            };
            assert_eq!(*reason, StopReason::Error);
            assert_eq!(error.error_message.as_deref(), Some("socket reset"));
            assert_eq!(
                error.content,
                vec![text_block("partial")],
                "错误终态保留 partial"
            );
            assert_eq!(&stream.result().await, error);
        })
        .await;
    }

    // Kills: ignoring the cancellation token, reporting it as a plain error, or losing the
    // partial text received before it.
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
            sender.send(Ok(text_chunk("partial"))).unwrap();
            let mut seen = Vec::new();
            while let Some(event) = stream.next().await {
                if matches!(event, ModelEvent::TextDelta { .. }) {
                    token.cancel();
                }
                seen.push(event);
            }
            assert_eq!(kinds(&seen), ["start", "text_delta", "error"]);
            let ModelEvent::Error { reason, error } = &seen[2] else {
                unreachable!()
            };
            assert_eq!(*reason, StopReason::Aborted, "取消必须形成 aborted 终态");
            assert_eq!(error.stop_reason, StopReason::Aborted);
            assert_eq!(error.error_message.as_deref(), Some("Request was aborted"));
            assert_eq!(error.content, vec![text_block("partial")]);
            let seen_token = transport.cancel_seen.lock().unwrap().clone().unwrap();
            assert!(seen_token.is_cancelled(), "transport 要拿到同一个取消令牌");
            drop(sender);
        })
        .await;
    }

    // Kills: skipping or panicking on a malformed provider chunk.
    #[tokio::test]
    async fn malformed_sse_chunk_becomes_an_error_terminal() {
        within(async {
            let transport = Arc::new(SseTransport::new(sse_halves(&[
                r#"{"choices":[{"index":0,"delta":{"content":"半句"}}]}"#,
                r#"{"choices":"not-an-array"}"#,
            ])));
            let stream = model_over(transport).stream(
                &context_of(vec![user_message("x")]),
                StreamOptions::default(),
            );
            let events = collect(&stream).await;
            assert_eq!(kinds(&events), ["start", "text_delta", "error"]);
            let result = stream.result().await;
            assert_eq!(result.stop_reason, StopReason::Error);
            assert_eq!(
                result.error_message.as_deref(),
                Some("Invalid provider chunk: choices must be an array")
            );
            assert_eq!(result.content, vec![text_block("半句")]);
        })
        .await;
    }
}

mod sse {
    use super::*;

    // Kills: parsing each read on its own (frames straddle reads), keeping `\r`, or not
    // joining multi-line data with `\n`.
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
                "在第 {cut} 个字节处切开后，payload 不能变"
            );
        }
    }

    // Kills: taking arguments in arrival order instead of by index, and dropping the usage
    // that arrives in a trailing payload after `finish_reason`.
    #[test]
    fn interleaved_tool_arguments_and_trailing_usage() {
        let chunks = decode_sse(
            sse_halves(&[
                concat!(
                    r#"{"choices":[{"index":0,"delta":{"tool_calls":["#,
                    r#"{"index":0,"id":"call-a","type":"function","function":{"name":"read","arguments":"{\"path\":"}},"#,
                    r#"{"index":1,"id":"call-b","type":"function","function":{"name":"search","arguments":"{\"query\":"}}]}}]}"#
                ),
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"pi\"}"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"README.md\"}"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20}}"#,
                "[DONE]",
                r#"{"choices":[{"index":0,"delta":{"content":"after done"}}]}"#,
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
            "按 index 保留 tool 参数片段；[DONE] 之后不再读取；尾随 usage 合并进唯一的 finish"
        );

        let mut state = InboundState::new("fixture", "fixture-1");
        for chunk in chunks {
            state.apply(chunk);
        }
        let (_, message) = state.finish().expect("有 finish chunk");
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
            ]
        );
        assert_eq!(message.usage.total_tokens, 20);
    }

    // Kills: "take the first choice", accepting unknown finish reasons, and accepting content
    // after the stream said it was finished.
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
                &[r#"{"choices":[{"index":0,"delta":{},"finish_reason":"content_filter"}]}"#],
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
    }

    // Kills: inventing a `Finish` when the provider never sent a finish reason, and reading
    // on after an invalid chunk.
    #[test]
    fn no_finish_reason_means_no_finish_chunk() {
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
}
