//! Orchestrator tests with real child processes.
//!
//! The test binary doubles as the child: with `GOONDAN_TEST_CHILD=1` it
//! behaves as a tiny scripted agent speaking the real IPC protocol over
//! stdin/stdout, so routing, supervision and shutdown are exercised across
//! real process boundaries. Agent names select behaviors: `loopy` crashes
//! at start, `broken` reports a start error, `stubborn` ignores shutdown.
//! (The full AgentProcess is covered by the `gdn` end-to-end tests.)

use goondan_client::ControlSocket;
use goondan_ipc::protocol::{
    self, Answer, AnswerOutcome, Inbound, Ready, StartError, TextDelta, TurnFinished,
    PROTOCOL_VERSION,
};
use goondan_ipc::{framing, RoutingKey, RuntimeMessage, SpawnHandshake, ORCHESTRATOR};
use goondan_orchestrator::control::{self, ControlRequest, ControlResponse};
use goondan_orchestrator::orchestrator::{CrashLedger, CrashRecord, Liveness};
use goondan_orchestrator::OrchestratorError;
use goondan_orchestrator::{Ingress, LocalSpawner, Orchestrator, OrchestratorConfig, SwarmInfo};
use goondan_types::{
    AgentEvent, ConnectorEvent, EventSource, EventSourceKind, IpcMessage, ProcessStatus,
    ReplyChannel,
};
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

/// A secret the orchestrator hands to its children: present in the
/// spawner's environment list (as if inherited), yet it must reach the
/// child only through the spawn handshake.
const TEST_SECRET: &str = "GOONDAN_TEST_SECRET";

