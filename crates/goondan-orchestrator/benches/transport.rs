//! Routing through the orchestrator and its stdio [`Transport`] with real
//! child processes, and backpressure under a burst.
//!
//! The bench binary re-executes itself as the child (`GOONDAN_BENCH_CHILD`):
//! an echo that answers every event at once, or (`mute`) one that takes
//! events and never answers, so a burst piles up at the orchestrator.
//!
//! It prints:
//! * sequential round trips through one instance: p50 and p99;
//! * throughput with 4 instances busy at once;
//! * a burst of 100,000 events at one mute instance: how many were
//!   refused with `E_QUEUE_FULL`, how many wait, and the peak RSS of this
//!   (the orchestrator's) process before and after.
//!
//! Run: `cargo bench -p goondan-orchestrator --bench transport`.

use goondan_ipc::protocol::{self, Answer, AnswerOutcome, Inbound, Ready, TurnFinished};
use goondan_ipc::{framing, RoutingKey, RuntimeMessage, ORCHESTRATOR, PROTOCOL_VERSION};
use goondan_orchestrator::{
    Ingress, LocalSpawner, Orchestrator, OrchestratorConfig, OrchestratorHandle, SwarmInfo,
};
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BURST: usize = 100_000;
const QUEUE_LIMIT: usize = 1024;

fn main() {
    if std::env::var_os("GOONDAN_BENCH_CHILD").is_some() {
        child();
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (handle, task) = start();
        println!("transport bench: orchestrator + stdio Transport, echo children, current-thread runtime");
        burst(&handle).await;
        for instance in 0..4 {
            ask(&handle, "echo", instance).await.unwrap();
        }
        let mut round_trips = Vec::with_capacity(5000);
        for _ in 0..5000 {
            let started = Instant::now();
            ask(&handle, "echo", 0).await.unwrap();
            round_trips.push(started.elapsed());
        }
        round_trips.sort();
        println!(
            "round trip (1 instance, sequential, {} events): p50 {:.3} ms, p99 {:.3} ms",
            round_trips.len(),
            millis(round_trips[round_trips.len() / 2]),
            millis(round_trips[round_trips.len() * 99 / 100]),
        );
        let n_events = 100_000;
        let in_flight = 2048;
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        let mut failed = 0;
        for round in 0..n_events {
            if tasks.len() >= in_flight {
                if let Some(result) = tasks.join_next().await {
                    if !matches!(result, Ok(Ok(()))) {
                        if failed == 0 {
                            eprintln!("first failure: {result:?}");
                        }
                        failed += 1;
                    }
                }
            }
            let handle = handle.clone();
            tasks.spawn(async move { ask(&handle, "echo", round % 4).await });
        }
        while let Some(result) = tasks.join_next().await {
            failed += usize::from(!matches!(result, Ok(Ok(()))));
        }
        let elapsed = started.elapsed();
        println!(
            "throughput (4 instances, {n_events} events, {in_flight} in flight): {:.0} events/s ({failed} failed)",
            n_events as f64 / elapsed.as_secs_f64()
        );
        handle.shutdown().await.unwrap();
        task.await.unwrap();
    });
}

/// Fires [`BURST`] events at one instance that never answers, one after
/// the other: each is refused at once or accepted (and then left waiting).
async fn burst(handle: &OrchestratorHandle) {
    ask(handle, "echo", 0).await.unwrap();
    let peak_before = peak_rss_kib();
    let started = Instant::now();
    let mut refused = 0;
    let mut accepted = 0;
    for _ in 0..BURST {
        match tokio::time::timeout(Duration::from_millis(2), ask(handle, "mute", 0)).await {
            Ok(Err(code)) => {
                assert_eq!(code, "E_QUEUE_FULL");
                refused += 1;
            }
            Ok(Ok(())) => unreachable!("the mute child never answers"),
            Err(_) => accepted += 1,
        }
    }
    let status = handle.list().await.unwrap();
    let mute = status.iter().find(|s| s.agent_name == "mute").unwrap();
    println!(
        "burst of {BURST} events at one instance (limit {QUEUE_LIMIT}): {refused} refused with E_QUEUE_FULL, {accepted} accepted (queued {}, in flight {}), {:.0} ms",
        mute.pending_events,
        mute.in_flight_events,
        started.elapsed().as_secs_f64() * 1000.0
    );
    println!(
        "orchestrator peak RSS: {peak_before} KiB before the burst, {} KiB after",
        peak_rss_kib()
    );
    handle.delete("mute:i0".into()).await.unwrap();
}

