//! What a redelivered input finds in the conversation.
//!
//! The orchestrator keeps an input event until the Turn that consumed it
//! reports back, and hands it to the next process when the one running it
//! died. By then the event may have been consumed: its user message (which
//! carries `metadata.eventId`) is in the conversation, and the Turn either
//! finished (its answer is the last assistant message after it) or was cut
//! short. A finished Turn is never run again: the requester gets the
//! answer already recorded. A Turn that was cut short is resumed without a
//! second copy of its input, and every tool call it left without a result
//! gets one saying the call was interrupted, so the conversation keeps the
//! shape the providers require (every tool call answered).

use crate::conversation::MessagesView;
use goondan_types::{
    ContentPart, JsonValue, Message, MessageSource, ModelMessage, ToolCall, ToolResultOutput,
};

/// The metadata key marking the user message that carries an input event.
pub(crate) const INBOUND_MARK: &str = "__goondanInbound";

/// What became of an input event that was already consumed.
#[derive(Debug, Clone, PartialEq)]
pub enum PriorTurn {
    /// Its Turn finished; this is the answer it gave.
    Answered {
        /// The final assistant text.
        text: String,
    },
    /// Its Turn was cut short; `dangling` are the tool results still owed
    /// to calls it made (in call order).
    Interrupted {
        /// Results to append before the Turn goes on.
        dangling: Vec<Message>,
    },
}

/// The code of the tool result that closes an interrupted call.
pub const TOOL_INTERRUPTED: &str = "E_TOOL_INTERRUPTED";

/// The code of the tool result that closes a call whose Turn was
/// cancelled while it ran.
pub const TOOL_CANCELLED: &str = "E_TOOL_CANCELLED";

/// Why a tool call is closed without its own result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Closing {
    /// The process running it stopped (a crash, a kill): found when the
    /// instance runs again.
    Interrupted,
    /// Its Turn was cancelled while it ran; `by` names the person who
    /// cancelled it, `None` when the Turn's requester gave up.
    Cancelled {
        /// Who cancelled the Turn.
        by: Option<String>,
    },
}

impl Closing {
    /// The error result every call closed this way gets.
    fn output(&self) -> ToolResultOutput {
        let (code, message) = match self {
            Closing::Interrupted => (
                TOOL_INTERRUPTED,
                "the agent process stopped while this call ran; it may or may not have taken effect".to_string(),
            ),
            Closing::Cancelled { by: Some(by) } => (
                TOOL_CANCELLED,
                format!("the Turn was cancelled by an operator ({by}) while this call ran; it may or may not have taken effect"),
            ),
            Closing::Cancelled { by: None } => (
                TOOL_CANCELLED,
                "the Turn was cancelled by its requester while this call ran; it may or may not have taken effect".to_string(),
            ),
        };
        ToolResultOutput::ErrorJson(serde_json::json!({
            "code": code,
            "message": message,
            "suggestion": "check its effect before calling it again",
        }))
    }
}

/// Looks for the Turn that consumed `event_id`, newest first (a
/// redelivered event is almost always the latest input, so this reads only
/// the tail of a long conversation).
pub(crate) fn prior_turn(messages: &MessagesView<'_>, event_id: &str) -> Option<PriorTurn> {
    let all: Vec<&Message> = messages.iter().collect();
    let start = all.iter().rposition(|message| {
        message.metadata.get(INBOUND_MARK) == Some(&JsonValue::Bool(true))
            && message.metadata.get("eventId").and_then(JsonValue::as_str) == Some(event_id)
    })?;
    let turn: Vec<&Message> = all[start + 1..]
        .iter()
        .take_while(|message| !message.metadata.contains_key(INBOUND_MARK))
        .copied()
        .collect();
    if let Some(last) = turn.last() {
        let is_final_answer = matches!(last.data, ModelMessage::Assistant { .. })
            && !last
                .data
                .parts()
                .iter()
                .any(|part| matches!(part, ContentPart::ToolCall { .. }));
        if is_final_answer {
            return Some(PriorTurn::Answered {
                text: last.data.text(),
            });
        }
    }
    Some(PriorTurn::Interrupted {
        dangling: unanswered_calls(&turn, &Closing::Interrupted),
    })
}

/// Tool results for the calls the latest Turn left unanswered, each
/// saying why (`closing`). The one way a call is closed without its own
/// result: a cancelled Turn closes its calls as it ends
/// ([`Closing::Cancelled`]); a new Turn closes those a killed process
/// left (whose input was not redelivered) before its input
/// ([`Closing::Interrupted`]). Either way the conversation keeps the shape
/// the providers require (every tool call answered).
pub(crate) fn close_last_turn(messages: &MessagesView<'_>, closing: &Closing) -> Vec<Message> {
    unanswered_calls(&latest_turn(messages), closing)
}

/// The messages after the latest input, in order.
fn latest_turn<'a>(messages: &'a MessagesView<'_>) -> Vec<&'a Message> {
    let mut turn: Vec<&Message> = messages
        .iter()
        .rev()
        .take_while(|message| !message.metadata.contains_key(INBOUND_MARK))
        .collect();
    turn.reverse();
    turn
}

/// The ids of the calls `messages` hold a result for.
fn answered_ids(messages: &[&Message]) -> Vec<String> {
    messages
        .iter()
        .flat_map(|message| message.data.parts())
        .filter_map(|part| match part {
            ContentPart::ToolResult { tool_call_id, .. } => Some(tool_call_id),
            _ => None,
        })
        .collect()
}

