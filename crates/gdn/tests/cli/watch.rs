//! `gdn run --watch` end to end (issue 18 item 1): the real binary runs the
//! `pair` swarm against the mock LLM while the test edits its bundle on
//! disk. An edit restarts only what it affects and keeps conversations; an
//! invalid edit changes nothing; a burst of saves is one reload; events
//! sent during a reload are all answered.
//!
//! Every wait polls with a deadline.

use crate::mock_llm::{ChatRequest, Reply};
use crate::swarm::{code, finish, stderr, stdout, wait_until, Resident, Swarm};
use serde_json::{json, Value};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const BETA_PROMPT: &str = "You are agent BETA.";
const RELOADED: &str = "watch: reloaded";
const INVALID: &str = "watch: the edit is invalid";

/// Alpha relays each user message to beta; beta answers with the first
/// line of its system prompt, so the answer shows which prompt it had.
fn relay(request: &ChatRequest) -> Reply {
    if request.is_from("agent BETA") {
        return Reply::text(format!("beta[{}]", request.system()));
    }
    match request.tool_result() {
        Some(result) => {
            let value: Value = serde_json::from_str(result).unwrap_or(Value::Null);
            Reply::text(format!(
                "alpha heard: {}",
                value["response"].as_str().unwrap_or(result)
            ))
        }
        None => Reply::tool(
            "agents__request",
            json!({"target": "beta", "input": request.last_user_text()}),
        ),
    }
}

/// The pair swarm running `gdn run --watch`, its stderr in a file.
fn start_watching(swarm: &Swarm) -> Resident {
    let log = std::fs::File::create(swarm.state.path().join("watch.log")).unwrap();
    let child = swarm
        .command(&["run", "--watch"])
        .env("HOOK_SECRET", crate::connectors::SECRET)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let resident = Resident { child: Some(child) };
    swarm.wait_for_socket();
    resident
}

fn log(swarm: &Swarm) -> String {
    std::fs::read_to_string(swarm.state.path().join("watch.log")).unwrap_or_default()
}

fn reloads(swarm: &Swarm) -> Vec<String> {
    log(swarm)
        .lines()
        .filter(|line| line.starts_with(RELOADED))
        .map(str::to_string)
        .collect()
}

/// Rewrites the bundle's `goondan.yaml`, replacing `from` with `to`.
fn edit(swarm: &Swarm, from: &str, to: &str) {
    let path = swarm.bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{from:?} is not in the bundle");
    std::fs::write(&path, text.replace(from, to)).unwrap();
}

/// `gdn run --input TEXT` against the running orchestrator; its answer.
fn ask(swarm: &Swarm, text: &str) -> String {
    let output = crate::swarm::run_with_deadline(swarm.command(&["run", "--input", text]));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    stdout(&output)
}

/// Sends `text` as if typed at `gdn run`, straight over the control
/// socket: `gdn run --input` itself validates the bundle on disk first,
/// which an invalid edit would refuse. The raw answer line.
fn ask_over_socket(swarm: &Swarm, text: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let socket = std::fs::read_dir(swarm.state.path().join("runtime/sockets"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "sock"))
        .unwrap();
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let request = goondan_orchestrator::control::ControlRequest::Request {
        agent: None,
        event: goondan_types::ConnectorEvent::text(goondan_orchestrator::ingress::CLI_EVENT, text),
        cancel_on_disconnect: false,
    };
    let mut line = serde_json::to_vec(&request).unwrap();
    line.push(b'\n');
    stream.write_all(&line).unwrap();
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).unwrap();
    answer
}

