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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::testing::{address, answer, next_delivery, TestCluster, WORKSPACE};
    use goondan_cluster::inbox::ShardInbox;
    use goondan_types::{AgentEvent, EventSource, EventSourceKind};

    /// Whether `wait` is still waiting after a moment.
    async fn still_waiting(wait: &mut (impl std::future::Future<Output = ()> + Unpin)) -> bool {
        tokio::time::timeout(Duration::from_millis(50), wait)
            .await
            .is_err()
    }

    #[tokio::test]
    async fn a_request_is_released_when_its_own_answer_has_left_and_not_for_another() {
        let answered = AnsweredRequests::default();
        let mut first = Box::pin(answered.expect("corr-1"));
        let mut second = Box::pin(answered.expect("corr-2"));
        answered.answered("corr-3");
        assert!(still_waiting(&mut first).await);
        assert!(still_waiting(&mut second).await);
        answered.answered("corr-2");
        assert!(still_waiting(&mut first).await, "another id's answer");
        tokio::time::timeout(Duration::from_secs(1), second)
            .await
            .expect("its answer left");
        answered.answered("corr-1");
        tokio::time::timeout(Duration::from_secs(1), first)
            .await
            .expect("its answer left");
    }

    #[test]
    fn the_orchestrator_is_told_it_serves_the_instances_of_the_shards_this_host_owns() {
        let here = address("user-1");
        let elsewhere = (2..)
            .map(|n| address(&format!("user-{n}")))
            .find(|other| other.shard() != here.shard())
            .expect("an instance of another shard");
        let (_owner, owned) = watch::channel(BTreeSet::from([here.shard()]));
        let (outbox, mut forwarded) = mpsc::unbounded_channel();
        let remote = ClusterRemote {
            workspace_id: WORKSPACE.to_string(),
            owned,
            outbox,
        };
        let key = |address: &InstanceAddress| {
            RoutingKey::new(address.agent_name.clone(), address.instance_key.clone())
        };
        assert!(remote.serves(&key(&here)));
        assert!(!remote.serves(&key(&elsewhere)));
        let note = AgentEvent::new("note", EventSource::new(EventSourceKind::Agent, "echo"));
        let message = protocol::event_message("echo:user-1", &key(&elsewhere).to_string(), &note);
        remote.forward(message.clone());
        assert_eq!(forwarded.try_recv().ok(), Some(message));
    }

    #[tokio::test]
    async fn a_forwarded_answer_reaches_the_callers_inbox_under_its_answer_id_and_releases_its_request(
    ) {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        let caller = InstanceAddress::new(WORKSPACE, "planner", "main");
        let (outbox, forwarded) = mpsc::unbounded_channel();
        let answered = Arc::new(AnsweredRequests::default());
        tokio::spawn(publish_forwarded(
            test.cluster.clone(),
            WORKSPACE.to_string(),
            forwarded,
            Arc::clone(&answered),
        ));
        let released = answered.expect("corr-7");
        let reply = answer("corr-7", "done");
        outbox
            .send(protocol::event_message(
                "echo:user-1",
                "planner:main",
                &reply,
            ))
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), released)
            .await
            .expect("the request is released once its answer is stored");
        let mut shard_inbox = ShardInbox::open(&test.cluster, caller.shard())
            .await
            .unwrap();
        let delivery = next_delivery(&mut shard_inbox).await;
        assert_eq!(delivery.envelope.address, caller);
        assert_eq!(delivery.envelope.id, inbox::answer_message_id("corr-7"));
        assert_eq!(delivery.envelope.event, reply);

        // A plain event keeps its own id, and releases nothing.
        let note = AgentEvent::new("note", EventSource::new(EventSourceKind::Agent, "echo"));
        outbox
            .send(protocol::event_message(
                "echo:user-1",
                "planner:main",
                &note,
            ))
            .unwrap();
        let delivery = next_delivery(&mut shard_inbox).await;
        assert_eq!(delivery.envelope.id, note.id);
    }
}
