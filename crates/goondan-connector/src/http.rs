//! The HTTP front every webhook platform shares.
//!
//! A request goes through the same gates in the same order whatever the
//! platform, and nothing reaches an agent before all of them pass:
//!
//! 1. the path and method (404, 405);
//! 2. a slot among the concurrent requests (503 when all are taken);
//! 3. the body, bounded in size (413) and in time (408);
//! 4. the platform's signature check ([`Platform::verify`], 401), before
//!    the body is parsed;
//! 5. the platform's parse ([`Platform::handle`], 400 when malformed);
//! 6. the emit, whose answer decides the status: 429 with `Retry-After`
//!    when the instance's queue is full, 503 when the swarm is closing
//!    (a press of an approval button goes to the approval desk instead,
//!    answered the same way).

use crate::config::{ConnectorConfig, ConnectorConfigError};
use crate::verify::SignatureError;
use crate::{EmitError, Emitter};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use goondan_types::ConnectorEvent;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Default bound on a request body (`MAX_BODY_BYTES`): 1 MiB, far above
/// what any of the platforms sends for one event.
pub const DEFAULT_BODY_LIMIT: u64 = 1024 * 1024;
/// Default time to receive a body (`BODY_TIMEOUT_SECONDS`).
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Default number of requests served at once (`MAX_CONCURRENT_REQUESTS`).
pub const DEFAULT_MAX_CONCURRENT: u64 = 256;
/// Default number of open connections (`MAX_CONNECTIONS`); one more is
/// closed as soon as it is accepted.
pub const DEFAULT_MAX_CONNECTIONS: u64 = 1024;
/// Default time a connection has to send a request's head
/// (`HEADER_TIMEOUT_SECONDS`), so one that says nothing, or trickles its
/// head a byte at a time, cannot hold a connection.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// One request, as a platform sees it: headers and the whole body.
#[derive(Debug, Clone, Copy)]
pub struct PlatformRequest<'a> {
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// The body, complete and within the limit.
    pub body: &'a [u8],
    /// When it arrived (what timestamps are checked against).
    pub now: SystemTime,
}

impl PlatformRequest<'_> {
    /// A header's value, when present and visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// What to answer the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformReply {
    /// The status.
    pub status: StatusCode,
    /// The body's media type.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl PlatformReply {
    /// 200 with a JSON body.
    pub fn json(value: serde_json::Value) -> Self {
        PlatformReply {
            status: StatusCode::OK,
            content_type: "application/json",
            body: value.to_string(),
        }
    }

    /// 200 with a plain-text body.
    pub fn text(body: impl Into<String>) -> Self {
        PlatformReply {
            status: StatusCode::OK,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }

    fn error(status: StatusCode, message: impl std::fmt::Display) -> Self {
        PlatformReply {
            status,
            content_type: "application/json",
            body: serde_json::json!({ "ok": false, "error": message.to_string() }).to_string(),
        }
    }
}

impl IntoResponse for PlatformReply {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(self.content_type),
        );
        response
    }
}

/// What a verified request becomes.
#[derive(Debug, Clone, PartialEq)]
pub enum PlatformOutcome {
    /// An event to emit, and the answer once it is accepted.
    Emit {
        /// The event.
        event: ConnectorEvent,
        /// The answer after a successful emit.
        reply: PlatformReply,
    },
    /// An event to emit, answered (once accepted) with 200 and the JSON
    /// object `body` plus `"target"`: where the rules sent the event.
    EmitAndTell {
        /// The event.
        event: ConnectorEvent,
        /// The answer, before `target` is added.
        body: serde_json::Map<String, serde_json::Value>,
    },
    /// A press of an approval button, for the approval desk (never an
    /// event), and the answer once the desk took it.
    Press {
        /// The press.
        press: crate::press::Press,
        /// The answer after the desk took it.
        reply: PlatformReply,
    },
    /// An answer with no event (a ping, a challenge, an ignored kind).
    Reply(PlatformReply),
}

/// The answer to send once the event is accepted.
enum AcceptedReply {
    Fixed(PlatformReply),
    Tell(serde_json::Map<String, serde_json::Value>),
}

/// A body the platform cannot read; answered with 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

