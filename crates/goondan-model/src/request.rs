//! The provider-neutral request and response.

use goondan_types::{ContentPart, JsonObject, JsonValue, ModelMessage, TokenUsage, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The `providerOptions` namespace under which this crate marks a tool
/// call whose arguments were not a JSON object. Wires read only their own
/// namespace, so the mark never travels back to a provider.
const GOONDAN_OPTIONS: &str = "goondan";

/// How many characters of unparsable arguments are kept with the call.
const INVALID_ARGUMENTS_PREVIEW_CHARS: usize = 500;

/// Tool-call arguments the provider sent that are not a JSON object.
///
/// A model that writes broken JSON should be told so and get another
/// try, not end the Turn, so the wires keep such a call with empty
/// arguments (`{}`, which every provider accepts when the conversation is
/// sent back) and this mark; the runtime answers the call with an
/// `E_TOOL_INVALID_ARGS` result instead of running it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidToolArguments {
    /// The start of the text as sent (at most 500 characters).
    pub preview: String,
    /// The length of the whole text, in bytes.
    pub n_bytes: u64,
    /// Why it was refused, for example the JSON parser's message.
    pub problem: String,
}

impl InvalidToolArguments {
    /// A tool-call part carrying `raw` as invalid arguments.
    pub(crate) fn tool_call(
        tool_call_id: String,
        tool_name: String,
        raw: &str,
        problem: String,
    ) -> ContentPart {
        let preview: String = raw.chars().take(INVALID_ARGUMENTS_PREVIEW_CHARS).collect();
        ContentPart::ToolCall {
            tool_call_id,
            tool_name,
            input: JsonValue::Object(JsonObject::new()),
            provider_options: Some(json!({GOONDAN_OPTIONS: {"invalidArguments": {
                "preview": preview,
                "bytes": raw.len(),
                "problem": problem,
            }}})),
        }
    }

    /// The mark on a tool-call part, if it has one.
    pub fn of(part: &ContentPart) -> Option<InvalidToolArguments> {
        let ContentPart::ToolCall {
            provider_options: Some(options),
            ..
        } = part
        else {
            return None;
        };
        let mark = options.get(GOONDAN_OPTIONS)?.get("invalidArguments")?;
        let text = |field: &str| {
            mark.get(field)
                .and_then(JsonValue::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Some(InvalidToolArguments {
            preview: text("preview"),
            n_bytes: mark.get("bytes").and_then(JsonValue::as_u64).unwrap_or(0),
            problem: text("problem"),
        })
    }
}

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

    /// The mark of the call `tool_call_id` when its arguments were not a
    /// JSON object (see [`InvalidToolArguments`]).
    pub fn invalid_arguments(&self, tool_call_id: &str) -> Option<InvalidToolArguments> {
        self.content.iter().find_map(|part| match part {
            ContentPart::ToolCall {
                tool_call_id: id, ..
            } if id == tool_call_id => InvalidToolArguments::of(part),
            _ => None,
        })
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
