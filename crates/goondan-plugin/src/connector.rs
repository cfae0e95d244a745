//! A script Connector: a module whose default export is
//! `async function (ctx)`, run in a plugin until it returns or the process
//! ends. `ctx.emit(event)` is a `connector.emit` callback the host hands to
//! a [`ConnectorSink`] (the ConnectorProcess's emitter); `ctx.config` and
//! `ctx.secrets` are the Connection's, resolved.
//!
//! This module does not know the orchestrator or the ConnectorProcess:
//! `goondan-connector` wraps [`run_connector`] as one of its sources, and
//! the process's supervisor restarts a connector that stopped.

use crate::error::PluginError;
use crate::host::{InvocationServer, PluginHost};
use crate::protocol::{error_codes, methods, RpcError};
use futures_util::future::BoxFuture;
use goondan_types::{ConnectorEvent, JsonValue, Secrets};
use std::collections::BTreeMap;

/// Why the swarm did not take an event a script connector emitted; the
/// plugin's `ctx.emit` rejects with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmitRefusal {
    /// A stable code (`E_QUEUE_FULL`, ...).
    pub code: String,
    /// What happened.
    pub message: String,
}

/// Where a script connector's events go.
pub trait ConnectorSink: Send + Sync {
    /// Hands one event to the swarm; answers what the plugin's
    /// `ctx.emit` resolves to.
    fn emit(&self, event: ConnectorEvent) -> BoxFuture<'_, Result<JsonValue, EmitRefusal>>;
}

/// Serves `connector.emit` for one run.
struct EmitServer<'s> {
    sink: &'s dyn ConnectorSink,
}

impl InvocationServer for EmitServer<'_> {
    fn serve<'a>(
        &'a mut self,
        method: &'a str,
        params: JsonValue,
    ) -> BoxFuture<'a, Result<JsonValue, RpcError>> {
        Box::pin(async move {
            if method != methods::CONNECTOR_EMIT {
                return Err(RpcError::new(
                    error_codes::METHOD_NOT_FOUND,
                    format!("`{method}` is not a method of a connector run"),
                ));
            }
            let event: ConnectorEvent = params
                .get("event")
                .cloned()
                .map(serde_json::from_value)
                .transpose()
                .map_err(|error| {
                    RpcError::new(
                        error_codes::INVALID_PARAMS,
                        format!(
                            "`event` is not a ConnectorEvent ({{name, message: {{type: \
                             'text', text}}, properties, instanceKey}}): {error}"
                        ),
                    )
                })?
                .ok_or_else(|| RpcError::new(error_codes::INVALID_PARAMS, "`event` is missing"))?;
            self.sink.emit(event).await.map_err(|refusal| RpcError {
                code: error_codes::USER_ERROR,
                message: refusal.message,
                data: Some(serde_json::json!({ "code": refusal.code })),
            })
        })
    }
}

/// Runs the connector module of `host` with the Connection's `config`
/// and `secrets` until its function returns (`Ok`) or the plugin fails.
pub async fn run_connector(
    host: &PluginHost,
    config: &BTreeMap<String, String>,
    secrets: &Secrets,
    sink: &dyn ConnectorSink,
) -> Result<(), PluginError> {
    let exports = host.exports().await?;
    if !exports.connector {
        return Err(PluginError::Entry {
            entry: host.label().to_string(),
            detail: "it has no default-exported connector function".into(),
            fix: "export `default async function (ctx) { ... }` that calls ctx.emit(event)".into(),
        });
    }
    let secrets: serde_json::Map<String, JsonValue> = secrets
        .iter()
        .map(|(name, value)| (name.to_string(), JsonValue::from(value)))
        .collect();
    let invocation = "connector";
    let params = serde_json::json!({
        "invocation": invocation,
        "config": config,
        "secrets": secrets,
    });
    let mut server = EmitServer { sink };
    host.call_unbounded(methods::CONNECTOR_START, params, (invocation, &mut server))
        .await
        .map(drop)
}
