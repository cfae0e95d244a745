//! Goondan across hosts on NATS JetStream (`../shared/design/scale-out.md`
//! in the team's notes; docs/cluster.md for users).
//!
//! Every host runs the single-host process model: one AgentProcess per
//! instance, spawned locally and spoken to over stdio. What crosses hosts
//! goes through NATS JetStream, and only through this crate:
//!
//! - [`Cluster`]: one connection, and the streams, buckets and object
//!   stores of [`layout`], created on first use;
//! - [`subject`]: how routing keys become subject tokens;
//! - [`ClusterJournal`], [`ClusterExtensionState`] and
//!   [`ClusterApprovals`]: an instance's conversation log in `GDN_CONV`
//!   behind `goondan-store`'s `TurnJournal`, `ExtensionStateStore` and
//!   `ApprovalLog`, and [`export`], which writes it back in the
//!   single-host layout;
//! - [`approvals`]: the requests for a person's decision every instance
//!   of a workspace holds, read from anywhere (`gdn approvals`);
//! - [`history`]: an instance's Turns, and its fork and rewind;
//! - [`inbox`]: every instance's inbox in `GDN_IN`, pulled per shard;
//! - [`cursor`]: what an instance's last commit consumed from its inbox
//!   and answered (the transactional outbox);
//! - [`membership`]: host heartbeats and the shard leases;
//! - [`owner`]: a person's request to whichever host owns an instance now
//!   (a decision, a cancel), and each host's side of it;
//! - [`crashes`]: crash counters that move with an instance;
//! - [`bundle`]: the bundle every host runs, distributed by digest.
//!
//! Safety never rests on a lease alone: every write to an instance's log is
//! a compare-and-append on the last sequence its writer read, checked by
//! the stream's Raft leader, so a stale owner (paused, partitioned) can
//! finish thinking but never commit.

#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod approvals;
pub mod bundle;
mod connect;
mod conversation;
pub mod crashes;
pub mod cursor;
pub mod directory;
mod error;
mod export;
pub mod history;
pub mod inbox;
mod journal;
pub mod layout;
pub mod membership;
mod object;
pub mod owner;
mod record;
pub mod reply;
mod retry;
pub mod subject;
#[cfg(feature = "testing")]
pub mod testing;

pub use connect::{Cluster, ClusterOptions, ClusterUrls};
pub use error::ClusterError;
pub use export::export;
pub use journal::{
    ClusterApprovals, ClusterExtensionState, ClusterJournal, ClusterObserver,
    DEFAULT_SNAPSHOT_EVERY,
};
