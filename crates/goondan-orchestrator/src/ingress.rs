//! Ingress: events from outside the swarm (a connector's, or a person's at
//! the CLI) become AgentEvents for one routing key.
//!
//! [`route`] is the one function that does it, for every source: it picks
//! the agent by the Connection's rules (`connection.md` §5: first match
//! wins, a rule without `match` matches everything, a rule without an
//! agent routes to the entry agent), picks the instance key (the rule's
//! fixed key, else a prefixed property, else the connector's suggestion,
//! else the swarm's), and builds the AgentEvent with [`agent_event`], the
//! only constructor of user input in the runtime.

use crate::swarm::SwarmInfo;
use crate::OrchestratorError;
use goondan_ipc::RoutingKey;
use goondan_types::{AgentEvent, ConnectorEvent, EventSource, EventSourceKind, JsonValue};

/// The connection name of input typed at `gdn run`: an alias of the
/// swarm's Connection that runs the base `cli` connector
/// ([`SwarmInfo::cli_connection`]), or a Connection without rules when
/// there is none.
pub const CLI_CONNECTION: &str = "cli";

/// The event name of input typed at `gdn run`, as the base `cli` connector
/// emits it.
pub const CLI_EVENT: &str = "stdin_message";

/// An ingress event with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ingress {
    /// The Connection it came through.
    pub connection: String,
    /// The event.
    pub event: ConnectorEvent,
    /// An agent chosen by the caller (`gdn run --agent`), overriding the
    /// rules.
    pub agent: Option<String>,
}

impl Ingress {
    /// Text typed at the CLI, for `agent` (the entry agent when `None`).
    pub fn cli(text: impl Into<String>, agent: Option<String>) -> Ingress {
        Ingress::cli_event(ConnectorEvent::text(CLI_EVENT, text), agent)
    }

    /// An event given at the CLI (a JSON line of `gdn run`), for `agent`
    /// (where the cli Connection's rules route it when `None`).
    pub fn cli_event(event: ConnectorEvent, agent: Option<String>) -> Ingress {
        Ingress {
            connection: CLI_CONNECTION.to_string(),
            event,
            agent,
        }
    }
}

/// Where `ingress` goes, as the AgentEvent to deliver there.
pub fn route(
    swarm: &SwarmInfo,
    ingress: &Ingress,
) -> Result<(RoutingKey, AgentEvent), OrchestratorError> {
    let connection = match (&swarm.cli_connection, ingress.connection.as_str()) {
        (Some(cli), CLI_CONNECTION) => cli.as_str(),
        (_, connection) => connection,
    };
    let mut rules = swarm
        .ingress
        .iter()
        .filter(|rule| rule.connection == connection)
        .peekable();
    let has_rules = rules.peek().is_some();
    let rule = rules.find(|rule| rule.matches(&ingress.event));
    if has_rules && rule.is_none() && ingress.agent.is_none() {
        return Err(OrchestratorError::NoIngressRoute {
            connection: connection.to_string(),
            event: ingress.event.name.clone(),
        });
    }
    let agent = ingress
        .agent
        .clone()
        .or_else(|| rule.and_then(|rule| rule.agent.clone()))
        .unwrap_or_else(|| swarm.entry_agent.clone());
    swarm.check_agent(&agent)?;
    let from_property = rule.and_then(|rule| {
        let property = rule.instance_key_property.as_ref()?;
        let value = ingress.event.properties.get(property)?;
        Some(format!(
            "{}{value}",
            rule.instance_key_prefix.as_deref().unwrap_or_default()
        ))
    });
    let instance_key = rule
        .and_then(|rule| rule.instance_key.clone())
        .or(from_property)
        .or_else(|| ingress.event.instance_key.clone())
        .filter(|key| !key.is_empty())
        .unwrap_or_else(|| swarm.instance_key.clone());
    let event = agent_event(connection, &ingress.event, &instance_key);
    Ok((RoutingKey::new(agent, instance_key), event))
}

