//! Chapter 01 acceptance tests: the Rust survival kit.

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pi_course::survival::{
    describe, parse_command, parse_script, run_all, BoxFuture, Command, Event, Handler,
    HandlerResult, ParseError, Registry, RegistryError, ScriptError, StopReason,
};
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

/// Awaits `future`, failing with `rule` if it is still pending after a second.
async fn soon<F: Future>(future: F, rule: &str) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(1), future).await {
        Ok(value) => value,
        Err(_) => panic!("1 秒内没有完成：{rule}"),
    }
}

/// The text of a panic payload, when it has one.
fn panic_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| text.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "（不是文字）".to_string())
}

/// Runs `f`; a panic inside fails the test with `rule`.
fn without_panic<T>(rule: &str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => value,
        Err(payload) => panic!("{rule}（实际发生了 panic：{}）", panic_text(&*payload)),
    }
}

/// Runs `future` on a task of its own: a panic inside fails the test with `rule`, a future
/// still pending after a second fails it with `late`.
async fn on_a_task<T: Send + 'static>(
    future: impl Future<Output = T> + Send + 'static,
    rule: &str,
    late: &str,
) -> T {
    match soon(tokio::spawn(future), late).await {
        Ok(value) => value,
        Err(error) => panic!(
            "{rule}（实际发生了 panic：{}）",
            panic_text(&*error.into_panic())
        ),
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("测试数据应是 object：{other}"),
    }
}

fn command(name: &str, arguments: Value) -> Command {
    Command {
        name: name.to_string(),
        arguments: object(arguments),
    }
}

fn toolcall_end() -> Event {
    Event::ToolcallEnd {
        content_index: 1,
        id: "call_1".to_string(),
        name: "read".to_string(),
        arguments: json!({"path": "a.txt", "limit": 10}),
    }
}

