//! The `self-restart` tool: `request` asks the orchestrator to re-read the
//! bundle and gracefully restart the whole swarm once the calling Turn is
//! over (through the runtime's agents API, `ToolContext::runtime`).
//!
//! The orchestrator validates the re-read bundle before it answers, so an
//! invalid edit comes back to the model as this call's error (with the
//! first problem's code) and the swarm runs on unchanged. A valid one is
//! answered with `restartRequested: true`; the Turn goes on to its answer,
//! which is delivered before the process stops.

use crate::args::parse;
use futures_util::future::BoxFuture;
use goondan_runtime::extension::ToolHandlers;
use goondan_runtime::{ToolContext, ToolFailure};
use goondan_types::{JsonObject, JsonValue};
use serde::Deserialize;
use serde_json::json;

const REQUEST: &str = "self-restart__request";

/// The reason recorded when the model gives none.
pub const DEFAULT_REASON: &str = "tool:self-restart";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestArgs {
    reason: Option<String>,
}

/// `request`: schedules the restart, or reports why the bundle is refused.
pub async fn request(ctx: &ToolContext, raw: JsonObject) -> Result<JsonValue, ToolFailure> {
    let args: RequestArgs = parse(REQUEST, &raw).map_err(ToolFailure::from)?;
    let reason = args
        .reason
        .map(|reason| reason.trim().to_string())
        .filter(|reason| !reason.is_empty())
        .unwrap_or_else(|| DEFAULT_REASON.to_string());
    ctx.runtime
        .restart_swarm(reason.clone())
        .await
        .map_err(super::agents::failure)?;
    Ok(json!({
        "ok": true,
        "restartRequested": true,
        "restartReason": reason,
        "note": "the swarm restarts with the bundle as it is now once this turn ends; conversations are kept",
    }))
}

/// The handlers of `builtin:self-restart` by export name.
pub(crate) fn handlers() -> ToolHandlers {
    fn run<'a>(ctx: &'a ToolContext, args: JsonObject) -> BoxFuture<'a, Result<JsonValue, ToolFailure>> {
        Box::pin(request(ctx, args))
    }
    ToolHandlers::from([("request".to_string(), goondan_runtime::handler_fn(run))])
}
