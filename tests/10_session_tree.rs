//! Chapter 10 acceptance tests: the session tree in JSON Lines. Each `mod` is a test group;
//! group k is Lab 10.k.

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use pi_course::session_tree::*;
use pi_course::types::*;
use serde_json::{json, Value};

/// Awaits `future`, failing with `rule` if it is still pending after a second.
async fn soon<F: Future>(future: F, rule: &str) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(1), future).await {
        Ok(value) => value,
        Err(_) => panic!("1 秒内没有完成：{rule}"),
    }
}

fn user(text: &str, timestamp: u64) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: vec![TextContent { text: text.into() }],
        timestamp,
    })
}

fn message(id: &str, parent: Option<&str>, text: &str) -> SessionEntry {
    SessionEntry::message(id, parent, 1_000, user(text, 1_000))
}

fn ids(entries: &[SessionEntry]) -> Vec<&str> {
    entries.iter().map(|entry| entry.id.as_str()).collect()
}

fn line(entry: &SessionEntry) -> String {
    let mut text = serde_json::to_string(entry).expect("entry 总能序列化");
    text.push('\n');
    text
}

fn tool_turn() -> (AgentMessage, AgentMessage) {
    let assistant = AgentMessage::Assistant(AssistantMessage {
        content: vec![
            AssistantContent::Text(TextContent {
                text: "先看看文件".into(),
            }),
            AssistantContent::ToolCall(ToolCall {
                id: "call_7".into(),
                name: "read".into(),
                arguments: json!({"path": "src/main.rs", "limit": 20, "nested": {"flags": [true, null]}}),
                raw_arguments: Some("{\"path\":\"src/main.rs\",\"limit\":20}".into()),
            }),
        ],
        thinking: None,
        provider: "openai".into(),
        model: "gpt-test".into(),
        usage: Usage {
            input: 12,
            output: 5,
            total_tokens: 17,
        },
        stop_reason: StopReason::ToolUse,
        error_message: None,
        timestamp: 2_000,
    });
    let result = AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: "call_7".into(),
        tool_name: "read".into(),
        content: vec![TextContent {
            text: "fn main() {}".into(),
        }],
        details: Some(json!({"lines": 1, "truncated": false})),
        is_error: false,
        timestamp: 2_001,
    });
    (assistant, result)
}

mod path {
    use super::*;

    /// root ── a ── b ── c
    ///         └─ d          (stored out of order on purpose)
    fn tree() -> Vec<SessionEntry> {
        vec![
            message("c", Some("b"), "c"),
            message("root", None, "root"),
            message("d", Some("a"), "d"),
            message("a", Some("root"), "a"),
            message("b", Some("a"), "b"),
        ]
    }

    #[test]
    fn the_branch_runs_from_the_root_to_the_leaf() {
        let entries = tree();
        let branch = path_to(&entries, "c").expect("c 的祖先链完整，必须能选出分支");
        assert_eq!(
            ids(&branch),
            ["root", "a", "b", "c"],
            "分支必须从根走到叶子，按父子顺序而不是文件顺序"
        );
        let other = path_to(&entries, "d").expect("d 的祖先链完整，必须能选出分支");
        assert_eq!(
            ids(&other),
            ["root", "a", "d"],
            "兄弟分支上的 entry 不能出现在所选分支里"
        );
        let root = path_to(&entries, "root").expect("根自己就是一条分支");
        assert_eq!(ids(&root), ["root"], "叶子是根时，分支只有根");
        assert_eq!(
            branch[3], entries[0],
            "分支里的 entry 必须和文件里的完全相同"
        );
    }

    #[test]
    fn only_the_chosen_ancestor_chain_is_diagnosed() {
        let mut entries = tree();
        entries.push(message("orphan", Some("lost"), "orphan"));
        let branch = path_to(&entries, "c").expect("别的分支断了，不能影响所选的分支");
        assert_eq!(
            ids(&branch),
            ["root", "a", "b", "c"],
            "别的分支断了，所选的分支照常返回"
        );
        assert_eq!(
            path_to(&entries, "orphan"),
            Err(PathError::MissingParent {
                id: "orphan".into(),
                parent: "lost".into()
            }),
            "所选分支上父节点缺失时，必须指出是哪个 entry 缺了哪个父节点"
        );
        assert_eq!(
            path_to(&entries, "nobody"),
            Err(PathError::UnknownLeaf("nobody".into())),
            "叶子不存在时必须报 UnknownLeaf，不能返回空分支"
        );
    }

