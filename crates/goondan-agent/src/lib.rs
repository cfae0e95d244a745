//! The Goondan AgentProcess: one agent instance behind IPC.
//!
//! [`host`] runs the process loop: a FIFO queue of AgentEvents, one Turn at
//! a time, replies routed back by correlation id, graceful drain on
//! `shutdown`. [`IpcAgents`] implements the runtime's
//! [`AgentsApi`](goondan_runtime::AgentsApi) over the same channel, so
//! `agents__request` in a tool and `ctx.agents()` in middleware share one
//! path through the orchestrator.
//!
//! Invariant: only the host loop touches the IPC sender's ordering; every
//! outbound message is a self-contained [`IpcMessage`](goondan_types::IpcMessage).
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod assemble;
pub mod host;
pub mod ipc_agents;
pub mod operators;

pub use ipc_agents::{IpcAgents, SwarmView};

/// Locks a mutex whose critical sections are single updates (a map insert,
/// a take), so a poisoned lock still guards consistent data.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
