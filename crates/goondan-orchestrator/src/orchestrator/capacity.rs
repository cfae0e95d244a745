//! Process capacity (`policy.processes`): at most `maxLive` agent
//! processes per swarm, and idle instances passivated.
//!
//! When an instance without a process gets its first event and the cap is
//! reached, the least recently used *idle* instance (ready, no Turn, nothing
//! queued or in flight) is passivated to make room: its process drains and
//! exits 0, its state stays on disk, and its next event starts a new
//! process, which reads the conversation back. The waiting instance starts
//! once the slot is free. When no instance is idle, and no passivation
//! already under way would free a slot for it, the event is refused with
//! `E_INSTANCE_LIMIT`, which reaches its sender (a tool error for
//! `agents__send` and `agents__request`, a coded error for `gdn run`).
//!
//! An instance with no Turn for `idleSeconds` is passivated the same way.
//! Neither is a crash: no counter moves, no backoff applies.
//!
//! ConnectorProcesses (resident) are never passivated and do not count
//! against the cap.

use super::instance::Instance;
use super::Orchestrator;
use crate::OrchestratorError;
use goondan_ipc::RoutingKey;
use goondan_types::ShutdownReason;
use tokio::time::Instant;

/// True when `key`'s process counts against the cap: an agent's, running.
pub(super) fn counts(key: &RoutingKey, instance: &Instance) -> bool {
    key.connection_name().is_none() && !instance.resident && instance.is_running()
}

/// The idle instance used least recently, other than `except`.
pub(crate) fn least_recently_used<'a>(
    instances: impl IntoIterator<Item = (&'a RoutingKey, &'a Instance)>,
    except: &RoutingKey,
) -> Option<RoutingKey> {
    instances
        .into_iter()
        .filter(|(key, instance)| *key != except && counts(key, instance) && instance.is_idle())
        .min_by_key(|(_, instance)| instance.last_active)
        .map(|(key, _)| key.clone())
}

/// What to do for an instance that needs a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Room {
    /// A slot is free (or the instance needs none).
    Free,
    /// Passivate this idle instance; its slot goes to the one waiting.
    Passivate(RoutingKey),
    /// A passivation under way frees a slot for it; wait.
    Wait,
    /// No slot and no way to free one.
    Refuse {
        /// Agent processes running.
        live: usize,
    },
}

/// Decides where the process of `key` fits, given every instance, how
/// many of them count against the cap (`live`, which the caller keeps
/// without a pass over them), and the cap. Only a full cap looks at every
/// instance.
pub(crate) fn find_room<'a>(
    instances: impl IntoIterator<Item = (&'a RoutingKey, &'a Instance)> + Clone,
    key: &RoutingKey,
    live: usize,
    max_live: usize,
) -> Room {
    if live < max_live {
        return Room::Free;
    }
    if let Some(victim) = least_recently_used(instances.clone(), key) {
        return Room::Passivate(victim);
    }
    let freeing = instances
        .clone()
        .into_iter()
        .filter(|(key, instance)| counts(key, instance) && instance.is_freeing_slot())
        .count();
    let waiting = instances
        .into_iter()
        .filter(|(other, instance)| {
            *other != key
                && other.connection_name().is_none()
                && !instance.resident
                && !instance.is_running()
                && instance.waiting() > 0
        })
        .count();
    if freeing > waiting {
        Room::Wait
    } else {
        Room::Refuse { live }
    }
}

impl Orchestrator {
    /// True when a process for `key` may start now.
    pub(super) fn has_room(&self, key: &RoutingKey) -> bool {
        let resident = self.instances.get(key).is_some_and(|i| i.resident);
        if key.connection_name().is_some() || resident {
            return true;
        }
        self.instances.live() < self.swarm.processes.max_live
    }

