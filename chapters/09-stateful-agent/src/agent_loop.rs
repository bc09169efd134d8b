//! The agent loop: model → tool calls → tool results → model, until the model stops.
//!
//! Invariants: the caller's context is never mutated; every tool call in the transcript gets
//! exactly one result (executed or skipped); results are appended in call order even though
//! calls run concurrently and finish in any order; exactly one `TurnEnd` is emitted.
//!
//! Chapter 09 adds optional message queues: a caller may hand the loop messages while it runs.
//! They enter only at points where the transcript is whole — after a fully paired tool batch,
//! or after a text stop — so the pairing invariant holds with or without them.

use std::future::Future;
use std::sync::Arc;

use serde_json::json;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::tool::{execute_tool_call, failed_result, CallContext, ProgressReporter, ToolRegistry};
use crate::types::{
    now_ms, text, AgentContext, AgentMessage, AssistantContent, AssistantMessage, Model,
    ModelEvent, StopReason, StreamOptions, TextContent, ToolCall, ToolResultMessage,
};

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunReason {
    Stop,
    Length,
    Error,
    Aborted,
    /// A course addition, not an upstream guarantee: the step bound was reached.
    MaxSteps,
}

/// What the loop reports while it runs, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum LoopEvent {
    Model(ModelEvent),
    AssistantMessage(AssistantMessage),
    ToolStart(ToolCall),
    ToolProgress {
        call_id: String,
        content: Vec<TextContent>,
    },
    ToolEnd(ToolResultMessage),
    ToolSkipped(ToolResultMessage),
    TurnEnd(RunReason),
}

#[derive(Debug, Clone, PartialEq)]
pub struct AgentRunResult {
    pub reason: RunReason,
    pub messages: Vec<AgentMessage>,
    /// Model turns taken.
    pub steps: usize,
}

pub type EventSink = Arc<dyn Fn(LoopEvent) + Send + Sync>;

pub const DEFAULT_MAX_STEPS: usize = 32;

/// Messages waiting outside a run, taken by the loop at its safe points. Each call hands over
/// (and forgets) what waits now, oldest first.
pub trait MessageQueues: Send + Sync {
    /// Steering: enters after a fully paired tool batch or a text stop.
    fn take_steering(&self) -> Vec<AgentMessage>;
    /// Follow-ups: enter only after a natural stop, when no steering waits.
    fn take_follow_ups(&self) -> Vec<AgentMessage>;
}

pub struct AgentLoopOptions {
    pub model: Arc<dyn Model>,
    pub tools: ToolRegistry,
    pub context: AgentContext,
    pub cancel: CancellationToken,
    pub on_event: Option<EventSink>,
    pub max_steps: usize,
    /// `None`: nothing enters the run from outside (chapter 07's loop).
    pub queues: Option<Arc<dyn MessageQueues>>,
}

impl AgentLoopOptions {
    pub fn new(model: Arc<dyn Model>, tools: ToolRegistry, context: AgentContext) -> Self {
        AgentLoopOptions {
            model,
            tools,
            context,
            cancel: CancellationToken::new(),
            on_event: None,
            max_steps: DEFAULT_MAX_STEPS,
            queues: None,
        }
    }
}

impl RunReason {
    /// How the run ends after a model turn that stopped with `stop_reason` and asked for
    /// `calls`, or `None` when the calls are to be executed and the loop goes on.
    fn after_turn(stop_reason: StopReason, calls: &[ToolCall]) -> Option<RunReason> {
        match (stop_reason, calls.is_empty()) {
            (StopReason::Stop, true) => Some(RunReason::Stop),
            (StopReason::ToolUse, false) => None,
            (StopReason::ToolUse, true) => Some(RunReason::Error),
            (StopReason::Stop, false) => Some(RunReason::Error),
            (StopReason::Length, _) => Some(RunReason::Length),
            (StopReason::Error, _) => Some(RunReason::Error),
            (StopReason::Aborted, _) => Some(RunReason::Aborted),
        }
    }
}

