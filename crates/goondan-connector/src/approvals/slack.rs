//! Approval requests in Slack: a `chat.postMessage` whose blocks hold the
//! request and an `actions` block with an Approve and a Deny button
//! (`action_id` `goondan_approve` / `goondan_deny`, `value` the request's
//! id). A press comes back as a signed `block_actions` interactivity post
//! to the Slack connector; `chat.update` then replaces the buttons with
//! who decided, and a refused press gets a `chat.postEphemeral` only the
//! presser sees.
//!
//! Every piece of the request is escaped for Slack's mrkdwn (`&`, `<`,
//! `>`), so an argument can never become a mention or a link. The bot
//! token (`SLACK_BOT_TOKEN`, `SLACK_TOKEN`, `BRAIN_SLACK_BOT_TOKEN`) goes
//! only to the Connection's API address (`SLACK_API_BASE_URL`, else
//! Slack's), and never into a log or an error: the Web API client is
//! [`crate::chat_api::slack`].

use super::{
    deadline_words, escape, ChatError, Message, Outcome, Press, Reply, Shown, CALL_TIMEOUT,
};
use crate::chat_api::slack::SlackApi;
use goondan_store::PostedApproval;
use goondan_types::Verdict;
use serde_json::{json, Value};

/// The `action_id` of the Approve button.
pub const APPROVE_ACTION: &str = "goondan_approve";
/// The `action_id` of the Deny button.
pub const DENY_ACTION: &str = "goondan_deny";
/// The press a `block_actions` interaction payload describes; `None` for
/// every other interaction (they stay `interaction` events).
pub fn press_from_payload(payload: &Value) -> Option<Press> {
    if payload.get("type").and_then(Value::as_str) != Some("block_actions") {
        return None;
    }
    let action = payload.pointer("/actions/0")?;
    let verdict = match action.get("action_id").and_then(Value::as_str)? {
        APPROVE_ACTION => Verdict::Approve,
        DENY_ACTION => Verdict::Deny,
        _ => return None,
    };
    let text_at = |pointer: &str| {
        payload
            .pointer(pointer)
            .and_then(Value::as_str)
            .filter(|text| !text.is_empty())
            .map(str::to_string)
    };
    Some(Press {
        approval_id: action
            .get("value")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())?
            .to_string(),
        verdict,
        user_id: text_at("/user/id")?,
        user_name: text_at("/user/username").or_else(|| text_at("/user/name")),
        chat: one_of(text_at("/channel/id"), text_at("/container/channel_id")),
        message: one_of(text_at("/container/message_ts"), text_at("/message/ts")),
        callback_id: None,
    })
}

/// What two places of a payload that name the same thing say: the one
/// that is given, `None` when neither is or when they disagree (a payload
/// naming two channels or two messages is not trusted for either).
fn one_of(first: Option<String>, second: Option<String>) -> Option<String> {
    match (first, second) {
        (Some(first), Some(second)) => (first == second).then_some(first),
        (first, second) => first.or(second),
    }
}

/// The mrkdwn of a request (its section block).
pub fn request_text(shown: &Shown) -> String {
    let mut text = format!(
        ":lock: *Approval needed*\n*{}* (instance `{}`)",
        escape(&shown.agent),
        escape(&shown.instance_key)
    );
    match &shown.tool {
        Some(tool) => text.push_str(&format!(" wants to run *{}*", escape(tool))),
        None => text.push_str(" asks"),
    }
    if shown.arguments.is_empty() {
        text.push('.');
    } else {
        // A fence inside the arguments would end the code block early.
        let arguments = escape(&shown.arguments).replace("```", "`\u{200b}``");
        text.push_str(&format!(":\n```{arguments}```"));
    }
    if let Some(question) = &shown.question {
        text.push_str(&format!("\n:question: {}", escape(question)));
    }
    if let Some((deadline, verdict)) = &shown.deadline {
        text.push_str(&format!(
            "\n:hourglass: If nobody decides by {}, it is {}.",
            escape(deadline),
            deadline_words(*verdict)
        ));
    }
    text
}