    #[test]
    fn a_duplicate_id_is_refused_anywhere_in_the_file() {
        let mut entries = tree();
        entries.push(message("d", Some("root"), "第二个 d"));
        assert_eq!(
            path_to(&entries, "c"),
            Err(PathError::DuplicateId("d".into())),
            "重复的 id 即使不在所选分支上也必须拒绝：一个 id 只能指一个事实"
        );
        let error = PathError::DuplicateId("d".into()).to_string();
        assert!(
            error.contains('d'),
            "重复 id 的错误信息必须说出是哪个 id，实际是 {error:?}"
        );
    }

    #[test]
    fn a_cycle_is_refused_instead_of_looping() {
        let entries = vec![
            message("p", Some("q"), "p"),
            message("q", Some("p"), "q"),
            message("leaf", Some("p"), "leaf"),
        ];
        let found = path_to(&entries, "leaf");
        assert!(
            matches!(&found, Err(PathError::Cycle(id)) if id == "p" || id == "q"),
            "祖先链成环时必须报 Cycle 并停下，不能无限循环，实际是 {found:?}"
        );
    }
}

mod parser {
    use super::*;

    fn parse(value: Value) -> Result<SessionEntry, EntryError> {
        parse_session_entry(&value)
    }

    fn refused(value: Value, field: &str, rule: &str) {
        match parse(value) {
            Err(error) => assert_eq!(
                error.field, field,
                "{rule}：错误必须指出字段 {field}，实际是 {error}"
            ),
            Ok(entry) => panic!("{rule}：必须拒绝，实际解析成了 {entry:?}"),
        }
    }

    fn user_entry() -> Value {
        json!({
            "id": "u1", "parentId": null, "timestamp": 1000, "type": "message",
            "message": {"role": "user", "content": [{"type": "text", "text": "你好"}], "timestamp": 1000}
        })
    }

    #[test]
    fn message_and_metadata_entries_are_narrowed_and_round_trip() {
        let (assistant, result) = tool_turn();
        let entries = [
            SessionEntry::message("a1", Some("u1"), 2_000, assistant),
            SessionEntry::message("r1", Some("a1"), 2_001, result),
            SessionEntry::metadata(
                "m1",
                None,
                5,
                "model",
                json!({"name": "gpt-test", "limits": [1, 2.5, null, "x"], "on": false}),
            ),
        ];
        for entry in entries {
            let written = serde_json::to_value(&entry).expect("entry 总能序列化");
            assert_eq!(
                parse(written.clone()),
                Ok(entry.clone()),
                "writer 写出的每个 entry 都必须能原样读回（嵌套的 arguments、details 与 value 也一样）"
            );
        }
        let parsed = parse(user_entry()).expect("合法的 user 消息 entry 必须能解析");
        assert_eq!(
            parsed,
            SessionEntry::message("u1", None, 1_000, user("你好", 1_000)),
            "parentId 为 null 的 entry 是根"
        );
        let written = serde_json::to_value(&parsed).expect("entry 总能序列化");
        assert_eq!(
            written["parentId"],
            Value::Null,
            "根的 parentId 必须写成 null，不能省略"
        );
        assert_eq!(
            written["type"], "message",
            "entry 的 type 标签必须是 message 或 metadata"
        );
    }

    #[test]
    fn system_messages_keep_their_sections_and_null() {
        let value = json!({
            "id": "s1", "parentId": null, "timestamp": 7, "type": "message",
            "message": {"role": "system", "content": "你是 pi", "sections": {"tools": "read", "old": null}, "timestamp": 7}
        });
        let entry = parse(value.clone()).expect("带 sections 的 system message 必须能解析");
        let EntryBody::Message {
            message: AgentMessage::System(system),
        } = &entry.body
        else {
            panic!("system message 必须解析成 AgentMessage::System，实际是 {entry:?}");
        };
        let sections = system.sections.as_ref().expect("sections 必须保留");
        assert_eq!(
            sections.get("old"),
            Some(&Value::Null),
            "值为 null 的 section 表示删除，必须原样保留 null"
        );
        assert_eq!(
            serde_json::to_value(&entry).expect("entry 总能序列化"),
            value,
            "system message 写回时 null 仍是 null"
        );
        let mut bad = value.clone();
        bad["message"]["sections"]["tools"] = json!(3);
        refused(
            bad,
            "message.sections.tools",
            "section 的值只能是字符串或 null",
        );
        let mut bad = value;
        bad["message"]["content"] = json!(["你是 pi"]);
        refused(
            bad,
            "message.content",
            "system message 的 content 必须是字符串",
        );
    }

