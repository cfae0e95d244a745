//! The orchestrator's side of the durable inbox
//! ([`goondan_store::InboxStore`]): every input that starts a Turn (from
//! a connector, the CLI, the control socket or another agent) is stored
//! before it is acknowledged or queued ([`Orchestrator::store_input`]),
//! leaves when its Turn finished or it was answered for good without one
//! ([`Orchestrator::input_left`]), or once the inbox of an instance another
//! host now serves stored it, and what an earlier orchestrator
//! accepted and no Turn consumed is queued again first when this one
//! starts ([`Orchestrator::replay_inbox`]), marked redelivered so the
//! agent answers it from its conversation if a Turn already consumed it.
//!
//! An event that came through a cluster's inbox (`inbox_seq` set) is
//! durable there already and is not stored twice.

use super::forwarding::Owed;
use super::instance::Queued;
use super::Orchestrator;
use crate::OrchestratorError;
use goondan_ipc::{protocol, RoutingKey};
use goondan_store::Accepted;
use goondan_types::AgentEvent;

impl Orchestrator {
    /// Stores `event` from `from` in `key`'s inbox before anything
    /// acknowledges it. `Err(Duplicate)` when the instance holds its id or
    /// consumed it recently.
    pub(super) fn store_input(
        &self,
        key: &RoutingKey,
        from: &str,
        event: &AgentEvent,
    ) -> Result<(), OrchestratorError> {
        // Every input passes here before it is acknowledged: the one
        // door where a key that would forge what people read is refused.
        OrchestratorError::check_instance_key(&key.instance_key)?;
        let Some(inbox) = &self.inbox else {
            return Ok(());
        };
        if event.inbox_seq.is_some() {
            return Ok(());
        }
        match inbox.accept(&key.agent_name, &key.instance_key, from, event) {
            Ok(Accepted::New) => Ok(()),
            Ok(Accepted::Duplicate) => {
                tracing::info!(key = %key, event_id = %event.id, code = "E_EVENT_DUPLICATE", "the instance already holds this event id; not run again");
                Err(OrchestratorError::Duplicate {
                    key: key.to_string(),
                    event_id: event.id.clone(),
                })
            }
            Err(source) => {
                tracing::error!(key = %key, event_id = %event.id, code = source.code(), "cannot store an input: {source}");
                Err(OrchestratorError::Inbox {
                    key: key.to_string(),
                    source,
                })
            }
        }
    }

    /// The input `event_id` left `key` for good: its Turn finished, or it
    /// was answered (refused, cancelled, given up) without one.
    pub(super) fn input_left(&self, key: &RoutingKey, event_id: &str) {
        if let Some(inbox) = &self.inbox {
            if let Err(error) = inbox.consumed(&key.agent_name, &key.instance_key, event_id) {
                // It stays pending: the next start redelivers it, and the
                // agent answers it from its conversation.
                tracing::warn!(key = %key, event_id, code = error.code(), "cannot mark an input consumed: {error}");
            }
        }
    }

    /// The stored input `event_id` was refused before it was queued (its
    /// queue was full): it leaves, and a retry of it is not a duplicate.
    pub(super) fn input_withdrawn(&self, key: &RoutingKey, event_id: &str) {
        if let Some(inbox) = &self.inbox {
            if let Err(error) = inbox.withdraw(&key.agent_name, &key.instance_key, event_id) {
                tracing::warn!(key = %key, event_id, code = error.code(), "cannot withdraw a refused input: {error}");
            }
        }
    }

    /// Queues again, in acceptance order and ahead of anything new, every
    /// input an earlier orchestrator accepted that no Turn consumed.
    pub(super) fn replay_inbox(&mut self) {
        let Some(inbox) = self.inbox.clone() else {
            return;
        };
        let instances = match inbox.instances() {
            Ok(instances) => instances,
            Err(error) => {
                tracing::error!(code = error.code(), "cannot list the inboxes: {error}");
                return;
            }
        };
        for (agent, instance_key) in instances {
            let key = RoutingKey::new(agent, instance_key);
            let pending = match inbox.pending(&key.agent_name, &key.instance_key) {
                Ok(pending) => pending,
                Err(error) => {
                    tracing::error!(key = %key, code = error.code(), "cannot read an inbox: {error}; its inputs wait for the next start");
                    continue;
                }
            };
            if pending.is_empty() {
                continue;
            }
            if !self.swarm.agents.contains(&key.agent_name) {
                tracing::warn!(key = %key, pending = pending.len(), "inputs wait for an agent the swarm no longer has; kept");
                continue;
            }
            tracing::info!(key = %key, pending = pending.len(), "inputs accepted before a restart queued again");
            for input in pending {
                let mut event = input.event;
                let event_id = event.id.clone();
                if let Some(remote) = self.served_elsewhere(&key) {
                    let message = protocol::event_message(&input.from, &key.to_string(), &event);
                    // It leaves this inbox only once the owner's stored it.
                    let owed = Owed::LeaveInbox {
                        key: key.clone(),
                        event_id,
                    };
                    self.forward(remote.as_ref(), message, owed);
                    continue;
                }
                event.redelivered = true;
                if let Err(error) = self.deliver(&key, Queued::turn(input.from, event)) {
                    tracing::warn!(key = %key, event_id, code = error.code(), "an input accepted before a restart waits for the next one: {error}");
                }
            }
        }
    }
}
