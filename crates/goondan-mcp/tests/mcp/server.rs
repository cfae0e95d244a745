//! The server core of `gdn mcp serve` over in-memory pipes, with a swarm
//! stand-in behind `SwarmTurns` (the real one is driven by `gdn`'s CLI
//! tests).

use futures_util::future::BoxFuture;
use goondan_mcp::server::stdio::serve_with_progress;
use goondan_mcp::server::{AgentTool, SwarmTurns, TurnFailure};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};

/// `alpha` echoes, `broken` fails with a code, `slow` never answers and
/// records being dropped.
struct Swarm {
    slow_started: Arc<AtomicBool>,
    slow_dropped: Arc<AtomicBool>,
    /// How many Turns were asked for.
    asks: Arc<std::sync::atomic::AtomicUsize>,
}

struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl SwarmTurns for Swarm {
    fn agents(&self) -> Vec<AgentTool> {
        ["alpha", "broken", "slow"]
            .into_iter()
            .map(|name| AgentTool {
                name: name.into(),
                description: None,
            })
            .collect()
    }

    fn ask(
        &self,
        agent: String,
        text: String,
        instance_key: Option<String>,
    ) -> BoxFuture<'static, Result<String, TurnFailure>> {
        self.asks.fetch_add(1, Ordering::SeqCst);
        if agent == "slow" {
            self.slow_started.store(true, Ordering::SeqCst);
        }
        let dropped = SetOnDrop(self.slow_dropped.clone());
        Box::pin(async move {
            match agent.as_str() {
                "alpha" => Ok(format!("alpha heard `{text}` in {instance_key:?}")),
                "broken" => Err(TurnFailure {
                    code: "E_AGENT_BACKOFF".into(),
                    message: "backing off".into(),
                    suggestion: Some("gdn instance restart".into()),
                }),
                _ => {
                    let _dropped = dropped;
                    std::future::pending().await
                }
            }
        })
    }
}

struct Client {
    to_server: DuplexStream,
    from_server: Lines<BufReader<DuplexStream>>,
}

impl Client {
    async fn send(&mut self, message: Value) {
        let mut line = serde_json::to_vec(&message).unwrap();
        line.push(b'\n');
        self.to_server.write_all(&line).await.unwrap();
    }

    async fn receive(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(5), self.from_server.next_line())
            .await
            .expect("the server answers")
            .unwrap()
            .expect("the server is still there");
        serde_json::from_str(&line).unwrap()
    }

    async fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let answer = self.receive().await;
        assert_eq!(answer["id"], json!(id), "{answer}");
        answer
    }
}

/// The client, the swarm's `slow_started` and `slow_dropped` flags, the
/// server's task, and how many Turns the swarm was asked for.
type Started = (
    Client,
    Arc<AtomicBool>,
    Arc<AtomicBool>,
    tokio::task::JoinHandle<()>,
    Arc<std::sync::atomic::AtomicUsize>,
);

fn start() -> Started {
    start_with_progress(Duration::from_secs(5))
}

fn start_with_progress(interval: Duration) -> Started {
    let slow_started = Arc::new(AtomicBool::new(false));
    let slow_dropped = Arc::new(AtomicBool::new(false));
    let asks: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
    let swarm = Arc::new(Swarm {
        slow_started: slow_started.clone(),
        slow_dropped: slow_dropped.clone(),
        asks: asks.clone(),
    });
    let (to_server, server_input) = tokio::io::duplex(64 * 1024);
    let (server_output, from_server) = tokio::io::duplex(64 * 1024);
    let task = tokio::spawn(async move {
        serve_with_progress(swarm, server_input, server_output, interval)
            .await
            .unwrap();
    });
    let client = Client {
        to_server,
        from_server: BufReader::new(from_server).lines(),
    };
    (client, slow_started, slow_dropped, task, asks)
}

async fn wait_for(flag: &AtomicBool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !flag.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(flag.load(Ordering::SeqCst));
}

