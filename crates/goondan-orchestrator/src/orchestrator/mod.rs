//! The orchestrator's main loop.
//!
//! One task owns every [`Instance`](instance::Instance) and handles one
//! input at a time, from four sources: the [`OrchestratorHandle`]
//! ([`Input`]), the [`Transport`] ([`TransportEvent`]: messages from
//! children and the ends of their streams), the receipts of events
//! forwarded to other hosts (`forwarding`) and its own deadlines (grace
//! periods, backoffs). So routing, supervision and shutdown never race.
//!
//! The work is split by responsibility: [`instance`] (the state of one
//! routing key and its bounded queue), `routing` (where a message goes),
//! `supervision` (spawning, exits, crash backoff, reconciliation),
//! `liveness` (pings and the deadline), `capacity` (the process cap and
//! idle passivation), `forwarding` (what is owed for an event sent to
//! another host, settled by its receipt), `approvals` (what the chat
//! connectors are told of approvals, and the decisions pressed in their
//! chats) and `lifecycle` (restart, delete, shutdown). What the loop
//! takes from outside is `input` ([`Input`]), which the handle
//! (`client`) sends; both sit below the
//! loop and neither reads it.

mod approvals;
mod capacity;
mod client;
mod connectors;
mod forwarding;
mod inbox;
mod input;
pub(crate) mod instance;
mod lifecycle;
mod liveness;
mod operator;
mod routing;
mod supervision;
mod table;

pub use client::{
    CancelOutcome, Held, OrchestratorHandle, PendingAnswer, RestartOutcome, RestartState,
    MAX_RESTART_WAIT,
};
pub use input::{ConnectionStatus, Input, InstanceStatus, Rewriter};
pub use instance::MAX_DELIVERY_ATTEMPTS;
pub use lifecycle::SwarmRestartRequest;
pub use liveness::{Liveness, LIVENESS_INTERVAL_ENV};
pub use operator::CancelledTurn;
// The swarm's description lives below the loop; these keep the paths
// callers already use.
pub use crate::swarm::{ProcessPolicy, SwarmInfo};

use crate::spawner::Spawner;
use crate::OrchestratorError;
use futures_util::StreamExt;
use goondan_ipc::protocol::ProtocolStats;
use goondan_ipc::{RoutingKey, StdioTransport, Transport, TransportEvent};
use input::{DeltaSink, Reply};
use instance::Instance;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use table::InstanceTable;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Called with a routing key whose message history must be cleared before
/// the instance restarts (`--fresh`).
pub type ResetInstance = Arc<dyn Fn(&RoutingKey) + Send + Sync>;

/// Crash counters of one instance as they outlive the orchestrator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashRecord {
    /// Crashes since the last successful Turn.
    pub consecutive_crashes: u32,
    /// The wall-clock time before which the instance must not respawn.
    pub backoff_until: Option<SystemTime>,
}

/// Where crash counters and backoff deadlines are kept between
/// orchestrator runs (SYSTEM.md §3: in instance metadata, not only in
/// memory). `load` is called when an instance is first seen, `save` after
/// every crash and after the first successful Turn that resets them.
#[derive(Clone)]
pub struct CrashLedger {
    /// Reads an instance's record.
    pub load: LoadCrashRecord,
    /// Writes an instance's record.
    pub save: SaveCrashRecord,
}

/// Reads the crash record of an instance.
pub type LoadCrashRecord = Arc<dyn Fn(&RoutingKey) -> CrashRecord + Send + Sync>;

/// Writes the crash record of an instance.
pub type SaveCrashRecord = Arc<dyn Fn(&RoutingKey, CrashRecord) + Send + Sync>;

/// Builds the transport the orchestrator carries messages with, given
/// where it must report.
pub type TransportFactory =
    Box<dyn FnOnce(mpsc::Sender<TransportEvent>, Arc<ProtocolStats>) -> Arc<dyn Transport> + Send>;

