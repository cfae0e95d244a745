//! The Studio's HTTP side: the routes (`GET`, `/api/status` among them,
//! and with actions allowed
//! `POST /api/actions/*`: `send`, `decide`, `cancel`, `fork`, `rewind`,
//! `edit`, `rerun`),
//! the access gate in front of them, and the accept loop with its limits.
//!
//! An action passes four checks before it runs, each with its own code:
//! actions are on (`--allow-actions`, else 403 `E_STUDIO_ACTIONS_OFF`),
//! the request carries the token's cookie, on loopback too (401
//! `E_STUDIO_UNAUTHORIZED`), its `Origin` is this Studio (403
//! `E_STUDIO_ORIGIN`), and its `X-Goondan-Csrf` header holds this
//! process's random CSRF token, which only the Studio's own page knows
//! (403 `E_STUDIO_CSRF`). Its body is read up to 64 KiB (413 beyond), and
//! at most [`MAX_ACTIONS`] run at once (of them at most two re-runs of an
//! eval case, which take minutes).
//!
//! The accept loop is the one every port shares (`goondan_http`) rather
//! than `axum::serve`, because the port may face a network: a connection
//! past `max_connections`, or past `max_connections_per_client` from one
//! client, is closed as soon as it is accepted, a request
//! head slower than `header_timeout` or larger than 16 KiB closes its
//! connection, and live streams have their own cap so they cannot take
//! every connection.
//!
//! Reads of logs (a conversation, an instance's events or its history of
//! Turns, a trace) are the
//! heavy requests: each reads at most `Limits::max_read_bytes_per_request`
//! from the end of the logs, and at most `Limits::max_heavy_requests` run
//! at once; one more is answered 503 `E_STUDIO_BUSY` with `Retry-After`,
//! so parallel requests cannot multiply what the Studio holds (issue 35).

use crate::access::{Access, Decision, Refusal, COOKIE_NAME};
use crate::actions::{self, ActionError, Steer, MAX_ACTION_BODY_BYTES};
use crate::data::{self, ReadError};
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use goondan_store::tail::TailLimits;
use goondan_store::StateRoot;
use goondan_types::ErrorBody;
use serde_json::Value;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");
/// Where the page gets the CSRF token when actions are allowed.
const CSRF_PLACEHOLDER: &str = "<!--gdn-actions-->";
/// The header every action carries the CSRF token in.
const CSRF_HEADER: &str = "x-goondan-csrf";
/// Actions running at once; one more is answered 503.
pub const MAX_ACTIONS: usize = 4;

/// The largest request head (request line plus headers) read.
const MAX_REQUEST_HEAD_BYTES: usize = 16 * 1024;
/// How long requests in progress may finish after shutdown began.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Bounds on what one Studio serves at once.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Open connections; one more is closed at once.
    pub max_connections: usize,
    /// Open connections from one client (an IPv4 address or an IPv6 /64);
    /// one more from it is closed at once, so one client's idle
    /// connections cannot take them all.
    pub max_connections_per_client: usize,
    /// Live event streams open at once; one more is answered 503.
    pub max_live_streams: usize,
    /// Time allowed for a request's head to arrive.
    pub header_timeout: Duration,
    /// How often live streams look for new events.
    pub live_poll_interval: Duration,
    /// Reads of logs (conversation, events, trace) running at once; one
    /// more is answered 503.
    pub max_heavy_requests: usize,
    /// Bytes one read of logs may read from the files, at most.
    pub max_read_bytes_per_request: u64,
    /// A longer log line is skipped (and the answer says so), never loaded.
    pub max_line_bytes: usize,
}

impl Limits {
    /// What one read of logs may read and hold.
    fn tail_limits(&self) -> TailLimits {
        TailLimits {
            max_read_bytes: self.max_read_bytes_per_request,
            max_line_bytes: self.max_line_bytes,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 64,
            // A browser opens at most six per host, plus a live stream
            // per open tab.
            max_connections_per_client: 16,
            max_live_streams: 16,
            header_timeout: Duration::from_secs(10),
            live_poll_interval: Duration::from_millis(50),
            max_heavy_requests: 4,
            max_read_bytes_per_request: 32 * 1024 * 1024,
            max_line_bytes: 4 * 1024 * 1024,
        }
    }
}

