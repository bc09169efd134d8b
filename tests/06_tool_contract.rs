//! Chapter 06 acceptance tests: validators, the registry, the executor.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pi_course::tool::*;
use pi_course::types::{
    text, AgentMessage, TextContent, ToolCall, ToolDefinition, ToolResultMessage,
};
use serde_json::{json, Value};

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
        raw_arguments: None,
    }
}

/// A hand-made schema, so registry and executor tests do not depend on Lab 6.1.
fn value_schema() -> Schema<String> {
    Schema::new(
        Some(json!({"type": "object", "properties": {"value": {"type": "string"}}})),
        |arguments| match arguments.get("value") {
            Some(Value::String(value)) => Ok(value.clone()),
            _ => Err(ValidationError("必须是 string".into())),
        },
    )
}

/// `echo` counts its executions so a test can prove invalid input never ran it.
fn echo(executions: Arc<AtomicUsize>) -> SharedTool {
    Tool::new(
        "echo",
        "Echo a value",
        value_schema(),
        move |value: String, _context| {
            let executions = Arc::clone(&executions);
            async move {
                executions.fetch_add(1, Ordering::SeqCst);
                Ok(ToolOutput {
                    content: vec![text(&value)],
                    details: Some(json!({"source": "echo"})),
                    is_error: None,
                })
            }
        },
    )
    .shared()
}

fn without_timestamp(result: &ToolResultMessage) -> Value {
    assert!(
        result.timestamp > 1_600_000_000_000,
        "timestamp 必须是 Unix 毫秒"
    );
    let mut value = serde_json::to_value(AgentMessage::ToolResult(result.clone())).unwrap();
    value.as_object_mut().unwrap().remove("timestamp");
    value
}

async fn within_a_second<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(1), future)
        .await
        .expect("1 秒内没有返回结果")
}

mod validator {
    use super::*;

    fn sample_schema() -> Schema<(String, Option<String>, Option<u64>)> {
        object_schema((
            field("value", string_value()),
            field("label", optional_string()),
            field("limit", optional_positive_integer()),
        ))
    }

    #[test]
    fn object_schema_describes_exactly_what_parse_accepts() {
        let schema = sample_schema();
        assert_eq!(
            schema.json_schema(),
            Some(&json!({
                "type": "object",
                "properties": {
                    "value": {"type": "string"},
                    "label": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1}
                },
                "required": ["value"],
                "additionalProperties": false
            })),
            "required 只含非 optional 的 key，且必须带 additionalProperties: false"
        );
        let input = json!({"value": "Pi", "ignored": true});
        let before = input.clone();
        assert_eq!(
            schema.parse(&input),
            Ok(("Pi".to_string(), None, None)),
            "未声明的字段被丢弃"
        );
        assert_eq!(input, before);
        assert_eq!(
            schema.parse(&json!({"value": "Pi", "label": "x", "limit": 3})),
            Ok(("Pi".to_string(), Some("x".to_string()), Some(3)))
        );
        let reordered = object_schema((field("b", string_value()), field("a", string_value())));
        assert_eq!(
            reordered.json_schema().unwrap()["required"],
            json!(["b", "a"]),
            "required 保持 shape 顺序"
        );
    }

    #[test]
    fn parse_refuses_non_objects_and_wrong_types_without_coercion() {
        let schema = sample_schema();
        for not_object in [json!(null), json!([1]), json!("value"), json!(5)] {
            assert_eq!(
                schema.parse(&not_object).unwrap_err().to_string(),
                "参数必须是 object",
                "{not_object} 不是 object"
            );
        }
        for bad_value in [json!({"value": 1}), json!({}), json!({"value": null})] {
            assert_eq!(
                schema.parse(&bad_value).unwrap_err().to_string(),
                "必须是 string",
                "{bad_value}"
            );
        }
        for bad_limit in [json!(0), json!(1.5), json!("1"), json!(-3)] {
            let input = json!({"value": "Pi", "limit": bad_limit});
            assert_eq!(
                schema.parse(&input).unwrap_err().to_string(),
                "必须是正整数",
                "{input}"
            );
        }
    }

    #[test]
    fn validators_carry_their_schema_and_optional_flag() {
        assert_eq!(string_value().json_schema(), &json!({"type": "string"}));
        assert!(!string_value().is_optional());
        assert!(optional_string().is_optional());
        assert_eq!(optional_string().parse(None), Ok(None));
        assert_eq!(
            optional_string().parse(Some(&json!("a"))),
            Ok(Some("a".into()))
        );
        assert_eq!(
            optional_positive_integer().json_schema(),
            &json!({"type": "integer", "minimum": 1})
        );
        assert_eq!(
            optional_positive_integer().parse(Some(&json!(1))),
            Ok(Some(1))
        );
        assert!(optional_positive_integer().is_optional());
    }
}

