//! `gdn serve` benchmark (issue 40): what the server adds between a
//! client and a Turn, and what it holds under many streams.
//!
//! * **First token**: a Turn's first streamed text, asked for through
//!   `gdn serve` (A2A `SendStreamingMessage`, timed to its first
//!   `artifactUpdate`; a streamed OpenAI chat completion, timed to its
//!   first content delta) against the same Turn asked for directly over
//!   the orchestrator's control socket (`DeliverStreaming`, what `gdn
//!   run` does, timed to its first `delta` line), alternated on one warm
//!   instance. Prints p50 and p90 of each and of the difference
//!   (target: overhead p50 under 2 ms).
//! * **Many streams**: N concurrent streamed requests (default 1,000)
//!   across M instances (default 100), each Turn holding for a tool call
//!   of 0.5 s: how long all take, how many failed, and the peak RSS of
//!   `gdn serve` and of the orchestrator (`VmHWM`), with the agents'
//!   summed RSS at the end.
//!
//! The model is `scripted` (no network); the binary is the release
//! `gdn` (`GDN=/path/to/gdn` to time another).
//!
//! Run: `cargo build --release -p gdn && cargo bench -p gdn --bench
//! serve -- [--runs N] [--streams N] [--instances M]`.

mod release_gdn;

use release_gdn::gdn_binary;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::{TcpStream, UnixStream};

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
  tools:
    - ref: Tool/wait
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
    processes:
      maxLive: 1000
"#;

const RULES: &str = r#"rules:
  - name: waited
    when:
      toolResult:
        toolName: wait__seconds
    reply:
      text: held
  - name: hold
    when:
      user:
        regex: "^hold"
    reply:
      toolCalls:
        - name: wait__seconds
          args:
            seconds: 0.5
  - name: echo
    reply:
      text: "echo: {{input}}"
"#;

struct Options {
    runs: usize,
    streams: usize,
    instances: usize,
}

fn options() -> Options {
    let mut options = Options {
        runs: 200,
        streams: 1000,
        instances: 100,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || -> usize {
            args.next()
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("{arg} takes a number"))
        };
        match arg.as_str() {
            "--runs" => options.runs = value(),
            "--streams" => options.streams = value(),
            "--instances" => options.instances = value(),
            // `cargo bench` passes `--bench`.
            "--bench" => {}
            other => panic!("unknown argument {other}: use --runs N, --streams N, --instances M"),
        }
    }
    options
}

/// `gdn serve` and the swarm it started.
struct Served {
    child: Child,
    port: u16,
    orchestrator: u32,
    socket: PathBuf,
    gdn: PathBuf,
    bundle: PathBuf,
    state: PathBuf,
}

impl Served {
    fn start(gdn: &Path, bundle: &Path, state: &Path) -> Served {
        let mut child = Command::new(gdn)
            .arg("--config")
            .arg(bundle)
            .arg("--state-root")
            .arg(state)
            .args(["--json", "serve", "--addr", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gdn serve starts");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let mut orchestrator = None;
        while orchestrator.is_none() {
            line.clear();
            assert!(
                stderr.read_line(&mut line).unwrap() > 0,
                "gdn serve said nothing"
            );
            orchestrator = line
                .split("pid ")
                .nth(1)
                .and_then(|rest| rest.split(')').next())
                .and_then(|pid| pid.parse().ok());
        }
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        let mut serving = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut serving)
            .unwrap();
        let serving: serde_json::Value = serde_json::from_str(&serving).expect("a serving line");
        let port = serving["address"]
            .as_str()
            .and_then(|address| address.rsplit(':').next())
            .and_then(|port| port.parse().ok())
            .expect("a port");
        let socket = std::fs::read_dir(state.join("runtime/sockets"))
            .unwrap()
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .find(|path| path.extension().is_some_and(|ext| ext == "sock"))
            .expect("a control socket");
        Served {
            child,
            port,
            orchestrator: orchestrator.unwrap(),
            socket,
            gdn: gdn.to_path_buf(),
            bundle: bundle.to_path_buf(),
            state: state.to_path_buf(),
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new(&self.gdn)
            .arg("--config")
            .arg(&self.bundle)
            .arg("--state-root")
            .arg(&self.state)
            .arg("stop")
            .output();
    }
}

/// A field of `/proc/<pid>/status` in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|child| child.parse().ok())
        .collect()
}

/// Time to the first text of a Turn asked directly over the control
/// socket; reads the answer to its end.
async fn direct(socket: &Path, instance: &str, text: &str) -> Duration {
    let request = serde_json::json!({"op": "deliverStreaming", "key": format!("echo:{instance}"), "event": {"name": "user_message", "message": {"type": "text", "text": text}}, "source": "bench"});
    let started = Instant::now();
    let stream = UnixStream::connect(socket).await.unwrap();
    let (read, mut write) = stream.into_split();
    write
        .write_all(format!("{request}\n").as_bytes())
        .await
        .unwrap();
    let mut lines = AsyncBufReader::new(read).lines();
    let mut first = None;
    while let Some(line) = lines.next_line().await.unwrap() {
        if first.is_none() && line.contains(r#""result":"delta""#) {
            first = Some(started.elapsed());
        }
        if line.contains(r#""result":"answer""#) || line.contains(r#""result":"failed""#) {
            break;
        }
    }
    first.expect("a streamed delta")
}

/// Time to the first `artifactUpdate` of an A2A stream; reads the stream
/// to its end. `None` when the request failed.
async fn through_serve(port: u16, context: &str, text: &str) -> Option<Duration> {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {"messageId": "m", "contextId": context, "role": "ROLE_USER", "parts": [{"text": text}]}}}).to_string();
    let started = Instant::now();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!(
        "POST /a2a/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut lines = AsyncBufReader::new(stream).lines();
    let mut first = None;
    let mut completed = false;
    while let Ok(Some(line)) = lines.next_line().await {
        if first.is_none() && line.contains("artifactUpdate") {
            first = Some(started.elapsed());
        }
        if line.contains("TASK_STATE_COMPLETED") && line.contains("statusUpdate") {
            completed = true;
        }
    }
    completed.then_some(first?)
}

