//! Held-out tests for chapter 06 (instructor only): other ids and names, `null` for an
//! optional string, a panicking tool, and a call id the caller cannot override.

use std::time::Duration;

use pi_course::tool::*;
use pi_course::types::{ToolCall, ToolResultMessage};
use serde_json::{json, Value};

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
        raw_arguments: None,
    }
}

fn first_text(result: &ToolResultMessage) -> &str {
    &result.content[0].text
}

fn grep_tool() -> SharedTool {
    let schema = object_schema((
        field("pattern", string_value()),
        field("path", optional_string()),
    ));
    Tool::new(
        "grep",
        "Search files",
        schema,
        |(pattern, path), context: ToolContext| async move {
            if pattern == "panic" {
                panic!("pattern was {pattern}");
            }
            Ok(ToolOutput::text(&format!(
                "{}:{pattern}:{}",
                context.call_id,
                path.unwrap_or_default()
            )))
        },
    )
    .shared()
}

async fn run(call: &ToolCall) -> ToolResultMessage {
    let registry = ToolRegistry::new(vec![grep_tool()]).expect("grep 必须能注册");
    tokio::time::timeout(
        Duration::from_secs(1),
        execute_tool_call(call, &registry, CallContext::default()),
    )
    .await
    .expect("1 秒内返回")
}

#[tokio::test]
async fn other_ids_and_names_are_kept_on_every_path() {
    for (id, name, arguments) in [
        ("call_9f", "grep", json!({"pattern": "fn", "path": "src"})),
        ("x-2", "grep", json!({"pattern": 3})),
        ("z", "Grep", json!({"pattern": "fn"})),
    ] {
        let result = run(&call(id, name, arguments)).await;
        assert_eq!(
            (result.tool_call_id.as_str(), result.tool_name.as_str()),
            (id, name),
            "每条路径的结果都沿用原调用的 id 与 name"
        );
    }
    assert_eq!(
        first_text(
            &run(&call(
                "call_9f",
                "grep",
                json!({"pattern": "fn", "path": "src"})
            ))
            .await
        ),
        "call_9f:fn:src",
        "工具看到的 call_id 来自调用本身，optional 字段按值传入"
    );
    assert_eq!(
        first_text(&run(&call("z", "Grep", json!({}))).await),
        "Tool Grep failed: 未知工具",
        "名称区分大小写"
    );
}

#[tokio::test]
async fn null_is_not_absent_for_an_optional_string() {
    let result = run(&call("n", "grep", json!({"pattern": "fn", "path": null}))).await;
    assert!(result.is_error, "path: null 必须变成失败结果");
    assert_eq!(
        result.details,
        Some(json!({"error": "必须是 string"})),
        "显式的 null 不算缺省，optional_string 报 必须是 string"
    );
}

#[tokio::test]
async fn a_panicking_tool_yields_a_paired_error_result() {
    let result = run(&call("p-1", "grep", json!({"pattern": "panic"}))).await;
    assert_eq!(result.tool_call_id, "p-1", "panic 的结果沿用原调用的 id");
    assert!(result.is_error, "panic 的结果必须 isError: true");
    let message = first_text(&result);
    assert_eq!(
        message, "Tool grep failed: 工具执行时发生 panic：pattern was panic",
        "panic 的结果文字是 Tool <name> failed: 工具执行时发生 panic：<panic 消息>"
    );
    assert!(
        !message.contains("stack backtrace") && !message.contains("src/"),
        "结果里只放 panic 消息，不放回溯或源码位置：{message}"
    );
}

#[tokio::test]
async fn the_call_id_comes_from_the_call_even_with_a_shared_context() {
    let context = CallContext::default();
    let registry = ToolRegistry::new(vec![grep_tool()]).expect("grep 必须能注册");
    for id in ["first", "second"] {
        let result = execute_tool_call(
            &call(id, "grep", json!({"pattern": "p"})),
            &registry,
            context.clone(),
        )
        .await;
        assert_eq!(
            first_text(&result),
            format!("{id}:p:"),
            "共享同一个 CallContext 时，call_id 仍取自每个调用"
        );
    }
}

#[tokio::test]
async fn broken_json_is_quoted_by_characters_not_bytes() {
    let raw = format!("{{\"pattern\":\"{}", "搜".repeat(250));
    let broken = ToolCall {
        id: "q-9".into(),
        name: "grep".into(),
        arguments: Value::String(raw.clone()),
        raw_arguments: Some(raw.clone()),
    };
    let quoted: String = raw.chars().take(200).collect();
    assert_eq!(
        first_text(&run(&broken).await),
        format!("Tool grep failed: 参数不是合法的 JSON：收到 {quoted}…"),
        "引用按字符截断（不在汉字中间切开），截断时以 … 结尾"
    );
    let whitespace = ToolCall {
        raw_arguments: Some("  ".into()),
        ..call("q-10", "grep", json!({"pattern": "x"}))
    };
    assert_eq!(
        first_text(&run(&whitespace).await),
        "q-10:x:",
        "只有空白的 rawArguments 也表示没有参数，不是坏掉的 JSON"
    );
}
