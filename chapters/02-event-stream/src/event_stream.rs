//! A single-consumer async event stream with a terminal event.
//!
//! The stream knows nothing about event types: two callbacks say which event is terminal and
//! how to turn it into the final result. Errors are in-band terminal events, so `result()`
//! never fails; it waits until a terminal push or `end()`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{oneshot, watch};

type IsComplete<T> = dyn Fn(&T) -> bool + Send + Sync;
type ExtractResult<T, R> = dyn Fn(&T) -> R + Send + Sync;

struct State<T> {
    /// Events that arrived before anyone asked for them.
    queue: VecDeque<T>,
    /// Readers parked in `next()`, oldest first. `None` tells a reader the stream is over.
    waiting: VecDeque<oneshot::Sender<Option<T>>>,
    done: bool,
}

struct Shared<T, R> {
    state: Mutex<State<T>>,
    result: watch::Sender<Option<R>>,
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
        let (result, _) = watch::channel(None);
        EventStream {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    waiting: VecDeque::new(),
                    done: false,
                }),
                result,
                is_complete: Box::new(is_complete),
                extract_result: Box::new(extract_result),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic while holding the lock cannot leave the queue half-updated, so keep going.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Delivers an event. After the terminal event every push is dropped.
    pub fn push(&self, event: T) {
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
    }

    /// Finishes the stream without an event. Never changes an already-set result.
    pub fn end(&self, result: R) {
        let mut state = self.lock();
        if !state.done {
            state.done = true;
            self.shared.result.send_replace(Some(result));
        }
        wake_all(&mut state);
    }

    /// The next event; `None` once the stream is finished and drained.
    pub async fn next(&self) -> Option<T> {
        let receiver = {
            let mut state = self.lock();
            // Queue before `done`: a queued terminal event must still be delivered.
            if let Some(event) = state.queue.pop_front() {
                return Some(event);
            }
            if state.done {
                return None;
            }
            let (sender, receiver) = oneshot::channel();
            state.waiting.push_back(sender);
            receiver
        };
        receiver.await.ok().flatten()
    }

    /// The final result: always the same value, available once the stream is finished.
    pub async fn result(&self) -> R {
        let mut receiver = self.shared.result.subscribe();
        let settled = receiver
            .wait_for(Option::is_some)
            .await
            .expect("the sender lives as long as the stream");
        settled.clone().expect("waited for Some")
    }
}

fn wake_all<T>(state: &mut State<T>) {
    for waiter in state.waiting.drain(..) {
        let _ = waiter.send(None);
    }
}
