//! Lifecycle: graceful restarts, deletes, an agent's request to restart
//! the swarm, and the orchestrator's own shutdown.
//!
//! A graceful stop sends `shutdown` ahead of any queued event; the process
//! finishes its current Turn and acknowledges. Events it was handed but
//! had not started are redelivered to the next process like those of a
//! crashed one, so a restart never drops an event.

use super::instance::ShutdownIntent;
use super::{Orchestrator, PendingDelete, SwarmInfo};
use crate::OrchestratorError;
use goondan_ipc::protocol::{self, Failure, QueryAnswer, ShutdownPayload};
use goondan_ipc::{Link, RoutingKey, SendError, ORCHESTRATOR};
use goondan_types::{ProcessStatus, ShutdownReason};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// An agent's request to re-read the bundle and restart the whole swarm
/// (`self-restart__request`), handed by the loop to whoever can load the
/// bundle ([`OrchestratorConfig::restart_requests`](super::OrchestratorConfig)).
///
/// The receiver validates the bundle first and answers with
/// [`OrchestratorHandle::answer_query`](super::OrchestratorHandle::answer_query)
/// (`RestartScheduled`, or `Failed` with the first error) before it
/// restarts anything, so the answer reaches the agent ahead of its
/// `shutdown` and the Turn that asked still commits and answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwarmRestartRequest {
    /// The agent instance that asked.
    pub from: RoutingKey,
    /// Its query's correlation id, for the answer.
    pub correlation_id: String,
    /// Why, as the agent said.
    pub reason: String,
}

impl Orchestrator {
    /// Hands an agent's restart request out of the loop; `None` when it
    /// was handed out (the receiver answers it), or the refusal to answer
    /// at once.
    pub(super) fn request_restart(
        &mut self,
        from: &RoutingKey,
        correlation_id: &str,
        reason: String,
    ) -> Option<QueryAnswer> {
        let refuse = |code: &str, message: String| {
            Some(QueryAnswer::Failed(Failure {
                code: code.into(),
                message,
                suggestion: None,
            }))
        };
        if from.connection_name().is_some() {
            return refuse(
                "E_IPC_NOT_AN_AGENT",
                format!("{from} is a connector; only an agent may restart the swarm"),
            );
        }
        if self.stopping.is_some() {
            return refuse("E_ORCHESTRATOR_STOPPED", "the swarm is stopping".into());
        }
        let Some(requests) = &self.restart_requests else {
            return refuse(
                "E_RESTART_UNAVAILABLE",
                "this orchestrator cannot re-read its bundle; run the swarm with `gdn run`".into(),
            );
        };
        let request = SwarmRestartRequest {
            from: from.clone(),
            correlation_id: correlation_id.to_string(),
            reason,
        };
        match requests.try_send(request) {
            Ok(()) => None,
            Err(mpsc::error::TrySendError::Full(_)) => refuse(
                "E_RESTART_BUSY",
                "earlier restart requests still wait; try again once they ran".into(),
            ),
            Err(mpsc::error::TrySendError::Closed(_)) => refuse(
                "E_RESTART_UNAVAILABLE",
                "nothing re-reads the bundle any more; the swarm is stopping".into(),
            ),
        }
    }

    /// Gracefully restarts the matching instances; returns their keys.
    pub(super) fn restart(
        &mut self,
        agent: Option<&str>,
        instance_key: Option<&str>,
        fresh: bool,
    ) -> Vec<String> {
        let keys = self.restartable(|key| {
            agent.is_none_or(|agent| key.agent_name == agent)
                && instance_key.is_none_or(|instance| key.instance_key == instance)
        });
        self.restart_keys(&keys, fresh, ShutdownReason::Restart)
    }