/// One platform behind the front: its signature scheme and its payloads.
pub trait Platform: Send + Sync + 'static {
    /// The connector's name, for logs.
    fn name(&self) -> &'static str;
    /// Checks the request's signature (and replay window) before anything
    /// reads the body.
    fn verify(&self, request: &PlatformRequest<'_>) -> Result<(), SignatureError>;
    /// Turns a verified request into an event or an answer.
    fn handle(&self, request: &PlatformRequest<'_>) -> Result<PlatformOutcome, BadRequest>;
    /// The swarm did not accept the event `handle` made of `request` (a
    /// full queue answered 429, a stop): whatever marked the request as
    /// seen is forgotten, so the platform's retry is taken rather than
    /// refused as a replay. A delivery is seen only once it is accepted.
    fn not_accepted(&self, request: &PlatformRequest<'_>) {
        let _ = request;
    }
}

/// Where and how a platform listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpFront {
    /// The address to bind (`HOST`, `PORT`).
    pub addr: SocketAddr,
    /// The one path that takes posts.
    pub path: String,
    /// The largest body accepted (`MAX_BODY_BYTES`).
    pub body_limit: u64,
    /// How long a body may take to arrive (`BODY_TIMEOUT_SECONDS`).
    pub body_timeout: Duration,
    /// How many requests are served at once (`MAX_CONCURRENT_REQUESTS`).
    pub max_concurrent: u64,
    /// How many connections may be open (`MAX_CONNECTIONS`).
    pub max_connections: u64,
    /// How many of them one client may hold
    /// (`MAX_CONNECTIONS_PER_CLIENT`, default a quarter of
    /// `MAX_CONNECTIONS`), so one sender's idle connections cannot shut
    /// out the platform's.
    pub max_connections_per_client: u64,
    /// How long a request's head may take to arrive
    /// (`HEADER_TIMEOUT_SECONDS`).
    pub header_timeout: Duration,
}

