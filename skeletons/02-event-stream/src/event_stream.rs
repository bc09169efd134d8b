//! A single-consumer async event stream with a terminal event.
//!
//! Lab 2.1: `push`, `next` (queue path) and `result`. Lab 2.2: the waiting path of `next`,
//! and `end`. Choose your own internal state (the chapter guide suggests queue, waiting
//! readers, done flag and a settled result) and replace the panics.

use std::sync::Arc;

type IsComplete<T> = dyn Fn(&T) -> bool + Send + Sync;
type ExtractResult<T, R> = dyn Fn(&T) -> R + Send + Sync;

// The callbacks are read once `push` is implemented.
#[allow(dead_code)]
struct Shared<T, R> {
    is_complete: Box<IsComplete<T>>,
    extract_result: Box<ExtractResult<T, R>>,
}

/// A cheap, cloneable handle; every clone sees the same stream.
pub struct EventStream<T, R> {
    shared: Arc<Shared<T, R>>,
}

impl<T, R> Clone for EventStream<T, R> {
    fn clone(&self) -> Self {
        EventStream {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T, R: Clone> EventStream<T, R> {
    pub fn new(
        is_complete: impl Fn(&T) -> bool + Send + Sync + 'static,
        extract_result: impl Fn(&T) -> R + Send + Sync + 'static,
    ) -> Self {
        EventStream {
            shared: Arc::new(Shared {
                is_complete: Box::new(is_complete),
                extract_result: Box::new(extract_result),
            }),
        }
    }

    /// Delivers an event. After the terminal event every push is dropped.
    pub fn push(&self, _event: T) {
        panic!("Lab 2.1 EventStream::push 尚未实现")
    }

    /// Finishes the stream without an event. Never changes an already-set result.
    pub fn end(&self, _result: R) {
        panic!("Lab 2.2 EventStream::end 尚未实现")
    }

    /// The next event; `None` once the stream is finished and drained.
    pub async fn next(&self) -> Option<T> {
        panic!("Lab 2.1 EventStream::next 尚未实现")
    }

    /// The final result, available once the stream is finished.
    pub async fn result(&self) -> R {
        panic!("Lab 2.1 EventStream::result 尚未实现")
    }
}