    /// Gracefully restarts, because the bundle changed, every instance of
    /// `agents` and the ConnectorProcess of `connections`; returns their
    /// keys. Events for them wait in their queues meanwhile.
    pub(super) fn restart_for_config(
        &mut self,
        agents: &[String],
        connections: &[String],
    ) -> Vec<String> {
        let keys = self.restartable(|key| match key.connection_name() {
            Some(connection) => connections.iter().any(|name| name == connection),
            None => agents.contains(&key.agent_name),
        });
        self.restart_keys(&keys, false, ShutdownReason::ConfigChange)
    }

    /// The keys `selected` picks that a restart concerns.
    fn restartable(&self, selected: impl Fn(&RoutingKey) -> bool) -> Vec<RoutingKey> {
        // A passivated instance (stopped on purpose, nothing waiting) is
        // left alone: restarting it would only undo the passivation.
        self.instances
            .iter()
            .filter(|(key, _)| selected(key))
            .filter(|(_, instance)| {
                instance.is_running()
                    || instance.waiting() > 0
                    || instance.next_spawn_at.is_some()
                    || matches!(
                        instance.status,
                        ProcessStatus::Crashed | ProcessStatus::CrashLoopBackOff
                    )
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    fn restart_keys(
        &mut self,
        keys: &[RoutingKey],
        fresh: bool,
        reason: ShutdownReason,
    ) -> Vec<String> {
        let grace = self.swarm.grace_period;
        for key in keys {
            let running = self.instances.get(key).is_some_and(|i| i.is_running());
            if running {
                self.request_shutdown(key, reason, grace, true, fresh);
            } else {
                if fresh {
                    if let Some(reset) = &self.reset_instance {
                        reset(key);
                    }
                }
                let backed_off = self.instances.get_mut(key).is_some_and(|instance| {
                    let backed_off = instance.consecutive_crashes > 0;
                    instance.consecutive_crashes = 0;
                    instance.next_spawn_at = None;
                    // A Connection its bundle refused is asked for again:
                    // the bundle may have changed.
                    instance.refused_by_config = false;
                    backed_off
                });
                // A restart clears the backoff on disk too, so the next
                // orchestrator does not resume it.
                if backed_off {
                    self.save_crashes(key, 0, None);
                }
                self.ensure_spawned(key);
            }
        }
        keys.iter().map(ToString::to_string).collect()
    }

    /// Replaces the swarm: the next events follow its rules, Connections
    /// it gained start, and those it lost and the instances of agents it
    /// lost drain and stay stopped.
    pub(super) fn reconfigure(&mut self, swarm: SwarmInfo) {
        let removed: Vec<RoutingKey> = self
            .swarm
            .connections
            .iter()
            .filter(|name| !swarm.connections.contains(name))
            .map(RoutingKey::connection)
            .collect();
        let swarm = Arc::new(swarm);
        self.swarm = Arc::clone(&swarm);
        // `idleSeconds` may have changed every instance's deadline.
        self.instances.mark_all_changed();
        match self.shared_swarm.write() {
            Ok(mut shared) => *shared = swarm,
            Err(poisoned) => *poisoned.into_inner() = swarm,
        }
        let grace = self.swarm.grace_period;
        // Agents that left the swarm stop too; nothing can reach them now.
        let gone_agents = self.instances.iter().filter(|(key, instance)| {
            key.connection_name().is_none()
                && !self.swarm.agents.contains(&key.agent_name)
                && instance.is_running()
        });
        let removed: Vec<RoutingKey> = removed
            .into_iter()
            .chain(gone_agents.map(|(key, _)| key.clone()).collect::<Vec<_>>())
            .collect();
        for key in removed {
            if let Some(instance) = self.instances.get_mut(&key) {
                instance.resident = false;
            }
            if self.instances.get(&key).is_some_and(|i| i.is_running()) {
                self.request_shutdown(&key, ShutdownReason::ConfigChange, grace, false, false);
            }
        }
        self.start_connections();
    }

    /// Asks the process of `key` to drain; it is killed after `grace`.
    pub(super) fn request_shutdown(
        &mut self,
        key: &RoutingKey,
        reason: ShutdownReason,
        grace: Duration,
        respawn: bool,
        fresh: bool,
    ) {
        let Some(instance) = self.instances.get_mut(key) else {
            return;
        };
        if instance.shutdown.is_some() {
            return;
        }
        // A ConnectorProcess that never became ready has accepted no event,
        // so it has nothing to finish; it may not even read its input any
        // more (one that refused its config), so it is not waited for.
        let grace = if key.connection_name().is_some() && instance.ready_at.is_none() {
            Duration::ZERO
        } else {
            grace
        };
        instance.status = ProcessStatus::Draining;
        instance.shutdown = Some(ShutdownIntent {
            respawn,
            fresh,
            kill_at: Instant::now() + grace,
            killed: false,
        });
        let payload = ShutdownPayload {
            grace_period_ms: grace.as_millis() as u64,
            reason,
        };
        // Shutdown jumps the queue of undelivered events: they stay queued
        // and go to the next process.
        let Some(link) = instance.link.clone() else {
            return;
        };
        let message = protocol::shutdown_message(ORCHESTRATOR, key, &payload);
        if let Err(SendError::Full(_) | SendError::Closed(_) | SendError::Stale(_)) =
            self.transport.try_send(&link, message)
        {
            if let Some(control) = instance.control.as_mut() {
                control.kill();
            }
        }
    }

    /// Kills and forgets the instances `key_text` names; `reply` gets
    /// whether anything ran, once every killed process has exited.
    pub(super) fn delete(&mut self, key_text: &str, reply: oneshot::Sender<bool>) {
        let keys: Vec<RoutingKey> = self
            .instances
            .keys()
            .filter(|key| key.to_string() == key_text || key.instance_key == key_text)
            .cloned()
            .collect();
        let mut waiting_for = Vec::new();
        for key in keys {
            if let Some(mut instance) = self.instances.remove(&key) {
                if let (Some(control), Some(link)) = (instance.control.as_mut(), &instance.link) {
                    control.kill();
                    self.transport.close(link);
                    waiting_for.push(link.clone());
                }
                for queued in instance.drain_all() {
                    if let Some(event_id) = queued.event_id() {
                        self.input_left(&key, event_id);
                    }
                }
            }
            let lost: Vec<String> = self
                .waiters
                .iter()
                .filter(|(_, waiter)| waiter.key == key)
                .map(|(id, _)| id.clone())
                .collect();
            for id in lost {
                if let Some(waiter) = self.waiters.remove(&id) {
                    let _ = waiter.reply.send(Err(OrchestratorError::Deleted {
                        key: key.to_string(),
                    }));
                }
            }
        }
        if waiting_for.is_empty() {
            let _ = reply.send(false);
        } else {
            self.deletes.push(PendingDelete { waiting_for, reply });
        }
    }

    /// Answers the deletes that were waiting only for this exit.
    pub(super) fn finish_deletes(&mut self, link: &Link) {
        for delete in &mut self.deletes {
            delete.waiting_for.retain(|waiting| waiting != link);
        }
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deletes)
            .into_iter()
            .partition(|delete| delete.waiting_for.is_empty());
        self.deletes = waiting;
        for delete in done {
            let _ = delete.reply.send(true);
        }
    }

    /// Drains every process; the loop ends once all are gone.
    pub(super) fn begin_shutdown(&mut self, done: oneshot::Sender<()>) {
        self.stopping = Some(done);
        let grace = self.swarm.grace_period;
        let keys: Vec<RoutingKey> = self.instances.keys().cloned().collect();
        for key in keys {
            if self.instances.get(&key).is_some_and(|i| i.is_running()) {
                self.request_shutdown(
                    &key,
                    ShutdownReason::OrchestratorShutdown,
                    grace,
                    false,
                    false,
                );
            }
        }
    }
}
