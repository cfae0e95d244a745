//! The instances this host does not serve: [`ClusterRemote`] tells the
//! orchestrator which those are and takes what it forwards to them,
//! [`publish_forwarded`] sends each to its instance's inbox and reports
//! on its receipt whether the inbox stored it (what the orchestrator
//! waits for before it acknowledges the event), and
//! [`AnsweredRequests`] holds back the ack of a request from another host
//! until its answer has left.

use goondan_cluster::inbox::{self, Envelope};
use goondan_cluster::subject::InstanceAddress;
use goondan_cluster::Cluster;
use goondan_ipc::protocol;
use goondan_ipc::{Inbound, RoutingKey, WireCode};
use goondan_orchestrator::{ForwardOutcome, ForwardReceipt, RemoteInstances};
use goondan_types::{ErrorBody, IpcMessage};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// The instances of shards this host does not own, reached through their
/// inboxes.
pub(super) struct ClusterRemote {
    pub(super) workspace_id: String,
    pub(super) owned: watch::Receiver<BTreeSet<u16>>,
    pub(super) outbox: mpsc::UnboundedSender<Forwarded>,
}

/// One event for another host's instance, with where its outcome goes.
pub(super) struct Forwarded {
    message: IpcMessage,
    stored: oneshot::Sender<ForwardOutcome>,
}

impl RemoteInstances for ClusterRemote {
    fn serves(&self, key: &RoutingKey) -> bool {
        let shard =
            InstanceAddress::new(&self.workspace_id, &key.agent_name, &key.instance_key).shard();
        self.owned.borrow().contains(&shard)
    }

    fn forward(&self, message: IpcMessage) -> ForwardReceipt {
        let (stored, receipt) = oneshot::channel();
        // The publisher lives as long as the host; after it, nothing runs,
        // and the dropped receipt reads as not stored.
        let _ = self.outbox.send(Forwarded { message, stored });
        receipt
    }
}

