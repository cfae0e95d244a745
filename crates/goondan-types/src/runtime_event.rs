//! The nine observability events (`shared-types.md` §9), plus
//! `tool.progress`, `budget.exceeded` and the ledger's cost fields
//! (Goondan-rs extensions). Appended to
//! `runtime-events.jsonl`; never read back to rebuild conversation state.

use crate::result::TokenUsage;
use crate::tool::ToolCallStatus;
use serde::{Deserialize, Serialize};

/// Fields every runtime event carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeEventBase {
    /// ISO 8601 time of emission.
    pub timestamp: String,
    /// The emitting agent.
    pub agent_name: String,
    /// Its instance.
    pub instance_key: String,
    /// The trace.
    pub trace_id: String,
    /// The span of the unit this event describes.
    pub span_id: String,
    /// Its parent; absent only on root spans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
}

/// A summarized LLM input message for `step.started`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepStartedLlmInputMessage {
    /// The role.
    pub role: String,
    /// Text content (possibly summarized).
    pub content: String,
    /// `verbatim` or `summary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_source: Option<String>,
    /// Structured parts, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<Vec<crate::json::JsonValue>>,
}

/// One observability event, tagged by `type` in dot notation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum RuntimeEvent {
    /// A Turn began.
    #[serde(rename = "turn.started", rename_all = "camelCase")]
    TurnStarted {
        /// Common fields.
        #[serde(flatten)]
        base: RuntimeEventBase,
        /// The Turn.
        turn_id: String,
        /// Where the Turn's input came from (the event's `source`: a
        /// Connection such as `cli`, the Studio, or another agent); absent
        /// from logs written before it was recorded (a Goondan-rs
        /// extension: the log says who started a Turn).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<crate::event::EventSource>,
    },
    /// A Turn finished.
    #[serde(rename = "turn.completed", rename_all = "camelCase")]
    TurnCompleted {
        /// Common fields.
        #[serde(flatten)]
        base: RuntimeEventBase,
        /// The Turn.
        turn_id: String,
        /// Steps actually run.
        step_count: u32,
        /// Milliseconds.
        duration: u64,
        /// Summed model usage.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_usage: Option<TokenUsage>,
        /// What that usage cost in US dollars at the agent's Model price;
        /// absent when the price is unknown (a Goondan-rs extension).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    /// A Turn failed.
    #[serde(rename = "turn.failed", rename_all = "camelCase")]
    TurnFailed {
        /// Common fields.
        #[serde(flatten)]
        base: RuntimeEventBase,
        /// The Turn.
        turn_id: String,
        /// Milliseconds.
        duration: u64,
        /// What went wrong.
        error_message: String,
        /// Who cancelled the Turn (`cli` for `gdn instance cancel`), when
        /// a person did; absent for every other failure (a Goondan-rs
        /// extension: the log says who stopped a Turn).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cancelled_by: Option<String>,
    },
    /// A Step began.
    #[serde(rename = "step.started", rename_all = "camelCase")]
    StepStarted {
        /// Common fields.
        #[serde(flatten)]
        base: RuntimeEventBase,
        /// The Step.
        step_id: String,
        /// Zero-based index in the Turn.
        step_index: u32,
        /// The Turn.
        turn_id: String,
        /// What the model was sent, summarized.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        llm_input_messages: Option<Vec<StepStartedLlmInputMessage>>,
    },
    /// A Step finished.
    #[serde(rename = "step.completed", rename_all = "camelCase")]
    StepCompleted {
        /// Common fields.
        #[serde(flatten)]
        base: RuntimeEventBase,
        /// The Step.
        step_id: String,
        /// Zero-based index in the Turn.
        step_index: u32,
        /// The Turn.
        turn_id: String,
        /// Tool calls the model asked for.
        tool_call_count: u32,
        /// Milliseconds.
        duration: u64,
        /// The model call's usage.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_usage: Option<TokenUsage>,
        /// The Model resource that answered (`Model/<name>`'s name; a
        /// Goondan-rs extension, read by the ledger).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// What the call cost in US dollars; absent when the price is
        /// unknown (a Goondan-rs extension).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    /// A Step failed.
    #[serde(rename = "step.failed", rename_all = "camelCase")]
    StepFailed {
        /// Common fields.
        #[serde(flatten)]
        base: RuntimeEventBase,
        /// The Step.
        step_id: String,
        /// Zero-based index in the Turn.
        step_index: u32,
        /// The Turn.
        turn_id: String,
        /// Milliseconds.
        duration: u64,
        /// What went wrong.
        error_message: String,
    },
    /// A tool call began.
    #[serde(rename = "tool.called", rename_all = "camelCase")]
    ToolCalled {
        /// Common fields.
        #[serde(flatten)]
        base: RuntimeEventBase,
        /// The call.
        tool_call_id: String,
        /// The tool.
        tool_name: String,
        /// The Step.
        step_id: String,
        /// The Turn.
        turn_id: String,
        /// Its arguments in one short line, secrets masked (what a
        /// terminal shows beside the tool's name; a Goondan-rs extension).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input_summary: Option<String>,
    },
    /// A tool call returned a result (ok or error).
    #[serde(rename = "tool.completed", rename_all = "camelCase")]
    ToolCompleted {
        /// Common fields.
        #[serde(flatten)]
        base: RuntimeEventBase,
        /// The call.
        tool_call_id: String,
        /// The tool.
        tool_name: String,
        /// `ok` or `error`.
        status: ToolCallStatus,
        /// Milliseconds.
        duration: u64,
        /// The Step.
        step_id: String,
        /// The Turn.
        turn_id: String,
        /// An error result's code, as in the conversation's tool result
        /// (a Goondan-rs extension, like `errorMessage` here).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_code: Option<String>,
        /// An error result's message, as in the conversation's tool
        /// result.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_message: Option<String>,
    },
    /// A tool call failed outside its result (the runtime could not run it).
    #[serde(rename = "tool.failed", rename_all = "camelCase")]
    ToolFailed {
        /// Common fields.
        #[serde(flatten)]
        base: RuntimeEventBase,
        /// The call.
        tool_call_id: String,
        /// The tool.
        tool_name: String,
        /// Milliseconds.
        duration: u64,
        /// The Step.
        step_id: String,
        /// The Turn.
        turn_id: String,
        /// What went wrong.
        error_message: String,
    },
    /// A running tool call reported how it goes (a Goondan-rs extension:
    /// a remote A2A agent's status changes and answer chunks); any number
    /// between `tool.called` and `tool.completed`, in the call's span.
    #[serde(rename = "tool.progress", rename_all = "camelCase")]
    ToolProgress {
        /// Common fields; the span is the call's.
        #[serde(flatten)]
        base: RuntimeEventBase,
        /// The call.
        tool_call_id: String,
        /// The tool.
        tool_name: String,
        /// The Step.
        step_id: String,
        /// The Turn.
        turn_id: String,
        /// What happened, in one line for people (secrets masked).
        message: String,
        /// The same for machines, as the tool reports it (secrets
        /// masked).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<crate::json::JsonValue>,
    },
    /// A model call was refused because a `policy.budget` limit of the
    /// Swarm would be crossed (a Goondan-rs extension; code
    /// `E_BUDGET_EXCEEDED`). Nothing was sent to the model.
    #[serde(rename = "budget.exceeded", rename_all = "camelCase")]
    BudgetExceeded {
        /// Common fields; the span is the refused Turn's.
        #[serde(flatten)]
        base: RuntimeEventBase,
        /// The Turn whose model call was refused.
        turn_id: String,
        /// The limit's field name (`maxTokensPerTurn`, ...).
        limit: String,
        /// The limit as configured.
        limit_value: f64,
        /// What was already used against it.
        used: f64,
        /// The full refusal, as the caller received it.
        error_message: String,
    },
}

impl RuntimeEvent {
    /// The common fields.
    pub fn base(&self) -> &RuntimeEventBase {
        match self {
            RuntimeEvent::TurnStarted { base, .. }
            | RuntimeEvent::TurnCompleted { base, .. }
            | RuntimeEvent::TurnFailed { base, .. }
            | RuntimeEvent::StepStarted { base, .. }
            | RuntimeEvent::StepCompleted { base, .. }
            | RuntimeEvent::StepFailed { base, .. }
            | RuntimeEvent::ToolCalled { base, .. }
            | RuntimeEvent::ToolCompleted { base, .. }
            | RuntimeEvent::ToolFailed { base, .. }
            | RuntimeEvent::ToolProgress { base, .. }
            | RuntimeEvent::BudgetExceeded { base, .. } => base,
        }
    }

    /// The dot-notation type name.
    pub fn type_name(&self) -> &'static str {
        match self {
            RuntimeEvent::TurnStarted { .. } => "turn.started",
            RuntimeEvent::TurnCompleted { .. } => "turn.completed",
            RuntimeEvent::TurnFailed { .. } => "turn.failed",
            RuntimeEvent::StepStarted { .. } => "step.started",
            RuntimeEvent::StepCompleted { .. } => "step.completed",
            RuntimeEvent::StepFailed { .. } => "step.failed",
            RuntimeEvent::ToolCalled { .. } => "tool.called",
            RuntimeEvent::ToolCompleted { .. } => "tool.completed",
            RuntimeEvent::ToolFailed { .. } => "tool.failed",
            RuntimeEvent::ToolProgress { .. } => "tool.progress",
            RuntimeEvent::BudgetExceeded { .. } => "budget.exceeded",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn base() -> Value {
        json!({
            "timestamp": "2026-01-01T00:00:00.000Z",
            "agentName": "alpha",
            "instanceKey": "main",
            "traceId": "0123456789abcdef0123456789abcdef",
            "spanId": "0123456789abcdef",
            "parentSpanId": "fedcba9876543210"
        })
    }

    fn with(extra: Value) -> Value {
        let mut value = base();
        value
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        value
    }

    #[test]
    fn all_nine_events_round_trip() {
        let usage = json!({"promptTokens": 1, "completionTokens": 2, "totalTokens": 3});
        let cases = [
            with(json!({"type": "turn.started", "turnId": "t"})),
            with(
                json!({"type": "turn.completed", "turnId": "t", "stepCount": 2, "duration": 5, "tokenUsage": usage}),
            ),
            with(json!({"type": "turn.failed", "turnId": "t", "duration": 5, "errorMessage": "x"})),
            with(
                json!({"type": "turn.failed", "turnId": "t", "duration": 5, "errorMessage": "x", "cancelledBy": "cli"}),
            ),
            with(
                json!({"type": "step.started", "stepId": "s", "stepIndex": 0, "turnId": "t", "llmInputMessages": [{"role": "user", "content": "hi", "contentSource": "verbatim"}]}),
            ),
            with(
                json!({"type": "step.completed", "stepId": "s", "stepIndex": 0, "turnId": "t", "toolCallCount": 1, "duration": 3}),
            ),
            with(
                json!({"type": "step.completed", "stepId": "s", "stepIndex": 0, "turnId": "t", "toolCallCount": 0, "duration": 3, "tokenUsage": usage, "model": "claude", "costUsd": 0.25}),
            ),
            with(
                json!({"type": "budget.exceeded", "turnId": "t", "limit": "maxTokensPerTurn", "limitValue": 100.0, "used": 120.0, "errorMessage": "x"}),
            ),
            with(
                json!({"type": "step.failed", "stepId": "s", "stepIndex": 0, "turnId": "t", "duration": 3, "errorMessage": "x"}),
            ),
            with(
                json!({"type": "tool.called", "toolCallId": "c", "toolName": "a__b", "stepId": "s", "turnId": "t"}),
            ),
            with(
                json!({"type": "tool.completed", "toolCallId": "c", "toolName": "a__b", "status": "ok", "duration": 1, "stepId": "s", "turnId": "t"}),
            ),
            with(
                json!({"type": "tool.failed", "toolCallId": "c", "toolName": "a__b", "duration": 1, "stepId": "s", "turnId": "t", "errorMessage": "x"}),
            ),
            with(
                json!({"type": "tool.progress", "toolCallId": "c", "toolName": "a__b", "stepId": "s", "turnId": "t", "message": "working", "data": {"state": "working"}}),
            ),
        ];
        for case in cases {
            let parsed: RuntimeEvent = serde_json::from_value(case.clone()).unwrap();
            assert_eq!(parsed.type_name(), case["type"]);
            assert_eq!(parsed.base().agent_name, "alpha");
            let mut back = serde_json::to_value(&parsed).unwrap();
            let mut expected = case.clone();
            back.as_object_mut().unwrap().sort_keys();
            expected.as_object_mut().unwrap().sort_keys();
            assert_eq!(back, expected);
        }
    }
}
