//! The server of `gdn serve`: the agents of a running Swarm behind two
//! protocols the rest of the ecosystem already speaks, on one port.
//!
//! * **A2A** ([`a2a`], protocol version [`goondan_a2a::PROTOCOL_VERSION`]):
//!   each agent is an A2A agent at `/a2a/<agent>` (JSON-RPC), with its
//!   Agent Card at `/a2a/<agent>/.well-known/agent-card.json`; the entry
//!   agent's card is also at `/.well-known/agent-card.json`. A Task is
//!   one Turn; a context id is an instance key.
//! * **OpenAI-compatible** ([`openai`]): `/v1/models` lists the agents
//!   (the model id is the agent's name), `/v1/chat/completions` and
//!   `/v1/responses` run a Turn of the named agent, plain or streamed.
//!
//! Every route passes the port guards first (`goondan_http::access`:
//! bearer token when configured, `Origin` and `Host`), and a body over
//! [`Limits::max_body_bytes`] is refused with 413 before it is read
//! whole. The swarm is reached only through [`Swarm`]; a Turn runs in a
//! task of its own ([`turn`]), so a client that drops a stream (A2A or
//! `/v1`) leaves the Turn to finish and commit once. A plain `/v1`
//! request whose client leaves cancels its Turn, unless it named an
//! `Idempotency-Key`, whose retries then get that Turn
//! ([`openai::IDEMPOTENCY_HEADER`]).
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod a2a;
mod instance;
pub mod openai;
mod recent;
pub mod swarm;
pub mod turn;

pub use swarm::{
    AgentInfo, PriorMessage, PriorRole, RunningTurn, Swarm, ToolInfo, TurnAnswer, TurnFailure,
    TurnRequest, TurnUpdate,
};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use goondan_http::access::{refusal, HttpAccess};
use std::sync::Arc;
use std::time::Duration;

/// The default address of `gdn serve`: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:4180";

/// The bounds of the server beyond the accept loop's.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest request body read; a larger one is refused with 413.
    pub max_body_bytes: usize,
    /// How many A2A Tasks are remembered for `GetTask` after they ended;
    /// the oldest ended one is forgotten first (a running Task never is).
    pub max_remembered_tasks: usize,
    /// How many responses of `/v1/responses` are remembered for a
    /// follow-up naming one (`previous_response_id`); the oldest is
    /// forgotten first.
    pub max_remembered_responses: usize,
    /// How many conversations of `/v1` clients are remembered, so the
    /// next request of one goes on in its instance
    /// (`openai::conversations`); the oldest is forgotten first.
    pub max_remembered_conversations: usize,
    /// How long a `/v1` request's `Idempotency-Key` finds its Turn for a
    /// retry; as many keys are remembered as responses.
    pub idempotency_window: Duration,
    /// How often a running Task looks for an approval a person must
    /// decide (its state is then `TASK_STATE_INPUT_REQUIRED`).
    pub approval_poll: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            // One input with a long conversation replayed before it,
            // well under the control socket's request line (1 MiB).
            max_body_bytes: 768 * 1024,
            max_remembered_tasks: 2_000,
            max_remembered_responses: 10_000,
            max_remembered_conversations: 10_000,
            idempotency_window: Duration::from_secs(60 * 60),
            approval_poll: Duration::from_millis(500),
        }
    }
}

/// What every route of the server shares.
pub(crate) struct Shared {
    pub(crate) swarm: Arc<dyn Swarm>,
    pub(crate) limits: Limits,
    /// The base URL clients reach the server by, as the Agent Cards name
    /// it (`http://127.0.0.1:4180`).
    pub(crate) public_url: String,
    /// Whether requests must carry a bearer token (the cards say so).
    pub(crate) token_required: bool,
    pub(crate) tasks: Arc<a2a::Tasks>,
    pub(crate) openai: openai::OpenAiState,
}

/// The whole server as an axum router; serve it with
/// `goondan_http::serve`. `public_url` is the base URL clients reach it
/// by (named in the Agent Cards).
pub fn router(
    swarm: Arc<dyn Swarm>,
    access: HttpAccess,
    public_url: String,
    limits: Limits,
) -> Router {
    let shared = Arc::new(Shared {
        swarm,
        limits,
        public_url: public_url.trim_end_matches('/').to_string(),
        token_required: access.bearer_token.is_some(),
        tasks: Arc::new(a2a::Tasks::new(limits.max_remembered_tasks)),
        openai: openai::OpenAiState::new(
            limits.max_remembered_responses,
            limits.max_remembered_conversations,
            limits.idempotency_window,
        ),
    });
    Router::new()
        .merge(a2a::routes())
        .merge(openai::routes())
        .with_state(shared)
        .layer(axum::extract::DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(access),
            guard,
        ))
}

/// The port guards, before any route reads a body.
async fn guard(State(access): State<Arc<HttpAccess>>, request: Request, next: Next) -> Response {
    match access.admit(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(status) if openai::owns(request.uri().path()) => openai::refusal(status),
        Err(status) => refusal(status),
    }
}
