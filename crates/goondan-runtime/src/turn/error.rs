//! Why an agent did not start: [`AgentError`], the error of
//! [`crate::turn::Agent::start`]. It does not cover a running Turn, whose
//! failures are [`crate::PipelineError`]s.

use crate::extension::EntryError;
use crate::tool::ToolRegistrationError;
use goondan_store::StoreError;
use thiserror::Error;

/// A failure while assembling an agent: the agent does not start.
#[derive(Debug, Error)]
pub enum AgentError {
    /// An extension's `register` failed.
    #[error("extension '{extension}' failed to initialize: {message}")]
    ExtensionInit {
        /// The extension's resource name.
        extension: String,
        /// What it reported.
        message: String,
    },
    /// A Tool or Extension entry did not resolve to code.
    #[error(transparent)]
    Entry(#[from] EntryError),
    /// A Tool export has no handler in its entry.
    #[error("tool '{tool}' exports '{export}', but its entry has no handler for it")]
    MissingHandler {
        /// The Tool resource.
        tool: String,
        /// The export name.
        export: String,
    },
    /// A tool name breaks the `resource__export` rule or is taken twice.
    #[error(transparent)]
    ToolRegistration(#[from] ToolRegistrationError),
    /// Loading the conversation or extension state failed.
    #[error("could not restore the instance: {0}")]
    Store(#[from] StoreError),
}

impl AgentError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            AgentError::ExtensionInit { .. } => "E_EXTENSION_INIT",
            AgentError::Entry(error) => error.code(),
            AgentError::MissingHandler { .. } => "E_TOOL_HANDLER_MISSING",
            AgentError::ToolRegistration(error) => error.code(),
            AgentError::Store(error) => error.code(),
        }
    }

    /// How to fix it, when known.
    pub fn suggestion(&self) -> Option<&str> {
        match self {
            AgentError::ExtensionInit { .. } => {
                Some("check the extension's spec.config and its log lines above")
            }
            AgentError::Entry(error) => error.suggestion(),
            AgentError::MissingHandler { .. } => {
                Some("remove the export or add a handler with that name to the entry")
            }
            AgentError::ToolRegistration(error) => error.suggestion(),
            AgentError::Store(_) => None,
        }
    }
}
