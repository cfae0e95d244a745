//! The one error type of the built-in tools, [`BuiltinToolError`], and its
//! conversion into the runtime's [`ToolFailure`], which becomes the
//! structured error result the model reads.
//!
//! A built-in tool never panics and never lets a failure escape as anything
//! but a value: every way a call can go wrong is a variant here, with a
//! stable code and, where a fix is obvious, a suggestion. Cutting the
//! message to `errorMessageLimit` is the runtime's job, not this module's.

use goondan_connector::chat_api::slack::SlackError;
use goondan_connector::chat_api::telegram::TelegramError;
use goondan_runtime::ToolFailure;
use std::path::PathBuf;
use thiserror::Error;

/// A failed call of a built-in tool.
#[derive(Debug, Error)]
pub enum BuiltinToolError {
    /// The arguments do not match the export's parameters.
    #[error("invalid arguments for {tool}: {message}")]
    InvalidArguments {
        /// The catalog name of the tool (`resource__export`).
        tool: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A path resolves outside the instance workdir.
    #[error("path `{requested}` resolves to {resolved}, outside the workdir {workdir}")]
    PathOutsideWorkdir {
        /// The path as the model wrote it.
        requested: String,
        /// Where it resolves after following symlinks.
        resolved: PathBuf,
        /// The instance workdir.
        workdir: PathBuf,
    },
    /// A file or directory the call needs does not exist.
    #[error("no such file or directory: {path}")]
    FileNotFound {
        /// The resolved path.
        path: PathBuf,
    },
    /// Any other file-system failure.
    #[error("{operation} {path}: {source}")]
    Io {
        /// What was being done (`read`, `write`, `list`, ...).
        operation: &'static str,
        /// The resolved path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A child process could not be started.
    #[error("could not start `{program}`: {source}")]
    Spawn {
        /// The program that failed to start.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A URL could not be parsed.
    #[error("invalid URL `{url}`: {message}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it is invalid.
        message: String,
    },
    /// A URL uses a scheme other than http or https.
    #[error("unsupported URL scheme `{scheme}` in `{url}`; only http and https are allowed")]
    UnsupportedScheme {
        /// The URL as given.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// The HTTP request did not complete within its timeout.
    #[error("{method} {url} timed out after {timeout_ms} ms")]
    HttpTimeout {
        /// The method.
        method: &'static str,
        /// The URL.
        url: String,
        /// The timeout that elapsed.
        timeout_ms: u64,
    },
    /// The HTTP request failed before an answer arrived.
    #[error("{method} {url} failed: {message}")]
    HttpRequest {
        /// The method.
        method: &'static str,
        /// The URL.
        url: String,
        /// What the transport reported.
        message: String,
    },
    /// `http-fetch` refused a destination that is internal (loopback,
    /// private, link-local, metadata and the like) and not on its allow
    /// list, checked after DNS resolution and on every redirect.
    #[error("{method} {url} refused: {host} is {address}, a {category} address; http-fetch does not reach internal addresses")]
    HttpBlocked {
        /// The method.
        method: &'static str,
        /// The URL of the refused hop.
        url: String,
        /// The host as written in that URL.
        host: String,
        /// The address that was refused.
        address: String,
        /// What kind of address it is (`loopback`, `private`, ...).
        category: &'static str,
    },
    /// A chat tool (`telegram`, `slack`) has no bot token to call with.
    #[error("{tool} has no bot token: {reason}")]
    BotTokenMissing {
        /// The catalog name of the tool.
        tool: String,
        /// Where it looked, or why it may not use the operator's token.
        reason: String,
    },
    /// A chat platform's API answered with an error.
    #[error("{platform} {method} failed (HTTP {status}): {description}")]
    BotApi {
        /// `Telegram` or `Slack`.
        platform: &'static str,
        /// The API method (`sendMessage`, `chat.postMessage`).
        method: String,
        /// The HTTP status.
        status: u16,
        /// The platform's error description, with the token masked.
        description: String,
    },
    /// A chat platform asked to slow down.
    #[error("{platform} {method} was rate limited; retry after {retry_after_seconds} s")]
    BotApiRateLimited {
        /// `Telegram` or `Slack`.
        platform: &'static str,
        /// The API method.
        method: String,
        /// How long the platform asked to wait (0 when it did not say).
        retry_after_seconds: u64,
    },
    /// A model-supplied `apiBaseUrl` leads to an internal address.
    #[error("{tool} refused apiBaseUrl {url}: it resolves to {address}, a {category} address")]
    BotApiBlocked {
        /// The catalog name of the tool.
        tool: String,
        /// The base URL as given.
        url: String,
        /// The address refused.
        address: String,
        /// What kind of address it is.
        category: &'static str,
    },
    /// A download is larger than the call allows.
    #[error("{what} is {size} bytes, over maxBytes {limit}")]
    TooLarge {
        /// What was downloaded.
        what: String,
        /// Its size, or the bytes read before giving up.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A string argument that must hold JSON does not.
    #[error("`{field}` is not valid JSON: {message}")]
    InvalidJson {
        /// The argument name.
        field: &'static str,
        /// The parser's message.
        message: String,
    },
    /// JSON input has the wrong shape for the operation.
    #[error("{operation} needs a JSON {expected}, got {actual}")]
    JsonShape {
        /// The export (`pick`, `flatten`).
        operation: &'static str,
        /// The shape it needs.
        expected: &'static str,
        /// The shape it got.
        actual: &'static str,
    },
}

impl BuiltinToolError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            BuiltinToolError::InvalidArguments { .. } => "E_TOOL_INVALID_ARGS",
            BuiltinToolError::PathOutsideWorkdir { .. } => "E_PATH_OUTSIDE_WORKDIR",
            BuiltinToolError::FileNotFound { .. } => "FILE_NOT_FOUND",
            BuiltinToolError::Io { .. } => "E_IO",
            BuiltinToolError::Spawn { .. } => "E_PROCESS_SPAWN",
            BuiltinToolError::InvalidUrl { .. } => "E_HTTP_INVALID_URL",
            BuiltinToolError::UnsupportedScheme { .. } => "E_HTTP_UNSUPPORTED_SCHEME",
            BuiltinToolError::HttpTimeout { .. } => "E_HTTP_TIMEOUT",
            BuiltinToolError::HttpRequest { .. } => "E_HTTP_REQUEST",
            BuiltinToolError::HttpBlocked { .. } => "E_HTTP_FETCH_BLOCKED",
            BuiltinToolError::BotTokenMissing { .. } => "E_BOT_TOKEN_MISSING",
            BuiltinToolError::BotApi {
                platform: "Slack", ..
            } => "E_SLACK_API",
            BuiltinToolError::BotApi { .. } => "E_TELEGRAM_API",
            BuiltinToolError::BotApiRateLimited { .. } => "E_BOT_API_RATE_LIMITED",
            BuiltinToolError::BotApiBlocked { .. } => "E_BOT_API_BLOCKED",
            BuiltinToolError::TooLarge { .. } => "E_TOO_LARGE",
            BuiltinToolError::InvalidJson { .. } => "E_JSON_PARSE",
            BuiltinToolError::JsonShape { .. } => "E_JSON_SHAPE",
        }
    }

    /// How to fix it, when there is an obvious fix.
    pub fn suggestion(&self) -> Option<&'static str> {
        Some(match self {
            BuiltinToolError::InvalidArguments { .. } => {
                "Check the arguments against the tool's parameters schema: required fields, types and allowed names."
            }
            BuiltinToolError::PathOutsideWorkdir { .. } => {
                "Use a path relative to the workdir that does not climb out with `..` or through a symlink."
            }
            BuiltinToolError::FileNotFound { .. } => {
                "List the directory with file-system__list to find the right path."
            }
            BuiltinToolError::InvalidUrl { .. } | BuiltinToolError::UnsupportedScheme { .. } => {
                "Use an absolute http:// or https:// URL."
            }
            BuiltinToolError::HttpTimeout { .. } => {
                "Retry later or raise timeoutMs."
            }
            BuiltinToolError::HttpBlocked { .. } => {
                "Fetch a public address. If this host must be reachable, the operator can list it (host or host:port) in GOONDAN_HTTP_FETCH_ALLOW."
            }
            BuiltinToolError::BotTokenMissing { .. } => {
                "Ask the operator to set the bot token in the agent's environment (TELEGRAM_BOT_TOKEN or SLACK_BOT_TOKEN), or pass `token` together with your own `apiBaseUrl`."
            }
            BuiltinToolError::BotApiRateLimited { .. } => {
                "Wait the number of seconds given, then call again."
            }
            BuiltinToolError::BotApiBlocked { .. } => {
                "Leave apiBaseUrl out to use the operator's API address."
            }
            BuiltinToolError::TooLarge { .. } => "Raise maxBytes, up to its maximum, or skip this file.",
            BuiltinToolError::InvalidJson { .. } => {
                "Pass the data as a JSON string, for example \"{\\\"a\\\": 1}\"."
            }
            BuiltinToolError::JsonShape { .. } => {
                "Query the part of the data that has the needed shape first with json-query__query."
            }
            BuiltinToolError::Spawn { .. } => "Check that the shell or interpreter exists and is executable.",
            BuiltinToolError::Io { .. }
            | BuiltinToolError::HttpRequest { .. }
            | BuiltinToolError::BotApi { .. } => return None,
        })
    }

