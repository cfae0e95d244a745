//! Tool handlers that run in a plugin: each call is one `tool.invoke`.
//!
//! A plugin failure (crash, hang, protocol) or an error the user's code
//! threw becomes a [`ToolFailure`] with the error's code, so the model
//! sees a structured error result and the agent goes on.
//!
//! While a call runs, the plugin may call other agents through the
//! handler's agents API (`ctx.agents.request/send/catalog` in the shims):
//! `agents.request`, `agents.send` and `agents.catalog` carry the call's
//! `invocation` and are served by [`crate::agents`], as is
//! `operator.ask` by [`crate::ask`] (a question to a person).

use crate::agents::AgentCalls;
use crate::ask::Asking;
use crate::error::PluginError;
use crate::host::{InvocationServer, PluginHost};
use crate::protocol::{error_codes, methods, RpcError, WireToolContext};
use futures_util::future::BoxFuture;
use goondan_runtime::tool::{ToolContext, ToolFailure, ToolHandler, ToolOutcome};
use goondan_types::{JsonObject, JsonValue};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Tool-call invocation ids, unique in the agent process.
static INVOCATIONS: AtomicU64 = AtomicU64::new(1);

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
            let invocation = format!("t{}", INVOCATIONS.fetch_add(1, Ordering::Relaxed));
            let mut params = serde_json::json!({
                "args": args,
                "context": wire_context(ctx),
                "invocation": invocation,
            });
            match &self.tool {
                PluginTool::Export(name) => params["export"] = JsonValue::from(name.as_str()),
                PluginTool::Registered(name) => params["tool"] = JsonValue::from(name.as_str()),
            }
            let mut server = AgentsServer {
                ctx,
                asking: Asking::of_tool(ctx.asks.clone()),
            };
            let answer = self
                .host
                .call_with(
                    methods::TOOL_INVOKE,
                    params,
                    Some((&invocation, &mut server)),
                )
                .await
                .map_err(tool_failure)?;
            Ok(answer.get("output").cloned().unwrap_or(JsonValue::Null))
        })
    }
}

/// Serves the agents API and questions to a person while one tool call
/// runs.
struct AgentsServer<'c> {
    ctx: &'c ToolContext,
    asking: Asking,
}

impl InvocationServer for AgentsServer<'_> {
    fn serve<'a>(
        &'a mut self,
        method: &'a str,
        params: JsonValue,
    ) -> BoxFuture<'a, Result<JsonValue, RpcError>> {
        Box::pin(async move {
            match method {
                methods::AGENTS_REQUEST | methods::AGENTS_SEND | methods::AGENTS_CATALOG => {
                    let calls = AgentCalls {
                        agents: &*self.ctx.runtime,
                        caller: &self.ctx.agent_name,
                        trace: &self.ctx.trace,
                    };
                    calls.serve(method, params).await
                }
                methods::OPERATOR_ASK => self.asking.serve(params).await,
                other => Err(RpcError::new(
                    error_codes::METHOD_NOT_FOUND,
                    format!("`{other}` is not a method of a tool call"),
                )),
            }
        })
    }
}
