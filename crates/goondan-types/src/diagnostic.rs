//! The one diagnostic shape every layer reports problems in: the loader's
//! validation errors, CLI output (`--format json`) and tool errors share it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Error or warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Stops the bundle from loading (or the command from succeeding).
    Error,
    /// Worth fixing; `--strict` turns it into an error.
    Warning,
}

/// A coded, located problem with a suggested fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// A stable code such as `E_CONFIG_REF_NOT_FOUND`.
    pub code: String,
    /// What is wrong, in a sentence.
    pub message: String,
    /// `<file>#<field path>`, when the problem has a place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The resource as `Kind/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The field path inside the resource, for example `spec.modelRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// How to fix it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
    /// Where to read more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub help_url: Option<String>,
    /// The file the problem is in (kept apart from `path` for renderers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// One-based line in `file`, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// One-based column in `file`, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    /// One-based index of the YAML document in `file`, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<usize>,
}

impl Diagnostic {
    /// An error with a code and a message; fill the rest with the builders.
    pub fn error(code: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic::new(Severity::Error, code, message)
    }

    /// A warning with a code and a message.
    pub fn warning(code: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic::new(Severity::Warning, code, message)
    }

    fn new(severity: Severity, code: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic {
            severity,
            code: code.into(),
            message: message.into(),
            path: None,
            resource: None,
            field: None,
            suggestion: None,
            help_url: None,
            file: None,
            line: None,
            column: None,
            document: None,
        }
    }

    /// Sets the resource (`Kind/name`).
    pub fn with_resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Sets the field path and, with the file, `path`.
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self.refresh_path();
        self
    }

    /// Sets the file and, with the field, `path`.
    pub fn with_file(mut self, file: impl Into<String>) -> Self {
        self.file = Some(file.into());
        self.refresh_path();
        self
    }

    /// Sets the line and column.
    pub fn with_location(mut self, line: usize, column: usize) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }

    /// Sets the YAML document index within the file.
    pub fn with_document(mut self, document: usize) -> Self {
        self.document = Some(document);
        self
    }

    /// Sets the suggestion.
    pub fn with_suggestion(mut self, suggestion: impl Into<String>) -> Self {
        self.suggestion = Some(suggestion.into());
        self
    }

    /// Sets the help URL.
    pub fn with_help_url(mut self, help_url: impl Into<String>) -> Self {
        self.help_url = Some(help_url.into());
        self
    }

    /// True for errors.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    fn refresh_path(&mut self) {
        self.path = match (&self.file, &self.field) {
            (Some(file), Some(field)) => Some(format!("{file}#{field}")),
            (Some(file), None) => Some(file.clone()),
            (None, _) => None,
        };
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.code, self.message)?;
        if let Some(path) = &self.path {
            write!(f, " ({path})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn path_joins_file_and_field() {
        let diagnostic = Diagnostic::error("E_CONFIG_REF_NOT_FOUND", "missing")
            .with_file("goondan.yaml")
            .with_field("spec.modelRef")
            .with_resource("Agent/planner")
            .with_suggestion("define it");
        assert_eq!(
            diagnostic.path.as_deref(),
            Some("goondan.yaml#spec.modelRef")
        );
        let value = serde_json::to_value(&diagnostic).unwrap();
        assert_eq!(value["severity"], json!("error"));
        assert_eq!(value["resource"], json!("Agent/planner"));
    }
}
