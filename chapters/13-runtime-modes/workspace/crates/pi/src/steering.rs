//! Chapter 09's steering, on chapter 13's runtime: what a line typed while a task runs means.
//! Plain text steers the run (it enters after the current tool batch or a text stop),
//! `/followup …` waits for the run's natural stop, a command or template waits for the run's
//! end, and a line the run can no longer take becomes the next task. Chapter 09's pi drove the
//! learner's `Agent` itself; here the runtime owns the Agent and pi talks to its
//! `RuntimeControl`, with the same words on the screen.

use std::collections::VecDeque;

use pi_course::runtime_modes::RuntimeControl;

/// What a line typed while a run works asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Typed {
    /// Enters the run at its next step.
    Steer(String),
    /// Waits until the run would stop, then runs as the next turn of the same run.
    FollowUp(String),
    /// A command or a template: it runs after this run, as the next line.
    Later(String),
    /// Not something a running task can take; the one line to show.
    Refused(&'static str),
    Nothing,
}

pub fn typed_line(line: &str) -> Typed {
    let line = line.trim();
    match line.strip_prefix("/followup") {
        Some("") => Typed::Refused("/followup 后面要跟要追加的文字，例如 /followup 再跑一遍测试"),
        Some(rest) if rest.starts_with(' ') => Typed::FollowUp(rest.trim().to_string()),
        _ if line.is_empty() => Typed::Nothing,
        _ if line.starts_with('/') => Typed::Later(line.to_string()),
        _ => Typed::Steer(line.to_string()),
    }
}

/// Chapter 09: hands a line typed while the run works to it and says what became of it. A
/// line the run can no longer take, and a command, wait in `later` for the run's end.
pub fn deliver(control: &RuntimeControl, line: String, later: &mut VecDeque<String>) {
    match typed_line(&line) {
        Typed::Nothing => {}
        Typed::Refused(message) => eprintln!("pi：{message}"),
        Typed::FollowUp(text) => match control.follow_up(&text) {
            Ok(()) => eprintln!("pi：追加消息已排队，这次运行自然结束后交给模型：{text}"),
            Err(_) => eprintln!("{}", no_run_for_follow_up(&text)),
        },
        Typed::Later(line) if line == "/compact" => {
            eprintln!("pi：/compact 等这次运行结束后再执行");
            later.push_back(line);
        }
        Typed::Later(line) => {
            eprintln!("pi：{line} 等这次运行结束后作为下一个任务");
            later.push_back(line);
        }
        Typed::Steer(text) => match control.steer(&text) {
            Ok(()) => {
                eprintln!("pi：插话已排队，当前这批工具调用结束后（或模型停下时）交给模型：{text}")
            }
            Err(_) => {
                eprintln!("pi：现在没有可以插话的运行，这一行留作下一个任务：{text}");
                later.push_back(text);
            }
        },
    }
}

/// A line typed while the run is being stopped: it runs as the next task.
pub fn later_task(line: String, later: &mut VecDeque<String>) {
    if !line.trim().is_empty() {
        eprintln!(
            "pi：现在没有可以插话的运行，这一行留作下一个任务：{}",
            line.trim()
        );
        later.push_back(line);
    }
}

/// `/followup` with no run to take it (chapter 09's wording).
pub fn no_run_for_follow_up(text: &str) -> String {
    format!("pi：没有正在进行的运行，/followup 没有排队：{text}（直接输入它就是一个新任务）")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_typed_during_a_run_steers_follows_up_or_is_refused() {
        assert_eq!(
            typed_line(" 先别改测试 "),
            Typed::Steer("先别改测试".into()),
            "普通的一行是插话"
        );
        assert_eq!(
            typed_line("/followup 然后跑一遍 cargo test"),
            Typed::FollowUp("然后跑一遍 cargo test".into()),
            "/followup 文字 是追加"
        );
        assert_eq!(
            typed_line("/followup"),
            Typed::Refused("/followup 后面要跟要追加的文字，例如 /followup 再跑一遍测试"),
            "空的追加被拒绝"
        );
        assert_eq!(
            typed_line("/compact"),
            Typed::Later("/compact".into()),
            "命令等这次运行结束后再执行"
        );
        assert_eq!(
            typed_line("/followups"),
            Typed::Later("/followups".into()),
            "不是 /followup 的斜杠行也是命令，等运行结束"
        );
        assert_eq!(typed_line("   "), Typed::Nothing, "空行什么都不做");
    }
}
