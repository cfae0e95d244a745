//! Issue 16 #7, #14 and #18 (the backoff half) against the real `gdn`
//! binary: a stopped agent is found out and replaced, `gdn instance
//! restart` says only what happened, the per-swarm process cap passivates
//! or refuses, idle instances are passivated and come back with their
//! history, and a far-future `backoffUntil` never makes `gdn run --input`
//! hang. Every wait has a deadline ([`crate::swarm::run_with_deadline`],
//! [`wait_until`]).

use crate::mock_llm::{ChatRequest, Reply};
use crate::swarm::{alive, code, conversation_of, finish, stderr, stdout, wait_until, Swarm};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Pings every 300 ms: a silent agent is killed after 900 ms.
const FAST_LIVENESS: (&str, &str) = ("GOONDAN_LIVENESS_INTERVAL_MS", "300");

/// Answers every user message with `heard: TEXT`; `hang` never answers.
fn echo(request: &ChatRequest) -> Reply {
    let text = request.last_user_text();
    if text == "hang" {
        return Reply::Hang;
    }
    Reply::text(format!("heard: {text}"))
}

/// The `pair` fixture with `policy.processes` set to `processes` (YAML
/// lines indented for `policy:`).
fn swarm_with_processes(processes: &str) -> Swarm {
    let swarm = Swarm::pair(2, echo);
    let path = swarm.bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace(
        "    shutdown:\n",
        &format!("    processes:\n{processes}    shutdown:\n"),
    );
    std::fs::write(&path, text).unwrap();
    swarm
}

/// The folder of `agent:key` in the one workspace of `state`.
fn instance_dir(state: &Path, agent: &str, key: &str) -> Option<PathBuf> {
    std::fs::read_dir(state.join("workspaces"))
        .ok()?
        .filter_map(Result::ok)
        .map(|entry| {
            entry
                .path()
                .join("instances")
                .join(format!("{agent}:{key}"))
        })
        .find(|dir| dir.is_dir())
}

fn user_texts(state: &Path, agent: &str, key: &str) -> Vec<String> {
    let dir = instance_dir(state, agent, key).expect("instance folder");
    conversation_of(&dir)
        .iter()
        .filter(|data| data["role"] == "user")
        .filter_map(|data| data["content"].as_str().map(str::to_string))
        .collect()
}

/// The `gdn instance list --json` row of `alpha:key`.
fn row(swarm: &Swarm, key: &str) -> Value {
    swarm
        .instances()
        .into_iter()
        .find(|row| row["agentName"] == "alpha" && row["instanceKey"] == key)
        .unwrap_or(Value::Null)
}

fn pid_of(swarm: &Swarm, key: &str) -> Option<i32> {
    row(swarm, key)["pid"].as_i64().map(|pid| pid as i32)
}

fn ask(swarm: &Swarm, args: &[&str]) -> std::process::Output {
    swarm.run(args)
}

fn assert_answer(output: &std::process::Output, text: &str) {
    assert_eq!(code(output), 0, "{}", stderr(output));
    assert_eq!(
        stdout(output),
        format!("heard: {text}\n"),
        "{}",
        stderr(output)
    );
}

