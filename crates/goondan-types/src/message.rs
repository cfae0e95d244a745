//! Conversation messages and the events that change them
//! (`shared-types.md` §4).
//!
//! A [`Message`] wraps an AI SDK v6 `ModelMessage` ([`ModelMessage`]) with
//! an id, metadata, a creation time and its source. [`MessageEvent`]s are
//! the only way a conversation changes: `NextMessages = BaseMessages +
//! SUM(Events)`. Folding lives in the runtime; these are the shapes.

use crate::json::{JsonObject, JsonValue};
use serde::{Deserialize, Serialize};

/// An AI SDK v6 `ModelMessage`: what a provider receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ModelMessage {
    /// A system prompt.
    System {
        /// The prompt text.
        content: String,
        /// Provider-specific options, kept verbatim.
        #[serde(
            default,
            rename = "providerOptions",
            skip_serializing_if = "Option::is_none"
        )]
        provider_options: Option<JsonValue>,
    },
    /// A user turn.
    User {
        /// Text or parts.
        content: MessageContent,
        /// Provider-specific options, kept verbatim.
        #[serde(
            default,
            rename = "providerOptions",
            skip_serializing_if = "Option::is_none"
        )]
        provider_options: Option<JsonValue>,
    },
    /// A model answer: text and tool calls.
    Assistant {
        /// Text or parts.
        content: MessageContent,
        /// Provider-specific options, kept verbatim.
        #[serde(
            default,
            rename = "providerOptions",
            skip_serializing_if = "Option::is_none"
        )]
        provider_options: Option<JsonValue>,
    },
    /// Tool results answering an assistant's tool calls.
    Tool {
        /// The results; only `tool-result` parts belong here.
        content: Vec<ContentPart>,
        /// Provider-specific options, kept verbatim.
        #[serde(
            default,
            rename = "providerOptions",
            skip_serializing_if = "Option::is_none"
        )]
        provider_options: Option<JsonValue>,
    },
}

impl ModelMessage {
    /// A system message with plain text.
    pub fn system(text: impl Into<String>) -> Self {
        ModelMessage::System {
            content: text.into(),
            provider_options: None,
        }
    }

    /// A user message with plain text.
    pub fn user(text: impl Into<String>) -> Self {
        ModelMessage::User {
            content: MessageContent::Text(text.into()),
            provider_options: None,
        }
    }

    /// An assistant message made of parts.
    pub fn assistant(parts: Vec<ContentPart>) -> Self {
        ModelMessage::Assistant {
            content: MessageContent::Parts(parts),
            provider_options: None,
        }
    }

    /// A tool message made of `tool-result` parts.
    pub fn tool(parts: Vec<ContentPart>) -> Self {
        ModelMessage::Tool {
            content: parts,
            provider_options: None,
        }
    }

    /// The role as the wire spells it.
    pub fn role(&self) -> &'static str {
        match self {
            ModelMessage::System { .. } => "system",
            ModelMessage::User { .. } => "user",
            ModelMessage::Assistant { .. } => "assistant",
            ModelMessage::Tool { .. } => "tool",
        }
    }

    /// Every part of the message; plain text content is one `text` part.
    pub fn parts(&self) -> Vec<ContentPart> {
        match self {
            ModelMessage::System { content, .. } => vec![ContentPart::text(content.clone())],
            ModelMessage::User { content, .. } | ModelMessage::Assistant { content, .. } => {
                content.to_parts()
            }
            ModelMessage::Tool { content, .. } => content.clone(),
        }
    }

    /// The concatenated text parts, without tool calls or results.
    pub fn text(&self) -> String {
        match self {
            ModelMessage::System { content, .. } => content.clone(),
            ModelMessage::User { content, .. } | ModelMessage::Assistant { content, .. } => {
                content.text()
            }
            ModelMessage::Tool { .. } => String::new(),
        }
    }
}

/// Message content: a plain string or an array of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Typed parts.
    Parts(Vec<ContentPart>),
}

impl MessageContent {
    /// The content as parts.
    pub fn to_parts(&self) -> Vec<ContentPart> {
        match self {
            MessageContent::Text(text) => vec![ContentPart::text(text.clone())],
            MessageContent::Parts(parts) => parts.clone(),
        }
    }

