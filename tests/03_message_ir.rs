//! Chapter 03 acceptance tests: the message IR, the model event stream, system replay.
//!
//! Lab order: `projection` uses only Lab 3.1 functions, `terminal` builds its messages by hand
//! after creating the stream, `system_prompt` builds its messages by hand.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use pi_course::types::*;
use serde_json::{json, Value};

/// 2020-09-13 in Unix milliseconds; a timestamp in seconds is a thousand times smaller.
const MS_2020: u64 = 1_600_000_000_000;

fn system(content: &str, sections: Option<Value>, timestamp: u64) -> AgentMessage {
    AgentMessage::System(system_literal(content, sections, timestamp))
}

fn system_literal(content: &str, sections: Option<Value>, timestamp: u64) -> SystemMessage {
    SystemMessage {
        content: content.into(),
        sections: sections.map(|value| {
            value
                .as_object()
                .expect("测试夹具：sections 必须是 JSON object")
                .clone()
        }),
        timestamp,
    }
}

fn user_literal(texts: &[&str]) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: texts
            .iter()
            .map(|value| TextContent {
                text: (*value).into(),
            })
            .collect(),
        timestamp: 1,
    })
}

fn text_block(value: &str) -> AssistantContent {
    AssistantContent::Text(TextContent { text: value.into() })
}

/// Built from its JSON rather than a struct literal, so the fixture still compiles in later
/// chapters, whose `AssistantMessage` has more (optional) fields.
fn assistant_literal(content: Vec<AssistantContent>, stop_reason: StopReason) -> AssistantMessage {
    serde_json::from_value(json!({
        "content": content,
        "provider": "test",
        "model": "test-v1",
        "usage": Usage::EMPTY,
        "stopReason": stop_reason,
        "timestamp": 7,
    }))
    .expect("AssistantMessage 必须能从它的 JSON 读回")
}

fn call(id: &str, name: &str) -> AssistantContent {
    AssistantContent::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: json!({"path": "a.txt"}),
        raw_arguments: None,
    })
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("消息类型必须能序列化成 JSON")
}

mod projection {
    use super::*;

    #[test]
    fn text_projection_is_lossy_but_leaves_content_untouched() {
        let message = AgentMessage::Assistant(assistant_message(
            vec![
                AssistantContent::Text(text("先读取")),
                call("c1", "read"),
                AssistantContent::Text(text("再回答")),
            ],
            StopReason::ToolUse,
        ));
        let before = message.clone();
        let only_call = AgentMessage::Assistant(assistant_message(
            vec![call("c2", "ls")],
            StopReason::ToolUse,
        ));
        assert_eq!(
            text_of(&only_call),
            "",
            "工具调用不进入文本投影：只有工具调用的消息投影为空串"
        );
        assert_eq!(
            text_of(&user_literal(&["第一段", "第二段"])),
            "第一段\n第二段",
            "多个文本块用一个换行连接"
        );
        assert_eq!(
            text_of(&message),
            "先读取\n再回答",
            "只拼接 text 块：工具调用之后的文本块也要进入投影"
        );
        assert_eq!(message, before, "投影不能修改 canonical content");
        assert_eq!(
            text_of(&user_message("你好")),
            "你好",
            "user 消息的投影就是它的文本"
        );
    }

    #[test]
    fn tool_result_projection_joins_its_text_blocks() {
        let failed = AgentMessage::ToolResult(ToolResultMessage {
            tool_call_id: "t-7".into(),
            tool_name: "bash".into(),
            content: vec![text("exit 1"), text("permission denied")],
            details: Some(json!({"code": 1})),
            is_error: true,
            timestamp: 8,
        });
        assert_eq!(
            text_of(&failed),
            "exit 1\npermission denied",
            "toolResult 的文本投影同样是它的文本块，用换行连接"
        );
        let value = to_json(&failed);
        assert_eq!(
            value["isError"],
            json!(true),
            "toolResult 的 wire 字段是 isError"
        );
        assert_eq!(
            value["toolCallId"],
            json!("t-7"),
            "toolResult 的 wire 字段是 toolCallId"
        );
    }

