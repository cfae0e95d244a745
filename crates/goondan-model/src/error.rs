//! Errors of model calls, each with a stable code.

use thiserror::Error;

/// A failed model call. Messages never contain an API key.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The provider answered with an error the runtime cannot retry away.
    #[error("{provider} returned HTTP {status}: {message}")]
    Http {
        /// The provider name.
        provider: String,
        /// The HTTP status.
        status: u16,
        /// The provider's own message.
        message: String,
    },
    /// The provider's answer could not be understood.
    #[error("{provider} sent a malformed answer: {message}")]
    MalformedResponse {
        /// The provider name.
        provider: String,
        /// What was wrong.
        message: String,
    },
    /// The call could not reach the provider or timed out.
    #[error("could not reach {provider}: {message}")]
    Transport {
        /// The provider name.
        provider: String,
        /// What happened.
        message: String,
    },
    /// The model is not usable as configured.
    #[error("{message}")]
    Config {
        /// What is wrong.
        message: String,
        /// How to fix it.
        suggestion: Option<String>,
    },
}

impl ModelError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::Http { .. } => "E_MODEL_HTTP",
            ModelError::MalformedResponse { .. } => "E_MODEL_MALFORMED_RESPONSE",
            ModelError::Transport { .. } => "E_MODEL_TRANSPORT",
            ModelError::Config { .. } => "E_MODEL_CONFIG",
        }
    }

    /// How to fix it, when known.
    pub fn suggestion(&self) -> Option<&str> {
        match self {
            ModelError::Config { suggestion, .. } => suggestion.as_deref(),
            _ => None,
        }
    }
}
