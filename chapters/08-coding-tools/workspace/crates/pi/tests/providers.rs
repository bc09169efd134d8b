//! `pi` against providers that misbehave the way real ones do: rate limits, stalls, bad
//! settings. The real binary, openai-mock on 127.0.0.1, a scratch directory.

mod support;

use std::path::Path;

use openai_mock::{delta, MockServer, Reply, Step};
use serde_json::json;
use support::{lines, run, text, Scratch};
use tokio::process::Command;

/// `pi -p 打个招呼` in `dir`, pointed at `server_url`.
fn pi(server_url: &str, dir: &Path) -> Command {
    support::pi(server_url, dir, dir, &["-p", "打个招呼"])
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_and_announced_once() {
    let scratch = Scratch::new("providers", "429");
    let server = MockServer::start(vec![Reply::retry_after(429, 1), Reply::text("你好！")])
        .await
        .expect("本地服务器应当能启动");
    let output = run(pi(&server.base_url(), &scratch.0)).await;

    assert_eq!(
        output.status.code(),
        Some(0),
        "429 之后重试成功，退出码是 0；stderr：{}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stdout), "你好！\n", "stdout 只有回答");
    assert_eq!(
        lines(&output.stderr),
        [
            "pi：服务器返回 429（请求过多），1 秒后重试（第 1/4 次）…",
            "用量：输入 12 · 输出 5 tokens",
        ],
        "每次重试在 stderr 上恰好一行，说出状态、等待和次数；任务结束时是用量行"
    );
    assert_eq!(server.requests().len(), 2, "429 之后恰好再发一次");
}

#[tokio::test]
async fn pi_max_attempts_bounds_the_retries() {
    let scratch = Scratch::new("providers", "attempts");
    let server = MockServer::start(vec![
        Reply::Status {
            status: 503,
            body: "busy 1".to_string(),
        },
        Reply::Status {
            status: 503,
            body: "busy 2".to_string(),
        },
    ])
    .await
    .expect("本地服务器应当能启动");
    let mut command = pi(&server.base_url(), &scratch.0);
    command.env("PI_MAX_ATTEMPTS", "1");
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(1), "503 仍是模型错误，退出码 1");
    assert_eq!(
        lines(&output.stderr),
        ["pi：模型回合出错：HTTP 503: busy 1"],
        "PI_MAX_ATTEMPTS=1 不重试：只有错误那一行"
    );
    assert_eq!(server.requests().len(), 1, "只发一次");
}

#[tokio::test]
async fn a_stalled_stream_fails_after_pi_stream_idle_secs() {
    let scratch = Scratch::new("providers", "idle");
    let server = MockServer::start(vec![Reply::Stream(vec![
        Step::event(&delta(json!({"role": "assistant", "content": "想"}))),
        Step::Hang,
    ])])
    .await
    .expect("本地服务器应当能启动");
    let mut command = pi(&server.base_url(), &scratch.0);
    command.env("PI_STREAM_IDLE_SECS", "1");
    let output = run(command).await;
    assert_eq!(
        output.status.code(),
        Some(1),
        "空闲超时是模型错误，退出码 1"
    );
    assert_eq!(text(&output.stdout), "想\n", "超时前的文字已经显示");
    assert_eq!(
        lines(&output.stderr),
        ["pi：模型回合出错：Provider stream interrupted: 流式响应空闲超过 1 秒，已放弃"],
        "一行，说明流空闲了多久"
    );
}

#[tokio::test]
async fn bad_retry_settings_are_one_line_and_exit_2() {
    let scratch = Scratch::new("providers", "settings");
    for (var, value) in [("PI_MAX_ATTEMPTS", "many"), ("PI_STREAM_IDLE_SECS", "0")] {
        // Nothing listens here: a bad setting must stop pi before any request.
        let mut command = pi("http://127.0.0.1:9/v1", &scratch.0);
        command.env(var, value);
        let output = run(command).await;
        assert_eq!(output.status.code(), Some(2), "配置错误的退出码是 2");
        let range = if var == "PI_MAX_ATTEMPTS" {
            "1 到 20"
        } else {
            "1 到 86400"
        };
        assert_eq!(
            lines(&output.stderr),
            [format!(
                "pi：环境变量 {var} 的值不合法：“{value}”（应为 {range} 之间的整数）"
            )],
            "一行中文，说出变量、值和范围"
        );
    }
}
