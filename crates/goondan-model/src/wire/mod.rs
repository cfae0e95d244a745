//! The HTTP wire protocols (Anthropic Messages, OpenAI Chat Completions
//! and Responses, Gemini) behind one internal trait, [`Wire`]: how a
//! [`ModelRequest`] becomes a provider body and how the provider's answer,
//! whole or streamed, becomes a [`ModelResponse`].
//!
//! Transport (timeouts, retries, SSE framing) is not here; it lives in
//! [`crate::http`], shared by every wire. How a provider words an error
//! ([`provider_message`]) is here, since a stream carries it too.

pub(crate) mod anthropic;
pub(crate) mod google;
pub(crate) mod openai;
pub(crate) mod openai_responses;

use crate::error::ModelError;
use crate::request::{InvalidToolArguments, ModelRequest, ModelResponse};
use crate::StreamObserver;
use goondan_types::sse::SseEvent;
use goondan_types::{ContentPart, JsonObject, JsonValue, ToolResultOutput};

/// One provider's wire format.
pub(crate) trait Wire: Send + Sync + 'static {
    /// The state that assembles a streamed answer.
    type Stream: StreamAssembler;

    /// The provider name used in errors and logs.
    fn provider(&self) -> &'static str;

    /// The URL of one call; `base_url` has no trailing slash.
    fn url(&self, base_url: &str, model: &str, stream: bool) -> String;

    /// The request body, before options and `params.extra` are merged in.
    fn encode(&self, request: &ModelRequest, stream: bool) -> Result<JsonObject, ModelError>;

    /// A whole (non-streamed) answer.
    fn decode(&self, body: JsonValue) -> Result<ModelResponse, ModelError>;

    /// A fresh assembler for one streamed answer.
    fn stream(&self) -> Self::Stream;
}

/// Whether a stream has more to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamProgress {
    /// Keep reading.
    Continue,
    /// The provider said it is done; the rest of the body is ignored.
    Done,
}

/// Builds a [`ModelResponse`] from SSE events, reporting text as it comes.
pub(crate) trait StreamAssembler: Send {
    /// Takes one event.
    fn on_event(
        &mut self,
        event: SseEvent,
        observer: &dyn StreamObserver,
    ) -> Result<StreamProgress, ModelError>;

    /// The whole answer once the body ended.
    fn finish(self) -> Result<ModelResponse, ModelError>;

    /// How many bytes of text, reasoning and tool-call arguments the
    /// answer holds so far, which the transport caps.
    fn content_bytes(&self) -> u64;
}

/// The bytes of text, reasoning and tool-call input in a whole answer,
/// counted as [`StreamAssembler::content_bytes`] counts a streamed one.
pub(crate) fn content_bytes(content: &[ContentPart]) -> u64 {
    content
        .iter()
        .map(|part| match part {
            ContentPart::Text { text, .. } | ContentPart::Reasoning { text, .. } => text.len(),
            ContentPart::ToolCall {
                tool_name, input, ..
            } => tool_name.len() + serde_json::to_string(input).map_or(0, |text| text.len()),
            _ => 0,
        } as u64)
        .sum()
}

/// A `MalformedResponse` for `provider`.
pub(crate) fn malformed(provider: &str, message: impl Into<String>) -> ModelError {
    ModelError::MalformedResponse {
        provider: provider.to_string(),
        message: message.into(),
    }
}

/// A tool-call part from arguments sent as a JSON string; empty means
/// `{}`. Text that is not a JSON object is kept as
/// [`InvalidToolArguments`], so the model hears about it instead of the
/// Turn failing.
pub(crate) fn tool_call_from_text(
    tool_call_id: String,
    tool_name: String,
    arguments: &str,
) -> ContentPart {
    if arguments.trim().is_empty() {
        return ContentPart::tool_call(
            tool_call_id,
            tool_name,
            JsonValue::Object(JsonObject::new()),
        );
    }
    match serde_json::from_str::<JsonValue>(arguments) {
        Ok(input @ JsonValue::Object(_)) => ContentPart::tool_call(tool_call_id, tool_name, input),
        Ok(_) => InvalidToolArguments::tool_call(
            tool_call_id,
            tool_name,
            arguments,
            "the arguments are JSON but not an object".into(),
        ),
        Err(error) => InvalidToolArguments::tool_call(
            tool_call_id,
            tool_name,
            arguments,
            format!("the arguments are not JSON ({error})"),
        ),
    }
}

/// A string field of a JSON object, or a malformed-response error naming
/// `what`.
pub(crate) fn required_str<'a>(
    provider: &str,
    object: &'a JsonValue,
    field: &str,
    what: &str,
) -> Result<&'a str, ModelError> {
    object
        .get(field)
        .and_then(JsonValue::as_str)
        .ok_or_else(|| malformed(provider, format!("{what} has no string `{field}`")))
}

/// A tool result as one string, for wires that only take text: text as
/// is, anything structured as compact JSON.
pub(crate) fn tool_output_text(output: &ToolResultOutput) -> String {
    match output {
        ToolResultOutput::Text(text) | ToolResultOutput::ErrorText(text) => text.clone(),
        ToolResultOutput::Json(value) | ToolResultOutput::ErrorJson(value) => {
            serde_json::to_string(value).unwrap_or_default()
        }
        ToolResultOutput::Content(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|part| part.get("type").and_then(JsonValue::as_str) == Some("text"))
                .filter_map(|part| part.get("text").and_then(JsonValue::as_str))
                .collect();
            if texts.len() == parts.len() {
                texts.join("\n")
            } else {
                serde_json::to_string(parts).unwrap_or_default()
            }
        }
    }
}