    #[test]
    fn unknown_fields_are_refused_with_their_path() {
        let mut extra = user_entry();
        extra["label"] = json!("x");
        refused(extra, "label", "entry 里的未知字段必须拒绝");
        let mut nested = user_entry();
        nested["message"]["content"][0]["bold"] = json!(true);
        refused(
            nested,
            "message.content[0].bold",
            "内容块里的未知字段必须拒绝",
        );
        let mut in_message = user_entry();
        in_message["message"]["name"] = json!("me");
        refused(in_message, "message.name", "消息里的未知字段必须拒绝");
    }

    #[test]
    fn unknown_entry_types_and_roles_are_refused() {
        let mut kind = user_entry();
        kind["type"] = json!("label");
        refused(kind, "type", "未知的 entry 类型必须拒绝");
        let mut role = user_entry();
        role["message"]["role"] = json!("developer");
        refused(role, "message.role", "未知的消息角色必须拒绝");
        let mut block = user_entry();
        block["message"]["content"][0] = json!({"type": "image", "data": "..."});
        refused(
            block,
            "message.content[0].type",
            "user 消息里只能有 text 块",
        );
        refused(
            json!(["not", "an", "object"]),
            "(整行)",
            "不是 object 的一行必须拒绝",
        );
        let error = parse(json!({"id": "x", "parentId": null, "timestamp": 1, "type": "label"}))
            .expect_err("未知类型必须拒绝");
        assert!(
            error.to_string().contains("type"),
            "中文错误信息必须说出字段名，实际是 {error}"
        );
    }

    #[test]
    fn field_types_are_checked() {
        let cases = [
            ("id", json!(""), "id", "id 不能是空字符串"),
            ("id", json!(7), "id", "id 必须是字符串"),
            (
                "parentId",
                json!(3),
                "parentId",
                "parentId 必须是字符串或 null",
            ),
            ("timestamp", json!(-1), "timestamp", "timestamp 不能是负数"),
            ("timestamp", json!(1.5), "timestamp", "timestamp 必须是整数"),
            (
                "timestamp",
                json!("1000"),
                "timestamp",
                "timestamp 不能是字符串",
            ),
        ];
        for (key, bad, field, rule) in cases {
            let mut value = user_entry();
            value[key] = bad;
            refused(value, field, rule);
        }
        let mut missing = user_entry();
        missing
            .as_object_mut()
            .expect("user_entry 是 object")
            .remove("parentId");
        refused(
            missing,
            "parentId",
            "parentId 必须写出来：根写 null，不能省略",
        );
        let (_, result) = tool_turn();
        let mut value = serde_json::to_value(SessionEntry::message("r", None, 1, result))
            .expect("entry 总能序列化");
        value["message"]["isError"] = json!("no");
        refused(value, "message.isError", "isError 必须是布尔值");
    }

    #[test]
    fn numbers_other_readers_cannot_hold_exactly_are_refused() {
        let safe = (1u64 << 53) - 1;
        let metadata = |value: Value| json!({"id": "m", "parentId": null, "timestamp": 1, "type": "metadata", "key": "k", "value": value});
        parse(metadata(json!(safe))).expect("2^53 - 1 还在安全范围内，必须接受");
        parse(metadata(json!(-0.25))).expect("普通小数必须接受");
        refused(
            metadata(json!(safe + 1)),
            "value",
            "超出 2^53 - 1 的整数必须拒绝",
        );
        refused(
            metadata(json!({"big": [1, -(safe as i64) - 1]})),
            "value.big[1]",
            "嵌套的不安全负整数也必须拒绝，并指出位置",
        );
        let (assistant, _) = tool_turn();
        let mut value = serde_json::to_value(SessionEntry::message("a", None, 1, assistant))
            .expect("entry 总能序列化");
        value["message"]["content"][1]["arguments"]["limit"] = json!(u64::MAX);
        refused(
            value,
            "message.content[1].arguments.limit",
            "工具参数里的不安全整数必须拒绝",
        );
        let mut late = user_entry();
        late["timestamp"] = json!(safe + 1);
        refused(late, "timestamp", "timestamp 也不能超出 2^53 - 1");
    }
}

mod memory_store {
    use super::*;

    #[tokio::test]
    async fn appends_commit_in_call_order_whatever_the_await_order() {
        let store = InMemorySessionStore::new();
        let mut entry = message("a", None, "第一句");
        let first = store.append(&entry);
        entry.id = "b".into();
        entry.parent_id = Some("a".into());
        let second = store.append(&entry);
        entry.id = "changed".into();
        assert_eq!(
            soon(second, "内存 append 不该等待").await,
            Ok(()),
            "父节点在更早的调用里已被接受，子节点必须接受"
        );
        assert_eq!(
            soon(first, "内存 append 不该等待").await,
            Ok(()),
            "根 entry 必须接受"
        );
        assert_eq!(
            ids(&store.entries()),
            ["a", "b"],
            "提交顺序必须是调用顺序，而不是 await 的顺序；entry 必须在调用时取快照"
        );
    }

