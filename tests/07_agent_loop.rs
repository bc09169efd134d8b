//! Chapter 07 acceptance tests: the agent loop.
//!
//! Group k only needs Labs 7.1 … 7.k: `model_turn` scripts plain stops only, `single_tool` one
//! call per batch, `non_executing` never executes, only `concurrent` runs batches of several
//! calls, and only `cancel_limit` cancels or reaches `max_steps`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pi_course::agent_loop::*;
use pi_course::provider_adapter::{
    ChunkReceiver, ChunkResult, FinishReason, OpenAiCompatibleModel, ProviderChunk,
    ProviderRequest, ProviderTransport, ProviderUsage, TransportError,
};
use pi_course::scripted_model::{tool_call, ScriptedModel, ScriptedTurn};
use pi_course::tool::*;
use pi_course::types::*;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::time::error::Elapsed;

type Events = Arc<Mutex<Vec<LoopEvent>>>;

fn recorder() -> (Events, EventSink) {
    let events: Events = Arc::default();
    let sink: EventSink = {
        let events = Arc::clone(&events);
        Arc::new(move |event| {
            events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(event)
        })
    };
    (events, sink)
}

/// A copy of everything the loop reported so far.
fn recorded(events: &Events) -> Vec<LoopEvent> {
    events
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// The events in short form: model events as `model`, the others with their call id or reason.
fn trace(events: &[LoopEvent]) -> Vec<String> {
    events
        .iter()
        .map(|event| match event {
            LoopEvent::Model(_) => "model".to_string(),
            LoopEvent::AssistantMessage(_) => "assistant".to_string(),
            LoopEvent::ToolStart(call) => format!("start:{}", call.id),
            LoopEvent::ToolProgress { call_id, .. } => format!("progress:{call_id}"),
            LoopEvent::ToolEnd(result) => format!("end:{}", result.tool_call_id),
            LoopEvent::ToolSkipped(result) => format!("skipped:{}", result.tool_call_id),
            LoopEvent::TurnEnd(reason) => format!("turn_end:{reason:?}"),
        })
        .collect()
}

/// The events a scripted turn streams, wrapped as the loop must forward them.
async fn streamed(turn: &ScriptedTurn) -> Vec<LoopEvent> {
    let twin = ScriptedModel::new(vec![turn.clone()]);
    let stream = twin.stream(&AgentContext::default(), StreamOptions::default());
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(LoopEvent::Model(event));
    }
    events
}