mod registry {
    use super::*;

    fn upper() -> SharedTool {
        Tool::new(
            "upper",
            "Uppercase a value",
            value_schema(),
            |value: String, _context| async move { Ok(ToolOutput::text(&value.to_uppercase())) },
        )
        .shared()
    }

    fn schemaless() -> SharedTool {
        Tool::new(
            "now",
            "Current time",
            Schema::new(None, |_| Ok(())),
            |_: (), _context| async { Ok(ToolOutput::text("noon")) },
        )
        .shared()
    }

    #[test]
    fn registers_initial_tools_in_order_and_refuses_duplicates() {
        let echo_tool = echo(Arc::default());
        let upper_tool = upper();
        let mut registry =
            ToolRegistry::new(vec![Arc::clone(&echo_tool), Arc::clone(&upper_tool)]).unwrap();
        let listed = registry.list();
        assert_eq!(listed.len(), 2, "构造时的初始工具都要注册");
        assert!(
            Arc::ptr_eq(&listed[0], &echo_tool) && Arc::ptr_eq(&listed[1], &upper_tool),
            "list 按注册顺序返回同一批工具"
        );

        let impostor = Tool::new(
            "echo",
            "Another echo",
            value_schema(),
            |_: String, _context| async { Ok(ToolOutput::text("impostor")) },
        )
        .shared();
        assert_eq!(
            registry.register(impostor).unwrap_err().to_string(),
            "Tool 已存在：echo"
        );
        assert!(
            Arc::ptr_eq(registry.get("echo").unwrap(), &echo_tool),
            "重名注册不能替换原工具"
        );
        assert_eq!(registry.list().len(), 2);
        assert!(registry.get("missing").is_none());

        let duplicated = ToolRegistry::new(vec![echo(Arc::default()), echo(Arc::default())]);
        assert!(duplicated.is_err(), "初始工具也要经过重名检查");
    }

    #[test]
    fn definitions_export_only_what_the_provider_needs() {
        let mut registry = ToolRegistry::new(vec![echo(Arc::default())]).unwrap();
        registry.register(schemaless()).unwrap();
        let other = ToolRegistry::new(vec![]).unwrap();
        assert!(
            other.list().is_empty(),
            "每个 Registry 各自持有工具，没有全局状态"
        );
        assert_eq!(
            registry.definitions(),
            vec![
                ToolDefinition {
                    name: "echo".into(),
                    description: "Echo a value".into(),
                    parameters: json!({"type": "object", "properties": {"value": {"type": "string"}}}),
                },
                ToolDefinition {
                    name: "now".into(),
                    description: "Current time".into(),
                    parameters: json!({"type": "object"}),
                },
            ]
        );
        let provider_tools =
            pi_course::provider_adapter::to_provider_tools(&registry.definitions());
        assert_eq!(
            provider_tools.map(|tools| tools.len()),
            Some(2),
            "definitions 直接交给第 05 章的适配器"
        );
    }
}

mod executor {
    use super::*;

    fn boom() -> SharedTool {
        Tool::new(
            "boom",
            "Always fails",
            value_schema(),
            |_: String, _context| async { Err(ToolError::new("exploded")) },
        )
        .shared()
    }

    fn failure(id: &str, name: &str, message: &str) -> Value {
        json!({
            "role": "toolResult",
            "toolCallId": id,
            "toolName": name,
            "content": [{"type": "text", "text": format!("Tool {name} failed: {message}")}],
            "details": {"error": message},
            "isError": true
        })
    }

    #[tokio::test]
    async fn success_and_three_failures_all_return_paired_results() {
        within_a_second(async {
            let executions = Arc::new(AtomicUsize::new(0));
            let registry = ToolRegistry::new(vec![echo(Arc::clone(&executions)), boom()]).unwrap();
            let run = |call: ToolCall| {
                let registry = registry.clone();
                async move { execute_tool_call(&call, &registry, CallContext::default()).await }
            };

            let ok = run(call("ok-1", "echo", json!({"value": "Pi"}))).await;
            assert_eq!(
                without_timestamp(&ok),
                json!({"role": "toolResult", "toolCallId": "ok-1", "toolName": "echo",
                       "content": [{"type": "text", "text": "Pi"}], "details": {"source": "echo"},
                       "isError": false})
            );
            let unknown = run(call("u-1", "missing", json!({}))).await;
            assert_eq!(
                without_timestamp(&unknown),
                failure("u-1", "missing", "未知工具")
            );
            let invalid = run(call("bad-1", "echo", json!({"value": 1}))).await;
            // The side-effect counter is checked first: it names the real bug.
            assert_eq!(
                executions.load(Ordering::SeqCst),
                1,
                "无效参数不能到达 execute"
            );
            assert_eq!(
                without_timestamp(&invalid),
                failure("bad-1", "echo", "必须是 string")
            );
            let thrown = run(call("boom-1", "boom", json!({"value": "x"}))).await;
            assert_eq!(
                without_timestamp(&thrown),
                failure("boom-1", "boom", "exploded")
            );
        })
        .await;
    }

