//! [`OrchestratorHandle`]: how everything outside the main loop talks to
//! it, one [`Input`] at a time.

use super::input::{ConnectionStatus, Input, InstanceStatus, Rewriter};
use crate::ingress::Ingress;
use crate::swarm::SwarmInfo;
use crate::OrchestratorError;
use goondan_ipc::protocol::{ProtocolStats, QueryAnswer};
use goondan_ipc::RoutingKey;
use goondan_types::{AgentEvent, IpcMessage, ProcessStatus};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How often [`OrchestratorHandle::restart_and_wait`] looks again.
const RESTART_POLL: Duration = Duration::from_millis(20);
/// The longest [`OrchestratorHandle::restart_and_wait`] waits.
pub const MAX_RESTART_WAIT: Duration = Duration::from_secs(60);
/// The longest [`OrchestratorHandle::decide`] waits for the instance to
/// record a decision (its process may have to start first).
const MAX_DECISION_WAIT: Duration = Duration::from_secs(30);

/// Where the restart of one instance stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RestartState {
    /// The old process has exited and a new one is ready.
    Restarted,
    /// The old process is still finishing its Turn; it is killed at the
    /// end of the grace period and then replaced.
    Stopping,
    /// The old process has exited; the new one has not finished starting.
    Starting,
    /// The old process has exited and no new one runs (it failed to
    /// start, backs off, or waits for a process slot).
    NotRunning,
}

/// What became of one instance a restart named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartOutcome {
    /// `agentName:instanceKey`.
    pub key: String,
    /// Where it stands.
    pub state: RestartState,
    /// The pid of the process that served it before, if one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_pid: Option<u32>,
    /// The pid of the process serving it now, if one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_pid: Option<u32>,
    /// Its process status now.
    pub status: ProcessStatus,
}

/// A cheap, cloneable way to talk to a running orchestrator.
#[derive(Clone)]
pub struct OrchestratorHandle {
    inputs: mpsc::Sender<Input>,
    swarm: SharedSwarm,
    stats: Arc<ProtocolStats>,
}

/// The swarm the loop runs, as the handles see it; replaced by
/// [`OrchestratorHandle::reconfigure`].
pub(super) type SharedSwarm = Arc<RwLock<Arc<SwarmInfo>>>;

impl OrchestratorHandle {
    pub(super) fn new(
        inputs: mpsc::Sender<Input>,
        swarm: SharedSwarm,
        stats: Arc<ProtocolStats>,
    ) -> Self {
        OrchestratorHandle {
            inputs,
            swarm,
            stats,
        }
    }

