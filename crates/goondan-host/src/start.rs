//! [`start`]: the straight line from a loaded project and the workspace's
//! start lock to a running swarm (the System Root laid out, a cluster
//! joined when the mode says so, the orchestrator and its children, the
//! control socket, the active record, the reloader), and
//! [`RunningSwarm::stop`], which takes it down in order.

use crate::cluster::rollout::PackageInstaller;
use crate::lock::Claim;
use crate::mode::{MemberSettings, Membership, Placement};
use crate::project::{swarm_info, BundleSource};
use crate::{reload, HostError, HostMode, Notices, Project};
use goondan_ipc::RoutingKey;
use goondan_orchestrator::control::{ControlIdentity, ControlServer};
use goondan_orchestrator::ingress::{self, Ingress};
use goondan_orchestrator::orchestrator::{Liveness, PendingApprovals, ResetInstance};
use goondan_orchestrator::{
    LocalSpawner, LogFileFor, Orchestrator, OrchestratorConfig, OrchestratorHandle, SpawnRequest,
};
use goondan_store::paths::BUNDLE_SCOPE_ENV;
use goondan_store::{
    ActiveSwarm, InboxStore, InstanceStore, SyncPolicy, WorkspaceIdentity, WorkspacePaths,
};
use goondan_types::ConnectorEvent;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How to run a swarm, as `gdn run` was told.
pub struct HostSettings {
    /// What `--config` named (a folder or one file): what a single host
    /// reloads.
    pub config: PathBuf,
    /// `--env-file`, absolute.
    pub env_file: Option<PathBuf>,
    /// `--record`, absolute: where agents record their model calls.
    pub record: Option<PathBuf>,
    /// The Model every agent runs with instead of its own (`gdn eval
    /// --models`); `None`: each agent's.
    pub use_model: Option<String>,
    /// A cassette, absolute, every agent answers from instead of its
    /// provider (`gdn eval --replay`).
    pub replay: Option<PathBuf>,
    /// `--watch`: reload on every edit of the bundle's files.
    pub watch: bool,
    /// Alone or as a cluster member.
    pub mode: HostMode,
    /// The executable children run (`gdn agent …`, `gdn connector …`).
    pub program: PathBuf,
    /// Installs the packages of a bundle a cluster host fetched.
    pub install_packages: PackageInstaller,
    /// Where notices for the operator go.
    pub notices: Notices,
}

/// A swarm running on this host. Stop it with [`RunningSwarm::stop`].
pub struct RunningSwarm {
    handle: OrchestratorHandle,
    orchestrator: Option<JoinHandle<()>>,
    project: Project,
    stop_control: oneshot::Sender<()>,
    control_server: JoinHandle<()>,
    reloader: JoinHandle<()>,
    member: Option<(crate::cluster::HostTask, Membership)>,
    active: PathBuf,
    /// The workspace's start lock, held for the swarm's whole life.
    _lock: std::fs::File,
}

