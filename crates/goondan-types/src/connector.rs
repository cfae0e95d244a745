//! What a connector emits (`connector.md` §5.3): one normalized event per
//! message from the outside world, routed to an agent by its Connection's
//! ingress rules.

use crate::json::JsonObject;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A normalized event from a connector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectorEvent {
    /// The event name the connector declares (what ingress rules match).
    pub name: String,
    /// The message it carries.
    pub message: ConnectorMessage,
    /// String properties ingress rules can match and read an instance key
    /// from.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// The instance the connector suggests; ingress rules may override it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_key: Option<String>,
    /// The platform's id of this delivery (Slack's `event_id`, GitHub's
    /// `X-GitHub-Delivery`, Telegram's `update_id`, a schedule's fire
    /// time): a platform's retry carries the same one. The event's id is
    /// made from it, so in a cluster a retry that reaches another host is
    /// dropped as a duplicate by the instance's inbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
}

/// The content of a [`ConnectorEvent`] (multimodal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ConnectorMessage {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image by URL.
    Image {
        /// Where it is.
        url: String,
    },
    /// A file by URL.
    File {
        /// Where it is.
        url: String,
        /// Its name.
        name: String,
    },
}

impl ConnectorEvent {
    /// A text event named `name`.
    pub fn text(name: impl Into<String>, text: impl Into<String>) -> Self {
        ConnectorEvent {
            name: name.into(),
            message: ConnectorMessage::Text { text: text.into() },
            properties: BTreeMap::new(),
            instance_key: None,
            delivery_id: None,
        }
    }

    /// The properties as JSON metadata.
    pub fn properties_json(&self) -> JsonObject {
        self.properties
            .iter()
            .map(|(key, value)| (key.clone(), value.clone().into()))
            .collect()
    }
}

impl ConnectorMessage {
    /// What an agent reads as its input text: the text, or a line naming
    /// the attachment.
    pub fn as_input(&self) -> String {
        match self {
            ConnectorMessage::Text { text } => text.clone(),
            ConnectorMessage::Image { url } => format!("[image] {url}"),
            ConnectorMessage::File { url, name } => format!("[file {name}] {url}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn connector_events_have_the_original_shape() {
        let value = json!({
            "name": "telegram_message",
            "message": {"type": "file", "url": "https://x/y.pdf", "name": "y.pdf"},
            "properties": {"chat_id": "42"},
            "instanceKey": "telegram:42"
        });
        let event: ConnectorEvent = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(serde_json::to_value(&event).unwrap(), value);
        assert_eq!(event.message.as_input(), "[file y.pdf] https://x/y.pdf");
        assert_eq!(ConnectorEvent::text("cli", "hi").message.as_input(), "hi");
    }
}
