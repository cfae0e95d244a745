//! The one error type every pipeline layer shares. (The error of
//! assembling an agent, [`crate::AgentError`], is the turn module's: it
//! names entries and tools, which the pipeline must not know.)
//!
//! Why one type for `turn`, `step` and `toolCall` layers: a middleware sits
//! between two others it does not know, so if each layer could pick its own
//! error type the type seen by an outer layer would depend on the order of
//! `Agent.spec.extensions`. With one coded enum, reordering extensions never
//! changes a signature, and callers branch on [`PipelineError::code`], never
//! on message text. (The losing options were a boxed `dyn Error`, which
//! loses the code, and a generic error parameter per layer, which leaks the
//! composition into every signature.)

use crate::agents::AgentsError;
use goondan_model::ModelError;
use goondan_store::StoreError;
use thiserror::Error;

/// A failure that ends a Turn (or a Step) instead of becoming a value.
///
/// Tool failures are not here: they become `ToolCallResult`s with
/// `status: "error"` and go back to the model (see [`crate::tool`]).
#[derive(Debug, Error)]
pub enum PipelineError {
    /// The model call failed.
    #[error("model call failed: {0}")]
    Model(#[from] ModelError),
    /// The conversation journal or extension state could not be written.
    #[error("storage failed: {0}")]
    Store(#[from] StoreError),
    /// A call through `ctx.agents` failed.
    #[error("inter-agent call failed: {0}")]
    Agents(#[from] AgentsError),
    /// A model call was refused: a `policy.budget` limit is reached, or
    /// the budget's tally could not be read.
    #[error(transparent)]
    Budget(#[from] crate::ledger::AdmitError),
    /// A middleware ended the chain on purpose.
    #[error("{message}")]
    Middleware {
        /// A stable code chosen by the middleware.
        code: String,
        /// What went wrong.
        message: String,
        /// How to fix it.
        suggestion: Option<String>,
    },
    /// The Turn was cancelled from outside: by its requester, which gave
    /// up (`by` is `None`), or by a person (`by` names who, `cli` for
    /// `gdn instance cancel`).
    #[error("{}", cancelled_text(by.as_deref()))]
    Cancelled {
        /// Who cancelled it, when a person did.
        by: Option<String>,
    },
}

/// What a cancelled Turn reports, naming who cancelled it.
fn cancelled_text(by: Option<&str>) -> String {
    match by {
        Some(by) => format!("the turn was cancelled by an operator ({by}) before it finished"),
        None => "the turn was cancelled by its requester before it finished".to_string(),
    }
}

impl PipelineError {
    /// An error raised by a middleware with its own stable code.
    pub fn middleware(code: impl Into<String>, message: impl Into<String>) -> Self {
        PipelineError::Middleware {
            code: code.into(),
            message: message.into(),
            suggestion: None,
        }
    }

    /// Adds a suggestion to a middleware error; other variants keep theirs.
    pub fn with_suggestion(mut self, text: impl Into<String>) -> Self {
        if let PipelineError::Middleware { suggestion, .. } = &mut self {
            *suggestion = Some(text.into());
        }
        self
    }

    /// The stable code.
    pub fn code(&self) -> &str {
        match self {
            PipelineError::Model(error) => error.code(),
            PipelineError::Store(error) => error.code(),
            PipelineError::Agents(error) => error.code(),
            PipelineError::Budget(crate::ledger::AdmitError::Exceeded(error)) => error.code(),
            PipelineError::Budget(crate::ledger::AdmitError::Store(error)) => error.code(),
            PipelineError::Middleware { code, .. } => code,
            PipelineError::Cancelled { .. } => "E_TURN_CANCELLED",
        }
    }

    /// How to fix it, when known.
    pub fn suggestion(&self) -> Option<&str> {
        match self {
            PipelineError::Model(error) => error.suggestion(),
            PipelineError::Store(_) => None,
            PipelineError::Agents(error) => error.suggestion(),
            PipelineError::Budget(crate::ledger::AdmitError::Exceeded(error)) => {
                Some(error.suggestion())
            }
            PipelineError::Budget(crate::ledger::AdmitError::Store(_)) => None,
            PipelineError::Middleware { suggestion, .. } => suggestion.as_deref(),
            PipelineError::Cancelled { .. } => {
                Some("send the input again; what the turn stored before it stopped is kept")
            }
        }
    }
}
