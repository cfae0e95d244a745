//! The `slack` connector: the Events API, slash commands and interactivity
//! become events.
//!
//! Every request must carry Slack's `v0` signature under
//! `SLACK_SIGNING_SECRET` (or `signingSecret`), with a timestamp within
//! five minutes (`REPLAY_WINDOW_SECONDS`). Then, by body:
//!
//! - `url_verification` (JSON): the challenge is answered, nothing emitted;
//! - `event_callback` (JSON): `app_mention`, and `message` in an IM, become
//!   `app_mention` and `message_im` with `channel_id`, `ts`, `thread_ts`,
//!   `user_id`, `team_id`; the instance key is
//!   `slack:<channel>:<thread_ts or ts>` (one conversation per thread).
//!   Bot messages and edits (any `subtype`) are ignored, and an `event_id`
//!   seen before (Slack retries when an answer is slow) is answered without
//!   a second event;
//! - a slash command (form): `slash_command` with `command`, `channel_id`,
//!   `user_id`, `team_id`, `response_url`, keyed `slack:<channel>`;
//! - an interaction (form field `payload`): `interaction` with `type`,
//!   `action_id`, `channel_id`, `user_id`, `response_url`, keyed
//!   `slack:<channel>`; except a press of an approval's button, which
//!   goes to the approval desk ([`crate::approvals::slack`]) and never to
//!   an agent.

use crate::config::{ConnectorConfig, ConnectorConfigError};
use crate::http::{
    BadRequest, HttpFront, Platform, PlatformOutcome, PlatformReply, PlatformRequest,
};
use crate::verify::{self, ReplayGuard, SignatureError};
use goondan_types::{ConnectorEvent, ConnectorMessage};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// Default port (`SLACK_WEBHOOK_PORT`, `PORT`), as in the original.
pub const DEFAULT_PORT: u16 = 8787;

/// The `slack` platform.
pub struct Slack {
    secret: String,
    window: Duration,
    events_seen: ReplayGuard,
}

impl Slack {
    /// The platform and its front, from a Connection's config.
    pub fn from_config(
        config: &ConnectorConfig,
    ) -> Result<(Slack, HttpFront), ConnectorConfigError> {
        let front = HttpFront::from_config(
            config,
            &["SLACK_WEBHOOK_PORT", "PORT"],
            DEFAULT_PORT,
            &["SLACK_WEBHOOK_PATH", "WEBHOOK_PATH"],
            "/",
        )?;
        let secret = config
            .secret(&["SLACK_SIGNING_SECRET", "signingSecret"])
            .map(|(_, value)| value.to_string())
            .ok_or_else(|| ConnectorConfigError {
                key: "SLACK_SIGNING_SECRET".into(),
                problem: "Slack requests cannot be verified without the app's signing secret".into(),
                help: "copy it from the app's Basic Information page into secrets.SLACK_SIGNING_SECRET (valueFrom.env)".into(),
            })?;
        let slack = Slack {
            secret,
            window: config.seconds("REPLAY_WINDOW_SECONDS", Duration::from_secs(300))?,
            events_seen: ReplayGuard::default(),
        };
        Ok((slack, front))
    }
}

