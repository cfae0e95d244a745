//! The server over streamable HTTP (`gdn mcp serve --http ADDR`): one
//! endpoint, `POST /mcp`, one JSON-RPC message per body, each request
//! answered with one `application/json` response (the server never
//! streams and never speaks first, so it offers no GET stream and issues
//! no session id, both optional in the specification). A notification or
//! response is accepted with 202.
//!
//! Guards, before any JSON is read: a bearer token when one is configured
//! (compared in constant time), and an `Origin` that, when present, must
//! name a loopback host unless remote clients are allowed (the
//! specification's defence against DNS rebinding of a local server).
//! Closing the request drops the call's wait.

use super::{answer, SwarmTurns};
use crate::jsonrpc::{self, Incoming, PARSE_ERROR};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::Value;
use std::sync::Arc;

/// The path of the endpoint.
pub const ENDPOINT: &str = "/mcp";

/// Who may call the endpoint.
#[derive(Debug, Clone, Default)]
pub struct HttpAccess {
    /// Requests must carry `Authorization: Bearer <token>`.
    pub bearer_token: Option<String>,
    /// Whether an `Origin` other than a loopback host is accepted.
    pub allow_remote_origins: bool,
}

struct Shared {
    turns: Arc<dyn SwarmTurns>,
    access: HttpAccess,
}

/// The largest request body: one JSON-RPC message with a tool call's
/// text, the same bound as a line typed at `gdn run`.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The endpoint as an axum router; serve it with `axum::serve`. A body
/// over [`MAX_BODY_BYTES`] is refused with 413 before it is read whole.
pub fn router(turns: Arc<dyn SwarmTurns>, access: HttpAccess) -> Router {
    Router::new()
        .route(ENDPOINT, post(handle))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(Arc::new(Shared { turns, access }))
}

async fn handle(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(token) = &shared.access.bearer_token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .unwrap_or("");
        if !same_secret(given.as_bytes(), token.as_bytes()) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
            )
                .into_response();
        }
    }
    if !shared.access.allow_remote_origins {
        let origin = headers
            .get(header::ORIGIN)
            .map(|value| value.to_str().unwrap_or(""));
        if origin.is_some_and(|origin| !is_loopback_origin(origin)) {
            return StatusCode::FORBIDDEN.into_response();
        }
    }
    let message = match serde_json::from_slice::<Value>(&body) {
        Ok(value) => Incoming::classify(value),
        Err(_) => {
            return json_response(jsonrpc::error(Value::Null, PARSE_ERROR, "not JSON"));
        }
    };
    match message {
        Some(Incoming::Request { id, method, params }) => {
            json_response(answer(shared.turns.clone(), id, &method, params).await)
        }
        Some(Incoming::Notification { .. }) | Some(Incoming::Response { .. }) => {
            StatusCode::ACCEPTED.into_response()
        }
        None => json_response(jsonrpc::error(
            Value::Null,
            jsonrpc::INVALID_REQUEST,
            "not a JSON-RPC message",
        )),
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