impl HttpFront {
    /// The front a Connection's config describes: the port from the first
    /// of `port_keys` set (else `default_port`), the path from the first
    /// of `path_keys` (else `default_path`), and the shared limits.
    pub fn from_config(
        config: &ConnectorConfig,
        port_keys: &[&str],
        default_port: u16,
        path_keys: &[&str],
        default_path: &str,
    ) -> Result<HttpFront, ConnectorConfigError> {
        let max_connections = config.number("MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS)?;
        Ok(HttpFront {
            addr: SocketAddr::new(config.host()?, config.port(port_keys, default_port)?),
            path: config.path(path_keys, default_path),
            body_limit: config.number("MAX_BODY_BYTES", DEFAULT_BODY_LIMIT)?,
            body_timeout: config.seconds("BODY_TIMEOUT_SECONDS", DEFAULT_BODY_TIMEOUT)?,
            max_concurrent: config.number("MAX_CONCURRENT_REQUESTS", DEFAULT_MAX_CONCURRENT)?,
            max_connections,
            max_connections_per_client: config.number(
                "MAX_CONNECTIONS_PER_CLIENT",
                goondan_http::default_per_client(max_connections),
            )?,
            header_timeout: config.seconds("HEADER_TIMEOUT_SECONDS", DEFAULT_HEADER_TIMEOUT)?,
        })
    }

    /// Refuses to start a front that anyone could post to unsigned: one on
    /// a non-loopback address with no secret set (named `secret_key` in
    /// the error), unless the config says `ALLOW_UNSIGNED: "true"`.
    pub fn refuse_unsigned_off_loopback(
        &self,
        config: &ConnectorConfig,
        has_secret: bool,
        secret_key: &str,
    ) -> Result<(), ConnectorConfigError> {
        if has_secret || self.addr.ip().is_loopback() || config.flag("ALLOW_UNSIGNED")? {
            return Ok(());
        }
        Err(ConnectorConfigError {
            key: secret_key.to_string(),
            problem: format!(
                "the connector listens on {} without a secret, so anyone who reaches it can start turns",
                self.addr
            ),
            help: format!(
                "set secrets.{secret_key}, listen on 127.0.0.1 (the default HOST), or set config.ALLOW_UNSIGNED: \"true\""
            ),
        })
    }

    /// Binds the address; the listener is then served by [`serve`].
    pub async fn bind(&self) -> std::io::Result<TcpListener> {
        TcpListener::bind(self.addr).await
    }
}

struct Shared {
    front: HttpFront,
    platform: Arc<dyn Platform>,
    emitter: Arc<dyn Emitter>,
    slots: Semaphore,
}

/// Serves `platform` on `listener` until `shutdown` resolves, then lets
/// requests in progress finish; the accept loop (connection cap, header
/// timeout) is `goondan_http::serve`.
pub async fn serve(
    listener: TcpListener,
    front: HttpFront,
    platform: Arc<dyn Platform>,
    emitter: Arc<dyn Emitter>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let path = front.path.clone();
    let limits = goondan_http::AcceptLimits {
        max_connections_per_client: front.max_connections_per_client,
        ..goondan_http::AcceptLimits::new(front.max_connections, front.header_timeout)
    };
    let slots = Semaphore::new(usize::try_from(front.max_concurrent).unwrap_or(usize::MAX));
    let shared = Arc::new(Shared {
        front,
        platform,
        emitter,
        slots,
    });
    let router = Router::new()
        .route(&path, post(receive))
        .fallback(|| async { PlatformReply::error(StatusCode::NOT_FOUND, "no such path") })
        .with_state(shared);
    goondan_http::serve(listener, router, limits, shutdown).await
}

async fn receive(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    answer(&shared, headers, body).await
}

async fn answer(shared: &Shared, headers: HeaderMap, body: Body) -> Response {
    let name = shared.platform.name();
    let Ok(_slot) = shared.slots.try_acquire() else {
        return PlatformReply::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many requests in progress",
        )
        .into_response();
    };
    let limit = shared.front.body_limit;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return too_large(limit).into_response();
    }
    let read = axum::body::to_bytes(body, usize::try_from(limit).unwrap_or(usize::MAX));
    let body = match tokio::time::timeout(shared.front.body_timeout, read).await {
        Err(_) => {
            return PlatformReply::error(
                StatusCode::REQUEST_TIMEOUT,
                "the body took too long to arrive",
            )
            .into_response()
        }
        // Over the limit, or the sender hung up half way.
        Ok(Err(_)) => return too_large(limit).into_response(),
        Ok(Ok(body)) => body,
    };
    let request = PlatformRequest {
        headers: &headers,
        body: &body,
        now: SystemTime::now(),
    };
    if let Err(error) = shared.platform.verify(&request) {
        tracing::warn!(connector = name, "request refused: {error}");
        return PlatformReply::error(StatusCode::UNAUTHORIZED, error).into_response();
    }
    let (event, reply) = match shared.platform.handle(&request) {
        Err(error) => return PlatformReply::error(StatusCode::BAD_REQUEST, error).into_response(),
        Ok(PlatformOutcome::Reply(reply)) => return reply.into_response(),
        Ok(PlatformOutcome::Press { press, reply }) => {
            return match shared.emitter.press(press).await {
                Ok(()) => reply.into_response(),
                Err(error) => refused(name, error),
            };
        }
        Ok(PlatformOutcome::Emit { event, reply }) => (event, AcceptedReply::Fixed(reply)),
        Ok(PlatformOutcome::EmitAndTell { event, body }) => (event, AcceptedReply::Tell(body)),
    };
    let emitted = shared.emitter.emit(event).await;
    if emitted.is_err() {
        shared.platform.not_accepted(&request);
    }
    match emitted {
        Ok(accepted) => match reply {
            AcceptedReply::Fixed(reply) => reply.into_response(),
            AcceptedReply::Tell(mut body) => {
                body.insert("target".into(), accepted.target.into());
                PlatformReply::json(serde_json::Value::Object(body)).into_response()
            }
        },
        Err(error) => refused(name, error),
    }
}

/// The answer to a request whose event (or press) the swarm did not take.
fn refused(name: &str, error: EmitError) -> Response {
    match error {
        error @ EmitError::QueueFull(_) => {
            let mut response =
                PlatformReply::error(StatusCode::TOO_MANY_REQUESTS, error).into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
        error @ EmitError::Closed(_) => {
            PlatformReply::error(StatusCode::SERVICE_UNAVAILABLE, error).into_response()
        }
        error @ EmitError::Refused(_) => {
            tracing::error!(connector = name, "{error}");
            PlatformReply::error(StatusCode::INTERNAL_SERVER_ERROR, error).into_response()
        }
    }
}

fn too_large(limit: u64) -> PlatformReply {
    PlatformReply::error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the body is over {limit} bytes (MAX_BODY_BYTES) or was cut short"),
    )
}
