//! Rust survival kit: four small, real pieces of pi, each built with the Rust tools that
//! chapters 02–07 lean on.
//!
//! - Lab 1.1: [`Event`] speaks pi's wire JSON through serde's tagged enums, and [`describe`]
//!   matches it exhaustively (chapter 03's `ModelEvent` has the same shape).
//! - Lab 1.2: [`parse_command`] and [`parse_script`] return `Result`s whose error enums
//!   `Display` the learner-facing message, built with `?` and `map_err` (chapters 05 and 06).
//! - Lab 1.3: a [`Registry`] erases `async` closures into one [`Handler`] type,
//!   `Arc<dyn Fn(String) -> BoxFuture<'static, _> + Send + Sync>` (chapter 06's tools).
//! - Lab 1.4: [`run_all`] runs a batch on a `JoinSet`; results keep the input order, a panic
//!   or a cancellation becomes a value in its own slot (chapter 07's concurrent tool batch).
// skeleton: //!
// skeleton: //! Every type and signature is given. Replace each `panic!("Lab 1.k … 尚未实现")` and
// skeleton: //! each `// Lab 1.1:` comment above an enum, one Lab at a time (see CHAPTER.md).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------------------
// Lab 1.1 — wire events
// ---------------------------------------------------------------------------------------

/// Why a model turn stopped. pi spells these camelCase on the wire: `"toolUse"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
// region: Lab 1.1 StopReason wire names
// stub: // Lab 1.1: the serde attribute that reads and writes `ToolUse` as "toolUse".
#[serde(rename_all = "camelCase")]
// endregion
pub enum StopReason {
    Stop,
    Length,
    ToolUse,
    Error,
    Aborted,
}

impl StopReason {
    /// The wire name, the very text serde writes: `toolUse` for [`StopReason::ToolUse`].
    pub fn as_str(self) -> &'static str {
        // region: Lab 1.1 StopReason::as_str
        match self {
            StopReason::Stop => "stop",
            StopReason::Length => "length",
            StopReason::ToolUse => "toolUse",
            StopReason::Error => "error",
            StopReason::Aborted => "aborted",
        }
        // endregion
    }
}

/// One event of a streamed model turn, spelled as pi's wire JSON spells it: the variant is a
/// `type` tag in snake_case, the fields are camelCase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// region: Lab 1.1 Event wire names
// stub: // Lab 1.1: serde attributes for pi's spelling: a `type` tag, snake_case variants,
// stub: // camelCase fields.
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
// endregion
pub enum Event {
    /// `{"type":"start"}`
    Start,
    /// `{"type":"text_delta","contentIndex":0,"delta":"hi"}`
    TextDelta { content_index: usize, delta: String },
    /// `{"type":"toolcall_end","contentIndex":1,"id":"call_1","name":"read","arguments":{…}}`
    ToolcallEnd {
        content_index: usize,
        id: String,
        name: String,
        arguments: Value,
    },
    /// `{"type":"done","reason":"toolUse"}`
    Done { reason: StopReason },
    /// `{"type":"error","reason":"aborted","errorMessage":"Request was aborted"}`
    Error {
        reason: StopReason,
        error_message: String,
    },
}

impl Event {
    /// The event as one line of pi's wire JSON, fields in declaration order.
    pub fn to_wire(&self) -> String {
        // region: Lab 1.1 Event::to_wire
        serde_json::to_string(self).expect("an event always serialises")
        // endregion
    }

    /// Reads one line of wire JSON. An unknown `type` or a missing field is an `Err`, never a
    /// panic; fields pi sends that the enum does not model are ignored.
    pub fn from_wire(wire: &str) -> Result<Event, serde_json::Error> {
        // region: Lab 1.1 Event::from_wire
        serde_json::from_str(wire)
        // endregion
    }
}

/// One log line per event: `start`, `text #0: hi`, `tool #1: read {"path":"a.txt"} (call_1)`,
/// `done: toolUse`, `error: aborted (Request was aborted)`.
///
/// Every variant has its own arm and there is no `_`: a new variant does not compile until it
/// is described.
pub fn describe(event: &Event) -> String {
    // region: Lab 1.1 describe
    match event {
        Event::Start => "start".to_string(),
        Event::TextDelta {
            content_index,
            delta,
        } => format!("text #{content_index}: {delta}"),
        Event::ToolcallEnd {
            content_index,
            id,
            name,
            arguments,
        } => format!("tool #{content_index}: {name} {arguments} ({id})"),
        Event::Done { reason } => format!("done: {}", reason.as_str()),
        Event::Error {
            reason,
            error_message,
        } => format!("error: {} ({error_message})", reason.as_str()),
    }
    // endregion
}

