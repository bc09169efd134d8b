//! A stateful Agent: one handle around chapter 07's loop that keeps the transcript between
//! runs, lets others watch its state, and takes an abort, steering and follow-ups while a run
//! works.
//!
//! Invariants: at most one run is active; every event first updates the state, then reaches
//! the listeners, one event at a time and in the order the events happened — also when a
//! listener starts the next run; no listener is ever called while the state lock is held; a run
//! ends with exactly one `RunEnd`, and every tool call in its transcript has exactly one result.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::agent_loop::{
    run_agent_loop, skipped_result, AgentLoopOptions, AgentRunResult, EventSink, LoopEvent,
    MessageQueues, RunReason, DEFAULT_MAX_STEPS,
};
use crate::tool::ToolRegistry;
use crate::types::{
    now_ms, user_message, AgentContext, AgentMessage, Model, ModelEvent, SystemMessage, ToolCall,
};

/// Runs are numbered from 1 in the order `prompt` accepted them.
pub type RunId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AgentStatus {
    #[default]
    Idle,
    Running,
}

/// What a watcher sees. A pure function of the events so far (`reduce`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentState {
    pub status: AgentStatus,
    /// The run the state follows: the active one, or the last one to end.
    pub run_id: Option<RunId>,
    /// The shared transcript. While a run works it grows as events arrive; its `RunEnd`
    /// replaces it with the loop's own transcript.
    pub messages: Vec<AgentMessage>,
    /// Text of the assistant message being streamed; empty between messages.
    pub streaming_text: String,
    /// Calls started and not yet answered, in start order.
    pub pending_tool_calls: Vec<ToolCall>,
    /// Model turns of the current (or last) run.
    pub steps: usize,
    /// How the last run ended; `None` while it works.
    pub last_reason: Option<RunReason>,
    /// The error text of the last failed model turn of this run.
    pub error: Option<String>,
}

/// Everything the Agent reports, in the order it happened.
// `Loop` is the common case (every streamed delta); boxing it would add an allocation per
// event only to shrink the rarer variants.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    RunStart {
        run_id: RunId,
        /// The transcript the run starts from, this prompt's messages included.
        messages: Vec<AgentMessage>,
    },
    Loop {
        run_id: RunId,
        event: LoopEvent,
    },
    /// Queued messages (steering or follow-ups) just entered the run's transcript.
    Delivered {
        run_id: RunId,
        messages: Vec<AgentMessage>,
    },
    RunEnd {
        run_id: RunId,
        reason: RunReason,
        messages: Vec<AgentMessage>,
        /// Queued messages the run never took: handed back, not silently dropped.
        unsent: Vec<AgentMessage>,
    },
}

impl AgentEvent {
    pub fn run_id(&self) -> RunId {
        match self {
            AgentEvent::RunStart { run_id, .. }
            | AgentEvent::Loop { run_id, .. }
            | AgentEvent::Delivered { run_id, .. }
            | AgentEvent::RunEnd { run_id, .. } => *run_id,
        }
    }
}

/// Whether `state` takes `event`: a newer run's start, or an event of the run it follows while
/// that run works. Anything else is a late event of another run.
pub fn accepts(state: &AgentState, event: &AgentEvent) -> bool {
    // region: Lab 9.1 accepts
    match event {
        AgentEvent::RunStart { run_id, .. } => state.run_id.is_none_or(|current| *run_id > current),
        other => state.status == AgentStatus::Running && state.run_id == Some(other.run_id()),
    }
    // endregion
}

/// The state after `event`. Pure: `state` is only read, the answer is a new value.
pub fn reduce(state: &AgentState, event: &AgentEvent) -> AgentState {
    // region: Lab 9.1 reduce
    if !accepts(state, event) {
        return state.clone();
    }
    let mut next = state.clone();
    match event {
        AgentEvent::RunStart { run_id, messages } => {
            next = AgentState {
                status: AgentStatus::Running,
                run_id: Some(*run_id),
                messages: messages.clone(),
                ..AgentState::default()
            };
        }
        AgentEvent::Loop { event, .. } => apply_loop_event(&mut next, event),
        AgentEvent::Delivered { messages, .. } => next.messages.extend(messages.iter().cloned()),
        AgentEvent::RunEnd {
            reason, messages, ..
        } => {
            next.status = AgentStatus::Idle;
            next.messages = messages.clone();
            next.streaming_text.clear();
            next.pending_tool_calls.clear();
            next.last_reason = Some(*reason);
        }
    }
    next
    // endregion
}

