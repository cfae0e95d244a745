//! The Studio's port, tried from outside over real TCP on 127.0.0.1:
//! what it serves from a real state root, and every way in it refuses
//! (foreign Host, missing or wrong token, writes, traversal, slow or huge
//! request heads, too many connections, a redirect to another site, one
//! client holding every connection).

use goondan_store::StateRoot;
use goondan_studio::{Access, Limits, Studio};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// A state root with one swarm, one instance, a message and two events.
fn state_root(dir: &Path) -> StateRoot {
    let instance = dir.join("workspaces/main-1234/instances/alpha:default");
    std::fs::create_dir_all(instance.join("messages")).unwrap();
    std::fs::write(
        instance.join("metadata.json"),
        r#"{"status":"idle","agentName":"alpha","instanceKey":"default","createdAt":"2026-01-01T00:00:00Z","updatedAt":"2026-01-01T00:00:01Z","usage":{"inputTokens":21,"outputTokens":4,"costUsd":0.5,"modelCalls":1}}"#,
    )
    .unwrap();
    std::fs::write(
        instance.join("messages/base.jsonl"),
        concat!(
            r#"{"id":"m1","data":{"role":"user","content":"hello"},"metadata":{},"createdAt":"2026-01-01T00:00:00Z","source":{"type":"user"}}"#,
            "\n"
        ),
    )
    .unwrap();
    std::fs::write(
        instance.join("messages/runtime-events.jsonl"),
        concat!(
            r#"{"type":"turn.started","timestamp":"2026-01-01T00:00:00.000Z","agentName":"alpha","instanceKey":"default","traceId":"0123456789abcdef0123456789abcdef","spanId":"aaaaaaaaaaaaaaaa","turnId":"turn_1"}"#,
            "\n",
            r#"{"type":"turn.completed","timestamp":"2026-01-01T00:00:01.000Z","agentName":"alpha","instanceKey":"default","traceId":"0123456789abcdef0123456789abcdef","spanId":"aaaaaaaaaaaaaaaa","turnId":"turn_1","stepCount":1,"duration":1000,"tokenUsage":{"promptTokens":21,"completionTokens":4,"totalTokens":25},"costUsd":0.5}"#,
            "\n"
        ),
    )
    .unwrap();
    // A file in the System Root that is not one of the Studio's answers.
    std::fs::write(dir.join("secret.txt"), "TOP SECRET").unwrap();
    StateRoot::new(dir)
}

struct Running {
    addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
    _runtime: tokio::runtime::Runtime,
}

fn start(root: StateRoot, access: impl FnOnce(SocketAddr) -> Access, limits: Limits) -> Running {
    start_studio(|addr| Studio {
        state_root: root,
        access: access(addr),
        limits,
        actions: false,
        eval_command: None,
    })
}

