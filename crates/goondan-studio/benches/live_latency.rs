//! Live view latency: from a runtime event appended to an instance's
//! `runtime-events.jsonl` to its delivery on the Studio's server-sent
//! event stream, over real TCP on 127.0.0.1, with the default limits
//! (50 ms poll interval). Prints min, median, p95 and max over N events.
//!
//! Run: `cargo bench -p goondan-studio --bench live_latency [-- N]`.

use goondan_store::StateRoot;
use goondan_studio::{Access, Limits, Studio};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn main() {
    let n_events: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(100);
    let dir = tempfile::tempdir().unwrap();
    let instance = dir
        .path()
        .join("workspaces/bench/instances/alpha:default/messages");
    std::fs::create_dir_all(&instance).unwrap();
    let log_path = instance.join("runtime-events.jsonl");
    std::fs::write(&log_path, "").unwrap();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = Limits::default();
    let poll = limits.live_poll_interval;
    let studio = Studio {
        state_root: StateRoot::new(dir.path()),
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

    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET /api/swarms/bench/live HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
        addr.port()
    )
    .unwrap();
    let mut seen = String::new();
    read_until(&mut stream, &mut seen, "event: ready");

    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(&log_path)
        .unwrap();
    let mut latencies = Vec::with_capacity(n_events);
    for index in 0..n_events {
        let marker = format!("bench-{index}");
        let line = format!(
            r#"{{"type":"turn.started","timestamp":"2026-01-01T00:00:00.000Z","agentName":"alpha","instanceKey":"default","traceId":"{marker}","spanId":"s","turnId":"t"}}"#
        );
        // Spread the appends over the poll cycle, as real events are.
        std::thread::sleep(Duration::from_millis(7 * (index as u64 % 10) + 3));
        let started = Instant::now();
        log.write_all(format!("{line}\n").as_bytes()).unwrap();
        read_until(&mut stream, &mut seen, &marker);
        latencies.push(started.elapsed());
    }
    latencies.sort();
    let at = |fraction: f64| latencies[((latencies.len() - 1) as f64 * fraction) as usize];
    println!(
        "studio live latency (append -> SSE delivery), {n_events} events, poll {} ms:",
        poll.as_millis()
    );
    println!(
        "  min {:.1} ms  median {:.1} ms  p95 {:.1} ms  max {:.1} ms",
        ms(latencies[0]),
        ms(at(0.5)),
        ms(at(0.95)),
        ms(latencies[latencies.len() - 1])
    );
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Reads from `stream` into `seen` until it holds `needle`, then drops
/// what was read up to it.
fn read_until(stream: &mut TcpStream, seen: &mut String, needle: &str) {
    let mut buffer = [0u8; 8192];
    while !seen.contains(needle) {
        let n = stream.read(&mut buffer).expect("the stream ended");
        assert!(n > 0, "the stream ended");
        seen.push_str(&String::from_utf8_lossy(&buffer[..n]));
    }
    let end = seen.find(needle).unwrap() + needle.len();
    seen.drain(..end);
}
