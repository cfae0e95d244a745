//! The main loop's state machines driven without processes: a fake
//! [`Spawner`] whose processes exit when the test says so, and a fake
//! [`Transport`] that records what is sent and lets the test speak for
//! each child. The control socket's tests drive the loop with the same
//! [`Harness`].

use super::*;
use crate::ingress::Ingress;
use crate::spawner::{ProcessControl, SpawnRequest, SpawnedProcess};
use goondan_ipc::protocol::{
    self, Answer, AnswerOutcome, Query, QueryAnswer, QueryAnswerMessage, QueryRequest, Ready,
    StartError, TurnFinished, PROTOCOL_VERSION,
};
use goondan_ipc::{
    Endpoint, Inbound, Link, RuntimeMessage, SendError, TransportEvent, ORCHESTRATOR,
};
use goondan_types::{AgentEvent, IpcMessage, ProcessStatus};
use std::sync::Mutex;

type Exit = Arc<Mutex<Option<oneshot::Sender<Option<i32>>>>>;

struct FakeControl {
    exit: Exit,
}

impl ProcessControl for FakeControl {
    fn id(&self) -> Option<u32> {
        None
    }

    fn kill(&mut self) {
        if let Some(exit) = self.exit.lock().unwrap().take() {
            let _ = exit.send(None);
        }
    }
}

#[derive(Default)]
struct FakeSpawner {
    exits: Mutex<Vec<Exit>>,
}

impl Spawner for FakeSpawner {
    fn spawn(&self, _request: &SpawnRequest) -> Result<SpawnedProcess, OrchestratorError> {
        let (exit_tx, exit_rx) = oneshot::channel();
        let exit: Exit = Arc::new(Mutex::new(Some(exit_tx)));
        self.exits.lock().unwrap().push(exit.clone());
        Ok(SpawnedProcess {
            // The fake transport ignores the endpoint: the test speaks for
            // the child.
            endpoint: Endpoint::Stdio {
                from_process: Box::new(tokio::io::empty()),
                to_process: Box::new(tokio::io::sink()),
            },
            control: Box::new(FakeControl { exit }),
            exit: Box::pin(async move { exit_rx.await.unwrap_or(None) }),
        })
    }
}

struct FakeTransport {
    opened: mpsc::UnboundedSender<Link>,
    sent: mpsc::UnboundedSender<(Link, IpcMessage)>,
    /// How many messages each link takes before reporting `Full`.
    capacity: Mutex<usize>,
}

impl Transport for FakeTransport {
    fn open(&self, link: Link, _endpoint: Endpoint) -> Result<(), goondan_ipc::IpcError> {
        let _ = self.opened.send(link);
        Ok(())
    }

    fn try_send(&self, link: &Link, message: IpcMessage) -> Result<(), SendError> {
        let bytes = goondan_ipc::framing::encode(&message).len();
        if bytes > goondan_ipc::framing::MAX_LINE_BYTES {
            return Err(SendError::TooLarge {
                message: Box::new(message),
                bytes,
            });
        }
        let mut capacity = self.capacity.lock().unwrap();
        if *capacity == 0 {
            return Err(SendError::Full(Box::new(message)));
        }
        *capacity -= 1;
        let _ = self.sent.send((link.clone(), message));
        Ok(())
    }

    fn close(&self, _link: &Link) {}
}

pub(crate) struct Harness {
    pub(crate) handle: OrchestratorHandle,
    spawner: Arc<FakeSpawner>,
    transport: Arc<FakeTransport>,
    events: mpsc::Sender<TransportEvent>,
    opened: mpsc::UnboundedReceiver<Link>,
    pub(crate) sent: mpsc::UnboundedReceiver<(Link, IpcMessage)>,
}

pub(crate) fn harness(max_queued_events: usize) -> Harness {
    harness_with(max_queued_events, ProcessPolicy::default())
}

fn harness_with(max_queued_events: usize, processes: ProcessPolicy) -> Harness {
    harness_full(max_queued_events, processes, None, None, None)
}

fn harness_full(
    max_queued_events: usize,
    processes: ProcessPolicy,
    restart_requests: Option<mpsc::Sender<SwarmRestartRequest>>,
    remote: Option<Arc<dyn crate::RemoteInstances>>,
    pending_approvals: Option<PendingApprovals>,
) -> Harness {
    let spawner = Arc::new(FakeSpawner::default());
    let (opened_tx, opened) = mpsc::unbounded_channel();
    let (sent_tx, sent) = mpsc::unbounded_channel();
    let transport = Arc::new(FakeTransport {
        opened: opened_tx,
        sent: sent_tx,
        capacity: Mutex::new(usize::MAX),
    });
    let (events_tx, events_rx) = std::sync::mpsc::channel();
    let factory_transport = transport.clone();
    let factory: TransportFactory = Box::new(move |events, _stats| {
        events_tx.send(events).unwrap();
        factory_transport
    });
    let (handle, _task) = Orchestrator::start(OrchestratorConfig {
        swarm: SwarmInfo {
            swarm_name: "s".into(),
            entry_agent: "alpha".into(),
            agents: vec!["alpha".into(), "beta".into()],
            instance_key: "main".into(),
            grace_period: Duration::from_secs(5),
            max_queued_events,
            processes,
            ingress: Vec::new(),
            cli_connection: None,
            connections: Vec::new(),
            approval_connections: Vec::new(),
        },
        spawner: spawner.clone(),
        transport: Some(factory),
        reconcile_interval: Duration::from_secs(3600),
        reset_instance: None,
        crash_ledger: None,
        // The fake children answer no ping; liveness has its own test.
        liveness: Liveness {
            interval: Duration::from_secs(24 * 3600),
            missed_pings: 3,
        },
        restart_requests,
        remote,
        inbox: None,
        pending_approvals,
    });
    Harness {
        handle,
        spawner,
        transport,
        events: events_rx.recv().unwrap(),
        opened,
        sent,
    }
}

impl Harness {
    async fn say(&self, link: &Link, message: IpcMessage) {
        self.events
            .send(TransportEvent::Message {
                link: link.clone(),
                message: Box::new(message),
            })
            .await
            .unwrap();
    }

    async fn ready(&self, link: &Link) {
        self.say(
            link,
            RuntimeMessage::Ready(Ready {
                protocol_version: PROTOCOL_VERSION,
            })
            .to_message(&link.key.to_string(), ORCHESTRATOR),
        )
        .await;
    }

    /// The next process started, already past its handshake.
    pub(crate) async fn next_ready_process(&mut self) -> Link {
        let link = self.opened.recv().await.unwrap();
        self.ready(&link).await;
        link
    }

