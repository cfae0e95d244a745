//! The `gdn` binary: parses arguments, resolves configuration, calls the
//! libraries and renders their errors. It owns no domain logic.
//!
//! There is one exit path: `main` calls [`run`], and every outcome,
//! including argument errors and failures, becomes an exit code through
//! [`exit::exit_code`].

mod answers;
mod cli;
mod commands;
mod exit;
mod logging;
mod project;
mod render;
mod runtime;
mod secrets;
mod stdin_lines;

use exit::Outcome;
use std::process::ExitCode;

fn main() -> ExitCode {
    let outcome = match run() {
        Ok(outcome) => outcome,
        Err(error) => {
            // A closed pipe (`gdn validate | head`) is the reader's choice,
            // not a failure.
            let broken_pipe = error.chain().any(|cause| {
                cause
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            });
            if broken_pipe {
                Outcome::Success
            } else {
                eprintln!("error: {error:#}");
                Outcome::Failure
            }
        }
    };
    exit::exit_code(outcome)
}

/// Parses the command line and runs the command.
fn run() -> anyhow::Result<Outcome> {
    let cli = match cli::Cli::try_parse_args() {
        Ok(cli) => cli,
        Err(error) => {
            let outcome = if error.use_stderr() {
                Outcome::BadArguments
            } else {
                Outcome::Success
            };
            error.print()?;
            return Ok(outcome);
        }
    };
    commands::run(cli)
}
