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
use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::swarm::{code, find_instance, read_jsonl, stderr, wait_until, Swarm};
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
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn artifact(name: &str) -> PathBuf {
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
    // The swarm's map, from its bundle: each agent with its Model, tools
    // and extensions, and who may call whom, as a list and as a graph.
    page.evaluate("document.querySelector('.swarm a.map-link').click(); true");
    page.wait_for(
        "the swarm's map",
        r#"(() => {
            const agent = (name) => document.querySelector(`#map-agents .map-agent[data-agent="${name}"]`);
            const checks = {
                agents: document.querySelectorAll('#map-agents .map-agent').length === 2 && !!agent('alpha') && !!agent('beta'),
                entry: !!agent('alpha') && agent('alpha').querySelector('h2').textContent.includes('entry'),
                model: !!agent('alpha') && agent('alpha').innerText.includes('mock-gpt (openai gpt-mock)'),
                tools: !!agent('alpha') && agent('alpha').querySelector('.map-tool[data-tool="agents"]').innerText.includes('agents__request')
                    && !!agent('alpha').querySelector('.map-tool[data-tool="wait"]'),
                extensions: !!agent('beta') && agent('beta').querySelector('.map-extensions').textContent === 'context-message',
                calls: !!agent('alpha') && !!agent('alpha').querySelector('.map-call[data-to="beta"]') && !!agent('beta').querySelector('.map-call[data-to="alpha"]'),
                graph: !!document.querySelector('#map-graph path.edge.call[data-from="alpha"][data-to="beta"]')
                    && document.querySelector('#map-graph svg').getAttribute('aria-label').includes('alpha may call beta'),
                noConnection: document.getElementById('map-connections').innerText.includes('No Connection'),
                badge: document.getElementById('live-state').textContent === 'live',
            };
            const failed = Object.keys(checks).filter((name) => !checks[name]);
            return failed.length === 0 || failed;
        })()"#,
    );
    page.screenshot(&artifact("swarm-map.png"));
    // An instance a Connection made is named by the Connection and a short
    // key, the full key in its title.
    assert_eq!(
        page.evaluate("(() => { const name = instanceName('coder', 'openai-3f9c2a41' + '0'.repeat(24)); return [name.text, name.connection, name.full]; })()"),
        json!(["coder · openai · 3f9c2a41", "openai", format!("coder:openai-3f9c2a41{}", "0".repeat(24))])
    );
    assert_eq!(
        page.evaluate("instanceName('alpha', 'default').text"),
        json!("alpha · default")
    );
    // The search box finds an instance by its Connection's name too.
    for (text, n_shown) in [("zzz", 0), ("beta", 1), ("alpha", 1)] {
        type_into(page, "instance-filter", text);
        page.wait_for(
            "the searched instances",
            &format!(
                "document.querySelectorAll('#instance-list .instance-link').length === {n_shown}"
            ),
        );
    }
    type_into(page, "instance-filter", "");

    // Pages without a live stream say the swarm runs, not `offline`.
    for page_hash in ["#/approvals", "#/evals"] {
        page.navigate(&format!("{url}{page_hash}"));
        page.wait_for(
            "the badge saying the swarm runs",
            "document.getElementById('live-state').textContent === '1 running' && document.getElementById('live-state').classList.contains('on')",
        );
    }

    // After the swarm stopped, everything still reads from the state root,
    // and the badge says it stopped, on every page.
    drop(hanging);
    drop(resident);
    page.navigate(&format!("{url}#/i/{swarm_id}/beta%3Adefault"));
    page.evaluate("location.reload(); true");
    page.wait_for(
        "beta's Turn after the swarm stopped",
        r#"document.querySelectorAll('#timeline .turn[data-status="ok"]').length === 1 && document.querySelector('#conversation').innerText.includes('pong(relay ping)')"#,
    );
    page.wait_for(
        "the badge saying the swarm stopped",
        "document.getElementById('live-state').textContent === 'stopped' && document.querySelector('.swarm').textContent.includes('stopped')",
    );
    page.navigate(&format!("{url}#/approvals"));
    page.wait_for(
        "the badge saying no swarm runs",
        "document.getElementById('live-state').textContent === 'stopped'",
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

/// Starts `command` (a `gdn studio`) and returns it with the URL it
/// printed.
pub(crate) fn start_studio(mut command: std::process::Command) -> (Killed, String) {
    let mut studio = Killed(
        command
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
    (studio, url)
}

/// One request over plain TCP to 127.0.0.1:`port`, as a loopback client
/// names it; the answer's status code and body.
pub(crate) fn exchange(
    port: u16,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
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

/// The CSRF token the Studio on `port` puts in its page when actions are
/// allowed.
pub(crate) fn csrf_of(port: u16) -> String {
    let (status, page) = exchange(port, "GET", "/", "", "");
    assert_eq!(status, 200);
    page.split_once(r#"<meta name="gdn-csrf" content=""#)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(csrf, _)| csrf.to_string())
        .unwrap_or_else(|| panic!("no CSRF token in the page:\n{page}"))
}

/// The port and token of a URL `gdn studio` printed.
pub(crate) fn port_and_token(url: &str) -> (u16, Option<String>) {
    let rest = url.strip_prefix("http://127.0.0.1:").unwrap();
    let (port, token) = match rest.split_once("/?token=") {
        Some((port, token)) => (port, Some(token.to_string())),
        None => (rest.trim_end_matches('/'), None),
    };
    (port.parse().unwrap(), token)
}

/// Issue 49 #5: `--help` names every action `--allow-actions` allows.
#[test]
fn studio_help_lists_every_action() {
    let here = tempfile::tempdir().unwrap();
    let output = crate::swarm::run_with_deadline(crate::swarm::gdn_command(
        here.path(),
        here.path(),
        &["studio", "--help"],
    ));
    let help = crate::swarm::stdout(&output).replace('\n', " ");
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for action in [
        "send a message",
        "approve or deny",
        "cancel an instance's running Turn",
        "fork an instance",
        "rewind an instance",
        "edit a message's text or an extension's state",
    ] {
        assert!(help.contains(action), "{action}: {help}");
    }
}

#[test]
fn issue_36_studio_actions_are_refused_without_allow_actions_the_token_the_origin_or_the_csrf_token(
) {
    let state = tempfile::tempdir().unwrap();
    let bundle = tempfile::tempdir().unwrap();
    let decide = r#"{"swarm":"nope","id":"apr_1","verdict":"approve"}"#;

    // Read-only: no action at all, whatever it carries.
    let (_read_only, url) = start_studio(crate::swarm::gdn_command(
        bundle.path(),
        state.path(),
        &["studio", "--addr", "127.0.0.1:0"],
    ));
    let (port, token) = port_and_token(&url);
    assert_eq!(token, None, "{url}");
    let (status, body) = exchange(port, "POST", "/api/actions/decide", "", decide);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("E_STUDIO_ACTIONS_OFF"), "{body}");

    // With actions: the token is printed even on loopback.
    let (_studio, url) = start_studio(crate::swarm::gdn_command(
        bundle.path(),
        state.path(),
        &["studio", "--addr", "127.0.0.1:0", "--allow-actions"],
    ));
    let (port, token) = port_and_token(&url);
    let token = token.unwrap_or_else(|| panic!("no token in {url}"));
    assert_eq!(token.len(), 64);
    // Reads on loopback still need no token; the page holds the CSRF
    // token.
    let csrf = csrf_of(port);
    assert_eq!(csrf.len(), 64);
    assert_ne!(csrf, token);
    let origin = format!("Origin: http://127.0.0.1:{port}\r\n");
    let cookie = format!("Cookie: gdn_studio={token}\r\n");
    let csrf_header = format!("X-Goondan-Csrf: {csrf}\r\n");
    let wrong_csrf = format!("X-Goondan-Csrf: {}\r\n", "0".repeat(64));
    let cases: [(&str, String, u16, &str); 10] = [
        (
            "no token",
            format!("{origin}{csrf_header}"),
            401,
            "E_STUDIO_UNAUTHORIZED",
        ),
        (
            "a wrong token",
            format!(
                "{origin}{csrf_header}Cookie: gdn_studio={}\r\n",
                "f".repeat(64)
            ),
            401,
            "E_STUDIO_UNAUTHORIZED",
        ),
        (
            "no CSRF token",
            format!("{origin}{cookie}"),
            403,
            "E_STUDIO_CSRF",
        ),
        (
            "a wrong CSRF token",
            format!("{origin}{cookie}{wrong_csrf}"),
            403,
            "E_STUDIO_CSRF",
        ),
        (
            "no Origin",
            format!("{cookie}{csrf_header}"),
            403,
            "E_STUDIO_ORIGIN",
        ),
        (
            "a foreign Origin",
            format!("Origin: http://evil.example\r\n{cookie}{csrf_header}"),
            403,
            "E_STUDIO_ORIGIN",
        ),
        // Issue 47: the scheme and the port are the Studio's too, and an
        // Origin is said once.
        (
            "the Studio's host with another scheme",
            format!("Origin: https://127.0.0.1:{port}\r\n{cookie}{csrf_header}"),
            403,
            "E_STUDIO_ORIGIN",
        ),
        (
            "the Studio's host with another port",
            format!(
                "Origin: http://127.0.0.1:{}\r\n{cookie}{csrf_header}",
                port.wrapping_add(1)
            ),
            403,
            "E_STUDIO_ORIGIN",
        ),
        (
            "two Origins",
            format!("{origin}Origin: http://evil.example\r\n{cookie}{csrf_header}"),
            403,
            "E_STUDIO_ORIGIN",
        ),
        // Everything right: the gate lets it through, and the swarm is
        // not there.
        (
            "everything",
            format!("{origin}{cookie}{csrf_header}"),
            404,
            "E_STUDIO_NOT_FOUND",
        ),
    ];
    for (what, headers, expected, code) in cases {
        let (status, body) = exchange(port, "POST", "/api/actions/decide", &headers, decide);
        assert_eq!(status, expected, "{what}: {body}");
        assert!(body.contains(code), "{what}: {body}");
    }
    let all = format!("{origin}{cookie}{csrf_header}");
    let huge = format!(
        r#"{{"swarm":"s","instance":"i","text":"{}"}}"#,
        "x".repeat(100 * 1024)
    );
    let (status, body) = exchange(port, "POST", "/api/actions/send", &all, &huge);
    assert_eq!(status, 413, "{body}");
    let (status, body) = exchange(port, "POST", "/api/actions/decide", &all, "{not json");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("E_STUDIO_BAD_REQUEST"), "{body}");
    // Edited arguments are an object, and only an approval takes them; an
    // edit without the CSRF token is refused like any other action.
    for (body, expected) in [
        (
            r#"{"swarm":"s","id":"apv_x","verdict":"approve","arguments":[1,2]}"#,
            "`arguments` must be an object",
        ),
        (
            r#"{"swarm":"s","id":"apv_x","verdict":"deny","reason":"no","arguments":{"command":"x"}}"#,
            "only an approval takes `arguments`",
        ),
    ] {
        let (status, answer) = exchange(port, "POST", "/api/actions/decide", &all, body);
        assert_eq!(status, 400, "{answer}");
        assert!(answer.contains(expected), "{answer}");
    }
    let (status, answer) = exchange(
        port,
        "POST",
        "/api/actions/decide",
        &format!("{origin}{cookie}"),
        r#"{"swarm":"s","id":"apv_x","verdict":"approve","arguments":{"command":"rm -rf /"}}"#,
    );
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("E_STUDIO_CSRF"), "{answer}");
    // An edit names a message with its text or an extension with its
    // state, and is refused without the CSRF token like the rest.
    for (body, expected) in [
        (
            r#"{"swarm":"s","instance":"i","messageId":"m","extension":"x","text":"t"}"#,
            "one of the two",
        ),
        (
            r#"{"swarm":"s","instance":"i","messageId":"m","text":"  "}"#,
            "`text` is empty",
        ),
        (
            r#"{"swarm":"s","instance":"i","extension":"x","state":null}"#,
            "any JSON value but null",
        ),
        (
            r#"{"swarm":"s","instance":"i","extension":"x","state":{},"cancel":"yes"}"#,
            "`cancel` must be true or false",
        ),
    ] {
        let (status, answer) = exchange(port, "POST", "/api/actions/edit", &all, body);
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer.contains(expected), "{body}: {answer}");
    }
    let (status, answer) = exchange(
        port,
        "POST",
        "/api/actions/edit",
        &format!("{origin}{cookie}"),
        r#"{"swarm":"s","instance":"i","extension":"x","state":{}}"#,
    );
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("E_STUDIO_CSRF"), "{answer}");
    // Only the action routes take a POST.
    let (status, _) = exchange(port, "POST", "/api/swarms", &all, "{}");
    assert_eq!(status, 405);
}

