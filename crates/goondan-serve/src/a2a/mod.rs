//! Every agent of the Swarm as an A2A agent.

mod tasks;

pub(crate) use tasks::Tasks;

use crate::Shared;
use axum::Router;
use std::sync::Arc;

/// The A2A routes.
pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
}
