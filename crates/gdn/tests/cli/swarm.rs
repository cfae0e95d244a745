//! End to end: the real `gdn` binary runs a two-agent swarm (one process
//! per agent) against the mock LLM of [`crate::mock_llm`], on a temporary
//! bundle and System Root. Covers inter-agent requests and trace spans,
//! crash recovery after SIGKILL, graceful and forced shutdown, cycles and
//! timeouts, the management commands against a detached orchestrator, and
//! the ways `gdn run` must refuse to start.
//!
//! Every wait polls with a deadline; nothing sleeps a fixed time hoping the
//! other side is done.

use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

pub(crate) const API_KEY: &str = "sk-e2e-3f9c";
const ALPHA: &str = "agent ALPHA";
const BETA: &str = "agent BETA";
/// Long enough for a loaded two-core machine, short enough to fail a hang.
const DEADLINE: Duration = Duration::from_secs(20);

/// A bundle, a System Root and a mock LLM, all private to one test.
pub(crate) struct Swarm {
    pub(crate) bundle: TempDir,
    pub(crate) state: TempDir,
    pub(crate) mock: MockLlm,
}

impl Swarm {
    /// The `pair` fixture pointed at a new mock that answers with `decide`.
    pub(crate) fn pair(
        grace_seconds: u32,
        decide: impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static,
    ) -> Swarm {
        let mock = MockLlm::start(decide);
        let bundle = fixture(
            "pair",
            &[
                ("@ENDPOINT@", mock.endpoint()),
                ("@GRACE@", grace_seconds.to_string()),
            ],
        );
        Swarm {
            bundle,
            state: tempfile::tempdir().unwrap(),
            mock,
        }
    }

    /// `gdn --config BUNDLE --state-root ROOT ARGS...` with the API key in
    /// the environment.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        gdn_command(self.bundle.path(), self.state.path(), args)
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        run_with_deadline(self.command(args))
    }

    /// The folder of `agent:default`.
    fn instance_dir(&self, agent: &str) -> PathBuf {
        find_instance_dir(self.state.path(), agent)
            .unwrap_or_else(|| panic!("no instance folder for {agent}:default"))
    }

    /// The runtime events of `agent:default` so far (none before it
    /// started).
    pub(crate) fn runtime_events(&self, agent: &str) -> Vec<Value> {
        find_instance_dir(self.state.path(), agent).map_or_else(Vec::new, |dir| {
            read_jsonl(&dir.join("messages/runtime-events.jsonl"))
        })
    }

    /// `NextMessages = base + SUM(events)` of `agent:default`, as the
    /// `data` of each message.
    pub(crate) fn conversation(&self, agent: &str) -> Vec<Value> {
        conversation_of(&self.instance_dir(agent))
    }

    /// `gdn instance list --json`.
    pub(crate) fn instances(&self) -> Vec<Value> {
        let output = self.run(&["instance", "list", "--json"]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
        report["instances"].as_array().cloned().unwrap_or_default()
    }

    /// The live pid of `agent:default`, once it has one.
    pub(crate) fn pid_of(&self, agent: &str) -> Option<i32> {
        self.instances()
            .into_iter()
            .find(|row| row["agentName"] == agent)
            .and_then(|row| row["pid"].as_i64())
            .map(|pid| pid as i32)
    }

    /// Starts `gdn run` with no input as a resident orchestrator (our own
    /// child) and waits until its control socket accepts connections.
    pub(crate) fn start_resident(&self) -> Resident {
        self.start_resident_with(&[])
    }

    /// As [`Swarm::start_resident`], with `env` added to the
    /// orchestrator's environment.
    pub(crate) fn start_resident_with(&self, env: &[(&str, &str)]) -> Resident {
        let log = std::fs::File::create(self.bundle.path().join("orchestrator.log")).unwrap();
        let child = self
            .command(&["run"])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let resident = Resident { child: Some(child) };
        self.wait_for_socket();
        resident
    }

    pub(crate) fn wait_for_socket(&self) {
        let sockets = self.state.path().join("runtime/sockets");
        wait_until("the control socket to accept connections", || {
            std::fs::read_dir(&sockets)
                .ok()?
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .find(|path| std::os::unix::net::UnixStream::connect(path).is_ok())
        });
    }

    /// `gdn run --input TEXT` in the background (it attaches to a running
    /// orchestrator).
    pub(crate) fn spawn_input(&self, text: &str) -> Child {
        self.command(&["run", "--input", text])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// `NextMessages = base + SUM(events)` of the instance stored in
/// `instance_dir`, as the `data` of each message.
///
/// The agent may be folding while this reads: between its append to
/// `base.jsonl` and its clearing of `events.jsonl` the same messages are in
/// both files, so an append of a message already there is skipped, as the
/// store's own recovery does (by message id).
pub(crate) fn conversation_of(instance_dir: &Path) -> Vec<Value> {
    let messages = instance_dir.join("messages");
    let mut folded: Vec<Value> = read_jsonl(&messages.join("base.jsonl"));
    for event in read_jsonl(&messages.join("events.jsonl")) {
        match event["type"].as_str() {
            Some("append") => {
                let id = &event["message"]["id"];
                if id.is_null() || !folded.iter().any(|message| message["id"] == *id) {
                    folded.push(event["message"].clone());
                }
            }
            Some("replace") => {
                for message in folded.iter_mut() {
                    if message["id"] == event["targetId"] {
                        *message = event["message"].clone();
                    }
                }
            }
            Some("remove") => folded.retain(|message| message["id"] != event["targetId"]),
            Some("truncate") => folded.clear(),
            _ => {}
        }
    }
    folded
        .into_iter()
        .map(|message| message["data"].clone())
        .collect()
}

/// Copies `crates/gdn/tests/fixtures/swarm/NAME` (with its subfolders)
/// into a temporary folder, replacing each placeholder.
pub(crate) fn fixture(name: &str, replacements: &[(&str, String)]) -> TempDir {
    fn copy(from: &Path, to: &Path, replacements: &[(&str, String)]) {
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let target = to.join(path.file_name().unwrap());
            if path.is_dir() {
                std::fs::create_dir_all(&target).unwrap();
                copy(&path, &target, replacements);
                continue;
            }
            let mut text = std::fs::read_to_string(&path).unwrap();
            for (placeholder, value) in replacements {
                text = text.replace(placeholder, value);
            }
            std::fs::write(target, text).unwrap();
        }
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/swarm")
        .join(name);
    let target = tempfile::tempdir().unwrap();
    copy(&source, target.path(), replacements);
    target
}

pub(crate) fn gdn_command(bundle: &Path, state: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gdn"));
    command
        .arg("--config")
        .arg(bundle)
        .arg("--state-root")
        .arg(state)
        .args(args)
        .current_dir(bundle)
        .env("OPENAI_API_KEY", API_KEY)
        .env_remove("GOONDAN_STATE_ROOT")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("RUST_LOG");
    command
}

/// Runs a command to completion, killing it if it outlives [`DEADLINE`].
pub(crate) fn run_with_deadline(mut command: Command) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    finish(child, &format!("{command:?}"))
}

/// Waits for a child with a deadline and collects its output. The pipes
/// are drained while it runs, so a chatty child never blocks on a full
/// pipe.
pub(crate) fn finish(child: Child, what: &str) -> Output {
    finish_within(child, what, DEADLINE)
}

/// [`finish`] with another deadline.
pub(crate) fn finish_within(mut child: Child, what: &str, deadline: Duration) -> Output {
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    }
    let stdout_reader = drain(child.stdout.take());
    let stderr_reader = drain(child.stderr.take());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = Output {
        status: status.unwrap_or_else(|| child.wait().unwrap()),
        stdout: stdout_reader.join().unwrap(),
        stderr: stderr_reader.join().unwrap(),
    };
    assert!(
        status.is_some(),
        "{what} did not finish within {deadline:?}; stdout: {}; stderr: {}",
        stdout(&output),
        stderr(&output)
    );
    output
}

