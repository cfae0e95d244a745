//! The orchestrator's main loop and its handle.
//!
//! One task owns every [`Handle`] and processes one [`Input`] at a time, so
//! routing, supervision and shutdown never race. Everything else talks to
//! it through [`OrchestratorHandle`].

use crate::backoff::respawn_delay;
use crate::spawner::{ProcessControl, SpawnRequest, Spawner};
use crate::OrchestratorError;
use goondan_ipc::{Notice, RoutingKey, ShutdownPayload, ORCHESTRATOR};
use goondan_types::{
    AgentEvent, EventSource, EventSourceKind, IpcMessage, IpcMessageType, JsonObject, JsonValue,
    ProcessStatus, ReplyChannel, ShutdownReason,
};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// What the orchestrator knows about the swarm it runs.
#[derive(Debug, Clone)]
pub struct SwarmInfo {
    /// `Swarm.metadata.name`.
    pub swarm_name: String,
    /// `Swarm.spec.entryAgent`.
    pub entry_agent: String,
    /// Every agent of the swarm.
    pub agents: Vec<String>,
    /// The instance key of the swarm (`Swarm.spec.instanceKey ?? name`);
    /// the default instance of every agent.
    pub instance_key: String,
    /// How long a draining process may take before SIGKILL.
    pub grace_period: Duration,
}

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

/// Everything the orchestrator needs to run.
pub struct OrchestratorConfig {
    /// The swarm.
    pub swarm: SwarmInfo,
    /// How processes start.
    pub spawner: Arc<dyn Spawner>,
    /// How often desired and actual state are compared.
    pub reconcile_interval: Duration,
    /// Clears an instance's history for `--fresh` restarts.
    pub reset_instance: Option<ResetInstance>,
    /// Persists crash counters; `None` keeps them in memory only.
    pub crash_ledger: Option<CrashLedger>,
}

/// The live state of one instance, as `gdn instance list` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    /// `agentName:instanceKey`.
    pub key: String,
    /// The agent.
    pub agent_name: String,
    /// The instance.
    pub instance_key: String,
    /// Its process state.
    pub status: ProcessStatus,
    /// The OS pid while running.
    pub pid: Option<u32>,
    /// Crashes since the last successful Turn.
    pub consecutive_crashes: u32,
    /// Events waiting for delivery.
    pub pending_events: usize,
}

/// Where the streamed model text of an awaited answer goes.
type DeltaSink = mpsc::UnboundedSender<String>;

/// A reply the orchestrator itself waits for (a CLI input, for example).
type Waiter = oneshot::Sender<Result<AgentEvent, OrchestratorError>>;

/// How long an exited child's remaining output may take to be read.
const EXIT_READ_GRACE: Duration = Duration::from_secs(1);

/// A `delete` answered once every process it killed has exited, so the
/// caller can remove the instance's files without racing the process for
/// its lock.
struct PendingDelete {
    waiting_for: Vec<(RoutingKey, u64)>,
    reply: oneshot::Sender<bool>,
}

/// The closed set of things the main loop reacts to.
pub(crate) enum Input {
    /// A message from a child.
    Child {
        key: RoutingKey,
        generation: u64,
        message: Box<IpcMessage>,
    },
    /// A child exited.
    Exited {
        key: RoutingKey,
        generation: u64,
        code: Option<i32>,
    },
    /// Deliver `event` to an agent and hand its reply to `reply` (and its
    /// streamed text to `deltas`).
    Request {
        agent: Option<String>,
        event: Box<AgentEvent>,
        reply: Waiter,
        deltas: Option<mpsc::UnboundedSender<String>>,
    },
    /// Gracefully restart the matching instances.
    Restart {
        agent: Option<String>,
        instance_key: Option<String>,
        fresh: bool,
        done: oneshot::Sender<Vec<String>>,
    },
    /// Report every instance.
    List {
        reply: oneshot::Sender<Vec<InstanceStatus>>,
    },
    /// Stop and forget an instance.
    Delete {
        key: String,
        reply: oneshot::Sender<bool>,
    },
    /// Drain everything and stop.
    Shutdown { done: oneshot::Sender<()> },
}

/// A cheap, cloneable way to talk to a running orchestrator.
#[derive(Clone)]
pub struct OrchestratorHandle {
    inputs: mpsc::Sender<Input>,
    swarm: Arc<SwarmInfo>,
}