    #[test]
    fn helpers_build_pi_wire_json() {
        assert_eq!(
            text("  缩进的第一行\n第二行\n"),
            TextContent {
                text: "  缩进的第一行\n第二行\n".into()
            },
            "text 原样保存文本，不修剪空白"
        );
        let user = user_message("read a.txt\nthen answer");
        let AgentMessage::User(inner) = &user else {
            panic!("user_message 必须返回 user 消息")
        };
        assert!(
            inner.timestamp > MS_2020,
            "user_message 的 timestamp 是当前 Unix 毫秒，得到 {}",
            inner.timestamp
        );
        let mut value = to_json(&user);
        value
            .as_object_mut()
            .expect("消息序列化成 JSON object")
            .remove("timestamp");
        assert_eq!(
            value,
            json!({"role": "user", "content": [{"type": "text", "text": "read a.txt\nthen answer"}]}),
            "user_message 只生成一个文本块，wire 形状与 pi 一致"
        );

        let fresh = assistant_message(vec![call("c1", "read")], StopReason::ToolUse);
        assert!(
            fresh.timestamp > MS_2020,
            "assistant_message 的 timestamp 是当前 Unix 毫秒，得到 {}",
            fresh.timestamp
        );
        let mut assistant = fresh;
        assistant.timestamp = 1;
        assert_eq!(
            to_json(&AgentMessage::Assistant(assistant)),
            json!({"role": "assistant",
                   "content": [{"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "a.txt"}}],
                   "provider": "scripted", "model": "scripted-v1",
                   "usage": {"input": 0, "output": 0, "totalTokens": 0},
                   "stopReason": "toolUse", "timestamp": 1}),
            "assistant_message 的默认值与 pi 的 wire 形状必须一致"
        );
    }

    #[test]
    fn model_events_and_messages_round_trip_through_pi_json() {
        let mut partial =
            assistant_message(vec![AssistantContent::Text(text("先"))], StopReason::Stop);
        partial.timestamp = 2;
        let event = ModelEvent::TextDelta {
            content_index: 0,
            delta: "先".into(),
            partial: partial.clone(),
        };
        let wire_partial = json!({"role": "assistant", "content": [{"type": "text", "text": "先"}],
            "provider": "scripted", "model": "scripted-v1",
            "usage": {"input": 0, "output": 0, "totalTokens": 0},
            "stopReason": "stop", "timestamp": 2});
        let mut wire_event = json!({"type": "text_delta", "contentIndex": 0, "delta": "先"});
        let mut partial_fields = wire_partial.clone();
        partial_fields
            .as_object_mut()
            .expect("测试夹具是 JSON object")
            .remove("role");
        wire_event["partial"] = partial_fields;
        assert_eq!(
            to_json(&event),
            wire_event,
            "模型事件的 type 是 snake_case，字段是 camelCase"
        );
        assert_eq!(
            serde_json::from_value::<ModelEvent>(wire_event).expect("pi 的事件 JSON 必须能读回"),
            event,
            "模型事件读回后与原事件相同"
        );

        let reasons = [
            StopReason::Stop,
            StopReason::Length,
            StopReason::ToolUse,
            StopReason::Error,
            StopReason::Aborted,
        ]
        .map(|reason| to_json(&reason));
        assert_eq!(
            reasons,
            ["stop", "length", "toolUse", "error", "aborted"].map(|name| json!(name)),
            "停止原因的 wire 名字是 camelCase"
        );

        let failed: AgentMessage = serde_json::from_value(json!({
            "role": "assistant",
            "content": [
                {"type": "text", "text": "读取中"},
                {"type": "toolCall", "id": "c9", "name": "read",
                 "arguments": {"path": "b.rs"}, "rawArguments": "{\"path\":\"b.rs\"}"}
            ],
            "provider": "p", "model": "m",
            "usage": {"input": 3, "output": 4, "totalTokens": 7},
            "stopReason": "error", "errorMessage": "socket reset", "timestamp": 9
        }))
        .expect("pi 的 assistant JSON 必须能读回");
        assert_eq!(
            text_of(&failed),
            "读取中",
            "读回的 assistant 消息投影只含文本块"
        );
        let AgentMessage::Assistant(failed) = failed else {
            panic!("role 为 assistant 的 JSON 必须读成 Assistant")
        };
        assert_eq!(
            failed.error_message.as_deref(),
            Some("socket reset"),
            "errorMessage 读回到 error_message"
        );
        assert_eq!(
            failed.content[1],
            AssistantContent::ToolCall(ToolCall {
                id: "c9".into(),
                name: "read".into(),
                arguments: json!({"path": "b.rs"}),
                raw_arguments: Some("{\"path\":\"b.rs\"}".into()),
            }),
            "toolCall 块连同 rawArguments 一起读回"
        );
    }
}

mod terminal {
    use super::*;

    /// Polls once: ready now, or not. Only used to show that something is NOT ready yet.
    fn ready_now<F: Future>(future: F) -> Option<F::Output> {
        match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(value) => Some(value),
            Poll::Pending => None,
        }
    }

    /// Awaits `future`, failing with `rule` if it is still pending after a second.
    async fn soon<F: Future>(future: F, rule: &str) -> F::Output {
        match tokio::time::timeout(Duration::from_secs(1), future).await {
            Ok(value) => value,
            Err(_) => panic!("1 秒内没有完成：{rule}"),
        }
    }

    /// The `type` tags of every event until the stream ends; `rule` names why it must end.
    async fn drain_kinds(stream: &AssistantMessageEventStream, rule: &str) -> Vec<Value> {
        let mut kinds = Vec::new();
        while let Some(event) = soon(stream.next(), rule).await {
            kinds.push(to_json(&event)["type"].clone());
        }
        kinds
    }

    #[tokio::test]
    async fn error_is_a_protocol_terminal_and_result_is_that_message() {
        let stream = assistant_message_event_stream();
        let mut failed = assistant_literal(vec![text_block("partial")], StopReason::Error);
        failed.error_message = Some("socket reset".into());
        stream.push(ModelEvent::Error {
            reason: StopReason::Error,
            error: failed.clone(),
        });
        // No end(): the error event alone must finish the stream.
        assert_eq!(
            drain_kinds(
                &stream,
                "error 事件必须是终态：只 push 一个 error、不调用 end，流也必须结束"
            )
            .await,
            [json!("error")],
            "error 事件照常交付给读者"
        );
        let result = soon(stream.result(), "error 事件必须是终态，并确定 result").await;
        assert_eq!(
            result, failed,
            "error 的 result 就是它携带的 error 消息（内容和 errorMessage 都不变）"
        );
    }

    #[tokio::test]
    async fn an_aborted_error_is_terminal_too() {
        let stream = assistant_message_event_stream();
        let aborted = assistant_literal(vec![text_block("写到一半")], StopReason::Aborted);
        stream.push(ModelEvent::Start {
            partial: assistant_literal(vec![], StopReason::Aborted),
        });
        stream.push(ModelEvent::Error {
            reason: StopReason::Aborted,
            error: aborted.clone(),
        });
        assert_eq!(
            drain_kinds(
                &stream,
                "reason 为 aborted 的 error 事件同样是终态，流必须结束"
            )
            .await,
            [json!("start"), json!("error")],
            "start 照常交付，随后是终态 error"
        );
        assert_eq!(
            soon(
                stream.result(),
                "reason 为 aborted 的 error 事件同样是终态，并确定 result"
            )
            .await,
            aborted,
            "error 的 result 就是它携带的 error 消息"
        );
    }

    #[tokio::test]
    async fn only_done_or_error_finish_the_stream_and_later_events_are_dropped() {
        let stream = assistant_message_event_stream();
        let partial = assistant_literal(vec![], StopReason::ToolUse);
        let tool_call = ToolCall {
            id: "c1".into(),
            name: "read".into(),
            arguments: json!({"path": "a.txt"}),
            raw_arguments: None,
        };
        let finished = assistant_literal(
            vec![
                text_block("ok"),
                AssistantContent::ToolCall(tool_call.clone()),
            ],
            StopReason::ToolUse,
        );
        stream.push(ModelEvent::Start {
            partial: partial.clone(),
        });
        stream.push(ModelEvent::TextDelta {
            content_index: 0,
            delta: "ok".into(),
            partial: partial.clone(),
        });
        stream.push(ModelEvent::ToolcallDelta {
            content_index: 1,
            delta: "{\"path\"".into(),
            partial: partial.clone(),
        });
        stream.push(ModelEvent::ToolcallEnd {
            content_index: 1,
            tool_call,
            partial: partial.clone(),
        });
        assert_eq!(
            ready_now(stream.result()),
            None,
            "只有 done / error 是终态：start、delta、toolcall_end 之后 result() 仍要等待"
        );
        stream.push(ModelEvent::Done {
            reason: StopReason::ToolUse,
            message: finished.clone(),
        });
        stream.push(ModelEvent::Error {
            reason: StopReason::Error,
            error: partial,
        });
        assert_eq!(
            drain_kinds(
                &stream,
                "done 事件无论 reason 是什么都是终态（toolUse 也一样），流必须结束"
            )
            .await,
            [
                json!("start"),
                json!("text_delta"),
                json!("toolcall_delta"),
                json!("toolcall_end"),
                json!("done")
            ],
            "只有 done / error 是终态，done 事件无论 reason 是什么都是终态；终态之后的事件必须被丢弃"
        );
        assert_eq!(
            soon(stream.result(), "done 事件必须确定 result").await,
            finished,
            "done 的 result 是它携带的 message"
        );
    }
}

mod system_prompt {
    use super::*;

