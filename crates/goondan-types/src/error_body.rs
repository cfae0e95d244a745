//! The one JSON body of a coded failure, `{code, message, suggestion}`:
//! what a child that could not start sends (`runtime.start_error`), what
//! the registry and the Studio answer an HTTP request with, and what a
//! failed Turn reports to an MCP client. Richer shapes (a [`Diagnostic`]
//! with its place, a `ToolError` with its class name) stay their own types.
//!
//! A body that leaves this machine through a port (`gdn serve`, `gdn mcp
//! serve`, the Studio) first goes through [`ErrorBody::for_port`], which
//! takes out the absolute paths a store or orchestrator message names
//! (a state root, an instance folder): they say where this machine keeps
//! its files, which a remote client has no business knowing, and they
//! are no use to it. The CLI prints the paths as they are.
//!
//! [`Diagnostic`]: crate::Diagnostic

use serde::{Deserialize, Serialize};
use std::borrow::Cow;

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

    /// The body as a port answers with it: every absolute path in its
    /// message and suggestion cut to its last component ([`without_paths`]).
    pub fn for_port(mut self) -> Self {
        if let Cow::Owned(message) = without_paths(&self.message) {
            self.message = message;
        }
        if let Some(suggestion) = &self.suggestion {
            if let Cow::Owned(cut) = without_paths(suggestion) {
                self.suggestion = Some(cut);
            }
        }
        self
    }
}

/// `text` with every absolute path in it (`/home/me/.goondan/…/copy`,
/// `C:\Users\me\…`) cut to `…/` and its last component (`…/copy`), so
/// what failed is still named but not where this machine keeps it. A
/// path is a `/` (or a drive letter with `:\` or `:/`) at the start of
/// the text or after a space, quote, bracket, `=` or `,`, followed by a
/// name; it runs to the next space, quote, bracket, `,` or `;`. A URL
/// (`http://h/p`) and a relative path (`a/b`) are left alone: their
/// slash follows a letter or a colon.
pub fn without_paths(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let opens = |at: usize| {
        at == 0
            || matches!(
                bytes[at - 1],
                b' ' | b'\t' | b'\n' | b'"' | b'\'' | b'`' | b'(' | b'[' | b'<' | b'=' | b','
            )
    };
    let ends = |byte: u8| {
        byte.is_ascii_whitespace()
            || matches!(byte, b'"' | b'\'' | b'`' | b')' | b']' | b'>' | b',' | b';')
    };
    let mut out = String::new();
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        let unix = bytes[at] == b'/'
            && bytes
                .get(at + 1)
                .is_some_and(|next| *next != b'/' && !ends(*next));
        let drive = bytes[at].is_ascii_alphabetic()
            && bytes.get(at + 1) == Some(&b':')
            && matches!(bytes.get(at + 2), Some(b'\\' | b'/'))
            && bytes.get(at + 3).is_some_and(|next| !ends(*next));
        if !(unix || drive) || !opens(at) {
            at += 1;
            continue;
        }
        let end = bytes[at..]
            .iter()
            .position(|byte| ends(*byte))
            .map_or(bytes.len(), |length| at + length);
        let path = &text[at..end];
        let last = path
            .trim_end_matches(['/', '\\'])
            .rsplit(['/', '\\'])
            .next()
            .unwrap_or("");
        out.push_str(&text[copied..at]);
        out.push_str("…/");
        out.push_str(last);
        copied = end;
        at = end;
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
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
    fn absolute_paths_are_cut_to_their_last_component() {
        let cases = [
            (
                "instance alpha:copy already exists at /home/me/.goondan/workspaces/w/instances/alpha/copy; nothing was changed",
                "instance alpha:copy already exists at …/copy; nothing was changed",
            ),
            (
                "/var/lib/x/events.jsonl:3: bad line",
                "…/events.jsonl:3: bad line",
            ),
            (
                "cannot open \"/tmp/a b\" or (C:\\Users\\me\\x.json)",
                "cannot open \"…/a b\" or (…/x.json)",
            ),
            ("see /root/ now", "see …/root now"),
            ("http://127.0.0.1:1/a/b and a/b and 1/2", "http://127.0.0.1:1/a/b and a/b and 1/2"),
            ("either / or //", "either / or //"),
            ("no path", "no path"),
        ];
        for (text, expected) in cases {
            assert_eq!(without_paths(text), expected, "{text}");
        }
        let body = ErrorBody::new("E_INSTANCE_EXISTS", "exists at /s/i/k")
            .with_suggestion("remove /s/i/k first")
            .for_port();
        assert_eq!(body.message, "exists at …/k");
        assert_eq!(body.suggestion.as_deref(), Some("remove …/k first"));
    }

    #[test]
    fn a_body_from_a_peer_may_carry_more_fields() {
        let body: ErrorBody =
            serde_json::from_value(json!({"code": "E_X", "message": "m", "eventId": "e"})).unwrap();
        assert_eq!(body, ErrorBody::new("E_X", "m"));
    }
}
