//! A single-consumer async event stream with a terminal event.
//!
//! The stream knows nothing about event types: two callbacks say which event is terminal and
//! how to turn it into the final result. Errors are in-band terminal events, so `result()`
//! never fails; it waits until a terminal push or `end()`.
// skeleton: //!
// skeleton: //! Lab 2.1: `push`, `next` (queue path) and `result`. Lab 2.2: the waiting path of `next`,
// skeleton: //! and `end`. Choose your own internal state (the chapter guide suggests a queue, waiting
// skeleton: //! readers, a done flag and a settled result) and replace the panics.

// region: Lab 2.1 the stream's state
// stub: use std::sync::Arc;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{oneshot, watch};
// endregion

type IsComplete<T> = dyn Fn(&T) -> bool + Send + Sync;
type ExtractResult<T, R> = dyn Fn(&T) -> R + Send + Sync;

// region: Lab 2.1 answer-only State
struct State<T> {
    /// Events that arrived before anyone asked for them.
    queue: VecDeque<T>,
    /// Readers parked in `next()`, oldest first. `None` tells a reader the stream is over.
    waiting: VecDeque<oneshot::Sender<Option<T>>>,
    done: bool,
}
// endregion

// skeleton: // The callbacks are read once `push` is implemented.
// skeleton: #[allow(dead_code)]
struct Shared<T, R> {
    // region: Lab 2.1 answer-only state fields
    state: Mutex<State<T>>,
    result: watch::Sender<Option<R>>,
    // endregion
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
        // region: Lab 2.1 answer-only result channel
        let (result, _) = watch::channel(None);
        // endregion
        EventStream {
            shared: Arc::new(Shared {
                // region: Lab 2.1 answer-only initial state
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    waiting: VecDeque::new(),
                    done: false,
                }),
                result,
                // endregion
                is_complete: Box::new(is_complete),
                extract_result: Box::new(extract_result),
            }),
        }
    }

    // region: Lab 2.1 answer-only lock
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic while holding the lock cannot leave the queue half-updated, so keep going.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
    // endregion

    /// Delivers an event. After the terminal event every push is dropped.
    pub fn push(&self, event: T) {
        // region: Lab 2.1 EventStream::push
        let mut state = self.lock();
        if state.done {
            return;
        }
        if (self.shared.is_complete)(&event) {
            state.done = true;
            // The result is settled before delivery, so a reader woken by the terminal
            // event already finds `result()` complete.
            self.shared
                .result
                .send_replace(Some((self.shared.extract_result)(&event)));
        }
        let mut event = Some(event);
        while let Some(waiter) = state.waiting.pop_front() {
            match waiter.send(event.take()) {
                Ok(()) => break,
                // That reader gave up (its future was dropped); try the next one.
                Err(returned) => event = returned,
            }
        }
        if let Some(event) = event {
            state.queue.push_back(event);
        }
        if state.done {
            wake_all(&mut state);
        }
        // endregion
    }

    /// Finishes the stream without an event. Never changes an already-set result.
    pub fn end(&self, result: R) {
        // region: Lab 2.2 EventStream::end
        let mut state = self.lock();
        if !state.done {
            state.done = true;
            self.shared.result.send_replace(Some(result));
        }
        wake_all(&mut state);
        // endregion
    }

    /// The next event; `None` once the stream is finished and drained.
    pub async fn next(&self) -> Option<T> {
        // region: Lab 2.1 EventStream::next
        let receiver: oneshot::Receiver<Option<T>> = {
            let mut state = self.lock();
            // Queue before `done`: a queued terminal event must still be delivered.
            if let Some(event) = state.queue.pop_front() {
                return Some(event);
            }
            if state.done {
                return None;
            }
            // region: Lab 2.2 waiting path of next
            // stub: todo!()
            let (sender, receiver) = oneshot::channel();
            state.waiting.push_back(sender);
            receiver
            // endregion
        };
        receiver.await.ok().flatten()
        // endregion
    }

    /// The final result: always the same value, available once the stream is finished.
    pub async fn result(&self) -> R {
        // region: Lab 2.1 EventStream::result
        let mut receiver = self.shared.result.subscribe();
        let settled = receiver
            .wait_for(Option::is_some)
            .await
            .expect("the sender lives as long as the stream");
        settled.clone().expect("waited for Some")
        // endregion
    }
}

// region: Lab 2.1 answer-only wake_all
fn wake_all<T>(state: &mut State<T>) {
    for waiter in state.waiting.drain(..) {
        let _ = waiter.send(None);
    }
}
// endregion
