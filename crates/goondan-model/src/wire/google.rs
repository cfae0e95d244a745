//! Google Gemini `generateContent` (`POST {base}/models/{model}:generateContent`,
//! streamed as `:streamGenerateContent?alt=sse`).
//!
//! Mapping: system messages become `systemInstruction`; the assistant is
//! `role: "model"`; tool calls are `functionCall` parts and tool results
//! `functionResponse` parts in a user turn, merged with neighbours of the
//! same role. Gemini gives calls no ids, so this module makes them; a
//! `thoughtSignature` is kept in `providerOptions.google` and sent back.
//! Tool schemas are cut down to the OpenAPI subset Gemini accepts.

use super::{
    count, malformed, media, required_str, tool_call_from_text, Media, StreamAssembler,
    StreamProgress, Wire,
};
use crate::error::ModelError;
use crate::request::{FinishReason, ModelRequest, ModelResponse};
use crate::StreamObserver;
use goondan_types::sse::SseEvent;
use goondan_types::{ContentPart, JsonObject, JsonValue, ModelMessage, TokenUsage};
use serde_json::json;

const PROVIDER: &str = "google";

/// The default base URL, version path included.
pub(crate) const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";

/// The Gemini wire.
pub(crate) struct GoogleWire;

impl Wire for GoogleWire {
    type Stream = GoogleStream;

    fn provider(&self) -> &'static str {
        PROVIDER
    }

    fn url(&self, base_url: &str, model: &str, stream: bool) -> String {
        let model = model.strip_prefix("models/").unwrap_or(model);
        if stream {
            format!("{base_url}/models/{model}:streamGenerateContent?alt=sse")
        } else {
            format!("{base_url}/models/{model}:generateContent")
        }
    }

    fn encode(&self, request: &ModelRequest, _stream: bool) -> Result<JsonObject, ModelError> {
        let mut system = Vec::new();
        let mut contents: Vec<(&'static str, Vec<JsonValue>)> = Vec::new();
        for message in &request.messages {
            let (role, parts): (&'static str, Vec<JsonValue>) = match message {
                ModelMessage::System { content, .. } => {
                    system.push(json!({"text": content}));
                    continue;
                }
                ModelMessage::User { content, .. } => (
                    "user",
                    content.to_parts().iter().filter_map(user_part).collect(),
                ),
                ModelMessage::Assistant { content, .. } => (
                    "model",
                    content.to_parts().iter().filter_map(model_part).collect(),
                ),
                ModelMessage::Tool { content, .. } => {
                    ("user", content.iter().filter_map(user_part).collect())
                }
            };
            if parts.is_empty() {
                continue;
            }
            match contents.last_mut() {
                Some((last_role, last_parts)) if *last_role == role => last_parts.extend(parts),
                _ => contents.push((role, parts)),
            }
        }
        let mut body = JsonObject::new();
        if !system.is_empty() {
            body.insert("systemInstruction".into(), json!({"parts": system}));
        }
        body.insert(
            "contents".into(),
            contents
                .into_iter()
                .map(|(role, parts)| json!({"role": role, "parts": parts}))
                .collect(),
        );
        if !request.tools.is_empty() {
            let declarations: Vec<JsonValue> = request
                .tools
                .iter()
                .map(|tool| {
                    let mut declaration =
                        json!({"name": tool.name, "description": tool.description});
                    let has_properties = tool
                        .parameters
                        .get("properties")
                        .and_then(JsonValue::as_object)
                        .is_some_and(|properties| !properties.is_empty());
                    // Gemini rejects an object schema without properties, so
                    // a tool without arguments declares no parameters at all.
                    if has_properties {
                        declaration["parameters"] =
                            gemini_schema(&JsonValue::Object(tool.parameters.clone()));
                    }
                    declaration
                })
                .collect();
            body.insert(
                "tools".into(),
                json!([{"functionDeclarations": declarations}]),
            );
        }
        let mut generation = JsonObject::new();
        if let Some(temperature) = request.params.temperature {
            generation.insert("temperature".into(), json!(temperature));
        }
        if let Some(top_p) = request.params.top_p {
            generation.insert("topP".into(), json!(top_p));
        }
        if let Some(max_tokens) = request.params.max_tokens {
            generation.insert("maxOutputTokens".into(), json!(max_tokens));
        }
        if !generation.is_empty() {
            body.insert("generationConfig".into(), JsonValue::Object(generation));
        }
        Ok(body)
    }

    fn decode(&self, body: JsonValue) -> Result<ModelResponse, ModelError> {
        let mut stream = GoogleStream::default();
        stream.take(&body, None)?;
        if stream.finish_reason.is_none() && !stream.saw_candidate {
            return Err(malformed(
                PROVIDER,
                "the answer has no candidates and no blockReason",
            ));
        }
        stream.build()
    }

    fn stream(&self) -> GoogleStream {
        GoogleStream::default()
    }
}

