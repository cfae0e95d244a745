//! The control socket: a Unix socket under the state root's `runtime/`
//! folder through which `gdn restart`, `gdn instance ...` and a second
//! `gdn run` (attach) talk to a running orchestrator.
//!
//! Protocol: one JSON request line, one JSON response line, per
//! connection. Every response has `ok`; failures carry `code` and
//! `message`.

use crate::{OrchestratorError, OrchestratorHandle};
use goondan_types::{AgentEvent, EventSource, EventSourceKind, JsonValue};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::{Path, PathBuf};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// A control request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum ControlRequest {
    /// Who is running.
    Status,
    /// Sends `input` to `agent` (the entry agent when absent) and waits for
    /// the answer.
    Request {
        /// The target agent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
        /// The text input.
        input: String,
    },
    /// Graceful restart of the matching instances.
    Restart {
        /// Only this agent's instances.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
        /// Only this instance key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance_key: Option<String>,
        /// Clear message history first.
        #[serde(default)]
        fresh: bool,
    },
    /// Every live instance.
    List,
    /// Stops the processes of an instance.
    Delete {
        /// `agent:instance` or an instance key.
        key: String,
    },
    /// Drains and stops the orchestrator.
    Shutdown,
}

/// Serves control requests until the listener fails. Removes a stale
/// socket file first.
pub async fn serve(path: PathBuf, handle: OrchestratorHandle) -> Result<(), OrchestratorError> {
    let control_error = |source| OrchestratorError::Control {
        path: path.display().to_string(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(control_error)?;
    }
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(control_error)?;
    loop {
        let (stream, _) = listener.accept().await.map_err(control_error)?;
        let handle = handle.clone();
        tokio::spawn(async move {
            if let Err(error) = answer(stream, handle).await {
                tracing::warn!("control connection failed: {error}");
            }
        });
    }
}

async fn answer(stream: UnixStream, handle: OrchestratorHandle) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let Some(line) = lines.next_line().await? else {
        return Ok(());
    };
    let response = match serde_json::from_str::<ControlRequest>(&line) {
        Ok(request) => execute(request, &handle).await,
        Err(error) => failure("E_CONTROL_BAD_REQUEST", &error.to_string()),
    };
    let mut bytes = serde_json::to_vec(&response).unwrap_or_default();
    bytes.push(b'\n');
    write.write_all(&bytes).await?;
    write.shutdown().await
}

async fn execute(request: ControlRequest, handle: &OrchestratorHandle) -> JsonValue {
    let outcome = match request {
        ControlRequest::Status => {
            let swarm = handle.swarm();
            Ok(json!({
                "swarm": swarm.swarm_name,
                "instanceKey": swarm.instance_key,
                "entryAgent": swarm.entry_agent,
                "pid": std::process::id(),
            }))
        }
        ControlRequest::Request { agent, input } => {
            let mut event = AgentEvent::new(
                "user_message",
                EventSource::new(EventSourceKind::Connector, "cli"),
            );
            event.input = Some(input);
            event.trace_id = Some(goondan_types::trace::new_trace_id());
            handle
                .request(agent, event)
                .await
                .map(|answer| json!({ "response": answer }))
        }
        ControlRequest::Restart {
            agent,
            instance_key,
            fresh,
        } => handle
            .restart(agent, instance_key, fresh)
            .await
            .map(|keys| json!({ "restarted": keys })),
        ControlRequest::List => handle
            .list()
            .await
            .map(|instances| json!({ "instances": instances })),
        ControlRequest::Delete { key } => handle
            .delete(key)
            .await
            .map(|stopped| json!({ "stopped": stopped })),
        ControlRequest::Shutdown => {
            let handle = handle.clone();
            // Answer first; the drain may take the whole grace period.
            tokio::spawn(async move {
                let _ = handle.shutdown().await;
            });
            Ok(json!({ "stopping": true }))
        }
    };
    match outcome {
        Ok(JsonValue::Object(mut body)) => {
            body.insert("ok".into(), JsonValue::Bool(true));
            JsonValue::Object(body)
        }
        Ok(other) => json!({ "ok": true, "value": other }),
        Err(error) => failure(error.code(), &error.to_string()),
    }
}

fn failure(code: &str, message: &str) -> JsonValue {
    json!({ "ok": false, "code": code, "message": message })
}

/// Sends one request to the orchestrator listening at `path` and returns
/// its response.
pub async fn call(path: &Path, request: &ControlRequest) -> Result<JsonValue, OrchestratorError> {
    let control_error = |source| OrchestratorError::Control {
        path: path.display().to_string(),
        source,
    };
    let stream = UnixStream::connect(path).await.map_err(control_error)?;
    let (read, mut write) = stream.into_split();
    let mut bytes = serde_json::to_vec(request).unwrap_or_default();
    bytes.push(b'\n');
    write.write_all(&bytes).await.map_err(control_error)?;
    let mut lines = BufReader::new(read).lines();
    let line = lines
        .next_line()
        .await
        .map_err(control_error)?
        .ok_or_else(|| control_error(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)))?;
    serde_json::from_str(&line)
        .map_err(|error| control_error(std::io::Error::new(std::io::ErrorKind::InvalidData, error)))
}
