//! The closed set of inputs the main loop takes from outside ([`Input`]),
//! and what they carry back.
//!
//! It sits below both ends of the channel: the handle (`client`) builds
//! inputs, the loop `match`es them, and this module knows neither.

use crate::ingress::Ingress;
use crate::swarm::SwarmInfo;
use crate::OrchestratorError;
use goondan_ipc::protocol::QueryAnswer;
use goondan_ipc::{Link, RoutingKey};
use goondan_types::{AgentEvent, ErrorBody, IpcMessage, ProcessStatus};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

/// The live state of one instance, as `gdn instance list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Events waiting for delivery (queued, not yet handed to a process).
    pub pending_events: usize,
    /// Events handed to the process whose Turns have not finished.
    #[serde(default)]
    pub in_flight_events: usize,
    /// While backing off after crashes: when the next process may start
    /// (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_until: Option<String>,
    /// Which process serves the instance (increases with every process
    /// started), while one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
}

/// The live state of one Connection's ConnectorProcess, so a client (`gdn
/// run --detach`) can tell a Connection that refused to start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionStatus {
    /// The Connection's name.
    pub connection: String,
    /// Its process state (`idle` once the connector said it is ready).
    pub status: ProcessStatus,
    /// The OS pid while a process runs.
    pub pid: Option<u32>,
    /// Crashes since it last stayed up.
    pub consecutive_crashes: u32,
    /// Why its last process refused to start, until one becomes ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<ErrorBody>,
    /// True when the bundle refused it (`last_error` says why): it stays
    /// down until the bundle changes or the swarm is restarted, rather
    /// than being retried with the crash backoff.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused_by_config: bool,
    /// Which process serves it (increases with every process started),
    /// while one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
}

/// Where the streamed model text of an awaited answer goes.
pub(super) type DeltaSink = mpsc::UnboundedSender<String>;

/// Where the instance's answer to a decision goes.
pub(super) type DecisionReply = oneshot::Sender<Result<(), OrchestratorError>>;

/// A reply the orchestrator itself waits for (a CLI input, for example).
pub(super) type Reply = oneshot::Sender<Result<AgentEvent, OrchestratorError>>;

/// Who rewrites the history of instances an operator holds, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewriter {
    /// A client of the control socket, in this host's instance files:
    /// refused on a cluster member, whose conversations are not there but
    /// in the cluster's log.
    HostFiles,
    /// This cluster host itself, in the instances' log in the cluster
    /// (`gdn instance rewind` through the instance's owner).
    ClusterHost,
}

