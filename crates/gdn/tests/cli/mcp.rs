//! `gdn mcp serve` against a running swarm, driven as an MCP client would
//! (JSON-RPC lines on its stdin and stdout), and the `mcp` extension inside
//! a real AgentProcess: `alpha` answers by calling the fixture MCP server's
//! `echo` tool, so one call crosses MCP both ways.

use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::swarm::{fixture, Swarm};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Long enough for a loaded two-core machine, short enough to fail a hang.
const DEADLINE: Duration = Duration::from_secs(20);

fn decide(request: &ChatRequest) -> Reply {
    if request.last_user_text() == "hang" {
        return Reply::Hang;
    }
    if request.is_from("agent ALPHA") && request.last_user_text() == "chain" {
        return Reply::tool(
            "agents__request",
            json!({"target": "beta", "input": "hang"}),
        );
    }
    if request.is_from("agent BETA") {
        return Reply::text(format!("beta: {}", request.last_user_text()));
    }
    match request.tool_result() {
        Some(result) => Reply::text(format!("alpha heard: {result}")),
        None => Reply::tool("fx__echo", json!({"text": request.last_user_text()})),
    }
}

fn mcp_swarm() -> Swarm {
    let mock = MockLlm::start(decide);
    let server = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../goondan-mcp/tests/fixtures/mcp_server.py");
    let bundle = fixture(
        "mcp",
        &[
            ("@ENDPOINT@", mock.endpoint()),
            ("@FIXTURE@", server.display().to_string()),
        ],
    );
    Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    }
}

/// `gdn mcp serve` as a child, spoken to line by line.
struct McpClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl McpClient {
    fn start(swarm: &Swarm) -> McpClient {
        let mut child = swarm
            .command(&["mcp", "serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        McpClient {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        let line = self
            .lines
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("no answer to {method}"));
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["id"], json!(id), "{answer}");
        answer
    }

    fn notify(&mut self, method: &str) {
        self.notify_with(method, json!({}));
    }

    fn notify_with(&mut self, method: &str, params: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request without waiting for its answer.
    fn send(&mut self, id: u64, method: &str, params: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin and waits for the exit code.
    fn finish(mut self) -> i32 {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "gdn mcp serve did not exit"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn gdn_mcp_serve_offers_each_agent_as_a_tool_and_each_call_is_a_turn() {
    let swarm = mcp_swarm();
    let resident = swarm.start_resident();
    let mut client = McpClient::start(&swarm);

    let initialized = client.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}),
    );
    assert_eq!(initialized["result"]["protocolVersion"], "2025-06-18");
    client.notify("notifications/initialized");

    let listed = client.request(2, "tools/list", json!({}));
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta"]);

    // alpha's Turn calls the fixture MCP server's `echo` through the mcp
    // extension in its AgentProcess.
    let alpha = client.request(
        3,
        "tools/call",
        json!({"name": "alpha", "arguments": {"text": "one"}}),
    );
    assert_eq!(
        alpha["result"],
        json!({"content": [{"type": "text", "text": "alpha heard: one"}], "isError": false}),
        "{alpha}"
    );
    let beta = client.request(
        4,
        "tools/call",
        json!({"name": "beta", "arguments": {"text": "two", "instanceKey": "side"}}),
    );
    assert_eq!(beta["result"]["content"][0]["text"], "beta: two", "{beta}");

    assert_eq!(client.finish(), 0);

    // The same swarm over streamable HTTP on a loopback port.
    let (mut http, address) = serve_http(&swarm);
    let answer = post(
        &address,
        &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "beta", "arguments": {"text": "three"}}}),
    );
    assert_eq!(
        answer["result"]["content"][0]["text"], "beta: three",
        "{answer}"
    );
    let _ = http.kill();
    let _ = http.wait();
    drop(resident);
}

