//! `required-tools-guard`: a Turn may not end before the required tools
//! were called successfully. When the model answers without having called
//! them, the `step` middleware appends a reminder (a user message) and
//! asks for another Step, up to `maxReminders` times per Turn; the Turn's
//! own `maxStepsPerTurn` still bounds everything.
//!
//! Progress is kept per Turn id and dropped when the Turn ends, so a call
//! in one Turn never satisfies the next.

use super::parse_config;
use futures_util::future::BoxFuture;
use goondan_runtime::pipeline::{LayerResult, MiddlewareOptions};
use goondan_runtime::{
    Extension, ExtensionApi, ExtensionInitError, Middleware, StepContext, StepNext,
    ToolCallContext, ToolCallNext, TurnContext, TurnNext,
};
use goondan_types::{JsonValue, Message, MessageEvent, MessageSource, ModelMessage};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

const EXTENSION_NAME: &str = "required-tools-guard";

/// Whether one or every required tool must be called.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequireMode {
    /// Any one of them (the original's rule).
    #[default]
    Any,
    /// Every one of them.
    All,
}

/// `spec.config` of `required-tools-guard`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RequiredToolsGuardConfig {
    /// Catalog names (`resource__export`); empty disables the guard.
    pub required_tools: Vec<String>,
    /// The reminder; empty gives a default naming the tools.
    pub error_message: String,
    /// Any or all of `requiredTools`.
    pub mode: RequireMode,
    /// Reminders per Turn before the Turn may end anyway.
    pub max_reminders: u32,
}

impl Default for RequiredToolsGuardConfig {
    fn default() -> Self {
        RequiredToolsGuardConfig {
            required_tools: Vec::new(),
            error_message: String::new(),
            mode: RequireMode::Any,
            max_reminders: 3,
        }
    }
}

/// The extension.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequiredToolsGuard;

impl Extension for RequiredToolsGuard {
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        let mut config: RequiredToolsGuardConfig = parse_config(api.name(), config)?;
        config.required_tools.retain(|name| !name.trim().is_empty());
        if config.required_tools.is_empty() {
            return Ok(());
        }
        let layer = Arc::new(RequiredToolsGuardLayer {
            config,
            turns: Arc::default(),
        });
        let pipeline = api.pipeline();
        pipeline.register::<TurnContext>(layer.clone(), MiddlewareOptions::default());
        pipeline.register::<StepContext>(layer.clone(), MiddlewareOptions::default());
        pipeline.register::<ToolCallContext>(layer, MiddlewareOptions::default());
        Ok(())
    }
}

#[derive(Debug, Default)]
struct TurnProgress {
    called: HashSet<String>,
    reminders: u32,
}

/// The `turn`, `step` and `toolCall` middleware.
#[derive(Debug)]
pub struct RequiredToolsGuardLayer {
    config: RequiredToolsGuardConfig,
    turns: Arc<Mutex<HashMap<String, TurnProgress>>>,
}

impl RequiredToolsGuardLayer {
    fn with_turn<T>(&self, turn_id: &str, work: impl FnOnce(&mut TurnProgress) -> T) -> T {
        let mut turns = self
            .turns
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        work(turns.entry(turn_id.to_string()).or_default())
    }

    fn satisfied(&self, called: &HashSet<String>) -> bool {
        let mut required = self.config.required_tools.iter();
        match self.config.mode {
            RequireMode::Any => required.any(|name| called.contains(name)),
            RequireMode::All => required.all(|name| called.contains(name)),
        }
    }

    /// The reminder to append, if the Turn is about to end unsatisfied and
    /// reminders are left.
    fn reminder(&self, turn_id: &str) -> Option<Message> {
        let due = self.with_turn(turn_id, |progress| {
            if self.satisfied(&progress.called) || progress.reminders >= self.config.max_reminders {
                return false;
            }
            progress.reminders += 1;
            true
        });
        due.then(|| {
            let text = if self.config.error_message.trim().is_empty() {
                let joiner = match self.config.mode {
                    RequireMode::Any => "one of these tools",
                    RequireMode::All => "all of these tools",
                };
                format!(
                    "Before finishing, you must call {joiner}: {}",
                    self.config.required_tools.join(", ")
                )
            } else {
                self.config.error_message.clone()
            };
            Message::new(
                ModelMessage::user(text),
                MessageSource::Extension {
                    extension_name: EXTENSION_NAME.to_string(),
                },
            )
        })
    }
}

