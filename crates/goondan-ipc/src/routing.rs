//! Routing keys: `agentName:instanceKey`.

use crate::IpcError;
use std::fmt;

/// The address of the orchestrator itself.
pub const ORCHESTRATOR: &str = "orchestrator";

/// The agent-name part of a ConnectorProcess's routing key
/// (`@connection:<name>`). Resource names cannot start with `@`, so it
/// never names an agent, and [`RoutingKey::parse`] refuses it: an agent
/// cannot address a connector.
const CONNECTION_AGENT: &str = "@connection";

/// The address of one agent instance. The instance key may itself contain
/// `:` (for example `user:123`); the agent name may not.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RoutingKey {
    /// The Agent resource name.
    pub agent_name: String,
    /// The instance key.
    pub instance_key: String,
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
    /// `default_instance_key`.
    pub fn parse(text: &str, default_instance_key: &str) -> Result<Self, IpcError> {
        let (agent_name, instance_key) = match text.split_once(':') {
            Some((agent_name, instance_key)) => (agent_name, instance_key),
            None => (text, default_instance_key),
        };
        if agent_name.is_empty()
            || instance_key.is_empty()
            || agent_name == ORCHESTRATOR
            || agent_name.starts_with('@')
        {
            return Err(IpcError::BadRoutingKey(text.to_string()));
        }
        Ok(RoutingKey::new(agent_name, instance_key))
    }
}

impl fmt::Display for RoutingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.agent_name, self.instance_key)
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
}
