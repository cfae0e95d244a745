//! The OpenAI-compatible API under `/v1`.

use crate::Shared;
use axum::Router;
use std::sync::Arc;

/// The `/v1` routes.
pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
}