    #[tokio::test]
    async fn the_decision_is_made_at_the_call() {
        let store = InMemorySessionStore::new();
        let seed = store.append(&message("seed", None, "种子"));
        assert_eq!(
            soon(seed, "内存 append 不该等待").await,
            Ok(()),
            "第一个根必须接受"
        );
        let root = message("root", None, "根");
        drop(store.append(&root));
        assert_eq!(
            ids(&store.entries()),
            ["seed", "root"],
            "append 在调用时就提交：丢掉返回的 future 不能丢掉这次提交"
        );
        let again = store.append(&root);
        assert_eq!(
            soon(again, "内存 append 不该等待").await,
            Err(AppendError::DuplicateId("root".into())),
            "调用时已经存在的 id 必须拒绝"
        );
    }

    #[tokio::test]
    async fn a_missing_parent_or_a_duplicate_id_is_refused_without_disturbing_the_queue() {
        let store = InMemorySessionStore::new();
        let ok = store.append(&message("a", None, "a"));
        let orphan = store.append(&message("x", Some("ghost"), "x"));
        let dup = store.append(&message("a", None, "又一个 a"));
        let child = store.append(&message("b", Some("a"), "b"));
        assert_eq!(
            soon(ok, "内存 append 不该等待").await,
            Ok(()),
            "第一个 a 必须接受"
        );
        assert_eq!(
            soon(orphan, "内存 append 不该等待").await,
            Err(AppendError::MissingParent {
                id: "x".into(),
                parent: "ghost".into()
            }),
            "父节点不存在的 entry 必须拒绝"
        );
        assert_eq!(
            soon(dup, "内存 append 不该等待").await,
            Err(AppendError::DuplicateId("a".into())),
            "重复 id 必须拒绝"
        );
        assert_eq!(
            soon(child, "内存 append 不该等待").await,
            Ok(()),
            "被拒绝的 append 之后，合法的 append 照常接受"
        );
        assert_eq!(
            ids(&store.entries()),
            ["a", "b"],
            "被拒绝的 entry 不能进入 store，也不能打乱其余 entry 的顺序"
        );
        let retried = store.append(&message("x", None, "x 作为根"));
        assert_eq!(
            soon(retried, "内存 append 不该等待").await,
            Ok(()),
            "被拒绝的 append 不能占用它的 id"
        );
    }

    #[tokio::test]
    async fn entries_are_a_copy_and_roots_may_repeat() {
        let store = InMemorySessionStore::new();
        soon(
            store.append(&message("a", None, "a")),
            "内存 append 不该等待",
        )
        .await
        .expect("a 必须接受");
        soon(
            store.append(&message("z", None, "另一棵树")),
            "内存 append 不该等待",
        )
        .await
        .expect("一个文件里可以有多个根");
        let mut copy = store.entries();
        copy.clear();
        assert_eq!(
            ids(&store.entries()),
            ["a", "z"],
            "entries() 返回的是副本，改它不能改到 store"
        );
    }
}

mod recover {
    use super::*;

    fn text(entries: &[SessionEntry]) -> String {
        entries.iter().map(line).collect()
    }

    #[test]
    fn committed_lines_are_read_and_blank_lines_ignored() {
        let a = message("a", None, "a");
        let b = message("b", Some("a"), "b");
        let body = format!("{}\n   \n{}\r\n", line(&a), line(&b).trim_end());
        let read = recover_jsonl(body.as_bytes()).expect("只有空行和完整的行，必须能读");
        assert_eq!(
            read.entries,
            vec![a, b],
            "每个完整的行都是一个 entry，空行（包括只有空白的行）跳过"
        );
        assert_eq!(read.warnings, vec![], "完整的文件没有警告");
        assert_eq!(
            recover_jsonl(b""),
            Ok(SessionRead::default()),
            "0 字节的文件是一个空会话，不是错误"
        );
    }

    #[test]
    fn a_complete_entry_without_its_newline_is_not_committed() {
        let a = message("a", None, "a");
        let b = message("b", Some("a"), "b");
        let body = format!(
            "{}\n{}",
            text(std::slice::from_ref(&a)),
            line(&b).trim_end()
        );
        let read = recover_jsonl(body.as_bytes()).expect("无换行的尾部只是警告");
        assert_eq!(
            read.entries,
            vec![a],
            "没有换行的尾部即使是完整的 JSON 也没有提交，不能成为 entry"
        );
        assert_eq!(
            read.warnings,
            vec![Warning::UnterminatedTail { line: 3 }],
            "警告必须给出尾部的物理行号（空行也计数）"
        );
        assert_eq!(read.torn_tail(), Some(3), "torn_tail() 必须报告那一行");
    }

