//! Held-out tests for chapter 10 (instructor only): other ids and depths, other line numbers,
//! other fault points (a write that loses only its newline, a write that lands whole and still
//! reports an error).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pi_course::session_tree::*;
use pi_course::types::*;
use serde_json::json;

fn note(id: &str, parent: Option<&str>) -> SessionEntry {
    let message = AgentMessage::User(UserMessage {
        content: vec![TextContent {
            text: format!("note {id}"),
        }],
        timestamp: 42,
    });
    SessionEntry::message(id, parent, 42, message)
}

fn line(entry: &SessionEntry) -> String {
    format!(
        "{}\n",
        serde_json::to_string(entry).expect("entry 总能序列化")
    )
}

async fn append(store: &JsonlSessionStore, entry: &SessionEntry) -> Result<(), AppendError> {
    tokio::time::timeout(Duration::from_secs(1), store.append(entry))
        .await
        .expect("append 的 future 必须在 1 秒内完成")
}

#[test]
fn a_deep_branch_with_other_ids_and_a_late_duplicate() {
    let mut entries: Vec<SessionEntry> = (0..12)
        .rev()
        .map(|depth| {
            let parent = (depth > 0).then(|| format!("n-{}", depth - 1));
            note(&format!("n-{depth}"), parent.as_deref())
        })
        .collect();
    entries.push(SessionEntry::metadata(
        "side",
        Some("n-3"),
        1,
        "label",
        json!(null),
    ));
    let branch = path_to(&entries, "n-11").expect("完整的深分支必须能选出");
    let ids: Vec<String> = branch.iter().map(|entry| entry.id.clone()).collect();
    let expected: Vec<String> = (0..12).map(|depth| format!("n-{depth}")).collect();
    assert_eq!(ids, expected, "深分支也必须从根走到叶子");
    let side = messages_on_path(&entries, "side").expect("metadata 叶子也能投影");
    assert_eq!(side.len(), 4, "metadata 叶子的分支上只有 4 条消息");
    entries.push(note("n-7", Some("side")));
    assert_eq!(
        path_to(&entries, "n-2"),
        Err(PathError::DuplicateId("n-7".into())),
        "文件末尾的重复 id 也必须拒绝"
    );
}

#[test]
fn physical_line_numbers_with_crlf_and_many_blank_lines() {
    let a = note("x1", None);
    let b = note("x2", Some("x1"));
    let body = format!(
        "\n\n{}\r\n\n{}{}",
        line(&a).trim_end(),
        line(&b),
        &line(&note("x3", Some("x2")))[..30]
    );
    let read = recover_jsonl(body.as_bytes()).expect("CRLF 与多个空行都可以读");
    assert_eq!(read.entries, vec![a.clone(), b], "两条已提交的行都必须读出");
    assert_eq!(
        read.warnings,
        vec![Warning::UnterminatedTail { line: 6 }],
        "残行在第 6 行"
    );
    let bad = format!("\n{}\n\n\n[1, 2]\n", line(&a));
    let error = recover_jsonl(bad.as_bytes()).expect_err("第 6 行不是 entry");
    assert_eq!(error.line, 6, "坏行的物理行号是 6");
}

#[tokio::test]
async fn a_write_that_loses_only_its_newline_is_uncommitted() {
    let path = PathBuf::from("/held/out.jsonl");
    let io = Arc::new(MemoryFileIo::new());
    let store = JsonlSessionStore::open(&path, io.clone()).expect("新文件必须能打开");
    let root = note("r", None);
    assert_eq!(append(&store, &root).await, Ok(()), "第一条必须写入");
    let child = note("k", Some("r"));
    io.fail_next_append(line(&child).len() - 1);
    assert!(
        matches!(append(&store, &child).await, Err(AppendError::Io(_))),
        "注入的故障必须报 Io"
    );
    drop(store);
    let reopened = JsonlSessionStore::open(&path, io.clone()).expect("必须能只读打开");
    assert_eq!(
        reopened.health(),
        Health::NeedsRepair { tail_line: 2 },
        "完整的 JSON 缺了换行也是残行"
    );
    assert_eq!(
        reopened.entries(),
        vec![root.clone()],
        "缺换行的那一条没有提交"
    );
    assert_eq!(
        reopened.repair().expect("必须能修复"),
        (line(&child).len() - 1) as u64,
        "repair 丢掉的正是那段残行"
    );
    assert_eq!(
        append(&reopened, &child).await,
        Ok(()),
        "修复后可以重写那一条"
    );
    assert_eq!(
        io.bytes(&path).expect("文件存在"),
        format!("{}{}", line(&root), line(&child)).into_bytes(),
        "修复后的文件只有两条完整的行"
    );
}

#[tokio::test]
async fn a_write_that_landed_but_failed_still_closes_the_writer() {
    let path = PathBuf::from("/held/landed.jsonl");
    let io = Arc::new(MemoryFileIo::new());
    let store = JsonlSessionStore::open(&path, io.clone()).expect("新文件必须能打开");
    let root = note("only", None);
    io.fail_next_append(usize::MAX);
    assert!(
        matches!(append(&store, &root).await, Err(AppendError::Io(_))),
        "报告失败的写入必须报 Io"
    );
    assert_eq!(store.health(), Health::Tainted, "报告失败就关闭 writer");
    assert_eq!(store.entries(), vec![], "报告失败的 entry 不算已提交");
    let reopened = JsonlSessionStore::open(&path, io).expect("必须能重开");
    assert_eq!(
        (reopened.health(), reopened.entries()),
        (Health::Ready, vec![root]),
        "重开时由文件决定：整行都在，它就是已提交的"
    );
}
