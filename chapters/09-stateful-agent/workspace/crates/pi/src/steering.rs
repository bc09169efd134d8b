//! Chapter 09: every task of a session runs through the learner's `Agent`, so that a person can
//! talk to a run while it works. A line typed during a run is steering (it enters after the
//! current tool batch, or after a text stop); `/followup` queues a message that enters only
//! after a natural stop; Ctrl-C is the Agent's `abort`.
//!
//! The session still thinks in chapter 07's terms: it builds `AgentLoopOptions` and gets an
//! `AgentRunResult` back. `Steering::run` keeps that contract, so the transcript a session keeps
//! has the shape the loop gave it before.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use pi_course::agent::{Agent, AgentEvent, AgentOptions, Prompt};
use pi_course::agent_loop::{
    skipped_result, AgentLoopOptions, AgentRunResult, EventSink, LoopEvent, RunReason,
};
use pi_course::provider_adapter::REQUEST_ABORTED;
use pi_course::types::{
    AgentMessage, AssistantContent, AssistantMessage, ModelEvent, StopReason, ToolCall,
};

/// A handle on the session's runs; clones share it. Between runs it holds nothing, so a
/// message for "the run" is refused when there is none instead of waiting for a later one.
#[derive(Clone, Default)]
pub struct Steering {
    active: Arc<Mutex<Option<Agent>>>,
    /// Queued messages the last run ended without taking, as text.
    unsent: Arc<Mutex<Vec<String>>>,
}

/// What the listener saw of one run, for the part of it an abort cuts off.
#[derive(Default)]
struct Seen {
    /// The assistant message being streamed, as its latest event shows it.
    streaming: Option<AssistantMessage>,
    /// Calls started and not yet answered.
    pending: Vec<String>,
    /// The loop reported its own end.
    ended: bool,
}

