//! How a run looks in a terminal: the assistant's text streams to stdout, and every tool call
//! and every tool result is one line on stderr, so `pi -p … > answer.txt` keeps only the answer.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

use pi_course::agent_loop::{EventSink, LoopEvent, RunReason};
use pi_course::types::{AssistantMessage, ModelEvent, TextContent, ToolCall, ToolResultMessage};

/// Characters of arguments or output a tool line shows before it is cut.
pub const LINE_CHARS: usize = 160;

/// `text` on one line: line breaks shown as `⏎`, runs of other whitespace as one space, cut
/// at `limit` characters with `…`.
pub fn one_line(text: &str, limit: usize) -> String {
    let flat = text
        .trim()
        .split('\n')
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(" ⏎ ");
    let mut shown: String = flat.chars().take(limit).collect();
    if flat.chars().count() > limit {
        shown.push('…');
    }
    shown
}

/// Characters a terminal would act on instead of showing, written as `\u{1b}`: C0 and C1
/// controls but the tab, and the format characters that reorder or hide text (bidi overrides,
/// zero-width marks).
pub fn visible(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        let hidden = (c.is_control() && c != '\t')
            || matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}' | '\u{feff}');
        if hidden {
            shown.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            shown.push(c);
        }
    }
    shown
}

/// `→ read {"path":"notes.txt"}`. A `bash` call shows its arguments whole, however long: what
/// runs is never cut. Other calls are cut at `LINE_CHARS`, as their results are.
pub fn call_line(call: &ToolCall) -> String {
    let arguments = call.arguments.to_string();
    let shown = if call.name == "bash" {
        arguments
    } else {
        one_line(&arguments, LINE_CHARS)
    };
    format!("→ {} {}", visible(&call.name), visible(&shown))
}