    /// The next user event handed to a process.
    pub(crate) async fn next_event(&mut self) -> (Link, AgentEvent) {
        loop {
            let (link, message) = self.sent.recv().await.unwrap();
            if let Ok(Inbound::Event(event)) = protocol::decode(&message) {
                return (link, *event);
            }
        }
    }

    pub(crate) async fn answer(&self, link: &Link, event: &AgentEvent, text: &str) {
        let reply_to = event.reply_to.clone().unwrap();
        let answer = Answer {
            in_reply_to: reply_to.correlation_id,
            outcome: AnswerOutcome::Ok {
                text: Some(text.into()),
                finish_reason: None,
                turn_id: None,
                usage: None,
            },
        };
        self.say(
            link,
            protocol::event_message(
                &link.key.to_string(),
                ORCHESTRATOR,
                &answer.to_event(&link.key.agent_name, None),
            ),
        )
        .await;
        self.say(
            link,
            RuntimeMessage::TurnFinished(TurnFinished {
                ok: true,
                event_id: Some(event.id.clone()),
            })
            .to_message(&link.key.to_string(), ORCHESTRATOR),
        )
        .await;
    }

    /// Ends the process behind the `n`th spawn: its exit, then its stream.
    pub(crate) async fn end_process(&self, n: usize, link: &Link, code: Option<i32>) {
        let exit = self.spawner.exits.lock().unwrap()[n].clone();
        if let Some(exit) = exit.lock().unwrap().take() {
            let _ = exit.send(code);
        }
        self.events
            .send(TransportEvent::EndOfStream { link: link.clone() })
            .await
            .unwrap();
    }

    pub(crate) fn ask(
        &self,
        text: &str,
    ) -> tokio::task::JoinHandle<Result<AgentEvent, OrchestratorError>> {
        self.ask_agent(None, text)
    }

    fn ask_agent(
        &self,
        agent: Option<&str>,
        text: &str,
    ) -> tokio::task::JoinHandle<Result<AgentEvent, OrchestratorError>> {
        let handle = self.handle.clone();
        let ingress = Ingress::cli(text, agent.map(str::to_string));
        tokio::spawn(async move { handle.ask(ingress, None).await })
    }

    /// Alpha's process (`alpha`) sends beta a request for help, waiting on
    /// `correlation_id`; the request.
    async fn alpha_asks_beta(&self, alpha: &Link, correlation_id: &str) -> AgentEvent {
        let mut request = AgentEvent::new(
            "agent.request",
            goondan_types::EventSource::new(goondan_types::EventSourceKind::Agent, "alpha"),
        );
        request.input = Some("help".into());
        request.reply_to = Some(goondan_types::ReplyChannel {
            target: "alpha:main".into(),
            correlation_id: correlation_id.into(),
        });
        self.say(
            alpha,
            protocol::event_message("alpha:main", "beta:main", &request),
        )
        .await;
        request
    }

    /// Waits for a `shutdown` sent to `link`.
    pub(crate) async fn next_shutdown_to(&mut self, link: &Link) {
        loop {
            let (to, message) = self.sent.recv().await.unwrap();
            if to == *link && matches!(protocol::decode(&message), Ok(Inbound::Shutdown(_))) {
                return;
            }
        }
    }
}

fn answer_text(answer: &AgentEvent) -> Option<String> {
    match Answer::from_event(answer)?.outcome {
        AnswerOutcome::Ok { text, .. } => text,
        AnswerOutcome::Failed(_) => None,
    }
}

#[tokio::test]
async fn events_wait_for_the_handshake_then_the_answer_reaches_the_requester() {
    let mut h = harness(8);
    let asking = h.ask("hi");
    let link = h.opened.recv().await.unwrap();
    assert_eq!(link.key.to_string(), "alpha:main");
    tokio::task::yield_now().await;
    assert!(h.sent.try_recv().is_err(), "nothing before runtime.ready");
    h.ready(&link).await;
    let (to, event) = h.next_event().await;
    assert_eq!(to, link);
    assert_eq!(event.input.as_deref(), Some("hi"));
    h.answer(&link, &event, "hello").await;
    let answer = asking.await.unwrap().unwrap();
    assert_eq!(answer_text(&answer).as_deref(), Some("hello"));
}

#[tokio::test]
async fn a_burst_past_the_limit_is_refused_not_buffered() {
    let mut h = harness(4);
    let mut asking: Vec<_> = (0..4).map(|n| h.ask(&format!("q{n}"))).collect();
    let link = h.next_ready_process().await;
    let (_, first) = h.next_event().await;
    let refused = h.ask("one too many").await.unwrap().unwrap_err();
    assert_eq!(refused.code(), "E_QUEUE_FULL");
    assert!(
        refused.to_string().contains("4 events waiting"),
        "{refused}"
    );
    let list = h.handle.list().await.unwrap();
    assert_eq!(list[0].pending_events + list[0].in_flight_events, 4);
    // Finishing one Turn makes room for one more.
    h.answer(&link, &first, "a0").await;
    assert!(asking.remove(0).await.unwrap().is_ok());
    let accepted = h.ask("fits now");
    tokio::task::yield_now().await;
    assert!(!accepted.is_finished());
}

#[tokio::test]
async fn an_event_held_by_a_crashed_process_is_redelivered_and_answered_once() {
    let mut h = harness(8);
    let asking = h.ask("important");
    let first = h.next_ready_process().await;
    let (_, event) = h.next_event().await;
    assert!(!event.redelivered);
    h.end_process(0, &first, Some(9)).await;
    let second = h.next_ready_process().await;
    assert_eq!(second.key, first.key);
    assert!(second.generation > first.generation);
    let (to, again) = h.next_event().await;
    assert_eq!(to, second);
    assert_eq!(again.id, event.id, "the same event, not a copy");
    assert!(again.redelivered);
    // A late answer from the dead process is fenced off.
    h.answer(&first, &event, "from the dead").await;
    h.answer(&second, &again, "from the living").await;
    let answer = asking.await.unwrap().unwrap();
    assert_eq!(answer_text(&answer).as_deref(), Some("from the living"));
}

#[tokio::test]
async fn an_event_that_kills_every_process_is_given_up_with_the_cause() {
    let mut h = harness(8);
    let asking = h.ask("poison");
    for n in 0..MAX_DELIVERY_ATTEMPTS as usize {
        let link = h.next_ready_process().await;
        let _ = h.next_event().await;
        h.end_process(n, &link, Some(101)).await;
    }
    let error = asking.await.unwrap().unwrap_err();
    assert_eq!(error.code(), "E_AGENT_CRASHED");
    assert!(error.to_string().contains("died 3 times"), "{error}");
    assert!(error.to_string().contains("exit code 101"), "{error}");
}

