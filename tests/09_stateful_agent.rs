//! Chapter 09 acceptance tests: the stateful Agent.
//!
//! Group k only needs Labs 9.1 … 9.k: `reducer` is pure, `lifecycle` runs prompts without
//! listeners, only `subscribers` subscribes, only `abort` aborts, only `queues` steers or
//! queues follow-ups. Ordering is made with oneshot gates and semaphores, never with sleeps;
//! the tests run on tokio's default single-threaded test runtime.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Duration;

use pi_course::agent::*;
use pi_course::agent_loop::{LoopEvent, RunReason};
use pi_course::scripted_model::{tool_call, ScriptedModel, ScriptedTurn};
use pi_course::tool::*;
use pi_course::types::*;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

// --- helpers --------------------------------------------------------------------------------

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

fn user(value: &str) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: vec![text(value)],
        timestamp: 1,
    })
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

fn assistant(value: &str) -> AssistantMessage {
    assistant_message(vec![AssistantContent::Text(text(value))], StopReason::Stop)
}

// --- Lab 9.1 ----------------------------------------------------------------------------------

mod reducer {
    use super::*;

    fn running(run_id: RunId, messages: Vec<AgentMessage>) -> AgentState {
        AgentState {
            status: AgentStatus::Running,
            run_id: Some(run_id),
            messages,
            ..AgentState::default()
        }
    }

    fn delta(value: &str) -> LoopEvent {
        LoopEvent::Model(ModelEvent::TextDelta {
            content_index: 0,
            delta: value.to_string(),
            partial: assistant(value),
        })
    }

    fn result(call_id: &str) -> ToolResultMessage {
        ToolResultMessage {
            tool_call_id: call_id.to_string(),
            tool_name: "work".to_string(),
            content: vec![text(&format!("done:{call_id}"))],
            details: None,
            is_error: false,
            timestamp: 1,
        }
    }

    fn on(run_id: RunId, event: LoopEvent) -> AgentEvent {
        AgentEvent::Loop { run_id, event }
    }

    #[test]
    fn run_start_follows_the_new_run_from_a_clean_slate() {
        let old = AgentState {
            status: AgentStatus::Idle,
            run_id: Some(1),
            messages: vec![user("一")],
            streaming_text: "半句".into(),
            pending_tool_calls: vec![tool_call("w1", "work", json!({}))],
            steps: 3,
            last_reason: Some(RunReason::Error),
            error: Some("provider stream failed".into()),
        };
        let opening = vec![user("一"), user("二")];
        let next = reduce(
            &old,
            &AgentEvent::RunStart {
                run_id: 2,
                messages: opening.clone(),
            },
        );
        assert_eq!(
            next,
            running(2, opening),
            "run_start 必须开始跟随新运行：Running、新的 run_id、开场 transcript，其余全部清空"
        );
        assert_eq!(old.run_id, Some(1), "reduce 不能改动传入的旧状态");
    }

    #[test]
    fn text_deltas_stream_until_the_assistant_message_arrives() {
        let state = running(1, vec![user("你好")]);
        let state = reduce(&state, &on(1, delta("你")));
        let state = reduce(&state, &on(1, delta("好")));
        assert_eq!(
            state.streaming_text, "你好",
            "text_delta 必须按到达顺序累积成流式文本"
        );
        assert_eq!(
            state.messages,
            vec![user("你好")],
            "流式阶段不能往 transcript 里加消息"
        );
        let message = assistant("你好");
        let state = reduce(&state, &on(1, LoopEvent::AssistantMessage(message.clone())));
        assert_eq!(
            state.streaming_text, "",
            "assistant 消息到达后流式文本必须清空"
        );
        assert_eq!(
            state.messages,
            vec![user("你好"), AgentMessage::Assistant(message)],
            "assistant 消息到达时必须追加进 transcript"
        );
        assert_eq!(state.steps, 1, "每条 assistant 消息算一个模型回合");
        assert_eq!(state.error, None, "没有 error_message 的回合不能留下错误");
    }

