//! One conversation: the model, the coding tools over one directory, and the transcript that
//! every turn extends. Each turn is one run of the learner's agent loop.
//! Chapter 09: that run goes through the learner's `Agent` (see `steering.rs`).

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use pi_course::agent_loop::{AgentLoopOptions, AgentRunResult};
use pi_course::coding_tools::CodingTools;
use pi_course::context_compaction::{Budget, Fit};
use pi_course::http_transport::Endpoint;
use pi_course::types::{now_ms, user_message, AgentContext, AgentMessage, Model, SystemMessage};
use tokio_util::sync::CancellationToken;

use crate::compaction;
use crate::config::Config;
use crate::diff::DiffWatch;
use crate::render::Printer;
use crate::session_store::SessionLog;
use crate::steering::Steering;

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

fn today() -> String {
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

pub struct Session {
    model: Arc<dyn Model>,
    tools: CodingTools,
    transcript: Vec<AgentMessage>,
    max_steps: usize,
    printer: Printer,
    diffs: DiffWatch,
    /// Chapter 10: where every turn is recorded, once a session is attached.
    log: Option<SessionLog>,
    /// Chapter 11: the part of the model's window a task may fill.
    budget: Budget,
    /// Chapter 09: the handle through which a typed line reaches the run that is working.
    steering: Steering,
}

impl Session {
    pub fn new(config: &Config, max_steps: usize) -> Result<Session, String> {
        let endpoint = Endpoint::new(config.base_url.clone(), config.api_key.clone());
        let model =
            pi_http::openai_compatible_model_with(endpoint, &config.model, config.http_options())
                .map_err(|error| format!("无法建立 HTTP 客户端：{error}"))?;
        let tools = CodingTools::new(&config.root)
            .map_err(|error| format!("无法在 {} 里工作：{error}", config.root.display()))?;
        let system = AgentMessage::System(SystemMessage {
            content: system_prompt(config, &tools.shell(), &today()),
            sections: None,
            timestamp: now_ms(),
        });
        Ok(Session {
            model: Arc::new(model),
            tools,
            transcript: vec![system],
            max_steps,
            printer: Printer::default(),
            diffs: DiffWatch::default(),
            log: None,
            budget: compaction::budget(compaction::DEFAULT_CONTEXT_WINDOW),
            steering: Steering::default(),
        })
    }

    /// Chapter 09: where a line typed while a task runs goes.
    pub fn steering(&self) -> Steering {
        self.steering.clone()
    }

    /// Runs one task to its end and keeps what happened for the next one, cancelled turns
    /// included: their calls are paired with skipped results, so the transcript stays valid.
    pub async fn turn(
        &mut self,
        prompt: &str,
        cancel: CancellationToken,
    ) -> Result<AgentRunResult, String> {
        // A fresh registry per run, as chapter 06 teaches; the tools share one mutation queue.
        let registry = self
            .tools
            .registry()
            .map_err(|error| format!("工具注册失败：{error}"))?;
        let registry = self.diffs.wrap(registry, self.tools.workspace())?;
        // Chapter 11: the model sees a budgeted projection; what no longer fits is summarised.
        self.fit_context(&cancel).await?;
        let mut messages = self.transcript.clone();
        messages.push(user_message(prompt));
        let context = AgentContext {
            messages,
            tools: registry.definitions(),
        };
        let mut options = AgentLoopOptions::new(Arc::clone(&self.model), registry, context);
        options.cancel = cancel;
        options.on_event = Some(self.diffs.sink(self.printer.sink()));
        options.max_steps = self.max_steps;
        let earlier = self.transcript.len();
        let result = self.steering.run(options).await;
        if let Some(line) = usage_line(result.messages.get(earlier..).unwrap_or_default()) {
            eprintln!("{line}");
        }
        self.transcript = result.messages.clone();
        if let Some(log) = &mut self.log {
            log.record(&self.transcript).await?;
        }
        Ok(result)
    }
}

impl Session {
    /// Continues the conversation `log` holds (its system prompt included) and records every
    /// later turn into it.
    pub fn attach_log(&mut self, mut log: SessionLog) -> Result<(), String> {
        let earlier = log.messages()?;
        if !earlier.is_empty() {
            self.transcript = earlier;
        }
        self.log = Some(log);
        Ok(())
    }
}

/// How much history `/compact` or the budget asks to summarise.
enum Keep {
    /// Whatever the learner's `build_context` keeps within the budget.
    WhatFits,
    /// Only the newest interaction (`/compact`).
    Newest,
}

impl Session {
    /// Chapter 11: the model's window, from `--context-window` or `PI_CONTEXT_WINDOW`.
    pub fn set_context_window(&mut self, window: u64) {
        self.budget = compaction::budget(window);
    }

    /// Before a task: the transcript becomes the learner's `resume_context` of the session,
    /// and when older interactions no longer fit they are summarised into a compaction entry.
    /// A failed summary writes nothing; the task then goes on with what fits.
    async fn fit_context(&mut self, cancel: &CancellationToken) -> Result<(), String> {
        let Some(log) = &mut self.log else {
            return Ok(());
        };
        let built = log.context(&self.budget)?;
        if built.messages.is_empty() {
            // A new session: its system prompt reaches the file with the first turn.
            return Ok(());
        }
        if built.fit != Fit::WithinBudget {
            self.compact(Keep::WhatFits, cancel).await?;
        } else {
            self.transcript = built.messages;
        }
        Ok(())
    }

    /// `/compact`: summarises everything but the newest interaction now.
    pub async fn compact_now(&mut self, cancel: &CancellationToken) -> Result<(), String> {
        self.compact(Keep::Newest, cancel).await
    }

    async fn compact(&mut self, keep: Keep, cancel: &CancellationToken) -> Result<(), String> {
        let Some(log) = &mut self.log else {
            return Err("没有会话，无从压缩".to_string());
        };
        // Everything the model would see without a budget, then what the budget keeps.
        let whole = log.context(&compaction::UNBOUNDED)?;
        let before = log.context(&self.budget)?;
        let starts = log.visible_interactions()?;
        let first_kept = match keep {
            Keep::WhatFits => before.first_kept_entry_id.clone(),
            Keep::Newest => starts.last().cloned(),
        };
        let dropped = first_kept
            .as_ref()
            .and_then(|kept| starts.iter().position(|start| start == kept))
            .unwrap_or(0);
        let Some(first_kept) = first_kept.filter(|_| dropped > 0) else {
            self.transcript = before.messages;
            return match keep {
                Keep::Newest => Err("只有最近的一次交互，没有更早的历史可以压缩".to_string()),
                Keep::WhatFits => {
                    eprintln!(
                        "pi：最近的一次交互本身就超出上下文预算（约 {} tokens），没有更早的历史可以压缩",
                        before.tokens
                    );
                    Ok(())
                }
            };
        };
        let tokens_before = whole.tokens;
        eprintln!("pi：正在把较早的 {dropped} 次交互压缩成摘要…");
        let input = log.compaction_input(&first_kept)?;
        match compaction::summarise(Arc::clone(&self.model), &input, cancel.clone()).await {
            Ok(summary) => {
                log.compact(&summary, &first_kept, tokens_before).await?;
                let after = log.context(&self.budget)?;
                eprintln!(
                    "pi：已压缩：发给模型的上下文约 {tokens_before} → {} tokens",
                    after.tokens
                );
                self.transcript = after.messages;
            }
            Err(reason) => {
                self.transcript = before.messages;
                match keep {
                    Keep::Newest => return Err(format!("压缩失败：{reason}；会话文件没有改动")),
                    Keep::WhatFits => eprintln!(
                        "pi：压缩失败：{reason}；会话文件没有改动，这一轮只发送放得下的最近交互"
                    ),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pi_course::types::{AssistantMessage, StopReason, Usage};

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
