//! Issue 48: the original project's flagship sample, brain-persona, run
//! the way its users run it, through a look-alike written for these tests
//! (`tests/fixtures/swarm/brain-lookalike`): lines typed at `gdn run` go
//! through its cli Connection to `coordinator:cli-test`, which delegates to
//! `worker`; the worker's TypeScript turn middleware asks `unconscious`
//! before the Turn (`ctx.agents.request`) and tells `observer` after it
//! (`ctx.agents.send`, an `[observer_payload]`); the coordinator's
//! idle-monitor keeps its state across Turns; its Telegram and Slack
//! Connections run against mock platform APIs. And its Slack Connection as
//! the original configures it (no signing secret) is refused once, with
//! its fix, and stays down until the bundle changes.

use crate::bot_api::{calls_of, push_updates, start_bot_api, SLACK_TOKEN, TELEGRAM_TOKEN};
use crate::connectors::{free_port, post};
use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::stdin::Terminal;
use crate::swarm::{
    code, conversation_of, fixture, gdn_command, stderr, stdout, wait_until, Swarm,
};
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

const SLACK_SECRET: &str = "slack-signing-secret-brain-3e";
/// How long a line typed at `gdn run` may take to be answered before the
/// test gives up (a hang fails; no time is asserted).
const ANSWER_DEADLINE: Duration = Duration::from_secs(60);

/// The lines `pipe` gives, read on a thread of their own.
fn lines_of(pipe: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    received
}

/// The look-alike on the mock `mock`, its Slack Connection on `slack_port`.
fn brain(mock: MockLlm, slack_port: u16) -> Swarm {
    let bundle = fixture(
        "brain-lookalike",
        &[
            ("@ENDPOINT@", mock.endpoint()),
            ("@SLACK_PORT@", slack_port.to_string()),
        ],
    );
    Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    }
}

/// Whether a Node that runs the sample's TypeScript extensions is on PATH.
fn has_node() -> bool {
    std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}

/// The `response` of an `agents__request` tool result.
fn response_of(tool_result: &str) -> String {
    let value: Value = serde_json::from_str(tool_result).unwrap_or(Value::Null);
    value["response"]
        .as_str()
        .map_or_else(|| tool_result.to_string(), str::to_string)
}

/// The brain's model, by the agent asking (its system prompt): the
/// coordinator delegates every message to `worker` and reports its
/// answer; the worker says whether memory's recollection reached it;
/// `unconscious` recalls; `observer` notes.
fn brain_model(request: &ChatRequest) -> Reply {
    let user = request.last_user_text();
    if request.is_from("You are the UNCONSCIOUS") {
        return Reply::text(format!("recalled: herons near {user}"));
    }
    if request.is_from("You are the OBSERVER") {
        return Reply::text("noted");
    }
    if request.is_from("You are the WORKER") {
        let recalled = request.body.to_string().contains("[unconscious_context]");
        let memory = if recalled {
            "with memory"
        } else {
            "without memory"
        };
        return Reply::text(format!("worker did: {user} ({memory})"));
    }
    if request.is_from("You are the COORDINATOR") {
        return match request.tool_result() {
            Some(result) => Reply::text(format!("coordinator: {}", response_of(result))),
            None => Reply::tool(
                "agents__request",
                json!({"target": "worker", "input": user}),
            ),
        };
    }
    Reply::text("unexpected agent")
}