#[tokio::test]
async fn a_full_link_keeps_the_event_queued_until_it_drains() {
    let mut h = harness(8);
    *h.transport.capacity.lock().unwrap() = 0;
    let _asking = h.ask("later");
    let link = h.next_ready_process().await;
    tokio::task::yield_now().await;
    assert!(h.sent.try_recv().is_err());
    assert_eq!(h.handle.list().await.unwrap()[0].pending_events, 1);
    *h.transport.capacity.lock().unwrap() = usize::MAX;
    // Any input wakes the loop, which hands the queue over.
    h.ready(&link).await;
    let (_, event) = h.next_event().await;
    assert_eq!(event.input.as_deref(), Some("later"));
}

#[tokio::test]
async fn a_child_of_another_protocol_version_fails_its_requests() {
    let mut h = harness(8);
    let asking = h.ask("hi");
    let link = h.opened.recv().await.unwrap();
    h.say(
        &link,
        RuntimeMessage::Ready(Ready {
            protocol_version: PROTOCOL_VERSION + 1,
        })
        .to_message(&link.key.to_string(), ORCHESTRATOR),
    )
    .await;
    let error = asking.await.unwrap().unwrap_err();
    assert_eq!(error.code(), "E_IPC_PROTOCOL_VERSION");
}

#[tokio::test]
async fn a_malformed_child_message_is_answered_with_a_rejection() {
    let mut h = harness(8);
    let _asking = h.ask("hi");
    let link = h.next_ready_process().await;
    let _ = h.next_event().await;
    let mut bogus = AgentEvent::new(
        "runtime.teleport",
        goondan_types::EventSource::new(goondan_types::EventSourceKind::Agent, "alpha"),
    );
    bogus.id = "evt_bogus".into();
    h.say(
        &link,
        protocol::event_message(&link.key.to_string(), ORCHESTRATOR, &bogus),
    )
    .await;
    loop {
        let (_, message) = h.sent.recv().await.unwrap();
        if let Ok(Inbound::Runtime(RuntimeMessage::Rejected(rejected))) = protocol::decode(&message)
        {
            assert_eq!(rejected.code, "E_IPC_UNKNOWN_MESSAGE");
            assert_eq!(rejected.event_id.as_deref(), Some("evt_bogus"));
            break;
        }
    }
    assert_eq!(h.handle.protocol_stats().unknown(), 1);
}

#[tokio::test]
async fn a_restart_redelivers_events_the_drained_process_never_started() {
    let mut h = harness(8);
    let first_ask = h.ask("one");
    let second_ask = h.ask("two");
    let first = h.next_ready_process().await;
    let (_, one) = h.next_event().await;
    let (_, two) = h.next_event().await;
    assert_eq!(
        h.handle.restart(None, None, false).await.unwrap(),
        ["alpha:main"]
    );
    // The process finishes the Turn it is in, acknowledges and exits.
    h.answer(&first, &one, "1").await;
    h.end_process(0, &first, Some(0)).await;
    assert_eq!(
        answer_text(&first_ask.await.unwrap().unwrap()).as_deref(),
        Some("1")
    );
    let second = h.next_ready_process().await;
    let (_, again) = h.next_event().await;
    assert_eq!(again.id, two.id);
    h.answer(&second, &again, "2").await;
    assert_eq!(
        answer_text(&second_ask.await.unwrap().unwrap()).as_deref(),
        Some("2")
    );
}

#[tokio::test(start_paused = true)]
async fn an_exit_without_the_end_of_its_stream_is_over_after_the_deadline() {
    let mut h = harness(8);
    let asking = h.ask("x");
    let first = h.next_ready_process().await;
    let _ = h.next_event().await;
    // The process dies but a grandchild keeps its pipe open: no end of
    // stream ever comes.
    let exit = h.spawner.exits.lock().unwrap()[0].clone();
    let _ = exit.lock().unwrap().take().unwrap().send(Some(1));
    tokio::time::sleep(ENDING_DEADLINE + Duration::from_millis(10)).await;
    let second = h.next_ready_process().await;
    assert!(second.generation > first.generation);
    let (_, again) = h.next_event().await;
    assert!(again.redelivered);
    h.answer(&second, &again, "ok").await;
    assert!(asking.await.unwrap().is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_process_that_closed_its_output_but_lives_on_is_killed() {
    let mut h = harness(8);
    let _asking = h.ask("x");
    let first = h.next_ready_process().await;
    let _ = h.next_event().await;
    h.events
        .send(TransportEvent::EndOfStream {
            link: first.clone(),
        })
        .await
        .unwrap();
    tokio::time::sleep(ENDING_DEADLINE + Duration::from_millis(10)).await;
    let killed = h.spawner.exits.lock().unwrap()[0].lock().unwrap().is_none();
    assert!(killed, "the silent process was killed");
    let second = h.next_ready_process().await;
    assert!(second.generation > first.generation);
}

#[tokio::test]
async fn an_event_over_the_frame_bound_fails_at_once_and_the_instance_serves_on() {
    let mut h = harness(8);
    let huge = "\"".repeat(goondan_ipc::framing::MAX_LINE_BYTES / 2 + 16);
    let asking = h.ask(&huge);
    let link = h.next_ready_process().await;
    let error = asking.await.unwrap().unwrap_err();
    assert_eq!(error.code(), "E_IPC_TOO_LARGE");
    let next = h.ask("small");
    let (_, event) = h.next_event().await;
    assert_eq!(event.input.as_deref(), Some("small"));
    h.answer(&link, &event, "ok").await;
    assert!(next.await.unwrap().is_ok());
}

/// tool.md §11.1: `agents__send` is answered once the orchestrator
/// accepted the event, before any process of its target took it (here
/// the target's process has not even finished its handshake).
#[tokio::test]
async fn must_answer_a_send_once_accepted_not_once_its_target_took_it() {
    let mut h = harness(8);
    let _asking = h.ask("start alpha");
    let alpha = h.next_ready_process().await;
    let _ = h.next_event().await;
    let mut note = AgentEvent::new(
        "note",
        goondan_types::EventSource::new(goondan_types::EventSourceKind::Agent, "alpha"),
    );
    note.input = Some("fyi".into());
    h.say(
        &alpha,
        protocol::event_message("alpha:main", "beta:main", &note),
    )
    .await;
    let accepted = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let (to, message) = h.sent.recv().await.unwrap();
            if let Ok(Inbound::Runtime(RuntimeMessage::Accepted(accepted))) =
                protocol::decode(&message)
            {
                return (to, accepted);
            }
        }
    })
    .await
    .expect("the sender was not told while its target had no process");
    assert_eq!(accepted.0, alpha);
    assert_eq!(accepted.1.event_id, note.id);
    // Only now does beta's process come up, and it still gets the event.
    let beta = h.next_ready_process().await;
    assert_eq!(beta.key.to_string(), "beta:main");
    let (to, event) = h.next_event().await;
    assert_eq!(to, beta);
    assert_eq!(event.id, note.id);
}

