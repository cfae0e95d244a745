//! Running a Goondan swarm on this machine, alone or as a member of a
//! cluster.
//!
//! `gdn run` parses its arguments into [`HostSettings`], calls [`start`]
//! and talks to the [`RunningSwarm`] it gets back (its console: a chat,
//! piped lines or one `--input`); everything between is decided here:
//!
//! * [`project`]: the loaded bundle with its selected Swarm, and what the
//!   orchestrator is told about it ([`project::swarm_info`]);
//! * [`lock`]: one orchestrator per workspace (the start lock, attaching
//!   to the one that runs);
//! * [`mode`]: [`HostMode`], single host or cluster member, built once; it
//!   supplies the bundle folder, the crash ledger, the remote instances
//!   and the reload source, so starting a swarm is one straight line;
//! * [`reload`]: `--watch` edits, agents' restart requests and cluster
//!   rollouts applied to a running swarm;
//! * [`cluster`]: the cluster host loop (shard pulling, answered requests,
//!   outbox replay, singleton Connections, bundle following and
//!   `gdn cluster deploy`) and the reads a person's commands make.
//!
//! This crate prints nothing: what a person should see while a swarm runs
//! (a reload, a refused rollout) is a [`Notice`] for the caller to render,
//! and every failure is a [`HostError`] with its code.

#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod cluster;
mod error;
mod ledger;
pub mod lock;
pub mod mode;
mod notice;
pub mod project;
mod reload;
mod secrets;
mod start;

pub use cluster::rollout::PackageInstaller;
pub use error::{HostError, NotLoaded};
pub use mode::HostMode;
pub use notice::{Notice, Notices};
pub use project::Project;
pub use start::{start, HostSettings, RunningSwarm};
