//! Chapter 13 acceptance tests: one runtime for every mode. Each `mod` is a test group; group k
//! is Lab 13.k. `shell` only builds runtimes, `adapter` drives the model adapter directly,
//! `persist` prompts, `modes` runs whole tasks. Ordering is made with semaphores and channels,
//! never with sleeps.

#![allow(dead_code)]

use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pi_course::context_compaction::Budget;
use pi_course::extensions::*;
use pi_course::runtime_modes::*;
use pi_course::scripted_model::{tool_call, ScriptedModel, ScriptedTurn};
use pi_course::session_tree::*;
use pi_course::tool::*;
use pi_course::types::*;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

// --- helpers --------------------------------------------------------------------------------

async fn within<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(1), future)
        .await
        .unwrap_or_else(|_| panic!("{what}：1 秒内没有完成（是不是卡住了？）"))
}

/// True when `future` is still pending after the scheduler had plenty of chances to run it.
async fn still_pending<F: Future + Unpin>(future: &mut F) -> bool {
    for _ in 0..50 {
        tokio::select! {
            biased;
            _ = &mut *future => return false,
            () = tokio::task::yield_now() => {}
        }
    }
    true
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

fn calls(ids: &[&str]) -> AgentMessage {
    AgentMessage::Assistant(assistant_message(
        ids.iter()
            .map(|id| AssistantContent::ToolCall(tool_call(id, "echo", json!({}))))
            .collect(),
        StopReason::ToolUse,
    ))
}

fn result(call: &str) -> AgentMessage {
    AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: call.into(),
        tool_name: "echo".into(),
        content: vec![text("ok")],
        details: None,
        is_error: false,
        timestamp: 4,
    })
}

/// `role:text` for each message: enough to compare transcripts exactly without timestamps.
fn shape(messages: &[AgentMessage]) -> Vec<String> {
    messages
        .iter()
        .map(|message| {
            let role = match message {
                AgentMessage::System(_) => "system",
                AgentMessage::User(_) => "user",
                AgentMessage::Assistant(_) => "assistant",
                AgentMessage::ToolResult(_) => "tool",
            };
            format!("{role}:{}", text_of(message))
        })
        .collect()
}

fn entry_shape(entries: &[SessionEntry]) -> Vec<String> {
    let messages: Vec<AgentMessage> = entries
        .iter()
        .filter_map(|entry| match &entry.body {
            EntryBody::Message { message } => Some(message.clone()),
            _ => None,
        })
        .collect();
    shape(&messages)
}

/// A chain of entries `p0, p1, …`, each the child of the one before.
fn chain(messages: Vec<AgentMessage>) -> Vec<SessionEntry> {
    let mut entries: Vec<SessionEntry> = Vec::new();
    for (at, message) in messages.into_iter().enumerate() {
        let parent = entries.last().map(|entry| entry.id.clone());
        entries.push(SessionEntry::message(
            &format!("p{at}"),
            parent.as_deref(),
            10 + at as u64,
            message,
        ));
    }
    entries
}

/// A session store with test controls: appends can fail at a given index or wait for permits.
#[derive(Default)]
struct FakeStore {
    entries: Mutex<Vec<SessionEntry>>,
    appends: Mutex<usize>,
    fail_at: Option<usize>,
    gate: Option<Arc<Semaphore>>,
    reached: Option<mpsc::UnboundedSender<String>>,
}

impl FakeStore {
    fn with(entries: Vec<SessionEntry>) -> Self {
        FakeStore {
            entries: Mutex::new(entries),
            ..FakeStore::default()
        }
    }
}

impl SessionStore for FakeStore {
    fn entries(&self) -> Vec<SessionEntry> {
        lock(&self.entries).clone()
    }

    fn append(&self, entry: &SessionEntry) -> AppendFuture {
        let index = {
            let mut appends = lock(&self.appends);
            *appends += 1;
            *appends
        };
        if Some(index) == self.fail_at {
            return Box::pin(async { Err(AppendError::Io("磁盘已满".into())) });
        }
        if let Some(reached) = &self.reached {
            let _ = reached.send(entry.id.clone());
        }
        // Recorded now (call order); the gate only delays the report.
        lock(&self.entries).push(entry.clone());
        let gate = self.gate.clone();
        Box::pin(async move {
            if let Some(gate) = gate {
                gate.acquire()
                    .await
                    .expect("测试不会关闭 semaphore")
                    .forget();
            }
            Ok(())
        })
    }
}

