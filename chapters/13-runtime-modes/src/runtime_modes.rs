//! One runtime for every mode: the composition root where the model, the tools, the session,
//! the resources and the extensions meet, once, and the modes that only present what it does.
//!
//! Invariants:
//! - everything the runtime uses arrives through `RuntimeDeps`; it reads no clock, id source or
//!   file of its own, so a test builds it from fakes;
//! - a non-empty session is resumed only from a leaf the caller names; the Agent owns its copy of
//!   that path;
//! - the model sees `[persisted path + unpersisted suffix]` projected through chapter 11's budget;
//!   tools and the cancellation token pass through, and the inner model gets a copy it cannot use
//!   to reach the Agent's transcript;
//! - a prompt resolves only after its new messages are on disk, in order, each one appended once;
//!   the persisted prefix is never written again; a failed write poisons the runtime for good;
//! - modes differ only in presentation: each calls `prompt` exactly once.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::agent::{Agent, AgentError, AgentEvent, AgentOptions, AgentState, Prompt, Subscription};
use crate::agent_loop::{AgentRunResult, LoopEvent, RunReason, DEFAULT_MAX_STEPS};
use crate::context_compaction::{resume_context, Budget};
use crate::extensions::ExtensionHost;
use crate::session_tree::{
    path_to, AppendError, EntryBody, InMemorySessionStore, JsonlSessionStore, PathError,
    SessionEntry,
};
use crate::tool::ToolRegistry;
use crate::types::{
    assistant_message, assistant_message_event_stream, text_of, AgentContext, AgentMessage,
    AssistantMessageEventStream, Model, ModelEvent, StopReason, StreamOptions,
};

/// The version of the `--mode json` line format. Bumped only when a field changes meaning.
pub const JSON_EVENT_VERSION: u64 = 1;

// ---------------------------------------------------------------------------------------------
// The dependencies
// ---------------------------------------------------------------------------------------------

/// An append whose outcome is reported later; it borrows nothing from the caller.
pub type AppendFuture = Pin<Box<dyn Future<Output = Result<(), AppendError>> + Send>>;

/// The part of chapter 10's stores the runtime needs: read the entries, append one.
pub trait SessionStore: Send + Sync {
    fn entries(&self) -> Vec<SessionEntry>;
    /// Decides at the call, in call order (chapter 10's rule); the future reports the outcome.
    fn append(&self, entry: &SessionEntry) -> AppendFuture;
}

impl SessionStore for InMemorySessionStore {
    fn entries(&self) -> Vec<SessionEntry> {
        InMemorySessionStore::entries(self)
    }

    fn append(&self, entry: &SessionEntry) -> AppendFuture {
        Box::pin(InMemorySessionStore::append(self, entry))
    }
}

impl SessionStore for JsonlSessionStore {
    fn entries(&self) -> Vec<SessionEntry> {
        JsonlSessionStore::entries(self)
    }

    fn append(&self, entry: &SessionEntry) -> AppendFuture {
        Box::pin(JsonlSessionStore::append(self, entry))
    }
}

/// The caller's token estimate (chapter 11), shareable with the model adapter.
pub type SharedEstimate = Arc<dyn Fn(&AgentMessage) -> u64 + Send + Sync>;

/// The context budget: chapter 11's `Budget` with the estimate that measures against it.
#[derive(Clone)]
pub struct ContextBudget {
    pub budget: Budget,
    pub estimate: SharedEstimate,
}

/// What this run of the program wants; nothing here is a service.
#[derive(Clone)]
pub struct RuntimeConfig {
    /// Required for a non-empty session: the runtime never guesses which branch to continue.
    pub active_leaf: Option<String>,
    /// The system prompt this program wants. `None` on resume keeps the transcript's own.
    pub system_prompt: Option<String>,
    pub max_steps: usize,
    pub context: ContextBudget,
}

impl RuntimeConfig {
    pub fn new(active_leaf: Option<&str>, context: ContextBudget) -> Self {
        RuntimeConfig {
            active_leaf: active_leaf.map(str::to_string),
            system_prompt: None,
            max_steps: DEFAULT_MAX_STEPS,
            context,
        }
    }
}

