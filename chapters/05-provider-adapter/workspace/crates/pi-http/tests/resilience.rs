//! Retries and the stream-idle timeout of the given client, against openai-mock on 127.0.0.1:
//! what is sent again, what never is, what the caller finally gets, and what is announced.
//! Waits are kept short through the policy (`base_delay` of milliseconds); the only real wait
//! is a `Retry-After: 1`, the smallest a server can ask for.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use openai_mock::{delta, MockServer, Reply, Step};
use pi_course::http_transport::Endpoint;
use pi_course::types::{
    user_message, AgentContext, AssistantContent, AssistantMessage, Model, StopReason,
    StreamOptions,
};
use pi_http::{
    idle_reason, is_retryable_status, openai_compatible_model_with, parse_retry_after,
    spoken_duration, HttpOptions, RetryCause, RetryNotice, RetryPolicy, DEFAULT_STREAM_IDLE,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const KEY: &str = "sk-local-test-7f3a9c";
const LIMIT: Duration = Duration::from_secs(10);

/// A policy like the default but with millisecond backoffs.
fn quick(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(40),
        ..RetryPolicy::default()
    }
}

/// Every notice the client announced, in order.
#[derive(Clone, Default)]
struct Notices(Arc<Mutex<Vec<RetryNotice>>>);

impl Notices {
    fn options(&self, retry: RetryPolicy) -> HttpOptions {
        let seen = Arc::clone(&self.0);
        HttpOptions {
            retry,
            on_retry: Some(Arc::new(move |notice: &RetryNotice| {
                seen.lock().expect("通知列表没有中毒").push(notice.clone())
            })),
            ..HttpOptions::default()
        }
    }

    fn all(&self) -> Vec<RetryNotice> {
        self.0.lock().expect("通知列表没有中毒").clone()
    }
}

async fn ask(
    base_url: String,
    options: HttpOptions,
    cancel: CancellationToken,
) -> AssistantMessage {
    let model = openai_compatible_model_with(Endpoint::new(base_url, KEY), "mock-model", options)
        .expect("reqwest 客户端应当能建立");
    let context = AgentContext {
        messages: vec![user_message("你好")],
        tools: Vec::new(),
    };
    let stream = model.stream(
        &context,
        StreamOptions {
            cancel: Some(cancel),
        },
    );
    tokio::time::timeout(LIMIT, stream.result())
        .await
        .expect("一个回合必须在 10 秒内结束")
}

fn plain_text(message: &AssistantMessage) -> String {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            AssistantContent::Text(block) => Some(block.text.as_str()),
            AssistantContent::ToolCall(_) => None,
        })
        .collect()
}

async fn start(replies: Vec<Reply>) -> MockServer {
    MockServer::start(replies)
        .await
        .expect("本地服务器应当能启动")
}

#[tokio::test]
async fn a_429_is_retried_after_the_retry_after_it_names() {
    let server = start(vec![Reply::retry_after(429, 1), Reply::text("第二次成功")]).await;
    let notices = Notices::default();
    let message = ask(
        server.base_url(),
        notices.options(quick(5)),
        CancellationToken::new(),
    )
    .await;

    assert_eq!(
        message.stop_reason,
        StopReason::Stop,
        "429 之后重试成功，回合正常结束：{message:?}"
    );
    assert_eq!(
        plain_text(&message),
        "第二次成功",
        "调用方只看到成功的那次回答"
    );
    assert_eq!(server.requests().len(), 2, "429 之后恰好再发一次");
    assert_eq!(
        notices.all(),
        vec![RetryNotice {
            retry: 1,
            max_retries: 4,
            delay: Duration::from_secs(1),
            cause: RetryCause::Status(429),
        }],
        "等待时间取服务器的 Retry-After（1 秒），不是退避的 10 毫秒"
    );
    assert_eq!(
        notices.all()[0].to_string(),
        "服务器返回 429（请求过多），1 秒后重试（第 1/4 次）…",
        "每次重试一行中文通知"
    );
}

#[tokio::test]
async fn a_503_every_time_gives_the_last_503_to_the_caller() {
    let server = start(vec![
        Reply::Status {
            status: 503,
            body: "busy 1".to_string(),
        },
        Reply::Status {
            status: 503,
            body: "busy 2".to_string(),
        },
        Reply::Status {
            status: 503,
            body: "busy 3".to_string(),
        },
        Reply::text("不该走到这里"),
    ])
    .await;
    let notices = Notices::default();
    let message = ask(
        server.base_url(),
        notices.options(quick(3)),
        CancellationToken::new(),
    )
    .await;

    assert_eq!(
        message.stop_reason,
        StopReason::Error,
        "次数用完仍是 503：error 终态"
    );
    assert_eq!(
        message.error_message.as_deref(),
        Some("HTTP 503: busy 3"),
        "最后一次的状态和正文原样交给调用方"
    );
    assert_eq!(server.requests().len(), 3, "max_attempts = 3：一共只发三次");
    let delays: Vec<(u32, Duration)> = notices
        .all()
        .iter()
        .map(|notice| (notice.retry, notice.delay))
        .collect();
    assert_eq!(
        delays,
        vec![
            (1, Duration::from_millis(10)),
            (2, Duration::from_millis(20))
        ],
        "没有 Retry-After 时指数退避：base_delay，再翻倍"
    );
}

