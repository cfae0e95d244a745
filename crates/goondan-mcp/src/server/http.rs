//! The server over streamable HTTP (`gdn mcp serve --http ADDR`): one
//! endpoint, `/mcp`.
//!
//! * `POST`: one JSON-RPC message per body. A request is answered with
//!   one `application/json` response, except a `tools/call` that asks for
//!   progress (`_meta.progressToken`) from a client that accepts
//!   `text/event-stream`: that one is answered with an event stream of
//!   `notifications/progress` every [`PROGRESS_INTERVAL`] while its Turn
//!   runs, then the response. A notification or response gets 202.
//! * `DELETE`: ends the session named by `Mcp-Session-Id`, cancelling its
//!   calls still running.
//! * `GET`: 405; the server never speaks first, so it offers no stream of
//!   its own.
//!
//! `initialize` opens a session: its answer carries an `Mcp-Session-Id`,
//! which later requests may send back (a request naming a session the
//! server does not know gets 404, so the client starts a new one).
//! Clients that send none are served too. `notifications/cancelled` stops
//! the call with that request id in the same session (or among calls made
//! without one) and with it its Turn, which fails with
//! `E_TURN_CANCELLED`; the cancelled call's POST is answered with a
//! JSON-RPC error ([`REQUEST_CANCELLED`]). A client that merely drops its
//! connection does not cancel anything (as the specification asks): the
//! Turn finishes in the swarm and its answer is discarded.
//!
//! Guards, before any JSON is read: a bearer token when one is configured
//! (compared in constant time), and an `Origin` that, when present, must
//! name a loopback host unless remote clients are allowed (the
//! specification's defence against DNS rebinding of a local server).

use super::stdio::{with_progress, PROGRESS_INTERVAL};
use super::{answer, SwarmTurns};
use crate::jsonrpc::{self, Incoming, PARSE_ERROR};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// The path of the endpoint.
pub const ENDPOINT: &str = "/mcp";

/// The header carrying the session id.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// The JSON-RPC error code answering a call that was cancelled (the one
/// the Language Server Protocol uses for it; MCP defines none).
pub const REQUEST_CANCELLED: i64 = -32800;

/// How many sessions are remembered; opening one more forgets the oldest
/// (its client is told with 404 and starts again).
pub const MAX_SESSIONS: usize = 1024;

/// Who may call the endpoint.
#[derive(Debug, Clone, Default)]
pub struct HttpAccess {
    /// Requests must carry `Authorization: Bearer <token>`.
    pub bearer_token: Option<String>,
    /// Whether an `Origin` other than a loopback host is accepted.
    pub allow_remote_origins: bool,
}

/// A running call: its session (empty without one) and request id.
type CallKey = (String, String);

#[derive(Default)]
struct Sessions {
    /// Open sessions, oldest first.
    open: VecDeque<String>,
    /// Calls running, to cancel.
    calls: HashMap<CallKey, tokio::task::AbortHandle>,
}

struct Shared {
    turns: Arc<dyn SwarmTurns>,
    access: HttpAccess,
    progress_interval: Duration,
    sessions: Mutex<Sessions>,
}