    #[test]
    fn any_tail_without_newline_is_uncommitted() {
        let a = message("a", None, "a");
        for tail in ["{\"id\":\"b\",\"par", "not json at all", "\u{7f}", "}"] {
            let body = format!("{}{tail}", line(&a));
            let read = recover_jsonl(body.as_bytes()).expect("无换行的尾部无论是什么都只是警告");
            assert_eq!(
                read.entries,
                vec![a.clone()],
                "尾部 {tail:?} 没有提交，不能成为 entry"
            );
            assert_eq!(
                read.warnings,
                vec![Warning::UnterminatedTail { line: 2 }],
                "尾部 {tail:?} 必须报告为第 2 行的警告"
            );
        }
        let only = recover_jsonl(b"{\"half\":").expect("只有一段残行的文件只是警告");
        assert_eq!(
            only.warnings,
            vec![Warning::UnterminatedTail { line: 1 }],
            "只有残行时它就是第 1 行"
        );
        let mut invalid_utf8 = line(&a).into_bytes();
        invalid_utf8.extend_from_slice(&[0xe4, 0xbd]);
        let cut = recover_jsonl(&invalid_utf8).expect("被截断在多字节字符中间的尾部也只是警告");
        assert_eq!(
            cut.entries,
            vec![a],
            "截断的 UTF-8 尾部不能影响前面已提交的行"
        );
    }

    #[test]
    fn a_bad_terminated_line_is_an_error_with_its_physical_line() {
        let a = message("a", None, "a");
        let body = format!(
            "{}\n{{\"id\": broken}}\n{}",
            line(&a),
            line(&message("b", Some("a"), "b"))
        );
        let error =
            recover_jsonl(body.as_bytes()).expect_err("已换行的坏 JSON 是已提交的损坏，必须报错");
        assert_eq!(error.line, 3, "坏行的行号必须是物理行号：空行也要计数");
        assert!(
            matches!(error.problem, LineProblem::NotJson(_)),
            "坏 JSON 必须报 NotJson，实际是 {:?}",
            error.problem
        );
        assert!(
            error.to_string().contains("第 3 行"),
            "中文错误信息必须写出行号，实际是 {error}"
        );
        let bytes = [line(&a).as_bytes(), &[0xff, 0xfe, b'\n']].concat();
        assert_eq!(
            recover_jsonl(&bytes).map_err(|error| (error.line, error.problem)),
            Err((2, LineProblem::NotUtf8)),
            "已换行的非 UTF-8 行必须报 NotUtf8 和它的行号"
        );
    }

    #[test]
    fn a_schema_error_on_a_terminated_line_names_line_and_field() {
        let a = message("a", None, "a");
        let unknown = r#"{"id":"b","parentId":"a","timestamp":1,"type":"label","text":"x"}"#;
        let body = format!("{}{unknown}\n{{\"tail\":", line(&a));
        let error = recover_jsonl(body.as_bytes())
            .expect_err("已换行的未知 entry 必须报错，即使后面还有残行");
        assert_eq!(error.line, 2, "schema 错误也必须报告物理行号");
        match &error.problem {
            LineProblem::NotEntry(entry_error) => {
                assert_eq!(entry_error.field, "type", "schema 错误必须指出字段")
            }
            other => panic!("合法 JSON 但不是 entry 时必须报 NotEntry，实际是 {other:?}"),
        }
    }
}

mod jsonl_store {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn file() -> PathBuf {
        PathBuf::from("/sessions/s1.jsonl")
    }

    fn memory_with(bytes: &str) -> Arc<MemoryFileIo> {
        Arc::new(MemoryFileIo::with_file(&file(), bytes.as_bytes()))
    }

    fn open(io: &Arc<MemoryFileIo>) -> JsonlSessionStore {
        JsonlSessionStore::open(&file(), io.clone()).expect("内存文件必须能打开")
    }

    fn on_disk(io: &MemoryFileIo) -> String {
        String::from_utf8(io.bytes(&file()).expect("文件必须存在")).expect("测试只写 UTF-8")
    }

    async fn append(store: &JsonlSessionStore, entry: &SessionEntry) -> Result<(), AppendError> {
        soon(
            store.append(entry),
            "append 的 future 必须在 writer 写完后完成",
        )
        .await
    }