fn unlimited() -> ContextBudget {
    ContextBudget {
        budget: Budget {
            context_window: 1_000_000,
            reserved_output: 0,
            safety_margin: 0,
        },
        estimate: Arc::new(|_| 1),
    }
}

fn ten_each(window: u64) -> ContextBudget {
    ContextBudget {
        budget: Budget {
            context_window: window,
            reserved_output: 5,
            safety_margin: 5,
        },
        estimate: Arc::new(|_| 10),
    }
}

/// Ids `e1, e2, …` and a clock stuck at 777.
fn deps(model: &ScriptedModel, store: Arc<dyn SessionStore>, tools: ToolRegistry) -> RuntimeDeps {
    let next = Arc::new(Mutex::new(0));
    RuntimeDeps {
        model: Arc::new(model.clone()),
        tools,
        session: store,
        resources: None,
        extensions: None,
        create_id: Arc::new(move || {
            let mut next = lock(&next);
            *next += 1;
            format!("e{next}")
        }),
        now: Arc::new(|| 777),
    }
}

fn texts(values: &[&str]) -> ScriptedModel {
    ScriptedModel::new(
        values
            .iter()
            .map(|value| ScriptedTurn::text(value))
            .collect(),
    )
}

fn echo_tool() -> SharedTool {
    Tool::new(
        "echo",
        "Answers ok",
        Schema::new(None, |arguments: &Value| Ok(arguments.clone())),
        |_: Value, _: ToolContext| async { Ok(ToolOutput::text("ok")) },
    )
    .shared()
}

fn registry(tools: Vec<SharedTool>) -> ToolRegistry {
    ToolRegistry::new(tools).expect("测试用的工具名互不相同")
}

fn fresh(model: &ScriptedModel, store: Arc<FakeStore>, system_prompt: Option<&str>) -> Runtime {
    let mut config = RuntimeConfig::new(None, unlimited());
    config.system_prompt = system_prompt.map(str::to_string);
    create_runtime(config, deps(model, store, ToolRegistry::default()))
        .expect("空会话不需要 leaf，应当建成运行时")
}

/// A `Vec<u8>` behind a shared handle, so the test can read what a mode wrote.
#[derive(Clone, Default)]
struct Output(Arc<Mutex<Vec<u8>>>);

impl io::Write for Output {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        lock(&self.0).extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Output {
    fn text(&self) -> String {
        String::from_utf8(lock(&self.0).clone()).expect("模式只写 UTF-8")
    }
}

// --- Lab 13.1 -------------------------------------------------------------------------------

mod shell {
    use super::*;

    #[test]
    fn an_empty_session_builds_one_shell_and_writes_nothing() {
        let store = Arc::new(FakeStore::default());
        let runtime = fresh(&texts(&[]), Arc::clone(&store), Some("base"));
        assert_eq!(
            runtime.active_leaf(),
            None,
            "空会话还没有 leaf：第一次写入之前没有"
        );
        assert!(
            runtime.control().state().messages.is_empty(),
            "空会话的 Agent 从空 transcript 开始"
        );
        assert!(
            store.entries().is_empty(),
            "创建运行时不写任何东西：写入只发生在 prompt 之后"
        );
        assert!(
            runtime.extensions().is_none() && runtime.resources().is_none(),
            "没给的依赖就没有"
        );
    }

    #[test]
    fn a_non_empty_session_needs_an_explicit_leaf() {
        let store = Arc::new(FakeStore::with(chain(vec![
            system("s"),
            user("q"),
            answer("a"),
        ])));
        let built = create_runtime(
            RuntimeConfig::new(None, unlimited()),
            deps(&texts(&[]), store, ToolRegistry::default()),
        );
        let error = built.err().expect("非空会话没有指定 leaf 必须拒绝");
        assert_eq!(
            error,
            RuntimeError::LeafRequired { entries: 3 },
            "错误要说出会话里有几个 entry"
        );
        assert_eq!(
            error.to_string(),
            "会话里已经有 3 个 entry：恢复时必须指定要继续的 leaf",
            "错误信息是一行中文"
        );
    }