impl Platform for Slack {
    fn name(&self) -> &'static str {
        "slack"
    }

    fn verify(&self, request: &PlatformRequest<'_>) -> Result<(), SignatureError> {
        verify::slack(
            &self.secret,
            request.body,
            request.header("x-slack-request-timestamp"),
            request.header("x-slack-signature"),
            request.now,
            self.window,
        )
    }

    fn not_accepted(&self, request: &PlatformRequest<'_>) {
        let event_id = serde_json::from_slice::<Value>(request.body)
            .ok()
            .and_then(|body| body.get("event_id")?.as_str().map(str::to_string));
        if let Some(event_id) = event_id {
            self.events_seen.forget(&event_id);
        }
    }

    fn handle(&self, request: &PlatformRequest<'_>) -> Result<PlatformOutcome, BadRequest> {
        let ignored = || {
            Ok(PlatformOutcome::Reply(PlatformReply::json(
                json!({"ok": true, "ignored": true}),
            )))
        };
        if request.body.first() == Some(&b'{') {
            let body: Value = serde_json::from_slice(request.body)
                .map_err(|error| BadRequest(format!("the body is not JSON: {error}")))?;
            return match body.get("type").and_then(Value::as_str) {
                Some("url_verification") => {
                    let challenge = body
                        .get("challenge")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    Ok(PlatformOutcome::Reply(PlatformReply::text(challenge)))
                }
                Some("event_callback") => {
                    let event_id = body.get("event_id").and_then(Value::as_str);
                    let now = verify::unix_seconds(request.now);
                    if event_id.is_some_and(|id| !self.events_seen.first(id, now, self.window)) {
                        return ignored();
                    }
                    match event_from_callback(&body) {
                        Some(event) => Ok(emit(event)),
                        None => ignored(),
                    }
                }
                _ => ignored(),
            };
        }
        let form: BTreeMap<String, String> = url::form_urlencoded::parse(request.body)
            .into_owned()
            .collect();
        if let Some(payload) = form.get("payload") {
            let payload: Value = serde_json::from_str(payload).map_err(|error| {
                BadRequest(format!("the interaction payload is not JSON: {error}"))
            })?;
            // An approval button is the approval desk's, never an agent's.
            if let Some(press) = crate::approvals::slack::press_from_payload(&payload) {
                return Ok(PlatformOutcome::Press {
                    press,
                    reply: PlatformReply::text(""),
                });
            }
            return Ok(emit(event_from_interaction(&payload)));
        }
        if form.contains_key("command") {
            return Ok(emit(event_from_command(&form)));
        }
        Err(BadRequest(
            "the body is neither an Events API callback, a slash command nor an interaction".into(),
        ))
    }
}

fn emit(event: ConnectorEvent) -> PlatformOutcome {
    PlatformOutcome::Emit {
        event,
        // Slack wants an answer within three seconds; the agent's reply
        // goes through the `slack` tool or the `response_url`.
        reply: PlatformReply::text(""),
    }
}

