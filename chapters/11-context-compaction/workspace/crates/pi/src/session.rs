//! One conversation: the model, the coding tools over one directory, and the transcript that
//! every turn extends. Each turn is one run of the learner's agent loop.

use std::sync::Arc;

use pi_course::agent_loop::{run_agent_loop, AgentLoopOptions, AgentRunResult};
use pi_course::coding_tools::CodingTools;
use pi_course::context_compaction::{Budget, Fit};
use pi_course::http_transport::Endpoint;
use pi_course::types::{now_ms, user_message, AgentContext, AgentMessage, Model, SystemMessage};
use tokio_util::sync::CancellationToken;

use crate::compaction;
use crate::config::Config;
use crate::render::Printer;
use crate::session_store::SessionLog;

/// What the model is told about its situation before the first task.
pub fn system_prompt(config: &Config) -> String {
    format!(
        "You are pi, a coding agent. You work in the directory {} through four tools: read, \
         write, edit and bash. Paths are relative to that directory, and nothing outside it can \
         be touched. Read a file before you edit it, keep changes small, check your work with \
         bash when that helps, and finish with a short answer saying what you did.",
        config.root.display()
    )
}

pub struct Session {
    model: Arc<dyn Model>,
    tools: CodingTools,
    transcript: Vec<AgentMessage>,
    max_steps: usize,
    printer: Printer,
    /// Chapter 10: where every turn is recorded, once a session is attached.
    log: Option<SessionLog>,
    /// Chapter 11: the part of the model's window a task may fill.
    budget: Budget,
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
            content: system_prompt(config),
            sections: None,
            timestamp: now_ms(),
        });
        Ok(Session {
            model: Arc::new(model),
            tools,
            transcript: vec![system],
            max_steps,
            printer: Printer::default(),
            log: None,
            budget: compaction::budget(compaction::DEFAULT_CONTEXT_WINDOW),
        })
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
        options.on_event = Some(self.printer.sink());
        options.max_steps = self.max_steps;
        let result = run_agent_loop(options).await;
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