/// Serves the Studio `studio` makes for its address.
fn start_studio(studio: impl FnOnce(SocketAddr) -> Studio) -> Running {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let studio = studio(addr);
    runtime.spawn(goondan_studio::serve(listener, studio, async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        _stop: stop,
        _runtime: runtime,
    }
}

fn loopback(addr: SocketAddr) -> Access {
    Access::for_address(addr, None, false).unwrap()
}

/// Sends `request` as written and returns the whole answer (the server
/// closes after it: every request says `Connection: close`).
fn raw(addr: SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

fn get(addr: SocketAddr, path: &str, extra_headers: &str) -> String {
    raw(
        addr,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n{extra_headers}\r\n",
            addr.port()
        ),
    )
}

fn status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

#[test]
fn it_serves_the_page_the_swarms_a_conversation_and_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let studio = start(state_root(dir.path()), loopback, Limits::default());
    let page = get(studio.addr, "/", "");
    assert_eq!(status(&page), 200, "{page}");
    assert!(page.contains("Goondan <b>Studio</b>"));
    assert!(page.contains("content-security-policy"));
    let swarms = get(studio.addr, "/api/swarms", "");
    assert!(swarms.contains(r#""agentName":"alpha""#), "{swarms}");
    assert!(swarms.contains(r#""costUsd":0.5"#), "{swarms}");
    let conversation = get(
        studio.addr,
        "/api/swarms/main-1234/instances/alpha:default/conversation",
        "",
    );
    assert!(
        conversation.contains(r#""content":"hello""#),
        "{conversation}"
    );
    let trace = get(
        studio.addr,
        "/api/swarms/main-1234/traces/0123456789abcdef0123456789abcdef",
        "",
    );
    assert!(trace.contains(r#""instance":"alpha:default""#), "{trace}");
    assert!(trace.contains("turn.completed"), "{trace}");
}

#[test]
fn loopback_refuses_a_foreign_host_and_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let studio = start(state_root(dir.path()), loopback, Limits::default());
    // DNS rebinding: the browser sends the attacker's name as Host.
    let rebound = raw(
        studio.addr,
        "GET /api/swarms HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status(&rebound), 403, "{rebound}");
    assert!(rebound.contains("E_STUDIO_HOST"));
    assert!(!rebound.contains("alpha"));
    for path in ["/api/status", "/api/swarms/main-1234/map"] {
        let rebound = raw(
            studio.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(status(&rebound), 403, "{path}: {rebound}");
    }
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let answer = raw(
            studio.addr,
            &format!(
                "{method} /api/swarms HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}",
                studio.addr.port()
            ),
        );
        assert_eq!(status(&answer), 405, "{method}: {answer}");
    }
}

#[test]
fn no_url_reaches_outside_the_state_root() {
    let dir = tempfile::tempdir().unwrap();
    let root_dir = dir.path().join("root");
    std::fs::create_dir_all(&root_dir).unwrap();
    let root = state_root(&root_dir);
    std::fs::write(dir.path().join("outside.txt"), "OUTSIDE").unwrap();
    let studio = start(root, loopback, Limits::default());
    for path in [
        "/assets/../../secret.txt",
        "/assets/..%2F..%2Fsecret.txt",
        "/%2e%2e/%2e%2e/outside.txt",
        "/api/swarms/..%2F..%2F/instances/x/conversation",
        "/api/swarms/main-1234/instances/..%2F..%2F..%2Fsecret.txt/conversation",
        "/api/swarms/main-1234/instances/..%2F..%2F..%2F..%2Foutside.txt/events",
        "/api/swarms/..%2Fmain-1234/traces/x",
        "/api/swarms/..%2F..%2F/map",
        "/api/swarms/main-1234%2F..%2F..%2F..%2F/map",
        "/secret.txt",
    ] {
        let answer = get(studio.addr, path, "");
        assert!(
            !answer.contains("TOP SECRET") && !answer.contains("OUTSIDE"),
            "{path}: {answer}"
        );
        assert!(matches!(status(&answer), 400 | 404), "{path}: {answer}");
    }
}

#[test]
fn beyond_loopback_the_token_is_required_then_kept_in_a_cookie() {
    let dir = tempfile::tempdir().unwrap();
    let studio = start(
        state_root(dir.path()),
        |_| Access::Token {
            token: TOKEN.to_string(),
        },
        Limits::default(),
    );
    for path in ["/api/swarms", "/api/status", "/api/swarms/main-1234/map"] {
        assert_eq!(status(&get(studio.addr, path, "")), 401, "{path}");
    }
    assert_eq!(status(&get(studio.addr, "/?token=wrong", "")), 401);
    let wrong_cookie = format!("Cookie: gdn_studio={}\r\n", "f".repeat(32));
    assert_eq!(status(&get(studio.addr, "/api/swarms", &wrong_cookie)), 401);
    let welcome = get(studio.addr, &format!("/?token={TOKEN}"), "");
    assert_eq!(status(&welcome), 303, "{welcome}");
    let lower = welcome.to_ascii_lowercase();
    assert!(lower.contains("set-cookie: gdn_studio="), "{welcome}");
    assert!(lower.contains("httponly") && lower.contains("samesite=strict"));
    assert!(
        lower.contains("location: /\r\n"),
        "the token leaves the URL: {welcome}"
    );
    let cookie = format!("Cookie: gdn_studio={TOKEN}\r\n");
    let swarms = get(studio.addr, "/api/swarms", &cookie);
    assert_eq!(status(&swarms), 200, "{swarms}");
    assert!(swarms.contains("alpha"));
}

#[test]
fn slow_and_huge_request_heads_and_extra_connections_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let studio = start(
        state_root(dir.path()),
        loopback,
        Limits {
            max_connections: 2,
            header_timeout: Duration::from_millis(300),
            ..Limits::default()
        },
    );
    // A head that never ends is closed after the header timeout.
    let mut slow = TcpStream::connect(studio.addr).unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let mut sink = Vec::new();
    let _ = slow.read_to_end(&mut sink);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the slow head was not cut"
    );

    // A head past 16 KiB is refused.
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nX-Fill: {}\r\nConnection: close\r\n\r\n",
        studio.addr.port(),
        "a".repeat(64 * 1024)
    );
    let answer = raw(studio.addr, &huge);
    assert!(!answer.contains("200 OK"), "{answer}");

    // Two idle connections take both slots; the third is closed at once.
    let _first = TcpStream::connect(studio.addr).unwrap();
    let _second = TcpStream::connect(studio.addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let third = get(studio.addr, "/api/swarms", "");
    assert!(
        third.is_empty(),
        "a connection past the cap was served: {third}"
    );
}

/// Issue 35: `GET //evil.example/%2e%2e?token=…` answered `303 Location:
/// //evil.example/%2e%2e`, which a browser follows to another site. Every
/// path that would leave the Studio is redirected to `/`.
#[test]
fn the_token_redirect_keeps_to_the_studios_own_origin() {
    let dir = tempfile::tempdir().unwrap();
    let studio = start(
        state_root(dir.path()),
        |_| Access::Token {
            token: TOKEN.to_string(),
        },
        Limits::default(),
    );
    for path in [
        "//evil.example/%2e%2e",
        "/%2F%2Fevil.example",
        "/%5Cevil.example",
        "/%2f%5cevil.example",
    ] {
        let answer = get(studio.addr, &format!("{path}?token={TOKEN}"), "");
        assert_eq!(status(&answer), 303, "{path}: {answer}");
        assert!(
            answer.to_ascii_lowercase().contains("\r\nlocation: /\r\n"),
            "{path} is redirected to `/`: {answer}"
        );
    }
    // A path on the Studio keeps its place.
    let answer = get(studio.addr, &format!("/api/swarms?token={TOKEN}"), "");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("\r\nlocation: /api/swarms\r\n"),
        "{answer}"
    );
}

/// A connection to `studio` from the loopback address `source` (Linux
/// routes all of 127.0.0.0/8 to loopback, so 127.0.0.2 is another client).
fn connect_from(studio: &Running, source: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    let stream = studio
        ._runtime
        .block_on(socket.connect(studio.addr))
        .unwrap();
    let stream = stream.into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// A kept-alive `HEAD /` on `stream`: the answer's head, or nothing when
/// the server closed the connection instead. A served connection stays
/// open and idle afterwards.
fn head_and_keep(studio: &Running, stream: &mut TcpStream) -> String {
    let request = format!(
        "HEAD / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
        studio.addr.port()
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return String::new();
    }
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => answer.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// Issue 35: 64 idle connections from one client took every slot of the
/// Studio, locking it for everyone. With the default limits one client
/// holds only its share, and another is still served.
#[test]
fn one_client_holding_idle_connections_does_not_lock_out_another() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits::default();
    let studio = start(state_root(dir.path()), loopback, limits.clone());
    let mut crowd = Vec::new();
    let mut held = 0;
    for _ in 0..limits.max_connections {
        let mut stream = connect_from(&studio, "127.0.0.2");
        let answer = head_and_keep(&studio, &mut stream);
        if answer.starts_with("HTTP/1.1 200") {
            held += 1;
        } else {
            assert!(answer.is_empty(), "closed without an answer: {answer}");
        }
        crowd.push(stream);
    }
    assert_eq!(held, limits.max_connections_per_client);
    let mut other = connect_from(&studio, "127.0.0.1");
    let answer = head_and_keep(&studio, &mut other);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
}

/// The JSON body of an answer.
fn body(answer: &str) -> serde_json::Value {
    let (_, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    serde_json::from_str(body).unwrap_or_else(|error| panic!("{error}: {body}"))
}

/// Issue 35: a conversation of a few MB with one 20 MB message among the
/// newest. The Studio answers the newest messages from the end of the
/// log, skips the giant line (and says so) instead of loading it, and
/// its reader holds no more than its bounds.
#[test]
fn issue_35_a_giant_line_is_skipped_and_the_newest_messages_still_come() {
    let dir = tempfile::tempdir().unwrap();
    let root = state_root(dir.path());
    let base = dir
        .path()
        .join("workspaces/main-1234/instances/alpha:default/messages/base.jsonl");
    let n_messages = 20_000;
    let giant_at = n_messages - 10;
    let mut content = String::new();
    for index in 0..n_messages {
        let text = if index == giant_at {
            "g".repeat(20 * 1024 * 1024)
        } else {
            format!("message number {index} of a long conversation")
        };
        content.push_str(&format!(
            "{{\"id\":\"m{index}\",\"data\":{{\"role\":\"user\",\"content\":\"{text}\"}},\"metadata\":{{}},\"createdAt\":\"2026-01-01T00:00:00Z\",\"source\":{{\"type\":\"user\"}}}}\n"
        ));
    }
    std::fs::write(&base, &content).unwrap();
    drop(content);
    let limits = Limits::default();
    let studio = start(root, loopback, limits.clone());

    let answer = get(
        studio.addr,
        "/api/swarms/main-1234/instances/alpha:default/conversation",
        "",
    );
    assert_eq!(status(&answer), 200);
    let conversation = body(&answer);
    let messages = conversation["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 500);
    assert_eq!(messages[499]["id"], format!("m{}", n_messages - 1));
    assert_eq!(messages[0]["id"], format!("m{}", n_messages - 501));
    assert!(messages
        .iter()
        .all(|message| message["id"] != format!("m{giant_at}")));
    assert_eq!(conversation["skippedLines"], 1);
    assert_eq!(conversation["truncated"], true);
    assert_eq!(conversation["older"], true);
    let bytes_read = conversation["bytesRead"].as_u64().unwrap();
    assert!(bytes_read <= limits.max_read_bytes_per_request);

    // The reader's own account of what it held for that file.
    let tail_limits = goondan_store::tail::TailLimits {
        max_read_bytes: limits.max_read_bytes_per_request,
        max_line_bytes: limits.max_line_bytes,
    };
    let report = goondan_store::tail::scan_backwards(&base, tail_limits, |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    assert!(
        report.peak_buffer_bytes <= goondan_store::tail::BLOCK_BYTES + 2 * limits.max_line_bytes,
        "{report:?}"
    );
    assert!(report.bytes_read <= limits.max_read_bytes_per_request);
    assert_eq!(report.n_long_lines, 1);
}

/// Issue 35: reads of logs past the cap are refused at once with a coded
/// 503 and `Retry-After`, so parallel requests cannot multiply memory.
#[test]
fn issue_35_reads_of_logs_past_the_cap_are_answered_503_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let studio = start(
        state_root(dir.path()),
        loopback,
        Limits {
            max_heavy_requests: 0,
            ..Limits::default()
        },
    );
    for path in [
        "/api/swarms/main-1234/instances/alpha:default/conversation",
        "/api/swarms/main-1234/instances/alpha:default/events",
        "/api/swarms/main-1234/traces/0123456789abcdef0123456789abcdef",
    ] {
        let answer = get(studio.addr, path, "");
        assert_eq!(status(&answer), 503, "{path}: {answer}");
        assert!(
            answer.to_ascii_lowercase().contains("retry-after: 1\r\n"),
            "{answer}"
        );
        assert_eq!(body(&answer)["code"], "E_STUDIO_BUSY");
    }
    // The swarm list reads no logs and is not capped.
    assert_eq!(status(&get(studio.addr, "/api/swarms", "")), 200);
}

#[test]
fn issue_39_eval_runs_are_listed_and_each_case_opens_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let root = state_root(dir.path());
    // A stored `gdn eval` run whose one case ran in its own System Root.
    let run = dir.path().join("evals/20261128T031600Z");
    state_root(&run.join("0"));
    std::fs::write(
        run.join("run.json"),
        r#"{"runId":"20261128T031600Z","startedAt":"2026-11-28T03:16:00Z","durationMs":900,"passed":false,"replay":true,"cases":[{"eval":"smoke","name":"judged","model":null,"repeat":1,"status":"failed","score":6.5,"threshold":7.0,"failures":[{"assertion":"threshold","message":"the judge scored 6.5"}],"latencyMs":400,"costUsd":0.5,"workspaceId":"main-1234","traceId":"0123456789abcdef0123456789abcdef"}]}"#,
    )
    .unwrap();
    let studio = start(root, loopback, Limits::default());
    let runs = body(&get(studio.addr, "/api/evals", ""));
    let case = &runs["runs"][0]["cases"][0];
    assert_eq!(runs["runs"][0]["runId"], "20261128T031600Z");
    assert_eq!(case["name"], "judged");
    assert_eq!(case["score"], 6.5);
    assert_eq!(case["status"], "failed");
    let trace = get(
        studio.addr,
        "/api/evals/20261128T031600Z/0/swarms/main-1234/traces/0123456789abcdef0123456789abcdef",
        "",
    );
    assert_eq!(status(&trace), 200, "{trace}");
    assert!(trace.contains("turn.completed"), "{trace}");
    for escape in [
        "/api/evals/..%2F..%2F/0/swarms/main-1234/traces/0123456789abcdef0123456789abcdef",
        "/api/evals/20261128T031600Z/..%2F0/swarms/main-1234/traces/0123456789abcdef0123456789abcdef",
        "/api/evals/20261128T031600Z/1/swarms/main-1234/traces/0123456789abcdef0123456789abcdef",
    ] {
        assert_eq!(status(&get(studio.addr, escape, "")), 404, "{escape}");
    }
}

#[test]
fn issue_49_status_says_a_swarm_runs_only_while_its_orchestrator_answers() {
    let dir = tempfile::tempdir().unwrap();
    let root = state_root(dir.path());
    let studio = start(root.clone(), loopback, Limits::default());
    let answer = body(&get(studio.addr, "/api/status", ""));
    assert_eq!(
        answer["swarms"],
        serde_json::json!([{"id": "main-1234", "running": false}])
    );
    // The record a killed orchestrator leaves behind, naming a socket no
    // one listens on, is not a running swarm.
    let workspace = root.list_workspaces().unwrap().remove(0);
    goondan_store::ActiveSwarm {
        pid: std::process::id(),
        bundle_dir: dir.path().to_path_buf(),
        swarm: "default".into(),
        instance_key: "default".into(),
        started_at: "2026-01-01T00:00:00Z".into(),
        control_socket: dir.path().join("gone.sock"),
    }
    .write(&workspace.active_file())
    .unwrap();
    let swarms = body(&get(studio.addr, "/api/swarms", ""));
    assert_eq!(swarms["swarms"][0]["running"], true, "{swarms}");
    let answer = body(&get(studio.addr, "/api/status", ""));
    assert_eq!(answer["swarms"][0]["running"], false, "{answer}");
}

/// A two-agent bundle with a Connection, for the swarm's map.
const MAP_BUNDLE: &str = r#"apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: llm
spec:
  provider: openai
  model: gpt-mock
  endpoint: "http://127.0.0.1:9/v1"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: coder
spec:
  modelConfig:
    modelRef: Model/llm
  tools:
    - ref: Tool/agents
    - ref: Tool/bash
  extensions:
    - ref: Extension/context-message
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: reviewer
spec:
  modelConfig:
    modelRef: Model/llm
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: team
spec:
  entryAgent: Agent/coder
  agents:
    - ref: Agent/coder
    - ref: Agent/reviewer
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: slack-in
spec:
  connectorRef:
    kind: Connector
    name: slack
    package: "@goondan/base"
  swarmRef: "Swarm/team"
  config:
    SLACK_WEBHOOK_PORT:
      value: "0"
  secrets:
    SLACK_SIGNING_SECRET:
      valueFrom:
        env: SLACK_SIGNING_SECRET
  ingress:
    rules:
      - match:
          event: app_mention
        route:
          agentRef: Agent/reviewer
      - route: {}
"#;

#[test]
fn issue_49_a_swarms_map_comes_from_its_bundle_with_its_connections_and_routes() {
    let dir = tempfile::tempdir().unwrap();
    let root = state_root(dir.path());
    let studio = start(root.clone(), loopback, Limits::default());
    // A swarm whose orchestrator recorded no bundle has no map.
    let answer = get(studio.addr, "/api/swarms/main-1234/map", "");
    assert_eq!(status(&answer), 404, "{answer}");
    assert!(answer.contains("E_STUDIO_NO_BUNDLE"), "{answer}");
    let bundle = tempfile::tempdir().unwrap();
    std::fs::write(bundle.path().join("goondan.yaml"), MAP_BUNDLE).unwrap();
    let workspace = root.list_workspaces().unwrap().remove(0);
    goondan_store::WorkspaceIdentity {
        package: None,
        swarm: "team".into(),
        bundle_dir: bundle.path().to_path_buf(),
    }
    .write(&workspace.identity_file())
    .unwrap();
    let map = body(&get(studio.addr, "/api/swarms/main-1234/map", ""));
    assert_eq!(map["swarm"], "team", "{map}");
    assert_eq!(map["entryAgent"], "coder", "{map}");
    let agents = map["agents"].as_array().unwrap();
    assert_eq!(agents[0]["name"], "coder");
    assert_eq!(agents[0]["mayCall"], serde_json::json!(["reviewer"]));
    assert_eq!(
        agents[0]["extensions"],
        serde_json::json!(["context-message"])
    );
    assert!(
        agents[0]["tools"].to_string().contains("bash__exec"),
        "{map}"
    );
    // The reviewer has no agents tool: it calls no one.
    assert_eq!(agents[1]["mayCall"], serde_json::json!([]));
    assert_eq!(
        map["connections"],
        serde_json::json!([{
            "name": "slack-in",
            "connector": "slack",
            "rules": [
                {"event": "app_mention", "agent": "reviewer"},
                {"event": null, "agent": "coder"},
            ],
        }])
    );
    // No answer names a path of this machine.
    let text = get(studio.addr, "/api/swarms/main-1234/map", "");
    assert!(!text.contains(&*bundle.path().to_string_lossy()), "{text}");
    // A bundle broken since is answered 404 with a code, not its paths.
    std::fs::write(bundle.path().join("goondan.yaml"), "kind: [").unwrap();
    let broken = get(studio.addr, "/api/swarms/main-1234/map", "");
    assert_eq!(status(&broken), 404, "{broken}");
    assert!(broken.contains("E_STUDIO_NO_BUNDLE"), "{broken}");
    assert!(
        !broken.contains(&*bundle.path().to_string_lossy()),
        "{broken}"
    );
}

/// A POST of `body` to `path` with everything an action needs: the
/// token's cookie, the Studio's own Origin and its page's CSRF token.
fn act(addr: SocketAddr, path: &str, body: &str) -> String {
    let page = get(addr, "/", "");
    let csrf = page
        .split_once(r#"<meta name="gdn-csrf" content=""#)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(csrf, _)| csrf.to_string())
        .unwrap_or_else(|| panic!("no CSRF token in {page}"));
    let port = addr.port();
    raw(
        addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nOrigin: http://127.0.0.1:{port}\r\nCookie: gdn_studio={TOKEN}\r\nX-Goondan-Csrf: {csrf}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// Issue 49 #6: a re-run runs the Studio's `eval_command` (here a script
/// standing in for `gdn`) in the run's bundle folder, each value one
/// argument, hostile ones too, and answers from the run it made; with no
/// `eval_command` it is 501.
#[test]
fn issue_49_a_rerun_starts_the_eval_command_in_the_bundle_folder_with_one_argument_per_value() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = tempfile::tempdir().unwrap();
    let root = state_root(dir.path());
    let run = dir.path().join("evals/20261128T031600Z");
    std::fs::create_dir_all(&run).unwrap();
    let case_name = "$(touch pwned) --help; 'x'";
    let report = serde_json::json!({
        "runId": "20261128T031600Z", "bundle": bundle.path(), "replay": false, "passed": false,
        "cases": [{"eval": "smoke", "name": case_name, "model": "fast", "status": "failed", "timeoutMs": 5000}],
    });
    std::fs::write(run.join("run.json"), report.to_string()).unwrap();
    // The stand-in writes its arguments and folder, then a new run with
    // one passed case, and prints its report as `gdn eval --json` does.
    let script = bundle.path().join("fake-gdn");
    std::fs::write(
        &script,
        r#"#!/bin/sh
root="${1#--state-root=}"
printf '%s\n' "$@" > "$root/argv.txt"
pwd > "$root/cwd.txt"
mkdir -p "$root/evals/20261128T040000Z"
report='{"runId":"20261128T040000Z","replay":false,"passed":true,"cases":[{"eval":"smoke","name":"other","model":"fast","status":"passed","score":9.5}]}'
printf '%s' "$report" > "$root/evals/20261128T040000Z/run.json"
printf '%s\n' "$report"
"#,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let make = |command: Option<std::path::PathBuf>| {
        let root = root.clone();
        start_studio(move |addr| Studio {
            state_root: root,
            access: Access::for_address(addr, Some(TOKEN.into()), true).unwrap(),
            limits: Limits::default(),
            actions: true,
            eval_command: command,
        })
    };
    let ask = r#"{"run":"20261128T031600Z","case":0}"#;
    let without = make(None);
    let answer = act(without.addr, "/api/actions/rerun", ask);
    assert_eq!(status(&answer), 501, "{answer}");
    assert_eq!(body(&answer)["code"], "E_STUDIO_RERUN_UNAVAILABLE");

    let studio = make(Some(script));
    let answer = act(studio.addr, "/api/actions/rerun", ask);
    assert_eq!(status(&answer), 200, "{answer}");
    let answer = body(&answer);
    assert_eq!(answer["runId"], "20261128T040000Z");
    assert_eq!(answer["case"]["status"], "passed");
    assert_eq!(answer["case"]["score"], 9.5);
    let argv = std::fs::read_to_string(dir.path().join("argv.txt")).unwrap();
    let state_root = std::path::absolute(dir.path()).unwrap();
    assert_eq!(
        argv.lines().collect::<Vec<_>>(),
        [
            format!("--state-root={}", state_root.display()).as_str(),
            "--json",
            "eval",
            &format!("--case={case_name}"),
            "--models=fast",
            "--",
            "smoke",
        ]
    );
    let cwd = std::fs::read_to_string(dir.path().join("cwd.txt")).unwrap();
    assert_eq!(
        std::fs::canonicalize(cwd.trim()).unwrap(),
        std::fs::canonicalize(bundle.path()).unwrap()
    );
    assert!(!bundle.path().join("pwned").exists());
    assert!(!dir.path().join("pwned").exists());
}
