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
