//! Context compaction: the history stays as it was written; the model sees a projection of it
//! that fits a token budget.
//!
//! Invariants:
//! - a compaction is one more entry in the session tree (`{summary, firstKeptEntryId,
//!   tokensBefore}`); nothing is deleted or rewritten, so the full history survives on disk;
//! - the unit of cutting is an interaction: a user message and everything up to the next one.
//!   A cut therefore never lands between a tool call and its result;
//! - the projection is `[current system message?, summary?, kept interactions…]`; only the
//!   latest compaction counts, and system messages are taken from the whole path, never
//!   summarised;
//! - the token estimate is the caller's function: the core never guesses how a model counts.

use std::collections::HashSet;
use std::fmt;

use serde_json::Value;

use crate::session_tree::{Compaction, EntryBody, EntryError, SessionEntry, MAX_SAFE_INTEGER};
use crate::types::{AgentMessage, AssistantContent, TextContent, UserMessage};

/// What the model reads in front of a summary, so it knows the text is not the user speaking.
pub const SUMMARY_PREFIX: &str = "此前的对话已压缩为下面的摘要：\n\n";

/// The caller's token estimate for one message. It must be deterministic: the same message
/// always costs the same, or a budget decided twice could decide differently.
pub type Estimate<'e> = &'e dyn Fn(&AgentMessage) -> u64;

// ---------------------------------------------------------------------------------------------
// Lab 11.1: the compaction entry
// ---------------------------------------------------------------------------------------------

const COMPACTION_FIELDS: [&str; 7] = [
    "id",
    "parentId",
    "timestamp",
    "type",
    "summary",
    "firstKeptEntryId",
    "tokensBefore",
];

/// The body of a `"type": "compaction"` line. Called by chapter 10's parser, which checks
/// `id`, `parentId` and `timestamp` itself.
pub fn parse_compaction(value: &Value) -> Result<EntryBody, EntryError> {
    // region: Lab 11.1 parse_compaction
    let refuse = |field: &str, problem: &str| EntryError {
        field: field.to_string(),
        problem: problem.to_string(),
    };
    let Value::Object(map) = value else {
        return Err(refuse("(整行)", "必须是 JSON object"));
    };
    if let Some(unknown) = map
        .keys()
        .find(|key| !COMPACTION_FIELDS.contains(&key.as_str()))
    {
        return Err(refuse(unknown, "未知字段"));
    }
    let text = |field: &str| match map.get(field) {
        None => Err(refuse(field, "缺少这个字段")),
        Some(Value::String(text)) if !text.is_empty() => Ok(text.clone()),
        Some(_) => Err(refuse(field, "必须是非空字符串")),
    };
    let summary = text("summary")?;
    let first_kept_entry_id = text("firstKeptEntryId")?;
    let tokens_before = match map.get("tokensBefore") {
        None => return Err(refuse("tokensBefore", "缺少这个字段")),
        Some(number) => match number.as_u64() {
            Some(tokens) if tokens <= MAX_SAFE_INTEGER => tokens,
            _ => return Err(refuse("tokensBefore", "必须是不超过 2^53 - 1 的非负整数")),
        },
    };
    Ok(EntryBody::Compaction(Compaction {
        summary,
        first_kept_entry_id,
        tokens_before,
    }))
    // endregion
}

// ---------------------------------------------------------------------------------------------
// Lab 11.2: interaction groups
// ---------------------------------------------------------------------------------------------

/// One interaction: a user message and every message after it up to the next user message,
/// borrowed from the path. Every tool call in it has exactly one result in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Interaction<'a> {
    pub entries: Vec<&'a SessionEntry>,
}

