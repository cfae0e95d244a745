//! Orchestrator errors.

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
    /// The process serving a request exited before answering it.
    #[error("{key} exited ({}) before answering; its instance is restarted and keeps what it recorded", exit_text(*.code))]
    AgentExited {
        /// The routing key.
        key: String,
        /// The exit code, `None` when a signal ended it.
        code: Option<i32>,
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
    /// The stable code.
    pub fn code(&self) -> &str {
        match self {
            OrchestratorError::Spawn { .. } => "E_AGENT_SPAWN",
            OrchestratorError::UnknownAgent { .. } => "E_AGENT_NOT_FOUND",
            OrchestratorError::AgentStart { code, .. } => code,
            OrchestratorError::AgentExited { .. } => "E_AGENT_CRASHED",
            OrchestratorError::Deleted { .. } => "E_INSTANCE_DELETED",
            OrchestratorError::Stopped => "E_ORCHESTRATOR_STOPPED",
            OrchestratorError::Control { .. } => "E_CONTROL_SOCKET",
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
            OrchestratorError::Control { .. } => Some(
                "is an orchestrator running for this state root? start one with `gdn run`".into(),
            ),
            _ => None,
        }
    }
}

fn exit_text(code: Option<i32>) -> String {
    match code {
        Some(code) => format!("exit code {code}"),
        None => "killed by a signal".to_string(),
    }
}