/// The line a settled message ends with; a presser in this workspace is
/// named by mention.
pub fn outcome_text(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Decided {
            verdict,
            by,
            reason,
            ..
        } => {
            let (mark, word) = match verdict {
                Verdict::Approve => (":white_check_mark:", "Approved"),
                Verdict::Deny => (":x:", "Denied"),
            };
            let who = match by.strip_prefix("slack:") {
                Some(user) if is_user_id(user) => format!("<@{user}>"),
                _ => escape(by),
            };
            let mut line = format!("{mark} *{word}* by {who}");
            if let Some(reason) = reason {
                line.push_str(&format!(": {}", escape(reason)));
            }
            line
        }
        Outcome::Gone => ":hourglass: No longer waiting for a decision.".to_string(),
    }
}

/// Whether `text` can be a Slack user id inside a mention (letters and
/// digits only, so nothing else can ride in it).
fn is_user_id(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric())
}

/// The blocks of a request: its section, its id, and the buttons while
/// it waits or how it ended once it does not.
fn blocks(text: &str, approval_id: &str, end: Option<&str>) -> Value {
    let mut blocks = vec![
        json!({"type": "section", "text": {"type": "mrkdwn", "text": text}}),
        json!({"type": "context", "elements": [{"type": "mrkdwn", "text": format!("`{}`", escape(approval_id))}]}),
    ];
    blocks.push(match end {
        None => json!({
            "type": "actions",
            "block_id": "goondan_approval",
            "elements": [
                {"type": "button", "action_id": APPROVE_ACTION, "style": "primary", "value": approval_id,
                 "text": {"type": "plain_text", "text": "Approve"}},
                {"type": "button", "action_id": DENY_ACTION, "style": "danger", "value": approval_id,
                 "text": {"type": "plain_text", "text": "Deny"}},
            ],
        }),
        Some(end) => json!({"type": "section", "text": {"type": "mrkdwn", "text": end}}),
    });
    Value::Array(blocks)
}

/// The plain text of a notification about `shown`.
fn fallback(shown: &Shown) -> String {
    format!(
        "Approval needed: {}:{} {}",
        shown.agent,
        shown.instance_key,
        shown.tool.as_deref().unwrap_or("asks a question")
    )
}

/// Posts a request with its buttons.
pub(super) async fn post(
    api: &SlackApi,
    channel: &str,
    shown: &Shown,
) -> Result<Message, ChatError> {
    let text = request_text(shown);
    let body = json!({
        "channel": channel,
        "text": fallback(shown),
        "blocks": blocks(&text, &shown.id, None),
        "unfurl_links": false,
        "unfurl_media": false,
    });
    let answer = api.call("chat.postMessage", &body, CALL_TIMEOUT).await?;
    let ts = answer
        .get("ts")
        .and_then(Value::as_str)
        .ok_or_else(|| ChatError::Answer("chat.postMessage answered without a ts".into()))?;
    // A channel given by name comes back as its id, which presses carry.
    let chat = answer
        .get("channel")
        .and_then(Value::as_str)
        .unwrap_or(channel);
    Ok(Message {
        chat: chat.to_string(),
        id: ts.to_string(),
        text,
    })
}

/// Replaces a posted request's buttons with how it ended.
pub(super) async fn settle(
    api: &SlackApi,
    posted: &PostedApproval,
    outcome: &Outcome,
) -> Result<(), ChatError> {
    let end = outcome_text(outcome);
    let body = json!({
        "channel": posted.chat,
        "ts": posted.message,
        "text": format!("Approval {}", posted.id),
        "blocks": blocks(&posted.text, &posted.id, Some(&end)),
    });
    api.call("chat.update", &body, CALL_TIMEOUT).await?;
    Ok(())
}