/// One loop event of the followed run.
fn apply_loop_event(state: &mut AgentState, event: &LoopEvent) {
    // region: Lab 9.1 apply_loop_event
    match event {
        LoopEvent::Model(ModelEvent::TextDelta { delta, .. }) => {
            state.streaming_text.push_str(delta)
        }
        LoopEvent::AssistantMessage(message) => {
            state.streaming_text.clear();
            state.steps += 1;
            if message.error_message.is_some() {
                state.error = message.error_message.clone();
            }
            state
                .messages
                .push(AgentMessage::Assistant(message.clone()));
        }
        LoopEvent::ToolStart(call) => state.pending_tool_calls.push(call.clone()),
        LoopEvent::ToolEnd(result) | LoopEvent::ToolSkipped(result) => {
            state
                .pending_tool_calls
                .retain(|call| call.id != result.tool_call_id);
            state
                .messages
                .push(AgentMessage::ToolResult(result.clone()));
        }
        LoopEvent::Model(_) | LoopEvent::ToolProgress { .. } | LoopEvent::TurnEnd(_) => {}
    }
    // endregion
}

/// The transcript of a run that was stopped before its loop could answer: what the state has
/// seen, and a skipped result for every call still pending, so pairing holds.
fn interrupted(state: &AgentState, reason: RunReason) -> AgentRunResult {
    // region: Lab 9.4 interrupted
    let skip = match reason {
        RunReason::Aborted => "aborted",
        _ => "error",
    };
    let mut messages = state.messages.clone();
    messages.extend(
        state
            .pending_tool_calls
            .iter()
            .map(|call| AgentMessage::ToolResult(skipped_result(call, skip))),
    );
    AgentRunResult {
        reason,
        messages,
        steps: state.steps,
    }
    // endregion
}

/// Why the Agent refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentError {
    /// `prompt` while a run is active.
    Busy,
    /// `steer` / `follow_up` with no run to take them (or one that is being aborted).
    NotRunning,
    /// `prompt` outside a tokio runtime: there is nowhere to run the loop.
    NoRuntime,
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentError::Busy => write!(f, "Agent is busy：上一次运行还没有结束"),
            AgentError::NotRunning => {
                write!(f, "Agent 没有在运行：插话和追加消息只能排进正在进行的运行")
            }
            AgentError::NoRuntime => write!(f, "prompt 必须在 tokio 运行时里调用"),
        }
    }
}

impl std::error::Error for AgentError {}

/// One prompt: the user's text and, optionally, a system patch for this run.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub text: String,
    pub system: Option<String>,
}

impl Prompt {
    pub fn new(text: &str) -> Self {
        Prompt {
            text: text.to_string(),
            system: None,
        }
    }

    /// A system patch that lands right before this run's user message.
    pub fn with_system(mut self, patch: &str) -> Self {
        self.system = Some(patch.to_string());
        self
    }
}

impl From<&str> for Prompt {
    fn from(text: &str) -> Self {
        Prompt::new(text)
    }
}

pub struct AgentOptions {
    pub model: Arc<dyn Model>,
    pub tools: ToolRegistry,
    /// Becomes the first system message of the transcript.
    pub system_prompt: Option<String>,
    pub max_steps: usize,
}

impl AgentOptions {
    pub fn new(model: Arc<dyn Model>, tools: ToolRegistry) -> Self {
        AgentOptions {
            model,
            tools,
            system_prompt: None,
            max_steps: DEFAULT_MAX_STEPS,
        }
    }
}

/// A listener sees each event with the state right after it: a shared, read-only snapshot.
pub type Listener = Arc<dyn Fn(&AgentEvent, &AgentState) + Send + Sync>;

/// The active run: its number and its own cancellation token.
struct ActiveRun {
    id: RunId,
    cancel: CancellationToken,
}

/// Everything behind the Agent's one lock.
#[derive(Default)]
struct Core {
    state: Arc<AgentState>,
    listeners: Vec<(u64, Listener)>,
    next_listener: u64,
    /// Events recorded but not yet delivered, each with the state it produced.
    pending: VecDeque<(AgentEvent, Arc<AgentState>)>,
    /// Someone is delivering `pending` right now; others only queue.
    dispatching: bool,
    last_run: RunId,
    active: Option<ActiveRun>,
    steering: VecDeque<AgentMessage>,
    follow_ups: VecDeque<AgentMessage>,
}