/// A gated swarm whose model runs `echo ran >> runs.txt` through
/// `bash__exec`, then answers with hostile markup; a message with
/// `hello` gets a plain answer.
fn hostile_gated_swarm() -> Swarm {
    let mock = MockLlm::start(|request: &ChatRequest| {
        if let Some(result) = request.tool_result() {
            return Reply::text(format!(
                "done <script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\"> {result}"
            ));
        }
        if request.last_user_text().contains("hello") {
            return Reply::text("hello back <b>from</b> alpha");
        }
        Reply::tool("bash__exec", json!({"command": "echo ran >> runs.txt"}))
    });
    let bundle = crate::swarm::fixture(
        "gated",
        &[
            ("@ENDPOINT@", mock.endpoint()),
            ("@GRACE@", "1".to_string()),
            ("@TIMEOUT@", "3600".to_string()),
        ],
    );
    Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    }
}

/// Types `text` into the timeline's filter box.
fn set_filter(page: &mut crate::cdp::Page, text: &str) {
    type_into(page, "turn-filter", text);
}

/// Types `text` into the input with id `id`, as a person would.
fn type_into(page: &mut crate::cdp::Page, id: &str, text: &str) {
    page.evaluate(&format!(
        "(() => {{ const box = document.getElementById({}); box.value = {}; box.dispatchEvent(new Event('input')); return true; }})()",
        json!(id),
        json!(text)
    ));
}

