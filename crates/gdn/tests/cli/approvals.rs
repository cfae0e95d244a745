//! Issue 36 #1, approval gates end to end: a `bash__exec` call gated by
//! the base `tool-approval` extension waits for a person; the request
//! survives a kill -9 of the agent and of the orchestrator; `gdn approve`
//! runs the command exactly once and the Turn goes on where it stopped
//! (no second model call for the same step); `gdn deny` gives the model
//! the reason; a timeout applies the default. `gdn stop` does not wait out
//! the grace period for a Turn waiting for a person (issue 47): the
//! request is durable, and the next `gdn run` resumes it.

use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::swarm::{code, fixture, sigkill, stderr, stdout, wait_until, Swarm};
use serde_json::{json, Value};
use std::path::Path;

/// The mock: run the command that appends a line to `runs.txt` (or what
/// the test passes), then answer with the tool's result.
pub(crate) fn gated_swarm(timeout_seconds: u32) -> Swarm {
    gated_swarm_with_grace(timeout_seconds, 1)
}

/// [`gated_swarm`] with a shutdown grace period of `grace_seconds`.
fn gated_swarm_with_grace(timeout_seconds: u32, grace_seconds: u32) -> Swarm {
    let mock = MockLlm::start(|request: &ChatRequest| match request.tool_result() {
        None => Reply::tool("bash__exec", json!({"command": "echo ran >> runs.txt"})),
        Some(result) => Reply::text(format!("done: {result}")),
    });
    let bundle = fixture(
        "gated",
        &[
            ("@ENDPOINT@", mock.endpoint()),
            ("@GRACE@", grace_seconds.to_string()),
            ("@TIMEOUT@", timeout_seconds.to_string()),
        ],
    );
    Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    }
}

