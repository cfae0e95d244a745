//! The failures of the OpenAI-compatible API and their outward face:
//! OpenAI's error body `{"error":{"message","type","param","code"}}` with
//! the HTTP status an OpenAI client expects. Every failure, ours or the
//! swarm's, goes through one mapping ([`status_and_type`]) from its E_
//! code, and its message starts with that code.

use crate::swarm::TurnFailure;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// Why a request to `/v1` got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not the JSON the route reads.
    #[error("the request body is not valid JSON: {0}")]
    BadJson(String),
    /// The body is larger than the server reads.
    #[error("the request body is larger than {limit} bytes")]
    BodyTooLarge {
        /// The largest body read.
        limit: usize,
    },
    /// A field is missing or of the wrong shape.
    #[error("`{param}` {problem}")]
    BadField {
        /// Where, as a path into the body (`messages[2].role`).
        param: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A content part or message of a kind a Turn cannot take (an image,
    /// a file, a tool call or its result).
    #[error("`{param}` is a {kind:?} {what}, which a Goondan agent cannot take as input")]
    Unsupported {
        /// Where, as a path into the body.
        param: String,
        /// The part's `type` or the message's `role`.
        kind: String,
        /// `content part`, `message`, `input item`.
        what: &'static str,
    },
    /// The instance key named by the header, or the end user named by
    /// the `user` field, is empty, too long or holds a control character.
    #[error(
        "{}: 1 to {max} characters, no control characters",
        if *from_header { "the X-Goondan-Instance header does not name an instance" } else { "`user` does not name an end user" }
    )]
    BadInstanceKey {
        /// Whether the key came from the header rather than `user`.
        from_header: bool,
        /// The longest key.
        max: usize,
    },
    /// No agent of the Swarm has this name.
    #[error("the model {0:?} does not exist: the models are the Swarm's agents")]
    UnknownModel(String),
    /// `previous_response_id` names a response the server does not
    /// remember (it was never made, or the server restarted or forgot it).
    #[error("previous response {0:?} not found")]
    PreviousResponseNotFound(String),
    /// `previous_response_id` names a response of another agent.
    #[error("previous response {id:?} was answered by {agent:?}, not by {model:?}")]
    PreviousResponseOfOtherAgent {
        /// The response.
        id: String,
        /// The agent that answered it.
        agent: String,
        /// The model the request names.
        model: String,
    },
    /// The `Idempotency-Key` header is empty, too long or not visible
    /// ASCII.
    #[error("the Idempotency-Key header must be 1 to {max} visible ASCII characters")]
    BadIdempotencyKey {
        /// The longest key.
        max: usize,
    },
    /// An earlier request with this `Idempotency-Key` had another body.
    #[error("the Idempotency-Key {0:?} was used for another request body")]
    IdempotencyKeyReused(String),
    /// No route has this path.
    #[error("no route {0}")]
    NoRoute(String),
    /// The route takes another method.
    #[error("{method} is not allowed here")]
    MethodNotAllowed {
        /// The method used.
        method: String,
    },
    /// The port guard refused the request (a missing or wrong token, a
    /// foreign `Origin` or `Host`).
    #[error("{}", refusal_message(*.0))]
    Refused(StatusCode),
    /// The swarm refused the input or its Turn failed.
    #[error("{}", .0.message)]
    Turn(TurnFailure),
}

fn refusal_message(status: StatusCode) -> &'static str {
    if status == StatusCode::UNAUTHORIZED {
        "the API key is missing or wrong"
    } else {
        "this origin or host may not call the server"
    }
}

