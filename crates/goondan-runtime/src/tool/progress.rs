//! How a running tool call tells the Turn how it goes: each
//! [`ToolProgress::report`] is a `tool.progress` runtime event in the
//! call's span (a remote A2A agent's status changes and answer chunks
//! land in `runtime-events.jsonl` this way, while the call still runs).
//!
//! A report goes where every runtime event of the agent goes (its sink and
//! the extensions subscribed to `tool.progress`), with the agent's secrets
//! masked. It never fails the call: a tool reports and moves on.

use crate::pipeline::TurnInfo;
use goondan_types::{JsonValue, RuntimeEvent, RuntimeEventBase, TraceContext};
use std::fmt;
use std::sync::Arc;

/// One call's progress reporter (`ToolContext::progress`).
#[derive(Clone, Default)]
pub struct ToolProgress {
    target: Option<Arc<Target>>,
}

/// The call a report is about; the agent, instance, Turn and where
/// events go are its Turn's.
struct Target {
    turn: Arc<TurnInfo>,
    trace: TraceContext,
    tool_call_id: String,
    tool_name: String,
    step_id: String,
}

impl fmt::Debug for ToolProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolProgress")
            .field("reported", &self.target.is_some())
            .finish()
    }
}

impl ToolProgress {
    /// A reporter whose reports go nowhere (a call outside a Turn, a
    /// test).
    pub fn discard() -> Self {
        ToolProgress::default()
    }

    pub(crate) fn for_call(
        turn: Arc<TurnInfo>,
        trace: &TraceContext,
        tool_call_id: &str,
        tool_name: &str,
        step_id: &str,
    ) -> Self {
        ToolProgress {
            target: Some(Arc::new(Target {
                turn,
                trace: trace.clone(),
                tool_call_id: tool_call_id.to_string(),
                tool_name: tool_name.to_string(),
                step_id: step_id.to_string(),
            })),
        }
    }

    /// Reports `message` (one line for people) and `data` (the same for
    /// machines) as a `tool.progress` event.
    pub fn report(&self, message: impl Into<String>, data: Option<JsonValue>) {
        let Some(target) = &self.target else {
            return;
        };
        let turn = &target.turn;
        let secrets = turn.events.secrets();
        let mut message = message.into();
        secrets.mask_string(&mut message);
        let data = data.map(|mut data| {
            secrets.mask_json(&mut data);
            data
        });
        turn.events.emit(RuntimeEvent::ToolProgress {
            base: RuntimeEventBase {
                timestamp: goondan_types::now_iso(),
                agent_name: turn.agent_name.clone(),
                instance_key: turn.instance_key.clone(),
                trace_id: target.trace.trace_id.clone(),
                span_id: target.trace.span_id.clone(),
                parent_span_id: target.trace.parent_span_id.clone(),
            },
            tool_call_id: target.tool_call_id.clone(),
            tool_name: target.tool_name.clone(),
            step_id: target.step_id.clone(),
            turn_id: turn.turn_id.clone(),
            message,
            data,
        });
    }
}
