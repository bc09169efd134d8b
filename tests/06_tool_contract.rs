//! Chapter 06 acceptance tests: validators, the registry, the executor.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("系统时钟早于 1970 年")
        .as_millis() as u64
}

fn without_timestamp(result: &ToolResultMessage) -> Value {
    assert!(
        result.timestamp > 1_600_000_000_000,
        "timestamp 必须是 Unix 毫秒，实际是 {}",
        result.timestamp
    );
    let mut value = serde_json::to_value(AgentMessage::ToolResult(result.clone()))
        .expect("ToolResultMessage 必须能序列化");
    value
        .as_object_mut()
        .expect("序列化后的消息是 JSON object")
        .remove("timestamp");
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

    fn refused(message: &str) -> Result<(String, Option<String>, Option<u64>), ValidationError> {
        Err(ValidationError(message.into()))
    }

    #[test]
    fn object_schema_produces_exactly_the_json_schema_of_the_guide() {
        let schema = sample_schema();
        let described = schema
            .json_schema()
            .expect("object_schema 必须给出 JSON Schema")
            .clone();
        assert_eq!(
            described["required"],
            json!(["value"]),
            "required 只含非 optional 的 key"
        );
        assert_eq!(
            described["additionalProperties"],
            json!(false),
            "object schema 必须带 additionalProperties: false"
        );
        assert_eq!(
            described,
            json!({
                "type": "object",
                "properties": {
                    "value": {"type": "string"},
                    "label": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1}
                },
                "required": ["value"],
                "additionalProperties": false
            }),
            "object_schema 生成的 JSON Schema 必须与指南给出的完全一致"
        );

        let reordered = object_schema((
            field("b", string_value()),
            field("label", optional_string()),
            field("a", string_value()),
        ));
        assert_eq!(
            reordered
                .json_schema()
                .map(|schema| schema["required"].clone()),
            Some(json!(["b", "a"])),
            "required 按 shape 的顺序列出非 optional 的 key"
        );
        let all_optional = object_schema((field("label", optional_string()),));
        assert_eq!(
            all_optional.json_schema(),
            Some(&json!({
                "type": "object",
                "properties": {"label": {"type": "string"}},
                "required": [],
                "additionalProperties": false
            })),
            "全是 optional 字段时 required 是空数组，其余部分不变"
        );
    }

    #[test]
    fn parse_keeps_only_declared_keys_and_leaves_the_input_untouched() {
        let schema = sample_schema();
        let input = json!({"value": "Pi", "ignored": true});
        let before = input.clone();
        assert_eq!(
            schema.parse(&input),
            Ok(("Pi".to_string(), None, None)),
            "未声明的字段被丢弃，缺省的 optional 字段是 None"
        );
        assert_eq!(input, before, "parse 不能修改输入");
        assert_eq!(
            schema.parse(&json!({"value": "Pi", "label": "x", "limit": 3})),
            Ok(("Pi".to_string(), Some("x".to_string()), Some(3))),
            "每个声明的字段交给自己的 validator"
        );
        assert_eq!(
            schema.parse(&json!({"value": 1, "limit": 0})),
            refused("必须是 string"),
            "按 shape 顺序检查，第一个失败的错误直接返回"
        );
    }

    #[test]
    fn parse_refuses_every_non_object_with_one_message() {
        let schema = sample_schema();
        for not_object in [
            json!(null),
            json!([1]),
            json!("value"),
            json!(5),
            json!(true),
        ] {
            assert_eq!(
                schema.parse(&not_object),
                refused("参数必须是 object"),
                "{not_object} 不是 object，必须报 参数必须是 object"
            );
        }
    }

    #[test]
    fn string_value_does_not_coerce() {
        assert_eq!(
            string_value().parse(Some(&json!("Pi"))),
            Ok("Pi".to_string()),
            "string_value 接受字符串并原样返回"
        );
        for (value, rule) in [
            (
                Some(json!(1)),
                "数字 1 不是字符串：string_value 不做类型转换",
            ),
            (
                Some(json!(true)),
                "布尔值不是字符串：string_value 不做类型转换",
            ),
            (
                Some(json!(["a"])),
                "数组不是字符串：string_value 不做类型转换",
            ),
            (Some(json!(null)), "null 不是字符串"),
            (None, "必需的字符串缺省时报 必须是 string"),
        ] {
            assert_eq!(
                string_value().parse(value.as_ref()),
                Err(ValidationError("必须是 string".into())),
                "{rule}"
            );
        }
        assert_eq!(
            sample_schema().parse(&json!({"value": 1})),
            refused("必须是 string"),
            "object 里的数字字段同样不做类型转换"
        );
        assert_eq!(
            sample_schema().parse(&json!({})),
            refused("必须是 string"),
            "缺少必需的 value 时报 必须是 string"
        );
    }

    #[test]
    fn optional_string_refuses_an_explicit_null() {
        assert_eq!(
            optional_string().parse(None),
            Ok(None),
            "缺省的 optional_string 是 None"
        );
        assert_eq!(
            optional_string().parse(Some(&json!("a"))),
            Ok(Some("a".into())),
            "optional_string 接受字符串"
        );
        assert_eq!(
            optional_string().parse(Some(&json!(null))),
            Err(ValidationError("必须是 string".into())),
            "显式的 null 不算缺省，optional_string 必须报 必须是 string"
        );
        assert_eq!(
            optional_string().parse(Some(&json!(7))),
            Err(ValidationError("必须是 string".into())),
            "optional_string 对非字符串复用 string_value 的错误，不做类型转换"
        );
        assert_eq!(
            sample_schema().parse(&json!({"value": "Pi", "label": null})),
            refused("必须是 string"),
            "object 里 label: null 同样不算缺省，null 不算缺省"
        );
    }

    #[test]
    fn optional_positive_integer_accepts_only_integers_from_one() {
        let validator = optional_positive_integer();
        assert_eq!(validator.parse(None), Ok(None), "缺省时是 None");
        for accepted in [1_u64, 2, 40] {
            assert_eq!(
                validator.parse(Some(&json!(accepted))),
                Ok(Some(accepted)),
                "{accepted} 是正整数，必须接受"
            );
        }
        assert_eq!(
            validator.parse(Some(&json!(2.0))),
            Ok(Some(2)),
            "JSON Schema 的 integer 包括 2.0：没有小数部分的数就是整数"
        );
        for (value, rule) in [
            (json!(0), "0 不是正整数（下界是 1）"),
            (json!(0.0), "0.0 等于 0，不是正整数"),
            (json!(1.5), "1.5 不是整数，不能截断成 1"),
            (json!("1"), "字符串 \"1\" 不能转换成整数"),
            (json!(-3), "负数不是正整数"),
            (json!(null), "null 不算缺省"),
        ] {
            assert_eq!(
                validator.parse(Some(&value)),
                Err(ValidationError("必须是正整数".into())),
                "{value}：{rule}"
            );
        }
        let input = json!({"value": "Pi", "limit": 0});
        assert_eq!(
            sample_schema().parse(&input),
            refused("必须是正整数"),
            "{input}：object 里的 limit 同样只接受 ≥ 1 的整数（下界是 1）"
        );
    }

    #[test]
    fn validators_carry_their_schema_and_optional_flag() {
        assert_eq!(
            string_value().json_schema(),
            &json!({"type": "string"}),
            "string_value 的 schema 是 {{\"type\":\"string\"}}"
        );
        assert!(!string_value().is_optional(), "string_value 是必需的");
        assert_eq!(
            optional_string().json_schema(),
            &json!({"type": "string"}),
            "optional_string 的 schema 也是 {{\"type\":\"string\"}}"
        );
        assert!(optional_string().is_optional(), "optional_string 可以缺省");
        assert_eq!(
            optional_positive_integer().json_schema(),
            &json!({"type": "integer", "minimum": 1}),
            "optional_positive_integer 的 schema 是 {{\"type\":\"integer\",\"minimum\":1}}"
        );
        assert!(
            optional_positive_integer().is_optional(),
            "optional_positive_integer 可以缺省"
        );
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

    fn impostor() -> SharedTool {
        Tool::new(
            "echo",
            "Another echo",
            value_schema(),
            |_: String, _context| async { Ok(ToolOutput::text("impostor")) },
        )
        .shared()
    }

    fn same_tools(listed: &[SharedTool], expected: &[&SharedTool]) -> bool {
        listed.len() == expected.len()
            && listed
                .iter()
                .zip(expected)
                .all(|(left, right)| Arc::ptr_eq(left, right))
    }

    #[test]
    fn registers_initial_tools_in_order() {
        let upper_tool = upper();
        let echo_tool = echo(Arc::default());
        let registry = ToolRegistry::new(vec![Arc::clone(&upper_tool), Arc::clone(&echo_tool)])
            .expect("不同名字的初始工具必须都能注册");
        assert!(
            same_tools(registry.list(), &[&upper_tool, &echo_tool]),
            "list 按注册顺序返回同一批工具（Arc 指向同一个对象）"
        );
    }

    #[test]
    fn a_duplicate_is_refused_and_the_first_tool_is_kept() {
        let upper_tool = upper();
        let echo_tool = echo(Arc::default());
        let mut registry = ToolRegistry::new(vec![Arc::clone(&upper_tool), Arc::clone(&echo_tool)])
            .expect("不同名字的初始工具必须都能注册");

        let refused = registry.register(impostor());
        assert_eq!(
            refused,
            Err(RegistryError::Duplicate("echo".into())),
            "重名注册返回 Err(Duplicate(名字))"
        );
        assert_eq!(
            refused.map_err(|error| error.to_string()),
            Err("Tool 已存在：echo".to_string()),
            "重名错误的文字是 Tool 已存在：<name>"
        );
        assert!(
            registry
                .get("echo")
                .is_some_and(|found| Arc::ptr_eq(found, &echo_tool)),
            "重名注册不能替换原工具"
        );
        assert!(
            same_tools(registry.list(), &[&upper_tool, &echo_tool]),
            "重名注册不能替换原工具，list 仍按注册顺序"
        );

        let later = schemaless();
        registry
            .register(Arc::clone(&later))
            .expect("新名字仍然可以注册");
        assert!(
            same_tools(registry.list(), &[&upper_tool, &echo_tool, &later]),
            "register 把新工具追加在最后，list 按注册顺序"
        );
    }

    #[test]
    fn initial_tools_pass_the_same_duplicate_check() {
        let duplicated =
            ToolRegistry::new(vec![echo(Arc::default()), upper(), echo(Arc::default())]);
        assert_eq!(
            duplicated.err(),
            Some(RegistryError::Duplicate("echo".into())),
            "初始工具也要经过重名检查"
        );
    }

    #[test]
    fn get_matches_the_exact_name_only() {
        let echo_tool = echo(Arc::default());
        let registry = ToolRegistry::new(vec![upper(), Arc::clone(&echo_tool)])
            .expect("不同名字的初始工具必须都能注册");
        assert!(
            registry
                .get("echo")
                .is_some_and(|found| Arc::ptr_eq(found, &echo_tool)),
            "get 按名字返回注册的那个工具"
        );
        for other in ["Echo", "ECHO", "echo ", "ech", "missing", ""] {
            assert!(
                registry.get(other).is_none(),
                "工具名区分大小写且必须完全相同：{other:?} 不是 echo"
            );
        }
    }

    #[test]
    fn definitions_export_only_what_the_provider_needs_in_registration_order() {
        let mut registry =
            ToolRegistry::new(vec![upper(), schemaless()]).expect("初始工具必须都能注册");
        registry
            .register(echo(Arc::default()))
            .expect("echo 还没有注册过");
        let definitions = registry.definitions();
        assert_eq!(
            definitions
                .iter()
                .map(|definition| definition.name.as_str())
                .collect::<Vec<_>>(),
            vec!["upper", "now", "echo"],
            "definitions 按注册顺序导出"
        );
        assert_eq!(
            definitions[1].parameters,
            json!({"type": "object"}),
            "没有 schema 的工具，parameters 是 {{\"type\":\"object\"}}"
        );
        let value_parameters =
            json!({"type": "object", "properties": {"value": {"type": "string"}}});
        assert_eq!(
            definitions,
            vec![
                ToolDefinition {
                    name: "upper".into(),
                    description: "Uppercase a value".into(),
                    parameters: value_parameters.clone(),
                },
                ToolDefinition {
                    name: "now".into(),
                    description: "Current time".into(),
                    parameters: json!({"type": "object"}),
                },
                ToolDefinition {
                    name: "echo".into(),
                    description: "Echo a value".into(),
                    parameters: value_parameters,
                },
            ],
            "definitions 只导出 name、description 与工具自己的 schema"
        );
        let provider_tools = pi_course::provider_adapter::to_provider_tools(&definitions);
        assert_eq!(
            provider_tools.map(|tools| tools.len()),
            Some(3),
            "definitions 直接交给第 05 章的适配器"
        );
    }

    #[test]
    fn every_registry_owns_its_own_tools() {
        let first = ToolRegistry::new(vec![echo(Arc::default())]).expect("echo 必须能注册");
        let other = ToolRegistry::new(vec![]).expect("空的 Registry 必须能创建");
        assert!(
            other.list().is_empty() && other.definitions().is_empty(),
            "每个 Registry 各自持有工具，没有全局状态"
        );
        assert!(
            other.get("echo").is_none(),
            "另一个 Registry 看不到别处注册的工具"
        );
        assert_eq!(first.list().len(), 1, "Registry 只持有自己注册的工具");
    }
}