    #[test]
    fn a_tool_call_is_pending_until_its_result_arrives() {
        let first = tool_call("w1", "work", json!({"n": 1}));
        let second = tool_call("w2", "work", json!({"n": 2}));
        let state = running(1, Vec::new());
        let state = reduce(&state, &on(1, LoopEvent::ToolStart(first.clone())));
        let state = reduce(&state, &on(1, LoopEvent::ToolStart(second.clone())));
        assert_eq!(
            state.pending_tool_calls,
            vec![first.clone(), second.clone()],
            "tool_start 必须按开始顺序记下待答的工具调用"
        );
        let state = reduce(&state, &on(1, LoopEvent::ToolEnd(result("w2"))));
        assert_eq!(
            state.pending_tool_calls,
            vec![first],
            "结果到达后只去掉它配对的那个调用"
        );
        let state = reduce(&state, &on(1, LoopEvent::ToolSkipped(result("w1"))));
        assert_eq!(
            state.pending_tool_calls,
            Vec::new(),
            "跳过的结果同样配对了它的调用"
        );
        assert_eq!(
            roles(&state.messages),
            ["toolResult", "toolResult"],
            "执行的与跳过的结果都要进 transcript"
        );
        assert_eq!(
            lines(&state.messages),
            ["toolResult:done:w2", "toolResult:done:w1"],
            "运行中的 transcript 按结果到达的顺序增长"
        );
    }

    #[test]
    fn run_end_settles_on_the_loop_transcript() {
        let mut state = running(1, vec![user("一")]);
        state.streaming_text = "写到一半".into();
        state.pending_tool_calls = vec![tool_call("w1", "work", json!({}))];
        let settled = vec![user("一"), AgentMessage::Assistant(assistant("好"))];
        let next = reduce(
            &state,
            &AgentEvent::RunEnd {
                run_id: 1,
                reason: RunReason::Aborted,
                messages: settled.clone(),
                unsent: vec![user("插话")],
            },
        );
        let expected = AgentState {
            status: AgentStatus::Idle,
            run_id: Some(1),
            messages: settled,
            last_reason: Some(RunReason::Aborted),
            ..AgentState::default()
        };
        assert_eq!(
            next, expected,
            "run_end 必须回到 Idle，用循环的 transcript 代替运行中拼出的那份，清空流式文本与待答调用，记下原因"
        );
    }

    #[test]
    fn late_events_of_another_run_change_nothing() {
        let current = running(2, vec![user("二")]);
        let snapshot = current.clone();
        let late = [
            on(1, LoopEvent::AssistantMessage(assistant("旧的"))),
            on(1, delta("旧")),
            AgentEvent::Delivered {
                run_id: 1,
                messages: vec![user("旧插话")],
            },
            AgentEvent::RunEnd {
                run_id: 1,
                reason: RunReason::Stop,
                messages: Vec::new(),
                unsent: Vec::new(),
            },
            AgentEvent::RunStart {
                run_id: 1,
                messages: Vec::new(),
            },
        ];
        for event in &late {
            assert!(
                !accepts(&current, event),
                "运行 2 进行中，{event:?} 是别的运行的迟到事件"
            );
            assert_eq!(
                reduce(&current, event),
                snapshot,
                "迟到事件 {event:?} 不能改变状态"
            );
        }
        let ended = reduce(
            &current,
            &AgentEvent::RunEnd {
                run_id: 2,
                reason: RunReason::Stop,
                messages: vec![user("二")],
                unsent: Vec::new(),
            },
        );
        let after_end = on(2, LoopEvent::AssistantMessage(assistant("结束之后")));
        assert!(
            !accepts(&ended, &after_end),
            "运行结束之后，它自己的事件也是迟到事件"
        );
        assert_eq!(
            reduce(&ended, &after_end),
            ended,
            "运行结束之后的事件不能改变状态"
        );
        assert_eq!(current, snapshot, "reduce 不能改动传入的状态");
    }
}

// --- Lab 9.2 ----------------------------------------------------------------------------------

mod lifecycle {
    use super::*;

    #[tokio::test]
    async fn a_prompt_runs_to_its_end_on_one_transcript() {
        let (first_hold, control) = hold();
        let model = HeldModel::new(vec![ScriptedTurn::text("好的")], vec![Some(first_hold)]);
        let agent = agent(&model, Vec::new(), Some("你是 pi"));
        let run = agent.prompt("你好").expect("空闲的 Agent 必须接受 prompt");
        assert_eq!(run.run_id(), 1, "第一次运行的编号是 1");
        within("模型被调用", control.reached)
            .await
            .expect("HeldModel 的 hold 不会被丢弃");
        let working = agent.state();
        assert_eq!(
            working.status,
            AgentStatus::Running,
            "运行中状态必须是 Running"
        );
        assert_eq!(
            working.streaming_text, "好的",
            "运行中状态必须看得见流式文本"
        );
        let _ = control.release.send(());
        let result = within("第一次运行", run).await;
        assert_eq!(result.reason, RunReason::Stop, "纯文本回合以 stop 结束");
        assert_eq!(
            lines(&result.messages),
            ["system:你是 pi", "user:你好", "assistant:好的"],
            "system prompt 在最前，然后是用户消息和回答"
        );
        assert_eq!(
            lines(&model.requests()[0].messages),
            ["system:你是 pi", "user:你好"],
            "模型收到的 transcript 以 system prompt 开头，以本次的用户消息结尾"
        );
        let state = agent.state();
        assert_eq!(
            state.status,
            AgentStatus::Idle,
            "运行结束后状态必须回到 Idle"
        );
        assert_eq!(state.run_id, Some(1), "状态记着最后一次运行");
        assert_eq!(
            state.last_reason,
            Some(RunReason::Stop),
            "状态记下运行的结束原因"
        );
        assert_eq!(
            state.messages, result.messages,
            "结束后的状态就是这次运行的 transcript"
        );
    }