/// Publishes what the orchestrator forwards, in order, each to its
/// instance's inbox (the event id is the message id, so a retry is stored
/// once), and reports each outcome on its receipt once the publish is
/// confirmed or failed.
pub(super) async fn publish_forwarded(
    cluster: Cluster,
    workspace_id: String,
    mut forwarded: mpsc::UnboundedReceiver<Forwarded>,
    answered: Arc<AnsweredRequests>,
) {
    while let Some(Forwarded { message, stored }) = forwarded.recv().await {
        let event = match protocol::decode(&message) {
            Ok(Inbound::Answer(_, event) | Inbound::Event(event)) => *event,
            _ => {
                tracing::warn!(to = %message.to, "only events cross hosts; a runtime message was dropped");
                let _ = stored.send(Err(ErrorBody::new(
                    WireCode::UnknownMessage.as_str(),
                    "only events cross hosts",
                )));
                continue;
            }
        };
        let key = match RoutingKey::parse(&message.to, "") {
            Ok(key) => key,
            Err(error) => {
                tracing::warn!(to = %message.to, "no instance to forward to; dropped");
                let _ = stored.send(Err(ErrorBody::new(error.code(), error.to_string())));
                continue;
            }
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
                let _ = stored.send(Ok(()));
            }
            Err(error) => {
                tracing::error!(to = %key, code = error.code(), "forwarding event {} to its host: {error}", envelope.id);
                let _ = stored.send(Err(ErrorBody {
                    code: error.code().to_string(),
                    message: error.to_string(),
                    suggestion: error.suggestion(),
                }));
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
    use crate::cluster::testing::{
        address, answer, next_delivery, EchoOrchestrator, TestCluster, WORKSPACE,
    };
    use goondan_cluster::inbox::ShardInbox;
    use goondan_cluster::layout;
    use goondan_ipc::protocol::QueryAnswer;
    use goondan_types::{AgentEvent, ConnectorEvent, EventSource, EventSourceKind};

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
        let _receipt = remote.forward(message.clone());
        let taken = forwarded.try_recv().ok().map(|forwarded| forwarded.message);
        assert_eq!(taken, Some(message));
    }

    #[tokio::test]
    async fn a_forwarded_answer_reaches_the_callers_inbox_under_its_answer_id_and_releases_its_request(
    ) {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        let caller = InstanceAddress::new(WORKSPACE, "planner", "main");
        let (remote, forwarded) = remote_serving(BTreeSet::new());
        let answered = Arc::new(AnsweredRequests::default());
        tokio::spawn(publish_forwarded(
            test.cluster.clone(),
            WORKSPACE.to_string(),
            forwarded,
            Arc::clone(&answered),
        ));
        let released = answered.expect("corr-7");
        let reply = answer("corr-7", "done");
        let receipt = remote.forward(protocol::event_message(
            "echo:user-1",
            "planner:main",
            &reply,
        ));
        tokio::time::timeout(Duration::from_secs(5), released)
            .await
            .expect("the request is released once its answer is stored");
        assert_eq!(receipt.await.expect("an outcome"), Ok(()));
        let mut shard_inbox = ShardInbox::open(&test.cluster, caller.shard())
            .await
            .unwrap();
        let delivery = next_delivery(&mut shard_inbox).await;
        assert_eq!(delivery.envelope.address, caller);
        assert_eq!(delivery.envelope.id, inbox::answer_message_id("corr-7"));
        assert_eq!(delivery.envelope.event, reply);

        // A plain event keeps its own id, and releases nothing.
        let note = AgentEvent::new("note", EventSource::new(EventSourceKind::Agent, "echo"));
        let _receipt = remote.forward(protocol::event_message(
            "echo:user-1",
            "planner:main",
            &note,
        ));
        let delivery = next_delivery(&mut shard_inbox).await;
        assert_eq!(delivery.envelope.id, note.id);
    }

    /// A door to other hosts for a host owning `owned`, and what it is
    /// handed to publish.
    fn remote_serving(
        owned: BTreeSet<u16>,
    ) -> (Arc<ClusterRemote>, mpsc::UnboundedReceiver<Forwarded>) {
        let (outbox, forwarded) = mpsc::unbounded_channel();
        let remote = ClusterRemote {
            workspace_id: WORKSPACE.to_string(),
            // The sender is dropped: this host's shards never change.
            owned: watch::channel(owned).1,
            outbox,
        };
        (Arc::new(remote), forwarded)
    }

    /// A webhook delivery for instance `instance_key` of the entry agent,
    /// with the platform's delivery id `delivery_id`.
    fn webhook_delivery(instance_key: &str, delivery_id: &str) -> ConnectorEvent {
        let mut event = ConnectorEvent::text("push", "hi");
        event.instance_key = Some(instance_key.to_string());
        event.delivery_id = Some(delivery_id.to_string());
        event
    }

    /// Issue 35: a connector's event for an instance this host does not
    /// serve is acknowledged (`Ingested`, the platform's 200) only once
    /// the instance's inbox stored it.
    #[tokio::test]
    async fn issue_35_a_forwarded_ingest_is_answered_only_once_the_instances_inbox_stored_it() {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        let (remote, forwarded) = remote_serving(BTreeSet::new());
        let orchestrator =
            EchoOrchestrator::start_with_connections(Some(remote), vec!["hooks".into()]);
        let target = address("user-35");
        let asked = orchestrator
            .ingest("hooks", webhook_delivery("user-35", "delivery-1"))
            .await;

        // Nothing is published yet: nothing may be acknowledged either.
        let early = orchestrator
            .next_query_answer(Duration::from_millis(500))
            .await;
        assert_eq!(early, None, "acknowledged before the inbox stored it");
        assert_eq!(test.n_stored_inputs_for(&target).await, 0);

        tokio::spawn(publish_forwarded(
            test.cluster.clone(),
            WORKSPACE.to_string(),
            forwarded,
            Arc::default(),
        ));
        let answer = orchestrator
            .next_query_answer(Duration::from_secs(5))
            .await
            .expect("an answer once the inbox stored the event");
        // Read as soon as the answer came: the event is in the stream by
        // then, not on its way.
        assert_eq!(test.n_stored_inputs_for(&target).await, 1);
        assert_eq!(answer.in_reply_to, asked);
        let QueryAnswer::Ingested {
            event_id,
            target: routed,
        } = answer.answer
        else {
            panic!("not ingested: {:?}", answer.answer);
        };
        assert_eq!(routed.as_deref(), Some("echo:user-35"));
        let mut shard_inbox = ShardInbox::open(&test.cluster, target.shard())
            .await
            .unwrap();
        let delivery = next_delivery(&mut shard_inbox).await;
        assert_eq!(Some(delivery.envelope.id), event_id);
        assert_eq!(
            orchestrator.n_spawned(),
            1,
            "only the ConnectorProcess ran here"
        );
    }

    /// Issue 35: when the instance's inbox does not store the event, the
    /// connector is answered with a coded failure (the platform gets a
    /// non-2xx and sends it again), never `Ingested`.
    #[tokio::test]
    async fn issue_35_a_forwarded_ingest_the_inbox_did_not_store_is_answered_with_a_coded_failure()
    {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        // An inbox that stores nothing: no stream takes the publish.
        test.cluster
            .jetstream()
            .delete_stream(layout::INBOX_STREAM)
            .await
            .expect("the inbox stream deleted");
        let (remote, forwarded) = remote_serving(BTreeSet::new());
        tokio::spawn(publish_forwarded(
            test.cluster.clone(),
            WORKSPACE.to_string(),
            forwarded,
            Arc::default(),
        ));
        let orchestrator =
            EchoOrchestrator::start_with_connections(Some(remote), vec!["hooks".into()]);
        let asked = orchestrator
            .ingest("hooks", webhook_delivery("user-36", "delivery-2"))
            .await;

        let answer = orchestrator
            .next_query_answer(Duration::from_secs(10))
            .await
            .expect("an answer once the publish failed");
        assert_eq!(answer.in_reply_to, asked);
        let QueryAnswer::Failed(failure) = answer.answer else {
            panic!("acknowledged an event nothing stored: {:?}", answer.answer);
        };
        assert!(failure.is(WireCode::ForwardFailed), "{failure:?}");
        assert!(
            failure.message.contains("echo:user-36"),
            "{}",
            failure.message
        );
    }
}
