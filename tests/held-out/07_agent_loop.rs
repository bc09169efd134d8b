//! Held-out tests for chapter 07 (instructor only): other ids, an unknown tool inside a
//! batch, and the skipped-result text.

use std::sync::Arc;
use std::time::Duration;

use pi_course::agent_loop::*;
use pi_course::scripted_model::{tool_call, ScriptedModel, ScriptedTurn};
use pi_course::tool::*;
use pi_course::types::*;
use serde_json::json;

fn upper() -> SharedTool {
    let schema = Schema::new(None, |arguments: &serde_json::Value| {
        arguments["text"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| ValidationError("必须是 string".into()))
    });
    Tool::new(
        "upper",
        "Uppercase",
        schema,
        |value: String, _context| async move { Ok(ToolOutput::text(&value.to_uppercase())) },
    )
    .shared()
}

async fn run(model: &ScriptedModel) -> AgentRunResult {
    let mut input = AgentContext::default();
    input.messages.push(user_message("go"));
    let options = AgentLoopOptions::new(
        Arc::new(model.clone()),
        ToolRegistry::new(vec![upper()]).expect("只有一个工具，Registry 应当建成"),
        input,
    );
    tokio::time::timeout(Duration::from_secs(1), run_agent_loop(options))
        .await
        .expect("1 秒内循环没有结束")
}

fn tool_results(messages: &[AgentMessage]) -> Vec<&ToolResultMessage> {
    messages
        .iter()
        .filter_map(|message| match message {
            AgentMessage::ToolResult(result) => Some(result),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn every_call_id_in_a_mixed_batch_gets_exactly_one_result() {
    let model = ScriptedModel::new(vec![
        ScriptedTurn::tool_calls(vec![
            tool_call("call_Zq", "upper", json!({"text": "pi"})),
            tool_call("call_Xy", "nope", json!({})),
            tool_call("call_Wv", "upper", json!({"text": 3})),
        ]),
        ScriptedTurn::text("done"),
    ]);
    let result = run(&model).await;
    let ids: Vec<&str> = tool_results(&result.messages)
        .iter()
        .map(|result| result.tool_call_id.as_str())
        .collect();
    assert_eq!(
        ids,
        ["call_Zq", "call_Xy", "call_Wv"],
        "混合批次里每个调用 id 按调用顺序恰好一条结果"
    );
    assert_eq!(
        tool_results(&result.messages)[0].content,
        vec![text("PI")],
        "成功的调用带着工具自己的输出"
    );
    assert_eq!(
        tool_results(&result.messages)[1].content,
        vec![text("Tool nope failed: 未知工具")],
        "未知工具的调用得到执行器的失败结果"
    );
    assert!(
        tool_results(&result.messages)[2].is_error,
        "参数不合法的调用得到失败结果"
    );
    assert_eq!(result.reason, RunReason::Stop, "结果回填后模型 stop：Stop");
}

#[tokio::test]
async fn skipped_results_explain_themselves() {
    let call = tool_call("t", "upper", json!({}));
    assert_eq!(
        skipped_result(&call, "length").content,
        vec![text(
            "Tool call was not executed because the model response was truncated."
        )],
        "length 的跳过说明（指南原文）"
    );
    assert_eq!(
        skipped_result(&call, "aborted").content,
        vec![text(
            "Tool call was not executed because the model turn ended with aborted."
        )],
        "aborted 的跳过说明（指南原文）"
    );
    assert_eq!(
        skipped_result(&call, "unexpected-stop").tool_call_id,
        "t",
        "跳过结果保留原调用的 id"
    );
}