impl Middleware<TurnContext> for RequiredToolsGuardLayer {
    fn handle<'a>(
        &'a self,
        ctx: &'a mut TurnContext,
        next: TurnNext<'a>,
    ) -> BoxFuture<'a, LayerResult<TurnContext>> {
        Box::pin(async move {
            let turn_id = ctx.turn_id().to_string();
            self.with_turn(&turn_id, |progress| *progress = TurnProgress::default());
            let result = next.run(ctx).await;
            self.turns
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remove(&turn_id);
            result
        })
    }
}

impl Middleware<ToolCallContext> for RequiredToolsGuardLayer {
    fn handle<'a>(
        &'a self,
        ctx: &'a mut ToolCallContext,
        next: ToolCallNext<'a>,
    ) -> BoxFuture<'a, LayerResult<ToolCallContext>> {
        Box::pin(async move {
            let turn_id = ctx.turn_id().to_string();
            let result = next.run(ctx).await?;
            if result.is_ok() {
                self.with_turn(&turn_id, |progress| {
                    progress.called.insert(result.tool_name.clone())
                });
            }
            Ok(result)
        })
    }
}

impl Middleware<StepContext> for RequiredToolsGuardLayer {
    fn handle<'a>(
        &'a self,
        ctx: &'a mut StepContext,
        next: StepNext<'a>,
    ) -> BoxFuture<'a, LayerResult<StepContext>> {
        Box::pin(async move {
            let mut result = next.run(ctx).await?;
            if result.should_continue {
                return Ok(result);
            }
            let turn_id = ctx.turn_id().to_string();
            // A toolCall layer outside this extension's may have skipped
            // ours; the step's own results count too.
            self.with_turn(&turn_id, |progress| {
                for call in result.tool_results.iter().filter(|call| call.is_ok()) {
                    progress.called.insert(call.tool_name.clone());
                }
            });
            if let Some(message) = self.reminder(&turn_id) {
                ctx.emit_message_event(MessageEvent::Append { message })?;
                result.should_continue = true;
            }
            Ok(result)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn layer(mode: RequireMode, max_reminders: u32) -> RequiredToolsGuardLayer {
        RequiredToolsGuardLayer {
            config: RequiredToolsGuardConfig {
                required_tools: vec!["a__x".into(), "b__y".into()],
                mode,
                max_reminders,
                ..RequiredToolsGuardConfig::default()
            },
            turns: Arc::default(),
        }
    }

    #[test]
    fn reminds_up_to_the_limit_until_satisfied() {
        let guard = layer(RequireMode::Any, 2);
        let first = guard.reminder("t1").unwrap();
        assert_eq!(
            first.data.text(),
            "Before finishing, you must call one of these tools: a__x, b__y"
        );
        assert!(guard.reminder("t1").is_some());
        assert!(guard.reminder("t1").is_none(), "limit reached");
        assert!(guard.reminder("t2").is_some(), "limits are per Turn");
        guard.with_turn("t3", |progress| progress.called.insert("b__y".into()));
        assert!(guard.reminder("t3").is_none());
    }

    #[test]
    fn all_mode_needs_every_tool() {
        let guard = layer(RequireMode::All, 5);
        guard.with_turn("t", |progress| progress.called.insert("a__x".into()));
        assert!(guard
            .reminder("t")
            .unwrap()
            .data
            .text()
            .contains("all of these tools"));
        guard.with_turn("t", |progress| progress.called.insert("b__y".into()));
        assert!(guard.reminder("t").is_none());
    }

    #[test]
    fn config_is_parsed_strictly() {
        let parsed: RequiredToolsGuardConfig = parse_config(
            EXTENSION_NAME,
            &json!({"requiredTools": ["a__x"], "errorMessage": "call it", "mode": "all"}),
        )
        .unwrap();
        assert_eq!(parsed.mode, RequireMode::All);
        assert_eq!(parsed.max_reminders, 3);
        assert!(parse_config::<RequiredToolsGuardConfig>(
            EXTENSION_NAME,
            &json!({"requiredTools": "a__x"})
        )
        .is_err());
    }
}
