//! Chapter 09: `pi` runs every task through the learner's Agent. In interactive mode a line
//! typed while a run works steers it, `/followup` waits for its natural stop, Ctrl-C aborts it
//! and the session goes on. The real binary against openai-mock on 127.0.0.1.
//!
//! The runs are held open by a gate, not by time: the model asks for a bash command that waits
//! until the test creates a file, and the test creates it only after pi has said on stderr that
//! the typed line is queued.

mod support;

use std::path::Path;
use std::process::{ExitStatus, Stdio};

use openai_mock::{MockServer, Recorded, Reply};
use serde_json::json;
use support::{text, Scratch, LIMIT};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};

/// The command the model asks for: it finishes only once the test creates `go`.
const GATED: &str = "until [ -e go ]; do sleep 0.02; done; echo hi";

/// A bash call that waits for the gate.
fn gated_call(id: &str) -> Reply {
    Reply::tool_calls(&[(id, "bash", json!({ "command": GATED }))])
}

/// One of pi's output pipes, read as far as the test needs and kept whole for the end.
struct Pipe<R> {
    from: R,
    seen: Vec<u8>,
    /// How much of `seen` earlier waits have used up.
    used: usize,
}

impl<R: AsyncRead + Unpin> Pipe<R> {
    fn new(from: R) -> Pipe<R> {
        Pipe {
            from,
            seen: Vec::new(),
            used: 0,
        }
    }

    /// Reads until the output after the previous wait contains `wanted`: a gate on pi's own
    /// output, not a sleep.
    async fn until(&mut self, wanted: &str) {
        let mut buffer = [0u8; 512];
        let reading = async {
            loop {
                let fresh = text(&self.seen[self.used..]);
                if let Some(at) = fresh.find(wanted) {
                    self.used += at + wanted.len();
                    return;
                }
                let read = self.from.read(&mut buffer).await.expect("能读 pi 的输出");
                assert!(
                    read > 0,
                    "pi 在输出“{wanted}”之前就关闭了输出：{}",
                    text(&self.seen)
                );
                self.seen.extend_from_slice(&buffer[..read]);
            }
        };
        tokio::time::timeout(LIMIT, reading)
            .await
            .unwrap_or_else(|_| panic!("30 秒内 pi 必须输出“{wanted}”：{}", text(&self.seen)));
    }

    /// Everything, once pi has ended.
    async fn rest(mut self) -> String {
        let mut tail = Vec::new();
        let _ = self.from.read_to_end(&mut tail).await;
        self.seen.extend_from_slice(&tail);
        text(&self.seen)
    }
}

/// An interactive pi with its stdin, stdout and stderr in the test's hands.
struct Interactive {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Pipe<tokio::process::ChildStdout>,
    stderr: Pipe<tokio::process::ChildStderr>,
}

impl Interactive {
    fn start(server: &MockServer, dir: &Path) -> Interactive {
        let mut child = support::pi(&server.base_url(), dir, dir, &[])
            .stdin(Stdio::piped())
            .spawn()
            .expect("能启动 pi");
        Interactive {
            stdin: child.stdin.take(),
            stdout: Pipe::new(child.stdout.take().expect("stdout 是管道")),
            stderr: Pipe::new(child.stderr.take().expect("stderr 是管道")),
            child,
        }
    }

    async fn type_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin 还开着");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("能写 pi 的 stdin");
        stdin.flush().await.expect("能写 pi 的 stdin");
    }

    fn interrupt(&self) {
        let pid = self.child.id().expect("pi 还在运行") as libc::pid_t;
        // SAFETY: kill(2) with a pid this test spawned and still owns.
        assert_eq!(
            unsafe { libc::kill(pid, libc::SIGINT) },
            0,
            "能给 pi 发 SIGINT"
        );
    }

    /// Ctrl-D, then pi's exit status, stdout and stderr.
    async fn end(mut self) -> (ExitStatus, String, String) {
        drop(self.stdin.take());
        let status = tokio::time::timeout(LIMIT, self.child.wait())
            .await
            .expect("pi 必须在 30 秒内结束")
            .expect("能等 pi 结束");
        (status, self.stdout.rest().await, self.stderr.rest().await)
    }
}