    #[tokio::test]
    async fn a_panicking_tool_still_returns_a_paired_error_result() {
        within_a_second(async {
            let fragile = Tool::new(
                "fragile",
                "Panics on purpose",
                value_schema(),
                |value: String, _context| async move {
                    if value == "crash" {
                        panic!("fragile tool gave up");
                    }
                    Ok(ToolOutput::text(&value))
                },
            )
            .shared();
            let registry = ToolRegistry::new(vec![fragile]).unwrap();
            // Spawned so that an executor which lets the panic escape fails with a clear message.
            let outcome = tokio::spawn(async move {
                execute_tool_call(
                    &call("p-7", "fragile", json!({"value": "crash"})),
                    &registry,
                    CallContext::default(),
                )
                .await
            })
            .await;
            let result = outcome.expect("工具 panic 不能让执行器一起崩溃，必须变成失败结果");
            assert_eq!(
                (result.tool_call_id.as_str(), result.tool_name.as_str()),
                ("p-7", "fragile"),
                "panic 的结果同样沿用原调用的 id 与 name"
            );
            assert!(result.is_error, "panic 的结果必须 isError: true");
            let message = result
                .details
                .as_ref()
                .and_then(|details| details["error"].as_str())
                .expect("失败结果的 details 是 {\"error\": message}")
                .to_string();
            assert_eq!(
                result.content,
                vec![text(&format!("Tool fragile failed: {message}"))],
                "panic 与其他失败共用同一种结果形状"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn the_tool_sees_the_call_id_the_callers_token_and_progress_and_its_output_is_kept() {
        within_a_second(async {
            let reports: Arc<Mutex<Vec<Vec<TextContent>>>> = Arc::default();
            let progress = ProgressReporter::new({
                let reports = Arc::clone(&reports);
                move |content| reports.lock().unwrap().push(content)
            });
            let cancel = tokio_util::sync::CancellationToken::new();
            let seen: Arc<Mutex<Option<(String, bool, bool)>>> = Arc::default();
            let inspect = Tool::new("inspect", "Inspect the context", value_schema(), {
                let seen = Arc::clone(&seen);
                let expected_progress = progress.clone();
                move |value: String, context: ToolContext| {
                    let seen = Arc::clone(&seen);
                    let expected_progress = expected_progress.clone();
                    async move {
                        *seen.lock().unwrap() = Some((
                            context.call_id.clone(),
                            context.cancel.is_cancelled(),
                            context.progress.same_as(&expected_progress),
                        ));
                        context
                            .progress
                            .report(vec![text(&format!("progress:{value}"))]);
                        Ok(ToolOutput {
                            content: vec![text("domain failure")],
                            details: Some(json!({"phase": "domain-error"})),
                            is_error: Some(true),
                        })
                    }
                }
            })
            .shared();
            let registry = ToolRegistry::new(vec![inspect]).unwrap();
            cancel.cancel();
            let context = CallContext {
                cancel: cancel.clone(),
                progress,
            };
            let result = execute_tool_call(
                &call("ctx", "inspect", json!({"value": "Pi"})),
                &registry,
                context,
            )
            .await;

            assert_eq!(
                seen.lock().unwrap().clone(),
                Some(("ctx".to_string(), true, true)),
                "工具看到的 call_id 来自调用本身，取消令牌与进度回调原样传入"
            );
            assert_eq!(*reports.lock().unwrap(), vec![vec![text("progress:Pi")]]);
            assert_eq!(
                without_timestamp(&result),
                json!({"role": "toolResult", "toolCallId": "ctx", "toolName": "inspect",
                       "content": [{"type": "text", "text": "domain failure"}],
                       "details": {"phase": "domain-error"}, "isError": true}),
                "工具显式给出的 isError 与 details 必须保留"
            );
        })
        .await;
    }
}