// ---------------------------------------------------------------------------------------
// Lab 1.2 — a parser that returns errors as values
// ---------------------------------------------------------------------------------------

/// One parsed command line: `read {"path":"a.txt"}` is the name `read` with the arguments
/// `{"path":"a.txt"}`; a bare `ls` has empty arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    pub name: String,
    pub arguments: Map<String, Value>,
}

/// Why a command line was refused. `Display` is the message the learner reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Nothing but whitespace.
    Empty,
    /// The name holds a character other than ASCII letters, digits, `_` and `-`.
    BadName(String),
    /// The arguments are not JSON; holds serde_json's own message.
    InvalidJson(String),
    /// The arguments are JSON but not an object; holds the kind found: `null`, `boolean`,
    /// `number`, `string` or `array`.
    NotObject(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // region: Lab 1.2 ParseError Display
        match self {
            ParseError::Empty => f.write_str("空命令：一行里至少要有命令名"),
            ParseError::BadName(name) => {
                write!(f, "命令名只能由字母、数字、_ 和 - 组成：{name}")
            }
            ParseError::InvalidJson(detail) => write!(f, "参数不是合法的 JSON：{detail}"),
            ParseError::NotObject(kind) => write!(f, "参数必须是 object，实际是 {kind}"),
        }
        // endregion
    }
}

impl std::error::Error for ParseError {}

/// Parses `name` or `name {json object}`. Whitespace around the line and around the arguments
/// is ignored; everything after the first whitespace is the arguments.
pub fn parse_command(line: &str) -> Result<Command, ParseError> {
    // region: Lab 1.2 parse_command
    let line = line.trim();
    if line.is_empty() {
        return Err(ParseError::Empty);
    }
    let (name, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let name_is_valid = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !name_is_valid {
        return Err(ParseError::BadName(name.to_string()));
    }
    let arguments = parse_arguments(rest.trim())?;
    Ok(Command {
        name: name.to_string(),
        arguments,
    })
    // endregion
}

// region: Lab 1.2 answer-only parse_arguments
/// Nothing is an empty map; otherwise the text must be a JSON object.
fn parse_arguments(text: &str) -> Result<Map<String, Value>, ParseError> {
    if text.is_empty() {
        return Ok(Map::new());
    }
    let value: Value =
        serde_json::from_str(text).map_err(|error| ParseError::InvalidJson(error.to_string()))?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ParseError::NotObject(json_kind(&other).to_string())),
    }
}

/// The kind of a JSON value, as the error messages name it.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
// endregion

/// A script line that failed, with its 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptError {
    pub line: usize,
    pub error: ParseError,
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // region: Lab 1.2 ScriptError Display
        write!(f, "第 {} 行：{}", self.line, self.error)
        // endregion
    }
}

impl std::error::Error for ScriptError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// One command per line; blank lines and lines starting with `#` are skipped. The first bad
/// line stops the parse, and the error names that line.
pub fn parse_script(text: &str) -> Result<Vec<Command>, ScriptError> {
    // region: Lab 1.2 parse_script
    let mut commands = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let command = parse_command(trimmed).map_err(|error| ScriptError {
            line: index + 1,
            error,
        })?;
        commands.push(command);
    }
    Ok(commands)
    // endregion
}

// ---------------------------------------------------------------------------------------
// Lab 1.3 — a registry of boxed async handlers
// ---------------------------------------------------------------------------------------

/// A boxed, sendable future. Chapter 06 defines the same alias for every tool's `execute`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a handler answers: its output, or an error message.
pub type HandlerResult = Result<String, String>;

/// Any async function from an input to a [`HandlerResult`], erased to a single type so that
/// handlers written as different closures share one registry and can move between tasks.
pub type Handler = Arc<dyn Fn(String) -> BoxFuture<'static, HandlerResult> + Send + Sync>;

/// The message prefix of a call to a name nobody registered: `未知命令：<name>`.
pub const UNKNOWN_COMMAND: &str = "未知命令";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryError {
    /// A handler is already registered under this name.
    Duplicate(String),
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // region: Lab 1.3 RegistryError Display
        match self {
            RegistryError::Duplicate(name) => write!(f, "命令已存在：{name}"),
        }
        // endregion
    }
}

impl std::error::Error for RegistryError {}

/// Named handlers in registration order. Cloning is cheap: the handlers are shared `Arc`s.
#[derive(Clone, Default)]
pub struct Registry {
    handlers: Vec<(String, Handler)>,
}

impl Registry {
    pub fn new() -> Self {
        Registry::default()
    }

