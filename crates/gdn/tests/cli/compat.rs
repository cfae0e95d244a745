//! Compatibility with the original's bundles and environment (issues 18
//! and 21): a bundle in the shape of its smoke-test sample validates and
//! answers a turn through `ANTHROPIC_BASE_URL` pointed at a mock that
//! speaks the Anthropic Messages wire format; one in the shape of its
//! brain-persona sample validates.

use crate::swarm::{code, gdn_command, run_with_deadline, stderr, stdout};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A minimal Anthropic Messages server on 127.0.0.1: every request is
/// recorded and answered with one text block.
/// It serves on a thread of its own until the test process ends.
struct MockAnthropic {
    base_url: String,
    requests: Arc<Mutex<Vec<(String, Value)>>>,
}

impl MockAnthropic {
    fn start(answer: &'static str) -> MockAnthropic {
        let requests: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
        let seen = requests.clone();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        let app = Router::new().route(
            "/proxy/v1/messages",
            post(
                move |headers: axum::http::HeaderMap, Json(body): Json<Value>| {
                    let seen = seen.clone();
                    async move {
                        let key = headers
                            .get("x-api-key")
                            .and_then(|value| value.to_str().ok())
                            .unwrap_or_default()
                            .to_string();
                        seen.lock().unwrap().push((key, body));
                        Json(json!({
                            "id": "msg_mock", "type": "message", "role": "assistant",
                            "model": "claude-test",
                            "content": [{"type": "text", "text": answer}],
                            "stop_reason": "end_turn",
                            "usage": {"input_tokens": 12, "output_tokens": 4}
                        }))
                    }
                },
            ),
        );
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        MockAnthropic {
            base_url: format!("http://{address}/proxy/v1"),
            requests,
        }
    }
}

/// A copy of `tests/fixtures/compat/<name>` (with its subfolders) in a
/// temporary folder.
fn fixture(name: &str) -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let target = to.join(path.file_name().unwrap());
            if path.is_dir() {
                copy(&path, &target);
            } else {
                std::fs::copy(&path, target).unwrap();
            }
        }
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/compat")
        .join(name);
    let target = tempfile::tempdir().unwrap();
    copy(&source, target.path());
    target
}

#[test]
fn a_smoke_test_shaped_bundle_answers_through_anthropic_base_url() {
    let bundle = fixture("smoke-like");
    let state = tempfile::tempdir().unwrap();
    let mock = MockAnthropic::start("Hello from the proxy.");

    let mut validate = gdn_command(bundle.path(), state.path(), &["validate", "--strict"]);
    validate.env("ANTHROPIC_API_KEY", "sk-ant-compat");
    let output = run_with_deadline(validate);
    assert_eq!(code(&output), 0, "{}{}", stdout(&output), stderr(&output));

    let mut run = gdn_command(bundle.path(), state.path(), &["run", "--input", "hi"]);
    run.env("ANTHROPIC_API_KEY", "sk-ant-compat")
        .env("ANTHROPIC_BASE_URL", &mock.base_url);
    let output = run_with_deadline(run);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output).trim(), "Hello from the proxy.");
    // The System Root has the original's layout (workspace.md §2.3).
    for entry in ["config.json", "packages", "workspaces", "runtime"] {
        assert!(state.path().join(entry).exists(), "no {entry}");
    }
    let requests = mock.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    let (key, body) = &requests[0];
    assert_eq!(key, "sk-ant-compat");
    assert_eq!(body["model"], "claude-test");
    assert!(
        body["system"]
            .to_string()
            .contains("Answer in one short sentence."),
        "{body}"
    );
}

/// A bundle in the shape of the original's brain-persona sample validates
/// unchanged: TypeScript extensions, per-agent extension `config:`,
/// `requiredTools`, the `self-restart` tool, the `telegram-polling` and
/// `slack` connectors.
#[test]
fn a_brain_persona_shaped_bundle_validates() {
    let bundle = fixture("brain-like");
    let state = tempfile::tempdir().unwrap();
    let mut validate = gdn_command(bundle.path(), state.path(), &["validate"]);
    validate
        .env("ANTHROPIC_API_KEY", "sk-ant-compat")
        .env("TELEGRAM_BOT_TOKEN", "123:compat")
        .env("SLACK_BOT_TOKEN", "xoxb-compat")
        .env("SLACK_SIGNING_SECRET", "compat-signing");
    let output = run_with_deadline(validate);
    assert_eq!(code(&output), 0, "{}{}", stdout(&output), stderr(&output));
    assert_eq!(stdout(&output), "Errors: 0, Warnings: 0\n");
}

