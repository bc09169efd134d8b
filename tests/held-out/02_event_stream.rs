//! Held-out tests for chapter 02 (instructor only): other values, a reader that gives up.

use std::time::Duration;

use pi_course::event_stream::EventStream;

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
