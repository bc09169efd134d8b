//! Held-out tests for chapter 02 (instructor only): other types and values, several clones,
//! and the order "result first, then delivery".

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use pi_course::event_stream::EventStream;

/// Polls once: ready now, or not. Not a timing assertion.
fn ready_now<F: Future>(future: F) -> Option<F::Output> {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(value) => Some(value),
        Poll::Pending => None,
    }
}

/// Awaits `future`, failing with `rule` if it is still pending after a second.
async fn soon<F: Future>(future: F, rule: &str) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(1), future).await {
        Ok(value) => value,
        Err(_) => panic!("1 秒内没有完成：{rule}"),
    }
}

fn numbers() -> EventStream<i64, i64> {
    EventStream::new(|value: &i64| *value < 0, |value: &i64| -value)
}

async fn drain(stream: &EventStream<i64, i64>) -> Vec<i64> {
    let mut seen = Vec::new();
    while let Some(value) = soon(stream.next(), "流已结束且队列读完时 next() 返回 None").await
    {
        seen.push(value);
    }
    seen
}

#[tokio::test]
async fn terminal_value_is_extracted_and_delivered_with_other_types() {
    let stream = numbers();
    for value in [3, 5, -8, 13] {
        stream.push(value);
    }
    assert_eq!(
        drain(&stream).await,
        [3, 5, -8],
        "终态照常交付，终态之后的 push 被丢弃"
    );
    assert_eq!(
        soon(stream.result(), "终态之后 result() 必须可用").await,
        8,
        "result 由 extract_result 从终态事件里取出"
    );
}

#[tokio::test]
async fn a_reader_woken_by_the_terminal_already_finds_the_result() {
    let stream = numbers();
    let reader = tokio::spawn({
        let stream = stream.clone();
        async move {
            let event = stream.next().await;
            (event, ready_now(stream.result()))
        }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    stream.push(-21);
    assert_eq!(
        soon(reader, "等待中的读者必须被终态 push 唤醒")
            .await
            .expect("读者任务自己 panic 了"),
        (Some(-21), Some(21)),
        "被终态唤醒的读者立刻就能拿到 result：先确定 result，再交付终态"
    );
}

#[tokio::test]
async fn end_on_an_untouched_stream_finishes_every_clone() {
    let stream = numbers();
    let other = stream.clone();
    assert_eq!(
        ready_now(other.result()),
        None,
        "流没有结束时 result() 必须等待"
    );
    stream.end(99);
    stream.end(100);
    other.push(7);
    assert_eq!(
        soon(other.next(), "end 之后每个克隆的 next() 都立即返回 None").await,
        None,
        "end 之后的 push 被丢弃，每个克隆都看到流已结束"
    );
    assert_eq!(
        soon(stream.next(), "end 之后 next() 立即返回 None").await,
        None,
        "end 之后 next() 返回 None"
    );
    assert_eq!(
        soon(other.result(), "end 之后 result() 必须可用").await,
        99,
        "第二次 end 不能改写第一次 end 确定的结果"
    );
}

#[tokio::test]
async fn events_pushed_through_one_clone_are_read_through_another() {
    let producer = numbers();
    let consumer = producer.clone();
    let reader = tokio::spawn({
        let consumer = consumer.clone();
        async move { consumer.next().await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    producer.push(1);
    producer.push(2);
    producer.push(-3);
    assert_eq!(
        soon(reader, "等待中的读者必须被另一个克隆的 push 唤醒")
            .await
            .expect("读者任务自己 panic 了"),
        Some(1),
        "所有克隆共享同一个流"
    );
    assert_eq!(
        drain(&consumer).await,
        [2, -3],
        "交给等待者的事件不再排队，其余事件按顺序排队"
    );
    assert_eq!(
        soon(consumer.result(), "终态之后 result() 必须可用").await,
        3,
        "所有克隆看到同一个结果"
    );
}
