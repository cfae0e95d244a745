//! Where runtime events go. The runtime emits all nine `RuntimeEvent`s
//! (`shared-types.md` §9) to a [`RuntimeEventSink`]; the store appends
//! them to `runtime-events.jsonl`, a CLI may print them. They are never
//! read back to rebuild conversation state. [`RuntimeEvents`] is an
//! agent's fan-out of them: its sink, and the extensions subscribed on
//! the event bus.

use crate::event_bus::EventBus;
use goondan_types::runtime_event::StepStartedLlmInputMessage;
use goondan_types::{JsonValue, ModelMessage, RuntimeEvent, Secrets};
use std::fmt;
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

/// The most of a Step's messages one `step.started` records, in bytes of
/// their JSON: a long conversation's event holds its system prompts and
/// its newest messages, and one marker for what was left out (the store
/// holds all of it), so the log does not grow with the square of a
/// conversation's length.
pub const MAX_LLM_INPUT_BYTES: usize = 128 * 1024;

/// The `contentSource` of the marker standing for messages left out.
pub const OMITTED: &str = "omitted";

/// The `llmInputMessages` of a `step.started`: each message's role, its
/// text, and its structured parts when it has more than one string;
/// every secret value masked as tool results are (`[REDACTED:NAME]`),
/// bounded by [`MAX_LLM_INPUT_BYTES`].
pub(crate) fn llm_input_messages(
    messages: &[ModelMessage],
    secrets: &goondan_types::secret::Secrets,
) -> Vec<StepStartedLlmInputMessage> {
    let mut summary = summarized(messages);
    for message in &mut summary {
        if let std::borrow::Cow::Owned(masked) = secrets.mask(&message.content) {
            message.content = masked;
        }
        for part in message.parts.iter_mut().flatten() {
            secrets.mask_json(part);
        }
    }
    bounded(summary, MAX_LLM_INPUT_BYTES)
}

/// `messages` within `limit` bytes: the leading system messages, then as
/// many of the newest as fit, with one [`OMITTED`] marker (a hundred bytes
/// beyond the limit) between when any were left out.
fn bounded(
    messages: Vec<StepStartedLlmInputMessage>,
    limit: usize,
) -> Vec<StepStartedLlmInputMessage> {
    let size = |message: &StepStartedLlmInputMessage| {
        serde_json::to_vec(message).map_or(0, |bytes| bytes.len())
    };
    let sizes: Vec<usize> = messages.iter().map(size).collect();
    if sizes.iter().sum::<usize>() <= limit {
        return messages;
    }
    let leading = messages.iter().take_while(|m| m.role == "system").count();
    let mut left = limit.saturating_sub(sizes[..leading].iter().sum());
    let mut newest = messages.len();
    while newest > leading && sizes[newest - 1] <= left {
        newest -= 1;
        left -= sizes[newest];
    }
    let (omitted, omitted_bytes) = (
        newest - leading,
        sizes[leading..newest].iter().sum::<usize>(),
    );
    let mut kept = messages;
    let tail = kept.split_off(newest);
    kept.truncate(leading);
    kept.push(StepStartedLlmInputMessage {
        role: OMITTED.into(),
        content: format!(
            "{omitted} earlier message(s), {omitted_bytes} bytes, not recorded here; the conversation holds them"
        ),
        content_source: Some(OMITTED.into()),
        parts: None,
    });
    kept.extend(tail);
    kept
}

fn summarized(messages: &[ModelMessage]) -> Vec<StepStartedLlmInputMessage> {
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

/// Where an agent's runtime events go: its sink, and the extensions
/// subscribed to an event's type; with the secrets a tool's report is
/// masked with. One per agent, shared by its Turns (cloning it clones
/// three `Arc`s).
#[derive(Clone)]
pub struct RuntimeEvents {
    sink: Arc<dyn RuntimeEventSink>,
    bus: EventBus,
    secrets: Arc<Secrets>,
}

impl fmt::Debug for RuntimeEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeEvents").finish_non_exhaustive()
    }
}

impl RuntimeEvents {
    pub(crate) fn new(sink: Arc<dyn RuntimeEventSink>, bus: EventBus, secrets: Secrets) -> Self {
        RuntimeEvents {
            sink,
            bus,
            secrets: Arc::new(secrets),
        }
    }

    /// The extensions' event bus.
    pub(crate) fn bus(&self) -> &EventBus {
        &self.bus
    }

    /// The sink itself.
    pub(crate) fn sink(&self) -> &Arc<dyn RuntimeEventSink> {
        &self.sink
    }

    /// The values masked in what events carry of a conversation.
    pub(crate) fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// Emits `event` to the subscribed extensions, then the sink.
    pub(crate) fn emit(&self, event: RuntimeEvent) {
        let name = event.type_name();
        if self.bus.has_subscribers(name) {
            match serde_json::to_value(&event) {
                Ok(payload) => {
                    self.bus.emit(name, &payload);
                }
                Err(error) => {
                    tracing::warn!(%error, name, "could not encode a runtime event for extensions")
                }
            }
        }
        self.sink.emit(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llm_input_past_its_bound_keeps_system_prompts_and_the_newest() {
        let message = |role: &str, text: &str| StepStartedLlmInputMessage {
            role: role.into(),
            content: text.into(),
            content_source: Some("verbatim".into()),
            parts: None,
        };
        let mut messages = vec![message("system", "be brief")];
        for n in 0..50 {
            messages.push(message("user", &format!("{n}:{}", "x".repeat(100))));
        }
        assert_eq!(bounded(messages.clone(), usize::MAX), messages);
        let kept = bounded(messages.clone(), 1_000);
        assert_eq!(kept[0], messages[0]);
        assert_eq!(kept[1].role, OMITTED);
        assert!(
            kept[1].content.starts_with("45 earlier message(s)"),
            "{}",
            kept[1].content
        );
        assert_eq!(kept.last(), messages.last());
        assert_eq!(kept.len(), 2 + 5);
        let bytes: usize = kept[2..]
            .iter()
            .map(|m| serde_json::to_vec(m).unwrap().len())
            .sum();
        assert!(bytes <= 1_000);
        // Nothing but the marker fits: still a valid, bounded summary.
        let tiny = bounded(messages, 5);
        assert_eq!(tiny.len(), 2);
        assert_eq!(tiny[1].role, OMITTED);
    }

    #[test]
    fn llm_input_keeps_roles_text_and_structured_parts() {
        let messages: Vec<ModelMessage> = serde_json::from_value(serde_json::json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        ]))
        .unwrap();
        let summary = llm_input_messages(&messages, &Default::default());
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
