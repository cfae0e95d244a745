//! A host's life in the cluster: [`join`] (heartbeat, shard leases),
//! then [`JoinedHost::serve`], whose loop pulls the inbox of every shard
//! it owns and does not have to hand over, runs the singleton Connections
//! while it owns their shard, follows rollouts, serves a person's
//! requests for the instances it owns ([`super::operator`]), and on
//! [`HostTask::drain`] stops pulling, lets running Turns answer and
//! releases its leases.

use super::remote::{publish_forwarded, AnsweredRequests, ClusterRemote};
use super::rollout::BundleFollower;
use super::shard::ShardPuller;
use super::singletons::{SingletonConnections, SINGLETON_SHARD};
use super::stop_requested;
use super::{while_starting, ClusterMode};
use goondan_cluster::membership::Membership;
use goondan_cluster::{Cluster, ClusterError};
use goondan_orchestrator::{OrchestratorHandle, RemoteInstances};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// A running host: stop it with [`HostTask::drain`].
pub(crate) struct HostTask {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl HostTask {
    /// Stops pulling, lets the Turns this host runs finish (at most
    /// the shard pullers' drain deadline), acks them, and releases every lease so other
    /// hosts take the shards at once.
    pub(crate) async fn drain(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// A host that has joined the cluster (heartbeat, leases) and serves
/// nothing yet: its orchestrator starts with [`JoinedHost::remote`], then
/// [`JoinedHost::serve`] pulls the inboxes.
pub(crate) struct JoinedHost {
    cluster: Cluster,
    membership: Membership,
    workspace_id: String,
    remote: Arc<ClusterRemote>,
    answered: Arc<AnsweredRequests>,
}

/// Joins the cluster `cluster` (its layout made: [`super::ensure_layout`]) as a host
/// running the bundle `digest`: heartbeat, then the shards this host wins.
pub(crate) async fn join(
    mode: &ClusterMode,
    cluster: Cluster,
    digest: &str,
) -> Result<JoinedHost, ClusterError> {
    let membership =
        while_starting(|| Membership::join(cluster.clone(), mode.host_id.clone())).await?;
    membership.set_bundle(digest, None).await?;
    let (outbox, forwarded) = mpsc::unbounded_channel();
    let answered = Arc::new(AnsweredRequests::default());
    tokio::spawn(publish_forwarded(
        cluster.clone(),
        mode.workspace_id.clone(),
        forwarded,
        Arc::clone(&answered),
    ));
    let remote = Arc::new(ClusterRemote {
        workspace_id: mode.workspace_id.clone(),
        owned: membership.owned(),
        outbox,
    });
    Ok(JoinedHost {
        cluster,
        membership,
        workspace_id: mode.workspace_id.clone(),
        remote,
        answered,
    })
}

impl JoinedHost {
    /// What the orchestrator forwards events for other hosts' instances
    /// through.
    pub(crate) fn remote(&self) -> Arc<dyn RemoteInstances> {
        self.remote.clone()
    }

    /// Serves this host's shards through `handle` until
    /// [`HostTask::drain`]; runs the singleton Connections of
    /// `connections` while it owns shard 0, and applies every rollout
    /// `follower` sees.
    pub(crate) fn serve(
        self,
        handle: OrchestratorHandle,
        connections: Arc<SingletonConnections>,
        follower: BundleFollower,
    ) -> HostTask {
        let (stop, stopped) = watch::channel(false);
        let host = Host {
            cluster: self.cluster,
            handle,
            membership: Arc::new(self.membership),
            workspace_id: self.workspace_id,
            connections,
            follower: Some(follower),
            answered: self.answered,
        };
        let task = tokio::spawn(host.run(stopped));
        HostTask { stop, task }
    }
}

struct Host {
    cluster: Cluster,
    handle: OrchestratorHandle,
    membership: Arc<Membership>,
    workspace_id: String,
    connections: Arc<SingletonConnections>,
    /// Taken when the host starts serving.
    follower: Option<BundleFollower>,
    answered: Arc<AnsweredRequests>,
}

impl Host {
    /// Pulls the inbox of every shard this host owns and does not have to
    /// hand over; a shard to hand over is drained (its puller stopped and
    /// its Turns answered), then released.
    async fn run(mut self, mut stopped: watch::Receiver<bool>) {
        // Ends with the host, before it leaves (it holds the membership).
        let follower = self
            .follower
            .take()
            .map(|follower| tokio::spawn(follower.run(Arc::clone(&self.membership))));
        // A person's requests for the instances this host owns are served
        // until its Turns are drained: a cancel or a decision may be what
        // lets one of them finish.
        let (stop_operator, operator_stopped) = watch::channel(false);
        let operator = tokio::spawn(super::operator::serve(
            self.cluster.clone(),
            self.workspace_id.clone(),
            self.handle.clone(),
            Arc::clone(&self.membership),
            operator_stopped,
        ));
        let mut owned = self.membership.owned();
        let mut to_drain = self.membership.to_drain();
        let mut pulling: HashMap<u16, watch::Sender<bool>> = HashMap::new();
        let mut pullers = JoinSet::new();
        let mut runs_singletons = false;
        loop {
            let draining: BTreeSet<u16> = to_drain.borrow_and_update().clone();
            let serving: BTreeSet<u16> = owned
                .borrow_and_update()
                .difference(&draining)
                .copied()
                .collect();
            if serving.contains(&SINGLETON_SHARD) != runs_singletons {
                runs_singletons = !runs_singletons;
                self.run_singletons(runs_singletons).await;
            }
            for (shard, stop) in &pulling {
                if !serving.contains(shard) {
                    let _ = stop.send(true);
                }
            }
            for shard in serving {
                if pulling.contains_key(&shard) {
                    continue;
                }
                let (stop, stop_rx) = watch::channel(false);
                pulling.insert(shard, stop);
                let puller = ShardPuller {
                    cluster: self.cluster.clone(),
                    handle: self.handle.clone(),
                    membership: Arc::clone(&self.membership),
                    workspace_id: self.workspace_id.clone(),
                    answered: Arc::clone(&self.answered),
                };
                pullers.spawn(async move {
                    puller.run(shard, stop_rx).await;
                    shard
                });
            }
            tokio::select! {
                changed = owned.changed() => if changed.is_err() { break },
                changed = to_drain.changed() => if changed.is_err() { break },
                _ = stop_requested(&mut stopped) => break,
                Some(ended) = pullers.join_next(), if !pullers.is_empty() => {
                    let Ok(shard) = ended else { continue };
                    pulling.remove(&shard);
                    if to_drain.borrow().contains(&shard) {
                        if let Err(error) = self.membership.release(shard).await {
                            tracing::warn!(shard, code = error.code(), "releasing a drained shard: {error}");
                        }
                    }
                }
            }
        }
        for stop in pulling.values() {
            let _ = stop.send(true);
        }
        while pullers.join_next().await.is_some() {}
        let _ = stop_operator.send(true);
        let _ = operator.await;
        if runs_singletons {
            self.run_singletons(false).await;
        }
        if let Some(follower) = follower {
            follower.abort();
            let _ = follower.await;
        }
        if let Ok(membership) = Arc::try_unwrap(self.membership) {
            if let Err(error) = membership.leave().await {
                tracing::warn!(code = error.code(), "leaving the cluster: {error}");
            }
        }
    }
}

impl Host {
    /// Starts (or stops) the singleton Connections with this host's
    /// ownership of [`SINGLETON_SHARD`].
    async fn run_singletons(&self, run: bool) {
        self.connections
            .running
            .store(run, std::sync::atomic::Ordering::SeqCst);
        let singletons = self.connections.names();
        if singletons.is_empty() {
            return;
        }
        let mut swarm = (*self.handle.swarm()).clone();
        swarm.connections.retain(|name| !singletons.contains(name));
        if run {
            swarm.connections.extend(singletons.iter().cloned());
        }
        tracing::info!(run, connections = ?singletons, "singleton Connections follow shard {SINGLETON_SHARD}");
        if let Err(error) = self.handle.reconfigure(swarm).await {
            tracing::warn!(
                code = error.code(),
                "starting or stopping the singleton Connections: {error}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    //! The host loop against a real nats-server: it pulls the shards its
    //! membership owns, hands over the ones a joining host wins (stops
    //! pulling, then releases), and takes them back when that host
    //! leaves. Its agents are echoes (see [`crate::cluster::testing`]).

    use super::*;
    use crate::cluster::testing::{
        address, answer_text, envelope, next_reply, no_reply_within, send, EchoOrchestrator,
        TestCluster, WORKSPACE,
    };
    use goondan_cluster::subject::InstanceAddress;
    use goondan_types::placement::{rendezvous_owner, SHARD_COUNT};
    use std::time::Duration;

    /// The shards `host` wins by rendezvous among `hosts`.
    fn share(host: &str, hosts: &[&str]) -> BTreeSet<u16> {
        (0..SHARD_COUNT)
            .filter(|shard| rendezvous_owner(*shard, hosts.iter().copied()) == Some(host))
            .collect()
    }

    /// Waits until `owned` is `expected`, for at most 20 s (a handover
    /// takes a renewal or two of one second).
    async fn wait_to_own(
        owned: &mut watch::Receiver<BTreeSet<u16>>,
        expected: &BTreeSet<u16>,
        who: &str,
    ) {
        let waited = tokio::time::timeout(
            Duration::from_secs(20),
            owned.wait_for(|owned| owned == expected),
        )
        .await
        .is_ok();
        assert!(
            waited,
            "{who} owns {} shards, not the {} expected",
            owned.borrow().len(),
            expected.len()
        );
    }

    /// An instance whose shard is in `shards`.
    fn instance_in(shards: &BTreeSet<u16>) -> InstanceAddress {
        (0..)
            .map(|n| address(&format!("user-{n}")))
            .find(|address| shards.contains(&address.shard()))
            .expect("an instance of one of the shards")
    }

    #[tokio::test]
    async fn the_host_serves_what_it_owns_hands_over_what_a_joining_host_wins_and_takes_it_back() {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        let membership = Membership::join(test.cluster.clone(), "host-a".to_string())
            .await
            .expect("host-a joined");
        let mut owned_by_a = membership.owned();
        let all: BTreeSet<u16> = (0..SHARD_COUNT).collect();
        wait_to_own(&mut owned_by_a, &all, "host-a alone").await;
        let orchestrator = EchoOrchestrator::start(None);
        let host = Host {
            cluster: test.cluster.clone(),
            handle: orchestrator.handle.clone(),
            membership: Arc::new(membership),
            workspace_id: WORKSPACE.to_string(),
            connections: Arc::new(SingletonConnections::default()),
            follower: None,
            answered: Arc::default(),
        };
        let (stop, stopped) = watch::channel(false);
        let serving = tokio::spawn(host.run(stopped));

        // Alone, it answers an instance of any shard.
        let (reply_subject, mut replies) = test.reply_subject().await;
        let share_of_b = share("host-b", &["host-a", "host-b"]);
        let moving = instance_in(&share_of_b);
        send(
            &test.cluster,
            &envelope(&moving, "one", Some(&reply_subject)),
        )
        .await;
        let reply = next_reply(&mut replies).await;
        assert_eq!(
            answer_text(&reply.answer.expect("an answer")).as_deref(),
            Some("echo: one")
        );

        // host-b joins: host-a stops pulling what host-b wins and releases
        // it (host-b never takes a lease another host holds), and keeps
        // the rest.
        let joined = Membership::join(test.cluster.clone(), "host-b".to_string())
            .await
            .expect("host-b joined");
        let mut owned_by_b = joined.owned();
        wait_to_own(&mut owned_by_b, &share_of_b, "host-b").await;
        let share_of_a = share("host-a", &["host-a", "host-b"]);
        wait_to_own(&mut owned_by_a, &share_of_a, "host-a").await;
        // host-b serves nothing here: an input for its shard waits.
        send(
            &test.cluster,
            &envelope(&moving, "two", Some(&reply_subject)),
        )
        .await;
        no_reply_within(&mut replies, Duration::from_secs(1)).await;
        let staying = instance_in(&share_of_a);
        send(
            &test.cluster,
            &envelope(&staying, "three", Some(&reply_subject)),
        )
        .await;
        let reply = next_reply(&mut replies).await;
        assert_eq!(
            answer_text(&reply.answer.expect("an answer")).as_deref(),
            Some("echo: three")
        );

        // host-b leaves: host-a takes every shard back and answers what
        // waited.
        joined.leave().await.expect("host-b left");
        wait_to_own(&mut owned_by_a, &all, "host-a after host-b left").await;
        let reply = next_reply(&mut replies).await;
        assert_eq!(
            answer_text(&reply.answer.expect("an answer")).as_deref(),
            Some("echo: two")
        );

        // Stopping the host leaves the cluster: it holds no lease.
        let _ = stop.send(true);
        serving.await.expect("the host stops");
        assert!(owned_by_a.borrow().is_empty());
    }
}
