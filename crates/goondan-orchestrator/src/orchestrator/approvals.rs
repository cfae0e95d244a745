//! Approvals and the chat connectors that show them to people.
//!
//! An approval is the state of the instance that asked it
//! (`approvals.jsonl`); this module only carries word of it. An agent
//! tells of each request it records and of each decision
//! ([`RuntimeMessage::ApprovalAsked`], [`RuntimeMessage::ApprovalDecided`]),
//! and every ConnectorProcess whose Connection has `spec.approvals`
//! ([`SwarmInfo::delivers_approvals`](crate::SwarmInfo)) gets the same
//! message, queued like any message for it (so one that is restarting gets
//! it once it is ready). A connector that becomes ready is also given
//! every request still undecided ([`PendingApprovals`](super::PendingApprovals)),
//! which covers requests asked while it did not run; it posts each request
//! once, whatever it is told twice.
//!
//! The other way, a person's press in a chat comes as a
//! [`Query::Decide`](goondan_ipc::protocol::Query::Decide) and takes the
//! same path as the control socket's decide (`routing.rs`), answered once
//! the instance recorded it. Only a chat connector may ask: an agent must
//! never decide its own approvals.

use super::instance::Queued;
use super::{Input, Orchestrator};
use crate::error::failed;
use goondan_ipc::protocol::{ApprovalAsked, Failure, QueryAnswer};
use goondan_ipc::{ProtocolError, RoutingKey, RuntimeMessage};
use goondan_types::ApprovalDecision;
use tokio::sync::oneshot;

impl Orchestrator {
    /// An agent's word of an approval it asked or decided, passed to
    /// every chat connector; refused when it comes from a connector or
    /// speaks for another instance.
    pub(super) fn on_approval_notice(&mut self, from: &RoutingKey, notice: RuntimeMessage) {
        let speaks_for_itself = match (&notice, from.connection_name()) {
            (_, Some(_)) => false,
            (RuntimeMessage::ApprovalAsked(asked), None) => {
                asked.request.agent == from.agent_name
                    && asked.request.instance_key == from.instance_key
            }
            (_, None) => true,
        };
        if !speaks_for_itself {
            self.refuse(
                from,
                ProtocolError::Malformed {
                    what: "approval notice".into(),
                    reason: "only an agent tells of its own approvals".into(),
                    event_id: None,
                },
            );
            return;
        }
        for connection in self.chat_connections() {
            let _ = self.deliver(&connection, Queued::runtime(notice.clone()));
        }
    }

    /// A chat connector became ready: it is given every request still
    /// waiting for a decision.
    pub(super) fn on_chat_connector_ready(&mut self, key: &RoutingKey) {
        let Some(connection) = key.connection_name() else {
            return;
        };
        if !self.swarm.delivers_approvals(connection) {
            return;
        }
        let Some(pending) = self.pending_approvals.clone() else {
            return;
        };
        // A read of the instances' approval files, once per connector
        // start: rare enough to do here, where the queue it fills lives.
        let requests = pending();
        tracing::info!(key = %key, waiting = requests.len(), "approvals waiting handed to the chat connector");
        for request in requests {
            let asked = RuntimeMessage::ApprovalAsked(ApprovalAsked {
                request: Box::new(request),
            });
            let _ = self.deliver(key, Queued::runtime(asked));
        }
    }

    /// A chat connector's [`Query::Decide`](goondan_ipc::protocol::Query::Decide):
    /// `None` when the decision went to its instance, whose answer reaches
    /// the connector through [`Input::AnswerQuery`]; else the refusal.
    pub(super) fn decide_for_chat(
        &mut self,
        from: &RoutingKey,
        correlation_id: &str,
        target: &str,
        decision: ApprovalDecision,
    ) -> Option<QueryAnswer> {
        let allowed = from
            .connection_name()
            .is_some_and(|connection| self.swarm.delivers_approvals(connection));
        if !allowed {
            return Some(QueryAnswer::Failed(Failure {
                code: "E_APPROVAL_NOT_ALLOWED".into(),
                message: format!(
                    "{from} may not decide approvals: only the connector of a Connection with `approvals` may"
                ),
                suggestion: None,
            }));
        }
        let key = match RoutingKey::parse(target, &self.swarm.instance_key) {
            Ok(key) => key,
            Err(_) => {
                return Some(QueryAnswer::Failed(Failure {
                    code: "E_APPROVAL_NOT_FOUND".into(),
                    message: format!("`{target}` is not an agent instance"),
                    suggestion: None,
                }))
            }
        };
        tracing::info!(connection = %from, target = %key, approval = %decision.id, verdict = decision.verdict.as_str(), by = %decision.by, "decision pressed in a chat");
        let (reply, decided) = oneshot::channel();
        self.decide(key.clone(), decision, reply);
        let inputs = self.inputs_tx.clone();
        let to = from.clone();
        let correlation_id = correlation_id.to_string();
        tokio::spawn(async move {
            let answer = match super::client::recorded(key.to_string(), decided).await {
                Ok(()) => QueryAnswer::Decided,
                Err(error) => failed(error),
            };
            let _ = inputs
                .send(Input::AnswerQuery {
                    to,
                    correlation_id,
                    answer,
                })
                .await;
        });
        None
    }

    /// The routing keys of the chat connectors of the swarm that run here.
    fn chat_connections(&self) -> Vec<RoutingKey> {
        self.swarm
            .approval_connections
            .iter()
            .filter(|connection| self.swarm.delivers_approvals(connection))
            .map(|connection| RoutingKey::connection(connection.clone()))
            .collect()
    }
}
