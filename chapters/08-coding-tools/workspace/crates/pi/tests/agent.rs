//! `pi` as a user runs it: the real binary, a real OpenAI-compatible server on 127.0.0.1
//! (openai-mock: TCP, chunked SSE), real files in a scratch directory. No test leaves the
//! machine.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use openai_mock::{delta, MockServer, Recorded, Reply, Step};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

const KEY: &str = "sk-pi-test-4b1d";
const LIMIT: Duration = Duration::from_secs(30);

/// A fresh directory under the target dir, removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pi-agent-test-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("能建临时目录");
        Scratch(dir)
    }

    fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, content).expect("能写测试文件");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `pi` with a clean environment: only PATH and HOME survive, plus the endpoint settings.
fn pi(server_url: Option<&str>, dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pi"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(url) = server_url {
        command
            .env("OPENAI_COMPATIBLE_BASE_URL", url)
            .env("OPENAI_COMPATIBLE_API_KEY", KEY)
            .env("OPENAI_COMPATIBLE_MODEL", "mock-model");
    }
    command
}

async fn finish(child: Child) -> Output {
    tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("pi 必须在 30 秒内结束")
        .expect("能收集 pi 的输出")
}

async fn run(mut command: Command) -> Output {
    finish(command.spawn().expect("能启动 pi")).await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn lines(bytes: &[u8]) -> Vec<String> {
    text(bytes).lines().map(str::to_string).collect()
}

/// The `messages` of a recorded request, as `(role, tool_call_id)` pairs.
fn roles(request: &Recorded) -> Vec<(String, Option<String>)> {
    request.json()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|message| {
            (
                message["role"].as_str().unwrap_or_default().to_string(),
                message["tool_call_id"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn interrupt(child: &Child) {
    let pid = child.id().expect("pi 还在运行") as libc::pid_t;
    // SAFETY: kill(2) with a pid this test spawned and still owns.
    let sent = unsafe { libc::kill(pid, libc::SIGINT) };
    assert_eq!(sent, 0, "能给 pi 发 SIGINT");
}

#[tokio::test]
async fn print_mode_reads_edits_and_runs_a_command_in_its_directory() {
    let scratch = Scratch::new("loop");
    let notes = scratch.write("notes.md", "# Plan\n- TODO write tests\n- ship\n");
    let server = MockServer::start(vec![
        Reply::tool_calls(&[("call_read", "read", json!({"path": "notes.md"}))]),
        Reply::tool_calls(&[(
            "call_edit",
            "edit",
            json!({"path": "notes.md", "oldText": "- TODO write tests", "newText": "- DONE write tests"}),
        )]),
        Reply::tool_calls(&[("call_bash", "bash", json!({"command": "grep -c DONE notes.md"}))]),
        Reply::text("已把 TODO 改成 DONE。"),
    ])
    .await
    .expect("本地服务器应当能启动");

    let mut command = pi(Some(&server.base_url()), &scratch.0);
    command.args(["-p", "把 notes.md 里的 TODO 改成 DONE"]);
    let output = run(command).await;

    assert_eq!(
        output.status.code(),
        Some(0),
        "正常结束的任务退出码是 0；stderr：{}",
        text(&output.stderr)
    );
    assert_eq!(
        text(&output.stdout),
        "已把 TODO 改成 DONE。\n",
        "stdout 只有助手的文字"
    );
    assert_eq!(
        lines(&output.stderr),
        [
            r#"→ read {"path":"notes.md"}"#,
            "← read：# Plan ⏎ - TODO write tests ⏎ - ship",
            r#"→ edit {"path":"notes.md","oldText":"- TODO write tests","newText":"- DONE write tests"}"#,
            "← edit：已在 notes.md 中替换 1 处",
            "  @@ -1,3 +1,3 @@",
            "   # Plan",
            "  -- TODO write tests",
            "  +- DONE write tests",
            "   - ship",
            r#"→ bash {"command":"grep -c DONE notes.md"}"#,
            "← bash：1",
            "用量：输入 72 · 输出 29 tokens（4 次模型调用）",
        ],
        "每个工具调用和每个结果各占 stderr 的一行，按发生顺序；edit 的结果下面是它的 diff（不在终端上不上色），\
         最后一行是这个任务四次模型调用的用量之和"
    );
    assert_eq!(
        std::fs::read_to_string(&notes).expect("notes.md 还在"),
        "# Plan\n- DONE write tests\n- ship\n",
        "文件在磁盘上真的改了"
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 4, "四个模型回合，四个请求");
    assert_eq!(
        roles(&requests[3]),
        [
            ("system".to_string(), None),
            ("user".to_string(), None),
            ("assistant".to_string(), None),
            ("tool".to_string(), Some("call_read".to_string())),
            ("assistant".to_string(), None),
            ("tool".to_string(), Some("call_edit".to_string())),
            ("assistant".to_string(), None),
            ("tool".to_string(), Some("call_bash".to_string())),
        ],
        "最后一个请求带着完整的 transcript：每个调用恰好一个配对结果"
    );
    let system = requests[0].json()["messages"][0]["content"].clone();
    assert!(
        system
            .as_str()
            .unwrap_or_default()
            .contains(&scratch.0.display().to_string()),
        "system prompt 告诉模型它在哪个目录工作：{system}"
    );
    let tools: Vec<Value> = requests[0].json()["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|tool| tool["function"]["name"].clone())
        .collect();
    assert_eq!(
        tools,
        [json!("read"), json!("write"), json!("edit"), json!("bash")],
        "四个工具都提供给模型"
    );
}

#[tokio::test]
async fn dash_c_chooses_the_directory_the_tools_work_in() {
    let elsewhere = Scratch::new("elsewhere");
    let start = Scratch::new("start");
    elsewhere.write("here.txt", "inside\n");
    let server = MockServer::start(vec![
        Reply::tool_calls(&[("call_read", "read", json!({"path": "here.txt"}))]),
        Reply::text("读到了。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let mut command = pi(Some(&server.base_url()), &start.0);
    command
        .arg("-C")
        .arg(&elsewhere.0)
        .args(["-p", "读 here.txt"]);
    let output = run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr：{}",
        text(&output.stderr)
    );
    assert_eq!(
        lines(&output.stderr)[1],
        "← read：inside",
        "-C 指定的目录是工具的根目录"
    );
}

#[tokio::test]
async fn a_missing_key_or_model_is_one_line_naming_the_variable() {
    let scratch = Scratch::new("config");
    let mut command = pi(None, &scratch.0);
    command
        .env("OPENAI_COMPATIBLE_MODEL", "m")
        .args(["-p", "任务"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(2), "配置不全的退出码是 2");
    assert_eq!(
        lines(&output.stderr),
        ["pi：缺少 API 密钥：请设置环境变量 OPENAI_COMPATIBLE_API_KEY"],
        "缺密钥：一行中文，说出变量名"
    );

    let mut command = pi(None, &scratch.0);
    command
        .env("OPENAI_COMPATIBLE_API_KEY", KEY)
        .args(["-p", "任务"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(2), "配置不全的退出码是 2");
    assert_eq!(
        lines(&output.stderr),
        ["pi：缺少模型名：请设置环境变量 OPENAI_COMPATIBLE_MODEL，或者用 --model 指定"],
        "缺模型名：一行中文，说出变量名"
    );
}

#[tokio::test]
async fn a_401_that_echoes_the_key_ends_with_one_redacted_line() {
    let scratch = Scratch::new("401");
    let server = MockServer::start(vec![Reply::Status {
        status: 401,
        body: json!({"error": {"message": format!("Incorrect API key provided: {KEY}.")}})
            .to_string(),
    }])
    .await
    .expect("本地服务器应当能启动");
    let mut command = pi(Some(&server.base_url()), &scratch.0);
    command.args(["-p", "任务"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(1), "模型出错的退出码是 1");
    assert_eq!(
        lines(&output.stderr),
        [
            r#"pi：模型回合出错：HTTP 401: {"error":{"message":"Incorrect API key provided: [REDACTED]."}}"#
        ],
        "401：一行，状态码加脱敏后的正文"
    );
    assert!(
        !text(&output.stdout).contains(KEY) && !text(&output.stderr).contains(KEY),
        "密钥不出现在任何输出里"
    );
}

#[tokio::test]
async fn a_500_and_a_cut_stream_are_errors() {
    let scratch = Scratch::new("500");
    let server = MockServer::start(vec![
        Reply::Status {
            status: 500,
            body: "internal error".to_string(),
        },
        Reply::Stream(vec![
            Step::event(&delta(json!({"role": "assistant", "content": "半"}))),
            Step::Send(b"data: {\"choices\":[{\"ind".to_vec()),
            Step::Cut,
        ]),
    ])
    .await
    .expect("本地服务器应当能启动");
    let mut command = pi(Some(&server.base_url()), &scratch.0);
    command.env("PI_MAX_ATTEMPTS", "1").args(["-p", "任务"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(1), "500 的退出码是 1");
    assert_eq!(
        lines(&output.stderr),
        ["pi：模型回合出错：HTTP 500: internal error"],
        "500：一行"
    );

    let mut command = pi(Some(&server.base_url()), &scratch.0);
    command.args(["-p", "任务"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(1), "断流的退出码是 1");
    assert_eq!(text(&output.stdout), "半\n", "断流前收到的文字已经显示");
    let stderr = lines(&output.stderr);
    assert_eq!(stderr.len(), 1, "断流：一行：{stderr:?}");
    assert!(
        stderr[0].starts_with("pi：模型回合出错：Provider stream interrupted: "),
        "断流的那一行说明流中断了：{}",
        stderr[0]
    );
}

#[tokio::test]
async fn ctrl_c_cancels_a_slow_turn_and_closes_the_connection() {
    let scratch = Scratch::new("cancel");
    let server = MockServer::start(vec![Reply::Stream(vec![
        Step::event(&delta(json!({"role": "assistant", "content": "慢慢来"}))),
        Step::Hang,
    ])])
    .await
    .expect("本地服务器应当能启动");
    let mut command = pi(Some(&server.base_url()), &scratch.0);
    command.args(["-p", "任务"]);
    let mut child = command.spawn().expect("能启动 pi");
    let mut stdout = child.stdout.take().expect("stdout 是管道");
    // Wait for the first delta: the turn is running and the stream is open.
    let mut first = [0u8; 9];
    tokio::time::timeout(
        LIMIT,
        tokio::io::AsyncReadExt::read_exact(&mut stdout, &mut first),
    )
    .await
    .expect("第一段文字应当很快到达")
    .expect("能读 stdout");
    assert_eq!(text(&first), "慢慢来", "流式文字边到边显示");
    interrupt(&child);
    let output = finish(child).await;
    assert_eq!(output.status.code(), Some(130), "Ctrl-C 取消的退出码是 130");
    assert_eq!(lines(&output.stderr), ["pi：已取消"], "取消：一行");
    assert!(
        server.wait_for_disconnects(1, LIMIT).await,
        "取消后连接必须关闭"
    );
}

#[tokio::test]
async fn max_steps_bounds_a_run() {
    let scratch = Scratch::new("steps");
    scratch.write("a.txt", "a\n");
    let server = MockServer::start(vec![Reply::tool_calls(&[(
        "call_read",
        "read",
        json!({"path": "a.txt"}),
    )])])
    .await
    .expect("本地服务器应当能启动");
    let mut command = pi(Some(&server.base_url()), &scratch.0);
    command.args(["--max-steps", "1", "-p", "任务"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(1), "步数用完的退出码是 1");
    assert_eq!(
        lines(&output.stderr).last().map(String::as_str),
        Some("pi：已经走了 1 步（--max-steps），任务没有完成"),
        "步数上限：最后一行说明"
    );
    assert_eq!(server.requests().len(), 1, "上限是 1 步就只问一次模型");
}

#[tokio::test]
async fn interactive_mode_keeps_the_transcript_and_survives_ctrl_c() {
    let scratch = Scratch::new("interactive");
    let server = MockServer::start(vec![
        Reply::text("第一个回答"),
        Reply::Stream(vec![
            Step::event(&delta(json!({"role": "assistant", "content": "慢"}))),
            Step::Hang,
        ]),
        Reply::text("第三个回答"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let mut command = pi(Some(&server.base_url()), &scratch.0);
    command.stdin(Stdio::piped());
    let mut child = command.spawn().expect("能启动 pi");
    let mut stdin = child.stdin.take().expect("stdin 是管道");
    stdin
        .write_all("第一个任务\n第二个任务\n".as_bytes())
        .await
        .expect("能写 stdin");
    // The second turn hangs; cancel it once its request has arrived.
    let arrived = tokio::time::timeout(LIMIT, async {
        while server.requests().len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(arrived.is_ok(), "第二个任务的请求应当到达服务器");
    tokio::time::sleep(Duration::from_millis(200)).await;
    interrupt(&child);
    assert!(
        server.wait_for_disconnects(1, LIMIT).await,
        "取消的回合关闭了连接"
    );
    stdin
        .write_all("第三个任务\n".as_bytes())
        .await
        .expect("能写 stdin");
    drop(stdin); // Ctrl-D
    let output = finish(child).await;

    assert_eq!(
        output.status.code(),
        Some(0),
        "Ctrl-D 结束交互模式，退出码 0；stderr：{}",
        text(&output.stderr)
    );
    assert_eq!(
        text(&output.stdout),
        "第一个回答\n慢\n第三个回答\n",
        "每个回合的文字各成一行"
    );
    assert!(
        lines(&output.stderr)
            .iter()
            .any(|line| line.ends_with("pi：已取消")),
        "取消的回合留下一行说明：{}",
        text(&output.stderr)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "三个任务三个请求");
    let users: Vec<Value> = requests[2].json()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|message| message["role"] == "user")
        .map(|message| message["content"].clone())
        .collect();
    assert_eq!(
        users,
        [
            json!("第一个任务"),
            json!("第二个任务"),
            json!("第三个任务")
        ],
        "transcript 跨回合保留，被取消的回合也在里面"
    );
}

#[tokio::test]
async fn a_long_command_is_shown_whole_and_only_its_output_is_cut() {
    let scratch = Scratch::new("long-command");
    let command_text = format!("echo {}; echo done", "x".repeat(290));
    assert!(command_text.chars().count() >= 300, "命令至少 300 个字符");
    let server = MockServer::start(vec![
        Reply::tool_calls(&[("call_bash", "bash", json!({ "command": command_text }))]),
        Reply::text("好了。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let mut command = pi(Some(&server.base_url()), &scratch.0);
    command.args(["-p", "跑一条长命令"]);
    let output = run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr：{}",
        text(&output.stderr)
    );
    let stderr = lines(&output.stderr);
    assert_eq!(
        stderr[0],
        format!(r#"→ bash {{"command":"{command_text}"}}"#),
        "调用行显示整条命令，一个字符都不少"
    );
    assert_eq!(
        stderr[1],
        format!("← bash：{}…", "x".repeat(160)),
        "被截断的只有输出"
    );
}

#[tokio::test]
async fn a_write_shows_its_diff_and_the_task_ends_with_a_usage_line() {
    let scratch = Scratch::new("write-diff");
    let server = MockServer::start(vec![
        Reply::tool_calls(&[(
            "call_write",
            "write",
            json!({"path": "new.txt", "content": "one\ntwo\n"}),
        )]),
        Reply::text("写好了。"),
        Reply::text("好的。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let mut command = pi(Some(&server.base_url()), &scratch.0);
    command.args(["-p", "写一个文件"]);
    let output = run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr：{}",
        text(&output.stderr)
    );
    assert_eq!(
        lines(&output.stderr),
        [
            r#"→ write {"path":"new.txt","content":"one\ntwo\n"}"#,
            "← write：已写入 8 字节：new.txt",
            "  @@ -0,0 +1,2 @@",
            "  +one",
            "  +two",
            "用量：输入 32 · 输出 13 tokens（2 次模型调用）",
        ],
        "新文件的 diff 全是新增行；用量是服务器报的两次调用之和（20+12 输入，8+5 输出）"
    );
    assert_eq!(text(&output.stdout), "写好了。\n", "diff 和用量不进 stdout");
    let tool_message = server.requests()[1].json()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .find(|message| message["role"] == "tool")
        .expect("第二个请求带着工具结果");
    assert_eq!(
        tool_message["content"],
        json!("已写入 8 字节：new.txt"),
        "diff 只给人看，不进模型看到的工具结果"
    );

    // One model call: no count of calls.
    let mut command = pi(Some(&server.base_url()), &scratch.0);
    command.args(["-p", "说句话"]);
    let output = run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr：{}",
        text(&output.stderr)
    );
    assert_eq!(
        lines(&output.stderr),
        ["用量：输入 12 · 输出 5 tokens"],
        "只有一次模型调用：用量行不带次数"
    );
}

#[tokio::test]
async fn the_system_prompt_states_date_system_shell_and_directory_truthfully() {
    let scratch = Scratch::new("prompt");
    let server = MockServer::start(vec![Reply::text("你好。")])
        .await
        .expect("本地服务器应当能启动");
    let mut command = pi(Some(&server.base_url()), &scratch.0);
    command.args(["-p", "你好"]);
    let output = run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr：{}",
        text(&output.stderr)
    );
    let system = server.requests()[0].json()["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let root = scratch
        .0
        .canonicalize()
        .expect("临时目录存在")
        .display()
        .to_string();
    assert!(
        system.contains(&format!("Your working directory is {root}.")),
        "system prompt 说出工作目录：{system}"
    );
    let date = system
        .split_once("Today is ")
        .map(|(_, rest)| rest.chars().take(10).collect::<String>())
        .unwrap_or_default();
    let shape: String = date
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    assert_eq!(
        shape, "9999-99-99",
        "system prompt 写明今天的日期：{system}"
    );
    assert!(
        system.contains(std::env::consts::OS)
            && system.contains("the bash tool runs commands with /"),
        "system prompt 说出操作系统和 bash 用的 shell：{system}"
    );
    assert!(
        system.contains("not confined to it") && !system.contains("nothing outside"),
        "system prompt 不能声称目录外的东西碰不到（bash 碰得到）：{system}"
    );
}

/// The state letter of a process from /proc; `None` when it is gone.
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
}

#[tokio::test]
async fn sigterm_and_sighup_cancel_a_running_command_kill_it_and_end_pi() {
    for (signal, code, name) in [
        (libc::SIGTERM, 143, "SIGTERM"),
        (libc::SIGHUP, 129, "SIGHUP"),
    ] {
        let scratch = Scratch::new("terminate");
        let server = MockServer::start(vec![Reply::tool_calls(&[(
            "call_sleep",
            "bash",
            json!({"command": "sleep 300 & echo $! > sleep.pid; wait"}),
        )])])
        .await
        .expect("本地服务器应当能启动");
        let mut command = pi(Some(&server.base_url()), &scratch.0);
        command.args(["-p", "睡一会儿"]);
        let child = command.spawn().expect("能启动 pi");
        let pid_file = scratch.0.join("sleep.pid");
        let sleeper = tokio::time::timeout(LIMIT, async {
            loop {
                let written = std::fs::read_to_string(&pid_file).unwrap_or_default();
                if let Ok(pid) = written.trim().parse::<i32>() {
                    return pid;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("bash 工具应当启动 sleep 并写下它的 pid");
        let pi_pid = child.id().expect("pi 还在运行") as libc::pid_t;
        // SAFETY: kill(2) with a pid this test spawned and still owns.
        let sent = unsafe { libc::kill(pi_pid, signal) };
        assert_eq!(sent, 0, "能给 pi 发 {name}");
        let output = finish(child).await;
        assert_eq!(
            output.status.code(),
            Some(code),
            "{name} 结束的 pi 退出码是 128 + 信号编号；stderr：{}",
            text(&output.stderr)
        );
        assert_eq!(
            lines(&output.stderr).last().map(String::as_str),
            Some(format!("pi：收到 {name}，已取消并退出").as_str()),
            "{name}：最后一行说明收到了什么信号"
        );
        // The tool killed the command's process group before pi ended; reaping may lag.
        let gone = tokio::time::timeout(LIMIT, async {
            while !matches!(process_state(sleeper), None | Some('Z') | Some('X')) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(
            gone.is_ok(),
            "{name} 之后模型启动的 sleep（pid {sleeper}）不能还活着：状态 {:?}",
            process_state(sleeper)
        );
    }
}

#[tokio::test]
async fn sigterm_at_the_interactive_prompt_ends_pi() {
    let scratch = Scratch::new("prompt-term");
    let server = MockServer::start(vec![])
        .await
        .expect("本地服务器应当能启动");
    let mut command = pi(Some(&server.base_url()), &scratch.0);
    command.stdin(Stdio::piped());
    let mut child = command.spawn().expect("能启动 pi");
    let stdin = child.stdin.take().expect("stdin 是管道");
    let mut stderr = child.stderr.take().expect("stderr 是管道");
    // The prompt is up once "> " has been written.
    let mut seen = Vec::new();
    tokio::time::timeout(LIMIT, async {
        let mut buffer = [0u8; 256];
        while !text(&seen).ends_with("> ") {
            let read = tokio::io::AsyncReadExt::read(&mut stderr, &mut buffer)
                .await
                .expect("能读 stderr");
            assert!(read > 0, "pi 不应在提示符出现前结束：{}", text(&seen));
            seen.extend_from_slice(&buffer[..read]);
        }
    })
    .await
    .expect("交互模式的提示符应当出现");
    let pid = child.id().expect("pi 还在运行") as libc::pid_t;
    // SAFETY: kill(2) with a pid this test spawned and still owns.
    let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(sent, 0, "能给 pi 发 SIGTERM");
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .expect("pi 必须在 30 秒内结束")
        .expect("能等 pi 结束");
    drop(stdin);
    assert_eq!(
        status.code(),
        Some(143),
        "提示符处收到 SIGTERM：pi 立即结束（不等标准输入关闭），退出码 143"
    );
    assert!(server.requests().is_empty(), "没有任务就不问模型");
}
