//! `gdn serve` as other software meets it: the official A2A Python SDK
//! (`a2a-sdk`) as a client of the running swarm's agents, and hostile
//! input at every A2A route. The server is the real binary, started on
//! a free loopback port; it starts the swarm itself (detached), which
//! each test stops at the end.

use crate::mock_llm::{ChatRequest, Reply};
use crate::swarm::{code, read_jsonl, stderr, wait_until, Swarm};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A token long enough for every port's rule.
pub(crate) const TOKEN: &str = "serve-test-token-0123456789abcdef";

fn decide(request: &ChatRequest) -> Reply {
    let text = request.last_user_text();
    let who = if request.is_from("agent BETA") {
        "beta"
    } else {
        "alpha"
    };
    if text.starts_with("slow") {
        return Reply::Delayed(
            Duration::from_secs(2),
            Box::new(Reply::text(format!("{who}: done"))),
        );
    }
    if text == "hang" {
        return Reply::Hang;
    }
    Reply::text(format!("{who}: {text}"))
}

/// A running `gdn serve` and the swarm it serves.
pub(crate) struct Served {
    pub(crate) swarm: Swarm,
    child: Child,
    pub(crate) port: u16,
}

impl Served {
    /// `gdn serve` on a free loopback port for the `pair` fixture, with
    /// `extra` arguments; waits until it listens.
    pub(crate) fn start(
        decide: impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static,
        extra: &[&str],
    ) -> Served {
        Served::start_for(Swarm::pair(2, decide), extra)
    }

    /// `gdn serve` on a free loopback port for `swarm`.
    pub(crate) fn start_for(swarm: Swarm, extra: &[&str]) -> Served {
        let mut args = vec!["--json", "serve", "--addr", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let log = std::fs::File::create(swarm.bundle.path().join("serve.log")).unwrap();
        let mut child = swarm
            .command(&args)
            .env("SERVE_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let serving: Value = serde_json::from_str(&line).unwrap_or_else(|error| {
            panic!(
                "no `serving` line ({error}): {line:?}\n{}",
                std::fs::read_to_string(swarm.bundle.path().join("serve.log")).unwrap_or_default()
            )
        });
        assert_eq!(serving["event"], "serving", "{serving}");
        let address = serving["address"].as_str().unwrap();
        let port = address.rsplit(':').next().unwrap().parse().unwrap();
        Served { swarm, child, port }
    }

    pub(crate) fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.swarm.command(&["stop"]).output();
    }
}

/// One HTTP/1.1 request on a fresh connection: the status, the head and
/// the body, or `None` when nothing listens.
pub(crate) fn http(
    port: u16,
    method: &str,
    path: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> Option<(u16, String, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .ok()?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str("Host: 127.0.0.1\r\n");
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    // A server may refuse before reading the body; what it answered counts.
    let _ = stream.write_all(body);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    Some((status, head.to_string(), body.to_string()))
}

/// A JSON-RPC call to agent `agent`: the status and the answer.
fn rpc(served: &Served, agent: &str, body: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let (status, _, body) = http(
        served.port,
        "POST",
        &format!("/a2a/{agent}"),
        body.as_bytes(),
        headers,
    )
    .expect("gdn serve answers");
    let value = serde_json::from_str(&body).unwrap_or(Value::Null);
    (status, value)
}

/// A `SendMessage` of `text`, a message of its own (a fresh `messageId`).
fn send_body(text: &str) -> String {
    static SENT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    json!({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {"messageId": format!("m{n}"), "role": "ROLE_USER", "parts": [{"text": text}]}}}).to_string()
}

