//! What pi tells the model about its situation, and the one line of usage a task leaves.
//! Chapter 13 moved the conversation itself into the learner's `Runtime` (see `wiring.rs`).

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use pi_course::types::AgentMessage;

use crate::config::Config;

/// What the model is told about its situation before the first task: the date, the system,
/// the shell `bash` runs, the directory. Only what is true: `read`, `write` and `edit` stay
/// inside the directory, `bash` does not.
pub fn system_prompt(config: &Config, shell: &Path, today: &str) -> String {
    format!(
        "You are pi, a coding agent. Today is {today} (UTC). The system is {}; the bash tool \
         runs commands with {}. Your working directory is {}. You have four tools: read, \
         write, edit and bash. read, write and edit take paths relative to the working \
         directory and refuse paths outside it. Commands run by bash start in the working \
         directory but are not confined to it: they run with the user's permissions, so do \
         not change anything outside the working directory unless the task asks for it. Read \
         a file before you edit it, keep changes small, check your work with bash when that \
         helps, and finish with a short answer saying what you did.",
        os_name(),
        shell.display(),
        config.root.display()
    )
}

/// `YYYY-MM-DD` of a Unix time, in UTC (days to civil date, proleptic Gregorian).
pub fn utc_date(unix_seconds: u64) -> String {
    let days = (unix_seconds / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

pub fn today() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    utc_date(now)
}

/// `linux (x86_64)`, with the distribution's name when `/etc/os-release` gives one.
fn os_name() -> String {
    let base = format!("{} ({})", std::env::consts::OS, std::env::consts::ARCH);
    let pretty = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|release| {
            release.lines().find_map(|line| {
                let value = line.strip_prefix("PRETTY_NAME=")?;
                Some(value.trim_matches('"').to_string())
            })
        })
        .filter(|name| !name.is_empty());
    match pretty {
        Some(name) => format!("{base}, {name}"),
        None => base,
    }
}

/// `用量：输入 1234 · 输出 56 tokens` summed over the assistant messages of one task, with the
/// number of model calls when there was more than one; `None` when the provider reported none.
pub fn usage_line(messages: &[AgentMessage]) -> Option<String> {
    let (mut input, mut output, mut calls) = (0u64, 0u64, 0usize);
    for message in messages {
        if let AgentMessage::Assistant(assistant) = message {
            input += assistant.usage.input;
            output += assistant.usage.output;
            calls += 1;
        }
    }
    if input == 0 && output == 0 {
        return None;
    }
    let mut line = format!("用量：输入 {input} · 输出 {output} tokens");
    if calls > 1 {
        line.push_str(&format!("（{calls} 次模型调用）"));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pi_course::types::{user_message, AssistantMessage, StopReason, Usage};

    #[test]
    fn dates_are_utc_calendar_days() {
        assert_eq!(utc_date(0), "1970-01-01", "Unix 纪元");
        assert_eq!(utc_date(951_782_400), "2000-02-29", "闰日");
        assert_eq!(
            utc_date(1_796_342_400 + 86_399),
            "2026-12-04",
            "一天的最后一秒还是同一天"
        );
        assert_eq!(utc_date(4_102_444_799), "2099-12-31", "世纪末");
    }

    fn assistant(input: u64, output: u64) -> AgentMessage {
        AgentMessage::Assistant(AssistantMessage {
            content: Vec::new(),
            provider: "p".into(),
            model: "m".into(),
            usage: Usage {
                input,
                output,
                total_tokens: input + output,
            },
            stop_reason: StopReason::Stop,
            error_message: None,
            thinking: None,
            timestamp: 0,
        })
    }

    #[test]
    fn usage_is_summed_over_the_task_and_silent_without_numbers() {
        assert_eq!(
            usage_line(&[assistant(12, 5)]).as_deref(),
            Some("用量：输入 12 · 输出 5 tokens"),
            "一次模型调用：输入和输出"
        );
        assert_eq!(
            usage_line(&[assistant(20, 8), user_message("x"), assistant(12, 5)]).as_deref(),
            Some("用量：输入 32 · 输出 13 tokens（2 次模型调用）"),
            "多次调用：加总，并说出调用次数"
        );
        assert_eq!(
            usage_line(&[assistant(0, 0)]),
            None,
            "服务器没报用量就不打印用量行"
        );
    }
}
