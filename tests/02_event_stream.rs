//! Chapter 02 acceptance tests: the event stream.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use pi_course::event_stream::EventStream;
use tokio::task::JoinHandle;

#[derive(Debug, Clone, PartialEq)]
enum Event {
    Delta(String),
    Done(String),
}

fn stream() -> EventStream<Event, String> {
    EventStream::new(
        |event: &Event| matches!(event, Event::Done(_)),
        |event: &Event| match event {
            Event::Done(value) | Event::Delta(value) => value.clone(),
        },
    )
}

fn delta(value: &str) -> Event {
    Event::Delta(value.into())
}

fn done(value: &str) -> Event {
    Event::Done(value.into())
}

/// Polls once: ready now, or not. Only used to show that something is NOT ready yet.
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

/// The value a spawned reader returned, failing with `rule` if it is still waiting.
async fn joined<T>(reader: JoinHandle<T>, rule: &str) -> T {
    soon(reader, rule)
        .await
        .expect("读者任务自己 panic 了：看上面的 panic 信息")
}

/// Reads until `None`; every `next()` after the last event must return at once.
async fn drain(stream: &EventStream<Event, String>) -> Vec<Event> {
    let mut seen = Vec::new();
    while let Some(event) = soon(
        stream.next(),
        "队列读完且流已结束时 next() 必须立即返回 None，而不是继续等待",
    )
    .await
    {
        seen.push(event);
    }
    seen
}

/// A reader task that is already parked in `next()` when this returns.
async fn waiting_reader(stream: &EventStream<Event, String>) -> JoinHandle<Option<Event>> {
    let reader = tokio::spawn({
        let stream = stream.clone();
        async move { stream.next().await }
    });
    // Let the reader park before anything else happens.
    tokio::time::sleep(Duration::from_millis(20)).await;
    reader
}

async fn within_five_seconds<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(5), future)
        .await
        .expect("5 秒内没有结束：是不是终态事件丢了，或者等待者没被唤醒？")
}

mod queue {
    use super::*;

