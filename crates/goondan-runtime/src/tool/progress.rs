//! How a running tool call tells the Turn how it goes: each
//! [`ToolProgress::report`] is a `tool.progress` runtime event in the
//! call's span (a remote A2A agent's status changes and answer chunks
//! land in `runtime-events.jsonl` this way, while the call still runs).
//!
//! A report goes where every runtime event of the agent goes (its sink and
//! the extensions subscribed to `tool.progress`), with the agent's secrets
//! masked. It never fails the call: a tool reports and moves on.

use crate::events::RuntimeEventSink;
use crate::extension::EventBus;
use goondan_types::{JsonValue, RuntimeEvent, RuntimeEventBase, Secrets, TraceContext};
use std::fmt;
use std::sync::Arc;

/// Where an agent's runtime events go: its sink, and the extensions
/// subscribed to an event's type. One per agent, shared by its Turns.
#[derive(Clone)]
pub struct RuntimeEvents {
    sink: Arc<dyn RuntimeEventSink>,
    bus: EventBus,
}

impl fmt::Debug for RuntimeEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeEvents").finish_non_exhaustive()
    }
}

impl RuntimeEvents {
    pub(crate) fn new(sink: Arc<dyn RuntimeEventSink>, bus: EventBus) -> Self {
        RuntimeEvents { sink, bus }
    }

    /// The extensions' event bus.
    pub(crate) fn bus(&self) -> &EventBus {
        &self.bus
    }

    /// The sink itself.
    pub(crate) fn sink(&self) -> &Arc<dyn RuntimeEventSink> {
        &self.sink
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

/// One call's progress reporter (`ToolContext::progress`).
#[derive(Clone, Default)]
pub struct ToolProgress {
    target: Option<Arc<Target>>,
}

struct Target {
    events: RuntimeEvents,
    secrets: Secrets,
    agent_name: String,
    instance_key: String,
    trace: TraceContext,
    tool_call_id: String,
    tool_name: String,
    step_id: String,
    turn_id: String,
}

impl fmt::Debug for ToolProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolProgress")
            .field("reported", &self.target.is_some())
            .finish()
    }
}

/// What [`ToolProgress::for_call`] needs to know about the call.
pub(crate) struct CallFacts<'a> {
    pub(crate) agent_name: &'a str,
    pub(crate) instance_key: &'a str,
    pub(crate) trace: &'a TraceContext,
    pub(crate) tool_call_id: &'a str,
    pub(crate) tool_name: &'a str,
    pub(crate) step_id: &'a str,
    pub(crate) turn_id: &'a str,
}

impl ToolProgress {
    /// A reporter whose reports go nowhere (a call outside a Turn, a
    /// test).
    pub fn discard() -> Self {
        ToolProgress::default()
    }

    pub(crate) fn for_call(events: RuntimeEvents, secrets: Secrets, call: CallFacts<'_>) -> Self {
        ToolProgress {
            target: Some(Arc::new(Target {
                events,
                secrets,
                agent_name: call.agent_name.to_string(),
                instance_key: call.instance_key.to_string(),
                trace: call.trace.clone(),
                tool_call_id: call.tool_call_id.to_string(),
                tool_name: call.tool_name.to_string(),
                step_id: call.step_id.to_string(),
                turn_id: call.turn_id.to_string(),
            })),
        }
    }

    /// Reports `message` (one line for people) and `data` (the same for
    /// machines) as a `tool.progress` event.
    pub fn report(&self, message: impl Into<String>, data: Option<JsonValue>) {
        let Some(target) = &self.target else {
            return;
        };
        let mut message = message.into();
        target.secrets.mask_string(&mut message);
        let data = data.map(|mut data| {
            target.secrets.mask_json(&mut data);
            data
        });
        target.events.emit(RuntimeEvent::ToolProgress {
            base: RuntimeEventBase {
                timestamp: goondan_types::now_iso(),
                agent_name: target.agent_name.clone(),
                instance_key: target.instance_key.clone(),
                trace_id: target.trace.trace_id.clone(),
                span_id: target.trace.span_id.clone(),
                parent_span_id: target.trace.parent_span_id.clone(),
            },
            tool_call_id: target.tool_call_id.clone(),
            tool_name: target.tool_name.clone(),
            step_id: target.step_id.clone(),
            turn_id: target.turn_id.clone(),
            message,
            data,
        });
    }
}
