//! [`McpError`]: everything that can go wrong talking MCP, with the stable
//! codes tool results and `gdn` show.

use thiserror::Error;

/// An MCP failure. Each variant has a stable [`McpError::code`] and, where
/// one helps, a [`McpError::suggestion`].
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum McpError {
    /// The extension's `config` is not valid.
    #[error("invalid mcp config: {message}")]
    Config {
        /// What is wrong, naming the field.
        message: String,
    },
    /// The server could not be started or reached, or its connection
    /// ended.
    #[error("MCP server `{server}` is unavailable: {message}")]
    Unavailable {
        /// The server's name in the config.
        server: String,
        /// Why.
        message: String,
    },
    /// The server did not answer in time.
    #[error("MCP server `{server}` did not answer `{method}` within {timeout_ms} ms")]
    Timeout {
        /// The server's name in the config.
        server: String,
        /// The JSON-RPC method.
        method: String,
        /// The deadline that passed.
        timeout_ms: u64,
    },
    /// The server answered with a JSON-RPC error, or a tool result with
    /// `isError: true`.
    #[error("MCP server `{server}` failed `{method}`: {message}")]
    Call {
        /// The server's name in the config.
        server: String,
        /// The JSON-RPC method, or the tool name for a failed tool.
        method: String,
        /// The server's message.
        message: String,
    },
    /// The peer sent something that is not MCP.
    #[error("MCP peer `{peer}` broke the protocol: {message}")]
    Protocol {
        /// The server's name, or `client` on the serving side.
        peer: String,
        /// What was wrong.
        message: String,
    },
}

impl McpError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            McpError::Config { .. } => "E_MCP_CONFIG",
            McpError::Unavailable { .. } => "E_MCP_UNAVAILABLE",
            McpError::Timeout { .. } => "E_MCP_TIMEOUT",
            McpError::Call { .. } => "E_MCP_CALL",
            McpError::Protocol { .. } => "E_MCP_PROTOCOL",
        }
    }

    /// How to recover.
    pub fn suggestion(&self) -> Option<&'static str> {
        match self {
            McpError::Config { .. } => {
                Some("see docs/mcp.md for the shape of `config.servers`")
            }
            McpError::Unavailable { .. } => Some(
                "check the server's command or URL; the next call tries to connect again",
            ),
            McpError::Timeout { .. } => Some(
                "the server may be busy or stuck; retry later or raise `timeoutMs` in the mcp config",
            ),
            McpError::Call { .. } => Some("check the arguments against the tool's description"),
            McpError::Protocol { .. } => Some("the server is not a conforming MCP server"),
        }
    }

    /// Whether the connection that produced this error is no longer worth
    /// using: the next call starts a new one. A [`McpError::Timeout`] is
    /// not by itself: a slow tool does not make a dead server (the
    /// extension pings the server to tell).
    pub fn breaks_connection(&self) -> bool {
        matches!(
            self,
            McpError::Unavailable { .. } | McpError::Protocol { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_has_a_stable_code() {
        let cases = [
            (
                McpError::Config {
                    message: "x".into(),
                },
                "E_MCP_CONFIG",
            ),
            (
                McpError::Unavailable {
                    server: "s".into(),
                    message: "x".into(),
                },
                "E_MCP_UNAVAILABLE",
            ),
            (
                McpError::Timeout {
                    server: "s".into(),
                    method: "tools/call".into(),
                    timeout_ms: 5,
                },
                "E_MCP_TIMEOUT",
            ),
            (
                McpError::Call {
                    server: "s".into(),
                    method: "m".into(),
                    message: "x".into(),
                },
                "E_MCP_CALL",
            ),
            (
                McpError::Protocol {
                    peer: "s".into(),
                    message: "x".into(),
                },
                "E_MCP_PROTOCOL",
            ),
        ];
        for (error, code) in cases {
            assert_eq!(error.code(), code);
            assert!(error.suggestion().is_some());
        }
    }
}