/// Why a call was not executed, as `details.reason` says it.
fn skip_reason(stop_reason: StopReason) -> &'static str {
    match stop_reason {
        StopReason::Length => "length",
        StopReason::Error => "error",
        StopReason::Aborted => "aborted",
        StopReason::Stop | StopReason::ToolUse => "unexpected-stop",
    }
}

/// A paired result for a call the loop decided not to run.
pub fn skipped_result(call: &ToolCall, reason: &str) -> ToolResultMessage {
    let explanation = match reason {
        "length" => "the model response was truncated".to_string(),
        "unexpected-stop" => "the model returned stop with a tool call".to_string(),
        other => format!("the model turn ended with {other}"),
    };
    ToolResultMessage {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: vec![text(&format!(
            "Tool call was not executed because {explanation}."
        ))],
        details: Some(json!({"skipped": true, "reason": reason})),
        is_error: true,
        timestamp: now_ms(),
    }
}

/// Runs the loop to its single end.
pub async fn run_agent_loop(options: AgentLoopOptions) -> AgentRunResult {
    let mut run = Run::new(&options);
    for _ in 0..options.max_steps {
        if options.cancel.is_cancelled() {
            return run.finish(RunReason::Aborted);
        }
        let assistant = run.collect_model_turn().await;
        let calls = tool_calls(&assistant);
        if let Some(reason) = RunReason::after_turn(assistant.stop_reason, &calls) {
            run.skip_all(&calls, assistant.stop_reason);
            // region: Lab 9.5 text stop takes queued messages
            // stub: // Lab 9.5: after a text stop, queued messages may keep the run going
            if reason == RunReason::Stop && run.take_after_stop() {
                continue;
            }
            // endregion
            return run.finish(reason);
        }
        run.execute_batch(&calls).await;
        // The batch's results are kept, but the model is not asked again.
        if options.cancel.is_cancelled() {
            return run.finish(RunReason::Aborted);
        }
        // region: Lab 9.5 steering after a paired batch
        // stub: // Lab 9.5: steering waiting after a paired batch enters here
        run.take_steering();
        // endregion
    }
    run.finish(RunReason::MaxSteps)
}

/// The tool calls of an assistant message, in order.
fn tool_calls(message: &AssistantMessage) -> Vec<ToolCall> {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            AssistantContent::ToolCall(call) => Some(call.clone()),
            AssistantContent::Text(_) => None,
        })
        .collect()
}

/// Where loop events go: the caller's sink, if there is one. Cheap to clone into tasks and
/// progress callbacks.
#[derive(Clone)]
struct Events(Option<EventSink>);

impl Events {
    fn emit(&self, event: LoopEvent) {
        if let Some(sink) = &self.0 {
            sink(event);
        }
    }
}

/// One run's own state: its copy of the transcript and the model turns taken so far.
struct Run<'a> {
    options: &'a AgentLoopOptions,
    events: Events,
    messages: Vec<AgentMessage>,
    steps: usize,
}

impl<'a> Run<'a> {
    fn new(options: &'a AgentLoopOptions) -> Self {
        Run {
            options,
            events: Events(options.on_event.clone()),
            // A copy: the caller's context is never touched.
            messages: options.context.messages.clone(),
            steps: 0,
        }
    }

    /// Ends the run: its single `TurnEnd`, then the result.
    fn finish(self, reason: RunReason) -> AgentRunResult {
        self.events.emit(LoopEvent::TurnEnd(reason));
        AgentRunResult {
            reason,
            messages: self.messages,
            steps: self.steps,
        }
    }

    /// One model request with the transcript so far and the registry's definitions: forwards
    /// every event, then appends the final assistant message and reports it.
    async fn collect_model_turn(&mut self) -> AssistantMessage {
        self.steps += 1;
        let request = AgentContext {
            messages: self.messages.clone(),
            tools: self.options.tools.definitions(),
        };
        let stream = self.options.model.stream(
            &request,
            StreamOptions {
                cancel: Some(self.options.cancel.clone()),
            },
        );
        while let Some(event) = stream.next().await {
            self.events.emit(LoopEvent::Model(event));
        }
        let assistant = stream.result().await;
        self.messages
            .push(AgentMessage::Assistant(assistant.clone()));
        self.events
            .emit(LoopEvent::AssistantMessage(assistant.clone()));
        assistant
    }