/// Everything the orchestrator needs to run.
pub struct OrchestratorConfig {
    /// The swarm.
    pub swarm: SwarmInfo,
    /// How processes start.
    pub spawner: Arc<dyn Spawner>,
    /// How messages travel; `None` is JSON lines over each child's stdio
    /// ([`StdioTransport`]).
    pub transport: Option<TransportFactory>,
    /// How often desired and actual state are compared.
    pub reconcile_interval: Duration,
    /// Clears an instance's history for `--fresh` restarts.
    pub reset_instance: Option<ResetInstance>,
    /// Persists crash counters; `None` keeps them in memory only.
    pub crash_ledger: Option<CrashLedger>,
    /// How processes are pinged and when a silent one is killed.
    pub liveness: Liveness,
    /// Where agents' requests to re-read the bundle and restart the swarm
    /// go (`self-restart__request`): whoever can load the bundle (`gdn
    /// run`). `None` answers them with `E_RESTART_UNAVAILABLE`.
    pub restart_requests: Option<mpsc::Sender<SwarmRestartRequest>>,
    /// Instances served elsewhere (a cluster host's); `None` serves every
    /// instance here.
    pub remote: Option<Arc<dyn crate::RemoteInstances>>,
    /// Where every input that starts a Turn is stored before it is
    /// acknowledged, until its Turn finished (`orchestrator/inbox.rs`);
    /// `None` keeps inputs in memory only (tests, benchmarks).
    pub inbox: Option<Arc<goondan_store::InboxStore>>,
    /// Reads every approval request still waiting for a decision, for a
    /// chat connector that starts (`orchestrator/approvals.rs`); `None`
    /// gives it only the requests asked while it runs.
    pub pending_approvals: Option<PendingApprovals>,
}

/// Reads every approval request of the swarm still waiting for a
/// decision, oldest first (the host reads them from the instances'
/// `approvals.jsonl`).
pub type PendingApprovals = Arc<dyn Fn() -> Vec<goondan_types::ApprovalRequest> + Send + Sync>;

/// One of the orchestrator's own pending requests.
struct Waiter {
    /// The instance answering.
    key: RoutingKey,
    reply: Reply,
    deltas: Option<DeltaSink>,
}

/// A `delete` answered once every process it killed has exited, so the
/// caller can remove the instance's files without racing the process for
/// its lock.
struct PendingDelete {
    waiting_for: Vec<goondan_ipc::Link>,
    reply: oneshot::Sender<bool>,
}

/// How long one half of a process's end (its exit, the end of its stream)
/// may wait for the other. Normally both come within microseconds; a
/// grandchild that inherited the pipe can hold the stream open.
const ENDING_DEADLINE: Duration = Duration::from_secs(2);

/// How many inputs may wait for the main loop.
const INPUT_CAPACITY: usize = 1024;

/// The orchestrator's main loop.
pub struct Orchestrator {
    swarm: Arc<SwarmInfo>,
    /// The same swarm as the handles see it.
    shared_swarm: client::SharedSwarm,
    spawner: Arc<dyn Spawner>,
    transport: Arc<dyn Transport>,
    stats: Arc<ProtocolStats>,
    reset_instance: Option<ResetInstance>,
    crash_ledger: Option<CrashLedger>,
    liveness: Liveness,
    restart_requests: Option<mpsc::Sender<SwarmRestartRequest>>,
    remote: Option<Arc<dyn crate::RemoteInstances>>,
    /// Events forwarded to other hosts whose senders wait to learn they
    /// were stored.
    forwards: forwarding::PendingForwards,
    inbox: Option<Arc<goondan_store::InboxStore>>,
    pending_approvals: Option<PendingApprovals>,
    reconcile_interval: Duration,
    instances: InstanceTable,
    /// Instances whose queued messages a full link held back: the next
    /// flush tries them again.
    held_back: BTreeSet<RoutingKey>,
    /// The orchestrator's own pending requests by correlation id; streamed
    /// text closes when the entry is removed, however the request ends.
    waiters: HashMap<String, Waiter>,
    /// Decisions handed to instances, by correlation id, until each
    /// answers that it recorded its own.
    decisions: HashMap<String, (RoutingKey, input::DecisionReply)>,
    deletes: Vec<PendingDelete>,
    /// Operators' holds waiting for the processes they stopped to exit.
    holds: Vec<operator::PendingHold>,
    /// Callers waiting for cancelled Turns to end.
    turn_watches: Vec<operator::TurnWatch>,
    inputs_tx: mpsc::Sender<Input>,
    stopping: Option<oneshot::Sender<()>>,
    next_generation: u64,
    /// Connector events no ingress rule matched, dropped.
    unrouted_events: u64,
}

