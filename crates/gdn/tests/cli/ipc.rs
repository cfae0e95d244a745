//! The AgentProcess at its IPC boundary: the real `gdn agent` driven over
//! its stdin and stdout as the orchestrator would, including what a broken
//! or hostile peer sends.

use goondan_ipc::protocol::{self, AnswerOutcome, Inbound, RuntimeMessage, PROTOCOL_VERSION};
use goondan_ipc::{framing, SpawnHandshake, ORCHESTRATOR};
use goondan_types::{AgentEvent, EventSource, EventSourceKind, IpcMessage, ReplyChannel, Secrets};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use tempfile::TempDir;

const BUNDLE: &str = r#"apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: scripted
spec:
  provider: scripted
  model: scripted
  options:
    rulesFile: rules.yaml
  capabilities:
    toolCalling: true
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: alpha
spec:
  modelConfig:
    modelRef: Model/scripted
  tools:
    - ref: Tool/wait
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/alpha
  agents:
    - ref: Agent/alpha
  policy:
    queues:
      maxQueuedEvents: 2
"#;

const RULES: &str = r#"rules:
  - name: slow
    when:
      user:
        regex: "^slow"
    reply:
      toolCalls:
        - name: wait__seconds
          args:
            seconds: 0.3
  - name: waited
    when:
      toolResult:
        toolName: wait__seconds
    reply:
      text: waited
  - name: echo
    reply:
      text: "echo: {{input}}"
"#;

/// A live `gdn agent` for `alpha:k`, past its handshake.
struct AgentProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    _bundle: TempDir,
    _state: TempDir,
}

impl AgentProcess {
    /// A `gdn agent` past both handshakes: the spawn handshake written,
    /// `runtime.ready` read.
    fn start() -> AgentProcess {
        let frame = SpawnHandshake::new(Secrets::new()).encode().unwrap();
        let mut process = AgentProcess::spawn(Some(&frame));
        match process.read() {
            Inbound::Runtime(RuntimeMessage::Ready(ready)) => {
                assert_eq!(ready.protocol_version, PROTOCOL_VERSION)
            }
            other => panic!("no handshake: {other:?}"),
        }
        process
    }

    /// A `gdn agent` whose stdin starts with `first` (the spawn handshake
    /// as the orchestrator writes it) or is closed at once (`None`).
    fn spawn(first: Option<&[u8]>) -> AgentProcess {
        let bundle = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        std::fs::write(bundle.path().join("goondan.yaml"), BUNDLE).unwrap();
        std::fs::write(bundle.path().join("rules.yaml"), RULES).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_gdn"))
            .arg("agent")
            .arg("--bundle-dir")
            .arg(bundle.path())
            .args([
                "--agent-name",
                "alpha",
                "--instance-key",
                "k",
                "--swarm",
                "default",
            ])
            .arg("--state-root")
            .arg(state.path())
            .env("GOONDAN_DURABILITY", "process-crash")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut process = AgentProcess {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child,
            _bundle: bundle,
            _state: state,
        };
        match first {
            Some(bytes) => process.write(bytes),
            // Closes stdin: the stream ends before any handshake.
            None => process.stdin = None,
        }
        process
    }

    fn write(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, message: &IpcMessage) {
        self.write(&framing::encode(message));
    }

    fn read(&mut self) -> Inbound {
        let mut line = String::new();
        assert!(
            self.stdout.read_line(&mut line).unwrap() > 0,
            "the agent closed its output"
        );
        protocol::decode(&framing::decode(line.trim_end().as_bytes()).unwrap()).unwrap()
    }

