//! What can go wrong with a plugin, each with a stable code, the file it
//! concerns and a suggestion.
//!
//! A [`PluginError`] of a call becomes a tool error result (in
//! [`crate::tool`]) or a pipeline error (in [`crate::extension`]); one
//! while resolving becomes an `EntryError`. Messages never hold a secret:
//! whatever a plugin printed is masked before it lands here.

use std::time::Duration;
use thiserror::Error;

/// Why a plugin call or start failed.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum PluginError {
    /// The plugin process exited (or could not be read) while a call was
    /// running.
    #[error("plugin {entry} exited during `{method}`: {detail}")]
    Crashed {
        /// The entry file.
        entry: String,
        /// The method that was running.
        method: String,
        /// The exit status and its last stderr lines.
        detail: String,
    },
    /// The plugin did not answer within the call timeout; it was killed.
    #[error("plugin {entry} did not answer `{method}` within {after:?}")]
    Timeout {
        /// The entry file.
        entry: String,
        /// The method that was running.
        method: String,
        /// The timeout.
        after: Duration,
    },
    /// The plugin broke the protocol (a line that is not JSON-RPC, a
    /// wrong version, a malformed result); it was killed.
    #[error("plugin {entry} broke the protocol: {detail}")]
    Protocol {
        /// The entry file.
        entry: String,
        /// What it sent or did.
        detail: String,
    },
    /// The program that runs the file could not be started.
    #[error("plugin {entry} could not start `{program}`: {detail}")]
    Start {
        /// The entry file.
        entry: String,
        /// The program.
        program: String,
        /// The OS error.
        detail: String,
    },
    /// No runtime for the file was found.
    #[error("no runtime can run {entry}: looked for {looked_for}")]
    RuntimeMissing {
        /// The entry file.
        entry: String,
        /// What was looked for.
        looked_for: String,
        /// How to install one.
        install: String,
    },
    /// The file does not exist or is not a file the host can run.
    #[error("plugin entry {entry} cannot run: {detail}")]
    Entry {
        /// The entry file.
        entry: String,
        /// What is wrong.
        detail: String,
        /// How to fix it.
        fix: String,
    },
    /// A declared export the module does not export.
    #[error("{entry} does not export `{export}` (it exports: {available})")]
    ExportMissing {
        /// The entry file.
        entry: String,
        /// The declared export.
        export: String,
        /// What it exports.
        available: String,
    },
    /// An Extension entry without `register`.
    #[error("{entry} does not export a `register(api, config)` function")]
    NoRegister {
        /// The entry file.
        entry: String,
    },
    /// The user's code threw; the plugin answered with an error.
    #[error("{message}")]
    User {
        /// The code the error carried, if any.
        code: Option<String>,
        /// The error's class name (`TypeError`, `ValueError`, ...).
        name: Option<String>,
        /// Its message.
        message: String,
        /// Its suggestion, if it carried one.
        suggestion: Option<String>,
    },
}

impl PluginError {
    /// The stable code.
    pub fn code(&self) -> &str {
        match self {
            PluginError::Crashed { .. } => "E_PLUGIN_CRASHED",
            PluginError::Timeout { .. } => "E_PLUGIN_TIMEOUT",
            PluginError::Protocol { .. } => "E_PLUGIN_PROTOCOL",
            PluginError::Start { .. } => "E_PLUGIN_START",
            PluginError::RuntimeMissing { .. } => "E_PLUGIN_RUNTIME_MISSING",
            PluginError::Entry { .. } => "E_PLUGIN_ENTRY",
            PluginError::ExportMissing { .. } => "E_PLUGIN_EXPORT_MISSING",
            PluginError::NoRegister { .. } => "E_PLUGIN_NO_REGISTER",
            PluginError::User { code, .. } => code.as_deref().unwrap_or("E_PLUGIN_USER_ERROR"),
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> Option<String> {
        match self {
            PluginError::Crashed { .. } => Some(
                "the plugin's stderr is in the agent log; the next call starts it again".into(),
            ),
            PluginError::Timeout { .. } => Some(
                "make the handler answer sooner or raise the plugin call timeout; \
                 the next call starts the plugin again"
                    .into(),
            ),
            PluginError::Protocol { .. } => Some(
                "print logs to stderr, never stdout: stdout carries the JSON-RPC protocol \
                 (see docs/plugin-protocol.md)"
                    .into(),
            ),
            PluginError::Start { .. } => {
                Some("check that the program is installed and on PATH".into())
            }
            PluginError::RuntimeMissing { install, .. } => Some(install.clone()),
            PluginError::Entry { fix, .. } => Some(fix.clone()),
            PluginError::ExportMissing { export, .. } => Some(format!(
                "add `{export}` to the module's handlers (`export const handlers` in \
                 JavaScript, `handlers = {{...}}` in Python), or remove it from the \
                 Tool's spec.exports"
            )),
            PluginError::NoRegister { .. } => {
                Some("add `export function register(api, config) { ... }`".into())
            }
            PluginError::User { suggestion, .. } => suggestion.clone(),
        }
    }

    /// Whether the process is gone or unusable after this error, so the
    /// next call must start a new one.
    pub fn ends_the_process(&self) -> bool {
        matches!(
            self,
            PluginError::Crashed { .. }
                | PluginError::Timeout { .. }
                | PluginError::Protocol { .. }
        )
    }

    /// `[CODE] message (suggestion)`: one line for resolution errors.
    pub fn describe(&self) -> String {
        match self.suggestion() {
            Some(suggestion) => format!("[{}] {self}; {suggestion}", self.code()),
            None => format!("[{}] {self}", self.code()),
        }
    }
}
