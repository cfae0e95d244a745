//! The streamable HTTP transport: every message is a POST to the
//! endpoint; the answer to a request comes back as one JSON body or in a
//! `text/event-stream` that may carry notifications before it. The
//! session id the server hands out at `initialize` (`Mcp-Session-Id`) and
//! the negotiated `MCP-Protocol-Version` go with every later request.
//!
//!
//! Once the session is initialized, [`HttpTransport::listen`] opens the
//! optional GET stream on which the server sends messages of its own
//! (`notifications/tools/list_changed` between requests); it reconnects
//! with backoff when the stream ends, and stops for good when the server
//! says it offers none (405) or forgot the session (404), or when the
//! transport is dropped.

use crate::jsonrpc::{Incoming, MAX_MESSAGE_BYTES};
use crate::McpError;
use futures_util::StreamExt;
use goondan_types::backoff::Backoff;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use serde_json::Value;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;

/// The waits before the GET stream is opened again: 500 ms, doubling up
/// to 30 s while the server keeps failing.
const LISTEN_BACKOFF: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

type Reply = Result<Value, (i64, String)>;

pub(super) struct HttpTransport {
    server: String,
    url: String,
    client: reqwest::Client,
    headers: HeaderMap,
    session_id: Mutex<Option<String>>,
    protocol_version: Mutex<Option<String>>,
    notifications: mpsc::UnboundedSender<String>,
    /// The GET stream's task, stopped with the transport.
    listener: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for HttpTransport {
    fn drop(&mut self) {
        if let Some(listener) = self
            .listener
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
        {
            listener.abort();
        }
    }
}

impl HttpTransport {
    pub(super) fn new(
        server: &str,
        url: &str,
        headers: &[(String, String)],
        notifications: mpsc::UnboundedSender<String>,
    ) -> Result<HttpTransport, McpError> {
        let invalid = |message: String| McpError::Config {
            message: format!("servers.{server}: {message}"),
        };
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            let name = HeaderName::try_from(name.as_str())
                .map_err(|_| invalid(format!("`{name}` is not a header name")))?;
            // The value may be a secret: never echo it.
            let mut value = HeaderValue::try_from(value.as_str())
                .map_err(|_| invalid(format!("headers.{name} is not a valid header value")))?;
            value.set_sensitive(true);
            map.insert(name, value);
        }
        let client = reqwest::Client::builder()
            .build()
            .map_err(|error| McpError::Unavailable {
                server: server.to_string(),
                message: format!("building the HTTP client: {error}"),
            })?;
        Ok(HttpTransport {
            server: server.to_string(),
            url: url.to_string(),
            client,
            headers: map,
            session_id: Mutex::new(None),
            protocol_version: Mutex::new(None),
            notifications,
            listener: Mutex::new(None),
        })
    }

    /// Opens the GET stream for the server's own messages, in a task that
    /// lives as long as this transport.
    pub(super) fn listen(&self) {
        let request = self.with_session_headers(
            self.client
                .get(&self.url)
                .headers(self.headers.clone())
                .header(ACCEPT, "text/event-stream"),
        );
        let task = tokio::spawn(listen(
            self.server.clone(),
            request,
            self.notifications.clone(),
        ));
        *self
            .listener
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(task.abort_handle());
    }

    /// `request` with the session id and protocol version, once known.
    fn with_session_headers(
        &self,
        mut request: reqwest::RequestBuilder,
    ) -> reqwest::RequestBuilder {
        let session_id = self
            .session_id
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        if let Some(session_id) = session_id {
            request = request.header(SESSION_HEADER, session_id);
        }
        let version = self
            .protocol_version
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        if let Some(version) = version {
            request = request.header(VERSION_HEADER, version);
        }
        request
    }

    pub(super) fn set_protocol_version(&self, version: &str) {
        *self
            .protocol_version
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(version.to_string());
    }

    fn unavailable(&self, message: String) -> McpError {
        McpError::Unavailable {
            server: self.server.clone(),
            message,
        }
    }

