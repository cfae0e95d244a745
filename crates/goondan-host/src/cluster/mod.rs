//! A swarm across hosts over NATS JetStream (docs/cluster.md): this
//! host's share of it, and the reads a person's commands make from
//! anywhere.
//!
//! A host is the single-host orchestrator plus this module: [`join`]
//! enters the cluster (heartbeat, shard leases by rendezvous hashing)
//! before the orchestrator starts, and [`JoinedHost::serve`] pulls the
//! inboxes of the shards it owns ([`shard`]), hands each input to its
//! orchestrator as a request for the instance it names, keeps the
//! delivery alive while the Turn runs, publishes the answer to the
//! sender's reply subject and only then acks. A delivery the instance's
//! last commit already consumed (its host died between commit and ack) is
//! not run again: the answer that commit's outbox holds is sent again
//! ([`outbox`]), and it is acked. Its agents keep their conversations in the cluster's log
//! ([`ClusterMode::agent_env`]), so whichever host owns an instance next
//! reads what this one wrote, and a stale owner's writes are refused by
//! the log itself.
//!
//! [`rollout`] is the bundle the hosts run, distributed by digest;
//! [`operator`] is what a host does for a person's command on an instance
//! it owns (a decision on an approval, a cancel); [`client`] holds what a
//! command run by a person does against a cluster (`gdn run --cluster …
//! --input`, `gdn cluster status|deploy`, `gdn instance list|export
//! --cluster`, `gdn logs --cluster`, `gdn approve|deny` and `gdn instance
//! cancel` through the instance's owner).

pub mod client;
mod host;
pub mod operator;
mod outbox;
mod remote;
pub mod rollout;
mod shard;
mod singletons;
#[cfg(test)]
mod testing;

pub(crate) use host::{join, HostTask, JoinedHost};
pub(crate) use singletons::SingletonConnections;

use crate::Project;
use goondan_cluster::{layout, Cluster, ClusterError, ClusterOptions, ClusterUrls};
use std::time::Duration;

/// The variable that holds the server list (also what agents read).
pub const CLUSTER_ENV: &str = "GOONDAN_CLUSTER";
/// The owner name an agent writes into its log's claims.
const CLUSTER_HOST_ENV: &str = "GOONDAN_CLUSTER_HOST";
/// The workspace id every host of the swarm uses.
const CLUSTER_WORKSPACE_ENV: &str = "GOONDAN_CLUSTER_WORKSPACE";

/// How long a starting host retries a join that failed on a transient
/// error.
pub const JOIN_DEADLINE: Duration = Duration::from_secs(30);

/// Where this process meets the cluster.
#[derive(Debug, Clone)]
pub struct ClusterMode {
    /// The servers.
    pub urls: ClusterUrls,
    /// This host's name in heartbeats, leases and log claims.
    pub host_id: String,
    /// The workspace every host of this swarm uses. Unlike a single host's,
    /// it does not hash the bundle's folder: hosts keep the bundle in
    /// different places.
    pub workspace_id: String,
}

impl ClusterMode {
    /// The mode of `--cluster URLS` for `project`, with `host_id` or one
    /// made from the host name and this state root.
    pub fn new(
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
    /// cluster (read back by [`agent_log`]).
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
pub fn agent_log() -> Result<Option<goondan_agent::assemble::ClusterLog>, ClusterError> {
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
pub fn host_name() -> Option<String> {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
}

/// The workspace every host of `project`'s swarm uses: the Swarm's
/// instance key alone, since hosts keep the bundle in different folders.
pub fn workspace_of(project: &Project) -> String {
    goondan_store::paths::workspace_id(&project.instance_key)
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
/// still fails at the deadline is reported as it is. A layout the servers
/// refuse for good (`ClusterError::Layout`: three replicas on a single
/// server, a server too old) is reported at once.
async fn while_starting<T, F, Fut>(mut attempt: F) -> Result<T, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClusterError>>,
{
    let deadline = tokio::time::Instant::now() + JOIN_DEADLINE;
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(error @ (ClusterError::Request { .. } | ClusterError::Timeout { .. }))
                if tokio::time::Instant::now() < deadline =>
            {
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

/// Resolves once `stop` says true (or its sender is gone), holding no
/// guard across the wait.
async fn stop_requested(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
