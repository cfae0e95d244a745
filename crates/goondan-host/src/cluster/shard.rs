//! One shard's puller: takes each delivery of the shard's inbox to the
//! orchestrator as a request for the instance it names, keeps it alive
//! while the Turn runs, answers its sender and only then acks it; a
//! delivery the instance's last commit already consumed is answered from
//! that commit's outbox without waking the agent ([`super::outbox`]).

use super::outbox::{answer_from_outbox, Consumed};
use super::remote::AnsweredRequests;
use super::stop_requested;
use goondan_cluster::inbox::{Delivery, ShardInbox};
use goondan_cluster::membership::Membership;
use goondan_cluster::reply::{self, ClusterReply};
use goondan_cluster::{Cluster, ClusterError};
use goondan_ipc::protocol;
use goondan_ipc::{RoutingKey, ORCHESTRATOR};
use goondan_orchestrator::{OrchestratorError, OrchestratorHandle};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How often a running Turn's delivery is kept alive (its `ack_wait` is
/// 6 s: a lost progress message is not yet a redelivery).
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// How long a draining host lets running Turns finish.
const DRAIN_DEADLINE: Duration = Duration::from_secs(30);

pub(super) struct ShardPuller {
    pub(super) cluster: Cluster,
    pub(super) handle: OrchestratorHandle,
    pub(super) membership: Arc<Membership>,
    pub(super) workspace_id: String,
    pub(super) answered: Arc<AnsweredRequests>,
}

impl ShardPuller {
    /// Pulls one shard's inbox until told to stop, then waits for the
    /// Turns it started (bounded by [`DRAIN_DEADLINE`]).
    pub(super) async fn run(self, shard: u16, mut stop: watch::Receiver<bool>) {
        let mut inbox: Option<ShardInbox> = None;
        let mut turns = JoinSet::new();
        loop {
            let pulling = match &mut inbox {
                Some(inbox) => inbox,
                None => match ShardInbox::open(&self.cluster, shard).await {
                    Ok(opened) => inbox.insert(opened),
                    Err(error) => {
                        tracing::warn!(
                            shard,
                            code = error.code(),
                            "cannot open the shard's inbox: {error}; trying again"
                        );
                        if self.pause(&mut stop).await {
                            break;
                        }
                        continue;
                    }
                },
            };
            let next = tokio::select! {
                next = pulling.next() => next,
                _ = stop_requested(&mut stop) => break,
            };
            match next {
                Some(Ok(delivery)) => {
                    if !self.membership.is_fresh() {
                        // Our leases may have run out: another host may own
                        // this instance now, so start nothing.
                        delivery.nak().await.ok();
                        continue;
                    }
                    if let Some(turn) = self.start(delivery).await {
                        turns.spawn(turn);
                    }
                }
                // One unreadable message, already acked and logged.
                Some(Err(error @ ClusterError::Corrupt { .. })) => {
                    tracing::warn!(shard, code = error.code(), "inbox: {error}");
                }
                // A failed pull (the consumer was not ready, a leader
                // moved): pull anew at once rather than wait for the
                // client's own retry, which can take the pull's expiry.
                failed => {
                    if let Some(Err(error)) = &failed {
                        tracing::warn!(shard, code = error.code(), "inbox: {error}; pulling again");
                    }
                    if let Some(broken) = inbox.take() {
                        broken.close().await;
                    }
                    if self.pause(&mut stop).await {
                        break;
                    }
                }
            }
        }
        // Deliveries fetched but not started go back at once.
        if let Some(inbox) = inbox {
            inbox.close().await;
        }
        let drained = async { while turns.join_next().await.is_some() {} };
        if tokio::time::timeout(DRAIN_DEADLINE, drained).await.is_err() {
            tracing::warn!(
                shard,
                "Turns still running after the drain deadline; the next owner resumes them"
            );
        }
    }

