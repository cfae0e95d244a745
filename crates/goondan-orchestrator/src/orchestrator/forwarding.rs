//! Events for instances another host serves ([`crate::RemoteInstances`]):
//! what the loop owes an event's sender ([`Owed`]) waits beside the
//! forward's receipt and is settled when the receipt says whether the
//! owner's inbox stored the event. So nothing is acknowledged before it is
//! durable (SYSTEM.md §3), and the loop never waits on the network: the
//! receipts are polled among its other inputs ([`PendingForwards`]).
//!
//! An answer owes nobody an acknowledgement (its request's host acks the
//! request once the answer is stored); it is forwarded without a debt.

use super::Orchestrator;
use crate::error::failed;
use crate::remote::{ForwardOutcome, RemoteInstances};
use crate::OrchestratorError;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::FutureExt;
use goondan_ipc::protocol::QueryAnswer;
use goondan_ipc::RoutingKey;
use goondan_types::{AgentEvent, ErrorBody, IpcMessage};

/// The forwards whose receipts have not come yet, each with its debt.
pub(super) type PendingForwards = FuturesUnordered<BoxFuture<'static, (Owed, ForwardOutcome)>>;

/// What the loop owes once a forwarded event is stored, or is not.
pub(super) enum Owed {
    /// A connector's `Ingest` query: `Ingested` once stored, a coded
    /// failure (`E_FORWARD_FAILED`) if not, so the platform retries.
    IngestAnswer {
        /// The ConnectorProcess that asked.
        connector: RoutingKey,
        /// Its query's correlation id.
        correlation_id: String,
        /// The instance the event is for.
        target: RoutingKey,
        /// The event's id.
        event_id: String,
    },
    /// An agent's send or request: a send is `Accepted` once stored (a
    /// request waits for its answer); either fails back to its sender if
    /// not, instead of waiting for a timeout.
    Delivery {
        /// The sending instance.
        from: RoutingKey,
        /// The instance the event is for.
        target: RoutingKey,
        /// The event, to answer for it.
        event: Box<AgentEvent>,
    },
    /// An input an earlier orchestrator accepted here for an instance now
    /// served elsewhere: it leaves this host's inbox once stored there.
    LeaveInbox {
        /// The instance.
        key: RoutingKey,
        /// The input's id.
        event_id: String,
    },
}

impl Orchestrator {
    /// Forwards `message` through `remote` and settles `owed` once its
    /// receipt comes.
    pub(super) fn forward(
        &mut self,
        remote: &dyn RemoteInstances,
        message: IpcMessage,
        owed: Owed,
    ) {
        let receipt = remote.forward(message);
        self.forwards.push(
            async move {
                // The door dropped its half unanswered (its publisher
                // ended with the host): nothing says the event is stored.
                let outcome = receipt.await.unwrap_or_else(|_| {
                    Err(ErrorBody::new(
                        "E_FORWARD_DROPPED",
                        "the door to other hosts closed before the event was stored",
                    ))
                });
                (owed, outcome)
            }
            .boxed(),
        );
    }

    /// Settles what was owed for a forwarded event, now that its receipt
    /// came.
    pub(super) fn on_forwarded(&mut self, owed: Owed, outcome: ForwardOutcome) {
        match owed {
            Owed::IngestAnswer {
                connector,
                correlation_id,
                target,
                event_id,
            } => {
                let answer = match outcome {
                    Ok(()) => QueryAnswer::Ingested {
                        event_id: Some(event_id),
                        target: Some(target.to_string()),
                    },
                    Err(cause) => failed(not_stored(&target, &event_id, cause)),
                };
                self.answer_query(&connector, correlation_id, answer);
            }
            Owed::Delivery {
                from,
                target,
                event,
            } => match outcome {
                Ok(()) if event.reply_to.is_none() => self.acknowledge(&from, event.id),
                // A request's sender waits for its answer instead.
                Ok(()) => {}
                Err(cause) => {
                    let error = not_stored(&target, &event.id, cause);
                    self.fail_event(&from, &event, error.code(), &error.to_string());
                }
            },
            Owed::LeaveInbox { key, event_id } => match outcome {
                Ok(()) => self.input_left(&key, &event_id),
                Err(cause) => {
                    tracing::warn!(key = %key, event_id, code = %cause.code, "an input accepted before a restart stays in this host's inbox, to be forwarded again at the next start: {}", cause.message);
                }
            },
        }
    }
}

/// The error a sender is told when its event was not stored for its
/// instance's host, logged with the event it names.
fn not_stored(target: &RoutingKey, event_id: &str, cause: ErrorBody) -> OrchestratorError {
    let error = OrchestratorError::Forward {
        key: target.to_string(),
        cause,
    };
    tracing::warn!(target = %target, event_id, code = error.code(), "{error}; not acknowledged");
    error
}
