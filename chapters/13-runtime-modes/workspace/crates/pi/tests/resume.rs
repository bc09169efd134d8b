//! Chapter 13: a resumed session gets pi's instructions as they are now. The runtime wants
//! pi's system prompt and the project's resources on every start and appends a system patch
//! only when they differ from the transcript's (the chapter's rule), so an edited AGENTS.md
//! reaches the model on `pi -c`, and an unchanged one adds nothing to the file.

mod support;

use std::path::{Path, PathBuf};

use openai_mock::{MockServer, Recorded, Reply};
use serde_json::Value;
use support::{text, Scratch};

/// The system messages a request carried, in order.
fn systems(request: &Recorded) -> Vec<String> {
    request.json()["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|message| message["role"] == "system")
        .map(|message| message["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The one session file under `home`.
fn session_file(home: &Path) -> PathBuf {
    let root = home.join(".local/state/pi/sessions");
    let files: Vec<PathBuf> = walk(&root);
    assert_eq!(files.len(), 1, "一个目录一个会话文件：{files:?}");
    files.into_iter().next().unwrap_or_default()
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// How many entries of the session file hold a system message.
fn system_entries(file: &Path) -> usize {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|entry| entry["message"]["role"] == "system")
        .count()
}

// pi's prompt states the UTC date, so a run that crossed midnight between the first two
// starts would rightly add a patch too; the three starts take well under a second.
#[tokio::test]
async fn a_resumed_session_sees_the_agents_md_of_now_and_only_a_change_is_patched() {
    let scratch = Scratch::new("resume", "agents-md");
    let (home, work) = (scratch.path().join("home"), scratch.path().join("work"));
    std::fs::create_dir_all(work.join(".git")).expect("能建工作目录");
    std::fs::create_dir_all(&home).expect("能建 HOME");
    std::fs::write(work.join("AGENTS.md"), "Old rules.\n").expect("能写 AGENTS.md");
    let server = MockServer::start(vec![
        Reply::text("一。"),
        Reply::text("二。"),
        Reply::text("三。"),
    ])
    .await
    .expect("本地服务器应当能启动");
    let run = |args: &'static [&'static str]| {
        support::run(support::pi(&server.base_url(), &home, &work, args))
    };
    for (args, step) in [
        (&["-p", "第一个任务"][..], "新会话"),
        (&["-c", "-p", "第二个任务"][..], "说明没变时继续"),
    ] {
        let output = run(args).await;
        assert_eq!(
            output.status.code(),
            Some(0),
            "{step}：stderr：{}",
            text(&output.stderr)
        );
    }
    let file = session_file(&home);
    assert_eq!(
        system_entries(&file),
        1,
        "说明没变：继续会话不追加 system 补丁"
    );
    std::fs::write(work.join("AGENTS.md"), "New rules.\n").expect("能改 AGENTS.md");
    let output = run(&["-c", "-p", "第三个任务"]).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "说明改了之后继续：stderr：{}",
        text(&output.stderr)
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 3, "三个任务三次模型调用");
    let second = systems(&requests[1]);
    assert_eq!(second.len(), 1, "模型只看到一条 system message：{second:?}");
    assert!(
        second[0].ends_with("## AGENTS.md\n\nOld rules."),
        "没变的说明原样留在 system message 里：{second:?}"
    );
    let third = systems(&requests[2]);
    assert_eq!(
        third.len(),
        1,
        "补丁之后模型也只看到最新的 system message：{third:?}"
    );
    assert!(
        third[0].ends_with("## AGENTS.md\n\nNew rules."),
        "改过的 AGENTS.md 在继续的会话里生效：{third:?}"
    );
    assert_eq!(
        system_entries(&file),
        2,
        "说明改了：会话文件多了一条 system 补丁，旧的那条原样留着"
    );
}
