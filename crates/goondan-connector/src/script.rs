//! A Connector whose entry is a script (`export default async function
//! (ctx)`), run as a [`Source`] by a plugin host (`goondan-plugin`): its
//! `ctx.emit` goes to the swarm through this process's [`Emitter`], once
//! per call (the script decides whether to retry a refusal).
//!
//! A script that returns, or a plugin that dies, ends the source; the
//! ConnectorProcess then exits 1 and the orchestrator restarts it with
//! its crash backoff, as for any connector.

use crate::config::ConnectorConfig;
use crate::source::{Shutdown, Source};
use crate::{EmitError, Emitter};
use futures_util::future::BoxFuture;
use goondan_plugin::connector::{run_connector, ConnectorSink, EmitRefusal};
use goondan_plugin::host::HostOptions;
use goondan_plugin::launch::{self, LaunchOptions};
use goondan_plugin::{PluginError, PluginHost};
use goondan_types::{ConnectorEvent, JsonValue, ScriptRuntime};
use std::path::Path;
use std::sync::Arc;

/// A script connector, planned and not started.
pub struct ScriptSource {
    host: PluginHost,
    config: ConnectorConfig,
}

impl ScriptSource {
    /// Plans the plugin for entry `path` (relative to `bundle_root`);
    /// `strip_types_command` strips a TypeScript entry on an old Node.
    pub fn plan(
        bundle_root: &Path,
        path: &str,
        runtime: ScriptRuntime,
        config: ConnectorConfig,
        strip_types_command: Option<Vec<String>>,
    ) -> Result<ScriptSource, PluginError> {
        let launch = launch::plan(
            &bundle_root.join(path),
            runtime,
            path,
            &LaunchOptions {
                strip_types_command,
                ..LaunchOptions::default()
            },
        )?;
        let options = HostOptions {
            secrets: config.secrets.clone(),
            ..HostOptions::default()
        };
        Ok(ScriptSource {
            host: PluginHost::new(path, launch, options),
            config,
        })
    }
}

/// The process's emitter as the plugin's sink.
struct EmitterSink(Arc<dyn Emitter>);

impl ConnectorSink for EmitterSink {
    fn emit(&self, event: ConnectorEvent) -> BoxFuture<'_, Result<JsonValue, EmitRefusal>> {
        Box::pin(async move {
            match self.0.emit(event).await {
                Ok(accepted) => Ok(serde_json::json!({ "target": accepted.target })),
                Err(error) => {
                    let code = match &error {
                        EmitError::QueueFull(_) => goondan_ipc::WireCode::QueueFull.as_str(),
                        EmitError::Closed(_) => "E_SWARM_CLOSED",
                        EmitError::Refused(_) => "E_EVENT_REFUSED",
                    };
                    Err(EmitRefusal {
                        code: code.to_string(),
                        message: error.to_string(),
                    })
                }
            }
        })
    }
}

impl Source for ScriptSource {
    fn name(&self) -> &'static str {
        "script"
    }

    fn run(
        self: Box<Self>,
        emitter: Arc<dyn Emitter>,
        shutdown: Shutdown,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let sink = EmitterSink(emitter);
            let run = run_connector(&self.host, &self.config.config, &self.config.secrets, &sink);
            tokio::select! {
                outcome = run => match outcome {
                    Ok(()) => tracing::warn!(connector = self.host.label(), "the script connector returned"),
                    Err(error) => tracing::error!(connector = self.host.label(), code = error.code(), "the script connector failed: {error}"),
                },
                () = shutdown.stopped() => self.host.shutdown().await,
            }
        })
    }
}
