//! Where runtime events go. The runtime emits all nine `RuntimeEvent`s
//! (`shared-types.md` §9) to a [`RuntimeEventSink`]; the store appends
//! them to `runtime-events.jsonl`, a CLI may print them. They are never
//! read back to rebuild conversation state.

use goondan_types::runtime_event::StepStartedLlmInputMessage;
use goondan_types::{JsonValue, ModelMessage, RuntimeEvent};
use std::sync::{Arc, Mutex};

/// Receives runtime events in emission order. Must not block for long: it
/// is called inline on the Turn's task.
pub trait RuntimeEventSink: Send + Sync {
    /// One event.
    fn emit(&self, event: RuntimeEvent);

    /// Whether `step.started` should carry the messages its Step starts
    /// from (`llmInputMessages`). Building them copies the conversation,
    /// so the runtime does it only for a sink that asks (span export with
    /// message content capture on); the default is no.
    fn wants_llm_input(&self) -> bool {
        false
    }
}

/// The `llmInputMessages` of a `step.started`: each message's role, its
/// text, and its structured parts when it has more than one string.
pub(crate) fn llm_input_messages(messages: &[ModelMessage]) -> Vec<StepStartedLlmInputMessage> {
    messages
        .iter()
        .filter_map(|message| serde_json::to_value(message).ok())
        .map(|value| {
            let role = value["role"].as_str().unwrap_or_default().to_string();
            match &value["content"] {
                JsonValue::String(text) => StepStartedLlmInputMessage {
                    role,
                    content: text.clone(),
                    content_source: Some("verbatim".into()),
                    parts: None,
                },
                content => {
                    let parts = content.as_array().cloned().unwrap_or_default();
                    let text = parts
                        .iter()
                        .filter_map(|part| part["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n");
                    StepStartedLlmInputMessage {
                        role,
                        content: text,
                        content_source: Some("verbatim".into()),
                        parts: Some(parts),
                    }
                }
            }
        })
        .collect()
}

/// A sink that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiscardEvents;

impl RuntimeEventSink for DiscardEvents {
    fn emit(&self, _event: RuntimeEvent) {}
}

/// A sink that keeps events in memory, for embedding and tests.
#[derive(Debug, Clone, Default)]
pub struct CollectEvents {
    events: Arc<Mutex<Vec<RuntimeEvent>>>,
}

impl CollectEvents {
    /// An empty collector.
    pub fn new() -> Self {
        CollectEvents::default()
    }

    /// Takes every event collected so far.
    pub fn take(&self) -> Vec<RuntimeEvent> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<RuntimeEvent>> {
        // Pushing whole events cannot leave the vector inconsistent.
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl RuntimeEventSink for CollectEvents {
    fn emit(&self, event: RuntimeEvent) {
        self.lock().push(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llm_input_keeps_roles_text_and_structured_parts() {
        let messages: Vec<ModelMessage> = serde_json::from_value(serde_json::json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        ]))
        .unwrap();
        let summary = llm_input_messages(&messages);
        assert_eq!(summary.len(), 2);
        assert_eq!(summary[0].role, "system");
        assert_eq!(summary[0].content, "be brief");
        assert_eq!(summary[0].parts, None);
        assert_eq!(summary[1].role, "user");
        assert_eq!(summary[1].content, "a\nb");
        assert_eq!(summary[1].parts.as_ref().map(Vec::len), Some(2));
        assert!(!DiscardEvents.wants_llm_input(), "no sink asks by default");
    }
}
