//! One module per subcommand; `run` dispatches.

mod validate;

use crate::cli::{Cli, Command};
use crate::exit::Outcome;

/// Runs the parsed command.
pub(crate) fn run(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Validate(args) => validate::run(&cli.global, &args),
    }
}
