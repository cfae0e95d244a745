//! OpenAI Chat Completions (`POST {base}/chat/completions`), which is also
//! what Ollama, vLLM, LM Studio, OpenRouter and most local servers speak.
//!
//! Mapping: tool-call inputs travel as JSON strings in
//! `tool_calls[].function.arguments`; each tool result is its own
//! `role: "tool"` message; reasoning parts are not sent back (the API has
//! no field for them), while `reasoning_content` from compatible servers
//! is read into reasoning parts.

use super::{
    count, malformed, media, required_str, tool_call_from_text, tool_result_texts, Media,
    StreamAssembler, StreamProgress, Wire,
};
use crate::error::ModelError;
use crate::request::{FinishReason, ModelRequest, ModelResponse};
use crate::StreamObserver;
use goondan_types::sse::SseEvent;
use goondan_types::{ContentPart, JsonObject, JsonValue, ModelMessage, TokenUsage};
use serde_json::json;
use std::collections::BTreeMap;

const PROVIDER: &str = "openai";

/// The default base URL, version path included.
pub(crate) const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The Chat Completions wire.
pub(crate) struct OpenAiWire {
    /// `max_completion_tokens` (OpenAI's current name) or `max_tokens`
    /// (what compatible servers understand).
    pub(crate) max_tokens_field: String,
    /// Whether to ask for usage in the last stream chunk.
    pub(crate) stream_usage: bool,
}

impl Wire for OpenAiWire {
    type Stream = OpenAiStream;

    fn provider(&self) -> &'static str {
        PROVIDER
    }

    fn url(&self, base_url: &str, _model: &str, _stream: bool) -> String {
        format!("{base_url}/chat/completions")
    }

    fn encode(&self, request: &ModelRequest, stream: bool) -> Result<JsonObject, ModelError> {
        let mut messages = Vec::new();
        for message in &request.messages {
            match message {
                ModelMessage::System { content, .. } => {
                    messages.push(json!({"role": "system", "content": content}));
                }
                ModelMessage::User { content, .. } => {
                    let parts = content.to_parts();
                    let all_text = parts
                        .iter()
                        .all(|part| matches!(part, ContentPart::Text { .. }));
                    let content = if all_text {
                        JsonValue::String(content.text())
                    } else {
                        parts.iter().filter_map(user_part).collect()
                    };
                    messages.push(json!({"role": "user", "content": content}));
                }
                ModelMessage::Assistant { content, .. } => {
                    let mut text = String::new();
                    let mut tool_calls = Vec::new();
                    for part in content.to_parts() {
                        match part {
                            ContentPart::Text { text: piece, .. } => text.push_str(&piece),
                            ContentPart::ToolCall {
                                tool_call_id,
                                tool_name,
                                input,
                                ..
                            } => tool_calls.push(json!({
                                "id": tool_call_id,
                                "type": "function",
                                "function": {
                                    "name": tool_name,
                                    "arguments": serde_json::to_string(&input).unwrap_or_default(),
                                }
                            })),
                            _ => {}
                        }
                    }
                    if text.is_empty() && tool_calls.is_empty() {
                        continue;
                    }
                    let mut message = json!({
                        "role": "assistant",
                        "content": if text.is_empty() { JsonValue::Null } else { JsonValue::String(text) },
                    });
                    if !tool_calls.is_empty() {
                        message["tool_calls"] = JsonValue::Array(tool_calls);
                    }
                    messages.push(message);
                }
                ModelMessage::Tool { content, .. } => {
                    for (tool_call_id, text) in tool_result_texts(content) {
                        messages.push(json!({
                            "role": "tool",
                            "tool_call_id": tool_call_id,
                            "content": text,
                        }));
                    }
                }
            }
        }
        let mut body = JsonObject::new();
        body.insert("model".into(), json!(request.model));
        body.insert("messages".into(), JsonValue::Array(messages));
        if !request.tools.is_empty() {
            body.insert(
                "tools".into(),
                request
                    .tools
                    .iter()
                    .map(|tool| {
                        json!({"type": "function", "function": {
                            "name": tool.name,
                            "description": tool.description,
                            "parameters": tool.parameters,
                        }})
                    })
                    .collect(),
            );
        }
        if let Some(temperature) = request.params.temperature {
            body.insert("temperature".into(), json!(temperature));
        }
        if let Some(top_p) = request.params.top_p {
            body.insert("top_p".into(), json!(top_p));
        }
        if let Some(max_tokens) = request.params.max_tokens {
            body.insert(self.max_tokens_field.clone(), json!(max_tokens));
        }
        if stream {
            body.insert("stream".into(), JsonValue::Bool(true));
            if self.stream_usage {
                body.insert("stream_options".into(), json!({"include_usage": true}));
            }
        }
        Ok(body)
    }

    fn decode(&self, body: JsonValue) -> Result<ModelResponse, ModelError> {
        let choice = body
            .pointer("/choices/0")
            .ok_or_else(|| malformed(PROVIDER, "the answer has no choices"))?;
        let message = choice
            .get("message")
            .ok_or_else(|| malformed(PROVIDER, "the first choice has no message"))?;
        let mut content = Vec::new();
        if let Some(reasoning) = reasoning_text(message) {
            content.push(ContentPart::Reasoning {
                text: reasoning.to_string(),
                provider_options: None,
            });
        }
        match message.get("content") {
            Some(JsonValue::String(text)) if !text.is_empty() => {
                content.push(ContentPart::text(text.clone()));
            }
            Some(JsonValue::String(_) | JsonValue::Null) | None => {}
            Some(_) => {
                return Err(malformed(
                    PROVIDER,
                    "message.content is neither text nor null",
                ))
            }
        }
        let tool_calls = message
            .get("tool_calls")
            .and_then(JsonValue::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (index, call) in tool_calls.iter().enumerate() {
            let function = call
                .get("function")
                .ok_or_else(|| malformed(PROVIDER, format!("tool call {index} has no function")))?;
            let name = required_str(PROVIDER, function, "name", "a tool call's function")?;
            let id = call_id(call.get("id").and_then(JsonValue::as_str), index);
            let part = match function.get("arguments") {
                Some(JsonValue::String(arguments)) => {
                    tool_call_from_text(id, name.to_string(), arguments)
                }
                None | Some(JsonValue::Null) => ContentPart::tool_call(id, name, json!({})),
                // Some compatible servers send the arguments as an object;
                // anything else is marked as invalid arguments.
                Some(other) => tool_call_from_text(id, name.to_string(), &other.to_string()),
            };
            content.push(part);
        }
        Ok(ModelResponse {
            content,
            finish_reason: finish_reason(choice.get("finish_reason").and_then(JsonValue::as_str)),
            usage: body
                .get("usage")
                .filter(|usage| usage.is_object())
                .map(usage_from),
        })
    }

    fn stream(&self) -> OpenAiStream {
        OpenAiStream::default()
    }
}

