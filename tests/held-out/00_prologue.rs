//! Held-out test for chapter 00 (instructor only): the demo tool on its own.

use pi_course::demo::read_file_tool;
use pi_course::tool::{execute_tool_call, CallContext, ToolRegistry};
use pi_course::types::ToolCall;
use serde_json::json;

#[tokio::test]
async fn the_demo_tool_refuses_bad_arguments_before_reading() {
    let registry = ToolRegistry::new(vec![read_file_tool()]).unwrap();
    let call = ToolCall {
        id: "h-7".into(),
        name: "read_file".into(),
        arguments: json!({"path": 7}),
        raw_arguments: None,
    };
    let result = execute_tool_call(&call, &registry, CallContext::default()).await;
    assert!(result.is_error);
    assert_eq!(
        result.content[0].text,
        "Tool read_file failed: 必须是 string"
    );
}
