//! Shared by the benches that drive one real `gdn agent` (the release
//! binary cargo built for them) behind the orchestrator library: its
//! start, with the agent `worker` of the Swarm `default` and the instance
//! key `main`.

use goondan_orchestrator::{
    LocalSpawner, Orchestrator, OrchestratorConfig, OrchestratorHandle, SwarmInfo,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Starts an orchestrator whose only agent, `worker`, runs the bundle at
/// `bundle` with its state under `state_root`; its task ends after
/// `handle.shutdown()`.
pub fn start(
    bundle: &Path,
    state_root: &Path,
) -> (OrchestratorHandle, tokio::task::JoinHandle<()>) {
    let spawner = LocalSpawner {
        program: env!("CARGO_BIN_EXE_gdn").into(),
        args: vec![
            "agent".into(),
            "--bundle-dir".into(),
            bundle.display().to_string(),
            "--swarm".into(),
            "default".into(),
            "--state-root".into(),
            state_root.display().to_string(),
        ],
        connector_args: None,
        env: vec![("GOONDAN_LOG_LEVEL".into(), "warn".into())],
        secrets: Arc::new(|_: &goondan_orchestrator::SpawnRequest| goondan_types::Secrets::new()),
        withheld_env: Vec::new(),
        log_file: None,
        current_dir: None,
    };
    Orchestrator::start(OrchestratorConfig {
        swarm: SwarmInfo {
            swarm_name: "default".into(),
            entry_agent: "worker".into(),
            agents: vec!["worker".into()],
            instance_key: "main".into(),
            grace_period: Duration::from_secs(10),
            max_queued_events: 64,
            processes: Default::default(),
            ingress: Vec::new(),
            cli_connection: None,
            connections: Vec::new(),
            approval_connections: Vec::new(),
        },
        spawner: Arc::new(spawner),
        transport: None,
        reconcile_interval: Duration::from_secs(5),
        reset_instance: None,
        crash_ledger: None,
        liveness: Default::default(),
        restart_requests: None,
        remote: None,
        inbox: None,
        pending_approvals: None,
    })
}