/// Time to the first content delta of a streamed OpenAI chat completion
/// (`/v1/chat/completions`, the instance named by `X-Goondan-Instance`);
/// reads the stream to its end. `None` when the request failed.
async fn through_openai(port: u16, instance: &str, text: &str) -> Option<Duration> {
    let body = serde_json::json!({"model": "echo", "stream": true, "messages": [{"role": "user", "content": text}]}).to_string();
    let started = Instant::now();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Goondan-Instance: {instance}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut lines = AsyncBufReader::new(stream).lines();
    let mut first = None;
    let mut completed = false;
    while let Ok(Some(line)) = lines.next_line().await {
        // The first chunk only names the role; the first text follows.
        if first.is_none()
            && line.contains("\"delta\":{\"content\":\"")
            && !line.contains("\"role\"")
        {
            first = Some(started.elapsed());
        }
        completed |= line == "data: [DONE]";
    }
    completed.then_some(first?)
}

fn percentile(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn main() {
    let options = options();
    let gdn = gdn_binary();
    let work = tempfile::tempdir().expect("temp dir");
    let bundle = work.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(bundle.join("goondan.yaml"), BUNDLE).unwrap();
    std::fs::write(bundle.join("rules.yaml"), RULES).unwrap();
    let state = work.path().join("state");
    let served = Served::start(&gdn, &bundle, &state);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // Warm the instance, then alternate.
        direct(&served.socket, "lat", "warm").await;
        through_serve(served.port, "lat", "warm").await;
        through_openai(served.port, "lat", "warm").await;
        let (mut direct_ms, mut serve_ms, mut overhead_ms) = (Vec::new(), Vec::new(), Vec::new());
        let (mut openai_ms, mut openai_overhead_ms) = (Vec::new(), Vec::new());
        for round in 0..options.runs {
            let text = format!("round {round}");
            let d = direct(&served.socket, "lat", &text).await.as_secs_f64() * 1e3;
            let s = through_serve(served.port, "lat", &text)
                .await
                .expect("the A2A stream completes")
                .as_secs_f64()
                * 1e3;
            let o = through_openai(served.port, "lat", &text)
                .await
                .expect("the OpenAI stream completes")
                .as_secs_f64()
                * 1e3;
            direct_ms.push(d);
            serve_ms.push(s);
            overhead_ms.push(s - d);
            openai_ms.push(o);
            openai_overhead_ms.push(o - d);
        }
        println!(
            "first streamed token, {} rounds alternated on one warm instance:",
            options.runs
        );
        for (name, samples) in [
            ("control socket (direct)", &mut direct_ms),
            ("gdn serve (A2A stream)", &mut serve_ms),
            ("overhead (serve - direct)", &mut overhead_ms),
            ("gdn serve (OpenAI stream)", &mut openai_ms),
            ("overhead (OpenAI - direct)", &mut openai_overhead_ms),
        ] {
            println!(
                "  {name:<28} p50 {:7.3} ms   p90 {:7.3} ms",
                percentile(samples, 0.5),
                percentile(samples, 0.9)
            );
        }

        let serve_pid = served.child.id();
        let serve_before = status_kib(serve_pid, "VmRSS:");
        let started = Instant::now();
        let mut requests = tokio::task::JoinSet::new();
        for n in 0..options.streams {
            let context = format!("many-{}", n % options.instances);
            let port = served.port;
            requests.spawn(async move { through_serve(port, &context, "hold on").await.is_some() });
        }
        let mut failed = 0;
        while let Some(done) = requests.join_next().await {
            if !done.unwrap_or(false) {
                failed += 1;
            }
        }
        let took = started.elapsed();
        let agents: u64 = children_of(served.orchestrator)
            .into_iter()
            .map(|pid| status_kib(pid, "VmRSS:"))
            .sum();
        println!(
            "{} concurrent A2A streams across {} instances (each Turn holds 0.5 s in a tool call):",
            options.streams, options.instances
        );
        println!("  all done in {:.2} s, {failed} failed", took.as_secs_f64());
        println!(
            "  gdn serve RSS {:.1} MiB before, peak {:.1} MiB (VmHWM)",
            serve_before as f64 / 1024.0,
            status_kib(serve_pid, "VmHWM:") as f64 / 1024.0
        );
        println!(
            "  orchestrator peak {:.1} MiB (VmHWM); {} agent processes, {:.1} MiB RSS together",
            status_kib(served.orchestrator, "VmHWM:") as f64 / 1024.0,
            children_of(served.orchestrator).len(),
            agents as f64 / 1024.0
        );
    });
}
