//! The agent loop: model → tool calls → tool results → model, until the model stops.
//!
//! Invariants: the caller's context is never mutated; every tool call in the transcript gets
//! exactly one result (executed or skipped); results are appended in call order even though
//! calls run concurrently and finish in any order; exactly one `TurnEnd` is emitted.

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

pub struct AgentLoopOptions {
    pub model: Arc<dyn Model>,
    pub tools: ToolRegistry,
    pub context: AgentContext,
    pub cancel: CancellationToken,
    pub on_event: Option<EventSink>,
    pub max_steps: usize,
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
        }
    }
}

impl RunReason {
    /// How the run ends after a model turn that stopped with `stop_reason` and asked for
    /// `calls`, or `None` when the calls are to be executed and the loop goes on.
    fn after_turn(stop_reason: StopReason, calls: &[ToolCall]) -> Option<RunReason> {
        match (stop_reason, calls.is_empty()) {
            // region: Lab 7.1 plain stop
            // stub: (StopReason::Stop, true) => todo!(),
            (StopReason::Stop, true) => Some(RunReason::Stop),
            // endregion
            // region: Lab 7.2 tool use goes on
            // stub: (StopReason::ToolUse, false) => todo!(),
            (StopReason::ToolUse, false) => None,
            // endregion
            // region: Lab 7.3 non-executing endings
            // stub: _ => todo!(),
            (StopReason::ToolUse, true) => Some(RunReason::Error),
            (StopReason::Stop, false) => Some(RunReason::Error),
            (StopReason::Length, _) => Some(RunReason::Length),
            (StopReason::Error, _) => Some(RunReason::Error),
            (StopReason::Aborted, _) => Some(RunReason::Aborted),
            // endregion
        }
    }
}

/// Why a call was not executed, as `details.reason` says it.
fn skip_reason(stop_reason: StopReason) -> &'static str {
    // region: Lab 7.3 skip_reason
    match stop_reason {
        StopReason::Length => "length",
        StopReason::Error => "error",
        StopReason::Aborted => "aborted",
        StopReason::Stop | StopReason::ToolUse => "unexpected-stop",
    }
    // endregion
}

/// A paired result for a call the loop decided not to run.
pub fn skipped_result(call: &ToolCall, reason: &str) -> ToolResultMessage {
    // region: Lab 7.3 skipped_result
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
    // endregion
}

/// Runs the loop to its single end.
pub async fn run_agent_loop(options: AgentLoopOptions) -> AgentRunResult {
    let mut run = Run::new(&options);
    for _ in 0..options.max_steps {
        // region: Lab 7.5 cancelled before a model turn
        // stub: if options.cancel.is_cancelled() { todo!() }
        if options.cancel.is_cancelled() {
            return run.finish(RunReason::Aborted);
        }
        // endregion
        let assistant = run.collect_model_turn().await;
        let calls = tool_calls(&assistant);
        if let Some(reason) = RunReason::after_turn(assistant.stop_reason, &calls) {
            run.skip_all(&calls, assistant.stop_reason);
            return run.finish(reason);
        }
        run.execute_batch(&calls).await;
        // region: Lab 7.5 cancelled during a batch
        // stub: if options.cancel.is_cancelled() { todo!() }
        // The batch's results are kept, but the model is not asked again.
        if options.cancel.is_cancelled() {
            return run.finish(RunReason::Aborted);
        }
        // endregion
    }
    // region: Lab 7.5 step bound reached
    run.finish(RunReason::MaxSteps)
    // endregion
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
        // region: Lab 7.1 start from a copy
        Run {
            options,
            events: Events(options.on_event.clone()),
            // A copy: the caller's context is never touched.
            messages: options.context.messages.clone(),
            steps: 0,
        }
        // endregion
    }

    /// Ends the run: its single `TurnEnd`, then the result.
    fn finish(self, reason: RunReason) -> AgentRunResult {
        // region: Lab 7.1 finish
        self.events.emit(LoopEvent::TurnEnd(reason));
        AgentRunResult {
            reason,
            messages: self.messages,
            steps: self.steps,
        }
        // endregion
    }

    /// One model request with the transcript so far and the registry's definitions: forwards
    /// every event, then appends the final assistant message and reports it.
    async fn collect_model_turn(&mut self) -> AssistantMessage {
        // region: Lab 7.1 collect_model_turn
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
        // endregion
    }

    /// A turn that ends the run still gives every one of its calls exactly one (skipped) result.
    fn skip_all(&mut self, calls: &[ToolCall], stop_reason: StopReason) {
        // region: Lab 7.3 skip every call
        // stub: if !calls.is_empty() { todo!() }
        let reason = skip_reason(stop_reason);
        for call in calls {
            let result = skipped_result(call, reason);
            self.messages.push(AgentMessage::ToolResult(result.clone()));
            self.events.emit(LoopEvent::ToolSkipped(result));
        }
        // endregion
    }

    /// One tool round trip: `ToolStart` for every call, then the batch, then its results
    /// appended in call order.
    async fn execute_batch(&mut self, calls: &[ToolCall]) {
        // region: Lab 7.2 one tool round trip
        for call in calls {
            self.events.emit(LoopEvent::ToolStart(call.clone()));
        }
        let results = self.run_concurrently(calls).await;
        self.messages
            .extend(results.into_iter().map(AgentMessage::ToolResult));
        // endregion
    }

    /// What one call runs with: the run's cancellation token, and progress reported as
    /// `ToolProgress` under `call_id`.
    fn call_context(&self, call_id: &str) -> CallContext {
        // region: Lab 7.2 call_context
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
        // endregion
    }

    /// Executes one call; `ToolEnd` goes out as soon as its result is there. The future owns
    /// everything it needs, so it can run on a task of its own.
    fn execute_call(
        &self,
        call: &ToolCall,
        context: CallContext,
    ) -> impl Future<Output = ToolResultMessage> + Send + 'static {
        // region: Lab 7.2 execute_call
        // stub: async { todo!() }
        let call = call.clone();
        let tools = self.options.tools.clone();
        let events = self.events.clone();
        async move {
            let result = execute_tool_call(&call, &tools, context).await;
            events.emit(LoopEvent::ToolEnd(result.clone()));
            result
        }
        // endregion
    }

    /// Runs every call of a batch on its own task, so `ToolEnd` follows completion order, and
    /// returns the results in call order. (Until Lab 7.4 it handles a batch of one call.)
    async fn run_concurrently(&self, calls: &[ToolCall]) -> Vec<ToolResultMessage> {
        // region: Lab 7.4 concurrent batch
        // stub: let [call] = calls else { todo!() };
        // stub: vec![self.execute_call(call, self.call_context(&call.id)).await]
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
        // endregion
    }
}
