//! Issue 36 in a cluster: a person steers instances wherever they run. A
//! gated `bash__exec` call waits on one host; that host is killed (its
//! orchestrator and its agent, kill -9); the instance moves to the other
//! host, where `gdn approvals` lists the request and `gdn approve` runs
//! the command exactly once (a file outside every host's bundle counts
//! the runs) and the Turn finishes. A cancel typed on any host reaches the
//! host that runs the Turn.

use super::{owner_of, Cluster, HANDOFF_DEADLINE};
use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::swarm::{code, finish_within, fixture, run_with_deadline, stderr, stdout, Swarm};
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use std::path::Path;

/// The hosts every test here runs.
const HOSTS: [&str; 2] = ["host-a", "host-b"];

/// The `gated` bundle (every `bash__exec` call waits for a person, with no
/// deadline) whose model asks to append a line to `runs`, then answers
/// with the tool's result. `runs` lies outside the bundle: each host runs
/// the cluster's bundle from a folder of its own.
fn gated_swarm(runs: &Path) -> Swarm {
    let command = format!("echo ran >> {}", runs.display());
    let mock = MockLlm::start(move |request: &ChatRequest| match request.tool_result() {
        None => Reply::tool("bash__exec", json!({ "command": command })),
        Some(result) => Reply::text(format!("done: {result}")),
    });
    let bundle = fixture(
        "gated",
        &[
            ("@ENDPOINT@", mock.endpoint()),
            ("@GRACE@", "1".to_string()),
            ("@TIMEOUT@", "3600".to_string()),
        ],
    );
    Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    }
}

