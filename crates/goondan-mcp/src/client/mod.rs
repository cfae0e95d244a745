//! The MCP client: a [`Session`] with one server over stdio or streamable
//! HTTP. A session is initialized once, then carries requests, each with a
//! deadline; a request whose future is dropped or runs out of time is
//! cancelled with `notifications/cancelled`. Notifications the server
//! sends (`notifications/tools/list_changed`) come out of the channel
//! given to [`Session::connect`].
//!
//! A session does not reconnect: when it breaks
//! ([`McpError::breaks_connection`]) its owner drops it and connects a
//! new one (see [`crate::extension`]).

pub mod config;
mod http;
mod stdio;

pub(crate) use stdio::read_line;

pub use config::{McpConfig, ResolvedServer, ServerConfig, TransportConfig};

use crate::{jsonrpc, McpError, PROTOCOL_VERSION};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// A tool as the server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    /// Its MCP name.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// Its `inputSchema`.
    pub input_schema: serde_json::Map<String, Value>,
}

/// The transports a session runs over.
enum Transport {
    Stdio(stdio::StdioTransport),
    Http(http::HttpTransport),
}

/// A live, initialized connection to one MCP server.
pub struct Session {
    server: String,
    transport: Transport,
    next_id: AtomicU64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// Sends `notifications/cancelled` for a request whose caller stopped
/// waiting (a deadline, or the Turn dropped the call), unless disarmed.
struct CancelOnDrop {
    session: Arc<Session>,
    id: u64,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.session.forget(self.id);
        let session = self.session.clone();
        let id = self.id;
        // Dropped outside a runtime only at process exit, when there is no
        // one left to tell.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let cancelled = jsonrpc::notification(
                    "notifications/cancelled",
                    json!({"requestId": id, "reason": "the caller stopped waiting"}),
                );
                let _ = session.send_notification(cancelled).await;
            });
        }
    }
}

impl Session {
    /// Starts or reaches `server`, then runs the `initialize` handshake
    /// within its deadline. Server notifications are sent, by method, to
    /// `notifications`.
    pub async fn connect(
        server: &ResolvedServer,
        notifications: mpsc::UnboundedSender<String>,
    ) -> Result<Arc<Session>, McpError> {
        let transport =
            match &server.transport {
                TransportConfig::Stdio {
                    command,
                    args,
                    env,
                    cwd,
                } => Transport::Stdio(stdio::StdioTransport::spawn(
                    &server.name,
                    command,
                    args,
                    env,
                    cwd.as_deref(),
                    notifications,
                )?),
                TransportConfig::Http { url, headers } => Transport::Http(
                    http::HttpTransport::new(&server.name, url, headers, notifications)?,
                ),
            };
        let session = Arc::new(Session {
            server: server.name.clone(),
            transport,
            next_id: AtomicU64::new(1),
        });
        let initialized = session
            .request(
                "initialize",
                json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "goondan", "version": env!("CARGO_PKG_VERSION")},
                }),
                server.connect_timeout,
            )
            .await?;
        let Some(version) = initialized.get("protocolVersion").and_then(Value::as_str) else {
            return Err(McpError::Protocol {
                peer: server.name.clone(),
                message: "the initialize result has no protocolVersion".into(),
            });
        };
        if let Transport::Http(http) = &session.transport {
            http.set_protocol_version(version);
        }
        session
            .send_notification(jsonrpc::notification(
                "notifications/initialized",
                Value::Null,
            ))
            .await?;
        if let Transport::Http(http) = &session.transport {
            http.listen();
        }
        Ok(session)
    }

    /// The server's name in the config.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Whether the connection has ended (the process exited, the stream
    /// closed); such a session only fails.
    pub fn is_closed(&self) -> bool {
        match &self.transport {
            Transport::Stdio(stdio) => stdio.is_closed(),
            Transport::Http(_) => false,
        }
    }

    /// Sends request `method` and waits at most `timeout` for its result.
    pub async fn request(
        self: &Arc<Self>,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, McpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let message = jsonrpc::request(id, method, params);
        let mut guard = CancelOnDrop {
            session: self.clone(),
            id,
            // `initialize` cannot be cancelled (the specification says so).
            armed: method != "initialize",
        };
        let exchange = async {
            match &self.transport {
                Transport::Stdio(stdio) => stdio.request(id, &message).await,
                Transport::Http(http) => http.request(id, &message).await,
            }
        };
        let outcome = match tokio::time::timeout(timeout, exchange).await {
            Ok(outcome) => outcome,
            Err(_) => {
                return Err(McpError::Timeout {
                    server: self.server.clone(),
                    method: method.to_string(),
                    timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                })
            }
        };
        guard.armed = false;
        match outcome? {
            Ok(result) => Ok(result),
            Err((code, message)) => Err(McpError::Call {
                server: self.server.clone(),
                method: method.to_string(),
                message: format!("{message} (JSON-RPC error {code})"),
            }),
        }
    }

    async fn send_notification(&self, message: Value) -> Result<(), McpError> {
        match &self.transport {
            Transport::Stdio(stdio) => stdio.send(&message).await,
            Transport::Http(http) => http.notify(&message).await,
        }
    }

    fn forget(&self, id: u64) {
        if let Transport::Stdio(stdio) = &self.transport {
            stdio.forget(id);
        }
    }

    /// Every tool the server lists, following `nextCursor`.
    pub async fn list_tools(self: &Arc<Self>, timeout: Duration) -> Result<Vec<McpTool>, McpError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            let page = self.request("tools/list", params, timeout).await?;
            let Some(items) = page.get("tools").and_then(Value::as_array) else {
                return Err(self.protocol("the tools/list result has no `tools` array"));
            };
            for item in items {
                let Some(name) = item.get("name").and_then(Value::as_str) else {
                    return Err(self.protocol("a listed tool has no name"));
                };
                tools.push(McpTool {
                    name: name.to_string(),
                    description: item
                        .get("description")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    input_schema: item
                        .get("inputSchema")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_else(|| {
                            json!({"type": "object"})
                                .as_object()
                                .cloned()
                                .unwrap_or_default()
                        }),
                });
            }
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_string);
            if cursor.is_none() {
                return Ok(tools);
            }
        }
    }

    /// Calls tool `name`. A result with `isError: true` is an
    /// [`McpError::Call`] carrying the result's text; otherwise the output
    /// is the `structuredContent` when there is one, the text when every
    /// content part is text, else the `content` array.
    pub async fn call_tool(
        self: &Arc<Self>,
        name: &str,
        arguments: serde_json::Map<String, Value>,
        timeout: Duration,
    ) -> Result<Value, McpError> {
        let result = self
            .request(
                "tools/call",
                json!({"name": name, "arguments": arguments}),
                timeout,
            )
            .await?;
        tool_output(&self.server, name, result)
    }

    fn protocol(&self, message: &str) -> McpError {
        McpError::Protocol {
            peer: self.server.clone(),
            message: message.to_string(),
        }
    }
}