/// Starts the swarm of `project` on this host, holding the workspace's
/// start lock (`claim`, which must be [`Claim::Won`]) until it stops; its
/// control socket is `socket`.
pub async fn start(
    project: Project,
    settings: HostSettings,
    claim: Claim,
    socket: PathBuf,
) -> Result<RunningSwarm, HostError> {
    let Claim::Won(lock) = claim else {
        return Err(HostError::OrchestratorStart {
            what: "this workspace's orchestrator is already running".into(),
            logs: project.workspace().runtime_logs_dir(),
        });
    };
    raise_open_file_limit();
    // The System Root's own layout (workspace.md §2.3: `config.json`,
    // `packages/`, `workspaces/`, `runtime/`), as tools that read a
    // Goondan state root expect it; existing files are kept.
    // Refused here, not by every agent process as it starts (which would
    // crash-loop them all behind an orchestrator that said it started).
    project
        .state_root
        .ensure_outside_project(project.bundle.root())?;
    project.state_root.initialize()?;
    let member_settings = MemberSettings {
        env_file: settings.env_file.clone(),
        install_packages: Arc::clone(&settings.install_packages),
        notices: Arc::clone(&settings.notices),
    };
    let (project, placement) = settings.mode.join(project, &member_settings).await?;
    let info = placement.select(&project, swarm_info(&project)?);
    let workspace = project.workspace();
    let child_secrets = crate::secrets::ChildSecrets::new(&project.bundle);
    let spawner = spawner(&project, &settings, &placement, &child_secrets)?;
    let (restart_requests, restart_requests_rx) =
        tokio::sync::mpsc::channel(reload::RESTART_REQUEST_CAPACITY);
    let (handle, orchestrator) = Orchestrator::start(OrchestratorConfig {
        swarm: info,
        spawner: Arc::new(spawner),
        transport: None,
        reconcile_interval: Duration::from_secs(5),
        reset_instance: Some(reset_instance(&workspace)),
        crash_ledger: Some(placement.crash_ledger(&workspace)),
        liveness: Liveness::from_env(),
        restart_requests: Some(restart_requests),
        remote: placement.remote(),
        inbox: Some(Arc::new(InboxStore::new(workspace.clone(), durability()))),
        pending_approvals: Some(pending_approvals(&workspace)),
    });
    // Started once the swarm runs, so the first edit or restart request
    // has something to restart, and before the control socket accepts,
    // so a client that reached the socket knows every later edit is seen;
    // stopped before the swarm drains.
    let (cluster_reload, rollouts) = placement.cluster_reload();
    let source = BundleSource {
        config: placement.reload_config(&settings.config),
        env_file: settings.env_file.clone(),
    };
    let reloader = match reload::start(
        reload::Running {
            handle: handle.clone(),
            child_secrets,
        },
        &project,
        source,
        settings.watch,
        restart_requests_rx,
        cluster_reload,
        Arc::clone(&settings.notices),
    ) {
        Ok(reloader) => reloader,
        Err(error) => {
            handle.shutdown().await.ok();
            return Err(HostError::Io {
                what: "watching the bundle's files".into(),
                source: std::io::Error::other(error),
            });
        }
    };
    let identity = ControlIdentity {
        workspace_id: Some(workspace.workspace_id().to_string()),
        bundle_dir: Some(project.bundle.root().to_path_buf()),
    };
    // Forks and rewinds asked over the socket are written as the agents
    // write: with the durability they run with.
    let instances = InstanceStore::new(workspace.clone()).with_sync_policy(durability());
    let server = match ControlServer::bind(socket.clone(), identity, instances) {
        Ok(server) => server,
        Err(error) => {
            reloader.abort();
            handle.shutdown().await.ok();
            return Err(error.into());
        }
    };
    let (stop_control, control_stopped) = oneshot::channel::<()>();
    let control_server = tokio::spawn(server.run(handle.clone(), async {
        let _ = control_stopped.await;
    }));
    let active = write_active(&project, &workspace, &socket)?;
    let member = placement.serve(&handle, rollouts, &member_settings);
    Ok(RunningSwarm {
        handle,
        orchestrator: Some(orchestrator),
        project,
        stop_control,
        control_server,
        reloader,
        member,
        active,
        _lock: lock,
    })
}

impl RunningSwarm {
    /// Starts the process a console's first line will go to ahead of that
    /// line, when the Swarm's `policy.processes.warmEntry` allows (the
    /// default), so the line does not wait for a process to start. The
    /// process is picked as the line will be routed: by the cli
    /// Connection's ingress rules (a rule's `agentRef` and fixed
    /// `instanceKey` win over `instance_key`, the console's
    /// `--instance-key`), else the entry agent of `instance_key` or the
    /// swarm's own instance. A console of a single host only: a cluster
    /// host's input comes through the cluster.
    pub async fn warm_entry(&self, instance_key: Option<&str>) {
        let Some(swarm) = self.project.bundle.swarm(&self.project.swarm_name) else {
            return;
        };
        if !swarm.warm_entry() || !self.takes_console_input() {
            return;
        }
        // Rules match on the event's name and properties, never on its
        // text, so an empty line routes as the first real one will.
        let mut line = ConnectorEvent::text(ingress::CLI_EVENT, "");
        line.instance_key = instance_key.map(str::to_string);
        let routed = ingress::route(&self.handle.swarm(), &Ingress::cli_event(line, None));
        // A line no rule takes is refused when it is typed; nothing to warm.
        if let Ok((key, _)) = routed {
            // Only fails when the orchestrator already stopped.
            let _ = self.handle.warm(key).await;
        }
    }

