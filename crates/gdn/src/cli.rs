//! The command line as typed: clap structs only, validated without IO.
//! Each subcommand is one variant of [`Command`] with its own `Args`
//! struct; adding a subcommand means adding a variant here and a module
//! under `commands/`.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Goondan: run declarative swarms of LLM agents.
#[derive(Debug, Parser)]
#[command(name = "gdn", version, about, propagate_version = true)]
pub(crate) struct Cli {
    /// Options every command accepts, before or after the subcommand.
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

impl Cli {
    /// Parses the process arguments.
    pub(crate) fn try_parse_args() -> Result<Cli, clap::Error> {
        Cli::try_parse()
    }
}

/// The global options of `cli.md` §1.3.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// The bundle file or folder (default: the current folder).
    #[arg(short = 'c', long, global = true, value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
    /// The System Root holding instance state.
    #[arg(long, global = true, value_name = "PATH", env = "GOONDAN_STATE_ROOT")]
    pub(crate) state_root: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Never color the output.
    #[arg(long = "no-color", global = true)]
    pub(crate) no_color: bool,
    /// Say more.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub(crate) verbose: u8,
    /// Say only what is wrong.
    #[arg(short, long, global = true)]
    pub(crate) quiet: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Check a bundle: schema, references, files, naming.
    Validate(ValidateArgs),
}

/// `gdn validate`.
#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// The bundle folder or YAML file (default: --config, else `.`).
    pub(crate) path: Option<PathBuf>,
    /// Treat warnings as errors.
    #[arg(long)]
    pub(crate) strict: bool,
    /// Output format (default: text, or json with --json).
    #[arg(long, value_enum)]
    pub(crate) format: Option<Format>,
    /// An extra env file, applied over .env.local and .env.
    #[arg(long, value_name = "PATH")]
    pub(crate) env_file: Option<PathBuf>,
}

/// How `validate` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Human-readable, colored on a terminal.
    Text,
    /// One JSON object: `{ valid, errors, warnings }`.
    Json,
    /// GitHub Actions workflow annotations.
    Github,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_parse_on_either_side_of_the_subcommand() {
        for args in [
            &["gdn", "--json", "-q", "validate", "x"][..],
            &["gdn", "validate", "x", "--json", "-q"][..],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            assert!(cli.global.json && cli.global.quiet);
            let Command::Validate(validate) = cli.command;
            assert_eq!(validate.path, Some(PathBuf::from("x")));
        }
        assert!(Cli::try_parse_from(["gdn", "-v", "-q", "validate"]).is_err());
        assert!(Cli::try_parse_from(["gdn", "validate", "--format", "yaml"]).is_err());
    }
}