fn main() {
    if std::env::var_os("GOONDAN_TEST_CHILD").is_some() {
        run_child();
        return;
    }
    let tests: &[(&str, fn())] = &[
        (
            "request_reaches_entry_agent_and_answer_returns",
            request_reaches_entry_agent_and_answer_returns,
        ),
        (
            "secrets_reach_the_child_by_handshake_not_by_environment",
            secrets_reach_the_child_by_handshake_not_by_environment,
        ),
        (
            "agent_to_agent_request_is_routed_by_key",
            agent_to_agent_request_is_routed_by_key,
        ),
        (
            "unknown_target_is_rejected_at_once",
            unknown_target_is_rejected_at_once,
        ),
        (
            "crashed_agent_respawns_and_keeps_queued_events",
            crashed_agent_respawns_and_keeps_queued_events,
        ),
        (
            "delete_answers_after_the_process_exited",
            delete_answers_after_the_process_exited,
        ),
        ("crash_loop_enters_backoff", crash_loop_enters_backoff),
        (
            "streamed_text_reaches_the_requester_before_the_answer",
            streamed_text_reaches_the_requester_before_the_answer,
        ),
        (
            "crash_counters_are_saved_to_the_ledger",
            crash_counters_are_saved_to_the_ledger,
        ),
        (
            "a_persisted_backoff_holds_after_an_orchestrator_restart",
            a_persisted_backoff_holds_after_an_orchestrator_restart,
        ),
        (
            "a_far_future_persisted_backoff_is_clamped_to_the_longest_backoff",
            a_far_future_persisted_backoff_is_clamped_to_the_longest_backoff,
        ),
        (
            "a_process_that_answers_no_ping_is_killed_and_replaced",
            a_process_that_answers_no_ping_is_killed_and_replaced,
        ),
        (
            "start_error_fails_the_request_loudly",
            start_error_fails_the_request_loudly,
        ),
        (
            "graceful_shutdown_drains_and_kills_after_grace",
            graceful_shutdown_drains_and_kills_after_grace,
        ),
        (
            "an_agent_request_to_an_instance_that_cannot_start_fails_at_once",
            an_agent_request_to_an_instance_that_cannot_start_fails_at_once,
        ),
        (
            "graceful_shutdown_drains_the_turn_in_flight",
            graceful_shutdown_drains_the_turn_in_flight,
        ),
        (
            "restart_respawns_selected_agent",
            restart_respawns_selected_agent,
        ),
        (
            "control_socket_answers_list_and_request",
            control_socket_answers_list_and_request,
        ),
    ];
    let filter = std::env::args().nth(1).filter(|arg| !arg.starts_with('-'));
    let mut passed = 0;
    let mut failed = 0;
    for (name, test) in tests {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        match std::panic::catch_unwind(test) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------- child --

fn run_child() {
    let args: Vec<String> = std::env::args().collect();
    let value_of = |flag: &str| {
        args.iter()
            .position(|arg| arg == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_default()
    };
    let agent = value_of("--agent-name");
    let instance = value_of("--instance-key");
    let me = format!("{agent}:{instance}");
    // The spawn handshake comes before any message, as in `gdn agent`.
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let handshake_line = lines.next().unwrap().unwrap();
    let handshake = SpawnHandshake::decode(handshake_line.as_bytes()).unwrap();
    let stdout = std::io::stdout();
    let send = |message: IpcMessage| {
        let mut out = stdout.lock();
        out.write_all(&framing::encode(&message)).unwrap();
        out.flush().unwrap();
    };
    let notice = |message: RuntimeMessage| message.to_message(&me, ORCHESTRATOR);
    match agent.as_str() {
        "loopy" => std::process::exit(1),
        "broken" => {
            send(notice(RuntimeMessage::StartError(StartError {
                code: "E_EXTENSION_INIT".into(),
                message: "extension `x` failed".into(),
                suggestion: None,
            })));
            std::process::exit(2);
        }
        _ => {}
    }
    send(notice(RuntimeMessage::Ready(Ready {
        protocol_version: PROTOCOL_VERSION,
    })));
    while let Some(Ok(line)) = lines.next() {
        let message = framing::decode(line.as_bytes()).unwrap();
        match protocol::decode(&message).unwrap() {
            Inbound::Shutdown(_) => {
                if agent == "stubborn" {
                    continue;
                }
                send(protocol::shutdown_ack_message(
                    &RoutingKey::new(agent.as_str(), instance.as_str()),
                    ORCHESTRATOR,
                ));
                std::process::exit(0);
            }
            Inbound::Event(event) => {
                let input = event.input.clone().unwrap_or_default();
                if input == "crash" || (input == "crash-once" && !event.redelivered) {
                    std::process::exit(9);
                }
                if input == "slow" {
                    std::thread::sleep(Duration::from_millis(300));
                }
                if input == "stream" {
                    if let Some(reply_to) = &event.reply_to {
                        for delta in ["str", "eam", "ed"] {
                            send(notice(RuntimeMessage::TextDelta(TextDelta {
                                delta_for: reply_to.correlation_id.clone(),
                                delta: delta.into(),
                            })));
                        }
                    }
                }
                let answer = if let Some(target) = input.strip_prefix("ask:") {
                    let mut request = AgentEvent::new(
                        "request",
                        EventSource::new(EventSourceKind::Agent, agent.as_str()),
                    );
                    request.input = Some("hello".into());
                    request.reply_to = Some(ReplyChannel {
                        target: me.clone(),
                        correlation_id: protocol::correlation_id_for(&request),
                    });
                    send(protocol::event_message(&me, target, &request));
                    let reply = loop {
                        let reply_line = lines.next().unwrap().unwrap();
                        let reply = framing::decode(reply_line.as_bytes()).unwrap();
                        match protocol::decode(&reply) {
                            Ok(Inbound::Answer(reply, _)) => break reply,
                            Ok(Inbound::Runtime(RuntimeMessage::Ping(ping))) => {
                                send(notice(ping.pong()))
                            }
                            _ => panic!("not an answer: {reply:?}"),
                        }
                    };
                    match reply.outcome {
                        AnswerOutcome::Failed(failure) => format!("got-error:{}", failure.code),
                        AnswerOutcome::Ok { text, .. } => {
                            format!("got:{}", text.unwrap_or_default())
                        }
                    }
                } else if input == "secret" {
                    format!(
                        "{agent}:env={}:handshake={}",
                        std::env::var_os(TEST_SECRET).is_some(),
                        handshake.secrets.get(TEST_SECRET).unwrap_or("-")
                    )
                } else {
                    format!("{agent}:{input}")
                };
                if let Some(reply_to) = &event.reply_to {
                    let response = Answer {
                        in_reply_to: reply_to.correlation_id.clone(),
                        outcome: AnswerOutcome::Ok {
                            text: Some(answer),
                            finish_reason: None,
                            turn_id: None,
                            usage: None,
                        },
                    };
                    send(protocol::event_message(
                        &me,
                        &reply_to.target,
                        &response.to_event(&agent, None),
                    ));
                }
                send(notice(RuntimeMessage::TurnFinished(TurnFinished {
                    ok: true,
                    event_id: Some(event.id.clone()),
                })));
            }
            // `mute` stands for a stopped or wedged process.
            Inbound::Runtime(RuntimeMessage::Ping(ping)) if agent != "mute" => {
                send(notice(ping.pong()))
            }
            _ => {}
        }
    }
}

// -------------------------------------------------------------- harness --

fn swarm(agents: &[&str], grace: Duration) -> SwarmInfo {
    SwarmInfo {
        swarm_name: "test".into(),
        entry_agent: agents[0].into(),
        agents: agents.iter().map(|a| a.to_string()).collect(),
        instance_key: "main".into(),
        grace_period: grace,
        max_queued_events: 64,
        processes: Default::default(),
        ingress: Vec::new(),
        cli_connection: None,
        connections: Vec::new(),
        approval_connections: Vec::new(),
    }
}

/// Short enough for a test to see a silent process killed, long enough
/// for the `slow` input (300 ms without reading) to survive.
const LIVENESS: Liveness = Liveness {
    interval: Duration::from_millis(250),
    missed_pings: 3,
};

fn with_orchestrator(
    agents: &[&str],
    grace: Duration,
    body: impl AsyncFnOnce(goondan_orchestrator::OrchestratorHandle),
) {
    with_ledger(agents, grace, None, body);
}

fn with_ledger(
    agents: &[&str],
    grace: Duration,
    crash_ledger: Option<CrashLedger>,
    body: impl AsyncFnOnce(goondan_orchestrator::OrchestratorHandle),
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let spawner = LocalSpawner {
            program: std::env::current_exe().unwrap(),
            args: Vec::new(),
            connector_args: None,
            env: vec![
                ("GOONDAN_TEST_CHILD".into(), "1".into()),
                (TEST_SECRET.into(), "leaked-through-the-environment".into()),
            ],
            secrets: Arc::new(|_: &goondan_orchestrator::SpawnRequest| {
                [(TEST_SECRET, "handed-over-secret")].into_iter().collect()
            }),
            withheld_env: vec!["GOONDAN_TEST_UNSET_SECRET".into()],
            log_file: None,
            current_dir: None,
        };
        let (handle, task) = Orchestrator::start(OrchestratorConfig {
            swarm: swarm(agents, grace),
            spawner: Arc::new(spawner),
            transport: None,
            reconcile_interval: Duration::from_millis(100),
            reset_instance: None,
            crash_ledger,
            liveness: LIVENESS,
            restart_requests: None,
            remote: None,
            inbox: None,
            pending_approvals: None,
        });
        body(handle.clone()).await;
        tokio::time::timeout(Duration::from_secs(10), handle.shutdown())
            .await
            .expect("shutdown in time")
            .unwrap();
        task.await.unwrap();
    });
}

async fn ask(
    handle: &goondan_orchestrator::OrchestratorHandle,
    agent: Option<&str>,
    input: &str,
) -> String {
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        handle.ask(Ingress::cli(input, agent.map(str::to_string)), None),
    )
    .await
    .expect("answer in time")
    .expect("request succeeds");
    match Answer::from_event(&answer).map(|answer| answer.outcome) {
        Some(AnswerOutcome::Ok { text, .. }) => text.unwrap_or_default(),
        other => panic!("not an answer: {other:?}"),
    }
}