impl ApiError {
    /// The stable code.
    pub fn code(&self) -> &str {
        match self {
            ApiError::BadJson(_) => "E_SERVE_BAD_JSON",
            ApiError::BodyTooLarge { .. } => "E_SERVE_BODY_TOO_LARGE",
            ApiError::BadField { .. } => "E_SERVE_BAD_REQUEST",
            ApiError::Unsupported { .. } => "E_SERVE_UNSUPPORTED_INPUT",
            ApiError::BadInstanceKey { .. } => "E_SERVE_BAD_INSTANCE_KEY",
            ApiError::UnknownModel(_) => "E_SERVE_UNKNOWN_MODEL",
            ApiError::PreviousResponseNotFound(_) => "E_SERVE_PREVIOUS_RESPONSE_NOT_FOUND",
            ApiError::PreviousResponseOfOtherAgent { .. } => "E_SERVE_PREVIOUS_RESPONSE_AGENT",
            ApiError::BadIdempotencyKey { .. } => "E_SERVE_BAD_IDEMPOTENCY_KEY",
            ApiError::IdempotencyKeyReused(_) => "E_SERVE_IDEMPOTENCY_KEY_REUSED",
            ApiError::NoRoute(_) => "E_SERVE_NO_ROUTE",
            ApiError::MethodNotAllowed { .. } => "E_SERVE_METHOD_NOT_ALLOWED",
            ApiError::Refused(status) if *status == StatusCode::UNAUTHORIZED => {
                "E_SERVE_UNAUTHORIZED"
            }
            ApiError::Refused(_) => "E_SERVE_FORBIDDEN",
            ApiError::Turn(failure) => &failure.code,
        }
    }

    /// How to recover.
    pub fn suggestion(&self) -> Option<&str> {
        Some(match self {
            ApiError::BadJson(_) => "send one JSON object as the body, with `Content-Type: application/json`",
            ApiError::BodyTooLarge { .. } => "send a shorter conversation, or name an instance (`X-Goondan-Instance`) and send only the new message",
            ApiError::BadField { .. } => "see docs/protocols.md, \"The OpenAI-compatible API\", for the fields each route reads",
            ApiError::Unsupported { .. } => "send text only: a string, or parts of type `text`, `input_text` or `output_text`",
            ApiError::BadInstanceKey { .. } => "use 1 to 128 printable characters",
            ApiError::UnknownModel(_) => "list the models with GET /v1/models and use one of their ids",
            ApiError::PreviousResponseNotFound(_) => "start a new conversation without `previous_response_id`, or name its instance with `X-Goondan-Instance`",
            ApiError::PreviousResponseOfOtherAgent { .. } => "send the follow-up to the model that answered the previous response",
            ApiError::BadIdempotencyKey { .. } => "use a random id per logical request, such as a UUID, and send it again with each retry",
            ApiError::IdempotencyKeyReused(_) => "use a new key for a new request; a retry sends the same body with the same key",
            ApiError::NoRoute(_) => "the routes are /v1/models, /v1/models/{id}, /v1/chat/completions and /v1/responses",
            ApiError::MethodNotAllowed { .. } => "GET the models; POST to /v1/chat/completions and /v1/responses",
            ApiError::Refused(status) if *status == StatusCode::UNAUTHORIZED => "send the token of `gdn serve --token-env` as the API key (`Authorization: Bearer <token>`)",
            ApiError::Refused(_) => "call the server by a loopback name, or start it with remote clients allowed",
            ApiError::Turn(failure) => return failure.suggestion.as_deref(),
        })
    }

    /// Which field of the body is at fault, as OpenAI's `param` names it.
    fn param(&self) -> Option<&str> {
        match self {
            ApiError::BadField { param, .. } | ApiError::Unsupported { param, .. } => Some(param),
            ApiError::BadInstanceKey { from_header, .. } => (!from_header).then_some("user"),
            ApiError::UnknownModel(_) | ApiError::PreviousResponseOfOtherAgent { .. } => {
                Some("model")
            }
            ApiError::PreviousResponseNotFound(_) => Some("previous_response_id"),
            _ => None,
        }
    }

    /// The `code` of the body: OpenAI's own where clients look for it,
    /// else ours.
    fn wire_code(&self) -> &str {
        match self {
            ApiError::UnknownModel(_) => "model_not_found",
            ApiError::PreviousResponseNotFound(_) => "previous_response_not_found",
            ApiError::Refused(status) if *status == StatusCode::UNAUTHORIZED => "invalid_api_key",
            _ => self.code(),
        }
    }

    /// What goes on the wire: `code: message (suggestion)`.
    pub(crate) fn body(&self) -> Value {
        let mut message = format!("{}: {self}", self.code());
        if let Some(suggestion) = self.suggestion() {
            message.push_str(&format!(" ({suggestion})"));
        }
        let (_, kind) = status_and_type(self.code());
        json!({"error": {
            "message": message,
            "type": kind,
            "param": self.param(),
            "code": self.wire_code(),
        }})
    }
}

