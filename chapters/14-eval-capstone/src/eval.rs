//! Evaluating a whole agent: every case prepared afresh, run, judged on a frozen observation,
//! then disposed and cleaned up; the report keeps fixed codes and counts only.
//!
//! Invariants:
//! - each run of a case calls its `prepare` again: nothing of one run leaks into the next;
//! - the order is prepare → prompt → flush → entries (once) → judge → dispose → cleanup; once
//!   prepared, dispose and cleanup always run, cleanup even when dispose failed;
//! - the judge sees only the active path and the declared files, as one owned value it can
//!   only borrow (`&EvalObservation`), built once from the single snapshot that was checked;
//! - a transcript that breaks the pairing rules is a protocol failure, not a task failure; a
//!   verdict that contradicts its own checks is the judge's fault, not the agent's;
//! - a failure is a fixed `(phase, code)` pair: no message, payload, path or call id of the
//!   case reaches a report; the first failure is the primary one, later ones (from dispose and
//!   cleanup) are appended in the order they happened;
//! - a suite runs its cases one after another, in input order.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs;
use std::future::Future;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;

use crate::agent_loop::AgentRunResult;
use crate::runtime_modes::Runtime;
use crate::session_tree::{path_to, EntryBody, SessionEntry};
use crate::types::{AgentMessage, AssistantContent};

// ---------------------------------------------------------------------------------------------
// The case, the runtime seam and the observation
// ---------------------------------------------------------------------------------------------

/// Whatever went wrong inside a case. The runner looks at whether there was one, never at
/// what it says: its text may hold anything the case saw.
pub type Fault = Box<dyn std::error::Error + Send + Sync>;

/// A future that owns everything it needs, so the runner can hand it to `tokio::spawn`.
pub type EvalFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What the runner needs from an agent runtime. Chapter 13's `Runtime` is one; a test can
/// bring a fake that returns any transcript it likes.
pub trait EvalRuntime: Send + Sync {
    /// Runs one prompt to its end.
    fn prompt(&self, text: &str) -> EvalFuture<Result<AgentRunResult, Fault>>;
    /// Resolves when everything accepted so far is persisted.
    fn flush(&self) -> EvalFuture<Result<(), Fault>>;
    /// Every entry of the session, in the store's order.
    fn entries(&self) -> Result<Vec<SessionEntry>, Fault>;
    /// The leaf of the branch this runtime continues; `None` before anything was persisted.
    fn active_leaf(&self) -> Option<String>;
    /// Closes the runtime for good after its work is persisted.
    fn dispose(&self) -> EvalFuture<Result<(), Fault>>;
}

impl EvalRuntime for Runtime {
    fn prompt(&self, text: &str) -> EvalFuture<Result<AgentRunResult, Fault>> {
        let run = Runtime::prompt(self, text);
        Box::pin(async move { run.await.map_err(Fault::from) })
    }

    fn flush(&self) -> EvalFuture<Result<(), Fault>> {
        let runtime = self.clone();
        Box::pin(async move {
            runtime.flush().await;
            Ok(())
        })
    }

    fn entries(&self) -> Result<Vec<SessionEntry>, Fault> {
        Ok(self.session().entries())
    }

    fn active_leaf(&self) -> Option<String> {
        Runtime::active_leaf(self)
    }

    fn dispose(&self) -> EvalFuture<Result<(), Fault>> {
        let runtime = self.clone();
        Box::pin(async move {
            runtime.dispose().await;
            Ok(())
        })
    }
}

/// Reads one declared file of the prepared workspace.
pub type ReadFile = Box<dyn Fn(&str) -> Result<String, Fault> + Send + Sync>;
/// Removes what `prepare` created; runs once, last.
pub type Cleanup = Box<dyn FnOnce() -> Result<(), Fault> + Send + Sync>;

/// What one `prepare` call hands the runner: a fresh runtime and its files.
pub struct PreparedEval {
    pub runtime: Box<dyn EvalRuntime>,
    pub read_file: ReadFile,
    pub cleanup: Option<Cleanup>,
}

