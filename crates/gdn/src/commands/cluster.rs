//! `gdn run --cluster`: this host's share of a swarm that runs on several
//! hosts over NATS JetStream (docs/cluster.md), and the commands that talk
//! to such a cluster from anywhere (`gdn run --cluster … --input`, `gdn
//! cluster status`, `gdn instance export --cluster`).
//!
//! A host is the single-host orchestrator plus this module: [`join`]
//! enters the cluster (heartbeat, shard leases by rendezvous hashing)
//! before the orchestrator starts, and [`JoinedHost::serve`] pulls the
//! inboxes of the shards it owns, hands each input to its orchestrator as
//! a request for the instance it names, keeps the delivery alive while the
//! Turn runs, publishes the answer to the sender's reply subject and only
//! then acks. A delivery the instance's last commit already consumed (its
//! host died between commit and ack) is not run again: the answer that
//! commit's outbox holds is sent again, and it is acked. Its agents keep
//! their conversations in the cluster's log
//! (`GOONDAN_CLUSTER` in their environment), so whichever host owns an
//! instance next reads what this one wrote, and a stale owner's writes are
//! refused by the log itself.

use super::rollout::BundleFollower;
use super::run::swarm_info;
use super::run::{report, Refused};
use crate::cli::{ClusterArgs, ClusterCommand, GlobalArgs};
use crate::exit::Outcome;
use crate::project::Project;
use anyhow::Context;
use goondan_cluster::cursor;
use goondan_cluster::inbox::{self, Delivery, Envelope, ShardInbox};
use goondan_cluster::membership::Membership;
use goondan_cluster::subject::InstanceAddress;
use goondan_cluster::{layout, Cluster, ClusterError, ClusterOptions, ClusterUrls};
use goondan_ipc::protocol;
use goondan_ipc::{Inbound, RoutingKey, ORCHESTRATOR};
use goondan_orchestrator::{
    Ingress, OrchestratorError, OrchestratorHandle, RemoteInstances, SwarmInfo,
};
use goondan_types::AgentEvent;
use goondan_types::IpcMessage;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// The variable that holds the server list (also what agents read).
pub(crate) const CLUSTER_ENV: &str = "GOONDAN_CLUSTER";
/// The owner name an agent writes into its log's claims.
pub(crate) const CLUSTER_HOST_ENV: &str = "GOONDAN_CLUSTER_HOST";
/// The workspace id every host of the swarm uses.
pub(crate) const CLUSTER_WORKSPACE_ENV: &str = "GOONDAN_CLUSTER_WORKSPACE";

/// How often a running Turn's delivery is kept alive (its `ack_wait` is
/// 6 s: a lost progress message is not yet a redelivery).
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// How long a draining host lets running Turns finish.
const DRAIN_DEADLINE: Duration = Duration::from_secs(30);
/// How long a starting host retries a join that failed on a transient
/// error.
pub(crate) const JOIN_DEADLINE: Duration = Duration::from_secs(30);
/// How long `gdn run --cluster … --input` waits for its answer.
const ANSWER_WAIT: Duration = Duration::from_secs(600);

/// Where this process meets the cluster.
#[derive(Debug, Clone)]
pub(crate) struct ClusterMode {
    /// The servers.
    pub(crate) urls: ClusterUrls,
    /// This host's name in heartbeats, leases and log claims.
    pub(crate) host_id: String,
    /// The workspace every host of this swarm uses. Unlike a single host's,
    /// it does not hash the bundle's folder: hosts keep the bundle in
    /// different places.
    pub(crate) workspace_id: String,
}

impl ClusterMode {
    /// The mode of `--cluster URLS` for `project`, with `host_id` or one
    /// made from the host name and this state root.
    pub(crate) fn new(
        project: &Project,
        urls: &str,
        host_id: Option<&str>,
    ) -> Result<ClusterMode, ClusterError> {
        let urls = ClusterUrls::parse(urls)?;
        let host_id = match host_id {
            Some(id) => id.to_string(),
            None => default_host_id(project),
        };
        Ok(ClusterMode {
            urls,
            host_id,
            workspace_id: workspace_of(project),
        })
    }