/// `gdn approvals --json`.
pub(crate) fn approvals(swarm: &Swarm) -> Vec<Value> {
    let output = swarm.run(&["approvals", "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    serde_json::from_str::<Value>(&stdout(&output))
        .unwrap()
        .as_array()
        .cloned()
        .unwrap()
}

/// How many times the gated command ran.
pub(crate) fn runs(bundle: &Path) -> usize {
    std::fs::read_to_string(bundle.join("runs.txt"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

#[test]
fn an_approval_survives_kill_9_of_the_agent_and_the_orchestrator_and_runs_once() {
    let swarm = gated_swarm(3600);
    let resident = swarm.start_resident();
    // Attached to the orchestrator killed below: it ends with an error.
    let asker = swarm.spawn_input("run it");
    let waiting = wait_until("the approval request", || {
        let waiting = approvals(&swarm);
        (!waiting.is_empty()).then_some(waiting)
    });
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let request = &waiting[0];
    for field in [
        "id",
        "agent",
        "instanceKey",
        "tool",
        "arguments",
        "requestedAt",
    ] {
        assert!(request.get(field).is_some(), "no {field} in {request}");
    }
    assert_eq!(request["tool"], "bash__exec");
    assert_eq!(request["agent"], "alpha");
    assert_eq!(request["arguments"]["command"], "echo ran >> runs.txt");
    let id = request["id"].as_str().unwrap().to_string();
    assert_eq!(
        runs(swarm.bundle.path()),
        0,
        "the gated call ran before a decision"
    );

    // kill -9 of the agent, then of the orchestrator.
    let agent = wait_until("the agent's pid", || swarm.pid_of("alpha"));
    sigkill(agent);
    sigkill(resident.pid());
    drop(resident);
    let orphaned = crate::swarm::finish(asker, "the input whose orchestrator died");
    assert_ne!(code(&orphaned), 0);
    assert_eq!(
        approvals(&swarm).len(),
        1,
        "the request did not outlive the processes"
    );

    let resident = swarm.start_resident();
    assert_eq!(approvals(&swarm)[0]["id"], id.as_str());
    let approve = swarm.run(&["approve", &id, "--reason", "fine by me"]);
    assert_eq!(code(&approve), 0, "{}", stderr(&approve));
    assert!(
        stdout(&approve).contains(&format!("approved {id}")),
        "{}",
        stdout(&approve)
    );

    wait_until("the resumed Turn's answer", || {
        swarm
            .conversation("alpha")
            .iter()
            .any(|message| message["role"] == "assistant" && message.to_string().contains("done:"))
            .then_some(())
    });
    assert_eq!(
        runs(swarm.bundle.path()),
        1,
        "the approved command ran other than once"
    );
    assert!(approvals(&swarm).is_empty());
    // The model was asked once for the gated step and once after its
    // result: the Turn went on where it stopped.
    assert_eq!(swarm.mock.requests().len(), 2);
    // A second decision finds nothing to decide.
    let again = swarm.run(&["approve", &id]);
    assert_eq!(code(&again), 1);
    assert!(
        stderr(&again).contains("E_APPROVAL_NOT_FOUND"),
        "{}",
        stderr(&again)
    );
    assert_eq!(resident.terminate(), 0);
    assert_eq!(runs(swarm.bundle.path()), 1);
}

#[test]
fn a_cancelled_turn_closes_its_request_and_a_late_approval_is_refused() {
    let swarm = gated_swarm(3600);
    let resident = swarm.start_resident();
    let asker = swarm.spawn_input("run it");
    let request = wait_until("the approval request", || approvals(&swarm).pop());
    let id = request["id"].as_str().unwrap().to_string();
    let key = format!("alpha:{}", request["instanceKey"].as_str().unwrap());
    let cancel = swarm.run(&["instance", "cancel", &key]);
    assert_eq!(code(&cancel), 0, "{}", stderr(&cancel));
    crate::operator::assert_requester_told(asker);
    wait_until("the request closed", || {
        approvals(&swarm).is_empty().then_some(())
    });

    for verb in ["approve", "deny"] {
        let late = swarm.run(&[verb, &id]);
        assert_eq!(code(&late), 1, "{}", stderr(&late));
        let text = stderr(&late);
        assert!(text.contains("error[E_APPROVAL_CLOSED]"), "{text}");
        assert!(text.contains("its Turn was cancelled"), "{text}");
        assert!(text.contains("help:"), "{text}");
    }
    // The conversation's input is not run again by the next process.
    assert_eq!(resident.terminate(), 0);
    let resident = swarm.start_resident();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(approvals(&swarm).is_empty());
    assert_eq!(resident.terminate(), 0);
    assert_eq!(runs(swarm.bundle.path()), 0);
    assert_eq!(
        swarm.mock.requests().len(),
        1,
        "the cancelled Turn ran again"
    );
}

#[test]
fn a_denial_tells_the_model_why_and_runs_nothing() {
    let swarm = gated_swarm(3600);
    let resident = swarm.start_resident();
    let asker = swarm.spawn_input("run it");
    let id = wait_until("the approval request", || {
        approvals(&swarm)
            .first()
            .and_then(|request| request["id"].as_str().map(str::to_string))
    });
    // Issue 49 #5: the deadline reads as when the default applies, not as
    // a decision already taken ("denied at …" read as if it were denied).
    let listed = swarm.run(&["approvals"]);
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let deadline = approvals(&swarm)[0]["deadline"]
        .as_str()
        .unwrap()
        .to_string();
    let listing = stdout(&listed);
    assert!(
        listing.contains(&format!("; if nobody decides by {deadline}: deny")),
        "{listing}"
    );
    assert!(!listing.contains("denied"), "{listing}");
    let deny = swarm.run(&["deny", &id, "--reason", "not on a Friday"]);
    assert_eq!(code(&deny), 0, "{}", stderr(&deny));
    let answer = crate::swarm::finish(asker, "the denied input");
    let text = stdout(&answer);
    assert!(text.contains("E_TOOL_DENIED"), "{text}");
    assert!(text.contains("not on a Friday"), "{text}");
    assert_eq!(runs(swarm.bundle.path()), 0);
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn an_approval_with_edited_arguments_runs_those() {
    let swarm = gated_swarm(3600);
    let resident = swarm.start_resident();
    let asker = swarm.spawn_input("run it");
    let id = wait_until("the approval request", || {
        approvals(&swarm)
            .first()
            .and_then(|request| request["id"].as_str().map(str::to_string))
    });
    let bad = swarm.run(&["approve", &id, "--args", "[1, 2]"]);
    assert_eq!(code(&bad), 2, "{}", stderr(&bad));
    assert!(stderr(&bad).contains("E_APPROVAL_ARGS"));
    // Checked against bash__exec's parameters before anything is sent.
    let wrong = swarm.run(&["approve", &id, "--args", r#"{"command": 5}"#]);
    assert_eq!(code(&wrong), 2, "{}", stderr(&wrong));
    assert!(
        stderr(&wrong).contains("do not match the parameters of bash__exec"),
        "{}",
        stderr(&wrong)
    );
    assert_eq!(approvals(&swarm).len(), 1, "a refused edit decided nothing");
    let approve = swarm.run(&[
        "approve",
        &id,
        "--args",
        r#"{"command": "echo edited >> runs.txt"}"#,
    ]);
    assert_eq!(code(&approve), 0, "{}", stderr(&approve));
    let answer = crate::swarm::finish(asker, "the approved input");
    assert!(stdout(&answer).starts_with("done:"), "{}", stdout(&answer));
    let ran = std::fs::read_to_string(swarm.bundle.path().join("runs.txt")).unwrap();
    assert_eq!(ran, "edited\n");
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn a_timeout_applies_the_default_decision() {
    let swarm = gated_swarm(1);
    let resident = swarm.start_resident();
    let answer = swarm.run(&["run", "--input", "run it"]);
    let text = stdout(&answer);
    assert!(text.contains("E_TOOL_DENIED"), "{text} {}", stderr(&answer));
    assert!(text.contains("nobody decided in time"), "{text}");
    assert_eq!(runs(swarm.bundle.path()), 0);
    assert!(approvals(&swarm).is_empty());
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn the_chat_shows_its_own_turns_approval_and_takes_y() {
    use std::io::{BufRead, Write};
    use std::process::Stdio;
    let swarm = gated_swarm(3600);
    let mut chat = swarm
        .command(&["run", "--interactive"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = chat.stdin.take().unwrap();
    let stderr_lines = std::io::BufReader::new(chat.stderr.take().unwrap());
    writeln!(stdin, "run it").unwrap();
    // The question comes on stderr, without a newline after it.
    let (seen, questions) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for chunk in stderr_lines.split(b' ') {
            let Ok(chunk) = chunk else { break };
            if String::from_utf8_lossy(&chunk).starts_with("apv_") {
                let _ = seen.send(());
            }
        }
    });
    questions
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the chat did not ask");
    assert_eq!(runs(swarm.bundle.path()), 0);
    writeln!(stdin, "y").unwrap();
    let mut stdout = std::io::BufReader::new(chat.stdout.take().unwrap());
    let mut answer = String::new();
    stdout.read_line(&mut answer).unwrap();
    assert!(answer.starts_with("done:"), "{answer}");
    assert_eq!(runs(swarm.bundle.path()), 1);
    drop(stdin);
    let status = chat.wait().unwrap();
    assert!(status.success());
}

#[test]
fn a_script_tool_asks_a_person_and_after_a_kill_9_asks_the_same_question_again() {
    let mock = MockLlm::start(|request: &ChatRequest| match request.tool_result() {
        None => Reply::tool("human__ask", json!({"question": "which colour?"})),
        Some(result) => Reply::text(format!("the person said: {result}")),
    });
    let bundle = fixture("human-input", &[("@ENDPOINT@", mock.endpoint())]);
    let swarm = Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    };
    let ran = |swarm: &Swarm| {
        std::fs::read_to_string(swarm.bundle.path().join("ran.txt"))
            .map(|text| text.lines().count())
            .unwrap_or(0)
    };
    let resident = swarm.start_resident();
    let asker = swarm.spawn_input("ask them");
    let first = wait_until("the question", || approvals(&swarm).first().cloned());
    assert_eq!(first["question"], "which colour?", "{first}");
    assert!(
        first.get("tool").is_none(),
        "a question gates no tool: {first}"
    );
    let id = first["id"].as_str().unwrap().to_string();

    // The agent dies while the tool waits; its successor runs the call
    // again, which asks the same question: found, not asked twice.
    let agent = wait_until("the agent's pid", || swarm.pid_of("alpha"));
    sigkill(agent);
    wait_until("the call to run again", || (ran(&swarm) == 2).then_some(()));
    let waiting = approvals(&swarm);
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0]["id"], id.as_str());

    let approve = swarm.run(&["approve", &id, "--reason", "blue"]);
    assert_eq!(code(&approve), 0, "{}", stderr(&approve));
    let answer = crate::swarm::finish(asker, "the asking input");
    assert_eq!(code(&answer), 0, "{}", stderr(&answer));
    assert!(stdout(&answer).contains("blue"), "{}", stdout(&answer));
    assert_eq!(ran(&swarm), 2);
    assert!(approvals(&swarm).is_empty());
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn gdn_stop_does_not_wait_for_a_person_and_the_request_survives_to_run_once() {
    // A grace period far past the harness's deadline for `gdn stop`: a
    // drain that waited for the suspended Turn would be killed there.
    let swarm = gated_swarm_with_grace(3600, 300);
    let mut resident = swarm.start_resident();
    let asker = swarm.spawn_input("run it");
    let id = wait_until("the approval request", || {
        approvals(&swarm)
            .first()
            .and_then(|request| request["id"].as_str().map(str::to_string))
    });

    let stopped = swarm.run(&["stop"]);
    assert_eq!(code(&stopped), 0, "{}", stderr(&stopped));
    // `gdn stop` returns once the orchestrator is gone.
    let status = resident.child.as_mut().unwrap().try_wait().unwrap();
    assert_eq!(status.and_then(|status| status.code()), Some(0));
    resident.child = None;
    assert_ne!(
        code(&crate::swarm::finish(
            asker,
            "the input of the stopped swarm"
        )),
        0
    );
    assert_eq!(runs(swarm.bundle.path()), 0, "the gated call ran at a stop");
    let after_stop = approvals(&swarm);
    assert_eq!(after_stop.len(), 1, "{after_stop:?}");
    assert_eq!(after_stop[0]["id"], id.as_str());

    let resident = swarm.start_resident();
    assert_eq!(approvals(&swarm)[0]["id"], id.as_str());
    let approve = swarm.run(&["approve", &id]);
    assert_eq!(code(&approve), 0, "{}", stderr(&approve));
    wait_until("the resumed Turn's answer", || {
        swarm
            .conversation("alpha")
            .iter()
            .any(|message| message["role"] == "assistant" && message.to_string().contains("done:"))
            .then_some(())
    });
    assert_eq!(
        runs(swarm.bundle.path()),
        1,
        "the approved call ran other than once"
    );
    assert!(approvals(&swarm).is_empty());
    // Once for the gated step, once after its result.
    assert_eq!(swarm.mock.requests().len(), 2);
    assert_eq!(resident.terminate(), 0);
    assert_eq!(runs(swarm.bundle.path()), 1);
}
