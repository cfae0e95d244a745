//! The `discord` connector: an application's interactions endpoint.
//!
//! Every request must carry an Ed25519 signature (`X-Signature-Ed25519`
//! over `X-Signature-Timestamp` and the body) under the application's
//! `DISCORD_PUBLIC_KEY` (config or secret, 64 hex digits), with the
//! timestamp within `REPLAY_WINDOW_SECONDS` (300) of now; Discord itself
//! probes the endpoint with bad signatures and disables it if one passes.
//! A PING is answered with a PONG. An application command becomes
//! `slash_command` and a component `component_interaction`, with the
//! original's properties (`interaction_id`, `interaction_token`,
//! `channel_id`, `guild_id`, `user_id`, `username`, `command_name` or
//! `custom_id`), keyed `discord:<channel>`. They are answered with a
//! deferred response (type 5, or 6 for a component), so Discord shows the
//! bot as thinking while the agent works and answers through the
//! interaction's follow-up webhook.

use crate::config::{ConnectorConfig, ConnectorConfigError};
use crate::http::{
    BadRequest, HttpFront, Platform, PlatformOutcome, PlatformReply, PlatformRequest,
};
use crate::verify::{self, SignatureError};
use goondan_types::{ConnectorEvent, ConnectorMessage};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// Default port (`DISCORD_WEBHOOK_PORT`, `PORT`).
pub const DEFAULT_PORT: u16 = 8789;

const PING: u64 = 1;
const APPLICATION_COMMAND: u64 = 2;
const MESSAGE_COMPONENT: u64 = 3;

/// The `discord` platform.
pub struct Discord {
    public_key: String,
    window: Duration,
}

impl Discord {
    /// The platform and its front, from a Connection's config.
    pub fn from_config(
        config: &ConnectorConfig,
    ) -> Result<(Discord, HttpFront), ConnectorConfigError> {
        let front = HttpFront::from_config(
            config,
            &["DISCORD_WEBHOOK_PORT", "PORT"],
            DEFAULT_PORT,
            &["DISCORD_WEBHOOK_PATH", "WEBHOOK_PATH"],
            "/",
        )?;
        let public_key = config
            .secret(&["DISCORD_PUBLIC_KEY"])
            .map(|(_, value)| value)
            .or_else(|| config.value("DISCORD_PUBLIC_KEY"))
            .map(str::trim)
            .ok_or_else(|| ConnectorConfigError {
                key: "DISCORD_PUBLIC_KEY".into(),
                problem: "interactions cannot be verified without the application's public key".into(),
                help: "copy \"Public Key\" from the application's General Information page into config.DISCORD_PUBLIC_KEY".into(),
            })?;
        if verify::decode_hex(public_key).is_none_or(|key| key.len() != 32) {
            return Err(ConnectorConfigError {
                key: "DISCORD_PUBLIC_KEY".into(),
                problem: "the public key is not 64 hex digits".into(),
                help: "copy it again from the application's General Information page".into(),
            });
        }
        let discord = Discord {
            public_key: public_key.to_string(),
            window: config.seconds("REPLAY_WINDOW_SECONDS", Duration::from_secs(300))?,
        };
        Ok((discord, front))
    }
}

impl Platform for Discord {
    fn name(&self) -> &'static str {
        "discord"
    }

    fn verify(&self, request: &PlatformRequest<'_>) -> Result<(), SignatureError> {
        let timestamp = request.header("x-signature-timestamp");
        verify::discord(
            &self.public_key,
            request.body,
            timestamp,
            request.header("x-signature-ed25519"),
        )?;
        // Checked after the signature, so the timestamp is Discord's own.
        verify::within_window(
            timestamp.unwrap_or_default(),
            "X-Signature-Timestamp",
            request.now,
            self.window,
        )
        .map(drop)
    }

    fn handle(&self, request: &PlatformRequest<'_>) -> Result<PlatformOutcome, BadRequest> {
        let body: Value = serde_json::from_slice(request.body)
            .map_err(|error| BadRequest(format!("the body is not JSON: {error}")))?;
        let kind = body
            .get("type")
            .and_then(Value::as_u64)
            .ok_or_else(|| BadRequest("the interaction has no numeric `type`".into()))?;
        let deferred = match kind {
            PING => {
                return Ok(PlatformOutcome::Reply(PlatformReply::json(
                    json!({"type": 1}),
                )))
            }
            APPLICATION_COMMAND => 5,
            MESSAGE_COMPONENT => 6,
            _ => {
                return Ok(PlatformOutcome::Reply(PlatformReply::json(
                    json!({"type": 5}),
                )))
            }
        };
        let event = event_from_interaction(&body)
            .ok_or_else(|| BadRequest("the interaction is not a command or a component".into()))?;
        Ok(PlatformOutcome::Emit {
            event,
            reply: PlatformReply::json(json!({"type": deferred})),
        })
    }
}