    #[test]
    fn an_unknown_leaf_is_refused() {
        let store = Arc::new(FakeStore::with(chain(vec![user("q"), answer("a")])));
        let built = create_runtime(
            RuntimeConfig::new(Some("nope"), unlimited()),
            deps(&texts(&[]), store, ToolRegistry::default()),
        );
        assert_eq!(
            built.err(),
            Some(RuntimeError::Path(PathError::UnknownLeaf("nope".into()))),
            "不存在的 leaf 用第 10 章 path_to 的错误拒绝"
        );
    }

    #[test]
    fn the_agent_owns_a_copy_of_the_chosen_path() {
        let mut entries = chain(vec![system("s"), user("q1"), answer("a1")]);
        entries.push(SessionEntry::message("x1", Some("p2"), 20, user("left")));
        entries.push(SessionEntry::message("y1", Some("p2"), 21, user("right")));
        entries.push(SessionEntry::message(
            "y2",
            Some("y1"),
            22,
            answer("right answer"),
        ));
        let store = Arc::new(FakeStore::with(entries));
        let runtime = create_runtime(
            RuntimeConfig::new(Some("y2"), unlimited()),
            deps(
                &texts(&[]),
                Arc::clone(&store) as Arc<dyn SessionStore>,
                ToolRegistry::default(),
            ),
        )
        .expect("存在的 leaf 应当建成运行时");
        let expected = [
            "system:s",
            "user:q1",
            "assistant:a1",
            "user:right",
            "assistant:right answer",
        ];
        assert_eq!(
            shape(&runtime.control().state().messages),
            expected,
            "Agent 只拿到所选 leaf 的路径"
        );
        assert_eq!(
            runtime.active_leaf().as_deref(),
            Some("y2"),
            "活动 leaf 就是指定的 leaf"
        );
        lock(&store.entries).clear();
        assert_eq!(
            shape(&runtime.control().state().messages),
            expected,
            "Agent 的路径是自己的副本：会话后来怎么变都碰不到它"
        );
    }
}

// --- Lab 13.2 -------------------------------------------------------------------------------

mod adapter {
    use super::*;

    /// One request: the context and the token the inner model was given.
    type Seen = (AgentContext, Option<CancellationToken>);

    /// Records what the inner model received and the token it was given.
    #[derive(Clone, Default)]
    struct Recorder {
        script: Option<ScriptedModel>,
        seen: Arc<Mutex<Vec<Seen>>>,
    }

    impl Model for Recorder {
        fn stream(
            &self,
            context: &AgentContext,
            options: StreamOptions,
        ) -> AssistantMessageEventStream {
            lock(&self.seen).push((context.clone(), options.cancel.clone()));
            // Without a script the inner model answers with chapter 04's out-of-script error.
            let script = self
                .script
                .clone()
                .unwrap_or_else(|| ScriptedModel::new(Vec::new()));
            script.stream(context, options)
        }
    }

    fn adapter(
        inner: &Recorder,
        context: ContextBudget,
        path: Vec<SessionEntry>,
    ) -> ContextProjectingModel {
        let count = path
            .iter()
            .filter(|entry| matches!(entry.body, EntryBody::Message { .. }))
            .count();
        let snapshot = ContextSnapshot {
            active_path: path,
            persisted_message_count: count,
        };
        ContextProjectingModel::new(
            Arc::new(inner.clone()),
            context,
            Arc::new(move || snapshot.clone()),
        )
    }

    #[test]
    fn the_unpersisted_suffix_hangs_below_the_active_path() {
        let path = chain(vec![system("s"), user("q1"), answer("a1")]);
        let model = adapter(&Recorder::default(), unlimited(), path);
        let transcript = vec![
            system("s"),
            user("q1"),
            answer("a1"),
            user("q2"),
            calls(&["c1"]),
            result("c1"),
        ];
        let projected = model
            .project(&transcript)
            .expect("配对完整的 suffix 应当能投影");
        assert_eq!(
            shape(&projected),
            [
                "system:s",
                "user:q1",
                "assistant:a1",
                "user:q2",
                "assistant:",
                "tool:ok"
            ],
            "投影 = 持久化路径 + transcript 里尚未持久化的后缀"
        );
    }

