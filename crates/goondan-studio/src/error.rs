//! What can go wrong starting the Studio. Requests that fail are answered
//! with a status and a JSON body (`goondan_types::ErrorBody`, `{"code",
//! "message"}`), never an error value: see `server.rs`.

use std::net::SocketAddr;
use thiserror::Error;

/// A failure to start the Studio.
#[derive(Debug, Error)]
pub enum StudioError {
    /// The address could not be bound.
    #[error("could not listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A token given for a non-loopback address is too short to guess
    /// safely.
    #[error("the Studio token is {length} characters long; it must have at least {minimum}")]
    WeakToken {
        /// Its length.
        length: usize,
        /// The least accepted.
        minimum: usize,
    },
}

impl StudioError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            StudioError::Bind { .. } => "E_STUDIO_BIND",
            StudioError::WeakToken { .. } => "E_STUDIO_TOKEN_WEAK",
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> &'static str {
        match self {
            StudioError::Bind { .. } => {
                "pick another port with --addr 127.0.0.1:PORT, or stop what listens there"
            }
            StudioError::WeakToken { .. } => {
                "unset GOONDAN_STUDIO_TOKEN to have one generated, or set a longer random one"
            }
        }
    }
}
