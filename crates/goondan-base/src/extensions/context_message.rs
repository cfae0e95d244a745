//! `context-message`: puts the agent's materialized system prompt, and when
//! configured the swarm catalog, the inbound event, the call context and a
//! route summary, into the conversation as one system message from this
//! extension, before each Turn (the core never injects prompts).
//!
//! Idempotent: the message carries a hash of its content under
//! `metadata.__goondanContextMessage`; a Turn whose context hashes the same
//! emits nothing, and one whose context changed (a new prompt after a
//! restart, a different caller) replaces the earlier message in place.

use super::parse_config;
use futures_util::future::BoxFuture;
use goondan_runtime::pipeline::{LayerResult, MiddlewareOptions, RuntimeContext};
use goondan_runtime::{
    Extension, ExtensionApi, ExtensionInitError, Middleware, TurnContext, TurnNext,
};
use goondan_types::{JsonValue, Message, MessageEvent, MessageSource, ModelMessage};
use serde::Deserialize;
use serde_json::json;
use std::borrow::Borrow;
use std::sync::Arc;

/// The metadata key holding `{ promptHash, segmentIds }`.
pub const MARKER_KEY: &str = "__goondanContextMessage";
const EXTENSION_NAME: &str = "context-message";

/// `spec.config` of `context-message`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ContextMessageConfig {
    /// The agent's system prompt (`runtime.agent.prompt.system`).
    pub include_agent_prompt: bool,
    /// The swarm's agents (`runtime.swarm`).
    pub include_swarm_catalog: bool,
    /// The event that started the Turn (`runtime.inbound`).
    pub include_inbound_context: bool,
    /// The calling agent, for inter-agent Turns (`runtime.call`).
    pub include_call_context: bool,
    /// Who sent this, call before inbound; needs one of the two above.
    pub include_route_summary: bool,
    /// A line added after the swarm catalog.
    pub swarm_catalog_instruction: String,
}

impl Default for ContextMessageConfig {
    fn default() -> Self {
        ContextMessageConfig {
            include_agent_prompt: true,
            include_swarm_catalog: false,
            include_inbound_context: false,
            include_call_context: false,
            include_route_summary: false,
            swarm_catalog_instruction: "When the delegate is unclear, call agents__catalog for the current list of callable agents.".into(),
        }
    }
}

/// The extension.
#[derive(Debug, Clone, Copy, Default)]
pub struct ContextMessage;

impl Extension for ContextMessage {
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        let config: ContextMessageConfig = parse_config(api.name(), config)?;
        api.pipeline().register::<TurnContext>(
            Arc::new(ContextMessageLayer { config }),
            MiddlewareOptions::default(),
        );
        Ok(())
    }
}

/// The `turn` middleware.
#[derive(Debug, Clone)]
pub struct ContextMessageLayer {
    config: ContextMessageConfig,
}

/// One titled block of the message.
struct Segment {
    id: &'static str,
    content: String,
}