    /// Waits a moment before a retry; true when told to stop meanwhile.
    async fn pause(&self, stop: &mut watch::Receiver<bool>) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(200)) => false,
            _ = stop_requested(stop) => true,
        }
    }

    /// Queues the delivery's event on its instance (in delivery order) and
    /// returns the wait for its answer.
    async fn start(&self, delivery: Delivery) -> Option<TurnWait> {
        let envelope = delivery.envelope.clone();
        let mut consumed = Consumed::No;
        if envelope.address.workspace_id == self.workspace_id {
            match answer_from_outbox(&self.cluster, &self.workspace_id, &delivery).await {
                Ok(Consumed::Answered) => {
                    delivery.ack().await.ok();
                    return None;
                }
                Ok(other) => consumed = other,
                // The answer did not leave: the delivery comes back, and
                // its answer is sent again then.
                Err(error) => {
                    tracing::warn!(
                        seq = delivery.seq,
                        code = error.code(),
                        "sending a committed answer again: {error}"
                    );
                    delivery.nak().await.ok();
                    return None;
                }
            }
        }
        if envelope.reply_to.is_none() && envelope.address.workspace_id == self.workspace_id {
            // From an instance on another host: a request, a send or an
            // answer, routed here as the orchestrator routes its own.
            let to = RoutingKey::new(
                envelope.address.agent_name.clone(),
                envelope.address.instance_key.clone(),
            );
            let mut event = envelope.event.clone();
            event.inbox_seq = Some(delivery.seq);
            event.redelivered |= consumed == Consumed::Earlier;
            let message = protocol::event_message(ORCHESTRATOR, &to.to_string(), &event);
            // A request stays unacked until its answer leaves (see
            // `AnsweredRequests`): if this host dies before, the next
            // owner gets it again, and its log tells how far it got.
            let answered = envelope
                .event
                .reply_to
                .as_ref()
                .filter(|_| protocol::in_reply_to(&envelope.event).is_none())
                .map(|reply_to| self.answered.expect(&reply_to.correlation_id));
            if self.handle.deliver_from_remote(to, message).await.is_err() {
                delivery.nak().await.ok();
                return None;
            }
            let Some(answered) = answered else {
                delivery.ack().await.ok();
                return None;
            };
            return Some(Box::pin(async move {
                keep_alive_until(&delivery, answered).await;
                delivery.ack().await.ok();
            }));
        }
        if envelope.address.workspace_id != self.workspace_id {
            let refused = ClusterReply::refused(
                "E_CLUSTER_WORKSPACE",
                format!(
                    "this cluster serves workspace {}, not {}",
                    self.workspace_id, envelope.address.workspace_id
                ),
                Some(
                    "run one swarm per cluster, and every host with the same bundle and swarm"
                        .into(),
                ),
            );
            reply::send(&self.cluster, &envelope, &refused).await;
            delivery.ack().await.ok();
            return None;
        }
        let mut event = envelope.event.clone();
        event.id = envelope.id.clone();
        event.instance_key = Some(envelope.address.instance_key.clone());
        // Its Turn's commit records it as the instance's inbox cursor.
        event.inbox_seq = Some(delivery.seq);
        // A Turn another host (or this one) may have run: the agent looks
        // the event up in the conversation before running it again.
        event.redelivered |= delivery.delivered > 1 || consumed == Consumed::Earlier;
        let agent = Some(envelope.address.agent_name.clone());
        let pending = match self.handle.enqueue_request(agent, event).await {
            Ok(pending) => pending,
            Err(OrchestratorError::Stopped) => {
                delivery.nak().await.ok();
                return None;
            }
            Err(error) => {
                reply::send(&self.cluster, &envelope, &refusal(&error)).await;
                delivery.ack().await.ok();
                return None;
            }
        };
        let cluster = self.cluster.clone();
        Some(Box::pin(async move {
            let answer = keep_alive_until(&delivery, pending.answer()).await;
            match answer {
                Ok(answer) => {
                    reply::send(&cluster, &envelope, &ClusterReply::answered(answer)).await;
                    delivery.ack().await.ok();
                }
                // This host stops: the next owner runs it (the log says
                // how far it got).
                Err(OrchestratorError::Stopped) => {
                    delivery.nak().await.ok();
                }
                Err(error) => {
                    reply::send(&cluster, &envelope, &refusal(&error)).await;
                    delivery.ack().await.ok();
                }
            }
        }))
    }
}

