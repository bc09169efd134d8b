//! `pi` against the stream dialects of real providers (issue #20): the real binary and
//! openai-mock on 127.0.0.1, each reply written as the provider named in the test sends it.

mod support;

use std::path::Path;
use std::process::{Output, Stdio};

use openai_mock::{delta, finish, usage, MockServer, Recorded, Reply, Step};
use serde_json::{json, Value};
use support::{text, Scratch, LIMIT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// A scratch directory with the `notes.txt` every test here reads.
fn scratch(name: &str) -> Scratch {
    let scratch = Scratch::new("dialect", name);
    std::fs::write(scratch.path().join("notes.txt"), "第一行\n").expect("能写测试文件");
    scratch
}

fn pi(server: &MockServer, dir: &Path, args: &[&str]) -> Command {
    support::pi(&server.base_url(), dir, dir, args)
}

fn succeeded(output: &Output) {
    assert_eq!(
        output.status.code(),
        Some(0),
        "任务应当正常结束；stderr：{}",
        text(&output.stderr)
    );
}

/// A read of notes.txt as one streamed tool-call delta; `index` as the provider sends it.
fn read_call(index: Option<u64>) -> Value {
    let mut call = json!({
        "id": "call_read", "type": "function",
        "function": {"name": "read", "arguments": "{\"path\":\"notes.txt\"}"},
    });
    if let Some(index) = index {
        call["index"] = json!(index);
    }
    delta(json!({"role": "assistant", "tool_calls": [call]}))
}

/// What a strict server (vLLM, several gateways) checks before it accepts a request: every
/// tool call's `arguments` is JSON, and every call is answered by a tool message after it.
fn assert_strictly_valid(request: &Recorded) {
    let messages = request.json()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (at, message) in messages.iter().enumerate() {
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            let arguments = call["function"]["arguments"].as_str().unwrap_or_default();
            assert!(
                serde_json::from_str::<Value>(arguments).is_ok(),
                "重放给模型的每个 arguments 都必须是 JSON：{arguments:?}"
            );
            assert!(
                messages[at + 1..]
                    .iter()
                    .any(|later| later["role"] == "tool" && later["tool_call_id"] == call["id"]),
                "每个工具调用后面都必须有它的结果：{call}"
            );
        }
    }
}