/// Every service the runtime uses, passed in explicitly.
pub struct RuntimeDeps {
    pub model: Arc<dyn Model>,
    /// The core tools; when `extensions` is given, its hooks wrap these (chapter 12).
    pub tools: ToolRegistry,
    pub session: Arc<dyn SessionStore>,
    /// The resource section of the system prompt (chapter 12's `format_resource_section`).
    pub resources: Option<String>,
    pub extensions: Option<ExtensionHost>,
    pub create_id: Arc<dyn Fn() -> String + Send + Sync>,
    pub now: Arc<dyn Fn() -> u64 + Send + Sync>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeError {
    /// The session has entries but no leaf was named.
    LeafRequired {
        entries: usize,
    },
    Path(PathError),
    Agent(AgentError),
    /// This prompt's write failed; the runtime is poisoned from now on.
    Write(AppendError),
    /// An earlier write failed; `cause` says which.
    Poisoned {
        cause: String,
    },
    Disposed,
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::LeafRequired { entries } => write!(
                f,
                "会话里已经有 {entries} 个 entry：恢复时必须指定要继续的 leaf"
            ),
            RuntimeError::Path(error) => write!(f, "{error}"),
            RuntimeError::Agent(error) => write!(f, "{error}"),
            RuntimeError::Write(error) => {
                write!(f, "保存对话失败，运行时已停用：{error}")
            }
            RuntimeError::Poisoned { cause } => {
                write!(f, "运行时已停用，不再接受 prompt：之前{cause}")
            }
            RuntimeError::Disposed => write!(f, "运行时已关闭，不再接受 prompt"),
        }
    }
}

impl std::error::Error for RuntimeError {}

/// What the model adapter needs from the runtime at request time.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ContextSnapshot {
    /// The persisted path from the root to the active leaf.
    pub active_path: Vec<SessionEntry>,
    /// How many messages of the Agent's transcript are already on that path.
    pub persisted_message_count: usize,
}

/// The runtime's own record, behind one lock that is never held across an await.
#[derive(Debug, Default)]
struct Book {
    snapshot: ContextSnapshot,
    /// The content of the last system message on the path.
    current_system: Option<String>,
    poisoned: Option<String>,
    closed: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn messages_of(path: &[SessionEntry]) -> impl DoubleEndedIterator<Item = &AgentMessage> + '_ {
    path.iter().filter_map(|entry| match &entry.body {
        EntryBody::Message { message } => Some(message),
        _ => None,
    })
}

fn last_system(path: &[SessionEntry]) -> Option<String> {
    messages_of(path).rev().find_map(|message| match message {
        AgentMessage::System(system) => Some(system.content.clone()),
        _ => None,
    })
}

// ---------------------------------------------------------------------------------------------
// Lab 13.1: the runtime shell
// ---------------------------------------------------------------------------------------------

/// What the rest of the program may do with the Agent. There is deliberately no `prompt`:
/// a prompt that skipped the runtime would never be persisted.
#[derive(Clone)]
pub struct RuntimeControl {
    agent: Agent,
}

impl RuntimeControl {
    pub fn state(&self) -> Arc<AgentState> {
        self.agent.state()
    }

    pub fn subscribe(
        &self,
        listener: impl Fn(&AgentEvent, &AgentState) + Send + Sync + 'static,
    ) -> Subscription {
        self.agent.subscribe(listener)
    }

    pub fn steer(&self, text: &str) -> Result<(), AgentError> {
        self.agent.steer(text)
    }

    pub fn follow_up(&self, text: &str) -> Result<(), AgentError> {
        self.agent.follow_up(text)
    }

    pub fn abort(&self) -> bool {
        self.agent.abort()
    }
}

struct Shared {
    control: RuntimeControl,
    session: Arc<dyn SessionStore>,
    resources: Option<String>,
    extensions: Option<ExtensionHost>,
    create_id: Arc<dyn Fn() -> String + Send + Sync>,
    now: Arc<dyn Fn() -> u64 + Send + Sync>,
    /// The system text this program wants (`None`: keep the transcript's).
    wanted_system: Option<String>,
    book: Arc<Mutex<Book>>,
    /// Prompts take turns here, first come first served; `flush` and `dispose` queue too.
    turns: Arc<tokio::sync::Mutex<()>>,
}

