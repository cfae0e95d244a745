//! `gdn run --watch` benchmark: the time from saving an Agent's prompt to
//! that agent being ready again, through the real binary (a resident
//! `gdn run --watch` with one AgentProcess on a zero-latency `scripted`
//! model).
//!
//! For each save it measures, from the moment the file is written to the
//! moment `gdn run` prints its reload line (which it prints once the
//! restarted agent has finished its start-up handshake): the whole span,
//! and the part after the quiet period (what the line itself reports).
//!
//! Run: `cargo bench -p gdn --bench watch` (add a number for the saves,
//! default 20).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const RULES: &str = "rules:\n  - name: pong\n    reply:\n      text: pong\n";

fn bundle(version: usize) -> String {
    format!(
        r#"apiVersion: goondan.ai/v1
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
  prompt:
    system: "You are echo, version {version}."
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/echo
  agents:
    - ref: Agent/echo
"#
    )
}

fn gdn(bundle: &Path, state: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gdn"));
    command
        .arg("--config")
        .arg(bundle)
        .arg("--state-root")
        .arg(state)
        .env_remove("RUST_LOG");
    command
}

fn main() {
    let saves: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(20);
    let work = tempfile::tempdir().expect("temp dir");
    let bundle_dir = work.path().join("bundle");
    let state = work.path().join("state");
    std::fs::create_dir_all(&bundle_dir).unwrap();
    std::fs::write(bundle_dir.join("goondan.yaml"), bundle(0)).unwrap();
    std::fs::write(bundle_dir.join("rules.yaml"), RULES).unwrap();

    let mut resident = gdn(&bundle_dir, &state)
        .args(["run", "--watch"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting gdn run --watch");
    let (lines_tx, lines) = mpsc::channel::<(Instant, String)>();
    let stderr = resident.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    // The first input attaches and starts the agent; it waits for the
    // socket, or it would start an orchestrator of its own.
    let started = Instant::now();
    let sockets = state.join("runtime/sockets");
    while !std::fs::read_dir(&sockets).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|entry| std::os::unix::net::UnixStream::connect(entry.path()).is_ok())
    }) {
        assert!(started.elapsed() < Duration::from_secs(20), "no socket");
        std::thread::sleep(Duration::from_millis(10));
    }
    loop {
        let output = gdn(&bundle_dir, &state)
            .args(["run", "--input", "hi"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if output.status.success() {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "no answer");
        std::thread::sleep(Duration::from_millis(20));
    }

    println!("watch bench: save an Agent's prompt -> the agent ready again ({saves} saves)");
    let mut whole = Vec::new();
    let mut reported = Vec::new();
    for version in 1..=saves {
        // Let the previous restart settle, as between two human saves.
        std::thread::sleep(Duration::from_millis(300));
        while lines.try_recv().is_ok() {}
        let saved = Instant::now();
        std::fs::write(bundle_dir.join("goondan.yaml"), bundle(version)).unwrap();
        let (at, line) = loop {
            let (at, line) = lines
                .recv_timeout(Duration::from_secs(20))
                .expect("a reload line");
            if line.starts_with("watch: reloaded") {
                break (at, line);
            }
        };
        assert!(line.contains("restarted echo:"), "{line}");
        whole.push(at - saved);
        let ms: f64 = line
            .split("reloaded in ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(f64::NAN);
        reported.push(Duration::from_secs_f64(ms / 1000.0));
    }
    let _ = nix_kill(resident.id());
    let _ = resident.wait();
    for (name, samples) in [
        ("save -> ready", &mut whole),
        ("reload (after the 150 ms quiet period)", &mut reported),
    ] {
        samples.sort();
        println!(
            "{name:>40}: p50 {:.0} ms, min {:.0} ms, max {:.0} ms",
            millis(samples[samples.len() / 2]),
            millis(samples[0]),
            millis(samples[samples.len() - 1]),
        );
    }
}

/// SIGTERM, so the orchestrator drains its agent and exits.
fn nix_kill(pid: u32) -> std::io::Result<std::process::ExitStatus> {
    Command::new("kill").arg(pid.to_string()).status()
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
