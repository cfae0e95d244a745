//! Events of the swarm as a whole, beside the per-instance
//! [`RuntimeEvent`](crate::RuntimeEvent)s: today, each reload of the
//! bundle (a `--watch` edit, an agent's `self-restart__request`, a
//! `gdn restart`, a cluster rollout) and each reload refused because the edited bundle is
//! invalid. Appended to the workspace's `swarm-events.jsonl` and shown by
//! `gdn logs` among the runtime events, ordered by time.

use serde::{Deserialize, Serialize};

/// What asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReloadTrigger {
    /// `gdn run --watch` saw an edit.
    Watch,
    /// An agent called `self-restart__request`.
    SelfRestart,
    /// `gdn restart` was run.
    Restart,
    /// A cluster host applied the bundle `gdn cluster deploy` made active.
    Rollout,
}

impl ReloadTrigger {
    /// The trigger as events spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadTrigger::Watch => "watch",
            ReloadTrigger::SelfRestart => "self-restart",
            ReloadTrigger::Restart => "restart",
            ReloadTrigger::Rollout => "rollout",
        }
    }
}

/// Fields every swarm event carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SwarmEventBase {
    /// ISO 8601 time of emission.
    pub timestamp: String,
    /// `Swarm.metadata.name`.
    pub swarm_name: String,
    /// The swarm's instance key.
    pub instance_key: String,
    /// What asked for the reload.
    pub trigger: ReloadTrigger,
    /// Why, when the asker said (`self-restart__request`'s `reason`, or
    /// the routing key of the agent that asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One swarm event, tagged by `type` in dot notation like runtime events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum SwarmEvent {
    /// The bundle was re-read and what it affects was restarted.
    #[serde(rename = "swarm.reloaded", rename_all = "camelCase")]
    Reloaded {
        /// Common fields.
        #[serde(flatten)]
        base: SwarmEventBase,
        /// `Kind/name` of each changed resource (`env` for env files).
        changed: Vec<String>,
        /// Routing keys restarted (agent instances and `@connection:` keys).
        restarted: Vec<String>,
        /// Restarted agent instances not ready again when the reload
        /// stopped waiting for them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        not_ready: Vec<String>,
        /// Milliseconds from the trigger to every restarted agent ready.
        duration: u64,
    },
    /// The edited bundle is invalid; the swarm runs on unchanged.
    #[serde(rename = "swarm.reload_rejected", rename_all = "camelCase")]
    ReloadRejected {
        /// Common fields.
        #[serde(flatten)]
        base: SwarmEventBase,
        /// The first error's code.
        code: String,
        /// What is wrong, as the agent or the console was told.
        error_message: String,
    },
}

impl SwarmEvent {
    /// The common fields.
    pub fn base(&self) -> &SwarmEventBase {
        match self {
            SwarmEvent::Reloaded { base, .. } | SwarmEvent::ReloadRejected { base, .. } => base,
        }
    }

    /// The `type` tag, for filters.
    pub fn type_name(&self) -> &'static str {
        match self {
            SwarmEvent::Reloaded { .. } => "swarm.reloaded",
            SwarmEvent::ReloadRejected { .. } => "swarm.reload_rejected",
        }
    }

    /// The routing keys this event restarted (none when rejected).
    pub fn restarted(&self) -> &[String] {
        match self {
            SwarmEvent::Reloaded { restarted, .. } => restarted,
            SwarmEvent::ReloadRejected { .. } => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes_are_pinned() {
        let base = SwarmEventBase {
            timestamp: "2026-11-25T00:00:00.000Z".into(),
            swarm_name: "s".into(),
            instance_key: "k".into(),
            trigger: ReloadTrigger::SelfRestart,
            reason: Some("edited prompt".into()),
        };
        let reloaded = SwarmEvent::Reloaded {
            base: base.clone(),
            changed: vec!["Agent/a".into()],
            restarted: vec!["a:k".into()],
            not_ready: Vec::new(),
            duration: 42,
        };
        assert_eq!(
            serde_json::to_value(&reloaded).unwrap(),
            json!({
                "type": "swarm.reloaded",
                "timestamp": "2026-11-25T00:00:00.000Z",
                "swarmName": "s",
                "instanceKey": "k",
                "trigger": "self-restart",
                "reason": "edited prompt",
                "changed": ["Agent/a"],
                "restarted": ["a:k"],
                "duration": 42
            })
        );
        let rejected = SwarmEvent::ReloadRejected {
            base: SwarmEventBase {
                trigger: ReloadTrigger::Watch,
                reason: None,
                ..base
            },
            code: "E_CONFIG_REF_NOT_FOUND".into(),
            error_message: "Model/m is not defined".into(),
        };
        let value = serde_json::to_value(&rejected).unwrap();
        assert_eq!(value["type"], "swarm.reload_rejected");
        assert_eq!(value["trigger"], "watch");
        assert_eq!(value["errorMessage"], "Model/m is not defined");
        for event in [reloaded, rejected] {
            let text = serde_json::to_string(&event).unwrap();
            assert_eq!(serde_json::from_str::<SwarmEvent>(&text).unwrap(), event);
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(&text).unwrap()["type"],
                event.type_name()
            );
        }
    }
}