fn reasoning_text(message: &JsonValue) -> Option<&str> {
    ["reasoning_content", "reasoning"]
        .iter()
        .find_map(|field| message.get(*field).and_then(JsonValue::as_str))
        .filter(|text| !text.is_empty())
}

/// Some compatible servers omit tool-call ids; a stable stand-in keeps the
/// result pairing intact within the answer.
fn call_id(id: Option<&str>, index: usize) -> String {
    match id {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => format!("call_{}_{index}", goondan_types::trace::random_hex(6)),
    }
}

fn user_part(part: &ContentPart) -> Option<JsonValue> {
    let data_url = |media: Media| match media {
        Media::Url(url) => url,
        Media::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
    };
    match part {
        ContentPart::Text { text, .. } => Some(json!({"type": "text", "text": text})),
        ContentPart::Image {
            image, media_type, ..
        } => Some(
            json!({"type": "image_url", "image_url": {"url": data_url(media(image, media_type.as_deref())?)}}),
        ),
        ContentPart::File {
            data,
            media_type,
            filename,
            ..
        } => {
            if media_type.starts_with("image/") {
                return Some(
                    json!({"type": "image_url", "image_url": {"url": data_url(media(data, Some(media_type))?)}}),
                );
            }
            Some(json!({"type": "file", "file": {
                "filename": filename.clone().unwrap_or_else(|| "file".into()),
                "file_data": data_url(media(data, Some(media_type))?),
            }}))
        }
        _ => None,
    }
}

fn finish_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        Some("content_filter") => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

fn usage_from(usage: &JsonValue) -> TokenUsage {
    let prompt_tokens = count(usage, "prompt_tokens");
    let completion_tokens = count(usage, "completion_tokens");
    let total_tokens = match count(usage, "total_tokens") {
        0 => prompt_tokens + completion_tokens,
        total => total,
    };
    TokenUsage {
        prompt_tokens,
        completion_tokens,
        total_tokens,
    }
}

#[derive(Default)]
struct PendingCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Assembles a streamed Chat Completions answer.
#[derive(Default)]
pub(crate) struct OpenAiStream {
    text: String,
    reasoning: String,
    calls: BTreeMap<u64, PendingCall>,
    finish_reason: Option<String>,
    usage: Option<TokenUsage>,
    done: bool,
    /// Whether any chunk carried a choice; a stream of `choices: []` and
    /// `[DONE]` said nothing at all.
    saw_choice: bool,
    n_content_bytes: u64,
}

