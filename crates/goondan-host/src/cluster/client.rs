//! What a command run by a person does against a cluster, from any
//! machine with the bundle: one input through an instance's inbox
//! ([`ask`]), a decision or a cancel through the host that owns the
//! instance ([`ask_operator`]), a rollout ([`deploy`] and
//! [`wait_for_hosts`]), and the reads behind `gdn cluster status`, `gdn
//! instance list|export --cluster`, `gdn logs --cluster` and `gdn
//! approvals` ([`connect_as_client`]). Rendering is the caller's.

use super::operator::{OperatorRequest, OperatorResponse};
use super::rollout::pack;
use super::{connect_as, ensure_layout, host_name, workspace_of, ClusterMode};
use crate::{HostError, Project};
use goondan_cluster::bundle::{self, ActiveBundle};
use goondan_cluster::inbox::{self, Envelope};
use goondan_cluster::membership::cluster_status;
use goondan_cluster::reply::ClusterReply;
use goondan_cluster::subject::InstanceAddress;
use goondan_cluster::{Cluster, ClusterError, ClusterUrls};
use goondan_ipc::RoutingKey;
use goondan_orchestrator::{Ingress, SwarmInfo};
use std::time::Duration;

/// How long `gdn run --cluster … --input` waits for its answer.
const ANSWER_WAIT: Duration = Duration::from_secs(600);
/// How often a deploy looks at the hosts while it waits.
const DEPLOY_POLL: Duration = Duration::from_millis(250);
/// How long a person's request waits for the owner's answer once the
/// owner took it: a decision waits up to 30 s for the instance to record
/// it (its process may have to start first), a cancel 5 s for the Turn to
/// end.
const OPERATOR_ANSWER_WAIT: Duration = Duration::from_secs(45);

/// Connects for a command run by a person (no host id of its own), and
/// checks that some host has made the layout.
pub async fn connect_as_client(urls: &ClusterUrls) -> Result<Cluster, ClusterError> {
    let cluster = connect_as(urls, "gdn cli".to_string()).await?;
    goondan_cluster::layout::require(&cluster).await?;
    Ok(cluster)
}

/// Routes `ingress` as the swarm's rules say, sends it to its instance's
/// inbox and waits for the reply of the host that runs it. No host needs
/// to run here. A routing refusal is [`HostError::Orchestrator`].
pub async fn ask(
    mode: &ClusterMode,
    info: &SwarmInfo,
    ingress: Ingress,
) -> Result<(RoutingKey, ClusterReply), HostError> {
    let (key, event) = goondan_orchestrator::ingress::route(info, &ingress)?;
    let cluster = connect_as_client(&mode.urls).await?;
    let reply_subject = format!("gdn.reply.cli.{}", goondan_types::new_event_id());
    let mut replies = cluster
        .client()
        .subscribe(reply_subject.clone())
        .await
        .map_err(|error| ClusterError::Request {
            what: format!("subscribe {reply_subject}"),
            reason: error.to_string(),
        })?;
    let envelope = Envelope {
        id: event.id.clone(),
        address: InstanceAddress::new(&mode.workspace_id, &key.agent_name, &key.instance_key),
        event,
        reply_to: Some(reply_subject),
    };
    inbox::send(&cluster, &envelope).await?;
    use futures_util::StreamExt;
    let message = match tokio::time::timeout(ANSWER_WAIT, replies.next()).await {
        Ok(Some(message)) => message,
        Ok(None) | Err(_) => {
            return Err(ClusterError::Timeout {
                what: format!("an answer from {key}"),
                after: ANSWER_WAIT,
            }
            .into())
        }
    };
    let reply: ClusterReply =
        serde_json::from_slice(&message.payload).map_err(|error| ClusterError::Corrupt {
            what: format!("the reply from {key}"),
            reason: error.to_string(),
        })?;
    if reply.answer.is_none() && reply.error.is_none() {
        return Err(ClusterError::Corrupt {
            what: format!("the reply from {key}"),
            reason: "it holds neither an answer nor an error".into(),
        }
        .into());
    }
    Ok((key, reply))
}

/// Sends `request` to the host that owns its instance now (looking for it
/// while ownership moves, see [`goondan_cluster::owner::ask_owner`]) and
/// returns that host's answer. No host needs to run here.
pub async fn ask_operator(
    cluster: &Cluster,
    workspace_id: &str,
    request: &OperatorRequest,
) -> Result<OperatorResponse, HostError> {
    let address = request.address(workspace_id);
    let payload = serde_json::to_vec(request).map_err(|error| ClusterError::Corrupt {
        what: format!("a request for {}", address.routing_key()),
        reason: error.to_string(),
    })?;
    let answer =
        goondan_cluster::owner::ask_owner(cluster, &address, payload, OPERATOR_ANSWER_WAIT).await?;
    serde_json::from_slice(&answer).map_err(|error| {
        ClusterError::Corrupt {
            what: format!("the answer of the owner of {}", address.routing_key()),
            reason: error.to_string(),
        }
        .into()
    })
}

