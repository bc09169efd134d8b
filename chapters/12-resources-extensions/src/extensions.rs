//! Extensions: code that adds tools and hooks, admitted through a trust gate.
//!
//! An extension is a value implementing [`Extension`], produced by an `import` function that
//! [`load_extension`] calls only after the source was found trusted. What an extension
//! registers is staged and committed all at once, or not at all. Hooks wrap every tool of the
//! run: `before` hooks may deny a call, `after` hooks observe each result once.
//!
//! Invariants:
//! - an untrusted source is never imported: its code does not run, not even its constructor;
//! - a failed or conflicting registration leaves the host exactly as it was;
//! - every complete tool call still yields exactly one paired result — a denied call's result
//!   is an error and the tool never runs;
//! - a hook runs on its own task under a time limit; a panic or a hang fails closed (a
//!   `before` hook denies) and leaves a diagnostic; a timed-out hook is stopped, not abandoned;
//! - an `after` hook cannot change the result: it gets a copy and returns nothing but success.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;

use crate::tool::{
    BoxFuture, Schema, SharedTool, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry,
};
use crate::types::ToolCall;

/// Long enough for a hook that asks a file or a person, short enough that a hang is noticed.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);

pub const DENIED: &str = "调用被扩展拒绝";
pub const HOOK_FAILED: &str = "before hook 失败，调用按拒绝处理";

/// Where an extension comes from. Trust is decided about this, before any of its code runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtensionSource {
    /// Unique among the extensions of one host.
    pub id: String,
    pub location: PathBuf,
}

/// Why an extension was not loaded. `Display` is the learner-facing message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtensionError {
    Import { id: String, message: String },
    Register { id: String, message: String },
    DuplicateExtension(String),
    DuplicateTool { id: String, tool: String },
}

impl fmt::Display for ExtensionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExtensionError::Import { id, message } => write!(f, "扩展 {id} 导入失败：{message}"),
            ExtensionError::Register { id, message } => {
                write!(f, "扩展 {id} 注册失败：{message}")
            }
            ExtensionError::DuplicateExtension(id) => write!(f, "扩展 {id} 已经加载过"),
            ExtensionError::DuplicateTool { id, tool } => {
                write!(f, "扩展 {id} 注册的工具 {tool} 已存在")
            }
        }
    }
}

impl std::error::Error for ExtensionError {}

/// What a `before` hook decides about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookDecision {
    Allow,
    /// The reason goes to the model in the paired error result.
    Deny(String),
}

/// What the core produced for a call: the tool's output, or its error.
pub type ToolOutcome = Result<ToolOutput, ToolError>;

pub type BeforeHook = Arc<dyn Fn(ToolCall) -> BoxFuture<'static, HookDecision> + Send + Sync>;
pub type AfterHook =
    Arc<dyn Fn(ToolCall, ToolOutcome) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// Where an extension's code runs: the registration surface handed to [`Extension::register`].
/// Everything registered here is staged; the host commits it only when `register` succeeds.
pub struct ExtensionContext {
    id: String,
    tools: Vec<SharedTool>,
    before: Vec<BeforeHook>,
    after: Vec<AfterHook>,
}

impl ExtensionContext {
    fn new(id: &str) -> Self {
        ExtensionContext {
            id: id.to_string(),
            tools: Vec::new(),
            before: Vec::new(),
            after: Vec::new(),
        }
    }

    /// The id of the extension being registered.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn register_tool(&mut self, tool: SharedTool) {
        self.tools.push(tool);
    }

    pub fn on_before_tool_call<F, Fut>(&mut self, hook: F)
    where
        F: Fn(ToolCall) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HookDecision> + Send + 'static,
    {
        self.before.push(Arc::new(move |call| Box::pin(hook(call))));
    }

    pub fn on_after_tool_result<F, Fut>(&mut self, hook: F)
    where
        F: Fn(ToolCall, ToolOutcome) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.after
            .push(Arc::new(move |call, outcome| Box::pin(hook(call, outcome))));
    }
}

/// An extension: code that registers tools and hooks. `Err` from `register` rejects the whole
/// extension.
pub trait Extension: Send + Sync {
    fn register(&self, cx: &mut ExtensionContext) -> Result<(), String>;
}

/// Which kind of hook failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPoint {
    Before,
    After,
}

/// How a hook failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// It returned an error.
    Error,
    Panic,
    Timeout,
}

/// A hook failure, kept for the user; the run goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtensionDiagnostic {
    pub extension_id: String,
    pub call_id: String,
    pub hook: HookPoint,
    pub kind: FailureKind,
    pub message: String,
}