async fn wait_for_status(
    handle: &goondan_orchestrator::OrchestratorHandle,
    key: &str,
    status: ProcessStatus,
) -> goondan_orchestrator::orchestrator::InstanceStatus {
    for _ in 0..200 {
        if let Some(found) = handle
            .list()
            .await
            .unwrap()
            .into_iter()
            .find(|s| s.key == key && s.status == status)
        {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "{key} never reached {status:?}: {:?}",
        handle.list().await.unwrap()
    );
}

// ---------------------------------------------------------------- tests --

fn request_reaches_entry_agent_and_answer_returns() {
    with_orchestrator(&["alpha", "beta"], Duration::from_secs(5), async |handle| {
        assert_eq!(ask(&handle, None, "hi").await, "alpha:hi");
        assert_eq!(ask(&handle, Some("beta"), "yo").await, "beta:yo");
        let keys: Vec<String> = handle
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.key)
            .collect();
        assert_eq!(keys, ["alpha:main", "beta:main"]);
    });
}

/// Issue 16 #1: a secret the orchestrator holds reaches its child in the
/// spawn handshake, never through the child's exec environment.
fn secrets_reach_the_child_by_handshake_not_by_environment() {
    with_orchestrator(&["alpha"], Duration::from_secs(2), async |handle| {
        assert_eq!(
            ask(&handle, None, "secret").await,
            "alpha:env=false:handshake=handed-over-secret"
        );
    });
}

