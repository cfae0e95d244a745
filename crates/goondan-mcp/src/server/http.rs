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
//! Guards, before any JSON is read, are every port's
//! (`goondan_http::access`): a bearer token when one is configured, and an
//! `Origin` and a `Host` that name this server unless remote clients are
//! allowed (the defence against DNS rebinding of a local server).
//!
//! Sessions are held per client (its address as the accept loop reports
//! it, `goondan_http::client_of`): a client at
//! [`MAX_SESSIONS_PER_CLIENT`] that opens another forgets its own oldest,
//! and when [`MAX_SESSIONS`] are open a new one is refused
//! (`E_MCP_SESSION_LIMIT`, 503) unless one has been idle for
//! [`SESSION_IDLE`]. So no client can open sessions until another
//! client's is forgotten.

use super::stdio::{with_progress, PROGRESS_INTERVAL};
use super::{answer, SwarmTurns};
use crate::jsonrpc::{self, Incoming, PARSE_ERROR};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
pub use goondan_http::access::HttpAccess;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// The path of the endpoint.
pub const ENDPOINT: &str = "/mcp";

/// The header carrying the session id.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// The JSON-RPC error code answering a call that was cancelled (the one
/// the Language Server Protocol uses for it; MCP defines none).
pub const REQUEST_CANCELLED: i64 = -32800;

/// How many sessions are remembered in all; when they are, a new one is
/// refused (`E_MCP_SESSION_LIMIT`) unless one has been idle for
/// [`SESSION_IDLE`], never another client's active one forgotten.
pub const MAX_SESSIONS: usize = 1024;

/// How many sessions one client may hold; opening one more forgets its
/// own oldest (its client is told with 404 and starts again). Clients
/// open one or a few; a client behind a proxy counts as the proxy.
pub const MAX_SESSIONS_PER_CLIENT: usize = 32;

/// How long a session must go unused before it may be forgotten to make
/// room for another client's.
pub const SESSION_IDLE: Duration = Duration::from_secs(60 * 60);

/// The code of the answer refusing a session when [`MAX_SESSIONS`] are
/// open and none is idle.
pub const SESSION_LIMIT_CODE: &str = "E_MCP_SESSION_LIMIT";

/// A running call: its session (empty without one) and request id.
type CallKey = (String, String);

/// How many sessions are kept, in all and per client, and when an unused
/// one may give way.
#[derive(Debug, Clone, Copy)]
struct SessionLimits {
    total: usize,
    per_client: usize,
    idle: Duration,
}

const SESSION_LIMITS: SessionLimits = SessionLimits {
    total: MAX_SESSIONS,
    per_client: MAX_SESSIONS_PER_CLIENT,
    idle: SESSION_IDLE,
};

struct OpenSession {
    id: String,
    client: IpAddr,
    last_used: Instant,
}

/// Every session open is in use and the table is full.
#[derive(Debug, PartialEq, Eq)]
struct SessionsFull;

struct Sessions {
    limits: SessionLimits,
    /// Open sessions, oldest first.
    open: VecDeque<OpenSession>,
    /// Calls running, to cancel.
    calls: HashMap<CallKey, tokio::task::AbortHandle>,
    /// Their answers once given, for a request sent again with the same
    /// id in the same session (a client that lost the first connection).
    answers: HashMap<CallKey, watch::Receiver<Option<Value>>>,
}

impl Sessions {
    fn new(limits: SessionLimits) -> Sessions {
        Sessions {
            limits,
            open: VecDeque::new(),
            calls: HashMap::new(),
            answers: HashMap::new(),
        }
    }

    /// Opens `id` for `client`, making room only from what that client
    /// holds or from a session idle for `limits.idle`.
    fn open(&mut self, id: String, client: IpAddr, now: Instant) -> Result<(), SessionsFull> {
        let held = self
            .open
            .iter()
            .filter(|open| open.client == client)
            .count();
        if held >= self.limits.per_client {
            let oldest_own = self.open.iter().position(|open| open.client == client);
            if let Some(oldest_own) = oldest_own {
                self.open.remove(oldest_own);
            }
        } else if self.open.len() >= self.limits.total {
            let least_recent = (0..self.open.len()).min_by_key(|&index| self.open[index].last_used);
            match least_recent {
                Some(index)
                    if now.saturating_duration_since(self.open[index].last_used)
                        >= self.limits.idle =>
                {
                    self.open.remove(index);
                }
                _ => return Err(SessionsFull),
            }
        }
        self.open.push_back(OpenSession {
            id,
            client,
            last_used: now,
        });
        Ok(())
    }

    /// Whether `id` is open; marks it used at `now`.
    fn touch(&mut self, id: &str, now: Instant) -> bool {
        match self.open.iter_mut().find(|open| open.id == id) {
            Some(open) => {
                open.last_used = now;
                true
            }
            None => false,
        }
    }
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
            sessions: Mutex::new(Sessions::new(SESSION_LIMITS)),
        }))
}

/// The client a request comes from, as the accept loop reported it
/// (`goondan_http::serve`); a server without one counts every request as
/// one client.
type Peer = Option<Extension<ConnectInfo<SocketAddr>>>;

