//! The built-in extensions of `@goondan/base`, one module per Extension
//! resource. Each module has a config struct (the resource's
//! `spec.config`, parsed strictly), an [`Extension`] that registers its
//! middlewares, and the middlewares themselves, which hold only config and
//! shared handles: per-Turn state travels in the contexts.

pub mod a2a;
pub mod context_message;
pub mod inter_agent_response_format;
pub mod logging;
pub mod message_compaction;
pub mod message_window;
pub mod required_tools_guard;
pub mod tool_approval;
mod tool_pairs;
pub mod tool_search;

use goondan_runtime::{Extension, ExtensionInitError};
use goondan_types::{JsonValue, Message, Secrets};
use serde::de::DeserializeOwned;
use std::sync::Arc;

pub use message_compaction::Summarizer;

/// The builtin names of the extensions this crate provides.
pub const EXTENSION_NAMES: [&str; 10] = [
    "a2a",
    "context-message",
    "inter-agent-response-format",
    "logging",
    "mcp",
    "message-compaction",
    "message-window",
    "required-tools-guard",
    "tool-approval",
    "tool-search",
];

/// Builtin extension `name`; `summarizer` is the model
/// `message-compaction` summarizes with, when the caller has one, and
/// `secrets` what `mcp` and `a2a` resolve `valueFrom.env` in before the
/// process environment. `mcp` lives in `goondan-mcp` (its client is a subsystem of
/// its own, shared with `gdn mcp serve`); it is part of the package here.
pub fn extension(
    name: &str,
    summarizer: Option<Summarizer>,
    secrets: &Secrets,
) -> Option<Arc<dyn Extension>> {
    Some(match name {
        "a2a" => Arc::new(a2a::A2a::new(secrets.clone())),
        "context-message" => Arc::new(context_message::ContextMessage),
        "inter-agent-response-format" => {
            Arc::new(inter_agent_response_format::InterAgentResponseFormat)
        }
        "logging" => Arc::new(logging::Logging),
        "mcp" => Arc::new(goondan_mcp::McpExtension::new(secrets.clone())),
        "message-compaction" => Arc::new(message_compaction::MessageCompaction::new(summarizer)),
        "message-window" => Arc::new(message_window::MessageWindow),
        "required-tools-guard" => Arc::new(required_tools_guard::RequiredToolsGuard),
        "tool-approval" => Arc::new(tool_approval::ToolApproval),
        "tool-search" => Arc::new(tool_search::ToolSearch),
        goondan_config::approvals::SWARM_GATE_ENTRY => Arc::new(tool_approval::SwarmApproval),
        _ => return None,
    })
}

/// Parses an extension's `spec.config`; `null` (no config) gives the
/// defaults, an unknown field or a wrong type is an init error naming it.
pub(crate) fn parse_config<T: DeserializeOwned + Default>(
    extension: &str,
    config: &JsonValue,
) -> Result<T, ExtensionInitError> {
    if config.is_null() {
        return Ok(T::default());
    }
    serde_json::from_value(config.clone()).map_err(|error| {
        ExtensionInitError::new(format!(
            "invalid spec.config for extension {extension}: {error}"
        ))
    })
}

/// Whether windowing and compaction must leave `message` alone: it is
/// pinned (`metadata.pinned: true`) or it is the context message, which
/// would otherwise be cut from the front and appended again at the end.
pub(crate) fn is_retained(message: &Message) -> bool {
    message.metadata.get("pinned") == Some(&JsonValue::Bool(true))
        || message.metadata.contains_key(context_message::MARKER_KEY)
}