#[test]
fn issue_16_7_a_stopped_agent_is_killed_and_replaced_and_its_queued_event_answered() {
    let swarm = Swarm::pair(2, echo);
    let _resident = swarm.start_resident_with(&[FAST_LIVENESS]);
    assert_answer(&ask(&swarm, &["run", "--input", "one"]), "one");
    let stopped = swarm.pid_of("alpha").expect("alpha runs");
    kill(Pid::from_raw(stopped), Signal::SIGSTOP).unwrap();

    // The input reaches the stopped process (or waits behind it); it is
    // answered by its replacement.
    let started = Instant::now();
    let child = swarm
        .command(&["run", "--input", "two"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = finish(child, "the input to a stopped agent");
    assert_answer(&output, "two");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(!alive(stopped), "the stopped agent {stopped} lives on");
    let replacement = swarm.pid_of("alpha").expect("a new alpha runs");
    assert_ne!(replacement, stopped);
    assert_eq!(
        user_texts(swarm.state.path(), "alpha", "default"),
        ["one", "two"]
    );
    let log = std::fs::read_to_string(swarm.bundle.path().join("orchestrator.log")).unwrap();
    assert!(log.contains("E_AGENT_UNRESPONSIVE"), "{log}");
    // Counted as a crash, then forgiven by the Turn that followed.
    assert_eq!(row(&swarm, "default")["consecutiveCrashes"], 0);
}

/// The agent answers pings from its IPC reader: a Turn longer than the
/// deadline (a 2 s tool call against 900 ms) is not taken for a dead
/// process.
#[test]
fn issue_16_7_a_turn_longer_than_the_deadline_is_not_killed() {
    let swarm = Swarm::pair(2, |request: &ChatRequest| match request.tool_result() {
        None => Reply::tool("wait__seconds", serde_json::json!({"seconds": 2.0})),
        Some(_) => Reply::text("heard: waited"),
    });
    let _resident = swarm.start_resident_with(&[FAST_LIVENESS]);
    assert_answer(&ask(&swarm, &["run", "--input", "wait"]), "waited");
    let log = std::fs::read_to_string(swarm.bundle.path().join("orchestrator.log")).unwrap();
    assert!(!log.contains("E_AGENT_UNRESPONSIVE"), "{log}");
    assert_eq!(row(&swarm, "default")["consecutiveCrashes"], 0);
}

#[test]
fn issue_16_7_instance_restart_reports_what_happened() {
    let swarm = Swarm::pair(2, echo);
    let _resident = swarm.start_resident_with(&[FAST_LIVENESS]);
    assert_answer(&ask(&swarm, &["run", "--input", "one"]), "one");
    let first = swarm.pid_of("alpha").expect("alpha runs");

    let restarted = swarm.run(&["instance", "restart", "alpha:default"]);
    assert_eq!(code(&restarted), 0, "{}", stderr(&restarted));
    let second = swarm.pid_of("alpha").expect("a new alpha runs");
    assert_eq!(
        stdout(&restarted),
        format!("restarted alpha:default (pid {first} exited; pid {second} ready)\n")
    );
    assert!(!alive(first), "`restarted` while {first} still runs");

    // A stopped process never acknowledges the shutdown: the restart still
    // reports only what happened, once liveness (or the grace period) has
    // killed it.
    kill(Pid::from_raw(second), Signal::SIGSTOP).unwrap();
    let restarted = swarm.run(&["--json", "instance", "restart", "alpha:default"]);
    assert_eq!(code(&restarted), 0, "{}", stderr(&restarted));
    let report: Value = serde_json::from_str(&stdout(&restarted)).unwrap();
    let outcome = &report["outcomes"][0];
    assert_eq!(outcome["key"], "alpha:default", "{report}");
    assert_eq!(outcome["state"], "restarted", "{report}");
    assert_eq!(outcome["oldPid"], second, "{report}");
    assert!(!alive(second), "`restarted` while {second} still runs");
    let third = swarm.pid_of("alpha").expect("a third alpha runs");
    assert_eq!(outcome["newPid"], third, "{report}");
    assert_answer(&ask(&swarm, &["run", "--input", "two"]), "two");
}

#[test]
fn issue_16_14_over_the_cap_the_lru_idle_instance_is_passivated_or_the_new_one_refused() {
    let swarm = swarm_with_processes("      maxLive: 1\n      idleSeconds: 0\n");
    let state = swarm.state.path();
    let _resident = swarm.start_resident();
    assert_answer(&ask(&swarm, &["run", "--input", "one"]), "one");
    let default_pid = pid_of(&swarm, "default").expect("alpha:default runs");

    // A second instance: the idle one makes room.
    assert_answer(
        &ask(&swarm, &["run", "--instance-key", "k2", "--input", "two"]),
        "two",
    );
    wait_until("alpha:default to be passivated", || {
        (!alive(default_pid)).then_some(())
    });
    assert_eq!(pid_of(&swarm, "default"), None);
    assert!(pid_of(&swarm, "k2").is_some());

    // And back: k2 is passivated, alpha:default comes back with its history.
    assert_answer(&ask(&swarm, &["run", "--input", "three"]), "three");
    assert_eq!(user_texts(state, "alpha", "default"), ["one", "three"]);
    let last = swarm.mock.requests().last().cloned().unwrap();
    let texts: Vec<String> = last
        .messages()
        .iter()
        .filter(|message| message["role"] == "user")
        .map(|message| message["content"].to_string())
        .collect();
    assert!(texts.iter().any(|text| text.contains("one")), "{texts:?}");
    assert_eq!(row(&swarm, "default")["consecutiveCrashes"], 0);

    // Nothing idle: the one process is in a Turn that does not end.
    let hanging = swarm
        .command(&["run", "--input", "hang"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let hanging = KillOnDrop(hanging);
    let n_requests = swarm.mock.requests().len();
    wait_until("the hanging Turn to reach the model", || {
        (swarm.mock.requests().len() > n_requests).then_some(())
    });
    let refused = ask(&swarm, &["run", "--instance-key", "k3", "--input", "four"]);
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    let text = stderr(&refused);
    assert!(text.contains("error[E_INSTANCE_LIMIT]"), "{text}");
    assert!(text.contains("help:") && text.contains("maxLive"), "{text}");
    drop(hanging);
}

/// The cap reaches agents too: a request to an instance that cannot get a
/// process is a tool error naming `E_INSTANCE_LIMIT`, not a hang.
#[test]
fn issue_16_14_agents_request_over_the_cap_is_a_tool_error_with_e_instance_limit() {
    let swarm = Swarm::pair(2, |request: &ChatRequest| {
        if request.is_from("agent BETA") {
            return Reply::text("beta answered");
        }
        match request.tool_result() {
            Some(result) => Reply::text(format!("tool said: {result}")),
            None => Reply::tool(
                "agents__request",
                serde_json::json!({"target": "beta", "input": "hi"}),
            ),
        }
    });
    let path = swarm.bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "    shutdown:\n",
        "    processes:\n      maxLive: 1\n    shutdown:\n",
    );
    std::fs::write(&path, text).unwrap();
    let output = swarm.run(&["run", "--input", "ask beta"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with("tool said:"), "{text}");
    assert!(text.contains("E_INSTANCE_LIMIT"), "{text}");
}

#[test]
fn issue_16_14_an_idle_instance_is_passivated_and_reactivated_with_its_history() {
    let swarm = swarm_with_processes("      idleSeconds: 1\n");
    let _resident = swarm.start_resident();
    assert_answer(&ask(&swarm, &["run", "--input", "one"]), "one");
    let first = swarm.pid_of("alpha").expect("alpha runs");
    wait_until("the idle alpha to be passivated", || {
        (!alive(first)).then_some(())
    });
    let passivated = row(&swarm, "default");
    assert_eq!(passivated["pid"], Value::Null, "{passivated}");
    assert_eq!(
        passivated["consecutiveCrashes"], 0,
        "not a crash: {passivated}"
    );

    assert_answer(&ask(&swarm, &["run", "--input", "two"]), "two");
    assert_eq!(
        user_texts(swarm.state.path(), "alpha", "default"),
        ["one", "two"]
    );
    let last = swarm.mock.requests().last().cloned().unwrap();
    assert!(
        last.messages()
            .iter()
            .any(|message| message["role"] == "assistant"
                && message["content"].to_string().contains("heard: one")),
        "the reactivated instance lost its history: {:?}",
        last.messages()
    );
}

#[test]
fn issue_16_18_a_far_future_backoff_until_fails_fast_with_e_agent_backoff() {
    let swarm = Swarm::pair(2, echo);
    assert_answer(&ask(&swarm, &["run", "--input", "one"]), "one");
    let dir = instance_dir(swarm.state.path(), "alpha", "default").unwrap();
    let path = dir.join("metadata.json");
    let mut metadata: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    metadata["consecutiveCrashes"] = 7.into();
    metadata["backoffUntil"] = "2999-01-01T00:00:00.000Z".into();
    std::fs::write(&path, metadata.to_string()).unwrap();

    let started = Instant::now();
    let output = ask(&swarm, &["run", "--input", "two"]);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    let text = stderr(&output);
    assert!(text.contains("error[E_AGENT_BACKOFF]"), "{text}");
    assert!(
        !text.contains("2999"),
        "the deadline was not clamped: {text}"
    );
    assert!(
        text.contains("gdn instance restart alpha:default"),
        "{text}"
    );
    assert_eq!(user_texts(swarm.state.path(), "alpha", "default"), ["one"]);

    // `gdn instance list` shows the backoff, clamped, with no orchestrator
    // running.
    let listed = row(&swarm, "default");
    let until = listed["backoffUntil"]
        .as_str()
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(!until.starts_with("2999"), "{listed}");
    assert_eq!(listed["consecutiveCrashes"], 7, "{listed}");
    let table = swarm.run(&["instance", "list"]);
    assert!(
        stdout(&table).contains("BACKOFF UNTIL"),
        "{}",
        stdout(&table)
    );
    assert!(stdout(&table).contains(&until[..16]), "{}", stdout(&table));
    assert!(!stdout(&table).contains("2999"), "{}", stdout(&table));
}

/// A child killed when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