/// Issue 16 #14: at the cap, the least recently used idle instance is
/// passivated for a new one (which starts once the slot is free); with
/// none idle, a new instance is refused with `E_INSTANCE_LIMIT`.
#[tokio::test]
async fn at_the_process_cap_an_idle_instance_is_passivated_or_the_new_one_refused() {
    let mut h = harness_with(
        8,
        ProcessPolicy {
            max_live: 1,
            idle_after: None,
        },
    );
    let asking = h.ask_agent(Some("alpha"), "a");
    let alpha = h.next_ready_process().await;
    let (_, event) = h.next_event().await;
    h.answer(&alpha, &event, "A").await;
    assert!(asking.await.unwrap().is_ok());

    let asking = h.ask_agent(Some("beta"), "b");
    h.next_shutdown_to(&alpha).await;
    tokio::task::yield_now().await;
    assert!(h.opened.try_recv().is_err(), "beta waits for the slot");
    h.end_process(0, &alpha, Some(0)).await;
    let beta = h.next_ready_process().await;
    assert_eq!(beta.key.agent_name, "beta");
    let (_, event) = h.next_event().await;
    h.answer(&beta, &event, "B").await;
    assert!(asking.await.unwrap().is_ok());
    let alpha_status = h.handle.list().await.unwrap();
    let alpha_status = alpha_status.iter().find(|s| s.key == "alpha:main").unwrap();
    assert_eq!(
        alpha_status.consecutive_crashes, 0,
        "a passivation is no crash"
    );

    // Beta is busy now: nothing is idle, so alpha cannot come back.
    let _busy = h.ask_agent(Some("beta"), "busy");
    let _ = h.next_event().await;
    let refused = h
        .ask_agent(Some("alpha"), "again")
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.code(), "E_INSTANCE_LIMIT", "{refused}");
    assert!(refused.suggestion().unwrap().contains("maxLive"));
}

/// Issue 16 #14: an instance without a Turn for `idleSeconds` is
/// passivated (not a crash) and its next event starts it again.
#[tokio::test(start_paused = true)]
async fn an_idle_instance_is_passivated_and_reactivated_by_its_next_event() {
    let mut h = harness_with(
        8,
        ProcessPolicy {
            max_live: 8,
            idle_after: Some(Duration::from_secs(60)),
        },
    );
    let asking = h.ask("one");
    let first = h.next_ready_process().await;
    let (_, event) = h.next_event().await;
    h.answer(&first, &event, "1").await;
    assert!(asking.await.unwrap().is_ok());
    tokio::time::sleep(Duration::from_secs(61)).await;
    h.next_shutdown_to(&first).await;
    h.end_process(0, &first, Some(0)).await;
    tokio::task::yield_now().await;
    let status = h.handle.list().await.unwrap();
    assert_eq!(status[0].status, ProcessStatus::Terminated);
    assert_eq!(status[0].consecutive_crashes, 0);
    let asking = h.ask("two");
    let second = h.next_ready_process().await;
    assert!(second.generation > first.generation);
    let (_, event) = h.next_event().await;
    h.answer(&second, &event, "2").await;
    assert!(asking.await.unwrap().is_ok());
}

/// Issue 16 #14: an instance that takes its slot back while another waits
/// for it (an event arrived during its passivation) is passivated again as
/// soon as it is idle, so the waiting one is not starved.
#[tokio::test]
async fn an_instance_waiting_for_a_slot_gets_one_when_the_holder_turns_idle() {
    let mut h = harness_with(
        8,
        ProcessPolicy {
            max_live: 1,
            idle_after: None,
        },
    );
    let asking = h.ask_agent(Some("alpha"), "a");
    let alpha = h.next_ready_process().await;
    let (_, event) = h.next_event().await;
    h.answer(&alpha, &event, "A").await;
    assert!(asking.await.unwrap().is_ok());

    let beta_asking = h.ask_agent(Some("beta"), "b");
    h.next_shutdown_to(&alpha).await;
    // Alpha gets an event while it drains: it comes back first.
    let alpha_asking = h.ask_agent(Some("alpha"), "again");
    tokio::task::yield_now().await;
    h.end_process(0, &alpha, Some(0)).await;
    let alpha_again = h.next_ready_process().await;
    assert_eq!(alpha_again.key.agent_name, "alpha");
    let (_, event) = h.next_event().await;
    h.answer(&alpha_again, &event, "A2").await;
    assert!(alpha_asking.await.unwrap().is_ok());
    // Idle now: it gives the slot to beta.
    h.next_shutdown_to(&alpha_again).await;
    h.end_process(1, &alpha_again, Some(0)).await;
    let beta = h.next_ready_process().await;
    assert_eq!(beta.key.agent_name, "beta");
    let (_, event) = h.next_event().await;
    h.answer(&beta, &event, "B").await;
    assert!(beta_asking.await.unwrap().is_ok());
}

#[tokio::test]
async fn events_sent_during_a_config_restart_wait_for_the_new_process() {
    let mut h = harness(8);
    let first_ask = h.ask("one");
    let first = h.next_ready_process().await;
    let (_, one) = h.next_event().await;
    assert_eq!(
        h.handle
            .restart_for_config(vec!["alpha".into()], Vec::new())
            .await
            .unwrap(),
        ["alpha:main"]
    );
    h.next_shutdown_to(&first).await;
    // Sent while the old process drains: it waits in the queue.
    let second_ask = h.ask("two");
    h.answer(&first, &one, "1").await;
    h.end_process(0, &first, Some(0)).await;
    assert_eq!(
        answer_text(&first_ask.await.unwrap().unwrap()).as_deref(),
        Some("1")
    );
    let second = h.next_ready_process().await;
    assert_ne!(second.generation, first.generation);
    let (to, two) = h.next_event().await;
    assert_eq!(to, second);
    assert_eq!(two.input.as_deref(), Some("two"));
    h.answer(&second, &two, "2").await;
    assert_eq!(
        answer_text(&second_ask.await.unwrap().unwrap()).as_deref(),
        Some("2")
    );
}

