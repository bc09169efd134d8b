//! Chapter 07 acceptance tests: the agent loop.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pi_course::agent_loop::*;
use pi_course::scripted_model::{tool_call, ScriptedModel, ScriptedTurn};
use pi_course::tool::*;
use pi_course::types::*;
use serde_json::{json, Value};
use tokio::sync::Notify;

type Events = Arc<Mutex<Vec<LoopEvent>>>;

fn recorder() -> (Events, EventSink) {
    let events: Events = Arc::default();
    let sink: EventSink = {
        let events = Arc::clone(&events);
        Arc::new(move |event| events.lock().unwrap().push(event))
    };
    (events, sink)
}

fn value_schema() -> Schema<String> {
    Schema::new(
        Some(json!({"type": "object"})),
        |arguments| match arguments.get("value") {
            Some(Value::String(value)) => Ok(value.clone()),
            _ => Err(ValidationError("必须是 string".into())),
        },
    )
}

/// `echo` counts executions and reports one progress update.
fn echo(executions: Arc<AtomicUsize>) -> SharedTool {
    Tool::new(
        "echo",
        "Echo a value",
        value_schema(),
        move |value: String, context: ToolContext| {
            let executions = Arc::clone(&executions);
            async move {
                executions.fetch_add(1, Ordering::SeqCst);
                context
                    .progress
                    .report(vec![text(&format!("working:{}", context.call_id))]);
                Ok(ToolOutput {
                    content: vec![text(&format!("echo:{value}"))],
                    details: Some(json!({"source": "echo"})),
                    is_error: None,
                })
            }
        },
    )
    .shared()
}

fn system(content: &str, timestamp: u64) -> AgentMessage {
    AgentMessage::System(SystemMessage {
        content: content.into(),
        sections: None,
        timestamp,
    })
}

fn user(value: &str) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: vec![text(value)],
        timestamp: 1,
    })
}

fn context(messages: Vec<AgentMessage>) -> AgentContext {
    AgentContext {
        messages,
        ..AgentContext::default()
    }
}

fn roles(messages: &[AgentMessage]) -> Vec<&'static str> {
    messages
        .iter()
        .map(|message| match message {
            AgentMessage::System(_) => "system",
            AgentMessage::User(_) => "user",
            AgentMessage::Assistant(_) => "assistant",
            AgentMessage::ToolResult(_) => "toolResult",
        })
        .collect()
}

fn results(messages: &[AgentMessage]) -> Vec<&ToolResultMessage> {
    messages
        .iter()
        .filter_map(|message| match message {
            AgentMessage::ToolResult(result) => Some(result),
            _ => None,
        })
        .collect()
}

fn turn_ends(events: &Events) -> Vec<RunReason> {
    events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|event| match event {
            LoopEvent::TurnEnd(reason) => Some(*reason),
            _ => None,
        })
        .collect()
}

async fn run(
    model: &ScriptedModel,
    tools: ToolRegistry,
    input: &AgentContext,
    setup: impl FnOnce(&mut AgentLoopOptions),
) -> (AgentRunResult, Events) {
    let (events, sink) = recorder();
    let mut options = AgentLoopOptions::new(Arc::new(model.clone()), tools, input.clone());
    options.on_event = Some(sink);
    setup(&mut options);
    let result = tokio::time::timeout(Duration::from_secs(1), run_agent_loop(options))
        .await
        .expect("1 秒内循环没有结束");
    (result, events)
}

mod model_turn {
    use super::*;

    #[tokio::test]
    async fn a_plain_stop_keeps_the_input_and_sends_the_whole_context() {
        let registry = ToolRegistry::new(vec![echo(Arc::default())]).unwrap();
        let mut input = context(vec![system("You are Pi.", 1), user("hi")]);
        input.tools = vec![ToolDefinition {
            name: "stale".into(),
            description: "old".into(),
            parameters: json!({}),
        }];
        let before = input.clone();
        let model = ScriptedModel::new(vec![ScriptedTurn::text("hello")]);
        let (result, events) = run(&model, registry.clone(), &input, |_| {}).await;

        assert_eq!(input, before, "调用方的 context 不能被修改");
        assert_eq!(roles(&result.messages), ["system", "user", "assistant"]);
        assert_eq!((result.reason, result.steps), (RunReason::Stop, 1));
        let requests = model.requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(
            requests[0].messages, before.messages,
            "请求携带完整的 messages"
        );
        assert_eq!(
            requests[0].tools,
            registry.definitions(),
            "请求只带 Registry 的 definitions，不转发调用方的旧 tools"
        );
        assert_eq!(
            current_system_prompt(&requests[0].messages).as_deref(),
            Some("You are Pi.")
        );
        let forwarded = events
            .lock()
            .unwrap()
            .iter()
            .filter(|event| matches!(event, LoopEvent::Model(_)))
            .count();
        assert!(forwarded >= 2, "模型事件要原样转发");
        assert_eq!(turn_ends(&events), [RunReason::Stop], "恰好一个 TurnEnd");
    }