/// The request's tool results, as `(tool_call_id, content)`.
fn tool_results(request: &Recorded) -> Vec<(String, String)> {
    request.json()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| {
            (
                message["tool_call_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                message["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn tool_calls_that_arrive_with_finish_reason_stop_are_run() {
    // vLLM, SGLang and older Ollama end a tool turn with "stop".
    let scratch = scratch("stop");
    let server = MockServer::start(vec![
        Reply::events(vec![read_call(Some(0)), finish("stop"), usage(10, 3)]),
        Reply::text("读完了。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let output = support::finish(
        pi(&server, &scratch.0, &["-p", "读 notes.txt"])
            .spawn()
            .expect("能启动 pi"),
    )
    .await;
    succeeded(&output);
    assert_eq!(
        text(&output.stdout),
        "读完了。\n",
        "工具运行之后模型给出回答"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "工具结果送回了模型");
    assert_eq!(
        tool_results(&requests[1]),
        [("call_read".to_string(), "第一行\n".to_string())],
        "finish_reason 是 stop 也照样运行调用，结果与调用配对"
    );
}

#[tokio::test]
async fn tool_calls_without_index_are_run() {
    // Gemini's OpenAI-compatible endpoint leaves `index` out of streamed tool calls.
    let scratch = scratch("no-index");
    let server = MockServer::start(vec![
        Reply::events(vec![read_call(None), finish("tool_calls"), usage(10, 3)]),
        Reply::text("读完了。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let output = support::finish(
        pi(&server, &scratch.0, &["-p", "读 notes.txt"])
            .spawn()
            .expect("能启动 pi"),
    )
    .await;
    succeeded(&output);
    assert_eq!(
        tool_results(&server.requests()[1]),
        [("call_read".to_string(), "第一行\n".to_string())],
        "没有 index 的工具调用按 id 推断出来并运行"
    );
}

#[tokio::test]
async fn reasoning_is_shown_as_a_count_and_sent_back_with_the_tool_turn() {
    // DeepSeek's thinking mode streams `reasoning_content` and rejects a tool turn's next
    // request that does not carry it back.
    let scratch = scratch("reasoning");
    let server = MockServer::start(vec![
        Reply::events(vec![
            delta(json!({"role": "assistant", "reasoning_content": "先看看"})),
            delta(json!({"reasoning_content": "文件"})),
            read_call(Some(0)),
            finish("tool_calls"),
            usage(10, 3),
        ]),
        Reply::text("读完了。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let output = support::finish(
        pi(&server, &scratch.0, &["-p", "读 notes.txt"])
            .spawn()
            .expect("能启动 pi"),
    )
    .await;
    succeeded(&output);
    assert_eq!(text(&output.stdout), "读完了。\n", "思考内容不混进回答");
    assert!(
        text(&output.stderr).contains("（思考了 5 字）"),
        "思考只在 stderr 上显示一行字数：{}",
        text(&output.stderr)
    );
    let second = server.requests()[1].json();
    let assistant = second["messages"]
        .as_array()
        .and_then(|messages| {
            messages
                .iter()
                .find(|message| message["role"] == "assistant")
                .cloned()
        })
        .expect("第二个请求带着助手的工具回合");
    assert_eq!(
        assistant["reasoning_content"], "先看看文件",
        "工具回合的思考作为 reasoning_content 送回"
    );
}

#[tokio::test]
async fn a_turn_cancelled_while_arguments_stream_leaves_a_request_a_strict_server_accepts() {
    let scratch = scratch("cancel-args");
    let server = MockServer::start(vec![
        Reply::Stream(vec![
            // The call's arguments stop half way; the text after it is the test's gate: once
            // it is on stdout, pi has taken in the cut arguments.
            Step::event(&delta(json!({"role": "assistant", "tool_calls": [{
                "index": 0, "id": "call_cut", "type": "function",
                "function": {"name": "read", "arguments": "{\"path\": \"no"},
            }]}))),
            Step::event(&delta(json!({"content": "正在读"}))),
            Step::Hang,
        ]),
        Reply::text("好的。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let mut child = pi(&server, &scratch.0, &[])
        .stdin(Stdio::piped())
        .spawn()
        .expect("能启动 pi");
    let mut stdin = child.stdin.take().expect("stdin 是管道");
    let mut stdout = child.stdout.take().expect("stdout 是管道");
    stdin
        .write_all("读 notes.txt\n".as_bytes())
        .await
        .expect("能写 stdin");
    let mut gate = vec![0u8; "正在读".len()];
    tokio::time::timeout(LIMIT, stdout.read_exact(&mut gate))
        .await
        .expect("被截断的调用之后的文字应当很快到达")
        .expect("能读 stdout");
    let pid = child.id().expect("pi 还在运行") as libc::pid_t;
    // SAFETY: kill(2) with a pid this test spawned and still owns.
    assert_eq!(
        unsafe { libc::kill(pid, libc::SIGINT) },
        0,
        "能给 pi 发 SIGINT"
    );
    assert!(
        server.wait_for_disconnects(1, LIMIT).await,
        "取消后连接必须关闭"
    );
    stdin
        .write_all("再试一次\n".as_bytes())
        .await
        .expect("能写 stdin");
    drop(stdin);
    let output = support::finish(child).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "交互模式在取消之后继续，Ctrl-D 正常退出；stderr：{}",
        text(&output.stderr)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "取消之后的任务照常请求模型");
    assert_strictly_valid(&requests[1]);
    assert_eq!(
        tool_results(&requests[1])
            .iter()
            .map(|(id, _)| id.as_str())
            .collect::<Vec<_>>(),
        ["call_cut"],
        "被取消的调用留在对话里，并且有配对的结果"
    );
    assert!(
        !requests[1]
            .json()
            .to_string()
            .contains(r#"{\"path\": \"no"#),
        "被截断的参数不能原样重放"
    );
}
