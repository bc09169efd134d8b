//! Chapter 11: `pi` compacts its sessions. The real binary against openai-mock on 127.0.0.1,
//! the session files in a scratch HOME.

mod support;

use std::path::PathBuf;
use std::process::{Output, Stdio};

use openai_mock::{delta, finish, MockServer, Recorded, Reply};
use serde_json::{json, Value};
use support::{text, Scratch};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// What the learner's `summary_message` puts before a summary.
const SUMMARY_PREFIX: &str = "此前的对话已压缩为下面的摘要：\n\n";

/// A scratch HOME with the working directory `work/` in it.
fn scratch(name: &str) -> Scratch {
    let scratch = Scratch::new("compaction", name);
    std::fs::create_dir_all(scratch.path().join("work")).expect("能建工作目录");
    scratch
}

/// The one session file pi wrote under the scratch HOME.
fn session_file(scratch: &Scratch) -> PathBuf {
    let root = scratch.path().join(".local/state/pi/sessions");
    let mut files = Vec::new();
    for dir in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        for file in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            files.push(file.path());
        }
    }
    assert_eq!(files.len(), 1, "这个目录只有一个会话文件：{files:?}");
    files.remove(0)
}

fn command(server: &MockServer, scratch: &Scratch, args: &[&str]) -> Command {
    support::pi(
        &server.base_url(),
        scratch.path(),
        &scratch.path().join("work"),
        args,
    )
}

/// Runs pi to its end with `input` on stdin (an interactive session when there is no `-p`).
async fn pi(server: &MockServer, scratch: &Scratch, args: &[&str], input: &str) -> Output {
    let mut child = command(server, scratch, args)
        .stdin(Stdio::piped())
        .spawn()
        .expect("能启动 pi");
    let mut stdin = child.stdin.take().expect("stdin 是管道");
    stdin.write_all(input.as_bytes()).await.expect("能写 stdin");
    drop(stdin);
    support::finish(child).await
}

fn succeeded(output: &Output, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(0),
        "{what}应当成功；stderr：{}",
        text(&output.stderr)
    );
}

