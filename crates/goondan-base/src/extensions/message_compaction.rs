//! `message-compaction`: before a Turn, when the conversation is over its
//! message or character budget, replaces older messages with one summary
//! message. Pinned messages (`metadata.pinned: true`), the context message
//! and the last `retainLastMessages` stay; a tool call and its result go
//! together.
//!
//! The summary is written by the agent's own model when a [`Summarizer`]
//! is given (the runtime's `ExtensionApi` offers no model, so the builtin
//! catalog is built with one; see [`crate::builtins_for_agent`]); without
//! one, or when the model call fails, it is a short factual note of what
//! was removed, so compaction never fails a Turn.
//!
//! In `remove` mode the summary takes the place of the oldest removed
//! message (a `replace` event) and the rest are removed. In `truncate` mode
//! everything goes (`truncate`), then the summary and the pinned messages
//! are appended again.

use super::tool_pairs::widen_removals;
use super::{is_retained, parse_config};
use futures_util::future::BoxFuture;
use goondan_model::{Model, ModelParams, ModelRequest, NoStream};
use goondan_runtime::pipeline::{LayerResult, MiddlewareOptions};
use goondan_runtime::{
    Extension, ExtensionApi, ExtensionInitError, Middleware, TurnContext, TurnNext,
};
use goondan_types::{ContentPart, JsonValue, Message, MessageEvent, MessageSource, ModelMessage};
use serde::Deserialize;
use serde_json::json;
use std::borrow::Borrow;
use std::collections::HashSet;
use std::sync::Arc;

const EXTENSION_NAME: &str = "message-compaction";
/// How much of one message goes into the summarization prompt.
const TRANSCRIPT_CHARS_PER_MESSAGE: usize = 2_000;

/// How compaction removes messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompactionMode {
    /// Removes the oldest unpinned messages until under budget.
    #[default]
    Remove,
    /// Clears the conversation, keeping only pinned messages.
    Truncate,
}

/// `spec.config` of `message-compaction`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MessageCompactionConfig {
    /// Compacts above this many messages.
    pub max_messages: usize,
    /// Compacts above this many characters (text, tool inputs and outputs).
    pub max_characters: usize,
    /// Compacts above this many tokens, estimated as characters / 4
    /// (rounded up); unset means no token budget.
    pub max_tokens: Option<usize>,
    /// The newest messages never removed in `remove` mode.
    pub retain_last_messages: usize,
    /// `remove` or `truncate`.
    pub mode: CompactionMode,
    /// Whether removed messages leave a summary behind.
    pub append_summary: bool,
    /// The first words of the summary message.
    pub summary_prefix: String,
}

impl Default for MessageCompactionConfig {
    fn default() -> Self {
        MessageCompactionConfig {
            max_messages: 40,
            max_characters: 12_000,
            max_tokens: None,
            retain_last_messages: 8,
            mode: CompactionMode::Remove,
            append_summary: true,
            summary_prefix: "[message-compaction]".into(),
        }
    }
}

/// The model summaries are written with.
#[derive(Clone)]
pub struct Summarizer {
    model: Arc<dyn Model>,
    model_name: String,
    params: ModelParams,
}

impl std::fmt::Debug for Summarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Summarizer")
            .field("model_name", &self.model_name)
            .finish_non_exhaustive()
    }
}

impl Summarizer {
    /// Summaries by `model` (the agent's), called as `model_name`.
    pub fn new(model: Arc<dyn Model>, model_name: &str, params: ModelParams) -> Self {
        Summarizer {
            model,
            model_name: model_name.to_string(),
            params,
        }
    }

    async fn summarize(&self, removed: &[Message]) -> Result<String, goondan_model::ModelError> {
        let request = ModelRequest {
            model: self.model_name.clone(),
            messages: vec![
                ModelMessage::system(
                    "You compress conversations. Summarize the messages you are given so the assistant can carry on: \
                     keep facts, decisions, results of tool calls, open tasks, names, numbers and paths; drop small talk. \
                     Answer with the summary only.",
                ),
                ModelMessage::user(transcript(removed)),
            ],
            tools: Vec::new(),
            params: self.params.clone(),
        };
        let response = self.model.generate(request, &NoStream).await?;
        Ok(response.text().trim().to_string())
    }
}

