//! The control socket: a Unix socket under the state root's `runtime/`
//! folder through which `gdn restart`, `gdn instance ...` and a second
//! `gdn run` (attach) talk to a running orchestrator.
//!
//! Protocol: one JSON request line ([`ControlRequest`], at most
//! [`MAX_REQUEST_BYTES`]), one JSON response line ([`ControlResponse`],
//! tagged by `result`), per connection.

use crate::ingress::Ingress;
use crate::orchestrator::InstanceStatus;
use crate::{OrchestratorError, OrchestratorHandle};
use goondan_ipc::framing::{self, LineRead};
use goondan_types::AgentEvent;
use serde::{Deserialize, Serialize};
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

/// The answer to a [`ControlRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum ControlResponse {
    /// Answers [`ControlRequest::Status`].
    #[serde(rename_all = "camelCase")]
    Status {
        /// The swarm.
        swarm: String,
        /// Its instance key.
        instance_key: String,
        /// Its entry agent.
        entry_agent: String,
        /// The orchestrator's pid.
        pid: u32,
        /// The IPC protocol version it speaks.
        protocol_version: u32,
        /// Messages from children refused as malformed so far.
        #[serde(default)]
        refused_malformed: u64,
        /// Messages from children refused as unknown so far.
        #[serde(default)]
        refused_unknown: u64,
    },
    /// Answers [`ControlRequest::Request`].
    Answer {
        /// The agent's answer event.
        response: Box<AgentEvent>,
    },
    /// Answers [`ControlRequest::Restart`].
    Restarted {
        /// The restarted keys.
        restarted: Vec<String>,
    },
    /// Answers [`ControlRequest::List`].
    Instances {
        /// Every known instance.
        instances: Vec<InstanceStatus>,
    },
    /// Answers [`ControlRequest::Delete`].
    Deleted {
        /// True when a process was running.
        stopped: bool,
    },
    /// Answers [`ControlRequest::Shutdown`]: the drain has begun.
    Stopping,
    /// The request failed.
    Failed {
        /// A stable code.
        code: String,
        /// What happened.
        message: String,
        /// How to fix it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suggestion: Option<String>,
    },
}

/// The largest control request accepted, in bytes.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;

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
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    let response =
        match framing::read_bounded_line(&mut reader, &mut line, MAX_REQUEST_BYTES).await? {
            LineRead::Eof => return Ok(()),
            LineRead::TooLong(len) => failure(
                "E_CONTROL_BAD_REQUEST",
                &format!("a request of {len} bytes exceeds the {MAX_REQUEST_BYTES}-byte limit"),
            ),
            LineRead::Line => match serde_json::from_slice::<ControlRequest>(&line) {
                Ok(request) => execute(request, &handle).await,
                Err(error) => failure("E_CONTROL_BAD_REQUEST", &error.to_string()),
            },
        };
    let mut bytes = serde_json::to_vec(&response).unwrap_or_default();
    bytes.push(b'\n');
    write.write_all(&bytes).await?;
    write.shutdown().await
}

async fn execute(request: ControlRequest, handle: &OrchestratorHandle) -> ControlResponse {
    let outcome = match request {
        ControlRequest::Status => {
            let swarm = handle.swarm();
            Ok(ControlResponse::Status {
                swarm: swarm.swarm_name.clone(),
                instance_key: swarm.instance_key.clone(),
                entry_agent: swarm.entry_agent.clone(),
                pid: std::process::id(),
                protocol_version: goondan_ipc::PROTOCOL_VERSION,
                refused_malformed: handle.protocol_stats().malformed(),
                refused_unknown: handle.protocol_stats().unknown(),
            })
        }
        ControlRequest::Request { agent, input } => handle
            .ask(Ingress::cli(input, agent), None)
            .await
            .map(|answer| ControlResponse::Answer {
                response: Box::new(answer),
            }),
        ControlRequest::Restart {
            agent,
            instance_key,
            fresh,
        } => handle
            .restart(agent, instance_key, fresh)
            .await
            .map(|restarted| ControlResponse::Restarted { restarted }),
        ControlRequest::List => handle
            .list()
            .await
            .map(|instances| ControlResponse::Instances { instances }),
        ControlRequest::Delete { key } => handle
            .delete(key)
            .await
            .map(|stopped| ControlResponse::Deleted { stopped }),
        ControlRequest::Shutdown => {
            let handle = handle.clone();
            // Answer first; the drain may take the whole grace period.
            tokio::spawn(async move {
                let _ = handle.shutdown().await;
            });
            Ok(ControlResponse::Stopping)
        }
    };
    outcome.unwrap_or_else(|error| ControlResponse::Failed {
        code: error.code().to_string(),
        message: error.to_string(),
        suggestion: error.suggestion(),
    })
}

fn failure(code: &str, message: &str) -> ControlResponse {
    ControlResponse::Failed {
        code: code.to_string(),
        message: message.to_string(),
        suggestion: None,
    }
}

/// Sends one request to the orchestrator listening at `path` and returns
/// its response.
pub async fn call(
    path: &Path,
    request: &ControlRequest,
) -> Result<ControlResponse, OrchestratorError> {
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