fn agent_to_agent_request_is_routed_by_key() {
    with_orchestrator(&["alpha", "beta"], Duration::from_secs(5), async |handle| {
        assert_eq!(ask(&handle, None, "ask:beta").await, "got:beta:hello");
        assert_eq!(ask(&handle, None, "ask:beta:other").await, "got:beta:hello");
        let keys: Vec<String> = handle
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.key)
            .collect();
        assert!(keys.contains(&"beta:other".to_string()), "{keys:?}");
    });
}

fn unknown_target_is_rejected_at_once() {
    with_orchestrator(&["alpha"], Duration::from_secs(5), async |handle| {
        assert_eq!(
            ask(&handle, None, "ask:ghost").await,
            "got-error:E_AGENT_NOT_FOUND"
        );
        let error = handle
            .ask(Ingress::cli("x", Some("ghost".into())), None)
            .await
            .unwrap_err();
        assert_eq!(error.code(), "E_AGENT_NOT_FOUND");
    });
}

fn crashed_agent_respawns_and_keeps_queued_events() {
    with_orchestrator(&["alpha"], Duration::from_secs(5), async |handle| {
        assert_eq!(ask(&handle, None, "warm").await, "alpha:warm");
        // A crash is survived: the event goes to the next process, which
        // answers it.
        assert_eq!(ask(&handle, None, "crash-once").await, "alpha:crash-once");
        // An event that kills every process is given up, and its caller
        // is told why.
        let crashed = handle
            .ask(Ingress::cli("crash", None), None)
            .await
            .unwrap_err();
        assert_eq!(crashed.code(), "E_AGENT_CRASHED");
        assert!(crashed.to_string().contains("exit code 9"), "{crashed}");
        // The respawned process is still starting: this event waits in the
        // orchestrator's queue and goes to it once it is ready.
        let after = ask(&handle, None, "after").await;
        assert_eq!(after, "alpha:after");
        // The reset arrives with `runtime.turn_finished`, just after the
        // answer, so the counter is polled rather than read once.
        let mut counter = u32::MAX;
        for _ in 0..200 {
            counter = handle.list().await.unwrap()[0].consecutive_crashes;
            if counter == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(counter, 0, "a successful turn resets the counter");
    });
}

fn delete_answers_after_the_process_exited() {
    with_orchestrator(&["alpha"], Duration::from_secs(5), async |handle| {
        ask(&handle, None, "hi").await;
        let pid = handle.list().await.unwrap()[0].pid.expect("a live pid");
        assert!(handle.delete("alpha:main".into()).await.unwrap());
        // Reaped, not merely signalled: its files are free to delete now.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        assert!(handle.list().await.unwrap().is_empty());
    });
}

fn crash_loop_enters_backoff() {
    with_orchestrator(
        &["alpha", "loopy"],
        Duration::from_secs(5),
        async |handle| {
            let loopy = handle.clone();
            let waiting = tokio::spawn(async move {
                loopy
                    .ask(Ingress::cli("x", Some("loopy".into())), None)
                    .await
            });
            let status =
                wait_for_status(&handle, "loopy:main", ProcessStatus::CrashLoopBackOff).await;
            assert!(status.consecutive_crashes > 5, "{status:?}");
            assert_eq!(
                status.pending_events, 1,
                "the event is kept for the next process"
            );
            waiting.abort();
        },
    );
}

fn start_error_fails_the_request_loudly() {
    with_orchestrator(
        &["alpha", "broken"],
        Duration::from_secs(5),
        async |handle| {
            let error = tokio::time::timeout(
                Duration::from_secs(10),
                handle.ask(Ingress::cli("x", Some("broken".into())), None),
            )
            .await
            .unwrap()
            .unwrap_err();
            assert_eq!(error.code(), "E_EXTENSION_INIT");
            assert!(error.to_string().contains("extension `x` failed"));
        },
    );
}

fn graceful_shutdown_drains_and_kills_after_grace() {
    // `stubborn` never acknowledges; the orchestrator must kill it after the
    // grace period and still finish its shutdown (the harness asserts that).
    with_orchestrator(
        &["alpha", "stubborn"],
        Duration::from_millis(300),
        async |handle| {
            assert_eq!(ask(&handle, None, "a").await, "alpha:a");
            assert_eq!(ask(&handle, Some("stubborn"), "b").await, "stubborn:b");
        },
    );
}

fn an_agent_request_to_an_instance_that_cannot_start_fails_at_once() {
    with_orchestrator(
        &["alpha", "broken"],
        Duration::from_secs(5),
        async |handle| {
            assert_eq!(
                ask(&handle, None, "ask:broken").await,
                "got-error:E_EXTENSION_INIT",
                "the caller learns the real cause, not its request's timeout"
            );
        },
    );
}

fn graceful_shutdown_drains_the_turn_in_flight() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (handle, task) = Orchestrator::start(OrchestratorConfig {
            swarm: swarm(&["alpha"], Duration::from_secs(5)),
            spawner: Arc::new(LocalSpawner {
                program: std::env::current_exe().unwrap(),
                args: Vec::new(),
                connector_args: None,
                env: vec![("GOONDAN_TEST_CHILD".into(), "1".into())],
                secrets: Arc::new(|_: &goondan_orchestrator::SpawnRequest| {
                    goondan_types::Secrets::new()
                }),
                withheld_env: Vec::new(),
                log_file: None,
                current_dir: None,
            }),
            transport: None,
            reconcile_interval: Duration::from_millis(100),
            reset_instance: None,
            crash_ledger: None,
            liveness: Default::default(),
            restart_requests: None,
            remote: None,
            inbox: None,
            pending_approvals: None,
        });
        assert_eq!(ask(&handle, None, "warm").await, "alpha:warm");
        let asking = handle.clone();
        let slow = tokio::spawn(async move { ask(&asking, None, "slow").await });
        // The Turn is under way when the shutdown arrives.
        tokio::time::sleep(Duration::from_millis(100)).await;
        tokio::time::timeout(Duration::from_secs(10), handle.shutdown())
            .await
            .expect("drained in time")
            .unwrap();
        assert_eq!(
            slow.await.unwrap(),
            "alpha:slow",
            "the Turn finished and answered"
        );
        task.await.unwrap();
    });
}