/// The wait for one Turn a shard puller started.
type TurnWait = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Awaits `until` while keeping `delivery` from being delivered again.
async fn keep_alive_until<T>(
    delivery: &Delivery,
    until: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(until);
    let mut progress = tokio::time::interval(PROGRESS_EVERY);
    progress.tick().await;
    loop {
        tokio::select! {
            done = &mut until => return done,
            _ = progress.tick() => { delivery.progress().await.ok(); }
        }
    }
}

/// The reply telling a caller why the orchestrator refused its input.
fn refusal(error: &OrchestratorError) -> ClusterReply {
    ClusterReply::refused(error.code(), error.to_string(), error.suggestion())
}

#[cfg(test)]
mod tests {
    //! One shard's puller against a real nats-server and an orchestrator
    //! whose agents echo: what a delivery becomes (a Turn, a reply sent
    //! again from the outbox, a refusal), what is answered, and when it is
    //! acked.

    use super::*;
    use crate::cluster::remote::{publish_forwarded, ClusterRemote};
    use crate::cluster::testing::{
        address, answer, answer_text, envelope, next_delivery, next_reply, request_from, send,
        EchoOrchestrator, TestCluster, WORKSPACE,
    };
    use goondan_cluster::inbox;
    use goondan_cluster::subject::InstanceAddress;
    use goondan_store::OutboxMessage;
    use std::collections::BTreeSet;
    use tokio::sync::mpsc;

    /// A puller of one shard, running until dropped.
    struct Pulling {
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Pulling {
        /// Starts pulling `shard` through `handle`, as a host owning it
        /// does (its membership joined: a puller starts no Turn for a host
        /// whose leases may have run out).
        async fn start(
            test: &TestCluster,
            handle: OrchestratorHandle,
            answered: Arc<AnsweredRequests>,
            shard: u16,
        ) -> Pulling {
            let membership = Membership::join(test.cluster.clone(), "host-a".to_string())
                .await
                .expect("joined");
            let puller = ShardPuller {
                cluster: test.cluster.clone(),
                handle,
                membership: Arc::new(membership),
                workspace_id: WORKSPACE.to_string(),
                answered,
            };
            let (stop, stopped) = watch::channel(false);
            let task = tokio::spawn(puller.run(shard, stopped));
            Pulling { stop, task }
        }

        /// Stops pulling and waits for the Turns it started.
        async fn stop(self) {
            let _ = self.stop.send(true);
            self.task.await.expect("the puller ends");
        }
    }

    /// Waits until the inbox holds `n` inputs (an acked one leaves), for
    /// at most 5 s.
    async fn wait_for_stored_inputs(test: &TestCluster, n: u64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let stored = test.n_stored_inputs().await;
            if stored == n {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the inbox holds {stored} inputs, not {n}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn a_request_with_a_reply_subject_runs_a_turn_is_answered_and_then_acked() {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        let orchestrator = EchoOrchestrator::start(None);
        let (reply_subject, mut replies) = test.reply_subject().await;
        let sent = envelope(&address("user-1"), "hi", Some(&reply_subject));
        let receipt = send(&test.cluster, &sent).await;
        let pulling = Pulling::start(
            &test,
            orchestrator.handle.clone(),
            Arc::default(),
            sent.address.shard(),
        )
        .await;

        let reply = next_reply(&mut replies).await;
        let answer = reply.answer.expect("an answer");
        assert_eq!(answer_text(&answer).as_deref(), Some("echo: hi"));
        wait_for_stored_inputs(&test, 0).await;
        // The agent got the input under the sender's id, for the instance
        // it names, with the sequence its commit records as the cursor.
        let events = orchestrator.events();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].id, sent.id);
        assert_eq!(events[0].instance_key.as_deref(), Some("user-1"));
        assert_eq!(events[0].inbox_seq, Some(receipt.seq));
        assert!(!events[0].redelivered);
        pulling.stop().await;
    }