impl Orchestrator {
    /// Starts the loop on the current tokio runtime.
    pub fn start(config: OrchestratorConfig) -> (OrchestratorHandle, tokio::task::JoinHandle<()>) {
        let (inputs_tx, inputs_rx) = mpsc::channel(INPUT_CAPACITY);
        let (transport_tx, transport_rx) = mpsc::channel(INPUT_CAPACITY);
        let stats = Arc::new(ProtocolStats::default());
        let transport = match config.transport {
            Some(factory) => factory(transport_tx, Arc::clone(&stats)),
            None => Arc::new(StdioTransport::new(transport_tx, Arc::clone(&stats))),
        };
        let swarm = Arc::new(config.swarm);
        let shared_swarm = Arc::new(std::sync::RwLock::new(Arc::clone(&swarm)));
        let orchestrator = Orchestrator {
            swarm,
            shared_swarm: Arc::clone(&shared_swarm),
            spawner: config.spawner,
            transport,
            stats: Arc::clone(&stats),
            reset_instance: config.reset_instance,
            crash_ledger: config.crash_ledger,
            liveness: config.liveness,
            restart_requests: config.restart_requests,
            remote: config.remote,
            forwards: forwarding::PendingForwards::new(),
            inbox: config.inbox,
            pending_approvals: config.pending_approvals,
            reconcile_interval: config.reconcile_interval,
            instances: InstanceTable::default(),
            held_back: BTreeSet::new(),
            waiters: HashMap::new(),
            decisions: HashMap::new(),
            deletes: Vec::new(),
            holds: Vec::new(),
            turn_watches: Vec::new(),
            inputs_tx: inputs_tx.clone(),
            stopping: None,
            next_generation: 1,
            unrouted_events: 0,
        };
        let task = tokio::spawn(orchestrator.run(inputs_rx, transport_rx));
        (
            OrchestratorHandle::new(inputs_tx, shared_swarm, stats),
            task,
        )
    }

    async fn run(
        mut self,
        mut inputs: mpsc::Receiver<Input>,
        mut transport: mpsc::Receiver<TransportEvent>,
    ) {
        self.start_connections();
        self.replay_inbox();
        let mut next_reconcile = Instant::now() + self.reconcile_interval;
        loop {
            let wake_at = self
                .next_deadline()
                .map_or(next_reconcile, |deadline| deadline.min(next_reconcile));
            // What children said goes first: it finishes work (answers,
            // Turn outcomes) before new work is taken, which is the
            // backpressure a burst meets.
            tokio::select! {
                biased;
                Some(event) = transport.recv() => self.handle_transport(event),
                // Settles acknowledgements before new work, like an answer.
                Some((owed, outcome)) = self.forwards.next(), if !self.forwards.is_empty() => {
                    self.on_forwarded(owed, outcome)
                }
                input = inputs.recv() => match input {
                    Some(input) => self.handle_input(input),
                    None => return,
                },
                _ = tokio::time::sleep_until(wake_at) => {
                    if Instant::now() >= next_reconcile {
                        next_reconcile = Instant::now() + self.reconcile_interval;
                    }
                    self.check_liveness();
                    self.passivate_idle();
                    self.reconcile();
                }
            }
            self.flush_queues();
            if !self.turn_watches.is_empty() {
                self.settle_watches();
            }
            if self.stopping.is_some() && self.instances.values().all(|i| !i.is_running()) {
                self.fail_all_waiters();
                if let Some(done) = self.stopping.take() {
                    let _ = done.send(());
                }
                return;
            }
        }
    }

