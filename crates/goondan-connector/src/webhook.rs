//! The `webhook` connector: JSON posts from any sender become events.
//!
//! A body is a JSON object; the event takes its name from `event` or
//! `name` (else `webhook_message`), its text from `text` or `message` (a
//! string, or a message object such as `{"type": "image", "url": ...}`),
//! its instance key from `instanceKey` (else `webhook:default`) and its
//! properties from `properties` (strings, numbers and booleans, as
//! strings), as the original's `emitWebhookPayload` does.
//!
//! **Signatures.** With a `SIGNING_SECRET` or `WEBHOOK_SECRET`, every post
//! must carry `X-Webhook-Signature: sha256=<hex>` (the `sha256=` prefix is
//! optional; `X-Hub-Signature-256` is accepted too), the HMAC-SHA256 of
//! the body under the secret. A post that also carries
//! `X-Webhook-Timestamp` (Unix seconds) is signed over
//! `<timestamp>.<body>` instead, must be within `REPLAY_WINDOW_SECONDS`
//! (300) of now, and is accepted once: the same signature again inside the
//! window is a replay. `REQUIRE_TIMESTAMP: "true"` refuses posts without
//! one. Without a secret, posts are unsigned, which the connector allows
//! only on a loopback address unless `ALLOW_UNSIGNED: "true"` says so.

use crate::config::{ConnectorConfig, ConnectorConfigError};
use crate::http::{BadRequest, HttpFront, Platform, PlatformOutcome, PlatformRequest};
use crate::payload;
use crate::verify::{self, ReplayGuard, SignatureError};
use goondan_types::ConnectorEvent;
#[cfg(test)]
use goondan_types::ConnectorMessage;
#[cfg(test)]
use serde_json::json;
use serde_json::{Map, Value};
use std::time::Duration;

/// The signature headers, in the order they are read.
const SIGNATURE_HEADERS: [&str; 3] = [
    "x-webhook-signature",
    "x-signature-256",
    "x-hub-signature-256",
];
/// The event name of a payload that names none.
const DEFAULT_EVENT: &str = "webhook_message";
/// The instance key of a payload that names none.
const DEFAULT_INSTANCE_KEY: &str = "webhook:default";
/// The timestamp header.
const TIMESTAMP_HEADER: &str = "x-webhook-timestamp";
/// Default port (`PORT`).
pub const DEFAULT_PORT: u16 = 8080;

/// The `webhook` platform.
pub struct Webhook {
    secret: Option<String>,
    require_timestamp: bool,
    window: Duration,
    seen: ReplayGuard,
}

impl Webhook {
    /// The platform and its front, from a Connection's config.
    pub fn from_config(
        config: &ConnectorConfig,
    ) -> Result<(Webhook, HttpFront), ConnectorConfigError> {
        let front = HttpFront::from_config(
            config,
            &["PORT"],
            DEFAULT_PORT,
            &["WEBHOOK_PATH", "PATH"],
            "/",
        )?;
        let secret = config
            .secret(&["SIGNING_SECRET", "WEBHOOK_SECRET"])
            .map(|(_, value)| value.to_string());
        front.refuse_unsigned_off_loopback(config, secret.is_some(), "SIGNING_SECRET")?;
        let webhook = Webhook {
            secret,
            require_timestamp: config.flag("REQUIRE_TIMESTAMP")?,
            window: config.seconds("REPLAY_WINDOW_SECONDS", Duration::from_secs(300))?,
            seen: ReplayGuard::default(),
        };
        Ok((webhook, front))
    }
}