    #[test]
    fn fixed_costs_come_first_then_only_whole_recent_interactions() {
        let mut path = chain(vec![
            system("s"),
            user("q1"),
            calls(&["c1"]),
            result("c1"),
            answer("a1"),
        ]);
        path.push(SessionEntry {
            id: "k".into(),
            parent_id: Some("p4".into()),
            timestamp: 30,
            body: EntryBody::Compaction(Compaction {
                summary: "旧的".into(),
                first_kept_entry_id: "p1".into(),
                tokens_before: 50,
            }),
        });
        // window 60 − 10 reserved − 20 (system + summary) = 30: q2 fits, the 4-message q1 does not.
        let model = adapter(&Recorder::default(), ten_each(60), path);
        let transcript = vec![
            system("s"),
            user("q1"),
            calls(&["c1"]),
            result("c1"),
            answer("a1"),
            user("q2"),
        ];
        let projected = model.project(&transcript).expect("应当能投影");
        assert_eq!(
            shape(&projected),
            [
                "system:s",
                "user:此前的对话已压缩为下面的摘要：\n\n旧的",
                "user:q2"
            ],
            "先扣掉 system 与摘要的固定成本，再从最新往前只留完整的交互"
        );
    }

    #[tokio::test]
    async fn tools_and_the_token_pass_through_and_the_inner_model_gets_its_own_copy() {
        let inner = Recorder {
            script: Some(texts(&["hi"])),
            ..Recorder::default()
        };
        let path = chain(vec![user("q1"), answer("a1")]);
        let model = adapter(&inner, ten_each(30), path);
        let context = AgentContext {
            messages: vec![user("q1"), answer("a1"), user("q2")],
            tools: vec![ToolDefinition {
                name: "echo".into(),
                description: "Answers ok".into(),
                parameters: json!({"type": "object"}),
            }],
        };
        let before = context.clone();
        let token = CancellationToken::new();
        let stream = model.stream(
            &context,
            StreamOptions {
                cancel: Some(token.clone()),
            },
        );
        let reply = within("内层模型的回答", stream.result()).await;
        assert_eq!(
            text_of(&AgentMessage::Assistant(reply)),
            "hi",
            "适配器把内层模型的流原样交回"
        );
        let seen = lock(&inner.seen).clone();
        assert_eq!(seen.len(), 1, "每次请求只调用内层模型一次");
        let (request, given) = &seen[0];
        assert_eq!(
            shape(&request.messages),
            ["user:q2"],
            "内层模型看到的是按预算投影后的消息"
        );
        assert_eq!(request.tools, before.tools, "工具定义原样传下");
        token.cancel();
        assert!(
            given.as_ref().is_some_and(CancellationToken::is_cancelled),
            "取消令牌原样传下：取消外层就取消了内层拿到的那一个"
        );
        assert_eq!(context, before, "适配器不改调用方的 context");
    }

    #[tokio::test]
    async fn a_path_that_cannot_be_projected_ends_in_an_error_and_never_reaches_the_model() {
        let inner = Recorder::default();
        let model = adapter(&inner, unlimited(), chain(vec![user("q1")]));
        let context = AgentContext {
            messages: vec![user("q1"), result("c9")],
            tools: Vec::new(),
        };
        let stream = model.stream(&context, StreamOptions::default());
        let reply = within("投影失败的终止事件", stream.result()).await;
        assert_eq!(
            reply.stop_reason,
            StopReason::Error,
            "投影失败是一次 error 终止，不是 panic"
        );
        assert_eq!(
            reply.error_message.as_deref(),
            Some("无法为模型投影上下文：\u{0}unpersisted-0 是调用 c9 的结果，但这次交互里没有这个调用"),
            "错误信息说明是哪条消息、为什么不能投影"
        );
        assert!(
            lock(&inner.seen).is_empty(),
            "投影失败时内层模型一次也不被调用"
        );
    }
}

// --- Lab 13.3 -------------------------------------------------------------------------------

mod persist {
    use super::*;