impl ContextMessageLayer {
    fn segments(&self, runtime: &RuntimeContext) -> Vec<Segment> {
        let config = &self.config;
        let mut segments = Vec::new();
        if config.include_agent_prompt {
            if let Some(system) = runtime
                .agent
                .prompt
                .as_ref()
                .and_then(|prompt| prompt.system.as_ref())
                .filter(|system| !system.trim().is_empty())
            {
                segments.push(Segment {
                    id: "agent.prompt.system",
                    content: system.clone(),
                });
            }
        }
        if config.include_swarm_catalog {
            let swarm = &runtime.swarm;
            let mut lines = vec![
                "[runtime_catalog]".to_string(),
                format!("swarm={}", swarm.swarm_name),
                format!("entryAgent={}", swarm.entry_agent),
                format!("selfAgent={}", swarm.self_agent),
                format!("availableAgents={}", swarm.available_agents.join(", ")),
                format!("callableAgents={}", swarm.callable_agents.join(", ")),
                "[/runtime_catalog]".to_string(),
            ];
            if !config.swarm_catalog_instruction.trim().is_empty() {
                lines.push(config.swarm_catalog_instruction.trim().to_string());
            }
            segments.push(Segment {
                id: "runtime.swarm.catalog",
                content: lines.join("\n"),
            });
        }
        if config.include_inbound_context {
            let inbound = &runtime.inbound;
            let mut lines = vec![
                "[runtime_inbound]".to_string(),
                format!("eventId={}", inbound.event_id),
                format!("eventType={}", inbound.event_type),
                format!("sourceKind={}", kind_name(inbound.source_kind)),
                format!("sourceName={}", inbound.source_name),
                format!("createdAt={}", inbound.created_at),
            ];
            if let Some(instance_key) = &inbound.instance_key {
                lines.push(format!("instanceKey={instance_key}"));
            }
            if let Some(metadata) = &inbound.event_metadata {
                lines.push(format!(
                    "eventMetadata={}",
                    JsonValue::Object(metadata.clone())
                ));
            }
            lines.push("[/runtime_inbound]".to_string());
            segments.push(Segment {
                id: "runtime.inbound",
                content: lines.join("\n"),
            });
        }
        if config.include_call_context {
            if let Some(call) = &runtime.call {
                let mut lines = vec!["[runtime_call]".to_string()];
                let fields = [
                    ("callerAgent", &call.caller_agent),
                    ("callerInstanceKey", &call.caller_instance_key),
                    ("callerTurnId", &call.caller_turn_id),
                    ("callSource", &call.call_source),
                ];
                for (name, value) in fields {
                    if let Some(value) = value {
                        lines.push(format!("{name}={value}"));
                    }
                }
                if !call.call_stack.is_empty() {
                    lines.push(format!("callStack={}", call.call_stack.join(" -> ")));
                }
                if let Some(reply_to) = &call.reply_to {
                    lines.push(format!("replyTo.target={}", reply_to.target));
                    lines.push(format!("replyTo.correlationId={}", reply_to.correlation_id));
                }
                lines.push("[/runtime_call]".to_string());
                segments.push(Segment {
                    id: "runtime.call",
                    content: lines.join("\n"),
                });
            }
        }
        if config.include_route_summary
            && (config.include_inbound_context || config.include_call_context)
        {
            let inbound = &runtime.inbound;
            let call = runtime.call.as_ref();
            let caller = call.and_then(|call| call.caller_agent.clone());
            let mut lines = vec![
                "[runtime_route]".to_string(),
                "precedence=call>inbound".to_string(),
                format!(
                    "senderKind={}",
                    if caller.is_some() {
                        "agent"
                    } else {
                        kind_name(inbound.source_kind)
                    }
                ),
                format!(
                    "senderName={}",
                    caller.unwrap_or_else(|| inbound.source_name.clone())
                ),
                format!("eventType={}", inbound.event_type),
                format!("eventId={}", inbound.event_id),
            ];
            let sender_instance = call
                .and_then(|call| call.caller_instance_key.clone())
                .or_else(|| inbound.instance_key.clone());
            if let Some(instance_key) = sender_instance {
                lines.push(format!("senderInstanceKey={instance_key}"));
            }
            if let Some(turn_id) = call.and_then(|call| call.caller_turn_id.as_ref()) {
                lines.push(format!("senderTurnId={turn_id}"));
            }
            lines.push("[/runtime_route]".to_string());
            segments.push(Segment {
                id: "runtime.route.summary",
                content: lines.join("\n"),
            });
        }
        segments
    }

    /// The event to emit for the current conversation, if any.
    fn plan<M: Borrow<Message>>(
        &self,
        runtime: &RuntimeContext,
        messages: &[M],
    ) -> Option<MessageEvent> {
        let segments = self.segments(runtime);
        if segments.is_empty() {
            return None;
        }
        let content = segments
            .iter()
            .map(|segment| segment.content.as_str())
            .collect::<Vec<_>>()
            .join("\n\n");
        let hash = content_hash(&content);
        let existing = messages
            .iter()
            .map(Borrow::borrow)
            .rev()
            .find(|message| message.metadata.contains_key(MARKER_KEY));
        if existing.is_some_and(|message| message.metadata[MARKER_KEY]["promptHash"] == json!(hash))
        {
            return None;
        }
        let mut message = Message::new(
            ModelMessage::system(content),
            MessageSource::Extension {
                extension_name: EXTENSION_NAME.to_string(),
            },
        );
        let segment_ids: Vec<&str> = segments.iter().map(|segment| segment.id).collect();
        message.metadata.insert(
            MARKER_KEY.into(),
            json!({"promptHash": hash, "segmentIds": segment_ids}),
        );
        Some(match existing {
            Some(previous) => MessageEvent::Replace {
                target_id: previous.id.clone(),
                message,
            },
            None => MessageEvent::Append { message },
        })
    }
}

fn kind_name(kind: goondan_types::EventSourceKind) -> &'static str {
    match kind {
        goondan_types::EventSourceKind::Agent => "agent",
        goondan_types::EventSourceKind::Connector => "connector",
    }
}

/// FNV-1a, 64 bits, as hex: stable across builds and machines, which a
/// hash kept in stored messages must be (std's hasher promises neither).
fn content_hash(content: &str) -> String {
    format!(
        "{:016x}",
        goondan_types::placement::fnv1a64(content.as_bytes())
    )
}

