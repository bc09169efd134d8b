//! The composition root: every dependency of the learner's chapter-13 `Runtime`, built once
//! from the command line's choices, and the few things only a program does around it (the
//! session file, the summary that makes room, switching sessions).
//!
//! The runtime runs every task and persists it; this module never touches a transcript. When
//! something must be written outside the runtime (a compaction entry) or the session changes
//! (`/new`, `/resume`), the runtime is disposed, the file changes, and a new runtime is built
//! on the file's newest leaf.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pi_course::agent::{AgentEvent, Subscription};
use pi_course::agent_loop::{AgentRunResult, LoopEvent};
use pi_course::coding_tools::CodingTools;
use pi_course::context_compaction::{Budget, Fit};
use pi_course::extensions::{
    load_extension, Extension, ExtensionContext, ExtensionHost, ExtensionSource, LoadOutcome,
};
use pi_course::http_transport::Endpoint;
use pi_course::runtime_modes::{
    create_runtime, AppendFuture, ContextBudget, Runtime, RuntimeConfig, RuntimeControl,
    RuntimeDeps, SessionStore,
};
use pi_course::session_tree::{AppendError, SessionEntry};
use pi_course::tool::ToolRegistry;
use pi_course::types::{now_ms, text_of, AgentMessage, Model};
use tokio_util::sync::CancellationToken;

use crate::compaction::{self, estimate_tokens};
use crate::config::Config;
use crate::diff::DiffWatch;
use crate::gate::Gate;
use crate::interrupt::Interrupter;
use crate::project::{repository_root, Project};
use crate::render::Printer;
use crate::session::{system_prompt, today, usage_line};
use crate::session_store::{self, Choice, SessionLog};

/// How long a hook may take. Generous, because the confirmation hook waits for a person.
const HOOK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Who looks at stderr and stdout while a task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Render {
    /// A person: streamed text, tool lines, diffs, usage and progress notes.
    Terminal,
    /// A script (`--mode json`): stdout belongs to the mode, stderr carries errors only.
    Errors,
}

/// What the command line decided.
pub struct Settings {
    pub config: Config,
    pub max_steps: usize,
    pub context_window: u64,
    pub choice: Choice,
    pub gate: Option<Gate>,
    pub render: Render,
}

/// The log is shared with the runtime's store; it is taken out while a compaction writes,
/// when no runtime is alive to read it.
type SharedLog = Arc<Mutex<Option<SessionLog>>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The runtime's view of pi's session file. pi's header is metadata about the file, not part
/// of the conversation, so the runtime sees the conversation's first entry as a root; on disk
/// that entry still hangs below the header, as chapter 10's pi wrote it.
struct LogStore(SharedLog);

impl SessionStore for LogStore {
    fn entries(&self) -> Vec<SessionEntry> {
        let guard = lock(&self.0);
        let Some(log) = guard.as_ref() else {
            return Vec::new();
        };
        let mut entries = log.store().entries();
        if entries.is_empty() {
            return entries;
        }
        let header = entries.remove(0).id;
        for entry in &mut entries {
            if entry.parent_id.as_deref() == Some(header.as_str()) {
                entry.parent_id = None;
            }
        }
        entries
    }

    fn append(&self, entry: &SessionEntry) -> AppendFuture {
        let guard = lock(&self.0);
        let Some(log) = guard.as_ref() else {
            // Only reachable if a runtime outlived its log: refuse instead of losing the entry.
            return Box::pin(async { Err(AppendError::Tainted) });
        };
        let mut entry = entry.clone();
        if entry.parent_id.is_none() {
            entry.parent_id = log
                .store()
                .entries()
                .first()
                .map(|header| header.id.clone());
        }
        Box::pin(log.store().append(&entry))
    }
}

/// The built-in confirmation gate is compiled into pi, so trusting it is trusting pi itself;
/// an extension a project supplies would need the user's own, recorded consent instead.
struct Builtin(Arc<Gate>);

impl Extension for Builtin {
    fn register(&self, cx: &mut ExtensionContext) -> Result<(), String> {
        self.0.register(cx)
    }
}

/// How much history a compaction summarises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Whatever the learner's `build_context` keeps within the budget.
    WhatFits,
    /// Only the newest interaction (`/compact`).
    Newest,
}

