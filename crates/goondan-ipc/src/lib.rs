//! IPC between the Goondan orchestrator and its children.
//!
//! Two seams meet here. **Message delivery** is a [`Transport`]: it
//! carries [`IpcMessage`]s to and from a [`Link`] (a routing key plus the
//! generation of the process serving it) and reports the end of each
//! link's stream explicitly. Its first implementation,
//! [`StdioTransport`], speaks newline-delimited JSON over a child's
//! stdin/stdout; a later one (a NATS subject per instance) plugs in behind
//! the same trait. A child process sees its side as an [`IpcChannel`].
//! **The protocol** ([`protocol`]) is the one typed vocabulary both sides
//! speak: user events, answers, and the runtime's own messages. Messages are
//! addressed by routing key ([`RoutingKey`]), never by pid or pipe, and are
//! self-contained JSON. Before any message, a locally spawned child reads
//! one [`SpawnHandshake`] frame: the protocol version and its secrets.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod channel;
pub mod error;
pub mod framing;
pub mod handshake;
pub mod protocol;
pub mod routing;
pub mod transport;

pub use channel::IpcChannel;
pub use error::{HandshakeError, IpcError};
pub use handshake::{child_channel, read_handshake, SpawnHandshake};
pub use protocol::{
    Inbound, ProtocolError, RuntimeMessage, ShutdownPayload, WireCode, PROTOCOL_VERSION,
};
pub use routing::{RoutingKey, ORCHESTRATOR};
pub use transport::{Endpoint, Link, SendError, StdioTransport, Transport, TransportEvent};