    #[tokio::test]
    async fn a_fresh_session_persists_each_prompt_as_its_new_suffix_only() {
        let store = Arc::new(FakeStore::default());
        let model = texts(&["a1", "a2"]);
        let runtime = fresh(&model, Arc::clone(&store), Some("base"));
        within("第一次 prompt", runtime.prompt("q1"))
            .await
            .expect("第一次 prompt 应当成功");
        let entries = store.entries();
        assert_eq!(
            entry_shape(&entries),
            ["system:base", "user:q1", "assistant:a1"],
            "新会话写下基础 prompt、问题和回答"
        );
        let links: Vec<(String, Option<String>, u64)> = entries
            .iter()
            .map(|e| (e.id.clone(), e.parent_id.clone(), e.timestamp))
            .collect();
        assert_eq!(
            links,
            [
                ("e1".to_string(), None, 777),
                ("e2".to_string(), Some("e1".to_string()), 777),
                ("e3".to_string(), Some("e2".to_string()), 777)
            ],
            "id 与时间都来自注入的依赖，每个 entry 挂在上一个下面"
        );
        assert_eq!(
            runtime.active_leaf().as_deref(),
            Some("e3"),
            "活动 leaf 跟着最后一次写入走"
        );
        within("第二次 prompt", runtime.prompt("q2"))
            .await
            .expect("第二次 prompt 应当成功");
        assert_eq!(
            entry_shape(&store.entries()[3..]),
            ["user:q2", "assistant:a2"],
            "第二次只追加新的后缀；system 没变就不打补丁"
        );
        assert_eq!(store.entries()[..3], entries[..], "已持久化的前缀不改写");
        assert_eq!(
            shape(&model.requests()[1].messages).len(),
            4,
            "模型看到完整的持久化路径加新问题"
        );
    }

    #[tokio::test]
    async fn on_resume_the_transcript_prompt_is_the_base_and_a_new_one_is_a_patch() {
        let history = chain(vec![system("old"), user("q1"), answer("a1")]);
        for (wanted, appended) in [
            (None, vec!["user:q2", "assistant:a2"]),
            (Some("old"), vec!["user:q2", "assistant:a2"]),
            (Some("new"), vec!["system:new", "user:q2", "assistant:a2"]),
        ] {
            let store = Arc::new(FakeStore::with(history.clone()));
            let model = texts(&["a2"]);
            let mut config = RuntimeConfig::new(Some("p2"), unlimited());
            config.system_prompt = wanted.map(str::to_string);
            let runtime = create_runtime(
                config,
                deps(
                    &model,
                    Arc::clone(&store) as Arc<dyn SessionStore>,
                    ToolRegistry::default(),
                ),
            )
            .expect("应当建成");
            within("恢复后的 prompt", runtime.prompt("q2"))
                .await
                .expect("prompt 应当成功");
            let entries = store.entries();
            assert_eq!(
                entries[..3],
                history[..],
                "恢复的历史一个字节也不改写（wanted = {wanted:?}）"
            );
            assert_eq!(
                entry_shape(&entries[3..]),
                appended,
                "system 只在想要的 prompt 与 transcript 当前的不同时打补丁（wanted = {wanted:?}）"
            );
            assert_eq!(
                entries[3].parent_id.as_deref(),
                Some("p2"),
                "新 entry 挂在指定的 leaf 下面"
            );
        }
    }

    struct Deny;

    impl Extension for Deny {
        fn register(&self, cx: &mut ExtensionContext) -> Result<(), String> {
            cx.on_before_tool_call(|call: ToolCall| async move {
                HookDecision::Deny(format!("不许调用 {}", call.name))
            });
            Ok(())
        }
    }