impl Interaction<'_> {
    /// The id of the user message that opens the interaction: the only place a cut may land.
    pub fn first_id(&self) -> &str {
        &self.entries[0].id
    }

    pub fn messages(&self) -> impl Iterator<Item = &AgentMessage> + '_ {
        self.entries.iter().filter_map(|entry| match &entry.body {
            EntryBody::Message { message } => Some(message),
            _ => None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupError {
    /// A message (not a system message) comes before any user message.
    BeforeFirstUser(String),
    /// A tool result whose call id no tool call before it on the path made.
    OrphanResult { entry: String, call: String },
    /// A second result for a call that already has one.
    DuplicateResult { entry: String, call: String },
    /// A call id used by two tool calls.
    DuplicateCall { entry: String, call: String },
    /// A call that has no result when its interaction ends.
    MissingResult { call: String },
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupError::BeforeFirstUser(id) => {
                write!(f, "{id} 出现在第一条用户消息之前，不属于任何一次交互")
            }
            GroupError::OrphanResult { entry, call } => {
                write!(f, "{entry} 是调用 {call} 的结果，但这次交互里没有这个调用")
            }
            GroupError::DuplicateResult { entry, call } => {
                write!(f, "{entry} 是调用 {call} 的第二个结果")
            }
            GroupError::DuplicateCall { entry, call } => {
                write!(f, "{entry} 再次使用了调用 id {call}")
            }
            GroupError::MissingResult { call } => {
                write!(f, "调用 {call} 在交互结束前没有结果")
            }
        }
    }
}

impl std::error::Error for GroupError {}

/// Splits the message entries of `path` into interactions. System messages, metadata and
/// compaction entries belong to no interaction and are skipped.
pub fn group_interactions(path: &[SessionEntry]) -> Result<Vec<Interaction<'_>>, GroupError> {
    // region: Lab 11.2 group_interactions
    let mut groups: Vec<Interaction<'_>> = Vec::new();
    let mut calls = HashSet::new();
    let mut open = HashSet::new();
    for entry in path {
        let EntryBody::Message { message } = &entry.body else {
            continue;
        };
        match message {
            AgentMessage::System(_) => continue,
            AgentMessage::User(_) => {
                close(&open)?;
                open.clear();
                groups.push(Interaction {
                    entries: Vec::new(),
                });
            }
            AgentMessage::Assistant(assistant) => {
                for content in &assistant.content {
                    if let AssistantContent::ToolCall(call) = content {
                        if !calls.insert(call.id.as_str()) {
                            return Err(GroupError::DuplicateCall {
                                entry: entry.id.clone(),
                                call: call.id.clone(),
                            });
                        }
                        open.insert(call.id.as_str());
                    }
                }
            }
            AgentMessage::ToolResult(result) => {
                let call = result.tool_call_id.as_str();
                if !open.remove(call) {
                    let (entry, call) = (entry.id.clone(), call.to_string());
                    return Err(match calls.contains(call.as_str()) {
                        true => GroupError::DuplicateResult { entry, call },
                        false => GroupError::OrphanResult { entry, call },
                    });
                }
            }
        }
        match groups.last_mut() {
            Some(group) => group.entries.push(entry),
            None => return Err(GroupError::BeforeFirstUser(entry.id.clone())),
        }
    }
    close(&open)?;
    Ok(groups)
    // endregion
}

// region: Lab 11.2 answer-only close
/// An interaction ends: every call it opened must have been answered.
fn close(open: &HashSet<&str>) -> Result<(), GroupError> {
    // The smallest id, so the error names the same call on every run.
    match open.iter().min() {
        Some(call) => Err(GroupError::MissingResult {
            call: call.to_string(),
        }),
        None => Ok(()),
    }
}
// endregion

// ---------------------------------------------------------------------------------------------
// Lab 11.3: the budget
// ---------------------------------------------------------------------------------------------

/// The model's window and what must stay free of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub context_window: u64,
    /// Room left for the model's answer.
    pub reserved_output: u64,
    /// Room for the estimate being wrong.
    pub safety_margin: u64,
}

/// How the kept interactions relate to the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Every interaction fits.
    WithinBudget,
    /// The oldest `dropped` interactions did not fit and were left out.
    Trimmed { dropped: usize },
    /// The newest interaction alone is larger than the room left; it is kept whole anyway and
    /// the context exceeds the budget by `over_by` tokens.
    NewestOverflows { over_by: u64 },
}