/// The hooks of every loaded extension, in load order, each with its extension's id.
#[derive(Default)]
struct Hooks {
    before: Vec<(String, BeforeHook)>,
    after: Vec<(String, AfterHook)>,
}

/// The tools and hooks of one run: the core tools plus what trusted extensions registered.
pub struct ExtensionHost {
    tools: ToolRegistry,
    extensions: Vec<String>,
    hooks: Arc<Hooks>,
    diagnostics: Arc<Mutex<Vec<ExtensionDiagnostic>>>,
    hook_timeout: Duration,
}

/// What [`load_extension`] did with a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadOutcome {
    Active,
    SkippedUntrusted,
}

// ---------------------------------------------------------------------------------------
// Lab 12.5 — the trust gate and staged registration
// ---------------------------------------------------------------------------------------

/// Loads one extension into `host`: trust first, then import, then staged registration.
/// `import` is never called for a source `is_trusted` refuses.
pub fn load_extension(
    host: &mut ExtensionHost,
    source: &ExtensionSource,
    is_trusted: impl FnOnce(&ExtensionSource) -> bool,
    import: impl FnOnce(&ExtensionSource) -> Result<Box<dyn Extension>, String>,
) -> Result<LoadOutcome, ExtensionError> {
    // region: Lab 12.5 load_extension
    if !is_trusted(source) {
        return Ok(LoadOutcome::SkippedUntrusted);
    }
    if host.extensions.contains(&source.id) {
        return Err(ExtensionError::DuplicateExtension(source.id.clone()));
    }
    let extension = import(source).map_err(|message| ExtensionError::Import {
        id: source.id.clone(),
        message,
    })?;
    let mut staged = ExtensionContext::new(&source.id);
    extension
        .register(&mut staged)
        .map_err(|message| ExtensionError::Register {
            id: source.id.clone(),
            message,
        })?;
    host.commit(staged)?;
    Ok(LoadOutcome::Active)
    // endregion
}

impl ExtensionHost {
    /// A host over the run's core tools, with no extension yet.
    pub fn new(core: ToolRegistry) -> Self {
        ExtensionHost {
            tools: core,
            extensions: Vec::new(),
            hooks: Arc::new(Hooks::default()),
            diagnostics: Arc::new(Mutex::new(Vec::new())),
            hook_timeout: DEFAULT_HOOK_TIMEOUT,
        }
    }

    pub fn with_hook_timeout(mut self, limit: Duration) -> Self {
        self.hook_timeout = limit;
        self
    }

    /// Ids of the loaded extensions, in load order.
    pub fn extensions(&self) -> &[String] {
        &self.extensions
    }

