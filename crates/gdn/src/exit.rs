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
    /// The user pressed Ctrl-C.
    Interrupted,
}

/// The process exit code of an outcome.
pub(crate) fn exit_code(outcome: Outcome) -> ExitCode {
    ExitCode::from(match outcome {
        Outcome::Success => 0,
        Outcome::Failure => 1,
        Outcome::BadArguments => 2,
        Outcome::ConfigError => 3,
        Outcome::ValidationFailed => 4,
        Outcome::Interrupted => 130,
    })
}