/// One Studio: what it reads, who may read it, and its limits.
#[derive(Debug, Clone)]
pub struct Studio {
    /// The System Root shown.
    pub state_root: StateRoot,
    /// The gate.
    pub access: Access,
    /// The limits.
    pub limits: Limits,
    /// Whether the page may act (`--allow-actions`): send messages,
    /// decide approvals, cancel a running Turn, fork and rewind. The
    /// access must then have a token
    /// ([`Access::for_address`] with `actions`), or every action is
    /// refused.
    pub actions: bool,
    /// The `gdn` executable the Evals page's Re-run starts as
    /// `gdn eval … --case NAME` (`POST /api/actions/rerun`), in the run's
    /// bundle folder with this Studio's System Root; `gdn studio` sets
    /// its own (`std::env::current_exe()`). With `None` a re-run is
    /// answered 501 `E_STUDIO_RERUN_UNAVAILABLE`.
    pub eval_command: Option<PathBuf>,
}

struct Shared {
    studio: Studio,
    live_streams: Arc<Semaphore>,
    heavy_requests: Arc<Semaphore>,
    actions: Arc<Semaphore>,
    /// Re-runs of eval cases at once, beside their action permits.
    reruns: Arc<Semaphore>,
    /// This process's CSRF token, when actions are allowed.
    csrf: Option<String>,
    /// The page, with the CSRF token in it when actions are allowed.
    index: String,
}

/// The Studio as an axum router, for serving and for in-process tests.
pub fn router(studio: Studio) -> Router {
    let csrf = studio.actions.then(goondan_http::token::generate);
    // The token goes in a `<meta>` tag: the page's CSP allows no inline
    // script, and a cross-site page cannot read this one.
    let page = match &csrf {
        Some(csrf) => INDEX_HTML.replace(
            CSRF_PLACEHOLDER,
            &format!(r#"<meta name="gdn-csrf" content="{csrf}">"#),
        ),
        None => INDEX_HTML.to_string(),
    };
    let shared = Arc::new(Shared {
        live_streams: Arc::new(Semaphore::new(studio.limits.max_live_streams)),
        heavy_requests: Arc::new(Semaphore::new(studio.limits.max_heavy_requests)),
        actions: Arc::new(Semaphore::new(MAX_ACTIONS)),
        reruns: Arc::new(Semaphore::new(crate::rerun::MAX_RERUNS)),
        csrf,
        index: page,
        studio,
    });
    Router::new()
        .route("/", get(index))
        .route("/assets/app.js", get(app_js))
        .route("/assets/app.css", get(app_css))
        .route("/api/swarms", get(swarms))
        .route(
            "/api/swarms/{swarm}/instances/{instance}/conversation",
            get(conversation),
        )
        .route(
            "/api/swarms/{swarm}/instances/{instance}/events",
            get(instance_events),
        )
        .route(
            "/api/swarms/{swarm}/instances/{instance}/history",
            get(instance_history),
        )
        .route(
            "/api/swarms/{swarm}/instances/{instance}/extensions",
            get(instance_extensions),
        )
        .route("/api/swarms/{swarm}/traces/{trace}", get(trace))
        .route("/api/swarms/{swarm}/map", get(swarm_map))
        .route("/api/swarms/{swarm}/live", get(live))
        .route("/api/approvals", get(approvals))
        .route("/api/status", get(status))
        .route("/api/evals", get(eval_runs))
        .route(
            "/api/evals/{run}/{case}/swarms/{swarm}/traces/{trace}",
            get(eval_trace),
        )
        .route("/api/actions/decide", post(decide))
        .route("/api/actions/send", post(send))
        .route("/api/actions/cancel", post(cancel))
        .route("/api/actions/fork", post(fork))
        .route("/api/actions/rewind", post(rewind))
        .route("/api/actions/edit", post(edit))
        .route("/api/actions/rerun", post(rerun))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(shared.clone(), gate))
        .with_state(shared)
}

