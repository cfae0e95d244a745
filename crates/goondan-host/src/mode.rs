//! [`HostMode`]: whether this host runs a swarm alone or as a member of a
//! cluster, decided once from `gdn run`'s arguments. Everything that
//! differs between the two is answered by the [`Placement`] a mode joins
//! into: which folder the children load the bundle from, where crash
//! counters live, which instances are served elsewhere, what a reload
//! reads, which Connections run here, and whether the console takes
//! input. The start-up in `start.rs` asks, and never branches on the
//! mode itself.

use crate::cluster::rollout::{self, BundleFollower, HostBundle, PackageInstaller, Rollout};
use crate::cluster::{self, ClusterMode, HostTask, JoinedHost, SingletonConnections};
use crate::project::BundleSource;
use crate::reload::ClusterReload;
use crate::{ledger, HostError, Notices, Project};
use goondan_cluster::crashes::CrashRecords;
use goondan_cluster::Cluster;
use goondan_orchestrator::orchestrator::CrashLedger;
use goondan_orchestrator::{OrchestratorHandle, RemoteInstances, SwarmInfo};
use goondan_store::WorkspacePaths;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::mpsc;

/// How this host runs its swarm.
#[derive(Debug, Clone)]
pub enum HostMode {
    /// Alone: its own bundle, its own files.
    Single,
    /// As a member of the cluster it names (`gdn run --cluster`).
    Cluster(ClusterMode),
}

/// What joining a cluster and serving in it take of `gdn run`'s
/// settings (`HostSettings`), handed in by the start-up, which knows
/// this module and not the other way round.
pub(crate) struct MemberSettings {
    /// `--env-file`, absolute.
    pub(crate) env_file: Option<PathBuf>,
    /// Installs the packages of a bundle this host fetched.
    pub(crate) install_packages: PackageInstaller,
    /// Where notices for the operator go.
    pub(crate) notices: Notices,
}

impl HostMode {
    /// Joins what this mode names, before the orchestrator starts: a
    /// cluster member runs the cluster's bundle (so the project may
    /// change), and the orchestrator must know from its first event which
    /// instances other hosts serve.
    pub(crate) async fn join(
        &self,
        project: Project,
        settings: &MemberSettings,
    ) -> Result<(Project, Placement), HostError> {
        match self {
            HostMode::Single => Ok((project, Placement::Single)),
            HostMode::Cluster(mode) => {
                let (project, member) = Member::join(mode, project, settings).await?;
                Ok((project, Placement::Member(Box::new(member))))
            }
        }
    }
}

/// Where a running swarm stands: alone, or a cluster member that joined.
pub(crate) enum Placement {
    Single,
    Member(Box<Member>),
}

/// A cluster host that joined, before its orchestrator starts.
pub(crate) struct Member {
    mode: ClusterMode,
    cluster: Cluster,
    joined: JoinedHost,
    bundle: HostBundle,
    /// The workspace's crash counters, shared by every host.
    crashes: CrashRecords,
    /// The folder it was started in (its env files).
    local_root: PathBuf,
    connections: Arc<SingletonConnections>,
}

impl Member {
    /// Connects to the cluster of `mode`, settles which bundle this host
    /// runs (see `rollout`) and joins.
    async fn join(
        mode: &ClusterMode,
        project: Project,
        settings: &MemberSettings,
    ) -> Result<(Project, Member), HostError> {
        let cluster = mode.connect().await?;
        cluster::ensure_layout(&cluster).await?;
        let local_root = project.bundle.root().to_path_buf();
        let source = BundleSource {
            config: rollout::link_of(&project),
            env_file: settings.env_file.clone(),
        };
        let (project, bundle) = rollout::adopt(
            &cluster,
            mode,
            project,
            &source,
            &settings.install_packages,
            &settings.notices,
        )
        .await?;
        // Read before the first instance starts: one that crashed
        // elsewhere keeps backing off here.
        let crashes = CrashRecords::follow(&cluster, &mode.workspace_id).await?;
        let joined = cluster::join(mode, cluster.clone(), &bundle.digest).await?;
        let member = Member {
            mode: mode.clone(),
            cluster,
            joined,
            bundle,
            crashes,
            local_root,
            connections: Arc::new(SingletonConnections::default()),
        };
        Ok((project, member))
    }
}

