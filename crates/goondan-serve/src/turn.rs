//! A Turn driven by a task of its own, so that the client that asked for
//! it may go away without cancelling it: a dropped HTTP connection (a
//! closed event stream, a client that timed out) leaves the Turn to
//! finish and commit once, as if the client were still there. Only an
//! explicit cancel ([`DetachedTurn::cancel`]) stops it.

use crate::swarm::{RunningTurn, TurnAnswer, TurnFailure, TurnUpdate};
use tokio::sync::{mpsc, oneshot};

/// How many reports wait for a slow reader before the Turn's own reports
/// wait too (text deltas are small; the bound keeps a stalled client from
/// holding more than this per Turn).
const BUFFERED_UPDATES: usize = 256;

/// A Turn that runs whether or not anyone reads its reports.
#[derive(Debug)]
pub struct DetachedTurn {
    /// The input event's id.
    pub event_id: String,
    /// The Turn's reports; dropping the receiver leaves the Turn running.
    pub updates: mpsc::Receiver<TurnUpdate>,
    cancel: oneshot::Sender<()>,
}

impl DetachedTurn {
    /// Takes `running` into a task of its own.
    pub fn spawn(running: RunningTurn) -> DetachedTurn {
        DetachedTurn::spawn_then(running, |_| {})
    }

    /// Takes `running` into a task of its own, which calls `on_end` with
    /// the Turn's end when the swarm reports it, whether or not anyone
    /// still reads (not for a Turn cancelled here, nor one whose swarm
    /// went away).
    pub fn spawn_then(
        running: RunningTurn,
        on_end: impl FnOnce(&Result<TurnAnswer, TurnFailure>) + Send + 'static,
    ) -> DetachedTurn {
        let mut on_end = Some(on_end);
        let RunningTurn {
            event_id,
            updates: mut from_swarm,
        } = running;
        let (to_reader, updates) = mpsc::channel(BUFFERED_UPDATES);
        let (cancel, mut cancelled) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let mut reader = Some(to_reader);
            // A oneshot receiver panics when polled again after it
            // resolved, so once the holder dropped its sender the select
            // stops polling it.
            let mut may_cancel = true;
            loop {
                let update = tokio::select! {
                    update = from_swarm.recv() => update,
                    // Dropping `from_swarm` below cancels the Turn. A
                    // dropped sender (the holder went away) is not a
                    // cancel.
                    signal = &mut cancelled, if may_cancel => match signal {
                        Ok(()) => break,
                        Err(_) => {
                            may_cancel = false;
                            continue;
                        }
                    },
                };
                let Some(update) = update else { break };
                let finished = matches!(update, TurnUpdate::Finished(_));
                if let TurnUpdate::Finished(result) = &update {
                    if let Some(on_end) = on_end.take() {
                        on_end(result);
                    }
                }
                if let Some(to) = &reader {
                    if to.send(update).await.is_err() {
                        reader = None;
                    }
                }
                if finished {
                    return;
                }
            }
            if let Some(to) = reader {
                let _ = to.send(TurnUpdate::Finished(Err(cancelled_body()))).await;
            }
        });
        DetachedTurn {
            event_id,
            updates,
            cancel,
        }
    }

    /// Splits off what cancels the Turn, so a reader and a canceller can
    /// live apart.
    pub fn into_parts(self) -> (String, mpsc::Receiver<TurnUpdate>, Canceller) {
        (self.event_id, self.updates, Canceller(self.cancel))
    }
}

/// Cancels one detached Turn.
#[derive(Debug)]
pub struct Canceller(oneshot::Sender<()>);

impl Canceller {
    /// Cancels the Turn: it fails with `E_TURN_CANCELLED`, keeping what
    /// it stored.
    pub fn cancel(self) {
        let _ = self.0.send(());
    }
}

/// The failure a cancelled Turn reports when the swarm had no chance to.
fn cancelled_body() -> TurnFailure {
    TurnFailure::new("E_TURN_CANCELLED", "the Turn was cancelled")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A Turn whose holder (and so its canceller) went away before the
    /// Turn reported anything still runs to its end.
    #[tokio::test]
    async fn a_dropped_holder_leaves_the_turn_running() {
        let (to_server, updates) = mpsc::channel(4);
        let detached = DetachedTurn::spawn(RunningTurn {
            event_id: "e1".into(),
            updates,
        });
        drop(detached);
        for text in ["a", "b"] {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let sent = to_server.send(TurnUpdate::Text(text.into())).await;
            assert!(sent.is_ok(), "the Turn was cancelled at {text:?}");
        }
        let finished = TurnUpdate::Finished(Ok(TurnAnswer::default()));
        assert!(to_server.send(finished).await.is_ok());
    }

    #[tokio::test]
    async fn cancel_stops_the_turn_and_reports_it() {
        let (to_server, updates) = mpsc::channel(4);
        let (_, mut reader, canceller) = DetachedTurn::spawn(RunningTurn {
            event_id: "e1".into(),
            updates,
        })
        .into_parts();
        canceller.cancel();
        let Some(TurnUpdate::Finished(Err(failure))) = reader.recv().await else {
            panic!("no cancel reported");
        };
        assert_eq!(failure.code, "E_TURN_CANCELLED");
        to_server.closed().await;
    }
}