    /// The error class shown to the model as `error.name`.
    pub fn name(&self) -> &'static str {
        match self {
            BuiltinToolError::InvalidArguments { .. } => "ToolInputError",
            BuiltinToolError::PathOutsideWorkdir { .. }
            | BuiltinToolError::FileNotFound { .. }
            | BuiltinToolError::Io { .. } => "FileSystemError",
            BuiltinToolError::Spawn { .. } => "ProcessError",
            BuiltinToolError::InvalidUrl { .. }
            | BuiltinToolError::UnsupportedScheme { .. }
            | BuiltinToolError::HttpTimeout { .. }
            | BuiltinToolError::HttpRequest { .. }
            | BuiltinToolError::HttpBlocked { .. }
            | BuiltinToolError::BotApiBlocked { .. }
            | BuiltinToolError::TooLarge { .. } => "HttpError",
            BuiltinToolError::BotTokenMissing { .. }
            | BuiltinToolError::BotApi { .. }
            | BuiltinToolError::BotApiRateLimited { .. } => "BotApiError",
            BuiltinToolError::InvalidJson { .. } | BuiltinToolError::JsonShape { .. } => {
                "JsonError"
            }
        }
    }

    /// Wraps an IO error, turning "not found" into [`BuiltinToolError::FileNotFound`].
    pub(crate) fn io(operation: &'static str, path: PathBuf, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::NotFound {
            BuiltinToolError::FileNotFound { path }
        } else {
            BuiltinToolError::Io {
                operation,
                path,
                source,
            }
        }
    }
}