/// The folders of every instance of `agent`, under any workspace.
fn instances_of(state: &Path, agent: &str) -> Vec<PathBuf> {
    let prefix = format!("{agent}:");
    std::fs::read_dir(state.join("workspaces"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|workspace| {
            std::fs::read_dir(workspace.path().join("instances"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|entry| entry.path())
        })
        .filter(|dir| {
            dir.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with(&prefix))
        })
        .collect()
}

/// The text of a message's `content`, however it is shaped.
fn text_of(data: &Value) -> String {
    match &data["content"] {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The first message of `role` in some instance of `agent` whose text
/// contains `needle`, once there is one.
fn wait_for_message(state: &Path, agent: &str, role: &str, needle: &str) -> String {
    wait_until(
        &format!("{agent} to hold a {role} message with {needle:?}"),
        || {
            instances_of(state, agent).into_iter().find_map(|dir| {
                conversation_of(&dir)
                    .iter()
                    .filter(|data| data["role"] == role)
                    .map(text_of)
                    .find(|text| text.contains(needle))
            })
        },
    )
}

/// The coordinator's requests that started a Turn (no tool result yet).
fn coordinator_turns(mock: &MockLlm) -> Vec<String> {
    mock.requests()
        .into_iter()
        .filter(|request| request.is_from("You are the COORDINATOR"))
        .filter(|request| request.tool_result().is_none())
        .map(|request| request.body.to_string())
        .collect()
}

fn telegram_update(id: i64, text: &str) -> Value {
    json!({
        "update_id": id,
        "message": {
            "message_id": id,
            "date": 1_700_000_000,
            "chat": {"id": 77, "type": "private"},
            "from": {"id": 7, "is_bot": false, "first_name": "Ann"},
            "text": text,
        }
    })
}

#[test]
fn the_brain_lookalike_runs_as_its_users_run_it() {
    if !has_node() {
        eprintln!("skipped: no node on PATH");
        return;
    }
    let (base, api) = start_bot_api(Vec::new());
    let slack_port = free_port();
    let swarm = brain(MockLlm::start(brain_model), slack_port);
    let log = std::fs::File::create(swarm.bundle.path().join("orchestrator.log")).unwrap();
    let mut run = swarm
        .command(&["run"])
        .env("TELEGRAM_BOT_TOKEN", TELEGRAM_TOKEN)
        .env("TELEGRAM_API_BASE_URL", &base)
        .env("SLACK_BOT_TOKEN", SLACK_TOKEN)
        .env("SLACK_API_BASE_URL", format!("{base}/api"))
        .env("SLACK_SIGNING_SECRET", SLACK_SECRET)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut stdin = run.stdin.take().unwrap();
    let answers = lines_of(run.stdout.take().unwrap());
    // Killed if the test fails before the end.
    let mut run = crate::swarm::Resident { child: Some(run) };
    let orchestrator_log = || {
        std::fs::read_to_string(swarm.bundle.path().join("orchestrator.log")).unwrap_or_default()
    };
    let answer = || {
        answers
            .recv_timeout(ANSWER_DEADLINE)
            .unwrap_or_else(|_| panic!("no answer; the log: {}", orchestrator_log()))
    };

    // One line through the cli Connection, delegated to the worker.
    writeln!(stdin, "find the heron").unwrap();
    let first = answer();
    assert!(
        first.contains("coordinator: worker did: find the heron"),
        "{first}\n{}",
        orchestrator_log()
    );
    let coordinators = instances_of(swarm.state.path(), "coordinator");
    assert_eq!(coordinators.len(), 1, "{coordinators:?}");
    assert!(
        coordinators[0].ends_with("coordinator:cli-test"),
        "{coordinators:?}"
    );

    // The worker's turn middleware asked `unconscious` before the Turn
    // (`ctx.agents.request`): an unconscious instance answered, and its
    // answer reached the worker's model as `[unconscious_context]`.
    wait_for_message(
        swarm.state.path(),
        "unconscious",
        "assistant",
        "recalled: herons near find the heron",
    );
    assert!(
        first.contains("(with memory)"),
        "the worker's model saw no recollection: {first}\n{}",
        orchestrator_log()
    );
    // ...and told `observer` after it (`ctx.agents.send`), with the
    // Turn's input and output.
    let payload = wait_for_message(swarm.state.path(), "observer", "user", "[observer_payload]");
    assert!(payload.contains("find the heron"), "{payload}");
    assert!(payload.contains("worker did: find the heron"), "{payload}");

    // A second line: idle-monitor's state from the first Turn is read
    // back in the second.
    writeln!(stdin, "and the ibis?").unwrap();
    let second = answer();
    assert!(
        second.contains("coordinator: worker did: and the ibis?"),
        "{second}"
    );
    let turns = coordinator_turns(&swarm.mock);
    assert_eq!(turns.len(), 2, "{turns:?}");
    assert!(!turns[0].contains("[idle_detected]"), "{}", turns[0]);
    assert!(turns[1].contains("[idle_detected]"), "{}", turns[1]);
    assert!(turns[1].contains("turns_before=1"), "{}", turns[1]);
    let state_file = coordinators[0].join("extensions/idle-monitor.json");
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    assert_eq!(state["turns"], 2, "{state}");
    assert_eq!(state["registrations"], 1, "{state}");
    assert!(state["lastTurnCompletedAt"].as_u64().is_some(), "{state}");

    // Its Telegram Connection polls the Bot API with the bot's token, and
    // a message there goes to the shared instance of the rule.
    push_updates(&api, vec![telegram_update(500, "hello from telegram")]);
    wait_for_message(
        swarm.state.path(),
        "coordinator",
        "assistant",
        "worker did: hello from telegram",
    );
    assert!(
        instances_of(swarm.state.path(), "coordinator")
            .iter()
            .any(|dir| dir.ends_with("coordinator:brain-persona-shared")),
        "{:?}",
        instances_of(swarm.state.path(), "coordinator")
    );
    assert!(!calls_of(&api, "getUpdates").is_empty());
    // Its Slack Connection answers Slack's signed URL check on its port.
    let check = json!({"type": "url_verification", "challenge": "brain-challenge"}).to_string();
    let headers = crate::chat_approvals::slack_signed(&check, SLACK_SECRET, Duration::ZERO);
    let (status, answer) = wait_until("the Slack connector to answer", || {
        post(slack_port, &check, &headers)
    });
    assert_eq!((status, answer.as_str()), (200, "brain-challenge"));

    drop(stdin);
    let status = run.child.take().unwrap().wait().unwrap();
    assert!(status.success(), "{}", orchestrator_log());
}

/// How many times `log` (JSON lines) reports Connection `connection`
/// refusing to start.
fn refusals_in(log: &str, connection: &str) -> usize {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| {
            let message = line["fields"]["message"].as_str().unwrap_or_default();
            message.contains("connector refused to start")
                || message.contains("connector failed to start")
        })
        .filter(|line| {
            line["fields"]["key"]
                .as_str()
                .is_some_and(|key| key.ends_with(connection))
        })
        .count()
}

/// Issue 48: the sample's Slack Connection as the original configures it
/// (a port, no signing secret) is refused: `gdn run` says so once on the
/// terminal with the fix, the orchestrator's log holds one report rather
/// than one per respawn, and the Connection stays down while the rest of
/// the swarm answers. Once the bundle gives it its secret, `gdn restart`
/// starts it.
#[test]
fn a_connection_its_config_refuses_is_reported_once_and_stays_down_until_the_bundle_changes() {
    let slack_port = free_port();
    let swarm = brain(MockLlm::start(|_| Reply::text("hello")), slack_port);
    let path = swarm.bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    // No script extensions: this test is about the Connection.
    let with_secret = text
        .replace("    - ref: \"Extension/worker-lifecycle\"\n", "")
        .replace(
            "    - ref: \"Extension/idle-monitor\"\n      # Every Turn after the first counts as \"after a quiet spell\", so the\n      # second Turn shows what the first one stored.\n      config:\n        thresholdMs: 0\n",
            "",
        );
    assert!(!with_secret.contains("Extension/idle-monitor"));
    assert!(!with_secret.contains("Extension/worker-lifecycle"));
    let secrets = "  # The original declares no secrets here; this runtime hands a connector\n  # only the secrets its Connection names.\n  secrets:\n    SLACK_SIGNING_SECRET:\n      valueFrom:\n        env: SLACK_SIGNING_SECRET\n";
    let as_original = with_secret.replace(secrets, "");
    assert!(!as_original.contains("SLACK_SIGNING_SECRET"));
    std::fs::write(&path, &as_original).unwrap();
    let (base, _api) = start_bot_api(Vec::new());
    let environment = |command: &mut std::process::Command| {
        command
            .env("TELEGRAM_BOT_TOKEN", TELEGRAM_TOKEN)
            .env("TELEGRAM_API_BASE_URL", &base)
            .env("SLACK_API_BASE_URL", format!("{base}/api"));
    };

    // A one-shot input on a terminal answers; its Connections, stopped
    // with it, maybe before they were ready, are no warning.
    let mut command = gdn_command(
        swarm.bundle.path(),
        swarm.state.path(),
        &["run", "--input", "hi"],
    );
    environment(&mut command);
    let (output, screen) = Terminal::start_command(command).finish("gdn run --input");
    assert_eq!(code(&output), 0, "{screen}");
    assert!(screen.contains("hello"), "{screen}");
    assert!(!screen.contains("grace period over"), "{screen}");

    // A chat on a terminal: one readable report with the fix, and the
    // swarm answers beside it.
    let mut command = gdn_command(swarm.bundle.path(), swarm.state.path(), &["run"]);
    environment(&mut command);
    let mut terminal = Terminal::start_command(command);
    terminal.shows("stays down until the bundle changes");
    terminal.types(b"hi\n");
    terminal.shows("hello");
    terminal.types(&[4]);
    let (output, screen) = terminal.finish("gdn run with a refused Slack");
    assert_eq!(code(&output), 0, "{screen}");
    assert_eq!(
        screen.matches("E_CONNECTOR_CONFIG").count(),
        1,
        "one report for one refusal: {screen}"
    );
    assert!(
        screen.contains(
            "error[E_CONNECTOR_CONFIG]: connector refused to start: Connection/slack-to-brain: SLACK_SIGNING_SECRET"
        ),
        "{screen}"
    );
    assert!(
        screen.contains(
            "= help: copy it from the app's Basic Information page into secrets.SLACK_SIGNING_SECRET"
        ),
        "{screen}"
    );

    // Detached: the warning says it stays down; the log has one report
    // even after a Turn ran beside it. (The run above logged to the same
    // file: only what follows counts.)
    let log_file = crate::files_under(&swarm.state.path().join("runtime/logs"))
        .into_iter()
        .find(|file| file.ends_with("orchestrator.stderr.log"))
        .expect("the orchestrator's log");
    let logged_before = std::fs::read_to_string(&log_file).unwrap().len();
    let since_detach = || std::fs::read_to_string(&log_file).unwrap()[logged_before..].to_string();
    let mut detach = swarm.command(&["run", "--detach"]);
    environment(&mut detach);
    let started = crate::swarm::run_with_deadline(detach);
    assert_eq!(code(&started), 0, "{}", stderr(&started));
    let warning = stderr(&started);
    assert_eq!(
        warning.matches("E_CONNECTOR_CONFIG").count(),
        1,
        "{warning}"
    );
    assert!(
        warning.contains("warning[E_CONNECTOR_CONFIG]: Connection/slack-to-brain did not start"),
        "{warning}"
    );
    assert!(warning.contains("it stays down until then"), "{warning}");
    let asked = swarm.run(&["run", "--input", "still there?"]);
    assert_eq!(code(&asked), 0, "{}", stderr(&asked));
    assert!(stdout(&asked).contains("hello"), "{}", stdout(&asked));
    let log = since_detach();
    assert_eq!(refusals_in(&log, "slack-to-brain"), 1, "{log}");
    assert_eq!(
        crate::connectors::connector_pids(started_pid(&stdout(&started))).len(),
        1,
        "only the Telegram connector runs"
    );

    // The bundle gives the secret (from its `.env`), and `gdn restart`
    // starts the Connection: Slack's signed check is answered.
    std::fs::write(&path, &with_secret).unwrap();
    std::fs::write(
        swarm.bundle.path().join(".env"),
        format!("SLACK_SIGNING_SECRET={SLACK_SECRET}\n"),
    )
    .unwrap();
    let restarted = swarm.run(&["restart"]);
    assert_eq!(
        code(&restarted),
        0,
        "{}{}",
        stdout(&restarted),
        stderr(&restarted)
    );
    // Both Connections are reported as they stand: the one that ran was
    // replaced, the one that was down is up.
    let report = stdout(&restarted);
    assert!(
        report.contains("restarted @connection:telegram-to-brain (pid "),
        "{report}"
    );
    assert!(
        report.contains("started @connection:slack-to-brain (pid "),
        "{report}"
    );
    let check = json!({"type": "url_verification", "challenge": "back-up"}).to_string();
    let headers = crate::chat_approvals::slack_signed(&check, SLACK_SECRET, Duration::ZERO);
    let (status, answer) = wait_until("the Slack connector to answer", || {
        post(slack_port, &check, &headers)
    });
    assert_eq!((status, answer.as_str()), (200, "back-up"));
    let stopped = swarm.run(&["stop"]);
    assert_eq!(code(&stopped), 0, "{}", stderr(&stopped));
    let log = since_detach();
    assert_eq!(refusals_in(&log, "slack-to-brain"), 1, "{log}");
}

/// The pid `gdn run --detach` printed.
fn started_pid(text: &str) -> i32 {
    text.split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text:?}"))
}
