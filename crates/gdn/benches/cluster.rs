//! Cluster benchmark: three real NATS servers (JetStream, R3) and three
//! `gdn run --cluster` hosts with separate System Roots on this machine,
//! a zero-latency `scripted` model.
//!
//! Prints:
//! * one input through the cluster, from a new `gdn run --cluster
//!   --input` process to its printed answer (cold instance, warm
//!   instance), p50/p90;
//! * events/s: inputs published straight to the inboxes of many instances
//!   at once, until every answer arrived;
//! * a rollout: `gdn cluster deploy` of a changed bundle until every host
//!   runs it, and the first answer from it;
//! * handoff on drain: SIGTERM to a host until every shard is owned by the
//!   others again;
//! * handoff on crash: SIGKILL of a host until an input for an instance it
//!   owned is answered by another host.
//!
//! Needs `nats-server` (2.11+) on the `PATH` or in `GOONDAN_NATS_SERVER`.
//! Run: `cargo bench -p gdn --bench cluster` (`-- 300 30`: the number of
//! inputs of the throughput run, and over how many instances).

use futures_util::StreamExt;
use goondan_cluster::inbox::{self, Envelope};
use goondan_cluster::subject::InstanceAddress;
use goondan_cluster::testing::NatsCluster;
use goondan_types::placement::rendezvous_owner;
use goondan_types::{AgentEvent, EventSource, EventSourceKind};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BUNDLE: &str = r#"apiVersion: goondan.ai/v1
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
const HOSTS: [&str; 3] = ["bench-a", "bench-b", "bench-c"];

struct Bench {
    nats: NatsCluster,
    bundle: tempfile::TempDir,
    hosts: Vec<(String, Option<Child>, tempfile::TempDir)>,
}

