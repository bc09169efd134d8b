//! Instructor-only tests for chapter 04: other ids, shapes and orders than the acceptance tests.

use std::time::Duration;

use pi_course::scripted_model::{tool_call, ScriptedModel, ScriptedTurn};
use pi_course::types::{
    text_of, user_message, AgentContext, AgentMessage, AssistantMessageEventStream, Model,
    ModelEvent, StopReason, StreamOptions,
};
use serde_json::json;

async fn collect(stream: &AssistantMessageEventStream) -> Vec<ModelEvent> {
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event);
    }
    events
}

async fn within<F: std::future::Future>(body: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(1), body)
        .await
        .expect("1 秒内没有等到终态事件")
}

fn context(value: &str) -> AgentContext {
    let mut context = AgentContext::default();
    context.messages.push(user_message(value));
    context
}

#[tokio::test]
async fn three_turns_with_two_calls_each_get_their_own_index() {
    within(async {
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![
                tool_call("x-1", "grep", json!({"pattern": "fn", "paths": ["a", "b"]})),
                tool_call("x-2", "ls", json!({})),
            ]),
            ScriptedTurn::text_and_tool_calls(
                "然后",
                vec![tool_call("x-3", "cat", json!({"n": 1}))],
            ),
            ScriptedTurn::text("结束"),
        ]);
        let first = collect(&model.stream(&context("q1"), StreamOptions::default())).await;
        let indexes: Vec<usize> = first
            .iter()
            .filter_map(|event| match event {
                ModelEvent::ToolcallEnd { content_index, .. } => Some(*content_index),
                _ => None,
            })
            .collect();
        assert_eq!(indexes, [0, 1], "两个调用块各有自己的 contentIndex");
        let ModelEvent::ToolcallDelta { delta, .. } = &first[1] else {
            panic!("第二个事件应是第一个调用的 toolcall_delta：{first:?}")
        };
        assert_eq!(
            delta, r#"{"pattern":"fn","paths":["a","b"]}"#,
            "没有 rawArguments 时 delta 是 arguments 的紧凑序列化"
        );

        let second = model.stream(&context("q2"), StreamOptions::default());
        collect(&second).await;
        assert_eq!(
            second.result().await.content.len(),
            2,
            "第二个回合是一段文本加一个调用"
        );
        let third = model.stream(&context("q3"), StreamOptions::default());
        let message = third.result().await;
        assert_eq!(
            text_of(&AgentMessage::Assistant(message)),
            "结束",
            "第三次调用播放第三个回合"
        );
        let seen: Vec<String> = model
            .requests()
            .iter()
            .map(|request| text_of(&request.messages[0]))
            .collect();
        assert_eq!(seen, ["q1", "q2", "q3"], "requests 按调用顺序记录");
    })
    .await;
}

#[tokio::test]
async fn clones_share_cursor_and_requests() {
    within(async {
        let model = ScriptedModel::new(vec![ScriptedTurn::text("a"), ScriptedTurn::text("b")]);
        let clone = model.clone();
        clone
            .stream(&context("via clone"), StreamOptions::default())
            .result()
            .await;
        let second = model.stream(&context("via original"), StreamOptions::default());
        assert_eq!(
            text_of(&AgentMessage::Assistant(second.result().await)),
            "b",
            "克隆共享游标：克隆播放过第一个回合，原件接着播放第二个"
        );
        assert_eq!(model.requests().len(), 2, "克隆共享请求记录");
        assert_eq!(
            clone.requests(),
            model.requests(),
            "克隆与原件看到同一份请求记录"
        );
    })
    .await;
}

#[tokio::test]
async fn cancellation_wins_over_a_failure_turn() {
    within(async {
        let model = ScriptedModel::new(vec![ScriptedTurn::error("boom").with_partial_text("半")]);
        let token = tokio_util::sync::CancellationToken::new();
        token.cancel();
        let stream = model.stream(
            &context("x"),
            StreamOptions {
                cancel: Some(token),
            },
        );
        let events = collect(&stream).await;
        assert_eq!(events.len(), 1, "预取消的调用只有一个 error 终态");
        let result = stream.result().await;
        assert_eq!(
            result.stop_reason,
            StopReason::Aborted,
            "取消优先于失败回合"
        );
        assert_eq!(
            result.content,
            vec![],
            "预取消的调用不播放失败回合的 partial"
        );
    })
    .await;
}