/// Serves `studio` on `listener` until `shutdown` resolves, through the
/// accept loop every port shares (`goondan_http`), with the Studio's own
/// bounds: a 16 KiB head, and a short drain (live streams never end on
/// their own).
pub async fn serve(
    listener: TcpListener,
    studio: Studio,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = goondan_http::AcceptLimits {
        max_connections: u64::try_from(studio.limits.max_connections).unwrap_or(u64::MAX),
        max_connections_per_client: u64::try_from(studio.limits.max_connections_per_client)
            .unwrap_or(u64::MAX),
        header_timeout: studio.limits.header_timeout,
        max_head_bytes: MAX_REQUEST_HEAD_BYTES,
        drain_timeout: DRAIN_TIMEOUT,
    };
    goondan_http::serve(listener, router(studio), limits, shutdown).await
}

/// Access, method and response headers for every route.
async fn gate(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let is_read = request.method() == Method::GET || request.method() == Method::HEAD;
    let is_action =
        request.method() == Method::POST && request.uri().path().starts_with("/api/actions/");
    if !is_read && !is_action {
        return with_security_headers(error(
            StatusCode::METHOD_NOT_ALLOWED,
            "E_STUDIO_READ_ONLY",
            "only GET is served, and POST to /api/actions/ with --allow-actions",
        ));
    }
    if is_action && !shared.studio.actions {
        return with_security_headers(error(
            StatusCode::FORBIDDEN,
            "E_STUDIO_ACTIONS_OFF",
            "this Studio is read-only; start it with `gdn studio --allow-actions` to act",
        ));
    }
    let response = match shared
        .studio
        .access
        .decide(request.uri(), request.headers())
    {
        Decision::Allow if is_action => match action_refusal(&shared, &request) {
            Some(refusal) => refusal,
            None => next.run(request).await,
        },
        Decision::SetCookie { .. } if is_action => error(
            StatusCode::UNAUTHORIZED,
            "E_STUDIO_UNAUTHORIZED",
            "an action carries the token in its cookie, not on the URL",
        ),
        Decision::Allow => next.run(request).await,
        Decision::SetCookie { location } => {
            let token = shared.studio.access.token().unwrap_or_default();
            let cookie = format!("{COOKIE_NAME}={token}; Path=/; HttpOnly; SameSite=Strict");
            let mut response = StatusCode::SEE_OTHER.into_response();
            if let (Ok(location), Ok(cookie)) = (
                HeaderValue::from_str(&location),
                HeaderValue::from_str(&cookie),
            ) {
                response.headers_mut().insert(header::LOCATION, location);
                response.headers_mut().insert(header::SET_COOKIE, cookie);
            }
            response
        }
        Decision::Refuse(Refusal::ForeignHost) => error(
            StatusCode::FORBIDDEN,
            "E_STUDIO_HOST",
            "this Studio answers only to 127.0.0.1, localhost or [::1] with its port",
        ),
        Decision::Refuse(Refusal::Unauthorized) => error(
            StatusCode::UNAUTHORIZED,
            "E_STUDIO_UNAUTHORIZED",
            "open the URL `gdn studio` printed, with its ?token=",
        ),
    };
    with_security_headers(response)
}

/// Why an action that passed the gate's read checks is still refused:
/// no token cookie, a foreign `Origin`, or no CSRF token.
fn action_refusal(shared: &Shared, request: &Request) -> Option<Response> {
    let headers = request.headers();
    if !shared.studio.access.may_act(headers) {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            "E_STUDIO_UNAUTHORIZED",
            "an action needs the token: open the URL `gdn studio --allow-actions` printed, with its ?token=",
        ));
    }
    // A browser names the page that sent a POST; it must be this Studio,
    // as the `Host` the browser used names it.
    // Two `Origin` headers are refused rather than one of them read.
    let host = goondan_http::access::single(headers, header::HOST)
        .ok()
        .flatten()
        .and_then(|v| v.to_str().ok());
    let origin = goondan_http::access::single(headers, header::ORIGIN)
        .ok()
        .flatten()
        .and_then(|v| v.to_str().ok());
    let same_origin =
        matches!((host, origin), (Some(host), Some(origin)) if is_own_origin(origin, host));
    if !same_origin {
        return Some(error(
            StatusCode::FORBIDDEN,
            "E_STUDIO_ORIGIN",
            "an action must come from the Studio's own page (its Origin)",
        ));
    }
    let offered = headers.get(CSRF_HEADER).map(|v| v.as_bytes());
    let csrf_ok = match (offered, &shared.csrf) {
        (Some(offered), Some(csrf)) => goondan_http::token::same_secret(offered, csrf.as_bytes()),
        _ => false,
    };
    if !csrf_ok {
        return Some(error(
            StatusCode::FORBIDDEN,
            "E_STUDIO_CSRF",
            "an action must carry the page's CSRF token in X-Goondan-Csrf; reload the Studio",
        ));
    }
    None
}

