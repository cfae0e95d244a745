//! Errors of building and calling models, each with a stable code.
//!
//! Every message here is built from text that has already been scrubbed of
//! the API key (see [`crate::ApiKey::scrub`]), so `Display` is safe to log.

use thiserror::Error;

/// A failed model build or call. Messages never contain an API key.
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
    /// The whole call (every attempt, waits between them and the streamed
    /// answer) took longer than the Model's `spec.options.timeoutMs`.
    #[error("Model/{model_resource} ({provider}) did not finish its answer within {limit_ms} ms (spec.options.timeoutMs)")]
    Timeout {
        /// The Model resource's `metadata.name`.
        model_resource: String,
        /// The provider name.
        provider: String,
        /// The limit that was reached, in milliseconds.
        limit_ms: u64,
    },
    /// The answer grew past one of the Model's size limits.
    #[error(
        "{provider} sent an answer larger than {limit} bytes of {what} (spec.options.{option})"
    )]
    AnswerTooLarge {
        /// The provider name.
        provider: String,
        /// What was counted: `HTTP body` or `text and tool-call arguments`.
        what: &'static str,
        /// The option holding the limit.
        option: &'static str,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The model is not usable as configured.
    #[error("{message}")]
    Config {
        /// What is wrong.
        message: String,
        /// How to fix it.
        suggestion: Option<String>,
    },
    /// A retryable failure (429, 5xx, connection reset) persisted through
    /// every retry.
    #[error("{provider} still failing after {attempts} attempts: {message}")]
    RetriesExhausted {
        /// The provider name.
        provider: String,
        /// How many requests were sent.
        attempts: u32,
        /// The HTTP status of the last answer, if there was one.
        status: Option<u16>,
        /// The provider's own message from the last answer.
        message: String,
    },
    /// No API key in the Model resource nor in the provider's variable.
    #[error("Model/{model_resource} ({provider}) has no API key: set spec.apiKey or the {variable} environment variable")]
    ApiKeyMissing {
        /// The Model resource's `metadata.name`.
        model_resource: String,
        /// The provider name.
        provider: String,
        /// The variable that was looked up.
        variable: String,
    },
    /// The scripted provider's rules file could not be read or is invalid.
    #[error("scripted rules file {rules_file}: {message}")]
    ScriptRules {
        /// The rules file path.
        rules_file: String,
        /// What is wrong, with a line number where known.
        message: String,
    },
    /// The scripted provider's rules file is not YAML or breaks one of the
    /// YAML limits (size, nesting, alias expansion) every Goondan YAML file
    /// is held to.
    #[error("scripted rules file {rules_file}: {problem}")]
    ScriptRulesYaml {
        /// The rules file path.
        rules_file: String,
        /// What the YAML reader refused, with its position.
        #[source]
        problem: goondan_config::yaml::YamlProblem,
    },
    /// No scripted rule matched the conversation.
    #[error("no rule in {rules_file} matches {input} ({rules_tried} rules tried)")]
    ScriptNoMatch {
        /// The rules file path.
        rules_file: String,
        /// The unmatched input, described (`the last user text "..."`).
        input: String,
        /// How many rules were tried.
        rules_tried: usize,
    },
    /// A cassette could not be read or written.
    #[error("cassette {cassette}: {message}")]
    Cassette {
        /// The cassette path.
        cassette: String,
        /// What went wrong, with a line number where known.
        message: String,
    },
    /// The replay provider has no recording for a request.
    #[error("cassette {cassette} has no recording for this request: {diff}")]
    ReplayMiss {
        /// The cassette path.
        cassette: String,
        /// How the request differs from the nearest recording.
        diff: String,
    },
}

impl ModelError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            // The provider refused the key: told apart, since the CLI exits
            // with its own code for it (cli.md §12).
            ModelError::Http {
                status: 401 | 403, ..
            } => "E_MODEL_AUTH",
            ModelError::Http { .. } => "E_MODEL_HTTP",
            ModelError::MalformedResponse { .. } => "E_MODEL_MALFORMED_RESPONSE",
            ModelError::Transport { .. } => "E_MODEL_TRANSPORT",
            ModelError::Timeout { .. } => "E_MODEL_TIMEOUT",
            ModelError::AnswerTooLarge { .. } => "E_MODEL_ANSWER_TOO_LARGE",
            ModelError::Config { .. } => "E_MODEL_CONFIG",
            ModelError::RetriesExhausted { .. } => "E_MODEL_RETRIES_EXHAUSTED",
            ModelError::ApiKeyMissing { .. } => "E_MODEL_API_KEY_MISSING",
            ModelError::ScriptRules { .. } | ModelError::ScriptRulesYaml { .. } => {
                "E_MODEL_SCRIPT_RULES"
            }
            ModelError::ScriptNoMatch { .. } => "E_MODEL_SCRIPT_NO_MATCH",
            ModelError::Cassette { .. } => "E_MODEL_CASSETTE",
            ModelError::ReplayMiss { .. } => "E_MODEL_REPLAY_MISS",
        }
    }

    /// How to fix it, when known.
    pub fn suggestion(&self) -> Option<&str> {
        match self {
            ModelError::Config { suggestion, .. } => suggestion.as_deref(),
            ModelError::Http { status, .. } => match status {
                401 | 403 => Some("check the API key (spec.apiKey or the provider's environment variable) and its permissions"),
                404 => Some("check spec.model and spec.endpoint"),
                400 | 422 => Some("the provider rejected the request body; check spec.options and the tool schemas"),
                _ => None,
            },
            // No answer at all (connection refused, reset, timed out) is
            // most often a wrong address, not a busy provider.
            ModelError::RetriesExhausted { status: None, .. } => Some(
                "nothing answered at the Model's address: check spec.endpoint (and that its server is running), the network, and spec.options.connectTimeoutMs",
            ),
            ModelError::RetriesExhausted { status: Some(_), .. } => Some(
                "the provider is overloaded or unreachable; raise spec.options.maxRetries or try again later",
            ),
            ModelError::Transport { .. } => {
                Some("check spec.endpoint, the network, and spec.options.connectTimeoutMs / readTimeoutMs")
            }
            ModelError::Timeout { .. } => Some(
                "raise spec.options.timeoutMs for long answers, or check that the provider is answering at all",
            ),
            ModelError::AnswerTooLarge { option, .. } => Some(if *option == "maxContentBytes" {
                "lower params.maxTokens, or raise spec.options.maxContentBytes if answers this large are expected"
            } else {
                "lower params.maxTokens, or raise spec.options.maxAnswerBytes if answers this large are expected"
            }),
            ModelError::ApiKeyMissing { .. } => {
                Some("add spec.apiKey (valueFrom.env is recommended) or export the variable before `gdn run`")
            }
            ModelError::ScriptRulesYaml { problem, .. } => Some(problem.suggestion()),
            ModelError::ScriptNoMatch { .. } => Some(
                "add a rule whose `when` matches this input, or a last rule without `when` as a fallback",
            ),
            ModelError::ReplayMiss { .. } => Some(
                "record the conversation again with the real provider (ModelConfig.record_to), or fix the drift shown above",
            ),
            ModelError::MalformedResponse { .. }
            | ModelError::ScriptRules { .. }
            | ModelError::Cassette { .. } => None,
        }
    }

    /// True when the failure may go away by itself (rate limits, overload,
    /// transport), which lets the runtime decide whether to retry a Turn.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ModelError::Transport { .. } | ModelError::RetriesExhausted { .. }
        )
    }
}
