//! A JSON object describing an event, as webhook posts and `gdn run`'s
//! JSON lines write it (the original's `emitWebhookPayload` and
//! `normalizeCliLine`): the name from `event` or `name`, the message from
//! `text` or `message` (a string, or a message object such as
//! `{"type": "image", "url": ...}`), the instance key from `instanceKey`,
//! the sender's id of this delivery from `deliveryId` (a retry carries the
//! same), and `properties` whose strings, numbers and booleans become
//! string properties (anything else is left out).

use goondan_types::{ConnectorEvent, ConnectorMessage};
use serde_json::{Map, Value};

/// Why a JSON object is not an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PayloadError(String);

/// The event `payload` describes; `default_name` and
/// `default_instance_key` stand in for what it leaves out.
pub fn event_from_object(
    payload: &Map<String, Value>,
    default_name: &str,
    default_instance_key: Option<&str>,
) -> Result<ConnectorEvent, PayloadError> {
    let string = |key: &str| {
        payload
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let name = string("event")
        .or_else(|| string("name"))
        .unwrap_or(default_name);
    let message = match (payload.get("text"), payload.get("message")) {
        (Some(Value::String(text)), _) | (None, Some(Value::String(text))) => {
            ConnectorMessage::Text { text: text.clone() }
        }
        (None, Some(object @ Value::Object(_))) => {
            serde_json::from_value(object.clone()).map_err(|error| {
                PayloadError(format!(
                    "`message` is not a text, image or file message: {error}"
                ))
            })?
        }
        (None, None) => ConnectorMessage::Text {
            text: String::new(),
        },
        _ => return Err(PayloadError("`text` must be a string".into())),
    };
    let properties = match payload.get("properties") {
        Some(Value::Object(properties)) => properties
            .iter()
            .filter_map(|(key, value)| {
                let text = match value {
                    Value::String(text) => text.clone(),
                    Value::Number(number) => number.to_string(),
                    Value::Bool(flag) => flag.to_string(),
                    _ => return None,
                };
                Some((key.clone(), text))
            })
            .collect(),
        _ => Default::default(),
    };
    Ok(ConnectorEvent {
        name: name.to_string(),
        message,
        properties,
        instance_key: string("instanceKey")
            .or(default_instance_key)
            .map(str::to_string),
        delivery_id: string("deliveryId").map(str::to_string),
    })
}
