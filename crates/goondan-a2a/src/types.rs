//! The protocol's objects in the JSON form its JSON-RPC binding uses:
//! camelCase fields, enum values by their full names (`ROLE_USER`,
//! `TASK_STATE_COMPLETED`), a `oneof` as an object with exactly one of
//! its members (`{"task": …}` or `{"message": …}`).
//!
//! Reading is lenient where the specification lets a peer leave things
//! out (absent lists are empty, unknown enum values read as
//! `Unspecified`), so a newer peer's additions are ignored rather than
//! refused; writing leaves out what is empty.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Role {
    /// The client.
    #[serde(rename = "ROLE_USER")]
    User,
    /// The remote agent.
    #[serde(rename = "ROLE_AGENT")]
    Agent,
    /// Not said (or a value this version does not know).
    #[default]
    #[serde(rename = "ROLE_UNSPECIFIED", other)]
    Unspecified,
}

/// One piece of a message or an artifact: text, structured data, a file
/// by URL or inline bytes (base64).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// Text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Structured data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// A file by URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A file's bytes, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// The file's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// Its media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Anything else about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Part {
        Part {
            text: Some(text.into()),
            ..Part::default()
        }
    }
}

/// A message between client and agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Unique per message, made by its writer.
    #[serde(default)]
    pub message_id: String,
    /// The conversation it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The Task it continues, when one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Who wrote it.
    #[serde(default)]
    pub role: Role,
    /// What it says.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Anything else about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Tasks it refers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<String>,
}

impl Message {
    /// Every text part, joined by newlines.
    pub fn text(&self) -> String {
        texts(&self.parts)
    }
}

/// Every text part of `parts`, joined by newlines.
pub fn texts(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|part| part.text.as_deref())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where a Task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum TaskState {
    /// Taken, not started.
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    /// Running.
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    /// Done, with its answer.
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    /// Ended with an error.
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    /// Cancelled.
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    /// Waits for its client (or a person) before it goes on.
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    /// Refused.
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    /// Waits for authentication.
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
    /// Not said (or a value this version does not know).
    #[default]
    #[serde(rename = "TASK_STATE_UNSPECIFIED", other)]
    Unspecified,
}

impl TaskState {
    /// Whether nothing more will happen to a Task in this state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }
}

/// A Task's state, when it was reached, and what the agent said then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The state.
    #[serde(default)]
    pub state: TaskState,
    /// What the agent said with it (the reason of a failure, the
    /// question of an input-required state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// RFC 3339, UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// Something a Task made: here, the agent's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Unique within its Task.
    #[serde(default)]
    pub artifact_id: String,
    /// A name for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its content.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Anything else about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// A unit of work an agent does for a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Made by the server.
    #[serde(default)]
    pub id: String,
    /// The conversation.
    #[serde(default)]
    pub context_id: String,
    /// Where it stands.
    #[serde(default)]
    pub status: TaskStatus,
    /// What it made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    /// The messages of the Task, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    /// Anything else about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// A Task changed state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    /// The Task.
    #[serde(default)]
    pub task_id: String,
    /// Its conversation.
    #[serde(default)]
    pub context_id: String,
    /// The new status.
    #[serde(default)]
    pub status: TaskStatus,
    /// Anything else about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// A Task's artifact grew (`append`) or was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    /// The Task.
    #[serde(default)]
    pub task_id: String,
    /// Its conversation.
    #[serde(default)]
    pub context_id: String,
    /// The artifact, or the part of it that is new.
    #[serde(default)]
    pub artifact: Artifact,
    /// Whether `artifact.parts` extend the artifact's earlier parts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
    /// Whether this is the artifact's last piece.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub last_chunk: bool,
    /// Anything else about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// One item of a stream (`SendStreamingMessage`, `SubscribeToTask`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    /// The Task as it is.
    Task(Task),
    /// A message, when the agent answers without a Task.
    Message(Message),
    /// A change of state.
    StatusUpdate(TaskStatusUpdateEvent),
    /// A new or longer artifact.
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// The answer to `SendMessage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SendMessageResponse {
    /// The Task the message started or continued.
    Task(Task),
    /// A direct answer.
    Message(Message),
}

/// How a client wants `SendMessage` answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    /// Media types the client can read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_output_modes: Vec<String>,
    /// How many messages of history the answer may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<u32>,
    /// Answer at once with the Task as it is, instead of when it ends or
    /// needs input.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub return_immediately: bool,
}

/// The parameters of `SendMessage` and `SendStreamingMessage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    /// The message.
    pub message: Message,
    /// How to answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<SendMessageConfiguration>,
    /// Anything else about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// The parameters of `GetTask`, `CancelTask` and `SubscribeToTask`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskIdRequest {
    /// The Task.
    pub id: String,
    /// How many messages of history to return (`GetTask`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<u32>,
}

