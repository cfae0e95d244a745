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
//! `previous_response_id`, else the one its `user` field names; then only
//! its last message is sent (the instance remembers the rest). Without
//! any of them the request gets a fresh instance into which its earlier
//! messages are replayed first, since an OpenAI client sends the whole
//! conversation every time. Every failure is OpenAI's error body
//! ([`error`]); a refusal of the port guard on these paths too
//! ([`refusal`]).

mod chat;
mod error;
mod input;
mod responses;
mod stream;

pub use error::{status_and_type, ApiError};
pub use input::INSTANCE_HEADER;

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
}

impl OpenAiState {
    /// Remembers the instance of at most `max_responses` responses for
    /// `previous_response_id`.
    pub(crate) fn new(max_responses: usize) -> OpenAiState {
        OpenAiState {
            started: unix_now(),
            responses: responses::Remembered::new(max_responses),
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