impl Core {
    /// Applies `event` to the state and queues it, with the state it produced, for the
    /// listeners. A late event of another run changes nothing and reaches no one.
    fn record(&mut self, event: AgentEvent) {
        // region: Lab 9.2 record
        if !accepts(&self.state, &event) {
            return;
        }
        self.state = Arc::new(reduce(&self.state, &event));
        self.pending.push_back((event, Arc::clone(&self.state)));
        // endregion
    }
}

struct Inner {
    model: Arc<dyn Model>,
    tools: ToolRegistry,
    system_prompt: Option<String>,
    max_steps: usize,
    core: Mutex<Core>,
}

/// A cheap handle: clones share one Agent.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

impl Agent {
    pub fn new(options: AgentOptions) -> Self {
        Agent {
            inner: Arc::new(Inner {
                model: options.model,
                tools: options.tools,
                system_prompt: options.system_prompt,
                max_steps: options.max_steps,
                core: Mutex::default(),
            }),
        }
    }

    /// An Agent that resumes a transcript: chapter 09's `pi` uses it for every task of a session,
    /// chapter 13's composition root for a stored session path. It owns `messages` (the caller's
    /// copy is moved in, never shared), so nothing the caller does later reaches this Agent.
    pub fn with_messages(options: AgentOptions, messages: Vec<AgentMessage>) -> Self {
        let agent = Agent::new(options);
        agent.lock().state = Arc::new(AgentState {
            messages,
            ..AgentState::default()
        });
        agent
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        lock(&self.inner)
    }

    /// The state right now.
    pub fn state(&self) -> Arc<AgentState> {
        // region: Lab 9.2 state
        Arc::clone(&self.lock().state)
        // endregion
    }