/// Whether `origin` is this Studio as the browser reached it by `host`
/// (the `Host` header): the scheme is `http` (the Studio has no TLS), and
/// host and port are the same (the host without regard to case, a
/// missing port being 80).
fn is_own_origin(origin: &str, host: &str) -> bool {
    let Some(authority) = origin.strip_prefix("http://") else {
        return false;
    };
    let with_port = |authority: &str| -> Option<(String, u16)> {
        if authority.is_empty() || authority.contains(['/', '@', '?', '#']) {
            return None;
        }
        // The port follows the last colon after a bracketed IPv6 address
        // or a name.
        let port_at = match authority.rfind(']') {
            Some(end) => authority[end..].find(':').map(|at| end + at),
            None => authority.rfind(':'),
        };
        match port_at {
            Some(at) => Some((
                authority[..at].to_ascii_lowercase(),
                authority[at + 1..].parse().ok()?,
            )),
            None => Some((authority.to_ascii_lowercase(), 80)),
        }
    };
    matches!((with_port(authority), with_port(host)), (Some(a), Some(b)) if a == b)
}

/// The headers every answer carries, refusals included.
fn with_security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(ErrorBody::new(code, message))).into_response()
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn index(State(shared): State<Arc<Shared>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        shared.index.clone(),
    )
        .into_response()
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "E_STUDIO_NOT_FOUND", "no such page")
}

/// Runs a read off the async threads and turns its outcome into JSON.
async fn read(work: impl FnOnce() -> Result<Value, ReadError> + Send + 'static) -> Response {
    answer(tokio::task::spawn_blocking(work).await)
}

/// Runs a read of logs like [`read`], under one of the heavy-request
/// permits; with none free it answers 503 at once rather than queueing,
/// so a burst of requests cannot pile up reads (and their memory).
async fn read_heavy(
    shared: &Shared,
    work: impl FnOnce(TailLimits) -> Result<Value, ReadError> + Send + 'static,
) -> Response {
    let Ok(permit) = shared.heavy_requests.clone().try_acquire_owned() else {
        return busy();
    };
    let limits = shared.studio.limits.tail_limits();
    // The permit moves into the blocking task: a client that goes away
    // does not end the read, so the permit must last as long as it.
    answer(
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work(limits)
        })
        .await,
    )
}

/// The answer when every heavy-request permit is taken: 503 with
/// `Retry-After`.
fn busy() -> Response {
    let mut response = error(
        StatusCode::SERVICE_UNAVAILABLE,
        "E_STUDIO_BUSY",
        "too many reads of logs are running; retry in a moment",
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// A read's outcome as an HTTP answer.
fn answer(outcome: Result<Result<Value, ReadError>, tokio::task::JoinError>) -> Response {
    match outcome {
        Ok(Ok(value)) => axum::Json(value).into_response(),
        Ok(Err(ReadError::NotFound(message))) => {
            error(StatusCode::NOT_FOUND, "E_STUDIO_NOT_FOUND", &message)
        }
        Ok(Err(ReadError::NoBundle(message))) => {
            error(StatusCode::NOT_FOUND, "E_STUDIO_NO_BUNDLE", &message)
        }
        Ok(Err(ReadError::Store(store_error))) => {
            tracing::warn!(
                code = store_error.code(),
                "studio read failed: {store_error}"
            );
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                store_error.code(),
                "the state could not be read; see the Studio's log",
            )
        }
        Err(_) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "E_STUDIO_INTERNAL",
            "the read failed",
        ),
    }
}