/// The HTTP status and OpenAI error `type` of a failure, by its code: the
/// one place a code gets its outward face.
pub fn status_and_type(code: &str) -> (StatusCode, &'static str) {
    match code {
        "E_SERVE_BAD_JSON"
        | "E_SERVE_BAD_REQUEST"
        | "E_SERVE_UNSUPPORTED_INPUT"
        | "E_SERVE_BAD_INSTANCE_KEY"
        | "E_SERVE_BAD_IDEMPOTENCY_KEY"
        | "E_INSTANCE_KEY_INVALID"
        | "E_SERVE_PREVIOUS_RESPONSE_AGENT" => (StatusCode::BAD_REQUEST, "invalid_request_error"),
        "E_SERVE_UNAUTHORIZED" => (StatusCode::UNAUTHORIZED, "authentication_error"),
        "E_SERVE_FORBIDDEN" => (StatusCode::FORBIDDEN, "permission_error"),
        "E_SERVE_UNKNOWN_MODEL"
        | "E_SERVE_PREVIOUS_RESPONSE_NOT_FOUND"
        | "E_SERVE_NO_ROUTE"
        | "E_AGENT_NOT_FOUND" => (StatusCode::NOT_FOUND, "not_found_error"),
        "E_SERVE_METHOD_NOT_ALLOWED" => (StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error"),
        "E_SERVE_IDEMPOTENCY_KEY_REUSED" => {
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request_error")
        }
        "E_EVENT_DUPLICATE" | "E_INSTANCE_DELETED" => {
            (StatusCode::CONFLICT, "invalid_request_error")
        }
        "E_SERVE_BODY_TOO_LARGE" | "E_CONTROL_REQUEST_TOO_LARGE" | "E_IPC_TOO_LARGE" => {
            (StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error")
        }
        "E_QUEUE_FULL" | "E_CONTROL_BUSY" | "E_INSTANCE_LIMIT" | "E_AGENT_BACKOFF" => {
            (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error")
        }
        "E_ORCHESTRATOR_NOT_RUNNING"
        | "E_ORCHESTRATOR_STOPPED"
        | "E_CONTROL_SOCKET"
        | "E_CONTROL_TIMEOUT" => (StatusCode::SERVICE_UNAVAILABLE, "server_error"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "server_error"),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, _) = status_and_type(self.code());
        let mut response = (status, axum::Json(self.body())).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<TurnFailure> for ApiError {
    /// The swarm's failure without the paths of this machine it may name
    /// (`ErrorBody::for_port`).
    fn from(failure: TurnFailure) -> ApiError {
        ApiError::Turn(failure.for_port())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_of_ours_has_its_status() {
        let cases = [
            (ApiError::BadJson("x".into()), 400),
            (ApiError::BodyTooLarge { limit: 1 }, 413),
            (ApiError::UnknownModel("m".into()), 404),
            (ApiError::PreviousResponseNotFound("r".into()), 404),
            (ApiError::Refused(StatusCode::UNAUTHORIZED), 401),
            (ApiError::Refused(StatusCode::FORBIDDEN), 403),
            (ApiError::NoRoute("/v1/x".into()), 404),
            (
                ApiError::Turn(TurnFailure::new("E_QUEUE_FULL", "full")),
                429,
            ),
            (
                ApiError::Turn(TurnFailure::new("E_CONTROL_BUSY", "busy")),
                429,
            ),
            (
                ApiError::Turn(TurnFailure::new("E_ORCHESTRATOR_NOT_RUNNING", "gone")),
                503,
            ),
            (
                ApiError::Turn(TurnFailure::new("E_MODEL_HTTP", "boom")),
                500,
            ),
            (
                ApiError::Turn(TurnFailure::new("E_INSTANCE_KEY_INVALID", "bidi")),
                400,
            ),
        ];
        for (error, status) in cases {
            assert_eq!(
                status_and_type(error.code()).0.as_u16(),
                status,
                "{error:?}"
            );
        }
    }

    #[test]
    fn the_message_starts_with_the_code_and_ends_with_the_fix() {
        let error = ApiError::Turn(
            TurnFailure::new("E_QUEUE_FULL", "the inbox is full").with_suggestion("retry later"),
        );
        let body = error.body();
        assert_eq!(
            body["error"]["message"],
            "E_QUEUE_FULL: the inbox is full (retry later)"
        );
        assert_eq!(body["error"]["type"], "rate_limit_error");
        assert_eq!(body["error"]["code"], "E_QUEUE_FULL");
        assert_eq!(body["error"]["param"], Value::Null);
    }
}