fn joined(content: &[TextContent]) -> String {
    content
        .iter()
        .map(|block| block.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `← read：…` for a result, `← bash（出错）：…` for an error, `← edit（跳过）：…` for a call
/// the loop did not run.
pub fn result_line(result: &ToolResultMessage, skipped: bool) -> String {
    let status = if skipped {
        "（跳过）"
    } else if result.is_error {
        "（出错）"
    } else {
        ""
    };
    let body = joined(&result.content);
    let body = if body.trim().is_empty() {
        "（无输出）".to_string()
    } else {
        // A file `read` shows may hold escape sequences too: they are shown, not obeyed.
        visible(&one_line(&body, LINE_CHARS))
    };
    format!("← {}{status}：{body}", result.tool_name)
}

/// The one line a run that did not end normally leaves on stderr; `None` for a normal stop.
pub fn ending_line(
    reason: RunReason,
    last: Option<&AssistantMessage>,
    max_steps: usize,
) -> Option<String> {
    let detail = last
        .and_then(|message| message.error_message.clone())
        .unwrap_or_default();
    match reason {
        RunReason::Stop => None,
        RunReason::Error if detail.is_empty() => Some("pi：模型回合出错".to_string()),
        RunReason::Error => Some(format!("pi：模型回合出错：{}", one_line(&detail, 400))),
        RunReason::Length => Some("pi：模型的回答达到长度上限，被截断了".to_string()),
        RunReason::Aborted => Some("pi：已取消".to_string()),
        RunReason::MaxSteps => Some(format!(
            "pi：已经走了 {max_steps} 步（--max-steps），任务没有完成"
        )),
    }
}

/// The one line a turn's reasoning leaves on stderr: `（思考了 N 字）`, dimmed on a terminal.
/// The thinking itself is not printed: it is long, and it is not the answer.
pub fn thinking_line(thinking: &str, dim: bool) -> String {
    let line = format!("（思考了 {} 字）", thinking.chars().count());
    if dim {
        format!("\x1b[2m{line}\x1b[0m")
    } else {
        line
    }
}

/// The message a model event carries: its partial, or the final message.
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

/// Prints loop events as they come. Shared by the tasks that run tools, hence the lock; it
/// also remembers whether stdout ends mid-line, so the next stderr line starts cleanly.
#[derive(Clone, Default)]
pub struct Printer {
    mid_line: Arc<Mutex<bool>>,
    /// Whether this turn's thinking line was printed; reset by each assistant message.
    thought: Arc<Mutex<bool>>,
}

impl Printer {
    pub fn sink(&self) -> EventSink {
        let printer = self.clone();
        Arc::new(move |event| printer.show(event))
    }

    fn show(&self, event: LoopEvent) {
        let mut mid_line = self
            .mid_line
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut stdout = std::io::stdout().lock();
        if let LoopEvent::Model(model_event) = &event {
            // The protocol has no thinking event: the first event after the reasoning shows it.
            let mut thought = self
                .thought
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let thinking = message_of(model_event).thinking.as_deref().unwrap_or("");
            if !*thought && !thinking.is_empty() {
                end_line(&mut stdout, &mut mid_line);
                eprintln!(
                    "{}",
                    thinking_line(thinking, std::io::stderr().is_terminal())
                );
                *thought = true;
            }
        }
        if let LoopEvent::AssistantMessage(_) = &event {
            *self
                .thought
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = false;
        }
        match event {
            LoopEvent::Model(ModelEvent::TextDelta { delta, .. }) => {
                let _ = stdout.write_all(delta.as_bytes());
                let _ = stdout.flush();
                if !delta.is_empty() {
                    *mid_line = !delta.ends_with('\n');
                }
            }
            LoopEvent::ToolStart(call) => {
                end_line(&mut stdout, &mut mid_line);
                eprintln!("{}", call_line(&call));
            }
            LoopEvent::ToolEnd(result) => eprintln!("{}", result_line(&result, false)),
            LoopEvent::ToolSkipped(result) => eprintln!("{}", result_line(&result, true)),
            LoopEvent::TurnEnd(_) | LoopEvent::AssistantMessage(_) => {
                end_line(&mut stdout, &mut mid_line)
            }
            LoopEvent::Model(_) | LoopEvent::ToolProgress { .. } => {}
        }
    }
}

fn end_line(stdout: &mut std::io::StdoutLock<'_>, mid_line: &mut bool) {
    if *mid_line {
        let _ = stdout.write_all(b"\n");
        let _ = stdout.flush();
        *mid_line = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pi_course::types::text;
    use serde_json::json;

    fn result(name: &str, body: &str, is_error: bool) -> ToolResultMessage {
        ToolResultMessage {
            tool_call_id: "c".into(),
            tool_name: name.into(),
            content: vec![text(body)],
            details: None,
            is_error,
            timestamp: 0,
        }
    }

    #[test]
    fn a_tool_call_is_one_line_with_its_arguments() {
        let call = ToolCall {
            id: "c".into(),
            name: "edit".into(),
            arguments: json!({"path": "a.txt", "oldText": "x\ny", "newText": "z"}),
            raw_arguments: None,
        };
        assert_eq!(
            call_line(&call),
            r#"→ edit {"path":"a.txt","oldText":"x\ny","newText":"z"}"#,
            "调用行：箭头、工具名、紧凑 JSON 参数"
        );
    }

    #[test]
    fn a_bash_call_is_shown_whole_with_control_characters_visible() {
        let command = format!("echo {}; rm -rf ../x", "a".repeat(300));
        let call = ToolCall {
            id: "c".into(),
            name: "bash".into(),
            arguments: json!({ "command": command }),
            raw_arguments: None,
        };
        assert_eq!(
            call_line(&call),
            format!(r#"→ bash {{"command":"{command}"}}"#),
            "bash 的命令整条显示，不截断"
        );
        let call = ToolCall {
            id: "c".into(),
            name: "bash".into(),
            arguments: json!({"command": "printf '\x1b[2J'\u{9b}\u{202e}x\u{7f}"}),
            raw_arguments: None,
        };
        assert_eq!(
            call_line(&call),
            r#"→ bash {"command":"printf '\u001b[2J'\u{9b}\u{202e}x\u{7f}"}"#,
            "控制字符和双向文字控制符显示成转义，终端不会执行它们"
        );
    }

    #[test]
    fn results_are_flattened_cut_and_labelled() {
        assert_eq!(
            result_line(&result("bash", "line 1\n  line   2\n", false), false),
            "← bash：line 1 ⏎ line 2",
            "多行输出压成一行"
        );
        assert_eq!(
            result_line(&result("read", "no such file", true), false),
            "← read（出错）：no such file",
            "出错的结果带标记"
        );
        assert_eq!(
            result_line(&result("edit", "", true), true),
            "← edit（跳过）：（无输出）",
            "跳过的调用带标记，空输出有说明"
        );
        assert_eq!(
            result_line(&result("read", "\x1b[2Jclear", false), false),
            "← read：\\u{1b}[2Jclear",
            "结果里的控制字符也显示成转义"
        );
        let long = "x".repeat(LINE_CHARS + 10);
        let line = result_line(&result("read", &long, false), false);
        assert_eq!(
            line,
            format!("← read：{}…", "x".repeat(LINE_CHARS)),
            "超长输出截到 LINE_CHARS 个字符"
        );
    }

    #[test]
    fn thinking_is_one_counted_line_dimmed_only_on_a_terminal() {
        assert_eq!(
            thinking_line("先想一想", false),
            "（思考了 4 字）",
            "思考只显示一行字数，按字符计数，不打印思考内容"
        );
        assert_eq!(
            thinking_line("ab", true),
            "\x1b[2m（思考了 2 字）\x1b[0m",
            "终端上这一行是暗色的"
        );
    }

    #[test]
    fn only_a_normal_stop_is_silent() {
        assert_eq!(
            ending_line(RunReason::Stop, None, 8),
            None,
            "正常结束不多说"
        );
        assert_eq!(
            ending_line(RunReason::MaxSteps, None, 8).as_deref(),
            Some("pi：已经走了 8 步（--max-steps），任务没有完成"),
            "步数上限说出上限"
        );
    }
}