    #[tokio::test]
    async fn the_loop_only_appends_and_never_writes_system_messages() {
        let registry = ToolRegistry::new(vec![echo(Arc::default())]).unwrap();
        let input = context(vec![
            system("BASE", 1),
            user("first"),
            system("RULE v2", 2),
            user("second"),
        ]);
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![tool_call("e-1", "echo", json!({"value": "x"}))]),
            ScriptedTurn::text("done"),
        ]);
        let (result, _) = run(&model, registry, &input, |_| {}).await;
        assert_eq!(
            result.messages[..4],
            input.messages[..],
            "transcript 以调用方 messages 为前缀"
        );
        assert_eq!(
            roles(&result.messages[4..]),
            ["assistant", "toolResult", "assistant"]
        );
        for request in model.requests() {
            assert_eq!(request.messages[..4], input.messages[..]);
            assert_eq!(
                roles(&request.messages)
                    .iter()
                    .filter(|role| **role == "system")
                    .count(),
                2,
                "循环不写 system message"
            );
        }
    }
}

mod single_tool {
    use super::*;

    #[tokio::test]
    async fn one_call_round_trips_with_progress_and_feeds_the_next_request() {
        let executions = Arc::new(AtomicUsize::new(0));
        let registry = ToolRegistry::new(vec![echo(Arc::clone(&executions))]).unwrap();
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![tool_call("probe-1", "echo", json!({"value": "pi"}))]),
            ScriptedTurn::text("done"),
        ]);
        let (result, events) = run(&model, registry, &context(vec![user("go")]), |_| {}).await;

        assert_eq!(executions.load(Ordering::SeqCst), 1);
        assert_eq!(
            roles(&result.messages),
            ["user", "assistant", "toolResult", "assistant"]
        );
        let paired = results(&result.messages)[0];
        assert_eq!(
            (paired.tool_call_id.as_str(), paired.tool_name.as_str()),
            ("probe-1", "echo")
        );
        assert_eq!(paired.content, vec![text("echo:pi")]);
        assert_eq!(paired.details, Some(json!({"source": "echo"})));
        let requests = model.requests();
        assert_eq!(
            roles(&requests[1].messages),
            ["user", "assistant", "toolResult"],
            "工具结果回填到下一次请求"
        );

        let events = events.lock().unwrap();
        let position =
            |wanted: fn(&LoopEvent) -> bool| events.iter().position(wanted).expect("事件存在");
        let start = position(|event| matches!(event, LoopEvent::ToolStart(_)));
        let progress = position(|event| matches!(event, LoopEvent::ToolProgress { .. }));
        let end = position(|event| matches!(event, LoopEvent::ToolEnd(_)));
        assert!(
            start < progress && progress < end,
            "顺序应为 tool_start → tool_progress → tool_end"
        );
        assert_eq!(
            events[progress],
            LoopEvent::ToolProgress {
                call_id: "probe-1".into(),
                content: vec![text("working:probe-1")]
            }
        );
        assert_eq!(result.reason, RunReason::Stop);
    }
}

mod non_executing {
    use super::*;

    fn two_calls() -> Vec<AssistantContent> {
        vec![
            AssistantContent::ToolCall(tool_call("a", "echo", json!({"value": "1"}))),
            AssistantContent::ToolCall(tool_call("b", "echo", json!({"value": "2"}))),
        ]
    }

