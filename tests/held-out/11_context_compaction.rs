//! Chapter 11 held-out tests: run only by the instructor's verify, never copied into a
//! practice workspace. They vary ids, budgets and estimators; each demands only behaviour the
//! guide or a public test states.

use pi_course::context_compaction::*;
use pi_course::session_tree::*;
use pi_course::types::*;
use serde_json::json;

fn entry(id: &str, parent: Option<&str>, message: AgentMessage) -> SessionEntry {
    SessionEntry::message(id, parent, 7, message)
}

fn text(text: &str) -> Vec<TextContent> {
    vec![TextContent { text: text.into() }]
}

fn ask(text_: &str) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: text(text_),
        timestamp: 7,
    })
}

fn calls(ids: &[&str]) -> AgentMessage {
    AgentMessage::Assistant(AssistantMessage {
        content: ids
            .iter()
            .map(|id| {
                AssistantContent::ToolCall(ToolCall {
                    id: id.to_string(),
                    name: "bash".into(),
                    arguments: json!({"command": "ls"}),
                    raw_arguments: None,
                })
            })
            .collect(),
        thinking: None,
        provider: "p".into(),
        model: "m".into(),
        usage: Usage::EMPTY,
        stop_reason: StopReason::ToolUse,
        error_message: None,
        timestamp: 7,
    })
}

fn answers(call: &str, output: &str) -> AgentMessage {
    AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: call.into(),
        tool_name: "bash".into(),
        content: text(output),
        details: None,
        is_error: false,
        timestamp: 7,
    })
}

/// Bytes of JSON: a different deterministic estimator from the public tests'.
fn json_bytes(message: &AgentMessage) -> u64 {
    serde_json::to_vec(message).map_or(0, |bytes| bytes.len() as u64)
}

/// q-0 … q-(n-1), each a question, three parallel calls answered in reverse order.
fn long_branch(n: usize) -> Vec<SessionEntry> {
    let mut path: Vec<SessionEntry> = Vec::new();
    let mut push = |id: String, message: AgentMessage| {
        let parent = path.last().map(|e: &SessionEntry| e.id.clone());
        path.push(entry(&id, parent.as_deref(), message));
    };
    for k in 0..n {
        push(format!("q-{k}"), ask(&format!("第 {k} 个问题")));
        let ids: Vec<String> = (0..3).map(|j| format!("x{k}.{j}")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        push(format!("t-{k}"), calls(&refs));
        for j in (0..3).rev() {
            push(format!("o-{k}.{j}"), answers(&ids[j], "输出"));
        }
    }
    path
}

#[test]
fn other_ids_and_a_byte_estimator_keep_whole_recent_interactions() {
    let path = long_branch(6);
    let groups = group_interactions(&path).expect("逆序到达的结果也按调用 id 配对");
    assert_eq!(groups.len(), 6, "六个问题就是六次交互");
    let one: u64 = groups[5].messages().map(json_bytes).sum();
    let budget = Budget {
        context_window: 3 * one + 100,
        reserved_output: 60,
        safety_margin: 40,
    };
    let built = build_context(&[], &groups, &budget, &json_bytes);
    assert_eq!(
        built.fit,
        Fit::Trimmed { dropped: 3 },
        "用调用者的字节估计器：放得下恰好三次交互"
    );
    assert_eq!(
        built.first_kept_entry_id.as_deref(),
        Some("q-3"),
        "保留的是最近的三次"
    );
    assert_eq!(built.messages.len(), 15, "每次交互 5 条消息，整段保留");
}

#[test]
fn a_second_and_third_compaction_replace_the_summary() {
    let mut path = long_branch(4);
    for (k, (id, kept)) in [("cmp-a", "q-1"), ("cmp-b", "q-2"), ("cmp-c", "q-3")]
        .into_iter()
        .enumerate()
    {
        let made =
            create_compaction_entry(&path, id, 40 + k as u64, &format!("摘要 {k}"), kept, 10)
                .expect("每次压缩都切在可见交互的开头");
        path.push(made);
    }
    assert_eq!(
        create_compaction_entry(&path, "cmp-d", 50, "摘要", "q-2", 10),
        Err(CompactionError::NotAnInteractionStart("q-2".into())),
        "已经被最新摘要覆盖的交互不能再作为保留起点"
    );
    let resumed = resume_context(
        &path,
        &Budget {
            context_window: 1_000_000,
            reserved_output: 0,
            safety_margin: 0,
        },
        &|_| 2,
    )
    .expect("多次压缩后仍能恢复");
    assert_eq!(
        resumed.messages[0],
        AgentMessage::User(UserMessage {
            content: text(&format!("{SUMMARY_PREFIX}摘要 2")),
            timestamp: 42,
        }),
        "只有最新的摘要，放在最前面（这条路径没有 system 消息）"
    );
    assert_eq!(resumed.messages.len(), 1 + 5, "摘要加最后一次交互");
    assert_eq!(resumed.tokens, 12, "每条消息算 2，摘要只算一次");
}

#[test]
fn a_compaction_round_trips_through_a_real_file() {
    use std::sync::Arc;
    let dir = std::env::temp_dir().join(format!("pi-course-11-held-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("测试需要临时目录");
    let file = dir.join("s.jsonl");
    let path = long_branch(2);
    let compaction = create_compaction_entry(&path, "zz", 77, "第一段做完了", "q-1", 4_242)
        .expect("q-1 是交互开头");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = JsonlSessionStore::open(&file, Arc::new(StdFileIo)).expect("新文件能打开");
        for entry in path.iter().chain([&compaction]) {
            assert_eq!(store.append(entry).await, Ok(()), "每条 entry 都要写下");
        }
    });
    let again = JsonlSessionStore::open(&file, Arc::new(StdFileIo)).expect("重新打开");
    assert_eq!(
        again.entries().last(),
        Some(&compaction),
        "真实文件里的压缩 entry 原样读回"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