    async fn post(&self, message: &Value) -> Result<reqwest::Response, McpError> {
        let request = self.with_session_headers(
            self.client
                .post(&self.url)
                .headers(self.headers.clone())
                .header(ACCEPT, "application/json, text/event-stream")
                .header(CONTENT_TYPE, "application/json")
                .json(message),
        );
        let response = request
            .send()
            .await
            .map_err(|error| self.unavailable(format!("POST {}: {error}", self.url)))?;
        let status = response.status();
        if !status.is_success() {
            // A 404 for a known session means the server forgot it: the
            // next call starts a new session, as the specification asks.
            return Err(self.unavailable(format!("POST {} answered {status}", self.url)));
        }
        if let Some(session_id) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|value| value.to_str().ok())
        {
            *self
                .session_id
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(session_id.to_string());
        }
        Ok(response)
    }

    pub(super) async fn notify(&self, message: &Value) -> Result<(), McpError> {
        self.post(message).await.map(drop)
    }

    pub(super) async fn request(&self, id: u64, message: &Value) -> Result<Reply, McpError> {
        let response = self.post(message).await?;
        let event_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("text/event-stream"));
        if !event_stream {
            let body = response
                .bytes()
                .await
                .map_err(|error| self.unavailable(format!("reading the answer: {error}")))?;
            let value: Value =
                serde_json::from_slice(&body).map_err(|error| McpError::Protocol {
                    peer: self.server.clone(),
                    message: format!("the answer is not JSON: {error}"),
                })?;
            let messages = match value {
                Value::Array(batch) => batch,
                single => vec![single],
            };
            for message in messages {
                if let Some(reply) = self.take(id, message) {
                    return Ok(reply);
                }
            }
            return Err(McpError::Protocol {
                peer: self.server.clone(),
                message: format!("the answer holds no response to request {id}"),
            });
        }
        match read_events(response, |message| self.take(id, message)).await {
            Ok(Some(reply)) => Ok(reply),
            Ok(None) => Err(self.unavailable(format!(
                "the stream ended before the response to request {id}"
            ))),
            Err(problem) => Err(self.unavailable(problem)),
        }
    }

    /// The reply if `message` answers request `id`; a notification is
    /// forwarded, anything else ignored.
    fn take(&self, id: u64, message: Value) -> Option<Reply> {
        match Incoming::classify(message)? {
            Incoming::Response {
                id: answered,
                outcome,
            } if answered.as_u64() == Some(id) => Some(outcome),
            Incoming::Notification { method, .. } => {
                let _ = self.notifications.send(method);
                None
            }
            _ => None,
        }
    }
}

/// Reads the JSON messages of an event stream, handing each to `handle`
/// until it returns something (`Some`), or the stream ends (`None`).
/// `Err` says what broke the stream.
async fn read_events<T>(
    response: reqwest::Response,
    mut handle: impl FnMut(Value) -> Option<T>,
) -> Result<Option<T>, String> {
    let mut stream = response.bytes_stream();
    let mut decoder = goondan_types::sse::SseDecoder::default();
    // Bytes fed since the last event ended: what the decoder may hold.
    let mut unfinished = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| format!("reading the stream: {error}"))?;
        let events = decoder.feed(&chunk);
        unfinished = if events.is_empty() {
            unfinished + chunk.len()
        } else {
            chunk.len()
        };
        if unfinished > MAX_MESSAGE_BYTES {
            return Err("an event exceeds the size limit".into());
        }
        for event in events {
            let Ok(message) = serde_json::from_str::<Value>(&event.data) else {
                continue;
            };
            if let Some(found) = handle(message) {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

/// The GET stream's task: forwards the server's notifications until the
/// server says it has no stream for this session, or nobody listens.
async fn listen(
    server: String,
    request: reqwest::RequestBuilder,
    notifications: mpsc::UnboundedSender<String>,
) {
    // Failures since the stream last opened.
    let mut failures = 0;
    loop {
        let Some(attempt) = request.try_clone() else {
            return;
        };
        match attempt.send().await {
            Ok(response) if response.status().is_success() => {
                failures = 0;
                let forwarded =
                    read_events(response, |message| match Incoming::classify(message) {
                        Some(Incoming::Notification { method, .. }) => {
                            notifications.send(method).err().map(drop)
                        }
                        _ => None,
                    })
                    .await;
                match forwarded {
                    // Nobody takes notifications any more.
                    Ok(Some(())) => return,
                    Ok(None) => {}
                    Err(problem) => {
                        tracing::debug!(server, "mcp: the GET stream broke: {problem}")
                    }
                }
            }
            Ok(response) if response.status().is_client_error() => {
                // 405: no stream offered; 404: the session is gone (the
                // next request starts a new one, which listens anew).
                tracing::debug!(server, status = %response.status(), "mcp: no GET stream");
                return;
            }
            Ok(response) => {
                tracing::debug!(server, status = %response.status(), "mcp: the GET stream failed")
            }
            Err(error) => tracing::debug!(server, "mcp: the GET stream failed: {error}"),
        }
        if notifications.is_closed() {
            return;
        }
        tokio::time::sleep(LISTEN_BACKOFF.delay(failures)).await;
        failures += 1;
    }
}
