//! [`RemoteInstances`]: the instances an orchestrator does not serve
//! itself, and the door events to them leave by.
//!
//! A single host serves every instance (no `RemoteInstances` at all). A
//! cluster host (`gdn run --cluster`) serves the instances of the shards it
//! owns; an agent's request, send or answer to any other instance leaves
//! through [`RemoteInstances::forward`] (into that instance's inbox), and
//! what other hosts send to its instances comes back in through
//! [`OrchestratorHandle::deliver_from_remote`](crate::OrchestratorHandle::deliver_from_remote).
//!
//! Acknowledged means durable (SYSTEM.md §3): `forward` only hands the
//! event over, and its [`ForwardReceipt`] says later whether the owner's
//! inbox stored it. The orchestrator tells the event's sender that it was
//! taken (`Ingested`, `Accepted`) only once the receipt says stored, and
//! gives it a coded failure otherwise; it never waits for a receipt in its
//! loop.

use goondan_ipc::RoutingKey;
use goondan_types::{ErrorBody, IpcMessage};

/// How a forwarded event ended: `Ok` once it is stored where its
/// instance's owner reads it (a cluster's inbox confirmed the publish),
/// else why it is not.
pub type ForwardOutcome = Result<(), ErrorBody>;

/// What [`RemoteInstances::forward`] returns: resolves with the event's
/// [`ForwardOutcome`]. A door that drops its half without an outcome
/// leaves the event unstored, as far as its sender is told.
pub type ForwardReceipt = tokio::sync::oneshot::Receiver<ForwardOutcome>;

/// Which instances are served elsewhere, and how events reach them.
pub trait RemoteInstances: Send + Sync {
    /// True when this orchestrator runs `key` itself.
    fn serves(&self, key: &RoutingKey) -> bool;

    /// Carries an `event` message (a request, a send or an answer; its
    /// `to` names the instance) to the instance's owner, after every
    /// message forwarded before it. Must not block: the orchestrator's
    /// loop calls it. The receipt resolves once the event is stored for
    /// the owner or could not be; a caller that acknowledges the event to
    /// its sender waits for it, one that owes nobody an acknowledgement
    /// (an answer) may drop it.
    fn forward(&self, message: IpcMessage) -> ForwardReceipt;
}