async fn swarms(State(shared): State<Arc<Shared>>) -> Response {
    let root = shared.studio.state_root.clone();
    read(move || data::swarms(&root)).await
}

async fn conversation(
    State(shared): State<Arc<Shared>>,
    Path((swarm, instance)): Path<(String, String)>,
) -> Response {
    let root = shared.studio.state_root.clone();
    read_heavy(&shared, move |limits| {
        let workspace = data::workspace(&root, &swarm)?;
        let dir = data::instance_dir(&workspace, &instance)?;
        data::conversation(&dir, limits)
    })
    .await
}

async fn instance_events(
    State(shared): State<Arc<Shared>>,
    Path((swarm, instance)): Path<(String, String)>,
) -> Response {
    let root = shared.studio.state_root.clone();
    read_heavy(&shared, move |limits| {
        let workspace = data::workspace(&root, &swarm)?;
        let dir = data::instance_dir(&workspace, &instance)?;
        data::instance_events(&dir, &instance, limits)
    })
    .await
}

/// `GET …/history`: the Turns the instance's conversation holds now,
/// numbered, which the page forks from and rewinds to.
async fn instance_history(
    State(shared): State<Arc<Shared>>,
    Path((swarm, instance)): Path<(String, String)>,
) -> Response {
    let root = shared.studio.state_root.clone();
    read_heavy(&shared, move |limits| {
        let workspace = data::workspace(&root, &swarm)?;
        let dir = data::instance_dir(&workspace, &instance)?;
        data::instance_history(&dir, limits)
    })
    .await
}

/// `GET …/extensions`: the instance's extension states, which the page
/// edits.
async fn instance_extensions(
    State(shared): State<Arc<Shared>>,
    Path((swarm, instance)): Path<(String, String)>,
) -> Response {
    let root = shared.studio.state_root.clone();
    read_heavy(&shared, move |_| {
        let workspace = data::workspace(&root, &swarm)?;
        let dir = data::instance_dir(&workspace, &instance)?;
        data::extension_states(&dir)
    })
    .await
}

async fn trace(
    State(shared): State<Arc<Shared>>,
    Path((swarm, trace_id)): Path<(String, String)>,
) -> Response {
    let root = shared.studio.state_root.clone();
    read_heavy(&shared, move |limits| {
        let workspace = data::workspace(&root, &swarm)?;
        data::trace_events(&workspace, &trace_id, limits)
    })
    .await
}

/// `GET /api/swarms/<swarm>/map`: what the swarm's bundle declares
/// (agents, tools, extensions, who may call whom, Connections). Loading a
/// bundle reads many files, so it counts as a heavy request.
async fn swarm_map(State(shared): State<Arc<Shared>>, Path(swarm): Path<String>) -> Response {
    let root = shared.studio.state_root.clone();
    read_heavy(&shared, move |_| crate::map::swarm_map(&root, &swarm)).await
}

/// `GET /api/evals`: the stored runs of `gdn eval`.
async fn eval_runs(State(shared): State<Arc<Shared>>) -> Response {
    let root = shared.studio.state_root.clone();
    read(move || crate::evals::eval_runs(&root)).await
}

/// A trace of an eval case, read from the System Root the case ran in.
async fn eval_trace(
    State(shared): State<Arc<Shared>>,
    Path((run, case, swarm, trace_id)): Path<(String, String, String, String)>,
) -> Response {
    let root = shared.studio.state_root.clone();
    read_heavy(&shared, move |limits| {
        let case_root = crate::evals::case_root(&root, &run, &case)?;
        let workspace = data::workspace(&case_root, &swarm)?;
        data::trace_events(&workspace, &trace_id, limits)
    })
    .await
}

