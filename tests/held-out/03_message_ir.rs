//! Held-out tests for chapter 03 (instructor only): other names, orders and payloads.

use pi_course::types::*;
use serde_json::{json, Value};

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("消息类型必须能序列化成 JSON")
}

fn system(content: &str, sections: Value, timestamp: u64) -> AgentMessage {
    AgentMessage::System(SystemMessage {
        content: content.into(),
        sections: sections.as_object().cloned(),
        timestamp,
    })
}

#[test]
fn tool_result_and_raw_arguments_use_pi_field_names() {
    let result = AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: "call-42".into(),
        tool_name: "grep".into(),
        content: vec![text("3 matches")],
        details: None,
        is_error: false,
        timestamp: 5,
    });
    assert_eq!(
        to_json(&result),
        json!({"role": "toolResult", "toolCallId": "call-42", "toolName": "grep",
               "content": [{"type": "text", "text": "3 matches"}], "isError": false, "timestamp": 5}),
        "toolResult 的 wire 形状与 pi 一致，缺省的 details 不输出"
    );
    let call = ToolCall {
        id: "x".into(),
        name: "ls".into(),
        arguments: json!("{\"a"),
        raw_arguments: Some("{\"a".into()),
    };
    assert_eq!(
        to_json(&call)["rawArguments"],
        json!("{\"a"),
        "raw_arguments 的 wire 名字是 rawArguments"
    );
    let back: AgentMessage =
        serde_json::from_value(to_json(&result)).expect("toolResult 的 JSON 必须能读回");
    assert_eq!(back, result, "toolResult 读回后与原消息相同");
}

#[test]
fn a_section_deleted_then_restored_moves_to_the_end() {
    let messages = vec![
        system("Base", json!({"tools": "T", "style": "S", "env": "E"}), 1),
        system("", json!({"tools": null}), 2),
        system("", json!({"tools": "T2", "style": "S2"}), 3),
    ];
    assert_eq!(
        current_system_prompt(&messages).as_deref(),
        Some("Base\n\nS2\n\nE\n\nT2"),
        "删除后重新出现的段落排在末尾，被覆盖的段落不动"
    );
}

#[test]
fn replay_skips_an_empty_base_and_keeps_the_first_timestamp() {
    let messages = vec![
        system("", json!({"tools": "T1"}), 100),
        user_message("go"),
        system("Be brief.", json!(null), 200),
        system("", json!({"tools": "T2", "style": "terse"}), 300),
    ];
    let current = current_system_message(&messages).expect("有 system message 时必须返回 Some");
    assert_eq!(
        current.timestamp, 100,
        "时间戳取第一条 system message 的，即使它的 content 是空的"
    );
    assert_eq!(
        current.content, "Be brief.",
        "空 content 不追加，即使它来自第一条 system message"
    );
    assert_eq!(
        current_system_prompt(&messages).as_deref(),
        Some("Be brief.\n\nT2\n\nterse"),
        "prompt 是重放后的 content 加上各段落"
    );
}

#[test]
fn tool_result_details_and_error_flag_reach_the_wire() {
    let failed = AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: "t-9".into(),
        tool_name: "edit".into(),
        content: vec![text("no match"), text("0 edits")],
        details: Some(json!({"code": 2, "path": "src/a.rs"})),
        is_error: true,
        timestamp: 8,
    });
    assert_eq!(
        text_of(&failed),
        "no match\n0 edits",
        "toolResult 的投影把文本块用换行连接"
    );
    let value = to_json(&failed);
    assert_eq!(
        value["isError"],
        json!(true),
        "is_error 的 wire 名字是 isError"
    );
    assert_eq!(
        value["details"],
        json!({"code": 2, "path": "src/a.rs"}),
        "details 原样输出"
    );
}