impl Shared {
    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The largest request body: one JSON-RPC message with a tool call's
/// text, the same bound as a line typed at `gdn run`.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The endpoint as an axum router; serve it with `axum::serve`. A body
/// over [`MAX_BODY_BYTES`] is refused with 413 before it is read whole.
pub fn router(turns: Arc<dyn SwarmTurns>, access: HttpAccess) -> Router {
    router_with_progress(turns, access, PROGRESS_INTERVAL)
}

/// [`router`], telling running calls about progress every
/// `progress_interval` (tests shorten it).
pub fn router_with_progress(
    turns: Arc<dyn SwarmTurns>,
    access: HttpAccess,
    progress_interval: Duration,
) -> Router {
    Router::new()
        .route(ENDPOINT, post(handle).delete(end_session).get(no_stream))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(Arc::new(Shared {
            turns,
            access,
            progress_interval,
            sessions: Mutex::default(),
        }))
}

/// Refuses what the guards refuse: a missing or wrong bearer token (401),
/// a foreign `Origin` (403), a session the server does not know (404).
/// Otherwise the session the request names, if any.
fn admit(shared: &Shared, headers: &HeaderMap) -> Result<Option<String>, StatusCode> {
    if let Some(token) = &shared.access.bearer_token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .unwrap_or("");
        if !same_secret(given.as_bytes(), token.as_bytes()) {
            return Err(StatusCode::UNAUTHORIZED);
        }
    }
    if !shared.access.allow_remote_origins {
        let origin = headers
            .get(header::ORIGIN)
            .map(|value| value.to_str().unwrap_or(""));
        if origin.is_some_and(|origin| !is_loopback_origin(origin)) {
            return Err(StatusCode::FORBIDDEN);
        }
    }
    let Some(session) = headers.get(SESSION_HEADER) else {
        return Ok(None);
    };
    let session = session.to_str().unwrap_or("");
    if shared.sessions().open.iter().any(|open| open == session) {
        Ok(Some(session.to_string()))
    } else {
        Err(StatusCode::NOT_FOUND)
    }
}

/// The answer to a request [`admit`] refused; a 401 says which scheme.
fn refusal(status: StatusCode) -> Response {
    if status == StatusCode::UNAUTHORIZED {
        return (status, [(header::WWW_AUTHENTICATE, "Bearer")]).into_response();
    }
    status.into_response()
}

async fn handle(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let session = match admit(&shared, &headers) {
        Ok(session) => session,
        Err(refused) => return refusal(refused),
    };
    let message = match serde_json::from_slice::<Value>(&body) {
        Ok(value) => Incoming::classify(value),
        Err(_) => {
            return json_response(jsonrpc::error(Value::Null, PARSE_ERROR, "not JSON"));
        }
    };
    match message {
        Some(Incoming::Request { id, method, params }) if method == "tools/call" => {
            let streams = headers
                .get(header::ACCEPT)
                .and_then(|accept| accept.to_str().ok())
                .is_some_and(|accept| accept.contains("text/event-stream"));
            call(shared, session.unwrap_or_default(), id, params, streams).await
        }
        Some(Incoming::Request { id, method, params }) if method == "initialize" => {
            let mut response =
                json_response(answer(shared.turns.clone(), id, &method, params).await);
            let session = open_session(&shared);
            if let Ok(value) = HeaderValue::from_str(&session) {
                response.headers_mut().insert(SESSION_HEADER, value);
            }
            response
        }
        Some(Incoming::Request { id, method, params }) => {
            json_response(answer(shared.turns.clone(), id, &method, params).await)
        }
        Some(Incoming::Notification { method, params }) => {
            if method == "notifications/cancelled" {
                if let Some(request_id) = params.get("requestId") {
                    let key = (session.unwrap_or_default(), request_id.to_string());
                    if let Some(call) = shared.sessions().calls.remove(&key) {
                        call.abort();
                    }
                }
            }
            StatusCode::ACCEPTED.into_response()
        }
        Some(Incoming::Response { .. }) => StatusCode::ACCEPTED.into_response(),
        None => json_response(jsonrpc::error(
            Value::Null,
            jsonrpc::INVALID_REQUEST,
            "not a JSON-RPC message",
        )),
    }
}

fn open_session(shared: &Shared) -> String {
    let session = goondan_types::trace::random_hex(16);
    let mut sessions = shared.sessions();
    if sessions.open.len() == MAX_SESSIONS {
        sessions.open.pop_front();
    }
    sessions.open.push_back(session.clone());
    session
}

