//! The case file format and the judge it implies.
//!
//! ```json
//! {
//!   "id": "edit-todo",
//!   "prompt": "把 notes.txt 里的 TODO 改成 DONE",
//!   "files": { "notes.txt": "TODO\n" },
//!   "script": [ { "tool_calls": [ { "name": "read", "arguments": { "path": "notes.txt" } } ] },
//!               { "text": "改好了" } ],
//!   "expect": { "files": { "notes.txt": { "equals": "DONE\n" } },
//!               "tools": ["read"], "final_text_contains": "改好" }
//! }
//! ```
//!
//! Every field is checked strictly: an unknown key, a path that leaves the workspace or an
//! expectation with no check is refused with one line, before anything runs.

use std::path::{Component, Path};

use openai_mock::Reply;
use pi_course::eval::{EvalObservation, TaskVerdict};
use pi_course::types::{text_of, AgentMessage, AssistantContent};
use serde_json::{Map, Value};

/// What a declared file must hold at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileCheck {
    Equals(String),
    Contains(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Expect {
    /// Checked in file order; these are the case's declared files.
    pub files: Vec<(String, FileCheck)>,
    /// Tool names that must be called on the active path in this order (others may come
    /// between).
    pub tools: Vec<String>,
    pub final_text_contains: Option<String>,
}

#[derive(Debug, Clone)]
pub struct CaseFile {
    pub id: String,
    pub prompt: String,
    /// The starting tree: relative path → content.
    pub files: Vec<(String, String)>,
    /// The model's turns when offline; `None` for a case meant for a real model.
    pub script: Option<Vec<Reply>>,
    pub expect: Expect,
}

fn object<'a>(
    value: &'a Value,
    what: &str,
    keys: &[&str],
) -> Result<&'a Map<String, Value>, String> {
    let map = value
        .as_object()
        .ok_or_else(|| format!("{what} 必须是一个 JSON 对象"))?;
    if let Some(unknown) = map.keys().find(|key| !keys.contains(&key.as_str())) {
        return Err(format!(
            "{what} 里有不认识的字段 {unknown:?}（只认 {}）",
            keys.join("、")
        ));
    }
    Ok(map)
}

fn string(value: Option<&Value>, what: &str) -> Result<String, String> {
    match value {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(_) => Err(format!("{what} 必须是字符串")),
        None => Err(format!("缺少 {what}")),
    }
}

/// A path inside the workspace: relative, no `..`, no root, not empty.
fn relative(path: &str) -> Result<String, String> {
    let parts: Vec<Component> = Path::new(path).components().collect();
    if parts.is_empty()
        || !parts
            .iter()
            .all(|part| matches!(part, Component::Normal(_)))
    {
        return Err(format!(
            "文件路径必须是工作区里的相对路径（不含 ..）：{path:?}"
        ));
    }
    Ok(path.to_string())
}

fn turn(index: usize, value: &Value) -> Result<Reply, String> {
    let what = format!("script 的第 {index} 个回合");
    let map = object(value, &what, &["text", "tool_calls"])?;
    match (map.get("text"), map.get("tool_calls")) {
        (Some(text), None) => Ok(Reply::text(&string(Some(text), &what)?)),
        (None, Some(Value::Array(calls))) if !calls.is_empty() => {
            let mut parsed = Vec::new();
            for (position, call) in calls.iter().enumerate() {
                let place = format!("{what}的第 {} 个调用", position + 1);
                let call = object(call, &place, &["name", "arguments"])?;
                let name = string(call.get("name"), &format!("{place}的 name"))?;
                let arguments = call.get("arguments").cloned().unwrap_or(Value::Null);
                if !arguments.is_object() {
                    return Err(format!("{place}的 arguments 必须是 JSON 对象"));
                }
                parsed.push((format!("call_{index}_{}", position + 1), name, arguments));
            }
            Ok(Reply::tool_calls(&parsed))
        }
        _ => Err(format!("{what}必须恰好有 text 或非空的 tool_calls 之一")),
    }
}

