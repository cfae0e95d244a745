//! ConnectorProcesses: one per Connection of the swarm (except the `cli`
//! one, whose input is `gdn run`'s own), supervised like agents and
//! speaking to the orchestrator only by [`Query::Ingest`].
//!
//! A connector is an [`Instance`](super::instance::Instance) under its
//! Connection's routing key ([`RoutingKey::connection`]) marked
//! *resident*: it is started with the orchestrator and kept running by
//! reconciliation, with the agents' crash backoff, whether or not anything
//! waits for it. Its crash counter starts over once it has stayed up for
//! [`STABLE_AFTER`], since no Turn ever reports it healthy. Its events are
//! routed by [`ingress::route`] and queued for their agent like any
//! other input; each becomes its own Turn with its own trace.

use super::forwarding::Owed;
use super::instance::Queued;
use super::Orchestrator;
use crate::error::failed;
use crate::ingress::{self, Ingress};
use crate::spawner::SpawnRequest;
use crate::OrchestratorError;
use goondan_ipc::protocol::{self, Failure, QueryAnswer};
use goondan_ipc::{RoutingKey, ORCHESTRATOR};
use goondan_types::ConnectorEvent;
use std::sync::Arc;
use std::time::Duration;

/// How long a ConnectorProcess must stay up before its crashes are
/// forgiven.
pub(super) const STABLE_AFTER: Duration = Duration::from_secs(30);

/// What starts the process serving `key`, working in `workdir` (an
/// agent instance's `cwd`).
pub(super) fn spawn_request(key: &RoutingKey, workdir: Option<String>) -> SpawnRequest {
    match key.connection_name() {
        Some(connection) => SpawnRequest::Connector {
            connection: connection.to_string(),
        },
        None => SpawnRequest::Agent {
            key: key.clone(),
            workdir,
        },
    }
}

impl Orchestrator {
    /// Starts the ConnectorProcess of every Connection of the swarm.
    pub(super) fn start_connections(&mut self) {
        for connection in self.swarm.connections.clone() {
            let key = RoutingKey::connection(connection);
            self.instance_for(&key).resident = true;
            self.ensure_spawned(&key);
        }
    }

    /// Routes a connector's event by its Connection's rules and queues it
    /// for the agent they pick: the answer to the connector's query
    /// `correlation_id`, or `None` when the event went to its instance's
    /// host and the answer follows once that host's inbox stored it.
    pub(super) fn ingest(
        &mut self,
        from: &RoutingKey,
        correlation_id: &str,
        event: ConnectorEvent,
    ) -> Option<QueryAnswer> {
        let Some(connection) = from.connection_name() else {
            return Some(QueryAnswer::Failed(Failure {
                code: "E_IPC_NOT_A_CONNECTOR".into(),
                message: format!("{from} is an agent; only a ConnectorProcess may ingest events"),
                suggestion: None,
            }));
        };
        if self.stopping.is_some() {
            return Some(failed(OrchestratorError::Stopped));
        }
        let ingress = Ingress {
            connection: connection.to_string(),
            event,
            agent: None,
        };
        let (key, event) = match ingress::route(&self.swarm, &ingress) {
            Ok(routed) => routed,
            Err(error @ OrchestratorError::NoIngressRoute { .. }) => {
                self.unrouted_events += 1;
                // Logged at the 1st, 2nd, 4th, 8th... and every 1,000th, so
                // a sender flooding events no rule wants cannot fill the
                // disk with log lines; the count says how many there were.
                let count = self.unrouted_events;
                if count.is_power_of_two() || count.is_multiple_of(1_000) {
                    tracing::warn!(
                        connection,
                        code = error.code(),
                        unrouted_events = count,
                        "{error}; event dropped"
                    );
                }
                return Some(QueryAnswer::Ingested {
                    event_id: None,
                    target: None,
                });
            }
            Err(error) => return Some(failed(error)),
        };
        // A platform's delivery goes through the instance's inbox even when
        // this host serves it: a retry the platform sends to another host
        // carries the same event id and is dropped there as a duplicate.
        let through_inbox = match &self.remote {
            Some(remote) if ingress.event.delivery_id.is_some() => Some(Arc::clone(remote)),
            _ => self.served_elsewhere(&key),
        };
        if let Some(remote) = through_inbox {
            tracing::info!(connection, target = %key, event_id = %event.id, "connector event forwarded to the instance's host");
            let message = protocol::event_message(ORCHESTRATOR, &key.to_string(), &event);
            // The connector answers its platform once it hears back, so
            // nothing is acknowledged before the inbox stored it.
            let owed = Owed::IngestAnswer {
                connector: from.clone(),
                correlation_id: correlation_id.to_string(),
                target: key,
                event_id: event.id,
            };
            self.forward(remote.as_ref(), message, owed);
            return None;
        }
        let event_id = event.id.clone();
        let trace_id = event.trace_id.clone();
        match self.store_input(&key, ORCHESTRATOR, &event) {
            Ok(()) => {}
            // A platform's retry of a delivery the instance holds: it was
            // accepted once, and is answered as accepted without a second
            // Turn.
            Err(OrchestratorError::Duplicate { .. }) => {
                return Some(QueryAnswer::Ingested {
                    event_id: Some(event_id),
                    target: Some(key.to_string()),
                })
            }
            Err(error) => return Some(failed(error)),
        }
        match self.deliver(&key, Queued::turn(ORCHESTRATOR, event)) {
            Ok(()) => {
                tracing::info!(connection, target = %key, event_id = %event_id, trace_id = ?trace_id, "connector event queued");
                Some(QueryAnswer::Ingested {
                    event_id: Some(event_id),
                    target: Some(key.to_string()),
                })
            }
            Err(error) => {
                self.input_withdrawn(&key, &event_id);
                Some(failed(error))
            }
        }
    }
}
