//! `message-window`: before each Turn, keeps only the last `maxMessages`
//! messages by emitting `remove` events for older ones, widened so a tool
//! call and its result are never separated. Pinned messages and the
//! context message are outside the window: kept, and not counted.

use super::tool_pairs::widen_removals;
use super::{is_retained, parse_config};
use futures_util::future::BoxFuture;
use goondan_runtime::pipeline::{LayerResult, MiddlewareOptions};
use goondan_runtime::{
    Extension, ExtensionApi, ExtensionInitError, Middleware, TurnContext, TurnNext,
};
use goondan_types::{JsonValue, Message, MessageEvent};
use serde::Deserialize;
use std::borrow::Borrow;
use std::collections::HashSet;
use std::sync::Arc;

/// `spec.config` of `message-window`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MessageWindowConfig {
    /// The most messages kept; at least 1.
    pub max_messages: usize,
}

impl Default for MessageWindowConfig {
    fn default() -> Self {
        MessageWindowConfig { max_messages: 80 }
    }
}

/// The extension.
#[derive(Debug, Clone, Copy, Default)]
pub struct MessageWindow;

impl Extension for MessageWindow {
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        let config: MessageWindowConfig = parse_config(api.name(), config)?;
        if config.max_messages == 0 {
            return Err(ExtensionInitError::new(
                "message-window: maxMessages must be at least 1",
            ));
        }
        api.pipeline().register::<TurnContext>(
            Arc::new(MessageWindowLayer { config }),
            MiddlewareOptions::default(),
        );
        Ok(())
    }
}

/// The `turn` middleware.
#[derive(Debug, Clone)]
pub struct MessageWindowLayer {
    config: MessageWindowConfig,
}

impl MessageWindowLayer {
    /// The ids to remove from `messages`, oldest first.
    fn removals<M: Borrow<Message>>(&self, messages: &[M]) -> Vec<String> {
        let windowed: Vec<&Message> = messages
            .iter()
            .map(Borrow::borrow)
            .filter(|message| !is_retained(message))
            .collect();
        let excess = windowed.len().saturating_sub(self.config.max_messages);
        if excess == 0 {
            return Vec::new();
        }
        let mut removed: HashSet<String> = windowed[..excess]
            .iter()
            .map(|message| message.id.clone())
            .collect();
        widen_removals(messages, &mut removed);
        messages
            .iter()
            .map(Borrow::borrow)
            .filter(|message| removed.contains(&message.id))
            .map(|message| message.id.clone())
            .collect()
    }
}

impl Middleware<TurnContext> for MessageWindowLayer {
    fn handle<'a>(
        &'a self,
        ctx: &'a mut TurnContext,
        next: TurnNext<'a>,
    ) -> BoxFuture<'a, LayerResult<TurnContext>> {
        Box::pin(async move {
            let removals = {
                let state = ctx.conversation_state();
                self.removals(&state.next_messages().iter().collect::<Vec<_>>())
            };
            for target_id in removals {
                ctx.emit_message_event(MessageEvent::Remove { target_id })?;
            }
            next.run(ctx).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tool_pairs::fixtures::*;
    use super::*;

    #[test]
    fn keeps_the_last_messages_without_splitting_tool_pairs() {
        let layer = MessageWindowLayer {
            config: MessageWindowConfig { max_messages: 3 },
        };
        let messages = vec![
            user("u1", "a"),
            call("a1", "c1"),
            result("t1", "c1"),
            assistant_text("a2", "b"),
            user("u2", "c"),
        ];
        // A plain cut of two would keep t1 without its call.
        assert_eq!(layer.removals(&messages), ["u1", "a1", "t1"]);
        assert!(layer.removals(&messages[..3]).is_empty());
    }

    #[test]
    fn pinned_and_context_messages_are_outside_the_window() {
        let layer = MessageWindowLayer {
            config: MessageWindowConfig { max_messages: 1 },
        };
        let mut prompt = user("p", "system prompt");
        prompt.metadata.insert(
            super::super::context_message::MARKER_KEY.into(),
            serde_json::json!({}),
        );
        let mut pinned = user("pin", "keep me");
        pinned
            .metadata
            .insert("pinned".into(), serde_json::json!(true));
        let messages = vec![prompt, user("u1", "a"), pinned, user("u2", "b")];
        assert_eq!(layer.removals(&messages), ["u1"]);
    }

    #[test]
    fn config_is_parsed_strictly() {
        assert_eq!(
            parse_config::<MessageWindowConfig>("message-window", &JsonValue::Null).unwrap(),
            MessageWindowConfig::default()
        );
        let parsed: MessageWindowConfig =
            parse_config("message-window", &serde_json::json!({"maxMessages": 5})).unwrap();
        assert_eq!(parsed.max_messages, 5);
        for bad in [
            serde_json::json!({"maxMessages": "5"}),
            serde_json::json!({"max": 5}),
        ] {
            let error = parse_config::<MessageWindowConfig>("message-window", &bad).unwrap_err();
            assert!(
                error.message.contains("message-window"),
                "{}",
                error.message
            );
        }
    }
}