/// The assistant message a `Message` turn ends with.
fn scripted_message(turn: &ScriptedTurn) -> AssistantMessage {
    match turn {
        ScriptedTurn::Message(message) => message.clone(),
        other => panic!("测试脚本在这里只用 Message 回合，得到的是 {other:?}"),
    }
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

fn registry(tools: Vec<SharedTool>) -> ToolRegistry {
    ToolRegistry::new(tools).expect("测试用的工具名互不相同，Registry 应当建成")
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

/// (call id, tool name, the text of the content) of each result.
fn summary(results: &[&ToolResultMessage]) -> Vec<(String, String, String)> {
    results
        .iter()
        .map(|result| {
            let content: Vec<&str> = result.content.iter().map(|c| c.text.as_str()).collect();
            (
                result.tool_call_id.clone(),
                result.tool_name.clone(),
                content.join(""),
            )
        })
        .collect()
}

fn turn_ends(events: &Events) -> Vec<RunReason> {
    recorded(events)
        .iter()
        .filter_map(|event| match event {
            LoopEvent::TurnEnd(reason) => Some(*reason),
            _ => None,
        })
        .collect()
}

async fn try_run(
    model: &ScriptedModel,
    tools: ToolRegistry,
    input: &AgentContext,
    setup: impl FnOnce(&mut AgentLoopOptions),
) -> Result<(AgentRunResult, Events), Elapsed> {
    let (events, sink) = recorder();
    let mut options = AgentLoopOptions::new(Arc::new(model.clone()), tools, input.clone());
    options.on_event = Some(sink);
    setup(&mut options);
    let result = tokio::time::timeout(Duration::from_secs(1), run_agent_loop(options)).await?;
    Ok((result, events))
}

async fn run(
    model: &ScriptedModel,
    tools: ToolRegistry,
    input: &AgentContext,
    setup: impl FnOnce(&mut AgentLoopOptions),
) -> (AgentRunResult, Events) {
    try_run(model, tools, input, setup)
        .await
        .expect("1 秒内循环没有结束")
}

/// The sentence a skipped result carries, per `details.reason` (stated in the chapter guide).
fn skip_sentence(reason: &str) -> &'static str {
    match reason {
        "length" => "Tool call was not executed because the model response was truncated.",
        "error" => "Tool call was not executed because the model turn ended with error.",
        "aborted" => "Tool call was not executed because the model turn ended with aborted.",
        "unexpected-stop" => {
            "Tool call was not executed because the model returned stop with a tool call."
        }
        other => panic!("指南没有 {other} 这种跳过原因"),
    }
}

/// An OpenAI-compatible server that validates history the way vLLM and several gateways do:
/// every `arguments` must be JSON and every tool call must be answered by a `tool` message
/// before anything else. A request that breaks either rule gets an HTTP 400 error; otherwise
/// the next scripted reply streams (a held reply keeps its stream open, like a model that is
/// still writing).
#[derive(Default)]
struct StrictServer {
    replies: Mutex<std::collections::VecDeque<(Vec<ProviderChunk>, bool)>>,
    requests: Mutex<Vec<ProviderRequest>>,
    held: Mutex<Vec<tokio::sync::mpsc::UnboundedSender<ChunkResult>>>,
}

impl StrictServer {
    fn new(replies: Vec<(Vec<ProviderChunk>, bool)>) -> Arc<StrictServer> {
        Arc::new(StrictServer {
            replies: Mutex::new(replies.into()),
            ..StrictServer::default()
        })
    }

    fn requests(&self) -> Vec<ProviderRequest> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn refusal(messages: &[Value]) -> Option<String> {
        let mut unanswered: Vec<String> = Vec::new();
        for message in messages {
            let role = message["role"].as_str().unwrap_or_default();
            if role == "tool" {
                let id = message["tool_call_id"].as_str().unwrap_or_default();
                unanswered.retain(|open| open != id);
                continue;
            }
            if let Some(open) = unanswered.first() {
                return Some(format!("tool call {open} has no tool message"));
            }
            for call in message["tool_calls"].as_array().into_iter().flatten() {
                let arguments = call["function"]["arguments"].as_str().unwrap_or_default();
                if serde_json::from_str::<Value>(arguments).is_err() {
                    return Some(format!("arguments are not valid JSON: {arguments}"));
                }
                unanswered.push(call["id"].as_str().unwrap_or_default().to_string());
            }
        }
        unanswered
            .first()
            .map(|open| format!("tool call {open} has no tool message"))
    }
}

impl ProviderTransport for StrictServer {
    fn stream(
        &self,
        request: ProviderRequest,
        _cancel: tokio_util::sync::CancellationToken,
    ) -> ChunkReceiver {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let refusal = StrictServer::refusal(&request.messages);
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request);
        if let Some(reason) = refusal {
            let _ = sender.send(Err(TransportError::new(format!("HTTP 400：{reason}"))));
            return receiver;
        }
        let (chunks, hold) = self
            .replies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
            .unwrap_or_else(|| panic!("测试脚本的回答用完了：循环多请求了一次模型"));
        for chunk in chunks {
            let _ = sender.send(Ok(chunk));
        }
        if hold {
            self.held
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(sender);
        }
        receiver
    }
}

fn provider_tool(id: &str, name: &str, arguments: &str) -> ProviderChunk {
    ProviderChunk::Tool {
        index: 0,
        id: Some(id.into()),
        name: Some(name.into()),
        arguments_delta: Some(arguments.into()),
    }
}

fn provider_finish(reason: FinishReason) -> ProviderChunk {
    ProviderChunk::Finish {
        reason,
        usage: ProviderUsage::default(),
    }
}

fn provider_text(delta: &str) -> ProviderChunk {
    ProviderChunk::Text {
        delta: delta.into(),
    }
}

/// Runs the loop over the strict server with the OpenAI-compatible adapter of chapter 05.
async fn run_strict(
    server: &Arc<StrictServer>,
    tools: ToolRegistry,
    input: AgentContext,
    setup: impl FnOnce(&mut AgentLoopOptions),
) -> AgentRunResult {
    let model = OpenAiCompatibleModel::new("strict", "strict-1", server.clone());
    let mut options = AgentLoopOptions::new(Arc::new(model), tools, input);
    setup(&mut options);
    tokio::time::timeout(Duration::from_secs(1), run_agent_loop(options))
        .await
        .expect("1 秒内循环没有结束")
}

mod model_turn {
    use super::*;

