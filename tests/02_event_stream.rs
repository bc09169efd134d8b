//! Chapter 02 acceptance tests: the event stream.

use std::time::Duration;

use pi_course::event_stream::EventStream;

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

async fn drain(stream: &EventStream<Event, String>) -> Vec<Event> {
    let mut seen = Vec::new();
    while let Some(event) = stream.next().await {
        seen.push(event);
    }
    seen
}

async fn within_a_second<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(1), future)
        .await
        .expect("1 秒内没有结束：是不是终态事件丢了，或者等待者没被唤醒？")
}

mod queue {
    use super::*;

    #[tokio::test]
    async fn queued_events_arrive_in_order_and_the_terminal_completes_result() {
        within_a_second(async {
            let stream = stream();
            stream.push(delta("A"));
            stream.push(done("AB"));
            assert_eq!(
                drain(&stream).await,
                [delta("A"), done("AB")],
                "终态事件既要完成 result，也要照常交付给读者"
            );
            assert_eq!(stream.result().await, "AB");
        })
        .await;
    }

    #[tokio::test]
    async fn pushes_after_the_terminal_are_dropped() {
        within_a_second(async {
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
                stream.result().await,
                "first",
                "第二个终态不能改写已经确定的结果"
            );
        })
        .await;
    }
}

mod waiter {
    use super::*;

    #[tokio::test]
    async fn a_waiting_reader_is_woken_by_the_next_push() {
        within_a_second(async {
            let stream = stream();
            let reader = tokio::spawn({
                let stream = stream.clone();
                async move { stream.next().await }
            });
            // Let the reader park before anything is pushed.
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(
                !reader.is_finished(),
                "没有事件时 next() 必须等待，而不是立即返回"
            );
            stream.push(delta("A"));
            assert_eq!(reader.await.unwrap(), Some(delta("A")));
            stream.end("A".into());
            assert_eq!(stream.next().await, None, "end 之后 next() 返回 None");
            assert_eq!(stream.result().await, "A");
        })
        .await;
    }

    #[tokio::test]
    async fn end_wakes_every_waiting_reader_and_settles_result() {
        within_a_second(async {
            let stream = stream();
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let stream = stream.clone();
                    tokio::spawn(async move { stream.next().await })
                })
                .collect();
            let result = tokio::spawn({
                let stream = stream.clone();
                async move { stream.result().await }
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(!result.is_finished(), "没有终态时 result() 必须等待");
            stream.end("Z".into());
            for reader in readers {
                assert_eq!(reader.await.unwrap(), None, "end 必须唤醒所有等待者");
            }
            assert_eq!(result.await.unwrap(), "Z");
        })
        .await;
    }

    #[tokio::test]
    async fn a_terminal_push_wakes_the_waiting_reader_and_finishes_the_stream() {
        within_a_second(async {
            let stream = stream();
            let reader = tokio::spawn({
                let stream = stream.clone();
                async move { stream.next().await }
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            stream.push(done("X"));
            assert_eq!(
                reader.await.unwrap(),
                Some(done("X")),
                "等待中的读者也要收到终态事件"
            );
            assert_eq!(
                stream.next().await,
                None,
                "终态直接交给等待者时，流同样要标记为结束"
            );
            assert_eq!(stream.result().await, "X");
        })
        .await;
    }

    #[tokio::test]
    async fn end_keeps_queued_events_and_never_changes_a_settled_result() {
        within_a_second(async {
            let queued = stream();
            queued.push(delta("A"));
            queued.end("E".into());
            queued.push(delta("after end"));
            assert_eq!(
                drain(&queued).await,
                [delta("A")],
                "end 不清空已排队的事件，也不产生新事件；end 之后的 push 被丢弃"
            );
            assert_eq!(queued.result().await, "E");

            let settled = stream();
            settled.push(done("first"));
            settled.end("from end".into());
            assert_eq!(drain(&settled).await, [done("first")]);
            assert_eq!(
                settled.result().await,
                "first",
                "end 不能改写已经确定的结果"
            );
        })
        .await;
    }
}
