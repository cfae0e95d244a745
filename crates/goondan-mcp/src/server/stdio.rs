//! The server over a byte stream: JSON-RPC lines in, JSON-RPC lines out
//! (stdio for `gdn mcp serve`). Requests other than `tools/call` are
//! answered in order; each `tools/call` runs in its own task, so a long
//! Turn does not hold up `ping` or other calls, and
//! `notifications/cancelled` aborts its task, cancelling its Turn (no
//! answer is sent for it).
//! A call that asks for progress (`_meta.progressToken`) gets a
//! `notifications/progress` every [`PROGRESS_INTERVAL`] while its Turn
//! runs, so a client that resets its request timeout on progress does not
//! give up on a long Turn.

use super::{answer, SwarmTurns};
use crate::jsonrpc::{self, Incoming, PARSE_ERROR};
use crate::McpError;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// How many answers may wait for the writer.
const OUTBOX: usize = 64;

/// The calls running, by their request id (as JSON text).
type InFlight = Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>>;

/// How often a running call that asked for progress is told about it.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// Serves MCP on `input`/`output` until `input` ends. Calls still running
/// then are cancelled: the client that made them is gone.
pub async fn serve<R, W>(turns: Arc<dyn SwarmTurns>, input: R, output: W) -> Result<(), McpError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_with_progress(turns, input, output, PROGRESS_INTERVAL).await
}

/// [`serve`], telling running calls about progress every
/// `progress_interval` (tests shorten it).
pub async fn serve_with_progress<R, W>(
    turns: Arc<dyn SwarmTurns>,
    input: R,
    mut output: W,
    progress_interval: Duration,
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
                start_call(&turns, &outbox, &in_flight, progress_interval, id, params);
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
    progress_interval: Duration,
    id: Value,
    params: Value,
) {
    let progress_token = params
        .pointer("/_meta/progressToken")
        .filter(|token| token.is_string() || token.is_number())
        .cloned();
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
    if calls.contains_key(&key) {
        // The same request again while it runs: the one answer its id
        // gets answers it, never a second Turn.
        tracing::debug!(id = %key, "tools/call sent again while it runs; not started twice");
        return;
    }
    let task = tokio::spawn(async move {
        let agent = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let waiting = {
            let (turns, agent) = (turns.clone(), agent.clone());
            move || turns.waiting_for(&agent)
        };
        let turn = answer(turns, id, "tools/call", params);
        let response = match progress_token {
            None => turn.await,
            Some(token) => {
                with_progress(turn, &outbox, token, &agent, progress_interval, waiting).await
            }
        };
        registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&task_key);
        let _ = outbox.send(response).await;
    });
    calls.insert(key, task.abort_handle());
}

/// Awaits `turn`, sending a `notifications/progress` for `token` every
/// `interval` until it ends; each says what a person must decide for the
/// Turn to go on (`waiting`), when anything.
pub(super) async fn with_progress(
    turn: impl std::future::Future<Output = Value>,
    outbox: &mpsc::Sender<Value>,
    token: Value,
    agent: &str,
    interval: Duration,
    waiting: impl Fn() -> Option<String>,
) -> Value {
    let mut turn = std::pin::pin!(turn);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let mut progress = 0u64;
    loop {
        tokio::select! {
            response = &mut turn => return response,
            _ = ticks.tick() => {
                progress += 1;
                let elapsed = interval.saturating_mul(u32::try_from(progress).unwrap_or(u32::MAX));
                let notification = jsonrpc::notification(
                    "notifications/progress",
                    json!({
                        "progressToken": token,
                        "progress": progress,
                        "message": waiting().unwrap_or_else(|| {
                            format!("agent `{agent}` is still working ({} s)", elapsed.as_secs())
                        }),
                    }),
                );
                let _ = outbox.send(notification).await;
            }
        }
    }
}
