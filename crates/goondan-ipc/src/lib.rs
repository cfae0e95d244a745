//! IPC between the Goondan orchestrator and its children.
//!
//! Two seams meet here. **Message delivery** is an [`IpcChannel`]: an
//! ordered, bounded pair of queues of [`IpcMessage`]s. Its first transport
//! is newline-delimited JSON over a child's stdin/stdout
//! ([`IpcChannel::from_io`]); a later one (a NATS subject per instance) only
//! has to produce the same pair of queues. **Process spawning** lives in the
//! orchestrator and never leaks into message handling. Messages are
//! addressed by routing key ([`RoutingKey`]), never by pid or pipe, and are
//! self-contained JSON.
//!
//! The three IPC types are fixed by the spec (`event`, `shutdown`,
//! `shutdown_ack`). Process lifecycle notices (ready, start error, turn
//! finished) travel as `event`s whose AgentEvent type starts with
//! `runtime.`; see [`notice`].
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod answer;
pub mod channel;
pub mod error;
pub mod framing;
pub mod notice;
pub mod routing;

pub use channel::IpcChannel;
pub use error::IpcError;
pub use notice::{Notice, ShutdownPayload};
pub use routing::{RoutingKey, ORCHESTRATOR};
