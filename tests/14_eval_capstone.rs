//! Chapter 14 acceptance tests: evaluating a whole agent. Each `mod` is a test group; group k
//! is Lab 14.k. Most cases run a fake runtime that returns a fixed session and writes every
//! lifecycle step into a log; one runs chapter 13's real runtime in a fresh workspace. No
//! sleeps: a fake yields to the scheduler where a concurrent runner would interleave.

#![allow(dead_code)]

use std::fs;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pi_course::agent_loop::{AgentRunResult, RunReason};
use pi_course::eval::*;
use pi_course::session_tree::*;
use pi_course::types::*;
use serde_json::{json, Value};

// --- helpers --------------------------------------------------------------------------------

async fn within<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(1), future)
        .await
        .unwrap_or_else(|_| {
            panic!("{what}：1 秒内没有完成（是不是拿着 std Mutex 的 guard 在等另一个任务？）")
        })
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

/// An assistant message proposing one call per `(id, name)`.
fn calls(pairs: &[(&str, &str)]) -> AgentMessage {
    AgentMessage::Assistant(assistant_message(
        pairs
            .iter()
            .map(|(id, name)| {
                AssistantContent::ToolCall(ToolCall {
                    id: id.to_string(),
                    name: name.to_string(),
                    arguments: json!({}),
                    raw_arguments: None,
                })
            })
            .collect(),
        StopReason::ToolUse,
    ))
}

fn result(id: &str, name: &str, is_error: bool) -> AgentMessage {
    AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: id.into(),
        tool_name: name.into(),
        content: vec![text("ok")],
        details: None,
        is_error,
        timestamp: 4,
    })
}

/// Entries `m0, m1, …` hanging below `parent`, each the child of the one before.
fn chain_below(parent: Option<&str>, prefix: &str, messages: &[AgentMessage]) -> Vec<SessionEntry> {
    let mut entries: Vec<SessionEntry> = Vec::new();
    for (at, message) in messages.iter().enumerate() {
        let up = entries
            .last()
            .map(|entry| entry.id.clone())
            .or(parent.map(str::to_string));
        entries.push(SessionEntry::message(
            &format!("{prefix}{at}"),
            up.as_deref(),
            10 + at as u64,
            message.clone(),
        ));
    }
    entries
}

type Log = Arc<Mutex<Vec<String>>>;

fn log_of(log: &Log) -> Vec<String> {
    lock(log).clone()
}