fn signature_options(signature: Option<&str>) -> Option<JsonValue> {
    signature.map(|signature| json!({PROVIDER: {"thoughtSignature": signature}}))
}

fn stored_signature(provider_options: &Option<JsonValue>) -> Option<&str> {
    provider_options
        .as_ref()?
        .pointer("/google/thoughtSignature")?
        .as_str()
}

fn inline(media: Media) -> JsonValue {
    match media {
        Media::Url(url) => json!({"fileData": {"mimeType": guess_mime(&url), "fileUri": url}}),
        Media::Base64 { media_type, data } => {
            json!({"inlineData": {"mimeType": media_type, "data": data}})
        }
    }
}

fn guess_mime(url: &str) -> &'static str {
    let lower = url.to_ascii_lowercase();
    match lower.rsplit('.').next() {
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("pdf") => "application/pdf",
        _ => "application/octet-stream",
    }
}

fn user_part(part: &ContentPart) -> Option<JsonValue> {
    match part {
        ContentPart::Text { text, .. } if !text.is_empty() => Some(json!({"text": text})),
        ContentPart::Image {
            image, media_type, ..
        } => Some(inline(media(image, media_type.as_deref())?)),
        ContentPart::File {
            data, media_type, ..
        } => Some(inline(media(data, Some(media_type))?)),
        ContentPart::ToolResult {
            tool_name, output, ..
        } => Some(json!({"functionResponse": {
            "name": tool_name,
            "response": {"name": tool_name, "content": output.to_json()},
        }})),
        _ => None,
    }
}

fn model_part(part: &ContentPart) -> Option<JsonValue> {
    match part {
        ContentPart::Text {
            text,
            provider_options,
        } if !text.is_empty() => {
            let mut part = json!({"text": text});
            if let Some(signature) = stored_signature(provider_options) {
                part["thoughtSignature"] = json!(signature);
            }
            Some(part)
        }
        ContentPart::Reasoning {
            text,
            provider_options,
        } => {
            // Thoughts are only worth sending back with their signature.
            let signature = stored_signature(provider_options)?;
            Some(json!({"text": text, "thought": true, "thoughtSignature": signature}))
        }
        ContentPart::ToolCall {
            tool_name,
            input,
            provider_options,
            ..
        } => {
            let mut part = json!({"functionCall": {"name": tool_name, "args": input}});
            if let Some(signature) = stored_signature(provider_options) {
                part["thoughtSignature"] = json!(signature);
            }
            Some(part)
        }
        _ => None,
    }
}

/// The JSON Schema keywords Gemini's OpenAPI-subset `Schema` accepts.
const SCHEMA_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];

