//! OpenAI Responses (`POST {base}/responses`): what OpenAI recommends for
//! its own API and what its reasoning models need to keep their reasoning
//! between steps. The original's `openai` provider speaks it too.
//!
//! Mapping: the conversation is a list of input items. System prompts go
//! as `role: "system"` messages; each assistant tool call is its own
//! `function_call` item (arguments as a JSON string) and each tool result
//! a `function_call_output` item with the same `call_id`; reasoning the
//! API returned is sent back as its `reasoning` item (its id and
//! encrypted content, kept in the part's `providerOptions.openai`), since
//! requests are not stored on OpenAI's side (`store: false`). Reasoning
//! from another provider is left out.
//!
//! A stream forwards `response.output_text.delta` to the observer as it
//! comes, and takes the answer from the full response that
//! `response.completed` (or `response.incomplete`) carries, decoded like
//! a whole answer, so both paths agree by construction.

use super::{
    count, malformed, media, tool_call_from_text, tool_result_texts, Media, StreamAssembler,
    StreamProgress, Wire,
};
use crate::error::ModelError;
use crate::request::{FinishReason, ModelRequest, ModelResponse};
use crate::StreamObserver;
use goondan_types::sse::SseEvent;
use goondan_types::{ContentPart, JsonObject, JsonValue, ModelMessage, TokenUsage};
use serde_json::json;

const PROVIDER: &str = "openai";

/// The Responses wire.
pub(crate) struct OpenAiResponsesWire;

impl Wire for OpenAiResponsesWire {
    type Stream = ResponsesStream;

