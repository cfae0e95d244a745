//! [`HttpError`]: what the shared pieces of a port refuse. Each port
//! reports it under its own code family (`E_STUDIO_TOKEN_WEAK`,
//! `E_MCP_TOKEN_WEAK`, `E_PKG_TOKEN_FILE`), so a user sees which command
//! refused; [`HttpError::code`] is for callers with no family of their own.

use thiserror::Error;

/// A refusal by the shared port rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum HttpError {
    /// A token meant to guard a port is too short to be safe from
    /// guessing.
    #[error("the token is {length} characters long; a token that guards a port needs at least {minimum}")]
    WeakToken {
        /// Its length in characters.
        length: usize,
        /// The least accepted ([`crate::token::MIN_TOKEN_CHARS`]).
        minimum: usize,
    },
}

impl HttpError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            HttpError::WeakToken { .. } => "E_TOKEN_WEAK",
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> &'static str {
        match self {
            HttpError::WeakToken { .. } => {
                "use a random value of at least 24 characters, for example from `openssl rand -hex 32`"
            }
        }
    }
}