#[tokio::test]
async fn reconfigure_starts_new_connections_and_stops_removed_ones() {
    let mut h = harness(8);
    let mut swarm = (*h.handle.swarm()).clone();
    swarm.connections = vec!["hook".into()];
    h.handle.reconfigure(swarm.clone()).await.unwrap();
    let connector = h.next_ready_process().await;
    assert_eq!(connector.key, RoutingKey::connection("hook"));
    assert_eq!(h.handle.swarm().connections, ["hook"]);
    // A config restart of the Connection replaces its process.
    assert_eq!(
        h.handle
            .restart_for_config(Vec::new(), vec!["hook".into()])
            .await
            .unwrap(),
        ["@connection:hook"]
    );
    h.next_shutdown_to(&connector).await;
    h.end_process(0, &connector, Some(0)).await;
    let replaced = h.next_ready_process().await;
    assert_eq!(replaced.key, connector.key);
    swarm.connections.clear();
    h.handle.reconfigure(swarm).await.unwrap();
    h.next_shutdown_to(&replaced).await;
    h.end_process(1, &replaced, Some(0)).await;
    assert!(h.handle.swarm().connections.is_empty());
}

impl Harness {
    /// The next process started, which refuses to start with `code` and
    /// exits with `exit` (it is the `n`th spawn).
    async fn next_refused_process(&mut self, n: usize, code: &str, exit: i32) -> Link {
        let link = self.opened.recv().await.unwrap();
        let refusal = StartError::new(code, "no signing secret").with_suggestion("set it");
        self.say(
            &link,
            RuntimeMessage::StartError(refusal).to_message(&link.key.to_string(), ORCHESTRATOR),
        )
        .await;
        self.end_process(n, &link, Some(exit)).await;
        link
    }
}

/// Issue 48: a connector its bundle refused (a start error, then
/// `EXIT_REFUSED_BY_CONFIG`) is kept down with its refusal in its status,
/// not respawned in a loop, until a restart asks for it again; one that
/// failed for a reason that may pass is respawned.
#[tokio::test]
async fn a_connector_its_bundle_refused_stays_down_until_a_restart() {
    let mut h = harness(8);
    let mut swarm = (*h.handle.swarm()).clone();
    swarm.connections = vec!["slack".into()];
    h.handle.reconfigure(swarm).await.unwrap();
    let refused = h
        .next_refused_process(0, "E_CONNECTOR_CONFIG", protocol::EXIT_REFUSED_BY_CONFIG)
        .await;
    assert_eq!(refused.key, RoutingKey::connection("slack"));
    let status = loop {
        let connections = h.handle.connections().await.unwrap();
        if connections[0].refused_by_config {
            break connections[0].clone();
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(status.status, ProcessStatus::Crashed);
    assert_eq!(status.pid, None);
    assert_eq!(status.last_error.unwrap().code, "E_CONNECTOR_CONFIG");
    // A respawn after a crash is started while the exit is handled, before
    // the status above was answered: none was.
    assert!(
        h.opened.try_recv().is_err(),
        "a refused connector was respawned"
    );

    // A restart (after the bundle changed) tries again; this time the
    // port is taken, which may pass: it is respawned at once.
    assert_eq!(
        h.handle.restart(None, None, false).await.unwrap(),
        ["@connection:slack"]
    );
    h.next_refused_process(1, "E_CONNECTOR_BIND", protocol::EXIT_START_FAILED)
        .await;
    let replaced = h.next_ready_process().await;
    assert_eq!(replaced.key, refused.key);
    let connections = h.handle.connections().await.unwrap();
    assert!(!connections[0].refused_by_config);
    assert_eq!(connections[0].status, ProcessStatus::Idle);
}

#[tokio::test]
async fn reconfigure_stops_the_instances_of_an_agent_the_swarm_lost() {
    let mut h = harness(8);
    let asking = h.ask_agent(Some("beta"), "x");
    let beta = h.next_ready_process().await;
    let (_, x) = h.next_event().await;
    h.answer(&beta, &x, "done").await;
    asking.await.unwrap().unwrap();
    let mut swarm = (*h.handle.swarm()).clone();
    swarm.agents = vec!["alpha".into()];
    h.handle.reconfigure(swarm).await.unwrap();
    h.next_shutdown_to(&beta).await;
}

#[tokio::test]
async fn a_draining_process_still_gets_the_answer_its_last_turn_waits_for() {
    let mut h = harness(8);
    let _asking = h.ask("one");
    let alpha = h.next_ready_process().await;
    let _ = h.next_event().await;
    // Alpha's Turn asks beta and waits.
    h.alpha_asks_beta(&alpha, "corr-1").await;
    let beta = h.next_ready_process().await;
    let (to, _) = h.next_event().await;
    assert_eq!(to, beta);
    // Alpha drains (a config restart) before beta answers.
    h.handle
        .restart_for_config(vec!["alpha".into()], Vec::new())
        .await
        .unwrap();
    h.next_shutdown_to(&alpha).await;
    let answer = Answer {
        in_reply_to: "corr-1".into(),
        outcome: AnswerOutcome::Ok {
            text: Some("helped".into()),
            finish_reason: None,
            turn_id: None,
            usage: None,
        },
    };
    h.say(
        &beta,
        protocol::event_message("beta:main", "alpha:main", &answer.to_event("beta", None)),
    )
    .await;
    let delivered = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let (to, message) = h.sent.recv().await.unwrap();
            if let Ok(Inbound::Answer(answer, _)) = protocol::decode(&message) {
                return (to, answer.in_reply_to);
            }
        }
    })
    .await
    .expect("the answer was held back from the draining process");
    assert_eq!(delivered, (alpha, "corr-1".to_string()));
}

/// Alpha asks for a swarm restart; the answer it gets.
async fn ask_for_restart(h: &mut Harness, alpha: &Link) -> QueryAnswerMessage {
    let query = RuntimeMessage::Query(QueryRequest {
        correlation_id: "corr-restart".into(),
        query: Query::Restart {
            reason: "edited".into(),
        },
    });
    h.say(alpha, query.to_message("alpha:main", ORCHESTRATOR))
        .await;
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let (to, message) = h.sent.recv().await.unwrap();
            if let Ok(Inbound::Runtime(RuntimeMessage::QueryAnswer(answer))) =
                protocol::decode(&message)
            {
                assert_eq!(to, *alpha);
                return answer;
            }
        }
    })
    .await
    .expect("no answer to the restart query")
}

