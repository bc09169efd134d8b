//! Chapter 13 held-out tests: run only by the instructor's verify, never copied into a
//! practice workspace. They vary ids, leaves, budgets and the failing write; each demands only
//! behaviour the guide or a public test states.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pi_course::context_compaction::Budget;
use pi_course::runtime_modes::*;
use pi_course::scripted_model::{ScriptedModel, ScriptedTurn};
use pi_course::session_tree::*;
use pi_course::tool::ToolRegistry;
use pi_course::types::*;
use serde_json::Value;

async fn within<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(1), future)
        .await
        .unwrap_or_else(|_| panic!("{what}：1 秒内没有完成"))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn system(value: &str) -> AgentMessage {
    AgentMessage::System(SystemMessage {
        content: value.into(),
        sections: None,
        timestamp: 1,
    })
}

fn user(value: &str) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: vec![text(value)],
        timestamp: 2,
    })
}

fn answer(value: &str) -> AgentMessage {
    AgentMessage::Assistant(assistant_message(
        vec![AssistantContent::Text(text(value))],
        StopReason::Stop,
    ))
}

fn texts_of(entries: &[SessionEntry]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|entry| match &entry.body {
            EntryBody::Message { message } => Some(text_of(message)),
            _ => None,
        })
        .collect()
}

/// Appends fail from the `fail_from`-th one on (1-based) with `cause`.
struct Store {
    entries: Mutex<Vec<SessionEntry>>,
    appends: Mutex<usize>,
    fail_from: usize,
    cause: &'static str,
}

impl Store {
    fn new(entries: Vec<SessionEntry>, fail_from: usize, cause: &'static str) -> Self {
        Store {
            entries: Mutex::new(entries),
            appends: Mutex::new(0),
            fail_from,
            cause,
        }
    }
}

impl SessionStore for Store {
    fn entries(&self) -> Vec<SessionEntry> {
        lock(&self.entries).clone()
    }

    fn append(&self, entry: &SessionEntry) -> AppendFuture {
        let mut appends = lock(&self.appends);
        *appends += 1;
        if *appends >= self.fail_from {
            let cause = self.cause.to_string();
            return Box::pin(async move { Err(AppendError::Io(cause)) });
        }
        lock(&self.entries).push(entry.clone());
        Box::pin(async { Ok(()) })
    }
}

fn deps(model: &ScriptedModel, store: Arc<Store>, prefix: &'static str) -> RuntimeDeps {
    let next = Arc::new(Mutex::new(100));
    RuntimeDeps {
        model: Arc::new(model.clone()),
        tools: ToolRegistry::default(),
        session: store,
        resources: None,
        extensions: None,
        create_id: Arc::new(move || {
            let mut next = lock(&next);
            *next += 1;
            format!("{prefix}{next}")
        }),
        now: Arc::new(|| 42),
    }
}

fn budget(window: u64) -> ContextBudget {
    ContextBudget {
        budget: Budget {
            context_window: window,
            reserved_output: 0,
            safety_margin: 0,
        },
        estimate: Arc::new(|message| text_of(message).chars().count() as u64),
    }
}

#[tokio::test]
async fn a_patch_that_cannot_be_written_poisons_and_leaves_the_history_alone() {
    let history = vec![
        SessionEntry::message("root", None, 5, system("旧的")),
        SessionEntry::message("u", Some("root"), 6, user("问")),
        SessionEntry::message("a", Some("u"), 7, answer("答")),
    ];
    let store = Arc::new(Store::new(history.clone(), 1, "只读文件系统"));
    let model = ScriptedModel::new(vec![ScriptedTurn::text("新答")]);
    let mut config = RuntimeConfig::new(Some("a"), budget(10_000));
    config.system_prompt = Some("新的".into());
    let runtime = create_runtime(config, deps(&model, Arc::clone(&store), "n-")).expect("应当建成");
    let first = within("写补丁失败", runtime.prompt("再问")).await;
    assert_eq!(
        first.err(),
        Some(RuntimeError::Write(AppendError::Io("只读文件系统".into()))),
        "第一次写入（system 补丁）失败也要原样报告"
    );
    assert_eq!(store.entries(), history, "写入失败不改动已有的历史");
    let again = within("停用后", runtime.prompt("还问")).await;
    assert_eq!(
        again.err(),
        Some(RuntimeError::Poisoned {
            cause: "写入会话文件失败：只读文件系统".into()
        }),
        "停用的原因就是那次写入错误"
    );
}

