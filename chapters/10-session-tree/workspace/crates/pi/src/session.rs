//! One conversation: the model, the coding tools over one directory, and the transcript that
//! every turn extends. Each turn is one run of the learner's agent loop.

use std::sync::Arc;

use pi_course::agent_loop::{run_agent_loop, AgentLoopOptions, AgentRunResult};
use pi_course::coding_tools::CodingTools;
use pi_course::http_transport::Endpoint;
use pi_course::types::{now_ms, user_message, AgentContext, AgentMessage, Model, SystemMessage};
use tokio_util::sync::CancellationToken;

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
