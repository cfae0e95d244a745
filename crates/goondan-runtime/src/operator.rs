//! Asking a person in the middle of a Turn ([`Operators`]).
//!
//! A `toolCall` middleware (the base `tool-approval` extension, or any
//! extension) calls [`Operators::ask`] and gets the decision as a value.
//! The host behind the trait records the question durably before it
//! waits, so the question outlives the process: when the agent or the
//! orchestrator dies, the input is redelivered, the Turn resumes at the
//! call that waited ([`Operators::holds`]), and asking again with the same
//! key finds the question already asked (and its decision, if one came
//! meanwhile). The Turn holds no model connection while it waits: the
//! model's answer that asked for the call is already stored.
//!
//! A gate runs a call at most once: it [`settles`](Operators::settle) the
//! question before the call runs, so a crash after that point closes the
//! call as interrupted instead of running it again.

use futures_util::future::BoxFuture;
use goondan_types::{ApprovalDecision, JsonValue, Verdict};
use std::time::Duration;

/// What a middleware asks a person.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// Unique in the instance; the tool call id for a gated call.
    pub key: String,
    /// The tool export the question gates, if it gates one.
    pub tool: Option<String>,
    /// The call's arguments, or the question's details.
    pub arguments: JsonValue,
    /// The question in words.
    pub question: Option<String>,
    /// How long to wait before `on_timeout` decides; `None` waits for
    /// ever.
    pub timeout: Option<Duration>,
    /// What the timeout decides.
    pub on_timeout: Verdict,
}

/// Why a question could not be asked or answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    /// This process has no way to reach a person (a one-off embedding, a
    /// test), so nothing may wait for one.
    #[error("no person can be asked here: {0}")]
    Unavailable(String),
    /// The question or its decision could not be recorded.
    #[error("the approval could not be recorded: {0}")]
    Store(String),
}

impl AskError {
    /// `E_APPROVAL_UNAVAILABLE` or `E_APPROVAL_STORE`.
    pub fn code(&self) -> &'static str {
        match self {
            AskError::Unavailable(_) => "E_APPROVAL_UNAVAILABLE",
            AskError::Store(_) => "E_APPROVAL_STORE",
        }
    }
}

/// The people a running agent can ask, as its host provides them.
pub trait Operators: Send + Sync + std::fmt::Debug {
    /// Records `question` for the Turn `turn_id` consuming the input
    /// `event_id` (or finds the open one with its key) and resolves with
    /// its decision: a person's, or the timeout's.
    fn ask(
        &self,
        turn_id: &str,
        event_id: &str,
        question: Question,
    ) -> BoxFuture<'static, Result<ApprovalDecision, AskError>>;

    /// True when an open question has `key`: the call it gates never ran,
    /// so a resumed Turn runs it (and asks again, finding this one).
    fn holds(&self, key: &str) -> bool;

    /// Closes the question `key`: the Turn acts on its decision now, and
    /// a crash from here on must not make it act again.
    fn settle(&self, key: &str) -> Result<(), AskError>;
}

/// Nobody to ask: every question fails with
/// [`AskError::Unavailable`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NoOperators;

impl Operators for NoOperators {
    fn ask(
        &self,
        _turn_id: &str,
        _event_id: &str,
        _question: Question,
    ) -> BoxFuture<'static, Result<ApprovalDecision, AskError>> {
        Box::pin(async {
            Err(AskError::Unavailable(
                "this agent runs without an orchestrator; run it with `gdn run`".into(),
            ))
        })
    }

    fn holds(&self, _key: &str) -> bool {
        false
    }

    fn settle(&self, _key: &str) -> Result<(), AskError> {
        Ok(())
    }
}
