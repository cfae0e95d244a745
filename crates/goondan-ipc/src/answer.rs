//! How an answer event says it failed: `metadata.status = "error"` with
//! `errorCode` and `errorMessage` beside `inReplyTo`. The agent host and
//! the orchestrator write it; callers (other agents, the CLI) read it.

use goondan_types::{AgentEvent, JsonObject, JsonValue};

/// Marks an answer's metadata as a failure.
pub fn mark_failed(metadata: &mut JsonObject, code: &str, message: &str) {
    metadata.insert("status".into(), "error".into());
    metadata.insert("errorCode".into(), code.into());
    metadata.insert("errorMessage".into(), message.into());
}

/// `(code, message)` when `answer` reports a failure.
pub fn failure(answer: &AgentEvent) -> Option<(String, String)> {
    if answer.metadata_value("status").and_then(JsonValue::as_str) != Some("error") {
        return None;
    }
    let text = |key: &str| {
        answer
            .metadata_value(key)
            .and_then(JsonValue::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Some((text("errorCode"), text("errorMessage")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_types::{EventSource, EventSourceKind};

    #[test]
    fn a_marked_answer_reads_back_as_a_failure() {
        let mut answer = AgentEvent::new("response", EventSource::new(EventSourceKind::Agent, "b"));
        assert_eq!(failure(&answer), None);
        let mut metadata = JsonObject::new();
        metadata.insert("status".into(), "ok".into());
        answer.metadata = Some(metadata.clone());
        assert_eq!(failure(&answer), None);
        mark_failed(&mut metadata, "E_X", "broke");
        answer.metadata = Some(metadata);
        assert_eq!(failure(&answer), Some(("E_X".into(), "broke".into())));
    }
}
