//! Errors that stop loading before validation can start (the bundle path
//! itself is missing or unreadable), and errors of resolving a ValueSource
//! at run time. Problems inside a bundle are diagnostics, not errors: see
//! [`crate::LoadOutcome`].

use crate::codes::Code;
use std::path::PathBuf;

/// The bundle could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The path given does not exist.
    #[error("no bundle at {path}: the path does not exist")]
    NotFound {
        /// The path as given.
        path: PathBuf,
    },
    /// The path is a directory without `goondan.yaml` or any recognized
    /// resource file.
    #[error(
        "no bundle at {path}: no goondan.yaml and no recognized resource file{}",
        nested_list(nested)
    )]
    Empty {
        /// The directory.
        path: PathBuf,
        /// Folders below it holding their own goondan.yaml: other
        /// projects, which are never loaded as part of this one.
        nested: Vec<String>,
    },
    /// `--env-file` names a file that does not exist.
    #[error("env file {path} does not exist")]
    EnvFileNotFound {
        /// The path as given.
        path: PathBuf,
    },
    /// A file or directory of the bundle cannot be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// What could not be read.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl LoadError {
    /// The error as a diagnostic, for renderers that report everything the
    /// same way.
    pub fn to_diagnostic(&self) -> goondan_types::Diagnostic {
        let diagnostic = self.code().diagnostic(self.to_string());
        match self.suggestion() {
            Some(suggestion) => diagnostic.with_suggestion(suggestion),
            None => diagnostic,
        }
    }

    /// The stable code.
    pub fn code(&self) -> Code {
        match self {
            LoadError::NotFound { .. } | LoadError::EnvFileNotFound { .. } => Code::FileNotFound,
            LoadError::Empty { .. } => Code::BundleEmpty,
            LoadError::Io { .. } => Code::Unreadable,
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> Option<String> {
        match self {
            LoadError::NotFound { .. } => {
                Some("pass the folder holding goondan.yaml, or the YAML file itself".into())
            }
            LoadError::Empty { nested, .. } if !nested.is_empty() => Some(format!(
                "run gdn in a project's folder, or pass it with --config (for example `--config {}`)",
                nested[0]
            )),
            LoadError::Empty { .. } => Some(
                "run `gdn init` to create a project, or create goondan.yaml (resource files must be named goondan, models, agents, tools, extensions, connectors, connections, swarms or resources, .yaml or .yml)".into(),
            ),
            LoadError::EnvFileNotFound { .. } => {
                Some("check the --env-file path; it is relative to the current directory".into())
            }
            LoadError::Io { .. } => Some("check the file's permissions".into()),
        }
    }
}

/// `; projects below it: a, b` (at most five named), or nothing.
fn nested_list(nested: &[String]) -> String {
    const SHOWN: usize = 5;
    match nested.len() {
        0 => String::new(),
        n if n <= SHOWN => format!("; projects below it: {}", nested.join(", ")),
        n => format!(
            "; projects below it: {} and {} more",
            nested[..SHOWN].join(", "),
            n - SHOWN
        ),
    }
}

/// A ValueSource could not be turned into a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// `valueFrom.env` names an unset variable.
    #[error("environment variable {name} is not set")]
    EnvMissing {
        /// The variable.
        name: String,
    },
    /// `valueFrom.secretRef` names a secret none of whose variables is
    /// set.
    #[error("secret {reference} (key {key}) is not set: none of {} has a value", candidates.join(", "))]
    SecretUnavailable {
        /// `Secret/<name>`.
        reference: String,
        /// The key inside the secret.
        key: String,
        /// The variables it is read from, in order.
        candidates: Vec<String>,
    },
    /// The ValueSource holds neither `value` nor a usable `valueFrom`
    /// (validation rejects this; a hand-built ValueSource can still do it).
    #[error("the value source gives neither value nor valueFrom")]
    Empty,
}

impl ResolveError {
    /// The stable code.
    pub fn code(&self) -> Code {
        match self {
            ResolveError::EnvMissing { .. } => Code::EnvMissing,
            ResolveError::SecretUnavailable { .. } => Code::SecretUnavailable,
            ResolveError::Empty => Code::ValueSource,
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> Option<String> {
        match self {
            ResolveError::EnvMissing { name } => Some(format!(
                "set {name} in the environment, in .env or .env.local next to goondan.yaml, or in a file passed with --env-file"
            )),
            ResolveError::SecretUnavailable { candidates, .. } => Some(format!(
                "set {} in the environment, .env, .env.local or an --env-file",
                candidates.first().map_or("GOONDAN_SECRET_<NAME>_<KEY>", String::as_str)
            )),
            ResolveError::Empty => Some("set `value` or `valueFrom`".into()),
        }
    }
}
