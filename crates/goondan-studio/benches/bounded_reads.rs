//! Bounded reads (issue 35 #3): what the Studio's reads of logs cost over
//! a 1 GB `base.jsonl` and a 1 GB `runtime-events.jsonl`, with eight
//! requests in parallel over real TCP on 127.0.0.1. Prints, per route,
//! the wall time of the burst, how many were answered 200 and 503, the
//! `truncated`/`skippedLines`/`bytesRead` an answer reported, and the
//! peak RSS (`VmHWM`) of a fresh process that served only that burst.
//!
//! Run: `cargo bench -p goondan-studio --bench bounded_reads [-- MIB]`
//! (MIB: size of each log, 1024 by default). The logs go to a temporary
//! folder and are removed at the end.

use goondan_store::StateRoot;
use goondan_studio::{Access, Limits, Studio};
use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

const N_PARALLEL: usize = 8;
const NEWEST_TRACE: &str = "ffffffffffffffffffffffffffffffff";
const OLD_TRACE: &str = "00000000000000000000000000000001";

/// The routes measured, each in a process of its own.
fn routes() -> [(&'static str, String); 4] {
    [
        (
            "conversation",
            "/api/swarms/bench/instances/alpha:default/conversation".to_string(),
        ),
        (
            "events",
            "/api/swarms/bench/instances/alpha:default/events".to_string(),
        ),
        (
            "trace (newest)",
            format!("/api/swarms/bench/traces/{NEWEST_TRACE}"),
        ),
        (
            "trace (oldest)",
            format!("/api/swarms/bench/traces/{OLD_TRACE}"),
        ),
    ]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // A child: `--child <state root> <heavy cap> <route index>` runs one
    // burst, so each burst's peak RSS is its own (an allocator keeps
    // what it freed, so a second burst in one process would hide its peak).
    if let Some(at) = args.iter().position(|arg| arg == "--child") {
        let root = Path::new(&args[at + 1]);
        let max_heavy_requests: usize = args[at + 2].parse().unwrap();
        let (route, path) = &routes()[args[at + 3].parse::<usize>().unwrap()];
        let limits = Limits {
            max_heavy_requests,
            ..Limits::default()
        };
        let (addr, _runtime) = start(root, limits);
        burst(addr, route, path);
        return;
    }
    let mib: u64 = args.iter().find_map(|arg| arg.parse().ok()).unwrap_or(1024);
    let dir = tempfile::tempdir().unwrap();
    let messages = dir
        .path()
        .join("workspaces/bench/instances/alpha:default/messages");
    std::fs::create_dir_all(&messages).unwrap();
    let started = Instant::now();
    write_base(&messages.join("base.jsonl"), mib << 20);
    write_events(&messages.join("runtime-events.jsonl"), mib << 20);
    println!(
        "generated base.jsonl and runtime-events.jsonl of {mib} MiB each in {:.1} s",
        started.elapsed().as_secs_f64(),
    );
    let defaults = Limits::default();
    println!(
        "budget {} MiB read per request, line cap {} MiB; {N_PARALLEL} requests at once per burst, each burst in a fresh process",
        defaults.max_read_bytes_per_request >> 20,
        defaults.max_line_bytes >> 20
    );
    for max_heavy_requests in [defaults.max_heavy_requests, N_PARALLEL] {
        println!("\nat most {max_heavy_requests} reads of logs at once:");
        for index in 0..routes().len() {
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .arg("--child")
                .arg(dir.path())
                .arg(max_heavy_requests.to_string())
                .arg(index.to_string())
                .status()
                .unwrap();
            assert!(status.success());
        }
    }
}

/// Sends `N_PARALLEL` requests for `path` at once and prints what they
/// cost.
fn burst(addr: SocketAddr, route: &str, path: &str) {
    let before = peak_rss_kib();
    let started = Instant::now();
    let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..N_PARALLEL)
            .map(|_| scope.spawn(|| get(addr, path)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wall = started.elapsed();
    let after = peak_rss_kib();
    let n_ok = answers.iter().filter(|(status, _)| *status == 200).count();
    let n_busy = answers.iter().filter(|(status, _)| *status == 503).count();
    let sample = answers
        .iter()
        .find(|(status, _)| *status == 200)
        .map(|(_, body)| {
            let value: serde_json::Value = serde_json::from_str(body).unwrap();
            let n_items = value["messages"]
                .as_array()
                .or(value["events"].as_array())
                .map_or(0, Vec::len);
            format!(
                "{n_items} items, truncated {}, skippedLines {}, bytesRead {} MiB, body {} KiB",
                value["truncated"],
                value["skippedLines"],
                value["bytesRead"].as_u64().unwrap_or(0) >> 20,
                body.len() >> 10
            )
        })
        .unwrap_or_default();
    let growth = after.saturating_sub(before);
    println!(
        "  {route:<15} {:>7.1} ms wall, {n_ok} × 200, {n_busy} × 503; peak RSS {} MiB (+{} MiB over the idle {} MiB, {} MiB per answered request); {sample}",
        wall.as_secs_f64() * 1000.0,
        after / 1024,
        growth / 1024,
        before / 1024,
        growth / 1024 / n_ok.max(1) as u64,
    );
}

fn start(root: &Path, limits: Limits) -> (SocketAddr, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let studio = Studio {
        state_root: StateRoot::new(root),
        access: Access::for_address(addr, None, false).unwrap(),
        limits,
        actions: false,
        eval_command: None,
    };
    runtime.spawn(goondan_studio::serve(
        listener,
        studio,
        std::future::pending(),
    ));
    (addr, runtime)
}

/// The status and body of `GET path`.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(600)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
        addr.port()
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    (status, body)
}

/// A `base.jsonl` of about `size` bytes of ordinary messages.
fn write_base(path: &Path, size: u64) {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let mut written = 0u64;
    let mut index = 0u64;
    while written < size {
        let line = format!(
            "{{\"id\":\"m{index}\",\"data\":{{\"role\":\"{}\",\"content\":\"message {index}: {}\"}},\"metadata\":{{}},\"createdAt\":\"2026-01-01T00:00:00Z\",\"source\":{{\"type\":\"user\"}}}}\n",
            if index.is_multiple_of(2) { "user" } else { "assistant" },
            "lorem ipsum dolor sit amet ".repeat(8)
        );
        out.write_all(line.as_bytes()).unwrap();
        written += line.len() as u64;
        index += 1;
    }
    out.flush().unwrap();
}

/// A `runtime-events.jsonl` of about `size` bytes: Turns of one trace
/// each, the first trace `OLD_TRACE` and the last `NEWEST_TRACE`.
fn write_events(path: &Path, size: u64) {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let mut written = 0u64;
    let mut turn = 1u64;
    loop {
        let last = written + 4096 >= size;
        let trace = if last {
            NEWEST_TRACE.to_string()
        } else {
            format!("{turn:032x}")
        };
        let lines = format!(
            concat!(
                r#"{{"type":"turn.started","timestamp":"2026-01-01T00:00:00.000Z","agentName":"alpha","instanceKey":"default","traceId":"{trace}","spanId":"aaaaaaaaaaaaaaaa","turnId":"turn_{turn}"}}"#,
                "\n",
                r#"{{"type":"turn.completed","timestamp":"2026-01-01T00:00:01.000Z","agentName":"alpha","instanceKey":"default","traceId":"{trace}","spanId":"aaaaaaaaaaaaaaaa","turnId":"turn_{turn}","stepCount":1,"duration":1000,"tokenUsage":{{"promptTokens":21,"completionTokens":4,"totalTokens":25}},"costUsd":0.5}}"#,
                "\n"
            ),
            trace = trace,
            turn = turn
        );
        out.write_all(lines.as_bytes()).unwrap();
        written += lines.len() as u64;
        turn += 1;
        if last {
            break;
        }
    }
    out.flush().unwrap();
}

/// The process's peak resident set size in KiB (`VmHWM`).
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}
