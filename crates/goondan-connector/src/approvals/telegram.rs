//! Approval requests in Telegram: a `sendMessage` in HTML with an inline
//! keyboard of two buttons, whose `callback_data` (`goondan:approve:<id>`,
//! `goondan:deny:<id>`, well within Telegram's 64 bytes) comes back in a
//! `callback_query` update when pressed; `answerCallbackQuery` answers the
//! press and `editMessageText` (without a keyboard) says how it ended.
//!
//! Every piece of the request is escaped for Telegram's HTML (`&`, `<`,
//! `>`), so a tool argument can never become markup.

use super::{
    deadline_words, escape, ChatError, Message, Outcome, Press, Reply, Shown, CALL_TIMEOUT,
};
use crate::chat_api::telegram::{identifier, TelegramApi};
use goondan_store::PostedApproval;
use goondan_types::Verdict;
use serde_json::{json, Value};

/// What every callback of an approval button starts with.
const CALLBACK_PREFIX: &str = "goondan:";
/// Telegram's bound on `callback_data`.
const MAX_CALLBACK_BYTES: usize = 64;

/// The `callback_data` of a button; `None` when it would not fit
/// Telegram's 64 bytes (an id no desk makes).
pub fn callback_data(verdict: Verdict, approval_id: &str) -> Option<String> {
    let data = format!("{CALLBACK_PREFIX}{}:{approval_id}", verdict.as_str());
    (data.len() <= MAX_CALLBACK_BYTES).then_some(data)
}

/// The press a `callback_query` update describes; `None` for every other
/// update, and for callbacks of buttons that are not an approval's.
pub fn press_from_update(update: &Value) -> Option<Press> {
    let query = update.get("callback_query")?;
    let data = query.get("data")?.as_str()?;
    let (verdict, approval_id) = data.strip_prefix(CALLBACK_PREFIX)?.split_once(':')?;
    let verdict = match verdict {
        "approve" => Verdict::Approve,
        "deny" => Verdict::Deny,
        _ => return None,
    };
    if approval_id.is_empty() {
        return None;
    }
    let from = query.get("from")?;
    let text_at = |value: &Value, key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .filter(|text| !text.is_empty())
            .map(str::to_string)
    };
    let user_name = text_at(from, "username")
        .map(|username| format!("@{username}"))
        .or_else(|| text_at(from, "first_name"));
    let message = query.get("message");
    Some(Press {
        approval_id: approval_id.to_string(),
        verdict,
        user_id: identifier(from.get("id")?)?,
        user_name,
        chat: message.and_then(|message| identifier(message.pointer("/chat/id")?)),
        message: message.and_then(|message| identifier(message.get("message_id")?)),
        callback_id: text_at(query, "id"),
    })
}

/// The message of a request.
pub fn request_text(shown: &Shown) -> String {
    let mut text = format!(
        "🔐 <b>Approval needed</b>\n<b>{}</b> (instance <code>{}</code>)",
        escape(&shown.agent),
        escape(&shown.instance_key)
    );
    match &shown.tool {
        Some(tool) => text.push_str(&format!(" wants to run <b>{}</b>", escape(tool))),
        None => text.push_str(" asks"),
    }
    if shown.arguments.is_empty() {
        text.push('.');
    } else {
        text.push_str(&format!(":\n<pre>{}</pre>", escape(&shown.arguments)));
    }
    if let Some(question) = &shown.question {
        text.push_str(&format!("\n❓ {}", escape(question)));
    }
    if let Some((deadline, verdict)) = &shown.deadline {
        text.push_str(&format!(
            "\n⏳ If nobody decides by {}, it is {}.",
            escape(deadline),
            deadline_words(*verdict)
        ));
    }
    text.push_str(&format!("\n<code>{}</code>", escape(&shown.id)));
    text
}

/// The line a settled message ends with.
pub fn outcome_text(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Decided {
            verdict,
            by,
            name,
            reason,
        } => {
            let (mark, word) = match verdict {
                Verdict::Approve => ("✅", "Approved"),
                Verdict::Deny => ("❌", "Denied"),
            };
            let who = match name {
                Some(name) => format!("{} ({})", escape(name), escape(by)),
                None => escape(by),
            };
            let mut line = format!("{mark} <b>{word}</b> by {who}");
            if let Some(reason) = reason {
                line.push_str(&format!(": {}", escape(reason)));
            }
            line
        }
        Outcome::Gone => "⌛ No longer waiting for a decision.".to_string(),
    }
}

/// Posts a request with its two buttons.
pub(super) async fn post(
    api: &TelegramApi,
    chat: &str,
    shown: &Shown,
) -> Result<Message, ChatError> {
    let (Some(approve), Some(deny)) = (
        callback_data(Verdict::Approve, &shown.id),
        callback_data(Verdict::Deny, &shown.id),
    ) else {
        return Err(ChatError::Answer(format!(
            "the id {} is too long for a Telegram button",
            shown.id
        )));
    };
    let text = request_text(shown);
    let body = json!({
        "chat_id": chat,
        "text": text,
        "parse_mode": "HTML",
        "link_preview_options": {"is_disabled": true},
        "reply_markup": {"inline_keyboard": [[
            {"text": "✅ Approve", "callback_data": approve},
            {"text": "❌ Deny", "callback_data": deny},
        ]]},
    });
    let sent = api.call("sendMessage", &body, CALL_TIMEOUT).await?;
    let id = sent
        .get("message_id")
        .and_then(identifier)
        .ok_or_else(|| ChatError::Answer("sendMessage answered without a message_id".into()))?;
    let chat = sent
        .pointer("/chat/id")
        .and_then(identifier)
        .unwrap_or_else(|| chat.to_string());
    Ok(Message { chat, id, text })
}