/// The one runtime. Clones are handles to the same runtime (a mode and a Ctrl-C handler can
/// both hold one).
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
}

/// `base` and the resource section, in that order; `None` when both are absent.
fn compose_system(base: Option<&str>, resources: Option<&str>) -> Option<String> {
    let parts: Vec<&str> = base.into_iter().chain(resources).collect();
    (!parts.is_empty()).then(|| parts.join("\n\n"))
}

/// Builds the runtime. An empty session needs no leaf; a non-empty one needs the leaf to
/// continue from, and the Agent starts from an owned copy of that path's messages.
pub fn create_runtime(config: RuntimeConfig, deps: RuntimeDeps) -> Result<Runtime, RuntimeError> {
    // region: Lab 13.1 create_runtime
    let entries = deps.session.entries();
    let path = match &config.active_leaf {
        Some(leaf) => path_to(&entries, leaf).map_err(RuntimeError::Path)?,
        None if entries.is_empty() => Vec::new(),
        None => {
            return Err(RuntimeError::LeafRequired {
                entries: entries.len(),
            })
        }
    };
    let messages: Vec<AgentMessage> = messages_of(&path).cloned().collect();
    let wanted_system = compose_system(config.system_prompt.as_deref(), deps.resources.as_deref());
    let book = Arc::new(Mutex::new(Book {
        // A fresh session gets the wanted prompt as the Agent's base: nothing to patch.
        current_system: match path.is_empty() {
            true => wanted_system.clone(),
            false => last_system(&path),
        },
        snapshot: ContextSnapshot {
            persisted_message_count: messages.len(),
            active_path: path,
        },
        ..Book::default()
    }));
    let tools = match &deps.extensions {
        Some(host) => host.registry(),
        None => deps.tools,
    };
    let model = ContextProjectingModel::new(deps.model, config.context, {
        let book = Arc::clone(&book);
        Arc::new(move || lock(&book).snapshot.clone())
    });
    let mut options = AgentOptions::new(Arc::new(model), tools);
    options.max_steps = config.max_steps;
    if messages.is_empty() {
        options.system_prompt = wanted_system.clone();
    }
    let agent = Agent::with_messages(options, messages);
    Ok(Runtime {
        shared: Arc::new(Shared {
            control: RuntimeControl { agent },
            session: deps.session,
            resources: deps.resources,
            extensions: deps.extensions,
            create_id: deps.create_id,
            now: deps.now,
            wanted_system,
            book,
            turns: Arc::default(),
        }),
    })
    // endregion
}

impl Runtime {
    pub fn control(&self) -> RuntimeControl {
        self.shared.control.clone()
    }

    pub fn session(&self) -> &Arc<dyn SessionStore> {
        &self.shared.session
    }

    pub fn resources(&self) -> Option<&str> {
        self.shared.resources.as_deref()
    }

    pub fn extensions(&self) -> Option<&ExtensionHost> {
        self.shared.extensions.as_ref()
    }

    /// The last persisted entry of the active path; `None` before the first write.
    pub fn active_leaf(&self) -> Option<String> {
        let book = lock(&self.shared.book);
        book.snapshot
            .active_path
            .last()
            .map(|entry| entry.id.clone())
    }
}

// ---------------------------------------------------------------------------------------------
// Lab 13.2: the context adapter
// ---------------------------------------------------------------------------------------------

/// Reads the runtime's snapshot at request time.
pub type SnapshotSource = Arc<dyn Fn() -> ContextSnapshot + Send + Sync>;

/// A `Model` around a `Model`: the Agent talks to it as to any model; it sends the inner model
/// the budgeted projection of the session instead of the raw transcript.
pub struct ContextProjectingModel {
    inner: Arc<dyn Model>,
    context: ContextBudget,
    snapshot: SnapshotSource,
}