/// The brain-persona-shaped bundle's TypeScript turn middleware runs on
/// this machine's Node (stripped by `gdn strip-types` on Node 20): a turn
/// through the mock answers, and the extension's state is on disk.
#[test]
fn a_typescript_extension_in_the_originals_style_runs_in_a_turn() {
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no node on PATH");
        return;
    }
    let bundle = fixture("brain-like");
    let path = bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    // The guard would hold the turn until it calls telegram or slack.
    let without_guard = text.replace(
        "  requiredTools:\n    - \"telegram__send\"\n    - \"slack__send\"\n",
        "",
    );
    assert_ne!(text, without_guard);
    std::fs::write(&path, without_guard).unwrap();
    let state = tempfile::tempdir().unwrap();
    let mock = MockAnthropic::start("On it.");
    let mut run = gdn_command(bundle.path(), state.path(), &["run", "--input", "hello"]);
    run.env("ANTHROPIC_API_KEY", "sk-ant-compat")
        .env("ANTHROPIC_BASE_URL", &mock.base_url)
        .env("TELEGRAM_BOT_TOKEN", "123:compat")
        .env("SLACK_BOT_TOKEN", "xoxb-compat")
        .env("SLACK_SIGNING_SECRET", "compat-signing");
    let output = run_with_deadline(run);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output).trim(), "On it.");
    let saved = crate::files_under(state.path())
        .into_iter()
        .find(|file| file.ends_with("extensions/quiet-watch.json"))
        .unwrap_or_else(|| {
            panic!(
                "no quiet-watch state under {:?}",
                crate::files_under(state.path())
            )
        });
    let value: Value = serde_json::from_str(&std::fs::read_to_string(saved).unwrap()).unwrap();
    assert!(value["lastTurnAt"].as_u64().is_some(), "{value}");
}

/// Copies the folder `source` into `target`, recursively.
fn copy_tree(source: &Path, target: &Path) {
    std::fs::create_dir_all(target).unwrap();
    for entry in std::fs::read_dir(source).unwrap() {
        let entry = entry.unwrap();
        let to = target.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), &to).unwrap();
        }
    }
}

#[test]
fn a_state_root_written_by_the_original_is_listed_logged_and_continued() {
    use crate::mock_llm::Reply;
    // The original's layout (workspace.md §6-§7): an unscoped workspace
    // id, `agent:key` instance folders, its metadata, a base with a
    // tool round trip, an append left pending by an interrupted Turn.
    let swarm = crate::swarm::Swarm::pair(2, |request| {
        Reply::text(format!("I see {} messages", request.messages().len()))
    });
    let original =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/compat/original-state");
    copy_tree(&original, swarm.state.path());

    let listed = swarm.run(&["instance", "list", "--json"]);
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    assert!(
        stdout(&listed).contains("alpha:default"),
        "{}",
        stdout(&listed)
    );

    let logs = swarm.run(&["logs", "--agent", "alpha", "--type", "turn.*"]);
    assert_eq!(code(&logs), 0, "{}", stderr(&logs));
    assert!(
        stdout(&logs).contains("turn.completed"),
        "{}",
        stdout(&logs)
    );

    let output = swarm.run(&["run", "--input", "What were the words?"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let request = swarm.mock.requests().pop().expect("the model was called");
    let sent = request.body["messages"].to_string();
    for earlier in [
        "Remember the code word: heron.",
        "Noted: heron.",
        "availableAgents",
        "And the second word is: ibis.",
        "What were the words?",
    ] {
        assert!(sent.contains(earlier), "{earlier} missing from {sent}");
    }
    // The conversation stays where the original kept it, folded.
    let instance = swarm
        .state
        .path()
        .join("workspaces/default/instances/alpha:default");
    let conversation = crate::swarm::conversation_of(&instance);
    // Its five messages, then this Turn's system prompt (the
    // context-message extension), input and answer.
    assert_eq!(conversation.len(), 8, "{conversation:?}");
    assert_eq!(conversation[7]["content"][0]["text"], "I see 7 messages");
    assert_eq!(
        std::fs::read_to_string(instance.join("messages/events.jsonl")).unwrap(),
        ""
    );
}
