//! End to end: a two-agent delegation recorded with `gdn run --record`
//! against the mock LLM of [`crate::mock_llm`] plays back offline through a
//! `provider: replay` Model, with the mock stopped, a fresh System Root and
//! no API key in the environment.
//!
//! The delegation is the hard case for replay: the coordinator's second
//! model call carries the provider's tool-call id and a tool result full of
//! ids made up at run time (event and correlation ids), so the replayed
//! requests only match the recorded ones once those are normalized. The
//! bundle also puts the inbound event (its id and creation time) and the
//! caller's Turn into every system prompt, the other place run-time values
//! reach a model request.

use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

const COORDINATOR: &str = "agent COORDINATOR";
const RESEARCHER: &str = "agent RESEARCHER";
/// Long enough for a loaded two-core machine, short enough to fail a hang.
const DEADLINE: Duration = Duration::from_secs(60);

/// Two agents on one Model; `model_spec` is the Model's `spec` body.
fn bundle_text(model_spec: &str) -> String {
    format!(
        "apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: llm
spec:
{model_spec}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: coordinator
spec:
  modelConfig:
    modelRef: Model/llm
  prompt:
    system: \"You are {COORDINATOR}.\"
  tools:
    - ref: Tool/agents
  extensions:
    - ref: Extension/context-full
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: researcher
spec:
  modelConfig:
    modelRef: Model/llm
  prompt:
    system: \"You are {RESEARCHER}.\"
  extensions:
    - ref: Extension/context-full
---
# The base context-message extension with everything a run makes up put
# into the system prompt: event ids, timestamps, the caller's Turn id.
apiVersion: goondan.ai/v1
kind: Extension
metadata:
  name: context-full
spec:
  entry: builtin:context-message
  config:
    includeInboundContext: true
    includeCallContext: true
    includeRouteSummary: true
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/coordinator
  agents:
    - ref: Agent/coordinator
    - ref: Agent/researcher
"
    )
}

/// The coordinator asks the researcher, then quotes its answer.
fn delegate(request: &ChatRequest) -> Reply {
    if request.is_from(RESEARCHER) {
        return Reply::text(format!("facts about {}", request.last_user_text()));
    }
    match request.tool_result() {
        Some(result) => {
            let result: Value = serde_json::from_str(result).unwrap_or(Value::Null);
            Reply::text(format!("the researcher says: {}", result["response"]))
        }
        None => Reply::tool(
            "agents__request",
            json!({"target": "researcher", "input": request.last_user_text()}),
        ),
    }
}