fn expect(value: &Value) -> Result<Expect, String> {
    let map = object(value, "expect", &["files", "tools", "final_text_contains"])?;
    let mut expect = Expect::default();
    if let Some(files) = map.get("files") {
        let files = files
            .as_object()
            .ok_or("expect.files 必须是“路径 → 检查”的 JSON 对象")?;
        for (path, check) in files {
            let what = format!("expect.files 里 {path:?} 的检查");
            let check = object(check, &what, &["equals", "contains"])?;
            let parsed = match (check.get("equals"), check.get("contains")) {
                (Some(text), None) => FileCheck::Equals(string(Some(text), &what)?),
                (None, Some(text)) => FileCheck::Contains(string(Some(text), &what)?),
                _ => return Err(format!("{what}必须恰好是 equals 或 contains 之一")),
            };
            expect.files.push((relative(path)?, parsed));
        }
    }
    if let Some(tools) = map.get("tools") {
        let names = tools.as_array().ok_or("expect.tools 必须是工具名的数组")?;
        for name in names {
            expect
                .tools
                .push(string(Some(name), "expect.tools 的每一项")?);
        }
    }
    if let Some(text) = map.get("final_text_contains") {
        expect.final_text_contains = Some(string(Some(text), "expect.final_text_contains")?);
    }
    if expect.files.is_empty() && expect.tools.is_empty() && expect.final_text_contains.is_none() {
        return Err("expect 里至少要有一项检查（files、tools 或 final_text_contains）".into());
    }
    Ok(expect)
}

/// Reads one case file's text.
pub fn parse_case(text: &str) -> Result<CaseFile, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|error| format!("不是合法的 JSON：{error}"))?;
    let map = object(
        &value,
        "case",
        &["id", "prompt", "files", "script", "expect"],
    )?;
    let id = string(map.get("id"), "id")?;
    if id.trim().is_empty() || id.chars().any(|c| c.is_control()) {
        return Err("id 不能是空白，也不能含控制字符".into());
    }
    let prompt = string(map.get("prompt"), "prompt")?;
    let mut files = Vec::new();
    if let Some(tree) = map.get("files") {
        let tree = tree
            .as_object()
            .ok_or("files 必须是“路径 → 内容”的 JSON 对象")?;
        for (path, content) in tree {
            files.push((
                relative(path)?,
                string(Some(content), &format!("files 里 {path:?} 的内容"))?,
            ));
        }
    }
    let script = match map.get("script") {
        None => None,
        Some(Value::Array(turns)) if !turns.is_empty() => Some(
            turns
                .iter()
                .enumerate()
                .map(|(index, turn_value)| turn(index + 1, turn_value))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err("script 必须是非空的回合数组".into()),
    };
    let expect = expect(map.get("expect").ok_or("缺少 expect")?)?;
    Ok(CaseFile {
        id,
        prompt,
        files,
        script,
        expect,
    })
}

impl Expect {
    /// The declared files: exactly the files an expectation reads.
    pub fn declared(&self) -> Vec<&str> {
        self.files.iter().map(|(path, _)| path.as_str()).collect()
    }

