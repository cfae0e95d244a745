//! Connector benchmark: a real resident `gdn run` with a signed `webhook`
//! Connection and a zero-latency `scripted` model, driven from outside
//! over loopback HTTP and a stdin pipe.
//!
//! It prints:
//! * start → ready: `gdn run` spawned until the webhook answers a post;
//! * signed posts accepted per second (keep-alive clients in parallel),
//!   routed to one instance (each post queued, then a Turn), and with no
//!   rule matching (front, signature, IPC and routing only);
//! * post → accepted latency of one post at a time (p50, p99);
//! * RSS of the ConnectorProcess and of the orchestrator, idle and after
//!   the floods, and the CPU time each spends per post;
//! * stdin line → answer of `gdn run` fed by a pipe (p50, p99).
//!
//! Run: `cargo bench -p gdn --bench connectors`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECRET: &str = "bench-signing-secret";
const CLIENTS: usize = 8;
const FLOOD: Duration = Duration::from_secs(3);

fn bundle(port: u16) -> String {
    format!(
        r#"apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: connector-bench
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
  policy:
    queues:
      maxQueuedEvents: 1000000
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: hooks
spec:
  connectorRef: Connector/webhook
  config:
    PORT:
      value: "{port}"
  secrets:
    WEBHOOK_SECRET:
      valueFrom:
        env: BENCH_SECRET
  ingress:
    rules:
      - match:
          event: routed
        route:
          instanceKey: bench
"#
    )
}

const RULES: &str = "rules:\n  - name: pong\n    reply:\n      text: pong\n";

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(dir.path().join("goondan.yaml"), bundle(port)).unwrap();
    std::fs::write(dir.path().join("rules.yaml"), RULES).unwrap();

    let started = Instant::now();
    let mut resident = gdn(dir.path(), state.path(), &["run"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("run.log")).unwrap())
        .spawn()
        .unwrap();
    let routed = r#"{"event":"routed","text":"ping"}"#;
    let unrouted = r#"{"event":"nobody","text":"ping"}"#;
    while post_once(port, routed) != Some(200) {
        let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
        if let Some(status) = resident.try_wait().unwrap() {
            panic!("gdn run exited with {status}: {}", log());
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never ready: {}",
            log()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    println!(
        "start → ready (webhook accepts a signed post): {:.1} ms",
        started.elapsed().as_secs_f64() * 1e3
    );

    let orchestrator = resident.id() as i32;
    let connector = children(orchestrator, "connector")[0];
    std::thread::sleep(Duration::from_millis(500));
    println!("idle ConnectorProcess: {}", memory(connector));
    println!(
        "idle orchestrator (gdn run, resident): {}",
        memory(orchestrator)
    );

    // No rule first: the routed flood leaves the agent a backlog of
    // Turns that would share the two cores with the next measurement.
    for (what, body) in [
        ("matching no rule", unrouted),
        ("routed to one instance", routed),
    ] {
        let before = [cpu_time(connector), cpu_time(orchestrator)];
        let (accepted, refused) = flood(port, body);
        let after = [cpu_time(connector), cpu_time(orchestrator)];
        println!(
            "signed posts accepted per second, {CLIENTS} keep-alive clients, {what}: {:.0}/s ({refused} refused); CPU per post: connector {:.0} µs, orchestrator {:.0} µs",
            accepted as f64 / FLOOD.as_secs_f64(),
            (after[0] - before[0]) / accepted as f64 * 1e6,
            (after[1] - before[1]) / accepted as f64 * 1e6,
        );
    }

    let mut latencies = Vec::new();
    let mut client = Client::connect(port);
    for _ in 0..500 {
        let sent = Instant::now();
        assert_eq!(client.post(unrouted), 200);
        latencies.push(sent.elapsed());
    }
    let (p50, p99) = percentiles(&mut latencies);
    println!("post → accepted, one at a time, no rule: p50 {p50:.3} ms, p99 {p99:.3} ms");
    latencies.clear();
    for _ in 0..500 {
        let sent = Instant::now();
        assert_eq!(client.post(routed), 200);
        latencies.push(sent.elapsed());
    }
    let (p50, p99) = percentiles(&mut latencies);
    println!("post → queued for the agent, one at a time: p50 {p50:.3} ms, p99 {p99:.3} ms");

    std::thread::sleep(Duration::from_secs(2));
    println!("ConnectorProcess after the floods: {}", memory(connector));
    println!("orchestrator after the floods: {}", memory(orchestrator));
    terminate(&mut resident);

    stdin_round_trips(dir.path(), state.path());
}

/// `gdn run` fed by a pipe: one line, its answer, then the next.
fn stdin_round_trips(bundle: &Path, state: &Path) {
    let mut run = gdn(bundle, state, &["run"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = run.stdin.take().unwrap();
    let mut answers = BufReader::new(run.stdout.take().unwrap());
    let mut latencies = Vec::new();
    let mut answer = String::new();
    for round in 0..220 {
        let sent = Instant::now();
        writeln!(stdin, "line {round}").unwrap();
        stdin.flush().unwrap();
        answer.clear();
        answers.read_line(&mut answer).unwrap();
        assert_eq!(answer.trim(), "pong");
        // The first rounds include the agent's spawn.
        if round >= 20 {
            latencies.push(sent.elapsed());
        }
    }
    let (p50, p99) = percentiles(&mut latencies);
    println!("stdin line → answer (gdn run fed by a pipe, warm): p50 {p50:.2} ms, p99 {p99:.2} ms");
    drop(stdin);
    let status = run.wait().unwrap();
    assert!(status.success());
}

fn gdn(bundle: &Path, state: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gdn"));
    command
        .arg("--config")
        .arg(bundle)
        .arg("--state-root")
        .arg(state)
        .args(args)
        .env("BENCH_SECRET", SECRET)
        .env("GOONDAN_DURABILITY", "process-crash");
    command
}

/// Posts `body` from [`CLIENTS`] keep-alive connections for [`FLOOD`]:
/// how many were accepted (200) and refused (429).
fn flood(port: u16, body: &'static str) -> (u64, u64) {
    let accepted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (accepted, refused, stop) = (accepted.clone(), refused.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut client = Client::connect(port);
                while !stop.load(Ordering::Relaxed) {
                    match client.post(body) {
                        200 => accepted.fetch_add(1, Ordering::Relaxed),
                        429 => refused.fetch_add(1, Ordering::Relaxed),
                        other => panic!("status {other}"),
                    };
                }
            })
        })
        .collect();
    std::thread::sleep(FLOOD);
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    (
        accepted.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    )
}

