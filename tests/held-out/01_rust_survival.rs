//! Held-out tests for chapter 01 (instructor only): other values, empty inputs, and a batch
//! whose completion order is the reverse of its job order.

use std::future::Future;
use std::time::Duration;

use pi_course::survival::{
    describe, parse_command, parse_script, run_all, Command, Event, ParseError, Registry,
    ScriptError, StopReason,
};
use serde_json::{json, Map};
use tokio_util::sync::CancellationToken;

/// Awaits `future`, failing with `rule` if it is still pending after a second.
async fn soon<F: Future>(future: F, rule: &str) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(1), future).await {
        Ok(value) => value,
        Err(_) => panic!("1 秒内没有完成：{rule}"),
    }
}

#[test]
fn other_events_round_trip_and_are_described() {
    let events = [
        Event::TextDelta {
            content_index: 3,
            delta: "说 \"hi\"\n".to_string(),
        },
        Event::ToolcallEnd {
            content_index: 0,
            id: "call_9".to_string(),
            name: "ls".to_string(),
            arguments: json!({}),
        },
        Event::Done {
            reason: StopReason::Stop,
        },
        Event::Error {
            reason: StopReason::Length,
            error_message: "too long".to_string(),
        },
    ];
    for event in &events {
        assert_eq!(
            Event::from_wire(&event.to_wire()).expect("自己写出的 wire JSON 必须能读回"),
            *event,
            "to_wire 与 from_wire 必须互逆"
        );
    }
    let lines: Vec<String> = events.iter().map(describe).collect();
    assert_eq!(
        lines,
        [
            "text #3: 说 \"hi\"\n",
            "tool #0: ls {} (call_9)",
            "done: stop",
            "error: length (too long)",
        ],
        "describe 对其他取值同样逐字成立"
    );
    assert_eq!(
        Event::Done {
            reason: StopReason::Length
        }
        .to_wire(),
        r#"{"type":"done","reason":"length"}"#,
        "停止原因用 pi 的拼写"
    );
}

#[test]
fn scripts_without_commands_and_a_bad_first_line() {
    assert_eq!(parse_script(""), Ok(Vec::new()), "空脚本没有命令");
    assert_eq!(
        parse_script("# only a comment\n\n   \n"),
        Ok(Vec::new()),
        "只有注释和空行的脚本没有命令"
    );
    assert_eq!(
        parse_script("bad!name {}\nls\n"),
        Err(ScriptError {
            line: 1,
            error: ParseError::BadName("bad!name".to_string()),
        }),
        "第一行就错时行号是 1"
    );
    assert_eq!(
        parse_command(r#"edit {"path":"文件.txt","edits":[{"old":"a","new":"b"}]}"#),
        Ok(Command {
            name: "edit".to_string(),
            arguments: match json!({"path": "文件.txt", "edits": [{"old": "a", "new": "b"}]}) {
                serde_json::Value::Object(map) => map,
                _ => Map::new(),
            },
        }),
        "参数里嵌套的数组和 object 原样保留"
    );
}

#[tokio::test]
async fn an_empty_registry_and_an_empty_batch() {
    let registry = Registry::new();
    assert!(registry.names().is_empty(), "新的注册表没有名字");
    assert_eq!(
        soon(
            registry.call("echo", String::new()),
            "未知命令的 future 必须完成"
        )
        .await,
        Err("未知命令：echo".to_string()),
        "空注册表里每个名字都是未知命令"
    );
    let results = soon(
        run_all(&registry, &[], &CancellationToken::new()),
        "空批次必须立即返回",
    )
    .await;
    assert!(results.is_empty(), "空批次没有结果");
}

#[tokio::test]
async fn results_keep_job_order_when_completion_order_is_reversed() {
    let mut registry = Registry::new();
    registry
        .register("wait", |input: String| async move {
            let millis: u64 = input
                .parse()
                .map_err(|_| format!("not a number: {input}"))?;
            tokio::time::sleep(Duration::from_millis(millis)).await;
            Ok(format!("waited {millis}"))
        })
        .expect("第一次注册 wait 必须成功");
    let jobs = [
        ("wait", "80"),
        ("wait", "60"),
        ("wait", "x"),
        ("wait", "40"),
        ("wait", "20"),
    ];
    let results = soon(
        run_all(&registry, &jobs, &CancellationToken::new()),
        "五个短任务并发运行，必须在 1 秒内返回",
    )
    .await;
    assert_eq!(
        results,
        [
            Ok("waited 80".to_string()),
            Ok("waited 60".to_string()),
            Err("not a number: x".to_string()),
            Ok("waited 40".to_string()),
            Ok("waited 20".to_string()),
        ],
        "结果按任务顺序排列，与完成顺序无关"
    );
}