impl Platform for Webhook {
    fn name(&self) -> &'static str {
        "webhook"
    }

    fn not_accepted(&self, request: &PlatformRequest<'_>) {
        if request.header(TIMESTAMP_HEADER).is_some() {
            if let Some(hex) = signature_hex(request) {
                self.seen.forget(hex);
            }
        }
    }

    fn verify(&self, request: &PlatformRequest<'_>) -> Result<(), SignatureError> {
        let Some(secret) = &self.secret else {
            return Ok(());
        };
        let hex = signature_hex(request).ok_or(SignatureError::Missing {
            header: "X-Webhook-Signature",
        })?;
        match request.header(TIMESTAMP_HEADER) {
            None if self.require_timestamp => Err(SignatureError::Missing {
                header: "X-Webhook-Timestamp",
            }),
            None => verify::hmac_sha256_hex_matches(
                secret.as_bytes(),
                &[request.body],
                hex,
                "X-Webhook-Signature",
            ),
            Some(timestamp) => {
                let seconds = verify::within_window(
                    timestamp,
                    "X-Webhook-Timestamp",
                    request.now,
                    self.window,
                )?;
                verify::hmac_sha256_hex_matches(
                    secret.as_bytes(),
                    &[timestamp.as_bytes(), b".", request.body],
                    hex,
                    "X-Webhook-Signature",
                )?;
                if self.seen.first(hex, seconds, self.window) {
                    Ok(())
                } else {
                    Err(SignatureError::Replayed)
                }
            }
        }
    }

    fn handle(&self, request: &PlatformRequest<'_>) -> Result<PlatformOutcome, BadRequest> {
        let payload: Map<String, Value> = serde_json::from_slice(request.body)
            .map_err(|error| BadRequest(format!("the body is not a JSON object: {error}")))?;
        let mut event = event_from_payload(&payload)?;
        // A signed post without a `deliveryId` is known by its signature:
        // the same signed bytes sent again (a replay, or a sender's retry)
        // are the same delivery, which the instance runs once.
        if event.delivery_id.is_none() && self.secret.is_some() {
            event.delivery_id = signature_hex(request).map(|hex| format!("sig:{hex}"));
        }
        // The rules may route the event elsewhere than the key it
        // suggests: the front adds where it went.
        let mut body = Map::new();
        body.insert("ok".into(), true.into());
        body.insert("event".into(), event.name.clone().into());
        Ok(PlatformOutcome::EmitAndTell { event, body })
    }
}

/// The hex signature a post carries, without its `sha256=` prefix.
fn signature_hex<'a>(request: &'a PlatformRequest<'_>) -> Option<&'a str> {
    let signature = SIGNATURE_HEADERS
        .iter()
        .find_map(|name| request.header(name))?;
    Some(signature.strip_prefix("sha256=").unwrap_or(signature))
}

/// The event a webhook payload describes.
pub fn event_from_payload(payload: &Map<String, Value>) -> Result<ConnectorEvent, BadRequest> {
    payload::event_from_object(payload, DEFAULT_EVENT, Some(DEFAULT_INSTANCE_KEY))
        .map_err(|error| BadRequest(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn payload_fields_map_like_the_original() {
        let event = event_from_payload(&payload(json!({
            "event": "order_paid", "text": "hi", "instanceKey": "shop:1",
            "properties": {"amount": 12, "vip": true, "who": "ann", "nested": {"x": 1}}
        })))
        .unwrap();
        assert_eq!(event.name, "order_paid");
        assert_eq!(event.instance_key.as_deref(), Some("shop:1"));
        assert_eq!(event.message, ConnectorMessage::Text { text: "hi".into() });
        assert_eq!(event.properties.len(), 3);
        assert_eq!(event.properties["amount"], "12");
        assert_eq!(event.properties["vip"], "true");

        let bare = event_from_payload(&payload(json!({"message": "m"}))).unwrap();
        assert_eq!(bare.name, "webhook_message");
        assert_eq!(bare.instance_key.as_deref(), Some("webhook:default"));
        assert_eq!(bare.message, ConnectorMessage::Text { text: "m".into() });

        let image = event_from_payload(&payload(
            json!({"message": {"type": "image", "url": "https://x/y.png"}}),
        ))
        .unwrap();
        assert_eq!(
            image.message,
            ConnectorMessage::Image {
                url: "https://x/y.png".into()
            }
        );
        assert!(event_from_payload(&payload(json!({"message": {"type": "sound"}}))).is_err());
        assert!(event_from_payload(&payload(json!({"text": 5}))).is_err());
    }

    #[test]
    fn an_unsigned_webhook_on_a_public_address_is_refused_at_start() {
        let mut config = ConnectorConfig::default();
        config.config.insert("HOST".into(), "0.0.0.0".into());
        let error = Webhook::from_config(&config).err().unwrap();
        assert_eq!(error.key, "SIGNING_SECRET");
        config.config.insert("ALLOW_UNSIGNED".into(), "true".into());
        assert!(Webhook::from_config(&config).is_ok());
        config.config.remove("ALLOW_UNSIGNED");
        config.secrets.insert("WEBHOOK_SECRET", "s");
        assert!(Webhook::from_config(&config).is_ok());
    }
}