/// A keep-alive HTTP/1.1 connection posting signed bodies.
struct Client {
    stream: BufReader<TcpStream>,
}

impl Client {
    fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream: BufReader::new(stream),
        }
    }

    fn post(&mut self, body: &str) -> u16 {
        let signature =
            goondan_connector::verify::hmac_sha256_hex(SECRET.as_bytes(), body.as_bytes());
        let request = format!(
            "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Webhook-Signature: sha256={signature}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.stream.get_mut().write_all(request.as_bytes()).unwrap();
        let mut line = String::new();
        self.stream.read_line(&mut line).unwrap();
        let status = line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut length = 0;
        loop {
            line.clear();
            self.stream.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                }
            }
        }
        let mut answer = vec![0; length];
        self.stream.read_exact(&mut answer).unwrap();
        status
    }
}

fn post_once(port: u16, body: &str) -> Option<u16> {
    TcpStream::connect(("127.0.0.1", port)).ok()?;
    Some(Client::connect(port).post(body))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// (p50, p99) in milliseconds.
fn percentiles(latencies: &mut [Duration]) -> (f64, f64) {
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    (at(0.5), at(0.99))
}

/// The children of `parent` whose command line has the argument `mode`.
fn children(parent: i32, mode: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let parent_of = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            parent_of == Some(parent)
                && cmdline
                    .split(|byte| *byte == 0)
                    .any(|argument| argument == mode.as_bytes())
        })
        .collect()
}

/// User plus system CPU time of `pid` so far, in seconds.
fn cpu_time(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are fields 14 and 15; `fields` starts at field 3.
    let ticks = |index: usize| fields.get(index).and_then(|v| v.parse::<f64>().ok());
    let per_second = 100.0; // USER_HZ on Linux
    (ticks(11).unwrap_or(0.0) + ticks(12).unwrap_or(0.0)) / per_second
}

/// RSS, PSS and anonymous memory of `pid`, from `smaps_rollup`.
fn memory(pid: i32) -> String {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |name: &str| {
        rollup
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1)?.parse::<f64>().ok())
            .map_or(f64::NAN, |kib| kib / 1024.0)
    };
    format!(
        "RSS {:.1} MiB, PSS {:.1} MiB, anonymous {:.1} MiB",
        field("Rss:"),
        field("Pss:"),
        field("Anonymous:")
    )
}

fn terminate(child: &mut Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let _ = child.wait();
}
