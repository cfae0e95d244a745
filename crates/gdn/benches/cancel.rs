//! Cancel benchmark (issue 36; target: cancel → Turn closed p50 under
//! 200 ms): a real `gdn agent` process behind the orchestrator library
//! runs Turns blocked in a `bash__exec` that sleeps (a `scripted` model
//! asks for it), and an operator's cancel
//! (`OrchestratorHandle::cancel_running`, what `gdn instance cancel`
//! sends over the control socket) stops each one.
//!
//! It prints, over the rounds, the time from the cancel to the Turn being
//! over (its dangling call closed, its events committed, `TurnFinished`
//! received), and to the requester's `E_TURN_CANCELLED` answer, p50 and
//! p99.
//!
//! Run: `cargo bench -p gdn --bench cancel` (add `-- 50` for more rounds).

mod one_agent;

use goondan_types::{AgentEvent, EventSource, EventSourceKind};
use std::time::{Duration, Instant};

const BUNDLE: &str = r#"apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: cancel-bench
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
  name: worker
spec:
  modelConfig:
    modelRef: Model/instant
  tools:
    - ref: Tool/bash
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/worker
  agents:
    - ref: Agent/worker
"#;

/// The command each Turn blocks in; its argument is unusual, so the bench
/// finds its own processes.
const COMMAND: &str = "sleep 41.75";

fn rules() -> String {
    format!(
        "rules:\n  - name: done\n    when:\n      toolResult: \"\"\n    reply:\n      text: done\n  - name: block\n    when:\n      user: block\n    reply:\n      toolCalls:\n        - name: bash__exec\n          args:\n            command: \"{COMMAND}\"\n"
    )
}

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(20);
    let work = tempfile::tempdir().expect("temp dir");
    let bundle = work.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(bundle.join("goondan.yaml"), BUNDLE).unwrap();
    std::fs::write(bundle.join("rules.yaml"), rules()).unwrap();
    let state_root = work.path().join("state");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(measure(&bundle, &state_root, rounds));
}

async fn measure(bundle: &std::path::Path, state_root: &std::path::Path, rounds: usize) {
    let (handle, task) = one_agent::start(bundle, state_root);
    let words: Vec<&str> = COMMAND.split(' ').collect();
    let mut closed = Vec::with_capacity(rounds);
    let mut answered = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let pending = handle
            .enqueue_request(Some("worker".into()), input(round))
            .await
            .expect("queued");
        // Cancelled once the Turn is inside the tool.
        let deadline = Instant::now() + Duration::from_secs(30);
        while processes_running(&words) == 0 {
            assert!(Instant::now() < deadline, "the command never ran");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let started = Instant::now();
        let outcome = handle
            .cancel_running("main".into(), "bench".into(), Duration::from_secs(5))
            .await
            .expect("cancelled");
        assert!(outcome.ended, "round {round}: the Turn did not end");
        closed.push(started.elapsed());
        let answer = pending.answer().await.expect("answered");
        answered.push(started.elapsed());
        let text = serde_json::to_string(&answer).unwrap_or_default();
        assert!(text.contains("E_TURN_CANCELLED"), "{text}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while processes_running(&words) > 0 {
            assert!(Instant::now() < deadline, "the command outlived its Turn");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    handle.shutdown().await.unwrap();
    task.await.unwrap();
    println!("cancel bench: a real `gdn agent` Turn blocked in `{COMMAND}`, {rounds} rounds");
    println!(
        "{:<34} {:>10} {:>10}",
        "from the cancel to", "p50 ms", "p99 ms"
    );
    for (label, samples) in [
        ("the Turn closed (TurnFinished)", &mut closed),
        ("the requester's E_TURN_CANCELLED", &mut answered),
    ] {
        println!(
            "{label:<34} {:>10.2} {:>10.2}",
            millis(percentile(samples, 50.0)),
            millis(percentile(samples, 99.0))
        );
    }
}

fn input(round: usize) -> AgentEvent {
    let mut event = AgentEvent::new(
        "user_message",
        EventSource::new(EventSourceKind::Connector, "bench"),
    );
    event.input = Some(format!("block {round}"));
    event.instance_key = Some("main".into());
    event
}

/// How many live processes run `words` exactly.
fn processes_running(words: &[&str]) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline
                .split(|&b| b == 0)
                .filter(|arg| !arg.is_empty())
                .collect();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            !zombie
                && args.len() == words.len()
                && args.iter().zip(words).all(|(a, w)| *a == w.as_bytes())
        })
        .count()
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let rank = ((p / 100.0) * (samples.len() as f64 - 1.0)).round() as usize;
    samples[rank.min(samples.len() - 1)]
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
