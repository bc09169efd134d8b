//! Chapter 11 in `pi`: the model sees a budgeted projection of the session, and the history
//! that no longer fits is summarised into a compaction entry.
//!
//! The learner's `context_compaction` decides everything that must be right (where a cut may
//! fall, what the model is sent after it, what the entry holds); this module supplies what
//! only a program has: a token estimate, a budget from the model's window, and the summary
//! itself, asked of the same model.

use std::sync::Arc;

use pi_course::agent_loop::{run_agent_loop, AgentLoopOptions, RunReason};
use pi_course::context_compaction::Budget;
use pi_course::tool::ToolRegistry;
use pi_course::types::{
    now_ms, text_of, user_message, AgentContext, AgentMessage, AssistantContent, Model,
    SystemMessage,
};
use tokio_util::sync::CancellationToken;

/// The window assumed when neither `--context-window` nor `PI_CONTEXT_WINDOW` says otherwise:
/// what current hosted models offer at least.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;
/// The smallest window pi accepts: below it the reserve leaves no room for a conversation.
pub const MIN_CONTEXT_WINDOW: u64 = 1_000;
/// Tool outputs longer than this are cut in what the summariser reads: a summary needs what a
/// command showed, not every line of it.
const SUMMARY_INPUT_CHARS: usize = 2_000;