    fn handle_input(&mut self, input: Input) {
        match input {
            Input::Exited { link, code } => self.on_exit_observed(link, code),
            Input::Ingress {
                ingress,
                event_id,
                reply,
                deltas,
            } => self.on_ingress(ingress, event_id, reply, deltas),
            Input::Deliver {
                key,
                event,
                reply,
                deltas,
                stored,
            } => self.on_deliver(key, *event, reply, deltas, stored),
            Input::FromRemote { to, message } => self.on_from_remote(to, message),
            Input::Cancel { event_id, done } => {
                let _ = done.send(self.cancel(&event_id));
            }
            Input::Restart {
                agent,
                instance_key,
                fresh,
                done,
            } => {
                let keys = self.restart(agent.as_deref(), instance_key.as_deref(), fresh);
                let _ = done.send(keys);
            }
            Input::RestartForConfig {
                agents,
                connections,
                done,
            } => {
                let keys = self.restart_for_config(&agents, &connections);
                let _ = done.send(keys);
            }
            Input::Reconfigure { swarm, done } => {
                self.reconfigure(*swarm);
                let _ = done.send(());
            }
            Input::List { reply } => {
                let _ = reply.send(self.list());
            }
            Input::Connections { reply } => {
                let _ = reply.send(self.connections());
            }
            Input::Delete { key, reply } => self.delete(&key, reply),
            Input::Warm { key } => {
                if self.served_elsewhere(&key).is_none() {
                    self.instance_for(&key);
                    self.ensure_spawned(&key);
                }
            }
            Input::CancelRunning { key, by, done } => {
                let _ = done.send(self.cancel_running(&key, &by));
            }
            Input::WatchTurns { pending, done } => self.watch_turns(pending, done),
            Input::Hold {
                keys,
                rewriter,
                reply,
            } => self.hold(&keys, rewriter, reply),
            Input::Release { keys } => self.release(&keys),
            Input::AnswerQuery {
                to,
                correlation_id,
                answer,
            } => self.answer_query(&to, correlation_id, answer),
            Input::Decide {
                key,
                decision,
                reply,
            } => self.decide(key, decision, reply),
            Input::Shutdown { done } => self.begin_shutdown(done),
        }
    }

    fn handle_transport(&mut self, event: TransportEvent) {
        match event {
            TransportEvent::Message { link, message } => {
                // The generation fence: only the process now serving a key
                // speaks for it.
                let current = self
                    .instances
                    .get(&link.key)
                    .and_then(|instance| instance.link.as_ref());
                if current == Some(&link) {
                    self.heard_from(&link.key);
                    self.on_child_message(&link.key, *message);
                } else {
                    tracing::warn!(link = %link, code = "E_IPC_STALE", "message from a process that no longer serves its key; refused");
                }
            }
            TransportEvent::EndOfStream { link } => self.on_stream_ended(link),
        }
    }

    fn list(&self) -> Vec<InstanceStatus> {
        self.instances
            .iter()
            .filter(|(key, _)| key.connection_name().is_none())
            .map(|(key, instance)| InstanceStatus {
                key: key.to_string(),
                agent_name: key.agent_name.clone(),
                instance_key: key.instance_key.clone(),
                status: instance.status,
                pid: instance.control.as_ref().and_then(|control| control.id()),
                consecutive_crashes: instance.consecutive_crashes,
                pending_events: instance.queued(),
                in_flight_events: instance.waiting() - instance.queued(),
                backoff_until: instance
                    .backoff_remaining()
                    .map(|remaining| goondan_types::iso_at(SystemTime::now() + remaining)),
                generation: instance.link.as_ref().map(|link| link.generation),
            })
            .collect()
    }

    fn connections(&self) -> Vec<ConnectionStatus> {
        self.instances
            .iter()
            .filter_map(|(key, instance)| {
                Some(ConnectionStatus {
                    connection: key.connection_name()?.to_string(),
                    status: instance.status,
                    pid: instance.control.as_ref().and_then(|control| control.id()),
                    consecutive_crashes: instance.consecutive_crashes,
                    last_error: instance.last_start_error.clone(),
                    refused_by_config: instance.refused_by_config,
                    generation: instance.link.as_ref().map(|link| link.generation),
                })
            })
            .collect()
    }

    /// When the main loop must wake without being asked; settled with the
    /// instances at the end of each pass of the loop (`flush_queues`).
    fn next_deadline(&self) -> Option<Instant> {
        self.instances.earliest_deadline()
    }

    fn fail_all_waiters(&mut self) {
        for (_, waiter) in self.waiters.drain() {
            let _ = waiter.reply.send(Err(OrchestratorError::Stopped));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
