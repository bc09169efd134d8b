//! Chapter 04 acceptance tests: ScriptedModel plays scripts through the real event protocol.

use std::time::Duration;

use pi_course::scripted_model::{tool_call, ScriptedModel, ScriptedTurn};
use pi_course::types::{
    assistant_message, text, text_of, user_message, AgentContext, AgentMessage, AssistantContent,
    AssistantMessage, AssistantMessageEventStream, Model, ModelEvent, StopReason, StreamOptions,
    ToolCall,
};
use serde_json::json;

async fn collect(stream: &AssistantMessageEventStream) -> Vec<ModelEvent> {
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event);
    }
    events
}

fn kinds(events: &[ModelEvent]) -> Vec<&'static str> {
    events
        .iter()
        .map(|event| match event {
            ModelEvent::Start { .. } => "start",
            ModelEvent::TextDelta { .. } => "text_delta",
            ModelEvent::ToolcallDelta { .. } => "toolcall_delta",
            ModelEvent::ToolcallEnd { .. } => "toolcall_end",
            ModelEvent::Done { .. } => "done",
            ModelEvent::Error { .. } => "error",
        })
        .collect()
}

fn context(value: &str) -> AgentContext {
    let mut context = AgentContext::default();
    context.messages.push(user_message(value));
    context
}

async fn within<F: std::future::Future>(body: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(1), body)
        .await
        .expect("1 秒内没有等到终态事件：stream 是否忘了 push 终态或 end()？")
}

mod replay {
    use super::*;

    fn read_call() -> ToolCall {
        tool_call("c1", "read", json!({"path": "README.md"}))
    }

    fn first_turn() -> AssistantMessage {
        assistant_message(
            vec![
                AssistantContent::Text(text("先看")),
                AssistantContent::ToolCall(read_call()),
            ],
            StopReason::ToolUse,
        )
    }

    // Kills: emitting only `done`, giving every event the final partial, using the provider
    // arguments in the streaming partial, or numbering blocks from 1.
    #[tokio::test]
    async fn script_becomes_real_event_protocol() {
        within(async {
            let turn = first_turn();
            let model = ScriptedModel::new(vec![ScriptedTurn::from(turn.clone())]);
            let stream = model.stream(&context("读 README"), StreamOptions::default());
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
                "事件序列应与真实 adapter 相同"
            );

            let ModelEvent::Start { partial } = &events[0] else {
                unreachable!()
            };
            assert!(partial.content.is_empty(), "start 的 partial 必须是空内容");
            assert_eq!(partial.stop_reason, StopReason::Stop);

            let ModelEvent::TextDelta {
                content_index,
                delta,
                partial,
            } = &events[1]
            else {
                unreachable!()
            };
            assert_eq!(*content_index, 0, "第一个块的 contentIndex 是 0");
            assert_eq!(delta, "先看");
            assert_eq!(partial.content, vec![AssistantContent::Text(text("先看"))]);

            let ModelEvent::ToolcallDelta {
                content_index,
                delta,
                partial,
            } = &events[2]
            else {
                unreachable!()
            };
            let raw = r#"{"path":"README.md"}"#;
            assert_eq!(*content_index, 1);
            assert_eq!(delta, raw, "toolcall_delta 的 delta 是参数的原始文本");
            assert_eq!(
                partial.content,
                vec![
                    AssistantContent::Text(text("先看")),
                    AssistantContent::ToolCall(ToolCall {
                        id: "c1".into(),
                        name: "read".into(),
                        arguments: json!({}),
                        raw_arguments: Some(raw.into()),
                    }),
                ],
                "流式阶段的 tool call 只有原始文本，arguments 还是 {{}}"
            );

            let ModelEvent::ToolcallEnd {
                content_index,
                tool_call,
                partial,
            } = &events[3]
            else {
                unreachable!()
            };
            assert_eq!(*content_index, 1);
            assert_eq!(
                tool_call,
                &read_call(),
                "toolcall_end 交出脚本里的 canonical 调用"
            );
            assert_eq!(partial.content, turn.content);

            let ModelEvent::Done { reason, message } = &events[4] else {
                unreachable!()
            };
            assert_eq!(*reason, StopReason::ToolUse);
            assert_eq!(message, &turn);
            assert_eq!(stream.result().await, turn, "result() 必须等于脚本回合");
        })
        .await;
    }

    // Kills: a cursor that never advances (second call replays the first turn), and recording
    // nothing or only the first request.
    #[tokio::test]
    async fn turns_play_in_order_and_requests_are_copies() {
        within(async {
            let model = ScriptedModel::new(vec![
                ScriptedTurn::from(first_turn()),
                ScriptedTurn::text("第二轮"),
            ]);
            let mut ctx = context("第一问");
            let first = model.stream(&ctx, StreamOptions::default());
            ctx.messages.push(user_message("调用之后才加的消息"));
            collect(&first).await;

            let requests = model.requests();
            assert_eq!(requests.len(), 1, "每次 stream() 记录一个请求");
            assert_eq!(
                requests[0].messages.len(),
                1,
                "记录的是调用当时的副本，调用方之后的修改不能影响它"
            );
            assert_eq!(text_of(&requests[0].messages[0]), "第一问");

            let second = model.stream(&AgentContext::default(), StreamOptions::default());
            let events = collect(&second).await;
            assert_eq!(
                kinds(&events),
                ["start", "text_delta", "done"],
                "第二次调用必须播放第二个回合"
            );
            let message = second.result().await;
            assert_eq!(
                text_of(&AgentMessage::Assistant(message.clone())),
                "第二轮",
                "第二次调用必须播放第二个回合"
            );
            assert_eq!(message.stop_reason, StopReason::Stop);
            assert_eq!(model.requests().len(), 2);
            assert!(model.requests()[1].messages.is_empty());
        })
        .await;
    }

    // Kills: re-serialising arguments instead of keeping the script's raw provider text.
    #[tokio::test]
    async fn raw_arguments_win_in_the_delta() {
        within(async {
            let raw = "{ \"path\": \"a.txt\" }";
            let call = ToolCall {
                raw_arguments: Some(raw.into()),
                ..tool_call("c9", "read", json!({"path": "a.txt"}))
            };
            let model = ScriptedModel::new(vec![ScriptedTurn::tool_calls(vec![call.clone()])]);
            let stream = model.stream(&context("x"), StreamOptions::default());
            let events = collect(&stream).await;
            assert_eq!(
                kinds(&events),
                ["start", "toolcall_delta", "toolcall_end", "done"]
            );
            let ModelEvent::ToolcallDelta {
                content_index,
                delta,
                ..
            } = &events[1]
            else {
                unreachable!()
            };
            assert_eq!(*content_index, 0);
            assert_eq!(delta, raw, "脚本自带 rawArguments 时 delta 必须原样使用它");
            let ModelEvent::ToolcallEnd { tool_call, .. } = &events[2] else {
                unreachable!()
            };
            assert_eq!(tool_call, &call);
            assert_eq!(stream.result().await.stop_reason, StopReason::ToolUse);
        })
        .await;
    }
}

