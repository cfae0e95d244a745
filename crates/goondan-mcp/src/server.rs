//! The MCP server of `gdn mcp serve`: a running swarm as MCP tools, one
//! per agent, named after it, taking `{ text, instanceKey? }` and
//! answering with the agent's reply as text content.
//!
//! [`serve`] speaks JSON-RPC lines over any reader and writer (stdio for
//! `gdn mcp serve`, in-memory pipes in tests). It reaches the swarm only
//! through [`SwarmTurns`]: the binary implements it over the
//! orchestrator's control socket, which this crate cannot name (it sits
//! left of the orchestrator in the crate flow). Calls run concurrently;
//! `notifications/cancelled` stops a call's wait (the Turn it started
//! still finishes in the swarm, as a Turn started from `gdn run` does when
//! `gdn run` is interrupted). A failed Turn is a tool result with
//! `isError: true` whose text starts with its code.

use crate::jsonrpc::{self, Incoming, INVALID_PARAMS, METHOD_NOT_FOUND, PARSE_ERROR};
use crate::{McpError, PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS};
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// One agent offered as a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTool {
    /// The agent's name, which is the tool's name.
    pub name: String,
    /// What the tool description says about it.
    pub description: Option<String>,
}

/// Why a Turn gave no answer: the orchestrator's refusal or the Turn's own
/// failure, with its code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnFailure {
    /// The stable code (`E_ORCHESTRATOR_NOT_RUNNING`, `E_AGENT_BACKOFF`, ...).
    pub code: String,
    /// What happened.
    pub message: String,
    /// How to recover.
    pub suggestion: Option<String>,
}

/// The swarm as the server sees it.
pub trait SwarmTurns: Send + Sync {
    /// The agents to offer, in order.
    fn agents(&self) -> Vec<AgentTool>;

    /// Runs one Turn of `agent` on `text` (in instance `instance_key`, else
    /// the swarm's) and returns the answer's text.
    fn ask(
        &self,
        agent: String,
        text: String,
        instance_key: Option<String>,
    ) -> BoxFuture<'static, Result<String, TurnFailure>>;
}

/// The server's name in `initialize`.
const SERVER_NAME: &str = "goondan";
/// How many answers may wait for the writer.
const OUTBOX: usize = 64;

/// Serves MCP on `input`/`output` until `input` ends. Calls still running
/// then are abandoned (their Turns finish in the swarm).
pub async fn serve<R, W>(
    turns: Arc<dyn SwarmTurns>,
    input: R,
    mut output: W,
) -> Result<(), McpError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (outbox, mut outgoing) = mpsc::channel::<Value>(OUTBOX);
    let writer = tokio::spawn(async move {
        while let Some(message) = outgoing.recv().await {
            let mut line = serde_json::to_vec(&message).unwrap_or_default();
            line.push(b'\n');
            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                return;
            }
        }
    });
    let in_flight: Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>> = Arc::default();
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    while crate::client::read_line(&mut reader, &mut line)
        .await
        .is_some()
    {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let message = match serde_json::from_slice::<Value>(&line) {
            Ok(value) => Incoming::classify(value),
            Err(_) => {
                let _ = outbox
                    .send(jsonrpc::error(Value::Null, PARSE_ERROR, "not JSON"))
                    .await;
                continue;
            }
        };
        match message {
            Some(Incoming::Request { id, method, params }) => {
                let answer = match method.as_str() {
                    "initialize" => Some(initialize(id, &params)),
                    "ping" => Some(jsonrpc::result(id, json!({}))),
                    "tools/list" => Some(jsonrpc::result(
                        id,
                        json!({"tools": turns.agents().iter().map(tool).collect::<Vec<_>>()}),
                    )),
                    "tools/call" => {
                        call(&turns, &outbox, &in_flight, id, params);
                        None
                    }
                    _ => Some(jsonrpc::error(
                        id,
                        METHOD_NOT_FOUND,
                        &format!("method `{method}` is not supported"),
                    )),
                };
                if let Some(answer) = answer {
                    let _ = outbox.send(answer).await;
                }
            }
            Some(Incoming::Notification { method, params }) => {
                if method == "notifications/cancelled" {
                    let key = params.get("requestId").map(Value::to_string);
                    let cancelled = key.and_then(|key| {
                        in_flight
                            .lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .remove(&key)
                    });
                    if let Some(call) = cancelled {
                        call.abort();
                    }
                }
            }
            // This server sends no requests, so no response is expected.
            Some(Incoming::Response { .. }) => {}
            None => {
                let _ = outbox
                    .send(jsonrpc::error(
                        Value::Null,
                        jsonrpc::INVALID_REQUEST,
                        "not a JSON-RPC message",
                    ))
                    .await;
            }
        }
    }
    for (_, call) in in_flight
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .drain()
    {
        call.abort();
    }
    drop(outbox);
    let _ = writer.await;
    Ok(())
}

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

/// Starts one `tools/call`; its answer goes to `outbox` when the Turn
/// ends, unless it was cancelled first.
fn call(
    turns: &Arc<dyn SwarmTurns>,
    outbox: &mpsc::Sender<Value>,
    in_flight: &Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>>,
    id: Value,
    params: Value,
) {
    let agent = params.get("name").and_then(Value::as_str).unwrap_or("");
    if !turns.agents().iter().any(|known| known.name == agent) {
        let refusal = jsonrpc::error(id, INVALID_PARAMS, &format!("unknown tool `{agent}`"));
        let outbox = outbox.clone();
        tokio::spawn(async move { outbox.send(refusal).await });
        return;
    }
    let arguments = params.get("arguments").cloned().unwrap_or(Value::Null);
    let text = arguments.get("text").and_then(Value::as_str);
    let instance_key = arguments.get("instanceKey").and_then(Value::as_str);
    let (Some(text), true) = (
        text,
        arguments
            .get("instanceKey")
            .is_none_or(|_| instance_key.is_some()),
    ) else {
        let refusal = jsonrpc::result(
            id,
            error_content(
                "E_MCP_INVALID_ARGS",
                "`text` must be a string, and `instanceKey` a string when given",
                None,
            ),
        );
        let outbox = outbox.clone();
        tokio::spawn(async move { outbox.send(refusal).await });
        return;
    };
    let turn = turns.ask(
        agent.to_string(),
        text.to_string(),
        instance_key.map(str::to_string),
    );
    let outbox = outbox.clone();
    let key = id.to_string();
    let registry = in_flight.clone();
    // The registry is locked before the task can finish and remove itself.
    let mut calls = in_flight
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let task_key = key.clone();
    let task = tokio::spawn(async move {
        let answer = match turn.await {
            Ok(text) => json!({"content": [{"type": "text", "text": text}], "isError": false}),
            Err(failure) => error_content(
                &failure.code,
                &failure.message,
                failure.suggestion.as_deref(),
            ),
        };
        registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&task_key);
        let _ = outbox.send(jsonrpc::result(id, answer)).await;
    });
    calls.insert(key, task.abort_handle());
}

fn error_content(code: &str, message: &str, suggestion: Option<&str>) -> Value {
    let mut text = format!("error[{code}]: {message}");
    if let Some(suggestion) = suggestion {
        text.push_str("\nhelp: ");
        text.push_str(suggestion);
    }
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}