    /// One boolean per expectation, in the order they are written.
    pub fn judge(&self, observation: &EvalObservation) -> TaskVerdict {
        let mut checks = Vec::new();
        for (path, check) in &self.files {
            let content = observation.file(path);
            checks.push(match check {
                FileCheck::Equals(text) => content == Some(text.as_str()),
                FileCheck::Contains(text) => content.is_some_and(|c| c.contains(text.as_str())),
            });
        }
        if !self.tools.is_empty() {
            let called: Vec<&str> = observation
                .messages()
                .into_iter()
                .filter_map(|message| match message {
                    AgentMessage::Assistant(assistant) => Some(&assistant.content),
                    _ => None,
                })
                .flatten()
                .filter_map(|block| match block {
                    AssistantContent::ToolCall(call) => Some(call.name.as_str()),
                    _ => None,
                })
                .collect();
            let mut wanted = self.tools.iter().peekable();
            for name in called {
                if wanted.peek().is_some_and(|next| next.as_str() == name) {
                    wanted.next();
                }
            }
            checks.push(wanted.peek().is_none());
        }
        if let Some(text) = &self.final_text_contains {
            let last = observation
                .messages()
                .into_iter()
                .rev()
                .find(|message| matches!(message, AgentMessage::Assistant(_)))
                .map(text_of)
                .unwrap_or_default();
            checks.push(last.contains(text.as_str()));
        }
        TaskVerdict::from_checks(&checks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pi_course::agent_loop::{AgentRunResult, RunReason};
    use pi_course::session_tree::SessionEntry;
    use pi_course::types::{assistant_message, text, StopReason, ToolCall, UserMessage};
    use serde_json::json;

    fn refusal(value: Value) -> String {
        parse_case(&value.to_string()).expect_err("这个 case 文件必须被拒绝")
    }

    fn minimal() -> Value {
        json!({"id": "c", "prompt": "p", "script": [{"text": "t"}],
               "expect": {"final_text_contains": "t"}})
    }

    #[test]
    fn case_files_are_read_strictly() {
        let mut unknown = minimal();
        unknown["expected"] = json!({});
        assert!(
            refusal(unknown).contains("不认识的字段 \"expected\""),
            "拼错的字段名必须被点名拒绝，而不是悄悄忽略"
        );
        let mut both = minimal();
        both["expect"] = json!({"files": {"a.txt": {"equals": "x", "contains": "y"}}});
        assert!(
            refusal(both).contains("必须恰好是 equals 或 contains 之一"),
            "一个文件检查只能有一种比较"
        );
        let mut empty = minimal();
        empty["expect"] = json!({});
        assert!(
            refusal(empty).contains("至少要有一项检查"),
            "没有检查的 case 什么都证明不了"
        );
        let mut turn = minimal();
        turn["script"] = json!([{"text": "t", "tool_calls": []}]);
        assert!(
            refusal(turn).contains("必须恰好有 text 或非空的 tool_calls 之一"),
            "一个回合要么是文字要么是调用"
        );
        assert!(
            parse_case(&minimal().to_string()).is_ok(),
            "最小的 case 可以读"
        );
    }

    fn observation(calls: &[&str]) -> EvalObservation {
        let mut messages = vec![AgentMessage::User(UserMessage {
            content: vec![text("q")],
            timestamp: 1,
        })];
        for (at, name) in calls.iter().enumerate() {
            messages.push(AgentMessage::Assistant(assistant_message(
                vec![AssistantContent::ToolCall(ToolCall {
                    id: format!("c{at}"),
                    name: name.to_string(),
                    arguments: json!({}),
                    raw_arguments: None,
                })],
                StopReason::ToolUse,
            )));
        }
        let mut entries: Vec<SessionEntry> = Vec::new();
        for (at, message) in messages.iter().enumerate() {
            let parent = entries.last().map(|entry| entry.id.clone());
            entries.push(SessionEntry::message(
                &format!("e{at}"),
                parent.as_deref(),
                1,
                message.clone(),
            ));
        }
        EvalObservation {
            result: AgentRunResult {
                reason: RunReason::Stop,
                messages,
                steps: 1,
            },
            entries,
            files: Vec::new(),
        }
    }

    #[test]
    fn tools_must_appear_in_order_with_others_between() {
        let seen = observation(&["read", "bash", "edit"]);
        for (wanted, passes) in [
            (vec!["read", "edit"], true),
            (vec!["read", "bash", "edit"], true),
            (vec!["edit", "read"], false),
            (vec!["write"], false),
        ] {
            let expect = Expect {
                tools: wanted.iter().map(|name| name.to_string()).collect(),
                ..Expect::default()
            };
            assert_eq!(
                expect.judge(&seen).checks,
                vec![passes],
                "工具检查要求 {wanted:?} 按顺序出现在活动路径上（中间可以夹别的）"
            );
        }
    }
}