    /// A fresh directory under the system temp dir.
    fn scratch(label: &str) -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pi-course-10-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("测试需要能在系统临时目录里建目录");
        dir
    }

    #[tokio::test]
    async fn opening_keeps_the_old_bytes_and_reopens_across_instances() {
        let a = message("a", None, "a");
        let old = format!("{}\n", line(&a));
        let io = memory_with(&old);
        let first = open(&io);
        assert_eq!(first.health(), Health::Ready, "完整的文件打开后可以写");
        assert_eq!(
            first.entries(),
            vec![a.clone()],
            "打开时必须读出已有的 entry"
        );
        let b = message("b", Some("a"), "b");
        assert_eq!(
            append(&first, &b).await,
            Ok(()),
            "父节点在文件里的 entry 必须接受"
        );
        assert_eq!(
            on_disk(&io),
            format!("{old}{}", line(&b)),
            "追加必须保留旧字节作为前缀，新行写在最后"
        );
        let second = open(&io);
        assert_eq!(
            second.entries(),
            vec![a, b.clone()],
            "另一个实例重开时必须看到之前提交的全部 entry"
        );
        let c = message("c", Some("b"), "c");
        assert_eq!(
            append(&second, &c).await,
            Ok(()),
            "重开后父节点来自文件，必须接受"
        );
        assert_eq!(
            append(&second, &b).await,
            Err(AppendError::DuplicateId("b".into())),
            "文件里已有的 id 重开后也不能再用"
        );
        let fresh = Arc::new(MemoryFileIo::new());
        let created =
            JsonlSessionStore::open(&file(), fresh.clone()).expect("不存在的文件必须被创建");
        assert_eq!(
            (created.entries(), on_disk(&fresh)),
            (vec![], String::new()),
            "新建的会话文件是空的"
        );
    }

    #[tokio::test]
    async fn a_real_file_is_appended_to_never_truncated() {
        let path = scratch("real").join("session.jsonl");
        let a = message("a", None, "a");
        std::fs::write(&path, line(&a)).expect("测试要能写临时文件");
        let store =
            JsonlSessionStore::open(&path, Arc::new(StdFileIo)).expect("已有的真实文件必须能打开");
        let b = message("b", Some("a"), "b");
        assert_eq!(
            append(&store, &b).await,
            Ok(()),
            "真实文件上的 append 必须成功"
        );
        drop(store);
        let text = std::fs::read_to_string(&path).expect("会话文件必须还在");
        assert_eq!(
            text,
            format!("{}{}", line(&a), line(&b)),
            "打开真实文件不能截断它，新行接在旧字节后面"
        );
        let reopened = JsonlSessionStore::open(&path, Arc::new(StdFileIo)).expect("必须能重开");
        assert_eq!(
            ids(&reopened.entries()),
            ["a", "b"],
            "重开真实文件必须读回两条 entry"
        );
        let _ = std::fs::remove_dir_all(path.parent().expect("有父目录"));
    }

    #[tokio::test]
    async fn lines_are_serialised_at_the_call_and_written_in_call_order() {
        let io = memory_with("");
        let store = open(&io);
        let mut entry = message("a", None, "a");
        let first = store.append(&entry);
        entry.id = "b".into();
        entry.parent_id = Some("a".into());
        let second = store.append(&entry);
        let expected_b = entry.clone();
        entry.id = "c".into();
        entry.parent_id = Some("b".into());
        let third = store.append(&entry);
        entry.timestamp = 99;
        assert_eq!(
            soon(third, "append 必须完成").await,
            Ok(()),
            "c 的父节点 b 在更早的调用里，必须接受"
        );
        assert_eq!(soon(second, "append 必须完成").await, Ok(()), "b 必须接受");
        assert_eq!(soon(first, "append 必须完成").await, Ok(()), "a 必须接受");
        let c = SessionEntry {
            timestamp: 1_000,
            ..entry
        };
        let expected = format!(
            "{}{}{}",
            line(&message("a", None, "a")),
            line(&expected_b),
            line(&c)
        );
        assert_eq!(
            on_disk(&io),
            expected,
            "行必须按调用顺序写入，内容是调用那一刻的 entry，每行以换行结束"
        );
        assert_eq!(
            ids(&store.entries()),
            ["a", "b", "c"],
            "entries() 必须按文件顺序"
        );
    }

    #[tokio::test]
    async fn a_refused_append_writes_nothing() {
        let io = memory_with("");
        let store = open(&io);
        let a = message("a", None, "a");
        let pending = store.append(&a);
        let dup = store.append(&a);
        let orphan = store.append(&message("x", Some("ghost"), "x"));
        assert_eq!(
            soon(dup, "append 必须完成").await,
            Err(AppendError::DuplicateId("a".into())),
            "已排队但还没写的 id 也算已占用"
        );
        assert_eq!(
            soon(orphan, "append 必须完成").await,
            Err(AppendError::MissingParent {
                id: "x".into(),
                parent: "ghost".into()
            }),
            "父节点不存在的 entry 必须拒绝"
        );
        assert_eq!(
            soon(pending, "append 必须完成").await,
            Ok(()),
            "被拒绝的 append 不能影响排在前面的 append"
        );
        assert_eq!(on_disk(&io), line(&a), "被拒绝的 append 一个字节也不能写");
    }

    #[tokio::test]
    async fn after_an_io_failure_the_writer_is_closed_for_good() {
        let io = memory_with("");
        let store = open(&io);
        let a = message("a", None, "a");
        assert_eq!(append(&store, &a).await, Ok(()), "第一条必须写入");
        io.fail_next_append(12);
        io.hold();
        let b = message("b", Some("a"), "b");
        let failing = store.append(&b);
        let queued = store.append(&message("c", Some("a"), "c"));
        io.release();
        let failed = soon(failing, "失败的 append 也必须完成").await;
        assert!(
            matches!(failed, Err(AppendError::Io(_))),
            "写入失败的 append 必须报 Io 错误，实际是 {failed:?}"
        );
        assert_eq!(
            soon(queued, "排队的 append 必须完成").await,
            Err(AppendError::Tainted),
            "失败之后排队的行不能写：文件末尾可能是半行"
        );
        assert_eq!(
            store.health(),
            Health::Tainted,
            "I/O 失败后 store 必须是 Tainted"
        );
        assert_eq!(
            append(&store, &message("d", Some("a"), "d")).await,
            Err(AppendError::Tainted),
            "Tainted 之后的新 append 必须立刻拒绝"
        );
        assert_eq!(
            on_disk(&io),
            format!("{}{}", line(&a), &line(&b)[..12]),
            "失败后不能再写任何字节"
        );
        assert_eq!(ids(&store.entries()), ["a"], "写失败的 entry 不能算已提交");
        assert!(
            matches!(store.repair(), Err(RepairError::Tainted)),
            "Tainted 的 writer 不能修复文件，必须先重开"
        );
    }

    #[tokio::test]
    async fn a_torn_tail_opens_read_only_until_repair() {
        let a = message("a", None, "a");
        let b = message("b", Some("a"), "b");
        let torn = format!("{}{}", line(&a), &line(&b)[..20]);
        let io = memory_with(&torn);
        let store = open(&io);
        assert_eq!(
            store.health(),
            Health::NeedsRepair { tail_line: 2 },
            "有残行的文件必须只读打开，并指出残行的行号"
        );
        assert_eq!(
            store.entries(),
            vec![a.clone()],
            "只读打开时已提交的 entry 照常可读"
        );
        assert_eq!(
            append(&store, &message("c", Some("a"), "c")).await,
            Err(AppendError::NeedsRepair { tail_line: 2 }),
            "修复之前不能追加：新行会和残行粘成一行"
        );
        assert_eq!(on_disk(&io), torn, "只读状态下文件一个字节都不能变");
        let dropped = store.repair().expect("用户要求修复时必须能修复");
        assert_eq!(dropped, 20, "repair 必须返回丢掉的字节数");
        assert_eq!(on_disk(&io), line(&a), "repair 必须把文件截到最后一个换行");
        assert_eq!(store.health(), Health::Ready, "修复后可以写");
        assert_eq!(
            append(&store, &b).await,
            Ok(()),
            "修复后残行里的 id 可以重新写"
        );
        assert_eq!(
            on_disk(&io),
            format!("{}{}", line(&a), line(&b)),
            "修复后的追加接在最后一个完整的行后面"
        );
        assert_eq!(
            store.repair().expect("没有残行时 repair 什么都不做"),
            0,
            "没有残行时 repair 不能截掉任何字节"
        );
        assert_eq!(
            on_disk(&io),
            format!("{}{}", line(&a), line(&b)),
            "没有残行时 repair 不能改文件"
        );
    }

    #[tokio::test]
    async fn reopening_after_a_failure_decides_from_the_file() {
        let a = message("a", None, "a");
        let io = memory_with(&line(&a));
        let store = open(&io);
        io.fail_next_append(0);
        let failed = append(&store, &message("b", Some("a"), "b")).await;
        assert!(
            matches!(failed, Err(AppendError::Io(_))),
            "注入的故障必须报 Io 错误，实际是 {failed:?}"
        );
        drop(store);
        let reopened = open(&io);
        assert_eq!(
            reopened.health(),
            Health::Ready,
            "失败时一个字节都没写，重开后文件是完整的，可以写"
        );
        assert_eq!(
            append(&reopened, &message("b", Some("a"), "b")).await,
            Ok(()),
            "重开后可以再写那条 entry"
        );
        let damaged = format!(
            "{}{{oops}}\n{}",
            line(&a),
            line(&message("b", Some("a"), "b"))
        );
        let broken = memory_with(&damaged);
        match JsonlSessionStore::open(&file(), broken.clone()) {
            Err(OpenError::Damaged(error)) => {
                assert_eq!(error.line, 2, "打开损坏的文件必须指出损坏的行号")
            }
            Err(other) => panic!("中间有坏行时必须报 Damaged，实际是 {other}"),
            Ok(_) => panic!("中间有坏行的文件不能打开：它不是课程写的会话"),
        }
        assert_eq!(on_disk(&broken), damaged, "打不开的文件一个字节都不能改");
    }

    #[tokio::test]
    async fn repair_cuts_a_real_file_to_its_last_newline() {
        let dir = scratch("repair");
        let path = dir.join("torn.jsonl");
        let a = message("a", None, "a");
        std::fs::write(&path, format!("{}{{\"id\":\"b\",", line(&a))).expect("测试要能写临时文件");
        let store = JsonlSessionStore::open(&path, Arc::new(StdFileIo))
            .expect("有残行的真实文件必须能只读打开");
        assert_eq!(
            store.health(),
            Health::NeedsRepair { tail_line: 2 },
            "真实文件的残行也必须只读打开"
        );
        assert_eq!(
            store.repair().expect("真实文件必须能修复"),
            10,
            "repair 必须返回丢掉的字节数"
        );
        assert_eq!(
            std::fs::read_to_string(&path).expect("文件还在"),
            line(&a),
            "repair 必须把真实文件截到最后一个换行"
        );
        assert_eq!(
            append(&store, &message("b", Some("a"), "b")).await,
            Ok(()),
            "修复后可以写"
        );
        assert_eq!(store.path(), Path::new(&path), "path() 返回打开的文件");
        let _ = std::fs::remove_dir_all(dir);
    }
}