impl ContextProjectingModel {
    pub fn new(inner: Arc<dyn Model>, context: ContextBudget, snapshot: SnapshotSource) -> Self {
        ContextProjectingModel {
            inner,
            context,
            snapshot,
        }
    }

    /// The messages the inner model reads: the persisted path, the unpersisted suffix of
    /// `transcript` hung below it for this request only, through chapter 11's `resume_context`.
    pub fn project(&self, transcript: &[AgentMessage]) -> Result<Vec<AgentMessage>, String> {
        // region: Lab 13.2 project
        let snapshot = (self.snapshot)();
        let suffix = transcript
            .get(snapshot.persisted_message_count..)
            .unwrap_or_default();
        let mut path = snapshot.active_path;
        for (at, message) in suffix.iter().enumerate() {
            let parent = path.last().map(|entry| entry.id.clone());
            // Ids no store ever gives out: these entries exist for this request only.
            path.push(SessionEntry::message(
                &format!("\u{0}unpersisted-{at}"),
                parent.as_deref(),
                0,
                message.clone(),
            ));
        }
        let estimate = &*self.context.estimate;
        resume_context(&path, &self.context.budget, &|message| estimate(message))
            .map(|built| built.messages)
            .map_err(|error| error.to_string())
        // endregion
    }
}

impl Model for ContextProjectingModel {
    fn stream(
        &self,
        context: &AgentContext,
        options: StreamOptions,
    ) -> AssistantMessageEventStream {
        // region: Lab 13.2 stream
        match self.project(&context.messages) {
            Ok(messages) => {
                // A fresh context: the inner model owns nothing the Agent reads.
                let projected = AgentContext {
                    messages,
                    tools: context.tools.clone(),
                };
                self.inner.stream(&projected, options)
            }
            Err(cause) => {
                let stream = assistant_message_event_stream();
                let mut error = assistant_message(Vec::new(), StopReason::Error);
                error.error_message = Some(format!("无法为模型投影上下文：{cause}"));
                stream.push(ModelEvent::Error {
                    reason: StopReason::Error,
                    error: error.clone(),
                });
                stream.end(error);
                stream
            }
        }
        // endregion
    }
}

// ---------------------------------------------------------------------------------------------
// Lab 13.3: prompt, persistence, flush and dispose
// ---------------------------------------------------------------------------------------------

/// The system patch a prompt carries: the wanted text, only when it differs from the current.
pub fn system_patch(wanted: Option<&str>, current: Option<&str>) -> Option<String> {
    // region: Lab 13.3 system_patch
    match wanted {
        Some(wanted) if Some(wanted) != current => Some(wanted.to_string()),
        _ => None,
    }
    // endregion
}

impl Runtime {
    /// Runs one prompt and resolves after its new messages are persisted. Prompts run one at a
    /// time in the order they first wait; a closed runtime refuses at the call.
    pub fn prompt(
        &self,
        text: &str,
    ) -> impl Future<Output = Result<AgentRunResult, RuntimeError>> + Send + 'static {
        // region: Lab 13.3 prompt
        // stub: async move { todo!() }
        let closed = lock(&self.shared.book).closed;
        let shared = Arc::clone(&self.shared);
        let text = text.to_string();
        async move {
            if closed {
                return Err(RuntimeError::Disposed);
            }
            let _turn = Arc::clone(&shared.turns).lock_owned().await;
            // Checked after the wait: a write that failed while this prompt queued counts.
            let patch = {
                let book = lock(&shared.book);
                if let Some(cause) = &book.poisoned {
                    return Err(RuntimeError::Poisoned {
                        cause: cause.clone(),
                    });
                }
                system_patch(
                    shared.wanted_system.as_deref(),
                    book.current_system.as_deref(),
                )
            };
            let mut prompt = Prompt::new(&text);
            prompt.system = patch;
            let run = shared
                .control
                .agent
                .prompt(prompt)
                .map_err(RuntimeError::Agent)?;
            let result = run.await;
            persist(&shared, &result.messages).await?;
            Ok(result)
        }
        // endregion
    }

    /// Resolves when every prompt queued before this call has finished and been persisted.
    pub async fn flush(&self) {
        // region: Lab 13.3 flush
        drop(Arc::clone(&self.shared.turns).lock_owned().await);
        // endregion
    }

    /// Closes `prompt` for good, at once, then waits until the work already accepted is on
    /// disk.
    pub async fn dispose(&self) {
        // region: Lab 13.3 dispose
        lock(&self.shared.book).closed = true;
        self.flush().await;
        // endregion
    }
}

