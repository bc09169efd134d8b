//! Held-out tests for chapter 03 (instructor only): other names, orders and payloads.

use pi_course::types::*;
use serde_json::json;

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
        serde_json::to_value(&result).unwrap(),
        json!({"role": "toolResult", "toolCallId": "call-42", "toolName": "grep",
               "content": [{"type": "text", "text": "3 matches"}], "isError": false, "timestamp": 5})
    );
    let call = ToolCall {
        id: "x".into(),
        name: "ls".into(),
        arguments: json!("{\"a"),
        raw_arguments: Some("{\"a".into()),
    };
    assert_eq!(
        serde_json::to_value(&call).unwrap()["rawArguments"],
        json!("{\"a")
    );
    let back: AgentMessage =
        serde_json::from_value(serde_json::to_value(&result).unwrap()).unwrap();
    assert_eq!(back, result);
}

#[test]
fn a_section_deleted_then_restored_moves_to_the_end() {
    let messages = vec![
        AgentMessage::System(SystemMessage {
            content: "Base".into(),
            sections: json!({"a": "A", "b": "B"}).as_object().cloned(),
            timestamp: 1,
        }),
        AgentMessage::System(SystemMessage {
            content: "".into(),
            sections: json!({"a": null}).as_object().cloned(),
            timestamp: 2,
        }),
        AgentMessage::System(SystemMessage {
            content: "".into(),
            sections: json!({"a": "A2"}).as_object().cloned(),
            timestamp: 3,
        }),
    ];
    assert_eq!(
        current_system_prompt(&messages).as_deref(),
        Some("Base\n\nB\n\nA2")
    );
}

#[test]
fn replay_skips_an_empty_base_and_keeps_the_first_timestamp() {
    let system = |content: &str, sections: serde_json::Value, timestamp| {
        AgentMessage::System(SystemMessage {
            content: content.into(),
            sections: sections.as_object().cloned(),
            timestamp,
        })
    };
    let messages = vec![
        system("", json!({"tools": "T1"}), 100),
        user_message("go"),
        system("Be brief.", json!(null), 200),
        system("", json!({"tools": "T2", "style": "terse"}), 300),
    ];
    let current = current_system_message(&messages).unwrap();
    assert_eq!(current.timestamp, 100);
    assert_eq!(current.content, "Be brief.");
    assert_eq!(
        current_system_prompt(&messages).as_deref(),
        Some("Be brief.\n\nT2\n\nterse")
    );
}

#[test]
fn tool_result_text_and_error_flag() {
    let failed = AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: "t-7".into(),
        tool_name: "bash".into(),
        content: vec![text("exit 1"), text("permission denied")],
        details: Some(json!({"code": 1})),
        is_error: true,
        timestamp: 8,
    });
    assert_eq!(text_of(&failed), "exit 1\npermission denied");
    let value = serde_json::to_value(&failed).unwrap();
    assert_eq!(value["isError"], json!(true));
    assert_eq!(value["details"], json!({"code": 1}));
}
