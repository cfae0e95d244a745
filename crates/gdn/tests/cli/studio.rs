//! `gdn studio` in a real browser: headless Chromium (driven over the
//! DevTools protocol, `crate::cdp`) loads the Studio of a real two-agent
//! swarm run against the mock LLM, and the test reads the rendered DOM:
//! agent names, a finished Turn with its tool call, a running Turn that
//! appears live without a reload, the span tree and call graph of a
//! trace, and the same pages after the swarm stopped. Screenshots are
//! kept under `target/tmp/`.
//!
//! Skipped, with a message, only when Chromium is not installed and
//! `GOONDAN_REQUIRE_CHROMIUM` is unset (`.ci/run` sets it).

use crate::cdp::{chromium_path, Browser};
use crate::ledger::configure;
use crate::mock_llm::{ChatRequest, Reply};
use crate::swarm::{code, find_instance, read_jsonl, stderr, Swarm};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};

const ALPHA: &str = "agent ALPHA";
const BETA: &str = "agent BETA";

/// Alpha relays to beta, except that it never answers an input with
/// `hang` in it (its Turn stays running).
fn decide(request: &ChatRequest) -> Reply {
    if request.is_from(BETA) {
        return Reply::text(format!("pong({})", request.last_user_text()));
    }
    if let Some(result) = request.tool_result() {
        return Reply::text(format!("alpha heard: {result}"));
    }
    if request.is_from(ALPHA) && request.last_user_text().contains("hang") {
        return Reply::Hang;
    }
    Reply::tool(
        "agents__request",
        json!({"target": "beta", "input": request.last_user_text()}),
    )
}

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn artifact(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("studio");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn the_studio_in_a_real_browser_shows_finished_and_running_instances_live() {
    let Some(chromium) = chromium_path() else {
        assert!(
            std::env::var_os("GOONDAN_REQUIRE_CHROMIUM").is_none(),
            "GOONDAN_REQUIRE_CHROMIUM is set but /usr/bin/chromium is missing"
        );
        eprintln!(
            "SKIPPED the Studio browser test: no /usr/bin/chromium (install it with `apt-get install -y chromium`; GOONDAN_REQUIRE_CHROMIUM=1 makes this a failure)"
        );
        return;
    };
    let swarm = Swarm::pair(2, decide);
    configure(&swarm, "");
    let resident = swarm.start_resident();
    let first = swarm.run(&["run", "--input", "relay ping"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let alpha_dir = find_instance(swarm.state.path(), "alpha", "default").unwrap();
    let swarm_id = alpha_dir
        .parent()
        .and_then(|instances| instances.parent())
        .and_then(|workspace| workspace.file_name())
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let trace_id = read_jsonl(&alpha_dir.join("messages/runtime-events.jsonl"))
        .iter()
        .find(|event| event["type"] == "turn.completed")
        .and_then(|event| event["traceId"].as_str().map(str::to_string))
        .unwrap();

    let mut studio = Killed(
        swarm
            .command(&["studio", "--addr", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut first_line = String::new();
    BufReader::new(studio.0.stdout.take().unwrap())
        .read_line(&mut first_line)
        .unwrap();
    let url = first_line
        .trim()
        .strip_prefix("Goondan Studio: ")
        .unwrap_or_else(|| panic!("no URL in {first_line:?}"))
        .to_string();
    assert!(
        url.starts_with("http://127.0.0.1:") && !url.contains("token"),
        "{url}"
    );

    let mut browser = Browser::start(&chromium);
    let page = browser.page();
    let alpha_page = format!("{url}#/i/{swarm_id}/alpha%3Adefault");
    page.navigate(&alpha_page);
    page.wait_for(
        "both agents in the sidebar",
        r#"!!document.querySelector('.instance-link[data-agent="alpha"]') && !!document.querySelector('.instance-link[data-agent="beta"]')"#,
    );
    page.wait_for(
        "alpha's finished Turn",
        r#"document.querySelectorAll('#timeline .turn[data-status="ok"]').length === 1"#,
    );
    page.wait_for(
        "the agents__request tool call",
        r#"!!document.querySelector('#timeline .tool-call[data-tool-name="agents__request"]') && !!document.querySelector('#conversation .tool-call[data-tool-name="agents__request"]')"#,
    );
    page.wait_for(
        "the conversation with alpha's answer",
        "document.querySelector('#conversation').innerText.includes('alpha heard')",
    );
    page.wait_for(
        "tokens and cost of the Turn",
        "/in · .* out · \\$/.test(document.querySelector('#timeline .turn .head').innerText)",
    );
    page.wait_for(
        "the live stream connected",
        "document.getElementById('live-state').textContent === 'live'",
    );
    page.screenshot(&artifact("finished-instance.png"));

    // A new Turn appears without a reload, running (the mock never
    // answers it), and the sidebar shows the instance processing.
    let hanging = Killed(swarm.spawn_input("hang now"));
    page.wait_for(
        "the new Turn, live",
        r#"document.querySelectorAll('#timeline .turn').length === 2 && !!document.querySelector('#timeline .turn[data-status="running"]')"#,
    );
    page.wait_for(
        "alpha processing in the sidebar",
        r#"document.querySelector('.instance-link[data-agent="alpha"] .meta').textContent.startsWith('processing')"#,
    );
    let screenshot = artifact("running-instance.png");
    page.screenshot(&screenshot);
    assert!(std::fs::metadata(&screenshot).unwrap().len() > 10_000);

    // The first trace: both agents' Turns in one span tree, and the
    // alpha → beta edge in the call graph.
    page.navigate(&format!("{url}#/t/{swarm_id}/{trace_id}"));
    page.wait_for(
        "the span tree of both Turns",
        r#"document.querySelectorAll('#span-tree .span-row[data-span-kind="turn"]').length === 2 && !!document.querySelector('#span-tree .span-row[data-agent="beta"]')"#,
    );
    page.wait_for(
        "the call graph alpha → beta",
        r#"!!document.querySelector('#call-graph .graph-node[data-agent="alpha"]') && !!document.querySelector('#call-graph .graph-node[data-agent="beta"]') && document.querySelector('#call-graph').textContent.includes('1×')"#,
    );
    page.screenshot(&artifact("trace.png"));

    // After the swarm stopped, everything still reads from the state root.
    drop(hanging);
    drop(resident);
    page.navigate(&format!("{url}#/i/{swarm_id}/beta%3Adefault"));
    page.evaluate("location.reload(); true");
    page.wait_for(
        "beta's Turn after the swarm stopped",
        r#"document.querySelectorAll('#timeline .turn[data-status="ok"]').length === 1 && document.querySelector('#conversation').innerText.includes('pong(relay ping)')"#,
    );
}

/// A GET over plain TCP; the answer's status code.
fn status_of(port: u16, path: &str, extra_headers: &str) -> u16 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: studio.example:{port}\r\nConnection: close\r\n{extra_headers}\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

#[test]
fn beyond_loopback_gdn_studio_prints_a_token_url_and_refuses_without_it() {
    let state = tempfile::tempdir().unwrap();
    let bundle = tempfile::tempdir().unwrap();
    let mut studio = Killed(
        crate::swarm::gdn_command(
            bundle.path(),
            state.path(),
            &["studio", "--addr", "0.0.0.0:0"],
        )
        .env_remove("GOONDAN_STUDIO_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap(),
    );
    let mut reader = BufReader::new(studio.0.stdout.take().unwrap());
    let mut first_line = String::new();
    reader.read_line(&mut first_line).unwrap();
    let (address, token) = first_line
        .trim()
        .strip_prefix("Goondan Studio: http://")
        .and_then(|rest| rest.split_once("/?token="))
        .unwrap_or_else(|| panic!("no token URL in {first_line:?}"));
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.bytes().all(|byte| byte.is_ascii_hexdigit()));
    let port: u16 = address.rsplit_once(':').unwrap().1.parse().unwrap();
    assert_eq!(status_of(port, "/api/swarms", ""), 401);
    assert_eq!(status_of(port, "/?token=0000", ""), 401);
    assert_eq!(status_of(port, &format!("/?token={token}"), ""), 303);
    let cookie = format!("Cookie: gdn_studio={token}\r\n");
    assert_eq!(status_of(port, "/api/swarms", &cookie), 200);
}

#[test]
fn gdn_studio_refuses_a_weak_token_and_a_taken_port_with_codes() {
    let state = tempfile::tempdir().unwrap();
    let bundle = tempfile::tempdir().unwrap();
    let weak = crate::swarm::run_with_deadline({
        let mut command = crate::swarm::gdn_command(
            bundle.path(),
            state.path(),
            &["studio", "--addr", "0.0.0.0:0"],
        );
        command.env("GOONDAN_STUDIO_TOKEN", "short");
        command
    });
    assert_eq!(code(&weak), 2, "{}", stderr(&weak));
    assert!(
        stderr(&weak).contains("error[E_STUDIO_TOKEN_WEAK]"),
        "{}",
        stderr(&weak)
    );
    assert!(stderr(&weak).contains("= help:"));

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let busy = crate::swarm::run_with_deadline(crate::swarm::gdn_command(
        bundle.path(),
        state.path(),
        &["studio", "--addr", &addr],
    ));
    assert_eq!(code(&busy), 1, "{}", stderr(&busy));
    assert!(
        stderr(&busy).contains("error[E_STUDIO_BIND]"),
        "{}",
        stderr(&busy)
    );
}
