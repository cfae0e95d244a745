//! The MCP server of `gdn mcp serve`: a running swarm as MCP tools, one
//! per agent, named after it, taking `{ text, instanceKey? }` and
//! answering with the agent's reply as text content.
//!
//! The server reaches the swarm only through [`SwarmTurns`]: the binary
//! implements it over the orchestrator's control socket, which this crate
//! cannot name (it sits left of the orchestrator in the crate flow). A
//! failed Turn is a tool result with `isError: true` whose text starts
//! with its code. Two transports share [`answer`]:
//!
//! * [`stdio::serve`]: JSON-RPC lines over any reader and writer (stdio
//!   for `gdn mcp serve`, in-memory pipes in tests). Calls run
//!   concurrently; `notifications/cancelled` cancels a call; a call with
//!   a `progressToken` hears `notifications/progress` while it runs.
//! * [`http::router`]: streamable HTTP with sessions; progress as an event
//!   stream, `notifications/cancelled` and `DELETE` cancel calls, a
//!   dropped connection does not.
//!
//! Cancelling a call drops the future [`SwarmTurns::ask`] returned, which
//! cancels its Turn in the swarm (`E_TURN_CANCELLED`: a model call or
//! tool call in progress is abandoned, what the Turn stored is kept).

pub mod http;
pub mod stdio;

use crate::jsonrpc::{self, INVALID_PARAMS, METHOD_NOT_FOUND};
use crate::{PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS};
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use std::sync::Arc;

/// One agent offered as a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTool {
    /// The agent's name, which is the tool's name.
    pub name: String,
    /// What the tool description says about it.
    pub description: Option<String>,
}

/// Why a Turn gave no answer: the orchestrator's refusal or the Turn's own
/// failure, with its code (`E_ORCHESTRATOR_NOT_RUNNING`, `E_AGENT_BACKOFF`,
/// ...) and how to recover.
pub type TurnFailure = goondan_types::ErrorBody;

/// The swarm as the server sees it.
pub trait SwarmTurns: Send + Sync {
    /// The agents to offer, in order.
    fn agents(&self) -> Vec<AgentTool>;

    /// Runs one Turn of `agent` on `text` (in instance `instance_key`, else
    /// the swarm's) and returns the answer's text. Dropping the future
    /// before it resolves cancels the Turn.
    fn ask(
        &self,
        agent: String,
        text: String,
        instance_key: Option<String>,
    ) -> BoxFuture<'static, Result<String, TurnFailure>>;

    /// What a person must decide before a Turn of `agent` goes on (an
    /// approval it waits for), said in the progress notifications of its
    /// call; `None` when nothing waits.
    fn waiting_for(&self, _agent: &str) -> Option<String> {
        None
    }
}

/// The server's name in `initialize`.
const SERVER_NAME: &str = "goondan";

fn initialize(id: Value, params: &Value) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    let version = asked
        .filter(|asked| SUPPORTED_PROTOCOL_VERSIONS.contains(asked))
        .unwrap_or(PROTOCOL_VERSION);
    jsonrpc::result(
        id,
        json!({
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": false}},
            "serverInfo": {"name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION")},
        }),
    )
}

fn tool(agent: &AgentTool) -> Value {
    let description = agent.description.clone().unwrap_or_else(|| {
        format!(
            "Send a message to agent `{}` of the running swarm and get its answer.",
            agent.name
        )
    });
    json!({
        "name": agent.name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "The message for the agent."},
                "instanceKey": {"type": "string", "description": "The conversation to continue; the swarm's default instance when absent."}
            },
            "required": ["text"],
            "additionalProperties": false
        }
    })
}

/// The answer to request `method`: the JSON-RPC response to send.
/// `tools/call` runs a Turn and resolves when it ends.
pub async fn answer(turns: Arc<dyn SwarmTurns>, id: Value, method: &str, params: Value) -> Value {
    match method {
        "initialize" => initialize(id, &params),
        "ping" => jsonrpc::result(id, json!({})),
        "tools/list" => jsonrpc::result(
            id,
            json!({"tools": turns.agents().iter().map(tool).collect::<Vec<_>>()}),
        ),
        "tools/call" => call(turns, id, params).await,
        _ => jsonrpc::error(
            id,
            METHOD_NOT_FOUND,
            &format!("method `{method}` is not supported"),
        ),
    }
}

async fn call(turns: Arc<dyn SwarmTurns>, id: Value, params: Value) -> Value {
    let agent = params.get("name").and_then(Value::as_str).unwrap_or("");
    if !turns.agents().iter().any(|known| known.name == agent) {
        return jsonrpc::error(id, INVALID_PARAMS, &format!("unknown tool `{agent}`"));
    }
    let arguments = params.get("arguments").cloned().unwrap_or(Value::Null);
    let text = arguments.get("text").and_then(Value::as_str);
    let instance_key = arguments.get("instanceKey").and_then(Value::as_str);
    let key_ok = arguments
        .get("instanceKey")
        .is_none_or(|_| instance_key.is_some());
    let (Some(text), true) = (text, key_ok) else {
        return jsonrpc::result(
            id,
            error_content(
                "E_MCP_INVALID_ARGS",
                "`text` must be a string, and `instanceKey` a string when given",
                None,
            ),
        );
    };
    let turn = turns.ask(
        agent.to_string(),
        text.to_string(),
        instance_key.map(str::to_string),
    );
    let content = match turn.await {
        Ok(text) => json!({"content": [{"type": "text", "text": text}], "isError": false}),
        Err(failure) => {
            // A store or orchestrator failure may name paths of this
            // machine; the client gets it without them.
            let failure = failure.for_port();
            error_content(
                &failure.code,
                &failure.message,
                failure.suggestion.as_deref(),
            )
        }
    };
    jsonrpc::result(id, content)
}

fn error_content(code: &str, message: &str, suggestion: Option<&str>) -> Value {
    let mut text = format!("error[{code}]: {message}");
    if let Some(suggestion) = suggestion {
        text.push_str("\nhelp: ");
        text.push_str(suggestion);
    }
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}
