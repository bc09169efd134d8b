//! Chapter 03 acceptance tests: the message IR, the model event stream, system replay.

use std::time::Duration;

use pi_course::types::*;
use serde_json::json;

fn system(content: &str, sections: Option<serde_json::Value>, timestamp: u64) -> AgentMessage {
    AgentMessage::System(SystemMessage {
        content: content.into(),
        sections: sections.map(|value| value.as_object().expect("object").clone()),
        timestamp,
    })
}

fn assistant_literal(content: Vec<AssistantContent>, stop_reason: StopReason) -> AssistantMessage {
    AssistantMessage {
        content,
        provider: "test".into(),
        model: "test-v1".into(),
        usage: Usage::EMPTY,
        stop_reason,
        error_message: None,
        timestamp: 7,
    }
}

fn call(id: &str, name: &str) -> AssistantContent {
    AssistantContent::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: json!({"path": "a.txt"}),
        raw_arguments: None,
    })
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
        assert_eq!(
            text_of(&message),
            "先读取\n再回答",
            "只拼接 text 块，工具调用不进入投影"
        );
        assert_eq!(message, before, "投影不能修改 canonical content");
        assert_eq!(text_of(&user_message("你好")), "你好");
    }

    #[test]
    fn helpers_build_pi_wire_json() {
        let user = user_message("read a.txt");
        let AgentMessage::User(inner) = &user else {
            panic!("user_message 必须返回 user 消息")
        };
        assert!(
            inner.timestamp > 1_600_000_000_000,
            "timestamp 是 Unix 毫秒"
        );
        let mut value = serde_json::to_value(&user).unwrap();
        value.as_object_mut().unwrap().remove("timestamp");
        assert_eq!(
            value,
            json!({"role": "user", "content": [{"type": "text", "text": "read a.txt"}]})
        );

        let mut assistant = assistant_message(vec![call("c1", "read")], StopReason::ToolUse);
        assistant.timestamp = 1;
        assert_eq!(
            serde_json::to_value(AgentMessage::Assistant(assistant)).unwrap(),
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
        partial_fields.as_object_mut().unwrap().remove("role");
        wire_event["partial"] = partial_fields;
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            wire_event,
            "模型事件的 type 是 snake_case，字段是 camelCase"
        );
        assert_eq!(
            serde_json::from_value::<ModelEvent>(wire_event).unwrap(),
            event
        );

        let reasons = [
            StopReason::Stop,
            StopReason::Length,
            StopReason::ToolUse,
            StopReason::Error,
            StopReason::Aborted,
        ]
        .map(|reason| serde_json::to_value(reason).unwrap());
        assert_eq!(
            reasons,
            ["stop", "length", "toolUse", "error", "aborted"].map(|name| json!(name))
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
        assert_eq!(text_of(&failed), "读取中");
        let AgentMessage::Assistant(failed) = failed else {
            panic!("role 为 assistant 的 JSON 必须读成 Assistant")
        };
        assert_eq!(failed.error_message.as_deref(), Some("socket reset"));
        assert_eq!(
            failed.content[1],
            AssistantContent::ToolCall(ToolCall {
                id: "c9".into(),
                name: "read".into(),
                arguments: json!({"path": "b.rs"}),
                raw_arguments: Some("{\"path\":\"b.rs\"}".into()),
            })
        );
    }
}

mod terminal {
    use super::*;

    #[tokio::test]
    async fn error_is_a_protocol_terminal_and_result_is_that_message() {
        tokio::time::timeout(Duration::from_secs(1), async {
            let stream = assistant_message_event_stream();
            let mut failed = assistant_literal(
                vec![AssistantContent::Text(text("partial"))],
                StopReason::Error,
            );
            failed.error_message = Some("socket reset".into());
            stream.push(ModelEvent::Error {
                reason: StopReason::Error,
                error: failed.clone(),
            });
            let mut kinds = Vec::new();
            // No end(): the error event alone must finish the stream.
            while let Some(event) = stream.next().await {
                kinds.push(serde_json::to_value(&event).unwrap()["type"].clone());
            }
            assert_eq!(kinds, [json!("error")]);
            let result = stream.result().await;
            assert_eq!(result, failed);
            assert_eq!(result.error_message.as_deref(), Some("socket reset"));
        })
        .await
        .expect("error 事件必须是终态：1 秒内流没有结束");
    }