mod terminals {
    use super::*;

    // Kills: turning a failure turn into `done`, or dropping its partial text / diagnostic.
    #[tokio::test]
    async fn failure_turn_keeps_partial_and_diagnostic() {
        within(async {
            let model = ScriptedModel::new(vec![
                ScriptedTurn::error("rate limited").with_partial_text("正在"),
                ScriptedTurn::aborted("用户取消"),
            ]);
            let stream = model.stream(&context("x"), StreamOptions::default());
            let events = collect(&stream).await;
            assert_eq!(
                kinds(&events),
                ["start", "text_delta", "error"],
                "错误回合也先播放 partial"
            );
            let ModelEvent::Error { reason, error } = &events[2] else {
                unreachable!()
            };
            assert_eq!(*reason, StopReason::Error);
            let result = stream.result().await;
            assert_eq!(&result, error, "error 终态与 result() 是同一条消息");
            assert_eq!(result.stop_reason, StopReason::Error);
            assert_eq!(text_of(&AgentMessage::Assistant(result.clone())), "正在");
            assert_eq!(result.error_message.as_deref(), Some("rate limited"));

            let stream = model.stream(&context("y"), StreamOptions::default());
            let events = collect(&stream).await;
            assert_eq!(kinds(&events), ["start", "error"]);
            let ModelEvent::Error { reason, .. } = &events[1] else {
                unreachable!()
            };
            assert_eq!(
                *reason,
                StopReason::Aborted,
                "aborted 回合的终态原因是 aborted"
            );
            assert_eq!(
                stream.result().await.error_message.as_deref(),
                Some("用户取消")
            );
        })
        .await;
    }

    // Kills: panicking (or returning nothing) when the script runs out.
    #[tokio::test]
    async fn exhausted_script_is_an_error_terminal() {
        within(async {
            let model = ScriptedModel::new(Vec::new());
            let stream = model.stream(&context("还有吗"), StreamOptions::default());
            let events = collect(&stream).await;
            assert_eq!(
                kinds(&events),
                ["error"],
                "脚本耗尽只有一个 error 终态，没有 start"
            );
            let result = stream.result().await;
            assert_eq!(result.stop_reason, StopReason::Error);
            assert_eq!(
                result.error_message.as_deref(),
                Some("ScriptedModel 没有更多响应")
            );
            assert!(result.content.is_empty());
            assert_eq!(model.requests().len(), 1, "被拒绝的调用也要记录请求");
        })
        .await;
    }

    // Kills: ignoring the cancellation token, and not consuming the turn of a refused call.
    #[tokio::test]
    async fn pre_cancelled_token_gives_aborted_and_consumes_the_turn() {
        within(async {
            let model = ScriptedModel::new(vec![ScriptedTurn::text("不该播放")]);
            let token = tokio_util::sync::CancellationToken::new();
            token.cancel();
            let options = StreamOptions {
                cancel: Some(token),
            };
            let stream = model.stream(&context("x"), options);
            let events = collect(&stream).await;
            assert_eq!(kinds(&events), ["error"], "预取消的调用不能开始播放");
            let ModelEvent::Error { reason, error } = &events[0] else {
                unreachable!()
            };
            assert_eq!(*reason, StopReason::Aborted);
            assert_eq!(error.stop_reason, StopReason::Aborted);
            assert_eq!(error.error_message.as_deref(), Some("Request was aborted"));

            let next = model.stream(&context("y"), StreamOptions::default());
            assert_eq!(
                next.result().await.error_message.as_deref(),
                Some("ScriptedModel 没有更多响应"),
                "被取消的调用同样消耗一个回合：第 N 次调用总是对应第 N 个回合"
            );
        })
        .await;
    }
}