/// The extension; holds the summarizer every agent it registers on uses.
#[derive(Debug, Clone, Default)]
pub struct MessageCompaction {
    summarizer: Option<Summarizer>,
}

impl MessageCompaction {
    /// The extension, summarizing with `summarizer` when given.
    pub fn new(summarizer: Option<Summarizer>) -> Self {
        MessageCompaction { summarizer }
    }
}

impl Extension for MessageCompaction {
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        let config: MessageCompactionConfig = parse_config(api.name(), config)?;
        if config.max_messages == 0 || config.max_characters == 0 {
            return Err(ExtensionInitError::new(
                "message-compaction: maxMessages and maxCharacters must be at least 1",
            ));
        }
        let layer = MessageCompactionLayer {
            config,
            summarizer: self.summarizer.clone(),
            logger: api.logger().clone(),
        };
        api.pipeline()
            .register::<TurnContext>(Arc::new(layer), MiddlewareOptions::default());
        Ok(())
    }
}

/// The `turn` middleware.
#[derive(Debug, Clone)]
pub struct MessageCompactionLayer {
    config: MessageCompactionConfig,
    summarizer: Option<Summarizer>,
    logger: tracing::Span,
}

/// What one compaction removes.
#[derive(Debug, PartialEq)]
struct Plan {
    /// The removed messages, oldest first.
    removed: Vec<Message>,
    /// Pinned messages to append again after a truncate.
    kept_pinned: Vec<Message>,
}

/// The size a message costs: its text plus its tool inputs and outputs.
fn size(message: &Message) -> usize {
    message
        .data
        .parts()
        .iter()
        .map(|part| match part {
            ContentPart::Text { text, .. } | ContentPart::Reasoning { text, .. } => {
                text.chars().count()
            }
            ContentPart::ToolCall { input, .. } => input.to_string().len(),
            ContentPart::ToolResult { output, .. } => output.to_json().to_string().len(),
            _ => 0,
        })
        .sum()
}

fn transcript(messages: &[Message]) -> String {
    let mut lines = Vec::new();
    for message in messages {
        let role = message.data.role();
        for part in message.data.parts() {
            let line = match part {
                ContentPart::Text { text, .. } => format!("{role}: {text}"),
                ContentPart::ToolCall {
                    tool_name, input, ..
                } => format!("{role} called {tool_name}({input})"),
                ContentPart::ToolResult {
                    tool_name, output, ..
                } => {
                    format!("result of {tool_name}: {}", output.to_json())
                }
                _ => continue,
            };
            lines.push(
                line.chars()
                    .take(TRANSCRIPT_CHARS_PER_MESSAGE)
                    .collect::<String>(),
            );
        }
    }
    lines.join("\n")
}

impl MessageCompactionLayer {
    fn over_budget(&self, count: usize, characters: usize) -> bool {
        count > self.config.max_messages
            || characters > self.config.max_characters
            || self
                .config
                .max_tokens
                .is_some_and(|max_tokens| characters.div_ceil(4) > max_tokens)
    }

    fn plan<M: Borrow<Message>>(&self, messages: &[M]) -> Option<Plan> {
        let sizes: Vec<usize> = messages
            .iter()
            .map(|message| size(message.borrow()))
            .collect();
        let mut count = messages.len();
        let mut characters: usize = sizes.iter().sum();
        if !self.over_budget(count, characters) {
            return None;
        }
        if self.config.mode == CompactionMode::Truncate {
            let (kept_pinned, removed) = messages
                .iter()
                .map(|message| message.borrow().clone())
                .partition(is_retained);
            return Some(Plan {
                removed,
                kept_pinned,
            });
        }
        let protected_from = messages
            .len()
            .saturating_sub(self.config.retain_last_messages);
        let mut removed: HashSet<String> = HashSet::new();
        for (message, message_size) in messages[..protected_from]
            .iter()
            .map(Borrow::borrow)
            .zip(&sizes)
        {
            if !self.over_budget(count, characters) {
                break;
            }
            if !is_retained(message) {
                removed.insert(message.id.clone());
                count -= 1;
                characters -= message_size;
            }
        }
        widen_removals(messages, &mut removed);
        // Widening may reach a protected or pinned message through its
        // tool pair; keeping the pair whole wins over keeping the message.
        let removed: Vec<Message> = messages
            .iter()
            .map(Borrow::borrow)
            .filter(|message| removed.contains(&message.id))
            .cloned()
            .collect();
        (!removed.is_empty()).then_some(Plan {
            removed,
            kept_pinned: Vec::new(),
        })
    }