    /// Steering waiting now enters the transcript, oldest first; true when any did.
    fn take_steering(&mut self) -> bool {
        // region: Lab 9.5 take_steering
        // stub: false
        let Some(queues) = &self.options.queues else {
            return false;
        };
        let steering = queues.take_steering();
        let entered = !steering.is_empty();
        self.messages.extend(steering);
        entered
        // endregion
    }

    /// After a natural stop the run goes on only for queued messages: steering first, else
    /// follow-ups. An abort wins over both: they stay queued for the caller to see.
    fn take_after_stop(&mut self) -> bool {
        // region: Lab 9.5 take_after_stop
        // stub: false
        let Some(queues) = self.options.queues.clone() else {
            return false;
        };
        if self.options.cancel.is_cancelled() {
            return false;
        }
        if self.take_steering() {
            return true;
        }
        let follow_ups = queues.take_follow_ups();
        let entered = !follow_ups.is_empty();
        self.messages.extend(follow_ups);
        entered
        // endregion
    }

    /// A turn that ends the run still gives every one of its calls exactly one (skipped) result.
    fn skip_all(&mut self, calls: &[ToolCall], stop_reason: StopReason) {
        let reason = skip_reason(stop_reason);
        for call in calls {
            let result = skipped_result(call, reason);
            self.messages.push(AgentMessage::ToolResult(result.clone()));
            self.events.emit(LoopEvent::ToolSkipped(result));
        }
    }

    /// One tool round trip: `ToolStart` for every call, then the batch, then its results
    /// appended in call order.
    async fn execute_batch(&mut self, calls: &[ToolCall]) {
        for call in calls {
            self.events.emit(LoopEvent::ToolStart(call.clone()));
        }
        let results = self.run_concurrently(calls).await;
        self.messages
            .extend(results.into_iter().map(AgentMessage::ToolResult));
    }

    /// What one call runs with: the run's cancellation token, and progress reported as
    /// `ToolProgress` under `call_id`.
    fn call_context(&self, call_id: &str) -> CallContext {
        let events = self.events.clone();
        let call_id = call_id.to_string();
        let progress = ProgressReporter::new(move |content| {
            events.emit(LoopEvent::ToolProgress {
                call_id: call_id.clone(),
                content,
            });
        });
        CallContext {
            cancel: self.options.cancel.clone(),
            progress,
        }
    }

    /// Executes one call; `ToolEnd` goes out as soon as its result is there. The future owns
    /// everything it needs, so it can run on a task of its own.
    fn execute_call(
        &self,
        call: &ToolCall,
        context: CallContext,
    ) -> impl Future<Output = ToolResultMessage> + Send + 'static {
        let call = call.clone();
        let tools = self.options.tools.clone();
        let events = self.events.clone();
        async move {
            let result = execute_tool_call(&call, &tools, context).await;
            events.emit(LoopEvent::ToolEnd(result.clone()));
            result
        }
    }

    /// Runs every call of a batch on its own task, so `ToolEnd` follows completion order, and
    /// returns the results in call order. (Until Lab 7.4 it handles a batch of one call.)
    async fn run_concurrently(&self, calls: &[ToolCall]) -> Vec<ToolResultMessage> {
        let mut running = JoinSet::new();
        for (index, call) in calls.iter().enumerate() {
            let task = self.execute_call(call, self.call_context(&call.id));
            running.spawn(async move { (index, task.await) });
        }
        let mut results: Vec<Option<ToolResultMessage>> = vec![None; calls.len()];
        while let Some(joined) = running.join_next().await {
            // The executor already turns tool panics into results; a failed join is unexpected,
            // and its call is filled in below so pairing still holds.
            if let Ok((index, result)) = joined {
                results[index] = Some(result);
            }
        }
        results
            .into_iter()
            .zip(calls)
            .map(|(result, call)| result.unwrap_or_else(|| failed_result(call, "工具任务异常结束")))
            .collect()
    }
}