impl Middleware<TurnContext> for ContextMessageLayer {
    fn handle<'a>(
        &'a self,
        ctx: &'a mut TurnContext,
        next: TurnNext<'a>,
    ) -> BoxFuture<'a, LayerResult<TurnContext>> {
        Box::pin(async move {
            let event = {
                let state = ctx.conversation_state();
                self.plan(
                    ctx.runtime(),
                    &state.next_messages().iter().collect::<Vec<_>>(),
                )
            };
            if let Some(event) = event {
                ctx.emit_message_event(event)?;
            }
            next.run(ctx).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tool_pairs::fixtures::user;
    use super::*;
    use goondan_runtime::pipeline::{RuntimeAgentContext, RuntimePrompt, RuntimeSwarmContext};
    use goondan_types::{AgentEvent, EventSource, EventSourceKind};

    fn runtime(prompt: &str, caller: Option<&str>) -> RuntimeContext {
        let mut event = AgentEvent::new(
            "agent.request",
            EventSource::new(EventSourceKind::Agent, "boss"),
        );
        if let Some(caller) = caller {
            let mut metadata = goondan_types::JsonObject::new();
            metadata.insert("callerAgent".into(), json!(caller));
            event.metadata = Some(metadata);
        }
        RuntimeContext::for_event(
            RuntimeAgentContext {
                name: "worker".into(),
                bundle_root: None,
                prompt: Some(RuntimePrompt {
                    system: Some(prompt.into()),
                }),
            },
            RuntimeSwarmContext {
                swarm_name: "team".into(),
                entry_agent: "boss".into(),
                self_agent: "worker".into(),
                available_agents: vec!["boss".into(), "worker".into()],
                callable_agents: vec!["boss".into()],
            },
            &event,
        )
    }

    fn layer_with(config: ContextMessageConfig) -> ContextMessageLayer {
        ContextMessageLayer { config }
    }

    #[test]
    fn appends_once_then_replaces_when_the_prompt_changes() {
        let layer = layer_with(ContextMessageConfig::default());
        let first = layer
            .plan(&runtime("be brief", None), &[user("u1", "hi")])
            .unwrap();
        let MessageEvent::Append { message } = first else {
            panic!("expected an append")
        };
        assert_eq!(message.data, ModelMessage::system("be brief"));
        let conversation = vec![message.clone(), user("u1", "hi")];
        assert!(layer
            .plan(&runtime("be brief", None), &conversation)
            .is_none());
        match layer
            .plan(&runtime("be verbose", None), &conversation)
            .unwrap()
        {
            MessageEvent::Replace {
                target_id,
                message: replacement,
            } => {
                assert_eq!(target_id, message.id);
                assert_eq!(replacement.data, ModelMessage::system("be verbose"));
            }
            other => panic!("expected a replace, got {other:?}"),
        }
    }

    #[test]
    fn optional_segments_follow_the_config() {
        let layer = layer_with(ContextMessageConfig {
            include_agent_prompt: false,
            include_swarm_catalog: true,
            include_call_context: true,
            include_route_summary: true,
            ..ContextMessageConfig::default()
        });
        let Some(MessageEvent::Append { message }) =
            layer.plan(&runtime("p", Some("boss")), &[] as &[Message])
        else {
            panic!("expected an append")
        };
        let text = message.data.text();
        assert!(text.contains("callableAgents=boss"), "{text}");
        assert!(text.contains("callerAgent=boss"), "{text}");
        assert!(text.contains("senderKind=agent"), "{text}");
        assert!(
            !text.contains("\np\n") && !text.starts_with("p\n"),
            "{text}"
        );
        assert_eq!(
            message.metadata[MARKER_KEY]["segmentIds"],
            json!([
                "runtime.swarm.catalog",
                "runtime.call",
                "runtime.route.summary"
            ])
        );
        let nothing = layer_with(ContextMessageConfig {
            include_agent_prompt: false,
            ..ContextMessageConfig::default()
        });
        assert!(nothing
            .plan(&runtime("p", None), &[] as &[Message])
            .is_none());
    }

    #[test]
    fn config_is_parsed_strictly() {
        let parsed: ContextMessageConfig =
            parse_config("context-message", &json!({"includeSwarmCatalog": true})).unwrap();
        assert!(parsed.include_swarm_catalog && parsed.include_agent_prompt);
        assert!(parse_config::<ContextMessageConfig>(
            "context-message",
            &json!({"includePrompt": true})
        )
        .is_err());
    }
}