    #[tokio::test]
    async fn resources_join_the_system_prompt_and_extension_hooks_wrap_the_tools() {
        let mut host = ExtensionHost::new(registry(vec![echo_tool()]));
        let source = ExtensionSource {
            id: "deny".into(),
            location: "deny.rs".into(),
        };
        load_extension(&mut host, &source, |_| true, |_| Ok(Box::new(Deny))).expect("扩展应当加载");
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![tool_call("c1", "echo", json!({}))]),
            ScriptedTurn::text("好的"),
        ]);
        let store = Arc::new(FakeStore::default());
        let mut dependencies = deps(
            &model,
            Arc::clone(&store) as Arc<dyn SessionStore>,
            ToolRegistry::default(),
        );
        dependencies.resources = Some("资源".into());
        dependencies.extensions = Some(host);
        let mut config = RuntimeConfig::new(None, unlimited());
        config.system_prompt = Some("base".into());
        let runtime = create_runtime(config, dependencies).expect("应当建成");
        assert_eq!(runtime.resources(), Some("资源"), "运行时保留它接上的资源");
        assert_eq!(
            runtime.extensions().map(|host| host.extensions().to_vec()),
            Some(vec!["deny".to_string()]),
            "运行时保留它接上的扩展"
        );
        within("带扩展的 prompt", runtime.prompt("go"))
            .await
            .expect("prompt 应当成功");
        let tools: Vec<String> = model.requests()[0]
            .tools
            .iter()
            .map(|tool| tool.name.clone())
            .collect();
        assert_eq!(tools, ["echo"], "扩展包着的核心工具照样发给模型");
        assert_eq!(
            entry_shape(&store.entries()),
            [
                "system:base\n\n资源",
                "user:go",
                "assistant:",
                "tool:Tool echo failed: 调用被扩展拒绝（deny）：不许调用 echo",
                "assistant:好的"
            ],
            "资源段落接在基础 prompt 后面；工具调用先过扩展的 before hook"
        );
    }

    #[test]
    fn system_patch_is_only_for_a_change() {
        assert_eq!(system_patch(Some("a"), Some("a")), None, "没变就不打补丁");
        assert_eq!(
            system_patch(Some("b"), Some("a")),
            Some("b".to_string()),
            "变了就打补丁"
        );
        assert_eq!(
            system_patch(None, Some("a")),
            None,
            "没有想要的 prompt：沿用 transcript 的"
        );
        assert_eq!(
            system_patch(Some("a"), None),
            Some("a".to_string()),
            "transcript 还没有 system：补上"
        );
    }

    #[tokio::test]
    async fn a_failed_write_poisons_the_runtime_for_every_later_prompt() {
        let store = Arc::new(FakeStore {
            fail_at: Some(2),
            ..FakeStore::default()
        });
        let model = texts(&["a1", "a2"]);
        let runtime = fresh(&model, Arc::clone(&store), None);
        let first = within("写入失败的 prompt", runtime.prompt("q1")).await;
        assert_eq!(
            first.err(),
            Some(RuntimeError::Write(AppendError::Io("磁盘已满".into()))),
            "写入失败原样报告给这次 prompt"
        );
        assert_eq!(
            entry_shape(&store.entries()),
            ["user:q1"],
            "失败之后不再写后面的消息"
        );
        let second = within("停用后的 prompt", runtime.prompt("q2")).await;
        let Err(error) = second else {
            panic!("停用后的 prompt 必须被拒绝");
        };
        assert_eq!(
            error.to_string(),
            "运行时已停用，不再接受 prompt：之前写入会话文件失败：磁盘已满",
            "拒绝的理由说出最初的写入错误"
        );
        assert_eq!(model.requests().len(), 1, "停用后的 prompt 不再调用模型");
    }

    #[tokio::test]
    async fn a_prompt_that_queued_behind_a_failing_one_is_refused_too() {
        let gate = Arc::new(Semaphore::new(0));
        let (reached, mut appends) = mpsc::unbounded_channel();
        let store = Arc::new(FakeStore {
            fail_at: Some(2),
            gate: Some(Arc::clone(&gate)),
            reached: Some(reached),
            ..FakeStore::default()
        });
        let model = texts(&["a1", "a2"]);
        let runtime = fresh(&model, Arc::clone(&store), None);
        let first = tokio::spawn(runtime.prompt("q1"));
        within("第一个 prompt 开始写入", appends.recv()).await;
        let mut second = Box::pin(runtime.prompt("q2"));
        assert!(
            still_pending(&mut second).await,
            "第二个 prompt 排在第一个后面等"
        );
        gate.add_permits(10);
        assert!(
            matches!(
                within("第一个 prompt", first).await,
                Ok(Err(RuntimeError::Write(_)))
            ),
            "第一个写入失败"
        );
        let error = within("排队的 prompt", second).await.err();
        assert!(
            matches!(error, Some(RuntimeError::Poisoned { .. })),
            "排队时还没停用、轮到时已停用：停用要在等到轮次之后检查，得到 {error:?}"
        );
        assert_eq!(model.requests().len(), 1, "排队的 prompt 不再调用模型");
    }

    #[tokio::test]
    async fn flush_waits_for_the_queue_and_dispose_for_the_disk_then_closes_for_good() {
        let gate = Arc::new(Semaphore::new(0));
        let (reached, mut appends) = mpsc::unbounded_channel();
        let store = Arc::new(FakeStore {
            gate: Some(Arc::clone(&gate)),
            reached: Some(reached),
            ..FakeStore::default()
        });
        let model = texts(&["a1"]);
        let runtime = fresh(&model, Arc::clone(&store), None);
        let running = tokio::spawn(runtime.prompt("q1"));
        within("第一次写入开始", appends.recv()).await;
        let flusher = runtime.clone();
        let mut flush = tokio::spawn(async move { flusher.flush().await });
        assert!(
            still_pending(&mut flush).await,
            "flush 要等队列里的 prompt 落盘"
        );
        let disposer = runtime.clone();
        let mut dispose = tokio::spawn(async move { disposer.dispose().await });
        assert!(still_pending(&mut dispose).await, "dispose 要等写入完成");
        let late = within("dispose 之后的 prompt", runtime.prompt("late")).await;
        assert_eq!(
            late.err(),
            Some(RuntimeError::Disposed),
            "dispose 一开始就关上 prompt"
        );
        gate.add_permits(10);
        within("dispose", dispose).await.expect("dispose 不 panic");
        within("flush", flush).await.expect("flush 不 panic");
        assert!(
            within("第一次 prompt", running)
                .await
                .is_ok_and(|run| run.is_ok()),
            "已接受的 prompt 正常完成"
        );
        assert_eq!(
            entry_shape(&store.entries()),
            ["user:q1", "assistant:a1"],
            "dispose 返回时已全部落盘"
        );
        let after = within("关闭后的 prompt", runtime.prompt("again")).await;
        assert_eq!(
            after.err().map(|e| e.to_string()).as_deref(),
            Some("运行时已关闭，不再接受 prompt"),
            "关闭是永久的"
        );
        assert_eq!(model.requests().len(), 1, "关闭后的 prompt 不调用模型");
    }
}

