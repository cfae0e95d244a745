//! What the OpenAI-compatible layer costs on its own, printed (never
//! asserted): the router, HTTP on 127.0.0.1 and the event stream, over a
//! swarm in this process that answers at once, so every microsecond
//! measured is the server's and the client's.
//!
//! * request → first streamed token, sequential on one kept-alive
//!   connection: p50 and p99 (issue 40 asks the whole of `gdn serve` for
//!   p50 < 2 ms over a direct Turn);
//! * 1,000 streaming requests held open at once across 100 instances:
//!   the process's RSS with all of them open, and its peak (client and
//!   server share the process, so both are counted).
//!
//! `cargo bench -p goondan-serve --bench openai`.

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use goondan_http::access::HttpAccess;
use goondan_http::AcceptLimits;
use goondan_serve::{
    AgentInfo, Limits, RunningTurn, Swarm, TurnAnswer, TurnFailure, TurnRequest, TurnUpdate,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

const SEQUENTIAL: usize = 2_000;
const CONCURRENT: usize = 1_000;
const INSTANCES: usize = 100;

/// Answers every input with one delta at once, and ends the Turn when
/// `release` says so.
struct AtOnce {
    agents: Vec<AgentInfo>,
    release: watch::Receiver<bool>,
}

impl Swarm for AtOnce {
    fn name(&self) -> &str {
        "bench"
    }

    fn agents(&self) -> &[AgentInfo] {
        &self.agents
    }

    fn start(&self, _request: TurnRequest) -> BoxFuture<'static, Result<RunningTurn, TurnFailure>> {
        let mut release = self.release.clone();
        Box::pin(async move {
            let (to_server, updates) = mpsc::channel(4);
            tokio::spawn(async move {
                let _ = to_server.send(TurnUpdate::Text("hello".into())).await;
                let _ = release.wait_for(|released| *released).await;
                let answer = TurnAnswer {
                    text: "hello".into(),
                    ..TurnAnswer::default()
                };
                let _ = to_server.send(TurnUpdate::Finished(Ok(answer))).await;
            });
            Ok(RunningTurn {
                event_id: "e".into(),
                updates,
            })
        })
    }

    fn waiting_for(&self, _agent: &str, _instance_key: &str) -> Option<String> {
        None
    }
}

/// `VmRSS` and `VmHWM` of this process, in MiB.
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<f64>().ok())
            .map_or(f64::NAN, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Sends a streaming chat request to `instance`; its response once its
/// head is in.
async fn ask(client: &reqwest::Client, url: &str, instance: &str) -> reqwest::Response {
    let body = r#"{"model":"agent","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header("x-goondan-instance", instance)
        .body(body)
        .send()
        .await
        .unwrap();
    response
}

/// Reads `response` until it holds `needle`; what is left of the stream.
async fn read_until(
    response: reqwest::Response,
    needle: &str,
) -> impl futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> {
    let mut body = Box::pin(response.bytes_stream());
    let mut seen = String::new();
    while let Some(chunk) = body.next().await {
        seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        if seen.contains(needle) {
            break;
        }
    }
    body
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    let (release_all, release) = watch::channel(true);
    let swarm = AtOnce {
        agents: vec![AgentInfo {
            name: "agent".into(),
            description: None,
            entry: true,
            tools: Vec::new(),
        }],
        release,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = goondan_serve::router(
        Arc::new(swarm),
        HttpAccess::default(),
        base.clone(),
        Limits::default(),
    );
    // One client holds every connection here, so its share is the whole.
    let accept = AcceptLimits {
        max_connections_per_client: 4_096,
        ..AcceptLimits::new(4_096, Duration::from_secs(10))
    };
    tokio::spawn(goondan_http::serve(
        listener,
        router,
        accept,
        std::future::pending(),
    ));
    let url = format!("{base}/v1/chat/completions");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CONCURRENT)
        .build()
        .unwrap();

    // The first hundred warm the connection and the allocator.
    for _ in 0..100 {
        let response = ask(&client, &url, "seq").await;
        read_until(response, "hello")
            .await
            .for_each(|_| async {})
            .await;
    }
    let mut whole = Vec::with_capacity(SEQUENTIAL);
    for _ in 0..SEQUENTIAL {
        let started = Instant::now();
        let response = ask(&client, &url, "seq").await;
        let rest = read_until(response, "hello").await;
        whole.push(started.elapsed());
        rest.for_each(|_| async {}).await;
    }
    whole.sort();
    println!(
        "openai/request to first token, sequential: p50 {:?}  p99 {:?}",
        percentile(&whole, 0.5),
        percentile(&whole, 0.99)
    );

    let (before, _) = rss_mib();
    release_all.send_replace(false);
    let started = Instant::now();
    let held: Vec<_> = futures_util::future::join_all((0..CONCURRENT).map(|n| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let instance = format!("inst-{}", n % INSTANCES);
            let response = ask(&client, &url, &instance).await;
            read_until(response, "hello").await
        }
    }))
    .await;
    let opened = started.elapsed();
    let (open, peak) = rss_mib();
    release_all.send_replace(true);
    let finishing = Instant::now();
    futures_util::future::join_all(held.into_iter().map(|rest| rest.for_each(|_| async {}))).await;
    println!(
        "openai/{CONCURRENT} streams across {INSTANCES} instances: all streaming after {opened:?}, \
         all ended {:?} after release; RSS {before:.1} MiB before, {open:.1} MiB with all open, \
         peak {peak:.1} MiB (client and server in one process)",
        finishing.elapsed()
    );
}
