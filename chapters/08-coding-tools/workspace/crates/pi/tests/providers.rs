//! `pi` against providers that misbehave the way real ones do: rate limits, stalls, bad
//! settings. The real binary, openai-mock on 127.0.0.1, a scratch directory.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use openai_mock::{delta, MockServer, Reply, Step};
use serde_json::json;
use tokio::process::Command;

const KEY: &str = "sk-pi-test-9c2e";
const LIMIT: Duration = Duration::from_secs(30);

/// A fresh directory, removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pi-providers-test-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("能建临时目录");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `pi -p <task>` with a clean environment pointed at `server_url`.
fn pi(server_url: &str, dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pi"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("OPENAI_COMPATIBLE_BASE_URL", server_url)
        .env("OPENAI_COMPATIBLE_API_KEY", KEY)
        .env("OPENAI_COMPATIBLE_MODEL", "mock-model")
        .current_dir(dir)
        .args(["-p", "打个招呼"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

async fn run(mut command: Command) -> Output {
    let child = command.spawn().expect("能启动 pi");
    tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("pi 必须在 30 秒内结束")
        .expect("能收集 pi 的输出")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn lines(bytes: &[u8]) -> Vec<String> {
    text(bytes).lines().map(str::to_string).collect()
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_and_announced_once() {
    let scratch = Scratch::new("429");
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
    let scratch = Scratch::new("attempts");
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
    let scratch = Scratch::new("idle");
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
    let scratch = Scratch::new("settings");
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