fn restart_respawns_selected_agent() {
    with_orchestrator(&["alpha", "beta"], Duration::from_secs(5), async |handle| {
        ask(&handle, None, "1").await;
        ask(&handle, Some("beta"), "1").await;
        let before = handle.list().await.unwrap();
        let restarted = handle
            .restart(Some("alpha".into()), None, false)
            .await
            .unwrap();
        assert_eq!(restarted, ["alpha:main"]);
        assert_eq!(ask(&handle, None, "2").await, "alpha:2");
        let after = handle.list().await.unwrap();
        assert_ne!(before[0].pid, after[0].pid, "alpha got a new process");
        assert_eq!(before[1].pid, after[1].pid, "beta was left alone");
    });
}

fn control_socket_answers_list_and_request() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("runtime").join("control.sock");
    with_orchestrator(&["alpha"], Duration::from_secs(5), async |handle| {
        let instances = goondan_store::InstanceStore::new(
            goondan_store::StateRoot::new(dir.path()).workspace("main"),
        );
        let server = tokio::spawn(control::serve(socket.clone(), handle.clone(), instances));
        for _ in 0..100 {
            if socket.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let answer = ControlSocket::new(&socket)
            .call(&ControlRequest::Request {
                agent: None,
                event: ConnectorEvent::text("stdin_message", "via socket"),
                cancel_on_disconnect: false,
            })
            .await
            .unwrap();
        let ControlResponse::Answer { response } = answer else {
            panic!("not an answer: {answer:?}");
        };
        assert_eq!(response.input.as_deref(), Some("alpha:via socket"));
        let list = ControlSocket::new(&socket)
            .call(&ControlRequest::List)
            .await
            .unwrap();
        let ControlResponse::Instances { instances } = list else {
            panic!("not a list: {list:?}");
        };
        assert_eq!(instances[0].key, "alpha:main");
        let bad = ControlSocket::new(&socket)
            .call(&ControlRequest::Request {
                agent: Some("ghost".into()),
                event: ConnectorEvent::text("stdin_message", "x"),
                cancel_on_disconnect: false,
            })
            .await
            .unwrap();
        assert!(matches!(bad, ControlResponse::Failed(body) if body.code == "E_AGENT_NOT_FOUND"));
        server.abort();
    });
    let _ = RoutingKey::parse("alpha:main", "main");
}