fn start() -> (OrchestratorHandle, tokio::task::JoinHandle<()>) {
    Orchestrator::start(OrchestratorConfig {
        swarm: SwarmInfo {
            swarm_name: "bench".into(),
            entry_agent: "echo".into(),
            agents: vec!["echo".into(), "mute".into()],
            instance_key: "i0".into(),
            grace_period: Duration::from_millis(200),
            max_queued_events: QUEUE_LIMIT,
            processes: Default::default(),
            ingress: Vec::new(),
            cli_connection: None,
            connections: Vec::new(),
            approval_connections: Vec::new(),
        },
        spawner: Arc::new(LocalSpawner {
            program: std::env::current_exe().unwrap(),
            args: Vec::new(),
            connector_args: None,
            env: vec![("GOONDAN_BENCH_CHILD".into(), "1".into())],
            secrets: Arc::new(|_: &goondan_orchestrator::SpawnRequest| {
                goondan_types::Secrets::new()
            }),
            withheld_env: Vec::new(),
            log_file: None,
            current_dir: None,
        }),
        transport: None,
        reconcile_interval: Duration::from_secs(60),
        reset_instance: None,
        crash_ledger: None,
        liveness: Default::default(),
        restart_requests: None,
        remote: None,
        inbox: None,
        pending_approvals: None,
    })
}

async fn ask(handle: &OrchestratorHandle, agent: &str, instance: usize) -> Result<(), String> {
    let mut ingress = Ingress::cli("ping", Some(agent.to_string()));
    ingress.event.instance_key = Some(format!("i{instance}"));
    handle
        .ask(ingress, None)
        .await
        .map(drop)
        .map_err(|error| error.code().to_string())
}

/// The child: answers every event (`echo`) or none (`mute`).
fn child() {
    let args: Vec<String> = std::env::args().collect();
    let value_of = |flag: &str| {
        args.iter()
            .position(|arg| arg == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_default()
    };
    let me = RoutingKey::new(value_of("--agent-name"), value_of("--instance-key"));
    let mute = me.agent_name == "mute";
    let from = me.to_string();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let ready = RuntimeMessage::Ready(Ready {
        protocol_version: PROTOCOL_VERSION,
    });
    out.write_all(&framing::encode(&ready.to_message(&from, ORCHESTRATOR)))
        .unwrap();
    out.flush().unwrap();
    let stdin = std::io::stdin();
    let mut lines = std::io::BufReader::with_capacity(1 << 16, stdin.lock());
    let mut line = String::new();
    // The spawn handshake comes before any message.
    lines.read_line(&mut line).unwrap();
    goondan_ipc::SpawnHandshake::decode(line.trim_end().as_bytes()).unwrap();
    line.clear();
    while lines.read_line(&mut line).unwrap_or(0) > 0 {
        let message = framing::decode(line.trim_end().as_bytes()).unwrap();
        line.clear();
        match protocol::decode(&message) {
            Ok(Inbound::Shutdown(_)) => {
                out.write_all(&framing::encode(&protocol::shutdown_ack_message(
                    &me,
                    ORCHESTRATOR,
                )))
                .unwrap();
                out.flush().unwrap();
                return;
            }
            Ok(Inbound::Event(event)) if !mute => {
                if let Some(reply_to) = &event.reply_to {
                    let answer = Answer {
                        in_reply_to: reply_to.correlation_id.clone(),
                        outcome: AnswerOutcome::Ok {
                            text: Some("pong".into()),
                            finish_reason: None,
                            turn_id: None,
                            usage: None,
                        },
                    };
                    out.write_all(&framing::encode(&protocol::event_message(
                        &from,
                        &reply_to.target,
                        &answer.to_event(&me.agent_name, None),
                    )))
                    .unwrap();
                }
                let finished = RuntimeMessage::TurnFinished(TurnFinished {
                    ok: true,
                    event_id: Some(event.id.clone()),
                });
                out.write_all(&framing::encode(&finished.to_message(&from, ORCHESTRATOR)))
                    .unwrap();
                // Flush only when no more input is already buffered, so a
                // burst is answered in batches.
                if lines.buffer().is_empty() {
                    out.flush().unwrap();
                }
            }
            _ => {}
        }
    }
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