fn open_gate(dir: &Path) {
    std::fs::write(dir.join("go"), "").expect("能建闸门文件");
}

/// The request's messages as `(role, content)`; an assistant turn's tool calls are shown as
/// `call <name>`.
fn conversation(request: &Recorded) -> Vec<(String, String)> {
    request.json()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|message| {
            let role = message["role"].as_str().unwrap_or_default().to_string();
            let calls: Vec<String> = message["tool_calls"]
                .as_array()
                .map(|calls| {
                    calls
                        .iter()
                        .map(|call| {
                            format!("call {}", call["function"]["name"].as_str().unwrap_or("?"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let content = if calls.is_empty() {
                message["content"].as_str().unwrap_or_default().to_string()
            } else {
                calls.join(", ")
            };
            (role, content)
        })
        .collect()
}

fn pair(role: &str, content: &str) -> (String, String) {
    (role.to_string(), content.to_string())
}

/// The conversation without its system prompt, whose text other tests check.
fn after_system(request: &Recorded) -> Vec<(String, String)> {
    let conversation = conversation(request);
    assert_eq!(
        conversation.first().map(|(role, _)| role.as_str()),
        Some("system"),
        "每个请求都以 system prompt 开头"
    );
    conversation.into_iter().skip(1).collect()
}

/// The text the bash tool returns for `echo hi`, as the request carries it.
fn bash_hi(request: &Recorded) -> String {
    conversation(request)
        .into_iter()
        .find(|(role, _)| role == "tool")
        .map(|(_, content)| content)
        .unwrap_or_default()
}

#[tokio::test]
async fn a_line_typed_during_a_tool_batch_reaches_the_next_request_after_the_results() {
    let scratch = Scratch::new("steering", "steer");
    let server = MockServer::start(vec![
        gated_call("call_gate"),
        Reply::text("好的，改用 Rust。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let mut pi = Interactive::start(&server, scratch.path());
    pi.type_line("写一个小脚本").await;
    pi.stderr.until("→ bash").await;
    pi.type_line("用 Rust 写").await;
    pi.stderr
        .until("pi：插话已排队，当前这批工具调用结束后（或模型停下时）交给模型：用 Rust 写")
        .await;
    open_gate(scratch.path());
    pi.stderr.until("pi：已交给模型：用 Rust 写").await;
    pi.stdout.until("好的，改用 Rust。").await;
    let (status, stdout, stderr) = pi.end().await;

    assert_eq!(status.code(), Some(0), "Ctrl-D 正常退出；stderr：{stderr}");
    assert_eq!(stdout, "好的，改用 Rust。\n", "stdout 只有模型的回答");
    let requests = server.requests();
    assert_eq!(
        requests.len(),
        2,
        "插话没有开始新任务：一个任务两次模型调用"
    );
    assert_eq!(
        after_system(&requests[0]),
        [pair("user", "写一个小脚本")],
        "第一个请求只有任务"
    );
    let hi = bash_hi(&requests[1]);
    assert!(hi.starts_with("hi"), "bash 的结果是它的输出：{hi:?}");
    assert_eq!(
        after_system(&requests[1]),
        [
            pair("user", "写一个小脚本"),
            pair("assistant", "call bash"),
            pair("tool", &hi),
            pair("user", "用 Rust 写"),
        ],
        "插话在配对完整的工具结果之后、下一次模型调用之前进入 transcript"
    );
}

#[tokio::test]
async fn a_follow_up_waits_for_the_natural_stop_and_then_continues_the_run() {
    let scratch = Scratch::new("steering", "follow-up");
    let server = MockServer::start(vec![
        gated_call("call_gate"),
        Reply::text("脚本写好了。"),
        Reply::text("测试也通过了。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let mut pi = Interactive::start(&server, scratch.path());
    pi.type_line("写一个小脚本").await;
    pi.stderr.until("→ bash").await;
    pi.type_line("/followup 再跑一遍测试").await;
    pi.stderr
        .until("pi：追加消息已排队，这次运行自然结束后交给模型：再跑一遍测试")
        .await;
    open_gate(scratch.path());
    pi.stdout.until("测试也通过了。").await;
    let (status, stdout, stderr) = pi.end().await;

    assert_eq!(status.code(), Some(0), "Ctrl-D 正常退出；stderr：{stderr}");
    assert_eq!(stdout, "脚本写好了。\n测试也通过了。\n", "两段回答各成一行");
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "追加消息让同一次运行多问一次模型");
    let hi = bash_hi(&requests[1]);
    assert_eq!(
        after_system(&requests[1]),
        [
            pair("user", "写一个小脚本"),
            pair("assistant", "call bash"),
            pair("tool", &hi),
        ],
        "工具批次之后追加消息还不进入：它只在自然停止之后进入"
    );
    assert_eq!(
        after_system(&requests[2]),
        [
            pair("user", "写一个小脚本"),
            pair("assistant", "call bash"),
            pair("tool", &hi),
            pair("assistant", "脚本写好了。"),
            pair("user", "再跑一遍测试"),
        ],
        "模型停下之后追加消息进入，运行继续"
    );
}

#[tokio::test]
async fn a_follow_up_with_no_run_is_refused_and_sends_nothing() {
    let scratch = Scratch::new("steering", "refused");
    let server = MockServer::start(vec![])
        .await
        .expect("本地服务器应当能启动");
    let mut pi = Interactive::start(&server, scratch.path());
    pi.type_line("/followup 太早了").await;
    let (status, stdout, stderr) = pi.end().await;

    assert_eq!(
        status.code(),
        Some(0),
        "拒绝之后会话照常，Ctrl-D 正常退出；stderr：{stderr}"
    );
    assert_eq!(stdout, "", "没有运行就没有回答");
    assert!(
        stderr.lines().any(|line| line.ends_with(
            "pi：没有正在进行的运行，/followup 没有排队：太早了（直接输入它就是一个新任务）"
        )),
        "没有运行时 /followup 被拒绝，并说明原因：{stderr}"
    );
    assert!(server.requests().is_empty(), "被拒绝的追加消息不会问模型");
}

#[tokio::test]
async fn ctrl_c_aborts_the_run_pairs_its_call_and_the_next_task_works() {
    let scratch = Scratch::new("steering", "abort");
    let server = MockServer::start(vec![gated_call("call_gate"), Reply::text("好的。")])
        .await
        .expect("本地服务器应当能启动");
    let mut pi = Interactive::start(&server, scratch.path());
    pi.type_line("跑一个很慢的命令").await;
    pi.stderr.until("→ bash").await;
    pi.interrupt();
    pi.stderr.until("pi：已取消").await;
    pi.type_line("换个做法").await;
    pi.stdout.until("好的。").await;
    let (status, stdout, stderr) = pi.end().await;

    assert_eq!(
        status.code(),
        Some(0),
        "取消之后会话照常，Ctrl-D 正常退出；stderr：{stderr}"
    );
    assert_eq!(stdout, "好的。\n", "只有第二个任务有回答");
    // Ctrl-C may reach the call before its command starts (the tool answers for itself) or
    // while it runs (the Agent pairs it as skipped); either way it is shown and paired once.
    let shown: Vec<&str> = stderr
        .lines()
        .filter_map(|line| line.split_once("← bash"))
        .map(|(_, rest)| rest)
        .collect();
    assert_eq!(shown.len(), 1, "中止的调用只显示一行结果：{stderr}");
    let (label, paired) = shown[0].split_once('：').unwrap_or_default();
    assert!(
        ["（跳过）", "（出错）"].contains(&label),
        "中止的调用显示为跳过或出错：{stderr}"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "两个任务两次模型调用");
    assert_eq!(
        after_system(&requests[1]),
        [
            pair("user", "跑一个很慢的命令"),
            pair("assistant", "call bash"),
            pair("tool", paired),
            pair("user", "换个做法"),
        ],
        "中止的运行留在 transcript 里，它的调用有配对的结果"
    );
}
