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

    // Kills: replaying cut or malformed argument text verbatim (a strict server answers 400
    // to every later request), sending it as a JSON string instead of `{}`, and replacing
    // valid raw text that is not an object.
    #[test]
    fn arguments_that_are_not_json_go_back_as_an_empty_object() {
        let assistant = assistant_message(
            vec![
                raw_call("call-cut", "read", r#"{"path":"READ"#),
                raw_call("call-empty", "ls", ""),
                parsed_call("call-list", "pick", json!([1, 2]), "[1,2]"),
            ],
            StopReason::ToolUse,
        );
        let wire = to_provider_messages(&context_of(vec![AgentMessage::Assistant(assistant)]));
        let arguments: Vec<&Value> = (0..3)
            .map(|i| &wire[0]["tool_calls"][i]["function"]["arguments"])
            .collect();
        assert_eq!(
            arguments,
            vec![&json!("{}"), &json!("{}"), &json!("[1,2]")],
            "rawArguments 不是合法 JSON（被截断、被取消、模型写坏）时发送 \"{{}}\"；合法的原文照常原样发回"
        );
        for (i, argument) in arguments.iter().enumerate() {
            let text = argument.as_str().expect("arguments 在 wire 上是字符串");
            assert!(
                serde_json::from_str::<Value>(text).is_ok(),
                "第 {i} 个调用发出去的 arguments 必须是合法 JSON，严格的服务端才会接受：{text}"
            );
        }
    }

    // Kills: dropping a tool turn's reasoning (DeepSeek's thinking mode then rejects the next
    // request), sending it on turns without calls, and mixing it into `content`.
    #[test]
    fn reasoning_goes_back_with_a_tool_turn_only() {
        let mut tool_turn = assistant_message(
            vec![
                text_block("先看看"),
                parsed_call("call-1", "read", json!({"path": "a"}), r#"{"path":"a"}"#),
            ],
            StopReason::ToolUse,
        );
        tool_turn.thinking = Some("用户要读 a".into());
        let mut answer = assistant_message(vec![text_block("好了")], StopReason::Stop);
        answer.thinking = Some("可以回答了".into());
        let wire = to_provider_messages(&context_of(vec![
            AgentMessage::Assistant(tool_turn),
            AgentMessage::Assistant(answer),
        ]));
        assert_eq!(
            wire[0],
            json!({"role": "assistant", "content": "先看看", "reasoning_content": "用户要读 a",
                   "tool_calls": [{"id": "call-1", "type": "function",
                                   "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}]}),
            "工具回合的 thinking 作为 reasoning_content 发回，content 里只有文本"
        );
        assert_eq!(
            wire[1],
            json!({"role": "assistant", "content": "好了"}),
            "没有调用的回合不发 reasoning_content"
        );
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
                tool_chunk(0, Some("call-1"), Some("ls"), "{}"),
                tool_chunk(1, Some("call-2"), Some("read"), r#"{"path":"a"#),
                ProviderChunk::Finish {
                    reason: FinishReason::Length,
                    usage: ProviderUsage::default(),
                },
            ],
        );
        let (ends, message) = state.finish().expect("length 也是正常结束");
        assert_eq!(ends.len(), 2, "每个调用都有一个 toolcall_end");
        assert_eq!(
            message.stop_reason,
            StopReason::Length,
            "finish_reason length 映射为 length"
        );
        assert_eq!(
            message.content,
            vec![
                raw_call("call-1", "ls", "{}"),
                raw_call("call-2", "read", r#"{"path":"a"#)
            ],
            "length 截断的参数必须保留原始文本，arguments 与 rawArguments 都是原始字符串——碰巧能解析的也不解析"
        );
    }

    // Kills: ending the turn on unparsable `tool_calls` arguments (the run would stop instead
    // of telling the model), turning them into `{}` (a guess executed as if the model said
    // it), losing the raw text, and a `fail` that drops the partial or the given reason.
    #[test]
    fn unparsable_tool_arguments_stay_raw_and_the_turn_goes_on() {
        let mut state = InboundState::new("fixture", "fixture-1");
        apply_all(
            &mut state,
            vec![
                text_chunk("看看"),
                tool_chunk(0, Some("call-1"), Some("read"), r#"{"path":"#),
                tool_chunk(1, Some("call-2"), Some("ls"), "{}"),
                ProviderChunk::Finish {
                    reason: FinishReason::ToolCalls,
                    usage: ProviderUsage::default(),
                },
            ],
        );
        let (ends, message) = state
            .finish()
            .expect("参数不是合法 JSON 不能结束回合：调用留下来，由工具契约回答它");
        assert_eq!(
            message.stop_reason,
            StopReason::ToolUse,
            "参数坏了的回合仍然是 toolUse 回合"
        );
        assert_eq!(
            message.content,
            vec![
                text_block("看看"),
                raw_call("call-1", "read", r#"{"path":"#),
                parsed_call("call-2", "ls", json!({}), "{}"),
            ],
            "参数不是合法 JSON 时 arguments 保留原始字符串（rawArguments 同样是原文），合法的调用照常解析"
        );
        assert_eq!(
            ends.len(),
            2,
            "每个调用都有一个 toolcall_end，包括参数坏了的那个"
        );

        let failed = state.fail(StopReason::Error, "boom");
        assert_eq!(
            failed.stop_reason,
            StopReason::Error,
            "fail 的消息带着给定的终态原因"
        );
        assert_eq!(
            failed.error_message.as_deref(),
            Some("boom"),
            "fail 的消息带着给定的 errorMessage"
        );
        assert_eq!(failed.content, message.content, "失败时保留 partial 内容");
        assert_eq!(failed.usage, Usage::default(), "失败的消息 usage 为零");
    }

    // Kills: trusting `finish_reason: stop` over the tool calls that are there (vLLM, SGLang
    // and older Ollama finish tool turns with `stop`), turning `stop` into a tool turn when
    // there is no call, and reporting a content-filter stop as a normal answer.
    #[test]
    fn tool_calls_decide_the_turn_and_content_filter_is_an_error() {
        let mut state = InboundState::new("fixture", "fixture-1");
        apply_all(
            &mut state,
            vec![
                tool_chunk(0, Some("call-1"), Some("read"), r#"{"path":"a.txt"}"#),
                ProviderChunk::Finish {
                    reason: FinishReason::Stop,
                    usage: ProviderUsage::default(),
                },
            ],
        );
        let (ends, message) = state.finish().expect("stop 加工具调用是正常结束");
        assert_eq!(ends.len(), 1, "每个调用都有一个 toolcall_end");
        assert_eq!(
            message.stop_reason,
            StopReason::ToolUse,
            "有工具调用时不管 finish_reason 是不是 stop，这一回合都是 toolUse"
        );
        assert_eq!(
            message.content,
            vec![parsed_call(
                "call-1",
                "read",
                json!({"path": "a.txt"}),
                r#"{"path":"a.txt"}"#
            )],
            "stop 回合里的调用和 tool_calls 回合一样解析参数"
        );

        let mut state = InboundState::new("fixture", "fixture-1");
        apply_all(
            &mut state,
            vec![
                text_chunk("好的"),
                ProviderChunk::Finish {
                    reason: FinishReason::Stop,
                    usage: ProviderUsage::default(),
                },
            ],
        );
        let (_, message) = state.finish().expect("纯文本 stop 是正常结束");
        assert_eq!(
            message.stop_reason,
            StopReason::Stop,
            "没有工具调用的 stop 仍然是 stop"
        );

        let mut state = InboundState::new("fixture", "fixture-1");
        apply_all(
            &mut state,
            vec![
                text_chunk("前半句"),
                ProviderChunk::Finish {
                    reason: FinishReason::ContentFilter,
                    usage: ProviderUsage::default(),
                },
            ],
        );
        assert_eq!(
            state.finish().expect_err("被内容过滤拦下的回答不能算完成"),
            "Provider 的内容过滤拦下了这次回答（finish_reason: content_filter）",
            "content_filter 用一句直白的话报错，而不是“不支持的 finish_reason”"
        );
        assert_eq!(
            FinishReason::ContentFilter.stop_reason(),
            StopReason::Error,
            "content_filter 映射为 error"
        );
    }

    // Kills: mixing reasoning into the answer's text, dropping it, emitting it as a text
    // delta, and a `thinking` key in the JSON of a message that has none (chapter 07's
    // transcript must stay byte for byte the same).
    #[test]
    fn thinking_is_kept_apart_from_the_text() {
        let mut state = InboundState::new("fixture", "fixture-1");
        let events = apply_all(
            &mut state,
            vec![
                ProviderChunk::Thinking {
                    delta: "先想".into(),
                },
                ProviderChunk::Thinking {
                    delta: "一想".into(),
                },
                text_chunk("答案"),
                ProviderChunk::Finish {
                    reason: FinishReason::Stop,
                    usage: ProviderUsage::default(),
                },
            ],
        );
        let deltas: Vec<(&str, Option<&str>)> = events
            .iter()
            .map(|event| match event {
                ModelEvent::TextDelta { delta, partial, .. } => {
                    (delta.as_str(), partial.thinking.as_deref())
                }
                other => panic!("思考片段不产生事件，只有文本产生 text_delta，却得到 {other:?}"),
            })
            .collect();
        assert_eq!(
            deltas,
            [("答案", Some("先想一想"))],
            "思考片段不产生 text_delta；之后事件的 partial 带着累积的 thinking"
        );
        let (_, message) = state.finish().expect("有 finish chunk 的流必须正常完成");
        assert_eq!(
            (message.content.clone(), message.thinking.clone()),
            (vec![text_block("答案")], Some("先想一想".to_string())),
            "thinking 单独保存，绝不混进文本"
        );

        let mut state = InboundState::new("fixture", "fixture-1");
        apply_all(
            &mut state,
            vec![ProviderChunk::Thinking {
                delta: "只想不说".into(),
            }],
        );
        let failed = state.fail(StopReason::Aborted, "Request was aborted");
        assert_eq!(
            failed.thinking.as_deref(),
            Some("只想不说"),
            "失败或取消的消息也保留已经收到的 thinking"
        );

        let mut state = InboundState::new("fixture", "fixture-1");
        apply_all(
            &mut state,
            vec![
                text_chunk("hi"),
                ProviderChunk::Finish {
                    reason: FinishReason::Stop,
                    usage: ProviderUsage::default(),
                },
            ],
        );
        let (_, plain) = state.finish().expect("有 finish chunk 的流必须正常完成");
        assert_eq!(plain.thinking, None, "没有思考片段时 thinking 是 None");
        let json = serde_json::to_value(&plain).expect("AssistantMessage 必须能序列化");
        assert_eq!(
            json.get("thinking"),
            None,
            "没有 thinking 的消息，JSON 里不出现 thinking 字段（对话记录与原来逐字节相同）"
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
                    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":-1,"id":"c","function":{"name":"ls"}}]}}]}"#,
                ],
                "choices[0].delta.tool_calls[0].index must be a non-negative integer",
            ),
            (
                &[r#"{"choices":[{"index":0,"delta":{},"finish_reason":"eos"}]}"#],
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

    // Kills: an error payload reported as a malformed chunk (the provider's own message
    // lost), a bare-string `error` ignored, and `content_filter` refused as unsupported.
    #[test]
    fn provider_errors_and_content_filter_keep_their_words() {
        let cases = [
            (
                r#"{"error":{"message":"Rate limit reached for requests","type":"requests"}}"#,
                "Provider 返回错误：Rate limit reached for requests",
            ),
            (
                r#"{"error":"upstream overloaded"}"#,
                "Provider 返回错误：upstream overloaded",
            ),
            (
                r#"{"error":{"code":503}}"#,
                r#"Provider 返回错误：{"code":503}"#,
            ),
        ];
        for (payload, expected) in cases {
            let error = ChunkDecoder::new()
                .decode(payload)
                .expect_err("error payload 必须结束这次流");
            assert_eq!(
                error.to_string(),
                expected,
                "流里的 error payload 要带出 provider 自己的话（message，或字符串，或整段 JSON）"
            );
        }

        let chunks = decode_sse(
            sse_halves(&[
                r#"{"choices":[{"index":0,"delta":{"content":"一半"},"finish_reason":"content_filter"}]}"#,
                "[DONE]",
            ])
            .iter()
            .map(Vec::as_slice),
        );
        assert_eq!(
            chunks,
            vec![
                Ok(text_chunk("一半")),
                Ok(ProviderChunk::Finish {
                    reason: FinishReason::ContentFilter,
                    usage: ProviderUsage::default(),
                }),
            ],
            "content_filter 是一个 finish 原因，同一个 chunk 里的文本照常保留"
        );
    }

    // Kills: requiring `index` on every tool-call delta (Gemini's compatible endpoint sends
    // none), giving every index-less delta a new call, and merging two calls with different ids.
    #[test]
    fn tool_calls_without_index_are_inferred() {
        let chunks = decode_sse(
            sse_halves(&[
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"call-a","type":"function","function":{"name":"read","arguments":"{\"path\":"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"\"a.txt\"}"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"call-b","type":"function","function":{"name":"ls","arguments":"{}"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"call-b","function":{"arguments":""}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            ])
            .iter()
            .map(Vec::as_slice),
        );
        assert_eq!(
            chunks,
            vec![
                Ok(tool_chunk(0, Some("call-a"), Some("read"), r#"{"path":"#)),
                Ok(tool_chunk(0, None, None, r#""a.txt"}"#)),
                Ok(tool_chunk(1, Some("call-b"), Some("ls"), "{}")),
                Ok(tool_chunk(1, Some("call-b"), None, "")),
                Ok(ProviderChunk::Finish {
                    reason: FinishReason::ToolCalls,
                    usage: ProviderUsage::default(),
                }),
            ],
            "没有 index 时：带新 id 的片段开启下一个调用，没有 id 或 id 相同的片段续写上一个调用"
        );

        let mut decoder = ChunkDecoder::new();
        let chunks = decoder
            .decode(
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"id":"x","function":{"name":"a"}},{"id":"y","function":{"name":"b"}}]}}]}"#,
            )
            .expect("混用有 index 和没有 index 的片段也合法");
        assert_eq!(
            chunks,
            vec![
                ProviderChunk::Tool {
                    index: 3,
                    id: Some("x".into()),
                    name: Some("a".into()),
                    arguments_delta: None,
                },
                ProviderChunk::Tool {
                    index: 4,
                    id: Some("y".into()),
                    name: Some("b".into()),
                    arguments_delta: None,
                },
            ],
            "推断出的新调用排在见过的最大 index 之后，不会撞上已有的调用"
        );
    }

    // Kills: ignoring `reasoning_content` (DeepSeek, Qwen) or `reasoning` (vLLM, OpenRouter),
    // decoding them as text, and an empty reasoning delta becoming a chunk.
    #[test]
    fn reasoning_deltas_become_thinking_chunks() {
        let chunks = decode_sse(
            sse_halves(&[
                r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"想一想"}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"reasoning":"再想"}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"reasoning_content":"","content":"答"}}]}"#,
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            ])
            .iter()
            .map(Vec::as_slice),
        );
        assert_eq!(
            chunks,
            vec![
                Ok(ProviderChunk::Thinking {
                    delta: "想一想".into()
                }),
                Ok(ProviderChunk::Thinking {
                    delta: "再想".into()
                }),
                Ok(text_chunk("答")),
                Ok(ProviderChunk::Finish {
                    reason: FinishReason::Stop,
                    usage: ProviderUsage::default(),
                }),
            ],
            "reasoning_content 与 reasoning 都变成 Thinking 片段，不是文本；空串不产出片段"
        );
        let error = ChunkDecoder::new()
            .decode(r#"{"choices":[{"index":0,"delta":{"reasoning_content":7}}]}"#)
            .expect_err("reasoning_content 不是字符串时拒绝");
        assert_eq!(
            error.to_string(),
            "Invalid provider chunk: choices[0].delta.reasoning_content must be a string",
            "reasoning_content 出现时必须是字符串"
        );
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

mod http_request {
    use super::*;
    use pi_course::http_transport::{
        build_request, chat_completions_url, redact, request_body, Endpoint, DEFAULT_BASE_URL,
    };

    const KEY: &str = "sk-test-0123456789";

    fn chat_request(tools: Option<Vec<Value>>) -> ProviderRequest {
        ProviderRequest {
            model: "gpt-test".into(),
            messages: vec![
                json!({"role": "system", "content": "SYS"}),
                json!({"role": "user", "content": "你好"}),
            ],
            tools,
        }
    }

    fn read_tool() -> Value {
        json!({"type": "function", "function": {
            "name": "read",
            "description": "Read a file",
            "parameters": {"type": "object"},
        }})
    }

    // Kills: a doubled `//` when the base URL ends in `/`, trimming only one slash, and a path
    // other than `/chat/completions`.
    #[test]
    fn chat_completions_url_with_or_without_trailing_slash() {
        assert_eq!(
            chat_completions_url("http://127.0.0.1:8080/v1"),
            "http://127.0.0.1:8080/v1/chat/completions",
            "URL 是 base URL 后面接 /chat/completions"
        );
        assert_eq!(
            chat_completions_url("http://127.0.0.1:8080/v1/"),
            "http://127.0.0.1:8080/v1/chat/completions",
            "base URL 以 / 结尾时不能拼出 //chat/completions"
        );
        assert_eq!(
            chat_completions_url("http://127.0.0.1:8080/v1//"),
            "http://127.0.0.1:8080/v1/chat/completions",
            "base URL 末尾的 / 全部去掉，不止去掉一个"
        );
        assert_eq!(
            chat_completions_url(DEFAULT_BASE_URL),
            "https://api.openai.com/v1/chat/completions",
            "默认 base URL 得到 OpenAI 的 chat/completions 地址"
        );
    }

    // Kills: `stream` missing or false, no `stream_options.include_usage`, an empty `tools`
    // array (or `null`) when there are no tools, and tools dropped when there are some.
    #[test]
    fn request_body_asks_for_a_stream_with_usage() {
        let body = request_body(&chat_request(None));
        assert_eq!(
            body["stream"],
            json!(true),
            "请求体必须带 \"stream\": true，否则服务商不会流式回答"
        );
        assert_eq!(
            body["stream_options"],
            json!({"include_usage": true}),
            "请求体必须带 stream_options.include_usage = true，否则流式回答里没有 usage"
        );
        assert_eq!(
            body.get("tools"),
            None,
            "没有工具时请求体里不能有 tools 字段（空数组和 null 都不行）"
        );
        assert_eq!(
            body,
            json!({
                "model": "gpt-test",
                "messages": [
                    {"role": "system", "content": "SYS"},
                    {"role": "user", "content": "你好"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
            }),
            "请求体恰好是 model、messages、stream、stream_options 四个字段"
        );

        let body = request_body(&chat_request(Some(vec![read_tool()])));
        assert_eq!(
            body,
            json!({
                "model": "gpt-test",
                "messages": [
                    {"role": "system", "content": "SYS"},
                    {"role": "user", "content": "你好"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "tools": [read_tool()],
            }),
            "有工具时请求体带上 tools，内容就是 ProviderRequest 里的工具数组"
        );
    }

    // Kills: the key in the body or the URL, an `authorization` value without `Bearer `, a
    // capitalised header name, a missing `accept`, and a body that is not the request's JSON.
    #[test]
    fn build_request_puts_the_key_only_in_the_authorization_header() {
        let endpoint = Endpoint::new("http://127.0.0.1:8080/v1/", KEY);
        let request = chat_request(Some(vec![read_tool()]));
        let http = build_request(&endpoint, &request);
        assert_eq!(
            http.url, "http://127.0.0.1:8080/v1/chat/completions",
            "URL 由 chat_completions_url(base_url) 得到，里面没有密钥"
        );
        let bearer = format!("Bearer {KEY}");
        assert_eq!(
            http.header("authorization"),
            Some(bearer.as_str()),
            "密钥放在 authorization 头里，值是 Bearer <key>，头名一律小写"
        );
        let mut headers = http.headers.clone();
        headers.sort();
        assert_eq!(
            headers,
            vec![
                ("accept".to_string(), "text/event-stream".to_string()),
                ("authorization".to_string(), bearer.clone()),
                ("content-type".to_string(), "application/json".to_string()),
            ],
            "请求头恰好三个（头名小写）：authorization、content-type: application/json、accept: text/event-stream"
        );
        let text = String::from_utf8_lossy(&http.body).into_owned();
        assert!(
            !text.contains(KEY),
            "密钥只能出现在 authorization 头里，不能进请求体：{text}"
        );
        let body: Value = serde_json::from_slice(&http.body).expect("请求体必须是合法的 JSON");
        assert_eq!(
            body,
            json!({
                "model": "gpt-test",
                "messages": [
                    {"role": "system", "content": "SYS"},
                    {"role": "user", "content": "你好"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "tools": [read_tool()],
            }),
            "请求体就是 request_body 的 JSON 序列化"
        );
    }

    // Kills: redacting only the first occurrence, and replacing an empty key (which puts
    // `[REDACTED]` before and after every character).
    #[test]
    fn redact_hides_every_occurrence_and_ignores_an_empty_key() {
        assert_eq!(
            redact(
                &format!("Incorrect API key provided: {KEY}. You passed {KEY}."),
                KEY
            ),
            "Incorrect API key provided: [REDACTED]. You passed [REDACTED].",
            "密钥每一次出现都要换成 [REDACTED]，不只第一次"
        );
        assert_eq!(
            redact("nothing secret here", KEY),
            "nothing secret here",
            "不含密钥的文字原样返回"
        );
        assert_eq!(
            redact("Bearer ok", ""),
            "Bearer ok",
            "空密钥什么也不替换：替换空串会在每个字符的前后都插进 [REDACTED]"
        );
    }
}

mod http_stream {
    use super::*;
    use pi_course::http_transport::{
        status_error, BodyChunk, Endpoint, HttpClient, HttpFuture, HttpRequest, HttpResponse,
        HttpTransport,
    };
    use pi_course::provider_adapter::ChunkResult;
    use std::sync::atomic::{AtomicBool, Ordering};

    const KEY: &str = "sk-live-0123456789";
    const BASE: &str = "http://127.0.0.1:8080/v1";

    /// One scripted step of a response body.
    enum Read {
        Bytes(Vec<u8>),
        /// The read fails: the connection broke after the status line.
        Fail(String),
        Wait(Duration),
        /// The body stays open and sends nothing more, until its reader drops it.
        Stall,
    }

    enum Reply {
        Status(u16, Vec<Read>),
        /// `post` itself fails: refused, DNS, TLS.
        Refused(String),
        /// The status line never arrives.
        Silent,
    }

    /// Sets the flag when dropped: the reader let go of what it was waiting for.
    struct Release(Arc<AtomicBool>);

    impl Drop for Release {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// In-memory `HttpClient`: records every request the moment `post` is called and answers
    /// the first one with the scripted reply.
    struct FakeHttp {
        reply: Mutex<Option<Reply>>,
        requests: Mutex<Vec<HttpRequest>>,
        released: Arc<AtomicBool>,
    }

    impl FakeHttp {
        fn new(reply: Reply) -> Arc<FakeHttp> {
            Arc::new(FakeHttp {
                reply: Mutex::new(Some(reply)),
                requests: Mutex::new(Vec::new()),
                released: Arc::new(AtomicBool::new(false)),
            })
        }

        fn requests(&self) -> Vec<HttpRequest> {
            self.requests.lock().expect("测试替身的锁不会中毒").clone()
        }

        /// Waits up to a second for the reader to drop the body (or the pending answer).
        async fn released_soon(&self) -> bool {
            tokio::time::timeout(Duration::from_secs(1), async {
                while !self.released.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .is_ok()
        }
    }

    impl HttpClient for FakeHttp {
        fn post(&self, request: HttpRequest) -> HttpFuture {
            self.requests
                .lock()
                .expect("测试替身的锁不会中毒")
                .push(request);
            let reply = self.reply.lock().expect("测试替身的锁不会中毒").take();
            let released = Arc::clone(&self.released);
            Box::pin(async move {
                match reply {
                    None => Err("the fake answers one request only".to_string()),
                    Some(Reply::Refused(error)) => Err(error),
                    Some(Reply::Silent) => {
                        let _release = Release(released);
                        std::future::pending().await
                    }
                    Some(Reply::Status(status, reads)) => {
                        let (sender, body) = mpsc::channel(1);
                        tokio::spawn(feed(sender, reads, released));
                        Ok(HttpResponse { status, body })
                    }
                }
            })
        }
    }

    /// Plays the body; dropping `sender` at the end ends the body.
    async fn feed(sender: mpsc::Sender<BodyChunk>, reads: Vec<Read>, released: Arc<AtomicBool>) {
        for read in reads {
            let open = match read {
                Read::Bytes(bytes) => sender.send(Ok(bytes)).await.is_ok(),
                Read::Fail(error) => sender.send(Err(error)).await.is_ok(),
                Read::Wait(pause) => tokio::select! {
                    _ = tokio::time::sleep(pause) => true,
                    _ = sender.closed() => false,
                },
                Read::Stall => {
                    sender.closed().await;
                    false
                }
            };
            if !open {
                released.store(true, Ordering::SeqCst);
                return;
            }
        }
    }

    fn transport_over(client: &Arc<FakeHttp>) -> HttpTransport {
        HttpTransport::new(Endpoint::new(BASE, KEY), client.clone())
    }

    fn model_over(client: &Arc<FakeHttp>) -> OpenAiCompatibleModel {
        OpenAiCompatibleModel::new("openai", "gpt-test", Arc::new(transport_over(client)))
    }

    fn provider_request() -> ProviderRequest {
        ProviderRequest {
            model: "gpt-test".into(),
            messages: vec![json!({"role": "user", "content": "hi"})],
            tools: None,
        }
    }

    fn ask() -> AgentContext {
        context_of(vec![user_message("hi")])
    }

    /// Everything the transport sends until its channel closes.
    async fn drain(mut chunks: ChunkReceiver) -> Vec<ChunkResult> {
        tokio::time::timeout(Duration::from_secs(5), async {
            let mut items = Vec::new();
            while let Some(item) = chunks.recv().await {
                items.push(item);
            }
            items
        })
        .await
        .expect("5 秒内 transport 的通道没有关闭：pump 卡在了某个 await 上（没看取消令牌，或者不停地读响应体）")
    }

    fn sse(payload: &str) -> Vec<u8> {
        format!("data: {payload}\n\n").into_bytes()
    }

    fn text_payload(delta: &str) -> String {
        json!({"choices": [{"index": 0, "delta": {"content": delta}}]}).to_string()
    }

    fn aborted() -> ChunkResult {
        Err(TransportError::new("Request was aborted"))
    }

    // Kills: truncating before redacting (half a key survives the cut), no `…`, a cut by bytes
    // instead of characters, `…` on a body of exactly 200 characters, whitespace kept as it
    // came, and `HTTP 503: ` with nothing after the colon.
    #[test]
    fn status_error_redacts_then_cuts_to_200_chars() {
        let echoed = format!(
            r#"{{"error": {{"message": "Incorrect API key provided: {KEY}", "code": "invalid_api_key"}}}}"#
        );
        assert_eq!(
            status_error(401, echoed.as_bytes(), KEY),
            TransportError::new(
                r#"HTTP 401: {"error": {"message": "Incorrect API key provided: [REDACTED]", "code": "invalid_api_key"}}"#
            ),
            "非 2xx 的错误是 HTTP <状态码>: <响应体摘录>，摘录里的密钥换成 [REDACTED]"
        );
        assert_eq!(
            status_error(502, b"  upstream\r\n\n  timed \t out \n", KEY),
            TransportError::new("HTTP 502: upstream timed out"),
            "摘录里连续的空白（含换行）合成一个空格，首尾的空白去掉"
        );
        assert_eq!(
            status_error(503, b" \r\n ", KEY),
            TransportError::new("HTTP 503"),
            "响应体为空（或只有空白）时错误就是 HTTP <状态码>，后面没有冒号"
        );
        let exact = "错".repeat(200);
        assert_eq!(
            status_error(500, exact.as_bytes(), KEY),
            TransportError::new(format!("HTTP 500: {exact}")),
            "恰好 200 个字符的摘录不截断，也不加 …"
        );
        let long = "错".repeat(201);
        assert_eq!(
            status_error(500, long.as_bytes(), KEY),
            TransportError::new(format!("HTTP 500: {}…", "错".repeat(200))),
            "超过 200 个字符（按字符数，不是字节数）时只留前 200 个字符，再加 …"
        );
        let straddle = format!("{}{KEY} and more", "a".repeat(195));
        let error = status_error(500, straddle.as_bytes(), KEY);
        assert!(
            !error.0.contains("sk-"),
            "密钥横跨截断位置时也不能留下半截：先脱敏，再截断（得到的是 {error}）"
        );
        assert_eq!(
            error,
            TransportError::new(format!("HTTP 500: {}[REDA…", "a".repeat(195))),
            "先脱敏再截断：截断落在 [REDACTED] 中间也没关系"
        );
    }

    // Kills: treating only 200 as success, treating 3xx as success, an error body read without
    // limit (the server keeps it open), a body that ends without a final blank line losing its
    // last event, and an error text without the redacted excerpt.
    #[tokio::test]
    async fn non_2xx_answer_becomes_an_http_status_error() {
        let echoed = format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#)
            .into_bytes();
        // The key straddles the two reads.
        let (left, right) = echoed.split_at(55);
        let client = FakeHttp::new(Reply::Status(
            401,
            vec![Read::Bytes(left.to_vec()), Read::Bytes(right.to_vec())],
        ));
        let stream = model_over(&client).stream(&ask(), StreamOptions::default());
        let events = within(collect(&stream)).await;
        let result = stream.result().await;
        assert_eq!(
            (result.stop_reason, result.error_message.as_deref()),
            (
                StopReason::Error,
                Some(r#"HTTP 401: {"error":{"message":"Incorrect API key provided: [REDACTED]"}}"#)
            ),
            "非 2xx 的终态是 error，errorMessage 是 HTTP 401: <脱敏后的响应体>"
        );
        assert_eq!(
            kinds(&events),
            ["start", "error"],
            "非 2xx：没有任何 delta，直接是 error 终态"
        );
        let requests = client.requests();
        assert_eq!(requests.len(), 1, "一次 stream() 只发一个 HTTP 请求");
        assert_eq!(
            requests[0].url, "http://127.0.0.1:8080/v1/chat/completions",
            "请求发往 chat_completions_url(base_url)"
        );

        let client = FakeHttp::new(Reply::Status(302, vec![Read::Bytes(b"Found".to_vec())]));
        assert_eq!(
            drain(transport_over(&client).stream(provider_request(), CancellationToken::new()))
                .await,
            vec![Err(TransportError::new("HTTP 302: Found"))],
            "只有 2xx 才是成功：302 也是 HTTP 状态错误"
        );

        // 6000 bytes of error body, then the server keeps the body open.
        let noise = "internal error ".repeat(400);
        let reads = noise
            .as_bytes()
            .chunks(2000)
            .map(|piece| Read::Bytes(piece.to_vec()))
            .chain([Read::Stall])
            .collect();
        let client = FakeHttp::new(Reply::Status(500, reads));
        let excerpt: String = noise.chars().take(200).collect();
        assert_eq!(
            drain(transport_over(&client).stream(provider_request(), CancellationToken::new()))
                .await,
            vec![Err(TransportError::new(format!("HTTP 500: {excerpt}…")))],
            "错误响应体最多读 ERROR_BODY_LIMIT（4096）字节，够了就停，错误里只留 200 个字符加 …"
        );
        assert!(
            client.released_soon().await,
            "错误响应体读够 4096 字节后要放手（丢掉 body），不能一直等服务器关闭"
        );

        // Any 2xx is a success; the last event needs no blank line after it.
        let last =
            json!({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]});
        let client = FakeHttp::new(Reply::Status(
            201,
            vec![Read::Bytes(format!("data: {last}").into_bytes())],
        ));
        assert_eq!(
            drain(transport_over(&client).stream(provider_request(), CancellationToken::new()))
                .await,
            vec![
                Ok(text_chunk("ok")),
                Ok(ProviderChunk::Finish {
                    reason: FinishReason::Stop,
                    usage: ProviderUsage::default(),
                }),
            ],
            "2xx 都是成功；响应体结束时，没有空行收尾的最后一个事件也要交给解析器（SseParser::finish）"
        );
    }

    // Kills: a network error without its prefix, and one that still shows the key.
    #[tokio::test]
    async fn network_failure_is_reported_with_the_key_redacted() {
        let failure = format!(
            "error sending request for url ({BASE}/chat/completions?key={KEY}): connection refused"
        );
        let expected = format!(
            "Network error: error sending request for url ({BASE}/chat/completions?key=[REDACTED]): connection refused"
        );
        let client = FakeHttp::new(Reply::Refused(failure.clone()));
        assert_eq!(
            drain(transport_over(&client).stream(provider_request(), CancellationToken::new()))
                .await,
            vec![Err(TransportError::new(expected.clone()))],
            "连不上服务器：transport 发出一个 Network error: <原因> 错误，原因里的密钥换成 [REDACTED]"
        );

        let client = FakeHttp::new(Reply::Refused(failure));
        let stream = model_over(&client).stream(&ask(), StreamOptions::default());
        let events = within(collect(&stream)).await;
        let result = stream.result().await;
        assert_eq!(
            (result.stop_reason, result.error_message),
            (StopReason::Error, Some(expected)),
            "网络失败的终态是 error，errorMessage 是脱敏后的 Network error: …"
        );
        assert_eq!(
            kinds(&events),
            ["start", "error"],
            "网络失败：start 之后直接是 error 终态"
        );
    }

    // Kills: a broken body treated as its normal end (then a seen finish_reason would make it
    // look like success), an interruption without its prefix, one that shows the key, and an
    // invalid chunk skipped instead of ending the stream.
    #[tokio::test]
    async fn broken_body_is_an_interrupted_error_that_keeps_the_partial_text() {
        let finished = json!({"choices": [{"index": 0, "delta": {"content": "，还有"}, "finish_reason": "stop"}]});
        let client = FakeHttp::new(Reply::Status(
            200,
            vec![
                Read::Bytes(sse(&text_payload("半句"))),
                Read::Bytes(sse(&finished.to_string())),
                Read::Fail(format!(
                    "connection reset by peer (authorization: Bearer {KEY})"
                )),
                Read::Bytes(sse("[DONE]")),
            ],
        ));
        let stream = model_over(&client).stream(&ask(), StreamOptions::default());
        let events = within(collect(&stream)).await;
        let result = stream.result().await;
        assert_eq!(
            (result.stop_reason, result.error_message.as_deref()),
            (
                StopReason::Error,
                Some("Provider stream interrupted: connection reset by peer (authorization: Bearer [REDACTED])")
            ),
            "响应体中途断开是失败（哪怕已经见过 finish_reason）：errorMessage 是 Provider stream interrupted: <原因>，密钥脱敏"
        );
        assert_eq!(
            kinds(&events),
            ["start", "text_delta", "text_delta", "error"],
            "断流之前的文本照常流出，之后是 error 终态"
        );
        assert_eq!(
            result.content,
            vec![text_block("半句，还有")],
            "断流的 error 终态保留已经流出的文本"
        );

        let mut bad = sse(&text_payload("a"));
        bad.extend(sse(r#"{"choices":"not-an-array"}"#));
        let client = FakeHttp::new(Reply::Status(
            200,
            vec![
                Read::Bytes(bad),
                Read::Wait(Duration::from_secs(2)),
                Read::Bytes(sse(&text_payload("b"))),
            ],
        ));
        assert_eq!(
            drain(transport_over(&client).stream(provider_request(), CancellationToken::new()))
                .await,
            vec![
                Ok(text_chunk("a")),
                Err(TransportError::new(
                    "Invalid provider chunk: choices must be an array"
                )),
            ],
            "响应体里的数据不合法：transport 发出 ChunkDecoder 的错误，之后不再读"
        );
        assert!(
            client.released_soon().await,
            "数据不合法时 pump 返回，丢掉响应体"
        );
    }

    // Kills: sending a request whose token is already cancelled, and ending such a stream
    // without the `Request was aborted` error.
    #[tokio::test]
    async fn pre_cancelled_request_never_reaches_the_client() {
        let done =
            json!({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]});
        let client = FakeHttp::new(Reply::Status(
            200,
            vec![Read::Bytes(sse(&done.to_string()))],
        ));
        let token = CancellationToken::new();
        token.cancel();
        assert_eq!(
            drain(transport_over(&client).stream(provider_request(), token.clone())).await,
            vec![aborted()],
            "调用前已取消：transport 只发出一个 Request was aborted 错误"
        );
        assert_eq!(
            client.requests().len(),
            0,
            "调用前已取消的请求绝不能交给 HTTP 客户端（post 都不能调用）"
        );

        let stream = model_over(&client).stream(
            &ask(),
            StreamOptions {
                cancel: Some(token),
            },
        );
        let result = within(stream.result()).await;
        assert_eq!(
            (result.stop_reason, result.error_message.as_deref()),
            (StopReason::Aborted, Some("Request was aborted")),
            "调用前已取消：终态是 aborted，errorMessage 是 Request was aborted"
        );
        assert_eq!(
            client.requests().len(),
            0,
            "经过 OpenAiCompatibleModel 时，已取消的请求同样不能交给 HTTP 客户端"
        );
    }

    // Kills: awaiting the status line, the error body or the next body read without watching the
    // token (the connection is held until the server gives up).
    #[tokio::test]
    async fn cancellation_while_waiting_releases_the_connection() {
        // 1. The status line never comes.
        let client = FakeHttp::new(Reply::Silent);
        let token = CancellationToken::new();
        let chunks = transport_over(&client).stream(provider_request(), token.clone());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            client.requests().len(),
            1,
            "没有取消的请求要交给 HTTP 客户端，而且只交一次"
        );
        token.cancel();
        assert_eq!(
            drain(chunks).await,
            vec![aborted()],
            "等状态行时取消：transport 马上发出 Request was aborted，不能一直等服务器回答"
        );
        assert!(
            client.released_soon().await,
            "等状态行时取消：要丢掉 post 返回的 future，放弃这个请求"
        );

        // 2. An error body that is still arriving.
        let client = FakeHttp::new(Reply::Status(
            503,
            vec![Read::Bytes(b"overloaded, ".to_vec()), Read::Stall],
        ));
        let token = CancellationToken::new();
        let chunks = transport_over(&client).stream(provider_request(), token.clone());
        tokio::time::sleep(Duration::from_millis(20)).await;
        token.cancel();
        assert_eq!(
            drain(chunks).await,
            vec![aborted()],
            "读错误响应体时取消：结果是 Request was aborted，不是 HTTP 错误"
        );
        assert!(
            client.released_soon().await,
            "读错误响应体时取消：要马上丢掉响应体"
        );

        // 3. A slow answer, end to end through the model.
        let client = FakeHttp::new(Reply::Status(
            200,
            vec![Read::Bytes(sse(&text_payload("先到"))), Read::Stall],
        ));
        let token = CancellationToken::new();
        let stream = model_over(&client).stream(
            &ask(),
            StreamOptions {
                cancel: Some(token.clone()),
            },
        );
        let events = within(async {
            let mut seen = Vec::new();
            while let Some(event) = stream.next().await {
                if matches!(event, ModelEvent::TextDelta { .. }) {
                    token.cancel();
                }
                seen.push(event);
            }
            seen
        })
        .await;
        let result = stream.result().await;
        assert_eq!(
            (result.stop_reason, result.error_message.as_deref()),
            (StopReason::Aborted, Some("Request was aborted")),
            "响应体还在慢慢到达时取消：终态是 aborted，errorMessage 是 Request was aborted"
        );
        assert_eq!(
            kinds(&events),
            ["start", "text_delta", "error"],
            "取消之后只剩一个 error 终态"
        );
        assert_eq!(
            result.content,
            vec![text_block("先到")],
            "取消时保留已经流出的文本"
        );
        assert!(
            client.released_soon().await,
            "取消后 pump 要马上丢掉响应体（BodyReceiver），让客户端释放连接"
        );

        // 4. The same slow answer straight from the transport, whose reader keeps listening:
        //    only the token can stop pump here.
        let client = FakeHttp::new(Reply::Status(
            200,
            vec![Read::Bytes(sse(&text_payload("先到"))), Read::Stall],
        ));
        let token = CancellationToken::new();
        let mut chunks = transport_over(&client).stream(provider_request(), token.clone());
        let first = tokio::time::timeout(Duration::from_secs(5), chunks.recv())
            .await
            .expect("5 秒内应当收到第一个 chunk");
        assert_eq!(
            first,
            Some(Ok(ProviderChunk::Text {
                delta: "先到".into()
            })),
            "慢回答的第一段照常到达"
        );
        token.cancel();
        assert!(
            client.released_soon().await,
            "取消后 pump 要马上丢掉响应体（BodyReceiver），即使还有人在读 chunk"
        );
        assert_eq!(
            drain(chunks).await,
            vec![aborted()],
            "读响应体时取消：通道上只剩一个 Request was aborted"
        );
    }

    /// Three reads: the first ends inside "你", the second inside the usage line, so the
    /// trailing usage arrives in a later read than `finish_reason`; then the server keeps the
    /// connection open after `[DONE]`.
    fn split_answer() -> Vec<Read> {
        let finish = json!({"choices": [{"index": 0, "delta": {"content": "，世界"}, "finish_reason": "stop"}]});
        let usage = json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20}});
        let mut body = sse(&text_payload("你好"));
        body.extend(sse(&finish.to_string()));
        let usage_at = body.len();
        body.extend(sse(&usage.to_string()));
        body.extend(sse("[DONE]"));
        body.extend(sse(r#"{"choices":"after done"}"#));
        let mid_char = body
            .windows("你".len())
            .position(|window| window == "你".as_bytes())
            .expect("测试数据里有“你”")
            + 1;
        let mid_usage = usage_at + 10;
        vec![
            Read::Bytes(body[..mid_char].to_vec()),
            Read::Wait(Duration::from_millis(5)),
            Read::Bytes(body[mid_char..mid_usage].to_vec()),
            Read::Bytes(body[mid_usage..].to_vec()),
            Read::Stall,
        ]
    }

    // Kills: decoding each read on its own, stopping at `finish_reason` (the trailing usage is
    // lost), sending `Finish` before the trailing usage, reading on after `[DONE]`, and never
    // sending the `Finish` chunk.
    #[tokio::test]
    async fn body_split_anywhere_streams_text_and_trailing_usage() {
        let usage = ProviderUsage {
            input: Some(12),
            output: Some(8),
            total_tokens: Some(20),
        };
        let client = FakeHttp::new(Reply::Status(200, split_answer()));
        assert_eq!(
            drain(transport_over(&client).stream(provider_request(), CancellationToken::new()))
                .await,
            vec![
                Ok(text_chunk("你好")),
                Ok(text_chunk("，世界")),
                Ok(ProviderChunk::Finish {
                    reason: FinishReason::Stop,
                    usage,
                }),
            ],
            "字节切在行中间、字符中间都要正确解码；[DONE] 之后不再读；唯一的 Finish 在最后，带着 finish_reason 之后才到的 usage"
        );
        assert!(
            client.released_soon().await,
            "[DONE] 之后 pump 自己停止读取并丢掉响应体，不等服务器关闭连接"
        );

        let client = FakeHttp::new(Reply::Status(200, split_answer()));
        let stream = model_over(&client).stream(&ask(), StreamOptions::default());
        let events = within(collect(&stream)).await;
        let result = stream.result().await;
        assert_eq!(
            (result.stop_reason, result.error_message.as_deref()),
            (StopReason::Stop, None),
            "完整的回答以 done 结束：停止原因 stop，没有 errorMessage"
        );
        assert_eq!(
            kinds(&events),
            ["start", "text_delta", "text_delta", "done"],
            "每个文本片段一个 text_delta，最后是 done"
        );
        assert_eq!(
            result.content,
            vec![text_block("你好，世界")],
            "切在字符中间的文本拼回原样"
        );
        assert_eq!(
            result.usage,
            Usage {
                input: 12,
                output: 8,
                total_tokens: 20
            },
            "finish_reason 之后才到的 usage 也要进入最终消息"
        );
        let requests = client.requests();
        assert_eq!(requests.len(), 1, "一次 stream() 只发一个 HTTP 请求");
        let body: Value =
            serde_json::from_slice(&requests[0].body).expect("请求体必须是合法的 JSON");
        assert_eq!(
            body,
            json!({
                "model": "gpt-test",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": true,
                "stream_options": {"include_usage": true},
            }),
            "HttpTransport 发出的请求体由 build_request 构造"
        );
    }
}
