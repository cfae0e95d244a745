//! `IpcAgents` against an in-memory orchestrator end: what goes on the
//! wire for each call, and how answers, failures and timeouts come back.

use goondan_agent::{IpcAgents, SwarmView};
use goondan_ipc::protocol::{
    self, Answer, AnswerOutcome, Failure, Inbound, Query, QueryAnswer, QueryAnswerMessage,
};
use goondan_ipc::{IpcChannel, RoutingKey, RuntimeMessage, ORCHESTRATOR};
use goondan_runtime::{AgentsApi, AgentsError, AsyncResponseInbox};
use goondan_types::agents::{AgentRuntimeRequestOptions, DEFAULT_REQUEST_TIMEOUT_MS};
use goondan_types::{
    AgentEvent, EventSource, EventSourceKind, IpcMessage, IpcMessageType, ReplyChannel,
};
use std::time::Duration;

fn swarm() -> SwarmView {
    SwarmView {
        swarm_name: "default".into(),
        entry_agent: "alpha".into(),
        agents: vec!["alpha".into(), "beta".into()],
    }
}

/// The agents API of `alpha:main` and the orchestrator's end of its channel.
fn alpha() -> (IpcAgents, IpcChannel, AsyncResponseInbox) {
    let (agent_end, orchestrator_end) = IpcChannel::pair();
    let inbox = AsyncResponseInbox::new();
    let agents = IpcAgents::new(
        RoutingKey::new("alpha", "main"),
        swarm(),
        agent_end.sender,
        inbox.clone(),
    );
    (agents, orchestrator_end, inbox)
}

fn event(input: &str) -> AgentEvent {
    let mut event = AgentEvent::new(
        "agent.request",
        EventSource::new(EventSourceKind::Agent, "alpha"),
    );
    event.input = Some(input.into());
    event
}

fn answer_to(
    request: &IpcMessage,
    text: &str,
    error: Option<(&str, &str)>,
) -> (Answer, AgentEvent) {
    let request: AgentEvent = serde_json::from_value(request.payload.clone()).unwrap();
    let in_reply_to = request.reply_to.unwrap().correlation_id;
    let answer = match error {
        Some((code, message)) => Answer::failed(in_reply_to, code, message),
        None => Answer {
            in_reply_to,
            outcome: AnswerOutcome::Ok {
                text: Some(text.into()),
                finish_reason: None,
                turn_id: None,
                usage: None,
            },
        },
    };
    let event = answer.to_event("beta", None);
    (answer, event)
}

/// Hands an answer to `agents` as the host's reader task would.
fn deliver(agents: &IpcAgents, (answer, event): (Answer, AgentEvent)) -> bool {
    agents.accept_answer(answer, &event)
}

#[tokio::test]
async fn a_request_is_routed_by_key_and_its_answer_matched_by_correlation_id() {
    let (agents, mut orchestrator, _) = alpha();
    let mut input = event("hi");
    input.reply_to = Some(ReplyChannel {
        target: "orchestrator".into(),
        correlation_id: "outer".into(),
    });
    input.trace_id = Some("0123456789abcdef0123456789abcdef".into());
    agents.begin_turn(&input);
    let caller = agents.clone();
    let call = tokio::spawn(async move {
        caller
            .request(
                "beta",
                event("question"),
                AgentRuntimeRequestOptions::default(),
            )
            .await
    });
    let request = orchestrator.receiver.recv().await.unwrap();
    assert_eq!(request.message_type, IpcMessageType::Event);
    assert_eq!(request.from, "alpha:main");
    assert_eq!(request.to, "beta:main");
    let sent: AgentEvent = serde_json::from_value(request.payload.clone()).unwrap();
    assert_eq!(sent.reply_to.as_ref().unwrap().target, "alpha:main");
    assert_eq!(
        sent.call_chain,
        ["alpha:main"],
        "the waiting caller is in the chain"
    );
    assert_eq!(sent.trace_id, input.trace_id, "the trace id is kept");
    assert!(deliver(&agents, answer_to(&request, "42", None)));
    let result = call.await.unwrap().unwrap();
    assert_eq!(result.response, Some("42".into()));
    assert_eq!(result.target, "beta:main");
}

