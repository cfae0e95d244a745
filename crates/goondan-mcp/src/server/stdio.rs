//! The server over a byte stream: JSON-RPC lines in, JSON-RPC lines out
//! (stdio for `gdn mcp serve`). Requests other than `tools/call` are
//! answered in order; each `tools/call` runs in its own task, so a long
//! Turn does not hold up `ping` or other calls, and
//! `notifications/cancelled` aborts its task (no answer is sent for it).

use super::{answer, SwarmTurns};
use crate::jsonrpc::{self, Incoming, PARSE_ERROR};
use crate::McpError;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// How many answers may wait for the writer.
const OUTBOX: usize = 64;

/// The calls running, by their request id (as JSON text).
type InFlight = Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>>;

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
    let in_flight: InFlight = Arc::default();
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    while crate::client::read_line(&mut reader, &mut line)
        .await
        .is_some()
    {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(value) = serde_json::from_slice::<Value>(&line) else {
            let _ = outbox
                .send(jsonrpc::error(Value::Null, PARSE_ERROR, "not JSON"))
                .await;
            continue;
        };
        match Incoming::classify(value) {
            Some(Incoming::Request { id, method, params }) if method == "tools/call" => {
                start_call(&turns, &outbox, &in_flight, id, params);
            }
            Some(Incoming::Request { id, method, params }) => {
                let response = answer(turns.clone(), id, &method, params).await;
                let _ = outbox.send(response).await;
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

/// Runs one `tools/call` in its own task; its answer goes to `outbox`
/// when the Turn ends, unless it was cancelled first.
fn start_call(
    turns: &Arc<dyn SwarmTurns>,
    outbox: &mpsc::Sender<Value>,
    in_flight: &InFlight,
    id: Value,
    params: Value,
) {
    let key = id.to_string();
    let task_key = key.clone();
    let turns = turns.clone();
    let outbox = outbox.clone();
    let registry = in_flight.clone();
    // Locked before the task exists, so it cannot remove its entry before
    // the entry is made.
    let mut calls = in_flight
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let task = tokio::spawn(async move {
        let response = answer(turns, id, "tools/call", params).await;
        registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&task_key);
        let _ = outbox.send(response).await;
    });
    calls.insert(key, task.abort_handle());
}
