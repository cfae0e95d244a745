//! Exit codes (`cli.md` §12), decided in one place.

use std::process::ExitCode;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Everything went well.
    Success,
    /// An unexpected failure (an IO error while printing, for example).
    Failure,
    /// The command line was wrong.
    BadArguments,
    /// The configuration could not be read: no bundle, an unreadable
    /// file, a missing `--env-file`.
    ConfigError,
    /// The bundle was read and has validation errors.
    ValidationFailed,
    /// A model provider could not be reached (connection, timeout,
    /// retries exhausted).
    NetworkError,
    /// A model provider refused the credentials, or none were given.
    AuthError,
    /// A package registry could not be reached. Its own code, apart from
    /// a model provider's 5, so a script can tell which service is down.
    RegistryUnreachable,
    /// A package registry refused the token, or none was given (apart
    /// from a model provider's 6).
    RegistryAuth,
    /// The user pressed Ctrl-C.
    Interrupted,
}

impl Outcome {
    /// The outcome of a failure coded `code`: network and authentication
    /// failures of a model provider get their own exit codes; everything
    /// else is a plain failure.
    pub(crate) fn of_failure(code: &str) -> Outcome {
        match code {
            "E_MODEL_TRANSPORT" | "E_MODEL_TIMEOUT" | "E_MODEL_RETRIES_EXHAUSTED" => {
                Outcome::NetworkError
            }
            "E_MODEL_AUTH" | "E_MODEL_API_KEY_MISSING" => Outcome::AuthError,
            _ => Outcome::Failure,
        }
    }
}

/// The process exit code of an outcome.
pub(crate) fn exit_code(outcome: Outcome) -> ExitCode {
    ExitCode::from(match outcome {
        Outcome::Success => 0,
        Outcome::Failure => 1,
        Outcome::BadArguments => 2,
        Outcome::ConfigError => 3,
        Outcome::ValidationFailed => 4,
        Outcome::NetworkError => 5,
        Outcome::AuthError => 6,
        Outcome::RegistryUnreachable => 7,
        Outcome::RegistryAuth => 8,
        Outcome::Interrupted => 130,
    })
}
