//! The tool contract: an untrusted tool call becomes a trusted, paired tool result.
//!
//! Three boundaries, in this order:
//! 1. validators narrow untrusted JSON into the typed parameters a tool needs (Lab 6.1);
//! 2. a per-run [`ToolRegistry`] decides which tools this run may use (Lab 6.2);
//! 3. [`execute_tool_call`] looks up, parses, executes and normalises (Lab 6.3).
//!
//! Invariant: for every complete tool call the executor returns a [`ToolResultMessage`] with
//! the call's id and name; a failure changes only content, details and `is_error`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use crate::types::{now_ms, text, TextContent, ToolCall, ToolDefinition, ToolResultMessage};

/// A boxed, sendable future: the erased form of every tool's `execute`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

// ---------------------------------------------------------------------------------------
// Lab 6.1 — validators and object schemas
// ---------------------------------------------------------------------------------------

/// Why untrusted input was refused. `Display` is the learner-facing message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError(pub String);

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ValidationError {}

type FieldParser<T> = dyn Fn(Option<&Value>) -> Result<T, ValidationError> + Send + Sync;

/// One value that both checks a field and describes it: the check, its JSON Schema, and
/// whether the field may be absent. `None` given to the check means "key not present".
pub struct Validator<T> {
    check: Arc<FieldParser<T>>,
    json_schema: Value,
    optional: bool,
}

impl<T> Clone for Validator<T> {
    fn clone(&self) -> Self {
        Validator {
            check: Arc::clone(&self.check),
            json_schema: self.json_schema.clone(),
            optional: self.optional,
        }
    }
}

impl<T> Validator<T> {
    pub fn new(
        json_schema: Value,
        optional: bool,
        check: impl Fn(Option<&Value>) -> Result<T, ValidationError> + Send + Sync + 'static,
    ) -> Self {
        Validator {
            check: Arc::new(check),
            json_schema,
            optional,
        }
    }

    /// Checks a field; `None` means the key is absent from the object.
    pub fn parse(&self, value: Option<&Value>) -> Result<T, ValidationError> {
        (self.check)(value)
    }

    pub fn json_schema(&self) -> &Value {
        &self.json_schema
    }

    pub fn is_optional(&self) -> bool {
        self.optional
    }
}

pub const MUST_BE_STRING: &str = "必须是 string";
pub const MUST_BE_POSITIVE_INTEGER: &str = "必须是正整数";
pub const MUST_BE_OBJECT: &str = "参数必须是 object";

/// A required string. No coercion: `1` is not `"1"`.
pub fn string_value() -> Validator<String> {
    // region: Lab 6.1 string_value
    Validator::new(json!({"type": "string"}), false, |value| match value {
        Some(Value::String(text)) => Ok(text.clone()),
        _ => Err(ValidationError(MUST_BE_STRING.into())),
    })
    // endregion
}

/// An optional string. Absent is `None`; an explicit `null` is not absent and is refused,
/// because the schema the model sees says `"type": "string"`.
pub fn optional_string() -> Validator<Option<String>> {
    // region: Lab 6.1 optional_string
    let required = string_value();
    Validator::new(json!({"type": "string"}), true, move |value| match value {
        None => Ok(None),
        present => required.parse(present).map(Some),
    })
    // endregion
}

/// An optional integer ≥ 1, with JSON Schema's meaning of `integer`: `2` and `2.0` are the
/// same number and both accepted; `0`, `1.5`, `-3` and `"1"` are refused.
pub fn optional_positive_integer() -> Validator<Option<u64>> {
    // region: Lab 6.1 optional_positive_integer
    Validator::new(
        json!({"type": "integer", "minimum": 1}),
        true,
        |value| match value {
            None => Ok(None),
            Some(Value::Number(number)) => {
                // serde_json keeps `2.0` as a float; a float without a fraction is an integer.
                let integer = number.as_u64().or_else(|| {
                    number
                        .as_f64()
                        .filter(|float| float.fract() == 0.0 && *float <= u64::MAX as f64)
                        .map(|float| float as u64)
                });
                match integer {
                    Some(integer) if integer >= 1 => Ok(Some(integer)),
                    _ => Err(ValidationError(MUST_BE_POSITIVE_INTEGER.into())),
                }
            }
            Some(_) => Err(ValidationError(MUST_BE_POSITIVE_INTEGER.into())),
        },
    )
    // endregion
}

/// A named field of an object shape.
pub struct Field<T> {
    pub name: &'static str,
    pub validator: Validator<T>,
}

pub fn field<T>(name: &'static str, validator: Validator<T>) -> Field<T> {
    Field { name, validator }
}

impl<T> Field<T> {
    fn parse_from(&self, object: &Map<String, Value>) -> Result<T, ValidationError> {
        self.validator.parse(object.get(self.name))
    }
}

