//! What one MCP tool call costs through a warm stdio server: the
//! fixture's `echo` called through [`Session::call_tool`] (request id,
//! JSON encoding, the pipe, the reader task, the response matched by id,
//! the result mapped to an output), against the same call written and
//! read by hand over blocking pipes to a second copy of the server (the
//! server's own work plus the pipe). The difference is what this crate
//! adds. Prints p50 and p99 of each before criterion's estimates.
//!
//! Run with `cargo bench -p goondan-mcp --bench call`.

use criterion::{criterion_group, criterion_main, Criterion};
use goondan_mcp::client::{McpConfig, Session};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SAMPLES: usize = 2_000;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_server.py")
}

fn session(runtime: &tokio::runtime::Runtime) -> Arc<Session> {
    let config =
        McpConfig::parse(&json!({"servers": {"fx": {"command": "python3", "args": [fixture()]}}}))
            .unwrap();
    let server = config.resolve(&|_| None).unwrap().remove(0);
    let (notifications, _ignored) = tokio::sync::mpsc::unbounded_channel();
    runtime
        .block_on(Session::connect(&server, notifications))
        .unwrap()
}

/// The fixture over blocking pipes, initialized, spoken to by hand.
struct RawServer {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl RawServer {
    fn start() -> RawServer {
        let mut child = Command::new("python3")
            .arg(fixture())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut raw = RawServer {
            child,
            stdin,
            stdout,
            next_id: 1,
        };
        raw.exchange("initialize", json!({"protocolVersion": "2025-06-18"}));
        raw
    }

    fn exchange(&mut self, method: &str, params: serde_json::Value) -> String {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        answer
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    (
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
    )
}

fn calls(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let session = session(&runtime);
    let arguments = json!({"text": "hello"}).as_object().cloned().unwrap();
    let call = || {
        runtime
            .block_on(session.call_tool("echo", arguments.clone(), Duration::from_secs(5)))
            .unwrap()
    };
    let mut raw = RawServer::start();
    let params = json!({"name": "echo", "arguments": {"text": "hello"}});

    // Warm both, then sample them interleaved so load drifts hit both alike.
    for _ in 0..200 {
        call();
        raw.exchange("tools/call", params.clone());
    }
    let (mut through_session, mut by_hand) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        let started = Instant::now();
        call();
        through_session.push(started.elapsed());
        let started = Instant::now();
        raw.exchange("tools/call", params.clone());
        by_hand.push(started.elapsed());
    }
    let (session_p50, session_p99) = percentiles(through_session);
    let (raw_p50, raw_p99) = percentiles(by_hand);
    println!(
        "mcp tools/call echo, {SAMPLES} samples: Session p50 {session_p50:?} p99 {session_p99:?}; by hand p50 {raw_p50:?} p99 {raw_p99:?}; added p50 {:?}",
        session_p50.saturating_sub(raw_p50)
    );

    c.bench_function("mcp_call_echo_through_session", |b| b.iter(call));
    c.bench_function("mcp_call_echo_by_hand", |b| {
        b.iter(|| raw.exchange("tools/call", params.clone()))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(Duration::from_secs(3));
    targets = calls
}
criterion_main!(benches);