#[tokio::test]
async fn resuming_a_deep_side_branch_continues_below_that_leaf() {
    let mut entries = vec![SessionEntry::message("r", None, 1, user("一"))];
    let mut parent = "r".to_string();
    for depth in 0..5 {
        let id = format!("main-{depth}");
        entries.push(SessionEntry::message(&id, Some(&parent), 2, answer(&id)));
        parent = id;
    }
    entries.push(SessionEntry::message(
        "side",
        Some("main-1"),
        3,
        user("岔路"),
    ));
    entries.push(SessionEntry::message(
        "z",
        Some("side"),
        4,
        answer("岔路的答"),
    ));
    let store = Arc::new(Store::new(entries, usize::MAX, ""));
    let model = ScriptedModel::new(vec![ScriptedTurn::text("继续")]);
    let runtime = create_runtime(
        RuntimeConfig::new(Some("z"), budget(10_000)),
        deps(&model, Arc::clone(&store), "b"),
    )
    .expect("应当建成");
    within("侧枝上的 prompt", runtime.prompt("接着"))
        .await
        .expect("prompt 应当成功");
    let written = store.entries()[8..].to_vec();
    let links: Vec<(String, Option<String>)> = written
        .iter()
        .map(|e| (e.id.clone(), e.parent_id.clone()))
        .collect();
    assert_eq!(
        links,
        [
            ("b101".to_string(), Some("z".to_string())),
            ("b102".to_string(), Some("b101".to_string()))
        ],
        "新 entry 挂在指定的 leaf 下面，一个接一个"
    );
    assert_eq!(
        texts_of(&written),
        ["接着", "继续"],
        "只追加这次的问题和回答"
    );
    let sent: Vec<String> = model.requests()[0].messages.iter().map(text_of).collect();
    assert_eq!(
        sent,
        ["一", "main-0", "main-1", "岔路", "岔路的答", "接着"],
        "模型只看到所选分支"
    );
}

#[tokio::test]
async fn a_tight_budget_sends_only_the_newest_interaction_but_persists_everything() {
    let history = vec![
        SessionEntry::message("s", None, 1, system("规")),
        SessionEntry::message("q", Some("s"), 1, user("很长很长的旧问题")),
        SessionEntry::message("w", Some("q"), 1, answer("很长很长的旧回答")),
    ];
    let store = Arc::new(Store::new(history, usize::MAX, ""));
    let model = ScriptedModel::new(vec![ScriptedTurn::text("短")]);
    // "规" (1) + "新问" (2) = 3 fits a window of 5; the old interaction (16) does not.
    let runtime = create_runtime(
        RuntimeConfig::new(Some("w"), budget(5)),
        deps(&model, Arc::clone(&store), "t"),
    )
    .expect("应当建成");
    within("紧预算的 prompt", runtime.prompt("新问"))
        .await
        .expect("prompt 应当成功");
    let sent: Vec<String> = model.requests()[0].messages.iter().map(text_of).collect();
    assert_eq!(sent, ["规", "新问"], "预算只够最新的一次交互");
    assert_eq!(
        texts_of(&store.entries()),
        ["规", "很长很长的旧问题", "很长很长的旧回答", "新问", "短"],
        "投影只影响模型看到什么，历史照样完整"
    );
    let transcript: Vec<String> = runtime
        .control()
        .state()
        .messages
        .iter()
        .map(text_of)
        .collect();
    assert_eq!(
        transcript.len(),
        5,
        "Agent 的 transcript 保留全部历史，不被投影截短"
    );
}

#[tokio::test]
async fn json_mode_for_a_plain_answer() {
    let store = Arc::new(Store::new(Vec::new(), usize::MAX, ""));
    let model = ScriptedModel::new(vec![ScriptedTurn::text("你好")]);
    let runtime = create_runtime(
        RuntimeConfig::new(None, budget(10_000)),
        deps(&model, Arc::clone(&store), "j"),
    )
    .expect("应当建成");
    let mut output: Vec<u8> = Vec::new();
    within("json", run_mode(&runtime, "json", "嗨", &mut output))
        .await
        .expect("json 模式应当成功");
    let lines: Vec<Value> = String::from_utf8(output)
        .expect("UTF-8")
        .lines()
        .map(|line| serde_json::from_str(line).expect("每行一个 JSON 对象"))
        .collect();
    let types: Vec<&str> = lines
        .iter()
        .map(|l| l["type"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        types,
        [
            "run_start",
            "text_delta",
            "assistant_message",
            "turn_end",
            "run_end",
            "final"
        ],
        "纯文本回答的事件行"
    );
    assert_eq!(lines[5]["text"], "你好", "final 行带最终文本");
    assert_eq!(lines[4]["reason"], "stop", "run_end 带停止原因");
}