#[tokio::test]
async fn a_restart_request_is_handed_out_and_answered_through_the_handle() {
    let (requests_tx, mut requests) = mpsc::channel(1);
    let mut h = harness_full(8, ProcessPolicy::default(), Some(requests_tx), None, None);
    let _asking = h.ask("one");
    let alpha = h.next_ready_process().await;
    let _ = h.next_event().await;
    let handle = h.handle.clone();
    let answering = tokio::spawn(async move {
        let request = requests.recv().await.unwrap();
        assert_eq!(request.from.to_string(), "alpha:main");
        assert_eq!(request.reason, "edited");
        handle
            .answer_query(
                request.from,
                request.correlation_id,
                QueryAnswer::RestartScheduled,
            )
            .await
            .unwrap();
    });
    let answer = ask_for_restart(&mut h, &alpha).await;
    answering.await.unwrap();
    assert_eq!(answer.in_reply_to, "corr-restart");
    assert_eq!(answer.answer, QueryAnswer::RestartScheduled);
}

#[tokio::test]
async fn a_restart_request_with_nothing_to_reload_the_bundle_is_refused() {
    let mut h = harness(8);
    let _asking = h.ask("one");
    let alpha = h.next_ready_process().await;
    let _ = h.next_event().await;
    let answer = ask_for_restart(&mut h, &alpha).await;
    match answer.answer {
        QueryAnswer::Failed(failure) => assert_eq!(failure.code, "E_RESTART_UNAVAILABLE"),
        other => panic!("answered {other:?}"),
    }
}

#[tokio::test]
async fn a_cancelled_request_is_dropped_while_queued_and_signalled_once_handed_over() {
    let mut h = harness(8);
    // Queued behind a process that has not finished its handshake: taken
    // out and answered by the orchestrator, never handed over.
    let queued = h
        .handle
        .enqueue(Ingress::cli("never mind", None), None)
        .await
        .unwrap();
    let link = h.opened.recv().await.unwrap();
    assert!(h
        .handle
        .cancel(queued.event_id().to_string())
        .await
        .unwrap());
    let answer = queued.answer().await.unwrap();
    let Some(AnswerOutcome::Failed(failure)) = Answer::from_event(&answer).map(|a| a.outcome)
    else {
        panic!("not a failure: {answer:?}");
    };
    assert_eq!(failure.code, "E_TURN_CANCELLED");

    // Handed over: the process is told to cancel it, and its answer (a
    // failure, from the agent) still reaches the requester.
    h.ready(&link).await;
    let running = h
        .handle
        .enqueue(Ingress::cli("long job", None), None)
        .await
        .unwrap();
    let (_, event) = h.next_event().await;
    assert_eq!(event.id, running.event_id());
    assert_eq!(event.input.as_deref(), Some("long job"));
    assert!(h.handle.cancel(event.id.clone()).await.unwrap());
    loop {
        let (to, message) = h.sent.recv().await.unwrap();
        if let Ok(Inbound::Runtime(RuntimeMessage::Cancel(cancel))) = protocol::decode(&message) {
            assert_eq!(to, link);
            assert_eq!(cancel.event_id, event.id);
            break;
        }
    }
    h.answer(&link, &event, "stopped").await;
    assert_eq!(
        answer_text(&running.answer().await.unwrap()).as_deref(),
        Some("stopped")
    );
    // Nothing waits any more: a second cancel finds nothing.
    assert!(!h.handle.cancel(event.id).await.unwrap());
}

#[tokio::test]
async fn a_caller_that_stops_waiting_cancels_its_request_and_only_its_own() {
    let mut h = harness(8);
    let _asking = h.ask("one");
    let alpha = h.next_ready_process().await;
    let _ = h.next_event().await;
    let request = h.alpha_asks_beta(&alpha, "corr-2").await;
    let beta = h.next_ready_process().await;
    let (to, delivered) = h.next_event().await;
    assert_eq!(
        (to, delivered.id.as_str()),
        (beta.clone(), request.id.as_str())
    );
    let cancel = |from: &Link| {
        RuntimeMessage::Cancel(protocol::Cancel {
            event_id: request.id.clone(),
            cancelled_by: None,
        })
        .to_message(&from.key.to_string(), ORCHESTRATOR)
    };
    // Beta did not send the request: its cancel is ignored.
    h.say(&beta, cancel(&beta)).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    while let Ok((_, message)) = h.sent.try_recv() {
        assert!(
            !matches!(
                protocol::decode(&message),
                Ok(Inbound::Runtime(RuntimeMessage::Cancel(_)))
            ),
            "a cancel from a process that did not send the request went through"
        );
    }
    // Alpha stopped waiting: beta is told to cancel the Turn.
    h.say(&alpha, cancel(&alpha)).await;
    loop {
        let (to, message) = h.sent.recv().await.unwrap();
        if let Ok(Inbound::Runtime(RuntimeMessage::Cancel(cancel))) = protocol::decode(&message) {
            assert_eq!(to, beta);
            assert_eq!(cancel.event_id, request.id);
            break;
        }
    }
}

#[tokio::test]
async fn a_cancelled_event_whose_process_dies_is_not_run_again() {
    let mut h = harness(8);
    let running = h
        .handle
        .enqueue(Ingress::cli("long job", None), None)
        .await
        .unwrap();
    let link = h.next_ready_process().await;
    let (_, event) = h.next_event().await;
    assert!(h.handle.cancel(event.id.clone()).await.unwrap());
    // The process dies before it says the Turn was cancelled.
    h.end_process(0, &link, None).await;
    let refused = tokio::time::timeout(Duration::from_secs(10), running.answer())
        .await
        .expect("the requester is answered, not left waiting for a rerun")
        .unwrap_err();
    assert_eq!(refused.code(), "E_TURN_CANCELLED");
    // A crashed instance is started again, but the event is not handed to
    // the new process.
    let again = h.next_ready_process().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    while let Ok((to, message)) = h.sent.try_recv() {
        assert!(
            !(to == again && matches!(protocol::decode(&message), Ok(Inbound::Event(_)))),
            "the cancelled event was redelivered"
        );
    }
}

/// Another host serves `beta`; what is forwarded to it waits for the test
/// to say whether its inbox stored it.
struct FakeRemote {
    forwarded: mpsc::UnboundedSender<(IpcMessage, oneshot::Sender<crate::ForwardOutcome>)>,
}

impl crate::RemoteInstances for FakeRemote {
    fn serves(&self, key: &RoutingKey) -> bool {
        key.agent_name != "beta"
    }

    fn forward(&self, message: IpcMessage) -> crate::ForwardReceipt {
        let (stored, receipt) = oneshot::channel();
        let _ = self.forwarded.send((message, stored));
        receipt
    }
}