pub(crate) fn wait_until<T>(what: &str, mut condition: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = condition() {
            return value;
        }
        assert!(started.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The folder of `agent:default`, once some workspace has it.
fn find_instance_dir(state: &Path, agent: &str) -> Option<PathBuf> {
    find_instance(state, agent, "default")
}

/// The folder of `agent:instance_key` under any workspace of `state`.
pub(crate) fn find_instance(state: &Path, agent: &str, instance_key: &str) -> Option<PathBuf> {
    std::fs::read_dir(state.join("workspaces"))
        .ok()?
        .filter_map(Result::ok)
        .map(|entry| {
            entry
                .path()
                .join("instances")
                .join(format!("{agent}:{instance_key}"))
        })
        .find(|dir| dir.is_dir())
}

pub(crate) fn read_jsonl(path: &Path) -> Vec<Value> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).unwrap())
            .collect(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => panic!("{}: {error}", path.display()),
    }
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub(crate) fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

/// The children of `parent` that are alive (not zombies).
pub(crate) fn children_of(parent: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let parent_of = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
            parent_of == Some(parent)
        })
        .filter(|pid| alive(*pid))
        .collect()
}

/// True while `pid` exists and is not a zombie.
pub(crate) fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state letter follows the parenthesized command name.
    let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
    !state.is_some_and(|rest| rest.starts_with('Z'))
}

pub(crate) fn sigkill(pid: i32) {
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
}

/// A resident orchestrator we started; SIGKILLed if the test ends early.
pub(crate) struct Resident {
    pub(crate) child: Option<Child>,
}