type Saves = Arc<std::sync::Mutex<Vec<(String, CrashRecord)>>>;

fn recording_ledger(initial: CrashRecord) -> (CrashLedger, Saves) {
    let saves: Saves = Arc::default();
    let recorded = saves.clone();
    let ledger = CrashLedger {
        load: Arc::new(move |_key: &RoutingKey| initial),
        save: Arc::new(move |key: &RoutingKey, record: CrashRecord| {
            recorded.lock().unwrap().push((key.to_string(), record));
        }),
    };
    (ledger, saves)
}

fn crash_counters_are_saved_to_the_ledger() {
    let (ledger, saves) = recording_ledger(CrashRecord::default());
    with_ledger(
        &["alpha", "loopy"],
        Duration::from_secs(5),
        Some(ledger),
        async |handle| {
            let loopy = handle.clone();
            let waiting = tokio::spawn(async move {
                loopy
                    .ask(Ingress::cli("x", Some("loopy".into())), None)
                    .await
            });
            wait_for_status(&handle, "loopy:main", ProcessStatus::CrashLoopBackOff).await;
            waiting.abort();
        },
    );
    let saves = saves.lock().unwrap();
    let counts: Vec<u32> = saves
        .iter()
        .map(|(_, record)| record.consecutive_crashes)
        .collect();
    assert_eq!(&counts[..6], &[1, 2, 3, 4, 5, 6], "{saves:?}");
    assert!(saves[..5]
        .iter()
        .all(|(_, record)| record.backoff_until.is_none()));
    assert!(
        saves[5].1.backoff_until.is_some(),
        "the sixth crash backs off"
    );
    assert!(saves.iter().all(|(key, _)| key == "loopy:main"));
}