#[tokio::test]
async fn a_request_back_to_a_waiting_caller_is_a_cycle_at_once() {
    let (agents, mut orchestrator, _) = alpha();
    // alpha serves a request from beta, which waits for the answer.
    let mut input = event("from beta");
    input.reply_to = Some(ReplyChannel {
        target: "beta:main".into(),
        correlation_id: "c".into(),
    });
    input.call_chain = vec!["beta:main".into()];
    agents.begin_turn(&input);
    let error = agents
        .request("beta", event("back"), AgentRuntimeRequestOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_AGENT_CYCLE");
    let self_call = agents
        .request("alpha", event("me"), AgentRuntimeRequestOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(self_call, AgentsError::Cycle { .. }));
    assert!(
        orchestrator.receiver.try_recv().is_err(),
        "nothing was sent"
    );
}

#[tokio::test]
async fn unknown_targets_fail_without_sending() {
    let (agents, mut orchestrator, _) = alpha();
    let error = agents
        .request("ghost", event("x"), AgentRuntimeRequestOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_AGENT_UNKNOWN_TARGET");
    assert!(agents.send("ghost", event("x")).await.is_err());
    assert!(orchestrator.receiver.try_recv().is_err());
}

#[tokio::test]
async fn the_caller_owns_the_timeout() {
    let (agents, mut orchestrator, _) = alpha();
    let options = AgentRuntimeRequestOptions {
        timeout_ms: Some(50),
        r#async: None,
    };
    let started = std::time::Instant::now();
    let error = agents
        .request("beta", event("slow"), options)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_AGENT_REQUEST_TIMEOUT");
    assert!(started.elapsed() >= Duration::from_millis(50));
    // A late answer is refused, not swallowed: nobody waits for it.
    let request = orchestrator.receiver.recv().await.unwrap();
    assert!(!deliver(&agents, answer_to(&request, "late", None)));
}

#[tokio::test]
async fn an_error_answer_becomes_a_failed_call() {
    let (agents, mut orchestrator, _) = alpha();
    let caller = agents.clone();
    let call = tokio::spawn(async move {
        caller
            .request("beta", event("x"), AgentRuntimeRequestOptions::default())
            .await
    });
    let request = orchestrator.receiver.recv().await.unwrap();
    deliver(
        &agents,
        answer_to(&request, "", Some(("E_TURN_FAILED", "model down"))),
    );
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.code(), "E_AGENT_REQUEST_FAILED");
    assert!(error.to_string().contains("model down"));
}

#[tokio::test]
async fn an_async_request_acks_at_once_and_its_answer_lands_in_the_inbox() {
    let (agents, mut orchestrator, inbox) = alpha();
    let options = AgentRuntimeRequestOptions {
        timeout_ms: None,
        r#async: Some(true),
    };
    let ack = agents
        .request("beta", event("later"), options)
        .await
        .unwrap();
    assert_eq!(ack.accepted, Some(true));
    assert_eq!(ack.r#async, Some(true));
    assert!(inbox.is_empty());
    let request = orchestrator.receiver.recv().await.unwrap();
    assert!(deliver(&agents, answer_to(&request, "done", None)));
    let answers = inbox.drain();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].text, "done");
    assert_eq!(answers[0].metadata.kind, "inter_agent_response");
    assert_eq!(answers[0].metadata.request_id, ack.correlation_id);
    assert_eq!(answers[0].metadata.from_agent_id, "beta:main");
}