    #[tokio::test]
    async fn a_prompt_while_busy_is_refused_at_once() {
        let model = HeldModel::new(
            vec![ScriptedTurn::text("一号"), ScriptedTurn::text("三号")],
            Vec::new(),
        );
        let agent = agent(&model, Vec::new(), None);
        let first = agent.prompt("一").expect("空闲的 Agent 必须接受 prompt");
        // Nothing has been awaited yet: the first run has not even started working.
        let second = agent.prompt("二");
        let Err(error) = second else {
            panic!("上一个 prompt 还没结束时必须立刻拒绝（运行位要在 prompt 里同步占住，而不是等任务跑起来）");
        };
        assert_eq!(error, AgentError::Busy, "忙时的拒绝必须是 AgentError::Busy");
        assert!(
            error.to_string().contains("Agent is busy"),
            "Busy 的说明必须包含 Agent is busy，得到 {error}"
        );
        let result = within("第一次运行", first).await;
        assert_eq!(
            lines(&result.messages),
            ["user:一", "assistant:一号"],
            "被拒绝的 prompt 不能进入 transcript"
        );
        let third = agent.prompt("三").expect("运行结束后必须能再次 prompt");
        assert_eq!(third.run_id(), 2, "被拒绝的 prompt 不占运行编号");
        within("第二次运行", third).await;
        assert_eq!(model.requests().len(), 2, "被拒绝的 prompt 不能请求模型");
    }

    #[tokio::test]
    async fn later_runs_continue_the_same_transcript() {
        let model = HeldModel::new(
            vec![ScriptedTurn::text("答一"), ScriptedTurn::text("答二")],
            Vec::new(),
        );
        let agent = agent(&model, Vec::new(), Some("基础提示"));
        within(
            "第一次运行",
            agent.prompt("问一").expect("空闲时接受 prompt"),
        )
        .await;
        let result = within(
            "第二次运行",
            agent.prompt("问二").expect("空闲时接受 prompt"),
        )
        .await;
        assert_eq!(
            lines(&model.requests()[1].messages),
            [
                "system:基础提示",
                "user:问一",
                "assistant:答一",
                "user:问二"
            ],
            "第二次运行必须接着第一次的 transcript，system prompt 只出现一次且在最前"
        );
        assert_eq!(
            lines(&result.messages),
            [
                "system:基础提示",
                "user:问一",
                "assistant:答一",
                "user:问二",
                "assistant:答二"
            ],
            "运行结果是整份共享 transcript"
        );
    }

    #[tokio::test]
    async fn a_system_patch_lands_right_before_its_user_message() {
        let model = HeldModel::new(
            vec![
                ScriptedTurn::text("答一"),
                ScriptedTurn::text("答二"),
                ScriptedTurn::text("答三"),
            ],
            Vec::new(),
        );
        let agent = agent(&model, Vec::new(), Some("基础提示"));
        within(
            "第一次运行",
            agent.prompt("问一").expect("空闲时接受 prompt"),
        )
        .await;
        let patched = Prompt::new("问二").with_system("只用中文回答");
        within(
            "第二次运行",
            agent.prompt(patched).expect("空闲时接受 prompt"),
        )
        .await;
        within(
            "第三次运行",
            agent.prompt("问三").expect("空闲时接受 prompt"),
        )
        .await;
        let requests = model.requests();
        assert_eq!(
            lines(&requests[1].messages),
            [
                "system:基础提示",
                "user:问一",
                "assistant:答一",
                "system:只用中文回答",
                "user:问二"
            ],
            "本次 prompt 的 system 补丁必须紧挨在它的用户消息之前"
        );
        assert_eq!(
            roles(&requests[2].messages),
            [
                "system",
                "user",
                "assistant",
                "system",
                "user",
                "assistant",
                "user"
            ],
            "补丁只属于那一次 prompt：下一次不能再加 system message"
        );
    }

