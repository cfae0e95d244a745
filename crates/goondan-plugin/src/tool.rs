//! Tool handlers that run in a plugin: each call is one `tool.invoke`.
//!
//! A plugin failure (crash, hang, protocol) or an error the user's code
//! threw becomes a [`ToolFailure`] with the error's code, so the model
//! sees a structured error result and the agent goes on.

use crate::error::PluginError;
use crate::host::PluginHost;
use crate::protocol::{methods, WireToolContext};
use futures_util::future::BoxFuture;
use goondan_runtime::tool::{ToolContext, ToolFailure, ToolHandler, ToolOutcome};
use goondan_types::{JsonObject, JsonValue};
use std::sync::Arc;

/// Which function of the plugin a handler calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginTool {
    /// A module export (`handlers.<name>`, or `default`).
    Export(String),
    /// A tool an extension registered with `api.tools.register`.
    Registered(String),
}

/// A [`ToolHandler`] that sends `tool.invoke` to a plugin.
#[derive(Debug, Clone)]
pub struct PluginToolHandler {
    host: Arc<PluginHost>,
    tool: PluginTool,
}

impl PluginToolHandler {
    /// A handler calling `tool` in `host`.
    pub fn new(host: Arc<PluginHost>, tool: PluginTool) -> Self {
        PluginToolHandler { host, tool }
    }
}

/// The wire form of a handler's context.
pub(crate) fn wire_context(ctx: &ToolContext) -> WireToolContext {
    WireToolContext {
        agent_name: ctx.agent_name.clone(),
        instance_key: ctx.instance_key.clone(),
        turn_id: ctx.turn_id.clone(),
        trace_id: ctx.trace_id().to_string(),
        tool_call_id: ctx.tool_call_id.clone(),
        workdir: ctx.workdir.display().to_string(),
    }
}

/// A plugin error as the tool error the model sees.
pub fn tool_failure(error: PluginError) -> ToolFailure {
    let mut failure = ToolFailure::new(error.code(), error.to_string());
    if let PluginError::User {
        name: Some(name), ..
    } = &error
    {
        failure = failure.with_name(name.clone());
    }
    if let Some(suggestion) = error.suggestion() {
        failure = failure.with_suggestion(suggestion);
    }
    failure
}

impl ToolHandler for PluginToolHandler {
    fn call<'a>(&'a self, ctx: &'a ToolContext, args: JsonObject) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let mut params = serde_json::json!({
                "args": args,
                "context": wire_context(ctx),
            });
            match &self.tool {
                PluginTool::Export(name) => params["export"] = JsonValue::from(name.as_str()),
                PluginTool::Registered(name) => params["tool"] = JsonValue::from(name.as_str()),
            }
            let answer = self
                .host
                .call(methods::TOOL_INVOKE, params)
                .await
                .map_err(tool_failure)?;
            Ok(answer.get("output").cloned().unwrap_or(JsonValue::Null))
        })
    }
}