#[tokio::test]
async fn spawn_and_list_ask_the_orchestrator() {
    let (agents, mut orchestrator, _) = alpha();
    let caller = agents.clone();
    let call = tokio::spawn(async move {
        caller
            .spawn(
                "beta",
                goondan_types::agents::AgentRuntimeSpawnOptions {
                    instance_key: Some("worker-1".into()),
                    cwd: None,
                },
            )
            .await
    });
    let request = orchestrator.receiver.recv().await.unwrap();
    assert_eq!(request.to, ORCHESTRATOR);
    let Inbound::Runtime(RuntimeMessage::Query(query)) = protocol::decode(&request).unwrap() else {
        panic!("not a query: {request:?}");
    };
    assert_eq!(
        query.query,
        Query::Spawn {
            target: "beta:worker-1".into(),
            cwd: None
        }
    );
    assert!(agents.accept_query_answer(QueryAnswerMessage {
        in_reply_to: query.correlation_id,
        answer: QueryAnswer::Spawned { spawned: true },
    }));
    let spawned = call.await.unwrap().unwrap();
    assert!(spawned.spawned);
    assert_eq!(spawned.instance_key, "worker-1");
    let catalog = agents.catalog().await.unwrap();
    assert_eq!(catalog.callable_agents, ["beta"]);
}

#[tokio::test(start_paused = true)]
async fn a_request_without_a_timeout_waits_the_default_15_seconds() {
    let (agents, mut orchestrator, _) = alpha();
    let started = tokio::time::Instant::now();
    let error = agents
        .request("beta", event("slow"), AgentRuntimeRequestOptions::default())
        .await
        .unwrap_err();
    assert_eq!(DEFAULT_REQUEST_TIMEOUT_MS, 15_000);
    assert!(matches!(
        error,
        AgentsError::Timeout {
            timeout_ms: 15_000,
            ..
        }
    ));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(15_000) && waited < Duration::from_millis(15_100));
    assert!(orchestrator.receiver.recv().await.is_some());
}

#[tokio::test(start_paused = true)]
async fn an_async_request_expires_at_its_deadline_with_a_timeout_in_the_inbox() {
    let (agents, mut orchestrator, inbox) = alpha();
    let options = AgentRuntimeRequestOptions {
        timeout_ms: Some(1_000),
        r#async: Some(true),
    };
    agents
        .request("beta", event("later"), options)
        .await
        .unwrap();
    let request = orchestrator.receiver.recv().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_001)).await;
    let answers = inbox.drain();
    assert_eq!(answers.len(), 1);
    assert_eq!(
        answers[0].metadata.error_code.as_deref(),
        Some("E_AGENT_REQUEST_TIMEOUT")
    );
    assert!(
        !deliver(&agents, answer_to(&request, "too late", None)),
        "the expired request no longer waits"
    );
}

#[tokio::test]
async fn too_many_waiting_requests_fail_with_queue_full() {
    let (agents, mut orchestrator, _) = alpha();
    let agents = agents.with_max_pending_requests(2);
    let options = AgentRuntimeRequestOptions {
        timeout_ms: Some(60_000),
        r#async: Some(true),
    };
    for _ in 0..2 {
        agents
            .request("beta", event("x"), options.clone())
            .await
            .unwrap();
    }
    let error = agents
        .request("beta", event("x"), options)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_QUEUE_FULL");
    assert!(error.to_string().contains("limit 2"));
    let mut sent = 0;
    while orchestrator.receiver.try_recv().is_ok() {
        sent += 1;
    }
    assert_eq!(sent, 2, "the refused request was never sent");
}

#[tokio::test]
async fn a_refusal_naming_the_request_fails_it_at_once() {
    let (agents, mut orchestrator, _) = alpha();
    let caller = agents.clone();
    let call = tokio::spawn(async move {
        caller
            .request("beta", event("x"), AgentRuntimeRequestOptions::default())
            .await
    });
    let request = orchestrator.receiver.recv().await.unwrap();
    let sent: AgentEvent = serde_json::from_value(request.payload).unwrap();
    assert!(agents.reject(
        &sent.id,
        Failure {
            code: "E_QUEUE_FULL".into(),
            message: "beta:main has 1024 events waiting".into(),
            suggestion: None,
        }
    ));
    let error = call.await.unwrap().unwrap_err();
    assert!(error.to_string().contains("E_QUEUE_FULL"));
}

