//! Chapter 14 held-out tests: run only by the instructor's verify, never copied into a
//! practice workspace. They change case ids, prompts, paths, call ids and fault parameters
//! relative to the public tests; each demands only behaviour the guide or a public test states.

use std::sync::{Arc, Mutex, PoisonError};

use pi_course::agent_loop::{AgentRunResult, RunReason};
use pi_course::eval::*;
use pi_course::session_tree::*;
use pi_course::types::*;
use serde_json::json;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn user(value: &str) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: vec![text(value)],
        timestamp: 21,
    })
}

fn answer(value: &str) -> AgentMessage {
    AgentMessage::Assistant(assistant_message(
        vec![AssistantContent::Text(text(value))],
        StopReason::Stop,
    ))
}

fn call(id: &str, name: &str) -> AgentMessage {
    AgentMessage::Assistant(assistant_message(
        vec![AssistantContent::ToolCall(ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: json!({"path": "src/held.rs"}),
            raw_arguments: None,
        })],
        StopReason::ToolUse,
    ))
}

fn outcome(id: &str, name: &str) -> AgentMessage {
    AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: id.into(),
        tool_name: name.into(),
        content: vec![text("fn held() {}")],
        details: None,
        is_error: false,
        timestamp: 23,
    })
}

type Log = Arc<Mutex<Vec<String>>>;

struct Fixed {
    entries: Vec<SessionEntry>,
    leaf: String,
    messages: Vec<AgentMessage>,
    secret: Option<String>,
    log: Log,
}

impl Fixed {
    fn fault(&self) -> Result<(), Fault> {
        match &self.secret {
            Some(secret) => Err(Fault::from(format!("private stack at {secret}"))),
            None => Ok(()),
        }
    }
}

impl EvalRuntime for Fixed {
    fn prompt(&self, _text: &str) -> EvalFuture<Result<AgentRunResult, Fault>> {
        lock(&self.log).push("prompt".into());
        let result = AgentRunResult {
            reason: RunReason::Stop,
            messages: self.messages.clone(),
            steps: 2,
        };
        Box::pin(async move { Ok(result) })
    }

    fn flush(&self) -> EvalFuture<Result<(), Fault>> {
        lock(&self.log).push("flush".into());
        Box::pin(async { Ok(()) })
    }

    fn entries(&self) -> Result<Vec<SessionEntry>, Fault> {
        lock(&self.log).push("entries".into());
        Ok(self.entries.clone())
    }

    fn active_leaf(&self) -> Option<String> {
        Some(self.leaf.clone())
    }

    fn dispose(&self) -> EvalFuture<Result<(), Fault>> {
        lock(&self.log).push("dispose".into());
        let outcome = self.fault();
        Box::pin(async move { outcome })
    }
}

/// A chain `ids[k]` below `parent`, one entry per message.
fn chain(parent: Option<&str>, ids: &[&str], messages: &[AgentMessage]) -> Vec<SessionEntry> {
    let mut entries: Vec<SessionEntry> = Vec::new();
    for (id, message) in ids.iter().zip(messages) {
        let up = entries
            .last()
            .map(|entry| entry.id.clone())
            .or(parent.map(str::to_string));
        entries.push(SessionEntry::message(
            id,
            up.as_deref(),
            50,
            message.clone(),
        ));
    }
    entries
}

#[tokio::test]
async fn held_out_case_changes_paths_and_call_ids_and_stays_isolated_across_runs() {
    let generation = Arc::new(Mutex::new(0));
    let judged: Arc<Mutex<Vec<String>>> = Arc::default();
    let leaked = Arc::new(Mutex::new(false));
    let counter = Arc::clone(&generation);
    let (seen, leak) = (Arc::clone(&judged), Arc::clone(&leaked));
    let held = EvalCase::new(
        "held-out/generations",
        "重命名 held 函数",
        &["src/held.rs", "docs/HELD.md"],
        move || {
            let n = {
                let mut next = lock(&counter);
                *next += 1;
                *next
            };
            let call_id = format!("toolu_gen{n}_Q");
            let messages = vec![
                user(&format!("第 {n} 代的问题")),
                call(&call_id, "read"),
                outcome(&call_id, "read"),
                answer(&format!("第 {n} 代的答案")),
            ];
            let root = format!("generation-{n}-meta");
            let ids: Vec<String> = ["question", "call", "result", "answer"]
                .iter()
                .map(|part| format!("generation-{n}-{part}"))
                .collect();
            let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            let mut entries = vec![SessionEntry::metadata(&root, None, 1, "gen", json!(n))];
            entries.extend(chain(Some(&root), &id_refs, &messages));
            let sibling = format!("generation-{n}-sibling");
            entries.extend(chain(
                Some(&ids[0]),
                &[sibling.as_str()],
                &[answer("RAW_UNSELECTED_BRANCH")],
            ));
            let files = [
                ("src/held.rs", format!("fn held_{n}() {{}}")),
                ("docs/HELD.md", format!("第 {n} 代")),
            ];
            let prepared = PreparedEval {
                runtime: Box::new(Fixed {
                    entries,
                    leaf: format!("generation-{n}-answer"),
                    messages,
                    secret: None,
                    log: Arc::default(),
                }),
                read_file: Box::new(move |name| {
                    files
                        .iter()
                        .find(|(file, _)| *file == name)
                        .map(|(_, content)| content.clone())
                        .ok_or_else(|| Fault::from("没有这个文件"))
                }),
                cleanup: None,
            };
            async move { Ok(prepared) }
        },
        move |observation| {
            let leaf = observation.entries.last().map(|entry| entry.id.clone());
            lock(&seen).push(leaf.unwrap_or_default());
            let all = format!("{observation:?}");
            if all.contains("RAW_UNSELECTED_BRANCH") {
                *lock(&leak) = true;
            }
            Ok(TaskVerdict::from_checks(&[
                observation.files.len() == 2,
                observation.file("docs/HELD.md").is_some(),
            ]))
        },
    );
    let reports = run_eval_suite(&[held.clone(), held]).await;
    let statuses: Vec<EvalStatus> = reports.iter().map(|report| report.status).collect();
    assert_eq!(
        statuses,
        [EvalStatus::Passed, EvalStatus::Passed],
        "改了路径与调用 id 的 case 两次都通过"
    );
    assert_eq!(*lock(&generation), 2, "重复的 case 每次都重新 prepare");
    assert_eq!(
        *lock(&judged),
        ["generation-1-answer", "generation-2-answer"],
        "每次运行的 judge 只看到这一代的活动 leaf"
    );
    assert!(!*lock(&leaked), "没有选中的分支不能进入 judge 的观察值");
    assert_eq!(
        reports[1].evidence.files,
        FileCounts {
            requested: 2,
            read: 2
        },
        "第二次运行的证据只属于第二次"
    );
}

