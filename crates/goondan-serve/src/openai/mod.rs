//! The OpenAI-compatible API under `/v1`, so any OpenAI client (the
//! `openai` SDKs, Open WebUI, LibreChat, LiteLLM) can talk to a Swarm:
//!
//! * `GET /v1/models`, `GET /v1/models/{id}`: the Swarm's agents; a
//!   model id is an agent's name.
//! * `POST /v1/chat/completions` ([`chat`]) and `POST /v1/responses`
//!   ([`responses`]): one Turn of the agent the `model` field names,
//!   answered whole or streamed (`stream: true`) as OpenAI streams.
//!
//! A request goes to the instance named by the `X-Goondan-Instance`
//! header, else (for `/v1/responses`) the instance of its
//! `previous_response_id`; then only its last message is sent (the
//! instance remembers the rest). Without either, it goes on in the
//! instance of the same agent and end user (`user`) whose conversation
//! is the request's before its last message ([`conversations`]), or
//! starts a fresh one into which those messages are replayed first, since
//! an OpenAI client sends the whole conversation every time. Every
//! failure is OpenAI's error body
//! ([`error`]); a refusal of the port guard on these paths too
//! ([`refusal`]).

mod chat;
mod conversations;
mod error;
mod input;
mod responses;
mod retries;
mod stream;

pub use error::{status_and_type, ApiError};
pub use input::INSTANCE_HEADER;
pub use retries::IDEMPOTENCY_HEADER;

use crate::Shared;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// What the `/v1` routes keep between requests.
pub(crate) struct OpenAiState {
    /// When the server started, in Unix seconds: the `created` of every
    /// model.
    started: u64,
    responses: responses::Remembered,
    conversations: Arc<conversations::Tips>,
    retries: retries::Retries,
}

impl OpenAiState {
    /// Remembers the instance of at most `max_responses` responses for
    /// `previous_response_id`, and of at most `max_conversations`
    /// conversations, and of at most `max_responses` idempotency keys for
    /// `idempotency_window` each.
    pub(crate) fn new(
        max_responses: usize,
        max_conversations: usize,
        idempotency_window: std::time::Duration,
    ) -> OpenAiState {
        OpenAiState {
            started: unix_now(),
            responses: responses::Remembered::new(max_responses),
            conversations: Arc::new(conversations::Tips::new(max_conversations)),
            retries: retries::Retries::new(max_responses, idempotency_window),
        }
    }
}

/// The `/v1` routes.
pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/models", get(models).fallback(wrong_method))
        .route("/v1/models/{id}", get(model).fallback(wrong_method))
        .route(
            "/v1/chat/completions",
            post(chat::completions).fallback(wrong_method),
        )
        .route(
            "/v1/responses",
            post(responses::create).fallback(wrong_method),
        )
        .route("/v1", any(no_route))
        .route("/v1/{*rest}", any(no_route))
}

/// Whether a path is this API's, so a refusal there is in its shape.
pub(crate) fn owns(path: &str) -> bool {
    path == "/v1" || path.starts_with("/v1/")
}

/// The port guard's refusal (401, 403) as OpenAI's error body.
pub(crate) fn refusal(status: StatusCode) -> Response {
    ApiError::Refused(status).into_response()
}

async fn models(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let data: Vec<Value> = shared
        .swarm
        .agents()
        .iter()
        .map(|agent| model_object(&agent.name, shared.openai.started))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

async fn model(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match shared.swarm.agent(&id) {
        Some(agent) => Json(model_object(&agent.name, shared.openai.started)).into_response(),
        None => ApiError::UnknownModel(id).into_response(),
    }
}

fn model_object(name: &str, created: u64) -> Value {
    json!({"id": name, "object": "model", "created": created, "owned_by": "goondan"})
}

async fn wrong_method(method: Method) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
    }
}

async fn no_route(uri: Uri) -> ApiError {
    ApiError::NoRoute(uri.path().to_string())
}

/// A request's Turn: its reports, the object id its answer carries, and
/// what cancels the Turn if the client leaves before the answer.
pub(crate) struct Started {
    updates: tokio::sync::mpsc::Receiver<crate::TurnUpdate>,
    id: String,
    leave: retries::CancelOnLeave,
}

/// Where a request's Turn comes from.
enum Begin {
    /// An earlier request with its `Idempotency-Key` and body runs it, or
    /// ran it: follow that.
    Follow(Started),
    /// Start one; with the claim of its key when the request named one.
    Start(Option<Arc<retries::SharedTurn>>),
}

/// Whether the request is a retry of an earlier one on `route` (by its
/// `Idempotency-Key` and its body `raw`); a first request's answer will
/// carry the object id `id`.
fn begin(
    shared: &Shared,
    route: &'static str,
    headers: &axum::http::HeaderMap,
    raw: &[u8],
    id: String,
) -> Result<Begin, ApiError> {
    let Some(key) = retries::key_of(headers)? else {
        return Ok(Begin::Start(None));
    };
    Ok(match shared.openai.retries.claim(route, key, raw, id)? {
        retries::Claim::Retry(turn) => Begin::Follow(Started {
            updates: turn.follow(),
            id: turn.id.clone(),
            leave: retries::CancelOnLeave(None),
        }),
        retries::Claim::First(turn) => Begin::Start(Some(turn)),
    })
}

/// Hands `addressed` to the swarm, its Turn in a task of its own; the
/// Turn's reports. A refused input gives its conversation's instance
/// back; an answer moves the conversation on. With the claim of an
/// `Idempotency-Key`, the Turn is kept for the key's retries and a client
/// that leaves does not cancel it; without, leaving cancels it.
async fn start(
    shared: &Shared,
    addressed: conversations::Addressed,
    claim: Option<Arc<retries::SharedTurn>>,
    id: String,
) -> Result<Started, ApiError> {
    let conversations::Addressed { request, follow } = addressed;
    let tips = shared.openai.conversations.clone();
    let running = match shared.swarm.start(request).await {
        Ok(running) => running,
        Err(failure) => {
            if let Some(follow) = follow {
                tips.refused(follow);
            }
            if let Some(claim) = &claim {
                claim.refused(&shared.openai.retries, failure.clone());
            }
            return Err(failure.into());
        }
    };
    // Its answer moves the conversation on, whoever still reads it.
    let turn = crate::turn::DetachedTurn::spawn_then(running, move |end| {
        if let (Some(follow), Ok(answer)) = (follow, end) {
            tips.answered(follow, &answer.text);
        }
    });
    let (_, updates, canceller) = turn.into_parts();
    Ok(match claim {
        Some(claim) => {
            claim.pump(updates);
            Started {
                updates: claim.follow(),
                id: claim.id.clone(),
                leave: retries::CancelOnLeave(None),
            }
        }
        None => Started {
            updates,
            id,
            leave: retries::CancelOnLeave(Some(canceller)),
        },
    })
}

/// A fresh object id: `prefix` and 24 hex digits.
fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", goondan_types::trace::random_hex(12))
}

/// Now in Unix seconds, as OpenAI's `created` fields count.
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_secs())
        .unwrap_or(0)
}
