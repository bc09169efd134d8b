//! Chapter 13: `pi --mode json -p …` writes the learner's `run_mode` JSON Lines on stdout, one
//! object per event with the format's version, the `final` line last; stderr stays empty. A
//! reader that leaves early cuts the run, and pi ends quietly.
//! The real binary against openai-mock on 127.0.0.1.

mod support;

use std::path::Path;

use openai_mock::{MockServer, Reply};
use serde_json::{json, Value};
use support::{lines, text, Scratch};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

fn pi(server: &MockServer, dir: &Path, args: &[&str]) -> Command {
    support::pi(&server.base_url(), dir, dir, args)
}

/// Every stdout line parsed on its own; a line that is not one JSON object fails the test.
fn events(stdout: &[u8]) -> Vec<Value> {
    lines(stdout)
        .iter()
        .map(|line| {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("每一行都是一个 JSON 对象：{line:?}（{error}）"));
            assert!(
                value.is_object(),
                "每一行都是 JSON 对象，不是别的值：{line}"
            );
            value
        })
        .collect()
}

#[tokio::test]
async fn a_tool_call_then_an_answer_is_one_json_line_per_event_and_final_last() {
    let scratch = Scratch::new("json", "tool-then-text");
    std::fs::write(scratch.path().join("notes.txt"), "第一行\n").expect("能写测试文件");
    let server = MockServer::start(vec![
        Reply::tool_calls(&[("call_read", "read", json!({"path": "notes.txt"}))]),
        Reply::text("读完了：第一行。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let output = support::run(pi(
        &server,
        scratch.path(),
        &["--mode", "json", "-p", "读 notes.txt"],
    ))
    .await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "json 模式的任务正常结束；stderr：{}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stderr), "", "json 模式下 stderr 只留给错误");
    let events = events(&output.stdout);
    for event in &events {
        assert_eq!(event["v"], json!(1), "每一行都带格式版本 v = 1：{event}");
    }
    // The provider's chunking decides how many deltas there are; one run of them is one step.
    let mut types: Vec<&str> = Vec::new();
    for event in &events {
        let kind = event["type"].as_str().unwrap_or("（缺少 type）");
        if !(kind == "text_delta" && types.last() == Some(&"text_delta")) {
            types.push(kind);
        }
    }
    assert_eq!(
        types,
        [
            "run_start",
            "assistant_message",
            "tool_start",
            "tool_end",
            "text_delta",
            "assistant_message",
            "turn_end",
            "run_end",
            "final",
        ],
        "事件按发生的顺序，一行一个，final 在最后"
    );
    let run_id = &events[0]["runId"];
    assert!(
        events[..events.len() - 1]
            .iter()
            .all(|event| &event["runId"] == run_id),
        "final 之前的每一行都带同一个 runId"
    );
    let by_type = |kind: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|event| event["type"] == kind)
            .collect()
    };
    let answers = by_type("assistant_message");
    assert_eq!(
        answers[0]["message"]["stopReason"],
        json!("toolUse"),
        "第一条 assistant_message 是请求工具的回合"
    );
    assert_eq!(
        answers[0]["message"]["content"][0]["id"],
        json!("call_read"),
        "assistant_message 带着完整的消息，包括工具调用的 id"
    );
    let start = by_type("tool_start")[0];
    assert_eq!(
        (&start["callId"], &start["name"], &start["arguments"]),
        (
            &json!("call_read"),
            &json!("read"),
            &json!({"path": "notes.txt"})
        ),
        "tool_start 说出调用 id、工具名和参数"
    );
    let end = &by_type("tool_end")[0]["result"];
    assert_eq!(
        (
            &end["toolCallId"],
            &end["isError"],
            &end["content"][0]["text"]
        ),
        (&json!("call_read"), &json!(false), &json!("第一行\n")),
        "tool_end 带着配对的结果"
    );
    let deltas: String = by_type("text_delta")
        .iter()
        .map(|event| event["delta"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(deltas, "读完了：第一行。", "text_delta 拼起来就是回答");
    assert_eq!(
        by_type("run_end")[0]["reason"],
        json!("stop"),
        "run_end 说出运行怎样结束"
    );
    assert_eq!(
        events.last(),
        Some(&json!({"v": 1, "type": "final", "reason": "stop", "text": "读完了：第一行。"})),
        "最后一行是 final：结束原因和最终回答"
    );
    assert_eq!(server.requests().len(), 2, "一次工具往返，两个模型请求");
    let sessions = scratch.path().join(".local/state/pi/sessions");
    let files: Vec<_> = std::fs::read_dir(&sessions)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|dir| {
            std::fs::read_dir(dir.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|file| file.path())
        .collect();
    assert_eq!(files.len(), 1, "json 模式和打印模式一样写一个会话文件");
    let written = std::fs::read_to_string(&files[0]).expect("会话文件可读");
    assert_eq!(
        written.lines().count(),
        6,
        "头部 + system + 用户 + 工具调用 + 工具结果 + 回答：{written}"
    );
}

/// A bash call that finishes once the test creates the file `gate` (or after a minute, so a
/// failing test leaves no loop running).
fn gated_call(id: &str, gate: &str) -> Reply {
    let command =
        format!("for _ in $(seq 3000); do [ -e {gate} ] && break; sleep 0.02; done; echo hi");
    Reply::tool_calls(&[(id, "bash", json!({ "command": command }))])
}

#[tokio::test]
async fn a_reader_that_stops_reading_cuts_the_run_and_pi_ends_quietly() {
    let scratch = Scratch::new("json", "reader-gone");
    // The second command outlasts the test's 30 s limit: a run that went on unseen would
    // still be waiting for it. It ends by itself, so a failing run leaves nothing behind.
    let server = MockServer::start(vec![
        gated_call("call_first", "go"),
        Reply::tool_calls(&[("call_second", "bash", json!({ "command": "sleep 60" }))]),
    ])
    .await
    .expect("本地服务器应当能启动");
    let mut child = pi(
        &server,
        scratch.path(),
        &["--mode", "json", "-p", "跑两条命令"],
    )
    .spawn()
    .expect("能启动 pi");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout 是管道")).lines();
    loop {
        let line = stdout
            .next_line()
            .await
            .expect("能读 pi 的输出")
            .expect("pi 在 tool_start 之前就关闭了输出");
        let event: Value = serde_json::from_str(&line).expect("每一行都是 JSON");
        if event["type"] == "tool_start" {
            break;
        }
    }
    // Like `| head` once it has its lines: the reading end closes while the command runs.
    drop(stdout);
    std::fs::write(scratch.path().join("go"), "").expect("能建闸门文件");
    let output = support::finish(child).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "读的一方走了，pi 中断这次运行并以 0 退出；stderr：{}",
        text(&output.stderr)
    );
    assert_eq!(
        text(&output.stderr),
        "",
        "管道被读的一方关掉不是错误，stderr 不报 Broken pipe"
    );
}

#[tokio::test]
async fn json_mode_needs_a_task_and_an_unknown_mode_is_refused_before_anything_runs() {
    let scratch = Scratch::new("json", "usage");
    let server = MockServer::start(vec![])
        .await
        .expect("本地服务器应当能启动");
    let cases: [(&[&str], &str); 3] = [
        (&["--mode", "json"], "pi：--mode json 要和 -p 任务 一起用"),
        (
            &["--mode", "interactive", "-p", "任务"],
            "pi：--mode interactive 不能和 -p 一起用（-p 只运行一个任务）",
        ),
        (
            &["--mode", "yaml", "-p", "任务"],
            "pi：--mode <模式> 的值不合法：yaml（pi --help 查看用法）",
        ),
    ];
    for (args, line) in cases {
        let output = support::run(pi(&server, scratch.path(), args)).await;
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}：命令行有误，退出码 2"
        );
        assert_eq!(
            text(&output.stderr),
            format!("{line}\n"),
            "{args:?}：只有一行中文说明"
        );
        assert_eq!(text(&output.stdout), "", "{args:?}：stdout 什么都没有");
    }
    assert!(server.requests().is_empty(), "命令行有误时不问模型");
    assert!(
        !scratch.path().join(".local").exists(),
        "命令行有误时不建会话文件"
    );
}
