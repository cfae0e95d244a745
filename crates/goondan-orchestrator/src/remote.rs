//! [`RemoteInstances`]: the instances an orchestrator does not serve
//! itself, and the door events to them leave by.
//!
//! A single host serves every instance (no `RemoteInstances` at all). A
//! cluster host (`gdn run --cluster`) serves the instances of the shards it
//! owns; an agent's request, send or answer to any other instance leaves
//! through [`RemoteInstances::forward`] (into that instance's inbox), and
//! what other hosts send to its instances comes back in through
//! [`OrchestratorHandle::deliver_from_remote`](crate::OrchestratorHandle::deliver_from_remote).

use goondan_ipc::RoutingKey;
use goondan_types::IpcMessage;

/// Which instances are served elsewhere, and how events reach them.
pub trait RemoteInstances: Send + Sync {
    /// True when this orchestrator runs `key` itself.
    fn serves(&self, key: &RoutingKey) -> bool;

    /// Carries an `event` message (a request, a send or an answer; its
    /// `to` names the instance) to the instance's owner. Must not block:
    /// the orchestrator's loop calls it.
    fn forward(&self, message: IpcMessage);
}