#[tokio::test]
async fn initialize_lists_one_tool_per_agent_and_calls_run_turns() {
    let (mut client, _, _, _, _) = start();
    let initialized = client
        .request(1, "initialize", json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}))
        .await;
    assert_eq!(initialized["result"]["protocolVersion"], "2025-03-26");
    assert!(initialized["result"]["capabilities"]["tools"].is_object());
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    let listed = client.request(2, "tools/list", json!({})).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "broken", "slow"]);
    assert_eq!(
        listed["result"]["tools"][0]["inputSchema"]["required"],
        json!(["text"])
    );

    let called = client
        .request(
            3,
            "tools/call",
            json!({"name": "alpha", "arguments": {"text": "hi", "instanceKey": "k1"}}),
        )
        .await;
    assert_eq!(
        called["result"],
        json!({"content": [{"type": "text", "text": "alpha heard `hi` in Some(\"k1\")"}], "isError": false})
    );

    let failed = client
        .request(
            4,
            "tools/call",
            json!({"name": "broken", "arguments": {"text": "hi"}}),
        )
        .await;
    assert_eq!(failed["result"]["isError"], json!(true));
    let text = failed["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("error[E_AGENT_BACKOFF]: backing off"),
        "{text}"
    );

    let bad_args = client
        .request(
            5,
            "tools/call",
            json!({"name": "alpha", "arguments": {"text": 7}}),
        )
        .await;
    assert_eq!(bad_args["result"]["isError"], json!(true));

    let unknown = client
        .request(
            6,
            "tools/call",
            json!({"name": "nobody", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(unknown["error"]["code"], json!(-32602));

    let other = client.request(7, "resources/list", json!({})).await;
    assert_eq!(other["error"]["code"], json!(-32601));
}

#[tokio::test]
async fn a_cancelled_call_stops_waiting_and_gets_no_answer() {
    let (mut client, slow_started, slow_dropped, task, _) = start();
    client
        .send(json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "slow", "arguments": {"text": "x"}}}))
        .await;
    wait_for(&slow_started).await;
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 10}}))
        .await;
    wait_for(&slow_dropped).await;
    // The next answer is the ping's: request 10 gets none.
    let pong = client.request(11, "ping", json!({})).await;
    assert_eq!(pong["result"], json!({}));
    // The end of the input ends the server.
    drop(client);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_call_sent_again_while_it_runs_is_not_a_second_turn() {
    let (mut client, slow_started, slow_dropped, _, asks) = start();
    let call = json!({"jsonrpc": "2.0", "id": 30, "method": "tools/call", "params": {"name": "slow", "arguments": {"text": "x"}}});
    client.send(call.clone()).await;
    wait_for(&slow_started).await;
    client.send(call).await;
    // Answered in order: once the ping is, the second call was read.
    let pong = client.request(31, "ping", json!({})).await;
    assert_eq!(pong["result"], json!({}));
    assert_eq!(asks.load(Ordering::SeqCst), 1, "a second Turn");
    // Cancelling the id stops the one call there is.
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 30}}))
        .await;
    wait_for(&slow_dropped).await;
    assert!(slow_dropped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_call_that_asks_for_progress_hears_about_it_while_the_turn_runs() {
    let (mut client, slow_started, _, _, _) = start_with_progress(Duration::from_millis(20));
    client
        .send(json!({"jsonrpc": "2.0", "id": 20, "method": "tools/call", "params": {"name": "slow", "arguments": {"text": "x"}, "_meta": {"progressToken": "p-20"}}}))
        .await;
    wait_for(&slow_started).await;
    for expected in 1..=2 {
        let notification = client.receive().await;
        assert_eq!(
            notification["method"], "notifications/progress",
            "{notification}"
        );
        assert_eq!(notification["params"]["progressToken"], "p-20");
        assert_eq!(notification["params"]["progress"], json!(expected));
    }
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 20}}))
        .await;
    // Progress stops with the call: the next answer is the ping's, give or
    // take one notification already queued.
    client
        .send(json!({"jsonrpc": "2.0", "id": 21, "method": "ping"}))
        .await;
    let mut answer = client.receive().await;
    while answer["method"] == "notifications/progress" {
        answer = client.receive().await;
    }
    assert_eq!(answer["id"], json!(21), "{answer}");
}

