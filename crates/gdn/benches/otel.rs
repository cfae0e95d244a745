//! OTLP export benchmark: what span export costs a Turn, through the real
//! binary. Three resident `gdn run` orchestrators serve
//! `examples/two-agents` (offline `scripted` model, one delegation per
//! input, so two AgentProcesses export spans of one trace):
//!
//! * `off`: no `OTEL_*` variable (nothing of the exporter is built);
//! * `on`: `OTEL_EXPORTER_OTLP_ENDPOINT` at a local OTLP/HTTP receiver that
//!   answers 200 at once;
//! * `silent`: the endpoint at a socket that accepts and never answers (a
//!   hung collector).
//!
//! Inputs go round-robin (off, on, silent; then on, silent, off; ...) so
//! machine noise and the position in a round hit the three alike. For each mode it prints the wall time of `gdn run
//! --input` attached to the resident orchestrator, and the Turn time the
//! entry agent itself recorded (`turn.completed.duration`, which includes
//! the delegated Turn), as median and p90, with the ratio to `off`.
//!
//! Run: `cargo bench -p gdn --bench otel` (add a number for the inputs
//! per mode, default 40).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const INPUT: &str = "What is Goondan?";

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/two-agents")
}

fn gdn(state: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gdn"));
    command
        .arg("--config")
        .arg(example())
        .arg("--state-root")
        .arg(state)
        .env_remove("RUST_LOG");
    for (name, _) in std::env::vars() {
        if name.starts_with("OTEL_") {
            command.env_remove(name);
        }
    }
    command
}

/// A minimal OTLP/HTTP receiver: reads each request (keep-alive) and
/// answers `200` with an empty body; counts the requests.
fn answering_collector(requests: Arc<AtomicUsize>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let requests = requests.clone();
            std::thread::spawn(move || serve(stream, &requests));
        }
    });
    port
}

fn serve(stream: TcpStream, requests: &AtomicUsize) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            if let Some((name, value)) = trimmed.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        requests.fetch_add(1, Ordering::Relaxed);
        if writer
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .is_err()
        {
            return;
        }
    }
}

/// A socket that accepts connections and never reads or answers.
fn silent_collector() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().map_while(Result::ok) {
            held.push(stream);
        }
    });
    port
}

struct Mode {
    name: &'static str,
    state: tempfile::TempDir,
    resident: Child,
    wall: Vec<Duration>,
}

fn start(name: &'static str, endpoint: Option<String>) -> Mode {
    let state = tempfile::tempdir().unwrap();
    let mut command = gdn(state.path());
    if let Some(endpoint) = endpoint {
        command.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
    }
    let resident = command
        .arg("run")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting gdn run");
    let started = Instant::now();
    let sockets = state.path().join("runtime/sockets");
    while !std::fs::read_dir(&sockets).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|entry| std::os::unix::net::UnixStream::connect(entry.path()).is_ok())
    }) {
        assert!(started.elapsed() < Duration::from_secs(20), "no socket");
        std::thread::sleep(Duration::from_millis(10));
    }
    Mode {
        name,
        state,
        resident,
        wall: Vec::new(),
    }
}

fn ask(mode: &Mode) -> Duration {
    let started = Instant::now();
    let output = gdn(mode.state.path())
        .args(["run", "--input", INPUT])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    assert!(
        output.status.success(),
        "{}: {}",
        mode.name,
        String::from_utf8_lossy(&output.stderr)
    );
    elapsed
}

/// `turn.completed` durations of the entry agent, in order.
fn turn_durations(state: &Path) -> Vec<Duration> {
    let mut durations = Vec::new();
    let workspaces = std::fs::read_dir(state.join("workspaces")).unwrap();
    for workspace in workspaces.filter_map(Result::ok) {
        let instances = workspace.path().join("instances");
        let Ok(entries) = std::fs::read_dir(&instances) else {
            continue;
        };
        for instance in entries.filter_map(Result::ok) {
            let events = instance.path().join("messages/runtime-events.jsonl");
            let Ok(text) = std::fs::read_to_string(&events) else {
                continue;
            };
            for line in text.lines() {
                let event: serde_json::Value = serde_json::from_str(line).unwrap();
                if event["type"] == "turn.completed" && event["agentName"] == "coordinator" {
                    durations.push(Duration::from_millis(event["duration"].as_u64().unwrap()));
                }
            }
        }
    }
    durations
}

fn quantiles(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let index = ((samples.len() - 1) as f64 * q).round() as usize;
        samples[index].as_secs_f64() * 1000.0
    };
    (at(0.5), at(0.9))
}

fn main() {
    let inputs: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(40);
    let exported = Arc::new(AtomicUsize::new(0));
    let on_port = answering_collector(exported.clone());
    let silent_port = silent_collector();
    let mut modes = vec![
        start("off", None),
        start("on", Some(format!("http://127.0.0.1:{on_port}"))),
        start("silent", Some(format!("http://127.0.0.1:{silent_port}"))),
    ];
    // Warm-up: spawns both agents of each swarm.
    for mode in &modes {
        ask(mode);
    }
    // Each round starts with the next mode, so no mode always goes first.
    for round in 0..inputs {
        for offset in 0..modes.len() {
            let index = (round + offset) % modes.len();
            let elapsed = ask(&modes[index]);
            modes[index].wall.push(elapsed);
        }
    }
    for mode in &mut modes {
        // SIGTERM: the orchestrator drains its agents, which flush spans.
        let _ = Command::new("kill")
            .arg(mode.resident.id().to_string())
            .status();
        let _ = mode.resident.wait();
    }
    println!(
        "otel bench: examples/two-agents, {inputs} inputs per mode, one delegation each \
         (OTLP requests received by the `on` collector: {})",
        exported.load(Ordering::Relaxed)
    );
    println!(
        "{:>8} {:>16} {:>16} {:>20} {:>20}",
        "mode", "wall p50 ms", "wall p90 ms", "turn p50 ms (agent)", "turn p90 ms (agent)"
    );
    let mut baseline = None;
    for mode in &mut modes {
        let (wall50, wall90) = quantiles(&mut mode.wall);
        // The first Turn is the warm-up.
        let mut turns: Vec<Duration> = turn_durations(mode.state.path())
            .into_iter()
            .skip(1)
            .collect();
        let (turn50, turn90) = quantiles(&mut turns);
        let ratio = match baseline {
            None => {
                baseline = Some((wall50, turn50));
                String::new()
            }
            Some((base_wall, base_turn)) => format!(
                "  (wall x{:.3}, turn x{:.3} of off)",
                wall50 / base_wall,
                turn50 / base_turn
            ),
        };
        println!(
            "{:>8} {wall50:>16.1} {wall90:>16.1} {turn50:>20.1} {turn90:>20.1}{ratio}",
            mode.name
        );
    }
}
