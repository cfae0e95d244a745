//! What the orchestrator is told about the swarm it runs: [`SwarmInfo`],
//! with the Connections' ingress rules ([`IngressRule`]) and the process
//! policy ([`ProcessPolicy`]).
//!
//! Plain data, resolved from the bundle by `gdn run` and replaced whole on
//! a reload. It sits below every other module of the crate (ingress, the
//! main loop and its handle read it; it reads none of them), so routing
//! and the loop depend on it in one direction.

use crate::OrchestratorError;
use goondan_types::ConnectorEvent;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// What the orchestrator knows about the swarm it runs. It travels over
/// the control socket when `gdn restart` hands the orchestrator the bundle
/// it re-read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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
    /// How many events may wait for one instance
    /// (`policy.queues.maxQueuedEvents`).
    pub max_queued_events: usize,
    /// The cap on live agent processes and idle passivation
    /// (`policy.processes`).
    pub processes: ProcessPolicy,
    /// The ingress rules of the Connections that deliver to this swarm.
    pub ingress: Vec<IngressRule>,
    /// The Connection that runs the base `cli` connector for this swarm,
    /// whose rules route what is typed at `gdn run`.
    pub cli_connection: Option<String>,
    /// The Connections whose connector runs in a ConnectorProcess of its
    /// own (every one of the swarm but the `cli` one).
    pub connections: Vec<String>,
    /// The Connections among `connections` that post approval requests
    /// to a chat (`spec.approvals`): they are told of every request and
    /// decision, and only they may hand the swarm a decision.
    #[serde(default)]
    pub approval_connections: Vec<String>,
}

impl SwarmInfo {
    /// Whether `connection` posts approval requests and runs here.
    pub(crate) fn delivers_approvals(&self, connection: &str) -> bool {
        self.approval_connections.iter().any(|c| c == connection)
            && self.connections.iter().any(|c| c == connection)
    }

    /// `Err(E_AGENT_NOT_FOUND)` unless `agent` is part of the swarm.
    pub(crate) fn check_agent(&self, agent: &str) -> Result<(), OrchestratorError> {
        if self.agents.iter().any(|known| known == agent) {
            return Ok(());
        }
        Err(OrchestratorError::UnknownAgent {
            agent: agent.to_string(),
            swarm: self.swarm_name.clone(),
        })
    }
}

/// One ingress rule of a Connection, resolved against the bundle.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressRule {
    /// The Connection the rule belongs to.
    pub connection: String,
    /// The event name it matches; `None` matches every name.
    pub event: Option<String>,
    /// Properties that must all be equal.
    pub properties: BTreeMap<String, String>,
    /// The target agent; `None` is the swarm's entry agent.
    pub agent: Option<String>,
    /// A fixed instance key.
    pub instance_key: Option<String>,
    /// The event property holding the instance key.
    pub instance_key_property: Option<String>,
    /// Prefix for a key read from `instance_key_property`.
    pub instance_key_prefix: Option<String>,
}

impl IngressRule {
    /// Whether `event` matches the rule: its name (when the rule names
    /// one) and every property the rule lists.
    pub(crate) fn matches(&self, event: &ConnectorEvent) -> bool {
        self.event.as_ref().is_none_or(|name| *name == event.name)
            && self
                .properties
                .iter()
                .all(|(key, value)| event.properties.get(key) == Some(value))
    }
}

/// How many agent processes may run and how long one may stay idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessPolicy {
    /// Live agent processes per swarm (`policy.processes.maxLive`).
    pub max_live: usize,
    /// Idle time after which an instance is passivated
    /// (`policy.processes.idleSeconds`); `None` never.
    pub idle_after: Option<Duration>,
}

impl ProcessPolicy {
    /// The default `policy.processes.maxLive`.
    pub const DEFAULT_MAX_LIVE: usize = 256;
    /// The default `policy.processes.idleSeconds`.
    pub const DEFAULT_IDLE_SECONDS: u64 = 900;
}

impl Default for ProcessPolicy {
    fn default() -> Self {
        ProcessPolicy {
            max_live: Self::DEFAULT_MAX_LIVE,
            idle_after: Some(Duration::from_secs(Self::DEFAULT_IDLE_SECONDS)),
        }
    }
}