    #[tokio::test]
    async fn a_delivery_the_last_commit_consumed_is_answered_from_its_outbox_without_waking_the_agent(
    ) {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        let orchestrator = EchoOrchestrator::start(None);
        let (reply_subject, mut replies) = test.reply_subject().await;
        let sent = envelope(&address("user-2"), "hi", Some(&reply_subject));
        let receipt = send(&test.cluster, &sent).await;
        // The host before this one committed the Turn and died before the
        // ack.
        let committed = OutboxMessage {
            to: goondan_ipc::ORCHESTRATOR.to_string(),
            event: answer(&protocol::correlation_id_for_id(&sent.id), "committed"),
        };
        test.commit(&sent.address, Some(receipt.seq), vec![committed])
            .await;
        let pulling = Pulling::start(
            &test,
            orchestrator.handle.clone(),
            Arc::default(),
            sent.address.shard(),
        )
        .await;

        let reply = next_reply(&mut replies).await;
        let answer = reply.answer.expect("an answer");
        assert_eq!(answer_text(&answer).as_deref(), Some("committed"));
        wait_for_stored_inputs(&test, 0).await;
        assert_eq!(orchestrator.n_spawned(), 0, "no agent was woken");
        pulling.stop().await;
    }

    #[tokio::test]
    async fn an_input_for_another_workspace_is_refused_and_acked() {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        let orchestrator = EchoOrchestrator::start(None);
        let (reply_subject, mut replies) = test.reply_subject().await;
        let stray = InstanceAddress::new("ws-other", "echo", "user-3");
        let sent = envelope(&stray, "hi", Some(&reply_subject));
        send(&test.cluster, &sent).await;
        let pulling = Pulling::start(
            &test,
            orchestrator.handle.clone(),
            Arc::default(),
            stray.shard(),
        )
        .await;

        let reply = next_reply(&mut replies).await;
        assert!(reply.answer.is_none());
        assert_eq!(reply.error.expect("a refusal").code, "E_CLUSTER_WORKSPACE");
        wait_for_stored_inputs(&test, 0).await;
        assert_eq!(orchestrator.n_spawned(), 0);
        pulling.stop().await;
    }

    #[tokio::test]
    async fn a_request_from_another_host_is_acked_only_once_its_answer_has_left_for_the_callers_inbox(
    ) {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        let target = address("user-4");
        let caller = (1..)
            .map(|n| InstanceAddress::new(WORKSPACE, "planner", &format!("main-{n}")))
            .find(|caller| caller.shard() != target.shard())
            .expect("a caller on another shard");
        // This host serves the target's shard only: the caller's answer
        // leaves through the cluster, once it is published.
        let (_owner, owned) = watch::channel(BTreeSet::from([target.shard()]));
        let (outbox, forwarded) = mpsc::unbounded_channel();
        let answered = Arc::new(AnsweredRequests::default());
        let remote = Arc::new(ClusterRemote {
            workspace_id: WORKSPACE.to_string(),
            owned,
            outbox,
        });
        let orchestrator = EchoOrchestrator::start(Some(remote));
        let sent = request_from(&target, "help", &caller.routing_key(), "corr-9");
        let receipt = send(&test.cluster, &sent).await;
        let pulling = Pulling::start(
            &test,
            orchestrator.handle.clone(),
            Arc::clone(&answered),
            target.shard(),
        )
        .await;

        // The agent answered, but the answer has not left: the request
        // stays in the inbox (a host dying now leaves it to the next).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while orchestrator.events().is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "no Turn started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            test.n_stored_inputs_for(&target).await,
            1,
            "acked too early"
        );

        tokio::spawn(publish_forwarded(
            test.cluster.clone(),
            WORKSPACE.to_string(),
            forwarded,
            answered,
        ));
        let mut callers_inbox = ShardInbox::open(&test.cluster, caller.shard())
            .await
            .unwrap();
        let answer = next_delivery(&mut callers_inbox).await;
        assert_eq!(answer.envelope.address, caller);
        assert_eq!(answer.envelope.id, inbox::answer_message_id("corr-9"));
        assert_eq!(
            answer_text(&answer.envelope.event).as_deref(),
            Some("echo: help")
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while test.n_stored_inputs_for(&target).await > 0 {
            assert!(tokio::time::Instant::now() < deadline, "never acked");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let events = orchestrator.events();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].inbox_seq, Some(receipt.seq));
        pulling.stop().await;
    }
}
