//! Held-out tests for chapter 02 (instructor only): other values, a reader that gives up.

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

fn numbers() -> EventStream<i64, i64> {
    EventStream::new(|value: &i64| *value < 0, |value: &i64| -value)
}

#[tokio::test]
async fn terminal_value_is_extracted_and_delivered_with_other_types() {
    let stream = numbers();
    for value in [3, 5, -8, 13] {
        stream.push(value);
    }
    let mut seen = Vec::new();
    while let Some(value) = stream.next().await {
        seen.push(value);
    }
    assert_eq!(seen, [3, 5, -8]);
    assert_eq!(stream.result().await, 8);
}

#[tokio::test]
async fn an_abandoned_reader_does_not_swallow_the_next_event() {
    let stream = numbers();
    // A reader that times out drops its pending next(); the event must go to the next reader.
    assert!(
        tokio::time::timeout(Duration::from_millis(10), stream.next())
            .await
            .is_err()
    );
    stream.push(42);
    let next = tokio::time::timeout(Duration::from_secs(1), stream.next())
        .await
        .unwrap();
    assert_eq!(next, Some(42));
}

#[tokio::test]
async fn a_reader_woken_by_the_terminal_already_finds_the_result() {
    tokio::time::timeout(Duration::from_secs(1), async {
        let stream = numbers();
        let reader = tokio::spawn({
            let stream = stream.clone();
            async move {
                let event = stream.next().await;
                (event, ready_now(stream.result()))
            }
        });
        tokio::task::yield_now().await;
        stream.push(-21);
        assert_eq!(reader.await.unwrap(), (Some(-21), Some(21)));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn end_on_an_untouched_stream_finishes_every_clone() {
    tokio::time::timeout(Duration::from_secs(1), async {
        let stream = numbers();
        let other = stream.clone();
        assert_eq!(ready_now(other.result()), None);
        stream.end(99);
        stream.end(100);
        other.push(7);
        assert_eq!(other.next().await, None);
        assert_eq!(stream.next().await, None);
        assert_eq!(other.result().await, 99);
    })
    .await
    .unwrap();
}
