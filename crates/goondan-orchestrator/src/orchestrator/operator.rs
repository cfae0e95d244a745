//! What a person does to a running instance through the control socket
//! (from `gdn instance …` or the Studio): cancel the Turn its process
//! runs, and hold the instance (its process stopped, its events waiting)
//! while its history is rewritten: on disk (a fork or a rewind), or, on a
//! cluster host, in the cluster's log by the host itself.
//!
//! The main loop does not know what a Turn holds or how a history is
//! cut: cancelling is a `runtime.cancel` for the event in flight, and a
//! hold only keeps the key from getting a process, so whoever holds it
//! can take the instance's single-writer lock. The rewriting itself is
//! the holder's: the control socket's fork and rewind
//! (`control/rewrite.rs`), through `goondan_store`.

use super::input::Rewriter;
use super::Orchestrator;
use crate::OrchestratorError;
use goondan_ipc::protocol::Cancel;
use goondan_ipc::{Link, RoutingKey, RuntimeMessage};
use goondan_types::ShutdownReason;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

/// One Turn an operator's cancel stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelledTurn {
    /// `agentName:instanceKey`.
    pub key: String,
    /// The id of the input event whose Turn was cancelled.
    pub event_id: String,
}

/// Callers waiting until some in-flight events are over (their Turns
/// finished, or their process ended).
pub(super) struct TurnWatch {
    pub(super) pending: Vec<(RoutingKey, String)>,
    pub(super) done: oneshot::Sender<()>,
}

/// A hold answered once every process it stopped has exited, so the
/// holder can take the instances' locks.
pub(super) struct PendingHold {
    pub(super) waiting_for: Vec<Link>,
    pub(super) stopped: Vec<String>,
    pub(super) reply: oneshot::Sender<Result<Vec<String>, OrchestratorError>>,
}

impl Orchestrator {
    /// The agent instances `key_text` names: `agent:instanceKey` exactly,
    /// or an instance key, which names that key of every agent.
    fn named_agent_keys(&self, key_text: &str) -> Vec<RoutingKey> {
        self.instances
            .keys()
            .filter(|key| key.connection_name().is_none())
            .filter(|key| key.to_string() == key_text || key.instance_key == key_text)
            .cloned()
            .collect()
    }

    /// Cancels the Turn the process of each instance `key_text` names is
    /// running (the oldest event in flight there), recording `by` as who
    /// cancelled it. Its requester is answered `E_TURN_CANCELLED` by the
    /// process. `E_NO_TURN_RUNNING` when no such Turn runs.
    pub(super) fn cancel_running(
        &mut self,
        key_text: &str,
        by: &str,
    ) -> Result<Vec<CancelledTurn>, OrchestratorError> {
        let mut cancelled = Vec::new();
        for key in self.named_agent_keys(key_text) {
            let Some(event_id) = self
                .instances
                .get(&key)
                .filter(|instance| instance.is_running())
                .and_then(|instance| instance.running_turn())
                .map(str::to_string)
            else {
                continue;
            };
            tracing::info!(key = %key, event_id, by, "turn cancelled by an operator");
            self.stop_turn(&key, &event_id, Some(by.to_string()));
            cancelled.push(CancelledTurn {
                key: key.to_string(),
                event_id,
            });
        }
        if cancelled.is_empty() {
            return Err(OrchestratorError::NoTurnRunning {
                key: key_text.to_string(),
            });
        }
        Ok(cancelled)
    }

    /// Marks the in-flight `event_id` of `key` cancelled (a crash of its
    /// process does not hand it on) and sends the process
    /// `runtime.cancel`, naming who asked when a person did.
    pub(super) fn stop_turn(&mut self, key: &RoutingKey, event_id: &str, by: Option<String>) {
        self.instance_for(key).mark_cancelled(event_id);
        let cancel = RuntimeMessage::Cancel(Cancel {
            event_id: event_id.to_string(),
            cancelled_by: by,
        });
        // A runtime message is never refused by a queue.
        let _ = self.deliver(key, super::instance::Queued::runtime(cancel));
    }

    /// Answers `done` once every event of `pending` is over; at once when
    /// none is in flight any more.
    pub(super) fn watch_turns(
        &mut self,
        pending: Vec<(RoutingKey, String)>,
        done: oneshot::Sender<()>,
    ) {
        self.turn_watches.push(TurnWatch { pending, done });
        self.settle_watches();
    }

