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
    /// The transport cannot reach a process through the endpoint it was
    /// given.
    #[error("no route to `{key}` through this transport")]
    Unreachable {
        /// The routing key.
        key: String,
    },
    /// A routing key did not parse.
    #[error("`{0}` is not a routing key; expected `agentName:instanceKey`")]
    BadRoutingKey(String),
}

impl IpcError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            IpcError::Closed => "E_IPC_CLOSED",
            IpcError::Malformed { .. } => "E_IPC_MALFORMED",
            IpcError::TooLarge { .. } => "E_IPC_TOO_LARGE",
            IpcError::Unreachable { .. } => "E_IPC_UNREACHABLE",
            IpcError::BadRoutingKey(_) => "E_IPC_ROUTING_KEY",
        }
    }
}