    #[tokio::test]
    async fn a_plain_stop_keeps_the_input_and_sends_the_whole_context() {
        let registry = registry(vec![echo(Arc::default())]);
        let mut input = context(vec![system("You are Pi.", 1), user("hi")]);
        input.tools = vec![ToolDefinition {
            name: "stale".into(),
            description: "old".into(),
            parameters: json!({}),
        }];
        let before = input.clone();
        let turn = ScriptedTurn::text("hello");
        let model = ScriptedModel::new(vec![turn.clone()]);
        let (result, events) = run(&model, registry.clone(), &input, |_| {}).await;

        assert_eq!(input, before, "调用方的 context 不能被修改");
        let mut transcript = before.messages.clone();
        transcript.push(AgentMessage::Assistant(scripted_message(&turn)));
        assert_eq!(
            result.messages, transcript,
            "transcript = 调用方 messages + 这一回合的 assistant 消息（只追加一次）"
        );
        assert_eq!(
            (result.reason, result.steps),
            (RunReason::Stop, 1),
            "纯文本 stop：Stop，走了 1 步"
        );
        let requests = model.requests();
        assert_eq!(requests.len(), 1, "纯文本 stop 只请求一次模型");
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
            Some("You are Pi."),
            "请求里的 system prompt 原样保留"
        );
        let mut expected = streamed(&turn).await;
        expected.push(LoopEvent::AssistantMessage(scripted_message(&turn)));
        expected.push(LoopEvent::TurnEnd(RunReason::Stop));
        assert_eq!(
            recorded(&events),
            expected,
            "先原样转发每个模型事件，再发一次 AssistantMessage，最后恰好一个 TurnEnd"
        );
    }

    #[tokio::test]
    async fn the_loop_only_appends_and_never_writes_system_messages() {
        let input = context(vec![
            system("BASE", 1),
            user("first"),
            system("RULE v2", 2),
            user("second"),
        ]);
        let turn = ScriptedTurn::text("done");
        let model = ScriptedModel::new(vec![turn.clone()]);
        let (result, events) = run(&model, registry(vec![]), &input, |_| {}).await;
        assert_eq!(
            result.messages[..4],
            input.messages[..],
            "transcript 以调用方 messages 为前缀"
        );
        assert_eq!(
            result.messages[4..],
            [AgentMessage::Assistant(scripted_message(&turn))],
            "循环只追加这一回合的 assistant 消息"
        );
        let requests = model.requests();
        assert_eq!(requests.len(), 1, "纯文本 stop 只请求一次模型");
        assert_eq!(
            requests[0].messages, input.messages,
            "请求带着全部 messages，两条 system 都原样保留"
        );
        assert_eq!(
            roles(&result.messages)
                .iter()
                .filter(|role| **role == "system")
                .count(),
            2,
            "循环不写 system message"
        );
        assert_eq!(
            trace(&recorded(&events)),
            ["model", "model", "model", "assistant", "turn_end:Stop"],
            "先原样转发每个模型事件，再发一次 AssistantMessage，最后恰好一个 TurnEnd"
        );
    }
}

mod single_tool {
    use super::*;

    #[tokio::test]
    async fn one_call_round_trips_with_progress_and_feeds_the_next_request() {
        let executions = Arc::new(AtomicUsize::new(0));
        let registry = registry(vec![echo(Arc::clone(&executions))]);
        let call = tool_call("probe-1", "echo", json!({"value": "pi"}));
        let first = ScriptedTurn::tool_calls(vec![call.clone()]);
        let second = ScriptedTurn::text("done");
        let model = ScriptedModel::new(vec![first.clone(), second.clone()]);
        let (result, events) = run(&model, registry, &context(vec![user("go")]), |_| {}).await;

        assert_eq!(
            executions.load(Ordering::SeqCst),
            1,
            "toolUse 回合的调用恰好执行一次"
        );
        assert_eq!(
            roles(&result.messages),
            ["user", "assistant", "toolResult", "assistant"],
            "执行结果紧跟在它的 assistant 消息后面追加到 transcript"
        );
        let paired = results(&result.messages)[0].clone();
        assert_eq!(
            summary(&[&paired]),
            [("probe-1".into(), "echo".into(), "echo:pi".into())],
            "结果配对原调用的 id 与 name，内容来自工具"
        );
        assert_eq!(
            (paired.details.clone(), paired.is_error),
            (Some(json!({"source": "echo"})), false),
            "工具的 details 与 isError 原样保留"
        );
        let requests = model.requests();
        assert_eq!(requests.len(), 2, "有工具结果就再请求一次模型");
        assert_eq!(
            requests[1].messages,
            result.messages[..3],
            "工具结果回填到下一次请求：user、assistant、toolResult"
        );
        assert_eq!(
            (result.reason, result.steps),
            (RunReason::Stop, 2),
            "第二回合纯文本 stop：Stop，共 2 步"
        );

        let events = recorded(&events);
        let ended: Vec<&LoopEvent> = events
            .iter()
            .filter(|event| matches!(event, LoopEvent::ToolEnd(_)))
            .collect();
        assert_eq!(
            ended,
            [&LoopEvent::ToolEnd(paired.clone())],
            "执行过的调用恰好一个 ToolEnd，携带写进 transcript 的同一条结果"
        );
        let progress: Vec<&LoopEvent> = events
            .iter()
            .filter(|event| matches!(event, LoopEvent::ToolProgress { .. }))
            .collect();
        assert_eq!(
            progress,
            [&LoopEvent::ToolProgress {
                call_id: "probe-1".into(),
                content: vec![text("working:probe-1")]
            }],
            "工具的进度以 ToolProgress 转发，标着调用自己的 id"
        );
        let mut expected = streamed(&first).await;
        expected.push(LoopEvent::AssistantMessage(scripted_message(&first)));
        expected.push(LoopEvent::ToolStart(call));
        expected.push(progress[0].clone());
        expected.push(LoopEvent::ToolEnd(paired));
        expected.extend(streamed(&second).await);
        expected.push(LoopEvent::AssistantMessage(scripted_message(&second)));
        expected.push(LoopEvent::TurnEnd(RunReason::Stop));
        assert_eq!(
            events, expected,
            "事件顺序：模型事件、AssistantMessage、ToolStart → ToolProgress → ToolEnd，然后下一回合"
        );
    }

