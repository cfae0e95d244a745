//! Issue 36, "people steer a running swarm", end to end with the real
//! `gdn`: `gdn instance cancel` stops a Turn blocked in a slow model call
//! or in a long `bash__exec` within a second (the waiting `gdn run
//! --input` gets `E_TURN_CANCELLED`, no process is left, and the next Turn
//! passes a mock that refuses a tool call without its result, as OpenAI
//! and Anthropic do); `gdn instance history|fork|rewind` on a three-Turn
//! instance whose extension (`tool-search`) keeps state; and the bad
//! paths, each a coded error that changes nothing on disk.

use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::swarm::{code, find_instance, finish, read_jsonl, stderr, stdout, wait_until, Swarm};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The command the model runs to block a Turn in a tool; its argument is
/// unusual so no other test's process is taken for it.
const LONG_COMMAND: &str = "sleep 37.25";

fn bundle_text(endpoint: &str) -> String {
    format!(
        "apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: mock-gpt
spec:
  provider: openai
  model: gpt-mock
  endpoint: \"{endpoint}\"
  options:
    maxRetries: 0
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: worker
spec:
  modelConfig:
    modelRef: Model/mock-gpt
  prompt:
    system: \"You are the WORKER.\"
  tools:
    - ref: Tool/bash
  extensions:
    - ref: Extension/tool-search
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/worker
  agents:
    - ref: Agent/worker
  policy:
    maxStepsPerTurn: 6
    shutdown:
      gracePeriodSeconds: 5
"
    )
}

/// A request holding a tool call not answered by the tool messages right
/// after it: OpenAI answers such a request with HTTP 400, and so does
/// Anthropic (a `tool_use` without its `tool_result`).
fn has_dangling_call(request: &ChatRequest) -> bool {
    let messages = request.messages();
    messages.iter().enumerate().any(|(at, message)| {
        let Some(calls) = message["tool_calls"].as_array() else {
            return false;
        };
        let answered: Vec<&Value> = messages[at + 1..]
            .iter()
            .take_while(|later| later["role"] == "tool")
            .map(|later| &later["tool_call_id"])
            .collect();
        calls.iter().any(|call| !answered.contains(&&call["id"]))
    })
}

/// What the model does, by the user's last words: `slow` is answered only
/// after 30 s, `sleep` runs [`LONG_COMMAND`], `search X` calls the
/// tool-search tool with the query `zq-X` (changing its state), anything
/// else is answered at once; a request with a dangling call is refused.
fn steer(refused: Arc<AtomicUsize>) -> impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static {
    move |request| {
        if has_dangling_call(request) {
            refused.fetch_add(1, Ordering::SeqCst);
            return Reply::Status(400);
        }
        let text = request.last_user_text();
        if request.tool_result().is_some() {
            return Reply::text(format!("answer {text}"));
        }
        if text == "slow" {
            return Reply::Delayed(Duration::from_secs(30), Box::new(Reply::text("too late")));
        }
        if text == "sleep" {
            return Reply::tool("bash__exec", json!({"command": LONG_COMMAND}));
        }
        if let Some(words) = text.strip_prefix("search ") {
            return Reply::tool(
                "tool-search__search",
                json!({"query": format!("zq-{words}")}),
            );
        }
        Reply::text(format!("answer {text}"))
    }
}

pub(crate) fn swarm() -> (Swarm, Arc<AtomicUsize>) {
    let refused = Arc::new(AtomicUsize::new(0));
    let mock = MockLlm::start(steer(refused.clone()));
    let bundle = tempfile::tempdir().unwrap();
    std::fs::write(
        bundle.path().join("goondan.yaml"),
        bundle_text(&mock.endpoint()),
    )
    .unwrap();
    let swarm = Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    };
    (swarm, refused)
}

/// `gdn run --input TEXT --instance-key KEY` in the background.
pub(crate) fn spawn_input(swarm: &Swarm, key: &str, text: &str) -> Child {
    swarm
        .command(&["run", "--input", text, "--instance-key", key])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// One input, answered: its answer text.
pub(crate) fn ask(swarm: &Swarm, key: &str, text: &str) -> String {
    let output = swarm.run(&["run", "--input", text, "--instance-key", key]);
    assert_eq!(code(&output), 0, "{text}: {}", stderr(&output));
    stdout(&output).trim().to_string()
}

pub(crate) fn instance_dir(swarm: &Swarm, key: &str) -> PathBuf {
    find_instance(swarm.state.path(), "worker", key)
        .unwrap_or_else(|| panic!("no instance worker:{key}"))
}

/// Pids of live processes running `words` exactly (the host sees the
/// bash tool's namespaced processes too).
fn processes_running(words: &[&str]) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline
                .split(|&b| b == 0)
                .filter(|arg| !arg.is_empty())
                .collect();
            args.len() >= words.len()
                && args[args.len() - words.len()..]
                    .iter()
                    .zip(words)
                    .all(|(arg, word)| *arg == word.as_bytes())
        })
        .filter(|pid| crate::swarm::alive(*pid))
        .collect()
}