/// The request's messages other than system ones, as `(role, content)`.
fn conversation(request: &Recorded) -> Vec<(String, String)> {
    request.json()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|message| message["role"] != "system")
        .map(|message| {
            (
                message["role"].as_str().unwrap_or_default().to_string(),
                message["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn pair(role: &str, content: &str) -> (String, String) {
    (role.to_string(), content.to_string())
}

fn lines(file: &PathBuf) -> Vec<Value> {
    std::fs::read_to_string(file)
        .expect("会话文件可读")
        .lines()
        .map(|line| serde_json::from_str(line).expect("每一行都是 JSON"))
        .collect()
}

/// The id of the entry holding the user message `task`.
fn entry_of(file: &PathBuf, task: &str) -> String {
    lines(file)
        .into_iter()
        .find(|line| line["message"]["content"][0]["text"] == task)
        .and_then(|line| line["id"].as_str().map(str::to_string))
        .expect("会话文件里有这条用户消息")
}

/// A task long enough that two of them do not fit in a 2000-token window, one does.
fn long_task(name: &str) -> String {
    format!("{name}：{}", "x".repeat(2_600))
}

/// A summary the model cut off: the loop ends with `length`, so no summary exists.
fn cut_summary() -> Reply {
    Reply::events(vec![
        delta(json!({"role": "assistant", "content": "摘要写到一半"})),
        finish("length"),
    ])
}

/// Two finished runs in one session: the long tasks one and two.
async fn two_long_runs(server: &MockServer, scratch: &Scratch) -> PathBuf {
    succeeded(
        &pi(server, scratch, &["-p", &long_task("任务一")], "").await,
        "第一次运行",
    );
    succeeded(
        &pi(server, scratch, &["-c", "-p", &long_task("任务二")], "").await,
        "第二次运行",
    );
    session_file(scratch)
}

#[tokio::test]
async fn history_over_the_budget_is_summarised_before_the_task() {
    let scratch = scratch("auto");
    let server = MockServer::start(vec![
        Reply::text("答复一。"),
        Reply::text("答复二。"),
        Reply::text("用户先给了任务一，已答复。"),
        Reply::text("答复三。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let file = two_long_runs(&server, &scratch).await;
    let before = std::fs::read_to_string(&file).expect("会话文件可读");
    let kept = entry_of(&file, &long_task("任务二"));

    let third = pi(
        &server,
        &scratch,
        &["-c", "--context-window", "2000", "-p", "第三个任务"],
        "",
    )
    .await;
    succeeded(&third, "超出预算的第三次运行");
    assert_eq!(
        text(&third.stdout),
        "答复三。\n",
        "stdout 只有任务的回答，没有摘要"
    );
    let stderr = text(&third.stderr);
    assert!(
        stderr.contains("pi：正在把较早的 1 次交互压缩成摘要…") && stderr.contains("pi：已压缩："),
        "压缩前后各有一行说明：{stderr}"
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 4, "两次运行、一次摘要、一次任务");
    let summary_request = conversation(&requests[2]);
    assert_eq!(summary_request.len(), 1, "摘要请求只有一条用户消息");
    assert!(
        summary_request[0].1.contains(&long_task("任务一"))
            && summary_request[0].1.contains("答复一。"),
        "摘要请求带着要压缩的那次交互"
    );
    assert!(
        !summary_request[0].1.contains("任务二"),
        "预算放得下的最近交互不进摘要"
    );
    assert!(requests[2].json()["tools"].is_null(), "摘要请求不提供工具");
    assert_eq!(
        conversation(&requests[3]),
        [
            pair(
                "user",
                &format!("{SUMMARY_PREFIX}用户先给了任务一，已答复。")
            ),
            pair("user", &long_task("任务二")),
            pair("assistant", "答复二。"),
            pair("user", "第三个任务"),
        ],
        "任务请求是 [system, 摘要, 保留的交互…, 新任务]"
    );

    let after = std::fs::read_to_string(&file).expect("会话文件可读");
    assert!(after.starts_with(&before), "压缩只追加，历史一个字节都不改");
    let compaction = lines(&file)
        .into_iter()
        .find(|line| line["type"] == "compaction")
        .expect("会话文件多了一条压缩 entry");
    assert_eq!(compaction["summary"], "用户先给了任务一，已答复。");
    assert_eq!(
        compaction["firstKeptEntryId"],
        kept.as_str(),
        "压缩从任务二那次交互开始保留"
    );
    assert!(
        compaction["tokensBefore"].as_u64().unwrap_or(0) > 1_000,
        "tokensBefore 记着压缩前的估计：{compaction}"
    );
}

#[tokio::test]
async fn a_failed_summary_writes_nothing_and_the_task_goes_on_with_what_fits() {
    let scratch = scratch("failed");
    let server = MockServer::start(vec![
        Reply::text("答复一。"),
        Reply::text("答复二。"),
        cut_summary(),
        Reply::text("答复三。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let file = two_long_runs(&server, &scratch).await;
    let before = std::fs::read_to_string(&file).expect("会话文件可读");

    let third = pi(
        &server,
        &scratch,
        &["-c", "--context-window", "2000", "-p", "第三个任务"],
        "",
    )
    .await;
    succeeded(&third, "摘要失败后的任务");
    assert!(
        text(&third.stderr).contains(
            "pi：压缩失败：摘要被截断了（模型的输出达到上限）；会话文件没有改动，这一轮只发送放得下的最近交互"
        ),
        "失败时说清楚原因和后果：{}",
        text(&third.stderr)
    );
    assert_eq!(
        conversation(&server.requests()[3]),
        [
            pair("user", &long_task("任务二")),
            pair("assistant", "答复二。"),
            pair("user", "第三个任务"),
        ],
        "没有摘要时只发送预算放得下的最近交互"
    );
    let after = std::fs::read_to_string(&file).expect("会话文件可读");
    assert!(after.starts_with(&before), "失败的压缩不改旧字节");
    assert!(
        !after.contains("\"compaction\""),
        "失败的压缩不写压缩 entry"
    );
}

#[tokio::test]
async fn compact_keeps_the_newest_interaction_and_a_resumed_session_sends_the_summary() {
    let scratch = scratch("manual");
    let server = MockServer::start(vec![
        Reply::text("答复甲。"),
        Reply::text("答复乙。"),
        Reply::text("用户问过甲。"),
        Reply::text("答复丙。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let interactive = pi(&server, &scratch, &[], "任务甲\n任务乙\n/compact\n").await;
    succeeded(&interactive, "交互模式");
    assert!(
        text(&interactive.stderr).contains("pi：正在把较早的 1 次交互压缩成摘要…"),
        "/compact 压缩除最近一次以外的交互：{}",
        text(&interactive.stderr)
    );
    let resumed = pi(&server, &scratch, &["-c", "-p", "任务丙"], "").await;
    succeeded(&resumed, "压缩后继续会话");
    assert_eq!(
        conversation(&server.requests()[3]),
        [
            pair("user", &format!("{SUMMARY_PREFIX}用户问过甲。")),
            pair("user", "任务乙"),
            pair("assistant", "答复乙。"),
            pair("user", "任务丙"),
        ],
        "-c 恢复时模型看到摘要和保留的交互，看不到被压缩的原文"
    );
}

#[tokio::test]
async fn a_failed_compact_leaves_the_file_byte_identical() {
    let scratch = scratch("manual-failed");
    let server = MockServer::start(vec![
        Reply::text("答复甲。"),
        Reply::text("答复乙。"),
        cut_summary(),
    ])
    .await
    .expect("本地服务器应当能启动");
    succeeded(
        &pi(&server, &scratch, &["-p", "任务甲"], "").await,
        "第一次运行",
    );
    succeeded(
        &pi(&server, &scratch, &["-c", "-p", "任务乙"], "").await,
        "第二次运行",
    );
    let file = session_file(&scratch);
    let before = std::fs::read(&file).expect("会话文件可读");
    let compact = pi(&server, &scratch, &["-c"], "/compact\n").await;
    succeeded(&compact, "交互模式");
    assert!(
        text(&compact.stderr)
            .contains("pi：压缩失败：摘要被截断了（模型的输出达到上限）；会话文件没有改动"),
        "失败的 /compact 说出原因：{}",
        text(&compact.stderr)
    );
    assert_eq!(
        std::fs::read(&file).expect("会话文件可读"),
        before,
        "失败的压缩让会话文件逐字节不变"
    );
}

#[tokio::test]
async fn a_bad_window_is_one_line_and_nothing_runs() {
    let scratch = scratch("bad-window");
    let server = MockServer::start(Vec::new())
        .await
        .expect("本地服务器应当能启动");
    let mut child = command(&server, &scratch, &["-p", "任务"]);
    let output = child
        .env("PI_CONTEXT_WINDOW", "很大")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("能运行 pi");
    assert_eq!(output.status.code(), Some(2), "配置错误退出码是 2");
    assert_eq!(
        text(&output.stderr),
        "pi：PI_CONTEXT_WINDOW 必须是一个正整数（token 数），现在是 “很大”\n",
        "只有一行中文说明"
    );
    assert!(server.requests().is_empty(), "配置错误时不请求模型");
}