    /// Starts a run and returns at once: the run works on a task of its own, the handle
    /// awaits its result. The run slot is claimed here, synchronously — never later.
    pub fn prompt(&self, prompt: impl Into<Prompt>) -> Result<RunHandle, AgentError> {
        // region: Lab 9.2 prompt
        let prompt = prompt.into();
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| AgentError::NoRuntime)?;
        let (run_id, options) = {
            let mut core = self.lock();
            if core.active.is_some() {
                return Err(AgentError::Busy);
            }
            core.last_run += 1;
            let run_id = core.last_run;
            let cancel = CancellationToken::new();
            core.active = Some(ActiveRun {
                id: run_id,
                cancel: cancel.clone(),
            });
            let messages = self.opening_messages(&core.state.messages, prompt);
            core.record(AgentEvent::RunStart {
                run_id,
                messages: messages.clone(),
            });
            (run_id, self.loop_options(run_id, messages, cancel))
        };
        self.dispatch();
        let task = runtime.spawn(self.clone().drive(run_id, options));
        Ok(RunHandle { run_id, task })
        // endregion
    }

    /// The transcript a run starts from: the shared one (the base system prompt first when it
    /// is still empty), this prompt's system patch, then its user message.
    fn opening_messages(&self, transcript: &[AgentMessage], prompt: Prompt) -> Vec<AgentMessage> {
        // region: Lab 9.2 opening_messages
        let mut messages = transcript.to_vec();
        if messages.is_empty() {
            if let Some(base) = &self.inner.system_prompt {
                messages.push(system_message(base));
            }
        }
        if let Some(patch) = &prompt.system {
            messages.push(system_message(patch));
        }
        messages.push(user_message(&prompt.text));
        messages
        // endregion
    }

    /// Chapter 07's options for one run: its token, its event sink, its queues.
    fn loop_options(
        &self,
        run_id: RunId,
        messages: Vec<AgentMessage>,
        cancel: CancellationToken,
    ) -> AgentLoopOptions {
        // region: Lab 9.2 loop_options
        let agent = self.clone();
        let sink: EventSink = Arc::new(move |event| {
            agent.lock().record(AgentEvent::Loop { run_id, event });
            agent.dispatch();
        });
        let mut options = AgentLoopOptions::new(
            Arc::clone(&self.inner.model),
            self.inner.tools.clone(),
            AgentContext {
                messages,
                ..AgentContext::default()
            },
        );
        options.cancel = cancel;
        options.on_event = Some(sink);
        options.max_steps = self.inner.max_steps;
        options.queues = Some(Arc::new(RunQueues {
            agent: Arc::downgrade(&self.inner),
            run_id,
        }));
        options
        // endregion
    }

    /// The run's task: the loop on a task of its own, so an abort can settle the run even
    /// when the model or a tool never looks at the token.
    async fn drive(self, run_id: RunId, options: AgentLoopOptions) -> AgentRunResult {
        let cancel = options.cancel.clone();
        let mut running = tokio::spawn(run_agent_loop(options));
        // region: Lab 9.4 abort settles the run
        // stub: let finished = running.await.ok();
        let finished = tokio::select! {
            // The loop's own answer wins when both are ready.
            biased;
            joined = &mut running => joined.ok(),
            () = cancel.cancelled() => {
                running.abort();
                // On a multi-thread runtime the loop may be in the middle of a poll right
                // now: wait until it has really stopped, so nothing it records can land
                // after the run's end. If it finished first after all, its answer counts.
                running.await.ok()
            }
        };
        // endregion
        self.settle(run_id, finished, cancel.is_cancelled())
    }

    /// Ends the run: frees the slot and records its single `RunEnd` under one lock, so a
    /// `prompt` from anywhere (a listener included) starts the next run after this end.
    fn settle(
        &self,
        run_id: RunId,
        finished: Option<AgentRunResult>,
        cancelled: bool,
    ) -> AgentRunResult {
        // region: Lab 9.2 settle
        let result = {
            let mut core = self.lock();
            let result = finished.unwrap_or_else(|| {
                // No answer from the loop: it was stopped (abort) or it panicked.
                let reason = if cancelled {
                    RunReason::Aborted
                } else {
                    RunReason::Error
                };
                interrupted(&core.state, reason)
            });
            core.active = None;
            // region: Lab 9.5 hand back what was never taken
            // stub: let unsent = Vec::new();
            let mut unsent: Vec<AgentMessage> = core.steering.drain(..).collect();
            unsent.extend(core.follow_ups.drain(..));
            // endregion
            core.record(AgentEvent::RunEnd {
                run_id,
                reason: result.reason,
                messages: result.messages.clone(),
                unsent,
            });
            result
        };
        self.dispatch();
        result
        // endregion
    }

    /// Cancels the active run's token; `false` when no run is active.
    pub fn abort(&self) -> bool {
        // region: Lab 9.4 abort
        match &self.lock().active {
            Some(run) => {
                run.cancel.cancel();
                true
            }
            None => false,
        }
        // endregion
    }

    /// Queues a user message that enters the active run at its next safe point.
    pub fn steer(&self, text: &str) -> Result<(), AgentError> {
        // region: Lab 9.5 steer
        self.enqueue(text, |core| &mut core.steering)
        // endregion
    }

    /// Queues a user message that enters the active run only after a natural stop.
    pub fn follow_up(&self, text: &str) -> Result<(), AgentError> {
        // region: Lab 9.5 follow_up
        self.enqueue(text, |core| &mut core.follow_ups)
        // endregion
    }

    // region: Lab 9.5 answer-only enqueue
    fn enqueue(
        &self,
        text: &str,
        queue: fn(&mut Core) -> &mut VecDeque<AgentMessage>,
    ) -> Result<(), AgentError> {
        let mut core = self.lock();
        // An aborted run takes nothing more: abort wins over both queues.
        let open = core
            .active
            .as_ref()
            .is_some_and(|run| !run.cancel.is_cancelled());
        if !open {
            return Err(AgentError::NotRunning);
        }
        queue(&mut core).push_back(user_message(text));
        Ok(())
    }
    // endregion

    /// Adds a listener; it stays until the returned `Subscription` is dropped.
    pub fn subscribe(
        &self,
        listener: impl Fn(&AgentEvent, &AgentState) + Send + Sync + 'static,
    ) -> Subscription {
        // region: Lab 9.3 subscribe
        let mut core = self.lock();
        core.next_listener += 1;
        let id = core.next_listener;
        core.listeners.push((id, Arc::new(listener)));
        Subscription {
            agent: Arc::downgrade(&self.inner),
            id,
        }
        // endregion
    }

    /// Delivers recorded events, oldest first, one at a time, with the lock released while a
    /// listener runs. Whoever finds delivery already under way only leaves its event queued:
    /// that keeps the order even when a listener starts the next run.
    fn dispatch(&self) {
        // region: Lab 9.3 dispatch
        // stub: self.lock().pending.clear();
        {
            let mut core = self.lock();
            if core.dispatching {
                return;
            }
            core.dispatching = true;
        }
        loop {
            let (event, state, listeners) = {
                let mut core = self.lock();
                let Some((event, state)) = core.pending.pop_front() else {
                    core.dispatching = false;
                    return;
                };
                let listeners: Vec<Listener> = core
                    .listeners
                    .iter()
                    .map(|(_, listener)| Arc::clone(listener))
                    .collect();
                (event, state, listeners)
            };
            for listener in listeners {
                // A panicking listener must not stop the others, nor the run.
                let _ = catch_unwind(AssertUnwindSafe(|| listener(&event, &state)));
            }
        }
        // endregion
    }
}