    /// Adds an already erased handler. A name can be taken only once; a refused handler
    /// leaves the registry unchanged.
    pub fn insert(&mut self, name: &str, handler: Handler) -> Result<(), RegistryError> {
        // region: Lab 1.3 Registry::insert
        if self.get(name).is_some() {
            return Err(RegistryError::Duplicate(name.to_string()));
        }
        self.handlers.push((name.to_string(), handler));
        Ok(())
        // endregion
    }

    /// Adds any async closure, `|input| async move { … }`, by boxing the future it returns.
    pub fn register<F, Fut>(&mut self, name: &str, handler: F) -> Result<(), RegistryError>
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        // region: Lab 1.3 Registry::register
        let erased: Handler = Arc::new(move |input: String| -> BoxFuture<'static, HandlerResult> {
            Box::pin(handler(input))
        });
        self.insert(name, erased)
        // endregion
    }

    /// The registered names, in registration order.
    pub fn names(&self) -> Vec<String> {
        // region: Lab 1.3 Registry::names
        self.handlers.iter().map(|(name, _)| name.clone()).collect()
        // endregion
    }

    /// The handler registered under exactly this name, shared (an `Arc` clone).
    pub fn get(&self, name: &str) -> Option<Handler> {
        // region: Lab 1.3 Registry::get
        self.handlers
            .iter()
            .find(|(registered, _)| registered == name)
            .map(|(_, handler)| Arc::clone(handler))
        // endregion
    }

    /// Runs the named handler once. An unknown name is the value `Err("未知命令：<name>")`,
    /// never a panic. The future owns everything it needs (`'static`), so it can be spawned
    /// after the registry is gone. The handler is looked up now but called only when the
    /// future is first polled, so even a panic in the closure itself happens on that task.
    pub fn call(&self, name: &str, input: String) -> BoxFuture<'static, HandlerResult> {
        // region: Lab 1.3 Registry::call
        let handler = self.get(name);
        let name = name.to_string();
        Box::pin(async move {
            match handler {
                Some(handler) => handler(input).await,
                None => Err(format!("{UNKNOWN_COMMAND}：{name}")),
            }
        })
        // endregion
    }
}

// ---------------------------------------------------------------------------------------
// Lab 1.4 — a concurrent batch
// ---------------------------------------------------------------------------------------

/// The message prefix of a handler that panicked: `处理器发生 panic：<its message>`.
pub const HANDLER_PANICKED: &str = "处理器发生 panic";
/// The result of a job that the cancellation token stopped.
pub const CANCELLED: &str = "已取消";

/// Runs every job `(command name, input)` at once, each on its own task, and returns one
/// result per job in job order, not completion order. Every handler is called at most once.
///
/// A panicking handler becomes `Err("处理器发生 panic：<message>")` in its own slot and the
/// batch goes on. Once `cancel` fires, every job still running ends as `Err("已取消")`; jobs
/// already finished keep their results. A batch cancelled before it starts runs no handler.
pub async fn run_all(
    registry: &Registry,
    jobs: &[(&str, &str)],
    cancel: &CancellationToken,
) -> Vec<HandlerResult> {
    // region: Lab 1.4 run_all
    let mut running = JoinSet::new();
    let mut slots = HashMap::new();
    for (index, (name, input)) in jobs.iter().enumerate() {
        let call = registry.call(name, input.to_string());
        let cancel = cancel.clone();
        let task = running.spawn(async move {
            tokio::select! {
                // Cancellation is checked first, so a cancelled batch starts no handler.
                biased;
                _ = cancel.cancelled() => Err(CANCELLED.to_string()),
                result = call => result,
            }
        });
        slots.insert(task.id(), index);
    }
    let mut results: Vec<Option<HandlerResult>> = vec![None; jobs.len()];
    while let Some(joined) = running.join_next_with_id().await {
        let (id, result) = match joined {
            Ok((id, result)) => (id, result),
            Err(error) => (error.id(), Err(join_error_message(error))),
        };
        results[slots[&id]] = Some(result);
    }
    results
        .into_iter()
        .map(|result| result.expect("every task reports exactly once"))
        .collect()
    // endregion
}

// region: Lab 1.4 answer-only join_error_message
/// Why a task did not return: a panic keeps its message when the payload is text.
fn join_error_message(error: JoinError) -> String {
    if !error.is_panic() {
        return CANCELLED.to_string();
    }
    let payload = error.into_panic();
    let detail = payload
        .downcast_ref::<&str>()
        .map(|text| text.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned());
    match detail {
        Some(detail) => format!("{HANDLER_PANICKED}：{detail}"),
        None => HANDLER_PANICKED.to_string(),
    }
}
// endregion