/// Appends the messages of `transcript` past the persisted prefix, one entry each, in order.
async fn persist(shared: &Shared, transcript: &[AgentMessage]) -> Result<(), RuntimeError> {
    // region: Lab 13.3 persist
    let start = lock(&shared.book).snapshot.persisted_message_count;
    for message in transcript.get(start..).unwrap_or_default() {
        let entry = {
            let book = lock(&shared.book);
            let parent = book
                .snapshot
                .active_path
                .last()
                .map(|entry| entry.id.clone());
            SessionEntry::message(
                &(shared.create_id)(),
                parent.as_deref(),
                (shared.now)(),
                message.clone(),
            )
        };
        if let Err(error) = shared.session.append(&entry).await {
            lock(&shared.book).poisoned = Some(error.to_string());
            return Err(RuntimeError::Write(error));
        }
        let mut book = lock(&shared.book);
        if let AgentMessage::System(system) = message {
            book.current_system = Some(system.content.clone());
        }
        book.snapshot.active_path.push(entry);
        book.snapshot.persisted_message_count += 1;
    }
    Ok(())
    // endregion
}

// ---------------------------------------------------------------------------------------------
// Lab 13.4: modes
// ---------------------------------------------------------------------------------------------

/// How a run is presented. Nothing else differs between modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeMode {
    Interactive,
    Print,
    Json,
}

#[derive(Debug)]
pub enum ModeError {
    /// The mode name is not one of `interactive`, `print`, `json`.
    Unknown(String),
    Runtime(RuntimeError),
    /// Writing the output failed: the writer's own error, unchanged.
    Io(io::Error),
}

impl fmt::Display for ModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModeError::Unknown(name) => {
                write!(f, "未知的模式 {name:?}：只能是 interactive、print 或 json")
            }
            ModeError::Runtime(error) => write!(f, "{error}"),
            ModeError::Io(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for ModeError {}

impl FromStr for RuntimeMode {
    type Err = ModeError;

    fn from_str(name: &str) -> Result<Self, ModeError> {
        // region: Lab 13.4 from_str
        match name {
            "interactive" => Ok(RuntimeMode::Interactive),
            "print" => Ok(RuntimeMode::Print),
            "json" => Ok(RuntimeMode::Json),
            _ => Err(ModeError::Unknown(name.to_string())),
        }
        // endregion
    }
}

/// Where a mode writes. Any `std::io::Write` is one.
pub trait ModeIo {
    fn emit(&mut self, text: &str) -> io::Result<()>;
}

impl<W: io::Write> ModeIo for W {
    fn emit(&mut self, text: &str) -> io::Result<()> {
        self.write_all(text.as_bytes())?;
        self.flush()
    }
}

fn reason_name(reason: RunReason) -> &'static str {
    match reason {
        RunReason::Stop => "stop",
        RunReason::Length => "length",
        RunReason::Error => "error",
        RunReason::Aborted => "aborted",
        RunReason::MaxSteps => "max_steps",
    }
}

