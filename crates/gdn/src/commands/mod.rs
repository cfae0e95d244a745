//! One module per subcommand; `run` dispatches.

mod agent;
mod approvals;
mod chat_approvals;
mod cluster;
mod connector;
mod doctor;
mod eval;
mod init;
pub(crate) mod instance_screen;
mod logs;
mod manage;
mod mcp;
mod operator;
pub(crate) mod package;
mod port;
mod run;
mod serve;
mod strip_types;
mod studio;
mod target;
mod usage;
mod validate;

use crate::cli::{Cli, Command};
use crate::exit::Outcome;

/// Runs the parsed command.
pub(crate) fn run(cli: Cli) -> anyhow::Result<Outcome> {
    crate::render::set_json(cli.global.json);
    match &cli.command {
        Command::Validate(args) => validate::run(&cli.global, args),
        Command::Run(args) => {
            // It holds the keys from the first instruction on: its
            // environment, the bundle's `.env` files, the orchestrator.
            crate::secrets::make_non_dumpable();
            crate::logging::init_console(crate::logging::console_level(&cli.global));
            run::run(&cli.global, args)
        }
        Command::Restart(args) => manage::restart(&cli.global, args),
        Command::Stop(args) => manage::stop(&cli.global, args),
        Command::Instance(args) => manage::instance(&cli.global, args),
        Command::Approvals(args) => approvals::list(&cli.global, args),
        Command::Approve(args) => approvals::approve(&cli.global, args),
        Command::Deny(args) => approvals::deny(&cli.global, args),
        Command::Logs(args) => logs::run(&cli.global, args),
        Command::Usage(args) => usage::run(&cli.global, args),
        Command::Cluster(args) => cluster::command(&cli.global, args),
        Command::Eval(args) => {
            // It holds the keys the cases' Models and judge use.
            crate::secrets::make_non_dumpable();
            eval::run(&cli.global, args)
        }
        Command::Studio(args) => studio::run(&cli.global, args),
        Command::Agent(args) => agent::run(args, cli.global.state_root.clone()),
        Command::Connector(args) => connector::run(args, cli.global.state_root.clone()),
        Command::StripTypes(args) => strip_types::run(args),
        Command::Init(args) => init::run(&cli.global, args),
        Command::Doctor(args) => doctor::run(&cli.global, args),
        Command::Serve(args) => serve::serve(&cli.global, args),
        Command::Mcp(args) => match &args.command {
            crate::cli::McpCommand::Serve(serve) => mcp::serve(&cli.global, serve),
        },
        Command::Package(args) => package::run(&cli.global, &args.command),
        Command::Registry(args) => match &args.command {
            crate::cli::RegistryCommand::Serve(serve) => package::serve_registry(serve),
        },
    }
}
