//! Sources: connectors that make events on their own (a clock, a long
//! poll of a chat API) instead of answering posts behind the HTTP front.
//!
//! A connector is one of two things, and the host runs either the same
//! way: an HTTP [`Platform`](crate::Platform) behind the shared front, or
//! a [`Source`] task that emits until told to stop. This module owns that
//! second seam: the [`Source`] trait, the [`Shutdown`] signal a source
//! watches, and [`deliver`], which hands one event to the swarm and waits
//! out a full queue so that a source never drops or duplicates an event.
//! It knows nothing of clocks or chat APIs; [`cron`](crate::cron) and
//! [`telegram`](crate::telegram) do.

use crate::press::Press;
use crate::{EmitError, Emitter};
use futures_util::future::BoxFuture;
use goondan_types::ConnectorEvent;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// A connector that produces events by itself until shut down.
///
/// # Contract
///
/// `run` returns once `shutdown` is requested; a source that returns
/// before that is treated by the host as crashed (the process exits
/// non-zero and the orchestrator restarts it with backoff). A source hands
/// every event to [`deliver`] (or does what it does: waits while the queue
/// is full) and only counts an event as done once the emitter accepted it.
pub trait Source: Send + 'static {
    /// The connector's name, for logs.
    fn name(&self) -> &'static str;

    /// Emits events until `shutdown` is requested.
    fn run(
        self: Box<Self>,
        emitter: Arc<dyn Emitter>,
        shutdown: Shutdown,
    ) -> BoxFuture<'static, ()>;
}

/// The side that requests a shutdown; dropping it requests one too.
#[derive(Debug)]
pub struct ShutdownTrigger(watch::Sender<bool>);

impl ShutdownTrigger {
    /// Asks every [`Shutdown`] of this pair to stop.
    pub fn fire(self) {
        let _ = self.0.send(true);
    }
}

/// What a source watches to know when to stop. Clones watch the same
/// trigger.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// A new trigger and the signal it fires.
    pub fn new() -> (ShutdownTrigger, Shutdown) {
        let (sender, receiver) = watch::channel(false);
        (ShutdownTrigger(sender), Shutdown(receiver))
    }

    /// True once a shutdown was requested (or the trigger dropped).
    pub fn is_requested(&self) -> bool {
        *self.0.borrow() || self.0.has_changed().is_err()
    }

    /// Resolves once a shutdown is requested.
    pub async fn requested(&mut self) {
        // An error means the trigger is gone, which is a request too.
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    /// Sleeps for `duration`; false when a shutdown cut the sleep short.
    pub async fn sleep(&mut self, duration: Duration) -> bool {
        if self.is_requested() {
            return false;
        }
        tokio::select! {
            () = tokio::time::sleep(duration) => !self.is_requested(),
            () = self.requested() => false,
        }
    }

    /// Resolves once a shutdown is requested, owning the signal: for APIs
    /// that take a `'static` future (the HTTP front's graceful shutdown).
    pub async fn stopped(mut self) {
        self.requested().await
    }
}

/// What became of an event handed to [`deliver`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The swarm accepted it.
    Accepted,
    /// The swarm refused it for good (no route, for example); retrying
    /// would be refused again, so the source moves on.
    Refused(String),
    /// A shutdown came first; the event was not accepted.
    Stopped,
}

/// The first wait after a full queue or a closed swarm; it doubles up to
/// [`MAX_DELIVERY_WAIT`].
const FIRST_DELIVERY_WAIT: Duration = Duration::from_millis(250);
/// The longest wait between two attempts to deliver one event.
const MAX_DELIVERY_WAIT: Duration = Duration::from_secs(30);

/// Hands `event` to the swarm, trying again (with growing waits) while its
/// queue is full or the swarm is not accepting, until it is accepted,
/// refused for good, or a shutdown comes.
pub async fn deliver(
    emitter: &dyn Emitter,
    event: ConnectorEvent,
    shutdown: &mut Shutdown,
    source: &'static str,
) -> Delivery {
    let what = format!("event {}", event.name);
    persist(shutdown, source, &what, || emitter.emit(event.clone())).await
}