fn client_of(peer: &Peer) -> IpAddr {
    match peer {
        Some(Extension(ConnectInfo(address))) => goondan_http::client_of(address.ip()),
        None => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// Refuses what the guards refuse: a missing or wrong bearer token (401),
/// a foreign `Origin` or `Host` (403), a session the server does not know
/// (404). Otherwise the session the request names, if any.
fn admit(shared: &Shared, headers: &HeaderMap) -> Result<Option<String>, StatusCode> {
    shared.access.admit(headers)?;
    let Some(session) = headers.get(SESSION_HEADER) else {
        return Ok(None);
    };
    let session = session.to_str().unwrap_or("");
    if shared.sessions().touch(session, Instant::now()) {
        Ok(Some(session.to_string()))
    } else {
        Err(StatusCode::NOT_FOUND)
    }
}

use goondan_http::access::refusal;

async fn handle(
    State(shared): State<Arc<Shared>>,
    peer: Peer,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
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
            let session = goondan_types::trace::random_hex(16);
            let opened = shared
                .sessions()
                .open(session.clone(), client_of(&peer), Instant::now());
            if opened.is_err() {
                return session_limit_refusal(id);
            }
            let mut response =
                json_response(answer(shared.turns.clone(), id, &method, params).await);
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
                    let call = {
                        let mut sessions = shared.sessions();
                        sessions.answers.remove(&key);
                        sessions.calls.remove(&key)
                    };
                    if let Some(call) = call {
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

/// The answer to an `initialize` that found every session in use: 503
/// with a JSON-RPC error whose message starts with its code, as a failed
/// Turn's text does.
fn session_limit_refusal(id: Value) -> Response {
    let suggestion =
        "try again later; clients that end their sessions (DELETE /mcp) leave room for others";
    let mut refusal = jsonrpc::error(
        id,
        SERVER_BUSY,
        &format!("error[{SESSION_LIMIT_CODE}]: all {MAX_SESSIONS} MCP sessions are in use"),
    );
    refusal["error"]["data"] = json!({"code": SESSION_LIMIT_CODE, "suggestion": suggestion});
    let mut response = json_response(refusal);
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response
}

/// The JSON-RPC error code of a refusal for lack of room (the range
/// JSON-RPC leaves to servers).
const SERVER_BUSY: i64 = -32000;

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
    let running = {
        // Locked before the task exists, so it cannot remove its entry
        // before the entry is made.
        let mut sessions = shared.sessions();
        // The same request again (same id, same session) while it runs:
        // its one answer, not a second Turn.
        match sessions.answers.get(&key).cloned() {
            Some(answer) => Some(answer),
            None => {
                let (answered, answer_of_call) = watch::channel(None);
                sessions.answers.insert(key.clone(), answer_of_call);
                let task = tokio::spawn(async move {
                    let agent = params
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    let waiting = {
                        let (turns, agent) = (task_shared.turns.clone(), agent.clone());
                        move || turns.waiting_for(&agent)
                    };
                    let turn = answer(task_shared.turns.clone(), id, "tools/call", params);
                    let response = match progress_token {
                        None => turn.await,
                        Some(token) => {
                            let interval = task_shared.progress_interval;
                            with_progress(turn, &messages, token, &agent, interval, waiting).await
                        }
                    };
                    {
                        let mut sessions = task_shared.sessions();
                        sessions.calls.remove(&task_key);
                        sessions.answers.remove(&task_key);
                    }
                    answered.send_replace(Some(response.clone()));
                    let _ = messages.send(response).await;
                });
                sessions.calls.insert(key, task.abort_handle());
                None
            }
        }
    };
    if let Some(answer) = running {
        return joined(answer, cancelled_answer).await;
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

/// The answer of a call already running for the same request, as one
/// JSON response; `cancelled` when it was cancelled before it answered.
async fn joined(mut answer: watch::Receiver<Option<Value>>, cancelled: Value) -> Response {
    let response = match answer.wait_for(Option::is_some).await {
        Ok(response) => response.clone().unwrap_or(cancelled),
        Err(_) => cancelled,
    };
    json_response(response)
}

/// `DELETE`: ends the session named by the request, cancelling its calls.
async fn end_session(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let session = match admit(&shared, &headers) {
        Ok(Some(session)) => session,
        Ok(None) => return StatusCode::BAD_REQUEST.into_response(),
        Err(refused) => return refusal(refused),
    };
    let mut sessions = shared.sessions();
    sessions.open.retain(|open| open.id != session);
    let ended: Vec<CallKey> = sessions
        .calls
        .keys()
        .filter(|(owner, _)| *owner == session)
        .cloned()
        .collect();
    for key in ended {
        sessions.answers.remove(&key);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_over_its_cap_forgets_only_its_own_oldest_session() {
        let limits = SessionLimits {
            total: 4,
            per_client: 2,
            idle: Duration::from_secs(60),
        };
        let mut sessions = Sessions::new(limits);
        let now = Instant::now();
        let (victim, flooder): (IpAddr, IpAddr) =
            ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        sessions.open("v1".into(), victim, now).unwrap();
        for n in 0..10 {
            sessions.open(format!("f{n}"), flooder, now).unwrap();
        }
        assert!(sessions.touch("v1", now), "the victim's session survives");
        assert!(!sessions.touch("f7", now), "the flooder's own oldest went");
        assert!(sessions.touch("f8", now) && sessions.touch("f9", now));
    }

    #[test]
    fn a_full_table_refuses_a_new_client_unless_a_session_is_idle() {
        let limits = SessionLimits {
            total: 2,
            per_client: 2,
            idle: Duration::from_secs(60),
        };
        let mut sessions = Sessions::new(limits);
        let start = Instant::now();
        let client = |last: u8| IpAddr::from([192, 0, 2, last]);
        sessions.open("a".into(), client(1), start).unwrap();
        sessions.open("b".into(), client(2), start).unwrap();
        assert_eq!(
            sessions.open("c".into(), client(3), start),
            Err(SessionsFull)
        );
        assert!(sessions.touch("a", start + Duration::from_secs(30)));
        let later = start + Duration::from_secs(61);
        sessions.open("c".into(), client(3), later).unwrap();
        assert!(!sessions.touch("b", later), "the idle one made room");
        assert!(sessions.touch("a", later) && sessions.touch("c", later));
    }
}