#[tokio::test]
async fn the_http_endpoint_answers_posts_and_guards_token_and_origin() {
    use goondan_mcp::server::http::{router, HttpAccess, ENDPOINT};
    let swarm = Arc::new(Swarm {
        slow_started: Arc::default(),
        slow_dropped: Arc::default(),
        asks: Arc::default(),
    });
    let access = HttpAccess {
        bearer_token: Some("t0ken-for-tests".into()),
        allow_remote_origins: false,
        ..HttpAccess::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}{ENDPOINT}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router(swarm, access)).await });
    let client = reqwest::Client::new();
    let post = |body: Value| {
        client
            .post(&url)
            .header("Accept", "application/json, text/event-stream")
            .json(&body)
    };

    let called = post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "alpha", "arguments": {"text": "hi"}}}))
        .bearer_auth("t0ken-for-tests")
        .send()
        .await
        .unwrap();
    assert_eq!(called.status(), 200);
    let called: Value = called.json().await.unwrap();
    assert_eq!(
        called["result"]["content"][0]["text"],
        "alpha heard `hi` in None"
    );

    let initialized = post(json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}))
        .bearer_auth("t0ken-for-tests")
        .header("Origin", "http://localhost:6274")
        .send()
        .await
        .unwrap();
    assert_eq!(initialized.status(), 200);

    let notified = post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .bearer_auth("t0ken-for-tests")
        .send()
        .await
        .unwrap();
    assert_eq!(notified.status(), 202);

    let anonymous = post(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = post(json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}))
        .bearer_auth("t0ken-for-testz")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let rebound = post(json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}))
        .bearer_auth("t0ken-for-tests")
        .header("Origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403);

    // A body past the bound is refused before it is read whole.
    let huge = "x".repeat(goondan_mcp::server::http::MAX_BODY_BYTES + 1);
    let flooded = post(json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "alpha", "arguments": {"text": huge}}}))
        .bearer_auth("t0ken-for-tests")
        .send()
        .await
        .unwrap();
    assert_eq!(flooded.status(), 413);
}