/// The window from the flag, else from `PI_CONTEXT_WINDOW`, else the default.
pub fn context_window(
    flag: Option<u64>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<u64, String> {
    let window = match (flag, env("PI_CONTEXT_WINDOW")) {
        (Some(window), _) => window,
        (None, Some(text)) if !text.trim().is_empty() => {
            text.trim().parse::<u64>().map_err(|_| {
                format!("PI_CONTEXT_WINDOW 必须是一个正整数（token 数），现在是 “{text}”")
            })?
        }
        (None, _) => DEFAULT_CONTEXT_WINDOW,
    };
    if window < MIN_CONTEXT_WINDOW {
        return Err(format!(
            "上下文窗口至少要 {MIN_CONTEXT_WINDOW} 个 token，现在是 {window}"
        ));
    }
    Ok(window)
}

/// No limit: what the model would be sent if the window were endless.
pub const UNBOUNDED: Budget = Budget {
    context_window: u64::MAX,
    reserved_output: 0,
    safety_margin: 0,
};

/// A quarter of the window (at most 16k tokens) stays free for the answer, and a tenth for the
/// estimate being wrong.
pub fn budget(context_window: u64) -> Budget {
    Budget {
        context_window,
        reserved_output: (context_window / 4).min(16_384),
        safety_margin: context_window / 10,
    }
}

/// About four bytes of text per token, plus a little per message for the role and framing.
/// Coarse, but deterministic, which is what the learner's budget needs: a real tokenizer is
/// per model, and the safety margin absorbs the difference.
pub fn estimate_tokens(message: &AgentMessage) -> u64 {
    let mut bytes = text_of(message).len();
    if let AgentMessage::Assistant(assistant) = message {
        for content in &assistant.content {
            if let AssistantContent::ToolCall(call) = content {
                bytes += call.name.len() + call.arguments.to_string().len();
            }
        }
    }
    (bytes as u64).div_ceil(4) + 4
}

/// What the summariser is told. English, like pi's own system prompt; the summary comes back
/// in the conversation's language.
const SUMMARISER: &str = "You compress the history of a coding session so that the work can go \
on without it. Write a summary, in the language the user wrote in, that keeps: the user's goals \
and constraints, decisions made and why, files read or changed (with paths), commands run and \
what they showed, errors met and how they were solved, and what was still open. Keep exact \
names, paths and numbers. Do not invent anything. Answer with the summary only.";

/// The messages as the summariser reads them: one labelled paragraph each.
pub fn transcript_for_summary(messages: &[AgentMessage]) -> String {
    let mut text = String::new();
    for message in messages {
        let paragraph = match message {
            AgentMessage::System(_) => continue,
            AgentMessage::User(_) => format!("[用户]\n{}", text_of(message)),
            AgentMessage::Assistant(assistant) => {
                let mut parts = Vec::new();
                for content in &assistant.content {
                    match content {
                        AssistantContent::Text(block) if !block.text.is_empty() => {
                            parts.push(block.text.clone())
                        }
                        AssistantContent::Text(_) => {}
                        AssistantContent::ToolCall(call) => {
                            parts.push(format!("（调用 {} {}）", call.name, call.arguments))
                        }
                    }
                }
                format!("[助手]\n{}", parts.join("\n"))
            }
            AgentMessage::ToolResult(result) => {
                let body = text_of(message);
                let shown = match body.char_indices().nth(SUMMARY_INPUT_CHARS) {
                    Some((cut, _)) => format!("{}…（已截断）", &body[..cut]),
                    None => body,
                };
                let status = if result.is_error { "，出错" } else { "" };
                format!("[工具 {} 的结果{status}]\n{shown}", result.tool_name)
            }
        };
        text.push_str(&paragraph);
        text.push_str("\n\n");
    }
    text
}

/// Asks `model` for a summary of `messages` (an earlier summary, if any, comes first among
/// them). One model turn through the learner's loop, with no tools; Ctrl-C cancels it.
pub async fn summarise(
    model: Arc<dyn Model>,
    messages: &[AgentMessage],
    cancel: CancellationToken,
) -> Result<String, String> {
    let tools = ToolRegistry::new(Vec::new()).map_err(|error| error.to_string())?;
    let context = AgentContext {
        messages: vec![
            AgentMessage::System(SystemMessage {
                content: SUMMARISER.to_string(),
                sections: None,
                timestamp: now_ms(),
            }),
            user_message(&transcript_for_summary(messages)),
        ],
        tools: Vec::new(),
    };
    let mut options = AgentLoopOptions::new(model, tools, context);
    options.cancel = cancel;
    options.max_steps = 1;
    let result = run_agent_loop(options).await;
    let answer = result
        .messages
        .iter()
        .rev()
        .find_map(|message| match message {
            AgentMessage::Assistant(assistant) => Some(assistant),
            _ => None,
        });
    match (result.reason, answer) {
        (RunReason::Stop, Some(answer)) => {
            let summary = text_of(&AgentMessage::Assistant(answer.clone()));
            let summary = summary.trim();
            if summary.is_empty() {
                Err("模型给出的摘要是空的".to_string())
            } else {
                Ok(summary.to_string())
            }
        }
        (RunReason::Aborted, _) => Err("已取消".to_string()),
        (_, Some(answer)) if answer.error_message.is_some() => {
            Err(answer.error_message.clone().unwrap_or_default())
        }
        (RunReason::Length, _) => Err("摘要被截断了（模型的输出达到上限）".to_string()),
        _ => Err("模型没有给出摘要".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        }
    }

    #[test]
    fn the_flag_beats_the_variable_and_bad_values_are_refused_in_one_line() {
        assert_eq!(
            context_window(Some(4_000), env(&[("PI_CONTEXT_WINDOW", "9000")])),
            Ok(4_000)
        );
        assert_eq!(
            context_window(None, env(&[("PI_CONTEXT_WINDOW", " 9000 ")])),
            Ok(9_000)
        );
        assert_eq!(context_window(None, env(&[])), Ok(DEFAULT_CONTEXT_WINDOW));
        assert_eq!(
            context_window(None, env(&[("PI_CONTEXT_WINDOW", "大")])),
            Err("PI_CONTEXT_WINDOW 必须是一个正整数（token 数），现在是 “大”".to_string()),
            "不是数字的窗口被拒绝，并说出收到了什么"
        );
        assert_eq!(
            context_window(Some(10), env(&[])),
            Err("上下文窗口至少要 1000 个 token，现在是 10".to_string()),
            "太小的窗口被拒绝"
        );
    }

    #[test]
    fn the_budget_keeps_room_for_the_answer_and_the_estimate() {
        assert_eq!(
            budget(2_000),
            Budget {
                context_window: 2_000,
                reserved_output: 500,
                safety_margin: 200
            }
        );
        assert_eq!(budget(200_000).reserved_output, 16_384, "输出预留最多 16k");
    }

    #[test]
    fn the_estimate_counts_text_and_call_arguments() {
        assert_eq!(estimate_tokens(&user_message("abcdefgh")), 2 + 4);
        assert_eq!(
            estimate_tokens(&user_message("abcdefghi")),
            3 + 4,
            "向上取整"
        );
    }

    #[test]
    fn long_tool_output_is_cut_for_the_summariser() {
        let long = "x".repeat(SUMMARY_INPUT_CHARS + 10);
        let messages = vec![
            user_message("列出文件"),
            AgentMessage::ToolResult(pi_course::types::ToolResultMessage {
                tool_call_id: "c1".into(),
                tool_name: "bash".into(),
                content: vec![pi_course::types::TextContent { text: long }],
                details: None,
                is_error: false,
                timestamp: 0,
            }),
        ];
        let text = transcript_for_summary(&messages);
        assert!(text.starts_with("[用户]\n列出文件\n\n[工具 bash 的结果]\n"));
        assert!(
            text.ends_with(&format!(
                "{}…（已截断）\n\n",
                "x".repeat(SUMMARY_INPUT_CHARS)
            )),
            "工具输出只保留开头 {SUMMARY_INPUT_CHARS} 个字符"
        );
    }
}
