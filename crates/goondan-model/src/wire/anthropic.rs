//! The Anthropic Messages API (`POST {base}/messages`).
//!
//! Mapping: system messages go to the top-level `system` field; tool
//! results travel as `tool_result` blocks inside a user message;
//! consecutive messages of one role are merged because the API wants
//! user and assistant to alternate; reasoning round-trips as `thinking`
//! blocks with their signature kept in `providerOptions.anthropic`.

use super::{
    count, malformed, media, required_str, tool_call_from_text, tool_output_text, Media,
    StreamAssembler, StreamProgress, Wire,
};
use crate::error::ModelError;
use crate::request::{FinishReason, ModelRequest, ModelResponse};
use crate::StreamObserver;
use goondan_types::sse::SseEvent;
use goondan_types::{
    ContentPart, JsonObject, JsonValue, ModelMessage, TokenUsage, ToolResultOutput,
};
use serde_json::json;

const PROVIDER: &str = "anthropic";

/// More content blocks than any answer has.
const MAX_BLOCKS: usize = 4096;

/// The default base URL, version path included.
pub(crate) const DEFAULT_BASE_URL: &str = "https://api.anthropic.com/v1";
/// The `anthropic-version` header sent unless `options.anthropicVersion`.
pub(crate) const DEFAULT_VERSION: &str = "2023-06-01";
/// `max_tokens` is required by this API; used when the request has none.
pub(crate) const DEFAULT_MAX_TOKENS: u64 = 4096;

/// The Messages wire.
pub(crate) struct AnthropicWire {
    pub(crate) default_max_tokens: u64,
}

impl Wire for AnthropicWire {
    type Stream = AnthropicStream;