/// `gdn instance cancel KEY --json`, its report and how long the command
/// took.
fn cancel(swarm: &Swarm, key: &str) -> (Value, Duration) {
    let started = Instant::now();
    let output = swarm.run(&["instance", "cancel", key, "--json"]);
    let took = started.elapsed();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    (serde_json::from_str(&stdout(&output)).unwrap(), took)
}

fn assert_cancelled_in_time(report: &Value, took: Duration) {
    assert_eq!(report["cancelled"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["ended"], true, "{report}");
    let elapsed = report["elapsedMs"].as_u64().unwrap();
    assert!(elapsed < 1000, "the Turn took {elapsed} ms to end");
    eprintln!("cancel: Turn closed {elapsed} ms after the request; the command took {took:?}");
}

/// The waiting `gdn run --input` ends with `E_TURN_CANCELLED`.
pub(crate) fn assert_requester_told(run: Child) {
    let output = finish(run, "the cancelled `gdn run --input`");
    assert_eq!(code(&output), 1, "{}", stdout(&output));
    assert!(
        stderr(&output).contains("error[E_TURN_CANCELLED]"),
        "{}",
        stderr(&output)
    );
}

/// Who the control socket records for a person's `gdn` (issue 47 #1):
/// `cli:uid-<uid>:pid-<pid>:<path of gdn>`, whatever label the CLI sent.
pub(crate) fn is_attested_cli(by: &Value) -> bool {
    by.as_str().is_some_and(|by| {
        by.starts_with("cli:uid-") && by.contains(":pid-") && by.ends_with("/gdn")
    })
}

/// `turn.failed` of the instance's cancelled Turn names who cancelled it.
fn assert_log_names_the_operator(swarm: &Swarm, key: &str) {
    let events = read_jsonl(&instance_dir(swarm, key).join("messages/runtime-events.jsonl"));
    assert!(
        events
            .iter()
            .any(|event| event["type"] == "turn.failed" && is_attested_cli(&event["cancelledBy"])),
        "{events:#?}"
    );
    let history = swarm.run(&["instance", "history", &format!("worker:{key}")]);
    assert!(
        stdout(&history).contains("cancelled (cli:uid-"),
        "{}",
        stdout(&history)
    );
    assert_input_column_lines_up(&stdout(&history));
}

/// Every row's input starts where the heading's INPUT does, however long
/// the status before it (issue 49 #5: `cancelled (cli:uid-…)` broke it).
fn assert_input_column_lines_up(table: &str) {
    let mut lines = table.lines().skip_while(|line| !line.contains("TURN ID"));
    let heading = lines.next().expect("the table's heading");
    let column = heading.find("INPUT").expect("an INPUT column");
    for row in lines.take_while(|line| !line.trim().is_empty()) {
        let (before, input) = row.split_at(column);
        assert!(
            before.ends_with("  ") && !input.starts_with(' '),
            "the input is out of its column:\n{table}"
        );
    }
}

#[test]
fn issue_36_cancel_stops_a_slow_model_call_within_a_second_and_the_next_turn_is_valid() {
    let (swarm, refused) = swarm();
    let _resident = swarm.start_resident();
    let run = spawn_input(&swarm, "c1", "slow");
    swarm
        .mock
        .wait_for("the slow call", |r| r.last_user_text() == "slow");
    let (report, took) = cancel(&swarm, "c1");
    assert_cancelled_in_time(&report, took);
    assert_requester_told(run);
    assert_log_names_the_operator(&swarm, "c1");
    assert_eq!(ask(&swarm, "c1", "after"), "answer after");
    assert_eq!(refused.load(Ordering::SeqCst), 0);

    // Nothing runs now: a second cancel says so.
    let output = swarm.run(&["instance", "cancel", "c1"]);
    assert_eq!(code(&output), 1);
    assert!(
        stderr(&output).contains("error[E_NO_TURN_RUNNING]") && stderr(&output).contains("help"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn issue_36_cancel_stops_a_long_bash_command_leaves_no_process_and_closes_its_call() {
    let (swarm, refused) = swarm();
    let _resident = swarm.start_resident();
    let run = spawn_input(&swarm, "c2", "sleep");
    let words: Vec<&str> = LONG_COMMAND.split(' ').collect();
    wait_until("the long command to run", || {
        (!processes_running(&words).is_empty()).then_some(())
    });
    let (report, took) = cancel(&swarm, "c2");
    assert_cancelled_in_time(&report, took);
    wait_until("the long command to be gone", || {
        processes_running(&words).is_empty().then_some(())
    });
    assert_requester_told(run);
    assert_log_names_the_operator(&swarm, "c2");

    // The call was closed when the Turn was cancelled, saying by whom.
    let closing = read_jsonl(&instance_dir(&swarm, "c2").join("messages/base.jsonl"))
        .into_iter()
        .find(|message| message["data"]["role"] == "tool")
        .expect("a result closes the cancelled call");
    let text = closing.to_string();
    assert!(
        text.contains("E_TOOL_CANCELLED") && text.contains("operator (cli:uid-"),
        "{text}"
    );
    // The next Turn passes a provider that refuses dangling calls.
    assert_eq!(ask(&swarm, "c2", "after"), "answer after");
    assert_eq!(refused.load(Ordering::SeqCst), 0);
}

/// The state file of `tool-search` in an instance folder, parsed.
pub(crate) fn search_state(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("extensions/tool-search.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every message and extension file of every instance, with its bytes.
fn disk(swarm: &Swarm) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    for workspace in std::fs::read_dir(swarm.state.path().join("workspaces")).unwrap() {
        let instances = workspace.unwrap().path().join("instances");
        for instance in std::fs::read_dir(&instances).unwrap() {
            let instance = instance.unwrap().path();
            files.insert(instance.clone(), Vec::new());
            for sub in ["messages", "extensions"] {
                let Ok(entries) = std::fs::read_dir(instance.join(sub)) else {
                    continue;
                };
                for entry in entries {
                    let path = entry.unwrap().path();
                    if path.is_file() && !path.ends_with("runtime-events.jsonl") {
                        files.insert(path.clone(), std::fs::read(&path).unwrap());
                    }
                }
            }
        }
    }
    files
}

/// The first request of the Turn whose input was `text`.
pub(crate) fn first_request_of(swarm: &Swarm, text: &str) -> ChatRequest {
    swarm.mock.wait_for(text, |r| {
        r.last_user_text() == text && r.tool_result().is_none()
    })
}

#[test]
fn issue_36_history_fork_and_rewind_move_the_conversation_and_extension_state_together() {
    let (swarm, refused) = swarm();
    let resident = swarm.start_resident();
    for words in ["one", "two", "three"] {
        assert_eq!(
            ask(&swarm, "f", &format!("search {words}")),
            format!("answer search {words}")
        );
    }
    let original = instance_dir(&swarm, "f");
    assert_eq!(search_state(&original)["lastQuery"], "zq-three");

    // History: three Turns, numbered, with ids, times and inputs.
    let output = swarm.run(&["instance", "history", "f", "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let history: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let turns = history["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    for (n, (turn, words)) in turns.iter().zip(["one", "two", "three"]).enumerate() {
        assert_eq!(turn["index"], n + 1);
        assert_eq!(turn["input"], format!("search {words}"));
        assert!(turn["turnId"].as_str().unwrap().starts_with("turn_"));
        assert!(turn["createdAt"].is_string());
        assert_eq!(turn["outcome"]["status"], "completed");
    }
    let text = stdout(&swarm.run(&["instance", "history", "f"]));
    assert!(
        text.contains("search two") && text.contains("TURN ID"),
        "{text}"
    );

    // Fork at Turn 1 (by its id): the original is untouched; the fork's
    // next request holds exactly Turn 1 and the new input.
    let base_before = std::fs::read(original.join("messages/base.jsonl")).unwrap();
    let turn_1 = turns[0]["turnId"].as_str().unwrap().to_string();
    let output = swarm.run(&["instance", "fork", "f", "--at", &turn_1, "--as", "f1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("into worker:f1"),
        "{}",
        stdout(&output)
    );
    assert_eq!(
        std::fs::read(original.join("messages/base.jsonl")).unwrap(),
        base_before
    );
    let fork = instance_dir(&swarm, "f1");
    assert_eq!(search_state(&fork)["lastQuery"], "zq-one");
    let metadata: Value =
        serde_json::from_str(&std::fs::read_to_string(fork.join("metadata.json")).unwrap())
            .unwrap();
    assert_eq!(
        (
            &metadata["forkedFrom"]["instanceKey"],
            &metadata["forkedFrom"]["turnIndex"]
        ),
        (&json!("f"), &json!(1))
    );
    assert_eq!(ask(&swarm, "f1", "four"), "answer four");
    let forked = first_request_of(&swarm, "four");
    let turn_2 = first_request_of(&swarm, "search two");
    let n = forked.messages().len();
    assert_eq!(n, turn_2.messages().len());
    assert_eq!(
        forked.messages()[..n - 1],
        turn_2.messages()[..n - 1],
        "the fork's model sees Turn 1 exactly"
    );

    // Without --as, a key is made up and printed.
    let output = swarm.run(&["instance", "fork", "worker:f", "--at", "2", "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let made: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let made_key = made["instanceKey"].as_str().unwrap();
    assert!(made_key.starts_with("f-fork-"), "{made}");
    assert_eq!(
        search_state(&instance_dir(&swarm, made_key))["lastQuery"],
        "zq-two"
    );

    // Rewind to Turn 1: Turns 2 and 3 go to the archive byte for byte, the
    // extension state follows, and the instance goes on from Turn 1.
    let output = swarm.run(&["instance", "rewind", "f", "--to", "1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).contains("2 Turn(s)"), "{}", stdout(&output));
    let base_after = std::fs::read(original.join("messages/base.jsonl")).unwrap();
    assert!(base_before.starts_with(&base_after) && base_after.len() < base_before.len());
    let archives: Vec<PathBuf> = std::fs::read_dir(original.join("messages/archive"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(archives.len(), 1);
    assert_eq!(
        std::fs::read(archives[0].join("base.jsonl")).unwrap(),
        base_before[base_after.len()..],
        "the archive holds the cut lines byte for byte"
    );
    assert_eq!(search_state(&original)["lastQuery"], "zq-one");
    assert_eq!(ask(&swarm, "f", "five"), "answer five");
    let after_rewind = first_request_of(&swarm, "five");
    assert_eq!(
        after_rewind.messages()[..n - 1],
        turn_2.messages()[..n - 1],
        "after the rewind the model sees Turn 1 only"
    );
    let output = swarm.run(&["instance", "history", "f", "--archived", "--json"]);
    let history: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(history["turns"].as_array().unwrap().len(), 2);
    let archived = &history["archived"][0];
    let indices: Vec<&Value> = archived["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|turn| &turn["index"])
        .collect();
    assert_eq!(indices, [&json!(2), &json!(3)]);
    assert!(is_attested_cli(&archived["manifest"]["by"]), "{archived}");
    let text = stdout(&swarm.run(&["instance", "history", "f", "--archived"]));
    assert!(text.contains("archived by cli:uid-"), "{text}");
    assert_eq!(refused.load(Ordering::SeqCst), 0);

    // With no orchestrator the commands work on disk, under the lock.
    assert_eq!(resident.terminate(), 0);
    let output = swarm.run(&["instance", "fork", "f", "--at", "1", "--as", "offline"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        search_state(&instance_dir(&swarm, "offline"))["lastQuery"],
        "zq-one"
    );
}

/// Runs `args`, expects exit code 1 with `error[CODE]` and a help line.
fn refused_with(swarm: &Swarm, args: &[&str], expected: &str) -> String {
    let output = swarm.run(args);
    let text = stderr(&output);
    assert_eq!(code(&output), 1, "{args:?}: {text}");
    assert!(
        text.contains(&format!("error[{expected}]")) && text.contains("= help:"),
        "{args:?}: {text}"
    );
    text
}

#[test]
fn issue_36_bad_fork_and_rewind_requests_are_coded_errors_that_change_nothing() {
    let (swarm, _) = swarm();
    let _resident = swarm.start_resident();
    for words in ["one", "two"] {
        ask(&swarm, "b", &format!("search {words}"));
    }
    ask(&swarm, "taken", "hello");
    let before = disk(&swarm);
    refused_with(
        &swarm,
        &["instance", "fork", "nope", "--at", "1"],
        "E_INSTANCE_NOT_FOUND",
    );
    let text = refused_with(
        &swarm,
        &["instance", "fork", "b", "--at", "3"],
        "E_TURN_NOT_FOUND",
    );
    assert!(text.contains("1 to 2"), "{text}");
    refused_with(
        &swarm,
        &["instance", "rewind", "b", "--to", "turn_nope"],
        "E_TURN_NOT_FOUND",
    );
    refused_with(
        &swarm,
        &["instance", "fork", "b", "--at", "1", "--as", "taken"],
        "E_INSTANCE_EXISTS",
    );
    refused_with(
        &swarm,
        &["instance", "history", "nope"],
        "E_INSTANCE_NOT_FOUND",
    );
    refused_with(
        &swarm,
        &[
            "instance",
            "rewind",
            "b",
            "--to",
            "1",
            "--cluster",
            "nats://127.0.0.1:1",
        ],
        "E_CLUSTER_CONNECT",
    );

    assert_eq!(disk(&swarm), before, "a refusal changed files");

    // A Turn running: refused, unless --cancel, which cancels it first.
    let run = spawn_input(&swarm, "b", "slow");
    swarm
        .mock
        .wait_for("the slow call", |r| r.last_user_text() == "slow");
    let during = disk(&swarm);
    let text = refused_with(
        &swarm,
        &["instance", "rewind", "b", "--to", "1"],
        "E_TURN_RUNNING",
    );
    assert!(text.contains("--cancel"), "{text}");
    refused_with(
        &swarm,
        &["instance", "fork", "b", "--at", "1", "--as", "new"],
        "E_TURN_RUNNING",
    );
    assert_eq!(disk(&swarm), during, "a refusal changed files");

    let output = swarm.run(&["instance", "rewind", "b", "--to", "1", "--cancel"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_requester_told(run);
    let history: Value =
        serde_json::from_str(&stdout(&swarm.run(&["instance", "history", "b", "--json"]))).unwrap();
    assert_eq!(history["turns"].as_array().unwrap().len(), 1);
    assert_eq!(ask(&swarm, "b", "again"), "answer again");
}

/// The committed messages of `worker:KEY`, as `gdn instance messages
/// --json` lists them.
pub(crate) fn listed_messages(swarm: &Swarm, key: &str) -> Vec<Value> {
    let output = swarm.run(&["instance", "messages", key, "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let listed: Value = serde_json::from_str(&stdout(&output)).unwrap();
    listed["messages"].as_array().unwrap().clone()
}

/// The id of the first listed message of `role` whose text contains
/// `words`.
pub(crate) fn message_id(messages: &[Value], role: &str, words: &str) -> String {
    messages
        .iter()
        .find(|message| {
            message["data"]["role"] == role && message["data"].to_string().contains(words)
        })
        .and_then(|message| message["id"].as_str())
        .unwrap_or_else(|| panic!("no {role} message with {words:?} in {messages:?}"))
        .to_string()
}

#[test]
fn an_operator_edits_a_message_and_an_extension_state_and_the_next_turn_runs_on_them() {
    let (swarm, refused) = swarm();
    let resident = swarm.start_resident();
    assert_eq!(ask(&swarm, "e", "search one"), "answer search one");
    let dir = instance_dir(&swarm, "e");
    let messages = listed_messages(&swarm, "e");
    assert_eq!(messages.len(), 4, "{messages:?}");
    let question = message_id(&messages, "user", "search one");
    let result = message_id(&messages, "tool", "zq-one");

    // The question and the tool's result, edited while the swarm runs
    // (its idle process is stopped and restarted for it).
    for (id, text) in [(&question, "search edited"), (&result, "nothing was found")] {
        let output = swarm.run(&["instance", "edit", "e", "--message", id, "--text", text]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        assert!(
            stdout(&output).contains(&format!("edited message {id} of worker:e")),
            "{}",
            stdout(&output)
        );
    }
    let mut state = search_state(&dir);
    state["lastQuery"] = json!("zq-edited");
    let output = swarm.run(&[
        "instance",
        "edit",
        "worker:e",
        "--extension",
        "tool-search",
        "--state",
        &state.to_string(),
        "--json",
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["record"]["before"]["lastQuery"], "zq-one");
    assert!(is_attested_cli(&report["record"]["by"]), "{report}");

    // The next Turn's model sees the edited history, and the agent's new
    // process started from the edited state (its Turn kept it).
    assert_eq!(ask(&swarm, "e", "two"), "answer two");
    let request = first_request_of(&swarm, "two");
    let sent = serde_json::to_string(request.messages()).unwrap();
    assert!(
        sent.contains("search edited") && sent.contains("nothing was found"),
        "{sent}"
    );
    assert!(!sent.contains(r#""content":"search one""#), "{sent}");
    assert_eq!(search_state(&dir)["lastQuery"], "zq-edited");

    // Each message keeps its id and place, marked as edited; the records
    // keep what each edit replaced.
    let after = listed_messages(&swarm, "e");
    assert_eq!(after[0]["id"], question);
    assert!(is_attested_cli(
        &after[0]["metadata"]["__goondanEdit"]["by"]
    ));
    let text = stdout(&swarm.run(&["instance", "messages", "e"]));
    assert!(text.contains("search edited (edited)"), "{text}");
    let records = std::fs::read_dir(dir.join("edits")).unwrap().count();
    assert_eq!(records, 3);
    let history: Value =
        serde_json::from_str(&stdout(&swarm.run(&["instance", "history", "e", "--json"]))).unwrap();
    assert_eq!(history["turns"].as_array().unwrap().len(), 2);

    // Bad edits are coded errors that change nothing.
    let before = disk(&swarm);
    refused_with(
        &swarm,
        &[
            "instance",
            "edit",
            "e",
            "--message",
            "msg_nope",
            "--text",
            "x",
        ],
        "E_MESSAGE_NOT_FOUND",
    );
    refused_with(
        &swarm,
        &[
            "instance",
            "edit",
            "e",
            "--message",
            &question,
            "--text",
            " ",
        ],
        "E_INSTANCE_EDIT_REFUSED",
    );
    refused_with(
        &swarm,
        &[
            "instance",
            "edit",
            "e",
            "--extension",
            "typo",
            "--state",
            "7",
        ],
        "E_INSTANCE_EDIT_REFUSED",
    );
    refused_with(
        &swarm,
        &[
            "instance",
            "edit",
            "nope",
            "--message",
            &question,
            "--text",
            "x",
        ],
        "E_INSTANCE_NOT_FOUND",
    );
    let output = swarm.run(&[
        "instance",
        "edit",
        "e",
        "--extension",
        "tool-search",
        "--state",
        "{",
    ]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("error[E_CLI_ARGS]"),
        "{}",
        stderr(&output)
    );
    let output = swarm.run(&["instance", "edit", "e", "--text", "x"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert_eq!(disk(&swarm), before, "a refusal changed files");

    // With no orchestrator, the edit is made on disk under the lock.
    assert_eq!(resident.terminate(), 0);
    let output = swarm.run(&[
        "instance",
        "edit",
        "e",
        "--message",
        &question,
        "--text",
        "search again",
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        listed_messages(&swarm, "e")[0]["data"]["content"],
        "search again"
    );
    assert_eq!(refused.load(Ordering::SeqCst), 0);
}

/// A turn middleware (Python) that records, in its extension state, what
/// its `next()` returned when that was an error.
const AFTER_CANCEL: &str = r#"def register(api, config):
    async def record(ctx):
        try:
            return await ctx.next()
        except Exception as error:
            await api.state.set({"code": getattr(error, "code", None), "message": str(error)})
            raise

    api.pipeline.register("turn", record)
"#;

/// Seed 001 §11.4: when an operator cancels a Turn, every turn
/// middleware's code after `next()` still runs, with the cancelled result;
/// here a Python extension records it in its state, which is written.
#[test]
fn must_run_turn_middleware_post_processing_when_an_operator_cancels() {
    let (swarm, _refused) = swarm();
    let bundle = swarm.bundle.path();
    let text = bundle_text(&swarm.mock.endpoint()).replace(
        "    - ref: Extension/tool-search\n",
        "    - ref: Extension/tool-search\n    - ref: Extension/after-cancel\n",
    ) + "---
apiVersion: goondan.ai/v1
kind: Extension
metadata:
  name: after-cancel
spec:
  entry: ./extensions/after_cancel.py
";
    std::fs::write(bundle.join("goondan.yaml"), text).unwrap();
    std::fs::create_dir(bundle.join("extensions")).unwrap();
    std::fs::write(bundle.join("extensions/after_cancel.py"), AFTER_CANCEL).unwrap();
    let _resident = swarm.start_resident();
    let run = spawn_input(&swarm, "c9", "slow");
    swarm
        .mock
        .wait_for("the slow call", |r| r.last_user_text() == "slow");
    let (report, _) = cancel(&swarm, "c9");
    assert_eq!(report["cancelled"].as_array().unwrap().len(), 1, "{report}");
    assert_requester_told(run);
    let state_file = instance_dir(&swarm, "c9").join("extensions/after-cancel.json");
    let state: Value = wait_until("the middleware's state after the cancel", || {
        let text = std::fs::read_to_string(&state_file).ok()?;
        serde_json::from_str(&text).ok()
    });
    let recorded = state.to_string().to_lowercase();
    assert!(recorded.contains("cancel"), "{state}");
}

/// Issue 49 #6: every Step's `step.started` records what its model is
/// sent (`llmInputMessages`: the system prompt, the input, secrets
/// masked) unless the Swarm turns it off with `policy.llmInputMessages`.
#[test]
fn each_step_records_what_its_model_was_sent_unless_the_swarm_says_not_to() {
    let sent = |record: Option<bool>| {
        let swarm = Swarm::pair(1, |request: &ChatRequest| {
            Reply::text(format!("heard {}", request.last_user_text()))
        });
        if let Some(record) = record {
            let path = swarm.bundle.path().join("goondan.yaml");
            let text = std::fs::read_to_string(&path).unwrap().replace(
                "    maxStepsPerTurn: 6",
                &format!("    maxStepsPerTurn: 6\n    llmInputMessages: {record}"),
            );
            std::fs::write(&path, text).unwrap();
        }
        let key = crate::swarm::API_KEY;
        let output = swarm.run(&["run", "--input", &format!("hello {key}")]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        swarm
            .runtime_events("alpha")
            .into_iter()
            .filter(|event| event["type"] == "step.started")
            .map(|event| event["llmInputMessages"].clone())
            .collect::<Vec<Value>>()
    };
    let recorded = sent(None);
    assert!(!recorded.is_empty());
    let first = recorded[0].to_string();
    assert!(first.contains("\"role\":\"system\""), "{first}");
    assert!(
        first.contains("hello [REDACTED:"),
        "the key was not masked: {first}"
    );
    assert!(!first.contains(crate::swarm::API_KEY), "{first}");
    assert_eq!(sent(Some(true)), recorded);
    let off = sent(Some(false));
    assert!(!off.is_empty() && off.iter().all(Value::is_null), "{off:?}");
}

/// Issue 49 #1: cancelling a Turn that waits on a delegated request
/// cancels that request's Turn at the callee too (its `turn.failed` says
/// its requester cancelled it), and the callee answers the next request
/// rather than staying busy with the abandoned one.
#[test]
fn a_cancel_reaches_the_turn_of_the_agent_it_delegated_to() {
    let swarm = Swarm::pair(2, |request: &ChatRequest| {
        if request.is_from(crate::ledger::BETA) {
            return if request.last_user_text().contains("hang") {
                Reply::Hang
            } else {
                Reply::text(format!("pong({})", request.last_user_text()))
            };
        }
        match request.tool_result() {
            Some(result) => Reply::text(format!("alpha heard: {result}")),
            None => Reply::tool(
                "agents__request",
                json!({"target": "beta", "input": request.last_user_text()}),
            ),
        }
    });
    let resident = swarm.start_resident();
    let asker = swarm.spawn_input("relay hang");
    wait_until("beta's model asked", || {
        swarm
            .mock
            .requests()
            .iter()
            .any(|request| request.is_from(crate::ledger::BETA))
            .then_some(())
    });
    let (report, _) = cancel(&swarm, "alpha:default");
    assert_eq!(report["cancelled"].as_array().unwrap().len(), 1, "{report}");
    assert_requester_told(asker);
    let failed = wait_until("beta's Turn cancelled", || {
        swarm
            .runtime_events("beta")
            .into_iter()
            .find(|event| event["type"] == "turn.failed")
    });
    assert!(
        failed["errorMessage"]
            .as_str()
            .is_some_and(|message| message.contains("cancelled by its requester")),
        "beta's Turn did not fail as cancelled: {failed}"
    );
    // Beta is free: the next delegation is answered.
    let output = swarm.run(&["run", "--input", "relay again"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("pong(relay again)"),
        "{}",
        stdout(&output)
    );
    assert_eq!(resident.terminate(), 0);
}