impl Resident {
    pub(crate) fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// Sends SIGTERM and waits for the exit code.
    pub(crate) fn terminate(mut self) -> i32 {
        kill(Pid::from_raw(self.pid()), Signal::SIGTERM).unwrap();
        let child = self.child.take().unwrap();
        let output = finish(child, "the resident orchestrator");
        code(&output)
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A detached orchestrator (not our child); SIGKILLed if the test ends
/// early. Its agents die with it (parent-death signal).
pub(crate) struct Daemon {
    pub(crate) pid: i32,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if alive(self.pid) {
            sigkill(self.pid);
        }
    }
}

/// The `response` field of an `agents__request` tool result.
fn response_of(tool_result: &str) -> String {
    let value: Value = serde_json::from_str(tool_result).unwrap_or(Value::Null);
    value["response"]
        .as_str()
        .map_or_else(|| tool_result.to_string(), str::to_string)
}

/// Alpha relays each user message to beta and reports beta's answer.
pub(crate) fn relay(request: &ChatRequest) -> Reply {
    if request.is_from(BETA) {
        return Reply::text(format!("pong({})", request.last_user_text()));
    }
    match request.tool_result() {
        Some(result) => Reply::text(format!("alpha heard: {}", response_of(result))),
        None => Reply::tool(
            "agents__request",
            json!({"target": "beta", "input": request.last_user_text()}),
        ),
    }
}

fn count_user_messages(conversation: &[Value], text: &str) -> usize {
    conversation
        .iter()
        .filter(|data| data["role"] == "user" && data["content"] == text)
        .count()
}

fn count_tool_calls(conversation: &[Value], tool_name: &str) -> usize {
    conversation
        .iter()
        .filter(|data| data["role"] == "assistant")
        .filter_map(|data| data["content"].as_array())
        .flatten()
        .filter(|part| part["type"] == "tool-call" && part["toolName"] == tool_name)
        .count()
}

#[test]
fn two_agents_answer_through_agents_request_and_share_one_trace() {
    let swarm = Swarm::pair(2, relay);
    let output = swarm.run(&["run", "--input", "ping"]);
    assert_eq!(code(&output), 0, "stderr: {}", stderr(&output));
    assert_eq!(stdout(&output), "alpha heard: pong(ping)\n");

    let requests = swarm.mock.requests();
    assert_eq!(requests.len(), 3, "alpha, beta, alpha again");
    for request in &requests {
        assert_eq!(
            request.authorization.as_deref(),
            Some(format!("Bearer {API_KEY}").as_str()),
            "the key comes from OPENAI_API_KEY"
        );
        assert_eq!(request.body["model"], "gpt-mock");
    }
    // Alpha's second call carries its tool call and beta's answer in the
    // Chat Completions shape: an assistant message with `tool_calls`, then a
    // `tool` message with the same id and the result as a string.
    let second = requests
        .iter()
        .find(|r| r.is_from(ALPHA) && r.tool_result().is_some())
        .expect("alpha's call after the tool ran");
    let messages = second.messages();
    let call_message = &messages[messages.len() - 2];
    assert_eq!(call_message["role"], "assistant");
    let call = &call_message["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "agents__request");
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"target": "beta", "input": "ping"}));
    let result_message = second.last();
    assert_eq!(result_message["tool_call_id"], call["id"]);
    let result: Value = serde_json::from_str(result_message["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["response"], "pong(ping)");
    assert_eq!(result["target"], "beta:default");
    let tools: Vec<&str> = second.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["function"]["name"].as_str())
        .collect();
    assert!(tools.contains(&"agents__request"), "{tools:?}");

    // One trace across both processes; beta's Turn hangs under alpha's
    // agents__request tool-call span.
    let alpha_events = swarm.runtime_events("alpha");
    let beta_events = swarm.runtime_events("beta");
    let trace_id = alpha_events[0]["traceId"].as_str().unwrap().to_string();
    assert_eq!(trace_id.len(), 32);
    for event in alpha_events.iter().chain(&beta_events) {
        assert_eq!(event["traceId"], trace_id.as_str(), "{event}");
    }
    let tool_called = alpha_events
        .iter()
        .find(|e| e["type"] == "tool.called" && e["toolName"] == "agents__request")
        .expect("alpha's tool.called");
    let beta_turn = beta_events
        .iter()
        .find(|e| e["type"] == "turn.started")
        .expect("beta's turn.started");
    assert_eq!(beta_turn["parentSpanId"], tool_called["spanId"]);
    assert!(alpha_events.iter().any(|e| e["type"] == "turn.completed"));
}

#[test]
fn an_agent_killed_mid_turn_is_respawned_and_finishes_the_turn_once() {
    let hung = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hung_in_mock = hung.clone();
    let swarm = Swarm::pair(2, move |request| {
        if request.last_user_text() == "second" {
            return Reply::text("second done");
        }
        match request.tool_result() {
            None => Reply::tool("wait__seconds", json!({"seconds": 0})),
            // Holds alpha after its first step was recorded, once; the
            // resumed Turn gets its answer.
            Some(_) if !hung_in_mock.swap(true, std::sync::atomic::Ordering::SeqCst) => Reply::Hang,
            Some(_) => Reply::text("first done"),
        }
    });
    let resident = swarm.start_resident();
    let first = swarm.spawn_input("first");
    swarm
        .mock
        .wait_for("alpha's call after wait__seconds", |r| {
            r.is_from(ALPHA) && r.tool_result().is_some()
        });
    let killed = wait_until("alpha's pid", || swarm.pid_of("alpha"));
    sigkill(killed);
    let respawned = wait_until("alpha to be respawned", || {
        swarm.pid_of("alpha").filter(|pid| *pid != killed)
    });
    assert!(alive(respawned));
    assert!(!alive(killed));

    // The event is redelivered to the new process, which resumes the Turn
    // where it was cut (no second copy of the input, no second tool call)
    // and answers the waiting caller once.
    let first = finish(first, "the input whose agent was killed");
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(stdout(&first), "first done\n");
    let resumed = swarm.mock.wait_for("the resumed turn", |r| {
        r.is_from(ALPHA) && r.tool_result().is_some() && r.last_user_text() == "first"
    });
    let roles: Vec<&str> = resumed
        .messages()
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);

    let second = finish(swarm.spawn_input("second"), "the second input");
    assert_eq!(code(&second), 0, "{}", stderr(&second));
    assert_eq!(stdout(&second), "second done\n");
    // The next Turn saw the first one's messages, and nothing is doubled.
    let request = swarm
        .mock
        .wait_for("the second turn", |r| r.last_user_text() == "second");
    let roles: Vec<&str> = request
        .messages()
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "assistant", "user"],
        "{:#?}",
        request.messages()
    );
    assert_eq!(resident.terminate(), 0);
    let conversation = swarm.conversation("alpha");
    assert_eq!(count_user_messages(&conversation, "first"), 1);
    assert_eq!(count_user_messages(&conversation, "second"), 1);
    assert_eq!(count_tool_calls(&conversation, "wait__seconds"), 1);
    let tool_results = conversation.iter().filter(|m| m["role"] == "tool").count();
    assert_eq!(tool_results, 1, "{conversation:#?}");
    let last = conversation.last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"][0]["text"], "second done");
}