/// What [`deploy`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deployed {
    /// The bundle is the active one now.
    Activated {
        /// Its digest.
        digest: String,
        /// The archive's size in bytes.
        size: usize,
    },
    /// It already was.
    AlreadyActive {
        /// Its digest.
        digest: String,
    },
}

impl Deployed {
    /// The digest of the bundle deployed.
    pub fn digest(&self) -> &str {
        match self {
            Deployed::Activated { digest, .. } | Deployed::AlreadyActive { digest } => digest,
        }
    }
}

/// Makes `project`'s bundle the one every host of the cluster at `urls`
/// runs; returns the connection for [`wait_for_hosts`]. A deploy may come
/// before the first host (an init step): it makes the layout like a host
/// does. Only a bundle this cluster may run is stored: another swarm's is
/// refused before anything is uploaded.
pub async fn deploy(urls: &str, project: &Project) -> Result<(Cluster, Deployed), HostError> {
    let (archive, digest) = pack(project)?;
    let workspace_id = workspace_of(project);
    let deployer = format!(
        "gdn cluster deploy on {}",
        host_name().unwrap_or_else(|| "an unnamed machine".into())
    );
    let urls = ClusterUrls::parse(urls)?;
    let cluster = connect_as(&urls, "gdn cluster deploy".to_string()).await?;
    ensure_layout(&cluster).await?;
    let mut uploaded = false;
    loop {
        let current = bundle::active(&cluster).await?;
        if let Some(current) = &current {
            if current.workspace_id != workspace_id {
                return Err(HostError::ClusterWorkspace {
                    message: format!(
                        "this cluster runs workspace {}; this bundle's Swarm/{} is workspace {workspace_id}",
                        current.workspace_id, project.swarm_name
                    ),
                    suggestion:
                        "run one swarm per cluster: deploy to the cluster that runs this swarm"
                            .into(),
                });
            }
            if current.digest == digest {
                return Ok((cluster, Deployed::AlreadyActive { digest }));
            }
        }
        if !uploaded {
            bundle::upload(&cluster, &archive).await?;
            uploaded = true;
        }
        let record = ActiveBundle::new(
            digest.clone(),
            archive.len() as u64,
            workspace_id.clone(),
            deployer.clone(),
        );
        let after = current.map(|current| current.revision);
        if bundle::activate(&cluster, &record, after).await?.is_some() {
            let size = archive.len();
            return Ok((cluster, Deployed::Activated { digest, size }));
        }
        // Another deploy came between the read and the write.
    }
}

/// Where one host stands on a deployed bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRollout {
    /// It runs the bundle.
    Runs,
    /// It refused the bundle, and runs on with its previous one.
    Refused {
        /// Why.
        problem: String,
    },
}

/// How a wait for the hosts ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RolloutWait {
    /// Every live host runs the bundle or refused it (`refused` of them).
    Settled {
        /// How many hosts were live.
        hosts: usize,
        /// How many refused.
        refused: usize,
    },
    /// These hosts did not get there before the deadline.
    Behind(Vec<String>),
}

/// Waits up to `wait` until every live host runs `digest` or refused it;
/// `progress` hears each host once, as it gets there.
pub async fn wait_for_hosts(
    cluster: &Cluster,
    digest: &str,
    wait: Duration,
    mut progress: impl FnMut(&str, &HostRollout),
) -> Result<RolloutWait, ClusterError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut reported = std::collections::BTreeSet::new();
    loop {
        let status = cluster_status(cluster).await?;
        let mut behind = Vec::new();
        let mut refused = 0;
        for host in &status.hosts {
            let state = if host.bundle.as_deref() == Some(digest) {
                HostRollout::Runs
            } else if let Some(refusal) = host
                .bundle_refused
                .as_ref()
                .filter(|refusal| refusal.digest == digest)
            {
                refused += 1;
                HostRollout::Refused {
                    problem: refusal.problem.clone(),
                }
            } else {
                behind.push(host.host.clone());
                continue;
            };
            if reported.insert(host.host.clone()) {
                progress(&host.host, &state);
            }
        }
        if behind.is_empty() {
            return Ok(RolloutWait::Settled {
                hosts: status.hosts.len(),
                refused,
            });
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(RolloutWait::Behind(behind));
        }
        tokio::time::sleep(DEPLOY_POLL).await;
    }
}