fn steps(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

/// What a fake prepared eval returns and which of its steps fail (with the text given).
#[derive(Clone, Default)]
struct Spec {
    tag: String,
    entries: Vec<SessionEntry>,
    leaf: Option<String>,
    result: Vec<AgentMessage>,
    files: Vec<(String, String)>,
    fail: Vec<(&'static str, String)>,
}

impl Spec {
    /// A session that is exactly `messages`, in one chain, and a result that agrees with it.
    fn consistent(messages: &[AgentMessage]) -> Self {
        let entries = chain_below(None, "m", messages);
        Spec {
            leaf: entries.last().map(|entry| entry.id.clone()),
            entries,
            result: messages.to_vec(),
            ..Spec::default()
        }
    }

    fn file(mut self, name: &str, content: &str) -> Self {
        self.files.push((name.into(), content.into()));
        self
    }

    fn failing(mut self, step: &'static str, text: &str) -> Self {
        self.fail.push((step, text.into()));
        self
    }

    fn tagged(mut self, tag: &str) -> Self {
        self.tag = tag.into();
        self
    }

    fn fault(&self, step: &str) -> Option<Fault> {
        self.fail
            .iter()
            .find(|(name, _)| *name == step)
            .map(|(_, text)| Fault::from(text.clone()))
    }
}

struct FakeRuntime {
    spec: Spec,
    log: Log,
}

impl FakeRuntime {
    fn note(&self, step: &str) {
        note(&self.log, &self.spec.tag, step);
    }
}

fn note(log: &Log, tag: &str, step: &str) {
    let line = match tag {
        "" => step.to_string(),
        tag => format!("{tag}:{step}"),
    };
    lock(log).push(line);
}

impl EvalRuntime for FakeRuntime {
    fn prompt(&self, _text: &str) -> EvalFuture<Result<AgentRunResult, Fault>> {
        self.note("prompt");
        let outcome = match self.spec.fault("prompt") {
            Some(fault) => Err(fault),
            None => Ok(AgentRunResult {
                reason: RunReason::Stop,
                messages: self.spec.result.clone(),
                steps: 1,
            }),
        };
        Box::pin(async move {
            // A runner that starts cases side by side would interleave here.
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            outcome
        })
    }

    fn flush(&self) -> EvalFuture<Result<(), Fault>> {
        self.note("flush");
        let outcome = self.spec.fault("flush").map_or(Ok(()), Err);
        Box::pin(async move { outcome })
    }

    fn entries(&self) -> Result<Vec<SessionEntry>, Fault> {
        self.note("entries");
        self.spec
            .fault("entries")
            .map_or(Ok(self.spec.entries.clone()), Err)
    }

    fn active_leaf(&self) -> Option<String> {
        self.spec.leaf.clone()
    }

    fn dispose(&self) -> EvalFuture<Result<(), Fault>> {
        self.note("dispose");
        let outcome = self.spec.fault("dispose").map_or(Ok(()), Err);
        Box::pin(async move { outcome })
    }
}

fn prepared(spec: &Spec, log: &Log) -> PreparedEval {
    let reader = (spec.clone(), Arc::clone(log));
    let cleaner = (spec.clone(), Arc::clone(log));
    PreparedEval {
        runtime: Box::new(FakeRuntime {
            spec: spec.clone(),
            log: Arc::clone(log),
        }),
        read_file: Box::new(move |file| {
            let (spec, log) = &reader;
            note(log, &spec.tag, &format!("read {file}"));
            if let Some(fault) = spec.fault("read") {
                return Err(fault);
            }
            spec.files
                .iter()
                .find(|(name, _)| name == file)
                .map(|(_, content)| content.clone())
                .ok_or_else(|| Fault::from(format!("没有这个文件：{file}")))
        }),
        cleanup: Some(Box::new(move || {
            let (spec, log) = cleaner;
            note(&log, &spec.tag, "cleanup");
            spec.fault("cleanup").map_or(Ok(()), Err)
        })),
    }
}

/// What the judges of a test saw, in order.
type Seen = Arc<Mutex<Vec<EvalObservation>>>;

/// A case over a fake runtime: `prepare` logs and builds from `spec`; the judge logs, keeps a
/// copy of what it saw and answers `verdict`.
fn case(
    id: &str,
    files: &[&str],
    spec: &Spec,
    log: &Log,
    verdict: TaskVerdict,
) -> (EvalCase, Seen) {
    let seen: Seen = Arc::default();
    let (for_prepare, log_prepare) = (spec.clone(), Arc::clone(log));
    let (tag, log_judge, seen_judge) = (spec.tag.clone(), Arc::clone(log), Arc::clone(&seen));
    let case = EvalCase::new(
        id,
        "做这个任务",
        files,
        move || {
            note(&log_prepare, &for_prepare.tag, "prepare");
            let ready = prepared(&for_prepare, &log_prepare);
            async move { Ok(ready) }
        },
        move |observation| {
            note(&log_judge, &tag, "judge");
            lock(&seen_judge).push(observation.clone());
            Ok(verdict.clone())
        },
    );
    (case, seen)
}

fn pass() -> TaskVerdict {
    TaskVerdict {
        passed: true,
        checks: vec![true],
    }
}

fn simple() -> Vec<AgentMessage> {
    vec![system("基础"), user("改一下 notes.md"), answer("改好了")]
}

const FULL_RUN: [&str; 8] = [
    "prepare",
    "prompt",
    "flush",
    "entries",
    "read notes.md",
    "judge",
    "dispose",
    "cleanup",
];

/// The report rendered every way a user could see it.
fn every_rendering(report: &EvalReport) -> String {
    let json = serde_json::to_string(report).expect("报告必须能序列化成 JSON");
    format!("{report:?}\n{json}")
}

/// A fresh directory under the system temp dir, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn scratch() -> Scratch {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pi-course-14-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("测试需要能在系统临时目录里建目录");
    Scratch(dir.canonicalize().expect("临时目录必须可以 canonicalize"))
}

// --- Lab 14.1 -------------------------------------------------------------------------------

mod runner {
    use super::*;
    use pi_course::coding_tools::CodingTools;
    use pi_course::context_compaction::Budget;
    use pi_course::runtime_modes::*;
    use pi_course::scripted_model::{tool_call, ScriptedModel, ScriptedTurn};

    #[tokio::test]
    async fn every_run_prepares_afresh_and_closes_in_order() {
        let log: Log = Arc::default();
        let spec = Spec::consistent(&simple()).file("notes.md", "新内容");
        let (fresh, _) = case("fresh", &["notes.md"], &spec, &log, pass());
        for round in 1..=2 {
            let report = within("运行一个 case", run_eval_case(&fresh)).await;
            assert_eq!(
                report.status,
                EvalStatus::Passed,
                "第 {round} 次运行：任务通过就是 passed"
            );
            assert_eq!(
                report.primary_failure, None,
                "第 {round} 次运行：通过的报告没有主因"
            );
            assert!(
                report.secondary_failures.is_empty(),
                "第 {round} 次运行：通过的报告没有后续故障"
            );
        }
        let once: Vec<String> = steps(&FULL_RUN);
        assert_eq!(
            log_of(&log),
            [once.clone(), once].concat(),
            "每次运行都重新 prepare，按 prompt → flush → entries（只读一次）→ 读声明文件 → judge → dispose → cleanup 收口"
        );

        lock(&log).clear();
        for (files, what) in [
            (vec!["notes.md", "notes.md"], "声明文件重复"),
            (vec!["  "], "声明文件是空白"),
        ] {
            let (invalid, _) = case("bad", &files, &spec, &log, pass());
            let report = run_eval_case(&invalid).await;
            assert_eq!(
                (report.status, report.primary_failure),
                (
                    EvalStatus::InfraFailed,
                    Some(EvalFailure {
                        phase: EvalPhase::Prepare,
                        code: EvalFailureCode::InvalidCase
                    })
                ),
                "{what}的 case 在 prepare 之前就以 prepare/invalid_case 拒绝"
            );
        }
        let (blank, _) = case(" ", &["notes.md"], &spec, &log, pass());
        assert_eq!(
            run_eval_case(&blank).await.primary_failure.map(|f| f.code),
            Some(EvalFailureCode::InvalidCase),
            "id 是空白的 case 以 invalid_case 拒绝"
        );
        assert!(log_of(&log).is_empty(), "无效的 case 不能调用 prepare");
    }

    #[tokio::test]
    async fn the_judge_sees_the_active_path_and_the_declared_files_only() {
        let log: Log = Arc::default();
        // Built once: `assistant_message` stamps the current time.
        let transcript = simple();
        let mut entries = vec![SessionEntry::metadata("meta", None, 5, "model", json!("m"))];
        entries.extend(chain_below(Some("meta"), "m", &transcript));
        entries.extend(chain_below(
            Some("m1"),
            "x",
            &[
                answer("RAW_UNSELECTED_BRANCH"),
                user("RAW_UNSELECTED_BRANCH"),
            ],
        ));
        let spec = Spec {
            entries,
            leaf: Some("m2".into()),
            result: transcript.clone(),
            ..Spec::default()
        }
        .file("notes.md", "声明过的")
        .file("private.md", "没有声明");
        let (only, seen) = case("only", &["notes.md"], &spec, &log, pass());
        let report = run_eval_case(&only).await;
        assert_eq!(report.status, EvalStatus::Passed, "活动路径一致，任务通过");
        let seen = lock(&seen).clone();
        assert_eq!(seen.len(), 1, "judge 恰好被调用一次");
        let observation = &seen[0];
        let ids: Vec<&str> = observation.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(
            ids,
            ["meta", "m0", "m1", "m2"],
            "judge 只看到从根到活动 leaf 的 entry（含 metadata），看不到别的分支"
        );
        assert_eq!(
            observation.files,
            vec![("notes.md".to_string(), "声明过的".to_string())],
            "judge 只看到声明过的文件，按声明顺序"
        );
        assert_eq!(
            observation.file("private.md"),
            None,
            "没声明的文件不进入观察值"
        );
        assert_eq!(
            observation.result.messages, transcript,
            "观察值带着这次运行的结果"
        );
        assert!(
            !log_of(&log).iter().any(|step| step == "read private.md"),
            "runner 只读声明过的文件"
        );
    }

    #[tokio::test]
    async fn execution_and_collection_faults_are_different_infra_phases() {
        let cases = [
            (
                "prompt",
                EvalPhase::Execute,
                EvalFailureCode::ExecuteFailed,
                2,
            ),
            (
                "flush",
                EvalPhase::Execute,
                EvalFailureCode::ExecuteFailed,
                3,
            ),
            (
                "entries",
                EvalPhase::Collect,
                EvalFailureCode::CollectFailed,
                4,
            ),
            (
                "read",
                EvalPhase::Collect,
                EvalFailureCode::CollectFailed,
                5,
            ),
        ];
        for (step, phase, code, reached) in cases {
            let log: Log = Arc::default();
            let spec = Spec::consistent(&simple())
                .file("notes.md", "x")
                .failing(step, "故障");
            let (faulty, _) = case("faulty", &["notes.md"], &spec, &log, pass());
            let report = run_eval_case(&faulty).await;
            assert_eq!(
                (report.status, report.primary_failure),
                (EvalStatus::InfraFailed, Some(EvalFailure { phase, code })),
                "{step} 出错：执行故障记在 execute，收集故障记在 collect"
            );
            let expected = [&FULL_RUN[..reached], &["dispose", "cleanup"]].concat();
            assert_eq!(
                log_of(&log),
                steps(&expected),
                "{step} 出错之后不再往下走、不调用 judge，但照样 dispose 再 cleanup"
            );
        }
    }

    #[tokio::test]
    async fn a_declared_file_must_lie_inside_the_workspace() {
        let base = scratch();
        let workspace = EvalWorkspace::create(&base.0, "case-1", &[("notes/a.txt", "甲")])
            .expect("新的工作区目录应当建成");
        fs::create_dir_all(base.0.join("case-1x")).expect("测试要建一个相邻目录");
        fs::write(base.0.join("case-1x/secret.txt"), "邻居").expect("测试要写相邻目录的文件");
        assert_eq!(
            workspace.read("notes/a.txt").ok().as_deref(),
            Some("甲"),
            "工作区里的声明文件可以读"
        );
        for outside in [
            "../case-1x/secret.txt".to_string(),
            base.0.join("case-1x/secret.txt").display().to_string(),
            "missing.txt".to_string(),
        ] {
            assert!(
                workspace.read(&outside).is_err(),
                "工作区之外（按路径分量比较，不按字符串前缀）或不存在的文件不能读：{outside}"
            );
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(
                base.0.join("case-1x/secret.txt"),
                workspace.root().join("link.txt"),
            )
            .expect("测试要建一个符号链接");
            assert!(
                workspace.read("link.txt").is_err(),
                "指向工作区之外的符号链接不能读"
            );
        }
        for escaping in ["../escape.txt", "/tmp/escape.txt", ""] {
            assert!(
                EvalWorkspace::create(&base.0, "case-2", &[("a.txt", "甲"), (escaping, "x")])
                    .is_err(),
                "起始文件离开工作区或为空时必须拒绝：{escaping:?}"
            );
        }
        assert!(
            !base.0.join("escape.txt").exists() && !base.0.join("case-2").exists(),
            "拒绝的起始文件树什么都不留下"
        );
        assert!(
            EvalWorkspace::create(&base.0, "case-1", &[("notes/a.txt", "乙")]).is_err(),
            "已经存在的目录不是新的工作区，必须拒绝"
        );
        assert_eq!(
            fs::read_to_string(base.0.join("case-1/notes/a.txt"))
                .ok()
                .as_deref(),
            Some("甲"),
            "拒绝时不能改动已有的文件"
        );
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

    /// A workspace with `hello.txt`, chapter 08's tools in it and chapter 13's runtime over
    /// a scripted model that writes the file and then answers.
    async fn prepare_real(base: PathBuf, name: String) -> Result<PreparedEval, Fault> {
        let workspace = EvalWorkspace::create(&base, &name, &[("hello.txt", "旧\n")])?;
        let tools = CodingTools::new(workspace.root())
            .map_err(|error| Fault::from(error.to_string()))?
            .registry()
            .map_err(|error| Fault::from(format!("{error:?}")))?;
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![tool_call(
                "call-1",
                "write",
                json!({"path": "hello.txt", "content": "你好\n"}),
            )]),
            ScriptedTurn::text("写好了"),
        ]);
        let next = Arc::new(AtomicUsize::new(0));
        let mut config = RuntimeConfig::new(None, unlimited());
        config.system_prompt = Some("你是编码助手".into());
        let runtime = create_runtime(
            config,
            RuntimeDeps {
                model: Arc::new(model),
                tools,
                session: Arc::new(InMemorySessionStore::new()),
                resources: None,
                extensions: None,
                create_id: Arc::new(move || format!("e{}", next.fetch_add(1, Ordering::SeqCst))),
                now: Arc::new(|| 777),
            },
        )?;
        Ok(workspace.prepared(runtime))
    }

    #[tokio::test]
    async fn a_real_runtime_in_a_fresh_workspace_passes_twice() {
        let base = scratch();
        let runs = Arc::new(AtomicUsize::new(0));
        let (dir, counter) = (base.0.clone(), Arc::clone(&runs));
        let real = EvalCase::new(
            "write-hello",
            "把 hello.txt 改成你好",
            &["hello.txt"],
            move || {
                let name = format!("run-{}", counter.fetch_add(1, Ordering::SeqCst) + 1);
                prepare_real(dir.clone(), name)
            },
            |observation| {
                let last = observation.result.messages.last().map(text_of);
                Ok(TaskVerdict::from_checks(&[
                    observation.file("hello.txt") == Some("你好\n"),
                    last.as_deref() == Some("写好了"),
                ]))
            },
        );
        for round in 1..=2 {
            let report = within("真实运行时上的 case", run_eval_case(&real)).await;
            assert_eq!(
                (report.status, report.primary_failure),
                (EvalStatus::Passed, None),
                "第 {round} 次：第 13 章的运行时在新工作区里写好文件，任务通过"
            );
            assert!(
                !base.0.join(format!("run-{round}")).exists(),
                "第 {round} 次：cleanup 删掉这次运行的工作区"
            );
        }
        assert_eq!(runs.load(Ordering::SeqCst), 2, "两次运行各自 prepare 一次");
    }
}