mod executor {
    use super::*;

    /// `boom` counts its executions too: a failure must not be retried.
    fn boom(executions: Arc<AtomicUsize>) -> SharedTool {
        Tool::new(
            "boom",
            "Always fails",
            value_schema(),
            move |_: String, _context| {
                let executions = Arc::clone(&executions);
                async move {
                    executions.fetch_add(1, Ordering::SeqCst);
                    Err(ToolError::new("exploded"))
                }
            },
        )
        .shared()
    }

    fn assert_failure(result: &ToolResultMessage, id: &str, name: &str, message: &str, rule: &str) {
        assert_eq!(
            without_timestamp(result),
            json!({
                "role": "toolResult",
                "toolCallId": id,
                "toolName": name,
                "content": [{"type": "text", "text": format!("Tool {name} failed: {message}")}],
                "details": {"error": message},
                "isError": true
            }),
            "{rule}；失败结果统一为 Tool <name> failed: <message>，details 为 {{\"error\": message}}，isError: true，沿用原调用的 id 与 name"
        );
    }

    async fn run(call: ToolCall, registry: &ToolRegistry) -> ToolResultMessage {
        within_a_second(execute_tool_call(&call, registry, CallContext::default())).await
    }

    #[tokio::test]
    async fn success_and_three_failures_all_return_paired_results() {
        let executions = Arc::new(AtomicUsize::new(0));
        let registry = ToolRegistry::new(vec![echo(Arc::clone(&executions)), boom(Arc::default())])
            .expect("初始工具必须都能注册");

        let ok = run(call("ok-1", "echo", json!({"value": "Pi"})), &registry).await;
        assert_eq!(
            without_timestamp(&ok),
            json!({"role": "toolResult", "toolCallId": "ok-1", "toolName": "echo",
                   "content": [{"type": "text", "text": "Pi"}], "details": {"source": "echo"},
                   "isError": false}),
            "成功结果原样保留工具的 content 与 details，isError 缺省为 false"
        );
        let unknown = run(call("u-1", "missing", json!({})), &registry).await;
        assert_failure(
            &unknown,
            "u-1",
            "missing",
            "未知工具",
            "名字不存在时返回 未知工具",
        );
        let invalid = run(call("bad-1", "echo", json!({"value": 1})), &registry).await;
        // The side-effect counter is checked first: it names the real bug.
        assert_eq!(
            executions.load(Ordering::SeqCst),
            1,
            "无效参数不能到达 execute"
        );
        assert_failure(
            &invalid,
            "bad-1",
            "echo",
            "必须是 string",
            "参数无效时结果里是验证错误的文字（Display，不是 Debug）",
        );
        let thrown = run(call("boom-1", "boom", json!({"value": "x"})), &registry).await;
        assert_failure(
            &thrown,
            "boom-1",
            "boom",
            "exploded",
            "工具返回 Err(ToolError) 时结果里只有它的 message",
        );
    }