impl Steering {
    /// Runs what `run_agent_loop(options)` ran, through an Agent that resumes the context's
    /// transcript and is prompted with its final user message.
    pub async fn run(&self, options: AgentLoopOptions) -> AgentRunResult {
        let AgentLoopOptions {
            model,
            tools,
            context,
            cancel,
            on_event,
            max_steps,
            queues: _,
        } = options;
        let mut earlier = context.messages;
        let task = match earlier.pop() {
            Some(AgentMessage::User(user)) => joined(&user.content),
            other => {
                // The session always ends its context with the task; anything else is a bug
                // of pi's, reported as a failed run rather than a guess at what to send.
                earlier.extend(other);
                eprintln!("pi：内部错误：上下文没有以用户消息结尾");
                return AgentRunResult {
                    reason: RunReason::Error,
                    messages: earlier,
                    steps: 0,
                };
            }
        };
        let agent = Agent::with_messages(
            AgentOptions {
                model,
                tools,
                system_prompt: None,
                max_steps,
            },
            earlier,
        );
        let seen = Arc::new(Mutex::new(Seen::default()));
        // The run's result can come back while another thread still delivers its last events;
        // what the listener saw is read only after it has seen the run end.
        let settled = Arc::new(Notify::new());
        let subscription = agent.subscribe({
            let seen = Arc::clone(&seen);
            let settled = Arc::clone(&settled);
            let unsent = Arc::clone(&self.unsent);
            let on_event = on_event.clone();
            move |event, _state| match event {
                AgentEvent::Loop { event, .. } => {
                    watch(&seen, event);
                    if let Some(sink) = &on_event {
                        sink(event.clone());
                    }
                }
                AgentEvent::Delivered { messages, .. } => {
                    for message in messages {
                        if let AgentMessage::User(user) = message {
                            eprintln!("pi：已交给模型：{}", joined(&user.content));
                        }
                    }
                }
                AgentEvent::RunEnd { unsent: left, .. } => {
                    let mut unsent = unsent.lock().unwrap_or_else(PoisonError::into_inner);
                    unsent.extend(left.iter().filter_map(|message| match message {
                        AgentMessage::User(user) => Some(joined(&user.content)),
                        _ => None,
                    }));
                    settled.notify_one();
                }
                AgentEvent::RunStart { .. } => {}
            }
        });
        // The slot is taken before the run starts, so a line typed from now on reaches it.
        *self.active.lock().unwrap_or_else(PoisonError::into_inner) = Some(agent.clone());
        let mut result = match agent.prompt(Prompt::new(&task)) {
            Ok(mut run) => {
                let result = tokio::select! {
                    // The run's own end wins when both are ready.
                    biased;
                    result = &mut run => result,
                    () = cancel.cancelled() => {
                        agent.abort();
                        run.await
                    }
                };
                settled.notified().await;
                result
            }
            Err(error) => {
                // A fresh Agent is never busy and pi always has a runtime: a bug if it happens.
                eprintln!("pi：内部错误：{error}");
                let mut messages = agent.state().messages.clone();
                messages.push(pi_course::types::user_message(&task));
                AgentRunResult {
                    reason: RunReason::Error,
                    messages,
                    steps: 0,
                }
            }
        };
        *self.active.lock().unwrap_or_else(PoisonError::into_inner) = None;
        drop(subscription);
        let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(PoisonError::into_inner));
        if !seen.ended {
            finish_cut_run(&mut result, seen, on_event.as_ref());
        }
        result
    }

    /// Queues `text` as steering for the run that is working now.
    pub fn steer(&self, text: &str) -> Result<(), String> {
        let agent = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        match agent.as_ref().map(|agent| agent.steer(text)) {
            Some(Ok(())) => Ok(()),
            _ => Err(format!("pi：没有正在进行的运行，插话没有排队：{text}")),
        }
    }

    /// Queues `text` to enter the running task after its natural stop.
    pub fn follow_up(&self, text: &str) -> Result<(), String> {
        if text.trim().is_empty() {
            return Err(
                "pi：/followup 后面要跟要追加的文字，例如 /followup 再跑一遍测试".to_string(),
            );
        }
        let agent = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        match agent.as_ref().map(|agent| agent.follow_up(text)) {
            Some(Ok(())) => Ok(()),
            _ => Err(format!(
                "pi：没有正在进行的运行，/followup 没有排队：{text}（直接输入它就是一个新任务）"
            )),
        }
    }

    /// The messages the last run ended without taking, oldest first; the caller decides.
    pub fn take_unsent(&self) -> Vec<String> {
        std::mem::take(&mut *self.unsent.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

fn joined(content: &[pi_course::types::TextContent]) -> String {
    content
        .iter()
        .map(|block| block.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn watch(seen: &Mutex<Seen>, event: &LoopEvent) {
    let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
    match event {
        LoopEvent::Model(model_event) => seen.streaming = Some(message_of(model_event).clone()),
        LoopEvent::AssistantMessage(_) => seen.streaming = None,
        LoopEvent::ToolStart(call) => seen.pending.push(call.id.clone()),
        LoopEvent::ToolEnd(result) | LoopEvent::ToolSkipped(result) => {
            seen.pending.retain(|id| *id != result.tool_call_id)
        }
        LoopEvent::TurnEnd(_) => seen.ended = true,
        LoopEvent::ToolProgress { .. } => {}
    }
}

fn message_of(event: &ModelEvent) -> &AssistantMessage {
    match event {
        ModelEvent::Start { partial }
        | ModelEvent::TextDelta { partial, .. }
        | ModelEvent::ToolcallDelta { partial, .. }
        | ModelEvent::ToolcallEnd { partial, .. } => partial,
        ModelEvent::Done { message, .. } => message,
        ModelEvent::Error { error, .. } => error,
    }
}

/// An abort stops the Agent's loop where it is, so the loop never records the turn it was in
/// nor says it ended. What it would have recorded goes in here, as chapter 07's loop records
/// an aborted turn: the streamed message so far, ended `aborted`, every call in it paired with
/// a skipped result. The events it would have sent go out too, so the terminal shows the end.
fn finish_cut_run(result: &mut AgentRunResult, seen: Seen, on_event: Option<&EventSink>) {
    let emit = |event: LoopEvent| {
        if let Some(sink) = on_event {
            sink(event);
        }
    };
    // Only the part after the last user message can be unfinished: queued messages enter
    // only where the transcript is whole. (Call ids may repeat across a session's turns.)
    let tail = result
        .messages
        .iter()
        .rposition(|message| matches!(message, AgentMessage::User(_)))
        .unwrap_or(0);
    // Results the Agent gave to calls that were still running when it stopped.
    for message in &result.messages[tail..] {
        if let AgentMessage::ToolResult(skipped) = message {
            if seen.pending.contains(&skipped.tool_call_id) {
                emit(LoopEvent::ToolSkipped(skipped.clone()));
            }
        }
    }
    if let Some(mut cut) = seen
        .streaming
        .filter(|_| result.reason == RunReason::Aborted)
    {
        cut.stop_reason = StopReason::Aborted;
        cut.error_message = Some(REQUEST_ABORTED.to_string());
        let calls = calls_of(&cut);
        result.messages.push(AgentMessage::Assistant(cut.clone()));
        result.steps += 1;
        emit(LoopEvent::AssistantMessage(cut));
        for call in &calls {
            let skipped = skipped_result(call, "aborted");
            result
                .messages
                .push(AgentMessage::ToolResult(skipped.clone()));
            emit(LoopEvent::ToolSkipped(skipped));
        }
    }
    // The Agent reads its state while the cut loop may still be between a turn's message and
    // its skipped results (on another thread): a call left without a result is paired here.
    let answered: Vec<String> = result.messages[tail..]
        .iter()
        .filter_map(|message| match message {
            AgentMessage::ToolResult(result) => Some(result.tool_call_id.clone()),
            _ => None,
        })
        .collect();
    let unanswered: Vec<ToolCall> = result.messages[tail..]
        .iter()
        .filter_map(|message| match message {
            AgentMessage::Assistant(assistant) => Some(calls_of(assistant)),
            _ => None,
        })
        .flatten()
        .filter(|call| !answered.contains(&call.id))
        .collect();
    for call in &unanswered {
        let skipped = skipped_result(call, "aborted");
        result
            .messages
            .push(AgentMessage::ToolResult(skipped.clone()));
        emit(LoopEvent::ToolSkipped(skipped));
    }
    emit(LoopEvent::TurnEnd(result.reason));
}

fn calls_of(message: &AssistantMessage) -> Vec<ToolCall> {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            AssistantContent::ToolCall(call) => Some(call.clone()),
            AssistantContent::Text(_) => None,
        })
        .collect()
}