    /// Called before the first event is queued for an instance without a
    /// process: passivates the least recently used idle instance when the
    /// cap is reached, or refuses with `E_INSTANCE_LIMIT`.
    pub(super) fn make_room(&mut self, key: &RoutingKey) -> Result<(), OrchestratorError> {
        // One backing off starts no process before its backoff ends; its
        // room is found then (`fill_free_slots`).
        let needs_slot = self.instances.get(key).is_none_or(|instance| {
            !instance.resident
                && !instance.is_running()
                && instance.waiting() == 0
                && instance.backoff_remaining().is_none()
        });
        if key.connection_name().is_some() || !needs_slot {
            return Ok(());
        }
        let max_live = self.swarm.processes.max_live;
        match find_room(self.instances.iter(), key, self.instances.live(), max_live) {
            Room::Free | Room::Wait => Ok(()),
            Room::Passivate(victim) => {
                tracing::info!(key = %key, passivated = %victim, max_live, "process cap reached; passivating the least recently used idle instance");
                self.passivate(&victim);
                Ok(())
            }
            Room::Refuse { live } => {
                tracing::warn!(key = %key, code = "E_INSTANCE_LIMIT", live, max_live, reported = true, "process cap reached and no instance is idle; event refused");
                Err(OrchestratorError::InstanceLimit {
                    key: key.to_string(),
                    limit: max_live,
                })
            }
        }
    }

    /// Stops the process of `key` gracefully without replacing it; its
    /// next event starts a new one.
    pub(super) fn passivate(&mut self, key: &RoutingKey) {
        let grace = self.swarm.grace_period;
        self.request_shutdown(key, ShutdownReason::Passivate, grace, false, false);
    }

    /// Passivates the instances idle for `idleSeconds`.
    pub(super) fn passivate_idle(&mut self) {
        let Some(idle_after) = self.swarm.processes.idle_after else {
            return;
        };
        if self.stopping.is_some() {
            return;
        }
        let now = Instant::now();
        let idle: Vec<RoutingKey> = self
            .instances
            .iter()
            .filter(|(key, instance)| counts(key, instance) && instance.is_idle())
            .filter(|(_, instance)| now >= instance.last_active + idle_after)
            .map(|(key, _)| key.clone())
            .collect();
        for key in idle {
            tracing::info!(key = %key, idle_seconds = idle_after.as_secs(), "instance idle; passivating its process (its state stays on disk)");
            self.passivate(&key);
        }
    }