    /// Answers the watches whose events all ended.
    pub(super) fn settle_watches(&mut self) {
        let instances = &self.instances;
        for watch in &mut self.turn_watches {
            watch.pending.retain(|(key, event_id)| {
                instances
                    .get(key)
                    .is_some_and(|instance| instance.holds_in_flight(event_id))
            });
        }
        let (done, waiting): (Vec<TurnWatch>, Vec<TurnWatch>) =
            std::mem::take(&mut self.turn_watches)
                .into_iter()
                .partition(|watch| watch.pending.is_empty());
        self.turn_watches = waiting;
        for watch in done {
            let _ = watch.done.send(());
        }
    }

    /// Holds the instances `keys` (`agent:instanceKey` each) for
    /// `rewriter` (a client rewriting files is refused on a cluster
    /// member): refuses with `E_TURN_RUNNING` if a Turn runs or waits in a
    /// process of one of them, else stops their processes (a graceful `shutdown`) and keeps
    /// them from getting new ones until [`Orchestrator::release`]. Events
    /// that arrive meanwhile wait in their bounded queues. `reply` gets
    /// the keys whose process was stopped, once each has exited.
    pub(super) fn hold(
        &mut self,
        keys: &[String],
        rewriter: Rewriter,
        reply: oneshot::Sender<Result<Vec<String>, OrchestratorError>>,
    ) {
        if self.remote.is_some() && rewriter == Rewriter::HostFiles {
            let _ = reply.send(Err(OrchestratorError::ClusterUnsupported {
                what: "holding an instance to rewrite its history (fork, rewind)".into(),
            }));
            return;
        }
        if self.stopping.is_some() {
            let _ = reply.send(Err(OrchestratorError::Stopped));
            return;
        }
        let mut routing_keys = Vec::with_capacity(keys.len());
        for text in keys {
            let Some(key) = RoutingKey::split_whole(text) else {
                let _ = reply.send(Err(OrchestratorError::UnknownAgent {
                    agent: text.clone(),
                    swarm: self.swarm.swarm_name.clone(),
                }));
                return;
            };
            routing_keys.push(key);
        }
        if let Some(busy) = routing_keys.iter().find(|key| {
            self.instances
                .get(*key)
                .is_some_and(|instance| instance.running_turn().is_some())
        }) {
            let _ = reply.send(Err(OrchestratorError::TurnRunning {
                key: busy.to_string(),
            }));
            return;
        }
        let grace = self.swarm.grace_period;
        let mut waiting_for = Vec::new();
        let mut stopped = Vec::new();
        for key in &routing_keys {
            let known = self.instances.contains_key(key);
            let instance = self.instance_for(key);
            instance.holds += 1;
            instance.held_placeholder |= !known;
            if let Some(link) = instance.link.clone() {
                waiting_for.push(link);
                stopped.push(key.to_string());
                self.request_shutdown(key, ShutdownReason::Passivate, grace, false, false);
            }
        }
        tracing::info!(keys = ?keys, "instances held for an operator");
        if waiting_for.is_empty() {
            let _ = reply.send(Ok(stopped));
        } else {
            self.holds.push(PendingHold {
                waiting_for,
                stopped,
                reply,
            });
        }
    }

    /// Answers the holds that were waiting only for this exit.
    pub(super) fn finish_holds(&mut self, link: &Link) {
        for hold in &mut self.holds {
            hold.waiting_for.retain(|waiting| waiting != link);
        }
        let (done, waiting): (Vec<PendingHold>, Vec<PendingHold>) = std::mem::take(&mut self.holds)
            .into_iter()
            .partition(|hold| hold.waiting_for.is_empty());
        self.holds = waiting;
        for hold in done {
            let _ = hold.reply.send(Ok(hold.stopped));
        }
    }

    /// Lets go of the held instances `keys`: one with events waiting gets
    /// a process; a placeholder made only for the hold is forgotten.
    pub(super) fn release(&mut self, keys: &[String]) {
        for text in keys {
            let Some(key) = RoutingKey::split_whole(text) else {
                continue;
            };
            let Some(instance) = self.instances.get_mut(&key) else {
                continue;
            };
            instance.holds = instance.holds.saturating_sub(1);
            if instance.holds > 0 {
                // Another holder is still rewriting it.
                continue;
            }
            let forget = std::mem::take(&mut instance.held_placeholder)
                && instance.waiting() == 0
                && !instance.is_running();
            if forget {
                self.instances.remove(&key);
            } else if instance.waiting() > 0 {
                self.ensure_spawned(&key);
            }
        }
        tracing::info!(keys = ?keys, "held instances released");
    }
}
