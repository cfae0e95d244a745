//! The one JSON body of a coded failure, `{code, message, suggestion}`:
//! what a child that could not start sends (`runtime.start_error`), what
//! the registry and the Studio answer an HTTP request with, and what a
//! failed Turn reports to an MCP client. Richer shapes (a [`Diagnostic`]
//! with its place, a `ToolError` with its class name) stay their own types.
//!
//! [`Diagnostic`]: crate::Diagnostic

use serde::{Deserialize, Serialize};

/// A coded failure with an optional fix; `suggestion` is left out of the
/// JSON when there is none, so a body without one is `{"code","message"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// A stable code (`E_QUEUE_FULL`, `E_PKG_NOT_FOUND`, ...).
    pub code: String,
    /// What went wrong, in a sentence.
    pub message: String,
    /// How to fix it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
}

impl ErrorBody {
    /// A body with a code and a message and no suggestion.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ErrorBody {
            code: code.into(),
            message: message.into(),
            suggestion: None,
        }
    }

    /// The body with `suggestion` as its fix.
    pub fn with_suggestion(mut self, suggestion: impl Into<String>) -> Self {
        self.suggestion = Some(suggestion.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_body_is_code_message_and_a_suggestion_only_when_there_is_one() {
        let cases = [
            (
                ErrorBody::new("E_X", "boom"),
                r#"{"code":"E_X","message":"boom"}"#,
            ),
            (
                ErrorBody::new("E_X", "boom").with_suggestion("fix it"),
                r#"{"code":"E_X","message":"boom","suggestion":"fix it"}"#,
            ),
        ];
        for (body, wire) in cases {
            assert_eq!(serde_json::to_string(&body).unwrap(), wire);
            assert_eq!(serde_json::from_str::<ErrorBody>(wire).unwrap(), body);
        }
    }

    #[test]
    fn a_body_from_a_peer_may_carry_more_fields() {
        let body: ErrorBody =
            serde_json::from_value(json!({"code": "E_X", "message": "m", "eventId": "e"})).unwrap();
        assert_eq!(body, ErrorBody::new("E_X", "m"));
    }
}