    /// The core tools and the extensions' tools, without hooks.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    pub fn before_hook_count(&self) -> usize {
        self.hooks.before.len()
    }

    pub fn after_hook_count(&self) -> usize {
        self.hooks.after.len()
    }

    /// Every hook failure so far, in the order they happened.
    pub fn diagnostics(&self) -> Vec<ExtensionDiagnostic> {
        lock(&self.diagnostics).clone()
    }

    /// Adds everything `staged` holds, or nothing: the new state is built aside and swapped in
    /// only when every tool name is free.
    fn commit(&mut self, staged: ExtensionContext) -> Result<(), ExtensionError> {
        // region: Lab 12.5 commit
        let mut tools = self.tools.clone();
        for tool in staged.tools {
            let name = tool.name().to_string();
            tools
                .register(tool)
                .map_err(|_| ExtensionError::DuplicateTool {
                    id: staged.id.clone(),
                    tool: name,
                })?;
        }
        let mut before = self.hooks.before.clone();
        before.extend(
            staged
                .before
                .into_iter()
                .map(|hook| (staged.id.clone(), hook)),
        );
        let mut after = self.hooks.after.clone();
        after.extend(
            staged
                .after
                .into_iter()
                .map(|hook| (staged.id.clone(), hook)),
        );

        self.tools = tools;
        self.hooks = Arc::new(Hooks { before, after });
        self.extensions.push(staged.id);
        Ok(())
        // endregion
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere never leaves the list half-written: pushing is the only mutation.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------
// Lab 12.6 — hooks around every tool
// ---------------------------------------------------------------------------------------

impl ExtensionHost {
    /// The registry a run uses: every tool wrapped so the hooks run around it. The wrapped
    /// tool keeps its name, description and schema; it parses the arguments only after the
    /// `before` hooks allowed the call, with the core tool's own schema.
    pub fn registry(&self) -> ToolRegistry {
        let mut registry = ToolRegistry::default();
        for core in self.tools.list() {
            let hooked = hooked_tool(
                Arc::clone(core),
                Arc::clone(&self.hooks),
                Arc::clone(&self.diagnostics),
                self.hook_timeout,
            );
            // The names come from a registry, so they are already unique.
            if registry.register(hooked).is_err() {
                unreachable!("a ToolRegistry never holds two tools of one name");
            }
        }
        registry
    }
}

/// `core` behind the hooks: before hooks in order (the first deny wins), then the core, then
/// every after hook with a copy of the outcome, which is returned unchanged.
fn hooked_tool(
    core: SharedTool,
    hooks: Arc<Hooks>,
    diagnostics: Arc<Mutex<Vec<ExtensionDiagnostic>>>,
    limit: Duration,
) -> SharedTool {
    // The wrapper passes the raw arguments through; the core's schema still decides them.
    let schema = Schema::new(core.json_schema().cloned(), |arguments: &Value| {
        Ok(arguments.clone())
    });
    let name = core.name().to_string();
    let description = core.description().to_string();
    Tool::new(
        &name,
        &description,
        schema,
        move |arguments: Value, context: ToolContext| {
            let core = Arc::clone(&core);
            let hooks = Arc::clone(&hooks);
            let diagnostics = Arc::clone(&diagnostics);
            async move {
                let call = ToolCall {
                    id: context.call_id.clone(),
                    name: core.name().to_string(),
                    arguments,
                    raw_arguments: None,
                };
                let report = |extension_id: &str,
                              hook: HookPoint,
                              (kind, message): (FailureKind, String)| {
                    lock(&diagnostics).push(ExtensionDiagnostic {
                        extension_id: extension_id.to_string(),
                        call_id: call.id.clone(),
                        hook,
                        kind,
                        message,
                    });
                };
                // region: Lab 12.6 hooks around the core
                for (extension_id, hook) in &hooks.before {
                    let hook = Arc::clone(hook);
                    let asked = call.clone();
                    match run_hook(move || hook(asked), limit).await {
                        Ok(HookDecision::Allow) => {}
                        Ok(HookDecision::Deny(reason)) => {
                            return Err(ToolError::new(format!(
                                "{DENIED}（{extension_id}）：{reason}"
                            )));
                        }
                        Err(failure) => {
                            report(extension_id, HookPoint::Before, failure);
                            return Err(ToolError::new(format!("{HOOK_FAILED}（{extension_id}）")));
                        }
                    }
                }

                let outcome = match core.prepare(&call.arguments) {
                    Ok(prepared) => prepared.run(context).await,
                    Err(error) => Err(ToolError::new(error.to_string())),
                };

                for (extension_id, hook) in &hooks.after {
                    let hook = Arc::clone(hook);
                    let (seen, copy) = (call.clone(), outcome.clone());
                    match run_hook(move || hook(seen, copy), limit).await {
                        Ok(Ok(())) => {}
                        Ok(Err(message)) => report(
                            extension_id,
                            HookPoint::After,
                            (FailureKind::Error, message),
                        ),
                        Err(failure) => report(extension_id, HookPoint::After, failure),
                    }
                }
                outcome
                // endregion
            }
        },
    )
    .shared()
}

/// Runs one hook on its own task within `limit`. The hook function is called inside the task,
/// so a panic while it builds its future is caught as well; on timeout the task is aborted.
pub async fn run_hook<T, F>(hook: F, limit: Duration) -> Result<T, (FailureKind, String)>
where
    T: Send + 'static,
    F: FnOnce() -> BoxFuture<'static, T> + Send + 'static,
{
    // region: Lab 12.6 run_hook
    struct AbortOnDrop(tokio::task::AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }

    let task = tokio::spawn(async move { hook().await });
    // Dropped on every way out — a result, a timeout, or the caller giving up — so a hook
    // never outlives its call.
    let _guard = AbortOnDrop(task.abort_handle());
    match tokio::time::timeout(limit, task).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(join_error)) if join_error.is_panic() => {
            let payload = join_error.into_panic();
            let detail = payload
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err((FailureKind::Panic, format!("hook 发生 panic：{detail}")))
        }
        Ok(Err(_)) => Err((FailureKind::Error, "hook 的任务被取消".to_string())),
        Err(_) => Err((
            FailureKind::Timeout,
            format!("hook 超过 {} ms 没有返回", limit.as_millis()),
        )),
    }
    // endregion
}