async fn live(
    State(shared): State<Arc<Shared>>,
    Path(swarm): Path<String>,
    request: Request,
) -> Response {
    let Ok(permit) = shared.live_streams.clone().try_acquire_owned() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "E_STUDIO_BUSY",
            "too many live views are open; close one and reload",
        );
    };
    let only = crate::access::query_value(request.uri(), "instance").map(str::to_string);
    let root = shared.studio.state_root.clone();
    let workspace = match tokio::task::spawn_blocking(move || data::workspace(&root, &swarm)).await
    {
        Ok(Ok(workspace)) => workspace,
        Ok(Err(ReadError::NotFound(message))) => {
            return error(StatusCode::NOT_FOUND, "E_STUDIO_NOT_FOUND", &message)
        }
        _ => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "E_STUDIO_INTERNAL",
                "the state could not be read",
            )
        }
    };
    let limits = &shared.studio.limits;
    let receiver = crate::live::follow(
        workspace,
        only,
        limits.live_poll_interval,
        limits.max_line_bytes,
    );
    // The permit lives as long as the stream, so the cap counts open
    // streams, not requests.
    let stream =
        futures_util::stream::unfold((receiver, permit), |(mut receiver, permit)| async move {
            let frame = receiver.recv().await?;
            Some((
                Ok::<Bytes, std::convert::Infallible>(frame),
                (receiver, permit),
            ))
        });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// `GET /api/status`: each swarm with whether its orchestrator runs now,
/// as its control socket answers a `status` (what the page's badge says
/// on every page). Cheap: one small file and one local connection per
/// swarm, each asked at once, under a heavy-request permit.
async fn status(State(shared): State<Arc<Shared>>) -> Response {
    // One of the heavy-request permits, so a flood of status requests
    // cannot multiply connections to the orchestrators.
    let Ok(_permit) = shared.heavy_requests.clone().try_acquire_owned() else {
        return busy();
    };
    let root = shared.studio.state_root.clone();
    let sockets = match tokio::task::spawn_blocking(move || {
        root.list_workspaces().map(|workspaces| {
            workspaces
                .iter()
                .map(|workspace| {
                    (
                        workspace.workspace_id().to_string(),
                        goondan_store::ActiveSwarm::read(&workspace.active_file())
                            .map(|_| actions::control_socket(workspace)),
                    )
                })
                .collect::<Vec<_>>()
        })
    })
    .await
    {
        Ok(Ok(sockets)) => sockets,
        Ok(Err(store_error)) => return answer(Ok(Err(ReadError::Store(store_error)))),
        Err(_) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "E_STUDIO_INTERNAL",
                "the read failed",
            )
        }
    };
    let asks = sockets.into_iter().map(|(id, socket)| async move {
        let running = match socket {
            Some(socket) => actions::orchestrator_answers(socket).await,
            None => false,
        };
        serde_json::json!({ "id": id, "running": running })
    });
    let swarms: Vec<Value> = futures_util::future::join_all(asks).await;
    axum::Json(serde_json::json!({ "swarms": swarms })).into_response()
}

/// `GET /api/approvals`: one read of every instance's `approvals.jsonl`
/// (each bounded by the store), so it counts as a heavy request.
async fn approvals(State(shared): State<Arc<Shared>>) -> Response {
    let root = shared.studio.state_root.clone();
    read_heavy(&shared, move |_| data::pending_approvals(&root)).await
}

/// Reads an action's body, at most [`MAX_ACTION_BODY_BYTES`].
async fn action_body(request: Request) -> Result<Bytes, ActionError> {
    axum::body::to_bytes(request.into_body(), MAX_ACTION_BODY_BYTES)
        .await
        .map_err(|_| ActionError::TooLarge)
}

/// One of the [`MAX_ACTIONS`] permits, taken at once or not at all.
fn action_permit(shared: &Shared) -> Result<tokio::sync::OwnedSemaphorePermit, ActionError> {
    shared
        .actions
        .clone()
        .try_acquire_owned()
        .map_err(|_| ActionError::Busy)
}