/// Cuts a JSON Schema down to what Gemini accepts: unknown keywords
/// (`$schema`, `additionalProperties`, ...) are dropped, `const` becomes a
/// one-value `enum`, and `type: [T, "null"]` becomes `T` plus `nullable`.
pub(crate) fn gemini_schema(schema: &JsonValue) -> JsonValue {
    let Some(object) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = JsonObject::new();
    for (key, value) in object {
        match key.as_str() {
            "properties" => {
                let properties = value
                    .as_object()
                    .map(|properties| {
                        properties
                            .iter()
                            .map(|(name, property)| (name.clone(), gemini_schema(property)))
                            .collect::<JsonObject>()
                    })
                    .unwrap_or_default();
                out.insert(key.clone(), JsonValue::Object(properties));
            }
            "items" => {
                out.insert(key.clone(), gemini_schema(value));
            }
            "anyOf" => {
                let variants = value
                    .as_array()
                    .map(|variants| variants.iter().map(gemini_schema).collect())
                    .unwrap_or_default();
                out.insert(key.clone(), JsonValue::Array(variants));
            }
            "type" => {
                if let Some(types) = value.as_array() {
                    let concrete: Vec<&JsonValue> = types
                        .iter()
                        .filter(|kind| kind.as_str() != Some("null"))
                        .collect();
                    if concrete.len() < types.len() {
                        out.insert("nullable".into(), JsonValue::Bool(true));
                    }
                    if let Some(first) = concrete.first() {
                        out.insert(key.clone(), (*first).clone());
                    }
                } else {
                    out.insert(key.clone(), value.clone());
                }
            }
            "const" => {
                out.insert("enum".into(), json!([value]));
            }
            _ if SCHEMA_KEYWORDS.contains(&key.as_str()) => {
                out.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    JsonValue::Object(out)
}

fn finish_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("STOP") => FinishReason::Stop,
        Some("MAX_TOKENS") => FinishReason::Length,
        Some(
            "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY",
        ) => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

/// Assembles a Gemini answer from one whole body or from stream chunks
/// (each chunk is a whole `GenerateContentResponse` holding the new parts).
#[derive(Default)]
pub(crate) struct GoogleStream {
    content: Vec<ContentPart>,
    finish_reason: Option<FinishReason>,
    usage: Option<TokenUsage>,
    saw_candidate: bool,
    n_calls: usize,
    n_content_bytes: u64,
}

impl GoogleStream {
    fn take(
        &mut self,
        chunk: &JsonValue,
        observer: Option<&dyn StreamObserver>,
    ) -> Result<(), ModelError> {
        if let Some(usage) = chunk.get("usageMetadata") {
            let prompt_tokens = count(usage, "promptTokenCount");
            let completion_tokens =
                count(usage, "candidatesTokenCount") + count(usage, "thoughtsTokenCount");
            let total_tokens = match count(usage, "totalTokenCount") {
                0 => prompt_tokens + completion_tokens,
                total => total,
            };
            self.usage = Some(TokenUsage {
                prompt_tokens,
                completion_tokens,
                total_tokens,
            });
        }
        let Some(candidate) = chunk.pointer("/candidates/0") else {
            if chunk.pointer("/promptFeedback/blockReason").is_some() {
                self.finish_reason = Some(FinishReason::ContentFilter);
            }
            return Ok(());
        };
        self.saw_candidate = true;
        let parts = candidate
            .pointer("/content/parts")
            .and_then(JsonValue::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for part in parts {
            let signature = part.get("thoughtSignature").and_then(JsonValue::as_str);
            if let Some(call) = part.get("functionCall") {
                let name = required_str(PROVIDER, call, "name", "a functionCall")?;
                let id = match call.get("id").and_then(JsonValue::as_str) {
                    Some(id) if !id.is_empty() => id.to_string(),
                    _ => format!(
                        "call_{}_{}",
                        goondan_types::trace::random_hex(6),
                        self.n_calls
                    ),
                };
                self.n_calls += 1;
                let part = match call.get("args") {
                    None | Some(JsonValue::Null) => ContentPart::ToolCall {
                        tool_call_id: id,
                        tool_name: name.to_string(),
                        input: json!({}),
                        provider_options: signature_options(signature),
                    },
                    Some(args @ JsonValue::Object(_)) => {
                        self.n_content_bytes += args.to_string().len() as u64;
                        ContentPart::ToolCall {
                            tool_call_id: id,
                            tool_name: name.to_string(),
                            input: args.clone(),
                            provider_options: signature_options(signature),
                        }
                    }
                    // Args that are not an object are marked for the runtime
                    // to refuse; the signature stays beside the mark, since
                    // Gemini wants it back with every call it made.
                    Some(other) => {
                        let text = other.to_string();
                        self.n_content_bytes += text.len() as u64;
                        let mut part = tool_call_from_text(id, name.to_string(), &text);
                        if let (
                            ContentPart::ToolCall {
                                provider_options: Some(JsonValue::Object(options)),
                                ..
                            },
                            Some(JsonValue::Object(signature)),
                        ) = (&mut part, signature_options(signature))
                        {
                            options.extend(signature);
                        }
                        part
                    }
                };
                self.content.push(part);
                continue;
            }
            let Some(text) = part.get("text").and_then(JsonValue::as_str) else {
                continue;
            };
            let is_thought = part.get("thought").and_then(JsonValue::as_bool) == Some(true);
            self.n_content_bytes += text.len() as u64;
            // Streamed text arrives in many parts; consecutive pieces of one
            // kind are joined so the stored message has one part per run.
            match (self.content.last_mut(), is_thought) {
                (
                    Some(ContentPart::Reasoning {
                        text: existing,
                        provider_options,
                    }),
                    true,
                ) => {
                    existing.push_str(text);
                    if signature.is_some() {
                        *provider_options = signature_options(signature);
                    }
                }
                (
                    Some(ContentPart::Text {
                        text: existing,
                        provider_options,
                    }),
                    false,
                ) => {
                    existing.push_str(text);
                    if signature.is_some() {
                        *provider_options = signature_options(signature);
                    }
                }
                (_, true) => self.content.push(ContentPart::Reasoning {
                    text: text.to_string(),
                    provider_options: signature_options(signature),
                }),
                (_, false) => self.content.push(ContentPart::Text {
                    text: text.to_string(),
                    provider_options: signature_options(signature),
                }),
            }
            if !is_thought && !text.is_empty() {
                if let Some(observer) = observer {
                    observer.on_text_delta(text);
                }
            }
        }
        if let Some(reason) = candidate.get("finishReason").and_then(JsonValue::as_str) {
            self.finish_reason = Some(finish_reason(Some(reason)));
        }
        Ok(())
    }

    fn build(self) -> Result<ModelResponse, ModelError> {
        Ok(ModelResponse {
            content: self.content,
            finish_reason: self.finish_reason.unwrap_or(FinishReason::Other),
            usage: self.usage,
        })
    }
}

impl StreamAssembler for GoogleStream {
    fn on_event(
        &mut self,
        event: SseEvent,
        observer: &dyn StreamObserver,
    ) -> Result<StreamProgress, ModelError> {
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
        self.take(&chunk, Some(observer))?;
        Ok(StreamProgress::Continue)
    }

    fn finish(self) -> Result<ModelResponse, ModelError> {
        if !self.saw_candidate && self.finish_reason.is_none() {
            // Chunks of `candidates: []` carry nothing; an answer that never
            // had a candidate nor a blockReason is not an empty answer.
            return Err(malformed(
                PROVIDER,
                "the stream ended without any candidate or blockReason",
            ));
        }
        if self.finish_reason.is_none() {
            return Err(ModelError::Transport {
                provider: PROVIDER.into(),
                message: "the stream ended before a finishReason".into(),
            });
        }
        self.build()
    }

    fn content_bytes(&self) -> u64 {
        self.n_content_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_cut_to_the_gemini_subset() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "mode": {"const": "fast"},
                "limit": {"type": ["integer", "null"], "minimum": 1},
                "tags": {"type": "array", "items": {"type": "string", "additionalProperties": false}}
            },
            "required": ["mode"]
        });
        assert_eq!(
            gemini_schema(&schema),
            json!({
                "type": "object",
                "properties": {
                    "mode": {"enum": ["fast"]},
                    "limit": {"nullable": true, "type": "integer", "minimum": 1},
                    "tags": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["mode"]
            })
        );
    }

    #[test]
    fn blocked_prompt_is_a_content_filter_answer() {
        let answer = GoogleWire
            .decode(json!({"promptFeedback": {"blockReason": "SAFETY"}}))
            .unwrap();
        assert_eq!(answer.finish_reason, FinishReason::ContentFilter);
        assert!(GoogleWire.decode(json!({})).is_err());
    }
}