#[tokio::test]
async fn a_request_over_the_frame_bound_fails_at_once_and_sends_nothing() {
    let (agents, mut orchestrator, _) = alpha();
    let huge = "\"".repeat(goondan_ipc::framing::MAX_LINE_BYTES / 2 + 16);
    let error = agents
        .request("beta", event(&huge), AgentRuntimeRequestOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_IPC_TOO_LARGE");
    assert!(orchestrator.receiver.try_recv().is_err());
}

#[tokio::test]
async fn must_return_a_send_once_the_orchestrator_accepted_or_refused_it() {
    let (agents, mut orchestrator, _) = alpha();
    let sender = agents.clone();
    let sending = tokio::spawn(async move { sender.send("beta", event("fyi")).await });
    let posted = orchestrator.receiver.recv().await.unwrap();
    let sent: AgentEvent = serde_json::from_value(posted.payload).unwrap();
    assert!(sent.reply_to.is_none(), "a send asks for no answer");
    tokio::task::yield_now().await;
    assert!(
        !sending.is_finished(),
        "not before the orchestrator says so"
    );
    assert!(agents.accepted(&sent.id));
    assert!(sending.await.unwrap().unwrap().accepted);

    let sender = agents.clone();
    let refused = tokio::spawn(async move { sender.send("beta", event("fyi")).await });
    let posted = orchestrator.receiver.recv().await.unwrap();
    let sent: AgentEvent = serde_json::from_value(posted.payload).unwrap();
    assert!(agents.reject(
        &sent.id,
        Failure {
            code: "E_QUEUE_FULL".into(),
            message: "beta:main has 8 events queued".into(),
            suggestion: None,
        }
    ));
    let error = refused.await.unwrap().unwrap_err();
    assert!(error.to_string().contains("E_QUEUE_FULL"), "{error}");
}

#[tokio::test]
async fn a_caller_that_stops_waiting_cancels_its_request_but_a_finished_wait_does_not() {
    let (agents, mut orchestrator, _) = alpha();
    agents.begin_turn(&event("outer"));
    let caller = agents.clone();
    let call = tokio::spawn(async move {
        caller
            .request(
                "beta",
                event("long job"),
                AgentRuntimeRequestOptions::default(),
            )
            .await
    });
    let request = orchestrator.receiver.recv().await.unwrap();
    let request: AgentEvent = serde_json::from_value(request.payload.clone()).unwrap();
    // The caller's Turn is cancelled: its wait is dropped.
    call.abort();
    let _ = call.await;
    let cancel = orchestrator.receiver.recv().await.unwrap();
    assert_eq!(cancel.to, "orchestrator");
    assert_eq!(cancel.from, "alpha:main");
    match goondan_ipc::protocol::decode(&cancel) {
        Ok(goondan_ipc::Inbound::Runtime(RuntimeMessage::Cancel(cancel))) => {
            assert_eq!(cancel.event_id, request.id);
        }
        other => panic!("not a cancel: {other:?}"),
    }

    // A request that got its answer sends nothing more.
    let caller = agents.clone();
    let call = tokio::spawn(async move {
        caller
            .request(
                "beta",
                event("short job"),
                AgentRuntimeRequestOptions::default(),
            )
            .await
    });
    let request = orchestrator.receiver.recv().await.unwrap();
    assert!(deliver(&agents, answer_to(&request, "done", None)));
    assert!(call.await.unwrap().is_ok());
    assert!(orchestrator.receiver.try_recv().is_err());
}
