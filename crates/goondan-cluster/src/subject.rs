//! Subjects: how a routing key becomes NATS subject tokens.
//!
//! A token is kept as it is when it is made of `[A-Za-z0-9_-]` (what NATS
//! recommends) and at most 64 bytes long; anything else becomes `~` and 32
//! hex digits of a 128-bit hash, and the full name travels in the payload.
//! The two forms never collide: `~` is not in the plain alphabet.

use goondan_types::placement::{fnv1a64, shard_of};

const MAX_PLAIN_TOKEN: usize = 64;

/// One subject token for `name`.
pub fn token(name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= MAX_PLAIN_TOKEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        return name.to_string();
    }
    // Two FNV-1a passes with different seeds make 128 bits: enough that a
    // collision between two keys of one workspace is not a concern.
    let mut salted = Vec::with_capacity(name.len() + 1);
    salted.push(0xa5);
    salted.extend_from_slice(name.as_bytes());
    format!(
        "~{:016x}{:016x}",
        fnv1a64(name.as_bytes()),
        fnv1a64(&salted)
    )
}

/// One instance, as the cluster names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InstanceAddress {
    /// The workspace (the swarm instance's scoped id).
    pub workspace_id: String,
    /// The agent.
    pub agent_name: String,
    /// The instance key.
    pub instance_key: String,
}

impl InstanceAddress {
    /// The address of `agent_name:instance_key` in `workspace_id`.
    pub fn new(workspace_id: &str, agent_name: &str, instance_key: &str) -> Self {
        InstanceAddress {
            workspace_id: workspace_id.to_string(),
            agent_name: agent_name.to_string(),
            instance_key: instance_key.to_string(),
        }
    }

    /// The routing key, `agentName:instanceKey`.
    pub fn routing_key(&self) -> String {
        goondan_types::RoutingKey::new(&self.agent_name, &self.instance_key).to_string()
    }

    /// The instance's shard.
    pub fn shard(&self) -> u16 {
        shard_of(&self.workspace_id, &self.agent_name, &self.instance_key)
    }

    fn tokens(&self) -> String {
        format!(
            "{}.{}.{}",
            token(&self.workspace_id),
            token(&self.agent_name),
            token(&self.instance_key)
        )
    }

    /// The instance's inbox subject in `GDN_IN`.
    pub fn inbox_subject(&self) -> String {
        format!("gdn.in.{:03}.{}", self.shard(), self.tokens())
    }

    /// The prefix of every record of the instance's log in `GDN_CONV`;
    /// `<prefix>.>` filters them all.
    pub fn conversation_prefix(&self) -> String {
        format!("gdn.conv.{}", self.tokens())
    }

    /// The instance's runtime-event subject in `GDN_OBS`.
    pub fn observation_subject(&self) -> String {
        format!("gdn.obs.{}", self.tokens())
    }

    /// The instance's key in the `gdn-instances` bucket.
    pub fn metadata_key(&self) -> String {
        self.tokens()
    }
}

/// The subject on which the host `host_id` takes a person's requests for
/// the instances of `workspace_id` it owns (see [`crate::owner`]).
pub fn owner_subject(workspace_id: &str, host_id: &str) -> String {
    format!("gdn.ctl.{}.{}", token(workspace_id), token(host_id))
}

/// The inbox filter of one shard's consumer.
pub fn shard_inbox_filter(shard: u16) -> String {
    format!("gdn.in.{shard:03}.>")
}

/// The name of one shard's durable inbox consumer.
pub fn shard_consumer_name(shard: u16) -> String {
    format!("shard-{shard:03}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_stay_and_others_are_hashed() {
        assert_eq!(token("assistant"), "assistant");
        assert_eq!(token("user_1-b"), "user_1-b");
        for odd in ["", "a.b", "a*b", "a>b", "a b", "한국어", &"x".repeat(65)] {
            let t = token(odd);
            assert!(t.starts_with('~') && t.len() == 33, "{odd:?} → {t}");
        }
        assert_ne!(token("a.b"), token("a:b"));
        let address = InstanceAddress::new("ws-1", "coder", "telegram:42");
        let inbox = address.inbox_subject();
        assert!(inbox.starts_with("gdn.in."));
        assert_eq!(inbox.split('.').count(), 6, "{inbox}");
        assert_eq!(address.routing_key(), "coder:telegram:42");
        assert!(!address.conversation_prefix().contains(['*', '>', ' ']));
    }
}
