//! Chapter 12 in `pi`, as a user runs it: project instructions and skills in the request the
//! model receives, `/name` templates in interactive mode, and `--confirm` / `--allow` in front
//! of the mutating tools. The real binary against openai-mock on 127.0.0.1.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use openai_mock::{MockServer, Reply};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

const KEY: &str = "sk-pi-test-12ab";
const LIMIT: Duration = Duration::from_secs(30);

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pi-resources-test-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("能建临时目录");
        Scratch(dir)
    }

    fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::create_dir_all(path.parent().expect("有父目录")).expect("能建目录");
        std::fs::write(&path, content).expect("能写测试文件");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

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

/// Whether `text` is the base prompt chapter 08's `pi` gives for `root`: one paragraph naming
/// the directory (it also states the date, the system and the shell, which vary).
fn is_base_prompt(text: &str, root: &Path) -> bool {
    text.starts_with("You are pi, a coding agent.")
        && text.contains(&format!("Your working directory is {}.", root.display()))
        && !text.contains('\n')
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|tool| {
            tool["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[tokio::test]
async fn nested_instructions_and_a_skill_reach_the_model_and_the_body_only_when_used() {
    let scratch = Scratch::new("resources");
    std::fs::create_dir_all(scratch.0.join(".git")).expect("能建 .git");
    scratch.write("AGENTS.md", "Root rules.\n");
    scratch.write("app/CLAUDE.md", "App rules.\n");
    scratch.write("app/src/AGENTS.md", "Not on the way.\n");
    scratch.write(
        ".pi/skills/deploy/SKILL.md",
        "---\nname: deploy\ndescription: Ship the app\n---\nRun cargo test first.\n",
    );
    scratch.write(".pi/skills/broken/SKILL.md", "no front matter\n");
    let server = MockServer::start(vec![
        Reply::tool_calls(&[("call_skill", "skill", json!({"name": "deploy"}))]),
        Reply::text("照技能做了。"),
    ])
    .await
    .expect("本地服务器应当能启动");

    let app = scratch.0.join("app");
    let mut command = pi(&server.base_url(), &scratch.0);
    command.arg("-C").arg(&app).args(["-p", "发布"]);
    let output = run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr：{}",
        text(&output.stderr)
    );
    assert!(
        text(&output.stderr).starts_with(&format!(
            "pi：跳过技能 {}：第 1 行：",
            scratch.0.join(".pi/skills/broken/SKILL.md").display()
        )),
        "坏的 SKILL.md 在 stderr 上占一行，pi 照常运行：{}",
        text(&output.stderr)
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 2, "两个模型回合");
    let first = requests[0].json();
    let system = &first["messages"][0];
    assert_eq!(
        system["role"],
        json!("system"),
        "第一条消息是 system message"
    );
    let (base, resources) = system["content"]
        .as_str()
        .unwrap_or_default()
        .split_once("\n\n")
        .unwrap_or_default();
    assert!(
        is_base_prompt(base, &app),
        "system message 以 pi 的基础 prompt 开头，说出工作目录：{base}"
    );
    assert_eq!(
        resources,
        "## AGENTS.md\n\nRoot rules.\n\n## app/CLAUDE.md\n\nApp rules.\n\n## Skills\n\n- deploy: Ship the app",
        "从仓库根目录到工作目录的说明文件和技能列表合进唯一的 system message，根在前"
    );
    assert_eq!(
        tool_names(&first),
        ["read", "write", "edit", "bash", "skill"],
        "有技能时多一个 skill 工具"
    );
    assert!(
        !first.to_string().contains("Run cargo test first."),
        "技能正文在用到之前不能进入请求"
    );
    assert_eq!(
        requests[1].json()["messages"][3],
        json!({
            "role": "tool",
            "tool_call_id": "call_skill",
            "name": "skill",
            "content": "Run cargo test first."
        }),
        "skill 工具把技能正文作为配对结果交给模型"
    );
}

#[tokio::test]
async fn confirm_in_print_mode_stops_rm_and_the_model_receives_the_denial() {
    let scratch = Scratch::new("confirm");
    let keep = scratch.write("keep.txt", "precious\n");
    let server = MockServer::start(vec![
        Reply::tool_calls(&[("call_rm", "bash", json!({"command": "rm keep.txt"}))]),
        Reply::text("没有删。"),
    ])
    .await
    .expect("本地服务器应当能启动");

    let mut command = pi(&server.base_url(), &scratch.0);
    command.args(["--confirm", "--allow", "bash:ls*", "-p", "删掉 keep.txt"]);
    let output = run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr：{}",
        text(&output.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&keep).ok().as_deref(),
        Some("precious\n"),
        "被拒绝的 rm 不能运行"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "拒绝之后模型还会收到一次请求");
    assert_eq!(
        requests[1].json()["messages"][3],
        json!({
            "role": "tool",
            "tool_call_id": "call_rm",
            "name": "bash",
            "content": "Tool bash failed: 调用被扩展拒绝（confirm）：--confirm 之下没有匹配的 --allow 规则，未运行"
        }),
        "拒绝作为配对的失败结果交给模型"
    );
}

#[tokio::test]
async fn an_allow_rule_lets_a_matching_command_run() {
    let scratch = Scratch::new("allow");
    let server = MockServer::start(vec![
        Reply::tool_calls(&[(
            "call_echo",
            "bash",
            json!({"command": "echo made > made.txt"}),
        )]),
        Reply::text("写好了。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let mut command = pi(&server.base_url(), &scratch.0);
    command.args(["--confirm", "--allow", "bash:echo *", "-p", "写 made.txt"]);
    let output = run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr：{}",
        text(&output.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(scratch.0.join("made.txt"))
            .ok()
            .as_deref(),
        Some("made\n"),
        "匹配 --allow 规则的命令照常运行"
    );
}

#[tokio::test]
async fn bad_allow_rules_are_one_chinese_line_and_nothing_runs() {
    let scratch = Scratch::new("bad-allow");
    let server = MockServer::start(vec![])
        .await
        .expect("本地服务器应当能启动");
    let cases: [(&[&str], &str); 3] = [
        (
            &["--confirm", "--allow", "rm -rf", "-p", "x"],
            "pi：--allow 的规则应写成 工具:模式，例如 'bash:cargo test*'，实际是 \"rm -rf\"\n",
        ),
        (
            &["--confirm", "--allow", "read:*", "-p", "x"],
            "pi：--allow 的工具只能是 bash、write 或 edit，实际是 \"read\"\n",
        ),
        (
            &["--allow", "bash:ls", "-p", "x"],
            "pi：--allow 只能和 --confirm 一起使用\n",
        ),
    ];
    for (arguments, line) in cases {
        let mut command = pi(&server.base_url(), &scratch.0);
        command.args(arguments);
        let output = run(command).await;
        assert_eq!(output.status.code(), Some(2), "命令行有误时退出码是 2");
        assert_eq!(text(&output.stderr), line, "命令行有误时只有一行中文说明");
    }
    assert!(server.requests().is_empty(), "命令行有误时不请求模型");
}

#[tokio::test]
async fn a_slash_line_runs_its_prompt_template_in_interactive_mode() {
    let scratch = Scratch::new("template");
    scratch.write(".pi/prompts/review.md", "Review {{file}} for {{focus}}.\n");
    let server = MockServer::start(vec![Reply::text("看过了。")])
        .await
        .expect("本地服务器应当能启动");
    let mut command = pi(&server.base_url(), &scratch.0);
    command.stdin(Stdio::piped());
    let mut child = command.spawn().expect("能启动 pi");
    let mut stdin = child.stdin.take().expect("stdin 是管道");
    stdin
        .write_all(b"/review file=src/lib.rs\n/review file=src/lib.rs focus=safety\n")
        .await
        .expect("能写 stdin");
    drop(stdin);
    let output = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("pi 必须在 30 秒内结束")
        .expect("能收集 pi 的输出");
    assert_eq!(output.status.code(), Some(0), "Ctrl-D 之后正常退出");
    assert!(
        text(&output.stderr).contains("pi：/review：模板变量 focus 没有提供值\n"),
        "缺少模板变量时说出名字，不请求模型：{}",
        text(&output.stderr)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "只有完整的模板调用请求了模型");
    assert_eq!(
        requests[0].json()["messages"][1],
        json!({"role": "user", "content": "Review src/lib.rs for safety.\n"}),
        "模板渲染后的文字就是这一轮的任务"
    );
}