    /// The concatenated text of all `text` parts.
    pub fn text(&self) -> String {
        match self {
            MessageContent::Text(text) => text.clone(),
            MessageContent::Parts(parts) => parts
                .iter()
                .filter_map(|part| match part {
                    ContentPart::Text { text, .. } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(""),
        }
    }
}

/// One part of a message, tagged by `type` as in the AI SDK.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ContentPart {
    /// Text.
    Text {
        /// The text.
        text: String,
        /// Provider-specific options, kept verbatim.
        #[serde(
            default,
            rename = "providerOptions",
            skip_serializing_if = "Option::is_none"
        )]
        provider_options: Option<JsonValue>,
    },
    /// An image, as base64 data or a URL.
    Image {
        /// Data or URL.
        image: JsonValue,
        /// The IANA media type, when known.
        #[serde(default, rename = "mediaType", skip_serializing_if = "Option::is_none")]
        media_type: Option<String>,
        /// Provider-specific options, kept verbatim.
        #[serde(
            default,
            rename = "providerOptions",
            skip_serializing_if = "Option::is_none"
        )]
        provider_options: Option<JsonValue>,
    },
    /// A file, as base64 data or a URL.
    File {
        /// Data or URL.
        data: JsonValue,
        /// The IANA media type.
        #[serde(rename = "mediaType")]
        media_type: String,
        /// The original file name, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
        /// Provider-specific options, kept verbatim.
        #[serde(
            default,
            rename = "providerOptions",
            skip_serializing_if = "Option::is_none"
        )]
        provider_options: Option<JsonValue>,
    },
    /// Model reasoning text.
    Reasoning {
        /// The reasoning text.
        text: String,
        /// Provider-specific options, kept verbatim.
        #[serde(
            default,
            rename = "providerOptions",
            skip_serializing_if = "Option::is_none"
        )]
        provider_options: Option<JsonValue>,
    },
    /// A call the model asks for.
    ToolCall {
        /// The call id the result must echo.
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        /// The tool name as in the catalog (`resource__export`).
        #[serde(rename = "toolName")]
        tool_name: String,
        /// The arguments.
        input: JsonValue,
        /// Provider-specific options, kept verbatim.
        #[serde(
            default,
            rename = "providerOptions",
            skip_serializing_if = "Option::is_none"
        )]
        provider_options: Option<JsonValue>,
    },
    /// The result of a call.
    ToolResult {
        /// The id of the call this answers.
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        /// The tool name of that call.
        #[serde(rename = "toolName")]
        tool_name: String,
        /// The output.
        output: ToolResultOutput,
        /// Provider-specific options, kept verbatim.
        #[serde(
            default,
            rename = "providerOptions",
            skip_serializing_if = "Option::is_none"
        )]
        provider_options: Option<JsonValue>,
    },
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart::Text {
            text: text.into(),
            provider_options: None,
        }
    }

    /// A tool-call part.
    pub fn tool_call(
        tool_call_id: impl Into<String>,
        tool_name: impl Into<String>,
        input: JsonValue,
    ) -> Self {
        ContentPart::ToolCall {
            tool_call_id: tool_call_id.into(),
            tool_name: tool_name.into(),
            input,
            provider_options: None,
        }
    }

    /// A tool-result part.
    pub fn tool_result(
        tool_call_id: impl Into<String>,
        tool_name: impl Into<String>,
        output: ToolResultOutput,
    ) -> Self {
        ContentPart::ToolResult {
            tool_call_id: tool_call_id.into(),
            tool_name: tool_name.into(),
            output,
            provider_options: None,
        }
    }
}

/// The output of a tool result, tagged by `type` (AI SDK v6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "kebab-case")]
pub enum ToolResultOutput {
    /// Plain text output.
    Text(String),
    /// Structured output.
    Json(JsonValue),
    /// An error as text.
    ErrorText(String),
    /// An error as structured data.
    ErrorJson(JsonValue),
    /// Rich content parts (text or media), kept verbatim.
    Content(Vec<JsonValue>),
}

impl ToolResultOutput {
    /// True for `error-text` and `error-json`.
    pub fn is_error(&self) -> bool {
        matches!(
            self,
            ToolResultOutput::ErrorText(_) | ToolResultOutput::ErrorJson(_)
        )
    }

    /// The output as one JSON value, the shape providers put on the wire.
    pub fn to_json(&self) -> JsonValue {
        match self {
            ToolResultOutput::Text(text) | ToolResultOutput::ErrorText(text) => {
                JsonValue::String(text.clone())
            }
            ToolResultOutput::Json(value) | ToolResultOutput::ErrorJson(value) => value.clone(),
            ToolResultOutput::Content(parts) => JsonValue::Array(parts.clone()),
        }
    }
}

