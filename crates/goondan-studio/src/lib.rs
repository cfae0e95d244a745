//! The Studio: a read-only web view of a System Root, served by `gdn
//! studio` (docs/observability.md, "Studio").
//!
//! It shows the swarms (workspaces) and their agent instances, the
//! stored runs of `gdn eval` with their cases and scores (each case's
//! trace opens from the System Root it ran in), an
//! instance's conversation, its timeline of Turns, Steps and tool calls
//! with tokens and cost, a trace's span tree with timings and the
//! inter-agent call graph, a swarm's map (agents, tools, extensions, who
//! may call whom, Connections) from the bundle it last started from, and
//! follows new runtime events live over server-sent events. Everything
//! comes from the files under the System Root (`goondan-store`) and that
//! bundle, so it works the same while a swarm runs and after it stopped;
//! the one thing it asks the orchestrator for reading is whether it runs
//! (`/api/status`, a read-only `status` on its control socket).
//!
//! What it does not do: write any file, start or stop anything, or serve
//! any file that is not one of its three embedded assets. With
//! `gdn studio --allow-actions` (and the token, on loopback too) it also
//! acts. Through the running orchestrator's control socket, it sends a
//! message to an instance, approves or denies a pending approval,
//! cancels an instance's running Turn, forks an instance from one of
//! its Turns or rewinds it to one, and edits a message or an extension's
//! state (`actions`); the orchestrator does the writing. And it re-runs
//! a case of a stored eval run (`rerun`): a `gdn eval` child process
//! runs it and stores the new run.
//!
//! The pieces: [`access`] (who may ask: Host check, token and cookie),
//! `data` (reading the state root), `evals` (the stored runs of `gdn eval`), `map` (a swarm's
//! bundle as a picture), `live` (the event tail behind the SSE stream), `actions` (what the page may do), `rerun` (an eval case run again), `server` (routes and the accept loop with its limits).
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod access;
mod actions;
mod data;
pub mod error;
mod evals;
mod live;
mod map;
mod rerun;
mod server;

pub use access::Access;
pub use error::StudioError;
pub use server::{router, serve, Limits, Studio, MAX_ACTIONS};