impl OrchestratorHandle {
    /// The swarm being run.
    pub fn swarm(&self) -> &SwarmInfo {
        &self.swarm
    }

    /// Sends `event` to `agent` (the entry agent when `None`) in the
    /// swarm's instance and waits for its answer.
    pub async fn request(
        &self,
        agent: Option<String>,
        event: AgentEvent,
    ) -> Result<AgentEvent, OrchestratorError> {
        self.request_streaming(agent, event, None).await
    }

    /// As [`OrchestratorHandle::request`], also sending the answering
    /// Turn's model text to `deltas` as the provider streams it.
    pub async fn request_streaming(
        &self,
        agent: Option<String>,
        event: AgentEvent,
        deltas: Option<mpsc::UnboundedSender<String>>,
    ) -> Result<AgentEvent, OrchestratorError> {
        let (reply, answer) = oneshot::channel();
        self.send(Input::Request {
            agent,
            event: Box::new(event),
            reply,
            deltas,
        })
        .await?;
        answer.await.map_err(|_| OrchestratorError::Stopped)?
    }

    /// Gracefully restarts the known instances of `agent` and/or
    /// `instance_key` (every instance when both are `None`), clearing their
    /// history first when `fresh`; returns the keys.
    pub async fn restart(
        &self,
        agent: Option<String>,
        instance_key: Option<String>,
        fresh: bool,
    ) -> Result<Vec<String>, OrchestratorError> {
        let (done, restarted) = oneshot::channel();
        self.send(Input::Restart {
            agent,
            instance_key,
            fresh,
            done,
        })
        .await?;
        restarted.await.map_err(|_| OrchestratorError::Stopped)
    }

    /// Every instance the orchestrator knows.
    pub async fn list(&self) -> Result<Vec<InstanceStatus>, OrchestratorError> {
        let (reply, list) = oneshot::channel();
        self.send(Input::List { reply }).await?;
        list.await.map_err(|_| OrchestratorError::Stopped)
    }

    /// Kills the process serving `key` (an `agent:instance` key or an
    /// instance key, which matches every agent of that instance) and
    /// forgets it; true when something was running.
    pub async fn delete(&self, key: String) -> Result<bool, OrchestratorError> {
        let (reply, deleted) = oneshot::channel();
        self.send(Input::Delete { key, reply }).await?;
        deleted.await.map_err(|_| OrchestratorError::Stopped)
    }

    /// Drains every child (each finishes its Turn) and stops the loop.
    pub async fn shutdown(&self) -> Result<(), OrchestratorError> {
        let (done, finished) = oneshot::channel();
        self.send(Input::Shutdown { done }).await?;
        finished.await.map_err(|_| OrchestratorError::Stopped)
    }

    async fn send(&self, input: Input) -> Result<(), OrchestratorError> {
        self.inputs
            .send(input)
            .await
            .map_err(|_| OrchestratorError::Stopped)
    }
}

struct ShutdownIntent {
    respawn: bool,
    fresh: bool,
    kill_at: Instant,
    /// Set once SIGKILL was sent, so the passed deadline stops waking the
    /// loop while the exit is on its way.
    killed: bool,
}

struct Handle {
    status: ProcessStatus,
    generation: u64,
    sender: Option<mpsc::Sender<IpcMessage>>,
    control: Option<Box<dyn ProcessControl>>,
    pending: VecDeque<IpcMessage>,
    consecutive_crashes: u32,
    next_spawn_at: Option<Instant>,
    shutdown: Option<ShutdownIntent>,
    /// The instance that asked for this one through `agents__spawn`.
    owner: Option<RoutingKey>,
    cwd: Option<String>,
    created_at: String,
}

impl Handle {
    fn new() -> Self {
        Handle {
            status: ProcessStatus::Terminated,
            generation: 0,
            sender: None,
            control: None,
            pending: VecDeque::new(),
            consecutive_crashes: 0,
            next_spawn_at: None,
            shutdown: None,
            owner: None,
            cwd: None,
            created_at: goondan_types::now_iso(),
        }
    }

    fn is_running(&self) -> bool {
        self.control.is_some()
    }

    fn is_ready(&self) -> bool {
        matches!(self.status, ProcessStatus::Idle | ProcessStatus::Processing)
    }
}