    fn provider(&self) -> &'static str {
        PROVIDER
    }

    fn url(&self, base_url: &str, _model: &str, _stream: bool) -> String {
        format!("{base_url}/responses")
    }

    fn encode(&self, request: &ModelRequest, stream: bool) -> Result<JsonObject, ModelError> {
        let mut input = Vec::new();
        for message in &request.messages {
            match message {
                ModelMessage::System { content, .. } => {
                    input.push(json!({"role": "system", "content": content}));
                }
                ModelMessage::User { content, .. } => {
                    let parts: Vec<JsonValue> =
                        content.to_parts().iter().filter_map(user_part).collect();
                    input.push(json!({"type": "message", "role": "user", "content": parts}));
                }
                ModelMessage::Assistant { content, .. } => {
                    for part in content.to_parts() {
                        match part {
                            ContentPart::Text { text, .. } if !text.is_empty() => {
                                input.push(json!({"role": "assistant", "content": text}));
                            }
                            ContentPart::ToolCall {
                                tool_call_id,
                                tool_name,
                                input: arguments,
                                ..
                            } => input.push(json!({
                                "type": "function_call",
                                "call_id": tool_call_id,
                                "name": tool_name,
                                "arguments": serde_json::to_string(&arguments).unwrap_or_default(),
                            })),
                            ContentPart::Reasoning {
                                text,
                                provider_options,
                            } => input.extend(reasoning_item(&text, provider_options.as_ref())),
                            _ => {}
                        }
                    }
                }
                ModelMessage::Tool { content, .. } => {
                    for (call_id, text) in tool_result_texts(content) {
                        input.push(json!({
                            "type": "function_call_output",
                            "call_id": call_id,
                            "output": text,
                        }));
                    }
                }
            }
        }
        let mut body = JsonObject::new();
        body.insert("model".into(), json!(request.model));
        body.insert("input".into(), JsonValue::Array(input));
        // Nothing is kept on OpenAI's side; reasoning travels back to it
        // encrypted instead.
        body.insert("store".into(), JsonValue::Bool(false));
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
        if !request.tools.is_empty() {
            body.insert(
                "tools".into(),
                request
                    .tools
                    .iter()
                    .map(|tool| {
                        json!({
                            "type": "function",
                            "name": tool.name,
                            "description": tool.description,
                            "parameters": tool.parameters,
                            "strict": false,
                        })
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
            body.insert("max_output_tokens".into(), json!(max_tokens));
        }
        if stream {
            body.insert("stream".into(), JsonValue::Bool(true));
        }
        Ok(body)
    }

    fn decode(&self, body: JsonValue) -> Result<ModelResponse, ModelError> {
        if body.get("status").and_then(JsonValue::as_str) == Some("failed") {
            let message = body
                .pointer("/error/message")
                .and_then(JsonValue::as_str)
                .unwrap_or("no reason given");
            return Err(ModelError::Transport {
                provider: PROVIDER.into(),
                message: format!("the response failed: {message}"),
            });
        }
        let output = body
            .get("output")
            .and_then(JsonValue::as_array)
            .ok_or_else(|| malformed(PROVIDER, "the answer has no output list"))?;
        let mut content = Vec::new();
        let mut called = false;
        for (index, item) in output.iter().enumerate() {
            match item.get("type").and_then(JsonValue::as_str) {
                Some("message") => {
                    for piece in item
                        .get("content")
                        .and_then(JsonValue::as_array)
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                    {
                        match piece.get("type").and_then(JsonValue::as_str) {
                            Some("output_text") => {
                                let text = piece
                                    .get("text")
                                    .and_then(JsonValue::as_str)
                                    .unwrap_or_default();
                                if !text.is_empty() {
                                    content.push(ContentPart::text(text));
                                }
                            }
                            Some("refusal") => {
                                let text = piece
                                    .get("refusal")
                                    .and_then(JsonValue::as_str)
                                    .unwrap_or_default();
                                content.push(ContentPart::text(text));
                            }
                            _ => {}
                        }
                    }
                }
                Some("function_call") => {
                    called = true;
                    let name = item
                        .get("name")
                        .and_then(JsonValue::as_str)
                        .filter(|name| !name.is_empty())
                        .ok_or_else(|| {
                            malformed(PROVIDER, format!("function call {index} has no name"))
                        })?;
                    let call_id =
                        item.get("call_id")
                            .and_then(JsonValue::as_str)
                            .ok_or_else(|| {
                                malformed(PROVIDER, format!("function call {index} has no call_id"))
                            })?;
                    let arguments = item
                        .get("arguments")
                        .and_then(JsonValue::as_str)
                        .unwrap_or_default();
                    content.push(tool_call_from_text(
                        call_id.to_string(),
                        name.to_string(),
                        arguments,
                    ));
                }
                Some("reasoning") => content.push(reasoning_part(item)),
                // Built-in tools (web search, ...) are never offered, so
                // their items cannot appear; anything new is skipped.
                _ => {}
            }
        }
        let finish_reason = if called {
            FinishReason::ToolCalls
        } else {
            match body.get("status").and_then(JsonValue::as_str) {
                Some("completed") => FinishReason::Stop,
                Some("incomplete") => {
                    match body
                        .pointer("/incomplete_details/reason")
                        .and_then(JsonValue::as_str)
                    {
                        Some("max_output_tokens") => FinishReason::Length,
                        Some("content_filter") => FinishReason::ContentFilter,
                        _ => FinishReason::Other,
                    }
                }
                _ => FinishReason::Other,
            }
        };
        Ok(ModelResponse {
            content,
            finish_reason,
            usage: body
                .get("usage")
                .filter(|usage| usage.is_object())
                .map(usage_from),
        })
    }

    fn stream(&self) -> ResponsesStream {
        ResponsesStream::default()
    }
}

/// A `reasoning` output item as a reasoning part: the summary's text, and
/// what sending it back takes (its id and encrypted content).
fn reasoning_part(item: &JsonValue) -> ContentPart {
    let text: Vec<&str> = item
        .get("summary")
        .and_then(JsonValue::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|summary| summary.get("text").and_then(JsonValue::as_str))
        .collect();
    let mut options = JsonObject::new();
    if let Some(id) = item.get("id").and_then(JsonValue::as_str) {
        options.insert("itemId".into(), json!(id));
    }
    if let Some(encrypted) = item.get("encrypted_content").and_then(JsonValue::as_str) {
        options.insert("reasoningEncryptedContent".into(), json!(encrypted));
    }
    ContentPart::Reasoning {
        text: text.join("\n\n"),
        provider_options: (!options.is_empty()).then(|| json!({PROVIDER: options})),
    }
}

/// A reasoning part as the `reasoning` input item it came from; `None`
/// for reasoning this API did not produce.
fn reasoning_item(text: &str, provider_options: Option<&JsonValue>) -> Option<JsonValue> {
    let options = provider_options?.get(PROVIDER)?;
    let id = options.get("itemId").and_then(JsonValue::as_str)?;
    let summary: Vec<JsonValue> = if text.is_empty() {
        Vec::new()
    } else {
        vec![json!({"type": "summary_text", "text": text})]
    };
    let mut item = json!({"type": "reasoning", "id": id, "summary": summary});
    if let Some(encrypted) = options
        .get("reasoningEncryptedContent")
        .and_then(JsonValue::as_str)
    {
        item["encrypted_content"] = json!(encrypted);
    }
    Some(item)
}

fn user_part(part: &ContentPart) -> Option<JsonValue> {
    let data_url = |media: Media| match media {
        Media::Url(url) => url,
        Media::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
    };
    match part {
        ContentPart::Text { text, .. } => Some(json!({"type": "input_text", "text": text})),
        ContentPart::Image {
            image, media_type, ..
        } => Some(json!({
            "type": "input_image",
            "image_url": data_url(media(image, media_type.as_deref())?),
        })),
        ContentPart::File {
            data,
            media_type,
            filename,
            ..
        } => {
            if media_type.starts_with("image/") {
                return Some(json!({
                    "type": "input_image",
                    "image_url": data_url(media(data, Some(media_type))?),
                }));
            }
            Some(json!({
                "type": "input_file",
                "filename": filename.clone().unwrap_or_else(|| "file".into()),
                "file_data": data_url(media(data, Some(media_type))?),
            }))
        }
        _ => None,
    }
}

fn usage_from(usage: &JsonValue) -> TokenUsage {
    let prompt_tokens = count(usage, "input_tokens");
    let completion_tokens = count(usage, "output_tokens");
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

/// Assembles a streamed Responses answer.
#[derive(Default)]
pub(crate) struct ResponsesStream {
    /// The full response of `response.completed` / `response.incomplete`.
    response: Option<JsonValue>,
    n_content_bytes: u64,
}

impl StreamAssembler for ResponsesStream {
    fn on_event(
        &mut self,
        event: SseEvent,
        observer: &dyn StreamObserver,
    ) -> Result<StreamProgress, ModelError> {
        if event.data.trim() == "[DONE]" {
            return Ok(StreamProgress::Done);
        }
        let data: JsonValue = serde_json::from_str(&event.data)
            .map_err(|error| malformed(PROVIDER, format!("a stream event is not JSON: {error}")))?;
        let kind = data
            .get("type")
            .and_then(JsonValue::as_str)
            .unwrap_or(event.event.as_str());
        match kind {
            "response.output_text.delta" => {
                if let Some(delta) = data.get("delta").and_then(JsonValue::as_str) {
                    observer.on_text_delta(delta);
                    self.n_content_bytes += delta.len() as u64;
                }
            }
            "response.function_call_arguments.delta" | "response.reasoning_summary_text.delta" => {
                if let Some(delta) = data.get("delta").and_then(JsonValue::as_str) {
                    self.n_content_bytes += delta.len() as u64;
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                let response = data
                    .get("response")
                    .cloned()
                    .ok_or_else(|| malformed(PROVIDER, format!("`{kind}` carries no response")))?;
                self.response = Some(response);
                return Ok(StreamProgress::Done);
            }
            "error" => {
                let message = data
                    .get("message")
                    .and_then(JsonValue::as_str)
                    .unwrap_or("no reason given");
                return Err(ModelError::Transport {
                    provider: PROVIDER.into(),
                    message: format!("the stream broke off: {message}"),
                });
            }
            _ => {}
        }
        Ok(StreamProgress::Continue)
    }

    fn finish(self) -> Result<ModelResponse, ModelError> {
        let response = self.response.ok_or_else(|| ModelError::Transport {
            provider: PROVIDER.into(),
            message: "the stream ended before response.completed".into(),
        })?;
        OpenAiResponsesWire.decode(response)
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
    fn calls_results_and_reasoning_become_input_items() {
        let reasoning = ContentPart::Reasoning {
            text: "think".into(),
            provider_options: Some(
                json!({"openai": {"itemId": "rs_1", "reasoningEncryptedContent": "enc"}}),
            ),
        };
        let foreign = ContentPart::Reasoning {
            text: "claude thought".into(),
            provider_options: None,
        };
        let request = ModelRequest {
            model: "m".into(),
            messages: vec![
                ModelMessage::system("be brief"),
                ModelMessage::user("hi"),
                ModelMessage::assistant(vec![
                    reasoning,
                    foreign,
                    ContentPart::text("checking"),
                    ContentPart::tool_call("call_a", "x__y", json!({"n": 1})),
                ]),
                ModelMessage::tool(vec![ContentPart::tool_result(
                    "call_a",
                    "x__y",
                    ToolResultOutput::Json(json!({"ok": true})),
                )]),
            ],
            tools: vec![],
            params: ModelParams {
                max_tokens: Some(100),
                ..ModelParams::default()
            },
        };
        let body = OpenAiResponsesWire.encode(&request, true).unwrap();
        assert_eq!(
            body["input"],
            json!([
                {"role": "system", "content": "be brief"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}], "encrypted_content": "enc"},
                {"role": "assistant", "content": "checking"},
                {"type": "function_call", "call_id": "call_a", "name": "x__y", "arguments": "{\"n\":1}"},
                {"type": "function_call_output", "call_id": "call_a", "output": "{\"ok\":true}"}
            ])
        );
        assert_eq!(body["max_output_tokens"], json!(100));
        assert_eq!(body["store"], json!(false));
        assert_eq!(body["stream"], json!(true));
    }

    #[test]
    fn an_answer_with_reasoning_text_and_a_call_decodes_in_order() {
        let response = OpenAiResponsesWire
            .decode(json!({
                "id": "resp_1",
                "status": "completed",
                "output": [
                    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}], "encrypted_content": "enc"},
                    {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
                    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "bash__exec", "arguments": "{\"cmd\":\"ls\"}", "status": "completed"}
                ],
                "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
            }))
            .unwrap();
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(response.usage.unwrap().total_tokens, 15);
        assert!(matches!(
            &response.content[0],
            ContentPart::Reasoning { text, provider_options: Some(options) }
                if text == "plan" && options["openai"]["itemId"] == "rs_1"
        ));
        assert_eq!(response.content[1], ContentPart::text("Let me look."));
        assert_eq!(
            response.content[2],
            ContentPart::tool_call("call_1", "bash__exec", json!({"cmd": "ls"}))
        );

        let cut = OpenAiResponsesWire
            .decode(json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []}))
            .unwrap();
        assert_eq!(cut.finish_reason, FinishReason::Length);
        let failed = OpenAiResponsesWire
            .decode(json!({"status": "failed", "error": {"message": "overloaded"}, "output": []}))
            .unwrap_err();
        assert!(failed.to_string().contains("overloaded"), "{failed}");
    }
}