/// What the model will be sent: owned messages, sharing nothing with the history.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltContext {
    pub messages: Vec<AgentMessage>,
    /// The id of the first kept interaction's user message, if any interaction is kept.
    pub first_kept_entry_id: Option<String>,
    /// The caller's estimate of `messages`.
    pub tokens: u64,
    pub fit: Fit,
}

/// `prefix` (the system message and the summary) is always sent; then as many whole recent
/// interactions as the room left holds, oldest first in the result. The newest interaction is
/// always kept: without it the model would not see the question it must answer.
pub fn build_context(
    prefix: &[AgentMessage],
    groups: &[Interaction<'_>],
    budget: &Budget,
    estimate: Estimate<'_>,
) -> BuiltContext {
    // region: Lab 11.3 build_context
    let prefix_tokens: u64 = prefix.iter().map(estimate).sum();
    let room = budget
        .context_window
        .saturating_sub(budget.reserved_output)
        .saturating_sub(budget.safety_margin)
        .saturating_sub(prefix_tokens);
    let mut used = 0;
    let mut kept = 0;
    for group in groups.iter().rev() {
        let cost: u64 = group.messages().map(estimate).sum();
        if kept > 0 && used + cost > room {
            break;
        }
        used += cost;
        kept += 1;
    }
    let dropped = groups.len() - kept;
    let fit = if used > room {
        Fit::NewestOverflows {
            over_by: used - room,
        }
    } else if dropped > 0 {
        Fit::Trimmed { dropped }
    } else {
        Fit::WithinBudget
    };
    let kept_groups = &groups[dropped..];
    let mut messages = prefix.to_vec();
    messages.extend(
        kept_groups
            .iter()
            .flat_map(|group| group.messages().cloned()),
    );
    BuiltContext {
        messages,
        first_kept_entry_id: kept_groups
            .first()
            .map(|group| group.first_id().to_string()),
        tokens: prefix_tokens + used,
        fit,
    }
    // endregion
}

// ---------------------------------------------------------------------------------------------
// Lab 11.4: creating a compaction entry
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompactionError {
    /// There is no entry to hang the compaction under.
    EmptyPath,
    EmptySummary,
    /// The id is not the first message of an interaction the model currently sees.
    NotAnInteractionStart(String),
    /// The latest compaction keeps from an entry that is not before it on this path.
    KeptEntryMissing {
        compaction: String,
        kept: String,
    },
    Groups(GroupError),
}

impl fmt::Display for CompactionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompactionError::EmptyPath => write!(f, "路径是空的：压缩 entry 没有父节点可挂"),
            CompactionError::EmptySummary => write!(f, "摘要不能是空字符串"),
            CompactionError::NotAnInteractionStart(id) => write!(
                f,
                "{id} 不是当前可见的某次交互的第一条消息：切在这里会拆开一次交互"
            ),
            CompactionError::KeptEntryMissing { compaction, kept } => {
                write!(f, "压缩 {compaction} 要保留的 {kept} 不在它之前的路径上")
            }
            CompactionError::Groups(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for CompactionError {}

impl From<GroupError> for CompactionError {
    fn from(error: GroupError) -> Self {
        CompactionError::Groups(error)
    }
}

/// A compaction entry for the branch `path` (root to leaf): its parent is the leaf, and the
/// model will see `summary` instead of everything before `first_kept_entry_id`.
pub fn create_compaction_entry(
    path: &[SessionEntry],
    id: &str,
    timestamp: u64,
    summary: &str,
    first_kept_entry_id: &str,
    tokens_before: u64,
) -> Result<SessionEntry, CompactionError> {
    // region: Lab 11.4 create_compaction_entry
    let leaf = path.last().ok_or(CompactionError::EmptyPath)?;
    if summary.is_empty() {
        return Err(CompactionError::EmptySummary);
    }
    let visible = &path[visible_start(path)?..];
    let groups = group_interactions(visible)?;
    if !groups
        .iter()
        .any(|group| group.first_id() == first_kept_entry_id)
    {
        return Err(CompactionError::NotAnInteractionStart(
            first_kept_entry_id.to_string(),
        ));
    }
    Ok(SessionEntry {
        id: id.to_string(),
        parent_id: Some(leaf.id.clone()),
        timestamp,
        body: EntryBody::Compaction(Compaction {
            summary: summary.to_string(),
            first_kept_entry_id: first_kept_entry_id.to_string(),
            tokens_before,
        }),
    })
    // endregion
}

// region: Lab 11.4 answer-only visible_start
/// Where the part of `path` the model still sees begins: the first kept entry of the latest
/// compaction, or the root when there is none. A compaction whose kept entry is not before it
/// is refused: guessing a start would put summarised messages back in front of the model.
fn visible_start(path: &[SessionEntry]) -> Result<usize, CompactionError> {
    let latest = path
        .iter()
        .enumerate()
        .rev()
        .find_map(|(at, entry)| match &entry.body {
            EntryBody::Compaction(compaction) => Some((at, entry, compaction)),
            _ => None,
        });
    let Some((at, entry, compaction)) = latest else {
        return Ok(0);
    };
    path[..at]
        .iter()
        .position(|candidate| candidate.id == compaction.first_kept_entry_id)
        .ok_or_else(|| CompactionError::KeptEntryMissing {
            compaction: entry.id.clone(),
            kept: compaction.first_kept_entry_id.clone(),
        })
}
// endregion

// ---------------------------------------------------------------------------------------------
// Lab 11.5: resuming
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeError {
    /// The latest compaction keeps from an entry that is not before it on this path.
    KeptEntryMissing {
        compaction: String,
        kept: String,
    },
    Groups(GroupError),
}

impl fmt::Display for ResumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResumeError::KeptEntryMissing { compaction, kept } => {
                write!(f, "压缩 {compaction} 要保留的 {kept} 不在它之前的路径上")
            }
            ResumeError::Groups(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for ResumeError {}

impl From<GroupError> for ResumeError {
    fn from(error: GroupError) -> Self {
        ResumeError::Groups(error)
    }
}

/// The context for the branch `path`: `[current system message?, summary?, kept…]`.
/// Only the latest compaction counts; the current system message is the last one anywhere on
/// the path, so a prompt written before the cut still reaches the model.
pub fn resume_context(
    path: &[SessionEntry],
    budget: &Budget,
    estimate: Estimate<'_>,
) -> Result<BuiltContext, ResumeError> {
    // region: Lab 11.5 resume_context
    let mut prefix = Vec::new();
    let system = path.iter().rev().find_map(|entry| match &entry.body {
        EntryBody::Message {
            message: message @ AgentMessage::System(_),
        } => Some(message.clone()),
        _ => None,
    });
    prefix.extend(system);
    let latest = path
        .iter()
        .enumerate()
        .rev()
        .find_map(|(at, entry)| match &entry.body {
            EntryBody::Compaction(Compaction {
                summary,
                first_kept_entry_id,
                ..
            }) => Some((at, entry, summary, first_kept_entry_id)),
            _ => None,
        });
    let kept_from = match latest {
        None => 0,
        Some((at, entry, summary, kept)) => {
            prefix.push(summary_message(summary, entry.timestamp));
            path[..at]
                .iter()
                .position(|candidate| &candidate.id == kept)
                .ok_or_else(|| ResumeError::KeptEntryMissing {
                    compaction: entry.id.clone(),
                    kept: kept.clone(),
                })?
        }
    };
    let groups = group_interactions(&path[kept_from..])?;
    Ok(build_context(&prefix, &groups, budget, estimate))
    // endregion
}

// region: Lab 11.5 answer-only summary_message
/// The summary as the model reads it: a user message that says what it is.
pub fn summary_message(summary: &str, timestamp: u64) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: vec![TextContent {
            text: format!("{SUMMARY_PREFIX}{summary}"),
        }],
        timestamp,
    })
}
// endregion
