//! The inter-agent communication contract (`shared-types.md` §8): options
//! and results shared by the `agents` tool and `ctx.agents` in middleware.

use crate::json::{JsonObject, JsonValue};
use serde::{Deserialize, Serialize};

/// The default timeout of a blocking request, in milliseconds. The seeds
/// set 15000 ms, which wins over the original's 60000.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 15_000;

/// The metadata key under which an async answer is injected.
pub const INTER_AGENT_RESPONSE_METADATA_KEY: &str = "__goondanInterAgentResponse";

/// Options of `request`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRuntimeRequestOptions {
    /// Overrides the default timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Return an ack at once and inject the answer later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#async: Option<bool>,
}

/// The result of `request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRuntimeRequestResult {
    /// The id of the request event.
    pub event_id: String,
    /// The target routing key.
    pub target: String,
    /// The answer, for blocking requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<JsonValue>,
    /// The id the answer is matched by.
    pub correlation_id: String,
    /// Set for async requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<bool>,
    /// Set for async requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#async: Option<bool>,
}

/// The result of `send`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRuntimeSendResult {
    /// The id of the sent event.
    pub event_id: String,
    /// The target routing key.
    pub target: String,
    /// Whether the orchestrator took it.
    pub accepted: bool,
}

/// Options of `spawn`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRuntimeSpawnOptions {
    /// The instance to create; defaults to the caller's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_key: Option<String>,
    /// The working directory of the new instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// The result of `spawn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRuntimeSpawnResult {
    /// The agent name.
    pub target: String,
    /// The instance.
    pub instance_key: String,
    /// False when it already existed.
    pub spawned: bool,
    /// Its working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// Options of `list`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRuntimeListOptions {
    /// Include instances spawned by other agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_all: Option<bool>,
}

/// One spawned instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpawnedAgentInfo {
    /// The agent name.
    pub target: String,
    /// The instance.
    pub instance_key: String,
    /// The agent that spawned it.
    pub owner_agent: String,
    /// That agent's instance.
    pub owner_instance_key: String,
    /// ISO 8601 time.
    pub created_at: String,
    /// Its working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// The result of `list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRuntimeListResult {
    /// The instances.
    pub agents: Vec<SpawnedAgentInfo>,
}

/// The result of `catalog`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRuntimeCatalogResult {
    /// The swarm.
    pub swarm_name: String,
    /// Its entry agent.
    pub entry_agent: String,
    /// The caller.
    pub self_agent: String,
    /// Every agent of the swarm.
    pub available_agents: Vec<String>,
    /// The agents the caller may call.
    pub callable_agents: Vec<String>,
}

/// `ok`, `error` or `timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InterAgentResponseStatus {
    /// Answered.
    Ok,
    /// The callee failed.
    Error,
    /// No answer in time.
    Timeout,
}

/// The metadata of an injected async answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterAgentResponseMetadata {
    /// Always `inter_agent_response`.
    pub kind: String,
    /// Always 1.
    pub version: u32,
    /// The correlation id.
    pub request_id: String,
    /// The request event's id.
    pub request_event_id: String,
    /// The answer event's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_event_id: Option<String>,
    /// The callee.
    pub from_agent_id: String,
    /// The caller.
    pub to_agent_id: String,
    /// Always true.
    pub r#async: bool,
    /// The outcome.
    pub status: InterAgentResponseStatus,
    /// ISO 8601 time of arrival.
    pub received_at: String,
    /// The trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The request's event type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_event_type: Option<String>,
    /// The request's metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_metadata: Option<JsonObject>,
    /// The error code, on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// The error message, on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}
