//! `gdn connector` (hidden): the ConnectorProcess an orchestrator spawns
//! for one Connection. Speaks IPC on stdin/stdout, serves the platform's
//! webhook and writes JSON log lines to stderr.

use crate::cli::ConnectorArgs;
use goondan_connector::host::ConnectorProcessArgs;

/// Runs one ConnectorProcess and exits with its code.
pub(crate) fn run(args: &ConnectorArgs, state_root: Option<std::path::PathBuf>) -> ! {
    // It holds the Connection's signing secrets.
    crate::secrets::make_non_dumpable();
    super::agent::exit_with_parent();
    crate::logging::init_json_stderr("info");
    let runtime = match crate::runtime::current_thread() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(goondan_connector::host::run_connector_process(
        ConnectorProcessArgs {
            bundle_dir: args.bundle_dir.clone(),
            connection: args.connection.clone(),
            env_file: args.env_file.clone(),
            strip_types_command: super::strip_types::command(),
            // An unresolvable System Root leaves packages unloadable, which
            // the loader reports if the bundle needs any, and a chat
            // connector nowhere to keep what it posted, which refuses to
            // start.
            state_root: goondan_store::StateRootSources::from_process_env(state_root)
                .resolve()
                .ok(),
        },
    ));
    // Leave at once: a blocked stdin read would hold the runtime's drop.
    std::process::exit(code)
}
