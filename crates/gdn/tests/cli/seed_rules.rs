//! Issue 48 #6: seed rules that only looked tested, each through a real
//! `gdn` with real agent processes and the mock LLM, named after the rule
//! (as `goondan-runtime`'s `must_*` tests are).

use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::swarm::{code, find_instance, read_jsonl, stderr, stdout, wait_until, Swarm};
use serde_json::{json, Value};
use std::path::Path;

/// Two agents on the mock, alpha with the tools `extra_tools` adds and
/// beta with `agents`; `extra` is appended to the bundle.
fn bundle(mock: &MockLlm, alpha_tools: &str, extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        r#"{model}apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: alpha
spec:
  modelConfig:
    modelRef: Model/mock-gpt
  prompt:
    system: "You are agent ALPHA."
  tools:
    - ref: Tool/agents
{alpha_tools}
  extensions:
    - ref: Extension/context-message
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: beta
spec:
  modelConfig:
    modelRef: Model/mock-gpt
  prompt:
    system: "You are agent BETA."
  extensions:
    - ref: Extension/context-message
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/alpha
  agents:
    - ref: Agent/alpha
    - ref: Agent/beta
  policy:
    maxStepsPerTurn: 30
    shutdown:
      gracePeriodSeconds: 1
{extra}"#,
        model = mock.model_yaml()
    );
    std::fs::write(dir.path().join("goondan.yaml"), yaml).unwrap();
    dir
}

fn swarm_of(mock: MockLlm, bundle: tempfile::TempDir) -> Swarm {
    Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    }
}

/// How many tool results the request's conversation holds.
fn tool_results(request: &ChatRequest) -> usize {
    request
        .messages()
        .iter()
        .filter(|message| message["role"] == "tool")
        .count()
}