/// The orchestrator's main loop.
pub struct Orchestrator {
    swarm: Arc<SwarmInfo>,
    spawner: Arc<dyn Spawner>,
    reset_instance: Option<ResetInstance>,
    crash_ledger: Option<CrashLedger>,
    reconcile_interval: Duration,
    handles: BTreeMap<RoutingKey, Handle>,
    /// The orchestrator's own pending requests by correlation id: the
    /// instance answering, the caller, and where streamed text goes (it
    /// closes when the entry is removed, however the request ends).
    waiters: HashMap<String, (RoutingKey, Waiter, Option<DeltaSink>)>,
    deletes: Vec<PendingDelete>,
    inputs_tx: mpsc::Sender<Input>,
    inputs_rx: mpsc::Receiver<Input>,
    stopping: Option<oneshot::Sender<()>>,
    next_generation: u64,
}

impl Orchestrator {
    /// Starts the loop on the current tokio runtime.
    pub fn start(config: OrchestratorConfig) -> (OrchestratorHandle, tokio::task::JoinHandle<()>) {
        let (inputs_tx, inputs_rx) = mpsc::channel(1024);
        let swarm = Arc::new(config.swarm);
        let orchestrator = Orchestrator {
            swarm: swarm.clone(),
            spawner: config.spawner,
            reset_instance: config.reset_instance,
            crash_ledger: config.crash_ledger,
            reconcile_interval: config.reconcile_interval,
            handles: BTreeMap::new(),
            waiters: HashMap::new(),
            deletes: Vec::new(),
            inputs_tx: inputs_tx.clone(),
            inputs_rx,
            stopping: None,
            next_generation: 1,
        };
        let task = tokio::spawn(orchestrator.run());
        (
            OrchestratorHandle {
                inputs: inputs_tx,
                swarm,
            },
            task,
        )
    }