/// An action's outcome as an HTTP answer.
fn action_answer(outcome: Result<Value, ActionError>) -> Response {
    match outcome {
        Ok(value) => axum::Json(value).into_response(),
        Err(ActionError::BadRequest(message)) => {
            error(StatusCode::BAD_REQUEST, "E_STUDIO_BAD_REQUEST", &message)
        }
        Err(ActionError::Arguments { message, problems }) => {
            let mut body = serde_json::to_value(ErrorBody::new("E_APPROVAL_ARGS", &message))
                .unwrap_or(Value::Null);
            if let Some(object) = body.as_object_mut() {
                object.insert("problems".into(), problems.into());
            }
            (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
        }
        Err(ActionError::TooLarge) => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "E_STUDIO_BODY_TOO_LARGE",
            "an action's body holds at most 64 KiB",
        ),
        Err(ActionError::Busy) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "E_STUDIO_BUSY",
            "too many actions are running; retry when one finished",
        ),
        Err(ActionError::NotFound(code, message)) => error(StatusCode::NOT_FOUND, code, &message),
        Err(ActionError::NotRunning(message)) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "E_ORCHESTRATOR_NOT_RUNNING",
            &message,
        ),
        // The orchestrator's refusal names paths of this machine (an
        // instance's folder); the page gets it without them.
        Err(ActionError::Refused(body)) => {
            (StatusCode::CONFLICT, axum::Json(body.for_port())).into_response()
        }
        Err(ActionError::TimedOut(message)) => error(
            StatusCode::GATEWAY_TIMEOUT,
            "E_STUDIO_RERUN_TIMEOUT",
            &message,
        ),
        Err(ActionError::Internal(message)) => {
            tracing::warn!("studio action failed: {message}");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "E_STUDIO_INTERNAL",
                "the action failed; see the Studio's log",
            )
        }
    }
}

/// What every action does before its own work: a slot among the
/// actions at once (held by the returned permit), its body, parsed by
/// `parse`, and its target, found by `locate` with blocking reads off the
/// runtime.
async fn prepare_action<P, T>(
    shared: &Shared,
    request: Request,
    parse: impl FnOnce(&[u8]) -> Result<P, ActionError>,
    locate: impl FnOnce(&StateRoot, &P) -> Result<T, ActionError> + Send + 'static,
) -> Result<(tokio::sync::OwnedSemaphorePermit, P, T), ActionError>
where
    P: Clone + Send + 'static,
    T: Send + 'static,
{
    let permit = action_permit(shared)?;
    let body = action_body(request).await?;
    let parsed = parse(&body)?;
    let root = shared.studio.state_root.clone();
    let asked = parsed.clone();
    let target = tokio::task::spawn_blocking(move || locate(&root, &asked))
        .await
        .map_err(|_| ActionError::Internal("the read failed".into()))??;
    Ok((permit, parsed, target))
}

/// `POST /api/actions/decide`: approve or deny a waiting approval.
async fn decide(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let prepared = prepare_action(
        &shared,
        request,
        actions::parse_decision,
        actions::find_approval,
    )
    .await;
    let (permit, ask, target) = match prepared {
        Ok(prepared) => prepared,
        Err(refusal) => return action_answer(Err(refusal)),
    };
    tracing::info!(%client, swarm = ask.swarm, approval = ask.id, verdict = ask.verdict.as_str(), "studio action: decide");
    let outcome = actions::decide(target, ask, client).await;
    drop(permit);
    action_answer(outcome)
}

/// `POST /api/actions/send`: a message to one instance, answered with
/// the agent's answer.
async fn send(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let prepared = prepare_action(
        &shared,
        request,
        actions::parse_message,
        |root, (swarm, instance, _)| actions::find_instance(root, swarm, instance),
    )
    .await;
    let (permit, (swarm, instance, text), target) = match prepared {
        Ok(prepared) => prepared,
        Err(refusal) => return action_answer(Err(refusal)),
    };
    tracing::info!(%client, swarm, instance, "studio action: send a message");
    let outcome = actions::send(target, text, client).await;
    drop(permit);
    action_answer(outcome)
}

/// `POST /api/actions/cancel`: cancel the Turn an instance runs.
async fn cancel(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    steer(&shared, client, request, Steer::Cancel).await
}