/// The user texts of `agent:key`'s conversation, in order.
fn user_texts(state: &Path, agent: &str, key: &str) -> Vec<String> {
    let Some(dir) = find_instance(state, agent, key) else {
        return Vec::new();
    };
    crate::swarm::conversation_of(&dir)
        .iter()
        .filter(|message| message["role"] == "user")
        .map(|message| match &message["content"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .collect()
}

#[test]
fn must_a_request_without_timeout_ms_gives_up_at_the_15_s_default() {
    let mock = MockLlm::start(|request: &ChatRequest| {
        if request.is_from("agent BETA") {
            return Reply::Hang;
        }
        match request.tool_result() {
            None => Reply::tool(
                "agents__request",
                json!({"target": "beta", "input": "take your time"}),
            ),
            Some(result) => Reply::text(format!("alpha saw: {result}")),
        }
    });
    let dir = bundle(&mock, "", "");
    let swarm = swarm_of(mock, dir);
    let started = std::time::Instant::now();
    let output = crate::swarm::finish_within(
        swarm
            .command(&["run", "--input", "ask beta"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
        "a Turn waiting on a callee that never answers",
        std::time::Duration::from_secs(60),
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let answer = stdout(&output);
    assert!(answer.contains("E_AGENT_REQUEST_TIMEOUT"), "{answer}");
    assert!(answer.contains("15000 ms"), "{answer}");
    // Not a timed assertion of speed: the default is not shorter.
    assert!(started.elapsed() >= std::time::Duration::from_secs(15));
}

#[test]
fn must_events_to_one_instance_are_handled_in_the_order_they_were_sent() {
    const SENDS: usize = 20;
    let mock = MockLlm::start(|request: &ChatRequest| {
        if request.is_from("agent BETA") {
            return Reply::text("noted");
        }
        let sent = tool_results(request);
        if sent < SENDS {
            Reply::tool(
                "agents__send",
                json!({"target": "beta", "input": format!("message {sent:02}")}),
            )
        } else {
            Reply::text("all sent")
        }
    });
    let dir = bundle(&mock, "", "");
    let swarm = swarm_of(mock, dir);
    let resident = swarm.start_resident();
    let output = swarm.run(&["run", "--input", "send twenty"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let expected: Vec<String> = (0..SENDS).map(|i| format!("message {i:02}")).collect();
    let seen = wait_until("beta to handle every message", || {
        let texts = user_texts(swarm.state.path(), "beta", "default");
        let handled: Vec<String> = texts
            .into_iter()
            .filter(|text| text.contains("message "))
            .collect();
        (handled.len() >= SENDS).then_some(handled)
    });
    let order: Vec<String> = seen
        .iter()
        .map(|text| {
            let at = text.find("message ").unwrap();
            text[at..at + "message 00".len()].to_string()
        })
        .collect();
    assert_eq!(order, expected);
    drop(resident);
}

const FAILING_TOOL: &str = r#"export const handlers = {
  explode: async () => {
    throw new Error("boom " + "x".repeat(5000));
  },
};
"#;

#[test]
fn must_a_tools_error_message_limit_from_yaml_cuts_its_error() {
    let mock = MockLlm::start(|request: &ChatRequest| match request.tool_result() {
        None => Reply::tool("failing__explode", json!({})),
        Some(result) => Reply::text(format!("error was {} chars", result.len())),
    });
    let tool = r#"---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: failing
spec:
  entry: ./failing.mjs
  errorMessageLimit: 120
  exports:
    - name: explode
      description: Always fails.
      parameters: { type: object }
"#;
    let dir = bundle(&mock, "    - ref: Tool/failing", tool);
    std::fs::write(dir.path().join("failing.mjs"), FAILING_TOOL).unwrap();
    let swarm = swarm_of(mock, dir);
    let output = swarm.run(&["run", "--input", "explode"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let result = swarm
        .mock
        .requests()
        .iter()
        .find_map(|request| request.tool_result().map(str::to_string))
        .expect("the tool's result reached the model");
    let result: Value = serde_json::from_str(&result).unwrap();
    let message = result["message"]
        .as_str()
        .or_else(|| result["error"]["message"].as_str())
        .unwrap_or_else(|| panic!("no error message in {result}"));
    assert!(message.starts_with("boom xxx"), "{message}");
    assert!(message.ends_with("... (truncated)"), "{message}");
    // The whole message, suffix included, is the limit.
    assert_eq!(message.chars().count(), 120, "{message}");
}

#[test]
fn must_a_call_outside_the_catalog_gets_the_seeds_structured_refusal() {
    let mock = MockLlm::start(|request: &ChatRequest| match tool_results(request) {
        0 => Reply::tool("nowhere__action", json!({})),
        _ => Reply::text("refused"),
    });
    let dir = bundle(&mock, "", "");
    let swarm = swarm_of(mock, dir);
    let output = swarm.run(&["run", "--input", "try"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let result: Value = swarm
        .mock
        .requests()
        .iter()
        .find_map(|request| request.tool_result().map(str::to_string))
        .map(|text| serde_json::from_str(&text).unwrap())
        .expect("the refusal reached the model");
    assert_eq!(result["code"], "E_TOOL_NOT_IN_CATALOG", "{result}");
    assert_eq!(result["name"], "ToolNotInCatalogError", "{result}");
    assert_eq!(
        result["message"], "Tool 'nowhere__action' is not available in the current Tool Catalog.",
        "{result}"
    );
    assert!(result["suggestion"].is_string(), "{result}");
}

const HALF_TOOL: &str = r#"export const handlers = {
  present: async () => ({ ok: true }),
};
"#;

#[test]
fn must_every_export_has_a_handler_or_the_agent_does_not_start() {
    let mock = MockLlm::start(|_: &ChatRequest| Reply::text("never asked"));
    let tool = r#"---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: half
spec:
  entry: ./half.mjs
  exports:
    - name: present
      description: Has a handler.
      parameters: { type: object }
    - name: absent
      description: Has none.
      parameters: { type: object }
"#;
    let dir = bundle(&mock, "    - ref: Tool/half", tool);
    std::fs::write(dir.path().join("half.mjs"), HALF_TOOL).unwrap();
    let swarm = swarm_of(mock, dir);
    let output = swarm.run(&["run", "--input", "try"]);
    assert_ne!(code(&output), 0);
    let said = stderr(&output);
    assert!(
        said.contains("E_PLUGIN_EXPORT_MISSING") && said.contains("does not export `absent`"),
        "{said}"
    );
    assert!(swarm.mock.requests().is_empty(), "a model was asked");
}

#[test]
fn must_recovery_applies_pending_replace_remove_and_truncate_through_a_real_restart() {
    let mock = MockLlm::start(|request: &ChatRequest| {
        Reply::text(format!("heard {}", request.messages().len()))
    });
    let dir = bundle(&mock, "", "");
    let swarm = swarm_of(mock, dir);
    for key in ["edited", "emptied"] {
        let output = swarm.run(&["run", "--input", "first", "--instance-key", key]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    }
    // What a Turn that crashed before its fold leaves: events pending.
    let edited = find_instance(swarm.state.path(), "alpha", "edited").unwrap();
    let base = read_jsonl(&edited.join("messages/base.jsonl"));
    let user = base
        .iter()
        .find(|message| message["data"]["role"] == "user")
        .unwrap()
        .clone();
    let assistant = base
        .iter()
        .find(|message| message["data"]["role"] == "assistant")
        .unwrap()
        .clone();
    let mut replaced = user.clone();
    replaced["data"]["content"] = json!("first, replaced");
    let pending = [
        json!({"type": "replace", "targetId": user["id"], "message": replaced, "turnId": "turn_crashed"}),
        json!({"type": "remove", "targetId": assistant["id"], "turnId": "turn_crashed"}),
    ];
    write_events(&edited, &pending);

    let emptied = find_instance(swarm.state.path(), "alpha", "emptied").unwrap();
    let mut kept = user.clone();
    kept["id"] = json!("msg_after_truncate");
    kept["data"]["content"] = json!("after the truncate");
    let pending = [
        json!({"type": "truncate", "turnId": "turn_crashed"}),
        json!({"type": "append", "message": kept, "turnId": "turn_crashed"}),
    ];
    write_events(&emptied, &pending);

    for key in ["edited", "emptied"] {
        let output = swarm.run(&["run", "--input", "second", "--instance-key", key]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    }
    assert_eq!(
        user_texts(swarm.state.path(), "alpha", "edited"),
        ["first, replaced", "second"]
    );
    assert_eq!(
        user_texts(swarm.state.path(), "alpha", "emptied"),
        ["after the truncate", "second"]
    );
    let edited_conversation = crate::swarm::conversation_of(&edited);
    assert_eq!(
        edited_conversation
            .iter()
            .filter(|message| message["role"] == "assistant")
            .count(),
        1,
        "the removed answer came back: {edited_conversation:#?}"
    );
    // The model saw the folded history, not the one on disk before.
    let seen = swarm.mock.requests();
    assert!(seen.iter().any(|request| {
        let texts: Vec<String> = request
            .messages()
            .iter()
            .filter(|message| message["role"] == "user")
            .map(|message| message["content"].to_string())
            .collect();
        texts.len() == 2 && texts[0].contains("after the truncate")
    }));
}

fn write_events(instance: &Path, events: &[Value]) {
    let mut text = String::new();
    for event in events {
        text.push_str(&event.to_string());
        text.push('\n');
    }
    std::fs::write(instance.join("messages/events.jsonl"), text).unwrap();
}