fn runs(file: &Path) -> usize {
    std::fs::read_to_string(file)
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// An instance key of `alpha` that `host` owns while both hosts live.
fn key_owned_by(host: &str) -> String {
    (0..)
        .map(|n| format!("steer-{n}"))
        .find(|key| owner_of("alpha", key, HOSTS) == host)
        .unwrap()
}

/// `gdn approvals --json` with the System Root at `state`.
fn approvals(cluster: &Cluster, state: &Path) -> Vec<Value> {
    let output = run_with_deadline(cluster.command(state, &["--json", "approvals"]));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    serde_json::from_str::<Value>(&stdout(&output))
        .unwrap()
        .as_array()
        .cloned()
        .unwrap()
}

#[test]
fn issue_36_an_approval_outlives_its_host_and_runs_once_when_decided_on_the_next() {
    let counter = tempfile::tempdir().unwrap();
    let runs_file = counter.path().join("runs.txt");
    let Some(mut cluster) = Cluster::with_swarm(|| gated_swarm(&runs_file)) else {
        return;
    };
    cluster.add_host(HOSTS[0]);
    cluster.add_host(HOSTS[1]);
    let key = key_owned_by(HOSTS[0]);
    let (asker, _client) = cluster.spawn_input("run it", &key);
    let host_b = cluster.hosts[1].state.path().to_path_buf();

    // Listed from host-b while host-a's Turn waits.
    let waiting = crate::swarm::wait_until("the approval request", || {
        let waiting = approvals(&cluster, &host_b);
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
    assert_eq!(request["agent"], "alpha");
    assert_eq!(request["instanceKey"], key.as_str());
    assert_eq!(request["tool"], "bash__exec");
    let id = request["id"].as_str().unwrap().to_string();
    assert!(
        !cluster.hosts[0].agents().is_empty(),
        "host-a does not run the waiting Turn"
    );
    assert_eq!(runs(&runs_file), 0, "the gated call ran before a decision");

    // kill -9 of host-a: its orchestrator and its agent.
    cluster.hosts[0].signal(Signal::SIGKILL);
    assert_eq!(
        approvals(&cluster, &host_b)[0]["id"],
        id.as_str(),
        "the request did not outlive its host"
    );

    // Decided on host-b: the decision goes to whichever host owns the
    // instance once host-a's lease runs out (host-b).
    let approve =
        run_with_deadline(cluster.command(&host_b, &["approve", &id, "--reason", "fine by me"]));
    assert_eq!(code(&approve), 0, "{}", stderr(&approve));
    assert!(
        stdout(&approve).contains(&format!("approved {id} (alpha:{key})")),
        "{}",
        stdout(&approve)
    );
    // The Turn resumed on host-b, ran the command and answered the input
    // sent before host-a died.
    let answer = finish_within(asker, "the input whose host died", HANDOFF_DEADLINE);
    assert_eq!(code(&answer), 0, "{}", stderr(&answer));
    assert!(stdout(&answer).starts_with("done:"), "{}", stdout(&answer));
    assert_eq!(
        runs(&runs_file),
        1,
        "the approved command ran other than once"
    );
    assert!(
        !cluster.hosts[1].agents().is_empty(),
        "host-b did not take the instance"
    );
    // The model answered the gated step once (on host-a) and once after
    // the result (on host-b): the Turn went on where it stopped.
    assert_eq!(cluster.swarm.mock.requests().len(), 2);
    // The request's closing record is written before the command runs but
    // may reach a reader of the cluster's log a moment after the answer.
    crate::swarm::wait_until("the request to leave the cluster's list", || {
        approvals(&cluster, &host_b).is_empty().then_some(())
    });

    // A second decision finds nothing to decide, from any System Root.
    let client = tempfile::tempdir().unwrap();
    let again = run_with_deadline(cluster.command(client.path(), &["deny", &id]));
    assert_eq!(code(&again), 1, "{}", stderr(&again));
    assert!(
        stderr(&again).contains("E_APPROVAL_NOT_FOUND"),
        "{}",
        stderr(&again)
    );
    assert_eq!(runs(&runs_file), 1);
}

#[test]
fn issue_36_a_cancel_typed_on_any_host_reaches_the_host_that_runs_the_turn() {
    let Some(mut cluster) = Cluster::start(|_| Reply::Hang) else {
        return;
    };
    cluster.add_host(HOSTS[0]);
    cluster.add_host(HOSTS[1]);
    let key = key_owned_by(HOSTS[0]);
    let (asker, _client) = cluster.spawn_input("think forever", &key);
    cluster.swarm.mock.wait_for("the Turn to start", |request| {
        request.last_user_text() == "think forever"
    });
    assert!(
        !cluster.hosts[0].agents().is_empty(),
        "host-a runs no agent"
    );

    // Typed on host-b, for a Turn host-a runs.
    let host_b = cluster.hosts[1].state.path().to_path_buf();
    let cancel = run_with_deadline(cluster.command(&host_b, &["instance", "cancel", &key]));
    assert_eq!(code(&cancel), 0, "{}", stderr(&cancel));
    assert!(
        stdout(&cancel).contains(&format!("cancelled the Turn of alpha:{key}")),
        "{}",
        stdout(&cancel)
    );
    assert!(
        stdout(&cancel).contains("1 Turn(s) cancelled and closed"),
        "{}",
        stdout(&cancel)
    );
    let answer = finish_within(asker, "the cancelled input", HANDOFF_DEADLINE);
    assert_ne!(code(&answer), 0);
    assert!(
        stderr(&answer).contains("E_TURN_CANCELLED"),
        "{}",
        stderr(&answer)
    );

    // Nothing runs any more: said so, from a System Root no host uses.
    let client = tempfile::tempdir().unwrap();
    let again = run_with_deadline(cluster.command(
        client.path(),
        &["instance", "cancel", &format!("alpha:{key}")],
    ));
    assert_eq!(code(&again), 1, "{}", stderr(&again));
    assert!(
        stderr(&again).contains("E_NO_TURN_RUNNING"),
        "{}",
        stderr(&again)
    );
}

/// `gdn --json instance history KEY` (with the cluster from the
/// environment), from the System Root at `state`: the Turns' inputs.
fn history_inputs(cluster: &Cluster, state: &Path, key: &str) -> Vec<String> {
    let output = run_with_deadline(cluster.command(state, &["--json", "instance", "history", key]));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let history: Value = serde_json::from_str(&stdout(&output)).unwrap();
    history["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|turn| turn["input"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn issue_36_fork_and_rewind_in_a_cluster_go_through_the_log_and_the_instances_owner() {
    let Some(mut cluster) = Cluster::start(|request| {
        if request.last_user_text() == "think forever" {
            Reply::Hang
        } else {
            super::answer(request)
        }
    }) else {
        return;
    };
    cluster.add_host(HOSTS[0]);
    cluster.add_host(HOSTS[1]);
    let key = key_owned_by(HOSTS[0]);
    for text in ["one", "two", "three"] {
        let (asker, _client) = cluster.spawn_input(text, &key);
        let answer = finish_within(asker, "an input", HANDOFF_DEADLINE);
        assert_eq!(code(&answer), 0, "{}", stderr(&answer));
    }
    // Typed on host-b, for an instance host-a runs.
    let host_b = cluster.hosts[1].state.path().to_path_buf();
    assert_eq!(
        history_inputs(&cluster, &host_b, &key),
        ["one", "two", "three"]
    );

    // A fork at Turn 2: a new instance with the first two Turns.
    let fork_key = format!("{key}-fork");
    let fork = run_with_deadline(cluster.command(
        &host_b,
        &["instance", "fork", &key, "--at", "2", "--as", &fork_key],
    ));
    assert_eq!(code(&fork), 0, "{}", stderr(&fork));
    assert!(
        stdout(&fork).contains(&format!("forked alpha:{key} at Turn 2 (turn_"))
            && stdout(&fork).contains(&format!("into alpha:{fork_key}: ")),
        "{}",
        stdout(&fork)
    );
    assert_eq!(
        super::user_texts(&cluster.exported(&fork_key)),
        ["one", "two"]
    );
    let taken = run_with_deadline(cluster.command(
        &host_b,
        &["instance", "fork", &key, "--at", "1", "--as", &fork_key],
    ));
    assert_eq!(code(&taken), 1);
    assert!(
        stderr(&taken).contains("E_INSTANCE_EXISTS"),
        "{}",
        stderr(&taken)
    );
    // The fork runs Turns of its own, from where it was cut.
    let (asker, _client) = cluster.spawn_input("four", &fork_key);
    assert_eq!(
        code(&finish_within(asker, "the fork's input", HANDOFF_DEADLINE)),
        0
    );
    assert_eq!(
        super::user_texts(&cluster.exported(&fork_key)),
        ["one", "two", "four"]
    );
    assert_eq!(
        super::user_texts(&cluster.exported(&key)),
        ["one", "two", "three"],
        "the fork changed the original"
    );

    // A rewind while a Turn runs is refused by the instance's owner...
    let (asker, _client) = cluster.spawn_input("think forever", &key);
    cluster.swarm.mock.wait_for("the Turn to start", |request| {
        request.last_user_text() == "think forever"
    });
    let refused =
        run_with_deadline(cluster.command(&host_b, &["instance", "rewind", &key, "--to", "1"]));
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("E_TURN_RUNNING"),
        "{}",
        stderr(&refused)
    );
    // ...and with --cancel it cancels that Turn first.
    let rewind = run_with_deadline(cluster.command(
        &host_b,
        &["instance", "rewind", &key, "--to", "1", "--cancel"],
    ));
    assert_eq!(code(&rewind), 0, "{}", stderr(&rewind));
    assert!(
        stderr(&rewind).contains(&format!("cancelled the running Turn of alpha:{key} first")),
        "{}",
        stderr(&rewind)
    );
    assert!(
        stdout(&rewind).contains(&format!("rewound alpha:{key} to Turn 1 (turn_"))
            && stdout(&rewind).contains(": 3 Turn(s), ")
            && stdout(&rewind).contains(" archived in the cluster as "),
        "{}",
        stdout(&rewind)
    );
    let cancelled = finish_within(asker, "the cancelled input", HANDOFF_DEADLINE);
    assert!(
        stderr(&cancelled).contains("E_TURN_CANCELLED"),
        "{}",
        stderr(&cancelled)
    );
    assert_eq!(history_inputs(&cluster, &host_b, &key), ["one"]);

    // The next Turn goes on from the end of Turn 1.
    let (asker, _client) = cluster.spawn_input("again", &key);
    let answer = finish_within(asker, "the input after the rewind", HANDOFF_DEADLINE);
    assert_eq!(code(&answer), 0, "{}", stderr(&answer));
    let seen = cluster.swarm.mock.requests().last().unwrap().clone();
    let users: Vec<String> = seen
        .messages()
        .iter()
        .filter(|message| message["role"] == "user")
        .map(|message| message["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(users, ["one", "again"]);
    assert_eq!(super::user_texts(&cluster.exported(&key)), ["one", "again"]);
}