// --- Lab 13.4 -------------------------------------------------------------------------------

mod modes {
    use super::*;

    struct Broken;

    impl io::Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::new(io::ErrorKind::BrokenPipe, "管道已关闭"))
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn tool_turns() -> ScriptedModel {
        ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![tool_call("c1", "echo", json!({"x": 1}))]),
            ScriptedTurn::text("done"),
        ])
    }

    fn with_echo(model: &ScriptedModel, store: Arc<FakeStore>) -> Runtime {
        create_runtime(
            RuntimeConfig::new(None, unlimited()),
            deps(model, store, registry(vec![echo_tool()])),
        )
        .expect("应当建成")
    }

    #[tokio::test]
    async fn print_and_interactive_call_prompt_once_and_write_the_final_text() {
        for (mode, expected) in [("print", "done\n"), ("interactive", "· echo\ndone\n")] {
            let model = tool_turns();
            let store = Arc::new(FakeStore::default());
            let runtime = with_echo(&model, Arc::clone(&store));
            let mut output = Output::default();
            let run = within("一次任务", run_mode(&runtime, mode, "go", &mut output)).await;
            assert!(run.is_ok(), "{mode} 模式应当成功");
            assert_eq!(output.text(), expected, "{mode} 模式的输出");
            let users = entry_shape(&store.entries())
                .iter()
                .filter(|m| m.starts_with("user:"))
                .count();
            assert_eq!(users, 1, "{mode} 模式每个任务只调用一次 prompt");
            assert_eq!(
                model.requests().len(),
                2,
                "{mode} 模式：一次 prompt、两轮模型"
            );
        }
    }

    #[tokio::test]
    async fn json_mode_writes_one_versioned_object_per_line_with_the_final_message_last() {
        let model = tool_turns();
        let store = Arc::new(FakeStore::default());
        let runtime = with_echo(&model, Arc::clone(&store));
        let mut output = Output::default();
        within("json 任务", run_mode(&runtime, "json", "go", &mut output))
            .await
            .expect("json 模式应当成功");
        let text = output.text();
        let lines: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("每一行都是一个完整的 JSON 对象"))
            .collect();
        assert!(text.ends_with('\n'), "最后一行也以换行结束");
        let types: Vec<&str> = lines
            .iter()
            .map(|line| line["type"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(
            types,
            [
                "run_start",
                "assistant_message",
                "tool_start",
                "tool_end",
                "text_delta",
                "assistant_message",
                "turn_end",
                "run_end",
                "final"
            ],
            "事件按发生顺序一行一个，最终消息在最后"
        );
        assert!(
            lines.iter().all(|line| line["v"] == json!(1)),
            "每一行都带版本字段 v = 1"
        );
        assert_eq!(lines[2]["callId"], json!("c1"), "tool_start 带调用 id");
        assert_eq!(lines[2]["arguments"], json!({"x": 1}), "tool_start 带参数");
        assert_eq!(
            lines[3]["result"]["toolCallId"],
            json!("c1"),
            "tool_end 带配对的结果"
        );
        assert_eq!(
            lines[1]["message"].get("role"),
            None,
            "版本 1 的格式：assistant_message 的 message 是 AssistantMessage 本身，不带 role"
        );
        assert_eq!(
            lines[3]["result"].get("role"),
            None,
            "版本 1 的格式：tool_end 的 result 是 ToolResultMessage 本身，不带 role"
        );
        assert_eq!(lines[4]["delta"], json!("done"), "text_delta 带增量文本");
        assert_eq!(
            lines[8],
            json!({"v": 1, "type": "final", "reason": "stop", "text": "done"}),
            "final 行的确切形状"
        );
        assert_eq!(
            entry_shape(&store.entries()).len(),
            4,
            "json 只改变呈现：落盘与其他模式一样"
        );
    }

    #[tokio::test]
    async fn an_unknown_mode_fails_before_anything_runs() {
        let model = texts(&["a1"]);
        let store = Arc::new(FakeStore::default());
        let runtime = fresh(&model, Arc::clone(&store), None);
        let mut output = Output::default();
        let error = within("未知模式", run_mode(&runtime, "yaml", "go", &mut output))
            .await
            .err();
        assert!(
            matches!(&error, Some(ModeError::Unknown(name)) if name == "yaml"),
            "未知模式报告它的名字"
        );
        assert_eq!(
            error.map(|e| e.to_string()).as_deref(),
            Some("未知的模式 \"yaml\"：只能是 interactive、print 或 json"),
            "一行中文说出可选的模式"
        );
        assert!(
            model.requests().is_empty() && store.entries().is_empty(),
            "未知模式在任何事情发生之前失败"
        );
        assert!(output.text().is_empty(), "未知模式什么也不写");
    }

    #[test]
    fn mode_names_are_exact() {
        let parsed: Vec<Option<RuntimeMode>> =
            ["interactive", "print", "json", "Json", " print", ""]
                .iter()
                .map(|name| name.parse().ok())
                .collect();
        assert_eq!(
            parsed,
            [
                Some(RuntimeMode::Interactive),
                Some(RuntimeMode::Print),
                Some(RuntimeMode::Json),
                None,
                None,
                None
            ],
            "模式名是三个确切的小写单词"
        );
    }

    #[tokio::test]
    async fn an_output_error_surfaces_as_it_is_after_the_run_is_saved() {
        let model = texts(&["a1"]);
        let store = Arc::new(FakeStore::default());
        let runtime = fresh(&model, Arc::clone(&store), None);
        // json writes while the run works: the very first line fails.
        let error = within("输出失败", run_mode(&runtime, "json", "q1", &mut Broken))
            .await
            .err();
        let Some(ModeError::Io(error)) = error else {
            panic!("输出错误应当是 ModeError::Io，得到 {error:?}");
        };
        assert_eq!(
            (error.kind(), error.to_string()),
            (io::ErrorKind::BrokenPipe, "管道已关闭".to_string()),
            "输出错误原样上抛"
        );
        assert_eq!(
            entry_shape(&store.entries()),
            ["user:q1", "assistant:a1"],
            "输出失败不丢历史：运行照样落盘"
        );
        assert_eq!(model.requests().len(), 1, "输出失败也只调用一次模型");
    }
}
