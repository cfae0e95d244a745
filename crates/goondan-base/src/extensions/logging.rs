//! `logging`: logs Turn, Step and tool-call starts, durations and outcomes
//! through the extension's logger span, at or above a configured level.
//!
//! Turns and Steps log at `info`, tool calls at `debug`, failures at
//! `error`; a line below `level` is not emitted. Tool arguments are left
//! out unless `includeToolArgs` is set, since they may carry user data.

use super::parse_config;
use futures_util::future::BoxFuture;
use goondan_runtime::pipeline::{LayerResult, MiddlewareOptions};
use goondan_runtime::{
    Extension, ExtensionApi, ExtensionInitError, Middleware, StepContext, StepNext,
    ToolCallContext, ToolCallNext, TurnContext, TurnNext,
};
use goondan_types::JsonValue;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

/// A log level, ordered from most to least verbose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Tool calls and everything else.
    Debug,
    /// Turns and Steps.
    Info,
    /// Warnings only.
    Warn,
    /// Failures only.
    Error,
}

/// `spec.config` of `logging`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LoggingConfig {
    /// The least severe level emitted.
    pub level: LogLevel,
    /// Adds tool-call arguments to tool-call lines.
    pub include_tool_args: bool,
    /// Adds the trace id and input event type to Turn start lines.
    pub include_turn_metadata: bool,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            level: LogLevel::Info,
            include_tool_args: false,
            include_turn_metadata: true,
        }
    }
}

/// The extension.
#[derive(Debug, Clone, Copy, Default)]
pub struct Logging;

impl Extension for Logging {
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        let config: LoggingConfig = parse_config(api.name(), config)?;
        let layer = Arc::new(LoggingLayer {
            config,
            logger: api.logger().clone(),
        });
        let pipeline = api.pipeline();
        pipeline.register::<TurnContext>(layer.clone(), MiddlewareOptions::default());
        pipeline.register::<StepContext>(layer.clone(), MiddlewareOptions::default());
        pipeline.register::<ToolCallContext>(layer, MiddlewareOptions::default());
        Ok(())
    }
}

/// The `turn`, `step` and `toolCall` middleware.
#[derive(Debug, Clone)]
pub struct LoggingLayer {
    config: LoggingConfig,
    logger: tracing::Span,
}

impl LoggingLayer {
    fn log(&self, level: LogLevel, message: &str, fields: JsonValue) {
        if level < self.config.level {
            return;
        }
        let span = &self.logger;
        match level {
            LogLevel::Debug => tracing::debug!(parent: span, fields = %fields, "{message}"),
            LogLevel::Info => tracing::info!(parent: span, fields = %fields, "{message}"),
            LogLevel::Warn => tracing::warn!(parent: span, fields = %fields, "{message}"),
            LogLevel::Error => tracing::error!(parent: span, fields = %fields, "{message}"),
        }
    }
}

fn millis(started: Instant) -> u64 {
    started.elapsed().as_millis() as u64
}

impl Middleware<TurnContext> for LoggingLayer {
    fn handle<'a>(
        &'a self,
        ctx: &'a mut TurnContext,
        next: TurnNext<'a>,
    ) -> BoxFuture<'a, LayerResult<TurnContext>> {
        Box::pin(async move {
            let started = Instant::now();
            let turn_id = ctx.turn_id().to_string();
            let mut fields = json!({"turnId": turn_id});
            if self.config.include_turn_metadata {
                fields["traceId"] = json!(ctx.trace_id());
                fields["inputType"] = json!(ctx.input_event().event_type);
            }
            self.log(LogLevel::Info, "[logging.turn] start", fields);
            let result = next.run(ctx).await;
            match &result {
                Ok(turn) => self.log(
                    LogLevel::Info,
                    "[logging.turn] complete",
                    json!({"turnId": turn_id, "durationMs": millis(started), "finishReason": turn.finish_reason}),
                ),
                Err(error) => self.log(
                    LogLevel::Error,
                    "[logging.turn] failed",
                    json!({"turnId": turn_id, "durationMs": millis(started), "code": error.code(), "error": error.to_string()}),
                ),
            }
            result
        })
    }
}

impl Middleware<StepContext> for LoggingLayer {
    fn handle<'a>(
        &'a self,
        ctx: &'a mut StepContext,
        next: StepNext<'a>,
    ) -> BoxFuture<'a, LayerResult<StepContext>> {
        Box::pin(async move {
            let started = Instant::now();
            let turn_id = ctx.turn_id().to_string();
            let step_index = ctx.step_index();
            self.log(
                LogLevel::Info,
                "[logging.step] start",
                json!({"turnId": turn_id, "stepIndex": step_index, "catalogSize": ctx.tool_catalog.len()}),
            );
            let result = next.run(ctx).await;
            match &result {
                Ok(step) => self.log(
                    LogLevel::Info,
                    "[logging.step] complete",
                    json!({
                        "turnId": turn_id, "stepIndex": step_index, "durationMs": millis(started),
                        "toolCalls": step.tool_calls.len(), "shouldContinue": step.should_continue
                    }),
                ),
                Err(error) => self.log(
                    LogLevel::Error,
                    "[logging.step] failed",
                    json!({"turnId": turn_id, "stepIndex": step_index, "durationMs": millis(started), "code": error.code(), "error": error.to_string()}),
                ),
            }
            result
        })
    }
}

impl Middleware<ToolCallContext> for LoggingLayer {
    fn handle<'a>(
        &'a self,
        ctx: &'a mut ToolCallContext,
        next: ToolCallNext<'a>,
    ) -> BoxFuture<'a, LayerResult<ToolCallContext>> {
        Box::pin(async move {
            let started = Instant::now();
            let mut fields = json!({
                "turnId": ctx.turn_id(), "stepIndex": ctx.step_index(),
                "toolCallId": ctx.tool_call_id(), "toolName": ctx.tool_name()
            });
            let mut start_fields = fields.clone();
            if self.config.include_tool_args {
                start_fields["args"] = JsonValue::Object(ctx.args.clone());
            }
            self.log(LogLevel::Debug, "[logging.toolCall] start", start_fields);
            let result = next.run(ctx).await;
            fields["durationMs"] = json!(millis(started));
            match &result {
                Ok(call) => {
                    fields["status"] = json!(call.status);
                    if let Some(code) = call.error.as_ref().and_then(|error| error.code.as_ref()) {
                        fields["code"] = json!(code);
                    }
                    self.log(LogLevel::Debug, "[logging.toolCall] complete", fields);
                }
                Err(error) => {
                    fields["code"] = json!(error.code());
                    fields["error"] = json!(error.to_string());
                    self.log(LogLevel::Error, "[logging.toolCall] failed", fields);
                }
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_order_and_config_parse() {
        assert!(LogLevel::Debug < LogLevel::Info && LogLevel::Warn < LogLevel::Error);
        let parsed: LoggingConfig = parse_config(
            "logging",
            &json!({"level": "debug", "includeToolArgs": true}),
        )
        .unwrap();
        assert_eq!(parsed.level, LogLevel::Debug);
        assert!(parsed.include_tool_args && parsed.include_turn_metadata);
        assert!(parse_config::<LoggingConfig>("logging", &json!({"level": "verbose"})).is_err());
    }
}
