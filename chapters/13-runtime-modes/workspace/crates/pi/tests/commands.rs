//! Chapter 13: interactive pi's session commands. The real binary against openai-mock on
//! 127.0.0.1, its sessions in a scratch HOME, its input a pipe (so each line waits its turn).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use openai_mock::{MockServer, Reply};
use serde_json::Value;
use support::{text, Scratch};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `home/` and `work/` inside one scratch directory.
fn scratch(name: &str) -> Scratch {
    let scratch = Scratch::new("commands", name);
    for dir in ["home", "work"] {
        std::fs::create_dir_all(scratch.path().join(dir)).expect("能建临时目录");
    }
    scratch
}

/// Every session file pi wrote under the scratch HOME, oldest first.
fn session_files(scratch: &Scratch) -> Vec<PathBuf> {
    let root = scratch.path().join("home/.local/state/pi/sessions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
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
    files.sort();
    files
}

/// pi with `args`, `input` written to its stdin and then closed.
async fn pi(server: &MockServer, scratch: &Scratch, args: &[&str], input: &str) -> Output {
    let home = scratch.path().join("home");
    let work = scratch.path().join("work");
    let mut child = support::pi(&server.base_url(), &home, &work, args)
        .stdin(Stdio::piped())
        .spawn()
        .expect("能启动 pi");
    let mut stdin = child.stdin.take().expect("stdin 是管道");
    stdin.write_all(input.as_bytes()).await.expect("能写 stdin");
    drop(stdin);
    support::finish(child).await
}

/// pi with `task` typed first and `rest` only once that task has ended (its usage line is on
/// stderr): a line typed while a task runs would steer it (chapter 09), and these tests are
/// about what pi does between tasks.
async fn pi_after_task(server: &MockServer, scratch: &Scratch, task: &str, rest: &str) -> Output {
    let home = scratch.path().join("home");
    let work = scratch.path().join("work");
    let mut child = support::pi(&server.base_url(), &home, &work, &[])
        .stdin(Stdio::piped())
        .spawn()
        .expect("能启动 pi");
    let mut stdin = child.stdin.take().expect("stdin 是管道");
    let mut stderr = child.stderr.take().expect("stderr 是管道");
    stdin
        .write_all(format!("{task}\n").as_bytes())
        .await
        .expect("能写 stdin");
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    while !text(&seen).contains("用量：") {
        let read = tokio::time::timeout(support::LIMIT, stderr.read(&mut chunk))
            .await
            .expect("任务应当在 30 秒内结束")
            .expect("能读 stderr");
        assert!(read > 0, "pi 在任务结束前退出了：{}", text(&seen));
        seen.extend_from_slice(&chunk[..read]);
    }
    stdin.write_all(rest.as_bytes()).await.expect("能写 stdin");
    drop(stdin);
    stderr.read_to_end(&mut seen).await.expect("能读完 stderr");
    let mut output = support::finish(child).await;
    output.stderr = seen;
    output
}

/// stderr as lines, without the `> ` prompts plain input prints before each read.
fn said(output: &Output) -> Vec<String> {
    text(&output.stderr)
        .lines()
        .map(|line| {
            let mut line = line;
            while let Some(rest) = line.strip_prefix("> ") {
                line = rest;
            }
            line.to_string()
        })
        .filter(|line| !line.is_empty() && *line != ">")
        .collect()
}

fn entries(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .expect("会话文件可读")
        .lines()
        .map(|line| serde_json::from_str(line).expect("每一行都是 JSON"))
        .collect()
}

/// The lines interactive pi opens with on a pipe.
const BANNER: [&str; 4] = [
    "pi 交互模式：每行一个任务；Ctrl-C 取消正在运行的回合，Ctrl-D 退出。",
    "输入 /compact 把较早的历史压缩成摘要（只保留最近一次交互的原文）。",
    "/new 新会话，/resume 列出并切换会话，/session 查看当前会话，/exit 退出。",
    "运行中输入的一行是插话，当前这批工具调用结束后交给模型；/followup <文字> 等这次运行结束后再追加。",
];

/// pi's token estimate (chapter 11): about four bytes a token, plus four per message.
fn estimate(entries: &[Value]) -> u64 {
    entries
        .iter()
        .filter(|entry| entry["type"] == "message")
        .map(|entry| {
            let message = &entry["message"];
            let text = match &message["content"] {
                Value::String(text) => text.clone(),
                Value::Array(blocks) => blocks
                    .iter()
                    .filter_map(|block| block["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            };
            (text.len() as u64).div_ceil(4) + 4
        })
        .sum()
}

fn lines(of: &[&str]) -> Vec<String> {
    of.iter().map(|line| line.to_string()).collect()
}

#[tokio::test]
async fn session_new_an_unknown_command_and_exit() {
    let scratch = scratch("new");
    let server = MockServer::start(vec![Reply::text("记住了。")])
        .await
        .expect("本地服务器应当能启动");
    let output = pi_after_task(
        &server,
        &scratch,
        "记住 42",
        "/session\n/new\n/session\n/x\n/exit\n这一行不该运行\n",
    )
    .await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "/exit 正常结束，退出码 0；stderr：{}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stdout), "记住了。\n", "stdout 只有回答");
    let files = session_files(&scratch);
    assert_eq!(
        files.len(),
        2,
        "启动时一个会话文件，/new 又建了一个：{files:?}"
    );
    let (first, second) = (&files[0], &files[1]);
    let written = entries(first);
    assert_eq!(
        written
            .iter()
            .map(|entry| entry["type"].as_str().unwrap_or_default())
            .collect::<Vec<_>>(),
        ["metadata", "message", "message", "message"],
        "/new 之前的会话：头部 + system + 一问一答，/new 没有改动它"
    );
    assert_eq!(entries(second).len(), 1, "/new 建的新会话只有头部");
    let mut expected = lines(&BANNER);
    expected.extend([
        "用量：输入 12 · 输出 5 tokens".to_string(),
        format!("pi：会话文件 {}", first.display()),
        format!(
            "pi：4 个 entry，发给模型的上下文约 {} tokens（窗口 128000）",
            estimate(&written)
        ),
        format!("pi：新会话 {}", second.display()),
        format!("pi：会话文件 {}", second.display()),
        "pi：1 个 entry，发给模型的上下文约 0 tokens（窗口 128000）".to_string(),
        "pi：没有 /x 这个命令：可用 /new、/resume、/compact、/session、/exit，或 .pi/prompts/ 里的模板"
            .to_string(),
    ]);
    assert_eq!(
        said(&output),
        expected,
        "/session 说出文件、entry 数和上下文估算；/new 说出新文件；未知命令一行中文；/exit 之后什么都不做"
    );
    assert_eq!(server.requests().len(), 1, "/exit 之后的一行没有运行");
}

#[tokio::test]
async fn resume_lists_this_directorys_sessions_and_switches_to_one() {
    let scratch = scratch("resume");
    let server = MockServer::start(vec![
        Reply::text("记住了 42。"),
        Reply::text("记住了 7。"),
        Reply::text("是 42。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    for task in ["记住 42", "记住 7"] {
        let output = pi(&server, &scratch, &["-p", task], "").await;
        assert_eq!(
            output.status.code(),
            Some(0),
            "准备会话：{task}；stderr：{}",
            text(&output.stderr)
        );
    }
    let older = session_files(&scratch);
    let forty_two = std::fs::read(&older[0]).expect("会话文件可读");
    let seven = std::fs::read(&older[1]).expect("会话文件可读");
    let output = pi(
        &server,
        &scratch,
        &[],
        "/resume\n/resume 9\n/resume 1\n/resume 3\n刚才的数字是多少？\n",
    )
    .await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "Ctrl-D 结束交互模式；stderr：{}",
        text(&output.stderr)
    );
    let files = session_files(&scratch);
    assert_eq!(files.len(), 3, "交互模式启动时建了第三个会话文件");
    let mut expected = lines(&BANNER);
    expected.extend([
        format!("1. {}  （还没有任务）", files[2].display()),
        format!("2. {}  记住 7", files[1].display()),
        format!("3. {}  记住 42", files[0].display()),
        "用 /resume N 切换到第 N 个会话".to_string(),
        "pi：没有第 9 个会话（这个目录有 3 个，用 /resume 查看）".to_string(),
        format!("pi：已经在这个会话里了：{}", files[2].display()),
        format!("pi：继续会话 {}", files[0].display()),
        "用量：输入 12 · 输出 5 tokens".to_string(),
    ]);
    assert_eq!(
        said(&output),
        expected,
        "/resume 按新旧编号列出这个目录的会话；编号不对或已在其中时一行说明；/resume N 切换"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "两次准备，一个任务");
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
        [Value::from("记住 42"), Value::from("刚才的数字是多少？")],
        "切换之后的任务接着第 3 个会话（记住 42）的对话"
    );
    let after = std::fs::read(&files[0]).expect("会话文件可读");
    assert!(
        after.starts_with(&forty_two) && after.len() > forty_two.len(),
        "继续的会话只在末尾追加"
    );
    assert_eq!(
        std::fs::read(&files[1]).expect("会话文件可读"),
        seven,
        "没有切换到的会话逐字节不变"
    );
    assert_eq!(entries(&files[0]).len(), 6, "头部 + system + 两问两答");
}