/// Builds a fresh `PreparedEval`; called once per run of the case.
pub type Prepare = Arc<dyn Fn() -> EvalFuture<Result<PreparedEval, Fault>> + Send + Sync>;
/// Decides the task from what the run left behind.
pub type Judge = Arc<dyn Fn(&EvalObservation) -> Result<TaskVerdict, Fault> + Send + Sync>;

/// One task to evaluate. Cloning shares the closures; every run still prepares afresh.
#[derive(Clone)]
pub struct EvalCase {
    pub id: String,
    pub prompt: String,
    /// The workspace files the judge gets to read, relative to the workspace.
    pub files: Vec<String>,
    pub prepare: Prepare,
    pub judge: Judge,
}

impl EvalCase {
    pub fn new<P, F, J>(id: &str, prompt: &str, files: &[&str], prepare: P, judge: J) -> Self
    where
        P: Fn() -> F + Send + Sync + 'static,
        F: Future<Output = Result<PreparedEval, Fault>> + Send + 'static,
        J: Fn(&EvalObservation) -> Result<TaskVerdict, Fault> + Send + Sync + 'static,
    {
        EvalCase {
            id: id.to_string(),
            prompt: prompt.to_string(),
            files: files.iter().map(|file| file.to_string()).collect(),
            prepare: Arc::new(move || -> EvalFuture<Result<PreparedEval, Fault>> {
                Box::pin(prepare())
            }),
            judge: Arc::new(judge),
        }
    }
}

/// The judge's answer: one boolean per check, and the overall result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskVerdict {
    pub passed: bool,
    pub checks: Vec<bool>,
}

impl TaskVerdict {
    /// A consistent verdict: passed exactly when every check passed.
    pub fn from_checks(checks: &[bool]) -> Self {
        TaskVerdict {
            passed: checks.iter().all(|check| *check),
            checks: checks.to_vec(),
        }
    }
}

/// What the judge sees: the run's result, the entries of the active path (root first) and
/// the declared files with their contents, in declaration order. Owned, and only lent.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalObservation {
    pub result: AgentRunResult,
    pub entries: Vec<SessionEntry>,
    pub files: Vec<(String, String)>,
}

impl EvalObservation {
    /// The content of a declared file.
    pub fn file(&self, name: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|(file, _)| file == name)
            .map(|(_, content)| content.as_str())
    }

    /// The messages on the active path.
    pub fn messages(&self) -> Vec<&AgentMessage> {
        messages_of(&self.entries).collect()
    }
}

fn messages_of(path: &[SessionEntry]) -> impl Iterator<Item = &AgentMessage> + '_ {
    path.iter().filter_map(|entry| match &entry.body {
        EntryBody::Message { message } => Some(message),
        _ => None,
    })
}

// ---------------------------------------------------------------------------------------------
// The report: fixed codes and counts
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalStatus {
    Passed,
    TaskFailed,
    ProtocolFailed,
    InfraFailed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalPhase {
    Prepare,
    Execute,
    Collect,
    Protocol,
    Judge,
    Task,
    Dispose,
    Cleanup,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalFailureCode {
    InvalidCase,
    PrepareFailed,
    ExecuteFailed,
    CollectFailed,
    MissingActiveLeaf,
    InvalidActivePath,
    MissingUserInteraction,
    IncompleteUserInteraction,
    ResultSessionMismatch,
    AssistantWithoutUser,
    ToolCallWithoutUser,
    DuplicateToolCall,
    OrphanToolResult,
    DuplicateToolResult,
    ToolNameMismatch,
    UnpairedToolCall,
    JudgeFailed,
    InvalidVerdict,
    TaskRejected,
    DisposeFailed,
    CleanupFailed,
}

impl EvalFailureCode {
    /// Every code belongs to exactly one phase.
    pub fn phase(self) -> EvalPhase {
        use EvalFailureCode::*;
        match self {
            InvalidCase | PrepareFailed => EvalPhase::Prepare,
            ExecuteFailed => EvalPhase::Execute,
            CollectFailed => EvalPhase::Collect,
            MissingActiveLeaf
            | InvalidActivePath
            | MissingUserInteraction
            | IncompleteUserInteraction
            | ResultSessionMismatch
            | AssistantWithoutUser
            | ToolCallWithoutUser
            | DuplicateToolCall
            | OrphanToolResult
            | DuplicateToolResult
            | ToolNameMismatch
            | UnpairedToolCall => EvalPhase::Protocol,
            JudgeFailed | InvalidVerdict => EvalPhase::Judge,
            TaskRejected => EvalPhase::Task,
            DisposeFailed => EvalPhase::Dispose,
            CleanupFailed => EvalPhase::Cleanup,
        }
    }
}

/// Where and what, nothing else: no message, cause or stack can be carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EvalFailure {
    pub phase: EvalPhase,
    pub code: EvalFailureCode,
}

impl EvalFailure {
    pub fn of(code: EvalFailureCode) -> Self {
        EvalFailure {
            phase: code.phase(),
            code,
        }
    }

    /// The status a report gets when this failure is its primary one.
    pub fn status(self) -> EvalStatus {
        match self.phase {
            EvalPhase::Protocol => EvalStatus::ProtocolFailed,
            EvalPhase::Task => EvalStatus::TaskFailed,
            _ => EvalStatus::InfraFailed,
        }
    }
}

/// The snake_case name serde writes for a fieldless enum value.
fn name_of(value: impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::from("?"),
    }
}