mod messages {
    use super::*;

    fn session() -> Vec<SessionEntry> {
        let (assistant, result) = tool_turn();
        vec![
            SessionEntry::metadata("h", None, 1, "format", json!(1)),
            SessionEntry::message("u1", Some("h"), 2, user("读一下 main.rs", 2)),
            SessionEntry::message("a1", Some("u1"), 3, assistant),
            SessionEntry::message("r1", Some("a1"), 4, result),
            SessionEntry::message("u2", Some("r1"), 5, user("改成 hello", 5)),
            SessionEntry::message("u2b", Some("r1"), 6, user("算了，别改", 6)),
            SessionEntry::metadata("label", Some("u2b"), 7, "label", json!("fork")),
        ]
    }

    #[test]
    fn only_the_active_branch_is_projected() {
        let entries = session();
        let texts = |leaf: &str| -> Vec<String> {
            messages_on_path(&entries, leaf)
                .expect("祖先链完整，必须能投影")
                .iter()
                .map(text_of)
                .collect()
        };
        assert_eq!(
            texts("u2"),
            ["读一下 main.rs", "先看看文件", "fn main() {}", "改成 hello"],
            "只投影活动分支上的消息，按分支顺序"
        );
        assert_eq!(
            texts("label"),
            ["读一下 main.rs", "先看看文件", "fn main() {}", "算了，别改"],
            "metadata entry 不是消息，投影时跳过，另一条分支的消息不能出现"
        );
    }

