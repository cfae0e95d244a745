//! The `gdn` binary: parses arguments, resolves configuration, calls the
//! libraries and renders their errors. It owns no domain logic.
//!
//! There is one exit path: `main` calls [`run`], and every outcome,
//! including argument errors and failures, becomes an exit code through
//! [`exit::exit_code`].

mod activity;
mod answers;
mod cli;
mod commands;
mod exit;
mod logging;
mod progress;
mod project;
mod render;
mod runtime;
mod secrets;
mod stdin_lines;

use exit::Outcome;
use std::process::ExitCode;

fn main() -> ExitCode {
    quiet_on_closed_output();
    // The shell that started us usually exports model keys; keep them out
    // of `/proc/<pid>/environ` for every process of ours (issue 35). Best
    // effort: a kernel that does not say where the block is leaves it.
    // SAFETY: first thing in `main`, before any thread exists.
    let _ = unsafe { goondan_sandbox::environ::scrub_initial_environment() };
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
            let orchestrator = error
                .chain()
                .find_map(|cause| cause.downcast_ref::<goondan_orchestrator::OrchestratorError>());
            let client = error
                .chain()
                .find_map(|cause| cause.downcast_ref::<goondan_client::ClientError>());
            if broken_pipe {
                Outcome::Success
            } else if let Some(coded) = orchestrator {
                // A library's coded error that reached the edge keeps its
                // code.
                render::error(coded.code(), coded, coded.suggestion().as_deref());
                Outcome::Failure
            } else if let Some(coded) = client {
                // `E_ORCHESTRATOR_STOPPED` when the orchestrator went away
                // mid-request.
                render::error(coded.code(), coded, Some(coded.suggestion()));
                Outcome::Failure
            } else {
                render::uncoded_error(&chain_text(&error));
                Outcome::Failure
            }
        }
    };
    exit::exit_code(outcome)
}

/// A reader that closed our stdout or stderr (`gdn instance list | head
/// -1`) ends the command quietly, as a closed pipe reported as an error
/// does: the standard library's print macros panic on it instead.
fn quiet_on_closed_output() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        // std's text for a failed `print!`; errno 32 is EPIPE.
        if message.starts_with("failed printing to std") && message.contains("(os error 32)") {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// An error and its causes in one line, each cause once: an error whose
/// text already ends with its cause's (`control socket …: unexpected end
/// of file`) does not repeat it.
fn chain_text(error: &anyhow::Error) -> String {
    let mut line = error.to_string();
    for cause in error.chain().skip(1) {
        let text = cause.to_string();
        if !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
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
            if error.use_stderr() {
                render::argument_error(&error, json_requested())?;
            } else {
                error.print()?;
            }
            return Ok(outcome);
        }
    };
    commands::run(cli)
}

/// Whether `--json` is on a command line clap refused: its error is then
/// one JSON line as every other error is. Words after `--` are operands.
fn json_requested() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|word| word != "--")
        .any(|word| word == "--json")
}