// --- Lab 14.2 -------------------------------------------------------------------------------

mod protocol {
    use super::*;

    fn verdict(passed: bool, checks: &[bool]) -> TaskVerdict {
        TaskVerdict {
            passed,
            checks: checks.to_vec(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_verdict_decides_the_task_and_a_contradiction_is_the_judges() {
        let table = [
            (verdict(true, &[true, true]), Ok(true)),
            (verdict(false, &[true, false]), Ok(false)),
            (
                verdict(true, &[true, false]),
                Err(EvalFailureCode::InvalidVerdict),
            ),
            (
                verdict(false, &[true, true]),
                Err(EvalFailureCode::InvalidVerdict),
            ),
            (verdict(true, &[]), Err(EvalFailureCode::InvalidVerdict)),
            (verdict(false, &[]), Err(EvalFailureCode::InvalidVerdict)),
        ];
        for (given, expected) in table {
            assert_eq!(
                check_verdict(&given),
                expected,
                "verdict {given:?}：passed 必须恰好等于“所有检查都通过”，且至少有一项检查"
            );
        }
        for (given, status, failure) in [
            (
                verdict(false, &[true, false]),
                EvalStatus::TaskFailed,
                EvalFailure::of(EvalFailureCode::TaskRejected),
            ),
            (
                verdict(true, &[false]),
                EvalStatus::InfraFailed,
                EvalFailure::of(EvalFailureCode::InvalidVerdict),
            ),
        ] {
            let log: Log = Arc::default();
            let spec = Spec::consistent(&simple()).file("notes.md", "x");
            let (judged, _) = case("judged", &["notes.md"], &spec, &log, given.clone());
            let report = within("judge 给出 verdict 的 case", run_eval_case(&judged)).await;
            assert_eq!(
                (report.status, report.primary_failure),
                (status, Some(failure)),
                "verdict {given:?}：没通过是 task_failed，自相矛盾是 judge 的 infra 故障"
            );
            assert_eq!(
                log_of(&log),
                steps(&FULL_RUN),
                "judge 判完之后照样 dispose 再 cleanup"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_active_path_rejects_inconsistent_transcripts() {
        use EvalFailureCode::*;
        let read = ("c1", "read");
        let table: Vec<(&str, Vec<AgentMessage>, EvalFailureCode)> = vec![
            ("只有 system", vec![system("s")], MissingUserInteraction),
            (
                "最后的 user 没有回答",
                vec![user("q"), answer("a"), user("q2")],
                IncompleteUserInteraction,
            ),
            (
                "assistant 在任何 user 之前",
                vec![answer("a"), user("q"), answer("b")],
                AssistantWithoutUser,
            ),
            (
                "工具结果在任何 user 之前",
                vec![result("c1", "read", false), user("q"), answer("a")],
                ToolCallWithoutUser,
            ),
            (
                "同一条路径上重复的调用 id",
                vec![
                    user("q"),
                    calls(&[read]),
                    result("c1", "read", false),
                    calls(&[read]),
                    result("c1", "read", false),
                    answer("a"),
                ],
                DuplicateToolCall,
            ),
            (
                "没有对应调用的结果",
                vec![
                    user("q"),
                    calls(&[read]),
                    result("c9", "read", false),
                    answer("a"),
                ],
                OrphanToolResult,
            ),
            (
                "同一个调用两个结果",
                vec![
                    user("q"),
                    calls(&[read]),
                    result("c1", "read", false),
                    result("c1", "read", false),
                    answer("a"),
                ],
                DuplicateToolResult,
            ),
            (
                "结果的工具名和调用不同",
                vec![
                    user("q"),
                    calls(&[read]),
                    result("c1", "bash", false),
                    answer("a"),
                ],
                ToolNameMismatch,
            ),
            (
                "调用一直没有结果",
                vec![user("q"), calls(&[read])],
                UnpairedToolCall,
            ),
            (
                "下一个 assistant 之后才补交结果",
                vec![
                    user("q"),
                    calls(&[read]),
                    answer("先不管"),
                    result("c1", "read", false),
                ],
                UnpairedToolCall,
            ),
            (
                "新的 user 打断了没答完的调用",
                vec![
                    user("q"),
                    calls(&[read]),
                    user("q2"),
                    result("c1", "read", false),
                    answer("a"),
                ],
                UnpairedToolCall,
            ),
        ];
        for (what, messages, code) in table {
            assert_eq!(
                check_protocol(&messages),
                Err(code),
                "{what}：必须以 {code:?} 拒绝"
            );
        }
        assert_eq!(
            check_protocol(&[
                user("q"),
                calls(&[read, ("c2", "bash")]),
                result("c2", "bash", true),
                result("c1", "read", false),
                answer("a")
            ]),
            Ok(()),
            "同一批调用的结果可以按任意顺序回来，出错的结果也是结果"
        );

        let orphan = vec![
            user("q"),
            calls(&[read]),
            result("c9", "read", false),
            answer("a"),
        ];
        let mut mismatched = Spec::consistent(&simple());
        mismatched.result.push(answer("路径上没有这一条"));
        let runs = [
            (
                "没有活动 leaf",
                Spec {
                    leaf: None,
                    ..Spec::consistent(&simple())
                },
                MissingActiveLeaf,
            ),
            (
                "活动 leaf 不在会话里",
                Spec {
                    leaf: Some("nope".into()),
                    ..Spec::consistent(&simple())
                },
                InvalidActivePath,
            ),
            (
                "运行结果和会话路径不一致",
                mismatched,
                ResultSessionMismatch,
            ),
            (
                "路径上有孤立的结果",
                Spec::consistent(&orphan),
                OrphanToolResult,
            ),
        ];
        for (what, spec, code) in runs {
            let log: Log = Arc::default();
            let (broken, seen) = case(
                "broken",
                &["notes.md"],
                &spec.file("notes.md", "x"),
                &log,
                pass(),
            );
            let report = within("协议不成立的 case", run_eval_case(&broken)).await;
            assert_eq!(
                (report.status, report.primary_failure),
                (
                    EvalStatus::ProtocolFailed,
                    Some(EvalFailure {
                        phase: EvalPhase::Protocol,
                        code
                    })
                ),
                "{what}：是协议故障 protocol/{code:?}"
            );
            assert!(lock(&seen).is_empty(), "{what}：协议不成立时不调用 judge");
            assert_eq!(
                log_of(&log),
                steps(&["prepare", "prompt", "flush", "entries", "dispose", "cleanup"]),
                "{what}：协议不成立时不读文件，照样 dispose 再 cleanup"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn system_messages_sit_outside_the_pairing() {
        let transcript = vec![
            system("基础"),
            user("读一下"),
            calls(&[("c1", "read")]),
            system("补丁"),
            result("c1", "read", false),
            system("又一个补丁"),
            answer("读完了"),
        ];
        assert_eq!(
            check_protocol(&transcript),
            Ok(()),
            "system message 可以出现在任何位置，不参与调用与结果的配对"
        );
        assert_eq!(
            check_protocol(&[system("基础"), user("q"), system("补丁")]),
            Err(EvalFailureCode::IncompleteUserInteraction),
            "system message 不算对 user 的回答"
        );
        let log: Log = Arc::default();
        let spec = Spec::consistent(&transcript).file("notes.md", "x");
        let (with_system, _) = case("system", &["notes.md"], &spec, &log, pass());
        assert_eq!(
            within("带 system 补丁的 case", run_eval_case(&with_system))
                .await
                .status,
            EvalStatus::Passed,
            "带 system 补丁的一致 transcript 通过"
        );
    }

    const SECRET: &str = "SECRET-7f3a";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn panics_and_errors_in_prepare_and_judge_leave_fixed_codes() {
        assert_eq!(
            contained(async { 7 }).await,
            Ok(7),
            "contained 原样交回任务的结果"
        );
        assert_eq!(
            contained(async { panic!("panic 必须关在自己的任务里：{SECRET}") }).await,
            Err::<(), _>(Panicked),
            "任务 panic 时 contained 只交回 Panicked"
        );

        let spec = Spec::consistent(&simple()).file("notes.md", "x");
        let prepare_error = EvalCase::new(
            "prepare-error",
            "p",
            &[],
            || async { Err(Fault::from(format!("prepare 出错：{SECRET}"))) },
            |_| Ok(pass()),
        );
        let prepare_panic = EvalCase::new(
            "prepare-panic",
            "p",
            &[],
            || async {
                panic!("prepare 的 panic 必须被 runner 接住，正文不能进报告：{SECRET}")
            },
            |_| Ok(pass()),
        );
        let prepare_panics_at_call = EvalCase::new(
            "prepare-panics-at-call",
            "p",
            &[],
            || -> std::future::Ready<Result<PreparedEval, Fault>> {
                panic!("prepare 在返回 future 之前 panic，也必须被接住：{SECRET}")
            },
            |_| Ok(pass()),
        );
        for prepare_case in [prepare_error, prepare_panic, prepare_panics_at_call] {
            let report = within("prepare 失败的 case", run_eval_case(&prepare_case)).await;
            assert_eq!(
                (report.status, report.primary_failure),
                (
                    EvalStatus::InfraFailed,
                    Some(EvalFailure::of(EvalFailureCode::PrepareFailed))
                ),
                "{}：prepare 出错或 panic 都只留下 prepare/prepare_failed",
                prepare_case.id
            );
            assert!(
                !every_rendering(&report).contains(SECRET),
                "{}：报告里不能出现异常正文",
                prepare_case.id
            );
        }

        for panics in [false, true] {
            let log: Log = Arc::default();
            let prepared_spec = spec.clone();
            let log_prepare = Arc::clone(&log);
            let judged = EvalCase::new(
                "judge-fails",
                "p",
                &["notes.md"],
                move || {
                    let ready = prepared(&prepared_spec, &log_prepare);
                    async move { Ok(ready) }
                },
                move |_| match panics {
                    true => panic!("judge 的 panic 必须被 runner 接住，正文不能进报告：{SECRET}"),
                    false => Err(Fault::from(format!("judge 出错：{SECRET}"))),
                },
            );
            let report = within("judge 失败的 case", run_eval_case(&judged)).await;
            assert_eq!(
                (report.status, report.primary_failure),
                (
                    EvalStatus::InfraFailed,
                    Some(EvalFailure::of(EvalFailureCode::JudgeFailed))
                ),
                "judge {}：只留下 judge/judge_failed",
                if panics { "panic" } else { "出错" }
            );
            assert!(
                !every_rendering(&report).contains(SECRET),
                "报告里不能出现 judge 的异常正文"
            );
            assert_eq!(
                log_of(&log)[log_of(&log).len() - 2..],
                steps(&["dispose", "cleanup"]),
                "judge 失败之后照样 dispose 再 cleanup"
            );
        }
    }
}

// --- Lab 14.3 -------------------------------------------------------------------------------

mod evidence {
    use super::*;

    const SECRET: &str = "SECRET-91c0";

    fn secret_transcript() -> Vec<AgentMessage> {
        vec![
            system(&format!("system 里的 {SECRET}")),
            user(&format!("user 里的 {SECRET}")),
            calls(&[
                ("call-SECRET-91c0-a", "read"),
                ("call-SECRET-91c0-b", "bash"),
            ]),
            result("call-SECRET-91c0-a", "read", false),
            result("call-SECRET-91c0-b", "bash", true),
            answer(&format!("答案里的 {SECRET}")),
        ]
    }

    #[tokio::test]
    async fn safe_evidence_keeps_counts_only() {
        let mut counted = SafeEvidence::default();
        counted.count_messages(&secret_transcript());
        counted.count_checks(&TaskVerdict {
            passed: false,
            checks: vec![true, false, true],
        });
        assert_eq!(
            (counted.messages, counted.tools, counted.checks),
            (
                MessageCounts {
                    system: 1,
                    user: 1,
                    assistant: 2,
                    tool_result: 2
                },
                ToolCounts {
                    calls: 2,
                    results: 2,
                    errors: 1
                },
                CheckCounts {
                    passed: 2,
                    failed: 1
                },
            ),
            "证据按角色、工具调用、结果、出错结果与检查计数"
        );

        let log: Log = Arc::default();
        let path = "secret/SECRET-91c0.txt";
        let spec = Spec::consistent(&secret_transcript()).file(path, &format!("文件里的 {SECRET}"));
        let verdict = TaskVerdict::from_checks(&[true, true, true]);
        let (leaky, _) = case("evidence", &[path], &spec, &log, verdict);
        let report = run_eval_case(&leaky).await;
        assert_eq!(
            report.status,
            EvalStatus::Passed,
            "一致的 transcript、全部检查通过"
        );
        assert_eq!(
            report.evidence,
            SafeEvidence {
                messages: MessageCounts {
                    system: 1,
                    user: 1,
                    assistant: 2,
                    tool_result: 2
                },
                tools: ToolCounts {
                    calls: 2,
                    results: 2,
                    errors: 1
                },
                files: FileCounts {
                    requested: 1,
                    read: 1
                },
                checks: CheckCounts {
                    passed: 3,
                    failed: 0
                },
            },
            "报告的证据是活动路径、声明文件与 verdict 的计数"
        );
        let shown = format!("{}\n{}", every_rendering(&report), report);
        assert!(
            !shown.contains(SECRET),
            "报告的 Debug、Display 与 JSON 里不能有 transcript、文件内容、路径或调用 id：{shown}"
        );
    }

    #[tokio::test]
    async fn later_failures_never_replace_the_primary_and_keep_their_order() {
        let mut report = EvalReport::new("direct");
        report.record(EvalFailureCode::CollectFailed);
        report.record(EvalFailureCode::DisposeFailed);
        report.record(EvalFailureCode::CleanupFailed);
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
                ],
            ),
            "第一个故障是主因并决定状态，之后的按发生顺序追加"
        );

        let runs = [
            (
                false,
                &["dispose", "cleanup"][..],
                EvalStatus::TaskFailed,
                EvalFailureCode::TaskRejected,
                vec![
                    EvalFailureCode::DisposeFailed,
                    EvalFailureCode::CleanupFailed,
                ],
            ),
            (
                true,
                &["dispose"][..],
                EvalStatus::InfraFailed,
                EvalFailureCode::DisposeFailed,
                vec![],
            ),
            (
                true,
                &["cleanup"][..],
                EvalStatus::InfraFailed,
                EvalFailureCode::CleanupFailed,
                vec![],
            ),
        ];
        for (passes, failing, status, primary, secondary) in runs {
            let log: Log = Arc::default();
            let mut spec = Spec::consistent(&simple()).file("notes.md", "x");
            for step in failing {
                spec = spec.failing(step, "收尾出错");
            }
            let verdict = TaskVerdict::from_checks(&[passes]);
            let (closing, _) = case("closing", &["notes.md"], &spec, &log, verdict);
            let report = run_eval_case(&closing).await;
            assert_eq!(
                (report.status, report.primary_failure),
                (status, Some(EvalFailure::of(primary))),
                "{failing:?} 出错：已有主因时不覆盖，没有时收尾故障才成为主因"
            );
            assert_eq!(
                report.secondary_failures,
                secondary
                    .into_iter()
                    .map(EvalFailure::of)
                    .collect::<Vec<_>>(),
                "{failing:?} 出错：后来的故障按发生顺序追加"
            );
            assert_eq!(
                log_of(&log),
                steps(&FULL_RUN),
                "{failing:?} 出错：dispose 失败也照样 cleanup，各一次"
            );
        }
    }

    #[tokio::test]
    async fn the_suite_runs_cases_one_at_a_time_in_input_order() {
        assert!(run_eval_suite(&[]).await.is_empty(), "空的 suite 没有报告");
        let log: Log = Arc::default();
        let spec = Spec::consistent(&simple()).file("notes.md", "x");
        let (a, _) = case("a", &["notes.md"], &spec.clone().tagged("a"), &log, pass());
        let (b, _) = case(
            "b",
            &["notes.md"],
            &spec.clone().tagged("b"),
            &log,
            TaskVerdict::from_checks(&[false]),
        );
        let reports = within("整个 suite", run_eval_suite(&[a.clone(), b, a])).await;
        let expected: Vec<String> = ["a", "b", "a"]
            .iter()
            .flat_map(|tag| FULL_RUN.iter().map(move |step| format!("{tag}:{step}")))
            .collect();
        assert_eq!(
            log_of(&log),
            expected,
            "suite 串行：一个 case 收口之后下一个才 prepare，重复的 case 重新 prepare"
        );
        let summary: Vec<(&str, EvalStatus)> =
            reports.iter().map(|r| (r.id.as_str(), r.status)).collect();
        assert_eq!(
            summary,
            [
                ("a", EvalStatus::Passed),
                ("b", EvalStatus::TaskFailed),
                ("a", EvalStatus::Passed)
            ],
            "报告按输入顺序，一个 case 一份"
        );
    }

    #[test]
    fn a_report_prints_fixed_words_and_counts() {
        let mut report = EvalReport::new("demo");
        report.evidence = SafeEvidence {
            messages: MessageCounts {
                system: 1,
                user: 2,
                assistant: 3,
                tool_result: 4,
            },
            tools: ToolCounts {
                calls: 4,
                results: 4,
                errors: 1,
            },
            files: FileCounts {
                requested: 2,
                read: 1,
            },
            checks: CheckCounts {
                passed: 0,
                failed: 0,
            },
        };
        report.record(EvalFailureCode::CollectFailed);
        report.record(EvalFailureCode::CleanupFailed);
        assert_eq!(
            report.to_string(),
            "demo infra_failed · 主因 collect/collect_failed · 之后 cleanup/cleanup_failed · 消息 system 1 user 2 assistant 3 toolResult 4 · 工具 调用 4 结果 4 出错 1 · 文件 1/2 · 检查 通过 0 失败 0",
            "报告的一行文字只由 id、固定的状态与故障名和计数组成"
        );
        let json: Value = serde_json::to_value(&report).expect("报告必须能序列化成 JSON");
        assert_eq!(
            json,
            json!({
                "id": "demo",
                "status": "infra_failed",
                "evidence": {
                    "messages": {"system": 1, "user": 2, "assistant": 3, "tool_result": 4},
                    "tools": {"calls": 4, "results": 4, "errors": 1},
                    "files": {"requested": 2, "read": 1},
                    "checks": {"passed": 0, "failed": 0}
                },
                "primary_failure": {"phase": "collect", "code": "collect_failed"},
                "secondary_failures": [{"phase": "cleanup", "code": "cleanup_failed"}]
            }),
            "JSON 报告的字段与取值固定，给 CI 读"
        );
        let mut two_later = EvalReport::new("two");
        two_later.record(EvalFailureCode::CollectFailed);
        two_later.record(EvalFailureCode::DisposeFailed);
        two_later.record(EvalFailureCode::CleanupFailed);
        assert_eq!(
            two_later.to_string(),
            "two infra_failed · 主因 collect/collect_failed · 之后 dispose/dispose_failed, cleanup/cleanup_failed · 消息 system 0 user 0 assistant 0 toolResult 0 · 工具 调用 0 结果 0 出错 0 · 文件 0/0 · 检查 通过 0 失败 0",
            "几个后续故障按发生顺序列出，用逗号加空格隔开"
        );
        let passed = EvalReport::new("ok");
        assert_eq!(
            passed.to_string(),
            "ok passed · 消息 system 0 user 0 assistant 0 toolResult 0 · 工具 调用 0 结果 0 出错 0 · 文件 0/0 · 检查 通过 0 失败 0",
            "通过的报告不写故障"
        );
    }
}