/// Tells the presser, and only them, why nothing was decided; a recorded
/// decision needs no word (the message says it).
pub(super) async fn reply(
    api: &SlackApi,
    channel: &str,
    press: &Press,
    reply: &Reply,
) -> Result<(), ChatError> {
    let Reply::Refused(why) = reply else {
        return Ok(());
    };
    let body = json!({"channel": channel, "user": press.user_id, "text": why});
    api.call("chat.postEphemeral", &body, CALL_TIMEOUT).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_action_on_an_approval_button_is_a_press_and_others_are_not() {
        let payload = json!({
            "type": "block_actions",
            "user": {"id": "U042", "username": "ann"},
            "channel": {"id": "C0123"},
            "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": "C0123"},
            "actions": [{"action_id": "goondan_deny", "block_id": "goondan_approval", "value": "apv_1", "type": "button"}],
        });
        assert_eq!(
            press_from_payload(&payload),
            Some(Press {
                approval_id: "apv_1".into(),
                verdict: Verdict::Deny,
                user_id: "U042".into(),
                user_name: Some("ann".into()),
                chat: Some("C0123".into()),
                message: Some("1700000000.000100".into()),
                callback_id: None,
            })
        );
        // A payload naming two messages or two channels names neither.
        let mut two_messages = payload.clone();
        two_messages["message"] = json!({"ts": "1700000000.000200"});
        let press = press_from_payload(&two_messages).unwrap();
        assert_eq!(press.message, None);
        assert_eq!(press.chat.as_deref(), Some("C0123"));
        let mut two_channels = payload.clone();
        two_channels["channel"] = json!({"id": "C0999"});
        assert_eq!(press_from_payload(&two_channels).unwrap().chat, None);
        let mut only_message = payload.clone();
        only_message["container"] = json!({"type": "message"});
        only_message["message"] = json!({"ts": "1700000000.000100"});
        let press = press_from_payload(&only_message).unwrap();
        assert_eq!(press.message.as_deref(), Some("1700000000.000100"));
        for other in [
            json!({"type": "block_actions", "user": {"id": "U1"}, "actions": [{"action_id": "approve", "value": "yes"}]}),
            json!({"type": "view_submission", "user": {"id": "U1"}, "actions": [{"action_id": "goondan_approve", "value": "apv_1"}]}),
            json!({"type": "block_actions", "actions": [{"action_id": "goondan_approve", "value": "apv_1"}]}),
        ] {
            assert_eq!(press_from_payload(&other), None, "{other}");
        }
    }

    #[test]
    fn text_is_escaped_and_a_presser_is_mentioned() {
        let shown = Shown {
            id: "apv_1".into(),
            agent: "coder".into(),
            instance_key: "slack:C1:1.0".into(),
            tool: Some("bash__exec".into()),
            arguments: "{\"command\": \"echo <!channel> ``` & done\"}".into(),
            question: Some("ok?".into()),
            deadline: None,
        };
        let text = request_text(&shown);
        assert!(text.contains("&lt;!channel&gt;"), "{text}");
        assert!(text.contains("`\u{200b}`` &amp; done"), "{text}");
        assert!(!text.contains("If nobody decides"));
        let pressed = outcome_text(&Outcome::Decided {
            verdict: Verdict::Approve,
            by: "slack:U042".into(),
            name: Some("ann".into()),
            reason: None,
        });
        assert_eq!(pressed, ":white_check_mark: *Approved* by <@U042>");
        let odd = outcome_text(&Outcome::Decided {
            verdict: Verdict::Deny,
            by: "slack:U1> <!here".into(),
            name: None,
            reason: None,
        });
        assert!(!odd.contains("<!here"), "{odd}");
        let buttons = blocks(&text, "apv_1", None);
        assert_eq!(buttons[2]["elements"][0]["action_id"], APPROVE_ACTION);
        assert_eq!(buttons[2]["elements"][1]["value"], "apv_1");
        let ended = blocks(&text, "apv_1", Some("done"));
        assert_eq!(ended[2]["type"], "section");
    }
}