    #[tokio::test]
    async fn queued_events_arrive_in_push_order() {
        within_five_seconds(async {
            let stream = stream();
            stream.push(delta("A"));
            stream.push(delta("B"));
            stream.push(delta("C"));
            let mut seen = Vec::new();
            for _ in 0..3 {
                seen.push(soon(stream.next(), "队列里有事件时 next() 必须立即返回它").await);
            }
            assert_eq!(
                seen,
                [Some(delta("A")), Some(delta("B")), Some(delta("C"))],
                "排队的事件必须按 push 的顺序交付（先进先出）"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn queued_events_arrive_in_order_and_the_terminal_completes_result() {
        within_five_seconds(async {
            let stream = stream();
            stream.push(delta("A"));
            stream.push(done("AB"));
            assert_eq!(
                drain(&stream).await,
                [delta("A"), done("AB")],
                "终态事件既要完成 result，也要照常交付给读者"
            );
            assert_eq!(
                soon(stream.result(), "终态事件之后 result() 必须可用").await,
                "AB",
                "result 是从终态事件里取出的值"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn pushes_after_the_terminal_are_dropped() {
        within_five_seconds(async {
            let stream = stream();
            stream.push(done("first"));
            stream.push(delta("late"));
            stream.push(done("second"));
            assert_eq!(
                drain(&stream).await,
                [done("first")],
                "终态之后的 push 必须被丢弃"
            );
            assert_eq!(
                soon(stream.result(), "终态事件之后 result() 必须可用").await,
                "first",
                "第二个终态不能改写已经确定的结果"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn result_waits_for_the_terminal_and_then_always_returns_the_same_value() {
        within_five_seconds(async {
            let stream = stream();
            stream.push(delta("A"));
            assert_eq!(
                ready_now(stream.result()),
                None,
                "只有终态事件才能确定 result：普通事件之后 result() 仍要等待"
            );
            stream.push(done("AB"));
            assert_eq!(
                soon(stream.result(), "终态事件之后 result() 必须可用").await,
                "AB",
                "result 是从终态事件里取出的值"
            );
            assert_eq!(
                soon(stream.result(), "result() 每次都返回同一个值，不能只给一次").await,
                "AB",
                "result() 每次都返回同一个值，不能只给一次"
            );
            assert_eq!(
                drain(&stream).await,
                [delta("A"), done("AB")],
                "调用 result() 不能消耗排队的事件"
            );
        })
        .await;
    }
}

mod waiter {
    use super::*;

    #[tokio::test]
    async fn a_waiting_reader_is_woken_by_the_next_push() {
        within_five_seconds(async {
            let stream = stream();
            let reader = waiting_reader(&stream).await;
            assert!(
                !reader.is_finished(),
                "没有事件时 next() 必须等待，而不是立即返回"
            );
            stream.push(delta("A"));
            assert_eq!(
                joined(reader, "等待中的读者必须被下一次 push 唤醒").await,
                Some(delta("A")),
                "等待中的读者收到的是下一次 push 的事件"
            );
            stream.end("A".into());
            assert_eq!(
                soon(stream.next(), "end 之后 next() 必须立即返回 None").await,
                None,
                "end 之后 next() 必须立即返回 None"
            );
            assert_eq!(
                soon(stream.result(), "end 之后 result() 必须可用").await,
                "A",
                "流没有终态事件时，result 就是 end 给出的值"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn end_wakes_every_waiting_reader_and_settles_result() {
        within_five_seconds(async {
            let stream = stream();
            let first = waiting_reader(&stream).await;
            let second = waiting_reader(&stream).await;
            let result = tokio::spawn({
                let stream = stream.clone();
                async move { stream.result().await }
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(!result.is_finished(), "没有终态时 result() 必须等待");
            stream.end("Z".into());
            for reader in [first, second] {
                assert_eq!(
                    joined(reader, "end 必须唤醒所有等待者").await,
                    None,
                    "end 必须唤醒所有等待者，它们都得到 None"
                );
            }
            assert_eq!(
                joined(result, "end 必须让等待中的 result() 完成").await,
                "Z",
                "等待中的 result() 得到 end 给出的值"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn waiting_readers_are_served_oldest_first_and_a_terminal_wakes_the_rest() {
        within_five_seconds(async {
            let stream = stream();
            let first = waiting_reader(&stream).await;
            let second = waiting_reader(&stream).await;
            let third = waiting_reader(&stream).await;
            stream.push(delta("A"));
            stream.push(done("X"));
            assert_eq!(
                joined(first, "事件必须交给最早开始等待的读者").await,
                Some(delta("A")),
                "事件必须交给最早开始等待的读者"
            );
            assert_eq!(
                joined(second, "终态事件必须交给下一个等待的读者").await,
                Some(done("X")),
                "等待中的读者也要收到终态事件，顺序仍是先来先得"
            );
            assert_eq!(
                joined(third, "终态交付之后，其余等待者必须被唤醒").await,
                None,
                "终态交付之后，其余等待者必须被唤醒并得到 None"
            );
            stream.end("from end".into());
            assert_eq!(
                soon(stream.result(), "终态事件之后 result() 必须可用").await,
                "X",
                "end 不能改写终态事件确定的结果"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn a_terminal_push_wakes_the_waiting_reader_and_finishes_the_stream() {
        within_five_seconds(async {
            let stream = stream();
            let reader = waiting_reader(&stream).await;
            stream.push(done("X"));
            assert_eq!(
                joined(reader, "等待中的读者必须被终态 push 唤醒").await,
                Some(done("X")),
                "等待中的读者也要收到终态事件"
            );
            assert_eq!(
                soon(
                    stream.next(),
                    "终态直接交给等待者时，流同样要标记为结束，next() 立即返回 None"
                )
                .await,
                None,
                "终态直接交给等待者时，流同样要标记为结束"
            );
            stream.push(delta("late"));
            stream.end("from end".into());
            assert_eq!(
                drain(&stream).await,
                Vec::<Event>::new(),
                "终态之后的 push 被丢弃，end 也不产生事件"
            );
            assert_eq!(
                soon(stream.result(), "终态直接交给等待者时，result 同样要确定").await,
                "X",
                "终态直接交给等待者时，result 同样要确定，end 也不能改写它"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn end_keeps_queued_events_and_never_changes_a_settled_result() {
        within_five_seconds(async {
            let queued = stream();
            queued.push(delta("A"));
            queued.end("E".into());
            queued.push(delta("after end"));
            assert_eq!(
                drain(&queued).await,
                [delta("A")],
                "end 不清空已排队的事件，也不产生新事件；end 之后的 push 被丢弃"
            );
            assert_eq!(
                soon(queued.result(), "end 之后 result() 必须可用").await,
                "E",
                "流没有终态事件时，result 就是 end 给出的值"
            );

            let settled = stream();
            settled.push(done("first"));
            settled.end("from end".into());
            assert_eq!(
                drain(&settled).await,
                [done("first")],
                "end 不产生事件，排队的终态仍能读到"
            );
            assert_eq!(
                soon(settled.result(), "终态事件之后 result() 必须可用").await,
                "first",
                "end 不能改写已经确定的结果"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn an_abandoned_reader_does_not_swallow_the_next_event() {
        within_five_seconds(async {
            let stream = stream();
            // A reader that times out drops its pending next(); the event must go to the next reader.
            let gave_up = tokio::time::timeout(Duration::from_millis(20), stream.next()).await;
            assert!(
                gave_up.is_err(),
                "没有事件时 next() 必须等待，而不是立即返回"
            );
            stream.push(delta("A"));
            assert_eq!(
                soon(
                    stream.next(),
                    "放弃等待的读者不能吞掉下一个事件，它要留给后来的读者"
                )
                .await,
                Some(delta("A")),
                "放弃等待的读者不能吞掉下一个事件，它要留给后来的读者"
            );
            stream.end("E".into());
            assert_eq!(
                drain(&stream).await,
                Vec::<Event>::new(),
                "事件只交付一次：end 之后没有剩余事件"
            );
        })
        .await;
    }
}
