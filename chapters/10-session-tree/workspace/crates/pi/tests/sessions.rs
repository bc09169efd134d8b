//! Chapter 10: `pi` keeps its sessions. The real binary against openai-mock on 127.0.0.1,
//! the session files in a scratch HOME.

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use openai_mock::{delta, MockServer, Recorded, Reply, Step};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

const KEY: &str = "sk-pi-session-test-77e1";

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pi-session-test-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("work")).expect("能建临时目录");
        Scratch(dir.canonicalize().expect("临时目录有规范路径"))
    }

    fn work(&self) -> PathBuf {
        self.0.join("work")
    }

    /// Every session file pi wrote under the scratch HOME.
    fn session_files(&self) -> Vec<PathBuf> {
        let root = self.0.join(".local/state/pi/sessions");
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
        files.sort();
        files
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn pi(server: &MockServer, scratch: &Scratch, args: &[&str]) -> Output {
    let child = command(server, scratch, args)
        .stdin(Stdio::null())
        .spawn()
        .expect("能启动 pi");
    tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("pi 必须在 30 秒内结束")
        .expect("能收集 pi 的输出")
}

/// An interactive pi whose stdin the test writes to.
fn interactive(server: &MockServer, scratch: &Scratch, args: &[&str]) -> Child {
    command(server, scratch, args)
        .stdin(Stdio::piped())
        .spawn()
        .expect("能启动 pi")
}

/// Reads `from` until what was read contains `wanted`: a gate on pi's own output, not a sleep.
async fn read_until(from: &mut (impl AsyncRead + Unpin), wanted: &str) -> String {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 256];
    let reading = async {
        while !String::from_utf8_lossy(&seen).contains(wanted) {
            let read = from.read(&mut buffer).await.expect("能读 pi 的输出");
            assert!(
                read > 0,
                "pi 在输出“{wanted}”之前就关闭了输出：{}",
                text(&seen)
            );
            seen.extend_from_slice(&buffer[..read]);
        }
    };
    tokio::time::timeout(Duration::from_secs(30), reading)
        .await
        .expect("30 秒内 pi 必须输出预期的内容");
    text(&seen)
}