/// A Bot API failure as the `telegram` tool reports it: a transport
/// failure or a deadline is an HTTP error (`E_HTTP_REQUEST`,
/// `E_HTTP_TIMEOUT`), a 429 is `E_BOT_API_RATE_LIMITED`, a file over
/// `maxBytes` is `E_TOO_LARGE`, and Telegram's refusal is
/// `E_TELEGRAM_API`.
impl From<TelegramError> for BuiltinToolError {
    fn from(error: TelegramError) -> Self {
        match error {
            TelegramError::Transport { method, message } => BuiltinToolError::HttpRequest {
                method: "POST",
                url: method.to_string(),
                message,
            },
            TelegramError::Timeout { method, timeout_ms } => BuiltinToolError::HttpTimeout {
                method: "POST",
                url: method.to_string(),
                timeout_ms,
            },
            TelegramError::RateLimited {
                method,
                retry_after_seconds,
            } => BuiltinToolError::BotApiRateLimited {
                platform: "Telegram",
                method: method.to_string(),
                retry_after_seconds: retry_after_seconds.unwrap_or(0),
            },
            TelegramError::Api {
                method,
                status,
                description,
            } => BuiltinToolError::BotApi {
                platform: "Telegram",
                method: method.to_string(),
                status,
                description,
            },
            TelegramError::TooLarge {
                method,
                size,
                limit,
            } => BuiltinToolError::TooLarge {
                what: method.to_string(),
                size,
                limit,
            },
        }
    }
}

/// A Web API failure as the `slack` tool reports it, coded as a Bot API
/// failure is (Slack's refusal is `E_SLACK_API`).
impl From<SlackError> for BuiltinToolError {
    fn from(error: SlackError) -> Self {
        match error {
            SlackError::Transport { method, message } => BuiltinToolError::HttpRequest {
                method: "POST",
                url: method.to_string(),
                message,
            },
            SlackError::Timeout { method, timeout_ms } => BuiltinToolError::HttpTimeout {
                method: "POST",
                url: method.to_string(),
                timeout_ms,
            },
            SlackError::RateLimited {
                method,
                retry_after_seconds,
            } => BuiltinToolError::BotApiRateLimited {
                platform: "Slack",
                method: method.to_string(),
                retry_after_seconds: retry_after_seconds.unwrap_or(0),
            },
            SlackError::Api {
                method,
                status,
                error,
            } => BuiltinToolError::BotApi {
                platform: "Slack",
                method: method.to_string(),
                status,
                description: error,
            },
            SlackError::TooLarge {
                method,
                size,
                limit,
            } => BuiltinToolError::TooLarge {
                what: method.to_string(),
                size,
                limit,
            },
        }
    }
}

impl From<BuiltinToolError> for ToolFailure {
    fn from(error: BuiltinToolError) -> Self {
        let mut failure = ToolFailure::new(error.code(), error.to_string()).with_name(error.name());
        if let Some(suggestion) = error.suggestion() {
            failure = failure.with_suggestion(suggestion);
        }
        failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_maps_to_a_coded_tool_error() {
        let cases = [
            (
                BuiltinToolError::InvalidArguments {
                    tool: "bash__exec".into(),
                    message: "missing field `command`".into(),
                },
                "E_TOOL_INVALID_ARGS",
                true,
            ),
            (
                BuiltinToolError::io(
                    "read",
                    "/x".into(),
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ),
                "FILE_NOT_FOUND",
                true,
            ),
            (
                BuiltinToolError::io(
                    "read",
                    "/x".into(),
                    std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                ),
                "E_IO",
                false,
            ),
            (
                BuiltinToolError::UnsupportedScheme {
                    url: "file:///etc/passwd".into(),
                    scheme: "file".into(),
                },
                "E_HTTP_UNSUPPORTED_SCHEME",
                true,
            ),
        ];
        for (error, code, has_suggestion) in cases {
            let message = error.to_string();
            let name = error.name();
            let failure = ToolFailure::from(error);
            assert_eq!(failure.code, code);
            assert_eq!(failure.suggestion.is_some(), has_suggestion, "{code}");
            assert_eq!(failure.message, message);
            assert_eq!(failure.name.as_deref(), Some(name));
        }
    }
}