/// The closed set of requests the main loop takes from outside (the
/// transport's messages arrive on their own channel).
pub enum Input {
    /// A process ended (its exit code; `None` when a signal ended it).
    Exited {
        /// Which process.
        link: Link,
        /// Its exit code.
        code: Option<i32>,
    },
    /// Route an ingress event by its Connection's rules, run a Turn for
    /// it, hand its answer to `reply` and its streamed text to `deltas`.
    Ingress {
        /// Where the input came from and where it goes.
        ingress: Ingress,
        /// The id the routed event gets, chosen by the caller so it can
        /// cancel the Turn.
        event_id: String,
        /// Where the answer goes.
        reply: Reply,
        /// Where streamed text goes.
        deltas: Option<DeltaSink>,
    },
    /// Run a Turn for an event already built for a known instance (a
    /// cluster host's inbox delivery), hand its answer to `reply`.
    Deliver {
        /// The instance.
        key: RoutingKey,
        /// The event, with its own id.
        event: Box<AgentEvent>,
        /// Where the answer goes.
        reply: Reply,
        /// Where streamed text goes.
        deltas: Option<DeltaSink>,
        /// Told once the event is durable in the instance's inbox.
        stored: Option<oneshot::Sender<()>>,
    },
    /// Gracefully restart the matching instances.
    Restart {
        /// Only this agent's.
        agent: Option<String>,
        /// Only this instance key's.
        instance_key: Option<String>,
        /// Clear history first.
        fresh: bool,
        /// The restarted keys.
        done: oneshot::Sender<Vec<String>>,
    },
    /// Gracefully restart what a configuration change affects (reason
    /// `config_change`): every instance of `agents`, the ConnectorProcess
    /// of `connections`.
    RestartForConfig {
        /// Agents whose instances restart.
        agents: Vec<String>,
        /// Connections whose ConnectorProcess restarts.
        connections: Vec<String>,
        /// The restarted keys.
        done: oneshot::Sender<Vec<String>>,
    },
    /// Replace the swarm being run: routing uses the new ingress rules,
    /// Connections that appeared start and those that went away stop.
    Reconfigure {
        /// The new swarm.
        swarm: Box<SwarmInfo>,
        /// Answered once the swarm is replaced.
        done: oneshot::Sender<()>,
    },
    /// Report every instance.
    List {
        /// Where the list goes.
        reply: oneshot::Sender<Vec<InstanceStatus>>,
    },
    /// Report every Connection's ConnectorProcess.
    Connections {
        /// Where the list goes.
        reply: oneshot::Sender<Vec<ConnectionStatus>>,
    },
    /// Start the process of an instance ahead of its first event.
    Warm {
        /// The instance.
        key: RoutingKey,
    },
    /// Stop and forget an instance.
    Delete {
        /// `agent:instance` or an instance key.
        key: String,
        /// True when something was running.
        reply: oneshot::Sender<bool>,
    },
    /// An event another host's instance sent to one of ours.
    FromRemote {
        /// The instance it is for.
        to: RoutingKey,
        /// The `event` message.
        message: IpcMessage,
    },
    /// Cancel the Turn of one of the orchestrator's own requests.
    Cancel {
        /// The request's event id (the one the caller chose or the event
        /// carries).
        event_id: String,
        /// True when the request was still waiting for its answer.
        done: oneshot::Sender<bool>,
    },
    /// Cancel the running Turn of the instances a key names, for an
    /// operator (`gdn instance cancel`).
    CancelRunning {
        /// `agent:instance` or an instance key.
        key: String,
        /// Who asked (`cli`), recorded with the Turn.
        by: String,
        /// The Turns cancelled, or `E_NO_TURN_RUNNING`.
        done: oneshot::Sender<Result<Vec<super::CancelledTurn>, OrchestratorError>>,
    },
    /// Answer once these in-flight events are over (their Turns finished
    /// or their process ended).
    WatchTurns {
        /// The instances and event ids.
        pending: Vec<(RoutingKey, String)>,
        /// Answered when none is in flight any more.
        done: oneshot::Sender<()>,
    },
    /// Stop the processes of these instances (`agent:instanceKey` each)
    /// and keep them stopped, for an operator rewriting their history.
    Hold {
        /// The instances.
        keys: Vec<String>,
        /// Where their history is rewritten.
        rewriter: Rewriter,
        /// The keys whose process was stopped, once each exited; or why
        /// the hold was refused (`E_TURN_RUNNING`).
        reply: oneshot::Sender<Result<Vec<String>, OrchestratorError>>,
    },
    /// Let go of instances an earlier [`Input::Hold`] held.
    Release {
        /// The instances.
        keys: Vec<String>,
    },
    /// Answer a child's query that was handed out of the loop (a
    /// [`SwarmRestartRequest`](super::SwarmRestartRequest)).
    AnswerQuery {
        /// The child that asked.
        to: RoutingKey,
        /// Its query's correlation id.
        correlation_id: String,
        /// The answer.
        answer: QueryAnswer,
    },
    /// Hand a person's decision to the instance holding the approval
    /// (starting its process if none runs); answered once the instance
    /// recorded it.
    Decide {
        /// The instance.
        key: RoutingKey,
        /// The decision.
        decision: goondan_types::ApprovalDecision,
        /// Answered with the instance's answer.
        reply: DecisionReply,
    },
    /// Drain everything and stop.
    Shutdown {
        /// Answered once every process is gone.
        done: oneshot::Sender<()>,
    },
}
