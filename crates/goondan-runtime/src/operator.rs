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
use std::sync::{Arc, Mutex};
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
    /// The question is malformed (its name, its timeout, ...).
    #[error("the question is malformed: {0}")]
    BadQuestion(String),
}

impl AskError {
    /// `E_APPROVAL_UNAVAILABLE`, `E_APPROVAL_STORE` or
    /// `E_APPROVAL_BAD_QUESTION`.
    pub fn code(&self) -> &'static str {
        match self {
            AskError::Unavailable(_) => "E_APPROVAL_UNAVAILABLE",
            AskError::Store(_) => "E_APPROVAL_STORE",
            AskError::BadQuestion(_) => "E_APPROVAL_BAD_QUESTION",
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

    /// True when an open question is about the tool call `call_id` (its
    /// gate's, whose key is the call id, or one the call or a middleware
    /// around it asked, keyed under it: [`goondan_types::approval::is_about_call`]): the call never
    /// finished, so a resumed Turn runs it (and each question is found
    /// again, with its decision if one came).
    fn holds(&self, call_id: &str) -> bool;

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

    fn holds(&self, _call_id: &str) -> bool {
        false
    }

    fn settle(&self, _key: &str) -> Result<(), AskError> {
        Ok(())
    }
}

/// Where a script asks a person from: one tool call, or one middleware
/// invocation. Its questions are keyed `<anchor>/<name>` (the anchor is
/// the call id inside a call, the input event id in a `turn` or `step`
/// middleware), so asking again after a restart (the Turn runs the call
/// or the middleware again) finds each question with its decision, and
/// never collides with the gate's own question, whose key is the bare
/// call id. Its questions are settled together when the scope ends
/// ([`AskScope::settle_asked`]).
#[derive(Clone)]
pub struct AskScope {
    operators: Arc<dyn Operators>,
    turn_id: String,
    event_id: String,
    anchor: String,
    asked: Arc<Mutex<Vec<String>>>,
}

impl AskScope {
    /// Questions of the Turn `turn_id` (consuming `event_id`) keyed under
    /// `anchor`.
    pub fn new(
        operators: Arc<dyn Operators>,
        turn_id: &str,
        event_id: &str,
        anchor: &str,
    ) -> AskScope {
        AskScope {
            operators,
            turn_id: turn_id.to_string(),
            event_id: event_id.to_string(),
            anchor: anchor.to_string(),
            asked: Arc::default(),
        }
    }

    /// Asks `question`, its key taken as a name inside this scope (a name
    /// holding `/` is refused: it could reach into another scope).
    pub fn ask(
        &self,
        mut question: Question,
    ) -> BoxFuture<'static, Result<ApprovalDecision, AskError>> {
        if question.key.is_empty() || question.key.contains('/') {
            let name = question.key;
            return Box::pin(async move {
                Err(AskError::BadQuestion(format!(
                    "a question's name must be non-empty and hold no `/` (got `{name}`)"
                )))
            });
        }
        question.key = goondan_types::approval::question_key(&self.anchor, &question.key);
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        if !asked.contains(&question.key) {
            asked.push(question.key.clone());
        }
        self.operators.ask(&self.turn_id, &self.event_id, question)
    }

    /// Closes every question asked in this scope: what asked them is over,
    /// so a crash from here on does not run it again for their sake.
    pub fn settle_asked(&self) -> Result<(), AskError> {
        let asked = std::mem::take(&mut *self.asked.lock().unwrap_or_else(|e| e.into_inner()));
        asked.iter().try_for_each(|key| self.operators.settle(key))
    }
}

impl std::fmt::Debug for AskScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AskScope")
            .field("turn_id", &self.turn_id)
            .field("anchor", &self.anchor)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_name_with_a_slash_is_refused_before_anything_is_asked() {
        let scope = AskScope::new(Arc::new(NoOperators), "turn_1", "evt_1", "call_1");
        let question = Question {
            key: "../call_2".into(),
            tool: None,
            arguments: JsonValue::Null,
            question: Some("go?".into()),
            timeout: None,
            on_timeout: Verdict::Deny,
        };
        let error = scope.ask(question).await.unwrap_err();
        assert_eq!(error.code(), "E_APPROVAL_BAD_QUESTION");
        assert!(scope.asked.lock().unwrap().is_empty());
    }
}
