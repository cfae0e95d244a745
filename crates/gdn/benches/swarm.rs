//! Swarm benchmark: real `gdn agent` processes behind the orchestrator
//! library, on a zero-latency `scripted` model.
//!
//! For 1, 10, 100 and 200 live instances it prints:
//! * cold answer: spawn + start-up handshake + one Turn of a new instance;
//! * idle RSS of each AgentProcess (from `/proc/<pid>/status`);
//! * routing latency of a warm request/answer round trip (p50, p99);
//! * throughput with every instance busy at once.
//!
//! Run: `cargo bench -p gdn --bench swarm` (add `-- 1 10` to pick sizes).

use goondan_ipc::RoutingKey;
use goondan_orchestrator::{
    LocalSpawner, Orchestrator, OrchestratorConfig, OrchestratorHandle, SwarmInfo,
};
use goondan_types::{AgentEvent, EventSource, EventSourceKind};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const BUNDLE: &str = r#"apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: swarm-bench
spec:
  version: "0.1.0"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: instant
spec:
  provider: scripted
  model: instant
  options:
    rulesFile: rules.yaml
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
"#;

const RULES: &str = "rules:\n  - name: pong\n    reply:\n      text: pong\n";

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|arg| arg.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1, 10, 100, 200]
    } else {
        sizes
    };
    let work = tempfile::tempdir().expect("temp dir");
    let bundle = work.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(bundle.join("goondan.yaml"), BUNDLE).unwrap();
    std::fs::write(bundle.join("rules.yaml"), RULES).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("swarm bench: real `gdn agent` processes, scripted zero-latency model");
    println!(
        "{:>9} {:>14} {:>14} {:>12} {:>12} {:>12} {:>14}",
        "instances",
        "cold p50 ms",
        "idle RSS KiB",
        "RSS max KiB",
        "route p50 ms",
        "route p99 ms",
        "throughput/s"
    );
    for size in sizes {
        let state_root = work.path().join(format!("state-{size}"));
        runtime.block_on(measure(&bundle, &state_root, size));
    }
}

async fn measure(bundle: &Path, state_root: &Path, n_instances: usize) {
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
    let (handle, task) = Orchestrator::start(OrchestratorConfig {
        swarm: SwarmInfo {
            swarm_name: "default".into(),
            entry_agent: "echo".into(),
            agents: vec!["echo".into()],
            instance_key: "i0".into(),
            grace_period: Duration::from_secs(10),
            max_queued_events: 4096,
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
    });

    let mut cold = Vec::with_capacity(n_instances);
    for index in 0..n_instances {
        let started = Instant::now();
        ask(&handle, index).await;
        cold.push(started.elapsed());
    }

    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss: Vec<u64> = handle
        .list()
        .await
        .unwrap()
        .iter()
        .filter_map(|status| status.pid)
        .filter_map(rss_kib)
        .collect();

    let n_route = 400.max(n_instances);
    let mut route = Vec::with_capacity(n_route);
    for round in 0..n_route {
        let started = Instant::now();
        ask(&handle, round % n_instances).await;
        route.push(started.elapsed());
    }

    let n_parallel = 4 * n_instances.max(50);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for round in 0..n_parallel {
        let handle = handle.clone();
        tasks.spawn(async move { ask(&handle, round % n_instances).await });
    }
    while tasks.join_next().await.is_some() {}
    let throughput = n_parallel as f64 / started.elapsed().as_secs_f64();

    handle.shutdown().await.unwrap();
    task.await.unwrap();

    let mean_rss = rss.iter().sum::<u64>() / rss.len().max(1) as u64;
    println!(
        "{:>9} {:>14.2} {:>14} {:>12} {:>12.3} {:>12.3} {:>14.0}",
        n_instances,
        millis(percentile(&mut cold, 50.0)),
        mean_rss,
        rss.iter().max().copied().unwrap_or(0),
        millis(percentile(&mut route, 50.0)),
        millis(percentile(&mut route, 99.0)),
        throughput
    );
}

async fn ask(handle: &OrchestratorHandle, index: usize) {
    let mut event = AgentEvent::new(
        "user_message",
        EventSource::new(EventSourceKind::Connector, "bench"),
    );
    event.input = Some("ping".into());
    event.instance_key = Some(format!("i{index}"));
    let answer = async {
        handle
            .enqueue_request(Some("echo".into()), event)
            .await?
            .answer()
            .await
    }
    .await
    .unwrap_or_else(|error| {
        panic!(
            "request to {} failed: {error}",
            RoutingKey::new("echo", format!("i{index}"))
        )
    });
    assert_eq!(answer.input.as_deref(), Some("pong"));
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let rank = ((p / 100.0) * (samples.len() as f64 - 1.0)).round() as usize;
    samples[rank.min(samples.len() - 1)]
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