#[tokio::test]
async fn a_status_that_is_not_retryable_is_given_at_once() {
    let server = start(vec![
        Reply::Status {
            status: 400,
            body: "bad request".to_string(),
        },
        Reply::text("不该走到这里"),
    ])
    .await;
    let notices = Notices::default();
    let message = ask(
        server.base_url(),
        notices.options(quick(5)),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(
        message.error_message.as_deref(),
        Some("HTTP 400: bad request"),
        "400 原样交给调用方"
    );
    assert_eq!(server.requests().len(), 1, "400 重发也不会变好：不重试");
    assert!(notices.all().is_empty(), "没有重试就没有通知");
}

#[tokio::test]
async fn a_retry_after_beyond_the_cap_is_not_waited_for() {
    let server = start(vec![
        Reply::retry_after(429, 3600),
        Reply::text("不该走到这里"),
    ])
    .await;
    let notices = Notices::default();
    let message = ask(
        server.base_url(),
        notices.options(quick(5)),
        CancellationToken::new(),
    )
    .await;
    let error = message.error_message.clone().unwrap_or_default();
    assert!(
        error.starts_with("HTTP 429: "),
        "要等一小时的 429 直接交给调用方：{error}"
    );
    assert_eq!(
        server.requests().len(),
        1,
        "Retry-After 超过上限（60 秒）时不重试"
    );
    assert!(notices.all().is_empty(), "没有重试就没有通知");
}

#[tokio::test]
async fn a_body_that_started_is_never_sent_again() {
    let server = start(vec![
        Reply::Stream(vec![
            Step::event(&delta(json!({"role": "assistant", "content": "半句"}))),
            Step::Cut,
        ]),
        Reply::text("不该走到这里"),
    ])
    .await;
    let notices = Notices::default();
    let message = ask(
        server.base_url(),
        notices.options(quick(5)),
        CancellationToken::new(),
    )
    .await;
    let error = message.error_message.clone().unwrap_or_default();
    assert_eq!(message.stop_reason, StopReason::Error, "断流是 error 终态");
    assert!(
        error.starts_with("Provider stream interrupted: "),
        "已经开始的回答断了，就报断流：{error}"
    );
    assert_eq!(plain_text(&message), "半句", "已经交出的文本还在");
    assert_eq!(
        server.requests().len(),
        1,
        "响应体的字节一旦交给调用方，就绝不重发请求"
    );
    assert!(notices.all().is_empty(), "没有重试就没有通知");
}

#[tokio::test]
async fn a_connection_lost_before_the_first_byte_is_retried() {
    let server = start(vec![
        // 200 and headers, then the connection breaks before any body byte.
        Reply::Stream(vec![Step::Cut]),
        // Closed without even a status line.
        Reply::Disconnect,
        Reply::text("第三次成功"),
    ])
    .await;
    let notices = Notices::default();
    let message = ask(
        server.base_url(),
        notices.options(quick(5)),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(
        plain_text(&message),
        "第三次成功",
        "第一个字节之前断开的连接可以重试：{message:?}"
    );
    assert_eq!(server.requests().len(), 3, "两次断开，第三次成功");
    let notices = notices.all();
    assert_eq!(notices.len(), 2, "每次重试一条通知：{notices:?}");
    for notice in &notices {
        assert!(
            matches!(notice.cause, RetryCause::Connection(_)),
            "原因是连接失败：{notice:?}"
        );
        assert!(
            notice.to_string().starts_with("连接失败（"),
            "通知说明是连接失败：{notice}"
        );
    }
}

#[tokio::test]
async fn a_refused_connection_is_retried_and_then_reported() {
    // Bind, learn the port, close: nothing listens there any more.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("能拿到一个空闲端口");
        listener.local_addr().expect("有本地地址").port()
    };
    let notices = Notices::default();
    let message = ask(
        format!("http://127.0.0.1:{port}/v1"),
        notices.options(quick(3)),
        CancellationToken::new(),
    )
    .await;
    let error = message.error_message.clone().unwrap_or_default();
    assert!(
        error.starts_with("Network error: "),
        "次数用完后仍是网络错误：{error}"
    );
    assert_eq!(notices.all().len(), 2, "三次尝试之间重试两次");
}

#[tokio::test]
async fn a_stream_that_stalls_ends_with_the_idle_reason() {
    let server = start(vec![Reply::Stream(vec![
        Step::event(&delta(json!({"role": "assistant", "content": "慢"}))),
        Step::Hang,
    ])])
    .await;
    let notices = Notices::default();
    let options = HttpOptions {
        stream_idle: Duration::from_secs(1),
        ..notices.options(quick(5))
    };
    let message = ask(server.base_url(), options, CancellationToken::new()).await;
    assert_eq!(
        message.stop_reason,
        StopReason::Error,
        "空闲超时是 error 终态"
    );
    assert_eq!(
        message.error_message.as_deref(),
        Some("Provider stream interrupted: 流式响应空闲超过 1 秒，已放弃"),
        "错误说明流空闲了多久"
    );
    assert_eq!(plain_text(&message), "慢", "超时前收到的文本还在");
    assert_eq!(server.requests().len(), 1, "已经开始的流超时了也不重发");
    assert!(
        server.wait_for_disconnects(1, LIMIT).await,
        "放弃之后连接要关闭"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_is_given_up_on() {
    // The kernel accepts the connection into the backlog; nobody ever reads or answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("能拿到一个空闲端口");
    let port = listener.local_addr().expect("有本地地址").port();
    let notices = Notices::default();
    let options = HttpOptions {
        stream_idle: Duration::from_secs(1),
        ..notices.options(quick(5))
    };
    let message = ask(
        format!("http://127.0.0.1:{port}/v1"),
        options,
        CancellationToken::new(),
    )
    .await;
    assert_eq!(
        message.error_message.as_deref(),
        Some("Network error: 等待响应超过 1 秒，已放弃"),
        "连上了却一直没有状态行，也按空闲超时放弃"
    );
    assert!(notices.all().is_empty(), "服务器可能正在处理，超时后不重发");
    drop(listener);
}

#[tokio::test]
async fn cancelling_during_a_retry_wait_ends_the_turn_at_once() {
    let server = start(vec![
        Reply::retry_after(503, 50),
        Reply::text("不该走到这里"),
    ])
    .await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let options = HttpOptions {
        retry: quick(5),
        // Cancelled as the 50-second wait begins, as a Ctrl-C during the notice would.
        on_retry: Some(Arc::new(move |_: &RetryNotice| trigger.cancel())),
        ..HttpOptions::default()
    };
    let message = ask(server.base_url(), options, cancel).await;
    assert_eq!(
        message.stop_reason,
        StopReason::Aborted,
        "等待重试时取消，回合立刻以 aborted 结束：{message:?}"
    );
    assert_eq!(server.requests().len(), 1, "取消之后不再发请求");
}

#[test]
fn the_policy_backs_off_exponentially_up_to_its_cap() {
    let policy = RetryPolicy {
        max_attempts: 8,
        base_delay: Duration::from_secs(1),
        max_delay: Duration::from_secs(10),
        max_retry_after: Duration::from_secs(60),
    };
    let waits: Vec<u64> = (1..=5)
        .map(|retry| policy.backoff(retry).as_secs())
        .collect();
    assert_eq!(waits, vec![1, 2, 4, 8, 10], "每次翻倍，不超过 max_delay");
    assert_eq!(
        policy.delay(1, Some(Duration::from_secs(7))),
        Some(Duration::from_secs(7)),
        "有 Retry-After 时按它等"
    );
    assert_eq!(
        policy.delay(1, Some(Duration::from_secs(61))),
        None,
        "超过上限的 Retry-After 不等，也不重试"
    );
    assert_eq!(policy.max_retries(), 7, "第一次之外重试 7 次");
    assert_eq!(RetryPolicy::never().max_retries(), 0, "never 不重试");
    assert_eq!(
        RetryPolicy::default(),
        RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(60),
        },
        "默认策略：5 次，1 秒起翻倍，Retry-After 最多等 60 秒"
    );
    assert_eq!(
        DEFAULT_STREAM_IDLE,
        Duration::from_secs(300),
        "默认空闲 300 秒"
    );
}

#[test]
fn retry_after_and_statuses_are_read_as_documented() {
    assert_eq!(parse_retry_after("1"), Some(Duration::from_secs(1)), "秒数");
    assert_eq!(
        parse_retry_after(" 30 "),
        Some(Duration::from_secs(30)),
        "两边的空白不算"
    );
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
        None,
        "HTTP 日期不解析，改用退避"
    );
    assert_eq!(parse_retry_after("-1"), None, "负数不是合法的秒数");
    let retryable: Vec<u16> = [400, 401, 404, 408, 429, 500, 501, 502, 503, 504]
        .into_iter()
        .filter(|status| is_retryable_status(*status))
        .collect();
    assert_eq!(
        retryable,
        vec![429, 500, 502, 503, 504],
        "只有 429 和这几个 5xx 值得重试"
    );
}

#[test]
fn waits_are_spoken_in_seconds_or_milliseconds() {
    assert_eq!(spoken_duration(Duration::from_secs(3)), "3 秒", "整秒");
    assert_eq!(
        spoken_duration(Duration::from_millis(250)),
        "250 毫秒",
        "不到一秒"
    );
    assert_eq!(
        spoken_duration(Duration::from_millis(1500)),
        "1.5 秒",
        "带小数"
    );
    assert_eq!(
        idle_reason(Duration::from_secs(300)),
        "流式响应空闲超过 300 秒，已放弃",
        "空闲超时的原因"
    );
    let notice = RetryNotice {
        retry: 2,
        max_retries: 4,
        delay: Duration::from_secs(2),
        cause: RetryCause::Connection("connection refused".to_string()),
    };
    assert_eq!(
        notice.to_string(),
        "连接失败（connection refused），2 秒后重试（第 2/4 次）…",
        "连接失败的通知"
    );
}