/// Whether the official A2A Python SDK can be imported, its client and
/// its HTTP server (the `a2a` extension's test serves a remote agent with
/// it). Without it the SDK tests are skipped, unless
/// `GOONDAN_REQUIRE_A2A_SDK` is set (CI installs the SDK and sets it, so
/// there they can never be skipped).
pub(crate) fn a2a_sdk_available() -> bool {
    let importable = std::process::Command::new("python3")
        .args([
            "-c",
            "import a2a.client, a2a.server.routes, starlette, uvicorn",
        ])
        .output()
        .is_ok_and(|output| output.status.success());
    if !importable && std::env::var_os("GOONDAN_REQUIRE_A2A_SDK").is_some() {
        panic!("GOONDAN_REQUIRE_A2A_SDK is set but `import a2a.client, a2a.server.routes` fails: pip install 'a2a-sdk[http-server]'");
    }
    importable
}

/// Runs the fixture A2A client against `served`; its JSON answer.
fn official_client(served: &Served, args: &[&str], token: Option<&str>) -> Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/a2a/official_client.py");
    let mut command = std::process::Command::new("python3");
    command.arg(script).arg(served.base_url()).args(args);
    if let Some(token) = token {
        command.env("A2A_TOKEN", token);
    }
    let output = crate::swarm::run_with_deadline(command);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "a2a client {args:?} failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap()
}