    #[test]
    fn replay_appends_content_replaces_sections_and_null_deletes() {
        let messages = vec![
            system(
                "You are Pi.",
                Some(json!({"rules": "RULE v1", "scratch": "SCRATCH"})),
                10,
            ),
            user_literal(&["hi"]),
            system("", Some(json!({"rules": "RULE v2", "scratch": null})), 20),
            system("Prefer small diffs.", None, 30),
        ];
        let before = messages.clone();
        let current = current_system_message(&messages).expect("有 system message 时必须返回 Some");
        assert_eq!(
            current.sections,
            json!({"rules": "RULE v2"}).as_object().cloned(),
            "sections 按名字覆盖，null 删除该段落"
        );
        assert_eq!(
            current.timestamp, 10,
            "时间戳取第一条 system message 的时间戳"
        );
        assert_eq!(
            to_json(&AgentMessage::System(current)),
            json!({"role": "system", "content": "You are Pi.\n\nPrefer small diffs.",
                   "sections": {"rules": "RULE v2"}, "timestamp": 10}),
            "重放结果：非空 content 依次追加（空行连接），sections 覆盖或删除，时间戳取第一条"
        );
        assert_eq!(
            current_system_prompt(&messages).as_deref(),
            Some("You are Pi.\n\nPrefer small diffs.\n\nRULE v2"),
            "prompt 是所有 system message 重放后的文本"
        );
        assert_eq!(messages, before, "重放不能改写任何 system message");
    }