/// A harness whose `beta` runs on another host, and what is forwarded to
/// it.
fn harness_with_beta_elsewhere() -> (
    Harness,
    mpsc::UnboundedReceiver<(IpcMessage, oneshot::Sender<crate::ForwardOutcome>)>,
) {
    let (forwarded_tx, forwarded) = mpsc::unbounded_channel();
    let remote = Arc::new(FakeRemote {
        forwarded: forwarded_tx,
    });
    let h = harness_full(8, ProcessPolicy::default(), None, Some(remote), None);
    (h, forwarded)
}

/// The next runtime message sent to `to` within `wait`, skipping others.
async fn next_runtime_to(h: &mut Harness, to: &Link, wait: Duration) -> Option<RuntimeMessage> {
    tokio::time::timeout(wait, async {
        loop {
            let (link, message) = h.sent.recv().await.unwrap();
            if let (true, Ok(Inbound::Runtime(runtime))) = (link == *to, protocol::decode(&message))
            {
                return runtime;
            }
        }
    })
    .await
    .ok()
}

/// Alpha's process, past its first event.
async fn running_alpha(h: &mut Harness) -> Link {
    let _asking = h.ask("start alpha");
    let alpha = h.next_ready_process().await;
    let _ = h.next_event().await;
    alpha
}

/// Issue 35: a fire-and-forget send to an instance another host serves is
/// `Accepted` only once that instance's inbox stored it, and refused with
/// `E_FORWARD_FAILED` when it was not.
#[tokio::test]
async fn issue_35_a_send_to_another_hosts_instance_is_accepted_only_once_its_inbox_stored_it() {
    let (mut h, mut forwarded) = harness_with_beta_elsewhere();
    let alpha = running_alpha(&mut h).await;
    let mut stored_note = AgentEvent::new(
        "note",
        goondan_types::EventSource::new(goondan_types::EventSourceKind::Agent, "alpha"),
    );
    stored_note.input = Some("fyi".into());
    h.say(
        &alpha,
        protocol::event_message("alpha:main", "beta:main", &stored_note),
    )
    .await;
    let (message, stored) = forwarded.recv().await.unwrap();
    assert_eq!(message.to, "beta:main");
    let early = next_runtime_to(&mut h, &alpha, Duration::from_millis(100)).await;
    assert_eq!(early, None, "acknowledged before the inbox stored it");
    stored.send(Ok(())).unwrap();
    match next_runtime_to(&mut h, &alpha, Duration::from_secs(5)).await {
        Some(RuntimeMessage::Accepted(accepted)) => assert_eq!(accepted.event_id, stored_note.id),
        other => panic!("not accepted: {other:?}"),
    }

    let lost_note = AgentEvent::new(
        "note",
        goondan_types::EventSource::new(goondan_types::EventSourceKind::Agent, "alpha"),
    );
    h.say(
        &alpha,
        protocol::event_message("alpha:main", "beta:main", &lost_note),
    )
    .await;
    let (_, stored) = forwarded.recv().await.unwrap();
    stored
        .send(Err(goondan_types::ErrorBody::new(
            "E_CLUSTER_TIMEOUT",
            "no PubAck",
        )))
        .unwrap();
    match next_runtime_to(&mut h, &alpha, Duration::from_secs(5)).await {
        Some(RuntimeMessage::Rejected(rejected)) => {
            assert!(
                rejected.is(goondan_ipc::WireCode::ForwardFailed),
                "{rejected:?}"
            );
            assert_eq!(rejected.event_id.as_deref(), Some(lost_note.id.as_str()));
        }
        other => panic!("not refused: {other:?}"),
    }
}

/// Issue 35: a request to another host's instance that its inbox did not
/// store fails back to its caller at once instead of at its timeout; one
/// it stored is acknowledged by nothing but its answer.
#[tokio::test]
async fn issue_35_a_request_another_hosts_inbox_did_not_store_fails_back_at_once() {
    let (mut h, mut forwarded) = harness_with_beta_elsewhere();
    let alpha = running_alpha(&mut h).await;
    h.alpha_asks_beta(&alpha, "corr-stored").await;
    let (_, stored) = forwarded.recv().await.unwrap();
    stored.send(Ok(())).unwrap();
    h.alpha_asks_beta(&alpha, "corr-lost").await;
    let (_, stored) = forwarded.recv().await.unwrap();
    // A dropped receipt: the door closed before it stored anything.
    drop(stored);
    let answer = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let (to, message) = h.sent.recv().await.unwrap();
            if let Ok(Inbound::Answer(answer, _)) = protocol::decode(&message) {
                assert_eq!(to, alpha);
                return answer;
            }
        }
    })
    .await
    .expect("a failed answer");
    assert_eq!(answer.in_reply_to, "corr-lost", "only the lost request");
    match answer.outcome {
        AnswerOutcome::Failed(failure) => {
            assert_eq!(failure.code, goondan_ipc::WireCode::ForwardFailed.as_str())
        }
        other => panic!("answered {other:?}"),
    }
}

#[tokio::test]
async fn an_operator_cancel_stops_the_running_turn_naming_who_and_waits_until_it_ended() {
    let mut h = harness(8);
    assert_eq!(
        h.handle
            .cancel_running("main".into(), "cli".into(), Duration::from_millis(50))
            .await
            .unwrap_err()
            .code(),
        "E_NO_TURN_RUNNING",
        "nothing runs yet"
    );
    let asked = h.ask("long job");
    let link = h.next_ready_process().await;
    let (_, event) = h.next_event().await;
    let handle = h.handle.clone();
    let cancelling = tokio::spawn(async move {
        handle
            .cancel_running("main".into(), "cli".into(), Duration::from_secs(5))
            .await
    });
    loop {
        let (to, message) = h.sent.recv().await.unwrap();
        if let Ok(Inbound::Runtime(RuntimeMessage::Cancel(cancel))) = protocol::decode(&message) {
            assert_eq!(to, link);
            assert_eq!(cancel.event_id, event.id);
            assert_eq!(cancel.cancelled_by.as_deref(), Some("cli"));
            break;
        }
    }
    // The wait lasts until the process says the Turn is over.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!cancelling.is_finished());
    h.answer(&link, &event, "stopped").await;
    let outcome = cancelling.await.unwrap().unwrap();
    assert!(outcome.ended);
    assert_eq!(
        outcome.cancelled,
        [CancelledTurn {
            key: "alpha:main".into(),
            event_id: event.id.clone(),
        }]
    );
    assert!(asked.await.unwrap().is_ok());
}