#[tokio::test]
async fn http_sessions_scope_cancellation_and_progress_arrives_on_an_event_stream() {
    use goondan_mcp::server::http::{
        router_with_progress, HttpAccess, ENDPOINT, REQUEST_CANCELLED,
    };
    let slow_started = Arc::new(AtomicBool::new(false));
    let slow_dropped = Arc::new(AtomicBool::new(false));
    let asks: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
    let swarm = Arc::new(Swarm {
        slow_started: slow_started.clone(),
        slow_dropped: slow_dropped.clone(),
        asks: asks.clone(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}{ENDPOINT}", listener.local_addr().unwrap());
    let app = router_with_progress(swarm, HttpAccess::default(), Duration::from_millis(20));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();
    let post = |body: Value| {
        client
            .post(&url)
            .header("Accept", "application/json, text/event-stream")
            .json(&body)
    };

    let initialized = post(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}))
        .send()
        .await
        .unwrap();
    let session = initialized
        .headers()
        .get("mcp-session-id")
        .expect("initialize opens a session")
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(session.len(), 32);

    // A session the server never opened is refused, so the client starts over.
    let stale = post(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        .header("Mcp-Session-Id", "0123456789abcdef0123456789abcdef")
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), 404);
    let listen = client.get(&url).send().await.unwrap();
    assert_eq!(listen.status(), 405);

    // Progress while the Turn runs, then the response, as one event stream.
    let streamed = post(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "alpha", "arguments": {"text": "hi"}, "_meta": {"progressToken": "p1"}}}))
        .header("Mcp-Session-Id", &session)
        .send()
        .await
        .unwrap();
    assert!(streamed.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let body = streamed.text().await.unwrap();
    let last = body
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .next_back()
        .unwrap();
    let last: Value = serde_json::from_str(last).unwrap();
    assert_eq!(last["id"], 3);
    assert_eq!(
        last["result"]["content"][0]["text"],
        "alpha heard `hi` in None"
    );

    // A slow call, cancelled from another session, keeps running; cancelled
    // from its own, it stops and its POST gets the cancellation error.
    // (Every finished call drops its guard too, so the flag starts clean.)
    slow_dropped.store(false, Ordering::SeqCst);
    let slow = tokio::spawn(
        post(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "slow", "arguments": {"text": "x"}}}))
            .header("Mcp-Session-Id", &session)
            .send(),
    );
    while !slow_started.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}});
    let elsewhere = post(cancel.clone()).send().await.unwrap();
    assert_eq!(elsewhere.status(), 202);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !slow_dropped.load(Ordering::SeqCst),
        "another session's cancel stopped the call"
    );
    let own = post(cancel)
        .header("Mcp-Session-Id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), 202);
    let answered: Value = slow.await.unwrap().unwrap().json().await.unwrap();
    assert_eq!(answered["error"]["code"], REQUEST_CANCELLED, "{answered}");
    assert!(slow_dropped.load(Ordering::SeqCst));

    // A long call hears progress on its stream; cancelled, the stream
    // ends with the cancellation error.
    slow_started.store(false, Ordering::SeqCst);
    let mut progressing = post(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "slow", "arguments": {"text": "x"}, "_meta": {"progressToken": 9}}}))
        .header("Mcp-Session-Id", &session)
        .send()
        .await
        .unwrap();
    let mut seen = String::new();
    while !seen.contains("notifications/progress") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), progressing.chunk())
            .await
            .expect("progress within the interval")
            .unwrap()
            .expect("the stream stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains(r#""progressToken":9"#), "{seen}");
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}});
    post(cancel)
        .header("Mcp-Session-Id", &session)
        .send()
        .await
        .unwrap();
    let rest = progressing.text().await.unwrap();
    assert!(rest.contains(&REQUEST_CANCELLED.to_string()), "{rest}");

    // The same call sent again while it runs (a client that lost its
    // connection): one Turn, and its one answer for both requests.
    slow_started.store(false, Ordering::SeqCst);
    let before = asks.load(Ordering::SeqCst);
    let call = json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "slow", "arguments": {"text": "x"}}});
    let first = tokio::spawn(post(call.clone()).header("Mcp-Session-Id", &session).send());
    while !slow_started.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let again = tokio::spawn(post(call).header("Mcp-Session-Id", &session).send());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(asks.load(Ordering::SeqCst) - before, 1, "a second Turn");
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 12}});
    post(cancel)
        .header("Mcp-Session-Id", &session)
        .send()
        .await
        .unwrap();
    for answered in [first, again] {
        let answered: Value = answered.await.unwrap().unwrap().json().await.unwrap();
        assert_eq!(answered["error"]["code"], REQUEST_CANCELLED, "{answered}");
    }

    // A dropped connection cancels nothing; ending the session does.
    slow_started.store(false, Ordering::SeqCst);
    slow_dropped.store(false, Ordering::SeqCst);
    let abandoned = tokio::spawn(
        post(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "slow", "arguments": {"text": "x"}}}))
            .header("Mcp-Session-Id", &session)
            .send(),
    );
    while !slow_started.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    abandoned.abort();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !slow_dropped.load(Ordering::SeqCst),
        "a dropped connection cancelled the call"
    );
    let ended = client
        .delete(&url)
        .header("Mcp-Session-Id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 200);
    for _ in 0..100 {
        if slow_dropped.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        slow_dropped.load(Ordering::SeqCst),
        "ending the session cancels its calls"
    );
    let after = post(json!({"jsonrpc": "2.0", "id": 6, "method": "ping"}))
        .header("Mcp-Session-Id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 404);
}

/// The HTTP endpoint behind the accept loop every port shares (which
/// tells it each request's peer), on 127.0.0.1; its URL.
async fn serve_shared(access: goondan_mcp::server::http::HttpAccess) -> String {
    use goondan_mcp::server::http::{router, ENDPOINT};
    let swarm = Arc::new(Swarm {
        slow_started: Arc::default(),
        slow_dropped: Arc::default(),
        asks: Arc::default(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}{ENDPOINT}", listener.local_addr().unwrap());
    let limits = goondan_http::AcceptLimits::new(64, Duration::from_secs(30));
    tokio::spawn(goondan_http::serve(
        listener,
        router(swarm, access),
        limits,
        std::future::pending(),
    ));
    url
}

/// A client whose connections come from the loopback address `source`.
fn client_from(source: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(source))
        .build()
        .unwrap()
}

/// `initialize` from `client`: the status, the session id if one was
/// opened, and the JSON body.
async fn initialize(client: &reqwest::Client, url: &str) -> (u16, Option<String>, Value) {
    let answer = client
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}))
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let session = answer
        .headers()
        .get("mcp-session-id")
        .map(|value| value.to_str().unwrap().to_string());
    (status, session, answer.json().await.unwrap())
}