    async fn run(mut self) {
        let mut next_reconcile = Instant::now() + self.reconcile_interval;
        loop {
            let wake_at = self
                .next_deadline()
                .map_or(next_reconcile, |d| d.min(next_reconcile));
            tokio::select! {
                input = self.inputs_rx.recv() => match input {
                    Some(input) => self.handle_input(input),
                    None => return,
                },
                _ = tokio::time::sleep_until(wake_at) => {
                    if Instant::now() >= next_reconcile {
                        next_reconcile = Instant::now() + self.reconcile_interval;
                    }
                    self.reconcile();
                }
            }
            self.flush_pending();
            if self.stopping.is_some() && self.handles.values().all(|h| !h.is_running()) {
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
            Input::Child {
                key,
                generation,
                message,
            } => {
                if self.current_generation(&key) == Some(generation) {
                    self.on_child_message(&key, *message);
                }
            }
            Input::Exited {
                key,
                generation,
                code,
            } => {
                self.finish_deletes(&key, generation);
                if self.current_generation(&key) == Some(generation) {
                    self.on_exit(&key, code);
                }
            }
            Input::Request {
                agent,
                event,
                reply,
                deltas,
            } => self.on_request(agent, *event, reply, deltas),
            Input::Restart {
                agent,
                instance_key,
                fresh,
                done,
            } => {
                let keys = self.restart(agent.as_deref(), instance_key.as_deref(), fresh);
                let _ = done.send(keys);
            }
            Input::List { reply } => {
                let _ = reply.send(self.list());
            }
            Input::Delete { key, reply } => self.delete(&key, reply),
            Input::Shutdown { done } => self.begin_shutdown(done),
        }
    }

    fn current_generation(&self, key: &RoutingKey) -> Option<u64> {
        self.handles.get(key).map(|handle| handle.generation)
    }

    fn on_request(
        &mut self,
        agent: Option<String>,
        mut event: AgentEvent,
        reply: Waiter,
        deltas: Option<mpsc::UnboundedSender<String>>,
    ) {
        if self.stopping.is_some() {
            let _ = reply.send(Err(OrchestratorError::Stopped));
            return;
        }
        let agent = agent.unwrap_or_else(|| self.swarm.entry_agent.clone());
        if !self.swarm.agents.contains(&agent) {
            let _ = reply.send(Err(OrchestratorError::UnknownAgent {
                agent,
                swarm: self.swarm.swarm_name.clone(),
            }));
            return;
        }
        let instance_key = event
            .instance_key
            .clone()
            .unwrap_or_else(|| self.swarm.instance_key.clone());
        event.instance_key = Some(instance_key.clone());
        let correlation_id = format!("corr_{}", event.id);
        event.reply_to = Some(ReplyChannel {
            target: ORCHESTRATOR.to_string(),
            correlation_id: correlation_id.clone(),
        });
        let key = RoutingKey::new(agent, instance_key);
        self.waiters
            .insert(correlation_id, (key.clone(), reply, deltas));
        let message = event_message(ORCHESTRATOR, &key.to_string(), &event);
        self.deliver(&key, message);
    }

    fn on_child_message(&mut self, key: &RoutingKey, message: IpcMessage) {
        match message.message_type {
            IpcMessageType::ShutdownAck => {
                tracing::debug!(key = %key, "shutdown acknowledged");
            }
            IpcMessageType::Shutdown => {
                tracing::warn!(key = %key, "ignoring a shutdown message sent by a child");
            }
            IpcMessageType::Event => {
                let event: AgentEvent = match serde_json::from_value(message.payload.clone()) {
                    Ok(event) => event,
                    Err(error) => {
                        tracing::warn!(key = %key, code = "E_IPC_MALFORMED", "event payload is not an AgentEvent ({error}); dropped");
                        return;
                    }
                };
                if message.to == ORCHESTRATOR {
                    self.on_event_for_orchestrator(key, event);
                } else {
                    self.route(key, &message.to, message.clone(), &event);
                }
            }
        }
    }

    fn on_event_for_orchestrator(&mut self, key: &RoutingKey, event: AgentEvent) {
        if let Some(notice) = Notice::from_event(&event) {
            self.on_notice(key, notice);
            return;
        }
        if matches!(event.event_type.as_str(), "runtime.spawn" | "runtime.list") {
            self.on_query(key, &event);
            return;
        }
        let in_reply_to = event
            .metadata_value("inReplyTo")
            .and_then(JsonValue::as_str)
            .map(str::to_string);
        match in_reply_to.and_then(|id| self.waiters.remove(&id)) {
            Some((_, waiter, _)) => {
                let _ = waiter.send(Ok(event));
            }
            None => {
                tracing::warn!(key = %key, event_id = %event.id, "event for the orchestrator matches no waiting request; dropped")
            }
        }
    }

    fn on_notice(&mut self, key: &RoutingKey, notice: Notice) {
        if let Notice::TextDelta { in_reply_to, delta } = &notice {
            if let Some((_, _, Some(stream))) = self.waiters.get(in_reply_to) {
                let _ = stream.send(delta.clone());
            }
            return;
        }
        let Some(handle) = self.handles.get_mut(key) else {
            return;
        };
        match notice {
            Notice::TextDelta { .. } => {}
            Notice::Ready => {
                if handle.shutdown.is_none() {
                    handle.status = ProcessStatus::Idle;
                }
                tracing::info!(key = %key, "agent process ready");
            }
            Notice::TurnFinished { ok } => {
                let had_crashed = ok && handle.consecutive_crashes > 0;
                if ok {
                    handle.consecutive_crashes = 0;
                    handle.next_spawn_at = None;
                }
                if handle.status == ProcessStatus::Processing {
                    handle.status = ProcessStatus::Idle;
                }
                if had_crashed {
                    self.save_crashes(key, 0, None);
                }
            }
            Notice::StartError {
                code,
                message,
                suggestion,
            } => {
                tracing::error!(key = %key, code = %code, suggestion = suggestion.as_deref().unwrap_or(""), "agent process failed to start: {message}");
                let failed: Vec<String> = self
                    .waiters
                    .iter()
                    .filter(|(_, (waiting_key, _, _))| waiting_key == key)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in failed {
                    if let Some((_, waiter, _)) = self.waiters.remove(&id) {
                        let _ = waiter.send(Err(OrchestratorError::AgentStart {
                            key: key.to_string(),
                            code: code.clone(),
                            message: message.clone(),
                            suggestion: suggestion.clone(),
                        }));
                    }
                }
            }
        }
    }

    /// Routes an event from `from` to the routing key in `to`.
    fn route(&mut self, from: &RoutingKey, to: &str, message: IpcMessage, event: &AgentEvent) {
        let target = match RoutingKey::parse(to, &from.instance_key) {
            Ok(target) if self.swarm.agents.contains(&target.agent_name) => target,
            Ok(target) => {
                self.reject(
                    from,
                    event,
                    "E_AGENT_NOT_FOUND",
                    &format!(
                        "agent `{}` is not part of swarm `{}`",
                        target.agent_name, self.swarm.swarm_name
                    ),
                );
                return;
            }
            Err(error) => {
                self.reject(from, event, error.code(), &error.to_string());
                return;
            }
        };
        let mut message = message;
        message.to = target.to_string();
        self.deliver(&target, message);
    }

    /// Answers a request that cannot be routed, so the caller fails fast
    /// instead of waiting for its timeout.
    fn reject(&mut self, from: &RoutingKey, event: &AgentEvent, code: &str, reason: &str) {
        tracing::warn!(from = %from, code, "{reason}; event {} dropped", event.id);
        let mut metadata = JsonObject::new();
        goondan_ipc::answer::mark_failed(&mut metadata, code, reason);
        self.answer(from, event, metadata);
    }

    /// Sends the orchestrator's own answer to `event`'s `replyTo`.
    fn answer(&mut self, from: &RoutingKey, event: &AgentEvent, mut metadata: JsonObject) {
        let Some(reply_to) = &event.reply_to else {
            return;
        };
        let mut answer = AgentEvent::new(
            "response",
            EventSource::new(EventSourceKind::Agent, ORCHESTRATOR),
        );
        answer.trace_id = event.trace_id.clone();
        metadata.insert("inReplyTo".into(), reply_to.correlation_id.clone().into());
        answer.metadata = Some(metadata);
        let message = event_message(ORCHESTRATOR, &reply_to.target, &answer);
        self.deliver(from, message);
    }

    /// `runtime.spawn` and `runtime.list` from the agents API.
    fn on_query(&mut self, from: &RoutingKey, event: &AgentEvent) {
        match event.event_type.as_str() {
            "runtime.spawn" => {
                let target = event
                    .metadata_value("target")
                    .and_then(JsonValue::as_str)
                    .unwrap_or_default();
                let key = match RoutingKey::parse(target, &from.instance_key) {
                    Ok(key) if self.swarm.agents.contains(&key.agent_name) => key,
                    _ => {
                        let reason = format!(
                            "agent `{target}` is not part of swarm `{}`",
                            self.swarm.swarm_name
                        );
                        self.reject(from, event, "E_AGENT_NOT_FOUND", &reason);
                        return;
                    }
                };
                let existed = self.handles.get(&key).is_some_and(Handle::is_running);
                let handle = self.handle_for(&key);
                if handle.owner.is_none() && !existed {
                    handle.owner = Some(from.clone());
                    handle.cwd = event
                        .metadata_value("cwd")
                        .and_then(JsonValue::as_str)
                        .map(str::to_string);
                }
                self.ensure_spawned(&key);
                let mut metadata = JsonObject::new();
                metadata.insert("spawned".into(), JsonValue::Bool(!existed));
                self.answer(from, event, metadata);
            }
            _ => {
                let agents: Vec<JsonValue> = self
                    .handles
                    .iter()
                    .filter_map(|(key, handle)| {
                        let owner = handle.owner.as_ref()?;
                        Some(serde_json::json!({
                            "target": key.agent_name,
                            "instanceKey": key.instance_key,
                            "ownerAgent": owner.agent_name,
                            "ownerInstanceKey": owner.instance_key,
                            "createdAt": handle.created_at,
                            "cwd": handle.cwd,
                        }))
                    })
                    .collect();
                let mut metadata = JsonObject::new();
                metadata.insert("agents".into(), JsonValue::Array(agents));
                self.answer(from, event, metadata);
            }
        }
    }

    fn deliver(&mut self, key: &RoutingKey, message: IpcMessage) {
        let handle = self.handle_for(key);
        handle.pending.push_back(message);
        if !handle.is_running() && handle.shutdown.is_none() {
            self.ensure_spawned(key);
        }
    }

    fn ensure_spawned(&mut self, key: &RoutingKey) {
        let Some(handle) = self.handles.get_mut(key) else {
            return;
        };
        if handle.is_running() || self.stopping.is_some() {
            return;
        }
        if let Some(at) = handle.next_spawn_at {
            if Instant::now() < at {
                handle.status = ProcessStatus::CrashLoopBackOff;
                return;
            }
        }
        let generation = self.next_generation;
        self.next_generation += 1;
        match self.spawner.spawn(&SpawnRequest { key: key.clone() }) {
            Ok(spawned) => {
                handle.generation = generation;
                handle.status = ProcessStatus::Spawning;
                handle.sender = Some(spawned.channel.sender);
                handle.control = Some(spawned.control);
                handle.next_spawn_at = None;
                let inputs = self.inputs_tx.clone();
                let mut receiver = spawned.channel.receiver;
                let child_key = key.clone();
                let (reader_done, reader_finished) = oneshot::channel::<()>();
                tokio::spawn(async move {
                    while let Some(message) = receiver.recv().await {
                        let input = Input::Child {
                            key: child_key.clone(),
                            generation,
                            message: Box::new(message),
                        };
                        if inputs.send(input).await.is_err() {
                            break;
                        }
                    }
                    drop(reader_done);
                });
                let inputs = self.inputs_tx.clone();
                let exit = spawned.exit;
                let exit_key = key.clone();
                tokio::spawn(async move {
                    let code = exit.await;
                    // A child's last lines (a start error, an answer) must
                    // reach the loop before its exit does, or they would be
                    // dropped as stale once a new generation runs. The wait
                    // is bounded because a grandchild may hold the pipe.
                    let _ = tokio::time::timeout(EXIT_READ_GRACE, reader_finished).await;
                    let _ = inputs
                        .send(Input::Exited {
                            key: exit_key,
                            generation,
                            code,
                        })
                        .await;
                });
                tracing::info!(key = %key, generation, "spawned agent process");
            }
            Err(error) => {
                tracing::error!(key = %key, code = error.code(), "{error}");
                handle.generation = generation;
                self.record_crash(key);
            }
        }
    }

    fn on_exit(&mut self, key: &RoutingKey, code: Option<i32>) {
        // Every line the process wrote was handled before its exit, so a
        // request it was serving is lost for good.
        self.fail_waiters(key, |key| OrchestratorError::AgentExited {
            key: key.to_string(),
            code,
        });
        let Some(handle) = self.handles.get_mut(key) else {
            return;
        };
        handle.sender = None;
        handle.control = None;
        if let Some(intent) = handle.shutdown.take() {
            handle.status = ProcessStatus::Terminated;
            tracing::info!(key = %key, ?code, "agent process stopped");
            if intent.respawn && self.stopping.is_none() {
                if intent.fresh {
                    if let Some(reset) = &self.reset_instance {
                        reset(key);
                    }
                }
                self.ensure_spawned(key);
            }
            return;
        }
        if code == Some(0) {
            handle.status = ProcessStatus::Terminated;
            tracing::info!(key = %key, "agent process exited");
            if !handle.pending.is_empty() {
                self.ensure_spawned(key);
            }
            return;
        }
        tracing::warn!(key = %key, ?code, "agent process crashed");
        self.record_crash(key);
    }

    /// The handle of `key`, created (with its persisted crash record) on
    /// first use.
    fn handle_for(&mut self, key: &RoutingKey) -> &mut Handle {
        let ledger = &self.crash_ledger;
        self.handles.entry(key.clone()).or_insert_with(|| {
            let mut handle = Handle::new();
            if let Some(ledger) = ledger {
                let record = (ledger.load)(key);
                handle.consecutive_crashes = record.consecutive_crashes;
                handle.next_spawn_at = record
                    .backoff_until
                    .and_then(|until| until.duration_since(SystemTime::now()).ok())
                    .map(|remaining| Instant::now() + remaining);
            }
            handle
        })
    }

    fn save_crashes(&self, key: &RoutingKey, consecutive_crashes: u32, delay: Option<Duration>) {
        if let Some(ledger) = &self.crash_ledger {
            (ledger.save)(
                key,
                CrashRecord {
                    consecutive_crashes,
                    backoff_until: delay.map(|delay| SystemTime::now() + delay),
                },
            );
        }
    }

    fn record_crash(&mut self, key: &RoutingKey) {
        let Some(handle) = self.handles.get_mut(key) else {
            return;
        };
        handle.sender = None;
        handle.control = None;
        handle.consecutive_crashes += 1;
        let consecutive_crashes = handle.consecutive_crashes;
        let delay = respawn_delay(consecutive_crashes);
        self.save_crashes(key, consecutive_crashes, delay);
        let Some(handle) = self.handles.get_mut(key) else {
            return;
        };
        match delay {
            Some(delay) => {
                handle.status = ProcessStatus::CrashLoopBackOff;
                handle.next_spawn_at = Some(Instant::now() + delay);
                tracing::warn!(
                    key = %key,
                    status = "crashLoopBackOff",
                    consecutive_crashes = handle.consecutive_crashes,
                    backoff_ms = delay.as_millis() as u64,
                    "agent process is crash-looping; next respawn after the backoff"
                );
            }
            None => {
                handle.status = ProcessStatus::Crashed;
                self.ensure_spawned(key);
            }
        }
    }

    fn restart(
        &mut self,
        agent: Option<&str>,
        instance_key: Option<&str>,
        fresh: bool,
    ) -> Vec<String> {
        let grace = self.swarm.grace_period;
        let keys: Vec<RoutingKey> = self
            .handles
            .keys()
            .filter(|key| agent.is_none_or(|agent| key.agent_name == agent))
            .filter(|key| instance_key.is_none_or(|instance| key.instance_key == instance))
            .cloned()
            .collect();
        for key in &keys {
            let running = self.handles.get(key).is_some_and(Handle::is_running);
            if running {
                self.request_shutdown(key, ShutdownReason::Restart, grace, true, fresh);
            } else {
                if fresh {
                    if let Some(reset) = &self.reset_instance {
                        reset(key);
                    }
                }
                if let Some(handle) = self.handles.get_mut(key) {
                    handle.consecutive_crashes = 0;
                    handle.next_spawn_at = None;
                }
                self.ensure_spawned(key);
            }
        }
        keys.iter().map(ToString::to_string).collect()
    }

    fn request_shutdown(
        &mut self,
        key: &RoutingKey,
        reason: ShutdownReason,
        grace: Duration,
        respawn: bool,
        fresh: bool,
    ) {
        let Some(handle) = self.handles.get_mut(key) else {
            return;
        };
        if handle.shutdown.is_some() {
            return;
        }
        handle.status = ProcessStatus::Draining;
        handle.shutdown = Some(ShutdownIntent {
            respawn,
            fresh,
            kill_at: Instant::now() + grace,
            killed: false,
        });
        let payload = ShutdownPayload {
            grace_period_ms: grace.as_millis() as u64,
            reason,
        };
        let message = IpcMessage {
            message_type: IpcMessageType::Shutdown,
            from: ORCHESTRATOR.to_string(),
            to: key.to_string(),
            payload: serde_json::to_value(payload).unwrap_or(JsonValue::Null),
        };
        // Shutdown jumps the queue of undelivered events: they stay pending
        // and go to the next process.
        if let Some(sender) = &handle.sender {
            if sender.try_send(message).is_err() {
                if let Some(control) = handle.control.as_mut() {
                    control.kill();
                }
            }
        }
    }

    fn delete(&mut self, key_text: &str, reply: oneshot::Sender<bool>) {
        let keys: Vec<RoutingKey> = self
            .handles
            .keys()
            .filter(|key| key.to_string() == key_text || key.instance_key == key_text)
            .cloned()
            .collect();
        let mut waiting_for = Vec::new();
        for key in keys {
            if let Some(mut handle) = self.handles.remove(&key) {
                if let Some(control) = handle.control.as_mut() {
                    control.kill();
                    waiting_for.push((key.clone(), handle.generation));
                }
            }
            self.fail_waiters(&key, |key| OrchestratorError::Deleted {
                key: key.to_string(),
            });
        }
        if waiting_for.is_empty() {
            let _ = reply.send(false);
        } else {
            self.deletes.push(PendingDelete { waiting_for, reply });
        }
    }

    /// Answers the deletes that were waiting only for this exit.
    fn finish_deletes(&mut self, key: &RoutingKey, generation: u64) {
        for delete in &mut self.deletes {
            delete
                .waiting_for
                .retain(|(waiting_key, waiting_generation)| {
                    !(waiting_key == key && *waiting_generation == generation)
                });
        }
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deletes)
            .into_iter()
            .partition(|delete| delete.waiting_for.is_empty());
        self.deletes = waiting;
        for delete in done {
            let _ = delete.reply.send(true);
        }
    }