    #[tokio::test]
    async fn only_done_or_error_finish_the_stream_and_later_events_are_dropped() {
        tokio::time::timeout(Duration::from_secs(1), async {
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
                    AssistantContent::Text(text("ok")),
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
            stream.push(ModelEvent::ToolcallEnd {
                content_index: 1,
                tool_call,
                partial: partial.clone(),
            });
            stream.push(ModelEvent::Done {
                reason: StopReason::ToolUse,
                message: finished.clone(),
            });
            stream.push(ModelEvent::Error {
                reason: StopReason::Error,
                error: partial,
            });
            let mut kinds = Vec::new();
            while let Some(event) = stream.next().await {
                kinds.push(serde_json::to_value(&event).unwrap()["type"].clone());
            }
            assert_eq!(
                kinds,
                [
                    json!("start"),
                    json!("text_delta"),
                    json!("toolcall_end"),
                    json!("done")
                ],
                "只有 done / error 是终态；done 之后的事件必须被丢弃"
            );
            assert_eq!(
                stream.result().await,
                finished,
                "done 的 result 是它携带的 message"
            );
        })
        .await
        .expect("done 事件必须是终态：1 秒内流没有结束");
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
            user_like("hi"),
            system("", Some(json!({"rules": "RULE v2", "scratch": null})), 20),
            system("Prefer small diffs.", None, 30),
        ];
        let before = messages.clone();
        let current = current_system_message(&messages).expect("有 system message");
        assert_eq!(
            serde_json::to_value(AgentMessage::System(current)).unwrap(),
            json!({"role": "system", "content": "You are Pi.\n\nPrefer small diffs.",
                   "sections": {"rules": "RULE v2"}, "timestamp": 10})
        );
        assert_eq!(
            current_system_prompt(&messages).as_deref(),
            Some("You are Pi.\n\nPrefer small diffs.\n\nRULE v2")
        );
        assert_eq!(messages, before, "重放不能改写任何 system message");
    }

    #[test]
    fn replay_edge_cases() {
        let base = system("You are Pi.", Some(json!({"rules": "R"})), 10);
        let AgentMessage::System(base_inner) = &base else {
            unreachable!()
        };
        assert_eq!(
            current_system_message(std::slice::from_ref(&base)).as_ref(),
            Some(base_inner)
        );
        assert_eq!(current_system_message(&[user_like("x")]), None);
        assert_eq!(current_system_prompt(&[]), None);
        let cleared =
            current_system_message(&[base, system("", Some(json!({"rules": null})), 20)]).unwrap();
        assert_eq!(cleared.sections, None, "段落全部删除后不保留空 sections");
        assert_eq!(
            serde_json::to_value(AgentMessage::System(cleared)).unwrap(),
            json!({"role": "system", "content": "You are Pi.", "timestamp": 10})
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
    fn system_text_joins_content_then_sections_and_skips_empty_parts() {
        let AgentMessage::System(sectioned) = system(
            "",
            Some(json!({"first": "A", "empty": "", "removed": null, "last": "B"})),
            1,
        ) else {
            unreachable!()
        };
        assert_eq!(
            system_message_text(&sectioned),
            "A\n\nB",
            "空 content、空段落和 null 段落都不进入 prompt 文本"
        );
        let AgentMessage::System(plain) = system("only", None, 1) else {
            unreachable!()
        };
        assert_eq!(system_message_text(&plain), "only");
        assert_eq!(
            text_of(&AgentMessage::System(sectioned)),
            "A\n\nB",
            "system message 的文本投影就是它的 prompt 文本"
        );
    }

    fn user_like(value: &str) -> AgentMessage {
        AgentMessage::User(UserMessage {
            content: vec![TextContent { text: value.into() }],
            timestamp: 1,
        })
    }
}