fn command(server: &MockServer, scratch: &Scratch, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pi"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &scratch.0)
        .env("OPENAI_COMPATIBLE_BASE_URL", server.base_url())
        .env("OPENAI_COMPATIBLE_API_KEY", KEY)
        .env("OPENAI_COMPATIBLE_MODEL", "mock-model")
        .current_dir(scratch.work())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The request's messages as `(role, content)`.
fn conversation(request: &Recorded) -> Vec<(String, String)> {
    request.json()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|message| {
            (
                message["role"].as_str().unwrap_or_default().to_string(),
                message["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn without_system(conversation: Vec<(String, String)>) -> Vec<(String, String)> {
    conversation
        .into_iter()
        .filter(|(role, _)| role != "system")
        .collect()
}

fn pair(role: &str, content: &str) -> (String, String) {
    (role.to_string(), content.to_string())
}

async fn two_runs(scratch: &Scratch) -> (MockServer, PathBuf) {
    let server = MockServer::start(vec![
        Reply::text("你好，我记住了 42。"),
        Reply::text("是 42。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let first = pi(&server, scratch, &["-p", "记住数字 42"]).await;
    assert_eq!(
        first.status.code(),
        Some(0),
        "第一次运行成功；stderr：{}",
        text(&first.stderr)
    );
    let files = scratch.session_files();
    assert_eq!(
        files.len(),
        1,
        "第一次运行在 ~/.local/state/pi/sessions/<目录>/ 下写了一个会话文件"
    );
    (server, files[0].clone())
}

#[tokio::test]
async fn continue_sends_the_earlier_turns_and_the_file_only_grows() {
    let scratch = Scratch::new("continue");
    let (server, file) = two_runs(&scratch).await;
    let written = std::fs::read_to_string(&file).expect("会话文件可读");
    let header: Value =
        serde_json::from_str(written.lines().next().expect("至少有头部")).expect("头部是 JSON");
    assert_eq!(header["type"], "metadata", "第一行是 metadata 头部");
    assert_eq!(header["value"]["format"], 1, "头部记着格式版本");
    assert_eq!(
        header["value"]["cwd"],
        scratch.work().to_string_lossy().as_ref(),
        "头部记着工作目录"
    );
    assert_eq!(header["value"]["model"], "mock-model", "头部记着模型");
    assert!(!written.contains(KEY), "API 密钥绝不能出现在会话文件里");
    assert!(written.ends_with('\n'), "每一行都以换行结束");

    let second = pi(&server, &scratch, &["-c", "-p", "刚才的数字是多少？"]).await;
    assert_eq!(
        second.status.code(),
        Some(0),
        "-c 继续会话成功；stderr：{}",
        text(&second.stderr)
    );
    assert_eq!(text(&second.stdout), "是 42。\n", "stdout 是第二个回答");
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "两次运行，两个请求");
    assert_eq!(
        without_system(conversation(&requests[1])),
        [
            pair("user", "记住数字 42"),
            pair("assistant", "你好，我记住了 42。"),
            pair("user", "刚才的数字是多少？"),
        ],
        "-c 时模型收到之前的整段对话"
    );
    assert_eq!(
        conversation(&requests[1])[0],
        conversation(&requests[0])[0],
        "继续的会话沿用原来的 system prompt"
    );
    let after = std::fs::read_to_string(&file).expect("会话文件可读");
    assert!(
        after.starts_with(&written),
        "继续会话只追加，旧字节原样保留"
    );
    assert_eq!(after.lines().count(), 6, "头部 + system + 两轮各一问一答");
    assert_eq!(scratch.session_files().len(), 1, "-c 不新建会话文件");
}

#[tokio::test]
async fn a_torn_tail_is_reported_and_repaired_only_on_request() {
    let scratch = Scratch::new("torn");
    let (server, file) = two_runs(&scratch).await;
    let committed = std::fs::read_to_string(&file).expect("会话文件可读");
    // What a SIGKILL in the middle of a write leaves behind: half a line, no newline.
    let torn = format!("{committed}{{\"id\":\"lost\",\"parentId\":\"h");
    std::fs::write(&file, &torn).expect("能模拟被截断的写入");

    let refused = pi(&server, &scratch, &["-c", "-p", "刚才的数字是多少？"]).await;
    assert_eq!(refused.status.code(), Some(2), "有残行时不运行");
    let stderr = text(&refused.stderr);
    assert_eq!(stderr.lines().count(), 1, "只有一行中文说明：{stderr}");
    assert!(
        stderr.contains("没有写完") && stderr.contains("--repair"),
        "说明发生了什么、怎样修复：{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).expect("可读"),
        torn,
        "没有用户同意，文件一个字节都不改"
    );
    assert_eq!(server.requests().len(), 1, "有残行时不请求模型");

    let repaired = pi(
        &server,
        &scratch,
        &["-c", "--repair", "-p", "刚才的数字是多少？"],
    )
    .await;
    assert_eq!(
        repaired.status.code(),
        Some(0),
        "--repair 之后继续；stderr：{}",
        text(&repaired.stderr)
    );
    let requests = server.requests();
    assert_eq!(
        without_system(conversation(&requests[1])),
        [
            pair("user", "记住数字 42"),
            pair("assistant", "你好，我记住了 42。"),
            pair("user", "刚才的数字是多少？"),
        ],
        "修复后已提交的内容一条不少"
    );
    let after = std::fs::read_to_string(&file).expect("可读");
    assert!(after.starts_with(&committed), "修复只截掉残行");
    assert!(!after.contains("lost"), "残行不见了，也没有和新行粘在一起");
}

#[tokio::test]
async fn damaged_foreign_and_missing_sessions_get_one_line_and_stay_untouched() {
    let scratch = Scratch::new("bad");
    let server = MockServer::start(vec![])
        .await
        .expect("本地服务器应当能启动");
    let cases: [(&str, &str, &str); 4] = [
        ("damaged.jsonl", "{\"id\":\"h\"}\nnot json\n", "第 1 行"),
        ("foreign.jsonl", "{\"id\":\"h\",\"parentId\":null,\"timestamp\":1,\"type\":\"metadata\",\"key\":\"session\",\"value\":{\"format\":1,\"cwd\":\"/elsewhere\",\"model\":\"m\"}}\n", "/elsewhere"),
        ("notes.jsonl", "{\"id\":\"a\",\"parentId\":null,\"timestamp\":1,\"type\":\"metadata\",\"key\":\"todo\",\"value\":1}\n", "不是 pi 的会话文件"),
        ("unknown.jsonl", "{\"id\":\"a\",\"parentId\":null,\"timestamp\":1,\"type\":\"label\"}\n", "未知的 entry 类型"),
    ];
    for (name, content, says) in cases {
        let path = scratch.0.join(name);
        std::fs::write(&path, content).expect("能写测试文件");
        let output = pi(
            &server,
            &scratch,
            &["--session", path.to_str().expect("UTF-8 路径"), "-p", "hi"],
        )
        .await;
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}：不运行");
        assert_eq!(stderr.lines().count(), 1, "{name}：只有一行说明：{stderr}");
        assert!(
            stderr.contains(says),
            "{name}：说明里要有“{says}”：{stderr}"
        );
        assert_eq!(
            std::fs::read_to_string(&path).expect("可读"),
            content,
            "{name}：文件一个字节都不改"
        );
    }
    let output = pi(&server, &scratch, &["-c", "-p", "hi"]).await;
    assert_eq!(output.status.code(), Some(2), "没有会话时 -c 不运行");
    assert!(
        text(&output.stderr).contains("还没有会话"),
        "说明这个目录还没有会话：{}",
        text(&output.stderr)
    );
    assert!(server.requests().is_empty(), "这些情形都不请求模型");
}

#[tokio::test]
async fn a_second_pi_on_the_same_session_is_refused() {
    let scratch = Scratch::new("lock");
    let (server, file) = two_runs(&scratch).await;
    let path = file.to_str().expect("UTF-8 路径");
    let mut first = interactive(&server, &scratch, &["--session", path]);
    let mut first_err = first.stderr.take().expect("stderr 是管道");
    read_until(&mut first_err, "交互模式").await;
    let before = std::fs::read(&file).expect("可读");
    let second = pi(&server, &scratch, &["--session", path, "-p", "hi"]).await;
    assert_eq!(
        second.status.code(),
        Some(2),
        "第一个 pi 还开着这个会话时，第二个不运行"
    );
    let stderr = text(&second.stderr);
    assert!(
        stderr.contains("另一个 pi"),
        "说明会话正被另一个 pi 使用：{stderr}"
    );
    assert_eq!(
        std::fs::read(&file).expect("可读"),
        before,
        "被拒绝的 pi 一个字节都不写"
    );
    drop(first.stdin.take());
    let status = tokio::time::timeout(Duration::from_secs(30), first.wait())
        .await
        .expect("关闭 stdin 后第一个 pi 必须退出")
        .expect("能等第一个 pi");
    assert_eq!(status.code(), Some(0), "Ctrl-D 正常退出");
    let third = pi(&server, &scratch, &["-c", "-p", "刚才的数字是多少？"]).await;
    assert_eq!(
        third.status.code(),
        Some(0),
        "第一个 pi 退出后会话可以再打开：{}",
        text(&third.stderr)
    );
}

#[tokio::test]
async fn sigkill_mid_stream_loses_nothing_committed() {
    let scratch = Scratch::new("kill");
    let server = MockServer::start(vec![
        Reply::text("你好，我记住了 42。"),
        Reply::Stream(vec![
            Step::event(&delta(json!({"role": "assistant", "content": "我正在想"}))),
            Step::Hang,
        ]),
        Reply::text("是 42。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let first = pi(&server, &scratch, &["-p", "记住数字 42"]).await;
    assert_eq!(
        first.status.code(),
        Some(0),
        "第一次运行成功：{}",
        text(&first.stderr)
    );
    let file = scratch
        .session_files()
        .pop()
        .expect("第一次运行写了会话文件");
    let committed = std::fs::read_to_string(&file).expect("可读");

    let mut victim = interactive(&server, &scratch, &["-c"]);
    let mut stdin = victim.stdin.take().expect("stdin 是管道");
    stdin
        .write_all("再想一个数字\n".as_bytes())
        .await
        .expect("能写 stdin");
    let mut stdout = victim.stdout.take().expect("stdout 是管道");
    read_until(&mut stdout, "我正在想").await;
    victim.start_kill().expect("能发 SIGKILL");
    let status = victim.wait().await.expect("能等被杀的 pi");
    assert_eq!(status.code(), None, "pi 是被信号杀死的");

    let after_kill = std::fs::read_to_string(&file).expect("可读");
    assert!(
        after_kill.starts_with(&committed),
        "被杀之前已提交的每一行原样都在"
    );
    assert!(
        after_kill.ends_with('\n'),
        "文件末尾没有残行：未完成的回合一行也没写"
    );
    let resumed = pi(&server, &scratch, &["-c", "-p", "刚才的数字是多少？"]).await;
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "被杀之后 -c 照常继续：{}",
        text(&resumed.stderr)
    );
    let requests = server.requests();
    assert_eq!(
        without_system(conversation(&requests[2])),
        [
            pair("user", "记住数字 42"),
            pair("assistant", "你好，我记住了 42。"),
            pair("user", "刚才的数字是多少？"),
        ],
        "继续时模型收到被杀之前已提交的对话，被打断的回合不在其中"
    );
}

#[tokio::test]
async fn resume_lists_this_directorys_sessions_newest_first() {
    let scratch = Scratch::new("resume");
    let (server, older) = two_runs(&scratch).await;
    let before = std::fs::read(&older).expect("可读");
    let newer = pi(&server, &scratch, &["-p", "新的任务\n第二行"]).await;
    assert_eq!(
        newer.status.code(),
        Some(0),
        "不带 -c 的运行开始新会话：{}",
        text(&newer.stderr)
    );
    let files = scratch.session_files();
    assert_eq!(files.len(), 2, "两个会话文件");
    let newest = files
        .iter()
        .find(|file| **file != older)
        .expect("有一个新文件");
    let listing = pi(&server, &scratch, &["--resume"]).await;
    assert_eq!(
        listing.status.code(),
        Some(0),
        "--resume 成功：{}",
        text(&listing.stderr)
    );
    assert_eq!(
        text(&listing.stdout),
        format!(
            "1. {}  新的任务 第二行\n2. {}  记住数字 42\n用 pi --session <文件> 继续其中一个，pi -c 继续第 1 个\n",
            newest.display(),
            older.display()
        ),
        "--resume 按新旧列出会话和各自的第一个任务"
    );
    assert_eq!(
        std::fs::read(&older).expect("可读"),
        before,
        "--resume 只读，不写"
    );
    assert_eq!(
        server.requests().len(),
        2,
        "--resume 不请求模型：两次运行，两个请求"
    );
}