    /// The swarm being run (the latest one [`OrchestratorHandle::reconfigure`]
    /// gave).
    pub fn swarm(&self) -> Arc<SwarmInfo> {
        match self.swarm.read() {
            Ok(swarm) => Arc::clone(&swarm),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Replaces the swarm being run (after its bundle changed): new ingress
    /// rules route the next events, new Connections start, removed ones
    /// stop. Running agents are left alone; restart them separately.
    pub async fn reconfigure(&self, swarm: SwarmInfo) -> Result<(), OrchestratorError> {
        let (done, replaced) = oneshot::channel();
        self.send(Input::Reconfigure {
            swarm: Box::new(swarm),
            done,
        })
        .await?;
        replaced.await.map_err(|_| OrchestratorError::Stopped)
    }

    /// Gracefully restarts, because their configuration changed, every
    /// instance of `agents` and the ConnectorProcess of `connections`;
    /// returns the keys. Events for them wait in their bounded queues.
    pub async fn restart_for_config(
        &self,
        agents: Vec<String>,
        connections: Vec<String>,
    ) -> Result<Vec<String>, OrchestratorError> {
        let (done, restarted) = oneshot::channel();
        self.send(Input::RestartForConfig {
            agents,
            connections,
            done,
        })
        .await?;
        restarted.await.map_err(|_| OrchestratorError::Stopped)
    }

    /// Answers a query the loop handed out, such as a
    /// [`SwarmRestartRequest`](super::SwarmRestartRequest). Messages to
    /// one child keep their order, so an answer sent before a restart
    /// reaches the child ahead of its `shutdown`.
    pub async fn answer_query(
        &self,
        to: RoutingKey,
        correlation_id: String,
        answer: QueryAnswer,
    ) -> Result<(), OrchestratorError> {
        self.send(Input::AnswerQuery {
            to,
            correlation_id,
            answer,
        })
        .await
    }

    /// What the orchestrator refused from its children so far.
    pub fn protocol_stats(&self) -> &ProtocolStats {
        &self.stats
    }

    /// Routes `ingress` by its Connection's rules and waits for the answer,
    /// sending the answering Turn's model text to `deltas` as it streams.
    pub async fn ask(
        &self,
        ingress: Ingress,
        deltas: Option<mpsc::UnboundedSender<String>>,
    ) -> Result<AgentEvent, OrchestratorError> {
        self.enqueue(ingress, deltas).await?.answer().await
    }

    /// Queues `ingress` and returns once the orchestrator has it, with its
    /// answer still to come: inputs queued one after another reach their
    /// instance in that order, while their answers are awaited together.
    pub async fn enqueue(
        &self,
        ingress: Ingress,
        deltas: Option<mpsc::UnboundedSender<String>>,
    ) -> Result<PendingAnswer, OrchestratorError> {
        let (reply, answer) = oneshot::channel();
        let event_id = goondan_types::new_event_id();
        self.send(Input::Ingress {
            ingress,
            event_id: event_id.clone(),
            reply,
            deltas,
        })
        .await?;
        Ok(PendingAnswer { event_id, answer })
    }

    /// Queues the ready-made `event` for `agent` (the entry agent when
    /// `None`) and its instance key (the swarm's when the event names
    /// none), no ingress rule consulted, and returns once the orchestrator
    /// has it (so events queued one after another reach their instance in
    /// that order) with its answer still to come.
    pub async fn enqueue_request(
        &self,
        agent: Option<String>,
        mut event: AgentEvent,
    ) -> Result<PendingAnswer, OrchestratorError> {
        let swarm = self.swarm();
        let agent = agent.unwrap_or_else(|| swarm.entry_agent.clone());
        let instance_key = event
            .instance_key
            .get_or_insert_with(|| swarm.instance_key.clone())
            .clone();
        let (reply, answer) = oneshot::channel();
        let event_id = event.id.clone();
        self.send(Input::Deliver {
            key: RoutingKey::new(agent, instance_key),
            event: Box::new(event),
            reply,
            deltas: None,
            stored: None,
        })
        .await?;
        Ok(PendingAnswer { event_id, answer })
    }

    /// Queues the ready-made `event` for exactly the instance `key`, no
    /// ingress rule consulted, sending the answering Turn's model text to
    /// `deltas` as it streams. Resolves once the event is durable in the
    /// instance's inbox (or was refused), with its answer still to come.
    pub async fn deliver_stored(
        &self,
        key: RoutingKey,
        event: AgentEvent,
        deltas: mpsc::UnboundedSender<String>,
    ) -> Result<PendingAnswer, OrchestratorError> {
        let (reply, answer) = oneshot::channel();
        let (stored, is_stored) = oneshot::channel();
        let event_id = event.id.clone();
        self.send(Input::Deliver {
            key,
            event: Box::new(event),
            reply,
            deltas: Some(deltas),
            stored: Some(stored),
        })
        .await?;
        let mut pending = PendingAnswer { event_id, answer };
        match is_stored.await {
            Ok(()) => Ok(pending),
            // Refused before it was stored: the refusal is the answer.
            Err(_) => match pending.answer.try_recv() {
                Ok(Err(error)) => Err(error),
                _ => Err(OrchestratorError::Stopped),
            },
        }
    }

    /// Hands this orchestrator's instance `to` an event an instance on
    /// another host sent it (see [`crate::RemoteInstances`]): a request or
    /// a send becomes a Turn, an answer goes to the waiting process.
    pub async fn deliver_from_remote(
        &self,
        to: RoutingKey,
        message: IpcMessage,
    ) -> Result<(), OrchestratorError> {
        self.send(Input::FromRemote { to, message }).await
    }

    /// Cancels the Turn answering the request `event_id` (see
    /// [`PendingAnswer::event_id`]): dropped when it still waits in a
    /// queue, stopped where it stands when it runs. Its requester is
    /// answered with `E_TURN_CANCELLED`. False when nothing waits for
    /// that request any more (it was answered, or never made).
    pub async fn cancel(&self, event_id: String) -> Result<bool, OrchestratorError> {
        let (done, cancelled) = oneshot::channel();
        self.send(Input::Cancel { event_id, done }).await?;
        cancelled.await.map_err(|_| OrchestratorError::Stopped)
    }

    /// Cancels, for an operator `by` (`cli`), the running Turn of every
    /// instance `key` names (an `agent:instance` key, or an instance key
    /// naming that key of every agent), then waits up to `wait` until
    /// those Turns are over. Their requesters are answered
    /// `E_TURN_CANCELLED`; `E_NO_TURN_RUNNING` when none ran.
    pub async fn cancel_running(
        &self,
        key: String,
        by: String,
        wait: Duration,
    ) -> Result<CancelOutcome, OrchestratorError> {
        let (done, cancelled) = oneshot::channel();
        self.send(Input::CancelRunning { key, by, done }).await?;
        let cancelled = cancelled.await.map_err(|_| OrchestratorError::Stopped)??;
        let pending = cancelled
            .iter()
            .filter_map(|turn| Some((RoutingKey::split_whole(&turn.key)?, turn.event_id.clone())))
            .collect();
        let (done, over) = oneshot::channel();
        self.send(Input::WatchTurns { pending, done }).await?;
        let ended = tokio::time::timeout(wait, over)
            .await
            .is_ok_and(|over| over.is_ok());
        Ok(CancelOutcome { cancelled, ended })
    }

    /// Holds the instances `keys` (`agent:instanceKey` each) for an
    /// operator who rewrites their history: their processes are stopped
    /// (gracefully) and get no successor until
    /// [`OrchestratorHandle::release`]; events for them wait. Returns the
    /// keys whose process was stopped, once each has exited, so the
    /// caller can take the instances' locks. Refused with
    /// `E_TURN_RUNNING` while one of them runs a Turn.
    /// Refused on a cluster member (`E_CLUSTER_UNSUPPORTED`): its
    /// instances' history is not in its files.
    pub async fn hold(&self, keys: Vec<String>) -> Result<Vec<String>, OrchestratorError> {
        let (reply, held) = oneshot::channel();
        self.send(Input::Hold {
            keys,
            rewriter: Rewriter::HostFiles,
            reply,
        })
        .await?;
        held.await.map_err(|_| OrchestratorError::Stopped)?
    }

    /// Holds `keys` like [`OrchestratorHandle::hold`], for `rewriter`,
    /// after cancelling their running Turns in the name of `cancel_as`
    /// when given (waiting up to `settle` for each to end; one still
    /// running then refuses the hold with `E_TURN_RUNNING`). What the
    /// control socket does for `gdn instance fork|rewind --cancel`, and a
    /// cluster host for a rewind of an instance it owns.
    pub async fn cancel_and_hold(
        &self,
        keys: Vec<String>,
        cancel_as: Option<String>,
        settle: Duration,
        rewriter: Rewriter,
    ) -> Result<Held, OrchestratorError> {
        let mut cancelled = Vec::new();
        if let Some(by) = &cancel_as {
            for key in &keys {
                match self.cancel_running(key.clone(), by.clone(), settle).await {
                    Ok(outcome) => {
                        cancelled.extend(outcome.cancelled);
                        if !outcome.ended {
                            return Err(OrchestratorError::TurnRunning { key: key.clone() });
                        }
                    }
                    Err(OrchestratorError::NoTurnRunning { .. }) => {}
                    Err(error) => return Err(error),
                }
            }
        }
        let (reply, held) = oneshot::channel();
        self.send(Input::Hold {
            keys,
            rewriter,
            reply,
        })
        .await?;
        let stopped = held.await.map_err(|_| OrchestratorError::Stopped)??;
        Ok(Held { stopped, cancelled })
    }

    /// Lets go of instances [`OrchestratorHandle::hold`] held.
    pub async fn release(&self, keys: Vec<String>) -> Result<(), OrchestratorError> {
        self.send(Input::Release { keys }).await
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

    /// Restarts like [`OrchestratorHandle::restart`], then waits (at most
    /// `wait`, itself at most [`MAX_RESTART_WAIT`]) until every old process
    /// has exited and its replacement is ready, and reports where each
    /// instance stands then; nothing is reported done that is not.
    pub async fn restart_and_wait(
        &self,
        agent: Option<String>,
        instance_key: Option<String>,
        fresh: bool,
        wait: Duration,
    ) -> Result<Vec<RestartOutcome>, OrchestratorError> {
        let before = self.processes().await?;
        let keys = self.restart(agent, instance_key, fresh).await?;
        let deadline = tokio::time::Instant::now() + wait.min(MAX_RESTART_WAIT);
        loop {
            let now = self.processes().await?;
            let outcomes: Vec<RestartOutcome> = keys
                .iter()
                .map(|key| restart_outcome(key, before.get(key), now.get(key)))
                .collect();
            // Backing off is settled too: nothing changes before it ends.
            // So is a crashed one with no process: a Connection its bundle
            // refused again stays down.
            let settled = outcomes.iter().all(|outcome| {
                outcome.state == RestartState::Restarted
                    || outcome.status == ProcessStatus::CrashLoopBackOff
                    || (outcome.status == ProcessStatus::Crashed
                        && outcome.state == RestartState::NotRunning)
            });
            if settled || tokio::time::Instant::now() >= deadline {
                return Ok(outcomes);
            }
            tokio::time::sleep(RESTART_POLL).await;
        }
    }

    /// Every process a restart may concern, by routing key: the
    /// instances and the Connections' ConnectorProcesses.
    async fn processes(&self) -> Result<HashMap<String, InstanceStatus>, OrchestratorError> {
        let mut processes: HashMap<String, InstanceStatus> = self
            .list()
            .await?
            .into_iter()
            .map(|status| (status.key.clone(), status))
            .collect();
        for connection in self.connections().await? {
            let key = RoutingKey::connection(connection.connection);
            processes.insert(
                key.to_string(),
                InstanceStatus {
                    key: key.to_string(),
                    agent_name: key.agent_name,
                    instance_key: key.instance_key,
                    status: connection.status,
                    pid: connection.pid,
                    consecutive_crashes: connection.consecutive_crashes,
                    pending_events: 0,
                    in_flight_events: 0,
                    backoff_until: None,
                    generation: connection.generation,
                },
            );
        }
        Ok(processes)
    }

    /// Every instance the orchestrator knows.
    pub async fn list(&self) -> Result<Vec<InstanceStatus>, OrchestratorError> {
        let (reply, list) = oneshot::channel();
        self.send(Input::List { reply }).await?;
        list.await.map_err(|_| OrchestratorError::Stopped)
    }

    /// Every Connection's ConnectorProcess, with the error its last
    /// process refused to start with.
    pub async fn connections(&self) -> Result<Vec<ConnectionStatus>, OrchestratorError> {
        let (reply, connections) = oneshot::channel();
        self.send(Input::Connections { reply }).await?;
        connections.await.map_err(|_| OrchestratorError::Stopped)
    }

    /// Starts the process of the instance `key` ahead of its first event
    /// (unless one runs, the cap is reached, or another host serves it),
    /// so that event does not wait for a process to start. An instance
    /// with nothing to do is passivated after the idle time as any other.
    pub async fn warm(&self, key: RoutingKey) -> Result<(), OrchestratorError> {
        self.send(Input::Warm { key }).await
    }

    /// Kills the process serving `key` (an `agent:instance` key or an
    /// instance key, which matches every agent of that instance) and
    /// forgets it; true when something was running.
    pub async fn delete(&self, key: String) -> Result<bool, OrchestratorError> {
        let (reply, deleted) = oneshot::channel();
        self.send(Input::Delete { key, reply }).await?;
        deleted.await.map_err(|_| OrchestratorError::Stopped)
    }

    /// Hands a person's `decision` to the instance `key` that holds the
    /// approval (starting its process if none runs) and waits until it
    /// recorded it, at most [`MAX_DECISION_WAIT`]: only then is the
    /// decision acknowledged.
    pub async fn decide(
        &self,
        key: RoutingKey,
        decision: goondan_types::ApprovalDecision,
    ) -> Result<(), OrchestratorError> {
        let (reply, decided) = oneshot::channel();
        let shown = key.to_string();
        self.send(Input::Decide {
            key,
            decision,
            reply,
        })
        .await?;
        recorded(shown, decided).await
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

/// What [`OrchestratorHandle::cancel_and_hold`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The instances whose process was stopped for the hold.
    pub stopped: Vec<String>,
    /// The Turns cancelled first.
    pub cancelled: Vec<super::CancelledTurn>,
}

/// What [`OrchestratorHandle::cancel_running`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelOutcome {
    /// The Turns it cancelled.
    pub cancelled: Vec<super::CancelledTurn>,
    /// Whether every one of them was over before the wait ran out.
    pub ended: bool,
}

/// The answer to an input [`OrchestratorHandle::enqueue`] queued.
#[derive(Debug)]
pub struct PendingAnswer {
    event_id: String,
    answer: oneshot::Receiver<Result<AgentEvent, OrchestratorError>>,
}

impl PendingAnswer {
    /// The id of the event the request became, which
    /// [`OrchestratorHandle::cancel`] takes.
    pub fn event_id(&self) -> &str {
        &self.event_id
    }

    /// Waits for the answer.
    pub async fn answer(self) -> Result<AgentEvent, OrchestratorError> {
        self.answer.await.map_err(|_| OrchestratorError::Stopped)?
    }
}

/// Compares an instance before and after a restart.
fn restart_outcome(
    key: &str,
    before: Option<&InstanceStatus>,
    now: Option<&InstanceStatus>,
) -> RestartOutcome {
    let old_generation = before.and_then(|status| status.generation);
    let old_pid = before.and_then(|status| status.pid);
    let generation = now.and_then(|status| status.generation);
    let status = now.map_or(ProcessStatus::Terminated, |status| status.status);
    let new_pid = now.and_then(|status| status.pid);
    let state = match (old_generation, generation) {
        (Some(old), Some(current)) if old == current => RestartState::Stopping,
        (_, Some(_)) if matches!(status, ProcessStatus::Idle | ProcessStatus::Processing) => {
            RestartState::Restarted
        }
        (_, Some(_)) => RestartState::Starting,
        (_, None) => RestartState::NotRunning,
    };
    RestartOutcome {
        key: key.to_string(),
        state,
        old_pid,
        new_pid: new_pid.filter(|_| state != RestartState::Stopping),
        status,
    }
}

/// Waits for the instance `key` to say it recorded a decision handed to
/// it, at most [`MAX_DECISION_WAIT`]: the one wait behind both doors a
/// decision comes through (the control socket's, through
/// [`OrchestratorHandle::decide`], and a chat connector's query).
pub(super) async fn recorded(
    key: String,
    decided: oneshot::Receiver<Result<(), OrchestratorError>>,
) -> Result<(), OrchestratorError> {
    match tokio::time::timeout(MAX_DECISION_WAIT, decided).await {
        Ok(answer) => answer.map_err(|_| OrchestratorError::Stopped)?,
        Err(_) => Err(OrchestratorError::Approval {
            key,
            code: "E_APPROVAL_TIMEOUT".into(),
            message: format!(
                "the instance did not confirm the decision within {} s; it may still record it",
                MAX_DECISION_WAIT.as_secs()
            ),
        }),
    }
}