    #[tokio::test]
    async fn an_unknown_tool_is_reported_before_its_arguments_are_parsed() {
        let executions = Arc::new(AtomicUsize::new(0));
        let registry =
            ToolRegistry::new(vec![echo(Arc::clone(&executions))]).expect("echo 必须能注册");
        for (id, arguments) in [
            ("n-1", json!(null)),
            ("n-2", json!([1, 2])),
            ("n-3", json!("value")),
        ] {
            let result = run(call(id, "missing", arguments), &registry).await;
            assert_failure(
                &result,
                id,
                "missing",
                "未知工具",
                "未知工具即使参数不是 object，也先报 未知工具（查找在解析之前）",
            );
        }
        let cased = run(call("c-1", "Echo", json!({"value": "Pi"})), &registry).await;
        assert_failure(
            &cased,
            "c-1",
            "Echo",
            "未知工具",
            "工具名区分大小写：Echo 不是 echo，结果保留请求的名字",
        );
        assert_eq!(
            executions.load(Ordering::SeqCst),
            0,
            "未知工具不会运行任何工具"
        );
    }

    fn raw_call(id: &str, name: &str, raw: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: Value::String(raw.into()),
            raw_arguments: Some(raw.into()),
        }
    }

    // Kills: letting text that is not JSON reach the schema (the model reads "必须是 string"
    // and never learns its JSON was broken), quoting nothing or everything, checking it before
    // the lookup, and refusing an empty text (no arguments at all).
    #[tokio::test]
    async fn arguments_that_are_not_json_are_answered_with_what_was_received() {
        let executions = Arc::new(AtomicUsize::new(0));
        let registry =
            ToolRegistry::new(vec![echo(Arc::clone(&executions))]).expect("echo 必须能注册");

        let cut = run(raw_call("j-1", "echo", r#"{"value":"P"#), &registry).await;
        assert_failure(
            &cut,
            "j-1",
            "echo",
            r#"参数不是合法的 JSON：收到 {"value":"P"#,
            "rawArguments 不是合法 JSON 时，失败结果引用收到的原文，模型才能改正它",
        );
        let long = "x".repeat(300);
        let quoted = format!("参数不是合法的 JSON：收到 {}…", "x".repeat(200));
        let result = run(raw_call("j-2", "echo", &long), &registry).await;
        assert_failure(
            &result,
            "j-2",
            "echo",
            &quoted,
            "原文最多引用 200 个字符，截断时以 … 结尾",
        );
        assert_eq!(
            executions.load(Ordering::SeqCst),
            0,
            "参数不是合法 JSON 的调用不会运行工具"
        );

        let unknown = run(raw_call("j-3", "missing", "{oops"), &registry).await;
        assert_failure(
            &unknown,
            "j-3",
            "missing",
            "未知工具",
            "未知工具先于参数检查：名字不存在时报 未知工具，哪怕参数也坏了",
        );

        let mut fine = call("j-4", "echo", json!({"value": "Pi"}));
        fine.raw_arguments = Some(r#"{"value":"Pi"}"#.into());
        let fine = run(fine, &registry).await;
        assert!(
            !fine.is_error,
            "rawArguments 是合法 JSON 时照常解析并执行：{fine:?}"
        );
        let mut empty = call("j-5", "echo", json!({"value": "Pi"}));
        empty.raw_arguments = Some(String::new());
        let empty = run(empty, &registry).await;
        assert!(
            !empty.is_error,
            "rawArguments 为空串表示没有参数，不是坏掉的 JSON：{empty:?}"
        );
        assert_eq!(
            executions.load(Ordering::SeqCst),
            2,
            "合法的两个调用各运行一次"
        );
    }

    #[tokio::test]
    async fn a_failing_tool_runs_exactly_once() {
        let executions = Arc::new(AtomicUsize::new(0));
        let registry =
            ToolRegistry::new(vec![boom(Arc::clone(&executions))]).expect("boom 必须能注册");
        let result = run(call("once", "boom", json!({"value": "x"})), &registry).await;
        assert_eq!(
            executions.load(Ordering::SeqCst),
            1,
            "失败的工具只执行一次，执行器不重试"
        );
        assert_failure(
            &result,
            "once",
            "boom",
            "exploded",
            "工具返回 Err(ToolError) 时结果里只有它的 message",
        );
    }

    /// Runs one call on a spawned task, so an executor that lets a panic escape fails with
    /// `rule` instead of taking the test down with an unrelated message.
    async fn run_spawned(tool: SharedTool, call: ToolCall, rule: &str) -> ToolResultMessage {
        let registry = ToolRegistry::new(vec![tool]).expect("工具必须能注册");
        let outcome = within_a_second(tokio::spawn(async move {
            execute_tool_call(&call, &registry, CallContext::default()).await
        }))
        .await;
        outcome.expect(rule)
    }

    fn assert_panic_result(result: &ToolResultMessage, id: &str, name: &str, message: &str) {
        assert_eq!(
            (result.tool_call_id.as_str(), result.tool_name.as_str()),
            (id, name),
            "panic 的结果同样沿用原调用的 id 与 name"
        );
        assert!(result.is_error, "panic 的结果必须 isError: true");
        assert_eq!(
            result.content,
            vec![text(&format!(
                "Tool {name} failed: 工具执行时发生 panic：{message}"
            ))],
            "panic 的结果文字必须是 Tool <name> failed: 工具执行时发生 panic：<panic 消息>"
        );
        assert_eq!(
            result.details,
            Some(json!({"error": format!("工具执行时发生 panic：{message}")})),
            "panic 与其他失败共用同一种结果形状：details 是 {{\"error\": message}}"
        );
    }

    #[tokio::test]
    async fn a_panicking_tool_still_returns_a_paired_error_result() {
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
        let result = run_spawned(
            fragile,
            call("p-7", "fragile", json!({"value": "crash"})),
            "工具 panic 不能让执行器一起崩溃，必须变成失败结果",
        )
        .await;
        assert_panic_result(&result, "p-7", "fragile", "fragile tool gave up");
    }

    #[tokio::test]
    async fn a_formatted_panic_message_is_kept_too() {
        let picky = Tool::new(
            "picky",
            "Panics with a formatted message",
            value_schema(),
            |value: String, _context| async move {
                if !value.is_empty() {
                    panic!("cannot handle {value}");
                }
                Ok(ToolOutput::text("empty"))
            },
        )
        .shared();
        let result = run_spawned(
            picky,
            call("p-8", "picky", json!({"value": "tabs"})),
            "工具 panic 不能让执行器一起崩溃，必须变成失败结果",
        )
        .await;
        assert_panic_result(&result, "p-8", "picky", "cannot handle tabs");
    }

    #[tokio::test]
    async fn a_tool_closure_that_panics_before_returning_its_future_is_caught_too() {
        let eager = Tool::new(
            "eager",
            "Panics before it returns a future",
            value_schema(),
            |value: String, _context| {
                if value == "now" {
                    panic!("refused before starting");
                }
                async move { Ok(ToolOutput::text(&value)) }
            },
        )
        .shared();
        let result = run_spawned(
            eager,
            call("p-9", "eager", json!({"value": "now"})),
            "工具闭包在返回 future 之前 panic，也不能让执行器崩溃：闭包要在任务里调用",
        )
        .await;
        assert_panic_result(&result, "p-9", "eager", "refused before starting");
    }

    #[tokio::test]
    async fn dropping_the_executor_future_aborts_the_tool_task() {
        let finished = Arc::new(AtomicUsize::new(0));
        let slow = Tool::new("slow", "Finishes after a pause", value_schema(), {
            let finished = Arc::clone(&finished);
            move |value: String, _context| {
                let finished = Arc::clone(&finished);
                async move {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    finished.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolOutput::text(&value))
                }
            }
        })
        .shared();
        let registry = ToolRegistry::new(vec![slow]).expect("slow 必须能注册");

        // Control: left alone, the tool finishes and reports.
        let completed = tokio::time::timeout(
            Duration::from_secs(2),
            execute_tool_call(
                &call("s-1", "slow", json!({"value": "done"})),
                &registry,
                CallContext::default(),
            ),
        )
        .await
        .expect("2 秒内没有返回结果");
        assert_eq!(
            (completed.content, completed.is_error),
            (vec![text("done")], false),
            "不被打断的慢工具正常返回"
        );
        assert_eq!(finished.load(Ordering::SeqCst), 1, "慢工具运行完成一次");

        // Now the executor's future is dropped long before the tool would finish.
        let dropped = tokio::time::timeout(
            Duration::from_millis(10),
            execute_tool_call(
                &call("s-2", "slow", json!({"value": "late"})),
                &registry,
                CallContext::default(),
            ),
        )
        .await;
        assert!(
            dropped.is_err(),
            "慢工具 10 毫秒内不应返回：测试要在它完成之前丢弃执行器的 future"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            finished.load(Ordering::SeqCst),
            1,
            "执行器的 future 被丢弃时，工具任务必须被终止，不能在后台继续运行"
        );
    }

    #[tokio::test]
    async fn the_tool_sees_the_call_id_the_callers_token_and_progress_and_its_output_is_kept() {
        let reports: Arc<Mutex<Vec<Vec<TextContent>>>> = Arc::default();
        let progress = ProgressReporter::new({
            let reports = Arc::clone(&reports);
            move |content| reports.lock().expect("进度记录锁被污染").push(content)
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
                    *seen.lock().expect("观察记录锁被污染") = Some((
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
        let registry = ToolRegistry::new(vec![inspect]).expect("inspect 必须能注册");
        cancel.cancel();
        let context = CallContext {
            cancel: cancel.clone(),
            progress,
        };
        let result = within_a_second(execute_tool_call(
            &call("ctx", "inspect", json!({"value": "Pi"})),
            &registry,
            context,
        ))
        .await;

        assert_eq!(
            seen.lock().expect("观察记录锁被污染").clone(),
            Some(("ctx".to_string(), true, true)),
            "工具看到的 call_id 来自调用本身，取消令牌与进度回调原样传入"
        );
        assert_eq!(
            *reports.lock().expect("进度记录锁被污染"),
            vec![vec![text("progress:Pi")]],
            "工具报告的进度到达调用方的回调"
        );
        assert_eq!(
            without_timestamp(&result),
            json!({"role": "toolResult", "toolCallId": "ctx", "toolName": "inspect",
                   "content": [{"type": "text", "text": "domain failure"}],
                   "details": {"phase": "domain-error"}, "isError": true}),
            "工具显式给出的 isError 与 details 必须保留"
        );
    }

    #[tokio::test]
    async fn timestamps_are_unix_milliseconds_of_the_execution() {
        let registry = ToolRegistry::new(vec![echo(Arc::default()), boom(Arc::default())])
            .expect("初始工具必须都能注册");
        for (id, name, arguments) in [
            ("t-ok", "echo", json!({"value": "Pi"})),
            ("t-unknown", "missing", json!({})),
            ("t-invalid", "echo", json!({"value": 1})),
            ("t-err", "boom", json!({"value": "x"})),
        ] {
            let before = unix_ms();
            let result = run(call(id, name, arguments), &registry).await;
            let after = unix_ms();
            assert!(
                (before..=after).contains(&result.timestamp),
                "{id}：timestamp 必须是执行时的 Unix 毫秒（在 {before} 与 {after} 之间），实际是 {}",
                result.timestamp
            );
        }
    }
}