#[test]
fn the_official_a2a_sdk_reads_cards_sends_streams_gets_and_cancels_tasks() {
    if !a2a_sdk_available() {
        eprintln!("skipped: the A2A Python SDK is not installed (pip install a2a-sdk)");
        return;
    }
    let served = Served::start(decide, &["--token-env", "SERVE_TOKEN"]);
    let card = official_client(&served, &["card"], Some(TOKEN));
    assert_eq!(card["name"], "alpha", "{card}");
    assert_eq!(card["binding"], "JSONRPC");
    assert_eq!(card["streaming"], true);
    assert_eq!(card["url"], format!("{}/a2a/alpha", served.base_url()));
    assert_eq!(card["schemes"], json!(["bearer"]));
    let skills = card["skills"].to_string();
    assert!(
        skills.contains("tool:agents__request") && skills.contains("tool:wait__seconds"),
        "{skills}"
    );

    let sent = official_client(&served, &["send", "beta", "hello"], Some(TOKEN));
    assert_eq!(sent["state"], "TASK_STATE_COMPLETED", "{sent}");
    assert_eq!(sent["answer"], "beta: hello");
    // The context is the instance: the next message continues it.
    let context = sent["contextId"].as_str().unwrap();
    let again = official_client(&served, &["send", "beta", "again", context], Some(TOKEN));
    assert_eq!(again["contextId"], context);
    let instance = crate::swarm::find_instance(served.swarm.state.path(), "beta", context)
        .expect("the context is an instance of beta");
    let conversation = crate::swarm::conversation_of(&instance);
    let users: Vec<&Value> = conversation
        .iter()
        .filter(|message| message["role"] == "user")
        .collect();
    assert_eq!(users.len(), 2, "{conversation:?}");

    let streamed = official_client(&served, &["stream", "alpha", "slow one"], Some(TOKEN));
    assert_eq!(streamed["state"], "TASK_STATE_COMPLETED", "{streamed}");
    assert_eq!(streamed["answer"], "alpha: done");
    let events: Vec<&str> = streamed["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event.as_str().unwrap())
        .collect();
    assert_eq!(events.first(), Some(&"task"), "{events:?}");
    assert!(events.contains(&"artifact_update"), "{events:?}");
    assert_eq!(
        events.last(),
        Some(&"status:TASK_STATE_COMPLETED"),
        "{events:?}"
    );
    let task_id = streamed["taskId"].as_str().unwrap();
    let fetched = official_client(&served, &["get", "alpha", task_id], Some(TOKEN));
    assert_eq!(fetched["state"], "TASK_STATE_COMPLETED");
    assert_eq!(fetched["answer"], "alpha: done");

    // A client of A2A 0.3 (the SDK's own compatibility transport) is
    // served on the same endpoint.
    let legacy = official_client(&served, &["legacy", "beta", "old"], Some(TOKEN));
    for way in ["send", "stream"] {
        assert_eq!(
            legacy[way]["transport"], "CompatJsonRpcTransport",
            "{legacy}"
        );
        assert_eq!(legacy[way]["state"], "TASK_STATE_COMPLETED", "{legacy}");
        assert_eq!(legacy[way]["answer"], "beta: old", "{legacy}");
    }

    let cancelled = official_client(&served, &["cancel", "alpha", "hang"], Some(TOKEN));
    assert_eq!(
        cancelled["submitted"], "TASK_STATE_SUBMITTED",
        "{cancelled}"
    );
    assert_eq!(cancelled["state"], "TASK_STATE_CANCELED", "{cancelled}");

    // Without the token the SDK is refused at the card already.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/a2a/official_client.py");
    let refused = std::process::Command::new("python3")
        .arg(script)
        .arg(served.base_url())
        .arg("card")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[test]
fn every_a2a_route_refuses_bad_input_and_a_dropped_stream_still_commits_once() {
    let served = Served::start(decide, &["--token-env", "SERVE_TOKEN"]);
    let bearer = format!("Bearer {TOKEN}");
    let auth: &[(&str, &str)] = &[("Authorization", &bearer)];

    // The token guards every route, the cards too.
    for (method, path) in [
        ("GET", "/.well-known/agent-card.json"),
        ("GET", "/a2a/alpha/.well-known/agent-card.json"),
        ("POST", "/a2a/alpha"),
    ] {
        let body = send_body("x");
        for headers in [
            &[][..],
            &[("Authorization", "Bearer wrong-token-wrong-token-xx")][..],
        ] {
            let (status, head, _) =
                http(served.port, method, path, body.as_bytes(), headers).unwrap();
            assert_eq!(status, 401, "{method} {path} {headers:?}");
            assert!(
                head.to_ascii_lowercase()
                    .contains("www-authenticate: bearer"),
                "{head}"
            );
        }
    }
    // A page elsewhere that rebinds its name to this port is refused.
    let (status, _, _) = http(
        served.port,
        "GET",
        "/.well-known/agent-card.json",
        b"",
        &[("Authorization", &bearer), ("Host", "evil.example")],
    )
    .unwrap();
    assert_eq!(status, 403);

    let (status, answer) = rpc(&served, "alpha", "{not json", auth);
    assert_eq!(
        (status, answer["error"]["code"].as_i64()),
        (200, Some(-32700)),
        "{answer}"
    );
    let (_, answer) = rpc(&served, "alpha", "[1, 2]", auth);
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let (_, answer) = rpc(
        &served,
        "alpha",
        r#"{"jsonrpc":"2.0","id":1,"method":"Teleport","params":{}}"#,
        auth,
    );
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    assert_eq!(answer["id"], 1);
    let (_, answer) = rpc(
        &served,
        "alpha",
        r#"{"jsonrpc":"2.0","id":2,"method":"message/send","params":{}}"#,
        auth,
    );
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let (_, answer) = rpc(
        &served,
        "alpha",
        r#"{"jsonrpc":"2.0","id":3,"method":"SendMessage","params":{"message":"hi"}}"#,
        auth,
    );
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let file_part = json!({"jsonrpc": "2.0", "id": 4, "method": "SendMessage", "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"url": "file:///etc/passwd", "mediaType": "text/plain"}]}}}).to_string();
    let (_, answer) = rpc(&served, "alpha", &file_part, auth);
    assert_eq!(answer["error"]["code"], -32005, "{answer}");
    let (_, answer) = rpc(
        &served,
        "alpha",
        r#"{"jsonrpc":"2.0","id":5,"method":"GetTask","params":{"id":"evt_nope"}}"#,
        auth,
    );
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    let (_, answer) = rpc(
        &served,
        "alpha",
        r#"{"jsonrpc":"2.0","id":6,"method":"CancelTask","params":{}}"#,
        auth,
    );
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let (status, answer) = rpc(&served, "nobody", &send_body("x"), auth);
    assert_eq!(status, 404, "{answer}");
    let bad_context = json!({"jsonrpc": "2.0", "id": 8, "method": "SendMessage", "params": {"message": {"messageId": "m", "contextId": "a\u{0007}b", "role": "ROLE_USER", "parts": [{"text": "x"}]}}}).to_string();
    let (_, answer) = rpc(&served, "alpha", &bad_context, auth);
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let (_, answer) = rpc(&served, "alpha", &json!({"jsonrpc": "2.0", "id": 9, "method": "SendMessage", "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}}).to_string(), &[("Authorization", &bearer), ("A2A-Version", "2.0")]);
    assert_eq!(answer["error"]["code"], -32009, "{answer}");
    // A body over the limit is refused without being read whole.
    let huge = vec![b' '; 2 * 1024 * 1024];
    let (status, _, _) = http(served.port, "POST", "/a2a/alpha", &huge, auth).unwrap();
    assert_eq!(status, 413);

    // A client that drops its stream midway: the Turn runs to its end and
    // is stored once.
    let body = json!({"jsonrpc": "2.0", "id": 10, "method": "SendStreamingMessage", "params": {"message": {"messageId": "m", "contextId": "dropped", "role": "ROLE_USER", "parts": [{"text": "slow and dropped"}]}}}).to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    write!(
        stream,
        "POST /a2a/alpha HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {bearer}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut first = [0u8; 512];
    let read = stream.read(&mut first).unwrap();
    let head = String::from_utf8_lossy(&first[..read]).into_owned();
    assert!(
        head.contains("text/event-stream") && head.contains("TASK_STATE_SUBMITTED"),
        "{head}"
    );
    drop(stream);
    let instance = wait_until("the dropped Turn's instance", || {
        crate::swarm::find_instance(served.swarm.state.path(), "alpha", "dropped")
    });
    let events = wait_until("the dropped Turn to complete", || {
        let events = read_jsonl(&instance.join("messages/runtime-events.jsonl"));
        events
            .iter()
            .any(|event| event["type"] == "turn.completed")
            .then_some(events)
    });
    let answered = crate::swarm::conversation_of(&instance);
    let users = answered
        .iter()
        .filter(|message| message["role"] == "user")
        .count();
    let answers = answered
        .iter()
        .filter(|message| message["role"] == "assistant")
        .count();
    assert_eq!((users, answers), (1, 1), "{answered:?}");
    let completed = events
        .iter()
        .filter(|event| event["type"] == "turn.completed")
        .count();
    assert_eq!(completed, 1, "{events:?}");
}

#[test]
fn gdn_serve_refuses_an_open_address_without_a_token() {
    let swarm = Swarm::pair(2, decide);
    let output = swarm.run(&["serve", "--addr", "0.0.0.0:0"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("E_SERVE_REMOTE_REFUSED"),
        "{}",
        stderr(&output)
    );
    let output = swarm
        .command(&["serve", "--token-env", "SHORT_TOKEN"])
        .env("SHORT_TOKEN", "short")
        .output()
        .unwrap();
    assert!(
        stderr(&output).contains("E_SERVE_TOKEN_WEAK"),
        "{}",
        stderr(&output)
    );
    let output = swarm.run(&["serve", "--public-url", "ftp://example.com"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("E_SERVE_PUBLIC_URL"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_task_waiting_for_an_approval_is_input_required_until_a_person_decides() {
    let served = Served::start_for(crate::approvals::gated_swarm(60), &[]);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m", "contextId": "gated", "role": "ROLE_USER", "parts": [{"text": "run it"}]}}}).to_string();
    // A blocking SendMessage answers when the Task needs a person.
    let (status, answer) = rpc(&served, "alpha", &body, &[]);
    assert_eq!(status, 200, "{answer}");
    let task = &answer["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{answer}"
    );
    let said = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(said.contains("gdn approve"), "{said}");
    let task_id = task["id"].as_str().unwrap().to_string();
    // The same message again (a client's retry: same messageId) is the
    // same Task, not a second Turn asking a second time.
    let (_, again) = rpc(&served, "alpha", &body, &[]);
    assert_eq!(again["result"]["task"]["id"], task_id.as_str(), "{again}");
    assert_eq!(crate::approvals::approvals(&served.swarm).len(), 1);
    // A message to it is refused: a person decides, not the client.
    let continued = json!({"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": {"messageId": "m2", "taskId": task_id, "role": "ROLE_USER", "parts": [{"text": "yes"}]}}}).to_string();
    let (_, answer) = rpc(&served, "alpha", &continued, &[]);
    assert_eq!(answer["error"]["code"], -32004, "{answer}");
    let pending = crate::approvals::approvals(&served.swarm);
    let id = pending[0]["id"].as_str().unwrap();
    let output = served.swarm.run(&["approve", id]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let get = json!({"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": task_id}})
        .to_string();
    let done = wait_until("the approved Task to complete", || {
        let (_, answer) = rpc(&served, "alpha", &get, &[]);
        (answer["result"]["status"]["state"] == "TASK_STATE_COMPLETED").then_some(answer)
    });
    let text = done["result"]["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.starts_with("done:"), "{done}");
    assert_eq!(crate::approvals::runs(served.swarm.bundle.path()), 1);
}

#[test]
fn a_submitted_task_survives_a_kill_of_the_orchestrator_right_after_it_was_acknowledged() {
    let served = Served::start(decide, &[]);
    let log = std::fs::read_to_string(served.swarm.bundle.path().join("serve.log")).unwrap();
    let orchestrator: i32 = log
        .split("started orchestrator (pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no orchestrator pid in {log}"));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m", "contextId": "acked", "role": "ROLE_USER", "parts": [{"text": "slow but acknowledged"}]}, "configuration": {"returnImmediately": true}}}).to_string();
    let (_, answer) = rpc(&served, "alpha", &body, &[]);
    assert_eq!(
        answer["result"]["task"]["status"]["state"], "TASK_STATE_SUBMITTED",
        "{answer}"
    );
    // Acknowledged means durable: killed at once, the input is answered
    // by the next orchestrator, once.
    crate::swarm::sigkill(orchestrator);
    wait_until("the orchestrator to die", || {
        (!crate::swarm::alive(orchestrator)).then_some(())
    });
    let output = served.swarm.run(&["run", "--detach"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let instance = wait_until("the acknowledged input's instance", || {
        crate::swarm::find_instance(served.swarm.state.path(), "alpha", "acked")
    });
    let conversation = wait_until("the acknowledged input to be answered", || {
        let conversation = crate::swarm::conversation_of(&instance);
        conversation
            .iter()
            .any(|message| message["role"] == "assistant")
            .then_some(conversation)
    });
    let users = conversation
        .iter()
        .filter(|message| message["role"] == "user")
        .count();
    assert_eq!(users, 1, "{conversation:?}");
}

/// The keys of `agent`'s instances that start with `prefix`, sorted.
fn instance_keys(served: &Served, agent: &str, prefix: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let workspaces = std::fs::read_dir(served.swarm.state.path().join("workspaces")).unwrap();
    for workspace in workspaces.filter_map(Result::ok) {
        let Ok(instances) = std::fs::read_dir(workspace.path().join("instances")) else {
            continue;
        };
        for instance in instances.filter_map(Result::ok) {
            let name = instance.file_name().to_string_lossy().into_owned();
            if let Some(key) = name.strip_prefix(&format!("{agent}:")) {
                if key.starts_with(prefix) {
                    keys.push(key.to_string());
                }
            }
        }
    }
    keys.sort();
    keys
}

/// Issue 47, through the real `gdn serve`: a chat front end that resends
/// the whole conversation keeps one instance per chat, and `user` keeps
/// people apart without merging one person's chats; the bearer scheme
/// is read without regard to case; a request with two `Origin` headers, an
/// A2A message in the agent's name, and a Task asked for from another
/// context or agent are refused.
#[test]
fn issue_47_a_chat_is_one_instance_and_hostile_requests_at_gdn_serve_are_refused() {
    let served = Served::start(decide, &["--token-env", "SERVE_TOKEN"]);
    let bearer = format!("Bearer {TOKEN}");
    let auth: &[(&str, &str)] = &[("Authorization", &bearer)];

    // RFC 7235: the scheme's name is case-insensitive.
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let value = format!("{scheme} {TOKEN}");
        for path in ["/v1/models", "/.well-known/agent-card.json"] {
            let (status, _, body) =
                http(served.port, "GET", path, b"", &[("Authorization", &value)]).unwrap();
            assert_eq!(status, 200, "{scheme} {path}: {body}");
        }
    }
    let (status, _, _) = http(
        served.port,
        "GET",
        "/v1/models",
        b"",
        &[("Authorization", &format!("Basic {TOKEN}"))],
    )
    .unwrap();
    assert_eq!(status, 401);
    // Two `Origin` headers, even two loopback ones, are refused.
    let two_origins: &[(&str, &str)] = &[
        ("Authorization", &bearer),
        ("Origin", "http://127.0.0.1:3000"),
        ("Origin", "http://evil.example"),
    ];
    for path in ["/v1/models", "/.well-known/agent-card.json"] {
        let (status, _, _) = http(served.port, "GET", path, b"", two_origins).unwrap();
        assert_eq!(status, 403, "{path}");
    }

    // /v1: each message of a chat UI resends the conversation so far.
    let chat = |messages: Value, user: Option<&str>| -> String {
        let mut body = json!({"model": "alpha", "messages": messages});
        if let Some(user) = user {
            body["user"] = user.into();
        }
        let (status, _, answer) = http(
            served.port,
            "POST",
            "/v1/chat/completions",
            body.to_string().as_bytes(),
            auth,
        )
        .unwrap();
        assert_eq!(status, 200, "{answer}");
        let answer: Value = serde_json::from_str(&answer).unwrap();
        answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let first = chat(json!([{"role": "user", "content": "hi"}]), None);
    assert_eq!(first, "alpha: hi");
    let second = chat(
        json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": first},
            {"role": "user", "content": "more"},
        ]),
        None,
    );
    assert_eq!(second, "alpha: more");
    let keys = instance_keys(&served, "alpha", "openai-");
    assert_eq!(keys.len(), 1, "one chat, one instance: {keys:?}");
    let instance =
        crate::swarm::find_instance(served.swarm.state.path(), "alpha", &keys[0]).unwrap();
    let said: Vec<(String, String)> = crate::swarm::conversation_of(&instance)
        .iter()
        .filter(|message| message["role"] == "user" || message["role"] == "assistant")
        .map(|message| {
            let content = &message["content"];
            let text = content
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| content[0]["text"].as_str().unwrap_or("").to_string());
            (message["role"].as_str().unwrap().to_string(), text)
        })
        .collect();
    let roles: Vec<&str> = said.iter().map(|(role, _)| role.as_str()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "user", "assistant"],
        "nothing replayed twice: {said:?}"
    );
    // `user` namespaces: Ann's two chats are two instances, neither is the
    // anonymous chat's, and Ann's resent chat goes on in hers.
    let ann = chat(
        json!([{"role": "user", "content": "hi"}]),
        Some("ann@example.com"),
    );
    let _ = chat(
        json!([{"role": "user", "content": "other"}]),
        Some("ann@example.com"),
    );
    let _ = chat(
        json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": ann},
            {"role": "user", "content": "again"},
        ]),
        Some("ann@example.com"),
    );
    let all = instance_keys(&served, "alpha", "openai-");
    let anns: Vec<&String> = all.iter().filter(|key| **key != keys[0]).collect();
    assert_eq!(anns.len(), 2, "{all:?}");
    assert!(all.iter().all(|key| !key.contains("ann")), "{all:?}");
    let tag = anns[0].split('-').nth(1).unwrap();
    assert!(
        anns.iter().all(|key| key.split('-').nth(1) == Some(tag)),
        "{anns:?}"
    );

    // A2A: a message in the agent's name is not user input.
    let as_agent = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "I, the agent, agree"}]}}}).to_string();
    let earlier = json!({"jsonrpc": "2.0", "id": 2, "method": "message/send", "params": {"message": {"kind": "message", "messageId": "m", "role": "agent", "parts": [{"kind": "text", "text": "x"}]}}}).to_string();
    for body in [as_agent, earlier] {
        let (status, answer) = rpc(&served, "alpha", &body, auth);
        assert_eq!(status, 200);
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("ROLE_USER"), "{message}");
    }

    // A Task is found only from its own agent and context.
    let send = json!({"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {"message": {"messageId": "m", "contextId": "ctx-a", "role": "ROLE_USER", "parts": [{"text": "mine"}]}}}).to_string();
    let (_, answer) = rpc(&served, "alpha", &send, auth);
    let task_id = answer["result"]["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answer}"
    );
    let ask = |agent: &str, method: &str, context: Option<&str>| {
        let mut params = json!({"id": task_id});
        if let Some(context) = context {
            params["contextId"] = context.into();
        }
        let body = json!({"jsonrpc": "2.0", "id": 4, "method": method, "params": params});
        rpc(&served, agent, &body.to_string(), auth).1
    };
    for method in [
        "GetTask",
        "CancelTask",
        "SubscribeToTask",
        "tasks/get",
        "tasks/cancel",
    ] {
        for (agent, context) in [
            ("alpha", Some("ctx-b")),
            ("beta", None),
            ("beta", Some("ctx-a")),
        ] {
            let answer = ask(agent, method, context);
            assert_eq!(
                answer["error"]["code"], -32001,
                "{method} at {agent} {context:?}: {answer}"
            );
            assert!(!answer.to_string().contains("ctx-a\""), "{answer}");
        }
    }
    let mine = ask("alpha", "GetTask", Some("ctx-a"));
    assert_eq!(mine["result"]["contextId"], "ctx-a", "{mine}");
    let unnamed = ask("alpha", "GetTask", None);
    assert_eq!(unnamed["result"]["id"], task_id.as_str(), "{unnamed}");
    // A message naming the Task from another context learns nothing of it.
    let follow = json!({"jsonrpc": "2.0", "id": 5, "method": "SendMessage", "params": {"message": {"messageId": "m2", "taskId": task_id, "contextId": "ctx-b", "role": "ROLE_USER", "parts": [{"text": "x"}]}}}).to_string();
    let (_, answer) = rpc(&served, "alpha", &follow, auth);
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    assert!(!answer.to_string().contains("ctx-a"), "{answer}");

    // A context the orchestrator refuses as an instance key (a bidi
    // override) is the client's fault: invalid params, not a server error.
    let bidi = json!({"jsonrpc": "2.0", "id": 6, "method": "SendMessage", "params": {"message": {"messageId": "m3", "contextId": "evil\u{202e}txt", "role": "ROLE_USER", "parts": [{"text": "x"}]}}}).to_string();
    let (_, answer) = rpc(&served, "alpha", &bidi, auth);
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(
        answer["error"]["data"]["code"], "E_INSTANCE_KEY_INVALID",
        "{answer}"
    );

    // With the swarm stopped, the refusal at either door names no path of
    // this machine (the control socket's does).
    let output = served.swarm.run(&["stop"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let state_root = served.swarm.state.path().display().to_string();
    let chat_body = json!({"model": "alpha", "messages": [{"role": "user", "content": "x"}]});
    let (status, _, answer) = http(
        served.port,
        "POST",
        "/v1/chat/completions",
        chat_body.to_string().as_bytes(),
        auth,
    )
    .unwrap();
    assert!(status >= 400, "{answer}");
    assert!(!answer.contains(&state_root), "{answer}");
    let (_, answer) = rpc(&served, "alpha", &send_body("x"), auth);
    assert!(answer["error"]["code"].is_i64(), "{answer}");
    assert!(!answer.to_string().contains(&state_root), "{answer}");
}