    /// Reads until an answer or a refusal about `event_id` comes, skipping
    /// turn outcomes.
    fn outcome_of(&mut self, event_id: &str) -> Result<String, String> {
        loop {
            match self.read() {
                Inbound::Answer(answer, _)
                    if answer.in_reply_to == protocol::correlation_id_for_id(event_id) =>
                {
                    return match answer.outcome {
                        AnswerOutcome::Ok { text, .. } => Ok(text.unwrap_or_default()),
                        AnswerOutcome::Failed(failure) => Err(failure.code),
                    }
                }
                Inbound::Runtime(RuntimeMessage::Rejected(rejected))
                    if rejected.event_id.as_deref() == Some(event_id) =>
                {
                    return Err(rejected.code)
                }
                _ => {}
            }
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn request(input: &str) -> AgentEvent {
    let mut event = AgentEvent::new(
        "user_message",
        EventSource::new(EventSourceKind::Connector, "cli"),
    );
    event.input = Some(input.into());
    event.reply_to = Some(ReplyChannel {
        target: ORCHESTRATOR.into(),
        correlation_id: protocol::correlation_id_for(&event),
    });
    event
}

fn to_alpha(event: &AgentEvent) -> IpcMessage {
    protocol::event_message(ORCHESTRATOR, "alpha:k", event)
}

#[test]
fn garbage_and_unknown_messages_are_answered_with_refusals_and_the_agent_serves_on() {
    let mut agent = AgentProcess::start();
    agent.write(b"{this is not json\n");
    match agent.read() {
        Inbound::Runtime(RuntimeMessage::Rejected(rejected)) => {
            assert_eq!(rejected.code, "E_IPC_MALFORMED")
        }
        other => panic!("no refusal: {other:?}"),
    }
    let mut unknown = request("x");
    unknown.event_type = "runtime.teleport".into();
    agent.send(&to_alpha(&unknown));
    assert_eq!(
        agent.outcome_of(&unknown.id),
        Err("E_IPC_UNKNOWN_MESSAGE".into())
    );
    let hello = request("hello");
    agent.send(&to_alpha(&hello));
    assert_eq!(agent.outcome_of(&hello.id), Ok("echo: hello".into()));
}

/// Issue 16 #1: an AgentProcess takes its secrets from the spawn handshake
/// only; without a readable one it refuses to start with a coded
/// `runtime.start_error` and exits, instead of hanging or starting
/// without its keys.
#[test]
fn a_missing_or_malformed_spawn_handshake_is_a_coded_start_error() {
    let old_version = br#"{"type":"runtime.spawn","protocolVersion":1,"secrets":{}}
"#;
    let cases: [(Option<&[u8]>, &str); 4] = [
        (None, "E_IPC_HANDSHAKE_MISSING"),
        (
            Some(b"{\"type\":\"runtime.spawn\",\"secr\n"),
            "E_IPC_HANDSHAKE_MALFORMED",
        ),
        (
            Some(&framing::encode(&to_alpha(&request("hi")))),
            "E_IPC_HANDSHAKE_MALFORMED",
        ),
        (Some(old_version), "E_IPC_PROTOCOL_VERSION"),
    ];
    for (first, code) in cases {
        let mut agent = AgentProcess::spawn(first);
        match agent.read() {
            Inbound::Runtime(RuntimeMessage::StartError(error)) => {
                assert_eq!(error.code, code);
                assert!(error.suggestion.is_some(), "{error:?}");
            }
            other => panic!("no start error for {code}: {other:?}"),
        }
        let status = agent.child.wait().unwrap();
        assert_eq!(status.code(), Some(2), "{code}");
    }
}

#[test]
fn events_past_the_queue_limit_are_each_refused_once_with_queue_full() {
    let mut agent = AgentProcess::start();
    let events: Vec<AgentEvent> = (0..8).map(|n| request(&format!("slow {n}"))).collect();
    let mut burst = Vec::new();
    for event in &events {
        burst.extend(framing::encode(&to_alpha(event)));
    }
    agent.write(&burst);
    let mut outcomes = std::collections::HashMap::new();
    while outcomes.len() < events.len() {
        let (id, outcome) = match agent.read() {
            Inbound::Answer(answer, _) => {
                let id = answer.in_reply_to.trim_start_matches("corr_").to_string();
                let outcome = match answer.outcome {
                    AnswerOutcome::Ok { text, .. } => Ok(text.unwrap_or_default()),
                    AnswerOutcome::Failed(failure) => Err(failure.code),
                };
                (id, outcome)
            }
            _ => continue,
        };
        assert!(outcomes.insert(id, outcome).is_none(), "answered twice");
    }
    let refused = outcomes
        .values()
        .filter(|outcome| **outcome == Err("E_QUEUE_FULL".to_string()))
        .count();
    let served = outcomes
        .values()
        .filter(|outcome| **outcome == Ok("waited".to_string()))
        .count();
    assert_eq!(refused + served, events.len(), "{outcomes:?}");
    assert!(refused >= 1 && served >= 1, "{outcomes:?}");
}

#[test]
fn a_redelivered_event_whose_turn_finished_is_answered_from_the_conversation() {
    let mut agent = AgentProcess::start();
    let mut event = request("remember me");
    agent.send(&to_alpha(&event));
    assert_eq!(agent.outcome_of(&event.id), Ok("echo: remember me".into()));
    // The orchestrator lost the Turn's outcome (its process died just
    // after) and hands the event to the next process again.
    event.redelivered = true;
    agent.send(&to_alpha(&event));
    assert_eq!(agent.outcome_of(&event.id), Ok("echo: remember me".into()));
    let other = request("next");
    agent.send(&to_alpha(&other));
    assert_eq!(agent.outcome_of(&other.id), Ok("echo: next".into()));
    let conversation = std::fs::read_to_string(
        std::fs::read_dir(agent._state.path().join("workspaces"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path()
            .join("instances/alpha:k/messages/base.jsonl"),
    )
    .unwrap_or_default();
    assert_eq!(
        conversation.matches("\"remember me\"").count(),
        1,
        "the input was recorded once: {conversation}"
    );
}