/// `POST /api/actions/fork`: a new instance from one of an instance's
/// Turns.
async fn fork(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    steer(&shared, client, request, Steer::Fork).await
}

/// `POST /api/actions/rewind`: an instance moved back to one of its
/// Turns.
async fn rewind(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    steer(&shared, client, request, Steer::Rewind).await
}

/// `POST /api/actions/edit`: one message's text or one extension's
/// state of an instance changed.
async fn edit(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let prepared = prepare_action(&shared, request, actions::parse_edit, |root, asked| {
        actions::find_instance(root, &asked.swarm, &asked.instance)
    })
    .await;
    let (permit, asked, target) = match prepared {
        Ok(prepared) => prepared,
        Err(refusal) => return action_answer(Err(refusal)),
    };
    tracing::info!(%client, swarm = asked.swarm, instance = asked.instance, "studio action: edit");
    let outcome = actions::edit(target, asked, client).await;
    drop(permit);
    action_answer(outcome)
}

/// `POST /api/actions/rerun`: one case of a stored eval run run again by
/// `gdn eval`, answered with the new run's id and the case's result.
/// The child runs in a task of its own that holds the permits, so a
/// client that goes away does not stop it: the new run is stored all the
/// same (and its bound still holds).
async fn rerun(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let Some(program) = shared.studio.eval_command.clone() else {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            "E_STUDIO_RERUN_UNAVAILABLE",
            "this Studio has no `gdn` to run eval cases with (Studio::eval_command is unset)",
        );
    };
    let prepared = prepare_action(
        &shared,
        request,
        crate::rerun::parse_rerun,
        crate::rerun::find_rerun,
    )
    .await;
    let (permit, asked, target) = match prepared {
        Ok(prepared) => prepared,
        Err(refusal) => return action_answer(Err(refusal)),
    };
    let Ok(rerun_permit) = shared.reruns.clone().try_acquire_owned() else {
        return action_answer(Err(ActionError::Busy));
    };
    tracing::info!(%client, run = asked.run, case = asked.case, "studio action: re-run an eval case");
    let root = shared.studio.state_root.clone();
    let task = tokio::spawn(async move {
        let _permits = (permit, rerun_permit);
        crate::rerun::rerun(program, root, target).await
    });
    action_answer(
        task.await
            .unwrap_or_else(|_| Err(ActionError::Internal("the re-run failed".into()))),
    )
}

/// Runs one [`Steer`] on the instance its body names.
async fn steer(shared: &Shared, client: SocketAddr, request: Request, steer: Steer) -> Response {
    let prepared = prepare_action(
        shared,
        request,
        |body| actions::parse_steer(steer, body),
        |root, asked| actions::find_instance(root, &asked.swarm, &asked.instance),
    )
    .await;
    let (permit, asked, target) = match prepared {
        Ok(prepared) => prepared,
        Err(refusal) => return action_answer(Err(refusal)),
    };
    tracing::info!(%client, swarm = asked.swarm, instance = asked.instance, action = ?steer, "studio action");
    let outcome = actions::steer(steer, target, asked, client).await;
    drop(permit);
    action_answer(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_is_the_studio_only_with_its_scheme_host_and_port() {
        let cases = [
            ("http://127.0.0.1:7317", "127.0.0.1:7317", true),
            ("http://LOCALHOST:7317", "localhost:7317", true),
            ("http://[::1]:7317", "[::1]:7317", true),
            ("http://studio.example", "studio.example:80", true),
            ("https://127.0.0.1:7317", "127.0.0.1:7317", false),
            ("http://127.0.0.1:7318", "127.0.0.1:7317", false),
            ("http://127.0.0.1", "127.0.0.1:7317", false),
            ("http://evil.example:7317", "127.0.0.1:7317", false),
            ("http://127.0.0.1:7317/", "127.0.0.1:7317", false),
            ("http://u@127.0.0.1:7317", "127.0.0.1:7317", false),
            ("null", "127.0.0.1:7317", false),
        ];
        for (origin, host, expected) in cases {
            assert_eq!(is_own_origin(origin, host), expected, "{origin} at {host}");
        }
    }
}