/// Runs a `tools/call` in its own task, so that a dropped connection
/// leaves its Turn running and `notifications/cancelled` can stop it.
async fn call(
    shared: Arc<Shared>,
    session: String,
    id: Value,
    params: Value,
    streams: bool,
) -> Response {
    // Progress needs a stream, so only a client that accepts one hears it.
    let progress_token = params
        .pointer("/_meta/progressToken")
        .filter(|token| token.is_string() || token.is_number())
        .cloned()
        .filter(|_| streams);
    let streamed = progress_token.is_some();
    let key: CallKey = (session, id.to_string());
    let (messages, mut received) = mpsc::channel::<Value>(16);
    let task_shared = shared.clone();
    let task_key = key.clone();
    let cancelled_answer =
        jsonrpc::error(id.clone(), REQUEST_CANCELLED, "the request was cancelled");
    {
        // Locked before the task exists, so it cannot remove its entry
        // before the entry is made.
        let mut sessions = shared.sessions();
        let task = tokio::spawn(async move {
            let agent = params
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let turn = answer(task_shared.turns.clone(), id, "tools/call", params);
            let response = match progress_token {
                None => turn.await,
                Some(token) => {
                    let interval = task_shared.progress_interval;
                    with_progress(turn, &messages, token, &agent, interval).await
                }
            };
            task_shared.sessions().calls.remove(&task_key);
            let _ = messages.send(response).await;
        });
        sessions.calls.insert(key, task.abort_handle());
    }
    if !streamed {
        let response = received.recv().await.unwrap_or(cancelled_answer);
        return json_response(response);
    }
    // The stream ends after the response, or with the task when the call
    // is cancelled (then the cancellation error ends it).
    let events = futures_util::stream::unfold(
        (received, Some(cancelled_answer)),
        |(mut received, cancelled)| async move {
            let message = match received.recv().await {
                Some(message) => {
                    let last = message.get("id").is_some();
                    (message, if last { None } else { cancelled })
                }
                None => (cancelled?, None),
            };
            let event = Event::default()
                .event("message")
                .data(message.0.to_string());
            Some((
                Ok::<_, std::convert::Infallible>(event),
                (received, message.1),
            ))
        },
    );
    Sse::new(events).into_response()
}

/// `DELETE`: ends the session named by the request, cancelling its calls.
async fn end_session(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let session = match admit(&shared, &headers) {
        Ok(Some(session)) => session,
        Ok(None) => return StatusCode::BAD_REQUEST.into_response(),
        Err(refused) => return refusal(refused),
    };
    let mut sessions = shared.sessions();
    sessions.open.retain(|open| *open != session);
    let ended: Vec<CallKey> = sessions
        .calls
        .keys()
        .filter(|(owner, _)| *owner == session)
        .cloned()
        .collect();
    for key in ended {
        if let Some(call) = sessions.calls.remove(&key) {
            call.abort();
        }
    }
    StatusCode::OK.into_response()
}

/// `GET`: this server offers no stream of its own.
async fn no_stream(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    match admit(&shared, &headers) {
        Ok(_) => (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST, DELETE")],
        )
            .into_response(),
        Err(refused) => refusal(refused),
    }
}

fn json_response(message: Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        message.to_string(),
    )
        .into_response()
}

/// Compares two secrets without stopping at the first difference.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |difference, (a, b)| difference | (a ^ b))
            == 0
}

/// Whether `origin` (`scheme://host[:port]`) names a loopback host.
fn is_loopback_origin(origin: &str) -> bool {
    let Some((_, rest)) = origin.split_once("://") else {
        return false;
    };
    let host = if let Some(bracketed) = rest.strip_prefix('[') {
        bracketed.split(']').next().unwrap_or("")
    } else {
        rest.split([':', '/']).next().unwrap_or("")
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_origins_pass() {
        let cases = [
            ("http://localhost:3000", true),
            ("http://127.0.0.1", true),
            ("https://[::1]:8080", true),
            ("http://127.9.9.9:1", true),
            ("https://evil.example", false),
            ("http://localhost.evil.example", false),
            ("null", false),
        ];
        for (origin, expected) in cases {
            assert_eq!(is_loopback_origin(origin), expected, "{origin}");
        }
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abd", b"abc"));
        assert!(!same_secret(b"ab", b"abc"));
    }
}