    #[tokio::test]
    async fn a_failed_model_turn_ends_the_run_and_the_agent_stays_usable() {
        let model = HeldModel::new(
            vec![
                ScriptedTurn::error("provider stream failed"),
                ScriptedTurn::text("恢复了"),
            ],
            Vec::new(),
        );
        let agent = agent(&model, Vec::new(), None);
        let failed = within("失败的运行", agent.prompt("一").expect("空闲时接受 prompt")).await;
        assert_eq!(
            failed.reason,
            RunReason::Error,
            "模型失败的回合让运行以 error 结束"
        );
        let state = agent.state();
        assert_eq!(
            state.status,
            AgentStatus::Idle,
            "失败的运行也必须释放运行位"
        );
        assert_eq!(
            state.error.as_deref(),
            Some("provider stream failed"),
            "状态必须带着模型的错误信息"
        );
        assert_eq!(
            state.last_reason,
            Some(RunReason::Error),
            "状态记下 error 结束"
        );
        let next = within(
            "下一次运行",
            agent.prompt("二").expect("失败之后必须能再次 prompt"),
        )
        .await;
        assert_eq!(next.reason, RunReason::Stop, "失败之后的运行照常进行");
        assert_eq!(agent.state().error, None, "新运行开始时旧的错误必须清掉");
    }
}

// --- Lab 9.3 ----------------------------------------------------------------------------------

mod subscribers {
    use super::*;