    // Kills: ending the run when the model's arguments are not JSON (chapter 05 keeps the
    // call), executing such a call, leaving it without a result, and replaying the broken text
    // to a server that validates history.
    #[tokio::test]
    async fn arguments_that_are_not_json_are_answered_and_the_loop_goes_on() {
        let executions = Arc::new(AtomicUsize::new(0));
        let server = StrictServer::new(vec![
            (
                vec![
                    provider_tool("bad-1", "echo", r#"{"value":"P"#),
                    provider_finish(FinishReason::ToolCalls),
                ],
                false,
            ),
            (
                vec![
                    provider_text("我重写参数"),
                    provider_finish(FinishReason::Stop),
                ],
                false,
            ),
        ]);
        let result = run_strict(
            &server,
            registry(vec![echo(Arc::clone(&executions))]),
            context(vec![user("go")]),
            |_| {},
        )
        .await;
        assert_eq!(
            executions.load(Ordering::SeqCst),
            0,
            "参数不是合法 JSON 的调用不能执行"
        );
        assert_eq!(
            summary(&results(&result.messages)),
            [(
                "bad-1".into(),
                "echo".into(),
                r#"Tool echo failed: 参数不是合法的 JSON：收到 {"value":"P"#.into()
            )],
            "坏参数的调用得到一条配对的错误结果，引用收到的原文"
        );
        assert_eq!(
            (result.reason, result.steps),
            (RunReason::Stop, 2),
            "坏参数不结束运行：错误结果交还给模型，循环继续，第二回合正常 stop"
        );
        let requests = server.requests();
        assert_eq!(
            requests[1].messages[1]["tool_calls"][0]["function"]["arguments"],
            json!("{}"),
            "下一次请求里坏掉的 arguments 发成 \"{{}}\"，严格的服务端才会接受"
        );
    }

    #[tokio::test]
    async fn a_call_to_an_unknown_tool_still_gets_its_paired_result() {
        let executions = Arc::new(AtomicUsize::new(0));
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![tool_call("ghost-7", "nope", json!({"x": 1}))]),
            ScriptedTurn::text("sorry"),
        ]);
        let (result, events) = run(
            &model,
            registry(vec![echo(Arc::clone(&executions))]),
            &context(vec![user("go")]),
            |_| {},
        )
        .await;
        assert_eq!(
            summary(&results(&result.messages)),
            [(
                "ghost-7".into(),
                "nope".into(),
                format!("Tool nope failed: {UNKNOWN_TOOL}")
            )],
            "未知工具的调用也必须得到一条配对的失败结果（由执行器给出）"
        );
        assert!(
            results(&result.messages)[0].is_error,
            "未知工具的结果 isError 为 true"
        );
        assert_eq!(
            executions.load(Ordering::SeqCst),
            0,
            "未知工具不会执行别的工具"
        );
        assert_eq!(
            trace(&recorded(&events)),
            [
                "model",
                "model",
                "model",
                "model",
                "assistant",
                "start:ghost-7",
                "end:ghost-7",
                "model",
                "model",
                "model",
                "assistant",
                "turn_end:Stop"
            ],
            "未知工具的调用同样有 ToolStart 与 ToolEnd，之后循环继续"
        );
        assert_eq!(
            (result.reason, model.requests().len()),
            (RunReason::Stop, 2),
            "失败结果回填给模型，由它决定下一步"
        );
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
            let registry = registry(vec![echo(Arc::clone(&executions))]);
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
            assert_eq!(
                (result.reason, result.steps),
                (expected, 1),
                "{reason} 回合结束运行，原因对应"
            );
            assert_eq!(model.requests().len(), 1, "{reason} 之后不再请求模型");
            let skipped = results(&result.messages);
            assert_eq!(
                summary(&skipped),
                [
                    ("a".into(), "echo".into(), skip_sentence(reason).into()),
                    ("b".into(), "echo".into(), skip_sentence(reason).into())
                ],
                "每个调用按调用顺序得到一条跳过结果：id、name 不变，content 是指南给出的那句说明"
            );
            for result in &skipped {
                assert_eq!(
                    (result.is_error, result.details.clone()),
                    (true, Some(json!({"skipped": true, "reason": reason}))),
                    "跳过结果 isError 为 true，details 写明 skipped 与 reason"
                );
            }
            let events = recorded(&events);
            assert_eq!(
                trace(&events)
                    .into_iter()
                    .filter(|entry| entry != "model")
                    .collect::<Vec<_>>(),
                [
                    "assistant".to_string(),
                    "skipped:a".into(),
                    "skipped:b".into(),
                    format!("turn_end:{expected:?}")
                ],
                "不执行的调用只发 ToolSkipped（按调用顺序），不发 ToolStart/ToolEnd"
            );
            let reported: Vec<&ToolResultMessage> = events
                .iter()
                .filter_map(|event| match event {
                    LoopEvent::ToolSkipped(result) => Some(result),
                    _ => None,
                })
                .collect();
            assert_eq!(
                reported, skipped,
                "ToolSkipped 携带的正是写进 transcript 的那条结果"
            );
        }
    }

    // Kills: storing an aborted turn's half-streamed calls without results, and replaying
    // their cut arguments: a server that validates history (vLLM, Kimi, several gateways) then
    // answers 400 to every later request of the session.
    #[tokio::test]
    async fn a_turn_cancelled_while_arguments_stream_is_replayed_safely() {
        let executions = Arc::new(AtomicUsize::new(0));
        let server = StrictServer::new(vec![
            (
                vec![
                    provider_text("先读"),
                    provider_tool("cut-1", "echo", r#"{"value":"RE"#),
                ],
                true,
            ),
            (
                vec![provider_text("好的"), provider_finish(FinishReason::Stop)],
                false,
            ),
        ]);
        let cancel = tokio_util::sync::CancellationToken::new();
        let trigger = cancel.clone();
        let first = run_strict(
            &server,
            registry(vec![echo(Arc::clone(&executions))]),
            context(vec![user("读文件")]),
            move |options| {
                options.cancel = trigger.clone();
                // Ctrl-C while the arguments stream: cancel on the first tool-call delta.
                options.on_event = Some(Arc::new(move |event| {
                    if let LoopEvent::Model(ModelEvent::ToolcallDelta { .. }) = event {
                        trigger.cancel();
                    }
                }));
            },
        )
        .await;
        assert!(cancel.is_cancelled(), "测试脚本应当在参数流到一半时取消");
        assert_eq!(
            first.reason,
            RunReason::Aborted,
            "参数流到一半时取消：Aborted"
        );
        assert_eq!(
            summary(&results(&first.messages)),
            [(
                "cut-1".into(),
                "echo".into(),
                skip_sentence("aborted").into()
            )],
            "被取消的回合里流了一半的调用也得到一条跳过结果"
        );

        let mut next = first.messages.clone();
        next.push(user("换个文件"));
        let second = run_strict(
            &server,
            registry(vec![echo(Arc::clone(&executions))]),
            context(next),
            |_| {},
        )
        .await;
        let requests = server.requests();
        assert_eq!(
            requests[1].messages[1]["tool_calls"][0]["function"]["arguments"],
            json!("{}"),
            "取消后重放的请求里，被截断的 arguments 发成 \"{{}}\"，不是半截原文"
        );
        assert_eq!(
            (second.reason, second.steps),
            (RunReason::Stop, 1),
            "取消之后的下一个任务，严格的服务端照常接受：每个调用后面都有结果，每个 arguments 都是 JSON"
        );
        assert_eq!(executions.load(Ordering::SeqCst), 0, "被取消的调用没有执行");
    }

    #[tokio::test]
    async fn stop_with_a_call_and_tool_use_without_calls_end_as_protocol_errors() {
        let executions = Arc::new(AtomicUsize::new(0));
        let registry = registry(vec![echo(Arc::clone(&executions))]);
        let model = ScriptedModel::new(vec![ScriptedTurn::message(assistant_message(
            vec![AssistantContent::ToolCall(tool_call(
                "s",
                "echo",
                json!({"value": "1"}),
            ))],
            StopReason::Stop,
        ))]);
        let (result, events) =
            run(&model, registry.clone(), &context(vec![user("go")]), |_| {}).await;
        assert_eq!(
            executions.load(Ordering::SeqCst),
            0,
            "stop 却带着调用：调用不能执行"
        );
        assert_eq!(
            (result.reason, model.requests().len()),
            (RunReason::Error, 1),
            "stop 却带着调用是协议错误：Error，不再请求模型"
        );
        let skipped = results(&result.messages);
        assert_eq!(
            skipped
                .iter()
                .map(|result| result.details.clone())
                .collect::<Vec<_>>(),
            [Some(json!({"skipped": true, "reason": "unexpected-stop"}))],
            "stop 却带调用时给出一条跳过结果，reason 是 unexpected-stop"
        );
        assert_eq!(
            summary(&skipped),
            [(
                "s".into(),
                "echo".into(),
                skip_sentence("unexpected-stop").into()
            )],
            "stop 却带调用时的跳过结果：id、name 不变，content 是指南给出的那句说明"
        );
        assert_eq!(
            turn_ends(&events),
            [RunReason::Error],
            "恰好一个 TurnEnd(Error)"
        );

        let model = ScriptedModel::new(vec![ScriptedTurn::message(assistant_message(
            vec![AssistantContent::Text(text("no calls"))],
            StopReason::ToolUse,
        ))]);
        let (result, events) = run(&model, registry, &context(vec![user("go")]), |_| {}).await;
        assert_eq!(
            (result.reason, model.requests().len()),
            (RunReason::Error, 1),
            "toolUse 却没有调用是协议错误：Error"
        );
        assert_eq!(
            roles(&result.messages),
            ["user", "assistant"],
            "没有调用就没有跳过结果"
        );
        assert_eq!(
            turn_ends(&events),
            [RunReason::Error],
            "恰好一个 TurnEnd(Error)"
        );
    }

    #[tokio::test]
    async fn error_length_and_aborted_without_calls_end_with_their_own_reason() {
        for (turn, expected) in [
            (ScriptedTurn::error("provider exploded"), RunReason::Error),
            (
                ScriptedTurn::message(assistant_message(
                    vec![AssistantContent::Text(text("half an ans"))],
                    StopReason::Length,
                )),
                RunReason::Length,
            ),
            (
                ScriptedTurn::aborted("user pressed ctrl-c"),
                RunReason::Aborted,
            ),
        ] {
            let model = ScriptedModel::new(vec![turn]);
            let (result, events) =
                run(&model, registry(vec![]), &context(vec![user("go")]), |_| {}).await;
            assert_eq!(
                (result.reason, result.steps),
                (expected, 1),
                "没有调用的 {expected:?} 回合以自己的原因结束，不是 Stop"
            );
            assert_eq!(
                roles(&result.messages),
                ["user", "assistant"],
                "没有调用就没有跳过结果，assistant 消息照样追加"
            );
            assert_eq!(model.requests().len(), 1, "{expected:?} 之后不再请求模型");
            assert_eq!(turn_ends(&events), [expected], "恰好一个 TurnEnd");
        }
    }

    #[test]
    fn skipped_results_state_why_in_the_guides_sentence() {
        let call = tool_call("call_9", "upper", json!({"text": "pi"}));
        for reason in ["length", "error", "aborted", "unexpected-stop"] {
            let result = skipped_result(&call, reason);
            assert_eq!(
                result.content,
                vec![text(skip_sentence(reason))],
                "跳过结果的 content 是指南给出的那句原因说明（{reason}）"
            );
            assert_eq!(
                (result.tool_call_id.as_str(), result.tool_name.as_str()),
                ("call_9", "upper"),
                "跳过结果保留原调用的 id 与 name"
            );
            assert_eq!(
                (result.is_error, result.details),
                (true, Some(json!({"skipped": true, "reason": reason}))),
                "跳过结果 isError 为 true，details 写明 skipped 与 reason"
            );
        }
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
        let registry = registry(vec![
            gated("slow", Arc::clone(&slow_gate), Arc::clone(&started)),
            gated("fast", Arc::clone(&fast_gate), Arc::clone(&started)),
        ]);
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
        let (result, events) = try_run(&model, registry, &context(vec![user("go")]), |_| {})
            .await
            .expect(
                "同一批的调用必须并发执行：两个门控工具都开始之后才会放行，串行执行会一直等下去",
            );
        releaser.await.expect("放行任务正常结束");
        let tool_events: Vec<String> = trace(&recorded(&events))
            .into_iter()
            .filter(|entry| !matches!(entry.as_str(), "model" | "assistant"))
            .collect();
        assert_eq!(
            tool_events,
            ["start:s", "start:f", "end:f", "end:s", "turn_end:Stop"],
            "先按调用顺序发出全部 ToolStart，ToolEnd 按完成顺序"
        );
        assert_eq!(
            summary(&results(&result.messages)),
            [
                ("s".into(), "slow".into(), "slow".into()),
                ("f".into(), "fast".into(), "fast".into())
            ],
            "transcript 按调用顺序，不按完成顺序"
        );
        let second = &model.requests()[1];
        assert_eq!(
            second.messages,
            result.messages[..4],
            "下一次请求带着按调用顺序排列的结果"
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
        // Finishes well after its failing siblings.
        let late = Tool::new(
            "late",
            "Answers after a while",
            Schema::new(None, |_| Ok(())),
            |_: (), _context| async {
                tokio::time::sleep(Duration::from_millis(30)).await;
                Ok(ToolOutput::text("late:ok"))
            },
        )
        .shared();
        let registry = registry(vec![bad, wild, late]);
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![
                tool_call("bad-call", "bad", json!({})),
                tool_call("wild-call", "wild", json!({})),
                tool_call("late-call", "late", json!({})),
            ]),
            ScriptedTurn::text("done"),
        ]);
        let (result, events) = run(&model, registry, &context(vec![user("go")]), |_| {}).await;
        let paired = results(&result.messages);
        assert_eq!(
            summary(&paired),
            [
                (
                    "bad-call".into(),
                    "bad".into(),
                    "Tool bad failed: executor exploded".into()
                ),
                (
                    "wild-call".into(),
                    "wild".into(),
                    format!("Tool wild failed: {TOOL_PANICKED}：STACK_SECRET")
                ),
                ("late-call".into(), "late".into(), "late:ok".into())
            ],
            "一个调用失败或 panic 不影响同批其他调用：late 照常完成，每个调用一条结果"
        );
        assert_eq!(
            paired
                .iter()
                .map(|result| result.is_error)
                .collect::<Vec<_>>(),
            [true, true, false],
            "只有失败的调用 isError 为 true"
        );
        assert_eq!(
            trace(&recorded(&events))
                .into_iter()
                .filter(|entry| entry.starts_with("end:"))
                .count(),
            3,
            "三个调用各有一个 ToolEnd"
        );
        assert_eq!(
            (result.reason, model.requests().len()),
            (RunReason::Stop, 2),
            "失败的结果回填给模型，运行照常继续"
        );
    }

    #[tokio::test]
    async fn calls_to_one_tool_keep_their_own_results_and_progress() {
        let executions = Arc::new(AtomicUsize::new(0));
        let registry = registry(vec![echo(Arc::clone(&executions))]);
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![
                tool_call("call_A", "echo", json!({"value": "1"})),
                tool_call("call_X", "nope", json!({})),
                tool_call("call_B", "echo", json!({"value": "2"})),
            ]),
            ScriptedTurn::text("done"),
        ]);
        let (result, events) = run(&model, registry, &context(vec![user("go")]), |_| {}).await;
        assert_eq!(
            summary(&results(&result.messages)),
            [
                ("call_A".into(), "echo".into(), "echo:1".into()),
                (
                    "call_X".into(),
                    "nope".into(),
                    format!("Tool nope failed: {UNKNOWN_TOOL}")
                ),
                ("call_B".into(), "echo".into(), "echo:2".into())
            ],
            "同一工具的两次调用各得到自己的结果（按调用下标放回，不按工具名），未知工具也有结果"
        );
        assert_eq!(
            executions.load(Ordering::SeqCst),
            2,
            "两次 echo 调用各执行一次"
        );
        let mut progress: Vec<(String, Vec<TextContent>)> = recorded(&events)
            .into_iter()
            .filter_map(|event| match event {
                LoopEvent::ToolProgress { call_id, content } => Some((call_id, content)),
                _ => None,
            })
            .collect();
        progress.sort_by(|left, right| left.0.cmp(&right.0));
        assert_eq!(
            progress,
            [
                ("call_A".to_string(), vec![text("working:call_A")]),
                ("call_B".to_string(), vec![text("working:call_B")])
            ],
            "每个调用的进度标着它自己的 call id"
        );
        let mut ended: Vec<String> = trace(&recorded(&events))
            .into_iter()
            .filter(|entry| entry.starts_with("end:"))
            .collect();
        ended.sort();
        assert_eq!(
            ended,
            ["end:call_A", "end:call_B", "end:call_X"],
            "每个调用恰好一个 ToolEnd"
        );
    }
}