impl Drop for Bench {
    fn drop(&mut self) {
        for (_, child, _) in &mut self.hosts {
            if let Some(mut child) = child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Bench {
    fn gdn(&self, state: &Path, args: &[&str]) -> Command {
        self.gdn_in(self.bundle.path(), state, args)
    }

    /// [`Bench::gdn`] with the bundle at `bundle`.
    fn gdn_in(&self, bundle: &Path, state: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gdn"));
        command
            .arg("--config")
            .arg(bundle)
            .arg("--state-root")
            .arg(state)
            .args(args)
            .env("GOONDAN_CLUSTER", self.nats.urls())
            .env("GOONDAN_CLUSTER_REPLICAS", "3")
            .stdin(Stdio::null());
        command
    }

    fn status(&self) -> Value {
        let state = tempfile::tempdir().unwrap();
        let output = self
            .gdn(state.path(), &["--json", "cluster", "status"])
            .output()
            .unwrap();
        serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
    }

    /// Polls `gdn cluster status` until `hosts` hosts own every shard.
    fn wait_for_hosts(&self, hosts: usize) {
        let started = Instant::now();
        loop {
            let status = self.status();
            let live = status["hosts"].as_array().map_or(0, Vec::len);
            let owned = status["shards"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|shard| !shard["lease"].is_null())
                .count();
            if live == hosts && owned == 128 {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "hosts did not settle: {status}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// One input through the cluster from a new process: how long until
    /// it exited, and the answer it printed.
    fn ask(&self, text: &str, key: &str) -> (Duration, String) {
        let state = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let output = self
            .gdn(
                state.path(),
                &["run", "--input", text, "--instance-key", key],
            )
            .output()
            .unwrap();
        let took = started.elapsed();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        (took, String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn host_index(&self, host: &str) -> usize {
        self.hosts.iter().position(|(id, _, _)| id == host).unwrap()
    }
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

fn event(text: &str, key: &str) -> AgentEvent {
    let mut event = AgentEvent::new(
        "user_message",
        EventSource::new(EventSourceKind::Connector, "bench"),
    );
    event.input = Some(text.to_string());
    event.instance_key = Some(key.to_string());
    event
}

fn main() {
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|arg| arg.parse().ok())
        .collect();
    let inputs = numbers.first().copied().unwrap_or(300);
    let keys = numbers.get(1).copied().unwrap_or(30);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some(nats) = runtime.block_on(NatsCluster::start(3)) else {
        eprintln!("no nats-server: nothing measured");
        return;
    };
    let bundle = tempfile::tempdir().unwrap();
    std::fs::write(bundle.path().join("goondan.yaml"), BUNDLE).unwrap();
    std::fs::write(bundle.path().join("rules.yaml"), RULES).unwrap();
    let mut bench = Bench {
        nats,
        bundle,
        hosts: Vec::new(),
    };
    let started = Instant::now();
    for host in HOSTS {
        let state = tempfile::tempdir().unwrap();
        // Each host's log, kept for a look when a number surprises.
        let log = std::env::temp_dir().join(format!("gdn-bench-{host}.log"));
        let child = bench
            .gdn(state.path(), &["run", "--host-id", host])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        bench.hosts.push((host.to_string(), Some(child), state));
    }
    bench.wait_for_hosts(HOSTS.len());
    println!(
        "3 hosts joined, every shard owned: {}",
        ms(started.elapsed())
    );

    let mut cold: Vec<Duration> = (0..10)
        .map(|i| bench.ask("ping", &format!("cold-{i}")).0)
        .collect();
    let mut warm: Vec<Duration> = (0..20).map(|_| bench.ask("ping", "cold-0").0).collect();
    println!(
        "gdn run --cluster --input, cold instance: p50 {} p90 {}",
        ms(percentile(&mut cold, 0.5)),
        ms(percentile(&mut cold, 0.9))
    );
    println!(
        "gdn run --cluster --input, warm instance: p50 {} p90 {}",
        ms(percentile(&mut warm, 0.5)),
        ms(percentile(&mut warm, 0.9))
    );

    // Throughput: many instances at once, straight into the inboxes.
    let workspace = goondan_store::paths::workspace_id("default");
    let elapsed = runtime.block_on(async {
        let cluster = bench.nats.connect().await;
        let reply_subject = "gdn.reply.bench";
        let mut replies = cluster.client().subscribe(reply_subject).await.unwrap();
        let started = Instant::now();
        // Sent all at once, as many senders would: the figure is what
        // the hosts do, not one sender's round trips.
        let envelopes: Vec<Envelope> = (0..inputs)
            .map(|i| {
                let key = format!("tp-{}", i % keys);
                let event = event("ping", &key);
                Envelope {
                    id: event.id.clone(),
                    address: InstanceAddress::new(&workspace, "echo", &key),
                    event,
                    reply_to: Some(reply_subject.to_string()),
                }
            })
            .collect();
        let sends = envelopes
            .iter()
            .map(|envelope| inbox::send(&cluster, envelope));
        for receipt in futures_util::future::join_all(sends).await {
            receipt.unwrap();
        }
        let sent = started.elapsed();
        for _ in 0..inputs {
            tokio::time::timeout(Duration::from_secs(120), replies.next())
                .await
                .expect("every answer within 2 minutes")
                .unwrap();
        }
        (sent, started.elapsed())
    });
    let (sent, elapsed) = elapsed;
    println!(
        "throughput: {inputs} inputs over {keys} instances on 3 hosts (sent in {}) answered in {} = {:.0} events/s",
        ms(sent),
        ms(elapsed),
        inputs as f64 / elapsed.as_secs_f64()
    );

    // A rollout: a changed bundle, deployed, until every host runs it.
    let v2 = tempfile::tempdir().unwrap();
    std::fs::write(v2.path().join("goondan.yaml"), BUNDLE).unwrap();
    std::fs::write(
        v2.path().join("rules.yaml"),
        RULES.replace("pong", "pong v2"),
    )
    .unwrap();
    let deployer = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let output = bench
        .gdn_in(v2.path(), deployer.path(), &["cluster", "deploy"])
        .output()
        .unwrap();
    let deployed = started.elapsed();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (_, answer) = bench.ask("ping", "cold-1");
    let first_answer = started.elapsed();
    assert!(answer.contains("pong v2"), "{answer}");
    println!(
        "rollout: gdn cluster deploy until 3 hosts run the new bundle {}, its first answer at {}",
        ms(deployed),
        ms(first_answer)
    );

    // Handoff on drain: SIGTERM one host until the others own every shard.
    let drained = bench.host_index("bench-b");
    let started = Instant::now();
    let pid = bench.hosts[drained].1.as_ref().unwrap().id() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    bench.wait_for_hosts(2);
    println!(
        "handoff on drain (SIGTERM to every shard owned by the others): {}",
        ms(started.elapsed())
    );
    let _ = bench.hosts[drained].1.take().unwrap().wait();

    // Handoff on crash: SIGKILL a host, then ask an instance it owned.
    let victim = "bench-c";
    let key = (0..)
        .map(|i| format!("crash-{i}"))
        .find(|key| {
            let shard = InstanceAddress::new(&workspace, "echo", key).shard();
            rendezvous_owner(shard, ["bench-a", "bench-c"]) == Some(victim)
        })
        .unwrap();
    bench.ask("ping", &key);
    let index = bench.host_index(victim);
    let mut child = bench.hosts[index].1.take().unwrap();
    let started = Instant::now();
    let _ = child.kill();
    let _ = child.wait();
    let (answered, _) = bench.ask("ping", &key);
    println!(
        "handoff on crash (SIGKILL to the next answer of an instance it owned): {} (the input itself: {})",
        ms(started.elapsed()),
        ms(answered)
    );
}
