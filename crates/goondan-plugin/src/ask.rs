//! `operator.ask`: a script tool or middleware asks a person and gets the
//! decision as a value (`ctx.askPerson` in the Node shims,
//! `ctx.ask_person` in Python).
//!
//! The question is recorded durably before the script waits, and listed
//! by `gdn approvals`; a person answers with `gdn approve ID [--reason
//! TEXT] [--args JSON]` or `gdn deny ID [--reason TEXT]`. A question is
//! named inside its call or middleware invocation ([`AskScope`]), by the
//! script (`name`) or by its order (`ask1`, `ask2`, ...), so a call run
//! again after a crash asks the same questions and gets their decisions
//! at once.

use crate::protocol::{error_codes, RpcError};
use goondan_runtime::{AskScope, Question};
use goondan_types::{JsonValue, Verdict};
use serde::Deserialize;
use std::time::Duration;

/// The longest a script may ask a person to be waited for: thirty days.
const MAX_TIMEOUT_SECONDS: f64 = 30.0 * 24.0 * 3600.0;

/// What `operator.ask` carries.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AskParams {
    /// The question's name inside the call; its order when missing.
    #[serde(default)]
    name: Option<String>,
    /// The question in words.
    #[serde(default)]
    question: Option<String>,
    /// What the person sees beside it (and may edit with `--args`).
    #[serde(default)]
    details: Option<JsonValue>,
    /// How long to wait; for ever when missing.
    #[serde(default)]
    timeout_seconds: Option<f64>,
    /// What the timeout decides (`deny` when missing).
    #[serde(default)]
    on_timeout: Option<Verdict>,
}

/// The questions of one tool call or middleware invocation.
pub(crate) struct Asking {
    scope: AskScope,
    /// Put before every name, so two middlewares around one call never
    /// share a question (`<middleware id>:`), empty for a tool.
    prefix: String,
    unnamed: usize,
}

impl Asking {
    /// The questions of a tool call.
    pub(crate) fn of_tool(scope: AskScope) -> Asking {
        Asking {
            scope,
            prefix: String::new(),
            unnamed: 0,
        }
    }

    /// The questions of the middleware `id`'s invocation.
    pub(crate) fn of_middleware(scope: AskScope, id: &str) -> Asking {
        Asking {
            scope,
            prefix: format!("{id}:"),
            unnamed: 0,
        }
    }

    /// Serves one `operator.ask`: waits for the decision and answers it
    /// (`approved` beside the decision's own fields).
    pub(crate) async fn serve(&mut self, params: JsonValue) -> Result<JsonValue, RpcError> {
        let params: AskParams = serde_json::from_value(params).map_err(|error| {
            RpcError::new(
                error_codes::INVALID_PARAMS,
                format!("`operator.ask` params are malformed: {error}"),
            )
        })?;
        let timeout = match params.timeout_seconds {
            None => None,
            Some(seconds) if seconds > 0.0 && seconds <= MAX_TIMEOUT_SECONDS => {
                Some(Duration::from_secs_f64(seconds))
            }
            Some(seconds) => {
                return Err(RpcError::new(
                    error_codes::INVALID_PARAMS,
                    format!(
                        "`timeoutSeconds` must be above 0 and at most {MAX_TIMEOUT_SECONDS} \
                         (got {seconds})"
                    ),
                ))
            }
        };
        let name = match params.name {
            Some(name) => name,
            None => {
                self.unnamed += 1;
                format!("ask{}", self.unnamed)
            }
        };
        let question = Question {
            key: format!("{}{name}", self.prefix),
            tool: None,
            arguments: params.details.unwrap_or(JsonValue::Null),
            question: params.question,
            timeout,
            on_timeout: params.on_timeout.unwrap_or(Verdict::Deny),
        };
        let decision = self.scope.ask(question).await.map_err(|error| RpcError {
            code: error_codes::USER_ERROR,
            message: error.to_string(),
            data: Some(serde_json::json!({ "code": error.code() })),
        })?;
        let mut answer = serde_json::to_value(&decision)
            .map_err(|error| RpcError::new(error_codes::USER_ERROR, error.to_string()))?;
        answer["approved"] = JsonValue::Bool(decision.verdict == Verdict::Approve);
        Ok(answer)
    }
}