impl fmt::Display for EvalFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", name_of(self.phase), name_of(self.code))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct MessageCounts {
    pub system: usize,
    pub user: usize,
    pub assistant: usize,
    pub tool_result: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ToolCounts {
    pub calls: usize,
    pub results: usize,
    /// Results with `is_error`.
    pub errors: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct FileCounts {
    /// Files the case declared.
    pub requested: usize,
    /// Files actually read.
    pub read: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct CheckCounts {
    pub passed: usize,
    pub failed: usize,
}

/// Counts only: safe to print, log and upload whatever the case contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SafeEvidence {
    pub messages: MessageCounts,
    pub tools: ToolCounts,
    pub files: FileCounts,
    pub checks: CheckCounts,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EvalReport {
    pub id: String,
    pub status: EvalStatus,
    pub evidence: SafeEvidence,
    pub primary_failure: Option<EvalFailure>,
    pub secondary_failures: Vec<EvalFailure>,
}

impl EvalReport {
    /// A report that has passed so far.
    pub fn new(id: &str) -> Self {
        EvalReport {
            id: id.to_string(),
            status: EvalStatus::Passed,
            evidence: SafeEvidence::default(),
            primary_failure: None,
            secondary_failures: Vec::new(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lab 14.1: the runner
// ---------------------------------------------------------------------------------------------

/// A case the runner refuses before preparing anything: a blank id, or declared files that
/// are blank or repeated.
pub fn validate_case(case: &EvalCase) -> Result<(), EvalFailureCode> {
    // region: Lab 14.1 validate_case
    let mut seen = HashSet::new();
    let files_ok = case
        .files
        .iter()
        .all(|file| !file.trim().is_empty() && seen.insert(file.as_str()));
    if case.id.trim().is_empty() || !files_ok {
        return Err(EvalFailureCode::InvalidCase);
    }
    Ok(())
    // endregion
}

/// Runs one case: validate, prepare afresh, execute, collect, check, judge, then dispose and
/// clean up whatever happened in between.
pub async fn run_eval_case(case: &EvalCase) -> EvalReport {
    // region: Lab 14.1 run_eval_case
    let mut report = EvalReport::new(&case.id);
    if let Err(code) = validate_case(case) {
        report.record(code);
        return report;
    }
    let prepare = Arc::clone(&case.prepare);
    // region: Lab 14.2 contain prepare
    // stub: let prepared = Ok::<_, Panicked>(prepare().await);
    let prepared = contained(async move { prepare().await }).await;
    // endregion
    let Ok(Ok(prepared)) = prepared else {
        report.record(EvalFailureCode::PrepareFailed);
        return report;
    };
    if let Some(observation) = observe(case, &prepared, &mut report).await {
        judge_observation(case, observation, &mut report).await;
    }
    close(prepared, &mut report).await;
    report
    // endregion
}

/// Executes the prompt and collects what the judge may see. `None` once a failure is recorded.
async fn observe(
    case: &EvalCase,
    prepared: &PreparedEval,
    report: &mut EvalReport,
) -> Option<EvalObservation> {
    // region: Lab 14.1 observe
    let runtime = &prepared.runtime;
    let executed = match runtime.prompt(&case.prompt).await {
        Ok(result) => runtime.flush().await.map(|()| result),
        Err(fault) => Err(fault),
    };
    let Ok(result) = executed else {
        report.record(EvalFailureCode::ExecuteFailed);
        return None;
    };
    // One read of the session: what is checked below is exactly what the judge gets.
    let Ok(entries) = runtime.entries() else {
        report.record(EvalFailureCode::CollectFailed);
        return None;
    };
    let Some(leaf) = runtime.active_leaf() else {
        report.record(EvalFailureCode::MissingActiveLeaf);
        return None;
    };
    let Ok(path) = path_to(&entries, &leaf) else {
        report.record(EvalFailureCode::InvalidActivePath);
        return None;
    };
    let messages: Vec<AgentMessage> = messages_of(&path).cloned().collect();
    // region: Lab 14.3 count the path
    // stub: // Lab 14.3: count the active path into report.evidence here.
    report.evidence.count_messages(&messages);
    // endregion
    // region: Lab 14.2 check the path
    // stub: let checked: Result<(), EvalFailureCode> = Ok(());
    let checked = check_protocol(&messages).and_then(|()| match messages == result.messages {
        true => Ok(()),
        false => Err(EvalFailureCode::ResultSessionMismatch),
    });
    // endregion
    if let Err(code) = checked {
        report.record(code);
        return None;
    }
    report.evidence.files.requested = case.files.len();
    let mut files = Vec::with_capacity(case.files.len());
    for file in &case.files {
        let Ok(content) = (prepared.read_file)(file) else {
            report.record(EvalFailureCode::CollectFailed);
            return None;
        };
        report.evidence.files.read += 1;
        files.push((file.clone(), content));
    }
    Some(EvalObservation {
        result,
        entries: path,
        files,
    })
    // endregion
}

/// Lends the observation to the judge and turns its answer into the report's verdict.
async fn judge_observation(case: &EvalCase, observation: EvalObservation, report: &mut EvalReport) {
    // region: Lab 14.1 judge_observation
    let judge = Arc::clone(&case.judge);
    // region: Lab 14.2 contain the judge
    // stub: let judged = Ok::<_, Panicked>(judge(&observation));
    let judged = contained(async move { judge(&observation) }).await;
    // endregion
    let Ok(Ok(verdict)) = judged else {
        report.record(EvalFailureCode::JudgeFailed);
        return;
    };
    // region: Lab 14.2 check the verdict
    // stub: let outcome: Result<bool, EvalFailureCode> = Ok(verdict.passed);
    let outcome = check_verdict(&verdict);
    // endregion
    match outcome {
        Ok(passed) => {
            // region: Lab 14.3 count the checks
            // stub: // Lab 14.3: count the verdict's checks into report.evidence here.
            report.evidence.count_checks(&verdict);
            // endregion
            if !passed {
                report.record(EvalFailureCode::TaskRejected);
            }
        }
        Err(code) => report.record(code),
    }
    // endregion
}

/// Disposes the runtime, then cleans up, each exactly once, whatever happened before.
async fn close(prepared: PreparedEval, report: &mut EvalReport) {
    // region: Lab 14.1 close
    let PreparedEval {
        runtime, cleanup, ..
    } = prepared;
    if runtime.dispose().await.is_err() {
        report.record(EvalFailureCode::DisposeFailed);
    }
    if let Some(cleanup) = cleanup {
        if cleanup().is_err() {
            report.record(EvalFailureCode::CleanupFailed);
        }
    }
    // endregion
}

/// A fresh directory for one run of a case, holding its starting files.
#[derive(Debug)]
pub struct EvalWorkspace {
    root: PathBuf,
}

impl EvalWorkspace {
    /// Creates `base/name`, which must not exist yet, and writes `files` into it. Every file
    /// path must be relative and stay inside (no `..`, no root).
    pub fn create(base: &Path, name: &str, files: &[(&str, &str)]) -> io::Result<Self> {
        // Checked before anything is created: a refused tree leaves nothing behind.
        let inside = |path: &str| {
            let mut parts = Path::new(path).components().peekable();
            parts.peek().is_some() && parts.all(|part| matches!(part, Component::Normal(_)))
        };
        if let Some((bad, _)) = files.iter().find(|(file, _)| !inside(file)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("起始文件必须是工作区里的相对路径（不含 ..）：{bad:?}"),
            ));
        }
        fs::create_dir_all(base)?;
        let root = base.join(name);
        // `create_dir`, not `create_dir_all`: an existing directory is somebody else's.
        fs::create_dir(&root)?;
        for (file, content) in files {
            let path = root.join(file);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)?;
            }
            fs::write(path, content)?;
        }
        Ok(EvalWorkspace { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Reads a declared file. Only a file that really lies inside the workspace — after `..`
    /// and symbolic links are resolved — is read.
    pub fn read(&self, file: &str) -> Result<String, Fault> {
        // region: Lab 14.1 EvalWorkspace::read
        let root = fs::canonicalize(&self.root)?;
        let target = fs::canonicalize(root.join(file))?;
        // Component by component: `/w/case-1x` does not lie inside `/w/case-1`.
        if !target.starts_with(&root) {
            return Err(format!("声明的文件不在评测工作区里：{file}").into());
        }
        Ok(fs::read_to_string(target)?)
        // endregion
    }

    /// Removes the workspace and everything in it.
    pub fn remove(&self) -> io::Result<()> {
        fs::remove_dir_all(&self.root)
    }

    /// The runner's view of this workspace with `runtime` working in it: declared files are
    /// read from here, and cleanup removes the directory.
    pub fn prepared(self, runtime: impl EvalRuntime + 'static) -> PreparedEval {
        let workspace = Arc::new(self);
        let reader = Arc::clone(&workspace);
        PreparedEval {
            runtime: Box::new(runtime),
            read_file: Box::new(move |file| reader.read(file)),
            cleanup: Some(Box::new(move || Ok(workspace.remove()?))),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lab 14.2: protocol, verdicts and contained panics
// ---------------------------------------------------------------------------------------------

/// A spawned piece of the case's code panicked (or was cancelled). Deliberately empty: the
/// payload is the case's text and stays out of every report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Panicked;

/// Runs `work` as its own task, so a panic in it ends that task only.
pub async fn contained<T>(work: impl Future<Output = T> + Send + 'static) -> Result<T, Panicked>
where
    T: Send + 'static,
{
    // region: Lab 14.2 contained
    tokio::spawn(work).await.map_err(|_| Panicked)
    // endregion
}

/// `Ok(passed)` for a consistent verdict; a verdict with no checks, or whose `passed`
/// disagrees with its checks, is the judge's own failure.
pub fn check_verdict(verdict: &TaskVerdict) -> Result<bool, EvalFailureCode> {
    // region: Lab 14.2 check_verdict
    let all = verdict.checks.iter().all(|check| *check);
    if verdict.checks.is_empty() || verdict.passed != all {
        return Err(EvalFailureCode::InvalidVerdict);
    }
    Ok(verdict.passed)
    // endregion
}

/// The pairing rules over the messages of an active path. System messages sit outside them.
pub fn check_protocol(messages: &[AgentMessage]) -> Result<(), EvalFailureCode> {
    // region: Lab 14.2 check_protocol
    use EvalFailureCode::*;
    // call id → (tool name, answered yet)
    let mut calls: HashMap<&str, (&str, bool)> = HashMap::new();
    let mut open = 0usize;
    let mut in_interaction = false;
    let mut answered = false;
    for message in messages {
        match message {
            AgentMessage::System(_) => {}
            AgentMessage::User(_) => {
                if open > 0 {
                    return Err(UnpairedToolCall);
                }
                in_interaction = true;
                answered = false;
            }
            AgentMessage::Assistant(assistant) => {
                if !in_interaction {
                    return Err(AssistantWithoutUser);
                }
                // Results answer the assistant right before them, never a later one.
                if open > 0 {
                    return Err(UnpairedToolCall);
                }
                for block in &assistant.content {
                    if let AssistantContent::ToolCall(call) = block {
                        if calls
                            .insert(call.id.as_str(), (call.name.as_str(), false))
                            .is_some()
                        {
                            return Err(DuplicateToolCall);
                        }
                        open += 1;
                    }
                }
                answered = true;
            }
            AgentMessage::ToolResult(result) => {
                if !in_interaction {
                    return Err(ToolCallWithoutUser);
                }
                let Some((name, done)) = calls.get_mut(result.tool_call_id.as_str()) else {
                    return Err(OrphanToolResult);
                };
                if *done {
                    return Err(DuplicateToolResult);
                }
                if *name != result.tool_name.as_str() {
                    return Err(ToolNameMismatch);
                }
                *done = true;
                open -= 1;
            }
        }
    }
    if !in_interaction {
        return Err(MissingUserInteraction);
    }
    if !answered {
        return Err(IncompleteUserInteraction);
    }
    if open > 0 {
        return Err(UnpairedToolCall);
    }
    Ok(())
    // endregion
}

// ---------------------------------------------------------------------------------------------
// Lab 14.3: evidence, failure order, the suite
// ---------------------------------------------------------------------------------------------

impl SafeEvidence {
    /// Adds the roles, tool calls, results and error results of `messages`.
    pub fn count_messages(&mut self, messages: &[AgentMessage]) {
        // region: Lab 14.3 SafeEvidence::count_messages
        for message in messages {
            match message {
                AgentMessage::System(_) => self.messages.system += 1,
                AgentMessage::User(_) => self.messages.user += 1,
                AgentMessage::Assistant(assistant) => {
                    self.messages.assistant += 1;
                    self.tools.calls += assistant
                        .content
                        .iter()
                        .filter(|block| matches!(block, AssistantContent::ToolCall(_)))
                        .count();
                }
                AgentMessage::ToolResult(result) => {
                    self.messages.tool_result += 1;
                    self.tools.results += 1;
                    if result.is_error {
                        self.tools.errors += 1;
                    }
                }
            }
        }
        // endregion
    }

    /// Adds how many of the verdict's checks passed and failed.
    pub fn count_checks(&mut self, verdict: &TaskVerdict) {
        // region: Lab 14.3 SafeEvidence::count_checks
        let passed = verdict.checks.iter().filter(|check| **check).count();
        self.checks.passed += passed;
        self.checks.failed += verdict.checks.len() - passed;
        // endregion
    }
}

impl EvalReport {
    /// The first failure becomes the primary one and decides the status; every later one is
    /// appended, in the order it happened.
    pub fn record(&mut self, code: EvalFailureCode) {
        // region: Lab 14.3 EvalReport::record
        // stub: if self.primary_failure.is_some() { todo!() }
        // stub: self.primary_failure = Some(EvalFailure::of(code));
        // stub: self.status = EvalFailure::of(code).status();
        let failure = EvalFailure::of(code);
        match self.primary_failure {
            None => {
                self.primary_failure = Some(failure);
                self.status = failure.status();
            }
            Some(_) => self.secondary_failures.push(failure),
        }
        // endregion
    }
}

/// One line: `id status`, the failures, then the counts.
impl fmt::Display for EvalReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // region: Lab 14.3 Display for EvalReport
        write!(f, "{} {}", self.id, name_of(self.status))?;
        if let Some(primary) = self.primary_failure {
            write!(f, " · 主因 {primary}")?;
        }
        if !self.secondary_failures.is_empty() {
            let later: Vec<String> = self
                .secondary_failures
                .iter()
                .map(|f| f.to_string())
                .collect();
            write!(f, " · 之后 {}", later.join(", "))?;
        }
        let SafeEvidence {
            messages: m,
            tools: t,
            files,
            checks,
        } = self.evidence;
        write!(
            f,
            " · 消息 system {} user {} assistant {} toolResult {} · 工具 调用 {} 结果 {} 出错 {} · 文件 {}/{} · 检查 通过 {} 失败 {}",
            m.system, m.user, m.assistant, m.tool_result,
            t.calls, t.results, t.errors,
            files.read, files.requested,
            checks.passed, checks.failed,
        )
        // endregion
    }
}

/// Runs the cases one after another, in input order; a case listed twice is prepared twice.
pub async fn run_eval_suite(cases: &[EvalCase]) -> Vec<EvalReport> {
    // region: Lab 14.3 run_eval_suite
    let mut reports = Vec::with_capacity(cases.len());
    for case in cases {
        reports.push(run_eval_case(case).await);
    }
    reports
    // endregion
}