    /// Fails the orchestrator's own requests to `key` that were handed to
    /// its process (events still queued go to the next process and keep
    /// their waiters): nothing will answer them.
    fn fail_waiters(&mut self, key: &RoutingKey, error: impl Fn(&RoutingKey) -> OrchestratorError) {
        let queued: Vec<&str> = self
            .handles
            .get(key)
            .map(|handle| {
                handle
                    .pending
                    .iter()
                    .filter_map(|message| message.payload.pointer("/replyTo/correlationId"))
                    .filter_map(JsonValue::as_str)
                    .collect()
            })
            .unwrap_or_default();
        let lost: Vec<String> = self
            .waiters
            .iter()
            .filter(|(id, (waiting_key, _, _))| {
                waiting_key == key && !queued.contains(&id.as_str())
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in lost {
            if let Some((_, waiter, _)) = self.waiters.remove(&id) {
                let _ = waiter.send(Err(error(key)));
            }
        }
    }

    fn list(&self) -> Vec<InstanceStatus> {
        self.handles
            .iter()
            .map(|(key, handle)| InstanceStatus {
                key: key.to_string(),
                agent_name: key.agent_name.clone(),
                instance_key: key.instance_key.clone(),
                status: handle.status,
                pid: handle.control.as_ref().and_then(|control| control.id()),
                consecutive_crashes: handle.consecutive_crashes,
                pending_events: handle.pending.len(),
            })
            .collect()
    }

    fn begin_shutdown(&mut self, done: oneshot::Sender<()>) {
        self.stopping = Some(done);
        let grace = self.swarm.grace_period;
        let keys: Vec<RoutingKey> = self.handles.keys().cloned().collect();
        for key in keys {
            if self.handles.get(&key).is_some_and(Handle::is_running) {
                self.request_shutdown(
                    &key,
                    ShutdownReason::OrchestratorShutdown,
                    grace,
                    false,
                    false,
                );
            }
        }
    }

    fn fail_all_waiters(&mut self) {
        for (_, (_, waiter, _)) in self.waiters.drain() {
            let _ = waiter.send(Err(OrchestratorError::Stopped));
        }
    }

    /// Hands queued events to ready children, in order.
    fn flush_pending(&mut self) {
        for handle in self.handles.values_mut() {
            if !handle.is_ready() || handle.shutdown.is_some() {
                continue;
            }
            let Some(sender) = &handle.sender else {
                continue;
            };
            while let Some(message) = handle.pending.pop_front() {
                match sender.try_send(message) {
                    Ok(()) => {
                        if handle.status == ProcessStatus::Idle {
                            handle.status = ProcessStatus::Processing;
                        }
                    }
                    Err(mpsc::error::TrySendError::Full(message)) => {
                        handle.pending.push_front(message);
                        break;
                    }
                    Err(mpsc::error::TrySendError::Closed(message)) => {
                        handle.pending.push_front(message);
                        break;
                    }
                }
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.handles
            .values()
            .filter_map(|handle| {
                let kill_at = handle
                    .shutdown
                    .as_ref()
                    .filter(|intent| !intent.killed)
                    .map(|intent| intent.kill_at);
                match (kill_at, handle.next_spawn_at) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            })
            .min()
    }

    /// Compares desired and actual state: kills children past their grace
    /// period, respawns instances whose backoff expired and that still have
    /// work or were running.
    fn reconcile(&mut self) {
        let now = Instant::now();
        let mut to_spawn = Vec::new();
        for (key, handle) in self.handles.iter_mut() {
            if let Some(intent) = handle.shutdown.as_mut() {
                if now >= intent.kill_at && !intent.killed {
                    if let Some(control) = handle.control.as_mut() {
                        tracing::warn!(key = %key, "grace period over; killing agent process");
                        control.kill();
                        intent.killed = true;
                    }
                }
                continue;
            }
            let wants_process = !handle.pending.is_empty()
                || matches!(
                    handle.status,
                    ProcessStatus::Crashed | ProcessStatus::CrashLoopBackOff
                );
            let backoff_over = handle.next_spawn_at.is_none_or(|at| now >= at);
            if !handle.is_running() && wants_process && backoff_over {
                to_spawn.push(key.clone());
            }
        }
        for key in to_spawn {
            self.ensure_spawned(&key);
        }
    }
}

fn event_message(from: &str, to: &str, event: &AgentEvent) -> IpcMessage {
    IpcMessage {
        message_type: IpcMessageType::Event,
        from: from.to_string(),
        to: to.to_string(),
        payload: serde_json::to_value(event).unwrap_or(JsonValue::Null),
    }
}