    /// What an agent this host spawns needs to open its log in the
    /// cluster.
    pub(crate) fn agent_env(&self) -> Vec<(String, String)> {
        vec![
            (CLUSTER_ENV.to_string(), self.urls.as_slice().join(",")),
            (CLUSTER_HOST_ENV.to_string(), self.host_id.clone()),
            (CLUSTER_WORKSPACE_ENV.to_string(), self.workspace_id.clone()),
        ]
    }

    /// Connects as this host, with the options of this process's
    /// environment.
    pub(crate) async fn connect(&self) -> Result<Cluster, ClusterError> {
        connect_as(&self.urls, format!("gdn host {}", self.host_id)).await
    }
}

/// The cluster log of an AgentProcess its host spawned with
/// [`ClusterMode::agent_env`]; `None` on a single host.
pub(crate) fn agent_log() -> Result<Option<goondan_agent::assemble::ClusterLog>, ClusterError> {
    let Ok(urls) = std::env::var(CLUSTER_ENV) else {
        return Ok(None);
    };
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    Ok(Some(goondan_agent::assemble::ClusterLog {
        urls: ClusterUrls::parse(&urls)?,
        host_id: var(CLUSTER_HOST_ENV),
        workspace_id: var(CLUSTER_WORKSPACE_ENV),
    }))
}

/// `<host name>-<hash of the state root>`: stable across restarts of one
/// host, different for two hosts (or two state roots on one machine).
fn default_host_id(project: &Project) -> String {
    let host = host_name().unwrap_or_else(|| "host".to_string());
    let root = std::path::absolute(project.state_root.path())
        .unwrap_or_else(|_| project.state_root.path().to_path_buf());
    let hash = goondan_types::placement::fnv1a64(root.as_os_str().as_encoded_bytes());
    format!("{host}-{:08x}", hash as u32)
}

/// This machine's host name, when it has a readable one.
pub(crate) fn host_name() -> Option<String> {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
}