/// Describes one field of a shape to [`object_schema`]: name, JSON Schema, optional flag.
pub struct FieldInfo<'a> {
    pub name: &'static str,
    pub json_schema: &'a Value,
    pub optional: bool,
}

/// A tuple of [`Field`]s. The parsed output is the tuple of the fields' outputs, so the
/// compiler derives the parameter type from the shape (the Rust analogue of the TS mapped
/// type): `(field("a", string_value()), field("b", optional_positive_integer()))` parses into
/// `(String, Option<u64>)`.
pub trait Shape: Send + Sync + 'static {
    type Output;
    /// The fields in declaration order.
    fn fields(&self) -> Vec<FieldInfo<'_>>;
    /// Hands each declared key of `object` to its field's validator, in order.
    fn parse_fields(&self, object: &Map<String, Value>) -> Result<Self::Output, ValidationError>;
}

macro_rules! impl_shape_for_tuple {
    ($($field:ident: $ty:ident),+) => {
        impl<$($ty: Send + Sync + 'static),+> Shape for ($(Field<$ty>,)+) {
            type Output = ($($ty,)+);

            fn fields(&self) -> Vec<FieldInfo<'_>> {
                let ($($field,)+) = self;
                vec![$(FieldInfo {
                    name: $field.name,
                    json_schema: $field.validator.json_schema(),
                    optional: $field.validator.is_optional(),
                }),+]
            }

            fn parse_fields(&self, object: &Map<String, Value>) -> Result<Self::Output, ValidationError> {
                let ($($field,)+) = self;
                Ok(($($field.parse_from(object)?,)+))
            }
        }
    };
}

impl_shape_for_tuple!(a: A);
impl_shape_for_tuple!(a: A, b: B);
impl_shape_for_tuple!(a: A, b: B, c: C);
impl_shape_for_tuple!(a: A, b: B, c: C, d: D);
impl_shape_for_tuple!(a: A, b: B, c: C, d: D, e: E);
impl_shape_for_tuple!(a: A, b: B, c: C, d: D, e: E, f: F);

type ValueParser<T> = dyn Fn(&Value) -> Result<T, ValidationError> + Send + Sync;

/// Parses a tool's whole argument value and, optionally, describes it to the provider.
pub struct Schema<T> {
    parse: Arc<ValueParser<T>>,
    json_schema: Option<Value>,
}

impl<T> Schema<T> {
    pub fn new(
        json_schema: Option<Value>,
        parse: impl Fn(&Value) -> Result<T, ValidationError> + Send + Sync + 'static,
    ) -> Self {
        Schema {
            parse: Arc::new(parse),
            json_schema,
        }
    }

    pub fn parse(&self, value: &Value) -> Result<T, ValidationError> {
        (self.parse)(value)
    }

    pub fn json_schema(&self) -> Option<&Value> {
        self.json_schema.as_ref()
    }
}

/// An object schema over `shape`: the exact JSON Schema the provider sees, and a parser that
/// refuses non-objects, visits only the declared keys and builds a fresh typed value (extra
/// keys cannot reach the output; the input is only borrowed).
pub fn object_schema<S: Shape>(shape: S) -> Schema<S::Output> {
    // region: Lab 6.1 object_schema
    let fields = shape.fields();
    let properties: Map<String, Value> = fields
        .iter()
        .map(|info| (info.name.to_string(), info.json_schema.clone()))
        .collect();
    let required: Vec<&str> = fields
        .iter()
        .filter(|info| !info.optional)
        .map(|info| info.name)
        .collect();
    let json_schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    Schema::new(Some(json_schema), move |value| match value {
        Value::Object(object) => shape.parse_fields(object),
        _ => Err(ValidationError(MUST_BE_OBJECT.into())),
    })
    // endregion
}

// ---------------------------------------------------------------------------------------
// Tools and their context
// ---------------------------------------------------------------------------------------

type ProgressFn = dyn Fn(Vec<TextContent>) + Send + Sync;

/// A cloneable progress callback; clones report to the same place.
#[derive(Clone, Default)]
pub struct ProgressReporter(Option<Arc<ProgressFn>>);

impl ProgressReporter {
    pub fn new(report: impl Fn(Vec<TextContent>) + Send + Sync + 'static) -> Self {
        ProgressReporter(Some(Arc::new(report)))
    }

    /// A reporter that drops every update.
    pub fn none() -> Self {
        ProgressReporter(None)
    }

    pub fn report(&self, content: Vec<TextContent>) {
        if let Some(report) = &self.0 {
            report(content);
        }
    }

    /// Whether both handles call the very same callback.
    pub fn same_as(&self, other: &ProgressReporter) -> bool {
        match (&self.0, &other.0) {
            (Some(left), Some(right)) => Arc::ptr_eq(left, right),
            (None, None) => true,
            _ => false,
        }
    }
}