/// What a cluster member tells its operator once it serves.
#[derive(Debug, Clone)]
pub struct Membership {
    /// This host's id.
    pub host_id: String,
    /// The servers.
    pub urls: String,
    /// The swarm's workspace in the cluster.
    pub workspace_id: String,
    /// The bundle it runs.
    pub digest: String,
}

impl Placement {
    /// The folder every child (`gdn agent`, `gdn connector`) loads its
    /// bundle from and runs in: a cluster host's link follows rollouts.
    pub(crate) fn bundle_dir(&self, project: &Project) -> PathBuf {
        match self {
            Placement::Single => project.bundle.root().to_path_buf(),
            Placement::Member(member) => member.bundle.link.clone(),
        }
    }

    /// What a reload reads: what `--config` named (a folder or one file)
    /// on a single host, the link to the bundle it runs on a cluster host.
    pub(crate) fn reload_config(&self, config: &Path) -> PathBuf {
        match self {
            Placement::Single => config.to_path_buf(),
            Placement::Member(member) => member.bundle.link.clone(),
        }
    }

    /// Where crash counters and backoff deadlines live.
    pub(crate) fn crash_ledger(&self, workspace: &WorkspacePaths) -> CrashLedger {
        match self {
            Placement::Single => ledger::local(workspace),
            Placement::Member(member) => ledger::cluster(workspace, member.crashes.clone()),
        }
    }

    /// The instances served elsewhere, if any can be.
    pub(crate) fn remote(&self) -> Option<Arc<dyn RemoteInstances>> {
        match self {
            Placement::Single => None,
            Placement::Member(member) => Some(member.joined.remote()),
        }
    }

    /// What the children's environment needs beyond the workspace scope.
    pub(crate) fn child_env(&self) -> Vec<(String, String)> {
        match self {
            Placement::Single => Vec::new(),
            Placement::Member(member) => member.mode.agent_env(),
        }
    }

    /// `info` with the Connections this host runs: a cluster host starts
    /// with those every host runs; the others follow the ownership of one
    /// shard.
    pub(crate) fn select(&self, project: &Project, info: SwarmInfo) -> SwarmInfo {
        match self {
            Placement::Single => info,
            Placement::Member(member) => member.connections.select(project, info),
        }
    }

    /// What a cluster host's reloads need, with the channel rollouts come
    /// through; `None` on a single host.
    pub(crate) fn cluster_reload(&self) -> (Option<ClusterReload>, Option<mpsc::Sender<Rollout>>) {
        match self {
            Placement::Single => (None, None),
            Placement::Member(member) => {
                let (rollouts, rollouts_rx) = mpsc::channel(1);
                let reload = ClusterReload {
                    link: member.bundle.link.clone(),
                    connections: Arc::clone(&member.connections),
                    rollouts: rollouts_rx,
                };
                (Some(reload), Some(rollouts))
            }
        }
    }

    /// Starts serving: a cluster host pulls its shards' inboxes through
    /// `handle` and follows rollouts into `rollouts`; a single host has
    /// nothing more to start.
    pub(crate) fn serve(
        self,
        handle: &OrchestratorHandle,
        rollouts: Option<mpsc::Sender<Rollout>>,
        settings: &MemberSettings,
    ) -> Option<(HostTask, Membership)> {
        let (Placement::Member(member), Some(rollouts)) = (self, rollouts) else {
            return None;
        };
        let member = *member;
        let membership = Membership {
            host_id: member.mode.host_id.clone(),
            urls: member.mode.urls.to_string(),
            workspace_id: member.mode.workspace_id.clone(),
            digest: member.bundle.digest.clone(),
        };
        let follower = BundleFollower::new(
            member.cluster,
            &member.mode,
            member.bundle,
            member.local_root,
            rollouts,
            Arc::clone(&settings.install_packages),
            Arc::clone(&settings.notices),
        );
        let task = member
            .joined
            .serve(handle.clone(), member.connections, follower);
        Some((task, membership))
    }
}