    async fn summary(&self, removed: &[Message]) -> Message {
        let characters: usize = removed.iter().map(size).sum();
        let mut summarized_by = "note";
        let mut body = format!(
            "{} earlier messages ({characters} characters) were removed.",
            removed.len()
        );
        if let Some(summarizer) = &self.summarizer {
            match summarizer.summarize(removed).await {
                Ok(text) if !text.is_empty() => {
                    body = text;
                    summarized_by = "model";
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(parent: &self.logger, code = error.code(), error = %error, "summarizing with the model failed; a plain note replaces the removed messages");
                }
            }
        }
        let mut message = Message::new(
            ModelMessage::system(format!("{} {body}", self.config.summary_prefix)),
            MessageSource::Extension {
                extension_name: EXTENSION_NAME.to_string(),
            },
        );
        for (key, value) in [
            ("compaction.summary", json!(true)),
            (
                "compaction.mode",
                json!(match self.config.mode {
                    CompactionMode::Remove => "remove",
                    CompactionMode::Truncate => "truncate",
                }),
            ),
            ("compaction.removedCount", json!(removed.len())),
            ("compaction.removedCharacters", json!(characters)),
            ("compaction.summarizedBy", json!(summarized_by)),
        ] {
            message.metadata.insert(key.into(), value);
        }
        message
    }

    async fn events(&self, plan: Plan) -> Vec<MessageEvent> {
        let summary = if self.config.append_summary {
            Some(self.summary(&plan.removed).await)
        } else {
            None
        };
        let mut events = Vec::new();
        match self.config.mode {
            CompactionMode::Truncate => {
                events.push(MessageEvent::Truncate);
                events.extend(summary.map(|message| MessageEvent::Append { message }));
                events.extend(
                    plan.kept_pinned
                        .into_iter()
                        .map(|message| MessageEvent::Append { message }),
                );
            }
            CompactionMode::Remove => {
                let mut removed = plan.removed.into_iter();
                if let (Some(summary), Some(first)) = (summary, removed.next()) {
                    events.push(MessageEvent::Replace {
                        target_id: first.id,
                        message: summary,
                    });
                } else if let Some(first) = removed.next() {
                    events.push(MessageEvent::Remove {
                        target_id: first.id,
                    });
                }
                events.extend(removed.map(|message| MessageEvent::Remove {
                    target_id: message.id,
                }));
            }
        }
        events
    }
}