impl fmt::Debug for ProgressReporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "ProgressReporter(..)"
        } else {
            "ProgressReporter(none)"
        })
    }
}

/// What the caller of the executor supplies. There is deliberately no call id here: the
/// executor takes it from the call, so no caller can override it.
#[derive(Clone, Debug, Default)]
pub struct CallContext {
    pub cancel: CancellationToken,
    pub progress: ProgressReporter,
}

/// What a tool sees while it runs.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// Always the id of the call being executed.
    pub call_id: String,
    /// Passed through from the caller; the tool decides how promptly it reacts.
    pub cancel: CancellationToken,
    pub progress: ProgressReporter,
}

/// A tool's own answer. `is_error: Some(true)` is a domain failure the tool reports itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOutput {
    pub content: Vec<TextContent>,
    pub details: Option<Value>,
    pub is_error: Option<bool>,
}

impl ToolOutput {
    pub fn text(value: &str) -> Self {
        ToolOutput {
            content: vec![text(value)],
            ..ToolOutput::default()
        }
    }
}

/// A tool failure. Only `message` ever reaches a result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolError {
    pub message: String,
}

impl ToolError {
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
        }
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {}

pub type ToolFuture = BoxFuture<'static, Result<ToolOutput, ToolError>>;
type Execute<P> = dyn Fn(P, ToolContext) -> ToolFuture + Send + Sync;

/// A typed tool: the description the model sees and the function the program runs, in one
/// contract. `execute` only ever receives parameters its schema produced.
pub struct Tool<P> {
    name: String,
    description: String,
    schema: Schema<P>,
    execute: Arc<Execute<P>>,
}

impl<P: Send + 'static> Tool<P> {
    pub fn new<F, Fut>(name: &str, description: &str, schema: Schema<P>, execute: F) -> Self
    where
        F: Fn(P, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        Tool {
            name: name.to_string(),
            description: description.to_string(),
            schema,
            execute: Arc::new(move |parameters, context| Box::pin(execute(parameters, context))),
        }
    }

    /// Erases the parameter type so tools of different shapes share one registry.
    pub fn shared(self) -> SharedTool {
        Arc::new(self)
    }
}

/// A call whose arguments passed the schema: the only way to reach a tool's `execute`.
pub struct PreparedCall(Box<dyn FnOnce(ToolContext) -> ToolFuture + Send>);

impl PreparedCall {
    pub fn run(self, context: ToolContext) -> ToolFuture {
        (self.0)(context)
    }
}

/// The object-safe face of every [`Tool`]: `prepare` parses, and only its success can run.
pub trait DynTool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    fn json_schema(&self) -> Option<&Value>;
    fn prepare(&self, arguments: &Value) -> Result<PreparedCall, ValidationError>;
}

pub type SharedTool = Arc<dyn DynTool>;

impl<P: Send + 'static> DynTool for Tool<P> {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn json_schema(&self) -> Option<&Value> {
        self.schema.json_schema()
    }

    fn prepare(&self, arguments: &Value) -> Result<PreparedCall, ValidationError> {
        let parameters = self.schema.parse(arguments)?;
        let execute = Arc::clone(&self.execute);
        Ok(PreparedCall(Box::new(move |context| {
            execute(parameters, context)
        })))
    }
}

// ---------------------------------------------------------------------------------------
// Lab 6.2 — the registry
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryError {
    Duplicate(String),
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryError::Duplicate(name) => write!(f, "Tool 已存在：{name}"),
        }
    }
}

impl std::error::Error for RegistryError {}

/// The action space of one run. Each instance owns its tools; there is no global registry.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Vec<SharedTool>,
}

impl ToolRegistry {
    /// Registers each initial tool in order, with the same duplicate check as `register`.
    pub fn new(tools: Vec<SharedTool>) -> Result<Self, RegistryError> {
        // region: Lab 6.2 ToolRegistry::new
        let mut registry = ToolRegistry::default();
        for tool in tools {
            registry.register(tool)?;
        }
        Ok(registry)
        // endregion
    }

    /// Refuses a second tool with the same name and keeps the first one.
    pub fn register(&mut self, tool: SharedTool) -> Result<(), RegistryError> {
        // region: Lab 6.2 ToolRegistry::register
        if self.get(tool.name()).is_some() {
            return Err(RegistryError::Duplicate(tool.name().to_string()));
        }
        self.tools.push(tool);
        Ok(())
        // endregion
    }

    pub fn get(&self, name: &str) -> Option<&SharedTool> {
        // region: Lab 6.2 ToolRegistry::get
        self.tools.iter().find(|tool| tool.name() == name)
        // endregion
    }

