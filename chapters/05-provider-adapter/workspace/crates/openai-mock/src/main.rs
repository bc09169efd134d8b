//! `cargo run -q -p openai-mock -- [--port N] [--script FILE]`: serves a scripted
//! conversation on 127.0.0.1 until Ctrl-C, so an agent can be tried without a real model.
//!
//! Without `--script` it plays a four-turn demo: read `notes.txt`, replace `TODO` with `DONE`
//! in it, run `cat notes.txt`, then say it is done. A script file is a JSON array of turns,
//! each `{"text": "…"}` or `{"tool_calls": [{"name": "read", "arguments": {…}}, …]}`.
//! Turns are chosen by how many assistant messages a request carries, so every new run of
//! the agent starts the script from the top.

use std::process::ExitCode;

use openai_mock::{Dispatch, MockServer, Reply};
use serde_json::{json, Value};

fn demo() -> Vec<Reply> {
    vec![
        Reply::tool_calls(&[("call_read", "read", json!({"path": "notes.txt"}))]),
        Reply::tool_calls(&[(
            "call_edit",
            "edit",
            json!({"path": "notes.txt", "oldText": "TODO", "newText": "DONE"}),
        )]),
        Reply::tool_calls(&[("call_bash", "bash", json!({"command": "cat notes.txt"}))]),
        Reply::text("notes.txt 里的 TODO 已经改成 DONE。"),
    ]
}

/// One turn of a script file.
fn turn(index: usize, value: &Value) -> Result<Reply, String> {
    if let Some(text) = value["text"].as_str() {
        return Ok(Reply::text(text));
    }
    let Some(calls) = value["tool_calls"].as_array() else {
        return Err(format!("第 {index} 个回合既没有 text 也没有 tool_calls"));
    };
    let mut parsed = Vec::new();
    for (position, call) in calls.iter().enumerate() {
        let Some(name) = call["name"].as_str() else {
            return Err(format!("第 {index} 个回合的第 {position} 个调用缺少 name"));
        };
        parsed.push((
            format!("call_{index}_{position}"),
            name.to_string(),
            call["arguments"].clone(),
        ));
    }
    Ok(Reply::tool_calls(&parsed))
}

fn load_script(path: &str) -> Result<Vec<Reply>, String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("读不了 {path}：{error}"))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|error| format!("{path} 不是合法 JSON：{error}"))?;
    let Some(turns) = value.as_array() else {
        return Err(format!("{path} 必须是一个回合数组"));
    };
    turns
        .iter()
        .enumerate()
        .map(|(index, value)| turn(index + 1, value))
        .collect()
}

struct Options {
    port: u16,
    script: Option<String>,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options {
        port: 0,
        script: None,
    };
    let mut args = args;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--port" => {
                let value = args.next().ok_or("--port 后面要跟端口号")?;
                options.port = value
                    .parse()
                    .map_err(|_| format!("端口号不合法：{value}"))?;
            }
            "--script" => options.script = Some(args.next().ok_or("--script 后面要跟文件路径")?),
            other => {
                return Err(format!(
                    "不认识的参数：{other}（可用：--port N、--script FILE）"
                ))
            }
        }
    }
    Ok(options)
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("openai-mock：{message}");
            return ExitCode::from(2);
        }
    };
    let script = match &options.script {
        Some(path) => match load_script(path) {
            Ok(script) => script,
            Err(message) => {
                eprintln!("openai-mock：{message}");
                return ExitCode::from(2);
            }
        },
        None => demo(),
    };
    let server = match MockServer::start_with(Dispatch::ByTurn, script, options.port).await {
        Ok(server) => server,
        Err(error) => {
            eprintln!("openai-mock：无法监听 127.0.0.1:{}：{error}", options.port);
            return ExitCode::from(1);
        }
    };
    println!(
        "openai-mock 正在 {} 上回放脚本；按 Ctrl-C 停止。",
        server.base_url()
    );
    println!("在另一个终端里：");
    println!("  export OPENAI_COMPATIBLE_BASE_URL={}", server.base_url());
    println!("  export OPENAI_COMPATIBLE_API_KEY=local-test-key");
    println!("  export OPENAI_COMPATIBLE_MODEL=scripted");
    if tokio::signal::ctrl_c().await.is_err() {
        eprintln!("openai-mock：无法等待 Ctrl-C");
        return ExitCode::from(1);
    }
    println!(
        "openai-mock 已停止，共收到 {} 个请求。",
        server.requests().len()
    );
    ExitCode::SUCCESS
}