/// The event an application command or component interaction describes;
/// `None` for a PING or another kind.
pub fn event_from_interaction(body: &Value) -> Option<ConnectorEvent> {
    let text_at = |pointer: &str| {
        body.pointer(pointer)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let (name, text, extra) = match body.get("type").and_then(Value::as_u64)? {
        APPLICATION_COMMAND => {
            let command = text_at("/data/name");
            (
                "slash_command",
                command.map(|c| format!("/{c}")).unwrap_or_default(),
                command.map(|c| ("command_name", c)),
            )
        }
        MESSAGE_COMPONENT => {
            let custom_id = text_at("/data/custom_id");
            (
                "component_interaction",
                custom_id.unwrap_or_default().to_string(),
                custom_id.map(|c| ("custom_id", c)),
            )
        }
        _ => return None,
    };
    let user = |field: &str| {
        text_at(&format!("/user/{field}")).or_else(|| text_at(&format!("/member/user/{field}")))
    };
    let properties: BTreeMap<String, String> = [
        ("interaction_id", text_at("/id")),
        ("interaction_token", text_at("/token")),
        ("channel_id", text_at("/channel_id")),
        ("guild_id", text_at("/guild_id")),
        ("user_id", user("id")),
        ("username", user("username")),
    ]
    .into_iter()
    .chain(extra.map(|(key, value)| (key, Some(value))))
    .filter_map(|(key, value)| Some((key.to_string(), value?.to_string())))
    .collect();
    let key = text_at("/channel_id")
        .or_else(|| text_at("/id"))
        .unwrap_or("unknown");
    Some(ConnectorEvent {
        name: name.to_string(),
        message: ConnectorMessage::Text { text },
        properties,
        instance_key: Some(format!("discord:{key}")),
        delivery_id: text_at("/id").map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_components_map_like_the_original() {
        let command = event_from_interaction(&json!({
            "type": 2, "id": "I1", "token": "tok", "channel_id": "C1", "guild_id": "G1",
            "member": {"user": {"id": "U1", "username": "ann"}}, "data": {"name": "ask"}
        }))
        .unwrap();
        assert_eq!(command.name, "slash_command");
        assert_eq!(
            command.message,
            ConnectorMessage::Text {
                text: "/ask".into()
            }
        );
        assert_eq!(command.instance_key.as_deref(), Some("discord:C1"));
        assert_eq!(command.properties["username"], "ann");
        assert_eq!(command.properties["command_name"], "ask");
        assert_eq!(command.properties["interaction_token"], "tok");

        let button = event_from_interaction(
            &json!({"type": 3, "id": "I2", "user": {"id": "U2"}, "data": {"custom_id": "ok"}}),
        )
        .unwrap();
        assert_eq!(button.name, "component_interaction");
        assert_eq!(button.instance_key.as_deref(), Some("discord:I2"));
        assert_eq!(button.properties["custom_id"], "ok");
        assert_eq!(event_from_interaction(&json!({"type": 1})), None);
    }

    #[test]
    fn a_public_key_that_is_not_32_bytes_is_refused_at_start() {
        let mut config = ConnectorConfig::default();
        assert_eq!(
            Discord::from_config(&config).err().unwrap().key,
            "DISCORD_PUBLIC_KEY"
        );
        config
            .config
            .insert("DISCORD_PUBLIC_KEY".into(), "abcd".into());
        assert!(Discord::from_config(&config).is_err());
        config
            .config
            .insert("DISCORD_PUBLIC_KEY".into(), "ab".repeat(32));
        assert!(Discord::from_config(&config).is_ok());
    }
}