/// One event of every variant with its exact wire JSON.
fn wire_cases() -> Vec<(Event, &'static str)> {
    vec![
        (Event::Start, r#"{"type":"start"}"#),
        (
            Event::TextDelta {
                content_index: 0,
                delta: "hi".to_string(),
            },
            r#"{"type":"text_delta","contentIndex":0,"delta":"hi"}"#,
        ),
        (
            toolcall_end(),
            r#"{"type":"toolcall_end","contentIndex":1,"id":"call_1","name":"read","arguments":{"path":"a.txt","limit":10}}"#,
        ),
        (
            Event::Done {
                reason: StopReason::ToolUse,
            },
            r#"{"type":"done","reason":"toolUse"}"#,
        ),
        (
            Event::Error {
                reason: StopReason::Aborted,
                error_message: "Request was aborted".to_string(),
            },
            r#"{"type":"error","reason":"aborted","errorMessage":"Request was aborted"}"#,
        ),
    ]
}

mod wire_events {
    use super::*;

    #[test]
    fn every_event_writes_pi_wire_json() {
        for (event, wire) in wire_cases() {
            assert_eq!(
                event.to_wire(),
                wire,
                "事件必须写成 pi 的 wire JSON：type 标签用 snake_case，字段名用 camelCase"
            );
        }
    }

    #[test]
    fn wire_json_reads_back_into_the_same_event() {
        for (event, wire) in wire_cases() {
            let read = without_panic("from_wire 必须返回 Result，不能 panic", || {
                Event::from_wire(wire)
            });
            assert_eq!(
                read.expect("pi 的 wire JSON 必须能读回来"),
                event,
                "from_wire 必须把 pi 的 wire JSON 读回同一个事件"
            );
        }
        let reordered = Event::from_wire(
            r#"{"delta":"lo","contentIndex":2,"type":"text_delta","partial":{"role":"assistant"}}"#,
        );
        assert_eq!(
            reordered.expect("键的顺序不同、多了 partial 字段的 text_delta 也必须能读"),
            Event::TextDelta {
                content_index: 2,
                delta: "lo".to_string(),
            },
            "键的顺序无关紧要，枚举没有建模的字段（pi 的 partial）必须被忽略"
        );
    }

    #[test]
    fn every_stop_reason_uses_pi_spelling() {
        let reasons = [
            (StopReason::Stop, "stop"),
            (StopReason::Length, "length"),
            (StopReason::ToolUse, "toolUse"),
            (StopReason::Error, "error"),
            (StopReason::Aborted, "aborted"),
        ];
        for (reason, name) in reasons {
            assert_eq!(
                reason.as_str(),
                name,
                "as_str 必须给出 pi 的拼写（camelCase）"
            );
            let wire = format!(r#"{{"type":"done","reason":"{name}"}}"#);
            assert_eq!(
                Event::Done { reason }.to_wire(),
                wire,
                "停止原因在 wire JSON 里必须是 camelCase，与 as_str 一致"
            );
            assert_eq!(
                Event::from_wire(&wire).expect("pi 拼写的停止原因必须能读"),
                Event::Done { reason },
                "pi 拼写的停止原因必须读回同一个值"
            );
        }
    }

    #[test]
    fn wrong_spellings_are_errors_not_panics() {
        let cases = [
            (
                r#"{"type":"textDelta","contentIndex":0,"delta":"hi"}"#,
                "unknown variant `textDelta`",
            ),
            (
                r#"{"type":"text_delta","content_index":0,"delta":"hi"}"#,
                "missing field `contentIndex`",
            ),
            (
                r#"{"type":"done","reason":"tool_use"}"#,
                "unknown variant `tool_use`",
            ),
            (r#"{"delta":"hi"}"#, "missing field `type`"),
        ];
        for (wire, start) in cases {
            let read = without_panic("from_wire 必须返回 Result，不能 panic", || {
                Event::from_wire(wire)
            });
            let message = match read {
                Ok(event) => panic!("不是 pi 拼写的 {wire} 必须被拒绝，却读成了 {event:?}"),
                Err(error) => error.to_string(),
            };
            assert!(
                message.starts_with(start),
                "拼写错误必须是 serde_json 的 Err：{wire} 应得到“{start}…”，实际是“{message}”"
            );
        }
    }

    #[test]
    fn describe_gives_every_variant_its_own_line() {
        let lines: Vec<String> = wire_cases()
            .iter()
            .map(|(event, _)| describe(event))
            .collect();
        assert_eq!(
            lines,
            [
                "start",
                "text #0: hi",
                r#"tool #1: read {"path":"a.txt","limit":10} (call_1)"#,
                "done: toolUse",
                "error: aborted (Request was aborted)",
            ],
            "describe 必须给每个变体一行自己的描述，参数写成紧凑 JSON，停止原因用 pi 的拼写"
        );
    }
}

mod parser {
    use super::*;

    fn parse(line: &str) -> Result<Command, ParseError> {
        without_panic("解析失败必须返回 Err，不能 panic", || {
            parse_command(line)
        })
    }

    #[test]
    fn a_command_line_becomes_a_typed_command() {
        let cases = [
            (
                r#"read {"path":"a.txt","limit":10}"#,
                command("read", json!({"path": "a.txt", "limit": 10})),
            ),
            ("  ls  ", command("ls", json!({}))),
            (
                "grep   { \"pattern\": \"fn main\" }  ",
                command("grep", json!({"pattern": "fn main"})),
            ),
            ("list_dir-2 {}", command("list_dir-2", json!({}))),
            (
                "write\t{\"path\":\"b.txt\"}",
                command("write", json!({"path": "b.txt"})),
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(
                parse(line),
                Ok(expected),
                "命令名是第一个空白之前的部分，其余部分是 JSON object 参数，可以省略"
            );
        }
    }

    #[test]
    fn every_refusal_is_a_value_with_a_chinese_message() {
        let cases = [
            ("", ParseError::Empty, "空命令：一行里至少要有命令名"),
            ("   ", ParseError::Empty, "空命令：一行里至少要有命令名"),
            (
                r#"read{"path":"a"}"#,
                ParseError::BadName(r#"read{"path":"a"}"#.to_string()),
                r#"命令名只能由字母、数字、_ 和 - 组成：read{"path":"a"}"#,
            ),
            (
                "读取 {}",
                ParseError::BadName("读取".to_string()),
                "命令名只能由字母、数字、_ 和 - 组成：读取",
            ),
            (
                "read [1, 2]",
                ParseError::NotObject("array".to_string()),
                "参数必须是 object，实际是 array",
            ),
            (
                "read null",
                ParseError::NotObject("null".to_string()),
                "参数必须是 object，实际是 null",
            ),
            (
                r#"read "a.txt""#,
                ParseError::NotObject("string".to_string()),
                "参数必须是 object，实际是 string",
            ),
            (
                "read 42",
                ParseError::NotObject("number".to_string()),
                "参数必须是 object，实际是 number",
            ),
            (
                "read true",
                ParseError::NotObject("boolean".to_string()),
                "参数必须是 object，实际是 boolean",
            ),
        ];
        for (line, error, message) in cases {
            assert_eq!(
                parse(line),
                Err(error.clone()),
                "不合法的命令行必须变成对应的 ParseError（null 也不能当成没有参数）"
            );
            assert_eq!(
                error.to_string(),
                message,
                "ParseError 的 Display 必须是给学习者看的中文信息"
            );
        }
    }

    #[test]
    fn arguments_that_are_not_json_keep_serde_json_message() {
        let cases = [
            (
                r#"read {"path":"#,
                "EOF while parsing a value at line 1 column 8",
            ),
            (
                r#"read {"path":"a"} extra"#,
                "trailing characters at line 1 column 14",
            ),
        ];
        for (line, detail) in cases {
            assert_eq!(
                parse(line),
                Err(ParseError::InvalidJson(detail.to_string())),
                "不是 JSON 的参数必须变成 InvalidJson，并带上 serde_json 自己的说明"
            );
            assert_eq!(
                ParseError::InvalidJson(detail.to_string()).to_string(),
                format!("参数不是合法的 JSON：{detail}"),
                "InvalidJson 的 Display 必须是中文前缀加 serde_json 的说明"
            );
        }
    }

    #[test]
    fn a_script_skips_blank_and_comment_lines() {
        let script = "# read two files\n\nread {\"path\":\"a.txt\"}\n   \n  # indented comment\n  ls\nread {\"path\":\"b.txt\"}\n";
        let parsed = without_panic("parse_script 不能 panic", || parse_script(script));
        assert_eq!(
            parsed,
            Ok(vec![
                command("read", json!({"path": "a.txt"})),
                command("ls", json!({})),
                command("read", json!({"path": "b.txt"})),
            ]),
            "脚本必须跳过空行和以 # 开头的行，其余每行按顺序解析成一条命令"
        );
    }

    #[test]
    fn the_first_bad_line_stops_the_script_and_is_named() {
        let script = "ls\n# comment\n\nread [1]\nls\nread null\n";
        let error = without_panic("parse_script 不能 panic", || parse_script(script))
            .expect_err("有错误的脚本必须返回 Err");
        assert_eq!(
            error,
            ScriptError {
                line: 4,
                error: ParseError::NotObject("array".to_string()),
            },
            "第一处错误就停下，行号从 1 开始数，空行和注释行也算行"
        );
        assert_eq!(
            error.to_string(),
            "第 4 行：参数必须是 object，实际是 array",
            "ScriptError 的 Display 必须是“第 N 行：”加上那一行的错误信息"
        );
        assert_eq!(
            std::error::Error::source(&error).map(|source| source.to_string()),
            Some("参数必须是 object，实际是 array".to_string()),
            "ScriptError 的 source 必须是那一行的 ParseError"
        );
    }
}

mod registry {
    use super::*;

    #[tokio::test]
    async fn registered_closures_answer_through_call() {
        let mut registry = Registry::new();
        registry
            .register("echo", |input| async move { Ok(input) })
            .expect("第一次注册 echo 必须成功");
        registry
            .register(
                "upper",
                |input: String| async move { Ok(input.to_uppercase()) },
            )
            .expect("第一次注册 upper 必须成功");
        registry
            .register("fail", |input| async move { Err(format!("fail: {input}")) })
            .expect("第一次注册 fail 必须成功");
        let answers = [
            ("echo", "hi", Ok("hi".to_string())),
            ("upper", "hi", Ok("HI".to_string())),
            ("fail", "x", Err("fail: x".to_string())),
        ];
        for (name, input, expected) in answers {
            assert_eq!(
                soon(
                    registry.call(name, input.to_string()),
                    "call 返回的 future 必须完成"
                )
                .await,
                expected,
                "call 必须把输入交给同名的处理器，并原样返回它的结果"
            );
        }
    }

    #[tokio::test]
    async fn a_hand_boxed_handler_is_inserted_and_shared() {
        let shout: Handler = Arc::new(|input: String| -> BoxFuture<'static, HandlerResult> {
            Box::pin(async move { Ok(format!("{input}!")) })
        });
        let mut registry = Registry::new();
        registry
            .insert("shout", shout)
            .expect("第一次插入 shout 必须成功");
        let handler = registry.get("shout").expect("get 必须找到已插入的处理器");
        assert_eq!(
            soon(handler("a".to_string()), "处理器返回的 future 必须完成").await,
            Ok("a!".to_string()),
            "get 返回的就是插入的那个处理器"
        );
        assert_eq!(
            soon(handler("b".to_string()), "处理器返回的 future 必须完成").await,
            Ok("b!".to_string()),
            "Handler 是 Fn：同一个处理器可以调用多次"
        );
        assert_eq!(
            soon(
                registry.call("shout", "c".to_string()),
                "call 返回的 future 必须完成"
            )
            .await,
            Ok("c!".to_string()),
            "insert 进来的处理器也能通过 call 调用"
        );
        assert!(
            registry.get("whisper").is_none(),
            "没有注册过的名字，get 必须返回 None"
        );
    }

    #[tokio::test]
    async fn names_are_unique_and_kept_in_registration_order() {
        let mut registry = Registry::new();
        for name in ["zeta", "alpha", "mid"] {
            registry
                .register(
                    name,
                    move |input| async move { Ok(format!("{name}: {input}")) },
                )
                .expect("不同的名字必须都能注册");
        }
        let again = registry.register("alpha", |_input| async move { Ok("second".to_string()) });
        assert_eq!(
            again,
            Err(RegistryError::Duplicate("alpha".to_string())),
            "同名注册必须返回 Duplicate，而不是覆盖或再加一个"
        );
        assert_eq!(
            RegistryError::Duplicate("alpha".to_string()).to_string(),
            "命令已存在：alpha",
            "RegistryError 的 Display 必须是中文信息"
        );
        let hand_boxed: Handler = Arc::new(|_input: String| -> BoxFuture<'static, HandlerResult> {
            Box::pin(async { Ok("third".to_string()) })
        });
        assert_eq!(
            registry.insert("mid", hand_boxed),
            Err(RegistryError::Duplicate("mid".to_string())),
            "insert 同样不能接受已注册的名字"
        );
        assert_eq!(
            registry.names(),
            ["zeta", "alpha", "mid"],
            "names 必须按注册顺序列出每个名字一次"
        );
        assert_eq!(
            soon(
                registry.call("alpha", "x".to_string()),
                "call 返回的 future 必须完成"
            )
            .await,
            Ok("alpha: x".to_string()),
            "被拒绝的注册不能替换原来的处理器"
        );
    }

    #[tokio::test]
    async fn an_unknown_name_is_an_error_value() {
        let mut registry = Registry::new();
        registry
            .register("echo", |input| async move { Ok(input) })
            .expect("第一次注册 echo 必须成功");
        for name in ["nope", "ECHO"] {
            let registry = registry.clone();
            let answer = on_a_task(
                async move { registry.call(name, "x".to_string()).await },
                "未知命令必须是 Err 值，不能 panic",
                "未知命令的 future 必须立即完成",
            )
            .await;
            assert_eq!(
                answer,
                Err(format!("未知命令：{name}")),
                "名字必须完全相同（区分大小写）才算注册过；未知命令的错误是“未知命令：名字”"
            );
        }
    }

    #[tokio::test]
    async fn each_call_runs_the_handler_once_and_may_outlive_the_registry() {
        let calls = Arc::new(AtomicUsize::new(0));
        let mut registry = Registry::new();
        let counter = Arc::clone(&calls);
        registry
            .register("count", move |input| {
                let counter = Arc::clone(&counter);
                async move {
                    let seen = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    Ok(format!("{input} #{seen}"))
                }
            })
            .expect("第一次注册 count 必须成功");
        let first = registry.call("count", "a".to_string());
        let second = registry.call("count", "b".to_string());
        drop(registry);
        assert_eq!(
            soon(first, "call 返回的 future 必须完成").await,
            Ok("a #1".to_string()),
            "call 返回的 future 自带它需要的一切（'static），注册表没了也能运行"
        );
        assert_eq!(
            on_a_task(second, "处理器不能 panic", "call 返回的 future 必须完成").await,
            Ok("b #2".to_string()),
            "call 返回的 future 可以交给 tokio::spawn 在别的任务里运行"
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "每次 call 只运行处理器一次"
        );
    }
}

mod batch {
    use super::*;
    use tokio::sync::{Barrier, Notify};

    /// Runs `run_all` on a task of its own, so a panic in it is a failed rule, not a crash.
    async fn batch(
        registry: &Registry,
        jobs: &[(&'static str, &'static str)],
        cancel: &CancellationToken,
        late: &str,
    ) -> Vec<HandlerResult> {
        let registry = registry.clone();
        let jobs = jobs.to_vec();
        let cancel = cancel.clone();
        on_a_task(
            async move { run_all(&registry, &jobs, &cancel).await },
            "一个处理器 panic 不能让 run_all 自己 panic：它必须变成那一格的 Err",
            late,
        )
        .await
    }

    fn counting(registry: &mut Registry, name: &str, answer: HandlerResult) -> Arc<AtomicUsize> {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&calls);
        registry
            .register(name, move |input| {
                let counter = Arc::clone(&counter);
                let answer = answer.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    answer
                        .map(|ok| format!("{ok}: {input}"))
                        .map_err(|error| format!("{error}: {input}"))
                }
            })
            .expect("测试里的名字各不相同，注册必须成功");
        calls
    }

    #[tokio::test]
    async fn a_batch_runs_its_handlers_at_the_same_time() {
        let barrier = Arc::new(Barrier::new(3));
        let mut registry = Registry::new();
        registry
            .register("meet", move |input| {
                let barrier = Arc::clone(&barrier);
                async move {
                    barrier.wait().await;
                    Ok(input)
                }
            })
            .expect("第一次注册 meet 必须成功");
        let results = batch(
            &registry,
            &[("meet", "a"), ("meet", "b"), ("meet", "c")],
            &CancellationToken::new(),
            "处理器必须并发运行：三个处理器在同一个 Barrier 上互相等待",
        )
        .await;
        assert_eq!(
            results,
            [
                Ok("a".to_string()),
                Ok("b".to_string()),
                Ok("c".to_string())
            ],
            "每个任务一个结果，按任务的顺序"
        );
    }

    #[tokio::test]
    async fn results_follow_job_order_not_completion_order() {
        let finished = Arc::new(Notify::new());
        let mut registry = Registry::new();
        let waits = Arc::clone(&finished);
        registry
            .register("slow", move |input| {
                let waits = Arc::clone(&waits);
                async move {
                    waits.notified().await;
                    Ok(format!("slow {input}"))
                }
            })
            .expect("第一次注册 slow 必须成功");
        registry
            .register("fast", move |input| {
                let finished = Arc::clone(&finished);
                async move {
                    finished.notify_one();
                    Ok(format!("fast {input}"))
                }
            })
            .expect("第一次注册 fast 必须成功");
        let results = batch(
            &registry,
            &[("slow", "1"), ("nope", "2"), ("fast", "3")],
            &CancellationToken::new(),
            "slow 要等 fast 完成：处理器必须并发运行",
        )
        .await;
        assert_eq!(
            results,
            [
                Ok("slow 1".to_string()),
                Err("未知命令：nope".to_string()),
                Ok("fast 3".to_string()),
            ],
            "结果必须按任务的顺序排列，而不是完成的顺序；未知命令占自己那一格"
        );
    }

    #[tokio::test]
    async fn a_panicking_handler_becomes_an_error_in_its_own_slot() {
        let mut registry = Registry::new();
        registry
            .register("echo", |input| async move { Ok(input) })
            .expect("第一次注册 echo 必须成功");
        registry
            .register("boom", |_input| async move {
                panic!("boom");
            })
            .expect("第一次注册 boom 必须成功");
        registry
            .register("boom-text", |input| async move {
                panic!("bad input: {input}");
            })
            .expect("第一次注册 boom-text 必须成功");
        registry
            .register("boom-value", |_input| async move {
                std::panic::panic_any(42_u32);
            })
            .expect("第一次注册 boom-value 必须成功");
        let results = batch(
            &registry,
            &[
                ("echo", "a"),
                ("boom", ""),
                ("echo", "b"),
                ("boom-text", "x"),
                ("boom-value", ""),
            ],
            &CancellationToken::new(),
            "有处理器 panic 时 run_all 也必须返回",
        )
        .await;
        assert_eq!(
            results,
            [
                Ok("a".to_string()),
                Err("处理器发生 panic：boom".to_string()),
                Ok("b".to_string()),
                Err("处理器发生 panic：bad input: x".to_string()),
                Err("处理器发生 panic".to_string()),
            ],
            "panic 必须变成自己那一格的 Err：文字的 panic（&str 或 String）保留原文，其他的只写前缀"
        );
    }

    #[tokio::test]
    async fn cancellation_stops_running_jobs_and_keeps_finished_ones() {
        let quick_done = Arc::new(Notify::new());
        let cancel = CancellationToken::new();
        let mut registry = Registry::new();
        registry
            .register("never", |_input| std::future::pending::<HandlerResult>())
            .expect("第一次注册 never 必须成功");
        let done = Arc::clone(&quick_done);
        registry
            .register("quick", move |input| {
                let done = Arc::clone(&done);
                async move {
                    done.notify_one();
                    Ok(input)
                }
            })
            .expect("第一次注册 quick 必须成功");
        let canceller = tokio::spawn({
            let cancel = cancel.clone();
            async move {
                quick_done.notified().await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                cancel.cancel();
            }
        });
        let results = batch(
            &registry,
            &[("never", "a"), ("quick", "b"), ("never", "c")],
            &cancel,
            "取消令牌触发后，run_all 必须很快返回：还在运行的任务得到“已取消”",
        )
        .await;
        canceller.await.expect("取消任务不应失败");
        assert_eq!(
            results,
            [
                Err("已取消".to_string()),
                Ok("b".to_string()),
                Err("已取消".to_string()),
            ],
            "取消时还在运行的任务得到“已取消”，已经完成的任务保留自己的结果"
        );
    }

    #[tokio::test]
    async fn a_batch_cancelled_before_it_starts_runs_no_handler() {
        let mut registry = Registry::new();
        let calls = counting(&mut registry, "count", Ok("ran".to_string()));
        let cancel = CancellationToken::new();
        cancel.cancel();
        let results = batch(
            &registry,
            &[("count", "a"), ("count", "b")],
            &cancel,
            "已经取消的批次必须立即返回",
        )
        .await;
        assert_eq!(
            results,
            [Err("已取消".to_string()), Err("已取消".to_string())],
            "开始之前就已取消的批次，每个任务都是“已取消”"
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "开始之前就已取消的批次，一个处理器都不运行"
        );
    }

    #[tokio::test]
    async fn every_handler_is_called_exactly_once_even_when_it_fails() {
        let mut registry = Registry::new();
        let failures = counting(&mut registry, "flaky", Err("flaky".to_string()));
        let successes = counting(&mut registry, "steady", Ok("steady".to_string()));
        let results = batch(
            &registry,
            &[("flaky", "a"), ("steady", "b"), ("flaky", "c")],
            &CancellationToken::new(),
            "run_all 必须在所有处理器完成后返回",
        )
        .await;
        assert_eq!(
            results,
            [
                Err("flaky: a".to_string()),
                Ok("steady: b".to_string()),
                Err("flaky: c".to_string()),
            ],
            "处理器返回的 Err 原样放进自己那一格"
        );
        assert_eq!(
            (
                failures.load(Ordering::SeqCst),
                successes.load(Ordering::SeqCst)
            ),
            (2, 1),
            "每个任务只调用一次处理器：失败了也不重试"
        );
    }
}