/// Calls `agent` with `text` through `gdn mcp serve` (request 2), waits
/// until the model call `hangs` names is in flight, cancels the call, and
/// checks that beta answers the next call (it could not while a Turn of
/// it hung), that the cancelled call is never answered, and that beta's
/// hung Turn failed as cancelled.
fn cancel_a_hanging_call(agent: &str, text: &str, hangs: fn(&ChatRequest) -> bool) {
    let swarm = mcp_swarm();
    let resident = swarm.start_resident();
    let mut client = McpClient::start(&swarm);
    client.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}),
    );
    client.notify("notifications/initialized");
    client.send(
        2,
        "tools/call",
        json!({"name": agent, "arguments": {"text": text}}),
    );
    swarm.mock.wait_for("the hanging model call", hangs);
    client.notify_with("notifications/cancelled", json!({"requestId": 2}));

    let after = client.request(
        3,
        "tools/call",
        json!({"name": "beta", "arguments": {"text": "after"}}),
    );
    assert_eq!(
        after["result"]["content"][0]["text"], "beta: after",
        "{after}"
    );
    assert!(client.lines.try_recv().is_err());
    let events = swarm.runtime_events("beta");
    let failed = events
        .iter()
        .find(|event| event["type"] == "turn.failed")
        .unwrap_or_else(|| panic!("no turn.failed in {events:?}"));
    assert!(
        failed["errorMessage"]
            .as_str()
            .is_some_and(|message| message.contains("cancelled")),
        "{failed}"
    );
    assert_eq!(client.finish(), 0);
    drop(resident);
}

#[test]
fn a_cancelled_call_stops_its_turn_and_the_instance_takes_the_next() {
    // beta's model never answers this one: its Turn holds the instance.
    cancel_a_hanging_call("beta", "hang", |request| request.last_user_text() == "hang");
}

#[test]
fn a_cancelled_call_also_cancels_the_turn_it_waits_on_in_another_agent() {
    // alpha asks beta, whose model never answers: beta is free again only
    // if its Turn was cancelled with alpha's.
    cancel_a_hanging_call("alpha", "chain", |request| {
        request.is_from("agent BETA") && request.last_user_text() == "hang"
    });
}

/// `gdn mcp serve --http 127.0.0.1:0` for `swarm`, and the address it
/// printed it serves on.
fn serve_http(swarm: &Swarm) -> (Child, String) {
    let mut http = swarm
        .command(&["mcp", "serve", "--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(http.stderr.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let address = banner
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_string();
    (http, address)
}

/// One JSON-RPC message POSTed to `/mcp` over a plain HTTP/1.1
/// connection; the JSON body of the answer.
fn post(address: &str, message: &Value) -> Value {
    use std::io::Read;
    let body = message.to_string();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    serde_json::from_str(body).unwrap()
}

#[test]
fn gdn_mcp_serve_refuses_a_remote_http_address_without_a_token() {
    let swarm = mcp_swarm();
    let output = swarm
        .command(&["mcp", "serve", "--http", "0.0.0.0:0", "--allow-remote"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("error[E_MCP_REMOTE_REFUSED]"), "{stderr}");
}

#[test]
fn gdn_mcp_serve_no_start_without_an_orchestrator_says_to_start_one() {
    let swarm = mcp_swarm();
    let output = swarm
        .command(&["mcp", "serve", "--no-start"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error[E_ORCHESTRATOR_NOT_RUNNING]"),
        "{stderr}"
    );
    assert!(stderr.contains("gdn run --detach"), "{stderr}");
    assert!(
        output.stdout.is_empty(),
        "stdout is for protocol lines only"
    );
}

/// Issue 38: `gdn mcp serve` as an MCP client's settings start it, with
/// no orchestrator running: it starts one in the background, says so on
/// stderr, and the client's first call is answered by a real Turn.
#[test]
fn gdn_mcp_serve_starts_the_orchestrator_and_answers_the_first_call() {
    let swarm = mcp_swarm();
    let mut client = McpClient::start(&swarm);
    let stderr = client.child.stderr.take().unwrap();
    let said = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut text);
        text
    });
    client.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}),
    );
    client.notify("notifications/initialized");
    let alpha = client.request(
        2,
        "tools/call",
        json!({"name": "alpha", "arguments": {"text": "first"}}),
    );
    assert_eq!(
        alpha["result"]["content"][0]["text"], "alpha heard: first",
        "{alpha}"
    );
    assert_eq!(client.finish(), 0);
    let said = said.join().unwrap();
    assert!(
        said.contains(
            "no orchestrator runs Swarm/default of this bundle: starting one in the background"
        ),
        "{said}"
    );
    assert!(said.contains("started orchestrator (pid"), "{said}");
    // It outlives the client, as a detached swarm does, until `gdn stop`.
    let stopped = swarm.run(&["stop"]);
    assert_eq!(
        stopped.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
}