/// The tool results of a `tool` message, each as its call id and its
/// output as text ([`tool_output_text`]), for wires that send one item per
/// result.
pub(crate) fn tool_result_texts(content: &[ContentPart]) -> impl Iterator<Item = (&str, String)> {
    content.iter().filter_map(|part| match part {
        ContentPart::ToolResult {
            tool_call_id,
            output,
            ..
        } => Some((tool_call_id.as_str(), tool_output_text(output))),
        _ => None,
    })
}

/// The `u64` at `field`, or 0.
pub(crate) fn count(value: &JsonValue, field: &str) -> u64 {
    value.get(field).and_then(JsonValue::as_u64).unwrap_or(0)
}

/// Image or file data as the wire wants it: a URL string, or base64 data
/// (a `data:` URL is split into its media type and payload).
pub(crate) enum Media {
    Url(String),
    Base64 { media_type: String, data: String },
}

/// Reads the `image` / `data` value of an image or file part.
pub(crate) fn media(value: &JsonValue, media_type: Option<&str>) -> Option<Media> {
    let text = match value {
        JsonValue::String(text) => text.as_str(),
        JsonValue::Object(object) => object.get("url").and_then(JsonValue::as_str)?,
        _ => return None,
    };
    if let Some(rest) = text.strip_prefix("data:") {
        let (header, data) = rest.split_once(',')?;
        let media_type = header.split(';').next().unwrap_or_default();
        return Some(Media::Base64 {
            media_type: media_type.to_string(),
            data: data.to_string(),
        });
    }
    if text.starts_with("http://") || text.starts_with("https://") {
        return Some(Media::Url(text.to_string()));
    }
    Some(Media::Base64 {
        media_type: media_type.unwrap_or("application/octet-stream").to_string(),
        data: text.to_string(),
    })
}

/// The provider's own message from an error body. All three providers
/// nest it as `{"error": {"message": ...}}`, with a type or status beside
/// it that is worth keeping (`rate_limit_error`, `RESOURCE_EXHAUSTED`).
pub(crate) fn provider_message(body: &str) -> String {
    if let Ok(value) = serde_json::from_str::<JsonValue>(body) {
        let error = value.get("error").unwrap_or(&value);
        if let Some(text) = error.as_str() {
            return text.to_string();
        }
        if let Some(message) = error.get("message").and_then(JsonValue::as_str) {
            let kind = error
                .get("type")
                .or_else(|| error.get("status"))
                .and_then(JsonValue::as_str);
            return match kind {
                Some(kind) => format!("{kind}: {message}"),
                None => message.to_string(),
            };
        }
    }
    let trimmed = body.trim();
    if trimmed.is_empty() {
        return "(empty body)".to_string();
    }
    trimmed.chars().take(2000).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_messages() {
        let cases = [
            (
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
                "rate_limit_error: slow down",
            ),
            (
                r#"{"error":{"message":"bad model","type":"invalid_request_error","code":null}}"#,
                "invalid_request_error: bad model",
            ),
            (
                r#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}"#,
                "RESOURCE_EXHAUSTED: quota",
            ),
            (r#"{"error":"plain"}"#, "plain"),
            ("upstream down", "upstream down"),
            ("", "(empty body)"),
        ];
        for (body, expected) in cases {
            assert_eq!(provider_message(body), expected);
        }
    }
    use serde_json::json;

    #[test]
    fn arguments_that_are_not_a_json_object_are_kept_as_marked_calls() {
        let parse = |text: &str| tool_call_from_text("c9".into(), "bash__exec".into(), text);
        assert_eq!(
            parse(""),
            ContentPart::tool_call("c9", "bash__exec", json!({}))
        );
        assert_eq!(
            parse("{\"a\":1}"),
            ContentPart::tool_call("c9", "bash__exec", json!({"a": 1}))
        );
        for (text, problem) in [("{\"a\":", "not JSON"), ("[1]", "not an object")] {
            let part = parse(text);
            let mark = InvalidToolArguments::of(&part).unwrap();
            assert_eq!(mark.preview, text);
            assert_eq!(mark.n_bytes, text.len() as u64);
            assert!(mark.problem.contains(problem), "{}", mark.problem);
            assert!(matches!(part, ContentPart::ToolCall { input, .. } if input == json!({})));
        }
    }

    #[test]
    fn tool_output_as_text() {
        let cases = [
            (ToolResultOutput::Text("hi".into()), "hi"),
            (ToolResultOutput::Json(json!({"a": 1})), "{\"a\":1}"),
            (ToolResultOutput::ErrorText("boom".into()), "boom"),
            (
                ToolResultOutput::Content(vec![json!({"type": "text", "text": "x"})]),
                "x",
            ),
        ];
        for (output, expected) in cases {
            assert_eq!(tool_output_text(&output), expected);
        }
    }

    #[test]
    fn media_forms() {
        assert!(matches!(
            media(&json!("data:image/png;base64,QUJD"), None),
            Some(Media::Base64 { media_type, data }) if media_type == "image/png" && data == "QUJD"
        ));
        assert!(matches!(
            media(&json!("https://x/y.png"), None),
            Some(Media::Url(_))
        ));
        assert!(matches!(
            media(&json!("QUJD"), Some("image/jpeg")),
            Some(Media::Base64 { media_type, .. }) if media_type == "image/jpeg"
        ));
    }
}