/// The last model answer holding tool calls in the latest Turn, with its
/// calls that have no result yet (in call order); `None` when every call
/// of it was answered, or it holds none.
pub(crate) fn unanswered_calls_of_last_answer(
    messages: &MessagesView<'_>,
) -> Option<(Message, Vec<ToolCall>)> {
    let turn = latest_turn(messages);
    let position = turn.iter().rposition(|message| {
        matches!(message.data, ModelMessage::Assistant { .. })
            && message
                .data
                .parts()
                .iter()
                .any(|part| matches!(part, ContentPart::ToolCall { .. }))
    })?;
    let answered = answered_ids(&turn[position + 1..]);
    let calls: Vec<ToolCall> = turn[position]
        .data
        .parts()
        .into_iter()
        .filter_map(|part| match part {
            ContentPart::ToolCall {
                tool_call_id,
                tool_name,
                input,
                ..
            } if !answered.contains(&tool_call_id) => Some(ToolCall {
                id: tool_call_id,
                name: tool_name,
                args: input.as_object().cloned().unwrap_or_default(),
            }),
            _ => None,
        })
        .collect();
    (!calls.is_empty()).then(|| (turn[position].clone(), calls))
}

/// Tool results for every call in `turn` that has none.
fn unanswered_calls(turn: &[&Message], closing: &Closing) -> Vec<Message> {
    let answered = answered_ids(turn);
    turn.iter()
        .flat_map(|message| message.data.parts())
        .filter_map(|part| match part {
            ContentPart::ToolCall {
                tool_call_id,
                tool_name,
                ..
            } if !answered.contains(&tool_call_id) => Some((tool_call_id, tool_name)),
            _ => None,
        })
        .map(|(tool_call_id, tool_name)| {
            let output = closing.output();
            Message::new(
                ModelMessage::tool(vec![ContentPart::tool_result(
                    tool_call_id.clone(),
                    tool_name.clone(),
                    output,
                )]),
                MessageSource::Tool {
                    tool_call_id,
                    tool_name,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::ConversationState;

    fn inbound(event_id: &str) -> Message {
        let mut message = Message::new(ModelMessage::user("hi"), MessageSource::User);
        message
            .metadata
            .insert(INBOUND_MARK.into(), JsonValue::Bool(true));
        message.metadata.insert("eventId".into(), event_id.into());
        message
    }

    fn assistant(parts: Vec<ContentPart>) -> Message {
        Message::new(
            ModelMessage::assistant(parts),
            MessageSource::Assistant {
                step_id: "s".into(),
            },
        )
    }

    fn call(id: &str) -> ContentPart {
        ContentPart::tool_call(id, "bash__exec", serde_json::json!({}))
    }

    fn result(id: &str) -> Message {
        Message::new(
            ModelMessage::tool(vec![ContentPart::tool_result(
                id,
                "bash__exec",
                ToolResultOutput::Text("ok".into()),
            )]),
            MessageSource::Tool {
                tool_call_id: id.into(),
                tool_name: "bash__exec".into(),
            },
        )
    }

    #[test]
    fn a_finished_turn_gives_back_its_answer_and_an_unknown_event_nothing() {
        let state = ConversationState::new(vec![
            inbound("evt_a"),
            assistant(vec![call("c1")]),
            result("c1"),
            assistant(vec![ContentPart::text("done")]),
            inbound("evt_b"),
        ]);
        assert_eq!(
            prior_turn(&state.next_messages(), "evt_a"),
            Some(PriorTurn::Answered {
                text: "done".into()
            })
        );
        assert_eq!(prior_turn(&state.next_messages(), "evt_z"), None);
    }

    #[test]
    fn a_new_turn_closes_only_the_calls_the_latest_turn_left_open() {
        let state = ConversationState::new(vec![
            inbound("evt_a"),
            assistant(vec![call("c1")]),
            result("c1"),
            assistant(vec![ContentPart::text("done")]),
            inbound("evt_b"),
            assistant(vec![call("c2"), call("c3")]),
            result("c2"),
        ]);
        let closing = close_last_turn(&state.next_messages(), &Closing::Interrupted);
        assert_eq!(closing.len(), 1);
        assert!(matches!(
            &closing[0].data.parts()[0],
            ContentPart::ToolResult { tool_call_id, .. } if tool_call_id == "c3"
        ));
        let tidy = ConversationState::new(vec![
            inbound("evt_a"),
            assistant(vec![ContentPart::text("ok")]),
        ]);
        assert!(close_last_turn(&tidy.next_messages(), &Closing::Interrupted).is_empty());
    }

    #[test]
    fn an_interrupted_turn_owes_results_only_for_unanswered_calls() {
        let state = ConversationState::new(vec![
            inbound("evt_a"),
            assistant(vec![call("c1"), call("c2")]),
            result("c1"),
        ]);
        let Some(PriorTurn::Interrupted { dangling }) = prior_turn(&state.next_messages(), "evt_a")
        else {
            panic!("not interrupted");
        };
        assert_eq!(dangling.len(), 1);
        assert!(matches!(
            &dangling[0].data.parts()[0],
            ContentPart::ToolResult { tool_call_id, output, .. }
                if tool_call_id == "c2" && output.is_error()
        ));
        let just_started = ConversationState::new(vec![inbound("evt_a")]);
        assert_eq!(
            prior_turn(&just_started.next_messages(), "evt_a"),
            Some(PriorTurn::Interrupted { dangling: vec![] })
        );
    }
}