/// The AgentEvent an ingress event becomes: its name as the type, its
/// message as the input, its properties as metadata, a new trace. An
/// event with a `delivery_id` gets an id made from it and the Connection,
/// the same on every host, so a platform's retry has the id of the
/// delivery it repeats.
pub fn agent_event(connection: &str, event: &ConnectorEvent, instance_key: &str) -> AgentEvent {
    let mut agent_event = AgentEvent::new(
        event.name.clone(),
        EventSource::new(EventSourceKind::Connector, connection),
    );
    if let Some(delivery_id) = &event.delivery_id {
        agent_event.id = delivery_event_id(connection, delivery_id);
    }
    agent_event.input = Some(event.message.as_input());
    agent_event.instance_key = Some(instance_key.to_string());
    agent_event.trace_id = Some(goondan_types::trace::new_trace_id());
    let mut metadata = event.properties_json();
    if !matches!(event.message, goondan_types::ConnectorMessage::Text { .. }) {
        metadata.insert(
            "message".into(),
            serde_json::to_value(&event.message).unwrap_or(JsonValue::Null),
        );
    }
    if !metadata.is_empty() {
        agent_event.metadata = Some(metadata);
    }
    agent_event
}

/// `evt_d` and a hash of the Connection and the platform's delivery id.
fn delivery_event_id(connection: &str, delivery_id: &str) -> String {
    let mut key = Vec::with_capacity(connection.len() + 1 + delivery_id.len());
    key.extend_from_slice(connection.as_bytes());
    key.push(0);
    key.extend_from_slice(delivery_id.as_bytes());
    format!("evt_d{:016x}", goondan_types::placement::fnv1a64(&key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swarm::IngressRule;
    use std::time::Duration;

    #[test]
    fn a_retried_delivery_has_the_id_of_the_first() {
        let mut event = ConnectorEvent::text("github_push", "x");
        event.delivery_id = Some("72d3162e-cc78-11e3-81ab-4c9367dc0958".into());
        let first = agent_event("gh", &event, "k");
        let retry = agent_event("gh", &event, "k");
        assert_eq!(first.id, retry.id);
        assert!(first.id.starts_with("evt_d"), "{}", first.id);
        // Another Connection's delivery of the same id is another event.
        assert_ne!(agent_event("gh-2", &event, "k").id, first.id);
        // Without a delivery id, every event is new.
        event.delivery_id = None;
        assert_ne!(
            agent_event("gh", &event, "k").id,
            agent_event("gh", &event, "k").id
        );
    }

    fn swarm(ingress: Vec<IngressRule>) -> SwarmInfo {
        SwarmInfo {
            swarm_name: "s".into(),
            entry_agent: "coordinator".into(),
            agents: vec!["coordinator".into(), "support".into()],
            instance_key: "main".into(),
            grace_period: Duration::from_secs(1),
            max_queued_events: 8,
            processes: Default::default(),
            ingress,
            cli_connection: Some("cli-to-default".into()),
            connections: Vec::new(),
            approval_connections: Vec::new(),
        }
    }

    fn telegram(chat: &str) -> Ingress {
        let mut event = ConnectorEvent::text("telegram_message", "hi");
        event.properties.insert("chat_id".into(), chat.into());
        Ingress {
            connection: "tg".into(),
            event,
            agent: None,
        }
    }

    #[test]
    fn cli_input_without_rules_goes_to_the_entry_agent_of_the_swarm_instance() {
        let (key, event) = route(&swarm(vec![]), &Ingress::cli("hello", None)).unwrap();
        assert_eq!(key.to_string(), "coordinator:main");
        assert_eq!(event.event_type, CLI_EVENT);
        assert_eq!(event.input.as_deref(), Some("hello"));
        assert_eq!(event.source.name, "cli-to-default");
        assert!(event.trace_id.is_some());
        let (key, _) = route(&swarm(vec![]), &Ingress::cli("x", Some("support".into()))).unwrap();
        assert_eq!(key.agent_name, "support");
    }

    #[test]
    fn the_first_matching_rule_picks_agent_and_instance_key() {
        let rules = vec![
            IngressRule {
                connection: "tg".into(),
                event: Some("telegram_message".into()),
                properties: [("chat_id".to_string(), "1".to_string())].into(),
                agent: Some("support".into()),
                instance_key: Some("vip".into()),
                ..Default::default()
            },
            IngressRule {
                connection: "tg".into(),
                instance_key_property: Some("chat_id".into()),
                instance_key_prefix: Some("telegram:".into()),
                ..Default::default()
            },
        ];
        let swarm = swarm(rules);
        let (key, event) = route(&swarm, &telegram("1")).unwrap();
        assert_eq!(key.to_string(), "support:vip");
        assert_eq!(event.metadata_value("chat_id").unwrap(), "1");
        let (key, _) = route(&swarm, &telegram("42")).unwrap();
        assert_eq!(key.to_string(), "coordinator:telegram:42");
    }

    #[test]
    fn cli_input_follows_the_rules_of_the_cli_connectors_connection() {
        let swarm = swarm(vec![IngressRule {
            connection: "cli-to-default".into(),
            event: Some(CLI_EVENT.into()),
            agent: Some("support".into()),
            ..Default::default()
        }]);
        let (key, _) = route(&swarm, &Ingress::cli("help", None)).unwrap();
        assert_eq!(key.to_string(), "support:main");
    }

    #[test]
    fn an_event_no_rule_matches_is_refused_with_a_code() {
        let swarm = swarm(vec![IngressRule {
            connection: "tg".into(),
            event: Some("other".into()),
            ..Default::default()
        }]);
        let error = route(&swarm, &telegram("1")).unwrap_err();
        assert_eq!(error.code(), "E_INGRESS_NO_ROUTE");
        let unknown = Ingress::cli("x", Some("ghost".into()));
        assert_eq!(
            route(&swarm, &unknown).unwrap_err().code(),
            "E_AGENT_NOT_FOUND"
        );
    }

    #[test]
    fn event_and_properties_must_both_match_and_a_rule_without_match_catches_the_rest() {
        let rules = vec![
            IngressRule {
                connection: "tg".into(),
                event: Some("telegram_message".into()),
                properties: [("chat_id".to_string(), "7".to_string())].into(),
                agent: Some("support".into()),
                ..Default::default()
            },
            IngressRule {
                connection: "tg".into(),
                event: Some("edited_message".into()),
                agent: Some("support".into()),
                instance_key: Some("edits".into()),
                ..Default::default()
            },
            // Catch-all: the entry agent, the event's own key.
            IngressRule {
                connection: "tg".into(),
                ..Default::default()
            },
        ];
        let swarm = swarm(rules);
        // The event name matches the first rule, the property does not.
        let mut own_key = telegram("8");
        own_key.event.instance_key = Some("chat-8".into());
        let (key, _) = route(&swarm, &own_key).unwrap();
        assert_eq!(key.to_string(), "coordinator:chat-8");
        // Both match: the first rule, and without a key of its own the
        // event's suggestion stands.
        let mut vip = telegram("7");
        vip.event.instance_key = Some("chat-7".into());
        assert_eq!(route(&swarm, &vip).unwrap().0.to_string(), "support:chat-7");
        // A fixed key overrides the event's.
        let mut edit = telegram("7");
        edit.event.name = "edited_message".into();
        edit.event.instance_key = Some("chat-7".into());
        assert_eq!(route(&swarm, &edit).unwrap().0.to_string(), "support:edits");
        // Nothing suggested and nothing fixed: the swarm's key.
        assert_eq!(
            route(&swarm, &telegram("9")).unwrap().0.to_string(),
            "coordinator:main"
        );
    }

    #[test]
    fn a_prefixed_key_needs_its_property_and_a_connection_without_rules_goes_to_the_entry_agent() {
        let swarm = swarm(vec![IngressRule {
            connection: "tg".into(),
            instance_key_property: Some("thread".into()),
            instance_key_prefix: Some("t-".into()),
            ..Default::default()
        }]);
        let mut threaded = telegram("1");
        threaded
            .event
            .properties
            .insert("thread".into(), "55".into());
        assert_eq!(
            route(&swarm, &threaded).unwrap().0.to_string(),
            "coordinator:t-55"
        );
        // The property is missing: no prefixed key, the swarm's.
        assert_eq!(
            route(&swarm, &telegram("1")).unwrap().0.to_string(),
            "coordinator:main"
        );
        let unruled = Ingress {
            connection: "hooks".into(),
            event: ConnectorEvent::text("webhook_message", "x"),
            agent: None,
        };
        assert_eq!(
            route(&swarm, &unruled).unwrap().0.to_string(),
            "coordinator:main"
        );
    }
}