fn runs(bundle: &std::path::Path) -> usize {
    std::fs::read_to_string(bundle.join("runs.txt"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

#[test]
fn issue_36_approve_in_the_studio_runs_the_gated_command_once_and_hostile_answers_stay_text() {
    let Some(chromium) = chromium_path() else {
        assert!(
            std::env::var_os("GOONDAN_REQUIRE_CHROMIUM").is_none(),
            "GOONDAN_REQUIRE_CHROMIUM is set but /usr/bin/chromium is missing"
        );
        eprintln!("SKIPPED the Studio approval browser test: no /usr/bin/chromium");
        return;
    };
    let swarm = hostile_gated_swarm();
    let resident = swarm.start_resident();
    let _asker = Killed(swarm.spawn_input("run it"));
    let id = wait_until("the approval request", || {
        let output = swarm.run(&["approvals", "--json"]);
        let rows: Vec<serde_json::Value> =
            serde_json::from_str(&crate::swarm::stdout(&output)).ok()?;
        rows.first()
            .and_then(|row| row["id"].as_str().map(str::to_string))
    });
    assert_eq!(runs(swarm.bundle.path()), 0);
    let alpha_dir = find_instance(swarm.state.path(), "alpha", "default").unwrap();
    let swarm_id = alpha_dir
        .parent()
        .and_then(|instances| instances.parent())
        .and_then(|workspace| workspace.file_name())
        .unwrap()
        .to_string_lossy()
        .into_owned();

    let (_studio, url) =
        start_studio(swarm.command(&["studio", "--addr", "127.0.0.1:0", "--allow-actions"]));
    let (port, token) = port_and_token(&url);
    assert!(token.is_some(), "{url}");
    let base = format!("http://127.0.0.1:{port}/");

    let mut browser = Browser::start(&chromium);
    let page = browser.page();
    // The URL with the token sets the cookie and lands on the page.
    page.navigate(&url);
    page.wait_for(
        "the page without the token",
        "location.search === '' && !!document.getElementById('swarms')",
    );
    // A Turn waiting for a person reads so, not `running`: on the
    // timeline (the Turn and its tool call), in the instance list and the
    // conversation, with who may decide, since when and the deadline.
    page.navigate(&format!("{base}#/i/{swarm_id}/alpha%3Adefault"));
    page.wait_for(
        "the waiting Turn",
        &format!(
            r#"(() => {{
                const turn = document.querySelector('#timeline .turn[data-status="waiting"]');
                const tool = document.querySelector('#timeline .tool-call[data-tool-name="bash__exec"][data-status="waiting"]');
                const link = document.querySelector('.instance-link[data-agent="alpha"] .meta');
                const said = document.querySelector('#conversation .waiting-approval[data-approval-id="{id}"]');
                const checks = {{
                    turn: !!turn && turn.querySelector('.waiting-approval').innerText.includes('waiting for approval'),
                    tool: !!tool,
                    conversation: !!said,
                    deciders: !!turn && turn.innerText.includes('decided by operator'),
                    since: !!turn && turn.innerText.includes('since '),
                    deadline: !!turn && turn.innerText.includes('denied at '),
                    list: !!link && link.textContent.startsWith('waiting for approval'),
                    title: document.getElementById('instance-state').textContent === 'waiting for approval',
                    notRunning: !document.querySelector('#timeline').innerText.includes('bash__exec running'),
                }};
                const failed = Object.keys(checks).filter((name) => !checks[name]);
                return failed.length === 0 || failed;
            }})()"#
        ),
    );
    page.screenshot(&artifact("turn-waiting.png"));

    page.navigate(&format!("{base}#/approvals"));
    let row = format!(r#".approval[data-approval-id="{id}"]"#);
    page.wait_for(
        "the waiting approval with its buttons",
        &format!(
            "!!document.querySelector('{row} button.approve') && document.querySelector('{row} textarea.arguments').value.includes('echo ran >> runs.txt') && document.getElementById('approvals-count').textContent === '1'"
        ),
    );
    // The swarm is named by its Swarm and bundle folder, not only its hash.
    page.wait_for(
        "the swarm's name in the sidebar",
        "document.querySelector('.swarm .swarm-name').textContent.startsWith('default (')",
    );
    page.screenshot(&artifact("approval-waiting.png"));
    // The arguments, editable: ones bash__exec's parameters do not take
    // are refused with the problem, and nothing is decided.
    let edit = |page: &mut crate::cdp::Page, arguments: &str| {
        page.evaluate(&format!(
            "(() => {{ const box = document.querySelector('{row} textarea.arguments'); box.value = {}; box.dispatchEvent(new Event('input')); document.querySelector('{row} button.approve').click(); return true; }})()",
            json!(arguments)
        ));
    };
    assert_eq!(
        page.evaluate(&format!(
            "JSON.parse(document.querySelector('{row} textarea.arguments').value).command"
        )),
        json!("echo ran >> runs.txt")
    );
    edit(page, r#"{"command": 5}"#);
    page.wait_for(
        "the refused edit",
        &format!(
            r#"!!document.querySelector('.decided.status-error[data-approval-id="{id}"]') && document.querySelector('.decided[data-approval-id="{id}"]').textContent.includes('E_APPROVAL_ARGS') && document.querySelector('.decided[data-approval-id="{id}"]').textContent.includes('do not match the parameters of bash__exec') && !!document.querySelector('{row} button.approve')"#
        ),
    );
    assert_eq!(runs(swarm.bundle.path()), 0);
    edit(page, r#"{"command": "echo edited >> runs.txt"}"#);
    page.wait_for(
        "the decision shown",
        &format!(
            r#"!!document.querySelector('.decided.status-ok[data-approval-id="{id}"]') && document.querySelector('.decided.status-ok[data-approval-id="{id}"]').textContent.startsWith('Approved bash__exec') && document.querySelector('.decided.status-ok[data-approval-id="{id}"]').textContent.includes('with edited arguments')"#
        ),
    );
    wait_until("the resumed Turn's answer", || {
        swarm
            .conversation("alpha")
            .iter()
            .any(|message| message["role"] == "assistant" && message.to_string().contains("done"))
            .then_some(())
    });
    assert_eq!(
        runs(swarm.bundle.path()),
        1,
        "the approved command ran other than once"
    );
    assert_eq!(
        std::fs::read_to_string(swarm.bundle.path().join("runs.txt")).unwrap(),
        "edited\n",
        "the call ran with other arguments than the edited ones"
    );
    page.wait_for(
        "the list emptied",
        &format!("!document.querySelector('{row}') && document.getElementById('approvals-count').textContent === '0'"),
    );
    // The decision is recorded with who made it.
    let approvals = std::fs::read_to_string(alpha_dir.join("approvals.jsonl")).unwrap();
    assert!(
        approvals.contains(r#""by":"studio:127.0.0.1:"#),
        "{approvals}"
    );

    // The step that answered: what came back stays text.
    page.navigate(&format!("{base}#/i/{swarm_id}/alpha%3Adefault"));
    page.wait_for(
        "the finished Turn",
        r#"!!document.querySelector('#timeline .turn[data-status="ok"]') && document.querySelectorAll('#timeline .step-head').length === 2"#,
    );
    page.evaluate("(() => { const heads = document.querySelectorAll('#timeline .step-head'); heads[heads.length - 1].click(); return true; })()");
    page.wait_for(
        "the step's detail with the hostile answer as text",
        "!!document.querySelector('#detail .answer') && document.querySelector('#detail .answer').innerText.includes('<script>window.__pwned = 1</script>') && document.querySelector('#detail .sent').innerText.includes('run it')",
    );
    // Issue 49 #6: what the model was sent, as the runtime recorded it:
    // the input, the call it made and the call's result.
    let said = page.evaluate("document.querySelector('#detail').textContent");
    let said = said.as_str().unwrap_or_default();
    assert!(said.contains("Sent to the model"), "{said}");
    assert_eq!(
        page.evaluate("document.querySelectorAll('#detail .sent .message').length"),
        json!(3),
        "{said}"
    );
    assert!(!said.contains("was not recorded"), "{said}");
    let safe = page.evaluate(
        "window.__pwned === undefined && document.querySelectorAll('main script, main img').length === 0",
    );
    assert_eq!(safe, json!(true), "hostile markup became HTML");
    page.screenshot(&artifact("step-detail.png"));
    // The tool call: its arguments and its full result.
    page.evaluate(r#"document.querySelector('#timeline .tool-call[data-tool-name="bash__exec"]').click(); true"#);
    page.wait_for(
        "the tool call's detail",
        r#"!!document.querySelector('#detail .tool-detail') && document.querySelector('#detail .tool-detail').innerText.includes('echo ran >> runs.txt') && document.querySelector('#detail .tool-detail').innerText.includes('durationMs')"#,
    );
    // The timeline filter: a text no turn holds hides them all.
    set_filter(page, "zzz-nothing");
    page.wait_for(
        "the filtered timeline",
        "document.querySelectorAll('#timeline .turn').length === 0",
    );
    set_filter(page, "bash__exec");
    page.wait_for(
        "the turn again",
        "document.querySelectorAll('#timeline .turn').length === 1",
    );
    // The instance filter: a text nothing holds, then the agent's name.
    for (text, n_shown) in [("nothing-like-this", 0), ("alph", 1)] {
        type_into(page, "instance-filter", text);
        page.wait_for(
            "the filtered instances",
            &format!(
                "document.querySelectorAll('#instance-list .instance-link').length === {n_shown}"
            ),
        );
    }

    // A message sent from the Studio, and its answer coming in.
    page.evaluate("(() => { const box = document.getElementById('send-text'); box.value = 'hello there'; box.dispatchEvent(new Event('input')); document.getElementById('send-button').click(); return true; })()");
    page.wait_for(
        "the answer to the sent message",
        "!!document.getElementById('send-status') && document.getElementById('send-status').innerText.includes('hello back <b>from</b> alpha')",
    );
    page.wait_for(
        "the sent message in the conversation",
        "document.querySelector('#conversation').innerText.includes('hello there')",
    );
    // The instance says where its inputs came from.
    page.wait_for(
        "the sources of the instance's inputs",
        "!!document.getElementById('instance-via') && document.getElementById('instance-via').textContent === 'via cli, studio'",
    );
    // The input is recorded as the Studio's, with the client's address.
    let inbox_dir = alpha_dir.parent().unwrap().parent().unwrap().join("inbox");
    let inbox: String = std::fs::read_dir(&inbox_dir)
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default())
        .collect();
    assert!(
        inbox.contains(r#""sentBy":"studio""#) && inbox.contains(r#""client":"127.0.0.1:"#),
        "{inbox}"
    );
    assert_eq!(runs(swarm.bundle.path()), 1);

    // Stopped, the swarm keeps its name.
    assert_eq!(resident.terminate(), 0);
    page.evaluate("location.reload(); true");
    page.wait_for(
        "the stopped swarm by its name",
        "!!document.querySelector('.swarm .swarm-name') && document.querySelector('.swarm .swarm-name').textContent.startsWith('default (') && document.querySelector('.swarm').textContent.includes('stopped')",
    );
}

/// The workspace (swarm) id of an instance folder, as the Studio names it.
fn swarm_id_of(instance_dir: &std::path::Path) -> String {
    instance_dir
        .parent()
        .and_then(|instances| instances.parent())
        .and_then(|workspace| workspace.file_name())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// `gdn instance history KEY --json` (with `--archived` when asked).
fn history_of(swarm: &Swarm, key: &str, archived: bool) -> serde_json::Value {
    let mut args = vec!["instance", "history", key, "--json"];
    if archived {
        args.push("--archived");
    }
    let output = swarm.run(&args);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    serde_json::from_str(&crate::swarm::stdout(&output)).unwrap()
}

fn n_turns(swarm: &Swarm, key: &str) -> usize {
    history_of(swarm, key, false)["turns"]
        .as_array()
        .unwrap()
        .len()
}

#[test]
fn issue_36_cancel_fork_and_rewind_from_the_studio_act_through_the_orchestrator_in_its_name() {
    let (swarm, refused) = crate::operator::swarm();
    let _resident = swarm.start_resident();
    for words in ["one", "two", "three"] {
        assert_eq!(
            crate::operator::ask(&swarm, "s", words),
            format!("answer {words}")
        );
    }
    let original = crate::operator::instance_dir(&swarm, "s");
    let swarm_id = swarm_id_of(&original);
    let (_read_only, read_only_url) =
        start_studio(swarm.command(&["studio", "--addr", "127.0.0.1:0"]));
    let (read_only_port, _) = port_and_token(&read_only_url);
    let (_studio, url) =
        start_studio(swarm.command(&["studio", "--addr", "127.0.0.1:0", "--allow-actions"]));
    let (port, token) = port_and_token(&url);
    let origin = format!("Origin: http://127.0.0.1:{port}\r\n");
    let cookie = format!("Cookie: gdn_studio={}\r\n", token.unwrap());
    let csrf = format!("X-Goondan-Csrf: {}\r\n", csrf_of(port));
    let all = format!("{origin}{cookie}{csrf}");
    let body = |fields: serde_json::Value| {
        let mut body = json!({"swarm": swarm_id, "instance": "worker:s"});
        body.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        body.to_string()
    };
    let fork_body = body(json!({"turn": "1", "newKey": "s1"}));
    let rewind_body = body(json!({"turn": "1"}));
    let cancel_body = body(json!({}));
    // Each action is refused without --allow-actions, without the token
    // and without the CSRF token; a refused one changes nothing.
    let (no_token, no_csrf) = (format!("{origin}{csrf}"), format!("{origin}{cookie}"));
    let refusals = |path: &str, body: &str| {
        for (studio_port, headers, status, code) in [
            (read_only_port, &all, 403, "E_STUDIO_ACTIONS_OFF"),
            (port, &no_token, 401, "E_STUDIO_UNAUTHORIZED"),
            (port, &no_csrf, 403, "E_STUDIO_CSRF"),
        ] {
            let (got, answer) = exchange(studio_port, "POST", path, headers, body);
            assert_eq!(
                (got, answer.contains(code)),
                (status, true),
                "{path}: {answer}"
            );
        }
    };
    refusals("/api/actions/fork", &fork_body);
    refusals("/api/actions/rewind", &rewind_body);
    assert_eq!(n_turns(&swarm, "s"), 3);
    assert!(find_instance(swarm.state.path(), "worker", "s1").is_none());

    // Fork at Turn 1: a new instance whose history is Turn 1 only, made
    // in the Studio's name.
    let (status, answer) = exchange(port, "POST", "/api/actions/fork", &all, &fork_body);
    assert_eq!(status, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["forked"]["instance"], "worker:s1", "{answer}");
    assert!(!answer
        .to_string()
        .contains(&swarm.state.path().display().to_string()));
    let forked = history_of(&swarm, "worker:s1", false);
    let inputs: Vec<&serde_json::Value> = forked["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|turn| &turn["input"])
        .collect();
    assert_eq!(inputs, [&json!("one")]);
    // Issue 47: forking onto a key that is taken is refused, and the
    // refusal names no path of this machine (the store's message does).
    let (status, answer) = exchange(port, "POST", "/api/actions/fork", &all, &fork_body);
    assert_eq!(status, 409, "{answer}");
    let taken: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(taken["code"], "E_INSTANCE_EXISTS", "{answer}");
    let state_root = swarm.state.path().display().to_string();
    assert!(!answer.contains(&state_root), "{answer}");
    assert!(!answer.contains("/instances/"), "{answer}");
    assert!(
        taken["message"].as_str().unwrap().contains("…/"),
        "{answer}"
    );
    let fork_dir = find_instance(swarm.state.path(), "worker", "s1").unwrap();
    let metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fork_dir.join("metadata.json")).unwrap()).unwrap();
    let by = metadata["forkedFrom"]["by"].as_str().unwrap();
    assert!(by.starts_with("studio:127.0.0.1:"), "{metadata}");
    assert_eq!(n_turns(&swarm, "s"), 3, "the original was changed");

    // Rewind to Turn 1: Turns 2 and 3 go to the archive.
    let (status, answer) = exchange(port, "POST", "/api/actions/rewind", &all, &rewind_body);
    assert_eq!(status, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["rewound"]["archive"]["nTurns"], 2, "{answer}");
    let history = history_of(&swarm, "s", true);
    assert_eq!(history["turns"].as_array().unwrap().len(), 1);
    let archived: Vec<&serde_json::Value> = history["archived"][0]["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|turn| &turn["index"])
        .collect();
    assert_eq!(archived, [&json!(2), &json!(3)]);
    let by = history["archived"][0]["manifest"]["by"].as_str().unwrap();
    assert!(by.starts_with("studio:127.0.0.1:"), "{history}");

    // A Turn running: refused cancels leave it running; a fork without
    // `cancel` is refused; the Studio's cancel stops it, and its requester
    // hears E_TURN_CANCELLED.
    let mut run = crate::operator::spawn_input(&swarm, "s", "slow");
    swarm
        .mock
        .wait_for("the slow call", |r| r.last_user_text() == "slow");
    refusals("/api/actions/cancel", &cancel_body);
    let fork_while_running = body(json!({"turn": "1", "newKey": "s2"}));
    let (status, answer) = exchange(port, "POST", "/api/actions/fork", &all, &fork_while_running);
    assert_eq!(
        (status, answer.contains("E_TURN_RUNNING")),
        (409, true),
        "{answer}"
    );
    assert!(
        run.try_wait().unwrap().is_none(),
        "a refused action ended the Turn"
    );
    let (status, answer) = exchange(port, "POST", "/api/actions/cancel", &all, &cancel_body);
    assert_eq!(status, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(
        (
            answer["cancelled"].as_array().unwrap().len(),
            &answer["ended"]
        ),
        (1, &json!(true)),
        "{answer}"
    );
    crate::operator::assert_requester_told(run);
    let events = read_jsonl(&original.join("messages/runtime-events.jsonl"));
    assert!(
        events.iter().any(|event| event["type"] == "turn.failed"
            && event["cancelledBy"]
                .as_str()
                .is_some_and(|by| by.starts_with("studio:127.0.0.1:"))),
        "{events:#?}"
    );
    // Nothing runs now: a cancel says so.
    let (status, answer) = exchange(port, "POST", "/api/actions/cancel", &all, &cancel_body);
    assert_eq!(
        (status, answer.contains("E_NO_TURN_RUNNING")),
        (409, true),
        "{answer}"
    );
    assert_eq!(refused.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn issue_36_a_message_sent_from_the_studio_is_recorded_as_the_studios() {
    let (swarm, _) = crate::operator::swarm();
    let resident = swarm.start_resident();
    crate::operator::ask(&swarm, "m", "first");
    let swarm_id = swarm_id_of(&crate::operator::instance_dir(&swarm, "m"));
    let (_studio, url) =
        start_studio(swarm.command(&["studio", "--addr", "127.0.0.1:0", "--allow-actions"]));
    let (port, token) = port_and_token(&url);
    let headers = format!(
        "Origin: http://127.0.0.1:{port}\r\nCookie: gdn_studio={}\r\nX-Goondan-Csrf: {}\r\n",
        token.unwrap(),
        csrf_of(port)
    );
    let body = json!({"swarm": swarm_id, "instance": "worker:m", "text": "from the page"});
    let (status, answer) = exchange(
        port,
        "POST",
        "/api/actions/send",
        &headers,
        &body.to_string(),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("answer from the page"), "{answer}");

    // The log: the input message names its source, and so does the
    // Turn's `turn.started`, which `gdn logs` prints.
    let studio_source = json!({"kind": "connector", "name": "studio"});
    let dir = crate::operator::instance_dir(&swarm, "m");
    let input = read_jsonl(&dir.join("messages/base.jsonl"))
        .into_iter()
        .find(|message| {
            message["data"]["role"] == "user" && message.to_string().contains("from the page")
        })
        .expect("the sent message in the log");
    assert_eq!(
        (
            &input["metadata"]["sourceKind"],
            &input["metadata"]["sourceName"]
        ),
        (&json!("connector"), &json!("studio")),
        "{input}"
    );
    let output = swarm.run(&["logs", "--type", "turn.started"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let started: Vec<serde_json::Value> = crate::swarm::stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let sources: Vec<&serde_json::Value> = started.iter().map(|event| &event["source"]).collect();
    assert_eq!(sources.len(), 2, "{started:#?}");
    assert_eq!(sources[0]["name"], "cli", "{started:#?}");
    assert_eq!(sources[1], &studio_source, "{started:#?}");

    // Issue 49 #5: with the orchestrator gone, the send says how to start
    // one that outlives the command (a plain `gdn run` would be a chat or
    // a single answer, and gone again).
    assert_eq!(resident.terminate(), 0);
    let (status, answer) = exchange(
        port,
        "POST",
        "/api/actions/send",
        &headers,
        &body.to_string(),
    );
    assert_eq!(status, 503, "{answer}");
    assert!(answer.contains("E_ORCHESTRATOR_NOT_RUNNING"), "{answer}");
    assert!(answer.contains("`gdn run --detach`"), "{answer}");
}

#[test]
fn issue_36_fork_and_cancel_buttons_in_a_real_browser() {
    let Some(chromium) = chromium_path() else {
        assert!(
            std::env::var_os("GOONDAN_REQUIRE_CHROMIUM").is_none(),
            "GOONDAN_REQUIRE_CHROMIUM is set but /usr/bin/chromium is missing"
        );
        eprintln!("SKIPPED the Studio fork and cancel browser test: no /usr/bin/chromium");
        return;
    };
    let (swarm, _) = crate::operator::swarm();
    let _resident = swarm.start_resident();
    let hostile = "<img src=x onerror=\"window.__pwned = 3\">";
    crate::operator::ask(&swarm, "b", "one");
    crate::operator::ask(&swarm, "b", hostile);
    let swarm_id = swarm_id_of(&crate::operator::instance_dir(&swarm, "b"));
    let (_studio, url) =
        start_studio(swarm.command(&["studio", "--addr", "127.0.0.1:0", "--allow-actions"]));
    let (port, _) = port_and_token(&url);
    let mut browser = Browser::start(&chromium);
    let page = browser.page();
    page.navigate(&url);
    page.wait_for(
        "the page without the token",
        "location.search === '' && !!document.getElementById('swarms')",
    );
    page.navigate(&format!(
        "http://127.0.0.1:{port}/#/i/{swarm_id}/worker%3Ab"
    ));
    page.wait_for(
        "both Turns in the history, with their buttons",
        r#"document.querySelectorAll('#history .history-turn').length === 2 && !!document.querySelector('#history .history-turn[data-turn-index="1"] button.fork')"#,
    );
    // The hostile input is shown as text.
    page.wait_for(
        "the hostile input as text",
        "document.querySelector('#history').innerText.includes('<img src=x')",
    );
    assert_eq!(
        page.evaluate("window.__pwned === undefined && document.querySelectorAll('#history img').length === 0"),
        json!(true),
        "hostile markup became HTML"
    );

    // Fork from Turn 1: a confirm step, a key, then the outcome.
    page.evaluate(r#"document.querySelector('#history .history-turn[data-turn-index="1"] button.fork').click(); true"#);
    page.wait_for(
        "the fork's confirm step",
        "!!document.getElementById('fork-key') && !!document.querySelector('#history button.confirm-fork')",
    );
    assert!(
        find_instance(swarm.state.path(), "worker", "b-fork").is_none(),
        "the first click forked"
    );
    type_into(page, "fork-key", "b-fork");
    page.evaluate("document.querySelector('#history button.confirm-fork').click(); true");
    page.wait_for(
        "the fork's outcome",
        "!!document.getElementById('steer-status') && document.getElementById('steer-status').innerText.startsWith('Forked worker:b at Turn 1 into worker:b-fork') && !!document.querySelector('#steer-status a.steer-link')",
    );
    page.screenshot(&artifact("forked.png"));
    let forked = history_of(&swarm, "worker:b-fork", false);
    assert_eq!(forked["turns"].as_array().unwrap().len(), 1, "{forked}");
    // The fork says where it came from, and its inherited Turn is in its
    // timeline, as inherited from the origin (which has its steps), with a
    // link there.
    page.evaluate("document.querySelector('#steer-status a.steer-link').click(); true");
    page.wait_for(
        "the fork's origin and its inherited Turn",
        r#"(() => {
            const origin = document.getElementById('fork-origin');
            const inherited = document.querySelectorAll('#timeline .turn[data-status="inherited"]');
            return !!origin && origin.innerText.startsWith('Forked from worker:b at Turn 1')
                && origin.querySelector('a.origin-link').getAttribute('href').endsWith('/worker%3Ab')
                && inherited.length === 1 && inherited[0].innerText.includes('inherited from worker:b')
                && inherited[0].innerText.includes('one')
                && !!inherited[0].querySelector('.status-ok') && inherited[0].querySelector('.status-ok').textContent === 'completed'
                && /cost (\$|–)/.test(inherited[0].innerText)
                && document.querySelector('#history .history-turn[data-turn-index="1"]').innerText.includes('completed (inherited)')
                && !!inherited[0].querySelector('a.origin-link')
                && !!document.querySelector('.instance-link[title="worker:b-fork"]');
        })()"#,
    );
    page.screenshot(&artifact("fork-origin.png"));
    page.evaluate("document.querySelector('#fork-origin a.origin-link').click(); true");
    page.wait_for(
        "the origin again",
        "!document.getElementById('fork-origin') && !!document.querySelector('#history .history-turn[data-turn-index=\"2\"]')",
    );

    // A running Turn gets a Cancel button; its click stops the Turn.
    let run = crate::operator::spawn_input(&swarm, "b", "slow");
    page.wait_for(
        "the running Turn's Cancel button",
        r#"!!document.querySelector('#timeline .turn[data-status="running"] button.cancel-turn')"#,
    );
    page.screenshot(&artifact("running-with-cancel.png"));
    page.evaluate(r#"document.querySelector('#timeline .turn[data-status="running"] button.cancel-turn').click(); true"#);
    page.wait_for(
        "the cancel's outcome",
        "!!document.getElementById('steer-status') && document.getElementById('steer-status').innerText.startsWith('Cancelled the running Turn of worker:b.')",
    );
    crate::operator::assert_requester_told(run);
    page.wait_for(
        "the cancelled Turn, cancelled as in the History, without a Cancel button",
        r#"document.querySelectorAll('#timeline .turn[data-status="cancelled"]').length === 1 && document.querySelectorAll('#timeline .turn[data-status="error"]').length === 0 && document.querySelector('#timeline .turn[data-status="cancelled"]').innerText.includes('cancelled (studio:127.0.0.1:') && !document.querySelector('#timeline button.cancel-turn') && document.querySelector('#history').innerText.includes('cancelled (studio:127.0.0.1:')"#,
    );
    assert_eq!(page.evaluate("window.__pwned === undefined"), json!(true));
}

/// A one-agent bundle on `endpoint` with an Eval of a case that passes and
/// one whose checks miss on purpose.
const EVAL_BUNDLE: &str = "apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: llm
spec:
  provider: openai
  model: gpt-mock
  endpoint: \"@ENDPOINT@\"
  options:
    maxRetries: 0
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: echo
spec:
  modelConfig:
    modelRef: Model/llm
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/echo
  agents:
    - ref: Agent/echo
---
apiVersion: goondan.ai/v1
kind: Eval
metadata:
  name: checks
spec:
  cases:
    - name: holds
      input: tides
      assert:
        - contains: \"echo: tides\"
    - name: misses
      input: \"<img src=x onerror='window.__pwned = 5'>\"
      assert:
        - contains: volcanoes
        - equals: something else
        - maxSteps: 5
";

#[test]
fn issue_49_the_evals_page_says_which_assertion_missed_with_expected_and_got() {
    let Some(chromium) = chromium_path() else {
        assert!(
            std::env::var_os("GOONDAN_REQUIRE_CHROMIUM").is_none(),
            "GOONDAN_REQUIRE_CHROMIUM is set but /usr/bin/chromium is missing"
        );
        eprintln!("SKIPPED the Studio evals browser test: no /usr/bin/chromium");
        return;
    };
    let mock = MockLlm::start(|request: &ChatRequest| {
        Reply::text(format!("echo: {}", request.last_user_text()))
    });
    let bundle = tempfile::tempdir().unwrap();
    std::fs::write(
        bundle.path().join("goondan.yaml"),
        EVAL_BUNDLE.replace("@ENDPOINT@", &mock.endpoint()),
    )
    .unwrap();
    let swarm = Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    };
    let output = swarm.run(&["eval", "--json"]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));

    let (_studio, url) = start_studio(swarm.command(&["studio", "--addr", "127.0.0.1:0"]));
    let (port, _) = port_and_token(&url);
    let mut browser = Browser::start(&chromium);
    let page = browser.page();
    page.navigate(&format!("http://127.0.0.1:{port}/#/evals"));
    // The case that missed lists each failed check: its assertion, what it
    // wanted and what it saw; the answer it got; the case that held none.
    page.wait_for(
        "the failed checks of the case that missed",
        r#"(() => {
            const misses = document.querySelectorAll('.eval-misses');
            const rows = [...document.querySelectorAll('.eval-misses .eval-failure')];
            const of = (name) => rows.find((row) => row.getAttribute('data-assertion') === name);
            const checks = {
                oneCase: misses.length === 1 && misses[0].innerText.includes('checks/misses'),
                two: rows.length === 2,
                contains: !!of('contains') && of('contains').innerText.includes('does not contain "volcanoes"'),
                equals: !!of('equals') && of('equals').innerText.includes('not "something else"'),
                noMaxSteps: !of('maxSteps'),
                got: !!misses[0] && misses[0].querySelector('.eval-answer').innerText.includes("echo: <img src=x onerror='window.__pwned = 5'>"),
                summary: document.querySelector('.eval-run h2').textContent.includes('1 of 2 passed'),
            };
            const failed = Object.keys(checks).filter((name) => !checks[name]);
            return failed.length === 0 || failed;
        })()"#,
    );
    assert_eq!(
        page.evaluate(
            "window.__pwned === undefined && document.querySelectorAll('main img').length === 0"
        ),
        json!(true),
        "a hostile answer became HTML"
    );
    page.screenshot(&artifact("eval-misses.png"));
}

#[test]
fn issue_49_edit_a_message_and_an_extension_state_in_the_studio_and_see_a_fork_against_its_origin()
{
    let Some(chromium) = chromium_path() else {
        assert!(
            std::env::var_os("GOONDAN_REQUIRE_CHROMIUM").is_none(),
            "GOONDAN_REQUIRE_CHROMIUM is set but /usr/bin/chromium is missing"
        );
        eprintln!("SKIPPED the Studio edit browser test: no /usr/bin/chromium");
        return;
    };
    use crate::operator::{ask, first_request_of, instance_dir, listed_messages, search_state};
    let (swarm, _) = crate::operator::swarm();
    let _resident = swarm.start_resident();
    assert_eq!(ask(&swarm, "e", "search one"), "answer search one");
    let output = swarm.run(&["instance", "fork", "e", "--at", "1", "--as", "e-fork"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(ask(&swarm, "e", "two"), "answer two");
    let fork_dir = instance_dir(&swarm, "e-fork");
    let swarm_id = swarm_id_of(&fork_dir);
    let (_studio, url) =
        start_studio(swarm.command(&["studio", "--addr", "127.0.0.1:0", "--allow-actions"]));
    let (port, _) = port_and_token(&url);
    let mut browser = Browser::start(&chromium);
    let page = browser.page();
    page.navigate(&url);
    page.wait_for(
        "the page without the token",
        "location.search === '' && !!document.getElementById('swarms')",
    );
    page.navigate(&format!(
        "http://127.0.0.1:{port}/#/i/{swarm_id}/worker%3Ae-fork"
    ));

    // The fork against its origin: what they share, and what the origin
    // did after the fork point.
    page.wait_for(
        "the fork's diff against its origin",
        r#"(() => {
            const diff = document.getElementById('fork-diff');
            return !!diff && diff.querySelector('.diff-summary').textContent === '4 messages shared · 0 changed · 2 only in worker:e · 0 only in this fork'
                && diff.querySelectorAll('.diff-origin').length === 2
                && diff.querySelector('.diff-origin').innerText.includes('two');
        })()"#,
    );
    page.screenshot(&artifact("fork-diff.png"));

    // Edit the question, with markup that must stay text.
    let hostile = "<img src=x onerror=\"window.__pwned = 9\">search edited";
    page.evaluate(
        r#"(() => {
            const question = [...document.querySelectorAll('#conversation .message.user')].find((m) => m.innerText.includes('search one'));
            question.querySelector('button.edit-message').click();
            return true;
        })()"#,
    );
    page.wait_for(
        "the message's editor with its text",
        "!!document.querySelector('#conversation textarea.edit-text') && document.querySelector('#conversation textarea.edit-text').value === 'search one'",
    );
    page.evaluate(&format!(
        "(() => {{ const box = document.querySelector('#conversation textarea.edit-text'); box.value = {}; box.dispatchEvent(new Event('input')); document.querySelector('#conversation button.save-edit').click(); return true; }})()",
        json!(hostile)
    ));
    page.wait_for(
        "the edit's outcome, the message marked edited, and the diff's changed line",
        r#"(() => {
            const status = document.getElementById('edit-status');
            const edited = document.querySelector('#conversation .message.is-edited');
            const changed = document.querySelector('#fork-diff .diff-changed');
            return !!status && status.innerText.startsWith('Edited message msg_') && status.innerText.includes('of worker:e-fork') && !status.innerText.includes('cancelled')
                && document.querySelectorAll('#conversation button.edit-message').length === 3
                && !!edited && edited.querySelector('.chip.edited').getAttribute('title').includes('by studio:127.0.0.1:')
                && edited.innerText.includes('<img src=x')
                && !!changed && changed.innerText.includes('was: search one')
                && document.querySelector('#fork-diff .diff-summary').textContent.startsWith('3 messages shared · 1 changed');
        })()"#,
    );
    assert_eq!(
        page.evaluate("window.__pwned === undefined && document.querySelectorAll('#conversation img, #fork-diff img').length === 0"),
        json!(true),
        "hostile markup became HTML"
    );
    page.screenshot(&artifact("edited-message.png"));
    let messages = listed_messages(&swarm, "e-fork");
    let question = messages
        .iter()
        .find(|m| m["data"]["role"] == "user")
        .unwrap();
    assert!(
        question["data"].to_string().contains("search edited"),
        "{question}"
    );
    assert!(
        question["metadata"]["__goondanEdit"]["by"]
            .as_str()
            .unwrap()
            .starts_with("studio:127.0.0.1:"),
        "{question}"
    );

    // The extension's state: shown, a bad JSON refused before it is sent,
    // then a good one saved.
    page.wait_for(
        "the extension's state",
        r#"!!document.querySelector('#extension-states .extension-state[data-extension="tool-search"] button.edit-state') && document.getElementById('extension-states').innerText.includes('zq-one')"#,
    );
    page.evaluate(r#"document.querySelector('#extension-states button.edit-state').click(); true"#);
    page.wait_for(
        "the state's editor",
        "!!document.querySelector('#extension-states textarea.edit-state-text')",
    );
    let before = std::fs::read(fork_dir.join("extensions/tool-search.json")).unwrap();
    page.evaluate("(() => { const box = document.querySelector('#extension-states textarea.edit-state-text'); box.value = '{not json'; box.dispatchEvent(new Event('input')); document.querySelector('#extension-states button.save-edit').click(); return true; })()");
    page.wait_for(
        "the bad state refused",
        "!!document.getElementById('edit-status') && document.getElementById('edit-status').innerText.startsWith('The state is not JSON')",
    );
    assert_eq!(
        std::fs::read(fork_dir.join("extensions/tool-search.json")).unwrap(),
        before
    );
    let mut state = search_state(&fork_dir);
    state["lastQuery"] = json!("zq-studio");
    page.evaluate(&format!(
        "(() => {{ const box = document.querySelector('#extension-states textarea.edit-state-text'); box.value = {}; box.dispatchEvent(new Event('input')); document.querySelector('#extension-states button.save-edit').click(); return true; }})()",
        json!(state.to_string())
    ));
    page.wait_for(
        "the state saved and shown",
        "!!document.getElementById('edit-status') && document.getElementById('edit-status').innerText.startsWith('Edited the state of tool-search of worker:e-fork') && document.getElementById('extension-states').innerText.includes('zq-studio') && !document.querySelector('#extension-states textarea')",
    );
    assert_eq!(search_state(&fork_dir)["lastQuery"], "zq-studio");

    // Resumed from there: the next Turn's model sees the edited question.
    assert_eq!(ask(&swarm, "e-fork", "three"), "answer three");
    let sent = serde_json::to_string(first_request_of(&swarm, "three").messages()).unwrap();
    assert!(
        sent.contains("search edited") && !sent.contains(r#""content":"search one""#),
        "{sent}"
    );
    assert_eq!(search_state(&fork_dir)["lastQuery"], "zq-studio");
}
