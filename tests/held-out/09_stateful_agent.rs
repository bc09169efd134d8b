//! Held-out tests for chapter 09 (instructor only): a batch of two calls, an abort with two
//! calls pending, and a system patch on the very first run.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pi_course::agent::*;
use pi_course::agent_loop::{LoopEvent, RunReason};
use pi_course::scripted_model::{tool_call, ScriptedModel, ScriptedTurn};
use pi_course::tool::*;
use pi_course::types::*;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

/// Awaits `future`, failing with `what` when it does not finish within a second.
async fn within<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(1), future)
        .await
        .unwrap_or_else(|_| panic!("{what}：1 秒内没有完成（运行是否卡住了？）"))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where a held model call stands: the test learns when it got there and decides when it goes on.
struct Hold {
    reached: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

/// The test's side of a hold: `reached` fires when the call streamed everything but its
/// terminal event; sending on (or dropping) `release` lets the terminal through.
struct HoldControl {
    reached: oneshot::Receiver<()>,
    release: oneshot::Sender<()>,
}

fn hold() -> (Hold, HoldControl) {
    let (reached_tx, reached_rx) = oneshot::channel();
    let (release_tx, release_rx) = oneshot::channel();
    (
        Hold {
            reached: reached_tx,
            release: release_rx,
        },
        HoldControl {
            reached: reached_rx,
            release: release_tx,
        },
    )
}

/// A scripted model whose calls can be held before their terminal event. A held call pays
/// no attention to the cancellation token: it waits for the test alone.
#[derive(Clone)]
struct HeldModel {
    script: ScriptedModel,
    holds: Arc<Mutex<VecDeque<Option<Hold>>>>,
    tokens: Arc<Mutex<Vec<CancellationToken>>>,
}

impl HeldModel {
    /// `holds[n]` is call n's hold; calls past the list are not held.
    fn new(turns: Vec<ScriptedTurn>, holds: Vec<Option<Hold>>) -> Self {
        HeldModel {
            script: ScriptedModel::new(turns),
            holds: Arc::new(Mutex::new(holds.into())),
            tokens: Arc::default(),
        }
    }

    fn requests(&self) -> Vec<AgentContext> {
        self.script.requests()
    }

    fn tokens(&self) -> Vec<CancellationToken> {
        lock(&self.tokens).clone()
    }
}

impl Model for HeldModel {
    fn stream(
        &self,
        context: &AgentContext,
        options: StreamOptions,
    ) -> AssistantMessageEventStream {
        if let Some(token) = &options.cancel {
            lock(&self.tokens).push(token.clone());
        }
        let inner = self.script.stream(context, options);
        let hold = lock(&self.holds).pop_front().flatten();
        let outer = assistant_message_event_stream();
        let forward = outer.clone();
        tokio::spawn(async move {
            let mut hold = hold;
            while let Some(event) = inner.next().await {
                let terminal = matches!(event, ModelEvent::Done { .. } | ModelEvent::Error { .. });
                if terminal {
                    if let Some(Hold { reached, release }) = hold.take() {
                        let _ = reached.send(());
                        let _ = release.await;
                    }
                }
                forward.push(event);
            }
            forward.end(inner.result().await);
        });
        outer
    }
}

fn registry(tools: Vec<SharedTool>) -> ToolRegistry {
    ToolRegistry::new(tools).expect("测试用的工具名互不相同，Registry 应当建成")
}

fn any_arguments() -> Schema<Value> {
    Schema::new(None, |arguments: &Value| Ok(arguments.clone()))
}

/// `work` reports each start on `started`, then waits for a permit from `gate`.
fn gated_tool(
    started: tokio::sync::mpsc::UnboundedSender<String>,
    gate: Arc<Semaphore>,
) -> SharedTool {
    Tool::new(
        "work",
        "Work until the test releases it",
        any_arguments(),
        move |_: Value, context: ToolContext| {
            let started = started.clone();
            let gate = Arc::clone(&gate);
            async move {
                let _ = started.send(context.call_id.clone());
                let _permit = gate.acquire().await.expect("测试不会关闭 semaphore");
                Ok(ToolOutput::text(&format!("done:{}", context.call_id)))
            }
        },
    )
    .shared()
}

fn agent(model: &HeldModel, tools: Vec<SharedTool>, system_prompt: Option<&str>) -> Agent {
    let mut options = AgentOptions::new(Arc::new(model.clone()), registry(tools));
    options.system_prompt = system_prompt.map(str::to_string);
    Agent::new(options)
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

/// Each message as `role:text`, timestamps aside.
fn lines(messages: &[AgentMessage]) -> Vec<String> {
    messages
        .iter()
        .zip(roles(messages))
        .map(|(message, role)| format!("{role}:{}", text_of(message)))
        .collect()
}

/// Agent events in short form; model stream events are left out.
fn trace(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::RunStart { run_id, .. } => Some(format!("run_start:{run_id}")),
            AgentEvent::Loop { event, .. } => match event {
                LoopEvent::Model(_) | LoopEvent::ToolProgress { .. } => None,
                LoopEvent::AssistantMessage(_) => Some("assistant".to_string()),
                LoopEvent::ToolStart(call) => Some(format!("tool_start:{}", call.id)),
                LoopEvent::ToolEnd(result) => Some(format!("tool_end:{}", result.tool_call_id)),
                LoopEvent::ToolSkipped(result) => {
                    Some(format!("tool_skipped:{}", result.tool_call_id))
                }
                LoopEvent::TurnEnd(_) => Some("turn_end".to_string()),
            },
            AgentEvent::Delivered { messages, .. } => Some(format!(
                "delivered:{}",
                messages.iter().map(text_of).collect::<Vec<_>>().join("|")
            )),
            AgentEvent::RunEnd { run_id, .. } => Some(format!("run_end:{run_id}")),
        })
        .collect()
}

