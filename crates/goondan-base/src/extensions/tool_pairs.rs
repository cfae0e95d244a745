//! Keeping tool calls and their results together when messages are
//! removed: shared by `message-window` and `message-compaction`.
//!
//! Providers refuse a `tool` message whose results do not answer the
//! calls of the assistant message right before it, and an assistant
//! message whose calls go unanswered. So a removal plan is widened until
//! neither can happen: an assistant message and the tool message answering
//! it are removed together or kept together, and any result left without
//! its call right before it is removed too.

use goondan_types::{ContentPart, Message, MessageContent, ModelMessage};
use std::borrow::Borrow;
use std::collections::HashSet;

/// The ids of the tool calls an assistant message makes.
pub(crate) fn call_ids(message: &Message) -> Vec<&str> {
    match &message.data {
        ModelMessage::Assistant {
            content: MessageContent::Parts(parts),
            ..
        } => parts
            .iter()
            .filter_map(|part| match part {
                ContentPart::ToolCall { tool_call_id, .. } => Some(tool_call_id.as_str()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The ids of the calls a tool message answers.
pub(crate) fn result_ids(message: &Message) -> Vec<&str> {
    match &message.data {
        ModelMessage::Tool { content, .. } => content
            .iter()
            .filter_map(|part| match part {
                ContentPart::ToolResult { tool_call_id, .. } => Some(tool_call_id.as_str()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Widens `removed` (message ids) so no call is separated from its result.
///
/// Takes owned messages or references, so a middleware can pass a view of
/// the conversation without copying it.
pub(crate) fn widen_removals<M: Borrow<Message>>(messages: &[M], removed: &mut HashSet<String>) {
    let messages: Vec<&Message> = messages.iter().map(Borrow::borrow).collect();
    // Pairs: an assistant message with calls and the tool message right
    // after it that answers them.
    let pairs: Vec<(usize, usize)> = (1..messages.len())
        .filter(|&index| {
            let calls = call_ids(messages[index - 1]);
            let results = result_ids(messages[index]);
            !calls.is_empty() && !results.is_empty() && results.iter().all(|id| calls.contains(id))
        })
        .map(|index| (index - 1, index))
        .collect();
    loop {
        let mut changed = false;
        for &(call, result) in &pairs {
            let call_removed = removed.contains(&messages[call].id);
            let result_removed = removed.contains(&messages[result].id);
            if call_removed != result_removed {
                removed.insert(messages[call].id.clone());
                removed.insert(messages[result].id.clone());
                changed = true;
            }
        }
        let mut previous: Option<&Message> = None;
        for &message in &messages {
            if removed.contains(&message.id) {
                continue;
            }
            let results = result_ids(message);
            if !results.is_empty() {
                let answered = previous.map(call_ids).unwrap_or_default();
                if !results.iter().all(|id| answered.contains(id)) {
                    removed.insert(message.id.clone());
                    changed = true;
                    continue;
                }
            }
            previous = Some(message);
        }
        if !changed {
            return;
        }
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use goondan_types::{ContentPart, Message, MessageSource, ModelMessage, ToolResultOutput};
    use serde_json::json;

    /// A message with a predictable id.
    pub(crate) fn with_id(id: &str, data: ModelMessage) -> Message {
        let mut message = Message::new(data, MessageSource::User);
        message.id = id.to_string();
        message
    }

    pub(crate) fn user(id: &str, text: &str) -> Message {
        with_id(id, ModelMessage::user(text))
    }

    pub(crate) fn assistant_text(id: &str, text: &str) -> Message {
        with_id(id, ModelMessage::assistant(vec![ContentPart::text(text)]))
    }

    pub(crate) fn call(id: &str, call_id: &str) -> Message {
        with_id(
            id,
            ModelMessage::assistant(vec![ContentPart::tool_call(call_id, "t__x", json!({}))]),
        )
    }

    pub(crate) fn result(id: &str, call_id: &str) -> Message {
        with_id(
            id,
            ModelMessage::tool(vec![ContentPart::tool_result(
                call_id,
                "t__x",
                ToolResultOutput::Json(json!({"ok": true})),
            )]),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    fn widened(messages: &[Message], initial: &[&str]) -> Vec<String> {
        let mut removed: HashSet<String> = initial.iter().map(|id| id.to_string()).collect();
        widen_removals(messages, &mut removed);
        let mut ids: Vec<String> = messages
            .iter()
            .filter(|message| removed.contains(&message.id))
            .map(|message| message.id.clone())
            .collect();
        ids.dedup();
        ids
    }

    #[test]
    fn calls_and_results_go_together() {
        let messages = vec![
            user("u1", "hi"),
            call("a1", "c1"),
            result("t1", "c1"),
            assistant_text("a2", "done"),
        ];
        assert_eq!(widened(&messages, &["u1", "a1"]), ["u1", "a1", "t1"]);
        assert_eq!(widened(&messages, &["t1"]), ["a1", "t1"]);
        assert_eq!(widened(&messages, &["u1"]), ["u1"]);
        assert!(widened(&messages, &[]).is_empty());
    }

    #[test]
    fn a_result_already_without_its_call_is_removed() {
        let messages = vec![result("t0", "c0"), user("u1", "hi")];
        assert_eq!(widened(&messages, &[]), ["t0"]);
    }
}