    #[tokio::test]
    async fn length_error_and_aborted_skip_every_call_with_a_paired_result() {
        for (stop_reason, reason, expected) in [
            (StopReason::Length, "length", RunReason::Length),
            (StopReason::Error, "error", RunReason::Error),
            (StopReason::Aborted, "aborted", RunReason::Aborted),
        ] {
            let executions = Arc::new(AtomicUsize::new(0));
            let registry = ToolRegistry::new(vec![echo(Arc::clone(&executions))]).unwrap();
            let model = ScriptedModel::new(vec![ScriptedTurn::message(assistant_message(
                two_calls(),
                stop_reason,
            ))]);
            let (result, events) = run(&model, registry, &context(vec![user("go")]), |_| {}).await;
            assert_eq!(
                executions.load(Ordering::SeqCst),
                0,
                "{reason} 截断的调用不能执行"
            );
            assert_eq!(result.reason, expected);
            let skipped = results(&result.messages);
            assert_eq!(
                skipped
                    .iter()
                    .map(|result| result.tool_call_id.as_str())
                    .collect::<Vec<_>>(),
                ["a", "b"]
            );
            for result in skipped {
                assert!(result.is_error);
                assert_eq!(
                    result.details,
                    Some(json!({"skipped": true, "reason": reason}))
                );
            }
            let events = events.lock().unwrap();
            assert!(!events
                .iter()
                .any(|event| matches!(event, LoopEvent::ToolStart(_))));
            assert_eq!(
                events
                    .iter()
                    .filter(|event| matches!(event, LoopEvent::ToolSkipped(_)))
                    .count(),
                2
            );
            drop(events);
        }
    }

    #[tokio::test]
    async fn stop_with_a_call_and_tool_use_without_calls_end_as_protocol_errors() {
        let registry = ToolRegistry::new(vec![echo(Arc::default())]).unwrap();
        let model = ScriptedModel::new(vec![ScriptedTurn::message(assistant_message(
            vec![AssistantContent::ToolCall(tool_call(
                "s",
                "echo",
                json!({"value": "1"}),
            ))],
            StopReason::Stop,
        ))]);
        let (result, _) = run(&model, registry.clone(), &context(vec![user("go")]), |_| {}).await;
        assert_eq!(result.reason, RunReason::Error);
        let skipped = results(&result.messages);
        assert_eq!(skipped.len(), 1);
        assert_eq!(
            skipped[0].details,
            Some(json!({"skipped": true, "reason": "unexpected-stop"}))
        );

        let model = ScriptedModel::new(vec![ScriptedTurn::message(assistant_message(
            vec![AssistantContent::Text(text("no calls"))],
            StopReason::ToolUse,
        ))]);
        let (result, events) = run(&model, registry, &context(vec![user("go")]), |_| {}).await;
        assert_eq!(result.reason, RunReason::Error);
        assert!(results(&result.messages).is_empty());
        assert_eq!(turn_ends(&events), [RunReason::Error]);
    }
}

mod concurrent {
    use super::*;

    /// A tool that waits on its own gate; both are started before either is released.
    fn gated(name: &'static str, gate: Arc<Notify>, started: Arc<AtomicUsize>) -> SharedTool {
        Tool::new(
            name,
            "Wait for the gate",
            Schema::new(None, |_| Ok(())),
            move |_: (), _context| {
                let gate = Arc::clone(&gate);
                let started = Arc::clone(&started);
                async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    gate.notified().await;
                    Ok(ToolOutput::text(name))
                }
            },
        )
        .shared()
    }

    #[tokio::test]
    async fn completion_order_and_transcript_order_are_different_things() {
        let (slow_gate, fast_gate) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let started = Arc::new(AtomicUsize::new(0));
        let registry = ToolRegistry::new(vec![
            gated("slow", Arc::clone(&slow_gate), Arc::clone(&started)),
            gated("fast", Arc::clone(&fast_gate), Arc::clone(&started)),
        ])
        .unwrap();
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![
                tool_call("s", "slow", json!({})),
                tool_call("f", "fast", json!({})),
            ]),
            ScriptedTurn::text("done"),
        ]);
        // Release fast first, then slow, but only once both have started: if the loop ran the
        // calls one after another, slow would wait forever and the 1 s timeout would fire.
        let releaser = tokio::spawn({
            let started = Arc::clone(&started);
            async move {
                while started.load(Ordering::SeqCst) < 2 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                fast_gate.notify_one();
                tokio::time::sleep(Duration::from_millis(20)).await;
                slow_gate.notify_one();
            }
        });
        let (result, events) = run(&model, registry, &context(vec![user("go")]), |_| {}).await;
        releaser.await.unwrap();
        let ended: Vec<String> = events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|event| match event {
                LoopEvent::ToolEnd(result) => Some(result.tool_name.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(ended, ["fast", "slow"], "tool_end 按完成顺序");
        let names: Vec<&str> = results(&result.messages)
            .iter()
            .map(|result| result.tool_name.as_str())
            .collect();
        assert_eq!(names, ["slow", "fast"], "transcript 按调用顺序");
        let second = &model.requests()[1];
        assert_eq!(
            results(&second.messages)
                .iter()
                .map(|result| result.tool_call_id.as_str())
                .collect::<Vec<_>>(),
            ["s", "f"]
        );
    }

    #[tokio::test]
    async fn a_failing_or_panicking_call_does_not_affect_its_siblings() {
        let bad = Tool::new(
            "bad",
            "Fails",
            Schema::new(None, |_| Ok(())),
            |_: (), _context| async { Err(ToolError::new("executor exploded")) },
        )
        .shared();
        let wild = Tool::new(
            "wild",
            "Panics",
            Schema::new(None, |_| Ok(())),
            |_: (), _context| async { panic!("STACK_SECRET") },
        )
        .shared();
        let registry = ToolRegistry::new(vec![bad, wild, echo(Arc::default())]).unwrap();
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![
                tool_call("bad-call", "bad", json!({})),
                tool_call("wild-call", "wild", json!({})),
                tool_call("good-call", "echo", json!({"value": "ok"})),
            ]),
            ScriptedTurn::text("done"),
        ]);
        let (result, events) = run(&model, registry, &context(vec![user("go")]), |_| {}).await;
        assert_eq!(result.reason, RunReason::Stop);
        let paired = results(&result.messages);
        assert_eq!(
            paired
                .iter()
                .map(|result| result.tool_call_id.as_str())
                .collect::<Vec<_>>(),
            ["bad-call", "wild-call", "good-call"]
        );
        assert_eq!(
            paired
                .iter()
                .map(|result| result.is_error)
                .collect::<Vec<_>>(),
            [true, true, false]
        );
        assert!(serde_json::to_string(paired[0])
            .unwrap()
            .contains("executor exploded"));
        assert!(!serde_json::to_string(paired[1])
            .unwrap()
            .contains("stack backtrace"));
        assert_eq!(
            events
                .lock()
                .unwrap()
                .iter()
                .filter(|event| matches!(event, LoopEvent::ToolEnd(_)))
                .count(),
            3
        );
    }
}

