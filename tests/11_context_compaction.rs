//! Chapter 11 acceptance tests: context compaction. Each `mod` is a test group; group k is
//! Lab 11.k.

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use pi_course::context_compaction::*;
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

fn system(text: &str) -> AgentMessage {
    AgentMessage::System(SystemMessage {
        content: text.into(),
        sections: None,
        timestamp: 1,
    })
}

fn user(text: &str) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: vec![TextContent { text: text.into() }],
        timestamp: 2,
    })
}

fn assistant(text: &str, calls: &[&str]) -> AgentMessage {
    let mut content = vec![AssistantContent::Text(TextContent { text: text.into() })];
    content.extend(calls.iter().map(|id| {
        AssistantContent::ToolCall(ToolCall {
            id: id.to_string(),
            name: "read".into(),
            arguments: json!({"path": "README.md"}),
            raw_arguments: None,
        })
    }));
    AgentMessage::Assistant(AssistantMessage {
        content,
        thinking: None,
        provider: "openai".into(),
        model: "gpt-test".into(),
        usage: Usage::EMPTY,
        stop_reason: if calls.is_empty() {
            StopReason::Stop
        } else {
            StopReason::ToolUse
        },
        error_message: None,
        timestamp: 3,
    })
}

fn result(call: &str, text: &str) -> AgentMessage {
    AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: call.into(),
        tool_name: "read".into(),
        content: vec![TextContent { text: text.into() }],
        details: None,
        is_error: false,
        timestamp: 4,
    })
}

/// A branch built root first: every entry is the child of the one before.
#[derive(Default)]
struct Branch(Vec<SessionEntry>);

impl Branch {
    fn parent(&self) -> Option<String> {
        self.0.last().map(|entry| entry.id.clone())
    }

    fn says(mut self, id: &str, message: AgentMessage) -> Self {
        let parent = self.parent();
        self.0
            .push(SessionEntry::message(id, parent.as_deref(), 100, message));
        self
    }

    fn meta(mut self, id: &str) -> Self {
        let parent = self.parent();
        self.0.push(SessionEntry::metadata(
            id,
            parent.as_deref(),
            100,
            "model",
            json!("gpt-test"),
        ));
        self
    }

    fn compacts(mut self, id: &str, summary: &str, kept: &str) -> Self {
        let parent = self.parent();
        self.0.push(SessionEntry {
            id: id.into(),
            parent_id: parent,
            timestamp: 500,
            body: EntryBody::Compaction(Compaction {
                summary: summary.into(),
                first_kept_entry_id: kept.into(),
                tokens_before: 999,
            }),
        });
        self
    }
}

/// sys · u1 a1 · u2 a2(call c1) r1 a3 · u3 a4
fn three_interactions() -> Branch {
    Branch::default()
        .says("sys", system("你是 pi"))
        .says("u1", user("读 README"))
        .says("a1", assistant("好的", &[]))
        .says("u2", user("再读一次"))
        .says("a2", assistant("读", &["c1"]))
        .says("r1", result("c1", "# pi"))
        .says("a3", assistant("读完了", &[]))
        .says("u3", user("总结"))
        .says("a4", assistant("这是总结", &[]))
}

/// The test estimator: one token per character of text (not per byte), plus one per tool call.
fn chars(message: &AgentMessage) -> u64 {
    let count = |text: &str| text.chars().count() as u64;
    match message {
        AgentMessage::System(system) => count(&system.content),
        AgentMessage::User(user) => user.content.iter().map(|t| count(&t.text)).sum(),
        AgentMessage::Assistant(assistant) => assistant
            .content
            .iter()
            .map(|content| match content {
                AssistantContent::Text(text) => count(&text.text),
                AssistantContent::ToolCall(_) => 1,
            })
            .sum(),
        AgentMessage::ToolResult(result) => result.content.iter().map(|t| count(&t.text)).sum(),
    }
}

fn roomy() -> Budget {
    Budget {
        context_window: 10_000,
        reserved_output: 100,
        safety_margin: 10,
    }
}