fn a_persisted_backoff_holds_after_an_orchestrator_restart() {
    let (ledger, _saves) = recording_ledger(CrashRecord {
        consecutive_crashes: 7,
        backoff_until: Some(std::time::SystemTime::now() + Duration::from_secs(60)),
    });
    with_ledger(
        &["alpha"],
        Duration::from_secs(5),
        Some(ledger),
        async |handle| {
            // The input is refused at once with the deadline, not held
            // silently until it passes (issue 16 #18).
            let error = handle.ask(Ingress::cli("x", None), None).await.unwrap_err();
            assert_eq!(error.code(), "E_AGENT_BACKOFF", "{error}");
            assert!(error
                .suggestion()
                .unwrap()
                .contains("gdn instance restart alpha:main"));
            let status =
                wait_for_status(&handle, "alpha:main", ProcessStatus::CrashLoopBackOff).await;
            assert_eq!(status.pid, None, "no process before the deadline");
            assert_eq!(status.consecutive_crashes, 7);
            assert_eq!(status.pending_events, 0);
            assert!(status.backoff_until.is_some(), "{status:?}");
        },
    );
}

/// Issue 16 #18: a far-future `backoffUntil` (a hand-edited file, a clock
/// that jumped) is clamped to the longest backoff when it is loaded.
fn a_far_future_persisted_backoff_is_clamped_to_the_longest_backoff() {
    let (ledger, _saves) = recording_ledger(CrashRecord {
        consecutive_crashes: 9,
        backoff_until: Some(
            std::time::SystemTime::now() + Duration::from_secs(10 * 365 * 24 * 3600),
        ),
    });
    with_ledger(
        &["alpha"],
        Duration::from_secs(5),
        Some(ledger),
        async |handle| {
            let error = handle.ask(Ingress::cli("x", None), None).await.unwrap_err();
            let OrchestratorError::Backoff { remaining_ms, .. } = error else {
                panic!("not a backoff: {error}");
            };
            assert!(
                remaining_ms <= goondan_orchestrator::backoff::MAX_BACKOFF_MS,
                "{remaining_ms} ms"
            );
        },
    );
}

fn streamed_text_reaches_the_requester_before_the_answer() {
    with_orchestrator(&["alpha"], Duration::from_secs(5), async |handle| {
        let (deltas, mut received) = tokio::sync::mpsc::unbounded_channel();
        let answer = handle
            .ask(Ingress::cli("stream", None), Some(deltas))
            .await
            .unwrap();
        assert_eq!(answer.input.as_deref(), Some("alpha:stream"));
        // Every delta was already delivered when the answer arrived: none
        // has to be waited for.
        let mut streamed = String::new();
        while let Ok(delta) = received.try_recv() {
            streamed.push_str(&delta);
        }
        assert_eq!(
            streamed, "streamed",
            "every delta, in order, before the final answer"
        );
    });
}

/// Issue 16 #7: a process that stops answering pings (stopped, wedged) is
/// killed after the deadline, counted as a crash and replaced.
fn a_process_that_answers_no_ping_is_killed_and_replaced() {
    with_orchestrator(&["alpha", "mute"], Duration::from_secs(5), async |handle| {
        assert_eq!(ask(&handle, Some("mute"), "x").await, "mute:x");
        let first = handle
            .list()
            .await
            .unwrap()
            .into_iter()
            .find(|status| status.key == "mute:main")
            .and_then(|status| status.pid)
            .expect("mute runs");
        let started = std::time::Instant::now();
        let replaced = loop {
            let status = handle
                .list()
                .await
                .unwrap()
                .into_iter()
                .find(|status| status.key == "mute:main")
                .unwrap();
            if status.consecutive_crashes >= 1 && status.pid.is_some_and(|pid| pid != first) {
                break status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "not replaced: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(replaced.consecutive_crashes >= 1);
        // A process that answers its pings lives on.
        assert_eq!(ask(&handle, Some("alpha"), "a").await, "alpha:a");
        tokio::time::sleep(LIVENESS.deadline() * 2).await;
        let alpha = handle
            .list()
            .await
            .unwrap()
            .into_iter()
            .find(|status| status.key == "alpha:main")
            .unwrap();
        assert_eq!(alpha.consecutive_crashes, 0, "{alpha:?}");
    });
}