/// Whether the official MCP Python SDK can be imported. Without it the
/// test below is skipped, unless `GOONDAN_REQUIRE_MCP_CLIENT` is set (CI
/// installs the SDK and sets it, so there it can never be skipped).
fn official_client_available() -> bool {
    let importable = std::process::Command::new("python3")
        .args(["-c", "import mcp.client.streamable_http"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !importable && std::env::var_os("GOONDAN_REQUIRE_MCP_CLIENT").is_some() {
        panic!("GOONDAN_REQUIRE_MCP_CLIENT is set but `import mcp` fails: pip install mcp");
    }
    importable
}

/// Runs the fixture client with `args`; its one JSON line.
fn official_client(swarm: &Swarm, args: &[&str]) -> Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp/official_client.py");
    let mut command = std::process::Command::new("python3");
    command
        .arg(script)
        .args(args)
        .current_dir(swarm.bundle.path())
        .env("OPENAI_API_KEY", "sk-e2e-3f9c");
    let output = crate::swarm::run_with_deadline(command);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "client failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|_| panic!("not JSON: {stdout}"))
}

#[test]
fn the_official_python_sdk_lists_and_calls_agents_over_stdio_and_http() {
    if !official_client_available() {
        eprintln!("skipped: the MCP Python SDK is not installed (pip install mcp)");
        return;
    }
    let swarm = mcp_swarm();
    let resident = swarm.start_resident();
    let bundle = swarm.bundle.path().display().to_string();
    let state = swarm.state.path().display().to_string();
    let over_stdio = official_client(
        &swarm,
        &[
            "stdio",
            env!("CARGO_BIN_EXE_gdn"),
            "--config",
            &bundle,
            "--state-root",
            &state,
            "mcp",
            "serve",
        ],
    );
    assert_eq!(
        over_stdio,
        json!({"tools": ["alpha", "beta"], "text": "beta: from python", "isError": false})
    );

    let (mut http, address) = serve_http(&swarm);
    let url = format!("http://{address}/mcp");
    let over_http = official_client(&swarm, &["http", &url]);
    assert_eq!(over_http["text"], "beta: from python", "{over_http}");
    let _ = http.kill();
    let _ = http.wait();
    drop(resident);
}

#[test]
fn the_http_port_closes_a_connection_whose_head_never_ends() {
    use std::io::Read;
    let swarm = mcp_swarm();
    let resident = swarm.start_resident();
    let (mut http, address) = serve_http(&swarm);
    // A slowloris: half a request head, then silence.
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    let closed = stream.read_to_end(&mut rest);
    assert!(
        closed.is_ok(),
        "the server closed the connection: {closed:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "closed by the header timeout, not the test's"
    );
    // The port still serves.
    let answer = post(
        &address,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
    );
    assert_eq!(answer["result"], json!({}), "{answer}");
    let _ = http.kill();
    let _ = http.wait();
    drop(resident);
}

/// Issue 35.1: `--token-env` accepted a one-character token, and with it
/// any caller ran Turns (the agents' `bash`). A token that guards the
/// port must have at least 24 characters, as the Studio's must.
#[test]
fn issue_35_1_gdn_mcp_serve_refuses_a_token_too_short_to_guard_the_port() {
    let swarm = mcp_swarm();
    for (address, token) in [
        ("0.0.0.0:0", "x"),
        ("0.0.0.0:0", "twenty-three-characters"),
        ("127.0.0.1:0", "x"),
    ] {
        let mut command = swarm.command(&["mcp", "serve", "--http", address, "--token-env", "T"]);
        if address.starts_with("0.0.0.0") {
            command.arg("--allow-remote");
        }
        let output = command
            .env("T", token)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{address} {token}: {stderr}");
        assert!(stderr.contains("error[E_MCP_TOKEN_WEAK]"), "{stderr}");
        assert!(stderr.contains("at least 24"), "{stderr}");
        assert!(stderr.contains("= help:"), "{stderr}");
        // A one-character token is in any text; a longer one must not be.
        if token.len() > 1 {
            assert!(!stderr.contains(token), "the token is echoed: {stderr}");
        }
    }
}

/// The status of one `ping` POSTed to `/mcp` at `address` with `host` as
/// its `Host` header.
fn ping_status_with_host(address: &str, host: &str) -> u16 {
    use std::io::Read;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or(0)
}

/// Issue 35.2: the HTTP port checked `Origin` but not `Host`, so a page
/// that rebinds its own name to 127.0.0.1 (and sends no `Origin`) got in.
#[test]
fn issue_35_2_the_http_port_refuses_a_host_that_is_not_loopback() {
    let swarm = mcp_swarm();
    let resident = swarm.start_resident();
    let (mut http, address) = serve_http(&swarm);
    let port = address.rsplit(':').next().unwrap().to_string();
    assert_eq!(
        ping_status_with_host(&address, &format!("rebound.evil.example:{port}")),
        403
    );
    assert_eq!(
        ping_status_with_host(&address, &format!("localhost:{port}")),
        200
    );
    assert_eq!(ping_status_with_host(&address, &address), 200);
    let _ = http.kill();
    let _ = http.wait();
    drop(resident);
}

/// Issue 36: a call whose Turn waits for a person's approval says so in
/// its progress notifications (with the approval's id and how to decide
/// it), and goes on when it is approved.
#[test]
fn a_call_waiting_for_an_approval_says_so_and_goes_on_once_approved() {
    let swarm = crate::approvals::gated_swarm(3600);
    let resident = swarm.start_resident();
    let mut client = McpClient::start(&swarm);
    client.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}),
    );
    client.notify("notifications/initialized");
    client.send(
        2,
        "tools/call",
        json!({"name": "alpha", "arguments": {"text": "run it"}, "_meta": {"progressToken": "p-1"}}),
    );
    let message = loop {
        let line = client
            .lines
            .recv_timeout(DEADLINE)
            .expect("no progress while the call waited");
        let value: Value = serde_json::from_str(&line).unwrap();
        assert_ne!(value["id"], json!(2), "answered before a decision: {value}");
        let message = value["params"]["message"].as_str().unwrap_or_default();
        if value["method"] == "notifications/progress" && message.contains("apv_") {
            break message.to_string();
        }
    };
    let id = crate::approvals::approvals(&swarm)[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains(&format!("gdn approve {id}")), "{message}");
    let approve = swarm.run(&["approve", &id]);
    assert_eq!(
        crate::swarm::code(&approve),
        0,
        "{}",
        String::from_utf8_lossy(&approve.stderr)
    );
    let answer = loop {
        let line = client.lines.recv_timeout(DEADLINE).expect("no answer");
        let value: Value = serde_json::from_str(&line).unwrap();
        if value["id"] == json!(2) {
            break value;
        }
    };
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("done:"), "{answer}");
    assert_eq!(client.finish(), 0);
    drop(resident);
}