/// A `ping` in `session`; the status.
async fn ping_in(client: &reqwest::Client, url: &str, session: &str) -> u16 {
    client
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", session)
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Issue 35: 1,100 `initialize` calls from another local client evicted
/// an active session (one table of 1,024, oldest first). Sessions are held
/// per client: the flooder forgets only its own, and when the table is
/// full a new session is refused with a code instead of evicting anyone's.
#[tokio::test]
async fn a_flood_of_sessions_from_another_client_cannot_evict_an_active_one() {
    use goondan_mcp::server::http::{
        HttpAccess, MAX_SESSIONS, MAX_SESSIONS_PER_CLIENT, SESSION_LIMIT_CODE,
    };
    let url = serve_shared(HttpAccess::default()).await;
    let victim = client_from([127, 0, 0, 1]);
    let (status, session, _) = initialize(&victim, &url).await;
    assert_eq!(status, 200);
    let session = session.expect("a session");

    let flooder = client_from([127, 0, 0, 2]);
    let mut flooded = Vec::new();
    for _ in 0..1_100 {
        let (status, opened, _) = initialize(&flooder, &url).await;
        assert_eq!(status, 200, "a client over its cap keeps working");
        flooded.push(opened.expect("a session"));
    }
    assert_eq!(ping_in(&victim, &url, &session).await, 200, "still open");
    assert_eq!(
        ping_in(&flooder, &url, &flooded[0]).await,
        404,
        "the flooder's own oldest session went"
    );
    let newest = flooded.last().unwrap();
    assert_eq!(ping_in(&flooder, &url, newest).await, 200);

    // Many clients, each within its cap, fill the table: the next session
    // is refused with a code, and nobody's is forgotten for it.
    let mut refused = None;
    'clients: for last in 3..=255u8 {
        let client = client_from([127, 0, 0, last]);
        for _ in 0..MAX_SESSIONS_PER_CLIENT {
            let (status, opened, body) = initialize(&client, &url).await;
            if status != 200 {
                refused = Some((status, opened, body));
                break 'clients;
            }
        }
    }
    let (status, opened, body) = refused.expect("the table fills");
    assert_eq!(status, 503, "{body}");
    assert!(opened.is_none());
    assert_eq!(body["error"]["data"]["code"], SESSION_LIMIT_CODE, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains(&MAX_SESSIONS.to_string()));
    assert_eq!(ping_in(&victim, &url, &session).await, 200, "still open");
}

/// Issue 35: the endpoint checked `Origin` but not `Host`, and a DNS
/// rebinding page can send no `Origin` at all. On loopback only loopback
/// names pass; with remote clients allowed, IP addresses and the
/// configured names.
#[tokio::test]
async fn the_http_endpoint_refuses_a_host_that_is_not_its_own() {
    use goondan_mcp::server::http::HttpAccess;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let status_for = |url: String, host: &'static str, token: Option<&'static str>| {
        let ping = ping.clone();
        async move {
            let mut request = reqwest::Client::new()
                .post(&url)
                .header("Host", host)
                .json(&ping);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            request.send().await.unwrap().status().as_u16()
        }
    };

    let local = serve_shared(HttpAccess::default()).await;
    for (host, expected) in [
        ("127.0.0.1", 200),
        ("localhost:8765", 200),
        ("evil.example", 403),
        ("evil.example:8765", 403),
        ("192.0.2.7", 403),
    ] {
        assert_eq!(
            status_for(local.clone(), host, None).await,
            expected,
            "{host}"
        );
    }

    let token = "a-token-long-enough-for-any-port";
    let remote = serve_shared(HttpAccess {
        bearer_token: Some(token.into()),
        allow_remote_origins: true,
        allowed_hosts: vec!["mcp.example.com".into()],
    })
    .await;
    for (host, expected) in [
        ("mcp.example.com", 200),
        ("192.0.2.7:8765", 200),
        ("localhost", 200),
        ("evil.example", 403),
    ] {
        assert_eq!(
            status_for(remote.clone(), host, Some(token)).await,
            expected,
            "{host}"
        );
    }
}