    #[test]
    fn every_tool_fact_is_kept() {
        let entries = session();
        let (assistant, result) = tool_turn();
        let messages = messages_on_path(&entries, "r1").expect("祖先链完整，必须能投影");
        assert_eq!(messages.len(), 3, "r1 的分支上有三条消息");
        assert_eq!(
            messages[1], assistant,
            "工具调用的 id、arguments、rawArguments 与 usage 必须原样保留"
        );
        assert_eq!(
            messages[2], result,
            "工具结果的 toolCallId、details 与 isError 必须原样保留"
        );
    }

    #[test]
    fn the_projection_owns_its_data_and_reports_a_broken_branch() {
        let entries = session();
        let mut messages = messages_on_path(&entries, "r1").expect("祖先链完整，必须能投影");
        if let AgentMessage::ToolResult(result) = &mut messages[2] {
            result.details = None;
        }
        assert_eq!(entries, session(), "改投影结果不能改到输入的 entry");
        let mut broken = session();
        broken.push(SessionEntry::message("u1", None, 9, user("重复", 9)));
        assert_eq!(
            messages_on_path(&broken, "r1"),
            Err(PathError::DuplicateId("u1".into())),
            "重复 id 的文件不能投影"
        );
        assert_eq!(
            messages_on_path(&entries, "zz"),
            Err(PathError::UnknownLeaf("zz".into())),
            "叶子不存在时必须报错，不能投影出空 transcript"
        );
    }
}
