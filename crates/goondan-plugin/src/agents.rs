//! `agents.request`, `agents.send` and `agents.catalog`: a script's calls
//! to other agents of the swarm, served over the runtime's
//! [`AgentsApi`], the one path the `agents` tool takes too (routing,
//! auto-spawn, the 15 s default timeout, cycle detection per
//! `agentName:instanceKey`, all inside the API's implementation).
//!
//! A tool handler's `ctx.agents` ([`crate::tool`]) and a `turn` or `step`
//! middleware's ([`crate::extension`]) both serve their calls here; a
//! `toolCall` middleware has none (seed 000 §4.4). What differs is only
//! where the call's event hangs in the trace: under the tool call's span,
//! or under the Step's (or the Turn's) span.

use crate::protocol::{error_codes, methods, RpcError};
use goondan_runtime::{AgentsApi, AgentsError};
use goondan_types::agents::AgentRuntimeRequestOptions;
use goondan_types::{
    AgentEvent, EventSource, EventSourceKind, JsonObject, JsonValue, TraceContext,
};
use serde::Deserialize;

/// `request` and `send` parameters: the tool handler's
/// `(target, input, options)` and the middleware's
/// `{target, input?, instanceKey?, timeoutMs?, metadata?}` are the same
/// object on the wire.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AgentCall {
    target: String,
    #[serde(default)]
    input: Option<String>,
    event_type: Option<String>,
    instance_key: Option<String>,
    metadata: Option<JsonObject>,
    timeout_ms: Option<u64>,
    r#async: Option<bool>,
}

impl AgentCall {
    /// The routing key the agents API takes: `target`, or
    /// `target:instanceKey`.
    fn address(&self) -> String {
        match &self.instance_key {
            Some(instance) => format!("{}:{instance}", self.target),
            None => self.target.clone(),
        }
    }
}

/// The agents API of one running call, with who calls and where in the
/// trace.
pub(crate) struct AgentCalls<'c> {
    /// The agents API of the calling agent.
    pub(crate) agents: &'c dyn AgentsApi,
    /// The calling agent's name (the event's source).
    pub(crate) caller: &'c str,
    /// The span the call's event hangs under.
    pub(crate) trace: &'c TraceContext,
}

impl AgentCalls<'_> {
    /// The event a request or send carries: the caller's trace, its span
    /// as parent, the target instance.
    fn event(&self, call: &AgentCall, default_type: &str) -> AgentEvent {
        let mut event = AgentEvent::new(
            call.event_type
                .clone()
                .unwrap_or_else(|| default_type.to_string()),
            EventSource::new(EventSourceKind::Agent, self.caller),
        );
        event.input = Some(call.input.clone().unwrap_or_default());
        event.trace_id = Some(self.trace.trace_id.clone());
        event.parent_span_id = Some(self.trace.span_id.clone());
        event.instance_key = call.instance_key.clone();
        event.metadata = call.metadata.clone();
        event
    }

    /// Serves `method` (`agents.request`, `agents.send` or
    /// `agents.catalog`).
    pub(crate) async fn serve(
        &self,
        method: &str,
        params: JsonValue,
    ) -> Result<JsonValue, RpcError> {
        let call = || -> Result<AgentCall, RpcError> {
            serde_json::from_value(params.clone()).map_err(|error| {
                RpcError::new(
                    error_codes::INVALID_PARAMS,
                    format!("`{method}` needs a `target` (and text as `input`): {error}"),
                )
            })
        };
        match method {
            methods::AGENTS_REQUEST => {
                let call = call()?;
                let event = self.event(&call, "agent.request");
                let options = AgentRuntimeRequestOptions {
                    timeout_ms: call.timeout_ms,
                    r#async: call.r#async,
                };
                let result = self
                    .agents
                    .request(&call.address(), event, options)
                    .await
                    .map_err(agents_error)?;
                encoded(result)
            }
            methods::AGENTS_SEND => {
                let call = call()?;
                let event = self.event(&call, "agent.send");
                let result = self
                    .agents
                    .send(&call.address(), event)
                    .await
                    .map_err(agents_error)?;
                encoded(result)
            }
            methods::AGENTS_CATALOG => encoded(self.agents.catalog().await.map_err(agents_error)?),
            other => Err(RpcError::new(
                error_codes::METHOD_NOT_FOUND,
                format!("`{other}` is not a method of the agents API"),
            )),
        }
    }
}

/// An agents API failure as the script sees it: a rejected promise (a
/// raised exception in Python) whose `code` is the error's.
fn agents_error(error: AgentsError) -> RpcError {
    RpcError {
        code: error_codes::USER_ERROR,
        message: error.to_string(),
        data: Some(serde_json::json!({
            "code": error.code(),
            "name": "AgentsError",
            "suggestion": error.suggestion(),
        })),
    }
}

fn encoded<T: serde::Serialize>(value: T) -> Result<JsonValue, RpcError> {
    serde_json::to_value(value)
        .map_err(|error| RpcError::new(error_codes::USER_ERROR, error.to_string()))
}