/// Everything pi is made of: what each new runtime is built from.
pub struct Parts {
    config: Config,
    model: Arc<dyn Model>,
    tools: CodingTools,
    diffs: DiffWatch,
    printer: Printer,
    project: Project,
    gate: Option<Arc<Gate>>,
    base_prompt: String,
    window: u64,
    max_steps: usize,
    render: Render,
    session_dir: Option<PathBuf>,
    log: SharedLog,
    ids: Arc<AtomicU64>,
    interrupter: Interrupter,
    /// Chapter 09: steering and follow-ups the last run ended without taking, as text.
    unsent: Arc<Mutex<Vec<String>>>,
}

/// The parts and the one runtime currently built from them.
pub struct App {
    parts: Parts,
    runtime: Runtime,
    /// Keeps the terminal renderer subscribed for the runtime's life.
    _shown: Option<Subscription>,
    /// Hook failures already reported (the host of one runtime keeps them all).
    reported: usize,
}

/// The parts are read through the app; only the app changes its runtime.
impl std::ops::Deref for App {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.parts
    }
}

impl App {
    /// Builds every dependency and the first runtime. Errors are one line for the user.
    pub async fn build(settings: Settings) -> Result<App, String> {
        let Settings {
            config,
            max_steps,
            context_window,
            choice,
            gate,
            render,
        } = settings;
        let endpoint = Endpoint::new(config.base_url.clone(), config.api_key.clone());
        let model =
            pi_http::openai_compatible_model_with(endpoint, &config.model, config.http_options())
                .map_err(|error| format!("无法建立 HTTP 客户端：{error}"))?;
        let tools = CodingTools::new(&config.root)
            .map_err(|error| format!("无法在 {} 里工作：{error}", config.root.display()))?;
        let base_prompt = system_prompt(&config, &tools.shell(), &today());
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let project = Project::load(&config.root, home.as_deref())?;
        for warning in &project.warnings {
            eprintln!("pi：{warning}");
        }
        let session_dir = choice.dir.clone();
        let log = session_store::open_log(choice, &config).await?;
        let parts = Parts {
            config,
            model: Arc::new(model),
            tools,
            diffs: DiffWatch::default(),
            printer: Printer::default(),
            project,
            gate: gate.map(Arc::new),
            base_prompt,
            window: context_window,
            max_steps,
            render,
            session_dir,
            log: Arc::new(Mutex::new(Some(log))),
            ids: Arc::default(),
            interrupter: Interrupter::default(),
            unsent: Arc::default(),
        };
        let (runtime, shown) = parts.build_runtime()?;
        Ok(App {
            parts,
            runtime,
            _shown: shown,
            reported: 0,
        })
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub fn control(&self) -> RuntimeControl {
        self.runtime.control()
    }

    /// A signal's answer to the running task (see `interrupt.rs`).
    /// The messages the last run ended without taking, oldest first; the caller decides.
    pub fn take_unsent(&self) -> Vec<String> {
        std::mem::take(&mut *self.unsent.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub fn interrupter(&self) -> Interrupter {
        self.interrupter.clone()
    }

    pub fn max_steps(&self) -> usize {
        self.max_steps
    }

    /// Whether the confirmation gate may ask on the terminal (then nothing else reads it).
    pub fn asks(&self) -> bool {
        self.gate.is_some()
    }

    /// Replaces the runtime with a new one on the newest leaf of the current file.
    fn rebuild(&mut self) -> Result<(), String> {
        let (runtime, shown) = self.parts.build_runtime()?;
        self.runtime = runtime;
        self._shown = shown;
        self.reported = 0;
        Ok(())
    }
}

impl Parts {
    /// A runtime on the newest leaf of the current file. It always wants pi's system prompt
    /// and the project's resources as they are now: a new file starts with them, and a
    /// resumed one gets a system patch only when they changed since (a new day, an edited
    /// AGENTS.md), so the model never works from stale instructions.
    fn build_runtime(&self) -> Result<(Runtime, Option<Subscription>), String> {
        let store = LogStore(Arc::clone(&self.log));
        let entries = store.entries();
        // Ids count on from the file's entries, header included, as chapter 10's pi did.
        self.ids.store(entries.len() as u64 + 2, Ordering::SeqCst);
        let registry = self
            .tools
            .registry()
            .map_err(|error| format!("工具注册失败：{error}"))?;
        let registry = self.diffs.wrap(registry, self.tools.workspace())?;
        let host = self.extend(registry)?;
        let context = ContextBudget {
            budget: self.budget(),
            estimate: Arc::new(estimate_tokens),
        };
        let mut config = RuntimeConfig::new(entries.last().map(|entry| entry.id.as_str()), context);
        config.max_steps = self.max_steps;
        config.system_prompt = Some(self.base_prompt.clone());
        let ids = Arc::clone(&self.ids);
        let deps = RuntimeDeps {
            model: Arc::new(self.interrupter.wrap(Arc::clone(&self.model))),
            tools: host.registry(),
            session: Arc::new(store),
            resources: (!self.project.section.is_empty()).then(|| self.project.section.clone()),
            extensions: Some(host),
            create_id: Arc::new(move || {
                format!("{:x}-{}", now_ms(), ids.fetch_add(1, Ordering::SeqCst))
            }),
            now: Arc::new(now_ms),
        };
        let runtime = create_runtime(config, deps)
            .map_err(|error| format!("会话文件 {} 不能恢复：{error}", self.file().display()))?;
        let shown = match self.render {
            Render::Terminal => Some(self.show(&runtime)),
            Render::Errors => None,
        };
        Ok((runtime, shown))
    }

    /// Rendering is one more subscriber: the runtime's loop events feed pi's `Printer`
    /// (through the diff watch), a delivered steering or follow-up line is named, and the
    /// end of a run ends the line, however it ended, keeping what it did not take.
    fn show(&self, runtime: &Runtime) -> Subscription {
        let sink = self.diffs.sink(self.printer.sink());
        let unsent = Arc::clone(&self.unsent);
        // Calls started and not answered yet: an abort stops the loop before it reports
        // them, and the Agent pairs them in the run's end instead.
        let running: Mutex<Vec<String>> = Mutex::default();
        runtime.control().subscribe(move |event, _| match event {
            AgentEvent::Loop { event, .. } => {
                let mut running = running.lock().unwrap_or_else(PoisonError::into_inner);
                match event {
                    LoopEvent::ToolStart(call) => running.push(call.id.clone()),
                    LoopEvent::ToolEnd(result) | LoopEvent::ToolSkipped(result) => {
                        running.retain(|id| *id != result.tool_call_id)
                    }
                    _ => {}
                }
                drop(running);
                sink(event.clone());
            }
            AgentEvent::Delivered { messages, .. } => {
                for message in messages
                    .iter()
                    .filter(|m| matches!(m, AgentMessage::User(_)))
                {
                    eprintln!("pi：已交给模型：{}", text_of(message));
                }
            }
            AgentEvent::RunEnd {
                reason,
                messages,
                unsent: left,
                ..
            } => {
                let cut: Vec<String> =
                    std::mem::take(&mut *running.lock().unwrap_or_else(PoisonError::into_inner));
                for message in messages {
                    if let AgentMessage::ToolResult(result) = message {
                        if cut.contains(&result.tool_call_id) {
                            sink(LoopEvent::ToolSkipped(result.clone()));
                        }
                    }
                }
                sink(LoopEvent::TurnEnd(*reason));
                let texts = left
                    .iter()
                    .filter(|message| matches!(message, AgentMessage::User(_)))
                    .map(text_of);
                unsent
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend(texts);
            }
            AgentEvent::RunStart { .. } => {}
        })
    }

    /// The core tools plus `skill`, behind the gate's hook when there is one.
    fn extend(&self, mut registry: ToolRegistry) -> Result<ExtensionHost, String> {
        if let Some(skill) = self.project.skill_tool() {
            registry
                .register(skill)
                .map_err(|error| format!("工具注册失败：{error}"))?;
        }
        let mut host = ExtensionHost::new(registry).with_hook_timeout(HOOK_TIMEOUT);
        if let Some(gate) = &self.gate {
            let source = ExtensionSource {
                id: "confirm".into(),
                location: "builtin:confirm".into(),
            };
            let gate = Arc::clone(gate);
            let outcome = load_extension(
                &mut host,
                &source,
                |_| true,
                move |_| Ok(Box::new(Builtin(gate)) as Box<dyn Extension>),
            )
            .map_err(|error| error.to_string())?;
            debug_assert_eq!(outcome, LoadOutcome::Active);
        }
        Ok(host)
    }
}

impl App {
    /// The transcript length before a task, for `finish`.
    pub fn mark(&self) -> usize {
        self.control().state().messages.len()
    }

    /// After a task: its usage line (for a person) and any hook failures (for everyone).
    pub fn finish(&mut self, result: &AgentRunResult, mark: usize) {
        if self.render == Render::Terminal {
            if let Some(line) = usage_line(result.messages.get(mark..).unwrap_or_default()) {
                eprintln!("{line}");
            }
        }
        let diagnostics = self
            .runtime
            .extensions()
            .map(ExtensionHost::diagnostics)
            .unwrap_or_default();
        for diagnostic in diagnostics.iter().skip(self.reported) {
            eprintln!(
                "pi：扩展 {} 的 hook 出了故障（调用 {}）：{}",
                diagnostic.extension_id, diagnostic.call_id, diagnostic.message
            );
        }
        self.reported = diagnostics.len();
    }
}

impl Parts {
    fn budget(&self) -> Budget {
        compaction::budget(self.window)
    }

    fn file(&self) -> PathBuf {
        lock(&self.log)
            .as_ref()
            .map(|log| log.file().to_path_buf())
            .unwrap_or_default()
    }

    /// A progress note: for a person only.
    fn note(&self, line: &str) {
        if self.render == Render::Terminal {
            eprintln!("{line}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Chapter 11 around the runtime: room is made before a task, or on `/compact`
// ---------------------------------------------------------------------------------------------

impl App {
    /// Before a task: when the session no longer fits the budget, older interactions are
    /// summarised into a compaction entry. A failed summary writes nothing; the runtime's own
    /// projection then sends what fits.
    pub async fn fit_context(&mut self, cancel: &CancellationToken) -> Result<(), String> {
        let over = {
            let mut guard = lock(&self.log);
            match guard.as_mut() {
                None => false,
                Some(log) => {
                    log.follow();
                    let built = log.context(&self.budget())?;
                    !built.messages.is_empty() && built.fit != Fit::WithinBudget
                }
            }
        };
        if over {
            self.compact(Keep::WhatFits, cancel).await?;
        }
        Ok(())
    }

    /// `/compact`: summarises everything but the newest interaction now.
    pub async fn compact_now(&mut self, cancel: &CancellationToken) -> Result<(), String> {
        self.compact(Keep::Newest, cancel).await
    }

    /// The entry is appended outside the runtime, so the runtime goes first: disposed (its
    /// writes are on disk), the entry appended, a new runtime built on the new leaf.
    async fn compact(&mut self, keep: Keep, cancel: &CancellationToken) -> Result<(), String> {
        self.runtime.dispose().await;
        let taken = lock(&self.log).take();
        let outcome = match taken {
            None => Err("没有会话，无从压缩".to_string()),
            Some(mut log) => {
                log.follow();
                let outcome = self.summarise_into(&mut log, keep, cancel).await;
                *lock(&self.log) = Some(log);
                outcome
            }
        };
        self.rebuild()?;
        outcome
    }
}

impl Parts {
    async fn summarise_into(
        &self,
        log: &mut SessionLog,
        keep: Keep,
        cancel: &CancellationToken,
    ) -> Result<(), String> {
        let budget = self.budget();
        // Everything the model would see without a budget, then what the budget keeps.
        let whole = log.context(&compaction::UNBOUNDED)?;
        let before = log.context(&budget)?;
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
            return match keep {
                Keep::Newest => Err("只有最近的一次交互，没有更早的历史可以压缩".to_string()),
                Keep::WhatFits => {
                    self.note(&format!(
                        "pi：最近的一次交互本身就超出上下文预算（约 {} tokens），没有更早的历史可以压缩",
                        before.tokens
                    ));
                    Ok(())
                }
            };
        };
        let tokens_before = whole.tokens;
        self.note(&format!("pi：正在把较早的 {dropped} 次交互压缩成摘要…"));
        let input = log.compaction_input(&first_kept)?;
        match compaction::summarise(Arc::clone(&self.model), &input, cancel.clone()).await {
            Ok(summary) => {
                log.compact(&summary, &first_kept, tokens_before).await?;
                let after = log.context(&budget)?;
                self.note(&format!(
                    "pi：已压缩：发给模型的上下文约 {tokens_before} → {} tokens",
                    after.tokens
                ));
                Ok(())
            }
            Err(reason) => match keep {
                Keep::Newest => Err(format!("压缩失败：{reason}；会话文件没有改动")),
                Keep::WhatFits => {
                    eprintln!(
                        "pi：压缩失败：{reason}；会话文件没有改动，这一轮只发送放得下的最近交互"
                    );
                    Ok(())
                }
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Interactive mode's session commands
// ---------------------------------------------------------------------------------------------

impl Parts {
    /// `/session`: the file, how many entries it holds, and what the model would be sent.
    pub fn describe(&self) -> Result<Vec<String>, String> {
        let mut guard = lock(&self.log);
        let log = guard.as_mut().ok_or("没有打开的会话")?;
        log.follow();
        let entries = log.store().entries().len();
        let tokens = log.context(&self.budget())?.tokens;
        Ok(vec![
            format!("pi：会话文件 {}", log.file().display()),
            format!(
                "pi：{entries} 个 entry，发给模型的上下文约 {tokens} tokens（窗口 {}）",
                self.window
            ),
        ])
    }

    /// The directory `/new` writes to and `/resume` lists.
    fn sessions_dir(&self) -> Result<PathBuf, String> {
        let cwd = std::fs::canonicalize(&self.config.root)
            .map_err(|error| format!("读不到工作目录 {}：{error}", self.config.root.display()))?;
        session_store::sessions_dir(
            self.session_dir.as_deref(),
            |name| std::env::var(name).ok(),
            &cwd,
        )
    }

    /// This directory's session files, newest first (the order `/resume` numbers them in).
    fn session_files(&self) -> Result<Vec<PathBuf>, String> {
        let dir = self.sessions_dir()?;
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
            .collect();
        files.sort_by(|a, b| b.cmp(a));
        Ok(files)
    }

    /// `/resume`: the numbered list, each with its first task.
    pub fn listing(&self) -> Result<String, String> {
        let listing = session_store::list_sessions(self.session_dir.as_deref(), &self.config)?;
        // The last line tells a shell user how to continue; here `/resume N` does it.
        let mut lines: Vec<&str> = listing.lines().collect();
        lines.pop();
        let mut text = lines.join("\n");
        text.push_str("\n用 /resume N 切换到第 N 个会话\n");
        Ok(text)
    }

    /// A `/name …` line becomes its template's text; other lines stay as they are.
    pub fn expand(&self, line: &str) -> Result<String, String> {
        self.project.expand(line)
    }

    /// Whether `/name` names a prompt template of this project (`.pi/prompts/name.md`).
    pub fn has_template(&self, name: &str) -> bool {
        !name.contains('/')
            && repository_root(&self.config.root)
                .join(".pi/prompts")
                .join(format!("{name}.md"))
                .is_file()
    }
}

impl App {
    /// `/new`: a new file in this directory's session folder; the old file is left as it is.
    pub async fn new_session(&mut self) -> Result<PathBuf, String> {
        let choice = Choice {
            dir: self.session_dir.clone(),
            ..Choice::default()
        };
        let log = session_store::open_log(choice, &self.config).await?;
        self.switch(log).await
    }

    /// `/resume N`: continues the N-th file of the listing from its newest entry.
    pub async fn resume(&mut self, number: usize) -> Result<PathBuf, String> {
        let files = self.session_files()?;
        let Some(file) = number.checked_sub(1).and_then(|at| files.get(at)) else {
            return Err(format!(
                "没有第 {number} 个会话（这个目录有 {} 个，用 /resume 查看）",
                files.len()
            ));
        };
        if same_file(file, &self.file()) {
            return Err(format!("已经在这个会话里了：{}", file.display()));
        }
        let choice = Choice {
            file: Some(file.clone()),
            dir: self.session_dir.clone(),
            ..Choice::default()
        };
        let log = session_store::open_log(choice, &self.config).await?;
        self.switch(log).await
    }

    /// Opened first, so a file that fails to open leaves the current session running.
    async fn switch(&mut self, log: SessionLog) -> Result<PathBuf, String> {
        let file = log.file().to_path_buf();
        self.runtime.dispose().await;
        *lock(&self.log) = Some(log);
        self.rebuild()?;
        Ok(file)
    }

    /// Ends the session: the runtime's accepted work is on disk before pi exits.
    pub async fn close(&self) {
        self.runtime.dispose().await;
    }
}

fn same_file(left: &Path, right: &Path) -> bool {
    match (left.canonicalize(), right.canonicalize()) {
        (Ok(left), Ok(right)) => left == right,
        _ => left == right,
    }
}