#[tokio::test]
async fn held_out_protocol_perturbations_name_the_mismatch_and_the_duplicate() {
    let base = vec![user("held 问题"), call("toolu_HX_9", "grep")];
    let renamed = [
        base.clone(),
        vec![outcome("toolu_HX_9", "find"), answer("完成")],
    ]
    .concat();
    let duplicated = [
        base.clone(),
        vec![
            outcome("toolu_HX_9", "grep"),
            outcome("toolu_HX_9", "grep"),
            answer("完成"),
        ],
    ]
    .concat();
    for (messages, code) in [
        (renamed, EvalFailureCode::ToolNameMismatch),
        (duplicated, EvalFailureCode::DuplicateToolResult),
    ] {
        let ids: Vec<String> = (0..messages.len()).map(|k| format!("hx-{k}")).collect();
        let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let entries = chain(None, &id_refs, &messages);
        let leaf = ids[ids.len() - 1].clone();
        let perturbed = EvalCase::new(
            "held-out/perturbed",
            "找 held",
            &[],
            move || {
                let prepared = PreparedEval {
                    runtime: Box::new(Fixed {
                        entries: entries.clone(),
                        leaf: leaf.clone(),
                        messages: messages.clone(),
                        secret: None,
                        log: Arc::default(),
                    }),
                    read_file: Box::new(|_| Ok(String::new())),
                    cleanup: None,
                };
                async move { Ok(prepared) }
            },
            |_| Ok(TaskVerdict::from_checks(&[true])),
        );
        let report = run_eval_case(&perturbed).await;
        assert_eq!(
            (report.status, report.primary_failure),
            (
                EvalStatus::ProtocolFailed,
                Some(EvalFailure {
                    phase: EvalPhase::Protocol,
                    code
                })
            ),
            "扰动过的 transcript 必须以 protocol/{code:?} 拒绝"
        );
    }
}

#[tokio::test]
async fn held_out_file_faults_keep_the_primary_and_lifecycle_faults_are_appended_redacted() {
    let secret = "HELD-SECRET-5521";
    let log: Log = Arc::default();
    let judge_called = Arc::new(Mutex::new(false));
    let messages = vec![user("读 held"), answer("读了")];
    let entries = chain(None, &["f1", "f2"], &messages);
    let (log_prepare, called) = (Arc::clone(&log), Arc::clone(&judge_called));
    let faulty = EvalCase::new(
        "held-out/faults",
        "读 private 文件",
        &["private/held-secret.env"],
        move || {
            let (read_log, clean_log) = (Arc::clone(&log_prepare), Arc::clone(&log_prepare));
            let prepared = PreparedEval {
                runtime: Box::new(Fixed {
                    entries: entries.clone(),
                    leaf: "f2".into(),
                    messages: messages.clone(),
                    secret: Some(secret.into()),
                    log: Arc::clone(&log_prepare),
                }),
                read_file: Box::new(move |file| {
                    lock(&read_log).push("read".into());
                    Err(Fault::from(format!("private stack: {file} {secret}")))
                }),
                cleanup: Some(Box::new(move || {
                    lock(&clean_log).push("cleanup".into());
                    Err(Fault::from(format!("cleanup stack {secret}")))
                })),
            };
            async move { Ok(prepared) }
        },
        move |_| {
            *lock(&called) = true;
            Ok(TaskVerdict::from_checks(&[true]))
        },
    );
    let report = run_eval_case(&faulty).await;
    assert_eq!(
        (
            report.status,
            report.primary_failure,
            report.secondary_failures.clone()
        ),
        (
            EvalStatus::InfraFailed,
            Some(EvalFailure::of(EvalFailureCode::CollectFailed)),
            vec![
                EvalFailure::of(EvalFailureCode::DisposeFailed),
                EvalFailure::of(EvalFailureCode::CleanupFailed)
            ]
        ),
        "读文件失败是主因，dispose 与 cleanup 的失败按顺序追加"
    );
    assert_eq!(
        *lock(&log),
        ["prompt", "flush", "entries", "read", "dispose", "cleanup"],
        "生命周期：prompt、flush、entries、读文件，然后 dispose、cleanup"
    );
    assert!(!*lock(&judge_called), "收集失败时不调用 judge");
    let shown = format!(
        "{report:?}\n{report}\n{}",
        serde_json::to_string(&report).expect("报告必须能序列化")
    );
    for forbidden in [secret, "held-secret.env", "private", "stack"] {
        assert!(
            !shown.contains(forbidden),
            "报告里不能出现 {forbidden}：{shown}"
        );
    }
}
