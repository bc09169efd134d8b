//! The agent loop: model → tool calls → tool results → model, until the model stops.
//!
//! Invariants: the caller's context is never mutated; every tool call in the transcript gets
//! exactly one result (executed or skipped); results are appended in call order even though
//! calls run concurrently and finish in any order; exactly one `TurnEnd` is emitted.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::tool::ToolRegistry;
use crate::types::{
    AgentContext, AgentMessage, AssistantContent, AssistantMessage, Model, ModelEvent, StopReason,
    TextContent, ToolCall, ToolResultMessage,
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
/// the explanation sentence given in the chapter guide, details `{"skipped": true, "reason": …}`.
pub fn skipped_result(_call: &ToolCall, _reason: &str) -> ToolResultMessage {
    panic!("Lab 7.3 skipped_result 尚未实现")
}

/// Runs the loop to its single end. The branches below are where each Lab's work goes; the
/// cancellation checks and the `max_steps` bound (Lab 7.5) wrap around all of them.
pub async fn run_agent_loop(options: AgentLoopOptions) -> AgentRunResult {
    let assistant = collect_model_turn(&options, &options.context.messages).await;
    let calls = assistant
        .content
        .iter()
        .filter(|block| matches!(block, AssistantContent::ToolCall(_)))
        .count();
    match (assistant.stop_reason, calls) {
        (StopReason::Stop, 0) => panic!("Lab 7.1 纯文本 stop 的结束 尚未实现"),
        (StopReason::ToolUse, 1) => panic!("Lab 7.2 单工具往返 尚未实现"),
        (StopReason::ToolUse, n) if n > 1 => panic!("Lab 7.4 并发批次 尚未实现"),
        _ => panic!("Lab 7.3 非执行终态 尚未实现"),
    }
}

/// Lab 7.1: request the model with the messages so far and the registry's definitions,
/// forward every event, and return the final assistant message.
async fn collect_model_turn(
    _options: &AgentLoopOptions,
    _messages: &[AgentMessage],
) -> AssistantMessage {
    panic!("Lab 7.1 收集模型终态 尚未实现")
}