fn group_ids(groups: &[Interaction<'_>]) -> Vec<Vec<String>> {
    groups
        .iter()
        .map(|group| group.entries.iter().map(|entry| entry.id.clone()).collect())
        .collect()
}

mod entry {
    use super::*;
    use std::path::PathBuf;
    use std::sync::Arc;

    fn compaction() -> SessionEntry {
        SessionEntry {
            id: "c1".into(),
            parent_id: Some("a4".into()),
            timestamp: 9_000,
            body: EntryBody::Compaction(Compaction {
                summary: "读过 README".into(),
                first_kept_entry_id: "u3".into(),
                tokens_before: 1_234,
            }),
        }
    }

    fn good() -> Value {
        json!({
            "id": "c1", "parentId": "a4", "timestamp": 9000, "type": "compaction",
            "summary": "读过 README", "firstKeptEntryId": "u3", "tokensBefore": 1234
        })
    }

    #[test]
    fn a_compaction_line_has_exactly_seven_fields_and_reads_back() {
        let entry = compaction();
        assert_eq!(
            serde_json::to_string(&entry).expect("entry 总能序列化"),
            r#"{"id":"c1","parentId":"a4","timestamp":9000,"type":"compaction","summary":"读过 README","firstKeptEntryId":"u3","tokensBefore":1234}"#,
            "压缩 entry 写成七个字段，字段名是 camelCase"
        );
        assert_eq!(
            parse_session_entry(&good()),
            Ok(entry),
            "写出的压缩 entry 必须能原样读回"
        );
    }

    #[test]
    fn missing_and_old_fields_are_refused() {
        let cases: [(&str, Value); 5] = [
            ("tokensBefore", json!(null)),
            ("firstKeptEntryIndex", json!(3)),
            ("details", json!({"readFiles": []})),
            ("summary", json!("")),
            ("firstKeptEntryId", json!(7)),
        ];
        for (field, value) in cases {
            let mut line = good();
            if value.is_null() {
                line.as_object_mut().expect("object").remove(field);
            } else {
                line[field] = value;
            }
            assert_eq!(
                parse_session_entry(&line).map_err(|error| error.field),
                Err(field.to_string()),
                "缺字段、旧字段、空摘要与错类型都必须拒绝：错误必须指出字段 {field}"
            );
        }
    }

    #[test]
    fn invalid_numbers_are_refused() {
        for bad in [json!(-1), json!(1.5), json!("12"), json!(1u64 << 53)] {
            let mut line = good();
            line["tokensBefore"] = bad.clone();
            assert_eq!(
                parse_session_entry(&line).map_err(|error| error.field),
                Err("tokensBefore".to_string()),
                "tokensBefore 必须是安全范围内的非负整数：{bad} 必须在 tokensBefore 上被拒绝"
            );
        }
        let mut line = good();
        line["tokensBefore"] = json!((1u64 << 53) - 1);
        assert!(
            parse_session_entry(&line).is_ok(),
            "2^53 - 1 是安全范围内最大的整数，必须接受"
        );
    }

    #[tokio::test]
    async fn both_stores_write_and_reopen_a_compaction() {
        let root = SessionEntry::message("a4", None, 100, user("开始"));
        let memory = InMemorySessionStore::new();
        for entry in [&root, &compaction()] {
            assert_eq!(
                soon(memory.append(entry), "内存 append 不该等待").await,
                Ok(()),
                "内存 store 必须接受父节点已知的压缩 entry"
            );
        }
        assert_eq!(
            memory.entries(),
            vec![root.clone(), compaction()],
            "内存 store 保存压缩 entry"
        );

        let file = PathBuf::from("/sessions/s11.jsonl");
        let io = Arc::new(MemoryFileIo::new());
        let store = JsonlSessionStore::open(&file, io.clone()).expect("新文件必须能打开");
        for entry in [&root, &compaction()] {
            assert_eq!(
                soon(store.append(entry), "append 必须在写完后完成").await,
                Ok(()),
                "JSONL store 必须写下压缩 entry"
            );
        }
        let again = JsonlSessionStore::open(&file, io.clone())
            .expect("写过压缩 entry 的文件必须能重新打开");
        assert_eq!(
            again.entries(),
            vec![root, compaction()],
            "重新打开后压缩 entry 原样读回"
        );
    }
}

mod groups {
    use super::*;

    #[test]
    fn the_path_splits_at_user_messages() {
        let branch = Branch::default()
            .says("sys", system("你是 pi"))
            .says("u1", user("读 README"))
            .says("a1", assistant("好的", &[]))
            .says("sys2", system("换一个提示"))
            .meta("m1")
            .says("u2", user("再读一次"))
            .says("a2", assistant("读", &["c1"]))
            .compacts("k1", "摘要", "u2")
            .says("r1", result("c1", "# pi"))
            .says("a3", assistant("读完了", &[]));
        let groups = group_interactions(&branch.0).expect("配对完整的路径必须能分组");
        assert_eq!(
            group_ids(&groups),
            [vec!["u1", "a1"], vec!["u2", "a2", "r1", "a3"]],
            "每次交互从一条用户消息开始；system、metadata 与压缩 entry 不属于任何交互"
        );
        assert_eq!(groups[1].first_id(), "u2", "交互的第一条是它的用户消息");
    }

    #[test]
    fn results_in_any_order_pair_by_call_id() {
        let branch = Branch::default()
            .says("u1", user("读两个文件"))
            .says("a1", assistant("并行读", &["c1", "c2"]))
            .says("r2", result("c2", "二"))
            .says("r1", result("c1", "一"))
            .says("a2", assistant("都读完了", &[]));
        let groups = group_interactions(&branch.0).expect("结果顺序与调用顺序不同也按 id 配对");
        assert_eq!(
            group_ids(&groups),
            [vec!["u1", "a1", "r2", "r1", "a2"]],
            "乱序到达的结果仍属于同一次交互，顺序保持原样"
        );
    }

    #[test]
    fn an_orphan_result_is_refused() {
        let early = Branch::default()
            .says("u1", user("读"))
            .says("r1", result("c1", "先到的结果"))
            .says("a1", assistant("读", &["c1"]));
        assert_eq!(
            group_interactions(&early.0),
            Err(GroupError::OrphanResult {
                entry: "r1".into(),
                call: "c1".into()
            }),
            "工具结果必须跟在它的调用之后：顺序可以乱，但不能早于调用"
        );
        let stray = Branch::default()
            .says("u1", user("读"))
            .says("r0", result("c0", "没人要的结果"));
        assert_eq!(
            group_interactions(&stray.0),
            Err(GroupError::OrphanResult {
                entry: "r0".into(),
                call: "c0".into()
            }),
            "没有调用的工具结果是孤儿，必须拒绝"
        );
    }

    #[test]
    fn duplicate_results_and_calls_are_refused() {
        let twice = Branch::default()
            .says("u1", user("读"))
            .says("a1", assistant("读", &["c1"]))
            .says("r1", result("c1", "一"))
            .says("r2", result("c1", "又一"));
        assert_eq!(
            group_interactions(&twice.0),
            Err(GroupError::DuplicateResult {
                entry: "r2".into(),
                call: "c1".into()
            }),
            "一个调用只能有一个结果"
        );
        let reused = Branch::default()
            .says("u1", user("读"))
            .says("a1", assistant("读", &["c1"]))
            .says("r1", result("c1", "一"))
            .says("u2", user("再读"))
            .says("a2", assistant("读", &["c1"]))
            .says("r2", result("c1", "二"));
        assert_eq!(
            group_interactions(&reused.0),
            Err(GroupError::DuplicateCall {
                entry: "a2".into(),
                call: "c1".into()
            }),
            "调用 id 在整条路径上只能用一次"
        );
    }

    #[test]
    fn a_missing_result_and_a_message_before_the_first_user_are_refused() {
        let unanswered = Branch::default()
            .says("u1", user("读"))
            .says("a1", assistant("读", &["c2", "c1"]))
            .says("r2", result("c2", "二"))
            .says("u2", user("下一个问题"));
        assert_eq!(
            group_interactions(&unanswered.0),
            Err(GroupError::MissingResult { call: "c1".into() }),
            "交互结束前每个调用都必须有结果"
        );
        let late = Branch::default()
            .says("u1", user("读"))
            .says("a1", assistant("读", &["c1"]))
            .says("u2", user("下一个问题"))
            .says("r1", result("c1", "迟到的结果"));
        assert_eq!(
            group_interactions(&late.0),
            Err(GroupError::MissingResult { call: "c1".into() }),
            "新的用户消息之前，上一次交互的调用必须已经有结果：迟到的结果不能被分到下一次交互里"
        );
        let at_end = Branch::default()
            .says("u1", user("读"))
            .says("a1", assistant("读", &["c1"]));
        assert_eq!(
            group_interactions(&at_end.0),
            Err(GroupError::MissingResult { call: "c1".into() }),
            "路径结束时未配对的调用同样必须拒绝"
        );
        let early = Branch::default()
            .says("sys", system("你是 pi"))
            .says("a0", assistant("我先说", &[]))
            .says("u1", user("读"));
        assert_eq!(
            group_interactions(&early.0),
            Err(GroupError::BeforeFirstUser("a0".into())),
            "第一条用户消息之前的非 system 消息不属于任何交互，必须拒绝"
        );
    }
}

mod budget {
    use super::*;

    fn sized(costs: &[u64]) -> Branch {
        // Interaction k is one user message whose text is `costs[k]` characters long.
        costs
            .iter()
            .enumerate()
            .fold(Branch::default(), |branch, (k, cost)| {
                branch.says(&format!("u{k}"), user(&"字".repeat(*cost as usize)))
            })
    }

    #[test]
    fn everything_fits_within_the_budget() {
        let branch = three_interactions();
        let groups = group_interactions(&branch.0).expect("分组");
        let built = build_context(&[system("你是 pi")], &groups, &roomy(), &chars);
        let expected: Vec<AgentMessage> = branch
            .0
            .iter()
            .filter_map(|entry| match &entry.body {
                EntryBody::Message { message } => Some(message.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            built.messages, expected,
            "预算足够时发送前缀加全部交互，顺序不变"
        );
        assert_eq!(built.fit, Fit::WithinBudget, "全部放得下时说 WithinBudget");
        assert_eq!(
            built.first_kept_entry_id.as_deref(),
            Some("u1"),
            "第一次交互被保留"
        );
        assert_eq!(
            built.tokens,
            5 + 8 + 2 + 4 + 2 + 4 + 3 + 2 + 4,
            "tokens 是调用者估计器给出的总数（按字符，不按字节）"
        );
    }

    #[test]
    fn only_whole_recent_interactions_are_kept() {
        // Sizes oldest → newest: 5, 40, 6, 7. Room: 100 - 50 - 20 - 2 (prefix) = 28.
        let branch = sized(&[5, 40, 6, 7]);
        let groups = group_interactions(&branch.0).expect("分组");
        let budget = Budget {
            context_window: 100,
            reserved_output: 50,
            safety_margin: 20,
        };
        let built = build_context(&[system("系统")], &groups, &budget, &chars);
        assert_eq!(
            built.first_kept_entry_id.as_deref(),
            Some("u2"),
            "放不下的交互之前的一切都丢掉：不能跳过大交互去保留更早的小交互"
        );
        assert_eq!(built.fit, Fit::Trimmed { dropped: 2 }, "说明丢了几次交互");
        assert_eq!(built.messages.len(), 3, "前缀 + 两次完整交互");
        assert_eq!(built.tokens, 2 + 6 + 7, "tokens 包括前缀");

        let tight = Budget {
            context_window: 100,
            reserved_output: 50,
            safety_margin: 36,
        };
        let built = build_context(&[system("系统")], &groups, &tight, &chars);
        assert_eq!(
            built.first_kept_entry_id.as_deref(),
            Some("u3"),
            "预算要扣掉输出预留、安全余量和前缀：剩 12，只放得下最新的一次"
        );
    }

    #[test]
    fn the_newest_interaction_is_kept_whole_even_when_it_overflows() {
        let branch = Branch::default()
            .says("u1", user("早先"))
            .says("u2", user("读"))
            .says("a2", assistant("读", &["c1"]))
            .says("r2", result("c1", "很长很长的文件内容"));
        let groups = group_interactions(&branch.0).expect("分组");
        let budget = Budget {
            context_window: 10,
            reserved_output: 4,
            safety_margin: 1,
        };
        let built = build_context(&[], &groups, &budget, &chars);
        assert_eq!(
            built.messages,
            vec![
                user("读"),
                assistant("读", &["c1"]),
                result("c1", "很长很长的文件内容")
            ],
            "最新的交互整段保留：调用和它的结果不能分开"
        );
        assert_eq!(
            built.fit,
            Fit::NewestOverflows {
                over_by: 1 + 2 + 9 - 5
            },
            "结果必须说明最新交互本身就超出预算，以及超出多少"
        );
        let impossible = Budget {
            context_window: 10,
            reserved_output: 40,
            safety_margin: 1,
        };
        let built = build_context(&[], &groups, &impossible, &chars);
        assert_eq!(
            built.fit,
            Fit::NewestOverflows { over_by: 12 },
            "预留比窗口还大时剩余空间是 0，不能下溢"
        );
    }

    #[test]
    fn the_estimate_is_the_callers() {
        let branch = sized(&[3, 3, 3]);
        let groups = group_interactions(&branch.0).expect("分组");
        let budget = Budget {
            context_window: 7,
            reserved_output: 0,
            safety_margin: 0,
        };
        let by_chars = build_context(&[], &groups, &budget, &chars);
        assert_eq!(
            by_chars.fit,
            Fit::Trimmed { dropped: 1 },
            "按字符估计放得下两次交互（6 ≤ 7）"
        );
        assert_eq!(by_chars.tokens, 6, "按字符估计：每次交互 3");
        let flat = |_: &AgentMessage| 1;
        let by_count = build_context(&[], &groups, &budget, &flat);
        assert_eq!(
            by_count.fit,
            Fit::WithinBudget,
            "换一个估计器结果就随之改变：只能用调用者的估计器"
        );
        assert_eq!(by_count.tokens, 3, "每条消息算 1");
    }
}

mod create {
    use super::*;

    #[test]
    fn the_parent_is_the_leaf_of_the_path() {
        let branch = three_interactions();
        let entry = create_compaction_entry(&branch.0, "k1", 700, "读过 README 两次", "u3", 321)
            .expect("切在交互开头必须接受");
        assert_eq!(
            entry,
            SessionEntry {
                id: "k1".into(),
                parent_id: Some("a4".into()),
                timestamp: 700,
                body: EntryBody::Compaction(Compaction {
                    summary: "读过 README 两次".into(),
                    first_kept_entry_id: "u3".into(),
                    tokens_before: 321,
                }),
            },
            "父节点是路径的叶子，其余字段原样写入"
        );
    }

    #[test]
    fn a_cut_inside_an_interaction_is_refused() {
        let branch = three_interactions();
        for id in ["a2", "r1", "a3", "sys", "nowhere"] {
            assert_eq!(
                create_compaction_entry(&branch.0, "k1", 700, "摘要", id, 1),
                Err(CompactionError::NotAnInteractionStart(id.into())),
                "{id} 不是交互的第一条消息：切在这里会把调用和结果分开或丢掉半次交互"
            );
        }
    }

    #[test]
    fn an_empty_path_or_summary_is_refused() {
        assert_eq!(
            create_compaction_entry(&[], "k1", 700, "摘要", "u1", 1),
            Err(CompactionError::EmptyPath),
            "空路径没有可挂的父节点"
        );
        let branch = three_interactions();
        assert_eq!(
            create_compaction_entry(&branch.0, "k1", 700, "", "u2", 1),
            Err(CompactionError::EmptySummary),
            "空摘要会让模型丢掉全部早先内容"
        );
        let broken = Branch::default()
            .says("u1", user("读"))
            .says("a1", assistant("读", &["c1"]));
        assert_eq!(
            create_compaction_entry(&broken.0, "k1", 700, "摘要", "u1", 1),
            Err(CompactionError::Groups(GroupError::MissingResult {
                call: "c1".into()
            })),
            "配对不完整的路径不能压缩"
        );
    }

    #[test]
    fn after_a_compaction_only_visible_interactions_can_start_the_kept_part() {
        let branch = three_interactions()
            .compacts("k1", "第一次摘要", "u2")
            .says("u4", user("继续"))
            .says("a5", assistant("好", &[]));
        assert_eq!(
            create_compaction_entry(&branch.0, "k2", 800, "第二次摘要", "u1", 1),
            Err(CompactionError::NotAnInteractionStart("u1".into())),
            "u1 已经在上一次摘要里：再保留它，摘要里的内容会被算两次"
        );
        let entry = create_compaction_entry(&branch.0, "k2", 800, "第二次摘要", "u4", 1)
            .expect("压缩之后的交互可以作为新的起点");
        assert_eq!(entry.parent_id.as_deref(), Some("a5"), "父节点是新的叶子");
        let dangling = three_interactions().compacts("k9", "摘要", "u7");
        assert_eq!(
            create_compaction_entry(&dangling.0, "k2", 800, "摘要", "u3", 1),
            Err(CompactionError::KeptEntryMissing {
                compaction: "k9".into(),
                kept: "u7".into()
            }),
            "最新的压缩要保留的 entry 不在路径上时不能再压缩：猜一个起点会把摘要过的消息放回来"
        );
    }
}

mod resume {
    use super::*;

    fn summary(text: &str, timestamp: u64) -> AgentMessage {
        AgentMessage::User(UserMessage {
            content: vec![TextContent {
                text: format!("{SUMMARY_PREFIX}{text}"),
            }],
            timestamp,
        })
    }

    #[test]
    fn the_context_is_system_then_summary_then_the_kept_part() {
        let branch = three_interactions()
            .compacts("k1", "用户让我读了 README", "u2")
            .says("u4", user("继续"));
        let built = resume_context(&branch.0, &roomy(), &chars).expect("完整的路径必须能恢复");
        assert_eq!(
            built.messages,
            vec![
                system("你是 pi"),
                summary("用户让我读了 README", 500),
                user("再读一次"),
                assistant("读", &["c1"]),
                result("c1", "# pi"),
                assistant("读完了", &[]),
                user("总结"),
                assistant("这是总结", &[]),
                user("继续"),
            ],
            "顺序是 [system, 摘要, 从 firstKeptEntryId 起的交互…]，压缩之后的消息也在内"
        );
        assert_eq!(
            built.first_kept_entry_id.as_deref(),
            Some("u2"),
            "保留部分从 u2 开始"
        );
        assert_eq!(built.fit, Fit::WithinBudget, "全部放得下");
    }

    #[test]
    fn only_the_latest_compaction_counts() {
        let branch = three_interactions()
            .compacts("k1", "旧摘要", "u2")
            .says("u4", user("继续"))
            .compacts("k2", "新摘要", "u3");
        let built = resume_context(&branch.0, &roomy(), &chars).expect("必须能恢复");
        assert_eq!(
            built.messages,
            vec![
                system("你是 pi"),
                summary("新摘要", 500),
                user("总结"),
                assistant("这是总结", &[]),
                user("继续"),
            ],
            "只认最新的压缩：旧摘要已经包含在新摘要里，再发一次就算了两次"
        );
        assert_eq!(
            built.tokens,
            5 + (SUMMARY_PREFIX.chars().count() as u64 + 3) + 2 + 4 + 2,
            "摘要只计一次"
        );
    }

    #[test]
    fn the_current_system_message_is_replayed_from_the_whole_path() {
        let branch = Branch::default()
            .says("s1", system("旧的系统提示"))
            .says("u1", user("一"))
            .says("s2", system("新的系统提示"))
            .says("a1", assistant("好", &[]))
            .says("u2", user("二"))
            .compacts("k1", "说过一", "u2")
            .says("a2", assistant("好", &[]));
        let built = resume_context(&branch.0, &roomy(), &chars).expect("必须能恢复");
        assert_eq!(
            built.messages,
            vec![
                system("新的系统提示"),
                summary("说过一", 500),
                user("二"),
                assistant("好", &[]),
            ],
            "当前的 system 消息来自整条路径（哪怕在切点之前），只发最新的一条，不进摘要"
        );
        let plain = resume_context(
            &Branch::default().says("u1", user("一")).0,
            &roomy(),
            &chars,
        )
        .expect("没有 system、没有压缩也能恢复");
        assert_eq!(
            plain.messages,
            vec![user("一")],
            "没有 system 和压缩时只发交互"
        );
    }

    #[test]
    fn a_resumed_path_is_budgeted_and_can_be_compacted_again() {
        let branch = three_interactions()
            .compacts("k1", "旧", "u2")
            .says("u4", user("继续"))
            .says("a5", assistant("好", &[]));
        let budget = Budget {
            context_window: 50,
            reserved_output: 10,
            safety_margin: 4,
        };
        let built = resume_context(&branch.0, &budget, &chars).expect("必须能恢复");
        assert_eq!(
            built.fit,
            Fit::Trimmed { dropped: 1 },
            "恢复后的保留部分同样按预算只留完整的近期交互"
        );
        let kept = built.first_kept_entry_id.expect("至少保留最新的交互");
        assert_eq!(kept, "u3", "u2 那次交互放不下");
        let again =
            create_compaction_entry(&branch.0, "k2", 900, "更新的摘要", &kept, built.tokens)
                .expect("恢复后选出的起点必须能再次压缩");
        let mut path = branch.0.clone();
        path.push(again);
        let resumed = resume_context(&path, &roomy(), &chars).expect("再次压缩后仍能恢复");
        assert_eq!(
            resumed.messages[1],
            summary("更新的摘要", 900),
            "再次压缩后用新的摘要"
        );
        assert_eq!(
            resumed.first_kept_entry_id.as_deref(),
            Some("u3"),
            "从新的起点保留"
        );

        let dangling = three_interactions().compacts("k9", "摘要", "u7");
        assert_eq!(
            resume_context(&dangling.0, &roomy(), &chars),
            Err(ResumeError::KeptEntryMissing {
                compaction: "k9".into(),
                kept: "u7".into()
            }),
            "压缩要保留的 entry 必须在它之前的路径上"
        );
    }
}