/// What a `tools/call` result means to the agent; see
/// [`Session::call_tool`].
fn tool_output(server: &str, tool: &str, mut result: Value) -> Result<Value, McpError> {
    let content = result
        .get_mut("content")
        .map(Value::take)
        .unwrap_or(Value::Array(Vec::new()));
    let texts: Option<Vec<&str>> = content.as_array().and_then(|parts| {
        parts
            .iter()
            .map(|part| {
                (part.get("type").and_then(Value::as_str) == Some("text"))
                    .then(|| part.get("text").and_then(Value::as_str))
                    .flatten()
            })
            .collect()
    });
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let message = match &texts {
            Some(texts) if !texts.is_empty() => texts.join("\n"),
            _ => content.to_string(),
        };
        return Err(McpError::Call {
            server: server.to_string(),
            method: tool.to_string(),
            message,
        });
    }
    if let Some(structured) = result.get_mut("structuredContent") {
        return Ok(structured.take());
    }
    Ok(match texts {
        Some(texts) => Value::String(texts.join("\n")),
        None => content,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_results_become_outputs_or_call_errors() {
        let cases = [
            (
                json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
                Ok(json!("a\nb")),
            ),
            (
                json!({"content": [{"type": "text", "text": "x"}], "structuredContent": {"n": 1}}),
                Ok(json!({"n": 1})),
            ),
            (
                json!({"content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}]}),
                Ok(json!([{"type": "image", "data": "AA==", "mimeType": "image/png"}])),
            ),
            (
                json!({"content": [{"type": "text", "text": "no such file"}], "isError": true}),
                Err("no such file".to_string()),
            ),
        ];
        for (result, expected) in cases {
            let outcome = tool_output("s", "t", result.clone()).map_err(|error| match error {
                McpError::Call { message, .. } => message,
                other => other.to_string(),
            });
            assert_eq!(outcome, expected, "{result}");
        }
    }
}