    /// Starts the instances waiting for a slot, longest waiting first, as
    /// far as the cap allows; for those still waiting, passivates idle
    /// instances (one each, counting passivations already under way), so
    /// an instance that took its slot back meanwhile cannot starve them.
    pub(super) fn fill_free_slots(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        let now = Instant::now();
        let mut waiting: Vec<(Instant, RoutingKey)> = self
            .instances
            .iter()
            .filter(|(key, instance)| {
                key.connection_name().is_none()
                    && !instance.is_running()
                    && instance.shutdown.is_none()
                    && instance.waiting() > 0
                    && instance.next_spawn_at.is_none_or(|at| now >= at)
            })
            .map(|(key, instance)| (instance.last_active, key.clone()))
            .collect();
        waiting.sort();
        let mut still_waiting = Vec::new();
        for (_, key) in waiting {
            if self.has_room(&key) {
                self.ensure_spawned(&key);
            } else {
                still_waiting.push(key);
            }
        }
        let mut freeing = self
            .instances
            .iter()
            .filter(|(key, instance)| counts(key, instance) && instance.is_freeing_slot())
            .count();
        for key in still_waiting {
            if freeing > 0 {
                freeing -= 1;
                continue;
            }
            let Some(victim) = least_recently_used(self.instances.iter(), &key) else {
                break;
            };
            tracing::info!(key = %key, passivated = %victim, "an instance waits for a process slot; passivating the least recently used idle instance");
            self.passivate(&victim);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawner::ProcessControl;
    use goondan_types::ProcessStatus;
    use std::collections::BTreeMap;
    use std::time::Duration;

    struct Control;

    impl ProcessControl for Control {
        fn id(&self) -> Option<u32> {
            None
        }

        fn kill(&mut self) {}
    }

    /// An instance in one of the states the cap cares about, last active
    /// `age_s` seconds ago.
    fn instance(state: &str, age_s: u64) -> Instance {
        let mut instance = Instance::new();
        instance.last_active = Instant::now() - Duration::from_secs(age_s);
        if state == "stopped" {
            return instance;
        }
        instance.control = Some(Box::new(Control));
        instance.ready_at = Some(Instant::now());
        instance.status = match state {
            "busy" => ProcessStatus::Processing,
            _ => ProcessStatus::Idle,
        };
        if state == "passivating" {
            instance.status = ProcessStatus::Draining;
            instance.shutdown = Some(super::super::instance::ShutdownIntent {
                respawn: false,
                fresh: false,
                kill_at: Instant::now(),
                killed: false,
            });
        }
        if state == "resident" {
            instance.resident = true;
        }
        instance
    }

    fn key(name: &str) -> RoutingKey {
        RoutingKey::new(name, "main")
    }

    fn live(instances: &BTreeMap<RoutingKey, Instance>) -> usize {
        instances
            .iter()
            .filter(|(key, instance)| counts(key, instance))
            .count()
    }

    #[test]
    fn the_cap_passivates_the_least_recently_used_idle_instance_or_refuses() {
        // (instances as name/state/age, cap, expected room for `new`)
        type Case = (&'static [(&'static str, &'static str, u64)], usize, Room);
        let cases: Vec<Case> = vec![
            (&[("a", "idle", 5)], 2, Room::Free),
            (
                &[("a", "idle", 5), ("b", "idle", 50), ("c", "busy", 500)],
                3,
                Room::Passivate(key("b")),
            ),
            (
                &[("a", "busy", 5), ("b", "busy", 50)],
                2,
                Room::Refuse { live: 2 },
            ),
            // A resident ConnectorProcess neither counts nor is chosen.
            (&[("a", "resident", 500), ("b", "busy", 5)], 2, Room::Free),
            (
                &[("a", "resident", 500), ("b", "busy", 5)],
                1,
                Room::Refuse { live: 1 },
            ),
            // A passivation under way frees the slot the new one waits for.
            (&[("a", "passivating", 5), ("b", "busy", 5)], 2, Room::Wait),
            (
                &[("a", "stopped", 5), ("b", "idle", 5)],
                1,
                Room::Passivate(key("b")),
            ),
        ];
        for (states, cap, expected) in cases {
            let instances: BTreeMap<RoutingKey, Instance> = states
                .iter()
                .map(|(name, state, age)| (key(name), instance(state, *age)))
                .collect();
            assert_eq!(
                find_room(&instances, &key("new"), live(&instances), cap),
                expected,
                "{states:?} cap {cap}"
            );
        }
    }

    #[test]
    fn a_passivation_frees_one_slot_for_one_waiting_instance() {
        let mut instances: BTreeMap<RoutingKey, Instance> = BTreeMap::new();
        instances.insert(key("a"), instance("passivating", 5));
        instances.insert(key("b"), instance("busy", 5));
        let mut waiting = instance("stopped", 1);
        waiting
            .enqueue(
                super::super::instance::Queued::turn(
                    goondan_ipc::ORCHESTRATOR,
                    goondan_types::AgentEvent::new(
                        "user_message",
                        goondan_types::EventSource::new(
                            goondan_types::EventSourceKind::Connector,
                            "cli",
                        ),
                    ),
                ),
                10,
            )
            .unwrap();
        instances.insert(key("w"), waiting);
        assert_eq!(
            find_room(&instances, &key("new"), live(&instances), 2),
            Room::Refuse { live: 2 }
        );
    }
}
