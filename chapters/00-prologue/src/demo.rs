//! The prologue: one scripted conversation through the real loop, registry and executor,
//! rendered as a readable transcript. `cargo run -p pi-course --example prologue` prints it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use crate::agent_loop::{run_agent_loop, AgentLoopOptions, AgentRunResult};
use crate::scripted_model::{tool_call, ScriptedModel, ScriptedTurn};
use crate::tool::{
    field, object_schema, string_value, SharedTool, Tool, ToolError, ToolOutput, ToolRegistry,
};
use crate::types::{
    assistant_message, text, text_of, user_message, AgentContext, AgentMessage, AssistantContent,
    StopReason,
};

/// A read-only "file system" held in memory, so the demo touches nothing on disk.
pub fn demo_files() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([("README.md", "# pi\n一个会读文件的编码智能体。")])
}

/// `read_file { path }`: returns the file's text, or an error for a missing file.
pub fn read_file_tool() -> SharedTool {
    let files = demo_files();
    Tool::new(
        "read_file",
        "Read a file of the demo project",
        object_schema((field("path", string_value()),)),
        move |(path,): (String,), _context| {
            let found = files.get(path.as_str()).map(|content| content.to_string());
            async move {
                match found {
                    Some(content) => Ok(ToolOutput::text(&content)),
                    None => Err(ToolError::new(format!("文件不存在：{path}"))),
                }
            }
        },
    )
    .shared()
}

/// The scripted model: first it asks for two files (one missing), then it answers.
pub fn demo_model() -> ScriptedModel {
    ScriptedModel::new(vec![
        ScriptedTurn::message(assistant_message(
            vec![
                AssistantContent::Text(text("先看看 README。")),
                AssistantContent::ToolCall(tool_call(
                    "call-1",
                    "read_file",
                    json!({"path": "README.md"}),
                )),
                AssistantContent::ToolCall(tool_call(
                    "call-2",
                    "read_file",
                    json!({"path": "TODO.md"}),
                )),
            ],
            StopReason::ToolUse,
        )),
        ScriptedTurn::text("这是一个会读文件的编码智能体；TODO.md 不存在。"),
    ])
}

/// Runs the conversation through the real loop.
pub async fn run_demo() -> AgentRunResult {
    let registry = ToolRegistry::new(vec![read_file_tool()]).expect("one tool, no duplicates");
    let context = AgentContext {
        messages: vec![user_message("这个项目是做什么的？")],
        ..AgentContext::default()
    };
    run_agent_loop(AgentLoopOptions::new(
        Arc::new(demo_model()),
        registry,
        context,
    ))
    .await
}

/// One line per message (tool calls indented under their assistant message).
pub fn render(result: &AgentRunResult) -> String {
    let mut lines = Vec::new();
    for message in &result.messages {
        match message {
            AgentMessage::System(_) => lines.push(format!("[system] {}", text_of(message))),
            AgentMessage::User(_) => lines.push(format!("[user] {}", text_of(message))),
            AgentMessage::Assistant(assistant) => {
                lines.push(format!("[assistant] {}", text_of(message)));
                for block in &assistant.content {
                    if let AssistantContent::ToolCall(call) = block {
                        lines.push(format!(
                            "  → {} {}（{}）",
                            call.name, call.arguments, call.id
                        ));
                    }
                }
            }
            AgentMessage::ToolResult(tool_result) => {
                let mark = if tool_result.is_error { "✗" } else { "✓" };
                let body = text_of(message).replace('\n', " / ");
                lines.push(format!(
                    "[toolResult {} {mark}] {body}",
                    tool_result.tool_call_id
                ));
            }
        }
    }
    lines.push(format!("结束：{:?}，共 {} 步", result.reason, result.steps));
    lines.join("\n")
}
