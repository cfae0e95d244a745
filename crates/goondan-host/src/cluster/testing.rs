//! What the cluster host's unit tests share: a one-server NATS cluster
//! with the layout made, envelopes and deliveries as a sender and a shard
//! puller see them, commits written as an agent's log writes them, and an
//! orchestrator whose agents are echoes (a fake [`Spawner`] and
//! [`Transport`], the orchestrator's own seams) so a Turn runs without a
//! child process, and whose ConnectorProcesses the test speaks for.
//!
//! It owns no behavior of the host; it only stands in for what the host
//! talks to. A test that needs a real `nats-server` skips when there is
//! none, unless `GOONDAN_REQUIRE_NATS` is set (see
//! [`goondan_cluster::testing`]).

use goondan_cluster::inbox::{self, Delivery, Envelope, Receipt, ShardInbox};
use goondan_cluster::reply::ClusterReply;
use goondan_cluster::subject::InstanceAddress;
use goondan_cluster::testing::NatsCluster;
use goondan_cluster::{layout, Cluster, ClusterJournal, ClusterOptions, ClusterUrls};
use goondan_ipc::protocol::{
    self, Answer, AnswerOutcome, Inbound, Query, QueryAnswerMessage, QueryRequest, Ready,
    TurnFinished,
};
use goondan_ipc::{
    Endpoint, Link, RoutingKey, RuntimeMessage, SendError, Transport, TransportEvent,
};
use goondan_orchestrator::orchestrator::{Liveness, ProcessPolicy, TransportFactory};
use goondan_orchestrator::{
    Orchestrator, OrchestratorConfig, OrchestratorError, OrchestratorHandle, ProcessControl,
    RemoteInstances, SpawnRequest, SpawnedProcess, Spawner, SwarmInfo,
};
use goondan_store::{CommitContext, OutboxMessage, TurnJournal};
use goondan_types::{
    AgentEvent, ConnectorEvent, EventSource, EventSourceKind, IpcMessage, Message, MessageEvent,
    MessageSource, ModelMessage, ReplyChannel,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::mpsc;

/// The workspace every test host serves.
pub(super) const WORKSPACE: &str = "ws-test";

/// A running test cluster: the servers (stopped when dropped) and a
/// connection to them.
pub(super) struct TestCluster {
    pub(super) nats: NatsCluster,
    pub(super) cluster: Cluster,
}

impl TestCluster {
    /// One server with JetStream and the layout made; `None` when no
    /// `nats-server` is installed (and none is required).
    pub(super) async fn start() -> Option<TestCluster> {
        let nats = NatsCluster::start(1).await?;
        let cluster = nats.connect().await;
        layout::ensure(&cluster)
            .await
            .expect("the cluster's layout");
        Some(TestCluster { nats, cluster })
    }

    /// Writes a commit to the log of `address` as its agent would after a
    /// Turn that consumed inbox sequence `inbox_seq` and answered
    /// `outbox`. The journal blocks its caller, so it runs off the
    /// runtime's thread.
    pub(super) async fn commit(
        &self,
        address: &InstanceAddress,
        inbox_seq: Option<u64>,
        outbox: Vec<OutboxMessage>,
    ) {
        let urls = ClusterUrls::parse(&self.nats.urls()).expect("test urls");
        let address = address.clone();
        tokio::task::spawn_blocking(move || {
            let options = ClusterOptions {
                replicas: 1,
                client_name: "test agent".to_string(),
                ..ClusterOptions::default()
            };
            let mut journal =
                ClusterJournal::open(&urls, options, address, "host-before").expect("a journal");
            let question = Message::new(ModelMessage::user("q"), MessageSource::User);
            let events = [MessageEvent::Append {
                message: question.clone(),
            }];
            journal.record_event("t-1", &events[0]).expect("recorded");
            let context = CommitContext { inbox_seq, outbox };
            journal
                .commit_turn("t-1", &events, &[question], &context)
                .expect("committed");
        })
        .await
        .expect("the journal's thread");
    }

    /// How many messages the inbox stream holds (acked ones leave it).
    pub(super) async fn n_stored_inputs(&self) -> u64 {
        self.cluster
            .jetstream()
            .get_stream(layout::INBOX_STREAM)
            .await
            .expect("the inbox stream")
            .info()
            .await
            .expect("its info")
            .state
            .messages
    }

    /// How many inputs for `address` the inbox stream holds.
    pub(super) async fn n_stored_inputs_for(&self, address: &InstanceAddress) -> u64 {
        use futures_util::StreamExt;
        let stream = self
            .cluster
            .jetstream()
            .get_stream(layout::INBOX_STREAM)
            .await
            .expect("the inbox stream");
        let mut subjects = stream
            .info_with_subjects(address.inbox_subject())
            .await
            .expect("its subjects");
        let mut total = 0;
        while let Some(entry) = subjects.next().await {
            total += entry.expect("a subject's count").1 as u64;
        }
        total
    }

    /// Subscribes to a fresh reply subject, as `gdn run --cluster …
    /// --input` does before it sends.
    pub(super) async fn reply_subject(&self) -> (String, async_nats::Subscriber) {
        let subject = format!("gdn.reply.test.{}", goondan_types::trace::random_hex(8));
        let replies = self
            .cluster
            .client()
            .subscribe(subject.clone())
            .await
            .expect("a reply subscription");
        (subject, replies)
    }
}

/// The address of instance `instance_key` of agent `echo` in
/// [`WORKSPACE`].
pub(super) fn address(instance_key: &str) -> InstanceAddress {
    InstanceAddress::new(WORKSPACE, "echo", instance_key)
}

/// A user message for `address` saying `input`, answered on `reply_to`
/// when it has one.
pub(super) fn envelope(address: &InstanceAddress, input: &str, reply_to: Option<&str>) -> Envelope {
    let mut event = AgentEvent::new(
        "user_message",
        EventSource::new(EventSourceKind::Connector, "cli"),
    );
    event.input = Some(input.to_string());
    Envelope {
        id: event.id.clone(),
        address: address.clone(),
        event,
        reply_to: reply_to.map(str::to_string),
    }
}

/// A request from instance `caller` (`agent:key`) on another host,
/// waiting on `correlation_id`.
pub(super) fn request_from(
    address: &InstanceAddress,
    input: &str,
    caller: &str,
    correlation_id: &str,
) -> Envelope {
    let mut request = envelope(address, input, None);
    request.event.reply_to = Some(ReplyChannel {
        target: caller.to_string(),
        correlation_id: correlation_id.to_string(),
    });
    request
}

/// The answer event a Turn sends for the request `correlation_id`.
pub(super) fn answer(correlation_id: &str, text: &str) -> AgentEvent {
    Answer {
        in_reply_to: correlation_id.to_string(),
        outcome: AnswerOutcome::Ok {
            text: Some(text.to_string()),
            finish_reason: None,
            turn_id: None,
            usage: None,
        },
    }
    .to_event("echo", None)
}

/// Sends `envelope` to its inbox.
pub(super) async fn send(cluster: &Cluster, envelope: &Envelope) -> Receipt {
    inbox::send(cluster, envelope).await.expect("sent")
}

/// The next delivery of `inbox`, within 5 s.
pub(super) async fn next_delivery(inbox: &mut ShardInbox) -> Delivery {
    tokio::time::timeout(Duration::from_secs(5), inbox.next())
        .await
        .expect("a delivery within 5 s")
        .expect("the inbox is open")
        .expect("a readable delivery")
}

/// The next reply on `replies`, within 5 s.
pub(super) async fn next_reply(replies: &mut async_nats::Subscriber) -> ClusterReply {
    use futures_util::StreamExt;
    let message = tokio::time::timeout(Duration::from_secs(5), replies.next())
        .await
        .expect("a reply within 5 s")
        .expect("the subscription is open");
    serde_json::from_slice(&message.payload).expect("a ClusterReply")
}

/// Fails when a reply comes on `replies` within `wait`.
pub(super) async fn no_reply_within(replies: &mut async_nats::Subscriber, wait: Duration) {
    use futures_util::StreamExt;
    if let Ok(Some(message)) = tokio::time::timeout(wait, replies.next()).await {
        panic!(
            "unexpected reply: {}",
            String::from_utf8_lossy(&message.payload)
        );
    }
}

/// The text of an answer event.
pub(super) fn answer_text(answer: &AgentEvent) -> Option<String> {
    match Answer::from_event(answer)?.outcome {
        AnswerOutcome::Ok { text, .. } => text,
        AnswerOutcome::Failed(_) => None,
    }
}

/// An orchestrator whose agents answer every request at once with
/// `echo: <input>`, and what reached them.
pub(super) struct EchoOrchestrator {
    pub(super) handle: OrchestratorHandle,
    /// Every process started, in order.
    pub(super) spawned: Arc<Mutex<Vec<SpawnRequest>>>,
    /// Every user event handed to an agent, in order.
    pub(super) events: Arc<Mutex<Vec<AgentEvent>>>,
    /// The link of each process opened, by routing key.
    links: Arc<Mutex<HashMap<RoutingKey, Link>>>,
    /// Where the test speaks for a process, as the transport reports.
    report: Arc<OnceLock<mpsc::Sender<TransportEvent>>>,
    /// What the orchestrator answered the ConnectorProcesses' queries.
    query_answers: tokio::sync::Mutex<mpsc::UnboundedReceiver<QueryAnswerMessage>>,
}

impl EchoOrchestrator {
    /// Starts a swarm of the agents `echo` and `planner`; instances that `remote` does not
    /// serve are forwarded to it, as on a cluster host.
    pub(super) fn start(remote: Option<Arc<dyn RemoteInstances>>) -> EchoOrchestrator {
        EchoOrchestrator::start_with_connections(remote, Vec::new())
    }

    /// Starts the swarm of [`EchoOrchestrator::start`] with a
    /// ConnectorProcess for each of `connections` (no ingress rules: their
    /// events go to `echo`), which the test speaks for
    /// ([`EchoOrchestrator::ingest`]).
    pub(super) fn start_with_connections(
        remote: Option<Arc<dyn RemoteInstances>>,
        connections: Vec<String>,
    ) -> EchoOrchestrator {
        let spawned = Arc::new(Mutex::new(Vec::new()));
        let events = Arc::new(Mutex::new(Vec::new()));
        let links = Arc::new(Mutex::new(HashMap::new()));
        let report_slot = Arc::new(OnceLock::new());
        let (answers_tx, query_answers) = mpsc::unbounded_channel();
        let transport_events = Arc::clone(&events);
        let transport_links = Arc::clone(&links);
        let transport_report = Arc::clone(&report_slot);
        let factory: TransportFactory = Box::new(move |report, _stats| {
            let _ = transport_report.set(report.clone());
            Arc::new(EchoTransport {
                report,
                events: transport_events,
                links: transport_links,
                query_answers: answers_tx,
            })
        });
        let (handle, _task) = Orchestrator::start(OrchestratorConfig {
            swarm: SwarmInfo {
                swarm_name: "default".into(),
                entry_agent: "echo".into(),
                // `planner` asks `echo` from another host in some tests.
                agents: vec!["echo".into(), "planner".into()],
                instance_key: "default".into(),
                grace_period: Duration::from_secs(1),
                max_queued_events: 16,
                processes: ProcessPolicy::default(),
                ingress: Vec::new(),
                cli_connection: None,
                connections,
                approval_connections: Vec::new(),
            },
            spawner: Arc::new(FakeSpawner {
                spawned: Arc::clone(&spawned),
            }),
            transport: Some(factory),
            reconcile_interval: Duration::from_secs(3600),
            reset_instance: None,
            crash_ledger: None,
            // The echoes answer no ping.
            liveness: Liveness {
                interval: Duration::from_secs(24 * 3600),
                missed_pings: 3,
            },
            restart_requests: None,
            remote,
            inbox: None,
            pending_approvals: None,
        });
        EchoOrchestrator {
            handle,
            spawned,
            events,
            links,
            report: report_slot,
            query_answers: tokio::sync::Mutex::new(query_answers),
        }
    }

    /// Has the ConnectorProcess of `connection` (once it runs, within 5 s)
    /// ask the orchestrator to ingest `event`; the query's correlation id.
    pub(super) async fn ingest(&self, connection: &str, event: ConnectorEvent) -> String {
        let key = RoutingKey::connection(connection);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let link = loop {
            if let Some(link) = self.links.lock().expect("links").get(&key).cloned() {
                break link;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no ConnectorProcess for {connection}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let correlation_id = protocol::new_correlation_id();
        let query = RuntimeMessage::Query(QueryRequest {
            correlation_id: correlation_id.clone(),
            query: Query::Ingest { event },
        });
        self.report
            .get()
            .expect("the transport was made")
            .send(TransportEvent::Message {
                link,
                message: Box::new(query.to_message(&key.to_string(), goondan_ipc::ORCHESTRATOR)),
            })
            .await
            .expect("the orchestrator runs");
        correlation_id
    }

    /// The next answer to a ConnectorProcess's query, if one comes within
    /// `wait`.
    pub(super) async fn next_query_answer(&self, wait: Duration) -> Option<QueryAnswerMessage> {
        let mut answers = self.query_answers.lock().await;
        tokio::time::timeout(wait, answers.recv())
            .await
            .ok()
            .flatten()
    }

    /// How many agent processes were started.
    pub(super) fn n_spawned(&self) -> usize {
        self.spawned.lock().expect("spawned").len()
    }

    /// The user events the agents got.
    pub(super) fn events(&self) -> Vec<AgentEvent> {
        self.events.lock().expect("events").clone()
    }
}

/// Starts processes that run until killed.
struct FakeSpawner {
    spawned: Arc<Mutex<Vec<SpawnRequest>>>,
}

impl Spawner for FakeSpawner {
    fn spawn(&self, request: &SpawnRequest) -> Result<SpawnedProcess, OrchestratorError> {
        self.spawned.lock().expect("spawned").push(request.clone());
        let (kill, killed) = tokio::sync::oneshot::channel();
        Ok(SpawnedProcess {
            // The fake transport ignores the endpoint: it speaks for the
            // child.
            endpoint: Endpoint::Stdio {
                from_process: Box::new(tokio::io::empty()),
                to_process: Box::new(tokio::io::sink()),
            },
            control: Box::new(FakeControl { kill: Some(kill) }),
            exit: Box::pin(async move {
                let _ = killed.await;
                None
            }),
        })
    }
}

struct FakeControl {
    kill: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ProcessControl for FakeControl {
    fn id(&self) -> Option<u32> {
        None
    }

    fn kill(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
    }
}

/// Speaks for every process: ready as soon as its link opens, and, for an
/// agent, the answer plus the end of the Turn as soon as it gets a
/// request; what a ConnectorProcess is answered goes to the test.
struct EchoTransport {
    report: mpsc::Sender<TransportEvent>,
    events: Arc<Mutex<Vec<AgentEvent>>>,
    links: Arc<Mutex<HashMap<RoutingKey, Link>>>,
    query_answers: mpsc::UnboundedSender<QueryAnswerMessage>,
}

impl EchoTransport {
    fn say(&self, link: &Link, message: IpcMessage) {
        // The orchestrator reads this channel in its loop; 1024 places
        // are plenty for a test.
        let _ = self.report.try_send(TransportEvent::Message {
            link: link.clone(),
            message: Box::new(message),
        });
    }
}

impl Transport for EchoTransport {
    fn open(&self, link: Link, _endpoint: Endpoint) -> Result<(), goondan_ipc::IpcError> {
        self.links
            .lock()
            .expect("links")
            .insert(link.key.clone(), link.clone());
        let ready = RuntimeMessage::Ready(Ready {
            protocol_version: protocol::PROTOCOL_VERSION,
        });
        self.say(
            &link,
            ready.to_message(&link.key.to_string(), goondan_ipc::ORCHESTRATOR),
        );
        Ok(())
    }

    fn try_send(&self, link: &Link, message: IpcMessage) -> Result<(), SendError> {
        if link.key.connection_name().is_some() {
            if let Ok(Inbound::Runtime(RuntimeMessage::QueryAnswer(answer))) =
                protocol::decode(&message)
            {
                let _ = self.query_answers.send(answer);
            }
            return Ok(());
        }
        let Ok(Inbound::Event(event)) = protocol::decode(&message) else {
            return Ok(());
        };
        self.events.lock().expect("events").push((*event).clone());
        let me = link.key.to_string();
        if let Some(reply_to) = &event.reply_to {
            let text = format!("echo: {}", event.input.as_deref().unwrap_or_default());
            let answer = answer(&reply_to.correlation_id, &text);
            self.say(
                link,
                protocol::event_message(&me, &reply_to.target, &answer),
            );
        }
        let finished = RuntimeMessage::TurnFinished(TurnFinished {
            ok: true,
            event_id: Some(event.id.clone()),
        });
        self.say(link, finished.to_message(&me, goondan_ipc::ORCHESTRATOR));
        Ok(())
    }

    fn close(&self, _link: &Link) {}
}
