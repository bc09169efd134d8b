//! Ctrl-C while the model is still answering ends that answer, not the run from outside.
//!
//! The learner's `RuntimeControl::abort` settles a run at once: the loop is dropped, and a
//! tool call whose arguments were still streaming is lost with it. pi wants that call kept,
//! with its paired `aborted` result, as chapter 08's pi did. So while a model stream is open,
//! a signal cancels only that stream: the model answers `aborted` with what it had, and the
//! learner's loop pairs the cut calls and ends the run itself. With no stream open (tools are
//! running), the signal is `control.abort()`.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pi_course::runtime_modes::RuntimeControl;
use pi_course::types::{
    assistant_message_event_stream, AgentContext, AssistantMessageEventStream, Model, ModelEvent,
    StopReason, StreamOptions,
};
use tokio_util::sync::CancellationToken;

/// The token of the model stream open right now, if any.
type Open = Arc<Mutex<Option<CancellationToken>>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Wraps the real model; `Interrupter` reaches the stream it has open.
pub struct Interruptible {
    inner: Arc<dyn Model>,
    open: Open,
}

/// Stops the current run the gentlest way that still stops it.
#[derive(Clone, Default)]
pub struct Interrupter {
    open: Open,
}

impl Interrupter {
    pub fn wrap(&self, inner: Arc<dyn Model>) -> Interruptible {
        Interruptible {
            inner,
            open: Arc::clone(&self.open),
        }
    }

    /// Ends the open model stream as aborted, or aborts the run when none is open.
    pub fn interrupt(&self, control: &RuntimeControl) {
        // Checked and cancelled under the lock the stream clears when it ends: no gap between.
        let open = lock(&self.open);
        match open.as_ref() {
            Some(token) => token.cancel(),
            None => {
                drop(open);
                control.abort();
            }
        }
    }
}

impl Model for Interruptible {
    fn stream(
        &self,
        context: &AgentContext,
        options: StreamOptions,
    ) -> AssistantMessageEventStream {
        // The run's own token still reaches the model, through this child of it.
        let token = match &options.cancel {
            Some(run) => run.child_token(),
            None => CancellationToken::new(),
        };
        *lock(&self.open) = Some(token.clone());
        let inner = self.inner.stream(
            context,
            StreamOptions {
                cancel: Some(token.clone()),
            },
        );
        let outer = assistant_message_event_stream();
        let forward = outer.clone();
        let open = Arc::clone(&self.open);
        tokio::spawn(async move {
            let mut terminal = None;
            while let Some(event) = inner.next().await {
                match event {
                    ModelEvent::Done { .. } | ModelEvent::Error { .. } => terminal = Some(event),
                    event => forward.push(event),
                }
            }
            let mut message = inner.result().await;
            let late = {
                let mut open = lock(&open);
                *open = None;
                // Cancelled after the answer was complete: it still counts as interrupted.
                token.is_cancelled() && message.stop_reason != StopReason::Aborted
            };
            match terminal {
                Some(_) | None if late => {
                    message.stop_reason = StopReason::Aborted;
                    forward.push(ModelEvent::Error {
                        reason: StopReason::Aborted,
                        error: message,
                    });
                }
                Some(event) => forward.push(event),
                None => forward.end(message),
            }
        });
        outer
    }
}
