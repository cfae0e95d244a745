//! The instances this host does not serve: [`ClusterRemote`] tells the
//! orchestrator which those are and takes what it forwards to them,
//! [`publish_forwarded`] sends each to its instance's inbox, and
//! [`AnsweredRequests`] holds back the ack of a request from another host
//! until its answer has left.

use goondan_cluster::inbox::{self, Envelope};
use goondan_cluster::subject::InstanceAddress;
use goondan_cluster::Cluster;
use goondan_ipc::protocol;
use goondan_ipc::{Inbound, RoutingKey};
use goondan_orchestrator::RemoteInstances;
use goondan_types::IpcMessage;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// The instances of shards this host does not own, reached through their
/// inboxes.
pub(super) struct ClusterRemote {
    pub(super) workspace_id: String,
    pub(super) owned: watch::Receiver<BTreeSet<u16>>,
    pub(super) outbox: mpsc::UnboundedSender<IpcMessage>,
}

impl RemoteInstances for ClusterRemote {
    fn serves(&self, key: &RoutingKey) -> bool {
        let shard =
            InstanceAddress::new(&self.workspace_id, &key.agent_name, &key.instance_key).shard();
        self.owned.borrow().contains(&shard)
    }

    fn forward(&self, message: IpcMessage) {
        // The publisher lives as long as the host; after it, nothing runs.
        let _ = self.outbox.send(message);
    }
}

/// Publishes what the orchestrator forwards, in order, each to its
/// instance's inbox (the event id is the message id, so a retry is stored
/// once).
pub(super) async fn publish_forwarded(
    cluster: Cluster,
    workspace_id: String,
    mut forwarded: mpsc::UnboundedReceiver<IpcMessage>,
    answered: Arc<AnsweredRequests>,
) {
    while let Some(message) = forwarded.recv().await {
        let event = match protocol::decode(&message) {
            Ok(Inbound::Answer(_, event) | Inbound::Event(event)) => *event,
            _ => {
                tracing::warn!(to = %message.to, "only events cross hosts; a runtime message was dropped");
                continue;
            }
        };
        let Ok(key) = RoutingKey::parse(&message.to, "") else {
            tracing::warn!(to = %message.to, "no instance to forward to; dropped");
            continue;
        };
        // An answer's id is its request's, so the copy a next owner sends
        // again from the commit's outbox is stored once.
        let id = match protocol::in_reply_to(&event) {
            Some(correlation_id) => inbox::answer_message_id(correlation_id),
            None => event.id.clone(),
        };
        let envelope = Envelope {
            id,
            address: InstanceAddress::new(&workspace_id, &key.agent_name, &key.instance_key),
            event,
            reply_to: None,
        };
        match inbox::send(&cluster, &envelope).await {
            Ok(_) => {
                if let Some(correlation_id) = protocol::in_reply_to(&envelope.event) {
                    answered.answered(correlation_id);
                }
            }
            Err(error) => {
                tracing::error!(to = %key, code = error.code(), "forwarding event {} to its host: {error}", envelope.id);
            }
        }
    }
}

/// Requests from other hosts' instances that this host's instances are
/// answering, by correlation id: each delivery is acked once its answer
/// has left for the caller's inbox.
#[derive(Default)]
pub(super) struct AnsweredRequests {
    waiting: std::sync::Mutex<HashMap<String, tokio::sync::oneshot::Sender<()>>>,
}

impl AnsweredRequests {
    /// Resolves when the answer to `correlation_id` has been forwarded (or
    /// after a day, if it never is: a Turn cannot run that long).
    pub(super) fn expect(
        &self,
        correlation_id: &str,
    ) -> impl std::future::Future<Output = ()> + Send + use<> {
        let (answered, wait) = tokio::sync::oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(correlation_id.to_string(), answered);
        async move {
            let _ = tokio::time::timeout(Duration::from_secs(24 * 3600), wait).await;
        }
    }

    /// The answer to `correlation_id` left.
    pub(super) fn answered(&self, correlation_id: &str) {
        let waiting = self
            .waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(correlation_id);
        if let Some(answered) = waiting {
            let _ = answered.send(());
        }
    }
}
