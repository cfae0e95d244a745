//! [`A2aError`]: everything that can go wrong calling a remote A2A agent,
//! with the stable codes tool results and `gdn` show.

use crate::types::TaskState;
use thiserror::Error;

/// A failure of the A2A client. Each variant has a stable
/// [`A2aError::code`] and a [`A2aError::suggestion`].
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum A2aError {
    /// The `a2a` extension's `config` is not valid.
    #[error("invalid a2a config: {message}")]
    Config {
        /// What is wrong, naming the field.
        message: String,
    },
    /// The agent's card or endpoint could not be reached, or answered
    /// with an HTTP error.
    #[error("A2A agent `{agent}` is unreachable: {message}")]
    Unreachable {
        /// The agent's name in the config.
        agent: String,
        /// Why.
        message: String,
    },
    /// The agent did not finish within the deadline.
    #[error("A2A agent `{agent}` did not answer within {timeout_ms} ms")]
    Timeout {
        /// The agent's name in the config.
        agent: String,
        /// The deadline that passed.
        timeout_ms: u64,
    },
    /// The Agent Card is not one this client can use.
    #[error("the Agent Card of A2A agent `{agent}` is not usable: {message}")]
    Card {
        /// The agent's name in the config.
        agent: String,
        /// What is wrong with it.
        message: String,
    },
    /// A URL the card or a redirect names fails the rules for internal
    /// addresses (the `http-fetch` rules).
    #[error("A2A agent `{agent}`: {url} is refused: {reason}")]
    Blocked {
        /// The agent's name in the config.
        agent: String,
        /// The refused URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The answer passed the size limit.
    #[error("A2A agent `{agent}` answered more than {limit} bytes")]
    TooLarge {
        /// The agent's name in the config.
        agent: String,
        /// The limit (`maxAnswerBytes`).
        limit: u64,
    },
    /// The agent answered something that is not A2A over JSON-RPC.
    #[error("A2A agent `{agent}` broke the protocol: {message}")]
    Protocol {
        /// The agent's name in the config.
        agent: String,
        /// What was wrong.
        message: String,
    },
    /// The agent refused the request with a JSON-RPC error.
    #[error("A2A agent `{agent}` refused the request (JSON-RPC {code}): {message}")]
    Remote {
        /// The agent's name in the config.
        agent: String,
        /// The JSON-RPC error code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// The Task ended (or stopped) in a state that is not an answer:
    /// failed, rejected, canceled, input-required or auth-required.
    #[error("A2A agent `{agent}` ended task {task_id} (contextId {context_id}) as {}: {message}", state_name(*state))]
    Task {
        /// The agent's name in the config.
        agent: String,
        /// Where the Task stands.
        state: TaskState,
        /// The Task.
        task_id: String,
        /// Its conversation.
        context_id: String,
        /// What the agent said with that state.
        message: String,
    },
}

/// A Task state as people and models read it (`input-required`).
pub fn state_name(state: TaskState) -> &'static str {
    match state {
        TaskState::Submitted => "submitted",
        TaskState::Working => "working",
        TaskState::Completed => "completed",
        TaskState::Failed => "failed",
        TaskState::Canceled => "canceled",
        TaskState::InputRequired => "input-required",
        TaskState::Rejected => "rejected",
        TaskState::AuthRequired => "auth-required",
        TaskState::Unspecified => "unspecified",
    }
}

impl A2aError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            A2aError::Config { .. } => "E_A2A_CONFIG",
            A2aError::Unreachable { .. } => "E_A2A_UNREACHABLE",
            A2aError::Timeout { .. } => "E_A2A_TIMEOUT",
            A2aError::Card { .. } => "E_A2A_CARD",
            A2aError::Blocked { .. } => "E_A2A_BLOCKED",
            A2aError::TooLarge { .. } => "E_A2A_TOO_LARGE",
            A2aError::Protocol { .. } => "E_A2A_PROTOCOL",
            A2aError::Remote { .. } => "E_A2A_REMOTE",
            A2aError::Task { state, .. } => match state {
                TaskState::InputRequired => "E_A2A_INPUT_REQUIRED",
                TaskState::AuthRequired => "E_A2A_AUTH_REQUIRED",
                TaskState::Rejected => "E_A2A_TASK_REJECTED",
                TaskState::Canceled => "E_A2A_TASK_CANCELED",
                _ => "E_A2A_TASK_FAILED",
            },
        }
    }

    /// How to recover.
    pub fn suggestion(&self) -> &'static str {
        match self {
            A2aError::Config { .. } => "see docs/protocols.md for the shape of `config.agents`",
            A2aError::Unreachable { .. } => {
                "check the agent's `url` and that it is running; the next call tries again"
            }
            A2aError::Timeout { .. } => {
                "the agent may be busy; retry later or raise `timeoutMs` in the a2a config"
            }
            A2aError::Card { .. } => {
                "the agent must publish an Agent Card with a JSONRPC interface at /.well-known/agent-card.json"
            }
            A2aError::Blocked { .. } => {
                "configure that URL as the agent's `url` if the operator means to reach it"
            }
            A2aError::TooLarge { .. } => "ask for a shorter answer or raise `maxAnswerBytes`",
            A2aError::Protocol { .. } => "the agent is not a conforming A2A 1.0 JSON-RPC server",
            A2aError::Remote { .. } => "check the text sent; the agent said why it refused",
            A2aError::Task { state, .. } => match state {
                TaskState::InputRequired | TaskState::AuthRequired => {
                    "answer the agent by calling the tool again with this taskId and contextId"
                }
                _ => "the remote agent could not do it; rephrase, or answer without it",
            },
        }
    }

    /// Whether what the client remembers about the agent (its card and
    /// endpoint) may be stale after this error: the next call fetches
    /// the card again.
    pub fn forgets_card(&self) -> bool {
        matches!(
            self,
            A2aError::Unreachable { .. } | A2aError::Protocol { .. } | A2aError::Card { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_has_a_stable_code_and_a_suggestion() {
        let agent = || "r".to_string();
        let task = |state| A2aError::Task {
            agent: agent(),
            state,
            task_id: "t".into(),
            context_id: "c".into(),
            message: "m".into(),
        };
        let cases = [
            (
                A2aError::Config {
                    message: "x".into(),
                },
                "E_A2A_CONFIG",
            ),
            (
                A2aError::Unreachable {
                    agent: agent(),
                    message: "x".into(),
                },
                "E_A2A_UNREACHABLE",
            ),
            (
                A2aError::Timeout {
                    agent: agent(),
                    timeout_ms: 1,
                },
                "E_A2A_TIMEOUT",
            ),
            (
                A2aError::Card {
                    agent: agent(),
                    message: "x".into(),
                },
                "E_A2A_CARD",
            ),
            (
                A2aError::Blocked {
                    agent: agent(),
                    url: "u".into(),
                    reason: "x".into(),
                },
                "E_A2A_BLOCKED",
            ),
            (
                A2aError::TooLarge {
                    agent: agent(),
                    limit: 1,
                },
                "E_A2A_TOO_LARGE",
            ),
            (
                A2aError::Protocol {
                    agent: agent(),
                    message: "x".into(),
                },
                "E_A2A_PROTOCOL",
            ),
            (
                A2aError::Remote {
                    agent: agent(),
                    code: -32603,
                    message: "x".into(),
                },
                "E_A2A_REMOTE",
            ),
            (task(TaskState::Failed), "E_A2A_TASK_FAILED"),
            (task(TaskState::Rejected), "E_A2A_TASK_REJECTED"),
            (task(TaskState::Canceled), "E_A2A_TASK_CANCELED"),
            (task(TaskState::InputRequired), "E_A2A_INPUT_REQUIRED"),
            (task(TaskState::AuthRequired), "E_A2A_AUTH_REQUIRED"),
        ];
        for (error, code) in cases {
            assert_eq!(error.code(), code);
            assert!(!error.suggestion().is_empty());
        }
        assert!(task(TaskState::InputRequired)
            .to_string()
            .contains("task t (contextId c) as input-required: m"));
    }
}