/// One `--mode json` line for `event`, or `None` for events the format leaves out (the
/// model's start/end and tool-call deltas: their content arrives in `assistant_message`).
pub fn event_json(event: &AgentEvent) -> Option<Value> {
    // region: Lab 13.4 event_json
    let v = JSON_EVENT_VERSION;
    let line = match event {
        AgentEvent::RunStart { run_id, .. } => {
            json!({"v": v, "type": "run_start", "runId": run_id})
        }
        AgentEvent::Loop { run_id, event } => match event {
            LoopEvent::Model(ModelEvent::TextDelta { delta, .. }) => {
                json!({"v": v, "type": "text_delta", "runId": run_id, "delta": delta})
            }
            LoopEvent::Model(_) => return None,
            LoopEvent::AssistantMessage(message) => {
                json!({"v": v, "type": "assistant_message", "runId": run_id, "message": message})
            }
            LoopEvent::ToolStart(call) => json!({
                "v": v, "type": "tool_start", "runId": run_id,
                "callId": call.id, "name": call.name, "arguments": call.arguments,
            }),
            LoopEvent::ToolProgress { call_id, content } => json!({
                "v": v, "type": "tool_progress", "runId": run_id,
                "callId": call_id, "content": content,
            }),
            LoopEvent::ToolEnd(result) => {
                json!({"v": v, "type": "tool_end", "runId": run_id, "result": result})
            }
            LoopEvent::ToolSkipped(result) => {
                json!({"v": v, "type": "tool_skipped", "runId": run_id, "result": result})
            }
            LoopEvent::TurnEnd(reason) => {
                json!({"v": v, "type": "turn_end", "runId": run_id, "reason": reason_name(*reason)})
            }
        },
        AgentEvent::Delivered { run_id, messages } => {
            json!({"v": v, "type": "delivered", "runId": run_id, "messages": messages})
        }
        AgentEvent::RunEnd { run_id, reason, .. } => {
            json!({"v": v, "type": "run_end", "runId": run_id, "reason": reason_name(*reason)})
        }
    };
    Some(line)
    // endregion
}

/// The text a mode writes while the run works, for one event.
fn live_text(mode: RuntimeMode, event: &AgentEvent) -> Option<String> {
    match mode {
        RuntimeMode::Json => event_json(event).map(|line| format!("{line}\n")),
        RuntimeMode::Interactive => match event {
            AgentEvent::Loop {
                event: LoopEvent::ToolStart(call),
                ..
            } => Some(format!("· {}\n", call.name)),
            _ => None,
        },
        RuntimeMode::Print => None,
    }
}

/// The text a mode writes once the run is over.
fn final_text(mode: RuntimeMode, result: &AgentRunResult) -> String {
    let text = result
        .messages
        .iter()
        .rev()
        .find(|message| matches!(message, AgentMessage::Assistant(_)))
        .map(text_of)
        .unwrap_or_default();
    match mode {
        RuntimeMode::Json => format!(
            "{}\n",
            json!({
                "v": JSON_EVENT_VERSION, "type": "final",
                "reason": reason_name(result.reason), "text": text,
            })
        ),
        RuntimeMode::Interactive | RuntimeMode::Print => format!("{text}\n"),
    }
}

/// Runs one task in `mode`: the mode is checked before anything runs, `prompt` is called
/// exactly once, and the first output error is returned as it is — after the run has been
/// persisted, so a closed pipe loses no history.
pub async fn run_mode(
    runtime: &Runtime,
    mode: &str,
    prompt: &str,
    io: &mut dyn ModeIo,
) -> Result<AgentRunResult, ModeError> {
    // region: Lab 13.4 run_mode
    let mode: RuntimeMode = mode.parse()?;
    let (sender, mut events) = mpsc::unbounded_channel();
    let subscription = runtime.control().subscribe(move |event, _| {
        let _ = sender.send(live_text(mode, event));
    });
    let run = runtime.prompt(prompt);
    tokio::pin!(run);
    let mut failed: Option<io::Error> = None;
    let mut write = |text: &str, failed: &mut Option<io::Error>| {
        if failed.is_none() {
            *failed = io.emit(text).err();
        }
    };
    let outcome = loop {
        tokio::select! {
            biased;
            Some(text) = events.recv() => {
                if let Some(text) = text {
                    write(&text, &mut failed);
                }
            }
            outcome = &mut run => break outcome,
        }
    };
    drop(subscription);
    while let Ok(text) = events.try_recv() {
        if let Some(text) = text {
            write(&text, &mut failed);
        }
    }
    let result = outcome.map_err(ModeError::Runtime)?;
    write(&final_text(mode, &result), &mut failed);
    match failed {
        Some(error) => Err(ModeError::Io(error)),
        None => Ok(result),
    }
    // endregion
}