    #[test]
    fn replay_appends_only_non_empty_content() {
        let appended = current_system_message(&[
            system("A", None, 1),
            system("B", None, 2),
            system("C", None, 3),
        ])
        .expect("有 system message 时必须返回 Some");
        assert_eq!(
            appended.content, "A\n\nB\n\nC",
            "非空 content 依次追加，以空行连接，不是覆盖"
        );
        let skipped = current_system_message(&[
            system("A", None, 1),
            system("", Some(json!({"s": "S"})), 2),
            system("B", None, 3),
        ])
        .expect("有 system message 时必须返回 Some");
        assert_eq!(
            skipped.content, "A\n\nB",
            "空 content 不追加，不会留下多余的空行"
        );
    }

    #[test]
    fn replay_edge_cases() {
        let base = system_literal("You are Pi.", Some(json!({"rules": "R"})), 10);
        assert_eq!(
            current_system_message(&[AgentMessage::System(base.clone())]),
            Some(base.clone()),
            "只有一条 system message 时，重放结果就是它本身"
        );
        assert_eq!(
            current_system_message(&[user_literal(&["x"])]),
            None,
            "没有 system message 时返回 None"
        );
        assert_eq!(
            current_system_prompt(&[user_literal(&["x"])]),
            None,
            "没有 system message 时 prompt 是 None，不是空串"
        );
        assert_eq!(
            current_system_prompt(&[]),
            None,
            "没有 system message 时 prompt 是 None，不是空串"
        );
        let plain = current_system_message(&[system("Base", None, 5)])
            .expect("有 system message 时必须返回 Some");
        assert_eq!(
            plain.sections, None,
            "没有任何段落时不输出空 sections（段落全部删除后不保留空 sections）"
        );
        let cleared = current_system_message(&[
            AgentMessage::System(base),
            system("", Some(json!({"rules": null})), 20),
        ])
        .expect("有 system message 时必须返回 Some");
        assert_eq!(cleared.sections, None, "段落全部删除后不保留空 sections");
        assert_eq!(
            to_json(&AgentMessage::System(cleared)),
            json!({"role": "system", "content": "You are Pi.", "timestamp": 10}),
            "段落全部删除后不保留空 sections，wire JSON 里没有 sections 字段"
        );
        let ordered = current_system_prompt(&[
            system("", Some(json!({"b": "B", "a": "A"})), 1),
            system("", Some(json!({"b": "B2"})), 2),
        ]);
        assert_eq!(
            ordered.as_deref(),
            Some("B2\n\nA"),
            "段落按首次出现的顺序输出，覆盖不改变位置"
        );
    }

