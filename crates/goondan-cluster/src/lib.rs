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
//! - the conversation log, the inbox and the shard leases are built on
//!   these, each behind a seam the single-host code already has.
//!
//! Safety never rests on a lease alone: every write to an instance's log is
//! a compare-and-append on the last sequence its writer read, checked by
//! the stream's Raft leader, so a stale owner (paused, partitioned) can
//! finish thinking but never commit.

mod connect;
mod error;
pub mod inbox;
pub mod layout;
pub mod membership;
pub mod subject;
#[cfg(feature = "testing")]
pub mod testing;

pub use connect::{Cluster, ClusterOptions, ClusterUrls};
pub use error::ClusterError;
