//! The agent loop: model → tool calls → tool results → model, until the model stops.
//!
//! Invariants: the caller's context is never mutated; every tool call in the transcript gets
//! exactly one result (executed or skipped); results are appended in call order even though
//! calls run concurrently and finish in any order; exactly one `TurnEnd` is emitted.

use std::sync::Arc;

use serde_json::json;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::tool::{execute_tool_call, CallContext, ProgressReporter, ToolRegistry};
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
    let emit = |event: LoopEvent| {
        if let Some(sink) = &options.on_event {
            sink(event);
        }
    };
    let finish = |reason: RunReason, messages: Vec<AgentMessage>, steps: usize| {
        emit(LoopEvent::TurnEnd(reason));
        AgentRunResult {
            reason,
            messages,
            steps,
        }
    };
    // A copy: the caller's context is never touched.
    let mut messages = options.context.messages.clone();

    for step in 1..=options.max_steps {
        if options.cancel.is_cancelled() {
            return finish(RunReason::Aborted, messages, step - 1);
        }
        let assistant = collect_model_turn(&options, &messages, &emit).await;
        messages.push(AgentMessage::Assistant(assistant.clone()));
        emit(LoopEvent::AssistantMessage(assistant.clone()));

        let calls: Vec<ToolCall> = assistant
            .content
            .iter()
            .filter_map(|block| match block {
                AssistantContent::ToolCall(call) => Some(call.clone()),
                AssistantContent::Text(_) => None,
            })
            .collect();

        let ending = match (assistant.stop_reason, calls.is_empty()) {
            (StopReason::Stop, true) => Some(RunReason::Stop),
            (StopReason::ToolUse, true) => Some(RunReason::Error),
            (StopReason::ToolUse, false) => None,
            (StopReason::Stop, false) => Some(RunReason::Error),
            (StopReason::Length, _) => Some(RunReason::Length),
            (StopReason::Error, _) => Some(RunReason::Error),
            (StopReason::Aborted, _) => Some(RunReason::Aborted),
        };
        if let Some(reason) = ending {
            // Every call still gets exactly one (skipped) result.
            for call in &calls {
                let result = skipped_result(call, skip_reason(assistant.stop_reason));
                messages.push(AgentMessage::ToolResult(result.clone()));
                emit(LoopEvent::ToolSkipped(result));
            }
            return finish(reason, messages, step);
        }

        let results = execute_batch(&options, &calls, &emit).await;
        messages.extend(results.into_iter().map(AgentMessage::ToolResult));
        if options.cancel.is_cancelled() {
            return finish(RunReason::Aborted, messages, step);
        }
    }
    finish(RunReason::MaxSteps, messages, options.max_steps)
}

/// One model request: forwards every event and returns the final assistant message.
async fn collect_model_turn(
    options: &AgentLoopOptions,
    messages: &[AgentMessage],
    emit: &impl Fn(LoopEvent),
) -> AssistantMessage {
    let request = AgentContext {
        messages: messages.to_vec(),
        tools: options.tools.definitions(),
    };
    let stream = options.model.stream(
        &request,
        StreamOptions {
            cancel: Some(options.cancel.clone()),
        },
    );
    while let Some(event) = stream.next().await {
        emit(LoopEvent::Model(event));
    }
    stream.result().await
}

/// Starts every call, runs them concurrently, reports `ToolEnd` in completion order and
/// returns the results in call order.
async fn execute_batch(
    options: &AgentLoopOptions,
    calls: &[ToolCall],
    emit: &impl Fn(LoopEvent),
) -> Vec<ToolResultMessage> {
    for call in calls {
        emit(LoopEvent::ToolStart(call.clone()));
    }
    let mut running = JoinSet::new();
    for (index, call) in calls.iter().cloned().enumerate() {
        let registry = options.tools.clone();
        let sink = options.on_event.clone();
        let call_id = call.id.clone();
        let progress = ProgressReporter::new(move |content| {
            if let Some(sink) = &sink {
                sink(LoopEvent::ToolProgress {
                    call_id: call_id.clone(),
                    content,
                });
            }
        });
        let context = CallContext {
            cancel: options.cancel.clone(),
            progress,
        };
        running.spawn(async move { (index, execute_tool_call(&call, &registry, context).await) });
    }
    let mut results: Vec<Option<ToolResultMessage>> = vec![None; calls.len()];
    while let Some(joined) = running.join_next().await {
        // The executor already turns tool panics into results; a failed join is unexpected,
        // and its call is filled in below so pairing still holds.
        if let Ok((index, result)) = joined {
            emit(LoopEvent::ToolEnd(result.clone()));
            results[index] = Some(result);
        }
    }
    results
        .into_iter()
        .zip(calls)
        .map(|(result, call)| {
            result.unwrap_or_else(|| crate::tool::failed_result(call, "工具任务异常结束"))
        })
        .collect()
}
