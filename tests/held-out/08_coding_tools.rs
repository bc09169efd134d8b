//! Held-out tests for chapter 08 (instructor only): other files and paths, multi-byte text,
//! a symlink chain, adjacent edits, an empty write, quiet or failing commands, a CRLF file with
//! a BOM edited in a batch, a tail cut through two-byte characters and secret names in other
//! spellings.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pi_course::coding_tools::*;
use pi_course::scripted_model::tool_call;
use pi_course::tool::*;
use pi_course::types::*;
use serde_json::{json, Value};

struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(label: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pi-course-08-held-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("project")).expect("测试需要能在系统临时目录里建目录");
        Scratch { dir }
    }

    fn project(&self) -> PathBuf {
        self.dir.join("project")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn call(tools: &CodingTools, name: &str, arguments: Value) -> ToolResultMessage {
    let registry = tools.registry().expect("四个工具名互不相同");
    let call = tool_call("toolu_held", name, arguments);
    tokio::time::timeout(
        Duration::from_secs(5),
        execute_tool_call(&call, &registry, CallContext::default()),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} 调用 5 秒内没有返回"))
}

fn body(result: &ToolResultMessage) -> String {
    result
        .content
        .iter()
        .map(|block| block.text.as_str())
        .collect()
}

#[tokio::test]
async fn the_read_cap_counts_bytes_not_characters() {
    let scratch = Scratch::new("utf8");
    std::fs::write(scratch.project().join("诗.txt"), "你好\n世界\n").expect("测试需要能写文件");
    let tools = CodingTools::new(scratch.project())
        .expect("project 是存在的目录")
        .with_limits(Limits {
            max_read_bytes: 10,
            ..Limits::default()
        });
    let result = call(&tools, "read", json!({"path": "诗.txt"})).await;
    assert_eq!(
        body(&result),
        "你好\n\n[第 1-1 行，共 2 行；已达 10 字节上限，用 offset=2 继续读取]",
        "上限按字节计：每行 7 字节，两行放不进 10 字节"
    );
}

#[tokio::test]
async fn a_chain_of_symlinks_is_followed_to_its_end() {
    let scratch = Scratch::new("chain");
    let elsewhere = scratch.dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("测试需要能建目录");
    std::fs::write(elsewhere.join("keys"), "k\n").expect("测试需要能写文件");
    let project = scratch.project();
    std::os::unix::fs::symlink(&elsewhere, project.join("hop2")).expect("测试需要能建链接");
    std::os::unix::fs::symlink(project.join("hop2"), project.join("hop1"))
        .expect("测试需要能建链接");
    let tools = CodingTools::new(&project).expect("project 是存在的目录");
    assert_eq!(
        tools.workspace().resolve("hop1/keys"),
        Err(ToolError::new(format!("{OUTSIDE_WORKSPACE}：hop1/keys"))),
        "链接指向链接，最后落在外面：拒绝"
    );
    let written = call(&tools, "write", json!({"path": "hop1/new", "content": "x"})).await;
    assert!(
        written.is_error && !elsewhere.join("new").exists(),
        "write 不能借链接链在 workspace 之外建文件"
    );
}

#[tokio::test]
async fn adjacent_edits_are_not_overlapping() {
    let scratch = Scratch::new("adjacent");
    let file = scratch.project().join("word.txt");
    std::fs::write(&file, "abcdef").expect("测试需要能写文件");
    let tools = CodingTools::new(scratch.project()).expect("project 是存在的目录");
    let result = call(
        &tools,
        "edit",
        json!({"path": "word.txt", "edits": [
            {"oldText": "def", "newText": "DEF"},
            {"oldText": "abc", "newText": "ABC"}
        ]}),
    )
    .await;
    assert_eq!(
        (body(&result), std::fs::read_to_string(&file).ok()),
        (
            "已在 word.txt 中替换 2 处".to_string(),
            Some("ABCDEF".to_string())
        ),
        "一个修改的结尾正好是另一个的开头：相邻不算重叠"
    );
}

#[tokio::test]
async fn an_empty_write_creates_an_empty_file() {
    let scratch = Scratch::new("empty");
    let tools = CodingTools::new(scratch.project()).expect("project 是存在的目录");
    let result = call(
        &tools,
        "write",
        json!({"path": "logs/empty.log", "content": ""}),
    )
    .await;
    assert_eq!(
        (
            body(&result),
            std::fs::read_to_string(scratch.project().join("logs/empty.log")).ok()
        ),
        (
            "已写入 0 字节：logs/empty.log".to_string(),
            Some(String::new())
        ),
        "空内容也是一次完整的写入"
    );
}

#[tokio::test]
async fn quiet_failures_and_stderr_only_successes() {
    let scratch = Scratch::new("quiet");
    let tools = CodingTools::new(scratch.project()).expect("project 是存在的目录");
    let failed = call(&tools, "bash", json!({"command": "exit 7"})).await;
    assert_eq!(
        (body(&failed), failed.is_error),
        ("[退出码 7]".to_string(), true),
        "没有输出的失败命令只有状态行"
    );
    let warned = call(&tools, "bash", json!({"command": "echo careful >&2"})).await;
    assert_eq!(
        (body(&warned), warned.is_error),
        ("careful\n".to_string(), false),
        "只写 stderr 的成功命令：输出照样返回，不是错误"
    );
}

#[tokio::test]
async fn a_batch_edit_of_a_crlf_file_with_a_bom() {
    let scratch = Scratch::new("crlf-bom");
    let file = scratch.project().join("config.ini");
    std::fs::write(&file, "\u{feff}[a]\r\nx = 1\r\n[b]\r\ny = 2\r\n").expect("测试需要能写文件");
    let tools = CodingTools::new(scratch.project()).expect("project 是存在的目录");
    let result = call(
        &tools,
        "edit",
        json!({"path": "config.ini", "edits": [
            {"oldText": "[b]\ny", "newText": "[b]\nz"},
            {"oldText": "x = 1", "newText": "x = 10\n# changed"}
        ]}),
    )
    .await;
    assert_eq!(
        (body(&result), std::fs::read_to_string(&file).ok()),
        (
            "已在 config.ini 中替换 2 处".to_string(),
            Some("\u{feff}[a]\r\nx = 10\r\n# changed\r\n[b]\r\nz = 2\r\n".to_string())
        ),
        "BOM 留在开头，一批修改按 LF 写也能匹配，新文字用文件的 CRLF"
    );
}

#[test]
fn a_tail_cut_through_two_byte_characters_keeps_whole_ones() {
    let accents = "é".repeat(200);
    let mut capture = OutputCapture::new(101);
    for chunk in accents.as_bytes().chunks(7) {
        capture.push(chunk);
    }
    let note = bash_truncation_note(400, 101, None);
    let room = 101 - note.len();
    assert_eq!(
        capture.finish(None),
        (format!("{note}{}", "é".repeat(room / 2)), true),
        "两字节的字符被切开时，结尾从下一个完整的字符开始，总长不超过上限"
    );
}

#[tokio::test]
async fn secret_names_are_found_in_any_case_and_position() {
    let scratch = Scratch::new("secrets");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let tools = CodingTools::new(scratch.project())
        .expect("project 是存在的目录")
        .with_environment([
            ("PATH", path.into_string().unwrap_or_default()),
            ("Session_Token", "t".to_string()),
            ("db_password_file", "p".to_string()),
            ("X_SECRET_Y", "s".to_string()),
            ("apikey", "k".to_string()),
            ("KY", "kept".to_string()),
        ]);
    let result = call(&tools, "bash", json!({"command": "env"})).await;
    let names: Vec<String> = body(&result)
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name.to_string()))
        .collect();
    let has = |name: &str| names.iter().any(|each| each == name);
    assert_eq!(
        (
            has("Session_Token"),
            has("db_password_file"),
            has("X_SECRET_Y"),
            has("apikey"),
            has("KY")
        ),
        (false, false, false, false, true),
        "名字里任何位置、任何大小写带着 KEY、TOKEN、SECRET 或 PASSWORD 的变量都不进入命令的环境，其余照常"
    );
}
