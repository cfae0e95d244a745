//! IPC errors.

use thiserror::Error;

/// A failed IPC operation.
#[derive(Debug, Error)]
pub enum IpcError {
    /// The peer is gone (pipe closed or process exited).
    #[error("the IPC peer closed the channel")]
    Closed,
    /// A line was not a valid IPC message.
    #[error("malformed IPC line ({reason}): {excerpt}")]
    Malformed {
        /// Why it was rejected.
        reason: String,
        /// The start of the offending line.
        excerpt: String,
    },
    /// A line exceeded the size bound.
    #[error("IPC line of {len} bytes exceeds the {limit}-byte limit")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The bound.
        limit: usize,
    },
    /// A routing key did not parse.
    #[error(transparent)]
    BadRoutingKey(#[from] goondan_types::RoutingKeyError),
}

impl IpcError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            IpcError::Closed => "E_IPC_CLOSED",
            IpcError::Malformed { .. } => "E_IPC_MALFORMED",
            IpcError::TooLarge { .. } => "E_IPC_TOO_LARGE",
            IpcError::BadRoutingKey(_) => "E_IPC_ROUTING_KEY",
        }
    }
}

/// Why a spawned child could not read its spawn handshake. Messages never
/// quote the frame: it holds secrets.
#[derive(Debug, Error)]
pub enum HandshakeError {
    /// The stream ended before the frame.
    #[error("stdin ended before the spawn handshake")]
    Missing,
    /// No frame arrived in time.
    #[error("no spawn handshake arrived on stdin within {} s", after.as_secs())]
    TimedOut {
        /// How long the child waited.
        after: std::time::Duration,
    },
    /// The first line is not a handshake.
    #[error("the spawn handshake is malformed: {reason}")]
    Malformed {
        /// What is wrong with it, without its content.
        reason: String,
    },
    /// The frame exceeds the bound.
    #[error("the spawn handshake exceeds {limit} bytes")]
    TooLarge {
        /// The bound.
        limit: usize,
    },
    /// The orchestrator speaks another protocol version.
    #[error(
        "the orchestrator speaks IPC protocol version {}, this process {expected}",
        actual.map_or_else(|| "(none)".to_string(), |version| version.to_string())
    )]
    Version {
        /// This build's version.
        expected: u32,
        /// The orchestrator's, when the frame had one.
        actual: Option<u64>,
    },
    /// Reading stdin failed.
    #[error("reading the spawn handshake: {0}")]
    Io(#[source] std::io::Error),
}

impl HandshakeError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            HandshakeError::Missing => "E_IPC_HANDSHAKE_MISSING",
            HandshakeError::TimedOut { .. } => "E_IPC_HANDSHAKE_TIMEOUT",
            HandshakeError::Malformed { .. } => "E_IPC_HANDSHAKE_MALFORMED",
            HandshakeError::TooLarge { .. } => "E_IPC_HANDSHAKE_TOO_LARGE",
            HandshakeError::Version { .. } => "E_IPC_PROTOCOL_VERSION",
            HandshakeError::Io(_) => "E_IPC_HANDSHAKE_IO",
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> &'static str {
        match self {
            HandshakeError::Missing
            | HandshakeError::TimedOut { .. }
            | HandshakeError::Malformed { .. }
            | HandshakeError::Io(_) => {
                "start agent processes through an orchestrator (`gdn run`); it writes the spawn handshake before any message"
            }
            HandshakeError::TooLarge { .. } => {
                "keep secret variables small; the handshake carries only the variables the bundle's ValueSources name"
            }
            HandshakeError::Version { .. } => {
                "run the orchestrator and its agents from the same gdn binary (restart the swarm after upgrading)"
            }
        }
    }
}