/// Where a message came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum MessageSource {
    /// Input from a user or another agent.
    User,
    /// A model answer produced in a step.
    Assistant {
        /// The step that produced it.
        #[serde(rename = "stepId")]
        step_id: String,
    },
    /// A tool result.
    Tool {
        /// The call it answers.
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        /// The tool that ran.
        #[serde(rename = "toolName")]
        tool_name: String,
    },
    /// The runtime itself.
    System,
    /// An extension.
    Extension {
        /// The extension's name.
        #[serde(rename = "extensionName")]
        extension_name: String,
    },
}

/// A message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Stable id; `replace` and `remove` events target it.
    pub id: String,
    /// What the model sees.
    pub data: ModelMessage,
    /// Free-form metadata for extensions (for example pinning).
    #[serde(default)]
    pub metadata: JsonObject,
    /// ISO 8601 creation time.
    pub created_at: String,
    /// Who produced the message.
    pub source: MessageSource,
}

impl Message {
    /// A new message with a fresh id, the current time and empty metadata.
    pub fn new(data: ModelMessage, source: MessageSource) -> Self {
        Message {
            id: new_message_id(),
            data,
            metadata: JsonObject::new(),
            created_at: crate::now_iso(),
            source,
        }
    }
}

/// A fresh message id (`msg_` and 24 hex digits).
pub fn new_message_id() -> String {
    format!("msg_{}", crate::trace::random_hex(12))
}

/// A change to the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum MessageEvent {
    /// Adds a message at the end.
    Append {
        /// The new message.
        message: Message,
    },
    /// Replaces the message with id `targetId`.
    Replace {
        /// The id of the message to replace.
        #[serde(rename = "targetId")]
        target_id: String,
        /// Its replacement.
        message: Message,
    },
    /// Removes the message with id `targetId`.
    Remove {
        /// The id of the message to remove.
        #[serde(rename = "targetId")]
        target_id: String,
    },
    /// Removes every message.
    Truncate,
}

impl MessageEvent {
    /// True for events that only add at the end, which lets a store append
    /// to its base log instead of rewriting it.
    pub fn is_append(&self) -> bool {
        matches!(self, MessageEvent::Append { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ai_sdk_v6_shapes_round_trip() {
        let cases = [
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": "hi"}),
            json!({"role": "user", "content": [{"type": "text", "text": "hi"}]}),
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "running"},
                {"type": "tool-call", "toolCallId": "c1", "toolName": "bash__exec", "input": {"command": "ls"}}
            ]}),
            json!({"role": "tool", "content": [
                {"type": "tool-result", "toolCallId": "c1", "toolName": "bash__exec", "output": {"type": "json", "value": {"exitCode": 0}}}
            ]}),
            json!({"role": "tool", "content": [
                {"type": "tool-result", "toolCallId": "c2", "toolName": "x__y", "output": {"type": "error-text", "value": "boom"}}
            ]}),
        ];
        for case in cases {
            let parsed: ModelMessage = serde_json::from_value(case.clone()).unwrap();
            assert_eq!(serde_json::to_value(&parsed).unwrap(), case);
        }
    }

    #[test]
    fn message_and_events_round_trip() {
        let message = json!({
            "id": "m1",
            "data": {"role": "user", "content": "hello"},
            "metadata": {"pinned": true},
            "createdAt": "2026-01-01T00:00:00.000Z",
            "source": {"type": "user"}
        });
        let events = [
            json!({"type": "append", "message": message}),
            json!({"type": "replace", "targetId": "m1", "message": message}),
            json!({"type": "remove", "targetId": "m1"}),
            json!({"type": "truncate"}),
        ];
        for event in events {
            let parsed: MessageEvent = serde_json::from_value(event.clone()).unwrap();
            assert_eq!(serde_json::to_value(&parsed).unwrap(), event);
        }
        for source in [
            json!({"type": "assistant", "stepId": "s1"}),
            json!({"type": "tool", "toolCallId": "c", "toolName": "t__x"}),
            json!({"type": "system"}),
            json!({"type": "extension", "extensionName": "context-message"}),
        ] {
            let parsed: MessageSource = serde_json::from_value(source.clone()).unwrap();
            assert_eq!(serde_json::to_value(&parsed).unwrap(), source);
        }
    }

    #[test]
    fn text_joins_only_text_parts() {
        let message = ModelMessage::assistant(vec![
            ContentPart::text("a"),
            ContentPart::tool_call("c", "t__x", json!({})),
            ContentPart::text("b"),
        ]);
        assert_eq!(message.text(), "ab");
        assert_eq!(message.role(), "assistant");
    }
}