fn lock(inner: &Inner) -> MutexGuard<'_, Core> {
    // Listeners run outside the lock and their panics are caught, so a poisoned lock only
    // means a bug elsewhere already reported itself; the state is still whole.
    inner.core.lock().unwrap_or_else(PoisonError::into_inner)
}

fn system_message(content: &str) -> AgentMessage {
    AgentMessage::System(SystemMessage {
        content: content.to_string(),
        sections: None,
        timestamp: now_ms(),
    })
}

/// Unsubscribes when dropped. It holds the Agent weakly: a forgotten subscription does not
/// keep the Agent alive.
#[must_use = "dropping the Subscription unsubscribes at once"]
pub struct Subscription {
    agent: Weak<Inner>,
    id: u64,
}

impl Subscription {
    /// Keeps the listener for the Agent's whole life.
    pub fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // region: Lab 9.3 unsubscribe on drop
        // stub: // Lab 9.3: take this listener out of the Agent (a panic in drop would abort)
        if let Some(inner) = self.agent.upgrade() {
            lock(&inner).listeners.retain(|(id, _)| *id != self.id);
        }
        // endregion
    }
}

/// The queues as one run's loop sees them: only the active run takes anything.
struct RunQueues {
    agent: Weak<Inner>,
    run_id: RunId,
}

impl RunQueues {
    /// Hands over everything queued in `queue`, oldest first, and reports its delivery.
    fn take(&self, queue: fn(&mut Core) -> &mut VecDeque<AgentMessage>) -> Vec<AgentMessage> {
        // region: Lab 9.5 RunQueues::take
        let Some(inner) = self.agent.upgrade() else {
            return Vec::new();
        };
        let agent = Agent { inner };
        let taken: Vec<AgentMessage> = {
            let mut core = agent.lock();
            let ours = core
                .active
                .as_ref()
                .is_some_and(|run| run.id == self.run_id);
            if !ours {
                return Vec::new();
            }
            let taken: Vec<AgentMessage> = queue(&mut core).drain(..).collect();
            if !taken.is_empty() {
                core.record(AgentEvent::Delivered {
                    run_id: self.run_id,
                    messages: taken.clone(),
                });
            }
            taken
        };
        agent.dispatch();
        taken
        // endregion
    }
}

impl MessageQueues for RunQueues {
    fn take_steering(&self) -> Vec<AgentMessage> {
        self.take(|core| &mut core.steering)
    }

    fn take_follow_ups(&self) -> Vec<AgentMessage> {
        self.take(|core| &mut core.follow_ups)
    }
}

/// A started run. Awaiting it gives the run's result; dropping it does not stop the run.
pub struct RunHandle {
    run_id: RunId,
    task: JoinHandle<AgentRunResult>,
}

impl RunHandle {
    pub fn run_id(&self) -> RunId {
        self.run_id
    }
}

impl Future for RunHandle {
    type Output = AgentRunResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<AgentRunResult> {
        Pin::new(&mut self.task)
            .poll(cx)
            .map(|joined| match joined {
                Ok(result) => result,
                // The run task catches what the loop does; only a bug of its own lands here.
                Err(error) if error.is_panic() => resume_unwind(error.into_panic()),
                Err(error) => panic!("Agent 的运行任务被取消：{error}"),
            })
    }
}