    #[test]
    fn deleting_a_section_keeps_the_order_of_the_rest() {
        let deleted = current_system_prompt(&[
            system("", Some(json!({"a": "A", "b": "B", "c": "C"})), 1),
            system("", Some(json!({"a": null})), 2),
        ]);
        assert_eq!(
            deleted.as_deref(),
            Some("B\n\nC"),
            "删除段落不能打乱其余段落的顺序"
        );
        let restored = current_system_prompt(&[
            system("Base", Some(json!({"a": "A", "b": "B"})), 1),
            system("", Some(json!({"a": null})), 2),
            system("", Some(json!({"a": "A2"})), 3),
        ]);
        assert_eq!(
            restored.as_deref(),
            Some("Base\n\nB\n\nA2"),
            "删除后重新出现的段落算新段落，排在末尾"
        );
    }

    #[test]
    fn system_text_joins_content_then_sections_and_skips_empty_parts() {
        let both = system_literal("Base", Some(json!({"s": "S", "t": "T"})), 1);
        assert_eq!(
            system_message_text(&both),
            "Base\n\nS\n\nT",
            "content 在前，各段落随后，以空行连接"
        );
        let sectioned = system_literal(
            "",
            Some(json!({"first": "A", "empty": "", "removed": null, "last": "B"})),
            1,
        );
        assert_eq!(
            system_message_text(&sectioned),
            "A\n\nB",
            "空 content、空段落和 null 段落都不进入 prompt 文本"
        );
        assert_eq!(
            system_message_text(&system_literal("only", None, 1)),
            "only",
            "没有段落时 prompt 文本就是 content"
        );
        assert_eq!(
            text_of(&AgentMessage::System(both)),
            "Base\n\nS\n\nT",
            "system message 的文本投影就是它的 prompt 文本"
        );
    }
}
