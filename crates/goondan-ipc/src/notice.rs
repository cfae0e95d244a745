//! Process lifecycle notices and the shutdown payload.
//!
//! The spec allows only `event`, `shutdown` and `shutdown_ack`, and an
//! `event`'s payload is an AgentEvent. Notices from a child to the
//! orchestrator are therefore AgentEvents addressed to
//! [`ORCHESTRATOR`](crate::ORCHESTRATOR) whose type carries the
//! `runtime.` prefix, which no user event may use.

use goondan_types::{
    AgentEvent, EventSource, EventSourceKind, JsonObject, JsonValue, ShutdownReason,
};
use serde::{Deserialize, Serialize};

/// The event-type prefix reserved for notices.
pub const NOTICE_PREFIX: &str = "runtime.";

/// The body of a `shutdown` message (`runtime.md` §4.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShutdownPayload {
    /// How long the orchestrator waits for `shutdown_ack` before SIGKILL.
    pub grace_period_ms: u64,
    /// Why.
    pub reason: ShutdownReason,
}

/// What a child tells the orchestrator about itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// Initialized and ready for events (the start-up handshake).
    Ready,
    /// Could not start; the process exits after sending this.
    StartError {
        /// A stable code.
        code: String,
        /// What went wrong.
        message: String,
        /// How to fix it.
        suggestion: Option<String>,
    },
    /// A Turn ended; `ok` resets the crash counter.
    TurnFinished {
        /// True when the Turn completed without error.
        ok: bool,
    },
    /// A piece of model text of the Turn answering the orchestrator's own
    /// request `in_reply_to`, sent as it streams so a terminal can print
    /// it before the whole answer exists.
    TextDelta {
        /// The correlation id of the request being answered.
        in_reply_to: String,
        /// The text, in order.
        delta: String,
    },
}

impl Notice {
    /// The notice as an AgentEvent from `agent_name`.
    pub fn to_event(&self, agent_name: &str) -> AgentEvent {
        let (event_type, metadata): (&str, JsonObject) = match self {
            Notice::Ready => ("runtime.ready", JsonObject::new()),
            Notice::StartError {
                code,
                message,
                suggestion,
            } => {
                let mut metadata = JsonObject::new();
                metadata.insert("code".into(), JsonValue::from(code.as_str()));
                metadata.insert("message".into(), JsonValue::from(message.as_str()));
                if let Some(suggestion) = suggestion {
                    metadata.insert("suggestion".into(), JsonValue::from(suggestion.as_str()));
                }
                ("runtime.start_error", metadata)
            }
            Notice::TurnFinished { ok } => {
                let mut metadata = JsonObject::new();
                metadata.insert("ok".into(), JsonValue::from(*ok));
                ("runtime.turn_finished", metadata)
            }
            Notice::TextDelta { in_reply_to, delta } => {
                let mut metadata = JsonObject::new();
                metadata.insert("deltaFor".into(), JsonValue::from(in_reply_to.as_str()));
                metadata.insert("delta".into(), JsonValue::from(delta.as_str()));
                ("runtime.text_delta", metadata)
            }
        };
        let mut event = AgentEvent::new(
            event_type,
            EventSource::new(EventSourceKind::Agent, agent_name),
        );
        event.metadata = Some(metadata);
        event
    }

    /// Recognizes a notice; `None` for ordinary events.
    pub fn from_event(event: &AgentEvent) -> Option<Notice> {
        let text = |key: &str| {
            event
                .metadata_value(key)
                .and_then(JsonValue::as_str)
                .map(str::to_string)
        };
        match event.event_type.as_str() {
            "runtime.ready" => Some(Notice::Ready),
            "runtime.start_error" => Some(Notice::StartError {
                code: text("code").unwrap_or_else(|| "E_AGENT_START".into()),
                message: text("message").unwrap_or_default(),
                suggestion: text("suggestion"),
            }),
            "runtime.turn_finished" => Some(Notice::TurnFinished {
                ok: event
                    .metadata_value("ok")
                    .and_then(JsonValue::as_bool)
                    .unwrap_or(false),
            }),
            "runtime.text_delta" => Some(Notice::TextDelta {
                in_reply_to: text("deltaFor").unwrap_or_default(),
                delta: text("delta").unwrap_or_default(),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_round_trip_through_agent_events() {
        for notice in [
            Notice::Ready,
            Notice::StartError {
                code: "E_EXTENSION_INIT".into(),
                message: "boom".into(),
                suggestion: Some("fix it".into()),
            },
            Notice::TurnFinished { ok: true },
            Notice::TextDelta {
                in_reply_to: "corr-1".into(),
                delta: "Hel".into(),
            },
        ] {
            let event = notice.to_event("alpha");
            let wire: AgentEvent =
                serde_json::from_value(serde_json::to_value(&event).unwrap()).unwrap();
            assert_eq!(Notice::from_event(&wire), Some(notice));
        }
        let ordinary = AgentEvent::new(
            "user_message",
            EventSource::new(EventSourceKind::Connector, "cli"),
        );
        assert_eq!(Notice::from_event(&ordinary), None);
    }
}
