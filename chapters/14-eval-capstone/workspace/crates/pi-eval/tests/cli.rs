//! `pi-eval` as a program: the shipped cases pass offline, a failing case names its phase and
//! exits 1, unusable input is one Chinese line and exit 2, `--json` is a report for CI.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

/// How long one `pi-eval` run may take before the test fails instead of hanging.
const LIMIT: Duration = Duration::from_secs(60);

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pi-eval-test-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("能建临时目录");
        Scratch(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("能写测试用的 case 文件");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn pi_eval(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pi-eval"));
    command
        .env_remove("OPENAI_COMPATIBLE_API_KEY")
        .env_remove("OPENAI_COMPATIBLE_MODEL")
        .env_remove("OPENAI_COMPATIBLE_BASE_URL")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(LIMIT, command.output())
        .await
        .expect("pi-eval 必须在时限内结束")
        .expect("能启动 pi-eval")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("pi-eval 只输出 UTF-8")
}

fn dir(path: &Path) -> &str {
    path.to_str().expect("临时目录是 UTF-8 路径")
}

#[tokio::test]
async fn the_shipped_cases_pass_offline() {
    let output = pi_eval(&[]).await;
    assert_eq!(
        text(&output.stdout),
        "count-lines passed · 消息 system 1 user 1 assistant 3 toolResult 2 · 工具 调用 2 结果 2 出错 0 · 文件 1/1 · 检查 通过 3 失败 0\n\
         edit-todo passed · 消息 system 1 user 1 assistant 4 toolResult 3 · 工具 调用 3 结果 3 出错 0 · 文件 1/1 · 检查 通过 3 失败 0\n\
         write-hello passed · 消息 system 1 user 1 assistant 2 toolResult 1 · 工具 调用 1 结果 1 出错 0 · 文件 1/1 · 检查 通过 2 失败 0\n\
         通过 3/3\n",
        "附带的三个 case 按文件名顺序各一行，全部通过；stderr：{}",
        text(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(0), "全部通过时退出码为 0");
}

const WRONG: &str = r#"{
  "id": "wrong-expectation",
  "prompt": "写 secret.txt",
  "files": { "seed.txt": "SEED-CONTENT-77" },
  "script": [
    { "tool_calls": [{ "name": "write", "arguments": { "path": "secret.txt", "content": "SECRET-CONTENT-41" } }] },
    { "text": "写好了 SECRET-ANSWER-41" }
  ],
  "expect": { "files": { "secret.txt": { "equals": "别的内容" } }, "tools": ["write"] }
}"#;

#[tokio::test]
async fn a_failing_case_names_its_phase_and_exits_1() {
    let cases = Scratch::new("failing");
    cases.write("wrong.json", WRONG);
    let output = pi_eval(&[dir(&cases.0)]).await;
    let stdout = text(&output.stdout);
    assert_eq!(
        stdout,
        "wrong-expectation task_failed · 主因 task/task_rejected · 消息 system 1 user 1 assistant 2 toolResult 1 · 工具 调用 1 结果 1 出错 0 · 文件 1/1 · 检查 通过 1 失败 1\n通过 0/1\n",
        "没通过的 case 一行写出状态与失败的阶段"
    );
    assert_eq!(output.status.code(), Some(1), "有 case 没通过时退出码为 1");
    for secret in [
        "SECRET-CONTENT-41",
        "SECRET-ANSWER-41",
        "SEED-CONTENT-77",
        "secret.txt",
        "call_",
    ] {
        assert!(
            !stdout.contains(secret) && !text(&output.stderr).contains(secret),
            "输出里不能有文件内容、transcript、路径或调用 id：{secret}"
        );
    }
}

#[tokio::test]
async fn json_is_a_report_for_ci() {
    let cases = Scratch::new("json");
    cases.write("wrong.json", WRONG);
    let output = pi_eval(&["--json", dir(&cases.0)]).await;
    let reports: Value =
        serde_json::from_slice(&output.stdout).expect("--json 只打印一个 JSON 文档");
    assert_eq!(
        reports[0]["primary_failure"],
        serde_json::json!({"phase": "task", "code": "task_rejected"}),
        "JSON 报告带着固定的阶段与代码"
    );
    assert_eq!(
        reports[0]["status"], "task_failed",
        "JSON 报告的状态是 snake_case"
    );
    assert_eq!(output.status.code(), Some(1), "--json 不改变退出码");
}

#[tokio::test]
async fn unusable_input_is_one_chinese_line_and_exit_2() {
    let cases = Scratch::new("bad");
    let broken = cases.write("broken.json", "{ \"id\": \"x\", ");
    let output = pi_eval(&[dir(&cases.0)]).await;
    let stderr = text(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(2),
        "读不懂的 case 文件退出码为 2"
    );
    assert!(
        stderr.starts_with("pi-eval：broken.json：不是合法的 JSON") && stderr.lines().count() == 1,
        "坏的 case 文件只说一行中文，点名文件：{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&broken).ok().as_deref(),
        Some("{ \"id\": \"x\", "),
        "坏的 case 文件原样保留"
    );
    assert!(output.stdout.is_empty(), "出错时什么都不跑，也不打印报告");

    let escaping = Scratch::new("escape");
    escaping.write(
        "escape.json",
        r#"{"id": "e", "prompt": "p", "files": {"../outside.txt": "x"},
            "script": [{"text": "t"}], "expect": {"tools": ["read"]}}"#,
    );
    let output = pi_eval(&[dir(&escaping.0)]).await;
    assert_eq!(output.status.code(), Some(2), "离开工作区的路径退出码为 2");
    assert!(
        text(&output.stderr).contains("文件路径必须是工作区里的相对路径"),
        "离开工作区的路径被拒绝：{}",
        text(&output.stderr)
    );
    assert!(
        !escaping
            .0
            .parent()
            .map(|parent| parent.join("outside.txt").exists())
            .unwrap_or(false),
        "被拒绝的 case 不写任何文件"
    );

    let output = pi_eval(&["--frobnicate"]).await;
    assert_eq!(
        (output.status.code(), text(&output.stderr)),
        (
            Some(2),
            "pi-eval：不认识的选项 --frobnicate；用法：pi-eval [目录] [--json] [--real]\n"
                .to_string()
        ),
        "不认识的选项说一行用法"
    );
}