type Recorded = Arc<Mutex<Vec<AgentEvent>>>;

/// A listener that keeps every event it sees.
fn record(agent: &Agent) -> (Recorded, Subscription) {
    let events: Recorded = Arc::default();
    let sink = Arc::clone(&events);
    let subscription = agent.subscribe(move |event, _state| lock(&sink).push(event.clone()));
    (events, subscription)
}

fn recorded(events: &Recorded) -> Vec<AgentEvent> {
    lock(events).clone()
}

#[tokio::test]
async fn steering_waits_for_every_result_of_a_two_call_batch() {
    let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let gate = Arc::new(Semaphore::new(0));
    let model = HeldModel::new(
        vec![
            ScriptedTurn::tool_calls(vec![
                tool_call("call-b9", "work", json!({})),
                tool_call("call-a3", "work", json!({})),
            ]),
            ScriptedTurn::text("都好了"),
        ],
        Vec::new(),
    );
    let agent = agent(&model, vec![gated_tool(started, Arc::clone(&gate))], None);
    let run = agent.prompt("两件事").expect("空闲时接受 prompt");
    within("第一个工具开始", started_rx.recv()).await;
    within("第二个工具开始", started_rx.recv()).await;
    agent.steer("顺便看看日志").expect("运行中必须接受插话");
    gate.add_permits(1);
    gate.add_permits(1);
    let result = within("带插话的运行", run).await;
    assert_eq!(result.reason, RunReason::Stop, "插话之后运行照常结束");
    assert_eq!(
        lines(&model.requests()[1].messages),
        [
            "user:两件事",
            "assistant:",
            "toolResult:done:call-b9",
            "toolResult:done:call-a3",
            "user:顺便看看日志"
        ],
        "插话必须等整批结果按调用顺序写完之后才进入"
    );
}

#[tokio::test]
async fn an_abort_pairs_every_pending_call_of_the_batch() {
    let stubborn = Tool::new(
        "hang",
        "Never finishes",
        any_arguments(),
        |_: Value, _context: ToolContext| std::future::pending::<Result<ToolOutput, ToolError>>(),
    )
    .shared();
    let (hold_model, control) = hold();
    let model = HeldModel::new(
        vec![ScriptedTurn::tool_calls(vec![
            tool_call("h-2", "hang", json!({})),
            tool_call("h-1", "hang", json!({})),
        ])],
        vec![Some(hold_model)],
    );
    let agent = agent(&model, vec![stubborn], None);
    let (events, subscription) = record(&agent);
    let run = agent.prompt("挂住").expect("空闲时接受 prompt");
    within("模型被调用", control.reached)
        .await
        .expect("hold 不会被丢弃");
    let _ = control.release.send(());
    // Wait until both calls have started, as the state shows it.
    while agent.state().pending_tool_calls.len() < 2 {
        tokio::task::yield_now().await;
    }
    assert!(agent.abort(), "运行中 abort 返回 true");
    let result = within("中止的运行", run).await;
    drop(subscription);
    assert_eq!(
        result.reason,
        RunReason::Aborted,
        "中止的运行以 aborted 结束"
    );
    assert!(
        model.tokens().iter().all(CancellationToken::is_cancelled),
        "abort 必须取消交给模型的令牌"
    );
    let paired: Vec<(String, Option<Value>)> = result
        .messages
        .iter()
        .filter_map(|message| match message {
            AgentMessage::ToolResult(result) => {
                Some((result.tool_call_id.clone(), result.details.clone()))
            }
            _ => None,
        })
        .collect();
    let aborted = Some(json!({"skipped": true, "reason": "aborted"}));
    assert_eq!(
        paired,
        [
            ("h-2".to_string(), aborted.clone()),
            ("h-1".to_string(), aborted)
        ],
        "两个没完成的调用各有一个 aborted 结果，按调用顺序"
    );
    let ends = trace(&recorded(&events))
        .into_iter()
        .filter(|line| line.starts_with("run_end"))
        .count();
    assert_eq!(ends, 1, "一次运行恰好一个 run_end");
}

#[tokio::test]
async fn a_patch_on_the_first_run_follows_the_base_prompt() {
    let model = HeldModel::new(vec![ScriptedTurn::text("嗯")], Vec::new());
    let agent = agent(&model, Vec::new(), Some("base-7"));
    let first = agent
        .prompt(Prompt::new("hi").with_system("patch-7"))
        .expect("空闲时接受 prompt");
    assert_eq!(
        agent.prompt("again").map(|run| run.run_id()),
        Err(AgentError::Busy),
        "第一次运行没结束时第二个 prompt 必须被拒绝"
    );
    within("第一次运行", first).await;
    assert_eq!(
        lines(&model.requests()[0].messages),
        ["system:base-7", "system:patch-7", "user:hi"],
        "基础 system prompt 在最前，补丁紧挨在用户消息之前"
    );
}
