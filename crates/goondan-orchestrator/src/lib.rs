//! The Goondan orchestrator: the resident process of `gdn run`.
//!
//! It spawns one AgentProcess per `agentName:instanceKey` on demand,
//! routes [`IpcMessage`](goondan_types::IpcMessage)s between them, keeps
//! events for instances that are starting or crashed, restarts crashed
//! processes with crash-loop backoff, drains them gracefully on shutdown,
//! and answers control requests (`gdn restart`, `gdn instance ...`) on a
//! Unix socket.
//!
//! It knows nothing about Turns, models or tools: children are opaque
//! peers behind two seams, [`Spawner`] (how a process starts, stops and
//! ends) and [`Transport`](goondan_ipc::Transport) (how messages reach a
//! routing key). Inputs from outside the swarm enter through one function,
//! [`ingress::route`]; only an event its caller already addressed to an
//! instance (a cluster host's inbox delivery) skips the rules.
//!
//! Invariant: the main loop is a single task that owns every instance and
//! `match`es closed enums ([`Input`](orchestrator::Input) and
//! [`TransportEvent`](goondan_ipc::TransportEvent)); nothing else mutates
//! routing state.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod backoff;
pub mod control;
pub mod error;
pub mod ingress;
pub mod orchestrator;
pub mod remote;
pub mod spawner;
pub mod swarm;

pub use error::OrchestratorError;
pub use ingress::Ingress;
pub use orchestrator::{Orchestrator, OrchestratorConfig, OrchestratorHandle};
pub use remote::{ForwardOutcome, ForwardReceipt, RemoteInstances};
pub use spawner::{
    LocalSpawner, LogFileFor, ProcessControl, SecretsFor, SpawnRequest, SpawnedProcess, Spawner,
};
pub use swarm::{IngressRule, SwarmInfo};
