//! Routing keys: `agentName:instanceKey`, the address of one agent
//! instance everywhere (the orchestrator's routes, the control socket's
//! `key`, the store's folders, the cluster's subjects, what `gdn` prints).
//! [`RoutingKey`] is the one way to build or split one: nothing formats
//! `"{agent}:{key}"` or splits at `:` by hand.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The address of the orchestrator itself, which no agent may be named.
pub const ORCHESTRATOR: &str = "orchestrator";

/// The agent-name part of a ConnectorProcess's routing key
/// (`@connection:<name>`). Resource names cannot start with `@`, so it
/// never names an agent, and [`RoutingKey::parse`] refuses it: an agent
/// cannot address a connector.
const CONNECTION_AGENT: &str = "@connection";

/// The address of one agent instance. The instance key may itself contain
/// `:` (for example `user:123`); the agent name may not, so a key splits
/// at its first `:`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RoutingKey {
    /// The Agent resource name.
    pub agent_name: String,
    /// The instance key.
    pub instance_key: String,
}

/// A text that is not a routing key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingKeyError {
    /// The text, as given.
    pub text: String,
}

impl fmt::Display for RoutingKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a routing key; expected `agentName:instanceKey`",
            self.text
        )
    }
}

impl std::error::Error for RoutingKeyError {}

impl RoutingKeyError {
    /// The error code (`E_IPC_ROUTING_KEY`, as the protocol has always
    /// named it).
    pub fn code(&self) -> &'static str {
        "E_IPC_ROUTING_KEY"
    }
}

impl RoutingKey {
    /// Builds a key.
    pub fn new(agent_name: impl Into<String>, instance_key: impl Into<String>) -> Self {
        RoutingKey {
            agent_name: agent_name.into(),
            instance_key: instance_key.into(),
        }
    }

    /// The key of the ConnectorProcess of Connection `name`.
    pub fn connection(name: impl Into<String>) -> Self {
        RoutingKey::new(CONNECTION_AGENT, name)
    }

    /// The Connection whose ConnectorProcess this key addresses, if it is
    /// one.
    pub fn connection_name(&self) -> Option<&str> {
        (self.agent_name == CONNECTION_AGENT).then_some(self.instance_key.as_str())
    }

    /// Parses `agentName:instanceKey`; a bare `agentName` takes
    /// `default_instance_key`. The orchestrator's name, a connector's and
    /// an empty part are refused.
    pub fn parse(text: &str, default_instance_key: &str) -> Result<Self, RoutingKeyError> {
        let (agent_name, instance_key) =
            text.split_once(':').unwrap_or((text, default_instance_key));
        if agent_name.is_empty()
            || instance_key.is_empty()
            || agent_name == ORCHESTRATOR
            || agent_name.starts_with('@')
        {
            return Err(RoutingKeyError {
                text: text.to_string(),
            });
        }
        Ok(RoutingKey::new(agent_name, instance_key))
    }

    /// Splits `text` at its first `:` as written, with no check of what
    /// the parts name: the agent (`None` for a bare instance key) and the
    /// instance key. For what a person typed, which may name an instance
    /// by its key alone (`gdn instance cancel main`).
    pub fn split(text: &str) -> (Option<&str>, &str) {
        match text.split_once(':') {
            Some((agent, instance_key)) => (Some(agent), instance_key),
            None => (None, text),
        }
    }

    /// Splits a whole key as written (`agent:instanceKey`), with no check
    /// of what its parts name; `None` without a `:`. For keys this
    /// runtime wrote itself (folder names, held or cancelled Turns).
    pub fn split_whole(text: &str) -> Option<RoutingKey> {
        let (agent_name, instance_key) = text.split_once(':')?;
        Some(RoutingKey::new(agent_name, instance_key))
    }

    /// Whether `text` names this instance: its whole key, or its instance
    /// key alone.
    pub fn is_named_by(&self, text: &str) -> bool {
        self.instance_key == text
            || RoutingKey::split(text)
                == (Some(self.agent_name.as_str()), self.instance_key.as_str())
    }
}

impl fmt::Display for RoutingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.agent_name, self.instance_key)
    }
}

/// `agentName:instanceKey`, both parts required.
impl FromStr for RoutingKey {
    type Err = RoutingKeyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if !text.contains(':') {
            return Err(RoutingKeyError {
                text: text.to_string(),
            });
        }
        RoutingKey::parse(text, "")
    }
}

impl Serialize for RoutingKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RoutingKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys_with_colons_in_the_instance() {
        let key = RoutingKey::parse("beta:user:123", "main").unwrap();
        assert_eq!(key, RoutingKey::new("beta", "user:123"));
        assert_eq!(key.to_string(), "beta:user:123");
        assert_eq!(
            RoutingKey::parse("beta", "main").unwrap().instance_key,
            "main"
        );
        for bad in ["", ":x", "beta:", "orchestrator", "@connection:webhook"] {
            assert!(RoutingKey::parse(bad, "main").is_err(), "{bad}");
        }
    }

    #[test]
    fn from_str_and_serde_take_the_whole_key_only() {
        let key: RoutingKey = "coder:telegram:42".parse().unwrap();
        assert_eq!(key, RoutingKey::new("coder", "telegram:42"));
        assert!("coder".parse::<RoutingKey>().is_err());
        let json = serde_json::to_string(&key).unwrap();
        assert_eq!(json, r#""coder:telegram:42""#);
        assert_eq!(serde_json::from_str::<RoutingKey>(&json).unwrap(), key);
        let error = serde_json::from_str::<RoutingKey>(r#""orchestrator:x""#).unwrap_err();
        assert!(
            error.to_string().contains("is not a routing key"),
            "{error}"
        );
    }

    #[test]
    fn a_person_names_an_instance_by_its_whole_key_or_its_instance_key() {
        let key = RoutingKey::new("coder", "main");
        assert!(key.is_named_by("main") && key.is_named_by("coder:main"));
        assert!(!key.is_named_by("writer:main") && !key.is_named_by("coder"));
        assert_eq!(RoutingKey::split("a:b:c"), (Some("a"), "b:c"));
        assert_eq!(RoutingKey::split("main"), (None, "main"));
    }
}
