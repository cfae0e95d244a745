//! End to end: a resident `gdn run` starts the ConnectorProcess of a
//! webhook Connection, and signed posts from outside become Turns routed
//! by the Connection's ingress rules, each under its own instance key.
//! Forged posts start nothing; a connector killed with SIGKILL comes back
//! and its Connection keeps working.

use crate::mock_llm::{MockLlm, Reply};
use crate::swarm::{
    alive, code, conversation_of, find_instance, finish_within, fixture, gdn_command, sigkill,
    stderr, stdout, wait_until, Resident, Swarm,
};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

pub(crate) const SECRET: &str = "whsec-e2e-77a1";

/// The `hooks` fixture on a free port, with a mock that echoes the last
/// user message.
pub(crate) fn hooks() -> (Swarm, u16) {
    hooks_with(64, Duration::ZERO)
}

/// As [`hooks`], with `queue` events per instance and a model that takes
/// `think` per answer (one answer at a time).
pub(crate) fn hooks_with(queue: usize, think: Duration) -> (Swarm, u16) {
    let mock = MockLlm::start(move |request| {
        std::thread::sleep(think);
        Reply::text(format!("got: {}", request.last_user_text()))
    });
    let port = free_port();
    let bundle = fixture(
        "hooks",
        &[
            ("@ENDPOINT@", mock.endpoint()),
            ("@PORT@", port.to_string()),
            ("@QUEUE@", queue.to_string()),
        ],
    );
    let swarm = Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    };
    (swarm, port)
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `gdn run` with no input, our own child, with the signing secret in its
/// environment.
pub(crate) fn start(swarm: &Swarm) -> Resident {
    let log = std::fs::File::create(swarm.bundle.path().join("orchestrator.log")).unwrap();
    let child = gdn_command(swarm.bundle.path(), swarm.state.path(), &["run"])
        .env("HOOK_SECRET", SECRET)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let resident = Resident { child: Some(child) };
    swarm.wait_for_socket();
    resident
}

/// One HTTP/1.1 POST on a fresh connection: the status and the body, or
/// `None` while nothing listens.
pub(crate) fn post(port: u16, body: &str, headers: &[(&str, String)]) -> Option<(u16, String)> {
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    let (status, _, body) = crate::serve::http(port, "POST", "/", body.as_bytes(), &headers)?;
    Some((status, body))
}

/// Sends only the head of a post that declares a 64 MiB body, and returns
/// the status the connector answers before reading any of it.
fn declare_huge_body(port: u16) -> u16 {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let head = "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 67108864\r\n\r\n";
    stream.write_all(head.as_bytes()).unwrap();
    let mut answer = [0u8; 64];
    let read = stream.read(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]).into_owned();
    answer.split(' ').nth(1).unwrap().parse().unwrap()
}

pub(crate) fn signed(body: &str) -> Vec<(&'static str, String)> {
    let signature = goondan_connector::verify::hmac_sha256_hex(SECRET.as_bytes(), body.as_bytes());
    vec![("X-Webhook-Signature", format!("sha256={signature}"))]
}

/// Posts `body` signed until the connector answers (it may still be
/// starting, or coming back from a crash).
pub(crate) fn post_signed_when_up(port: u16, body: &str) -> (u16, String) {
    wait_until("the webhook connector to answer", || {
        post(port, body, &signed(body))
    })
}

/// The pids of `gdn connector` processes whose parent is `parent`.
pub(crate) fn connector_pids(parent: i32) -> Vec<i32> {
    crate::swarm::children_of(parent)
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline
                .split(|byte| *byte == 0)
                .any(|argument| argument == b"connector")
        })
        .collect()
}

pub(crate) fn conversation_texts(swarm: &Swarm, agent: &str, key: &str) -> Vec<String> {
    let dir = wait_until("the instance folder", || {
        find_instance(swarm.state.path(), agent, key)
    });
    conversation_of(&dir)
        .iter()
        .map(|message| message["content"].to_string())
        .collect()
}

pub(crate) fn wait_for_answer(swarm: &Swarm, agent: &str, key: &str, text: &str) {
    wait_until(&format!("{agent}:{key} to answer {text:?}"), || {
        conversation_texts(swarm, agent, key)
            .iter()
            .any(|content| content.contains(&format!("got: {text}")))
            .then_some(())
    });
}

