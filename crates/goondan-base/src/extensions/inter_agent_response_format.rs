//! `inter-agent-response-format`: before each Step, rewrites the answers of
//! async inter-agent requests the runtime injected (user messages with
//! `metadata.__goondanInterAgentResponse`) into one readable block: who
//! answered, the status and request id, then the answer or the error.
//!
//! A rewritten message keeps its id and metadata and is marked
//! `__goondanInterAgentResponseFormatted: true`, so it is rewritten once.

use super::parse_config;
use futures_util::future::BoxFuture;
use goondan_runtime::pipeline::{LayerResult, MiddlewareOptions};
use goondan_runtime::{
    Extension, ExtensionApi, ExtensionInitError, Middleware, StepContext, StepNext,
};
use goondan_types::agents::{InterAgentResponseMetadata, InterAgentResponseStatus};
use goondan_types::{JsonValue, Message, MessageEvent, MessageSource, ModelMessage};
use serde::Deserialize;
use std::sync::Arc;

/// Where the runtime puts the answer's metadata.
pub const RESPONSE_KEY: &str = "__goondanInterAgentResponse";
/// The mark of a message already rewritten.
pub const FORMATTED_KEY: &str = "__goondanInterAgentResponseFormatted";
const EXTENSION_NAME: &str = "inter-agent-response-format";

/// `spec.config` of `inter-agent-response-format`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct InterAgentResponseFormatConfig {
    /// Adds the request's metadata as a last line.
    pub include_request_metadata: bool,
}

/// The extension.
#[derive(Debug, Clone, Copy, Default)]
pub struct InterAgentResponseFormat;

impl Extension for InterAgentResponseFormat {
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        let config: InterAgentResponseFormatConfig = parse_config(api.name(), config)?;
        api.pipeline().register::<StepContext>(
            Arc::new(InterAgentResponseFormatLayer { config }),
            MiddlewareOptions::default(),
        );
        Ok(())
    }
}

/// The `step` middleware.
#[derive(Debug, Clone)]
pub struct InterAgentResponseFormatLayer {
    config: InterAgentResponseFormatConfig,
}

impl InterAgentResponseFormatLayer {
    /// The rewrite of `message`, when it is an unformatted async answer.
    fn format(&self, message: &Message) -> Option<Message> {
        if !matches!(message.data, ModelMessage::User { .. })
            || message.metadata.get(FORMATTED_KEY) == Some(&JsonValue::Bool(true))
        {
            return None;
        }
        let metadata: InterAgentResponseMetadata =
            serde_json::from_value(message.metadata.get(RESPONSE_KEY)?.clone()).ok()?;
        if metadata.kind != "inter_agent_response" || metadata.version != 1 {
            return None;
        }
        let status = match metadata.status {
            InterAgentResponseStatus::Ok => "ok",
            InterAgentResponseStatus::Error => "error",
            InterAgentResponseStatus::Timeout => "timeout",
        };
        let mut lines = vec![format!(
            "[inter-agent response] {} -> {} status={} requestId={}",
            metadata.from_agent_id, metadata.to_agent_id, status, metadata.request_id
        )];
        let body = message.data.text();
        match metadata.status {
            InterAgentResponseStatus::Ok => {
                if !body.is_empty() {
                    lines.push(body);
                }
            }
            _ => {
                let code = metadata
                    .error_code
                    .as_deref()
                    .unwrap_or("AGENT_REQUEST_ERROR");
                let text = metadata
                    .error_message
                    .clone()
                    .or_else(|| (!body.is_empty()).then_some(body))
                    .unwrap_or_else(|| "agent request failed".to_string());
                lines.push(format!("error({code}): {text}"));
            }
        }
        if self.config.include_request_metadata {
            if let Some(request_metadata) = &metadata.request_metadata {
                lines.push(format!(
                    "requestMetadata={}",
                    JsonValue::Object(request_metadata.clone())
                ));
            }
        }
        let mut formatted = message.clone();
        formatted.data = ModelMessage::user(lines.join("\n"));
        formatted
            .metadata
            .insert(FORMATTED_KEY.into(), JsonValue::Bool(true));
        formatted.source = MessageSource::Extension {
            extension_name: EXTENSION_NAME.to_string(),
        };
        Some(formatted)
    }
}

impl Middleware<StepContext> for InterAgentResponseFormatLayer {
    fn handle<'a>(
        &'a self,
        ctx: &'a mut StepContext,
        next: StepNext<'a>,
    ) -> BoxFuture<'a, LayerResult<StepContext>> {
        Box::pin(async move {
            let rewrites: Vec<Message> = {
                let state = ctx.conversation_state();
                state
                    .next_messages()
                    .iter()
                    .filter_map(|message| self.format(message))
                    .collect()
            };
            for message in rewrites {
                ctx.emit_message_event(MessageEvent::Replace {
                    target_id: message.id.clone(),
                    message,
                })?;
            }
            next.run(ctx).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tool_pairs::fixtures::user;
    use super::*;
    use serde_json::json;

    fn answer(status: &str, text: &str, extra: JsonValue) -> Message {
        let mut message = user("m1", text);
        let mut metadata = json!({
            "kind": "inter_agent_response", "version": 1, "requestId": "corr-1",
            "requestEventId": "evt-1", "fromAgentId": "worker", "toAgentId": "boss",
            "async": true, "status": status, "receivedAt": "2026-01-01T00:00:00.000Z",
            "requestMetadata": {"topic": "x"}
        });
        for (key, value) in extra.as_object().unwrap() {
            metadata[key] = value.clone();
        }
        message.metadata.insert(RESPONSE_KEY.into(), metadata);
        message
    }

    #[test]
    fn formats_ok_error_and_timeout_answers_once() {
        let layer = InterAgentResponseFormatLayer {
            config: InterAgentResponseFormatConfig {
                include_request_metadata: true,
            },
        };
        let ok = layer.format(&answer("ok", "42", json!({}))).unwrap();
        assert_eq!(
            ok.data.text(),
            "[inter-agent response] worker -> boss status=ok requestId=corr-1\n42\nrequestMetadata={\"topic\":\"x\"}"
        );
        assert_eq!(ok.id, "m1");
        assert!(layer.format(&ok).is_none(), "already formatted");
        let failed = layer
            .format(&answer(
                "error",
                "",
                json!({"errorCode": "E_X", "errorMessage": "boom"}),
            ))
            .unwrap();
        assert!(failed.data.text().contains("error(E_X): boom"));
        let timeout = layer.format(&answer("timeout", "", json!({}))).unwrap();
        assert!(timeout
            .data
            .text()
            .contains("error(AGENT_REQUEST_ERROR): agent request failed"));
        assert!(layer.format(&user("plain", "hello")).is_none());
        assert!(layer.format(&answer("weird", "x", json!({}))).is_none());
    }

    #[test]
    fn config_is_parsed_strictly() {
        assert!(
            parse_config::<InterAgentResponseFormatConfig>(
                EXTENSION_NAME,
                &json!({"includeRequestMetadata": true})
            )
            .unwrap()
            .include_request_metadata
        );
        assert!(parse_config::<InterAgentResponseFormatConfig>(
            EXTENSION_NAME,
            &json!({"verbose": true})
        )
        .is_err());
    }
}