impl StreamAssembler for OpenAiStream {
    fn on_event(
        &mut self,
        event: SseEvent,
        observer: &dyn StreamObserver,
    ) -> Result<StreamProgress, ModelError> {
        if event.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(StreamProgress::Done);
        }
        let chunk: JsonValue = serde_json::from_str(&event.data)
            .map_err(|error| malformed(PROVIDER, format!("a stream chunk is not JSON: {error}")))?;
        if chunk.get("error").is_some() {
            return Err(ModelError::Transport {
                provider: PROVIDER.into(),
                message: format!(
                    "the stream broke off: {}",
                    super::provider_message(&event.data)
                ),
            });
        }
        if let Some(usage) = chunk.get("usage").filter(|usage| usage.is_object()) {
            self.usage = Some(usage_from(usage));
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return Ok(StreamProgress::Continue);
        };
        self.saw_choice = true;
        if let Some(delta) = choice.get("delta") {
            if let Some(piece) = delta.get("content").and_then(JsonValue::as_str) {
                if !piece.is_empty() {
                    observer.on_text_delta(piece);
                    self.text.push_str(piece);
                    self.n_content_bytes += piece.len() as u64;
                }
            }
            if let Some(piece) = reasoning_text(delta) {
                self.reasoning.push_str(piece);
                self.n_content_bytes += piece.len() as u64;
            }
            for call in delta
                .get("tool_calls")
                .and_then(JsonValue::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                let index = call.get("index").and_then(JsonValue::as_u64).unwrap_or(0);
                let pending = self.calls.entry(index).or_default();
                if let Some(id) = call.get("id").and_then(JsonValue::as_str) {
                    pending.id = Some(id.to_string());
                }
                if let Some(name) = call.pointer("/function/name").and_then(JsonValue::as_str) {
                    pending.name.push_str(name);
                    self.n_content_bytes += name.len() as u64;
                }
                match call.pointer("/function/arguments") {
                    Some(JsonValue::String(piece)) => {
                        pending.arguments.push_str(piece);
                        self.n_content_bytes += piece.len() as u64;
                    }
                    Some(JsonValue::Object(arguments)) => {
                        pending.arguments = JsonValue::Object(arguments.clone()).to_string();
                        self.n_content_bytes += pending.arguments.len() as u64;
                    }
                    _ => {}
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(JsonValue::as_str) {
            self.finish_reason = Some(reason.to_string());
        }
        Ok(StreamProgress::Continue)
    }

    fn finish(self) -> Result<ModelResponse, ModelError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(ModelError::Transport {
                provider: PROVIDER.into(),
                message: "the stream ended before a finish_reason or [DONE]".into(),
            });
        }
        if !self.saw_choice {
            // An answer is at least a choice with a finish reason; taking
            // `choices: []` for an empty answer would end the Turn as if
            // the model had nothing to say.
            return Err(malformed(
                PROVIDER,
                "the stream ended without any choice (every chunk had `choices: []`)",
            ));
        }
        let mut content = Vec::new();
        if !self.reasoning.is_empty() {
            content.push(ContentPart::Reasoning {
                text: self.reasoning,
                provider_options: None,
            });
        }
        if !self.text.is_empty() {
            content.push(ContentPart::text(self.text));
        }
        for (index, call) in self.calls {
            if call.name.is_empty() {
                return Err(malformed(
                    PROVIDER,
                    format!("streamed tool call {index} has no name"),
                ));
            }
            let id = call_id(call.id.as_deref(), index as usize);
            content.push(tool_call_from_text(id, call.name, &call.arguments));
        }
        Ok(ModelResponse {
            content,
            finish_reason: finish_reason(self.finish_reason.as_deref()),
            usage: self.usage,
        })
    }

    fn content_bytes(&self) -> u64 {
        self.n_content_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ModelParams;
    use goondan_types::ToolResultOutput;

    #[test]
    fn each_tool_result_is_its_own_message() {
        let request = ModelRequest {
            model: "m".into(),
            messages: vec![
                ModelMessage::assistant(vec![
                    ContentPart::tool_call("a", "x__y", json!({"n": 1})),
                    ContentPart::tool_call("b", "x__z", json!({})),
                ]),
                ModelMessage::tool(vec![
                    ContentPart::tool_result(
                        "a",
                        "x__y",
                        ToolResultOutput::Json(json!({"ok": true})),
                    ),
                    ContentPart::tool_result("b", "x__z", ToolResultOutput::Text("done".into())),
                ]),
            ],
            tools: vec![],
            params: ModelParams::default(),
        };
        let wire = OpenAiWire {
            max_tokens_field: "max_tokens".into(),
            stream_usage: true,
        };
        let body = wire.encode(&request, false).unwrap();
        assert_eq!(
            body["messages"],
            json!([
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "x__y", "arguments": "{\"n\":1}"}},
                    {"id": "b", "type": "function", "function": {"name": "x__z", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "a", "content": "{\"ok\":true}"},
                {"role": "tool", "tool_call_id": "b", "content": "done"}
            ])
        );
    }
}
