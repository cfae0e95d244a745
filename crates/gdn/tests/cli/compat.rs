//! Compatibility with the original's bundles and environment (issue 21):
//! a bundle in the shape of its smoke-test sample validates and answers a
//! turn through `ANTHROPIC_BASE_URL` pointed at a mock that speaks the
//! Anthropic Messages wire format.

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

fn fixture(name: &str) -> tempfile::TempDir {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/compat")
        .join(name);
    let target = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&source).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, target.path().join(path.file_name().unwrap())).unwrap();
    }
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
