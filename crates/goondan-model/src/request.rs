//! The provider-neutral request and response.

use goondan_types::{ContentPart, JsonObject, ModelMessage, TokenUsage, ToolCall};
use serde::{Deserialize, Serialize};

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// `resource__export`.
    pub name: String,
    /// Shown to the model.
    pub description: String,
    /// A JSON Schema object for the arguments.
    pub parameters: JsonObject,
}

/// Sampling parameters. `extra` is passed through to the provider body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelParams {
    /// 0 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// The output cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Provider-specific body fields.
    #[serde(default, skip_serializing_if = "JsonObject::is_empty")]
    pub extra: JsonObject,
}

/// Everything a provider needs for one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The model id, for example `claude-sonnet-4-5`.
    pub model: String,
    /// The conversation, system messages included.
    pub messages: Vec<ModelMessage>,
    /// The step's tool catalog.
    pub tools: Vec<ToolSpec>,
    /// Sampling parameters.
    pub params: ModelParams,
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// A natural end.
    Stop,
    /// The output cap was reached.
    Length,
    /// The model asked for tools.
    ToolCalls,
    /// The provider filtered the answer.
    ContentFilter,
    /// Anything else the provider reported.
    Other,
}

/// The whole answer of one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelResponse {
    /// Text, reasoning and tool-call parts in the order the model gave them.
    pub content: Vec<ContentPart>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Token counts, when the provider reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
}

impl ModelResponse {
    /// The tool calls in order, with non-object inputs wrapped as
    /// `{ "value": input }` so handlers always get an object.
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        self.content
            .iter()
            .filter_map(|part| match part {
                ContentPart::ToolCall {
                    tool_call_id,
                    tool_name,
                    input,
                    ..
                } => Some(ToolCall {
                    id: tool_call_id.clone(),
                    name: tool_name.clone(),
                    args: match input {
                        serde_json::Value::Object(object) => object.clone(),
                        serde_json::Value::Null => JsonObject::new(),
                        other => {
                            let mut object = JsonObject::new();
                            object.insert("value".into(), other.clone());
                            object
                        }
                    },
                }),
                _ => None,
            })
            .collect()
    }

    /// The concatenated text parts.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|part| match part {
                ContentPart::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}