impl Middleware<TurnContext> for MessageCompactionLayer {
    fn handle<'a>(
        &'a self,
        ctx: &'a mut TurnContext,
        next: TurnNext<'a>,
    ) -> BoxFuture<'a, LayerResult<TurnContext>> {
        Box::pin(async move {
            let plan = {
                let state = ctx.conversation_state();
                self.plan(&state.next_messages().iter().collect::<Vec<_>>())
            };
            if let Some(plan) = plan {
                for event in self.events(plan).await {
                    ctx.emit_message_event(event)?;
                }
            }
            next.run(ctx).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tool_pairs::fixtures::*;
    use super::*;

    fn layer(config: MessageCompactionConfig) -> MessageCompactionLayer {
        MessageCompactionLayer {
            config,
            summarizer: None,
            logger: tracing::Span::none(),
        }
    }

    fn ids(messages: &[Message]) -> Vec<&str> {
        messages.iter().map(|message| message.id.as_str()).collect()
    }

    #[test]
    fn under_budget_nothing_happens() {
        let compaction = layer(MessageCompactionConfig::default());
        assert!(compaction.plan(&[user("u1", "hi")]).is_none());
    }

    #[test]
    fn removes_oldest_unpinned_keeping_the_tail_and_pairs() {
        let compaction = layer(MessageCompactionConfig {
            max_messages: 3,
            retain_last_messages: 2,
            ..MessageCompactionConfig::default()
        });
        let mut pinned = user("p1", "remember: the code word is teal");
        pinned.metadata.insert("pinned".into(), json!(true));
        let messages = vec![
            pinned,
            user("u1", "a"),
            call("a1", "c1"),
            result("t1", "c1"),
            user("u2", "b"),
            assistant_text("a2", "c"),
        ];
        let plan = compaction.plan(&messages).unwrap();
        // Removing u1 and a1 reaches the budget; t1 follows its call.
        assert_eq!(ids(&plan.removed), ["u1", "a1", "t1"]);
    }

    #[test]
    fn token_budget_is_estimated_from_characters() {
        let compaction = layer(MessageCompactionConfig {
            max_tokens: Some(2),
            retain_last_messages: 1,
            ..MessageCompactionConfig::default()
        });
        // 9 characters are 3 estimated tokens; dropping "four" leaves 2.
        let messages = vec![user("u1", "four"), user("u2", "fives")];
        assert_eq!(ids(&compaction.plan(&messages).unwrap().removed), ["u1"]);
        assert!(compaction.plan(&messages[1..]).is_none());
    }

    #[test]
    fn character_budget_counts_tool_outputs() {
        let compaction = layer(MessageCompactionConfig {
            max_characters: 10,
            retain_last_messages: 1,
            ..MessageCompactionConfig::default()
        });
        let messages = vec![call("a1", "c1"), result("t1", "c1"), user("u1", "short")];
        let plan = compaction.plan(&messages).unwrap();
        assert_eq!(ids(&plan.removed), ["a1", "t1"]);
    }

    #[tokio::test]
    async fn remove_mode_puts_the_summary_in_place_of_the_oldest() {
        let compaction = layer(MessageCompactionConfig {
            max_messages: 1,
            retain_last_messages: 1,
            ..MessageCompactionConfig::default()
        });
        let messages = vec![user("u1", "a"), user("u2", "b"), user("u3", "c")];
        let plan = compaction.plan(&messages).unwrap();
        let events = compaction.events(plan).await;
        match &events[0] {
            MessageEvent::Replace { target_id, message } => {
                assert_eq!(target_id, "u1");
                assert_eq!(message.metadata["compaction.removedCount"], json!(2));
                assert_eq!(message.metadata["compaction.summarizedBy"], json!("note"));
                assert!(message
                    .data
                    .text()
                    .starts_with("[message-compaction] 2 earlier messages"));
            }
            other => panic!("expected a replace, got {other:?}"),
        }
        assert_eq!(
            events[1],
            MessageEvent::Remove {
                target_id: "u2".into()
            }
        );
        assert_eq!(events.len(), 2);
    }

    #[tokio::test]
    async fn truncate_mode_keeps_pinned_messages() {
        let compaction = layer(MessageCompactionConfig {
            max_messages: 1,
            mode: CompactionMode::Truncate,
            append_summary: false,
            ..MessageCompactionConfig::default()
        });
        let mut pinned = user("p1", "keep");
        pinned.metadata.insert("pinned".into(), json!(true));
        let messages = vec![user("u1", "a"), pinned.clone()];
        let events = compaction.events(compaction.plan(&messages).unwrap()).await;
        assert_eq!(
            events,
            vec![
                MessageEvent::Truncate,
                MessageEvent::Append { message: pinned }
            ]
        );
    }

    #[test]
    fn config_is_parsed_strictly() {
        let parsed: MessageCompactionConfig = parse_config(
            EXTENSION_NAME,
            &json!({"maxMessages": 10, "mode": "truncate"}),
        )
        .unwrap();
        assert_eq!(parsed.mode, CompactionMode::Truncate);
        assert_eq!(parsed.retain_last_messages, 8);
        assert!(parse_config::<MessageCompactionConfig>(
            EXTENSION_NAME,
            &json!({"mode": "summarize-all"})
        )
        .is_err());
    }
}
