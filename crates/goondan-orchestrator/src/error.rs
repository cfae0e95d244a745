//! Orchestrator errors.

use goondan_ipc::protocol::{Failure, QueryAnswer};
use goondan_ipc::WireCode;
use thiserror::Error;

/// A failed orchestrator operation.
#[derive(Debug, Error)]
pub enum OrchestratorError {
    /// A child process could not be started.
    #[error("could not start the process for {key}: {source}")]
    Spawn {
        /// The routing key.
        key: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The target agent is not part of the swarm.
    #[error("agent `{agent}` is not part of swarm `{swarm}`")]
    UnknownAgent {
        /// The requested agent.
        agent: String,
        /// The swarm.
        swarm: String,
    },
    /// An agent process reported a start-up failure.
    #[error("{key} failed to start: {message}")]
    AgentStart {
        /// The routing key.
        key: String,
        /// The child's code.
        code: String,
        /// The child's message.
        message: String,
        /// The child's suggested fix.
        suggestion: Option<String>,
    },
    /// Every process the request was handed to died before answering it.
    #[error("{key} died {attempts} times while handling this event (last: {}); the event was given up, and the instance keeps what it recorded", exit_text(*.code))]
    AgentExited {
        /// How many processes died holding the event.
        attempts: u32,
        /// The routing key.
        key: String,
        /// The exit code, `None` when a signal ended it.
        code: Option<i32>,
    },
    /// The request's Turn was cancelled by its requester, and the process
    /// running it died before it said so: the event is not run again.
    #[error("the turn of {key} was cancelled")]
    TurnCancelled {
        /// The routing key.
        key: String,
    },
    /// The instance serving a request was deleted.
    #[error("{key} was deleted before answering")]
    Deleted {
        /// The routing key.
        key: String,
    },
    /// The orchestrator loop is gone.
    #[error("the orchestrator has stopped")]
    Stopped,
    /// The instance holds this event id already, or consumed it recently:
    /// it does not run twice.
    #[error("{key} already holds event {event_id}; it does not run twice")]
    Duplicate {
        /// The instance.
        key: String,
        /// The event id.
        event_id: String,
    },
    /// An input names an instance key that holds a character that changes
    /// how the key is shown (a control or bidi character): refused at
    /// the door, before anything is stored.
    #[error("the instance key `{key}` holds {character}, which an instance key may not hold")]
    InvalidInstanceKey {
        /// The key, its forbidden characters escaped.
        key: String,
        /// The first forbidden character, escaped.
        character: String,
    },
    /// The instance's durable inbox could not store the input, so it was
    /// not acknowledged.
    #[error("the inbox of {key} could not store the input: {source}")]
    Inbox {
        /// The instance.
        key: String,
        /// Why.
        #[source]
        source: goondan_store::StoreError,
    },
    /// The event is for an instance another host serves, and that
    /// instance's inbox did not store it: it was not acknowledged.
    #[error("the event for {key} was not stored in its inbox on the cluster: {} ({})", cause.message, cause.code)]
    Forward {
        /// The instance.
        key: String,
        /// Why (the cluster's code and message).
        cause: goondan_types::ErrorBody,
    },
    /// A decision on an approval was not recorded by the instance that
    /// holds it (no open approval has that id, it was decided already, or
    /// its store failed), or no answer came in time.
    #[error("{key}: {message}")]
    Approval {
        /// The instance.
        key: String,
        /// The agent's code (`E_APPROVAL_NOT_FOUND`, a store code), or
        /// `E_APPROVAL_TIMEOUT`.
        code: String,
        /// What happened.
        message: String,
    },
    /// Too many events wait for one instance.
    #[error("{key} already has {limit} events waiting; this one was refused")]
    QueueFull {
        /// The instance.
        key: String,
        /// The limit (`policy.queues.maxQueuedEvents`).
        limit: usize,
    },
    /// The swarm runs as many agent processes as `policy.processes.maxLive`
    /// allows and none of them is idle.
    #[error("{key} needs a process, but the swarm already runs {limit} agent processes (policy.processes.maxLive) and none is idle; the event was refused")]
    InstanceLimit {
        /// The instance that needed a process.
        key: String,
        /// The cap.
        limit: usize,
    },
    /// The instance crashed repeatedly and must not start before `until`.
    #[error("{key} crashed {consecutive_crashes} times in a row and is backing off until {until}; the input was not delivered")]
    Backoff {
        /// The instance.
        key: String,
        /// When the next process may start (RFC 3339).
        until: String,
        /// How long that is from now.
        remaining_ms: u64,
        /// Crashes since its last successful Turn.
        consecutive_crashes: u32,
    },
    /// A message would exceed the IPC frame bound.
    #[error(
        "a message for {key} is {bytes} bytes, over the {limit}-byte IPC limit; it was refused"
    )]
    TooLarge {
        /// The instance.
        key: String,
        /// Its encoded size.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
    /// No ingress rule of the Connection matches the event.
    #[error("no ingress rule of Connection/{connection} matches event `{event}`")]
    NoIngressRoute {
        /// The Connection.
        connection: String,
        /// The event name.
        event: String,
    },
    /// A child broke the protocol.
    #[error("{key}: {source}")]
    Protocol {
        /// The child.
        key: String,
        /// What was wrong.
        #[source]
        source: goondan_ipc::ProtocolError,
    },
    /// An operator asked to cancel the Turn of an instance that runs none.
    #[error("no Turn of `{key}` is running; nothing was cancelled")]
    NoTurnRunning {
        /// The key as the operator gave it.
        key: String,
    },
    /// An operator asked to hold an instance whose process runs a Turn
    /// (or has one waiting), to rewrite its history.
    #[error("{key} is running a Turn; its history was left as it is")]
    TurnRunning {
        /// The instance.
        key: String,
    },
    /// A fork or a rewind was refused, or failed, in the store (the Turn
    /// or the instance is not there, the new key is taken, the disk
    /// failed): its own code, message and suggestion.
    #[error(transparent)]
    Rewrite(goondan_store::StoreError),
    /// The operation is not available on a cluster member yet.
    #[error("{what} is not supported in a cluster (`gdn run --cluster`) yet")]
    ClusterUnsupported {
        /// What was asked.
        what: String,
    },
    /// The control socket failed.
    #[error("control socket {path}: {source}")]
    Control {
        /// The socket path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl OrchestratorError {
    /// `Err(InvalidInstanceKey)` when `key` holds a character no instance
    /// key may hold ([`goondan_types::instance_key`]).
    pub fn check_instance_key(key: &str) -> Result<(), OrchestratorError> {
        use goondan_types::instance_key::{escaped, forbidden_character};
        match forbidden_character(key) {
            None => Ok(()),
            Some(character) => Err(OrchestratorError::InvalidInstanceKey {
                key: escaped(key),
                character: character.escape_unicode().to_string(),
            }),
        }
    }

    /// The stable code.
    pub fn code(&self) -> &str {
        match self {
            OrchestratorError::Spawn { .. } => "E_AGENT_SPAWN",
            OrchestratorError::UnknownAgent { .. } => "E_AGENT_NOT_FOUND",
            OrchestratorError::AgentStart { code, .. } => code,
            OrchestratorError::Approval { code, .. } => code,
            OrchestratorError::AgentExited { .. } => "E_AGENT_CRASHED",
            OrchestratorError::TurnCancelled { .. } => "E_TURN_CANCELLED",
            OrchestratorError::Deleted { .. } => "E_INSTANCE_DELETED",
            OrchestratorError::Stopped => "E_ORCHESTRATOR_STOPPED",
            OrchestratorError::Duplicate { .. } => "E_EVENT_DUPLICATE",
            OrchestratorError::Inbox { .. } => "E_INBOX_WRITE",
            OrchestratorError::InvalidInstanceKey { .. } => {
                goondan_types::instance_key::INSTANCE_KEY_INVALID
            }
            OrchestratorError::QueueFull { .. } => WireCode::QueueFull.as_str(),
            OrchestratorError::Forward { .. } => WireCode::ForwardFailed.as_str(),
            OrchestratorError::InstanceLimit { .. } => "E_INSTANCE_LIMIT",
            OrchestratorError::Backoff { .. } => "E_AGENT_BACKOFF",
            OrchestratorError::NoIngressRoute { .. } => "E_INGRESS_NO_ROUTE",
            OrchestratorError::TooLarge { .. } => "E_IPC_TOO_LARGE",
            OrchestratorError::Protocol { source, .. } => source.code(),
            OrchestratorError::Control { .. } => "E_CONTROL_SOCKET",
            OrchestratorError::NoTurnRunning { .. } => "E_NO_TURN_RUNNING",
            OrchestratorError::TurnRunning { .. } => "E_TURN_RUNNING",
            OrchestratorError::ClusterUnsupported { .. } => "E_CLUSTER_UNSUPPORTED",
            OrchestratorError::Rewrite(source) => source.code(),
        }
    }

    /// Its code, message and suggestion, as every port and the control
    /// socket answer a failure.
    pub fn to_body(&self) -> goondan_types::ErrorBody {
        goondan_types::ErrorBody {
            code: self.code().to_string(),
            message: self.to_string(),
            suggestion: self.suggestion(),
        }
    }

    /// How to fix it, when known.
    pub fn suggestion(&self) -> Option<String> {
        match self {
            OrchestratorError::AgentStart { suggestion, .. } => suggestion.clone(),
            OrchestratorError::UnknownAgent { swarm, .. } => Some(format!(
                "add the agent to Swarm/{swarm} spec.agents, or call one of its agents"
            )),
            OrchestratorError::AgentExited { key, .. } => Some(format!(
                "send the input again; `gdn logs --process {}` shows why it exited",
                key.replacen(':', "-", 1)
            )),
            OrchestratorError::QueueFull { .. } => Some(
                "retry later, or raise the Swarm's policy.queues.maxQueuedEvents".into(),
            ),
            OrchestratorError::InstanceLimit { .. } => Some(
                "retry when an instance has finished its Turn (idle instances are passivated to make room), delete instances you no longer need with `gdn instance delete`, or raise the Swarm's policy.processes.maxLive".into(),
            ),
            OrchestratorError::Backoff { key, until, .. } => Some(format!(
                "retry after {until}, or clear the backoff and start it now with `gdn instance restart {key}`; `gdn logs --process {}` shows why it crashed",
                key.replacen(':', "-", 1)
            )),
            OrchestratorError::TooLarge { .. } => Some(
                "send large content as a file and pass its path instead".into(),
            ),
            OrchestratorError::NoIngressRoute { connection, .. } => Some(format!(
                "add a rule without `match` at the end of Connection/{connection} spec.ingress.rules"
            )),
            OrchestratorError::Protocol { source, .. } => Some(source.suggestion().into()),
            OrchestratorError::Control { .. } => Some(
                "is an orchestrator running for this state root? start one with `gdn run --detach` in the bundle's folder".into(),
            ),
            OrchestratorError::InvalidInstanceKey { .. } => Some(
                "use a key without control or bidirectional formatting characters (a platform's user or chat id, `user:123`)".into(),
            ),
            OrchestratorError::Duplicate { .. } => Some(
                "give a new input a new event id; the first one's Turn and answer are in the instance's conversation".into(),
            ),
            OrchestratorError::Forward { cause, .. } => Some(cause.suggestion.clone().unwrap_or_else(|| {
                "send the event again; `gdn cluster status` shows whether the cluster's servers answer".into()
            })),
            OrchestratorError::Approval { .. } => Some(
                "`gdn approvals` lists the approvals still open, with their ids".into(),
            ),
            OrchestratorError::NoTurnRunning { .. } => Some(
                "`gdn instance list` shows which instances are processing".into(),
            ),
            OrchestratorError::TurnRunning { key } => Some(format!(
                "wait until its Turn ends, cancel it with `gdn instance cancel {key}`, or pass --cancel"
            )),
            OrchestratorError::ClusterUnsupported { .. } => Some(
                "stop the cluster's hosts and run the command against one host's state root, or export the instance with `gdn instance export`".into(),
            ),
            OrchestratorError::Inbox { .. } => Some(
                "check the disk under the System Root (space, permissions), then send the input again".into(),
            ),
            OrchestratorError::Rewrite(source) => source.suggestion(),
            _ => None,
        }
    }
}

/// How a process ended, as people read it.
pub(crate) fn exit_text(code: Option<i32>) -> String {
    match code {
        Some(code) => format!("exit code {code}"),
        None => "killed by a signal".to_string(),
    }
}

/// The answer to a query the orchestrator could not carry out.
pub(crate) fn failed(error: OrchestratorError) -> QueryAnswer {
    QueryAnswer::Failed(Failure {
        code: error.code().to_string(),
        message: error.to_string(),
        suggestion: None,
    })
}
