//! A person's decision asked for in the middle of a Turn: an approval
//! gate before a tool call (the `tool-approval` extension), or any
//! question an extension puts to an operator. The request is durable
//! state of its instance (`approvals.jsonl` beside its messages, or its
//! log in a cluster), so it outlives every process; the decision comes
//! from `gdn approve`/`gdn deny` (or another surface) through the
//! orchestrator, in a cluster the one of the host that owns the instance.

use crate::json::JsonValue;
use serde::{Deserialize, Serialize};

/// What a person decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Go ahead (with the arguments as asked, or as the person edited them).
    Approve,
    /// Do not; the asker is told why.
    Deny,
}

impl Verdict {
    /// `approve` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::Deny => "deny",
        }
    }
}

/// A request for a person's decision, as recorded when it is asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    /// `apv_<hex>`: what a person names in `gdn approve`.
    pub id: String,
    /// What the request is about, unique in its instance: the tool call id
    /// for a gated call. Asking again with the same key (a Turn resumed
    /// after a restart) finds the same request instead of a second one.
    pub key: String,
    /// The agent.
    pub agent: String,
    /// Its instance.
    pub instance_key: String,
    /// The tool export (`bash__exec`), for a gated call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The arguments the call would run with, or the question's details.
    #[serde(default)]
    pub arguments: JsonValue,
    /// A question in words, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The Turn that waits.
    pub turn_id: String,
    /// The input event that Turn consumes.
    pub event_id: String,
    /// When it was asked (RFC 3339).
    pub requested_at: String,
    /// When the default applies (RFC 3339); none waits for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// What the deadline decides.
    pub on_timeout: Verdict,
    /// Who may decide (`operator`: anyone who can reach the swarm's
    /// control surfaces).
    pub deciders: Vec<String>,
}

/// The key of a question asked from inside something with its own key (a
/// tool call's id, an input event's id): `<anchor>/<name>`. A gate's own
/// question is keyed by the bare call id, so the two never collide.
pub fn question_key(anchor: &str, name: &str) -> String {
    format!("{anchor}/{name}")
}

/// True when a question's `key` is about the tool call `call_id`: the
/// gate's question (the call id itself) or one asked from inside the call
/// ([`question_key`]).
pub fn is_about_call(key: &str, call_id: &str) -> bool {
    key.strip_prefix(call_id)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// A decision on an [`ApprovalRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalDecision {
    /// The request's id.
    pub id: String,
    /// Approve or deny.
    pub verdict: Verdict,
    /// The arguments to run with instead of the requested ones (approve
    /// only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<JsonValue>,
    /// Why, in the person's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who decided (`cli:<user>`, `studio`, `telegram:<user id>`, or
    /// `timeout` when the deadline decided).
    pub by: String,
    /// When (RFC 3339).
    pub decided_at: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_question_is_about_its_call_and_not_a_call_sharing_a_prefix() {
        assert!(is_about_call("call_1", "call_1"));
        assert!(is_about_call(&question_key("call_1", "ask1"), "call_1"));
        assert!(!is_about_call("call_10", "call_1"));
        assert!(!is_about_call("call_10/ask1", "call_1"));
        assert!(!is_about_call("evt_1/ask1", "call_1"));
    }

    #[test]
    fn a_request_and_a_decision_keep_their_field_names() {
        let request = ApprovalRequest {
            id: "apv_1".into(),
            key: "call_1".into(),
            agent: "coder".into(),
            instance_key: "default".into(),
            tool: Some("bash__exec".into()),
            arguments: json!({"command": "ls"}),
            question: None,
            turn_id: "turn_1".into(),
            event_id: "evt_1".into(),
            requested_at: "2026-11-27T00:00:00.000Z".into(),
            deadline: None,
            on_timeout: Verdict::Deny,
            deciders: vec!["operator".into()],
        };
        let value = serde_json::to_value(&request).unwrap();
        assert_eq!(value["instanceKey"], "default");
        assert_eq!(value["onTimeout"], "deny");
        assert_eq!(value["requestedAt"], "2026-11-27T00:00:00.000Z");
        assert!(value.get("deadline").is_none());
        let back: ApprovalRequest = serde_json::from_value(value).unwrap();
        assert_eq!(back, request);
        let decision: ApprovalDecision = serde_json::from_value(json!({
            "id": "apv_1", "verdict": "approve", "arguments": {"command": "ls -l"},
            "by": "cli:ana", "decidedAt": "2026-11-27T00:00:01.000Z"
        }))
        .unwrap();
        assert_eq!(decision.verdict, Verdict::Approve);
        assert_eq!(decision.reason, None);
    }
}
