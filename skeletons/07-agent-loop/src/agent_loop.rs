//! The agent loop: model → tool calls → tool results → model, until the model stops.
//!
//! Invariants: the caller's context is never mutated; every tool call in the transcript gets
//! exactly one result (executed or skipped); results are appended in call order even though
//! calls run concurrently and finish in any order; exactly one `TurnEnd` is emitted.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::tool::ToolRegistry;
use crate::types::{
    AgentContext, AgentMessage, AssistantMessage, Model, ModelEvent, TextContent, ToolCall,
    ToolResultMessage,
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

/// A paired result for a call the loop decided not to run: content
/// `Tool call was not executed because …`, details `{"skipped": true, "reason": …}`.
pub fn skipped_result(_call: &ToolCall, _reason: &str) -> ToolResultMessage {
    panic!("Lab 7.3 skipped_result 尚未实现")
}

/// Runs the loop to its single end. Suggested order of work: 7.1 collect one model turn and
/// finish on a plain stop; 7.2 one tool call and its result; 7.3 the non-executing endings;
/// 7.4 a concurrent batch; 7.5 cancellation and the step bound.
pub async fn run_agent_loop(_options: AgentLoopOptions) -> AgentRunResult {
    panic!("Lab 7.1 收集模型终态 尚未实现")
}