/// Hands a press of an approval button to the approval desk, as
/// [`deliver`] hands an event to the swarm.
pub async fn deliver_press(
    emitter: &dyn Emitter,
    press: Press,
    shutdown: &mut Shutdown,
    source: &'static str,
) -> Delivery {
    let what = format!("press on {}", press.approval_id);
    persist(shutdown, source, &what, || emitter.press(press.clone())).await
}

/// Tries `attempt` until it is taken, refused for good, or a shutdown
/// comes, waiting longer after each full queue or closed swarm.
async fn persist<'e, T>(
    shutdown: &mut Shutdown,
    source: &'static str,
    what: &str,
    mut attempt: impl FnMut() -> BoxFuture<'e, Result<T, EmitError>>,
) -> Delivery {
    let mut wait = FIRST_DELIVERY_WAIT;
    loop {
        if shutdown.is_requested() {
            return Delivery::Stopped;
        }
        match attempt().await {
            Ok(_) => return Delivery::Accepted,
            Err(EmitError::Refused(reason)) => {
                tracing::error!(connector = source, what, "the swarm refused it: {reason}");
                return Delivery::Refused(reason);
            }
            Err(error @ (EmitError::QueueFull(_) | EmitError::Closed(_))) => {
                tracing::warn!(
                    connector = source,
                    what,
                    wait_ms = wait.as_millis() as u64,
                    "not accepted yet: {error}"
                );
            }
        }
        if !shutdown.sleep(wait).await {
            return Delivery::Stopped;
        }
        wait = (wait * 2).min(MAX_DELIVERY_WAIT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Answers each emit with the next scripted result, then accepts.
    struct Scripted(Mutex<Vec<Result<(), EmitError>>>, Mutex<usize>);

    impl Emitter for Scripted {
        fn emit(
            &self,
            _event: ConnectorEvent,
        ) -> BoxFuture<'_, Result<crate::Accepted, EmitError>> {
            Box::pin(async move { self.next().map(|()| crate::Accepted::default()) })
        }

        fn press(&self, _press: Press) -> BoxFuture<'_, Result<(), EmitError>> {
            Box::pin(async move { self.next() })
        }
    }

    impl Scripted {
        fn next(&self) -> Result<(), EmitError> {
            *self.1.lock().unwrap() += 1;
            let mut script = self.0.lock().unwrap();
            if script.is_empty() {
                Ok(())
            } else {
                script.remove(0)
            }
        }
    }

    fn event() -> ConnectorEvent {
        ConnectorEvent::text("tick", "t")
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_is_waited_out_and_a_refusal_is_final() {
        let emitter = Scripted(
            Mutex::new(vec![
                Err(EmitError::QueueFull("full".into())),
                Err(EmitError::Closed("restarting".into())),
            ]),
            Mutex::new(0),
        );
        let (_trigger, mut shutdown) = Shutdown::new();
        assert_eq!(
            deliver(&emitter, event(), &mut shutdown, "test").await,
            Delivery::Accepted
        );
        assert_eq!(*emitter.1.lock().unwrap(), 3);

        let refusing = Scripted(
            Mutex::new(vec![Err(EmitError::Refused("no route".into()))]),
            Mutex::new(0),
        );
        assert_eq!(
            deliver(&refusing, event(), &mut shutdown, "test").await,
            Delivery::Refused("no route".into())
        );
        assert_eq!(*refusing.1.lock().unwrap(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_stops_a_delivery_that_waits() {
        let emitter = Scripted(
            Mutex::new(vec![Err(EmitError::QueueFull("full".into())); 100]),
            Mutex::new(0),
        );
        let (trigger, mut shutdown) = Shutdown::new();
        let delivering = deliver(&emitter, event(), &mut shutdown, "test");
        tokio::pin!(delivering);
        tokio::select! {
            _ = &mut delivering => panic!("delivered into a full queue"),
            () = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
        trigger.fire();
        assert_eq!(delivering.await, Delivery::Stopped);
    }

    #[tokio::test]
    async fn a_dropped_trigger_is_a_shutdown() {
        let (trigger, mut shutdown) = Shutdown::new();
        assert!(!shutdown.is_requested());
        drop(trigger);
        assert!(shutdown.is_requested());
        assert!(!shutdown.sleep(Duration::from_secs(60)).await);
    }
}
