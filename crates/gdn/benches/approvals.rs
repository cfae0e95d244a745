//! Approval bench (issue 36; target: approve → tool started p50 under
//! 50 ms): a real `gdn agent` process behind the orchestrator library
//! runs Turns whose `bash__exec` call the base `tool-approval` extension
//! gates; each round waits for the request in the instance's
//! `approvals.jsonl`, approves it (`OrchestratorHandle::decide`, what `gdn
//! approve` sends over the control socket) and times until the command
//! has started (it creates a file) and until the requester's answer.
//!
//! Run: `cargo bench -p gdn --bench approvals` (add `-- 50` for more
//! rounds).

mod one_agent;

use goondan_types::{AgentEvent, ApprovalDecision, EventSource, EventSourceKind, Verdict};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const BUNDLE: &str = r#"apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: approvals-bench
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
  extensions:
    - ref: Extension/tool-approval
      config:
        tools: [bash__exec]
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

/// The scripted model: every user message asks for a command that creates
/// the file its text names; a tool result ends the Turn.
const RULES: &str = "rules:\n  - name: done\n    when:\n      toolResult: \"\"\n    reply:\n      text: done\n  - name: touch\n    reply:\n      toolCalls:\n        - name: bash__exec\n          args:\n            command: \"touch {{input}}\"\n";

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(20);
    let work = tempfile::tempdir().expect("temp dir");
    let bundle = work.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(bundle.join("goondan.yaml"), BUNDLE).unwrap();
    std::fs::write(bundle.join("rules.yaml"), RULES).unwrap();
    let state_root = work.path().join("state");
    let marks = work.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(measure(&bundle, &state_root, &marks, rounds));
}

async fn measure(bundle: &Path, state_root: &Path, marks: &Path, rounds: usize) {
    let (handle, task) = one_agent::start(bundle, state_root);
    let mut started_after = Vec::with_capacity(rounds);
    let mut answered_after = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let mark = marks.join(format!("started-{round}"));
        let pending = handle
            .enqueue_request(Some("worker".into()), input(&mark))
            .await
            .expect("queued");
        let id = wait_for(|| waiting_approval(state_root)).await;
        let decided = Instant::now();
        handle
            .decide(
                goondan_ipc::RoutingKey::new("worker", "main"),
                ApprovalDecision {
                    id,
                    verdict: Verdict::Approve,
                    arguments: None,
                    reason: None,
                    by: "bench".into(),
                    decided_at: chrono::Utc::now().to_rfc3339(),
                },
            )
            .await
            .expect("decided");
        wait_for(|| mark.exists().then_some(())).await;
        started_after.push(decided.elapsed());
        pending.answer().await.expect("answered");
        answered_after.push(decided.elapsed());
    }
    handle.shutdown().await.unwrap();
    task.await.unwrap();
    println!("approval bench: a real `gdn agent` Turn with a gated `bash__exec`, {rounds} rounds");
    println!(
        "{:<34} {:>10} {:>10}",
        "from the approve to", "p50 ms", "p99 ms"
    );
    for (label, samples) in [
        ("the command started", &mut started_after),
        ("the requester's answer", &mut answered_after),
    ] {
        println!(
            "{label:<34} {:>10.2} {:>10.2}",
            millis(percentile(samples, 50.0)),
            millis(percentile(samples, 99.0))
        );
    }
}

fn input(mark: &Path) -> AgentEvent {
    let mut event = AgentEvent::new(
        "user_message",
        EventSource::new(EventSourceKind::Connector, "bench"),
    );
    event.input = Some(mark.display().to_string());
    event.instance_key = Some("main".into());
    event
}

/// Polls `probe` every 200 µs for at most 30 s.
async fn wait_for<T>(mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "waited 30 s in vain");
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

/// The id of the one undecided request under `state_root`, if any.
fn waiting_approval(state_root: &Path) -> Option<String> {
    let mut folders = vec![state_root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).ok()?.flatten() {
            let path: PathBuf = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path
                .file_name()
                .is_some_and(|name| name == "approvals.jsonl")
            {
                let paths = goondan_store::InstancePaths::from_dir(folder.clone());
                let waiting = goondan_store::undecided_approvals(&paths).ok()?;
                if let Some(request) = waiting.into_iter().next() {
                    return Some(request.id);
                }
            }
        }
    }
    None
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let rank = ((p / 100.0) * (samples.len() as f64 - 1.0)).round() as usize;
    samples[rank.min(samples.len() - 1)]
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