mod cancel_limit {
    use super::*;

    #[tokio::test]
    async fn a_pre_cancelled_run_never_requests_the_model() {
        let model = ScriptedModel::new(vec![ScriptedTurn::text("never")]);
        let input = context(vec![user("go")]);
        let (result, events) = run(&model, ToolRegistry::default(), &input, |options| {
            options.cancel.cancel()
        })
        .await;
        assert_eq!((result.reason, result.steps), (RunReason::Aborted, 0));
        assert_eq!(result.messages, input.messages);
        assert!(model.requests().is_empty(), "预取消时不能请求模型");
        assert_eq!(turn_ends(&events), [RunReason::Aborted]);
    }

    #[tokio::test]
    async fn cancelling_during_a_tool_keeps_its_result_and_stops_requesting() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let aborter = Tool::new("abort", "Cancels the run", Schema::new(None, |_| Ok(())), {
            let cancel = cancel.clone();
            move |_: (), context: ToolContext| {
                let cancel = cancel.clone();
                async move {
                    cancel.cancel();
                    Ok(ToolOutput::text(if context.cancel.is_cancelled() {
                        "kept:same-token"
                    } else {
                        "kept"
                    }))
                }
            }
        })
        .shared();
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![tool_call("c", "abort", json!({}))]),
            ScriptedTurn::text("never"),
        ]);
        let (result, events) = run(
            &model,
            ToolRegistry::new(vec![aborter]).unwrap(),
            &context(vec![user("go")]),
            |options| options.cancel = cancel.clone(),
        )
        .await;
        assert_eq!((result.reason, result.steps), (RunReason::Aborted, 1));
        assert_eq!(model.requests().len(), 1, "批次结束后已取消就不再请求模型");
        assert_eq!(
            results(&result.messages)[0].content,
            vec![text("kept:same-token")]
        );
        assert_eq!(turn_ends(&events), [RunReason::Aborted]);
    }

    #[tokio::test]
    async fn max_steps_keeps_the_last_results_and_ends_once() {
        let registry = ToolRegistry::new(vec![echo(Arc::default())]).unwrap();
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![tool_call("m", "echo", json!({"value": "1"}))]),
            ScriptedTurn::text("never"),
        ]);
        let (result, events) = run(&model, registry, &context(vec![user("go")]), |options| {
            options.max_steps = 1
        })
        .await;
        assert_eq!((result.reason, result.steps), (RunReason::MaxSteps, 1));
        assert_eq!(model.requests().len(), 1);
        assert_eq!(results(&result.messages).len(), 1, "最后一批结果保留");
        assert_eq!(turn_ends(&events), [RunReason::MaxSteps]);
    }
}