#[tokio::test]
async fn a_hold_is_refused_while_a_turn_runs_else_stops_the_process_and_keeps_events_waiting() {
    let mut h = harness(8);
    let asked = h.ask("first");
    let link = h.next_ready_process().await;
    let (_, event) = h.next_event().await;
    assert_eq!(
        h.handle
            .hold(vec!["alpha:main".into()])
            .await
            .unwrap_err()
            .code(),
        "E_TURN_RUNNING"
    );
    h.answer(&link, &event, "done").await;
    asked.await.unwrap().unwrap();

    let handle = h.handle.clone();
    let holding = tokio::spawn(async move {
        handle
            .hold(vec!["alpha:main".into(), "alpha:new".into()])
            .await
    });
    h.next_shutdown_to(&link).await;
    h.end_process(0, &link, Some(0)).await;
    assert_eq!(holding.await.unwrap().unwrap(), ["alpha:main"]);
    // Held: an input waits, and no process starts for it.
    let waiting = h.ask("second");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        h.opened.try_recv().is_err(),
        "a held instance got a process"
    );
    h.handle
        .release(vec!["alpha:main".into(), "alpha:new".into()])
        .await
        .unwrap();
    let second = h.next_ready_process().await;
    let (_, event) = h.next_event().await;
    assert_eq!(event.input.as_deref(), Some("second"));
    h.answer(&second, &event, "after").await;
    assert_eq!(
        answer_text(&waiting.await.unwrap().unwrap()).as_deref(),
        Some("after")
    );
    let keys: Vec<String> = h
        .handle
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|status| status.key)
        .collect();
    assert_eq!(keys, ["alpha:main"], "the placeholder of the hold is gone");
}

/// An approval `apv_<n>` of `alpha:<instance>`.
fn approval(n: u32, instance: &str) -> goondan_types::ApprovalRequest {
    goondan_types::ApprovalRequest {
        id: format!("apv_{n}"),
        key: format!("call_{n}"),
        agent: "alpha".into(),
        instance_key: instance.into(),
        tool: Some("bash__exec".into()),
        arguments: serde_json::json!({"command": "ls"}),
        question: None,
        turn_id: "turn_1".into(),
        event_id: "evt_1".into(),
        requested_at: "2026-11-27T00:00:00.000Z".into(),
        deadline: None,
        on_timeout: goondan_types::Verdict::Deny,
        deciders: vec!["operator".into()],
    }
}

/// What `from` asks the orchestrator, as a query.
fn query_from(from: &Link, correlation_id: &str, query: Query) -> IpcMessage {
    RuntimeMessage::Query(QueryRequest {
        correlation_id: correlation_id.into(),
        query,
    })
    .to_message(&from.key.to_string(), ORCHESTRATOR)
}

/// Issue 36: a chat connector is given every approval still waiting when
/// it starts and every one asked after; an agent may tell only of its own
/// and never decide; the connector's decision reaches the instance and
/// its answer comes back.
#[tokio::test]
async fn approvals_reach_the_chat_connector_and_only_it_decides() {
    let waiting = approval(1, "main");
    let pending: PendingApprovals = Arc::new(move || vec![waiting.clone()]);
    let mut h = harness_full(8, ProcessPolicy::default(), None, None, Some(pending));
    let mut swarm = (*h.handle.swarm()).clone();
    swarm.connections = vec!["tg".into(), "hook".into()];
    swarm.approval_connections = vec!["tg".into()];
    h.handle.reconfigure(swarm).await.unwrap();
    let mut connectors = [
        h.opened.recv().await.unwrap(),
        h.opened.recv().await.unwrap(),
    ];
    connectors.sort_by_key(|link| link.key.to_string());
    let [hook, tg] = connectors;
    assert_eq!(tg.key, RoutingKey::connection("tg"));
    h.ready(&hook).await;
    h.ready(&tg).await;
    let wait = Duration::from_secs(5);
    let Some(RuntimeMessage::ApprovalAsked(asked)) = next_runtime_to(&mut h, &tg, wait).await
    else {
        panic!("the waiting approval was not handed to the chat connector");
    };
    assert_eq!(asked.request.id, "apv_1");

    let alpha = running_alpha(&mut h).await;
    let told = RuntimeMessage::ApprovalAsked(protocol::ApprovalAsked {
        request: Box::new(approval(2, "main")),
    });
    h.say(&alpha, told.to_message("alpha:main", ORCHESTRATOR))
        .await;
    let Some(RuntimeMessage::ApprovalAsked(asked)) = next_runtime_to(&mut h, &tg, wait).await
    else {
        panic!("an approval asked was not passed on");
    };
    assert_eq!(asked.request.id, "apv_2");
    // Speaking for another instance is refused.
    let forged = RuntimeMessage::ApprovalAsked(protocol::ApprovalAsked {
        request: Box::new(approval(3, "other")),
    });
    h.say(&alpha, forged.to_message("alpha:main", ORCHESTRATOR))
        .await;
    assert!(matches!(
        next_runtime_to(&mut h, &alpha, wait).await,
        Some(RuntimeMessage::Rejected(_))
    ));

    let decision = goondan_types::ApprovalDecision {
        id: "apv_2".into(),
        verdict: goondan_types::Verdict::Approve,
        arguments: None,
        reason: None,
        by: "telegram:42".into(),
        decided_at: "2026-11-27T00:00:01.000Z".into(),
    };
    let decide = |decision: &goondan_types::ApprovalDecision| Query::Decide {
        target: "alpha:main".into(),
        decision: Box::new(decision.clone()),
    };
    // Neither an agent nor a connector without approvals may decide.
    for asker in [&alpha, &hook] {
        h.say(asker, query_from(asker, "corr_self", decide(&decision)))
            .await;
        let Some(RuntimeMessage::QueryAnswer(answer)) = next_runtime_to(&mut h, asker, wait).await
        else {
            panic!("no answer to {asker}");
        };
        assert!(
            matches!(&answer.answer, QueryAnswer::Failed(failure) if failure.code == "E_APPROVAL_NOT_ALLOWED"),
            "{answer:?}"
        );
    }

    h.say(&tg, query_from(&tg, "corr_press", decide(&decision)))
        .await;
    let Some(RuntimeMessage::Decide(handed)) = next_runtime_to(&mut h, &alpha, wait).await else {
        panic!("the decision did not reach the instance");
    };
    assert_eq!(handed.decision, decision);
    h.say(
        &alpha,
        RuntimeMessage::Decided(protocol::Decided {
            in_reply_to: handed.correlation_id,
            failure: None,
        })
        .to_message("alpha:main", ORCHESTRATOR),
    )
    .await;
    let Some(RuntimeMessage::QueryAnswer(answer)) = next_runtime_to(&mut h, &tg, wait).await else {
        panic!("the connector heard nothing back");
    };
    assert_eq!(answer.in_reply_to, "corr_press");
    assert_eq!(answer.answer, QueryAnswer::Decided);
}