/// tool.md §11.1: `agents__send` answers `{sent: true}` once the
/// orchestrator stored the event; a kill -9 of the target in the middle of
/// its Turn still delivers the event, exactly once, to the next process.
#[test]
fn must_answer_agents_send_once_stored_and_deliver_it_once_across_a_kill_of_the_target() {
    let hung = std::sync::atomic::AtomicBool::new(false);
    let swarm = Swarm::pair(2, move |request| {
        if request.is_from(BETA) {
            // Beta's first Turn on the note hangs until it is killed.
            if !hung.swap(true, std::sync::atomic::Ordering::SeqCst) {
                return Reply::Hang;
            }
            return Reply::text("beta noted");
        }
        match request.tool_result() {
            None => Reply::tool("agents__send", json!({"target": "beta", "input": "note"})),
            Some(result) => {
                let result: Value = serde_json::from_str(result).unwrap_or(Value::Null);
                Reply::text(format!(
                    "sent={} accepted={}",
                    result["sent"], result["accepted"]
                ))
            }
        }
    });
    let resident = swarm.start_resident();
    let output = finish(swarm.spawn_input("go"), "alpha's send");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), "sent=true accepted=true\n");

    swarm
        .mock
        .wait_for("beta's Turn on the note", |r| r.is_from(BETA));
    let killed = wait_until("beta's pid", || swarm.pid_of("beta"));
    sigkill(killed);
    wait_until("beta to answer the note in a new process", || {
        let events = swarm.runtime_events("beta");
        events
            .iter()
            .any(|e| e["type"] == "turn.completed")
            .then_some(())
    });
    assert_ne!(swarm.pid_of("beta"), Some(killed));
    assert_eq!(resident.terminate(), 0);
    let conversation = swarm.conversation("beta");
    assert_eq!(
        count_user_messages(&conversation, "note"),
        1,
        "{conversation:#?}"
    );
    let last = conversation.last().unwrap();
    assert_eq!(last["content"][0]["text"], "beta noted");
}

/// Alpha waits `seconds` with the wait tool, then says so.
fn wait_then_answer(seconds: f64) -> impl Fn(&ChatRequest) -> Reply + Send + Sync {
    move |request| {
        if request.last_user_text() == "again" {
            return Reply::text("hello again");
        }
        match request.tool_result() {
            None => Reply::tool("wait__seconds", json!({"seconds": seconds})),
            Some(_) => Reply::text("waited"),
        }
    }
}

fn wait_for_tool_called(swarm: &Swarm, tool_name: &str) {
    wait_until("the tool call to start", || {
        swarm
            .runtime_events("alpha")
            .iter()
            .any(|e| e["type"] == "tool.called" && e["toolName"] == tool_name)
            .then_some(())
    });
}

#[test]
fn shutdown_lets_a_tool_inside_the_grace_period_finish() {
    let swarm = Swarm::pair(10, wait_then_answer(1.0));
    let resident = swarm.start_resident();
    let client = swarm.spawn_input("wait a little");
    wait_for_tool_called(&swarm, "wait__seconds");
    let alpha_pid = swarm.pid_of("alpha").unwrap();
    assert_eq!(resident.terminate(), 0);
    assert!(!alive(alpha_pid));
    // The drained Turn's answer still reached its caller.
    let answer = finish(client, "the client of a drained orchestrator");
    assert_eq!(stdout(&answer), "waited\n", "{}", stderr(&answer));

    let events = swarm.runtime_events("alpha");
    let completed = events
        .iter()
        .find(|e| e["type"] == "tool.completed" && e["toolName"] == "wait__seconds")
        .expect("the wait finished");
    assert_eq!(completed["status"], "ok");
    assert!(events.iter().any(|e| e["type"] == "turn.completed"));
    // The drained Turn folded its events into the base.
    let messages = swarm.instance_dir("alpha").join("messages");
    assert!(read_jsonl(&messages.join("events.jsonl")).is_empty());
    let conversation = swarm.conversation("alpha");
    let last = conversation.last().unwrap();
    assert_eq!(last["content"][0]["text"], "waited");
}

#[test]
fn a_tool_outliving_the_grace_period_is_killed_and_its_events_restored() {
    let swarm = Swarm::pair(1, wait_then_answer(60.0));
    let resident = swarm.start_resident();
    let client = swarm.spawn_input("wait long");
    wait_for_tool_called(&swarm, "wait__seconds");
    let alpha_pid = swarm.pid_of("alpha").unwrap();
    assert_eq!(resident.terminate(), 0);
    assert!(!alive(alpha_pid));
    let _ = finish(client, "the client of a killed Turn");
    let log = std::fs::read_to_string(swarm.bundle.path().join("orchestrator.log")).unwrap();
    assert!(
        log.lines()
            .any(|line| line.contains("grace period over") && line.contains("alpha:default")),
        "{log}"
    );
    let events = swarm.runtime_events("alpha");
    assert!(
        !events.iter().any(|e| e["type"] == "tool.completed"),
        "the wait was cut short"
    );
    let pending = read_jsonl(&swarm.instance_dir("alpha").join("messages/events.jsonl"));
    assert!(
        !pending.is_empty(),
        "the killed Turn left its events pending"
    );

    // The next run on the same System Root restores them.
    let output = swarm.run(&["run", "--input", "again"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), "hello again\n");
    let request = swarm
        .mock
        .wait_for("the next run's call", |r| r.last_user_text() == "again");
    let users: Vec<&Value> = request
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| &m["content"])
        .collect();
    assert_eq!(users, [&json!("wait long"), &json!("again")]);
    let called_wait = request
        .messages()
        .iter()
        .any(|m| m["tool_calls"][0]["function"]["name"] == "wait__seconds");
    assert!(called_wait, "{:#?}", request.messages());
    let conversation = swarm.conversation("alpha");
    assert_eq!(count_user_messages(&conversation, "wait long"), 1);
    assert_eq!(count_tool_calls(&conversation, "wait__seconds"), 1);
}