/// The event an Events API callback describes; `None` for kinds that are
/// not handled (bots, edits, channel chatter without a mention).
pub fn event_from_callback(body: &Value) -> Option<ConnectorEvent> {
    let event = body.get("event")?;
    let text_at = |pointer: &str| {
        event
            .pointer(pointer)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    if text_at("/subtype").is_some() || text_at("/bot_id").is_some() {
        return None;
    }
    let name = match (text_at("/type")?, text_at("/channel_type")) {
        ("app_mention", _) => "app_mention",
        ("message", None | Some("im")) => "message_im",
        _ => return None,
    };
    let channel = text_at("/channel")?;
    let ts = text_at("/ts")?;
    let mut properties = BTreeMap::from([
        ("channel_id".to_string(), channel.to_string()),
        ("ts".to_string(), ts.to_string()),
    ]);
    for (key, value) in [
        ("thread_ts", text_at("/thread_ts")),
        ("user_id", text_at("/user")),
        ("team_id", body.get("team_id").and_then(Value::as_str)),
    ] {
        if let Some(value) = value {
            properties.insert(key.to_string(), value.to_string());
        }
    }
    let thread = text_at("/thread_ts").unwrap_or(ts);
    Some(ConnectorEvent {
        name: name.to_string(),
        message: ConnectorMessage::Text {
            text: text_at("/text").unwrap_or_default().to_string(),
        },
        properties,
        instance_key: Some(format!("slack:{channel}:{thread}")),
        delivery_id: body
            .get("event_id")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// The event a slash command's form describes.
pub fn event_from_command(form: &BTreeMap<String, String>) -> ConnectorEvent {
    let properties: BTreeMap<String, String> = [
        "command",
        "channel_id",
        "user_id",
        "team_id",
        "response_url",
    ]
    .into_iter()
    .filter_map(|key| Some((key.to_string(), form.get(key)?.clone())))
    .collect();
    let channel = form
        .get("channel_id")
        .map(String::as_str)
        .unwrap_or("unknown");
    ConnectorEvent {
        name: "slash_command".into(),
        message: ConnectorMessage::Text {
            text: form.get("text").cloned().unwrap_or_default(),
        },
        instance_key: Some(format!("slack:{channel}")),
        properties,
        delivery_id: form.get("trigger_id").cloned(),
    }
}

/// The event an interaction payload describes.
pub fn event_from_interaction(payload: &Value) -> ConnectorEvent {
    let text_at = |pointer: &str| {
        payload
            .pointer(pointer)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let properties: BTreeMap<String, String> = [
        ("type", text_at("/type")),
        ("action_id", text_at("/actions/0/action_id")),
        ("channel_id", text_at("/channel/id")),
        ("user_id", text_at("/user/id")),
        ("response_url", text_at("/response_url")),
    ]
    .into_iter()
    .filter_map(|(key, value)| Some((key.to_string(), value?.to_string())))
    .collect();
    let text = text_at("/actions/0/value")
        .or_else(|| text_at("/actions/0/selected_option/value"))
        .or_else(|| text_at("/callback_id"))
        .unwrap_or_default();
    let channel = text_at("/channel/id").unwrap_or("unknown");
    ConnectorEvent {
        name: "interaction".into(),
        message: ConnectorMessage::Text {
            text: text.to_string(),
        },
        instance_key: Some(format!("slack:{channel}")),
        properties,
        delivery_id: text_at("/trigger_id").map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callbacks_map_to_mentions_and_ims_and_skip_bots_and_edits() {
        let mention = event_from_callback(&json!({
            "team_id": "T1", "event": {"type": "app_mention", "channel": "C1", "ts": "1.2", "thread_ts": "1.0", "user": "U1", "text": "<@B> hi"}
        }))
        .unwrap();
        assert_eq!(mention.name, "app_mention");
        assert_eq!(mention.instance_key.as_deref(), Some("slack:C1:1.0"));
        assert_eq!(mention.properties["team_id"], "T1");
        assert_eq!(mention.properties["thread_ts"], "1.0");

        let im = event_from_callback(&json!({"event": {"type": "message", "channel_type": "im", "channel": "D1", "ts": "5.5", "text": "yo"}})).unwrap();
        assert_eq!(
            (im.name.as_str(), im.instance_key.as_deref()),
            ("message_im", Some("slack:D1:5.5"))
        );

        for ignored in [
            json!({"event": {"type": "message", "subtype": "bot_message", "channel": "C", "ts": "1"}}),
            json!({"event": {"type": "message", "bot_id": "B1", "channel": "C", "ts": "1"}}),
            json!({"event": {"type": "message", "subtype": "message_changed", "channel": "C", "ts": "1"}}),
            json!({"event": {"type": "message", "channel_type": "channel", "channel": "C", "ts": "1"}}),
            json!({"event": {"type": "reaction_added"}}),
            json!({"event": {"type": "app_mention", "ts": "1"}}),
        ] {
            assert_eq!(event_from_callback(&ignored), None, "{ignored}");
        }
    }

    #[test]
    fn commands_and_interactions_carry_where_to_answer() {
        let form = BTreeMap::from([
            ("command".to_string(), "/ask".to_string()),
            ("text".to_string(), "what now".to_string()),
            ("channel_id".to_string(), "C9".to_string()),
            (
                "response_url".to_string(),
                "https://hooks.slack.com/x".to_string(),
            ),
        ]);
        let command = event_from_command(&form);
        assert_eq!(
            command.message,
            ConnectorMessage::Text {
                text: "what now".into()
            }
        );
        assert_eq!(command.instance_key.as_deref(), Some("slack:C9"));
        assert_eq!(command.properties["command"], "/ask");

        let click = event_from_interaction(&json!({
            "type": "block_actions", "user": {"id": "U2"}, "channel": {"id": "C3"},
            "actions": [{"action_id": "approve", "value": "yes"}], "response_url": "https://hooks.slack.com/y"
        }));
        assert_eq!(click.name, "interaction");
        assert_eq!(click.message, ConnectorMessage::Text { text: "yes".into() });
        assert_eq!(click.properties["action_id"], "approve");
        assert_eq!(click.instance_key.as_deref(), Some("slack:C3"));
    }
}