    fn provider(&self) -> &'static str {
        PROVIDER
    }

    fn url(&self, base_url: &str, _model: &str, _stream: bool) -> String {
        format!("{base_url}/messages")
    }

    fn encode(&self, request: &ModelRequest, stream: bool) -> Result<JsonObject, ModelError> {
        let mut system = Vec::new();
        let mut messages: Vec<(&'static str, Vec<JsonValue>)> = Vec::new();
        for message in &request.messages {
            let parts_to_blocks =
                |parts: &[ContentPart], to_block: fn(&ContentPart) -> Option<JsonValue>| {
                    parts
                        .iter()
                        .filter_map(|part| {
                            let mut block = to_block(part)?;
                            if let Some(cache) = cache_control(part_options(part)) {
                                block["cache_control"] = cache;
                            }
                            Some(block)
                        })
                        .collect::<Vec<_>>()
                };
            let (role, mut blocks, message_options) = match message {
                ModelMessage::System {
                    content,
                    provider_options,
                } => {
                    let mut block = json!({"type": "text", "text": content});
                    if let Some(cache) = cache_control(provider_options) {
                        block["cache_control"] = cache;
                    }
                    system.push(block);
                    continue;
                }
                ModelMessage::User {
                    content,
                    provider_options,
                } => (
                    "user",
                    parts_to_blocks(&content.to_parts(), user_block),
                    provider_options,
                ),
                ModelMessage::Assistant {
                    content,
                    provider_options,
                } => (
                    "assistant",
                    parts_to_blocks(&content.to_parts(), assistant_block),
                    provider_options,
                ),
                ModelMessage::Tool {
                    content,
                    provider_options,
                } => (
                    "user",
                    parts_to_blocks(content, user_block),
                    provider_options,
                ),
            };
            // A cache breakpoint on a whole message marks its last block, as
            // the AI SDK does.
            if let (Some(cache), Some(last)) = (cache_control(message_options), blocks.last_mut()) {
                last["cache_control"] = cache;
            }
            push_merged(&mut messages, role, std::mem::take(&mut blocks));
        }
        let mut body = JsonObject::new();
        body.insert("model".into(), json!(request.model));
        body.insert(
            "max_tokens".into(),
            json!(request.params.max_tokens.unwrap_or(self.default_max_tokens)),
        );
        if !system.is_empty() {
            body.insert("system".into(), JsonValue::Array(system));
        }
        body.insert(
            "messages".into(),
            messages
                .into_iter()
                .map(|(role, content)| json!({"role": role, "content": content}))
                .collect(),
        );
        if !request.tools.is_empty() {
            body.insert(
                "tools".into(),
                request
                    .tools
                    .iter()
                    .map(|tool| {
                        let mut schema = tool.parameters.clone();
                        schema
                            .entry("type")
                            .or_insert_with(|| JsonValue::String("object".into()));
                        json!({"name": tool.name, "description": tool.description, "input_schema": schema})
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
        if stream {
            body.insert("stream".into(), JsonValue::Bool(true));
        }
        Ok(body)
    }

    fn decode(&self, body: JsonValue) -> Result<ModelResponse, ModelError> {
        let blocks = body
            .get("content")
            .and_then(JsonValue::as_array)
            .ok_or_else(|| malformed(PROVIDER, "the answer has no `content` array"))?;
        if blocks.is_empty()
            && body
                .get("stop_reason")
                .and_then(JsonValue::as_str)
                .is_none()
        {
            return Err(malformed(
                PROVIDER,
                "the answer has no content block and no stop_reason",
            ));
        }
        let mut content = Vec::new();
        for block in blocks {
            match block.get("type").and_then(JsonValue::as_str) {
                Some("text") => content.push(ContentPart::text(required_str(
                    PROVIDER,
                    block,
                    "text",
                    "a text block",
                )?)),
                Some("tool_use") => {
                    let id = required_str(PROVIDER, block, "id", "a tool_use block")?;
                    let name = required_str(PROVIDER, block, "name", "a tool_use block")?;
                    content.push(match block.get("input") {
                        None | Some(JsonValue::Null) => ContentPart::tool_call(id, name, json!({})),
                        Some(input @ JsonValue::Object(_)) => {
                            ContentPart::tool_call(id, name, input.clone())
                        }
                        Some(other) => tool_call_from_text(
                            id.to_string(),
                            name.to_string(),
                            &other.to_string(),
                        ),
                    });
                }
                Some("thinking") => content.push(reasoning(
                    block
                        .get("thinking")
                        .and_then(JsonValue::as_str)
                        .unwrap_or_default(),
                    "signature",
                    block.get("signature").and_then(JsonValue::as_str),
                )),
                Some("redacted_thinking") => content.push(reasoning(
                    "",
                    "redactedData",
                    block.get("data").and_then(JsonValue::as_str),
                )),
                // Server-side tool blocks and future block types carry nothing
                // the runtime stores.
                _ => {}
            }
        }
        Ok(ModelResponse {
            content,
            finish_reason: finish_reason(body.get("stop_reason").and_then(JsonValue::as_str)),
            usage: body.get("usage").map(|usage| {
                usage_from(
                    count(usage, "input_tokens")
                        + count(usage, "cache_creation_input_tokens")
                        + count(usage, "cache_read_input_tokens"),
                    count(usage, "output_tokens"),
                )
            }),
        })
    }

    fn stream(&self) -> AnthropicStream {
        AnthropicStream::default()
    }
}

/// `providerOptions.anthropic.cacheControl` (AI SDK spelling) or
/// `cache_control`, as the API's `cache_control` value.
fn cache_control(provider_options: &Option<JsonValue>) -> Option<JsonValue> {
    let options = provider_options.as_ref()?.get(PROVIDER)?;
    options
        .get("cacheControl")
        .or_else(|| options.get("cache_control"))
        .cloned()
}

fn part_options(part: &ContentPart) -> &Option<JsonValue> {
    match part {
        ContentPart::Text {
            provider_options, ..
        }
        | ContentPart::Image {
            provider_options, ..
        }
        | ContentPart::File {
            provider_options, ..
        }
        | ContentPart::Reasoning {
            provider_options, ..
        }
        | ContentPart::ToolCall {
            provider_options, ..
        }
        | ContentPart::ToolResult {
            provider_options, ..
        } => provider_options,
    }
}

fn push_merged(
    messages: &mut Vec<(&'static str, Vec<JsonValue>)>,
    role: &'static str,
    blocks: Vec<JsonValue>,
) {
    if blocks.is_empty() {
        return;
    }
    match messages.last_mut() {
        Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
        _ => messages.push((role, blocks)),
    }
}

fn media_source(media: Media) -> JsonValue {
    match media {
        Media::Url(url) => json!({"type": "url", "url": url}),
        Media::Base64 { media_type, data } => {
            json!({"type": "base64", "media_type": media_type, "data": data})
        }
    }
}

fn user_block(part: &ContentPart) -> Option<JsonValue> {
    match part {
        ContentPart::Text { text, .. } if !text.is_empty() => {
            Some(json!({"type": "text", "text": text}))
        }
        ContentPart::Image {
            image, media_type, ..
        } => Some(
            json!({"type": "image", "source": media_source(media(image, media_type.as_deref())?)}),
        ),
        ContentPart::File {
            data, media_type, ..
        } => {
            let kind = if media_type.starts_with("image/") {
                "image"
            } else {
                "document"
            };
            Some(json!({"type": kind, "source": media_source(media(data, Some(media_type))?)}))
        }
        ContentPart::ToolResult {
            tool_call_id,
            output,
            ..
        } => {
            let mut block = json!({
                "type": "tool_result",
                "tool_use_id": tool_call_id,
                "content": tool_result_content(output),
            });
            if output.is_error() {
                block["is_error"] = JsonValue::Bool(true);
            }
            Some(block)
        }
        _ => None,
    }
}

fn tool_result_content(output: &ToolResultOutput) -> JsonValue {
    let ToolResultOutput::Content(parts) = output else {
        return JsonValue::String(tool_output_text(output));
    };
    parts
        .iter()
        .map(|part| {
            let kind = part.get("type").and_then(JsonValue::as_str);
            let text = part.get("text").and_then(JsonValue::as_str);
            let data = part.get("data").and_then(JsonValue::as_str);
            let media_type = part.get("mediaType").and_then(JsonValue::as_str);
            match (kind, text, data, media_type) {
                (Some("text"), Some(text), _, _) => json!({"type": "text", "text": text}),
                (_, _, Some(data), Some(media_type)) if media_type.starts_with("image/") => json!({
                    "type": "image",
                    "source": {"type": "base64", "media_type": media_type, "data": data}
                }),
                _ => json!({"type": "text", "text": part.to_string()}),
            }
        })
        .collect()
}

fn assistant_block(part: &ContentPart) -> Option<JsonValue> {
    match part {
        ContentPart::Text { text, .. } if !text.is_empty() => {
            Some(json!({"type": "text", "text": text}))
        }
        ContentPart::ToolCall {
            tool_call_id,
            tool_name,
            input,
            ..
        } => {
            let input = match input {
                JsonValue::Object(_) => input.clone(),
                JsonValue::Null => json!({}),
                other => json!({"value": other}),
            };
            Some(json!({"type": "tool_use", "id": tool_call_id, "name": tool_name, "input": input}))
        }
        ContentPart::Reasoning {
            text,
            provider_options,
        } => {
            // Thinking blocks are only accepted back with the signature the
            // API gave them; reasoning from elsewhere is left out.
            let options = provider_options.as_ref()?.get(PROVIDER)?;
            if let Some(signature) = options.get("signature").and_then(JsonValue::as_str) {
                return Some(json!({"type": "thinking", "thinking": text, "signature": signature}));
            }
            let data = options.get("redactedData").and_then(JsonValue::as_str)?;
            Some(json!({"type": "redacted_thinking", "data": data}))
        }
        _ => None,
    }
}

fn reasoning(text: &str, key: &str, value: Option<&str>) -> ContentPart {
    ContentPart::Reasoning {
        text: text.to_string(),
        provider_options: value.map(|value| json!({PROVIDER: {key: value}})),
    }
}

fn finish_reason(stop_reason: Option<&str>) -> FinishReason {
    match stop_reason {
        Some("end_turn" | "stop_sequence" | "pause_turn") => FinishReason::Stop,
        Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
        Some("tool_use") => FinishReason::ToolCalls,
        Some("refusal") => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

fn usage_from(prompt_tokens: u64, completion_tokens: u64) -> TokenUsage {
    TokenUsage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
    }
}

enum Block {
    Text(String),
    Tool {
        id: String,
        name: String,
        arguments: String,
    },
    Thinking {
        text: String,
        signature: Option<String>,
    },
    Redacted(String),
    Ignored,
}

/// Assembles a streamed Messages answer.
#[derive(Default)]
pub(crate) struct AnthropicStream {
    blocks: Vec<Block>,
    stop_reason: Option<String>,
    input_tokens: u64,
    output_tokens: u64,
    saw_usage: bool,
    stopped: bool,
    n_content_bytes: u64,
}

impl AnthropicStream {
    fn block(&mut self, index: usize) -> Result<&mut Block, ModelError> {
        self.blocks.get_mut(index).ok_or_else(|| {
            malformed(
                PROVIDER,
                format!("a delta for block {index}, which never started"),
            )
        })
    }

    fn take_usage(&mut self, usage: &JsonValue) {
        let input = count(usage, "input_tokens")
            + count(usage, "cache_creation_input_tokens")
            + count(usage, "cache_read_input_tokens");
        if input > 0 {
            self.input_tokens = input;
        }
        if usage.get("output_tokens").is_some() {
            self.output_tokens = count(usage, "output_tokens");
        }
        self.saw_usage = true;
    }
}

impl StreamAssembler for AnthropicStream {
    fn on_event(
        &mut self,
        event: SseEvent,
        observer: &dyn StreamObserver,
    ) -> Result<StreamProgress, ModelError> {
        let data: JsonValue = serde_json::from_str(&event.data)
            .map_err(|error| malformed(PROVIDER, format!("a stream event is not JSON: {error}")))?;
        let index = data
            .get("index")
            .and_then(JsonValue::as_u64)
            .map(|index| index as usize);
        match data.get("type").and_then(JsonValue::as_str) {
            Some("message_start") => {
                if let Some(usage) = data.pointer("/message/usage") {
                    self.take_usage(usage);
                }
            }
            Some("content_block_start") => {
                let index =
                    index.ok_or_else(|| malformed(PROVIDER, "content_block_start has no index"))?;
                let block = data.get("content_block").ok_or_else(|| {
                    malformed(PROVIDER, "content_block_start has no content_block")
                })?;
                let started = match block.get("type").and_then(JsonValue::as_str) {
                    Some("text") => {
                        let text = block
                            .get("text")
                            .and_then(JsonValue::as_str)
                            .unwrap_or_default();
                        if !text.is_empty() {
                            observer.on_text_delta(text);
                        }
                        self.n_content_bytes += text.len() as u64;
                        Block::Text(text.to_string())
                    }
                    Some("tool_use") => Block::Tool {
                        id: required_str(PROVIDER, block, "id", "a tool_use block")?.to_string(),
                        name: required_str(PROVIDER, block, "name", "a tool_use block")?
                            .to_string(),
                        arguments: String::new(),
                    },
                    Some("thinking") => Block::Thinking {
                        text: block
                            .get("thinking")
                            .and_then(JsonValue::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        signature: None,
                    },
                    Some("redacted_thinking") => Block::Redacted(
                        block
                            .get("data")
                            .and_then(JsonValue::as_str)
                            .unwrap_or_default()
                            .to_string(),
                    ),
                    _ => Block::Ignored,
                };
                // Indexes count blocks of one answer; a wild one is a broken
                // stream, not a reason to allocate.
                if index > MAX_BLOCKS {
                    return Err(malformed(
                        PROVIDER,
                        format!("block index {index} is out of range"),
                    ));
                }
                while self.blocks.len() <= index {
                    self.blocks.push(Block::Ignored);
                }
                self.blocks[index] = started;
            }
            Some("content_block_delta") => {
                let index =
                    index.ok_or_else(|| malformed(PROVIDER, "content_block_delta has no index"))?;
                let delta = data.get("delta").cloned().unwrap_or_default();
                let piece = |field: &str| {
                    delta
                        .get(field)
                        .and_then(JsonValue::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                match (
                    delta.get("type").and_then(JsonValue::as_str),
                    self.block(index)?,
                ) {
                    (Some("text_delta"), Block::Text(text)) => {
                        let piece = piece("text");
                        observer.on_text_delta(&piece);
                        text.push_str(&piece);
                        self.n_content_bytes += piece.len() as u64;
                    }
                    (Some("input_json_delta"), Block::Tool { arguments, .. }) => {
                        let piece = piece("partial_json");
                        arguments.push_str(&piece);
                        self.n_content_bytes += piece.len() as u64;
                    }
                    (Some("thinking_delta"), Block::Thinking { text, .. }) => {
                        let piece = piece("thinking");
                        text.push_str(&piece);
                        self.n_content_bytes += piece.len() as u64;
                    }
                    (Some("signature_delta"), Block::Thinking { signature, .. }) => {
                        *signature = Some(piece("signature"));
                    }
                    _ => {}
                }
            }
            Some("message_delta") => {
                if let Some(reason) = data
                    .pointer("/delta/stop_reason")
                    .and_then(JsonValue::as_str)
                {
                    self.stop_reason = Some(reason.to_string());
                }
                if let Some(usage) = data.get("usage") {
                    self.take_usage(usage);
                }
            }
            Some("message_stop") => {
                self.stopped = true;
                return Ok(StreamProgress::Done);
            }
            Some("error") => {
                return Err(ModelError::Transport {
                    provider: PROVIDER.into(),
                    message: format!(
                        "the stream broke off: {}",
                        super::provider_message(&event.data)
                    ),
                });
            }
            _ => {}
        }
        Ok(StreamProgress::Continue)
    }

    fn finish(self) -> Result<ModelResponse, ModelError> {
        if !self.stopped {
            return Err(ModelError::Transport {
                provider: PROVIDER.into(),
                message: "the stream ended before message_stop".into(),
            });
        }
        if self.blocks.is_empty() && self.stop_reason.is_none() {
            // An empty answer still says why it stopped; one that says
            // nothing at all is not an answer.
            return Err(malformed(
                PROVIDER,
                "the stream ended without any content block or stop_reason",
            ));
        }
        let mut content = Vec::new();
        for block in self.blocks {
            match block {
                Block::Text(text) => content.push(ContentPart::text(text)),
                Block::Tool {
                    id,
                    name,
                    arguments,
                } => {
                    content.push(tool_call_from_text(id, name, &arguments));
                }
                Block::Thinking { text, signature } => {
                    content.push(reasoning(&text, "signature", signature.as_deref()));
                }
                Block::Redacted(data) => content.push(reasoning("", "redactedData", Some(&data))),
                Block::Ignored => {}
            }
        }
        Ok(ModelResponse {
            content,
            finish_reason: finish_reason(self.stop_reason.as_deref()),
            usage: self
                .saw_usage
                .then(|| usage_from(self.input_tokens, self.output_tokens)),
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

    #[test]
    fn merges_tool_results_and_following_user_text_into_one_user_message() {
        let request = ModelRequest {
            model: "m".into(),
            messages: vec![
                ModelMessage::system("be brief"),
                ModelMessage::user("hi"),
                ModelMessage::assistant(vec![ContentPart::tool_call(
                    "c1",
                    "a__b",
                    json!({"x": 1}),
                )]),
                ModelMessage::tool(vec![ContentPart::tool_result(
                    "c1",
                    "a__b",
                    ToolResultOutput::ErrorText("boom".into()),
                )]),
                ModelMessage::user("and?"),
            ],
            tools: vec![],
            params: ModelParams::default(),
        };
        let body = AnthropicWire {
            default_max_tokens: 10,
        }
        .encode(&request, false)
        .unwrap();
        assert_eq!(
            JsonValue::Object(body),
            json!({
                "model": "m",
                "max_tokens": 10,
                "system": [{"type": "text", "text": "be brief"}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "a__b", "input": {"x": 1}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "c1", "content": "boom", "is_error": true},
                        {"type": "text", "text": "and?"}
                    ]}
                ]
            })
        );
    }

    #[test]
    fn cache_breakpoints_reach_the_blocks() {
        let ephemeral = json!({"anthropic": {"cacheControl": {"type": "ephemeral"}}});
        let request = ModelRequest {
            model: "m".into(),
            messages: vec![
                ModelMessage::System {
                    content: "long prompt".into(),
                    provider_options: Some(ephemeral.clone()),
                },
                ModelMessage::User {
                    content: goondan_types::MessageContent::Parts(vec![
                        ContentPart::text("a"),
                        ContentPart::text("b"),
                    ]),
                    provider_options: Some(ephemeral),
                },
            ],
            tools: vec![],
            params: ModelParams::default(),
        };
        let body = AnthropicWire {
            default_max_tokens: 1,
        }
        .encode(&request, false)
        .unwrap();
        assert_eq!(
            body["system"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert!(body["messages"][0]["content"][0]
            .get("cache_control")
            .is_none());
        assert_eq!(
            body["messages"][0]["content"][1]["cache_control"],
            json!({"type": "ephemeral"})
        );
    }

    #[test]
    fn thinking_round_trips_with_its_signature() {
        let wire = AnthropicWire {
            default_max_tokens: 10,
        };
        let answer = wire
            .decode(json!({"content": [{"type": "thinking", "thinking": "hmm", "signature": "sig"}], "stop_reason": "end_turn"}))
            .unwrap();
        let request = ModelRequest {
            model: "m".into(),
            messages: vec![
                ModelMessage::user("q"),
                ModelMessage::assistant(answer.content),
            ],
            tools: vec![],
            params: ModelParams::default(),
        };
        let body = wire.encode(&request, false).unwrap();
        assert_eq!(
            body["messages"][1]["content"][0],
            json!({"type": "thinking", "thinking": "hmm", "signature": "sig"})
        );
    }
}