    /// The orchestrator: what the console asks and enqueues through.
    pub fn handle(&self) -> &OrchestratorHandle {
        &self.handle
    }

    /// The project it runs (a cluster member's is the cluster's bundle).
    pub fn project(&self) -> &Project {
        &self.project
    }

    /// Where this host stands in its cluster; `None` on a single host.
    pub fn membership(&self) -> Option<&Membership> {
        self.member.as_ref().map(|(_, membership)| membership)
    }

    /// Whether a console here may give input: a cluster host serves its
    /// shards, and its input comes through the cluster.
    pub fn takes_console_input(&self) -> bool {
        self.member.is_none()
    }

    /// Resolves when the orchestrator stopped by itself (a `shutdown` on
    /// the control socket).
    pub async fn stopped(&mut self) {
        match &mut self.orchestrator {
            Some(task) => {
                let _ = task.await;
                self.orchestrator = None;
            }
            None => std::future::pending().await,
        }
    }

    /// Stops the swarm. The socket goes first, so no new request arrives.
    /// With `drain_at_once` (a signal) the agents stop at once within
    /// their grace period; otherwise the requests other `gdn run`s
    /// attached with are answered before the agents stop. A cluster host
    /// stops pulling and lets the Turns in flight answer before the
    /// agents stop; its leases go last.
    pub async fn stop(self, drain_at_once: bool) {
        self.reloader.abort();
        let _ = self.stop_control.send(());
        if let Some((member, _)) = self.member {
            member.drain().await;
        }
        if drain_at_once {
            self.handle.shutdown().await.ok();
            let _ = self.control_server.await;
        } else {
            let _ = self.control_server.await;
            self.handle.shutdown().await.ok();
        }
        ActiveSwarm::remove_if_owned_by(&self.active, std::process::id());
    }
}

/// How the orchestrator starts children: the same executable in its
/// hidden `agent` and `connector` modes, in the bundle's folder, each
/// process's stderr in its own log file, every secret withheld from the
/// environment and handed over in the spawn handshake.
fn spawner(
    project: &Project,
    settings: &HostSettings,
    placement: &Placement,
    child_secrets: &crate::secrets::ChildSecrets,
) -> Result<LocalSpawner, HostError> {
    let bundle_dir = placement.bundle_dir(project);
    let absolute = |path: &Path| {
        std::path::absolute(path)
            .map(|path| path.display().to_string())
            .map_err(HostError::io(format!("resolving {}", path.display())))
    };
    let mut bundle_args: Vec<String> = vec![
        "--bundle-dir".into(),
        bundle_dir.display().to_string(),
        // Absolute: the children run in the bundle root, not here. Both
        // kinds of child read installed packages from it.
        "--state-root".into(),
        absolute(project.state_root.path())?,
    ];
    if let Some(env_file) = &settings.env_file {
        bundle_args.extend(["--env-file".into(), absolute(env_file)?]);
    }
    let connector_args: Vec<String> = std::iter::once("connector".to_string())
        .chain(bundle_args.iter().cloned())
        .collect();
    let mut agent_args: Vec<String> = std::iter::once("agent".to_string())
        .chain(bundle_args)
        .collect();
    agent_args.extend(["--swarm".into(), project.swarm_name.clone()]);
    if let Some(record) = &settings.record {
        agent_args.extend(["--record".into(), absolute(record)?]);
    }
    if let Some(model) = &settings.use_model {
        agent_args.extend(["--use-model".into(), model.clone()]);
    }
    if let Some(cassette) = &settings.replay {
        agent_args.extend(["--replay".into(), absolute(cassette)?]);
    }
    let log_workspace = project.workspace();
    let log_file: LogFileFor = Arc::new(move |request: &SpawnRequest| {
        let process = match request {
            SpawnRequest::Agent { key, .. } => format!("{}-{}", key.agent_name, key.instance_key),
            SpawnRequest::Connector { connection } => format!("connection-{connection}"),
        };
        log_workspace.runtime_log_file(&process, "stderr")
    });
    // Agents open the workspace this orchestrator chose: the scope names
    // the bundle, which `gdn agent` does not hash again.
    let mut env = project
        .state_root
        .bundle_scope()
        .map(|scope| vec![(BUNDLE_SCOPE_ENV.to_string(), scope.to_string())])
        .unwrap_or_default();
    env.extend(placement.child_env());
    // Keys reach agents in the spawn handshake, never through their
    // environment (which every tool they run would inherit) or argv.
    goondan_types::secret::mask_in_logs(&crate::secrets::all(&project.bundle));
    Ok(LocalSpawner {
        program: settings.program.clone(),
        args: agent_args,
        connector_args: Some(connector_args),
        env,
        secrets: child_secrets.spawner_view(),
        withheld_env: crate::secrets::withheld(&project.bundle),
        log_file: Some(log_file),
        current_dir: Some(bundle_dir),
    })
}