fn spawn_ask(swarm: &Swarm, text: &str) -> Child {
    swarm
        .command(&["run", "--input", text])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Both agents have run once; their pids.
fn warm(swarm: &Swarm) -> (i32, i32) {
    assert!(ask(swarm, "one").contains("beta[You are agent BETA.]"));
    let alpha = wait_until("alpha's pid", || swarm.pid_of("alpha"));
    let beta = wait_until("beta's pid", || swarm.pid_of("beta"));
    (alpha, beta)
}

#[test]
fn watch_editing_a_prompt_restarts_only_that_agent_and_keeps_its_history() {
    let swarm = Swarm::pair(5, relay);
    let resident = start_watching(&swarm);
    let (alpha, beta) = warm(&swarm);

    edit(&swarm, BETA_PROMPT, "You are agent BETA v2.");
    let line = wait_until("one reload", || reloads(&swarm).pop());
    assert!(line.contains("changed Agent/beta;"), "{line}");
    assert!(line.contains("restarted beta:default"), "{line}");
    assert!(!line.contains("alpha:"), "{line}");
    let new_beta = swarm.pid_of("beta");
    assert!(new_beta.is_some_and(|pid| pid != beta), "beta kept {beta}");
    assert_eq!(swarm.pid_of("alpha"), Some(alpha));

    assert!(ask(&swarm, "two").contains("beta[You are agent BETA v2.]"));
    // Beta's history survived the restart: its new Turn saw the first input.
    let last_beta = swarm
        .mock
        .requests()
        .into_iter()
        .rev()
        .find(|request| request.is_from("agent BETA v2"))
        .unwrap();
    let texts: Vec<String> = last_beta
        .messages()
        .iter()
        .map(|message| message["content"].to_string())
        .collect();
    assert!(
        texts.iter().any(|text| text.contains("one")),
        "no earlier input in {texts:?}"
    );
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn watch_an_invalid_edit_changes_nothing_and_its_fix_applies() {
    let swarm = Swarm::pair(5, relay);
    let resident = start_watching(&swarm);
    let (alpha, beta) = warm(&swarm);

    // Beta's Model does not exist: the bundle no longer validates.
    edit(
        &swarm,
        "    modelRef: Model/mock-gpt\n  prompt:\n    system: \"You are agent BETA.\"",
        "    modelRef: Model/missing\n  prompt:\n    system: \"You are agent BETA v2.\"",
    );
    wait_until("the invalid edit to be reported", || {
        log(&swarm).contains(INVALID).then_some(())
    });
    let text = log(&swarm);
    assert!(text.contains("Model/missing"), "{text}");
    assert!(reloads(&swarm).is_empty(), "{text}");
    let answer = ask_over_socket(&swarm, "two");
    assert!(answer.contains("beta[You are agent BETA.]"), "{answer}");
    assert_eq!(swarm.pid_of("alpha"), Some(alpha));
    assert_eq!(swarm.pid_of("beta"), Some(beta));

    edit(&swarm, "Model/missing", "Model/mock-gpt");
    let line = wait_until("the fix to be applied", || reloads(&swarm).pop());
    assert!(line.contains("restarted beta:default"), "{line}");
    assert!(ask(&swarm, "three").contains("beta[You are agent BETA v2.]"));

    // Both reloads are swarm events `gdn logs` shows.
    let events = swarm_events(&swarm);
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e["type"].as_str().unwrap(), e["trigger"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("swarm.reload_rejected", "watch"),
            ("swarm.reloaded", "watch")
        ]
    );
    assert_eq!(events[1]["changed"], json!(["Agent/beta"]));
    let output = swarm.run(&["logs", "--agent", "alpha", "--type", "swarm.*"]);
    assert!(stdout(&output).trim().is_empty(), "{}", stdout(&output));
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn watch_a_burst_of_fifty_saves_is_one_reload() {
    let swarm = Swarm::pair(5, relay);
    let resident = start_watching(&swarm);
    warm(&swarm);

    let path = swarm.bundle.path().join("goondan.yaml");
    let original = std::fs::read_to_string(&path).unwrap();
    // The longest pause between two saves: a burst is saves closer than
    // the watch's quiet period (150 ms). A machine too loaded to write 50
    // files that fast has made several bursts, and may see one reload
    // for each.
    let mut longest_gap = Duration::ZERO;
    let mut last = Instant::now();
    for n in 0..50 {
        let prompt = format!("You are agent BETA v{n}.");
        std::fs::write(&path, original.replace(BETA_PROMPT, &prompt)).unwrap();
        longest_gap = longest_gap.max(last.elapsed());
        last = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
    }
    let bursts = if longest_gap < Duration::from_millis(100) {
        1
    } else {
        eprintln!("saves were {longest_gap:?} apart at worst; counting reloads loosely");
        50
    };
    wait_until("the reload", || reloads(&swarm).pop());
    // A second reload would follow within the quiet period plus a restart;
    // give it that long to show up.
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(1) {
        let count = reloads(&swarm).len();
        assert!((1..=bursts).contains(&count), "{count}: {}", log(&swarm));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ask(&swarm, "two").contains("beta[You are agent BETA v49.]"));
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn watch_events_sent_during_a_reload_are_all_answered() {
    let swarm = Swarm::pair(5, relay);
    let resident = start_watching(&swarm);
    let (alpha, _) = warm(&swarm);

    // The entry agent itself restarts; inputs keep arriving before, during
    // and after its restart.
    edit(&swarm, "You are agent ALPHA.", "You are agent ALPHA v2.");
    let children: Vec<Child> = (0..12)
        .map(|n| {
            let child = spawn_ask(&swarm, &format!("during {n}"));
            std::thread::sleep(Duration::from_millis(30));
            child
        })
        .collect();
    for (n, child) in children.into_iter().enumerate() {
        let output = finish(child, &format!("input {n}"));
        assert_eq!(code(&output), 0, "input {n}: {}", stderr(&output));
        assert!(
            stdout(&output).contains("alpha heard: beta["),
            "input {n}: {}",
            stdout(&output)
        );
    }
    let line = wait_until("the reload", || reloads(&swarm).pop());
    assert!(line.contains("restarted alpha:default"), "{line}");
    assert!(swarm.pid_of("alpha").is_some_and(|pid| pid != alpha));
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn watch_a_prompt_file_edit_restarts_its_agent_and_a_model_edit_restarts_both() {
    let swarm = Swarm::pair(5, relay);
    // Beta's prompt lives in a file the bundle names.
    std::fs::write(swarm.bundle.path().join("beta.md"), BETA_PROMPT).unwrap();
    edit(
        &swarm,
        "system: \"You are agent BETA.\"",
        "systemRef: ./beta.md",
    );
    let resident = start_watching(&swarm);
    let (alpha, beta) = warm(&swarm);

    std::fs::write(
        swarm.bundle.path().join("beta.md"),
        "You are agent BETA v3.",
    )
    .unwrap();
    let line = wait_until("the prompt file reload", || reloads(&swarm).pop());
    assert!(line.contains("changed Agent/beta;"), "{line}");
    assert!(line.contains("restarted beta:default"), "{line}");
    assert_eq!(swarm.pid_of("alpha"), Some(alpha));
    let beta = wait_until("beta's new pid", || {
        swarm.pid_of("beta").filter(|pid| *pid != beta)
    });
    assert!(ask(&swarm, "two").contains("beta[You are agent BETA v3.]"));

    // Both agents use the Model: both restart.
    edit(&swarm, "model: gpt-mock", "model: gpt-mock-2");
    wait_until("the model reload", || {
        (reloads(&swarm).len() == 2).then_some(())
    });
    let line = reloads(&swarm).pop().unwrap();
    assert!(line.contains("changed Model/mock-gpt;"), "{line}");
    assert!(
        line.contains("alpha:default") && line.contains("beta:default"),
        "{line}"
    );
    assert!(swarm.pid_of("alpha").is_some_and(|pid| pid != alpha));
    assert!(swarm.pid_of("beta").is_some_and(|pid| pid != beta));
    assert!(ask(&swarm, "three").contains("beta[You are agent BETA v3.]"));
    assert_eq!(
        swarm.mock.requests().last().unwrap().body["model"],
        "gpt-mock-2"
    );
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn watch_a_connection_edit_restarts_its_connector_process_only() {
    use crate::connectors::{
        connector_pids, free_port, hooks, post_signed_when_up, wait_for_answer,
    };
    let (swarm, port) = hooks();
    let resident = start_watching(&swarm);
    let first = r#"{"text":"before the edit","instanceKey":"edit"}"#;
    assert_eq!(post_signed_when_up(port, first).0, 200);
    wait_for_answer(&swarm, "alpha", "edit", "before the edit");
    let connector = connector_pids(resident.pid());
    assert_eq!(connector.len(), 1, "{connector:?}");
    let alpha = wait_until("alpha's pid", || swarm.pid_of("alpha"));

    // The Connection moves to another port.
    let new_port = free_port();
    edit(
        &swarm,
        &format!("value: \"{port}\""),
        &format!("value: \"{new_port}\""),
    );
    let line = wait_until("the reload", || reloads(&swarm).pop());
    assert!(line.contains("changed Connection/hooks;"), "{line}");
    assert!(line.contains("restarted @connection:hooks"), "{line}");
    assert!(!line.contains("alpha:"), "{line}");
    let second = r#"{"text":"after the edit","instanceKey":"edit"}"#;
    assert_eq!(post_signed_when_up(new_port, second).0, 200);
    wait_for_answer(&swarm, "alpha", "edit", "after the edit");
    let replaced = connector_pids(resident.pid());
    assert_eq!(replaced.len(), 1, "{replaced:?}");
    assert_ne!(replaced[0], connector[0]);
    assert_eq!(swarm.pid_of("alpha"), Some(alpha));
    assert_eq!(resident.terminate(), 0);
}

/// Alpha calls `self-restart__request` when asked to restart and reports
/// the tool's result; otherwise it answers with its prompt and the input.
fn restarter(request: &ChatRequest) -> Reply {
    if let Some(result) = request.tool_result() {
        return Reply::text(format!("restart result: {result}"));
    }
    let input = request.last_user_text();
    if input.contains("please restart") {
        return Reply::tool(
            "self-restart__request",
            json!({"reason": "I edited my prompt"}),
        );
    }
    Reply::text(format!("alpha[{}] saw {input}", request.system()))
}

/// The pair swarm with `Tool/self-restart` on alpha, run without
/// `--watch` (only the tool reloads), its stderr in `orchestrator.log`.
fn start_restartable(swarm: &Swarm) -> Resident {
    edit(
        swarm,
        "    - ref: Tool/wait\n",
        "    - ref: Tool/wait\n    - ref: Tool/self-restart\n",
    );
    swarm.start_resident()
}

fn orchestrator_log(swarm: &Swarm) -> String {
    std::fs::read_to_string(swarm.bundle.path().join("orchestrator.log")).unwrap_or_default()
}

/// The swarm events `gdn logs --type 'swarm.*' --json`-style prints.
fn swarm_events(swarm: &Swarm) -> Vec<Value> {
    let output = swarm.run(&["logs", "--type", "swarm.*"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn self_restart_answers_then_restarts_the_swarm_with_the_edited_bundle() {
    let swarm = Swarm::pair(5, restarter);
    let resident = start_restartable(&swarm);
    assert!(ask(&swarm, "one").contains("alpha[You are agent ALPHA.] saw one"));
    let alpha = wait_until("alpha's pid", || swarm.pid_of("alpha"));

    // Nothing watches the files: the edit waits for the agent's request.
    edit(&swarm, "You are agent ALPHA.", "You are agent ALPHA v2.");
    let answer = ask(&swarm, "please restart");
    assert!(answer.contains("restart result:"), "{answer}");
    assert!(answer.contains(r#""restartRequested":true"#), "{answer}");
    assert!(answer.contains("I edited my prompt"), "{answer}");

    let line = wait_until("the reload line", || {
        orchestrator_log(&swarm)
            .lines()
            .find(|line| line.starts_with("self-restart: reloaded for alpha:default"))
            .map(str::to_string)
    });
    assert!(line.contains("changed Agent/alpha"), "{line}");
    assert!(line.contains("restarted alpha:default"), "{line}");
    let new_alpha = wait_until("alpha's new pid", || {
        swarm.pid_of("alpha").filter(|pid| *pid != alpha)
    });
    assert_ne!(new_alpha, alpha);

    // The next Turn runs the edited prompt and still sees the history,
    // including the Turn that asked for the restart.
    assert!(ask(&swarm, "two").contains("alpha[You are agent ALPHA v2.] saw two"));
    let last = swarm.mock.requests().pop().unwrap();
    let history: Vec<String> = last
        .messages()
        .iter()
        .map(|message| message["content"].to_string())
        .collect();
    for earlier in ["one", "please restart", "restart result"] {
        assert!(
            history.iter().any(|text| text.contains(earlier)),
            "{earlier:?} is not in {history:?}"
        );
    }

    let events = swarm_events(&swarm);
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    assert_eq!(event["type"], "swarm.reloaded");
    assert_eq!(event["trigger"], "self-restart");
    assert_eq!(event["reason"], "alpha:default: I edited my prompt");
    assert_eq!(event["changed"], json!(["Agent/alpha"]));
    assert!(
        event["restarted"]
            .as_array()
            .unwrap()
            .contains(&json!("alpha:default")),
        "{event}"
    );
    assert!(event["duration"].as_u64().is_some(), "{event}");
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn self_restart_with_an_invalid_bundle_is_the_tools_error_and_nothing_restarts() {
    let swarm = Swarm::pair(5, restarter);
    let resident = start_restartable(&swarm);
    assert!(ask(&swarm, "one").contains("saw one"));
    let alpha = wait_until("alpha's pid", || swarm.pid_of("alpha"));

    edit(
        &swarm,
        "    modelRef: Model/mock-gpt\n  prompt:\n    system: \"You are agent BETA.\"",
        "    modelRef: Model/missing\n  prompt:\n    system: \"You are agent BETA.\"",
    );
    // `gdn run --input` would refuse the invalid bundle itself.
    let answer = ask_over_socket(&swarm, "please restart");
    assert!(answer.contains("restart result:"), "{answer}");
    assert!(answer.contains("the bundle is invalid"), "{answer}");
    assert!(answer.contains("Model/missing"), "{answer}");
    assert!(!answer.contains("restartRequested"), "{answer}");
    let log = orchestrator_log(&swarm);
    assert!(
        log.contains("self-restart: the bundle is invalid: [E_CONFIG_REF_NOT_FOUND]"),
        "{log}"
    );
    assert_eq!(swarm.pid_of("alpha"), Some(alpha));
    let answer = ask_over_socket(&swarm, "two");
    assert!(
        answer.contains("alpha[You are agent ALPHA.] saw two"),
        "{answer}"
    );

    let events = swarm_events(&swarm);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "swarm.reload_rejected");
    assert_eq!(events[0]["code"], "E_CONFIG_REF_NOT_FOUND");
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn watch_a_single_file_bundle_reloads_that_file_not_its_folder() {
    // Only the reload is checked: the agent processes load the bundle's
    // folder (`--bundle-dir`), which this sibling file would break.
    let swarm = Swarm::pair(5, relay);
    // A file beside the bundle that the folder would load (and fail on),
    // but that is not part of the one-file bundle run here.
    std::fs::write(
        swarm.bundle.path().join("agents.yaml"),
        "apiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: draft\nspec: {}\n",
    )
    .unwrap();
    let file = swarm.bundle.path().join("goondan.yaml");
    let command = |args: &[&str]| {
        let mut command = crate::swarm::gdn_command(&file, swarm.state.path(), args);
        command.current_dir(swarm.bundle.path());
        command
    };
    let stderr_file = std::fs::File::create(swarm.state.path().join("watch.log")).unwrap();
    let child = command(&["run", "--watch"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr_file)
        .spawn()
        .unwrap();
    let resident = Resident { child: Some(child) };
    swarm.wait_for_socket();

    edit(&swarm, BETA_PROMPT, "You are agent BETA v2.");
    let line = wait_until("one reload", || reloads(&swarm).pop());
    assert!(line.contains("changed Agent/beta;"), "{line}");
    assert!(!log(&swarm).contains(INVALID), "{}", log(&swarm));
    assert_eq!(resident.terminate(), 0);
}
