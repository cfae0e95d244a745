//! The `a2a` extension inside a real AgentProcess, against a remote agent
//! written with the official A2A Python SDK (`a2a-sdk` 1.3, A2A 1.0;
//! crates/gdn/tests/fixtures/a2a/remote_agent.py): `alpha`'s model (the
//! mock LLM) calls `py__send`, the answer comes back from Python, and the
//! stream's updates are `tool.progress` runtime events of the Turn. The
//! bad paths (a failed task, a question, nothing listening) are tool
//! error results the Turn answers with.

use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::swarm::{code, fixture, stderr, stdout, Swarm};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The Python agent, killed when dropped.
struct RemoteAgent {
    child: Child,
    url: String,
}

impl RemoteAgent {
    fn start(args: &[&str]) -> RemoteAgent {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/a2a/remote_agent.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the Python agent printed no port: {line:?}"));
        RemoteAgent {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for RemoteAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `task <id> (contextId <id>)` out of an input-required error result.
fn ids_in(result: &str) -> (String, String) {
    let after = |marker: &str| -> String {
        let start = result.find(marker).map(|at| at + marker.len()).unwrap_or(0);
        result[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect()
    };
    (after("task "), after("(contextId "))
}

fn decide(request: &ChatRequest) -> Reply {
    let asked = request.last_user_text();
    match request.tool_result() {
        Some(result) if asked == "ask" && result.contains("E_A2A_INPUT_REQUIRED") => {
            let (task_id, context_id) = ids_in(result);
            Reply::tool(
                "py__send",
                json!({"text": "Paris", "taskId": task_id, "contextId": context_id}),
            )
        }
        Some(result) => Reply::text(format!("alpha heard: {result}")),
        None => match asked.as_str() {
            "fail" => Reply::tool("py__send", json!({"text": "fail please"})),
            "ask" => Reply::tool("py__send", json!({"text": "ask me"})),
            "dead" => Reply::tool("dead__send", json!({"text": "anyone?"})),
            other => Reply::tool("py__send", json!({"text": other})),
        },
    }
}

fn a2a_swarm(remote: &RemoteAgent) -> Swarm {
    let mock = MockLlm::start(decide);
    // A port nothing listens on: bound, then closed.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let bundle = fixture(
        "a2a",
        &[
            ("@ENDPOINT@", mock.endpoint()),
            ("@REMOTE@", remote.url.clone()),
            ("@DEAD@", dead_url),
        ],
    );
    Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    }
}

/// The `tool.progress` events of `alpha`'s runtime events.
fn progress(swarm: &Swarm) -> Vec<Value> {
    swarm
        .runtime_events("alpha")
        .into_iter()
        .filter(|event| event["type"] == "tool.progress")
        .collect()
}

#[test]
fn a_turn_calls_an_agent_of_the_official_sdk_and_its_stream_lands_in_runtime_events() {
    if !crate::serve::a2a_sdk_available() {
        eprintln!(
            "skipped: the A2A Python SDK is not installed (pip install 'a2a-sdk[http-server]')"
        );
        return;
    }
    let remote = RemoteAgent::start(&[]);
    let swarm = a2a_swarm(&remote);
    let output = swarm.run(&["run", "--input", "hello from goondan"]);
    let answer = stdout(&output);
    assert_eq!(code(&output), 0, "{answer}\n{}", stderr(&output));
    assert!(answer.contains("alpha heard:"), "{answer}");
    assert!(
        answer.contains("python echo: hello from goondan"),
        "{answer}"
    );
    assert!(answer.contains("completed"), "{answer}");

    // The tool's description is the config's, and its result carries the
    // ids that continue the conversation.
    let requests = swarm.mock.requests();
    let tools = requests[0].body["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let send = tools
        .iter()
        .find(|tool| tool["function"]["name"] == "py__send")
        .unwrap_or_else(|| panic!("py__send in the catalog: {tools:?}"));
    let description = send["function"]["description"].as_str().unwrap();
    assert!(
        description.contains("the Python echo agent"),
        "{description}"
    );
    assert_eq!(send["function"]["parameters"]["required"], json!(["text"]));
    let conversation = swarm.conversation("alpha");
    let result = conversation
        .iter()
        .find(|message| message["role"] == "tool")
        .expect("a tool result");
    let output_value = &result["content"][0]["output"];
    let text = output_value.to_string();
    assert!(text.contains("\"taskId\""), "{text}");
    assert!(text.contains("\"contextId\""), "{text}");

    // The stream, in order, inside the call: working, two answer chunks,
    // completed.
    let events = swarm.runtime_events("alpha");
    let types: Vec<&str> = events
        .iter()
        .map(|event| event["type"].as_str().unwrap())
        .collect();
    let called = types.iter().position(|t| *t == "tool.called").unwrap();
    let completed = types.iter().position(|t| *t == "tool.completed").unwrap();
    let updates = progress(&swarm);
    assert!(
        types[called + 1..completed]
            .iter()
            .all(|t| *t == "tool.progress"),
        "{types:?}"
    );
    assert_eq!(completed - called - 1, updates.len(), "{types:?}");
    let kinds: Vec<&str> = updates
        .iter()
        .map(|event| event["data"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["task", "status", "artifact", "artifact", "status"],
        "{updates:?}"
    );
    assert_eq!(updates[1]["message"], "working: python is thinking");
    assert_eq!(updates[2]["data"]["text"], "python echo: ");
    assert_eq!(updates[3]["data"]["text"], "hello from goondan");
    assert_eq!(updates[3]["data"]["append"], true);
    assert_eq!(updates[4]["data"]["state"], "completed");
    for update in &updates {
        assert_eq!(update["toolName"], "py__send");
        assert_eq!(update["spanId"], events[called]["spanId"]);
    }
}

#[test]
fn failures_questions_and_silence_are_tool_results_the_turn_answers_with() {
    if !crate::serve::a2a_sdk_available() {
        eprintln!(
            "skipped: the A2A Python SDK is not installed (pip install 'a2a-sdk[http-server]')"
        );
        return;
    }
    // Without streaming: `SendMessage`, answered when the task settles.
    let remote = RemoteAgent::start(&["--no-streaming"]);
    let swarm = a2a_swarm(&remote);
    let resident = swarm.start_resident();

    let failed = swarm.run(&["run", "--input", "fail"]);
    let text = stdout(&failed);
    assert_eq!(code(&failed), 0, "{text}\n{}", stderr(&failed));
    assert!(text.starts_with("alpha heard:"), "{text}");
    assert!(text.contains("E_A2A_TASK_FAILED"), "{text}");
    assert!(text.contains("python cannot do that"), "{text}");

    // A question, answered on the same task: the ids of the first result
    // continue it at the remote.
    let asked = swarm.run(&["run", "--input", "ask"]);
    let text = stdout(&asked);
    assert_eq!(code(&asked), 0, "{text}\n{}", stderr(&asked));
    assert!(text.contains("python heard the answer: Paris"), "{text}");

    let dead = swarm.run(&["run", "--input", "dead"]);
    let text = stdout(&dead);
    assert_eq!(code(&dead), 0, "{text}\n{}", stderr(&dead));
    assert!(text.starts_with("alpha heard:"), "{text}");
    assert!(text.contains("E_A2A_UNREACHABLE"), "{text}");

    // Without a stream there is nothing to report while the call runs.
    assert!(progress(&swarm).is_empty());
    let completed: Vec<Value> = swarm
        .runtime_events("alpha")
        .into_iter()
        .filter(|event| event["type"] == "tool.completed")
        .collect();
    let codes: Vec<&str> = completed
        .iter()
        .map(|event| event["errorCode"].as_str().unwrap_or("ok"))
        .collect();
    assert_eq!(
        codes,
        [
            "E_A2A_TASK_FAILED",
            "E_A2A_INPUT_REQUIRED",
            "ok",
            "E_A2A_UNREACHABLE"
        ]
    );
    assert_eq!(resident.terminate(), 0);
}