/// Edits a posted request to say how it ended; without `reply_markup`
/// the buttons go.
pub(super) async fn settle(
    api: &TelegramApi,
    posted: &PostedApproval,
    outcome: &Outcome,
) -> Result<(), ChatError> {
    let body = json!({
        "chat_id": posted.chat,
        "message_id": posted.message.parse::<i64>().map_or_else(|_| json!(posted.message), |id| json!(id)),
        "text": format!("{}\n\n{}", posted.text, outcome_text(outcome)),
        "parse_mode": "HTML",
        "link_preview_options": {"is_disabled": true},
    });
    api.call("editMessageText", &body, CALL_TIMEOUT).await?;
    Ok(())
}

/// Answers the press's callback query: a short notice when recorded, an
/// alert the presser must dismiss when refused.
pub(super) async fn reply(
    api: &TelegramApi,
    press: &Press,
    reply: &Reply,
) -> Result<(), ChatError> {
    let Some(callback_id) = &press.callback_id else {
        return Ok(());
    };
    let (text, alert) = match reply {
        Reply::Recorded(Verdict::Approve) => ("Approved".to_string(), false),
        Reply::Recorded(Verdict::Deny) => ("Denied".to_string(), false),
        Reply::Refused(why) => (why.clone(), true),
    };
    let body = json!({"callback_query_id": callback_id, "text": text, "show_alert": alert});
    api.call("answerCallbackQuery", &body, CALL_TIMEOUT).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown() -> Shown {
        Shown {
            id: "apv_0123456789abcdef".into(),
            agent: "coder".into(),
            instance_key: "telegram:42".into(),
            tool: Some("bash__exec".into()),
            arguments: "{\n  \"command\": \"echo '<b>' && rm -rf build\"\n}".into(),
            question: None,
            deadline: Some(("2026-11-27T00:10:00.000Z".into(), Verdict::Deny)),
        }
    }

    #[test]
    fn buttons_fit_telegram_and_come_back_as_presses() {
        let approve = callback_data(Verdict::Approve, "apv_0123456789abcdef").unwrap();
        assert!(approve.len() <= 64, "{approve}");
        assert_eq!(callback_data(Verdict::Deny, &"x".repeat(60)), None);
        let update = json!({
            "update_id": 5,
            "callback_query": {
                "id": "cbq-1",
                "from": {"id": 42, "is_bot": false, "first_name": "Ann", "username": "ann"},
                "message": {"message_id": 900, "chat": {"id": -100123}},
                "data": approve,
            }
        });
        let press = press_from_update(&update).unwrap();
        assert_eq!(
            press,
            Press {
                approval_id: "apv_0123456789abcdef".into(),
                verdict: Verdict::Approve,
                user_id: "42".into(),
                user_name: Some("@ann".into()),
                chat: Some("-100123".into()),
                message: Some("900".into()),
                callback_id: Some("cbq-1".into()),
            }
        );
        for other in [
            json!({"update_id": 6, "callback_query": {"id": "c", "from": {"id": 1}, "data": "menu:open"}}),
            json!({"update_id": 7, "callback_query": {"id": "c", "from": {"id": 1}, "data": "goondan:maybe:apv_1"}}),
            json!({"update_id": 8, "callback_query": {"id": "c", "from": {"id": 1}, "data": "goondan:approve:"}}),
            json!({"update_id": 9, "message": {"chat": {"id": 1}, "text": "goondan:approve:apv_1"}}),
        ] {
            assert_eq!(press_from_update(&other), None, "{other}");
        }
    }

    #[test]
    fn the_message_escapes_every_piece_and_says_how_it_ended() {
        let text = request_text(&shown());
        assert!(
            text.contains(
                "<pre>{\n  \"command\": \"echo '&lt;b&gt;' &amp;&amp; rm -rf build\"\n}</pre>"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "<b>coder</b> (instance <code>telegram:42</code>) wants to run <b>bash__exec</b>"
            ),
            "{text}"
        );
        assert!(text.contains("If nobody decides by 2026-11-27T00:10:00.000Z, it is denied."));
        let approved = outcome_text(&Outcome::Decided {
            verdict: Verdict::Approve,
            by: "telegram:42".into(),
            name: Some("<Ann>".into()),
            reason: None,
        });
        assert_eq!(approved, "✅ <b>Approved</b> by &lt;Ann&gt; (telegram:42)");
        let timed_out = outcome_text(&Outcome::Decided {
            verdict: Verdict::Deny,
            by: "timeout".into(),
            name: None,
            reason: Some("nobody decided in time".into()),
        });
        assert_eq!(
            timed_out,
            "❌ <b>Denied</b> by timeout: nobody decided in time"
        );
    }
}