/// Every approval request of the workspace still waiting, for a chat
/// connector that starts; a file that cannot be read is logged and the
/// others are still posted.
fn pending_approvals(workspace: &WorkspacePaths) -> PendingApprovals {
    let workspace = workspace.clone();
    Arc::new(
        move || match goondan_store::workspace_approvals(&workspace) {
            Ok(found) => {
                for error in &found.unreadable {
                    tracing::warn!(
                        code = error.code(),
                        "an approvals file could not be read: {error}"
                    );
                }
                found.requests
            }
            Err(error) => {
                tracing::warn!(
                    code = error.code(),
                    "the instances' approvals could not be listed: {error}"
                );
                Vec::new()
            }
        },
    )
}

/// How hard the inbox flushes: `GOONDAN_DURABILITY`, as the agents read
/// it (an unknown value is the default, `turn-commit`: the agents refuse
/// to start with it and say why).
fn durability() -> SyncPolicy {
    std::env::var("GOONDAN_DURABILITY")
        .ok()
        .and_then(|text| goondan_agent::assemble::parse_sync_policy(&text).ok())
        .unwrap_or_default()
}

/// What `gdn restart --fresh` asks: an instance's history cleared.
fn reset_instance(workspace: &WorkspacePaths) -> ResetInstance {
    let store = InstanceStore::new(workspace.clone());
    Arc::new(move |key: &RoutingKey| {
        if let Err(error) = store.reset_messages(&key.agent_name, &key.instance_key) {
            tracing::warn!(key = %key, code = error.code(), "could not clear history: {error}");
        }
    })
}

/// Records this orchestrator in `runtime/active/<workspaceId>.json`;
/// returns its path.
fn write_active(
    project: &Project,
    workspace: &WorkspacePaths,
    socket: &Path,
) -> Result<PathBuf, HostError> {
    let path = workspace.active_file();
    let record = ActiveSwarm {
        pid: std::process::id(),
        bundle_dir: project.bundle.root().to_path_buf(),
        swarm: project.swarm_name.clone(),
        instance_key: project.instance_key.clone(),
        started_at: goondan_types::now_iso(),
        control_socket: socket.to_path_buf(),
    };
    record.write(&path)?;
    // Names the workspace after this orchestrator stops too (the
    // Studio's swarm list); a failure costs only that name.
    let identity = WorkspaceIdentity {
        package: project
            .bundle
            .package()
            .map(|package| package.metadata.name.clone()),
        swarm: project.swarm_name.clone(),
        bundle_dir: project.bundle.root().to_path_buf(),
    };
    if let Err(error) = identity.write(&workspace.identity_file()) {
        tracing::warn!(
            code = error.code(),
            "could not record the workspace's name: {error}"
        );
    }
    Ok(path)
}

/// Lifts the soft limit on open files to the hard limit. The orchestrator
/// holds two pipes per AgentProcess, so the common default soft limit of
/// 1024 would cap a swarm at a few hundred live instances.
#[cfg(unix)]
fn raise_open_file_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    // macOS reports an unlimited hard limit but refuses a soft limit above
    // OPEN_MAX (10240).
    #[cfg(target_os = "macos")]
    let wanted = hard.min(10_240);
    #[cfg(not(target_os = "macos"))]
    let wanted = hard;
    if soft < wanted && setrlimit(Resource::RLIMIT_NOFILE, wanted, hard).is_err() {
        tracing::warn!(
            "could not raise the open-file limit; large swarms may run out of file descriptors"
        );
    }
}

/// Without `setrlimit` the process keeps the limit it was started with.
#[cfg(not(unix))]
fn raise_open_file_limit() {}
