//! The stdio transport: the server is a child process reading JSON-RPC
//! lines on stdin and writing them on stdout. A reader task matches
//! responses to waiting requests by id, answers the server's `ping`, and
//! forwards notifications; the child's stderr goes to this process's log
//! at debug level, line by line.
//!
//! The child's environment is the allow-list every tool process gets
//! (`goondan_runtime::tool::environment`: `PATH`, `HOME`, `LANG`) plus
//! `USER` and `TMPDIR`, plus the config's `env`: like `bash` and plugins,
//! an MCP server sees nothing of the agent's environment it was not given.
//! It leads a process group of its own, killed when the session is
//! dropped or the agent dies.

use crate::jsonrpc::{self, Incoming, MAX_MESSAGE_BYTES};
use crate::McpError;
use goondan_sandbox::{Contained, Containment};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::{mpsc, oneshot};

/// The agent's variables a server inherits beyond the shared allow-list.
const ALSO_INHERITED: [&str; 2] = ["USER", "TMPDIR"];

type Reply = Result<Value, (i64, String)>;
type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>;

pub(super) struct StdioTransport {
    server: String,
    stdin: Arc<tokio::sync::Mutex<ChildStdin>>,
    pending: Pending,
    closed: Arc<AtomicBool>,
    // Held so the server's process group is killed with the session.
    _server: Contained,
}

impl StdioTransport {
    pub(super) fn spawn(
        server: &str,
        command: &str,
        args: &[String],
        env: &[(String, String)],
        cwd: Option<&Path>,
        notifications: mpsc::UnboundedSender<String>,
    ) -> Result<StdioTransport, McpError> {
        let build = || {
            let mut process = Command::new(command);
            process
                .args(args)
                .env_clear()
                .envs(
                    goondan_runtime::tool::environment::allow_listed_environment(
                        &ALSO_INHERITED,
                        env,
                    ),
                )
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if let Some(cwd) = cwd {
                process.current_dir(cwd);
            }
            process
        };
        // A process group of its own that dies with the agent (even a
        // kill -9 of it) and with the session; no namespaces: a server is
        // a third-party program that may need to see the host (docker, a
        // browser), unlike a plugin written for Goondan.
        let mut server_process =
            Contained::spawn(build, Containment::ProcessGroup).map_err(|error| {
                McpError::Unavailable {
                    server: server.to_string(),
                    message: format!("starting `{command}`: {error}"),
                }
            })?;
        server_process.kill_on_drop(true);
        let child = server_process.child_mut();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            unreachable!("all three pipes were requested");
        };
        let transport = StdioTransport {
            server: server.to_string(),
            stdin: Arc::new(tokio::sync::Mutex::new(stdin)),
            pending: Arc::default(),
            closed: Arc::default(),
            _server: server_process,
        };
        tokio::spawn(read_messages(
            server.to_string(),
            stdout,
            transport.stdin.clone(),
            transport.pending.clone(),
            transport.closed.clone(),
            notifications,
        ));
        tokio::spawn(log_stderr(server.to_string(), stderr));
        Ok(transport)
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(super) async fn request(&self, id: u64, message: &Value) -> Result<Reply, McpError> {
        let (sender, receiver) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(id, sender);
        // Checked after inserting: the reader sets `closed` before it
        // drains the map, so a request cannot slip in after the drain.
        if self.is_closed() {
            self.forget(id);
            return Err(self.closed_error());
        }
        if let Err(error) = self.send(message).await {
            self.forget(id);
            return Err(error);
        }
        receiver.await.map_err(|_| self.closed_error())
    }

    pub(super) async fn send(&self, message: &Value) -> Result<(), McpError> {
        write_line(&self.stdin, message)
            .await
            .map_err(|error| McpError::Unavailable {
                server: self.server.clone(),
                message: format!("writing to the server: {error}"),
            })
    }

    pub(super) fn forget(&self, id: u64) {
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&id);
    }

    fn closed_error(&self) -> McpError {
        McpError::Unavailable {
            server: self.server.clone(),
            message: "the server process closed its output (it exited or crashed)".into(),
        }
    }
}

async fn write_line(
    stdin: &tokio::sync::Mutex<ChildStdin>,
    message: &Value,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut stdin = stdin.lock().await;
    stdin.write_all(&line).await?;
    stdin.flush().await
}

/// Reads one line of at most [`MAX_MESSAGE_BYTES`]; `None` at the end of
/// the stream or past the bound.
pub(crate) async fn read_line<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    line: &mut Vec<u8>,
) -> Option<()> {
    line.clear();
    let limit = u64::try_from(MAX_MESSAGE_BYTES).unwrap_or(u64::MAX) + 1;
    match reader.take(limit).read_until(b'\n', line).await {
        Ok(0) | Err(_) => None,
        Ok(_) if line.len() > MAX_MESSAGE_BYTES => None,
        Ok(_) => Some(()),
    }
}

async fn read_messages(
    server: String,
    stdout: tokio::process::ChildStdout,
    stdin: Arc<tokio::sync::Mutex<ChildStdin>>,
    pending: Pending,
    closed: Arc<AtomicBool>,
    notifications: mpsc::UnboundedSender<String>,
) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    while read_line(&mut reader, &mut line).await.is_some() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Some(message) = serde_json::from_slice(&line)
            .ok()
            .and_then(Incoming::classify)
        else {
            tracing::warn!(
                code = "E_MCP_PROTOCOL",
                server,
                "ignored a line from the MCP server that is not JSON-RPC"
            );
            continue;
        };
        match message {
            Incoming::Response { id, outcome } => {
                let waiting = id.as_u64().and_then(|id| {
                    pending
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .remove(&id)
                });
                // A response nobody waits for answers a cancelled request.
                if let Some(waiting) = waiting {
                    let _ = waiting.send(outcome);
                }
            }
            Incoming::Notification { method, .. } => {
                let _ = notifications.send(method);
            }
            Incoming::Request { id, method, .. } => {
                // The client offers no capabilities, so `ping` is the only
                // request a server may send it.
                let answer = if method == "ping" {
                    jsonrpc::result(id, serde_json::json!({}))
                } else {
                    jsonrpc::error(
                        id,
                        jsonrpc::METHOD_NOT_FOUND,
                        "not supported by this client",
                    )
                };
                let _ = write_line(&stdin, &answer).await;
            }
        }
    }
    closed.store(true, Ordering::Release);
    // Dropping the senders fails every request still waiting.
    pending
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clear();
}

async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(server, "mcp server stderr: {line}");
    }
}