    /// In registration order.
    pub fn list(&self) -> &[SharedTool] {
        // region: Lab 6.2 ToolRegistry::list
        &self.tools
        // endregion
    }

    /// What the provider may see: name, description, parameters — never `execute`.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        // region: Lab 6.2 ToolRegistry::definitions
        self.tools
            .iter()
            .map(|tool| ToolDefinition {
                name: tool.name().to_string(),
                description: tool.description().to_string(),
                parameters: tool
                    .json_schema()
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
            })
            .collect()
        // endregion
    }
}

// ---------------------------------------------------------------------------------------
// Lab 6.3 — the executor
// ---------------------------------------------------------------------------------------

pub const UNKNOWN_TOOL: &str = "未知工具";
/// Prefix of the failure for arguments the provider sent as text that is not JSON; the text
/// follows, so the model sees what it wrote and can fix it.
pub const ARGUMENTS_NOT_JSON: &str = "参数不是合法的 JSON：收到 ";
/// At most this many characters of such text are quoted; a cut quote ends with `…`.
pub const QUOTED_ARGUMENTS_CHARS: usize = 200;

/// lookup → parse → execute → normalise. Never fails: every path returns a result paired with
/// the call's id and name.
pub async fn execute_tool_call(
    call: &ToolCall,
    registry: &ToolRegistry,
    context: CallContext,
) -> ToolResultMessage {
    // region: Lab 6.3 execute_tool_call
    // 1. lookup: an unknown name never touches a schema.
    let Some(tool) = registry.get(&call.name) else {
        return failed_result(call, UNKNOWN_TOOL);
    };
    // 2. parse: text that is not JSON is answered with what was received; invalid arguments
    // never reach execute.
    if let Some(received) = unparsable_arguments(call) {
        return failed_result(call, &format!("{ARGUMENTS_NOT_JSON}{received}"));
    }
    let prepared = match tool.prepare(&call.arguments) {
        Ok(prepared) => prepared,
        Err(error) => return failed_result(call, &error.to_string()),
    };
    // 3. execute, with the call's own id.
    let tool_context = ToolContext {
        call_id: call.id.clone(),
        cancel: context.cancel,
        progress: context.progress,
    };
    let outcome = run_catching_panics(prepared, tool_context).await;
    // 4. normalise.
    match outcome {
        Ok(output) => ToolResultMessage {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            content: output.content,
            details: output.details,
            is_error: output.is_error.unwrap_or(false),
            timestamp: now_ms(),
        },
        Err(message) => failed_result(call, &message),
    }
    // endregion
}

// region: Lab 6.3 answer-only unparsable_arguments
/// The provider's argument text, quoted (cut to `QUOTED_ARGUMENTS_CHARS`), when it is not
/// JSON. An empty text means "no arguments" and is not an error.
fn unparsable_arguments(call: &ToolCall) -> Option<String> {
    let raw = call.raw_arguments.as_deref()?;
    if raw.trim().is_empty() || serde_json::from_str::<Value>(raw).is_ok() {
        return None;
    }
    let mut quoted: String = raw.chars().take(QUOTED_ARGUMENTS_CHARS).collect();
    if raw.chars().count() > QUOTED_ARGUMENTS_CHARS {
        quoted.push('…');
    }
    Some(quoted)
}
// endregion

// region: Lab 6.3 answer-only failed_result
/// The single shape of every foreseeable failure.
pub fn failed_result(call: &ToolCall, message: &str) -> ToolResultMessage {
    ToolResultMessage {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: vec![text(&format!("Tool {} failed: {message}", call.name))],
        details: Some(json!({"error": message})),
        is_error: true,
        timestamp: now_ms(),
    }
}
// endregion

pub const TOOL_PANICKED: &str = "工具执行时发生 panic";

// region: Lab 6.3 answer-only run_catching_panics
/// Runs the tool on its own task so a panic becomes an error value instead of unwinding
/// through the executor. The task is aborted if the executor's future is dropped.
///
/// The tool's closure is called *inside* the task: a closure that panics before it even
/// returns its future is caught by the same boundary as a future that panics while polled.
async fn run_catching_panics(
    prepared: PreparedCall,
    context: ToolContext,
) -> Result<ToolOutput, String> {
    struct AbortOnDrop(tokio::task::AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }

    let handle = tokio::spawn(async move { prepared.run(context).await });
    let _guard = AbortOnDrop(handle.abort_handle());
    match handle.await {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(error)) => Err(error.message),
        Err(join_error) if join_error.is_panic() => {
            let payload = join_error.into_panic();
            let detail = payload
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned());
            Err(match detail {
                Some(detail) => format!("{TOOL_PANICKED}：{detail}"),
                None => TOOL_PANICKED.to_string(),
            })
        }
        Err(_) => Err("工具任务被取消".to_string()),
    }
}
// endregion
