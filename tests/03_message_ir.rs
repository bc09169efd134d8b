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
    async fn done_is_terminal_and_later_events_are_dropped() {
        tokio::time::timeout(Duration::from_secs(1), async {
            let stream = assistant_message_event_stream();
            let partial = assistant_literal(vec![], StopReason::Stop);
            let finished =
                assistant_literal(vec![AssistantContent::Text(text("ok"))], StopReason::Stop);
            stream.push(ModelEvent::Start {
                partial: partial.clone(),
            });
            stream.push(ModelEvent::Done {
                reason: StopReason::Stop,
                message: finished.clone(),
            });
            stream.push(ModelEvent::Start { partial });
            let mut count = 0;
            while stream.next().await.is_some() {
                count += 1;
            }
            assert_eq!(count, 2, "done 之后的事件必须被丢弃");
            assert_eq!(stream.result().await, finished);
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

    fn user_like(value: &str) -> AgentMessage {
        AgentMessage::User(UserMessage {
            content: vec![TextContent { text: value.into() }],
            timestamp: 1,
        })
    }
}
