//! Inbound events (`shared-types.md` §6): what starts a Turn.

use crate::json::{JsonObject, JsonValue};
use serde::{Deserialize, Serialize};

/// Who sent an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventSourceKind {
    /// Another agent.
    Agent,
    /// A connector (CLI, webhook, Telegram, ...).
    Connector,
}

/// The sender of an event, with free-form extra fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventSource {
    /// Agent or connector.
    pub kind: EventSourceKind,
    /// Its name.
    pub name: String,
    /// Any other fields the sender attached.
    #[serde(flatten)]
    pub extra: JsonObject,
}

impl EventSource {
    /// A source without extra fields.
    pub fn new(kind: EventSourceKind, name: impl Into<String>) -> Self {
        EventSource {
            kind,
            name: name.into(),
            extra: JsonObject::new(),
        }
    }
}

/// Where an answer must go: the caller's routing key and the id it waits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplyChannel {
    /// The caller's routing key (`agentName:instanceKey`).
    pub target: String,
    /// The id the caller matches the answer by.
    pub correlation_id: String,
}

/// Who a Turn acts for; passed along unchanged between agents.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnAuth {
    /// The principal, `{ type, id, ... }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<JsonObject>,
    /// Any other fields.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The metadata key of an input's replayed conversation: model messages
/// (AI SDK shape) a fresh instance takes as its history before the input
/// (a Goondan-rs addition: how `gdn serve` hands an OpenAI client's
/// earlier messages to the agent, which writes them as its own).
pub const PRIOR_MESSAGES_KEY: &str = "priorMessages";

/// The input of one Turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentEvent {
    /// Stable unique id; a Turn records it so recovery never consumes an
    /// input twice.
    pub id: String,
    /// The event type, for example `user_message` or `agent.request`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// ISO 8601 creation time.
    pub created_at: String,
    /// The trace this event belongs to; created at the first input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Free-form metadata (`inReplyTo` on answers, for example).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
    /// The text input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// The instance that must handle it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_key: Option<String>,
    /// The sender.
    pub source: EventSource,
    /// Who the work is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<TurnAuth>,
    /// Where to send the answer, for requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<ReplyChannel>,
    /// The span that caused this event (the caller's tool-call span); the
    /// Turn it starts uses it as `parentSpanId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
    /// Routing keys of the agents whose pending requests led here, oldest
    /// first; a request to any of them is a cycle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_chain: Vec<String>,
    /// Set when the orchestrator hands this event to a new process because
    /// the one it was given to died before its Turn finished; the receiver
    /// then checks whether a Turn already consumed it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redelivered: bool,
    /// Set only by a cluster host: the sequence of the `GDN_IN` delivery
    /// that carried this event. The Turn it starts records it in its commit
    /// as the instance's inbox cursor, so a delivery that comes back after
    /// that commit is answered from the commit's outbox instead of waking
    /// the agent. Absent (and not written) on a single host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox_seq: Option<u64>,
}

impl AgentEvent {
    /// A new event with a fresh id and the current time.
    pub fn new(event_type: impl Into<String>, source: EventSource) -> Self {
        AgentEvent {
            id: new_event_id(),
            event_type: event_type.into(),
            created_at: crate::now_iso(),
            trace_id: None,
            metadata: None,
            input: None,
            instance_key: None,
            source,
            auth: None,
            reply_to: None,
            parent_span_id: None,
            call_chain: Vec::new(),
            redelivered: false,
            inbox_seq: None,
        }
    }

    /// A metadata value by key.
    pub fn metadata_value(&self, key: &str) -> Option<&JsonValue> {
        self.metadata
            .as_ref()
            .and_then(|metadata| metadata.get(key))
    }
}

/// A fresh, unique event id (`evt_` and 24 hex digits).
pub fn new_event_id() -> String {
    format!("evt_{}", crate::trace::random_hex(12))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn agent_event_round_trips() {
        let value = json!({
            "id": "evt-1",
            "type": "agent.request",
            "createdAt": "2026-01-01T00:00:00.000Z",
            "traceId": "0123456789abcdef0123456789abcdef",
            "metadata": {"inReplyTo": "corr-1"},
            "input": "hello",
            "instanceKey": "user:1",
            "source": {"kind": "connector", "name": "telegram", "chatId": 7},
            "auth": {"principal": {"type": "user", "id": "u1"}, "scopes": ["a"]},
            "replyTo": {"target": "alpha:main", "correlationId": "corr-1"}
        });
        let parsed: AgentEvent = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(parsed.source.extra["chatId"], 7);
        assert_eq!(serde_json::to_value(&parsed).unwrap(), value);
    }
}
