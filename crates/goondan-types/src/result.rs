//! Step and Turn outcomes (`pipeline.md` §4, `shared-types.md` §9, §10).

use crate::json::JsonObject;
use crate::message::Message;
use crate::tool::{ToolCall, ToolCallResult};
use serde::{Deserialize, Serialize};
use std::ops::AddAssign;

/// Token counts of one model call or their sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Input tokens.
    pub prompt_tokens: u64,
    /// Output tokens.
    pub completion_tokens: u64,
    /// Their sum as the provider reported it.
    pub total_tokens: u64,
}

impl AddAssign for TokenUsage {
    fn add_assign(&mut self, other: TokenUsage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
    }
}

/// `completed` or `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    /// The step ran.
    Completed,
    /// The step failed.
    Failed,
}

/// The outcome of one Step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepResult {
    /// Completed or failed.
    pub status: StepStatus,
    /// Whether the Turn loops again; the core sets "the model asked for
    /// tools", step middleware may override it after `next`.
    pub should_continue: bool,
    /// The calls the model asked for.
    pub tool_calls: Vec<ToolCall>,
    /// Their results, in call order.
    pub tool_results: Vec<ToolCallResult>,
    /// Free-form metadata.
    #[serde(default)]
    pub metadata: JsonObject,
}

/// Why a Turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnFinishReason {
    /// The model answered with text.
    TextResponse,
    /// `maxStepsPerTurn` was reached.
    MaxSteps,
    /// The Turn failed.
    Error,
}

/// A Turn's error summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnError {
    /// What went wrong.
    pub message: String,
    /// A stable code, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// How to fix it, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
}

/// The outcome of one Turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnResult {
    /// The Turn's id.
    pub turn_id: String,
    /// The final assistant message, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_message: Option<Message>,
    /// Why it ended.
    pub finish_reason: TurnFinishReason,
    /// Set when `finishReason` is `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TurnError>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes_round_trip() {
        let turn = json!({"turnId": "t1", "finishReason": "max_steps", "error": {"message": "x", "code": "E"}});
        let parsed: TurnResult = serde_json::from_value(turn.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), turn);
        let step = json!({"status": "completed", "shouldContinue": true, "toolCalls": [{"id": "c", "name": "a__b", "args": {}}], "toolResults": [], "metadata": {}});
        let parsed: StepResult = serde_json::from_value(step.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), step);
        let mut usage = TokenUsage {
            prompt_tokens: 1,
            completion_tokens: 2,
            total_tokens: 3,
        };
        usage += usage;
        assert_eq!(
            serde_json::to_value(usage).unwrap(),
            json!({"promptTokens": 2, "completionTokens": 4, "totalTokens": 6})
        );
    }
}