/// `gdn --config BUNDLE --state-root STATE ARGS...`, killed if it outlives
/// [`DEADLINE`]. Output goes to files, so a chatty child never blocks on a
/// full pipe. `api_key` is the only provider key the child sees.
fn run_gdn(bundle: &Path, state: &Path, args: &[&str], api_key: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gdn"));
    command
        .arg("--config")
        .arg(bundle)
        .arg("--state-root")
        .arg(state)
        .args(args)
        .current_dir(bundle);
    for variable in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GOOGLE_GENERATIVE_AI_API_KEY",
        "GOONDAN_STATE_ROOT",
        "RUST_LOG",
    ] {
        command.env_remove(variable);
    }
    if let Some(api_key) = api_key {
        command.env("OPENAI_API_KEY", api_key);
    }
    crate::run_to_files(command, bundle, DEADLINE, &format!("gdn {args:?}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_recorded_delegation_replays_offline_without_a_key() {
    let bundle = tempfile::tempdir().unwrap();
    let cassette = bundle.path().join("cassette.jsonl");
    let cassette_arg = cassette.to_str().unwrap();

    let mock = MockLlm::start(delegate);
    let live_model = format!(
        "  provider: openai\n  model: gpt-mock\n  endpoint: \"{}\"\n  options:\n    maxRetries: 0\n",
        mock.endpoint()
    );
    std::fs::write(bundle.path().join("goondan.yaml"), bundle_text(&live_model)).unwrap();
    let recording_state = tempfile::tempdir().unwrap();
    let recorded = run_gdn(
        bundle.path(),
        recording_state.path(),
        &["run", "--record", cassette_arg, "--input", "tides"],
        Some("sk-record-7f2a"),
    );
    assert!(
        recorded.status.success(),
        "stderr: {}",
        text(&recorded.stderr)
    );
    let answer = text(&recorded.stdout);
    assert_eq!(answer, "the researcher says: \"facts about tides\"\n");
    assert_eq!(
        mock.requests().len(),
        3,
        "coordinator, researcher, coordinator"
    );
    drop(mock);
    let n_recordings = std::fs::read_to_string(&cassette).unwrap().lines().count();
    assert_eq!(n_recordings, 3);

    // Switched to replay as a user would: the key reference stays, the
    // variable is not set, and nothing asks for it.
    let replay_model = "  provider: replay\n  model: gpt-mock\n  apiKey:\n    valueFrom:\n      env: OPENAI_API_KEY\n  options:\n    cassette: cassette.jsonl\n";
    std::fs::write(
        bundle.path().join("goondan.yaml"),
        bundle_text(replay_model),
    )
    .unwrap();
    let replay_state = tempfile::tempdir().unwrap();
    let replayed = run_gdn(
        bundle.path(),
        replay_state.path(),
        &["run", "--input", "tides"],
        None,
    );
    assert!(
        replayed.status.success(),
        "stderr: {}\n{}",
        text(&replayed.stderr),
        state_report(replay_state.path())
    );
    assert_eq!(text(&replayed.stdout), answer);

    // The replayed tool call kept the provider's id, and the tool result
    // answers that id, so the conversation is the recorded one.
    let conversation = coordinator_messages(replay_state.path());
    let mut tool_call_ids = Vec::new();
    for line in conversation.lines().filter(|line| !line.trim().is_empty()) {
        collect_tool_call_ids(&serde_json::from_str(line).unwrap(), &mut tool_call_ids);
    }
    assert!(tool_call_ids.len() >= 2, "{conversation}");
    assert!(
        tool_call_ids.iter().all(|id| id == "call_mock_1"),
        "{tool_call_ids:?}"
    );
}

/// Every `toolCallId` in `value`, tool calls and results alike.
fn collect_tool_call_ids(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(object) => {
            if let Some(Value::String(id)) = object.get("toolCallId") {
                out.push(id.clone());
            }
            object
                .values()
                .for_each(|child| collect_tool_call_ids(child, out));
        }
        Value::Array(items) => items
            .iter()
            .for_each(|item| collect_tool_call_ids(item, out)),
        _ => {}
    }
}

/// Every log and stored message under a System Root, for a failure
/// message: a delegation that failed shows its cause only in the
/// researcher's log or conversation.
fn state_report(state: &Path) -> String {
    fn walk(dir: &Path, out: &mut String) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path
                .extension()
                .is_some_and(|extension| extension == "log" || extension == "jsonl")
            {
                let body = std::fs::read_to_string(&path).unwrap_or_default();
                out.push_str(&format!("--- {}\n{body}\n", path.display()));
            }
        }
    }
    let mut out = String::new();
    walk(state, &mut out);
    out
}

/// The stored conversation of `coordinator:default` under a System Root:
/// its folded base and any events not yet folded.
fn coordinator_messages(state: &Path) -> String {
    let workspaces = std::fs::read_dir(state.join("workspaces")).unwrap();
    let messages = workspaces
        .filter_map(Result::ok)
        .map(|workspace| {
            workspace
                .path()
                .join("instances/coordinator:default/messages")
        })
        .find(|path| path.is_dir())
        .expect("the coordinator's messages folder");
    ["base.jsonl", "events.jsonl"]
        .iter()
        .map(|file| std::fs::read_to_string(messages.join(file)).unwrap_or_default())
        .collect()
}
