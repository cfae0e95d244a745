//! Routing keys: `agentName:instanceKey` (`goondan_types::routing_key`,
//! where every crate below this one can reach them too).

pub use goondan_types::routing_key::{RoutingKey, RoutingKeyError, ORCHESTRATOR};