#[test]
fn signed_posts_become_turns_routed_by_the_connection_rules() {
    let (swarm, port) = hooks();
    let resident = start(&swarm);

    let ticket = r#"{"event":"ticket","text":"printer on fire","properties":{"ticket":"42"}}"#;
    let (status, body) = post_signed_when_up(port, ticket);
    assert_eq!(status, 200, "{body}");
    // The sender learns where the rules sent it.
    assert!(body.contains(r#""target":"beta:ticket-42""#), "{body}");
    wait_for_answer(&swarm, "beta", "ticket-42", "printer on fire");

    let other = r#"{"event":"note","text":"lunch at noon","instanceKey":"hook-7"}"#;
    let (status, body) = post_signed_when_up(port, other);
    assert_eq!(status, 200, "{body}");
    wait_for_answer(&swarm, "alpha", "hook-7", "lunch at noon");

    // Each conversation holds its own event only.
    let beta = conversation_texts(&swarm, "beta", "ticket-42");
    assert!(
        !beta.iter().any(|content| content.contains("lunch")),
        "{beta:?}"
    );
    assert!(find_instance(swarm.state.path(), "alpha", "default").is_none());
    assert_eq!(resident.terminate(), 0);

    // The signing secret is in no log, conversation or state file (the
    // bundle's own goondan.yaml names only the variable).
    crate::secrets::assert_nowhere_below(SECRET, &[swarm.state.path(), swarm.bundle.path()]);
}

#[test]
fn a_retried_delivery_is_one_turn() {
    let (swarm, port) = hooks();
    let _resident = start(&swarm);
    // The sender retries a delivery it is not sure arrived: same id.
    let first = r#"{"text":"once only","instanceKey":"retry","deliveryId":"delivery-1"}"#;
    for _ in 0..2 {
        let (status, body) = post_signed_when_up(port, first);
        assert_eq!(status, 200, "{body}");
    }
    // A new delivery queued after it: when it has run, a duplicate
    // would have run before it.
    let next = r#"{"text":"then this","instanceKey":"retry","deliveryId":"delivery-2"}"#;
    assert_eq!(post_signed_when_up(port, next).0, 200);
    wait_for_answer(&swarm, "alpha", "retry", "then this");
    let turns = swarm
        .mock
        .requests()
        .iter()
        .filter(|request| request.last_user_text() == "once only")
        .count();
    assert_eq!(turns, 1);
}

#[test]
fn forged_missing_and_stale_signatures_start_nothing() {
    let (swarm, port) = hooks();
    let _resident = start(&swarm);
    // Up and verifying: a well-signed post goes through first.
    let warm = r#"{"text":"warm up","instanceKey":"warm"}"#;
    assert_eq!(post_signed_when_up(port, warm).0, 200);

    let body = r#"{"text":"transfer all funds","instanceKey":"evil"}"#;
    let forged = goondan_connector::verify::hmac_sha256_hex(b"not-the-secret", body.as_bytes());
    let attempts: Vec<Vec<(&str, String)>> = vec![
        vec![("X-Webhook-Signature", format!("sha256={forged}"))],
        vec![],
        vec![("X-Webhook-Signature", "sha256=zz".to_string())],
        // The signature of another body.
        signed(warm),
    ];
    for headers in attempts {
        let (status, answer) = post(port, body, &headers).expect("the connector answers");
        assert_eq!(status, 401, "{headers:?}: {answer}");
    }
    // Malformed and oversized bodies, even when signed, are refused.
    let malformed = "{not json";
    assert_eq!(post(port, malformed, &signed(malformed)).unwrap().0, 400);
    assert_eq!(declare_huge_body(port), 413);

    wait_for_answer(&swarm, "alpha", "warm", "warm up");
    assert!(
        !swarm
            .mock
            .requests()
            .iter()
            .any(|request| request.last_user_text().contains("transfer all funds")),
        "a forged post reached the model"
    );
    assert!(find_instance(swarm.state.path(), "alpha", "evil").is_none());
}

#[test]
fn a_connector_killed_with_sigkill_comes_back_and_keeps_its_connection() {
    let (swarm, port) = hooks();
    let resident = start(&swarm);
    let first = r#"{"text":"before the crash","instanceKey":"crash"}"#;
    assert_eq!(post_signed_when_up(port, first).0, 200);
    let pids = connector_pids(resident.pid());
    assert_eq!(pids.len(), 1, "one connector process: {pids:?}");
    sigkill(pids[0]);
    wait_until("the killed connector to be gone", || {
        (!alive(pids[0])).then_some(())
    });

    let second = r#"{"text":"after the crash","instanceKey":"crash"}"#;
    let (status, body) = post_signed_when_up(port, second);
    assert_eq!(status, 200, "{body}");
    let replaced = connector_pids(resident.pid());
    assert_eq!(replaced.len(), 1, "{replaced:?}");
    assert_ne!(replaced[0], pids[0]);
    wait_for_answer(&swarm, "alpha", "crash", "before the crash");
    wait_for_answer(&swarm, "alpha", "crash", "after the crash");
}

#[test]
fn a_flood_beyond_the_queue_gets_429_and_every_accepted_post_is_answered_once() {
    let (swarm, port) = hooks_with(2, Duration::from_millis(150));
    let _resident = start(&swarm);
    let warm = r#"{"text":"warm","instanceKey":"flood"}"#;
    assert_eq!(post_signed_when_up(port, warm).0, 200);
    let posts: Vec<_> = (0..16)
        .map(|n| {
            std::thread::spawn(move || {
                let body = format!(r#"{{"text":"flood {n:02}","instanceKey":"flood"}}"#);
                let (status, answer) = post(port, &body, &signed(&body)).unwrap();
                (n, status, answer)
            })
        })
        .collect();
    let results: Vec<(usize, u16, String)> =
        posts.into_iter().map(|post| post.join().unwrap()).collect();
    let accepted: Vec<usize> = results
        .iter()
        .filter(|(_, status, _)| *status == 200)
        .map(|(n, _, _)| *n)
        .collect();
    let refused: Vec<usize> = results
        .iter()
        .filter(|(_, status, _)| *status == 429)
        .map(|(n, _, _)| *n)
        .collect();
    assert_eq!(
        accepted.len() + refused.len(),
        16,
        "only 200 or 429: {results:?}"
    );
    assert!(
        !refused.is_empty(),
        "a queue of 2 took 16 posts: {results:?}"
    );
    assert!(!accepted.is_empty(), "{results:?}");
    for n in &accepted {
        wait_for_answer(&swarm, "alpha", "flood", &format!("flood {n:02}"));
    }
    let history = conversation_texts(&swarm, "alpha", "flood");
    for n in &accepted {
        let asked = format!("\"flood {n:02}\"");
        let times = history.iter().filter(|content| **content == asked).count();
        assert_eq!(times, 1, "flood {n:02} stored {times} times: {history:?}");
    }
    for n in &refused {
        let text = format!("flood {n:02}");
        assert!(
            !history.iter().any(|content| content.contains(&text)),
            "refused {text} was stored"
        );
    }
}

/// `examples/webhook` driven as its README says: signed with `openssl`,
/// posted with `curl` (on a free port instead of 8080).
#[test]
fn the_webhook_example_works_with_curl_and_openssl_as_its_readme_says() {
    let have = |tool: &str| {
        std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|output| output.status.success())
    };
    if !have("curl") || !have("openssl") {
        eprintln!("skipped: curl or openssl is not installed");
        return;
    }
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/webhook");
    let bundle = tempfile::tempdir().unwrap();
    let port = free_port();
    for name in ["goondan.yaml", "scripted-rules.yaml"] {
        let text = std::fs::read_to_string(example.join(name)).unwrap();
        let text = text.replace("\"8080\"", &format!("\"{port}\""));
        std::fs::write(bundle.path().join(name), text).unwrap();
    }
    let state = tempfile::tempdir().unwrap();
    let log = std::fs::File::create(bundle.path().join("orchestrator.log")).unwrap();
    let child = gdn_command(bundle.path(), state.path(), &["run"])
        .env("WEBHOOK_SECRET", "change-me-please")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let resident = Resident { child: Some(child) };
    let readme_post = |body: &str| {
        let script = format!(
            r#"body='{body}'
sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$WEBHOOK_SECRET" | sed 's/^.*= //')
curl -s -o /dev/null -w '%{{http_code}}' -H "X-Webhook-Signature: sha256=$sig" -H 'Content-Type: application/json' --data "$body" http://127.0.0.1:{port}/hooks"#
        );
        let output = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("WEBHOOK_SECRET", "change-me-please")
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let order =
        r#"{"event":"order_paid","text":"Order 1042 was paid","properties":{"customer":"ann"}}"#;
    wait_until("the example's webhook to accept a signed post", || {
        (readme_post(order) == "200").then_some(())
    });
    let ticket =
        r#"{"event":"ticket_opened","text":"The printer is on fire","properties":{"ticket":"77"}}"#;
    assert_eq!(readme_post(ticket), "200");
    let answered = |agent: &str, key: &str, text: &str| {
        wait_until(&format!("{agent}:{key} to answer"), || {
            let dir = find_instance(state.path(), agent, key)?;
            conversation_of(&dir)
                .iter()
                .any(|message| message["content"].to_string().contains(text))
                .then_some(())
        })
    };
    answered("orders", "customer-ann", "Confirmed: Order 1042 was paid");
    answered("support", "ticket-77", "Ticket received");
    assert_eq!(resident.terminate(), 0);
}

/// The `gdn connector` processes of any parent that were started for the
/// System Root `state` (their argv names it).
fn connectors_of_state(state: &std::path::Path) -> Vec<i32> {
    let state = state.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let arguments: Vec<&[u8]> = cmdline.split(|byte| *byte == 0).collect();
            arguments.contains(&&b"connector"[..]) && arguments.contains(&state.as_bytes())
        })
        .filter(|pid| alive(*pid))
        .collect()
}

/// Issue 35: a webhook Connection that refuses to start (an open host and
/// no secret) is reported by `gdn run --detach` with its code and fix; its
/// ConnectorProcess exits instead of staying alive (and, its bundle being
/// what refused it, is not started again: issue 48); and `gdn stop`
/// finishes long before the default 300 s grace period, leaving no
/// `gdn connector` behind.
#[test]
fn a_connection_that_refuses_to_start_is_reported_kept_down_and_stopped() {
    let (swarm, port) = hooks();
    let path = swarm.bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let open = text
        .replace(
            "  secrets:\n    WEBHOOK_SECRET:\n      valueFrom:\n        env: HOOK_SECRET\n",
            "",
        )
        .replace(
            &format!("    PORT:\n      value: \"{port}\"\n"),
            &format!("    PORT:\n      value: \"{port}\"\n    HOST:\n      value: \"0.0.0.0\"\n"),
        );
    assert!(!open.contains("WEBHOOK_SECRET") && open.contains("0.0.0.0"));
    std::fs::write(&path, open).unwrap();

    let started = swarm.run(&["run", "--detach"]);
    assert_eq!(code(&started), 0, "{}", stderr(&started));
    let text = stdout(&started);
    let pid: i32 = text
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text:?}"));
    let warning = stderr(&started);
    assert!(
        warning.contains("warning[E_CONNECTOR_CONFIG]: Connection/hooks did not start"),
        "{warning}"
    );
    assert!(warning.contains("SIGNING_SECRET"), "{warning}");
    assert!(warning.contains("gdn restart"), "{warning}");

    // The refused process exits, and none is started in its place.
    wait_until("the refused connector to exit", || {
        connector_pids(pid).is_empty().then_some(())
    });

    let stop = gdn_command(swarm.bundle.path(), swarm.state.path(), &["stop"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stopped = finish_within(stop, "gdn stop", Duration::from_secs(20));
    assert_eq!(code(&stopped), 0, "{}", stderr(&stopped));
    wait_until("the orchestrator to exit", || (!alive(pid)).then_some(()));
    wait_until("no connector left", || {
        connectors_of_state(swarm.state.path())
            .is_empty()
            .then_some(())
    });
}