    /// Runs `call` on a helper thread inside the test's runtime and waits for it up to a
    /// second: a listener called while the state lock is held then fails the test instead of
    /// deadlocking it (a `std::sync::Mutex` is not reentrant).
    fn outside<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (sender, receiver) = mpsc::channel();
        let runtime = tokio::runtime::Handle::current();
        std::thread::spawn(move || {
            let _entered = runtime.enter();
            let _ = sender.send(call());
        });
        receiver.recv_timeout(Duration::from_secs(1)).ok()
    }

    #[tokio::test]
    async fn listeners_run_after_the_state_is_updated_and_outside_the_lock() {
        let model = HeldModel::new(vec![ScriptedTurn::text("好的")], Vec::new());
        let agent = agent(&model, Vec::new(), None);
        // (event kind, status in the snapshot, whether state() read from outside matches it)
        type Seen = Vec<(String, AgentStatus, Option<bool>)>;
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let subscription = {
            let agent = agent.clone();
            let seen = Arc::clone(&seen);
            agent.clone().subscribe(move |event, state| {
                let kind = match event {
                    AgentEvent::RunStart { .. } => "run_start",
                    AgentEvent::RunEnd { .. } => "run_end",
                    _ => return,
                };
                let agent = agent.clone();
                let current = outside(move || agent.state());
                let same = current.map(|current| *current == *state);
                lock(&seen).push((kind.to_string(), state.status, same));
            })
        };
        let result = within("运行", agent.prompt("你好").expect("空闲时接受 prompt")).await;
        drop(subscription);
        assert_eq!(
            *lock(&seen),
            [
                ("run_start".to_string(), AgentStatus::Running, Some(true)),
                ("run_end".to_string(), AgentStatus::Idle, Some(true)),
            ],
            "监听器拿到的快照必须是事件之后的状态，state() 此时已经更新，而且在监听器里读得到（None 表示监听器被调用时还持有状态锁）"
        );
        assert_eq!(
            agent.state().messages,
            result.messages,
            "结束后的状态就是运行的 transcript"
        );
    }

    #[tokio::test]
    async fn a_panicking_listener_does_not_disturb_the_others() {
        let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
        let gate = Arc::new(Semaphore::new(1));
        let model = HeldModel::new(
            vec![
                ScriptedTurn::tool_calls(vec![tool_call("w1", "work", json!({}))]),
                ScriptedTurn::text("完成"),
            ],
            Vec::new(),
        );
        let agent = agent(&model, vec![gated_tool(started, gate)], None);
        let broken = agent.subscribe(|_event, _state| panic!("broken renderer"));
        let (events, observer) = record(&agent);
        let result = within("运行", agent.prompt("开始").expect("空闲时接受 prompt")).await;
        assert_eq!(
            started_rx.recv().await.as_deref(),
            Some("w1"),
            "工具照常执行"
        );
        drop((broken, observer));
        assert_eq!(
            result.reason,
            RunReason::Stop,
            "监听器 panic 不能影响运行本身"
        );
        assert_eq!(
            trace(&recorded(&events)),
            [
                "run_start:1",
                "assistant",
                "tool_start:w1",
                "tool_end:w1",
                "assistant",
                "turn_end",
                "run_end:1"
            ],
            "另一个监听器 panic 时，其余监听器仍然收到每一个事件"
        );
        assert_eq!(
            agent.state().status,
            AgentStatus::Idle,
            "监听器 panic 之后运行位必须释放"
        );
    }

    #[tokio::test]
    async fn dropping_a_subscription_stops_only_that_listener() {
        let model = HeldModel::new(
            vec![ScriptedTurn::text("一"), ScriptedTurn::text("二")],
            Vec::new(),
        );
        let agent = agent(&model, Vec::new(), None);
        let (first, first_subscription) = record(&agent);
        let (second, second_subscription) = record(&agent);
        within("第一次运行", agent.prompt("一").expect("空闲时接受 prompt")).await;
        drop(first_subscription);
        within("第二次运行", agent.prompt("二").expect("空闲时接受 prompt")).await;
        let starts = |events: &Recorded| {
            trace(&recorded(events))
                .into_iter()
                .filter(|line| line.starts_with("run_"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            starts(&first),
            ["run_start:1", "run_end:1"],
            "Subscription 被 drop 之后，它的监听器不能再收到事件"
        );
        assert_eq!(
            starts(&second),
            ["run_start:1", "run_end:1", "run_start:2", "run_end:2"],
            "别人退订不能影响还在订阅的监听器"
        );
        drop(second_subscription);
    }

    #[tokio::test]
    async fn a_listener_that_starts_the_next_run_keeps_the_order() {
        let model = HeldModel::new(
            vec![ScriptedTurn::text("一"), ScriptedTurn::text("二")],
            Vec::new(),
        );
        let agent = agent(&model, Vec::new(), None);
        type Started = Option<Result<RunHandle, AgentError>>;
        let next_run: Arc<Mutex<Started>> = Arc::default();
        let starter = {
            let agent = agent.clone();
            let next_run = Arc::clone(&next_run);
            agent.clone().subscribe(move |event, _state| {
                if let AgentEvent::RunEnd { run_id: 1, .. } = event {
                    let agent = agent.clone();
                    *lock(&next_run) = outside(move || agent.prompt("二"));
                }
            })
        };
        let (events, observer) = record(&agent);
        within("第一次运行", agent.prompt("一").expect("空闲时接受 prompt")).await;
        let second = lock(&next_run)
            .take()
            .expect("run_end:1 的监听器必须被调用，并且能在里面调用 prompt（监听器被调用时不能持有状态锁）")
            .expect("run_end 发出时运行位必须已经释放，监听器可以开始下一次运行");
        within("第二次运行", second).await;
        drop((starter, observer));
        assert_eq!(
            trace(&recorded(&events))
                .into_iter()
                .filter(|line| line.starts_with("run_"))
                .collect::<Vec<_>>(),
            ["run_start:1", "run_end:1", "run_start:2", "run_end:2"],
            "监听器里开始的下一次运行，事件必须排在当前事件送完之后（FIFO）"
        );
    }
}

// --- Lab 9.4 ----------------------------------------------------------------------------------

mod abort {
    use super::*;

    #[tokio::test]
    async fn an_abort_before_the_run_works_ends_it_exactly_once() {
        let model = HeldModel::new(vec![ScriptedTurn::text("不该出现")], Vec::new());
        let agent = agent(&model, Vec::new(), None);
        assert!(!agent.abort(), "没有运行时 abort 什么也不做，返回 false");
        let (events, subscription) = record(&agent);
        let run = agent.prompt("一").expect("空闲时接受 prompt");
        assert!(agent.abort(), "有运行时 abort 返回 true");
        let result = within("预先中止的运行", run).await;
        drop(subscription);
        assert_eq!(
            result.reason,
            RunReason::Aborted,
            "开始前就被中止的运行以 aborted 结束"
        );
        assert_eq!(
            lines(&result.messages),
            ["user:一"],
            "中止的运行保留已经写下的 transcript"
        );
        assert_eq!(
            model.requests().len(),
            0,
            "开始前就被中止的运行不能请求模型"
        );
        let ends = trace(&recorded(&events))
            .into_iter()
            .filter(|line| line.starts_with("run_end"))
            .count();
        assert_eq!(ends, 1, "一次运行恰好一个 run_end");
        assert_eq!(
            agent.state().last_reason,
            Some(RunReason::Aborted),
            "状态记下 aborted"
        );
    }

    #[tokio::test]
    async fn the_same_token_reaches_model_and_tools_and_pairing_holds() {
        let tool_token: Arc<Mutex<Option<CancellationToken>>> = Arc::default();
        let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let stubborn = {
            let tool_token = Arc::clone(&tool_token);
            Tool::new(
                "wait",
                "Never finishes",
                any_arguments(),
                move |_: Value, context: ToolContext| {
                    *lock(&tool_token) = Some(context.cancel.clone());
                    let _ = started.send(context.call_id.clone());
                    // Ignores its token on purpose: the run must settle anyway.
                    std::future::pending::<Result<ToolOutput, ToolError>>()
                },
            )
            .shared()
        };
        let model = HeldModel::new(
            vec![ScriptedTurn::tool_calls(vec![tool_call(
                "c7",
                "wait",
                json!({}),
            )])],
            Vec::new(),
        );
        let agent = agent(&model, vec![stubborn], None);
        let run = agent.prompt("等").expect("空闲时接受 prompt");
        within("工具开始", started_rx.recv()).await;
        assert!(agent.abort(), "运行中 abort 返回 true");
        let result = within("中止的运行（工具不理会取消）", run).await;
        assert_eq!(
            result.reason,
            RunReason::Aborted,
            "工具不理会取消，运行也必须以 aborted 收尾"
        );
        let model_token = model
            .tokens()
            .first()
            .cloned()
            .expect("模型必须收到取消令牌");
        let tool_token = lock(&tool_token).clone().expect("工具必须被调用");
        assert!(
            model_token.is_cancelled(),
            "abort 必须取消交给模型的那个令牌"
        );
        assert!(
            tool_token.is_cancelled(),
            "abort 必须取消交给工具的那个令牌"
        );
        assert_eq!(
            roles(&result.messages),
            ["user", "assistant", "toolResult"],
            "中止时每个已经开始的工具调用也恰好有一个结果"
        );
        let AgentMessage::ToolResult(paired) = &result.messages[2] else {
            unreachable!("上面已经检查过角色");
        };
        assert_eq!(paired.tool_call_id, "c7", "补上的结果配对原调用的 id");
        assert!(paired.is_error, "没有完成的调用，结果是错误");
        assert_eq!(
            paired.details,
            Some(json!({"skipped": true, "reason": "aborted"})),
            "没有完成的调用用 aborted 的跳过结果配对"
        );
        assert_eq!(
            agent.state().pending_tool_calls,
            Vec::new(),
            "收尾后没有待答的调用"
        );
    }

    #[tokio::test]
    async fn an_abort_settles_the_run_even_when_the_model_ignores_it() {
        let (model_hold, control) = hold();
        let model = HeldModel::new(
            vec![ScriptedTurn::text("永远说不完")],
            vec![Some(model_hold)],
        );
        let agent = agent(&model, Vec::new(), None);
        let run = agent.prompt("说").expect("空闲时接受 prompt");
        within("模型被调用", control.reached)
            .await
            .expect("HeldModel 的 hold 不会被丢弃");
        assert_eq!(
            agent.state().streaming_text,
            "永远说不完",
            "运行中看得见流式文本"
        );
        assert!(agent.abort(), "运行中 abort 返回 true");
        let result = within("中止的运行（模型不理会取消）", run).await;
        assert_eq!(
            result.reason,
            RunReason::Aborted,
            "模型不理会取消，运行也必须以 aborted 收尾"
        );
        assert_eq!(
            lines(&result.messages),
            ["user:说"],
            "没说完的回答不能进 transcript"
        );
        let state = agent.state();
        assert_eq!(state.status, AgentStatus::Idle, "中止之后运行位必须释放");
        assert_eq!(state.streaming_text, "", "中止之后流式文本必须清空");
        drop(control.release);
    }

    #[tokio::test]
    async fn every_run_gets_a_fresh_token() {
        let model = HeldModel::new(vec![ScriptedTurn::text("第二次")], Vec::new());
        let agent = agent(&model, Vec::new(), None);
        let first = agent.prompt("一").expect("空闲时接受 prompt");
        agent.abort();
        within("被中止的运行", first).await;
        let second = within(
            "下一次运行",
            agent.prompt("二").expect("中止之后必须能再次 prompt"),
        )
        .await;
        assert_eq!(
            second.reason,
            RunReason::Stop,
            "上一次的中止不能影响下一次运行：每次运行一个新令牌"
        );
        let tokens = model.tokens();
        assert_eq!(tokens.len(), 1, "只有第二次运行请求了模型");
        assert!(
            !tokens[0].is_cancelled(),
            "第二次运行的令牌不能是已经取消的那个"
        );
    }
}

// --- Lab 9.5 ----------------------------------------------------------------------------------

mod queues {
    use super::*;

    #[tokio::test]
    async fn steering_enters_after_the_tool_batch_is_paired() {
        let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
        let gate = Arc::new(Semaphore::new(0));
        let model = HeldModel::new(
            vec![
                ScriptedTurn::tool_calls(vec![tool_call("w1", "work", json!({}))]),
                ScriptedTurn::text("收到"),
            ],
            Vec::new(),
        );
        let agent = agent(&model, vec![gated_tool(started, Arc::clone(&gate))], None);
        let (events, subscription) = record(&agent);
        let run = agent.prompt("开始").expect("空闲时接受 prompt");
        within("工具开始", started_rx.recv()).await;
        agent.steer("先看测试").expect("运行中必须接受插话");
        agent.steer("再看文档").expect("运行中必须接受插话");
        gate.add_permits(1);
        let result = within("带插话的运行", run).await;
        drop(subscription);
        assert_eq!(
            model.requests().len(),
            2,
            "取走的插话必须离开队列：每条插话只进入一次"
        );
        assert_eq!(
            lines(&model.requests()[1].messages),
            [
                "user:开始",
                "assistant:",
                "toolResult:done:w1",
                "user:先看测试",
                "user:再看文档"
            ],
            "插话必须在整批工具结果之后、下一次请求之前按 FIFO 进入"
        );
        assert_eq!(
            trace(&recorded(&events)),
            [
                "run_start:1",
                "assistant",
                "tool_start:w1",
                "tool_end:w1",
                "delivered:先看测试|再看文档",
                "assistant",
                "turn_end",
                "run_end:1"
            ],
            "插话进入 transcript 时必须发出 Delivered 事件"
        );
        assert_eq!(result.reason, RunReason::Stop, "插话之后运行照常结束");
    }

    #[tokio::test]
    async fn steering_at_a_text_stop_keeps_the_run_going() {
        let (first_hold, control) = hold();
        let model = HeldModel::new(
            vec![ScriptedTurn::text("第一版"), ScriptedTurn::text("第二版")],
            vec![Some(first_hold)],
        );
        let agent = agent(&model, Vec::new(), None);
        let run = agent.prompt("写").expect("空闲时接受 prompt");
        within("模型被调用", control.reached)
            .await
            .expect("HeldModel 的 hold 不会被丢弃");
        agent.steer("改一下").expect("运行中必须接受插话");
        let _ = control.release.send(());
        let result = within("带插话的运行", run).await;
        assert_eq!(
            lines(&result.messages),
            [
                "user:写",
                "assistant:第一版",
                "user:改一下",
                "assistant:第二版"
            ],
            "文本停止时有插话，运行不结束：插话进入 transcript，再问一次模型"
        );
        assert_eq!(result.reason, RunReason::Stop, "第二个文本回合结束运行");
        assert_eq!(result.steps, 2, "插话让运行多走一个模型回合");
    }

    #[tokio::test]
    async fn a_follow_up_waits_for_a_natural_stop() {
        let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
        let gate = Arc::new(Semaphore::new(0));
        let model = HeldModel::new(
            vec![
                ScriptedTurn::tool_calls(vec![tool_call("w1", "work", json!({}))]),
                ScriptedTurn::text("做完了"),
                ScriptedTurn::text("补充完了"),
            ],
            Vec::new(),
        );
        let agent = agent(&model, vec![gated_tool(started, Arc::clone(&gate))], None);
        let run = agent.prompt("做").expect("空闲时接受 prompt");
        within("工具开始", started_rx.recv()).await;
        agent.follow_up("再补一句").expect("运行中必须接受追加消息");
        gate.add_permits(1);
        let result = within("带追加消息的运行", run).await;
        let requests = model.requests();
        assert_eq!(
            lines(&requests[1].messages),
            ["user:做", "assistant:", "toolResult:done:w1"],
            "追加消息不能在工具批次之后进入，只能等自然停止"
        );
        assert_eq!(requests.len(), 3, "追加消息让运行在自然停止后再请求一次");
        assert_eq!(
            lines(&result.messages),
            [
                "user:做",
                "assistant:",
                "toolResult:done:w1",
                "assistant:做完了",
                "user:再补一句",
                "assistant:补充完了"
            ],
            "追加消息在文本停止之后进入，运行接着走"
        );
    }

    #[tokio::test]
    async fn an_abort_wins_over_queued_messages() {
        let (first_hold, control) = hold();
        let model = HeldModel::new(
            vec![ScriptedTurn::text("一"), ScriptedTurn::text("重来")],
            vec![Some(first_hold)],
        );
        let agent = agent(&model, Vec::new(), None);
        let (events, subscription) = record(&agent);
        let run = agent.prompt("开始").expect("空闲时接受 prompt");
        within("模型被调用", control.reached)
            .await
            .expect("HeldModel 的 hold 不会被丢弃");
        agent.steer("插话").expect("运行中必须接受插话");
        agent.follow_up("追加").expect("运行中必须接受追加消息");
        assert!(agent.abort(), "运行中 abort 返回 true");
        assert_eq!(
            agent.steer("太晚了"),
            Err(AgentError::NotRunning),
            "被中止的运行不再接受插话"
        );
        let _ = control.release.send(());
        let result = within("中止的运行", run).await;
        assert_eq!(result.reason, RunReason::Aborted, "中止优先于排队的消息");
        assert_eq!(
            model.requests().len(),
            1,
            "中止之后排队的消息不能让运行再请求模型"
        );
        let unsent = recorded(&events).into_iter().find_map(|event| match event {
            AgentEvent::RunEnd { unsent, .. } => Some(lines(&unsent)),
            _ => None,
        });
        assert_eq!(
            unsent,
            Some(vec!["user:插话".to_string(), "user:追加".to_string()]),
            "没送出的排队消息必须随 run_end 交还，先插话后追加"
        );
        let retry = within(
            "中止之后的运行",
            agent.prompt("重新开始").expect("中止之后必须能再次 prompt"),
        )
        .await;
        drop(subscription);
        assert_eq!(
            lines(&model.requests()[1].messages),
            ["user:开始", "user:重新开始"],
            "上一次运行排队的消息不能漏进下一次运行"
        );
        assert_eq!(retry.reason, RunReason::Stop, "retry after abort 照常结束");
    }

    #[tokio::test]
    async fn nothing_queued_outlives_its_run() {
        let (first_hold, control) = hold();
        let model = HeldModel::new(
            vec![ScriptedTurn::error("boom"), ScriptedTurn::text("好了")],
            vec![Some(first_hold)],
        );
        let agent = agent(&model, Vec::new(), None);
        let idle = agent.steer("太早了");
        assert_eq!(
            idle,
            Err(AgentError::NotRunning),
            "没有运行时插话必须被拒绝"
        );
        let Err(error) = idle else {
            unreachable!("上面已经检查过")
        };
        assert!(
            error.to_string().contains("没有在运行"),
            "NotRunning 的说明必须说 Agent 没有在运行，得到 {error}"
        );
        assert_eq!(
            agent.follow_up("也太早了"),
            Err(AgentError::NotRunning),
            "没有运行时追加消息必须被拒绝"
        );
        let (events, subscription) = record(&agent);
        let run = agent.prompt("一").expect("空闲时接受 prompt");
        within("模型被调用", control.reached)
            .await
            .expect("HeldModel 的 hold 不会被丢弃");
        agent.steer("修一下").expect("运行中必须接受插话");
        let _ = control.release.send(());
        let failed = within("失败的运行", run).await;
        assert_eq!(
            failed.reason,
            RunReason::Error,
            "error 回合结束运行，插话不能让它继续"
        );
        assert_eq!(
            agent.steer("结束之后"),
            Err(AgentError::NotRunning),
            "运行结束之后插话必须被拒绝"
        );
        within("下一次运行", agent.prompt("二").expect("空闲时接受 prompt")).await;
        drop(subscription);
        let unsent: Vec<Vec<String>> = recorded(&events)
            .into_iter()
            .filter_map(|event| match event {
                AgentEvent::RunEnd { unsent, .. } => Some(lines(&unsent)),
                _ => None,
            })
            .collect();
        assert_eq!(
            unsent,
            [vec!["user:修一下".to_string()], Vec::new()],
            "没被取走的插话随它那次运行的 run_end 交还，下一次运行没有剩余"
        );
        assert_eq!(
            roles(&model.requests()[1].messages),
            ["user", "assistant", "user"],
            "没被取走的插话不能漏进下一次运行"
        );
    }
}