mod cancel_limit {
    use super::*;

    /// A tool that cancels the run's token while it runs, then says whether its own
    /// context saw that cancellation.
    fn aborter(cancel: &tokio_util::sync::CancellationToken) -> SharedTool {
        Tool::new("abort", "Cancels the run", Schema::new(None, |_| Ok(())), {
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
        .shared()
    }

    #[tokio::test]
    async fn a_pre_cancelled_run_never_requests_the_model() {
        let model = ScriptedModel::new(vec![ScriptedTurn::text("never")]);
        let input = context(vec![user("go")]);
        let (result, events) = run(&model, ToolRegistry::default(), &input, |options| {
            options.cancel.cancel()
        })
        .await;
        assert!(model.requests().is_empty(), "预取消时不能请求模型");
        assert_eq!(
            (result.reason, result.steps),
            (RunReason::Aborted, 0),
            "预取消：Aborted，0 步"
        );
        assert_eq!(
            result.messages, input.messages,
            "预取消时 transcript 就是调用方的 messages"
        );
        assert_eq!(
            recorded(&events),
            [LoopEvent::TurnEnd(RunReason::Aborted)],
            "预取消时只发一个 TurnEnd(Aborted)"
        );
    }

    #[tokio::test]
    async fn cancelling_during_a_tool_keeps_its_result_and_stops_requesting() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![tool_call("c", "abort", json!({}))]),
            ScriptedTurn::text("never"),
        ]);
        let (result, events) = run(
            &model,
            registry(vec![aborter(&cancel)]),
            &context(vec![user("go")]),
            |options| options.cancel = cancel.clone(),
        )
        .await;
        assert_eq!(
            summary(&results(&result.messages)),
            [("c".into(), "abort".into(), "kept:same-token".into())],
            "工具拿到的是本次运行的取消令牌，取消前完成的结果保留"
        );
        assert_eq!(model.requests().len(), 1, "批次结束后已取消就不再请求模型");
        assert_eq!(
            (result.reason, result.steps),
            (RunReason::Aborted, 1),
            "批次后取消：Aborted，1 步"
        );
        assert_eq!(
            turn_ends(&events),
            [RunReason::Aborted],
            "恰好一个 TurnEnd(Aborted)"
        );
    }

    #[tokio::test]
    async fn a_cancel_during_the_last_allowed_batch_still_ends_as_aborted() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![tool_call("c", "abort", json!({}))]),
            ScriptedTurn::text("never"),
        ]);
        let (result, events) = run(
            &model,
            registry(vec![aborter(&cancel)]),
            &context(vec![user("go")]),
            |options| {
                options.cancel = cancel.clone();
                options.max_steps = 1;
            },
        )
        .await;
        assert_eq!(
            (result.reason, result.steps),
            (RunReason::Aborted, 1),
            "批次后已取消：即使步数已用完也以 Aborted 结束（取消检查在步数上限之前）"
        );
        assert_eq!(
            roles(&result.messages),
            ["user", "assistant", "toolResult"],
            "被取消的批次的结果保留"
        );
        assert_eq!(
            turn_ends(&events),
            [RunReason::Aborted],
            "恰好一个 TurnEnd(Aborted)"
        );
    }

    #[tokio::test]
    async fn max_steps_keeps_the_last_results_and_ends_once() {
        let registry = registry(vec![echo(Arc::default())]);
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![tool_call("m", "echo", json!({"value": "1"}))]),
            ScriptedTurn::text("never"),
        ]);
        let (result, events) = run(&model, registry, &context(vec![user("go")]), |options| {
            options.max_steps = 1
        })
        .await;
        assert_eq!(
            (result.reason, result.steps),
            (RunReason::MaxSteps, 1),
            "步数用完：MaxSteps，步数等于上限"
        );
        assert_eq!(model.requests().len(), 1, "步数用完后不再请求模型");
        assert_eq!(
            summary(&results(&result.messages)),
            [("m".into(), "echo".into(), "echo:1".into())],
            "最后一批结果保留"
        );
        assert_eq!(
            turn_ends(&events),
            [RunReason::MaxSteps],
            "恰好一个 TurnEnd(MaxSteps)"
        );
    }
}