#[test]
fn a_request_cycle_fails_fast_as_a_tool_error() {
    let swarm = Swarm::pair(2, |request| {
        let (me, other) = if request.is_from(ALPHA) {
            ("alpha", "beta")
        } else {
            ("beta", "alpha")
        };
        match request.tool_result() {
            Some(result) => Reply::text(format!("{me} got: {result}")),
            // A long timeout: a hang would surface as a timeout error, not
            // as the cycle error asserted below.
            None => Reply::tool(
                "agents__request",
                json!({"target": other, "input": "loop", "timeoutMs": 15000}),
            ),
        }
    });
    let output = swarm.run(&["run", "--input", "start"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let beta_after_tool = swarm
        .mock
        .wait_for("beta's call after its request failed", |r| {
            r.is_from(BETA) && r.tool_result().is_some()
        });
    let failure = beta_after_tool.tool_result().unwrap();
    assert!(failure.contains("E_AGENT_CYCLE"), "{failure}");
    assert!(failure.contains("alpha:default"), "{failure}");
    assert!(
        stdout(&output).starts_with("alpha got: {"),
        "{}",
        stdout(&output)
    );
    let beta_events = swarm.runtime_events("beta");
    let completed = beta_events
        .iter()
        .find(|e| e["type"] == "tool.completed" && e["toolName"] == "agents__request")
        .unwrap();
    assert_eq!(completed["status"], "error");
}

#[test]
fn a_request_times_out_at_its_timeout_ms() {
    let swarm = Swarm::pair(1, |request| {
        if request.is_from(BETA) {
            return Reply::Hang;
        }
        match request.tool_result() {
            Some(result) => Reply::text(format!("gave up: {result}")),
            None => Reply::tool(
                "agents__request",
                json!({"target": "beta", "input": "never answered", "timeoutMs": 300}),
            ),
        }
    });
    let output = swarm.run(&["run", "--input", "go"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with("gave up: "), "{text}");
    assert!(text.contains("E_AGENT_REQUEST_TIMEOUT"), "{text}");
    assert!(text.contains("300"), "{text}");
    let completed = swarm
        .runtime_events("alpha")
        .into_iter()
        .find(|e| e["type"] == "tool.completed" && e["toolName"] == "agents__request")
        .unwrap();
    assert_eq!(completed["status"], "error");
    let duration = completed["duration"].as_u64().unwrap();
    // Not before the configured 300 ms, and not the 15 s default.
    assert!((300..15_000).contains(&duration), "{duration} ms");
}

#[test]
fn a_detached_orchestrator_is_managed_from_the_command_line() {
    let swarm = Swarm::pair(5, relay);
    let started = swarm.run(&["run", "--detach"]);
    assert_eq!(code(&started), 0, "{}", stderr(&started));
    let text = stdout(&started);
    let pid: i32 = text
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text:?}"));
    let daemon = Daemon { pid };
    assert!(alive(daemon.pid));

    let first = swarm.run(&["run", "--input", "one"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(stdout(&first), "alpha heard: pong(one)\n");
    let first_trace = swarm.runtime_events("alpha")[0]["traceId"]
        .as_str()
        .unwrap()
        .to_string();
    let second = swarm.run(&["run", "--input", "two"]);
    assert_eq!(stdout(&second), "alpha heard: pong(two)\n");

    let instances = swarm.instances();
    assert_eq!(instances.len(), 2, "{instances:#?}");
    let alpha_pid = swarm.pid_of("alpha").expect("alpha runs");
    let beta_pid = swarm.pid_of("beta").expect("beta runs");
    assert!(alive(alpha_pid) && alive(beta_pid));

    // Restart one agent: a new process, the same history.
    let beta_history = swarm.conversation("beta");
    let restarted = swarm.run(&["restart", "--agent", "beta"]);
    assert_eq!(code(&restarted), 0, "{}", stderr(&restarted));
    // The restart is reported done only once it is: the old process has
    // exited and the new one is ready.
    assert!(
        stdout(&restarted).starts_with(&format!(
            "restarted beta:default (pid {beta_pid} exited; pid "
        )),
        "{}",
        stdout(&restarted)
    );
    assert!(
        !alive(beta_pid),
        "the old beta still runs after `restarted`"
    );
    let new_beta = wait_until("beta's new process", || {
        swarm.pid_of("beta").filter(|pid| *pid != beta_pid)
    });
    assert!(alive(new_beta));
    wait_until("the old beta to exit", || (!alive(beta_pid)).then_some(()));
    assert_eq!(swarm.pid_of("alpha"), Some(alpha_pid));
    assert_eq!(swarm.conversation("beta"), beta_history);
    let third = swarm.run(&["run", "--input", "three"]);
    assert_eq!(stdout(&third), "alpha heard: pong(three)\n");

    // Only the first input's events, from both agents.
    let logs = swarm.run(&["logs", "--trace", &first_trace]);
    assert_eq!(code(&logs), 0, "{}", stderr(&logs));
    let lines: Vec<Value> = stdout(&logs)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(lines.iter().all(|e| e["traceId"] == first_trace.as_str()));
    for agent in ["alpha", "beta"] {
        let turns = lines
            .iter()
            .filter(|e| e["agentName"] == agent && e["type"] == "turn.started")
            .count();
        assert_eq!(turns, 1, "{agent}: {lines:#?}");
    }

    // Delete beta: its process stops and its state is gone.
    let beta_dir = swarm.instance_dir("beta");
    let deleted = swarm.run(&["instance", "delete", "beta:default", "--force"]);
    assert_eq!(code(&deleted), 0, "{}", stderr(&deleted));
    assert!(stdout(&deleted).contains("its processes were stopped"));
    wait_until("the deleted beta to exit", || {
        (!alive(new_beta)).then_some(())
    });
    assert!(!beta_dir.exists());
    let remaining: Vec<String> = swarm
        .instances()
        .iter()
        .filter_map(|row| row["agentName"].as_str().map(str::to_string))
        .collect();
    assert_eq!(remaining, ["alpha"]);

    // SIGTERM drains the children and stops the orchestrator.
    kill(Pid::from_raw(daemon.pid), Signal::SIGTERM).unwrap();
    wait_until("the orchestrator to stop", || {
        (!alive(daemon.pid)).then_some(())
    });
    for pid in [alpha_pid, beta_pid, new_beta] {
        assert!(!alive(pid), "gdn agent {pid} survived its orchestrator");
    }
    let alpha = swarm.conversation("alpha");
    assert_eq!(count_user_messages(&alpha, "three"), 1);
}

#[test]
fn a_bundle_with_a_validation_error_starts_nothing_and_exits_4() {
    let bundle = fixture("invalid", &[]);
    let state = tempfile::tempdir().unwrap();
    let output = run_with_deadline(gdn_command(
        bundle.path(),
        state.path(),
        &["run", "--input", "hello"],
    ));
    assert_eq!(code(&output), 4, "{}", stderr(&output));
    let text = stderr(&output);
    assert!(
        text.contains("error[E_CONFIG_REF_NOT_FOUND]: Agent/alpha refers to Model/missing-gpt"),
        "{text}"
    );
    assert!(text.contains("nothing was started"), "{text}");
    assert!(stdout(&output).is_empty());
    assert!(!state.path().join("workspaces").exists());
    assert!(!state.path().join("runtime").exists());
}

#[test]
fn a_model_without_a_key_fails_loudly_naming_model_and_variable() {
    let bundle = fixture("no-key", &[]);
    let state = tempfile::tempdir().unwrap();
    let output = run_with_deadline(gdn_command(
        bundle.path(),
        state.path(),
        &["run", "--input", "hello"],
    ));
    assert_ne!(code(&output), 0);
    let text = stderr(&output);
    assert!(text.contains("E_MODEL_API_KEY_MISSING"), "{text}");
    assert!(text.contains("Model/keyless-claude"), "{text}");
    assert!(text.contains("ANTHROPIC_API_KEY"), "{text}");
    assert!(stdout(&output).is_empty());
}

/// Issue 10: SIGKILLs at random points, with events queued in the
/// orchestrator, queued in the AgentProcess and in the middle of a Turn:
/// every input is answered exactly once and recorded exactly once.
#[test]
fn random_kills_with_events_queued_and_in_flight_lose_and_double_nothing() {
    let swarm = Swarm::pair(2, |request| {
        let text = request.last_user_text();
        match request.tool_result() {
            None => Reply::tool("wait__seconds", json!({"seconds": 0.02})),
            Some(_) => Reply::text(format!("done: {text}")),
        }
    });
    let resident = swarm.start_resident();
    let inputs: Vec<String> = (0..6).map(|n| format!("job-{n}")).collect();
    let children: Vec<Child> = inputs.iter().map(|text| swarm.spawn_input(text)).collect();
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    eprintln!("kill schedule seed: {seed}");
    let mut previous = None;
    // Two kills: an event survives at most two dead processes before the
    // orchestrator would give it up, so every input must still be answered.
    for _ in 0..2 {
        let pid = wait_until("a live alpha", || {
            swarm.pid_of("alpha").filter(|pid| Some(*pid) != previous)
        });
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(5 + seed % 60));
        sigkill(pid);
        previous = Some(pid);
    }
    for (text, child) in inputs.iter().zip(children) {
        let output = finish(child, text);
        assert_eq!(code(&output), 0, "{text}: {}", stderr(&output));
        assert_eq!(stdout(&output), format!("done: {text}\n"));
    }
    assert_eq!(resident.terminate(), 0);
    let conversation = swarm.conversation("alpha");
    for text in &inputs {
        assert_eq!(
            count_user_messages(&conversation, text),
            1,
            "{text} recorded once: {conversation:#?}"
        );
        let answers = conversation
            .iter()
            .filter(|data| data["role"] == "assistant")
            .filter(|data| data["content"][0]["text"] == format!("done: {text}").as_str())
            .count();
        assert_eq!(answers, 1, "{text} answered once: {conversation:#?}");
    }
}

/// True when every tool call of an assistant message is answered by tool
/// messages before the conversation goes on, as the OpenAI and Anthropic
/// APIs require (they answer 400 otherwise).
fn every_tool_call_answered(messages: &[Value]) -> bool {
    let mut open: Vec<String> = Vec::new();
    for message in messages {
        match message["role"].as_str() {
            Some("tool") => {
                let id = message["tool_call_id"].as_str().unwrap_or_default();
                open.retain(|call| call != id);
            }
            _ if !open.is_empty() => return false,
            Some("assistant") => {
                if let Some(calls) = message["tool_calls"].as_array() {
                    open.extend(
                        calls
                            .iter()
                            .filter_map(|call| call["id"].as_str().map(String::from)),
                    );
                }
            }
            _ => {}
        }
    }
    open.is_empty()
}

/// Issue 16 #2: a kill -9 of the orchestrator and its agent during a tool
/// call leaves no dangling call: the next Turn closes it, and the provider
/// accepts the conversation.
#[test]
fn a_tool_call_killed_with_its_orchestrator_leaves_a_conversation_providers_accept() {
    let swarm = Swarm::pair(2, |request| {
        if !every_tool_call_answered(request.messages()) {
            return Reply::text("400: a tool call has no result");
        }
        match (request.last_user_text().as_str(), request.tool_result()) {
            ("first", None) => Reply::tool("wait__seconds", json!({"seconds": 30})),
            ("first", Some(_)) => Reply::text("first done"),
            _ => Reply::text("second done"),
        }
    });
    let resident = swarm.start_resident();
    let first = swarm.spawn_input("first");
    swarm
        .mock
        .wait_for("alpha's tool call", |r| r.last_user_text() == "first");
    let alpha = wait_until("alpha's pid", || swarm.pid_of("alpha"));
    // The wait tool is running: kill everything at once.
    std::thread::sleep(Duration::from_millis(200));
    sigkill(resident.pid());
    sigkill(alpha);
    let _ = finish(first, "the input whose swarm was killed");
    drop(resident);
    wait_until("alpha to be gone", || (!alive(alpha)).then_some(()));

    let second = swarm.run(&["run", "--input", "second"]);
    assert_eq!(code(&second), 0, "{}", stderr(&second));
    assert_eq!(stdout(&second), "second done\n");
    let conversation = swarm.conversation("alpha");
    assert!(every_tool_call_answered(
        swarm.mock.requests().last().unwrap().messages()
    ));
    let interrupted = conversation
        .iter()
        .filter(|data| data["role"] == "tool")
        .filter(|data| data.to_string().contains("E_TOOL_INTERRUPTED"))
        .count();
    assert_eq!(interrupted, 1, "{conversation:#?}");
}

/// Issue 16 #4: a model answer whose IPC message would exceed the frame
/// bound reaches the caller as a clear error at once instead of a hang; the
/// whole answer stays in the conversation.
#[test]
fn an_answer_over_the_ipc_frame_bound_is_a_clear_error_not_a_hang() {
    // Each U+0001 is escaped to six bytes in JSON: 1.5 MB of text becomes
    // a 9 MB line.
    let swarm = Swarm::pair(2, |_| Reply::text("\u{1}".repeat(1_500_000)));
    // A hang would end at the run's deadline without this code (or with
    // the request timeout's), so the code alone tells the two apart; how
    // fast it comes is no business of a test on a shared machine.
    let output = swarm.run(&["run", "--input", "big"]);
    assert_ne!(code(&output), 0);
    assert!(
        stderr(&output).contains("E_IPC_TOO_LARGE"),
        "{}",
        stderr(&output)
    );
    let conversation = swarm.conversation("alpha");
    let last = conversation.last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert_eq!(
        last["content"][0]["text"].as_str().unwrap().chars().count(),
        1_500_000
    );
}

#[test]
fn gdn_stop_drains_the_orchestrator_and_returns_once_it_has_exited() {
    let swarm = Swarm::pair(5, |request| {
        Reply::text(format!("ok {}", request.last_user_text()))
    });
    let mut resident = swarm.start_resident();
    let answered = swarm.run(&["run", "--input", "hello"]);
    assert_eq!(code(&answered), 0, "{}", stderr(&answered));
    let pid = resident.pid();

    let stopped = swarm.run(&["stop"]);
    assert_eq!(code(&stopped), 0, "{}", stderr(&stopped));
    assert!(
        stdout(&stopped).contains(&format!("stopped Swarm/default (pid {pid})")),
        "{}",
        stdout(&stopped)
    );
    // `gdn stop` returned, so the process is already gone: no waiting here.
    let status = resident.child.as_mut().unwrap().try_wait().unwrap();
    assert_eq!(status.and_then(|status| status.code()), Some(0));
    resident.child = None;

    let again = swarm.run(&["stop"]);
    assert_eq!(code(&again), 1);
    assert!(
        stderr(&again).contains("E_ORCHESTRATOR_NOT_RUNNING"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn gdn_restart_rereads_the_bundle_and_refuses_an_invalid_one() {
    let swarm = Swarm::pair(5, |request| {
        Reply::text(format!("ok {}", request.last_user_text()))
    });
    let _resident = swarm.start_resident();
    let first = swarm.run(&["run", "--input", "before"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));

    let manifest = swarm.bundle.path().join("goondan.yaml");
    let original = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        original.replace(
            "You are agent ALPHA.",
            "You are agent ALPHA, second edition.",
        ),
    )
    .unwrap();
    let restarted = swarm.run(&["restart"]);
    assert_eq!(code(&restarted), 0, "{}", stderr(&restarted));
    let after = swarm.run(&["run", "--input", "after"]);
    assert_eq!(code(&after), 0, "{}", stderr(&after));
    swarm.mock.wait_for("the re-read prompt", |request| {
        request.last_user_text() == "after" && request.system().contains("second edition")
    });
    assert!(
        swarm
            .conversation("alpha")
            .iter()
            .any(|message| message["content"] == "before"),
        "history survives the restart"
    );

    // An invalid bundle is refused and the swarm runs on.
    let pid = swarm.pid_of("alpha").expect("alpha runs");
    std::fs::write(
        &manifest,
        original.replace("modelRef: Model/mock-gpt", "modelRef: Model/missing"),
    )
    .unwrap();
    let refused = swarm.run(&["restart"]);
    assert_eq!(code(&refused), 4, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("left as it is"),
        "{}",
        stderr(&refused)
    );
    std::fs::write(&manifest, &original).unwrap();
    assert_eq!(swarm.pid_of("alpha"), Some(pid), "nothing restarted");
}

/// A Model without `spec.endpoint` follows `OPENAI_BASE_URL`, as the
/// original's users point it at a proxy: the turn reaches the mock
/// through the variable alone.
#[test]
fn a_model_without_an_endpoint_follows_the_base_url_variable() {
    let swarm = Swarm::pair(5, |_request| Reply::text("through the proxy"));
    let path = swarm.bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let endpoint_line = format!("  endpoint: \"{}\"\n", swarm.mock.endpoint());
    assert!(text.contains(&endpoint_line));
    std::fs::write(&path, text.replace(&endpoint_line, "")).unwrap();

    let mut command = swarm.command(&["run", "--input", "hello"]);
    command.env("OPENAI_BASE_URL", swarm.mock.endpoint());
    let output = run_with_deadline(command);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("through the proxy"),
        "{}",
        stdout(&output)
    );
    assert_eq!(swarm.mock.requests().len(), 1);
}

/// Exit codes of cli.md §12 for a turn whose model fails: 6 when the
/// provider refuses the key, 5 when it cannot be reached.
#[test]
fn a_refused_key_exits_6_and_an_unreachable_provider_exits_5() {
    let swarm = Swarm::pair(5, |_request| Reply::Status(401));
    let output = swarm.run(&["run", "--input", "hello"]);
    assert_eq!(code(&output), 6, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("E_MODEL_AUTH"),
        "{}",
        stderr(&output)
    );

    let swarm = Swarm::pair(5, |_request| Reply::text("unused"));
    let path = swarm.bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    // A port nothing listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        &path,
        text.replace(
            &swarm.mock.endpoint(),
            &format!("http://127.0.0.1:{port}/v1"),
        ),
    )
    .unwrap();
    let output = swarm.run(&["run", "--input", "hello"]);
    assert_eq!(code(&output), 5, "{}", stderr(&output));
    // What failed and where to look (issue 49 #5): the Model's address.
    let text = stderr(&output);
    let help = text
        .lines()
        .find(|line| line.trim_start().starts_with("= help:"))
        .unwrap_or_else(|| panic!("no help line:\n{text}"));
    assert!(help.contains("spec.endpoint"), "{text}");
}

/// `gdn instance list` filters as cli.md has it: `-a` by agent, `-n` a
/// limit (most recently updated first) with the rest counted, `--all`.
#[test]
fn instance_list_filters_by_agent_and_limits() {
    let swarm = Swarm::pair(5, relay);
    let output = swarm.run(&["run", "--input", "hello"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let list = |args: &[&str]| -> Value {
        let mut all = vec!["instance", "list", "--json"];
        all.extend_from_slice(args);
        let output = swarm.run(&all);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        serde_json::from_str(&stdout(&output)).unwrap()
    };
    let agents = |report: &Value| -> Vec<String> {
        report["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["agentName"].as_str().unwrap().to_string())
            .collect()
    };
    let mut both = agents(&list(&[]));
    both.sort();
    assert_eq!(both, ["alpha", "beta"]);
    assert_eq!(agents(&list(&["-a", "beta"])), ["beta"]);
    let limited = list(&["-n", "1"]);
    assert_eq!(agents(&limited).len(), 1);
    assert_eq!(limited["hidden"], 1);
    assert_eq!(agents(&list(&["--all"])).len(), 2);
}

/// Alpha spawns `beta:w1` in `cwd` (or in `../outside`, refused), then
/// asks it where it works; beta answers with `pwd` through bash.
fn spawn_in_a_folder(request: &ChatRequest) -> Reply {
    if request.is_from(BETA) {
        return match request.tool_result() {
            Some(result) => Reply::text(result.to_string()),
            None => Reply::tool("bash__exec", json!({"command": "pwd"})),
        };
    }
    let cwd = if request.last_user_text() == "escape" {
        "../outside"
    } else {
        "work/w1"
    };
    match request.tool_result() {
        None => Reply::tool(
            "agents__spawn",
            json!({"target": "beta", "instanceKey": "w1", "cwd": cwd}),
        ),
        Some(result) if result.contains("\"spawned\"") => Reply::tool(
            "agents__request",
            json!({"target": "beta", "instanceKey": "w1", "input": "where are you?"}),
        ),
        Some(result) => Reply::text(format!("alpha heard: {result}")),
    }
}

#[test]
fn a_spawned_instance_works_in_the_cwd_it_was_given_inside_the_bundle() {
    let swarm = Swarm::pair(2, spawn_in_a_folder);
    let manifest = swarm.bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let with_bash = text.replacen(
        "system: \"You are agent BETA.\"\n  tools:\n    - ref: Tool/agents\n",
        "system: \"You are agent BETA.\"\n  tools:\n    - ref: Tool/agents\n    - ref: Tool/bash\n",
        1,
    );
    assert_ne!(with_bash, text, "the fixture's beta changed shape");
    std::fs::write(&manifest, with_bash).unwrap();

    let escaped = swarm.run(&["run", "--input", "escape"]);
    assert_eq!(code(&escaped), 0, "stderr: {}", stderr(&escaped));
    assert!(
        stdout(&escaped).contains("E_AGENT_SPAWN_CWD"),
        "{}",
        stdout(&escaped)
    );
    assert!(!swarm
        .bundle
        .path()
        .parent()
        .unwrap()
        .join("outside")
        .exists());

    let output = swarm.run(&["run", "--input", "go"]);
    assert_eq!(code(&output), 0, "stderr: {}", stderr(&output));
    let workdir = swarm.bundle.path().canonicalize().unwrap().join("work/w1");
    assert!(workdir.is_dir(), "the folder is created");
    assert!(
        stdout(&output).contains(&workdir.display().to_string()),
        "beta's pwd is its cwd: {}",
        stdout(&output)
    );
}
