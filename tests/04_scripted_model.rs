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
            assert_eq!(partial.content, vec![], "start 的 partial 必须是空内容");
            assert_eq!(
                partial.stop_reason,
                StopReason::Stop,
                "流式 partial 的 stopReason 先是 stop，回合自己的原因只在终态里出现"
            );

            let ModelEvent::TextDelta {
                content_index,
                delta,
                partial,
            } = &events[1]
            else {
                unreachable!()
            };
            assert_eq!(*content_index, 0, "第一个块的 contentIndex 是 0");
            assert_eq!(delta, "先看", "text_delta 的 delta 是这个文本块的文字");
            assert_eq!(
                partial.content,
                vec![AssistantContent::Text(text("先看"))],
                "text_delta 的 partial 只含到这个块为止的内容"
            );

            let ModelEvent::ToolcallDelta {
                content_index,
                delta,
                partial,
            } = &events[2]
            else {
                unreachable!()
            };
            let raw = r#"{"path":"README.md"}"#;
            assert_eq!(*content_index, 1, "第二个块的 contentIndex 是 1");
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
            assert_eq!(
                *content_index, 1,
                "toolcall_end 与它的 delta 用同一个 contentIndex"
            );
            assert_eq!(
                tool_call,
                &read_call(),
                "toolcall_end 交出脚本里的 canonical 调用"
            );
            assert_eq!(
                partial.content, turn.content,
                "toolcall_end 的 partial 里调用已经完整：arguments 已解析，没有多出的原始文本"
            );

            let ModelEvent::Done { reason, message } = &events[4] else {
                unreachable!()
            };
            assert_eq!(
                *reason,
                StopReason::ToolUse,
                "done 的 reason 是脚本回合自己的 stopReason"
            );
            assert_eq!(message, &turn, "done 必须交出脚本回合本身");
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
            assert_eq!(requests.len(), 1, "每次 stream() 都追加一条请求记录");
            assert_eq!(
                requests[0].messages.len(),
                1,
                "记录的是调用当时的副本，调用方之后的修改不能影响它"
            );
            assert_eq!(
                text_of(&requests[0].messages[0]),
                "第一问",
                "记录的请求就是调用时传进来的 context"
            );

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
            assert_eq!(
                message.stop_reason,
                StopReason::Stop,
                "ScriptedTurn::text 的回合以 stop 结束"
            );
            let requests = model.requests();
            assert_eq!(requests.len(), 2, "每次 stream() 都追加一条请求记录");
            assert_eq!(
                requests[0].messages.len(),
                1,
                "第二次调用不能改写第一次的请求记录"
            );
            assert_eq!(
                requests[1],
                AgentContext::default(),
                "第二条记录是第二次调用的 context"
            );
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
                ["start", "toolcall_delta", "toolcall_end", "done"],
                "没有文本时事件序列从 toolcall_delta 开始"
            );
            let ModelEvent::ToolcallDelta {
                content_index,
                delta,
                ..
            } = &events[1]
            else {
                unreachable!()
            };
            assert_eq!(*content_index, 0, "唯一的块 contentIndex 是 0");
            assert_eq!(delta, raw, "脚本自带 rawArguments 时 delta 必须原样使用它");
            let ModelEvent::ToolcallEnd { tool_call, .. } = &events[2] else {
                unreachable!()
            };
            assert_eq!(
                tool_call, &call,
                "toolcall_end 交出脚本里的调用，rawArguments 原样保留"
            );
            assert_eq!(
                stream.result().await.stop_reason,
                StopReason::ToolUse,
                "ScriptedTurn::tool_calls 的回合以 toolUse 结束"
            );
        })
        .await;
    }

    // Kills: ending a message whose own stopReason is `error` with `done`, and letting the
    // streaming partial carry the error before it happened.
    #[tokio::test]
    async fn message_with_error_stop_reason_ends_in_error() {
        within(async {
            let mut turn = assistant_message(
                vec![AssistantContent::Text(text("半截"))],
                StopReason::Error,
            );
            turn.error_message = Some("overloaded".into());
            let model = ScriptedModel::new(vec![ScriptedTurn::message(turn.clone())]);
            let stream = model.stream(&context("x"), StreamOptions::default());
            let events = collect(&stream).await;
            assert_eq!(
                kinds(&events),
                ["start", "text_delta", "error"],
                "stopReason 为 error 的消息以 error 终态结束，不是 done"
            );
            for event in &events[..2] {
                let (ModelEvent::Start { partial } | ModelEvent::TextDelta { partial, .. }) = event
                else {
                    unreachable!()
                };
                assert_eq!(
                    (partial.stop_reason, partial.error_message.as_deref()),
                    (StopReason::Stop, None),
                    "错误发生之前流出的 partial 还不带错误：stopReason 是 stop，没有 errorMessage"
                );
            }
            let ModelEvent::Error { reason, error } = &events[2] else {
                unreachable!()
            };
            assert_eq!(
                *reason,
                StopReason::Error,
                "error 终态的 reason 是消息自己的 stopReason"
            );
            assert_eq!(error, &turn, "error 终态交出脚本里的消息本身");
            assert_eq!(stream.result().await, turn, "result() 必须等于脚本回合");
        })
        .await;
    }
}

