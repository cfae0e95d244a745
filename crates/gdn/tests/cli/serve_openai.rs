//! The OpenAI-compatible API of the real `gdn serve` over a real swarm
//! (the `pair` fixture on the mock LLM): the official `openai` Python
//! package as the client (the fixture script of `goondan-serve`), and a
//! streaming client that goes away mid-Turn, whose Turn still commits
//! once.

use crate::mock_llm::{ChatRequest, Reply};
use crate::serve::{Served, TOKEN};
use crate::swarm::{conversation_of, find_instance, wait_until};
use std::io::{Read, Write};
use std::time::Duration;

/// Every agent echoes its input; `FAIL` makes the model answer 500 (the
/// fixture retries nothing) and `SLOW` answers after a second.
fn echo(request: &ChatRequest) -> Reply {
    let text = request.last_user_text();
    if text.contains("FAIL") {
        return Reply::Status(500);
    }
    let answer = Reply::text(format!("echo: {text}"));
    if text.contains("SLOW") {
        return Reply::Delayed(Duration::from_secs(1), Box::new(answer));
    }
    answer
}

/// `gdn serve` with a token, starting the swarm in the background.
fn serve() -> Served {
    Served::start(echo, &["--token-env", "SERVE_TOKEN"])
}

/// Whether the `openai` package can be imported; skipped without it
/// unless `GOONDAN_REQUIRE_OPENAI_SDK` is set (as CI does).
fn sdk_available() -> bool {
    let importable = std::process::Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !importable && std::env::var_os("GOONDAN_REQUIRE_OPENAI_SDK").is_some() {
        panic!("GOONDAN_REQUIRE_OPENAI_SDK is set but `import openai` fails: pip install openai==3.57.0");
    }
    importable
}

#[test]
fn the_official_openai_package_talks_to_gdn_serve() {
    if !sdk_available() {
        eprintln!("skipped: the `openai` Python package is not installed");
        return;
    }
    let served = serve();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../goondan-serve/tests/fixtures/openai_client.py");
    let mut client = std::process::Command::new("python3");
    client
        .arg(script)
        .args(["--model", "beta", "--fail-text", "FAIL on purpose"])
        .env("OPENAI_BASE_URL", format!("{}/v1", served.base_url()))
        .env("OPENAI_API_KEY", TOKEN);
    let output = crate::swarm::run_with_deadline(client);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.trim_end().ends_with("ok"), "{stdout}");
    // The replayed conversation reached the model before the input.
    let asked = served
        .swarm
        .mock
        .requests()
        .into_iter()
        .find(|request| request.last_user_text() == "ping one")
        .expect("the model was asked");
    let texts: Vec<String> = asked
        .messages()
        .iter()
        .map(|message| {
            format!(
                "{}: {}",
                message["role"].as_str().unwrap_or(""),
                message["content"]
            )
        })
        .collect();
    let joined = texts.join("\n");
    for said in ["first question", "first answer", "Be brief.", "ping one"] {
        assert!(joined.contains(said), "{said:?} not in {joined}");
    }
}

#[test]
fn a_client_leaving_a_stream_leaves_its_turn_to_commit_once() {
    let served = serve();
    let address = format!("127.0.0.1:{}", served.port);
    let body = serde_json::json!({
        "model": "beta",
        "messages": [{"role": "user", "content": "SLOW please"}],
        "stream": true,
    })
    .to_string();
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {TOKEN}\r\nX-Goondan-Instance: left-early\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // The head and the first chunk (the role) come once the input is
    // durable; the answer is still a second away. Then the client goes.
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("\"role\":\"assistant\"") {
        let read = stream.read(&mut buffer).unwrap();
        assert!(read > 0, "closed early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buffer[..read]);
    }
    assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"));
    drop(stream);
    let instance = wait_until("the instance on disk", || {
        find_instance(served.swarm.state.path(), "beta", "left-early")
    });
    let answers = wait_until("the Turn's answer committed", || {
        let conversation = conversation_of(&instance);
        let answers = conversation
            .iter()
            .filter(|message| message["role"] == "assistant")
            .count();
        (answers > 0).then_some(conversation)
    });
    std::thread::sleep(Duration::from_millis(300));
    let conversation = conversation_of(&instance);
    assert_eq!(conversation, answers, "nothing more was added");
    let inputs = conversation
        .iter()
        .filter(|message| message["role"] == "user")
        .count();
    let replies = conversation
        .iter()
        .filter(|message| message["role"] == "assistant")
        .count();
    assert_eq!((inputs, replies), (1, 1), "{conversation:?}");
}

/// Runs the official `openai` package once against `served`: a chat
/// completion of `alpha` with `timeout` seconds per attempt, `retries`
/// retries and, when given, an `Idempotency-Key`; what it printed
/// (`answer: …` or `timeout`).
fn sdk_call(served: &Served, timeout: f64, retries: u32, key: Option<&str>) -> String {
    let script = r#"
import json, os, sys
import openai
timeout, retries, key = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
client = openai.OpenAI(timeout=timeout, max_retries=retries)
headers = {"Idempotency-Key": key} if key else {}
try:
    done = client.chat.completions.create(
        model="alpha",
        messages=[{"role": "user", "content": "run it"}],
        extra_headers=headers,
    )
    print("answer: " + done.choices[0].message.content)
except openai.APITimeoutError:
    print("timeout")
"#;
    let mut client = std::process::Command::new("python3");
    client
        .args(["-c", script])
        .arg(timeout.to_string())
        .arg(retries.to_string())
        .arg(key.unwrap_or(""))
        .env("OPENAI_BASE_URL", format!("{}/v1", served.base_url()))
        .env("OPENAI_API_KEY", TOKEN);
    let output = crate::swarm::run_with_deadline(client);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Issue 49 #2: the `openai` package's timeout and retries against a
/// gated tool. Without a key, each attempt's Turn is cancelled when the
/// attempt gives up (its request closed with it), so nothing is left
/// waiting; with `Idempotency-Key`, the retries join the first Turn:
/// one request, and approving it runs the command once, whose answer the
/// next call with the key gets.
#[test]
fn an_sdk_retry_after_a_timeout_is_the_same_turn_and_runs_the_command_once() {
    if !sdk_available() {
        eprintln!("skipped: the `openai` Python package is not installed");
        return;
    }
    let served = Served::start_for(
        crate::approvals::gated_swarm(3600),
        &["--token-env", "SERVE_TOKEN"],
    );
    let swarm = &served.swarm;
    let bundle = swarm.bundle.path();

    assert_eq!(sdk_call(&served, 1.5, 1, None), "timeout");
    wait_until("every attempt's request closed", || {
        crate::approvals::approvals(swarm).is_empty().then_some(())
    });
    assert_eq!(crate::approvals::runs(bundle), 0);

    assert_eq!(sdk_call(&served, 1.5, 2, Some("run-it-once")), "timeout");
    let waiting = crate::approvals::approvals(swarm);
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let id = waiting[0]["id"].as_str().unwrap();
    let approve = swarm.run(&["approve", id]);
    assert_eq!(crate::swarm::code(&approve), 0);
    let answer = sdk_call(&served, 30.0, 0, Some("run-it-once"));
    assert!(answer.starts_with("answer: done:"), "{answer}");
    assert_eq!(
        crate::approvals::runs(bundle),
        1,
        "the command ran other than once"
    );
    assert!(crate::approvals::approvals(swarm).is_empty());
}