/// A running host: stop it with [`HostTask::drain`].
pub(crate) struct HostTask {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl HostTask {
    /// Stops pulling, lets the Turns this host runs finish (at most
    /// [`DRAIN_DEADLINE`]), acks them, and releases every lease so other
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

/// Makes the layout of `cluster` if it is missing, as a starting host
/// does (retrying what fails while the servers settle).
pub(crate) async fn ensure_layout(cluster: &Cluster) -> Result<(), ClusterError> {
    while_starting(|| layout::ensure(cluster)).await
}

/// Runs `attempt` until it succeeds or [`JOIN_DEADLINE`] passes. Hosts
/// starting together race to make the layout, and a request (a stream's
/// creation among them) can time out while the servers elect a leader
/// for what was just made: such failures are retried for a while; what
/// still fails at the deadline is reported as it is.
async fn while_starting<T, F, Fut>(mut attempt: F) -> Result<T, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClusterError>>,
{
    let deadline = tokio::time::Instant::now() + JOIN_DEADLINE;
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(
                error @ (ClusterError::Request { .. }
                | ClusterError::Timeout { .. }
                | ClusterError::Layout { .. }),
            ) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(
                    code = error.code(),
                    "joining the cluster: {error}; trying again"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Joins the cluster `cluster` (its layout made: [`ensure_layout`]) as a host
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

/// The instances of shards this host does not own, reached through their
/// inboxes.
struct ClusterRemote {
    workspace_id: String,
    owned: watch::Receiver<BTreeSet<u16>>,
    outbox: mpsc::UnboundedSender<IpcMessage>,
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
async fn publish_forwarded(
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

/// The shard whose owner runs the singleton Connections.
const SINGLETON_SHARD: u16 = 0;

/// Which Connections this host runs: those every host runs (a push
/// connector's port, behind a load balancer), and the singletons, which
/// only one host may run at a time (anything that polls or fires on a
/// schedule would fire once per host), while it owns [`SINGLETON_SHARD`].
/// Shared by the host, which follows the shard, and the reloads, which
/// change the bundle.
#[derive(Debug, Default)]
pub(crate) struct SingletonConnections {
    /// The singleton Connections of the running bundle.
    names: std::sync::Mutex<Vec<String>>,
    /// Whether this host runs them now.
    running: std::sync::atomic::AtomicBool,
}

impl SingletonConnections {
    /// `info` with only the Connections of `project` this host runs now;
    /// remembers which of them are singletons.
    pub(crate) fn select(&self, project: &Project, mut info: SwarmInfo) -> SwarmInfo {
        let (everywhere, singletons): (Vec<String>, Vec<String>) =
            info.connections.iter().cloned().partition(|name| {
                project
                    .bundle
                    .connections()
                    .find(|connection| connection.name() == name)
                    .is_some_and(|connection| is_pushed_to(&project.bundle, connection))
            });
        info.connections = everywhere;
        if self.running.load(std::sync::atomic::Ordering::SeqCst) {
            info.connections.extend(singletons.iter().cloned());
        }
        *self.names.lock().expect("singleton names lock") = singletons;
        info
    }

    fn names(&self) -> Vec<String> {
        self.names.lock().expect("singleton names lock").clone()
    }
}

/// Whether `connection`'s connector is a web server platforms push to,
/// which every host may run behind a load balancer (a retry reaching
/// another host is dropped by its delivery id): webhook, GitHub, Slack,
/// Discord, and Telegram in webhook mode.
fn is_pushed_to(
    bundle: &goondan_config::Bundle,
    connection: goondan_config::ConnectionView<'_>,
) -> bool {
    const PUSH: [&str; 4] = [
        "builtin:webhook",
        "builtin:github",
        "builtin:slack",
        "builtin:discord",
    ];
    let entry = connection.connector().spec.entry.as_str();
    if entry == "builtin:telegram" {
        return connection
            .resource()
            .spec
            .config
            .get("TELEGRAM_MODE")
            .and_then(|mode| bundle.resolve(mode).ok())
            .is_some_and(|mode| mode.trim().eq_ignore_ascii_case("webhook"));
    }
    PUSH.contains(&entry)
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

struct ShardPuller {
    cluster: Cluster,
    handle: OrchestratorHandle,
    membership: Arc<Membership>,
    workspace_id: String,
    answered: Arc<AnsweredRequests>,
}

impl ShardPuller {
    /// Pulls one shard's inbox until told to stop, then waits for the
    /// Turns it started (bounded by [`DRAIN_DEADLINE`]).
    async fn run(self, shard: u16, mut stop: watch::Receiver<bool>) {
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
            match self.answer_from_outbox(&delivery).await {
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
                "run one swarm per cluster, and every host with the same bundle and swarm",
            );
            reply(&self.cluster, &envelope, &refused).await;
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
                reply(&self.cluster, &envelope, &ClusterReply::from_error(&error)).await;
                delivery.ack().await.ok();
                return None;
            }
        };
        let cluster = self.cluster.clone();
        Some(Box::pin(async move {
            let answer = keep_alive_until(&delivery, pending.answer()).await;
            match answer {
                Ok(answer) => {
                    reply(&cluster, &envelope, &ClusterReply::answered(answer)).await;
                    delivery.ack().await.ok();
                }
                // This host stops: the next owner runs it (the log says
                // how far it got).
                Err(OrchestratorError::Stopped) => {
                    delivery.nak().await.ok();
                }
                Err(error) => {
                    reply(&cluster, &envelope, &ClusterReply::from_error(&error)).await;
                    delivery.ack().await.ok();
                }
            }
        }))
    }
}

/// What the instance's last commit says about a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Consumed {
    /// Not consumed (or the commit could not be read): run its Turn.
    No,
    /// Consumed at the cursor, and what its Turn answered was sent again
    /// (or it wants no answer): only ack it.
    Answered,
    /// Below the cursor, or at it without its answer in the outbox: the
    /// agent, told it is a redelivered event, looks it up in its
    /// conversation (answers it from there, or resumes its Turn).
    Earlier,
}

impl ShardPuller {
    /// When the instance's last commit consumed `delivery` already (its
    /// Turn committed, and the host that ran it died before the ack, or
    /// acked too late), sends the answer that Turn gave this input again
    /// from the commit's outbox, so the agent is not woken and the model
    /// not called. A commit that cannot be read leaves the delivery to the
    /// agent, which recognises a consumed input in its conversation.
    async fn answer_from_outbox(&self, delivery: &Delivery) -> Result<Consumed, ClusterError> {
        let envelope = &delivery.envelope;
        let last = match cursor::last_commit(&self.cluster, &envelope.address).await {
            Ok(last) => last,
            Err(error) => {
                tracing::warn!(
                    seq = delivery.seq,
                    code = error.code(),
                    "reading the inbox cursor: {error}; the agent checks its conversation instead"
                );
                return Ok(Consumed::No);
            }
        };
        let Some((cursor, outbox)) = last.and_then(|last| {
            last.inbox_seq
                .filter(|cursor| delivery.consumed_by(*cursor))
                .map(|cursor| (cursor, last.outbox))
        }) else {
            return Ok(Consumed::No);
        };
        if delivery.seq < cursor {
            // Inputs are not taken in inbox order yet (one that came back
            // after `ack_wait` may follow a newer one a host took at once),
            // so a lower sequence may be a Turn that was interrupted, or
            // whose answer is in an earlier commit: the log tells.
            return Ok(Consumed::Earlier);
        }
        // The correlation id an answer to this input carries: the one the
        // orchestrator gives an input with a reply subject, or the calling
        // instance's; none for a send or an answer.
        let correlation_id = match (&envelope.reply_to, &envelope.event.reply_to) {
            (Some(_), _) => Some(protocol::correlation_id_for_id(&envelope.id)),
            (None, Some(reply_to)) if protocol::in_reply_to(&envelope.event).is_none() => {
                Some(reply_to.correlation_id.clone())
            }
            _ => None,
        };
        let Some(correlation_id) = correlation_id else {
            // Nothing to answer: the Turn's commit was all it owed.
            tracing::info!(
                seq = delivery.seq,
                instance = %envelope.address.routing_key(),
                "input already consumed by a committed Turn; acked"
            );
            return Ok(Consumed::Answered);
        };
        let answers: Vec<_> = outbox
            .into_iter()
            .filter(|message| {
                protocol::in_reply_to(&message.event) == Some(correlation_id.as_str())
            })
            .collect();
        if answers.is_empty() {
            // The last commit is this input's cursor carried over by a fold
            // that answered nothing.
            return Ok(Consumed::Earlier);
        }
        let n_answers = answers.len();
        for message in answers {
            let mut answer = message.event;
            if envelope.reply_to.is_some() {
                answer
                    .instance_key
                    .get_or_insert_with(|| envelope.address.instance_key.clone());
                reply(&self.cluster, envelope, &ClusterReply::answered(answer)).await;
                continue;
            }
            let Ok(caller) = RoutingKey::parse(&message.to, "") else {
                tracing::warn!(to = %message.to, "a committed answer names no instance; not sent again");
                continue;
            };
            let forwarded = Envelope {
                id: inbox::answer_message_id(&correlation_id),
                address: InstanceAddress::new(
                    &self.workspace_id,
                    &caller.agent_name,
                    &caller.instance_key,
                ),
                event: answer,
                reply_to: None,
            };
            inbox::send(&self.cluster, &forwarded).await?;
        }
        tracing::info!(
            seq = delivery.seq,
            cursor,
            answers = n_answers,
            instance = %envelope.address.routing_key(),
            "input already consumed by a committed Turn; acked, its answer sent again from the outbox"
        );
        Ok(Consumed::Answered)
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

/// Requests from other hosts' instances that this host's instances are
/// answering, by correlation id: each delivery is acked once its answer
/// has left for the caller's inbox.
#[derive(Default)]
struct AnsweredRequests {
    waiting: std::sync::Mutex<HashMap<String, tokio::sync::oneshot::Sender<()>>>,
}

impl AnsweredRequests {
    /// Resolves when the answer to `correlation_id` has been forwarded (or
    /// after a day, if it never is: a Turn cannot run that long).
    fn expect(&self, correlation_id: &str) -> impl std::future::Future<Output = ()> + Send + use<> {
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
    fn answered(&self, correlation_id: &str) {
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

/// Resolves once `stop` says true (or its sender is gone), holding no
/// guard across the wait.
async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// What a host publishes to an envelope's reply subject.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterReply {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    answer: Option<Box<AgentEvent>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ReplyError>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplyError {
    code: String,
    message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    suggestion: Option<String>,
}

impl ClusterReply {
    fn answered(answer: AgentEvent) -> Self {
        ClusterReply {
            answer: Some(Box::new(answer)),
            error: None,
        }
    }

    fn refused(code: &str, message: String, suggestion: &str) -> Self {
        ClusterReply {
            answer: None,
            error: Some(ReplyError {
                code: code.to_string(),
                message,
                suggestion: Some(suggestion.to_string()),
            }),
        }
    }

    fn from_error(error: &OrchestratorError) -> Self {
        ClusterReply {
            answer: None,
            error: Some(ReplyError {
                code: error.code().to_string(),
                message: error.to_string(),
                suggestion: error.suggestion(),
            }),
        }
    }
}

async fn reply(cluster: &Cluster, envelope: &Envelope, reply: &ClusterReply) {
    let Some(subject) = &envelope.reply_to else {
        return;
    };
    let mut body = match serde_json::to_vec(reply) {
        Ok(body) => body,
        Err(error) => {
            tracing::error!("cannot encode a reply: {error}");
            return;
        }
    };
    // A reply travels as one core-NATS message: one the servers would
    // refuse becomes an error the caller reads, not a wait for nothing.
    let limit = cluster.client().server_info().max_payload;
    if body.len() > limit {
        let error = ClusterError::TooLarge {
            what: "the answer".to_string(),
            bytes: body.len(),
            limit,
        };
        let refused = ClusterReply::refused(
            error.code(),
            error.to_string(),
            "ask for a shorter answer, or read it from the conversation (`gdn instance export --cluster`)",
        );
        body = serde_json::to_vec(&refused).unwrap_or_default();
    }
    if let Err(error) = cluster.client().publish(subject.clone(), body.into()).await {
        tracing::warn!(subject, "cannot publish a reply: {error}");
    }
}

/// `gdn run --cluster URLS --input TEXT`: routes the input as the swarm's
/// rules say, sends it to its instance's inbox and prints the answer. No
/// host needs to run here.
pub(crate) async fn ask(
    mode: &ClusterMode,
    info: &SwarmInfo,
    ingress: Ingress,
    json: bool,
) -> anyhow::Result<Outcome> {
    let (key, event) = match goondan_orchestrator::ingress::route(info, &ingress) {
        Ok(routed) => routed,
        Err(error) => return Ok(report(Err(Refused::from(error)), None, json)),
    };
    let cluster = match connect_as_client(&mode.urls).await {
        Ok(cluster) => cluster,
        Err(error) => return Ok(print_cluster_error(&error)),
    };
    let reply_subject = format!("gdn.reply.cli.{}", goondan_types::new_event_id());
    let mut replies = cluster
        .client()
        .subscribe(reply_subject.clone())
        .await
        .context("subscribing to the reply subject")?;
    let envelope = Envelope {
        id: event.id.clone(),
        address: InstanceAddress::new(&mode.workspace_id, &key.agent_name, &key.instance_key),
        event,
        reply_to: Some(reply_subject),
    };
    if let Err(error) = inbox::send(&cluster, &envelope).await {
        return Ok(print_cluster_error(&error));
    }
    use futures_util::StreamExt;
    let message = match tokio::time::timeout(ANSWER_WAIT, replies.next()).await {
        Ok(Some(message)) => message,
        Ok(None) | Err(_) => {
            let error = ClusterError::Timeout {
                what: format!("an answer from {key}"),
                after: ANSWER_WAIT,
            };
            return Ok(print_cluster_error(&error));
        }
    };
    let reply: ClusterReply =
        serde_json::from_slice(&message.payload).context("the cluster's reply does not decode")?;
    let reply = match (reply.answer, reply.error) {
        (Some(answer), _) => Ok(*answer),
        (None, Some(error)) => Err(Refused {
            code: error.code,
            message: error.message,
            suggestion: error.suggestion,
        }),
        (None, None) => anyhow::bail!("the cluster's reply holds neither an answer nor an error"),
    };
    Ok(report(reply, Some(&key.instance_key), json))
}

/// Prints a cluster error the way every command prints coded errors.
pub(crate) fn print_cluster_error(error: &ClusterError) -> Outcome {
    eprintln!("error[{}]: {error}", error.code());
    if let Some(help) = error.suggestion() {
        eprintln!("   = help: {help}");
    }
    Outcome::Failure
}

/// `gdn cluster ...`.
pub(crate) fn command(global: &GlobalArgs, args: &ClusterArgs) -> anyhow::Result<Outcome> {
    match &args.command {
        ClusterCommand::Status { cluster } => status(global, cluster),
        ClusterCommand::Deploy { cluster, wait } => {
            super::rollout::deploy(global, cluster, Duration::from_secs(*wait))
        }
    }
}

pub(crate) fn current_thread() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Connects for a command run by a person (no host id of its own), and
/// checks that some host has made the layout.
async fn connect_as_client(urls: &ClusterUrls) -> Result<Cluster, ClusterError> {
    let cluster = connect_as(urls, "gdn cli".to_string()).await?;
    layout::require(&cluster).await?;
    Ok(cluster)
}

/// Connects under `client_name` (what the servers' monitoring shows), with
/// the options of this process's environment (`GOONDAN_CLUSTER_*`).
pub(crate) async fn connect_as(
    urls: &ClusterUrls,
    client_name: String,
) -> Result<Cluster, ClusterError> {
    let mut options = ClusterOptions::from_process_env()?;
    options.client_name = client_name;
    Cluster::connect(urls, options).await
}

/// Connects as a person's command does and runs `read`; a cluster error
/// is printed and becomes the outcome.
fn read_cluster<T>(
    urls: &str,
    read: impl AsyncFnOnce(&Cluster) -> Result<T, ClusterError>,
) -> anyhow::Result<Result<T, Outcome>> {
    let read = current_thread()?.block_on(async {
        let cluster = connect_as_client(&ClusterUrls::parse(urls)?).await?;
        read(&cluster).await
    });
    Ok(read.map_err(|error| print_cluster_error(&error)))
}

/// `gdn instance export KEY --cluster URLS --to DIR`.
pub(crate) fn export(
    global: &GlobalArgs,
    key: &str,
    urls: &str,
    to: &std::path::Path,
) -> anyhow::Result<Outcome> {
    let (project, workspace_id) = match cluster_workspace(global)? {
        Ok(found) => found,
        Err(outcome) => return Ok(outcome),
    };
    let non_empty = std::fs::read_dir(to)
        .map(|mut entries| entries.next().is_some())
        .unwrap_or(false);
    if non_empty {
        eprintln!(
            "error[E_EXPORT_TARGET_NOT_EMPTY]: {} exists and is not empty",
            to.display()
        );
        eprintln!("   = help: export into a new or empty folder");
        return Ok(Outcome::BadArguments);
    }
    let (agent, instance_key) = super::manage::split_key(key);
    let agent = match agent {
        Some(agent) => agent,
        None => swarm_info(&project)?.entry_agent,
    };
    let address = InstanceAddress::new(&workspace_id, &agent, &instance_key);
    if let Err(outcome) = read_cluster(urls, async |cluster| {
        goondan_cluster::export(cluster, &address, to).await
    })? {
        return Ok(outcome);
    }
    println!("exported {agent}:{instance_key} to {}", to.display());
    Ok(Outcome::Success)
}

/// `gdn cluster status`: hosts, and each host's shards with their backlog.
fn status(global: &GlobalArgs, urls: &str) -> anyhow::Result<Outcome> {
    let status = match read_cluster(urls, goondan_cluster::membership::cluster_status)? {
        Ok(status) => status,
        Err(outcome) => return Ok(outcome),
    };
    if global.json {
        println!("{}", serde_json::to_string(&status)?);
        return Ok(Outcome::Success);
    }
    match &status.active_bundle {
        Some(active) => println!(
            "bundle {} ({} KiB, made active by {} at {})",
            active.digest,
            active.size.div_ceil(1024),
            active.deployed_by,
            active.deployed_at
        ),
        None => println!("no bundle active yet"),
    }
    println!("{} host(s)", status.hosts.len());
    for host in &status.hosts {
        let shards: Vec<&goondan_cluster::membership::ShardStatus> = status
            .shards
            .iter()
            .filter(|shard| {
                shard
                    .lease
                    .as_ref()
                    .is_some_and(|lease| lease.host == host.host)
            })
            .collect();
        let pending: u64 = shards.iter().filter_map(|shard| shard.pending).sum();
        let in_flight: usize = shards.iter().filter_map(|shard| shard.ack_pending).sum();
        let bundle = host
            .bundle
            .as_deref()
            .map_or("-", goondan_cluster::bundle::short_digest);
        let behind = match (&status.active_bundle, &host.bundle) {
            (Some(active), Some(runs)) if &active.digest != runs => " (not the active bundle)",
            _ => "",
        };
        println!(
            "  {}  shards={} pending={pending} inFlight={in_flight} bundle={bundle}{behind} version={} started={}",
            host.host,
            shards.len(),
            host.version,
            host.started_at
        );
        if let Some(refused) = &host.bundle_refused {
            println!(
                "    refused bundle {}: {}",
                goondan_cluster::bundle::short_digest(&refused.digest),
                refused.problem
            );
        }
    }
    let unowned = status
        .shards
        .iter()
        .filter(|shard| shard.lease.is_none())
        .count();
    if unowned > 0 {
        println!("  {unowned} shard(s) without an owner");
    }
    Ok(Outcome::Success)
}

/// The project of the current folder (or `--config`) and the cluster
/// workspace it names, for commands that read a cluster.
fn cluster_workspace(global: &GlobalArgs) -> anyhow::Result<Result<(Project, String), Outcome>> {
    Ok(crate::project::load(global, None, None)?.map(|project| {
        let workspace_id = workspace_of(&project);
        (project, workspace_id)
    }))
}

/// The workspace every host of `project`'s swarm uses: the Swarm's
/// instance key alone, since hosts keep the bundle in different folders.
pub(crate) fn workspace_of(project: &Project) -> String {
    goondan_store::paths::workspace_id(&project.instance_key)
}

/// `gdn instance list --cluster URLS`: the instances some host claimed,
/// newest claim first, with whether that host is still live.
pub(crate) fn list_instances(
    global: &GlobalArgs,
    urls: &str,
    agent: Option<&str>,
    limit: Option<usize>,
) -> anyhow::Result<Outcome> {
    let (_, workspace_id) = match cluster_workspace(global)? {
        Ok(found) => found,
        Err(outcome) => return Ok(outcome),
    };
    let read = read_cluster(urls, async |cluster| {
        let instances = goondan_cluster::directory::instances(cluster, &workspace_id).await?;
        let status = goondan_cluster::membership::cluster_status(cluster).await?;
        Ok((instances, status.hosts))
    })?;
    let (mut instances, hosts) = match read {
        Ok(read) => read,
        Err(outcome) => return Ok(outcome),
    };
    instances.retain(|record| agent.is_none_or(|agent| record.agent_name == agent));
    instances.sort_by(|a, b| b.claimed_at.cmp(&a.claimed_at));
    let total = instances.len();
    instances.truncate(limit.unwrap_or(usize::MAX));
    let live = |host: &str| hosts.iter().any(|info| info.host == host);
    if global.json {
        let rows: Vec<serde_json::Value> = instances
            .iter()
            .map(|record| {
                serde_json::json!({
                    "agentName": record.agent_name,
                    "instanceKey": record.instance_key,
                    "host": record.host,
                    "hostLive": live(&record.host),
                    "claimedAt": record.claimed_at,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "instances": rows, "hidden": total - instances.len() })
        );
        return Ok(Outcome::Success);
    }
    println!(
        "{:<24} {:<16} {:<24} {:<6} CLAIMED",
        "INSTANCE KEY", "AGENT", "HOST", "LIVE"
    );
    for record in &instances {
        println!(
            "{:<24} {:<16} {:<24} {:<6} {}",
            record.instance_key,
            record.agent_name,
            record.host,
            if live(&record.host) { "yes" } else { "no" },
            record.claimed_at
        );
    }
    if total > instances.len() {
        println!("({} more; --all lists every one)", total - instances.len());
    }
    Ok(Outcome::Success)
}

/// `gdn logs --cluster URLS`: the runtime events every host's agents
/// published, filtered and in time order, as JSON lines.
pub(crate) fn logs(
    global: &GlobalArgs,
    urls: &str,
    filter: &goondan_store::RuntimeEventFilter,
) -> anyhow::Result<Outcome> {
    let (_, workspace_id) = match cluster_workspace(global)? {
        Ok(found) => found,
        Err(outcome) => return Ok(outcome),
    };
    let read = read_cluster(urls, async |cluster| {
        goondan_cluster::directory::observations(cluster, &workspace_id).await
    })?;
    let lines = match read {
        Ok(lines) => lines,
        Err(outcome) => return Ok(outcome),
    };
    let mut events: Vec<(String, String)> = lines
        .into_iter()
        .filter_map(|line| {
            let event: goondan_types::RuntimeEvent = serde_json::from_slice(&line).ok()?;
            filter.matches(&event).then(|| {
                (
                    event.base().timestamp.clone(),
                    String::from_utf8_lossy(&line).into_owned(),
                )
            })
        })
        .collect();
    events.sort_by(|a, b| a.0.cmp(&b.0));
    let skip = events
        .len()
        .saturating_sub(filter.last.unwrap_or(usize::MAX));
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for (_, line) in &events[skip..] {
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUNDLE: &str = r#"apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: instant
spec:
  provider: scripted
  model: instant
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: echo
spec:
  modelConfig:
    modelRef: Model/instant
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/echo
  agents:
    - ref: Agent/echo
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: hooks
spec:
  connectorRef: Connector/webhook
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: tg-push
spec:
  connectorRef: Connector/telegram
  config:
    TELEGRAM_MODE:
      value: webhook
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: tg-poll
spec:
  connectorRef: Connector/telegram
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: ticks
spec:
  connectorRef: Connector/cron
"#;

    #[test]
    fn push_connectors_run_on_every_host_and_the_rest_on_the_owner_of_shard_0() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("goondan.yaml"), BUNDLE).unwrap();
        let bundle = goondan_config::load_bundle(dir.path(), &Default::default())
            .unwrap()
            .bundle
            .expect("the bundle loads");
        let project = Project {
            bundle,
            swarm_name: "default".into(),
            instance_key: "default".into(),
            state_root: goondan_store::StateRoot::new(dir.path().join("state")),
        };
        let info = swarm_info(&project).unwrap();
        let connections = SingletonConnections::default();
        let mut selected = connections.select(&project, info.clone()).connections;
        selected.sort();
        assert_eq!(selected, ["hooks", "tg-push"]);
        let mut singletons = connections.names();
        singletons.sort();
        assert_eq!(singletons, ["tg-poll", "ticks"]);
        // On the owner of shard 0, all of them.
        connections
            .running
            .store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(connections.select(&project, info).connections.len(), 4);
    }
}