mod terminals {
    use super::*;

    fn cancelled_options() -> StreamOptions {
        let token = tokio_util::sync::CancellationToken::new();
        token.cancel();
        StreamOptions {
            cancel: Some(token),
        }
    }

    // Kills: turning a failure turn into `done`, dropping its partial text / diagnostic,
    // letting the streaming partial already carry the error, or reporting `aborted` as `error`.
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
                kinds(&events).last().copied(),
                Some("error"),
                "失败回合以 error 终态结束，不是 done"
            );
            assert_eq!(
                kinds(&events),
                ["start", "text_delta", "error"],
                "错误回合也先播放 partial，再给出 error 终态"
            );
            for event in &events[..2] {
                let (ModelEvent::Start { partial } | ModelEvent::TextDelta { partial, .. }) = event
                else {
                    unreachable!()
                };
                assert_eq!(
                    (partial.stop_reason, partial.error_message.as_deref()),
                    (StopReason::Stop, None),
                    "失败之前流出的 partial 还不带错误：stopReason 是 stop，没有 errorMessage"
                );
            }
            let ModelEvent::TextDelta { delta, partial, .. } = &events[1] else {
                unreachable!()
            };
            assert_eq!(delta, "正在", "失败前已经流出的文本作为 text_delta 播放");
            assert_eq!(
                partial.content,
                vec![AssistantContent::Text(text("正在"))],
                "失败前的 partial 含已经流出的文本"
            );
            let ModelEvent::Error { reason, error } = &events[2] else {
                unreachable!()
            };
            assert_eq!(*reason, StopReason::Error, "error 回合的终态原因是 error");
            let result = stream.result().await;
            assert_eq!(&result, error, "error 终态与 result() 是同一条消息");
            assert_eq!(
                result.error_message.as_deref(),
                Some("rate limited"),
                "失败回合的 errorMessage 必须保留脚本里的诊断"
            );
            assert_eq!(
                result.stop_reason,
                StopReason::Error,
                "失败回合的最终消息 stopReason 是 error"
            );
            assert_eq!(
                text_of(&AgentMessage::Assistant(result.clone())),
                "正在",
                "失败回合的最终消息保留已经流出的文本"
            );

            let stream = model.stream(&context("y"), StreamOptions::default());
            let events = collect(&stream).await;
            assert_eq!(
                kinds(&events),
                ["start", "error"],
                "没有 partial 文本的失败回合：start 之后直接 error"
            );
            let ModelEvent::Error { reason, .. } = &events[1] else {
                unreachable!()
            };
            assert_eq!(
                *reason,
                StopReason::Aborted,
                "aborted 回合的终态原因是 aborted"
            );
            let result = stream.result().await;
            assert_eq!(
                result.stop_reason,
                StopReason::Aborted,
                "aborted 回合的最终消息 stopReason 是 aborted"
            );
            assert_eq!(
                result.error_message.as_deref(),
                Some("用户取消"),
                "失败回合的 errorMessage 必须保留脚本里的诊断"
            );
        })
        .await;
    }

    // Kills: panicking (or returning nothing) when the script runs out, pushing `start` first,
    // ending the stream before the terminal event, and not recording the refused request.
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
            let ModelEvent::Error { reason, error } = &events[0] else {
                unreachable!()
            };
            assert_eq!(*reason, StopReason::Error, "脚本耗尽的终态原因是 error");
            let result = stream.result().await;
            assert_eq!(&result, error, "error 终态与 result() 是同一条消息");
            assert_eq!(
                result.stop_reason,
                StopReason::Error,
                "脚本耗尽的最终消息 stopReason 是 error"
            );
            assert_eq!(
                result.error_message.as_deref(),
                Some("ScriptedModel 没有更多响应"),
                "脚本耗尽的 errorMessage 是固定文本"
            );
            assert_eq!(result.content, vec![], "脚本耗尽的最终消息没有内容");
            let requests = model.requests();
            assert_eq!(requests.len(), 1, "被拒绝的调用也要记录请求");
            assert_eq!(
                text_of(&requests[0].messages[0]),
                "还有吗",
                "被拒绝的调用记录的是它自己的 context"
            );
        })
        .await;
    }

    // Kills: replaying the last turn (or wrapping around) once the script is used up.
    #[tokio::test]
    async fn script_runs_out_after_its_last_turn() {
        within(async {
            let model = ScriptedModel::new(vec![ScriptedTurn::text("唯一的回合")]);
            model
                .stream(&context("第一问"), StreamOptions::default())
                .result()
                .await;
            let stream = model.stream(&context("第二问"), StreamOptions::default());
            let events = collect(&stream).await;
            assert_eq!(
                kinds(&events),
                ["error"],
                "脚本耗尽后的调用必须以 error 终态结束，不能重播最后一个回合"
            );
            assert_eq!(
                stream.result().await.error_message.as_deref(),
                Some("ScriptedModel 没有更多响应"),
                "脚本耗尽后的调用必须以 error 终态结束，不能重播最后一个回合"
            );
            assert_eq!(
                model.requests().len(),
                2,
                "被拒绝的调用也要记录请求：两次调用两条记录"
            );
        })
        .await;
    }

    // Kills: ignoring the cancellation token, reporting it as `error`, and not consuming the turn
    // (or not recording the request) of a refused call.
    #[tokio::test]
    async fn pre_cancelled_token_gives_aborted_and_consumes_the_turn() {
        within(async {
            let model = ScriptedModel::new(vec![ScriptedTurn::text("不该播放")]);
            let stream = model.stream(&context("x"), cancelled_options());
            let events = collect(&stream).await;
            assert_eq!(kinds(&events), ["error"], "预取消的调用不能开始播放");
            let ModelEvent::Error { reason, error } = &events[0] else {
                unreachable!()
            };
            assert_eq!(*reason, StopReason::Aborted, "预取消的终态原因是 aborted");
            assert_eq!(
                error.stop_reason,
                StopReason::Aborted,
                "预取消的终态原因是 aborted"
            );
            assert_eq!(
                error.error_message.as_deref(),
                Some("Request was aborted"),
                "预取消的 errorMessage 是固定文本"
            );
            assert_eq!(error.content, vec![], "预取消的最终消息没有内容");
            assert_eq!(
                &stream.result().await,
                error,
                "error 终态与 result() 是同一条消息"
            );

            let next = model.stream(&context("y"), StreamOptions::default());
            assert_eq!(
                next.result().await.error_message.as_deref(),
                Some("ScriptedModel 没有更多响应"),
                "被取消的调用同样消耗一个回合：第 N 次调用总是对应第 N 个回合"
            );
            let seen: Vec<String> = model
                .requests()
                .iter()
                .map(|request| text_of(&request.messages[0]))
                .collect();
            assert_eq!(seen, ["x", "y"], "被取消的调用也要记录请求");
        })
        .await;
    }

    // Kills: checking for an exhausted script before checking the token.
    #[tokio::test]
    async fn cancellation_wins_over_an_exhausted_script() {
        within(async {
            let model = ScriptedModel::new(Vec::new());
            let stream = model.stream(&context("x"), cancelled_options());
            let events = collect(&stream).await;
            assert_eq!(kinds(&events), ["error"], "预取消的调用不能开始播放");
            let result = stream.result().await;
            assert_eq!(
                (result.stop_reason, result.error_message.as_deref()),
                (StopReason::Aborted, Some("Request was aborted")),
                "取消优先于脚本耗尽：先检查令牌，再看还有没有回合"
            );
        })
        .await;
    }
}