/// Where and how an agent is reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    /// The endpoint.
    #[serde(default)]
    pub url: String,
    /// `JSONRPC`, `HTTP+JSON` or `GRPC`.
    #[serde(default)]
    pub protocol_binding: String,
    /// The protocol version spoken there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
}

/// What an agent's server offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    /// `SendStreamingMessage` and `SubscribeToTask`.
    #[serde(default)]
    pub streaming: bool,
    /// Push notifications.
    #[serde(default)]
    pub push_notifications: bool,
}

/// One thing an agent can do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    /// Unique within the card.
    #[serde(default)]
    pub id: String,
    /// For people.
    #[serde(default)]
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Keywords.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// HTTP authentication (`Authorization: Bearer …`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct HttpAuthSecurityScheme {
    /// `Bearer`.
    #[serde(default)]
    pub scheme: String,
    /// A hint of the token's form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_format: Option<String>,
    /// For people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// One way to authenticate; only HTTP authentication is spoken here,
/// other schemes of a remote card are kept as they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SecurityScheme {
    /// HTTP authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_auth_security_scheme: Option<HttpAuthSecurityScheme>,
    /// The other schemes, unread.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// Schemes that together authenticate a request, by name (each with the
/// scopes it needs, none here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SecurityRequirement {
    /// The schemes, by their name in `securitySchemes`.
    #[serde(default)]
    pub schemes: BTreeMap<String, Value>,
}

/// An agent's self-description, served at [`crate::AGENT_CARD_PATH`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Where it is reached, preferred first.
    #[serde(default)]
    pub supported_interfaces: Vec<AgentInterface>,
    /// Its version.
    #[serde(default)]
    pub version: String,
    /// What its server offers.
    #[serde(default)]
    pub capabilities: AgentCapabilities,
    /// How clients authenticate, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub security_schemes: BTreeMap<String, SecurityScheme>,
    /// Which schemes a request needs (one of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_requirements: Vec<SecurityRequirement>,
    /// Media types it reads.
    #[serde(default)]
    pub default_input_modes: Vec<String>,
    /// Media types it writes.
    #[serde(default)]
    pub default_output_modes: Vec<String>,
    /// What it can do.
    #[serde(default)]
    pub skills: Vec<AgentSkill>,
}

impl AgentCard {
    /// The URL of its first JSON-RPC interface.
    pub fn jsonrpc_url(&self) -> Option<&str> {
        self.supported_interfaces
            .iter()
            .find(|interface| {
                interface
                    .protocol_binding
                    .eq_ignore_ascii_case(crate::JSONRPC_BINDING)
            })
            .map(|interface| interface.url.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_task_reads_and_writes_as_the_reference_sdk_writes_it() {
        // As `a2a-sdk` 1.3 (protobuf's JSON mapping) writes it.
        let written = json!({"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_COMPLETED", "message": {"messageId": "m1", "contextId": "c1", "taskId": "t1", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}, "timestamp": "2026-11-28T05:51:54.604336Z"}, "artifacts": [{"artifactId": "a1", "name": "answer", "parts": [{"text": "yo"}]}]}});
        let read: SendMessageResponse = serde_json::from_value(written.clone()).unwrap();
        let SendMessageResponse::Task(task) = &read else {
            panic!("a task: {read:?}")
        };
        assert_eq!(task.status.state, TaskState::Completed);
        assert_eq!(task.status.message.as_ref().unwrap().role, Role::Agent);
        assert_eq!(texts(&task.artifacts[0].parts), "yo");
        assert_eq!(serde_json::to_value(&read).unwrap(), written);
    }

    #[test]
    fn unknown_enum_values_and_members_are_read_not_refused() {
        let read: StreamResponse = serde_json::from_value(json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_FROM_THE_FUTURE"}, "novel": 1}})).unwrap();
        let StreamResponse::StatusUpdate(update) = read else {
            panic!("a status update")
        };
        assert_eq!(update.status.state, TaskState::Unspecified);
    }

    #[test]
    fn a_card_names_its_jsonrpc_endpoint() {
        let card: AgentCard = serde_json::from_value(json!({"name": "x", "supportedInterfaces": [{"url": "http://h/g", "protocolBinding": "GRPC"}, {"url": "http://h/a2a/x", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}], "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}, "securityRequirements": [{"schemes": {"bearer": {}}}]})).unwrap();
        assert_eq!(card.jsonrpc_url(), Some("http://h/a2a/x"));
        assert_eq!(
            card.security_schemes["bearer"]
                .http_auth_security_scheme
                .as_ref()
                .unwrap()
                .scheme,
            "Bearer"
        );
    }
}
