//! `gdn agent` (hidden): the AgentProcess an orchestrator spawns. Speaks
//! IPC on stdin/stdout and writes JSON log lines to stderr.

use crate::cli::AgentArgs;
use goondan_agent::assemble::AgentProcessArgs;
use std::sync::Arc;

/// Runs one AgentProcess and exits with its code.
pub(crate) fn run(args: &AgentArgs, state_root: Option<std::path::PathBuf>) -> ! {
    exit_with_parent();
    crate::logging::init_json_stderr("info");
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: starting the async runtime: {error}");
            std::process::exit(1);
        }
    };
    let process_args = AgentProcessArgs {
        bundle_dir: args.bundle_dir.clone(),
        agent_name: args.agent_name.clone(),
        instance_key: args.instance_key.clone(),
        swarm: args.swarm.clone(),
        state_root,
        env_file: args.env_file.clone(),
        record_to: args.record.clone(),
        durability: std::env::var("GOONDAN_DURABILITY").ok(),
    };
    let builtins_for = |model, model_name: &str, params: &goondan_model::ModelParams| {
        let summarizer = goondan_base::Summarizer::new(model, model_name, params.clone());
        Arc::new(goondan_base::builtins_with_model(summarizer))
            as Arc<dyn goondan_runtime::BuiltinCatalog>
    };
    let code = runtime.block_on(goondan_agent::host::run_agent_process(
        process_args,
        &builtins_for,
    ));
    // Leave at once: the runtime may still hold a blocked stdin read.
    std::process::exit(code)
}

/// Makes sure an AgentProcess never outlives the orchestrator that
/// spawned it.
///
/// On Linux the kernel sends this process SIGKILL when its parent dies
/// (`PR_SET_PDEATHSIG`), which covers an orchestrator that was itself
/// SIGKILLed. Other platforms (macOS, the BSDs) have no such signal and
/// rely on the IPC stream alone, which every platform also has: when the
/// orchestrator dies for any reason the kernel closes its end of this
/// process's stdin, the channel's reader sees the end of the stream, and
/// `goondan_agent::host::serve` returns `HostExit::OrphanedParentGone`
/// (after the running Turn, if any, ends), so this process exits.
fn exit_with_parent() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).is_err() {
        eprintln!("warning: could not set the parent-death signal");
    }
    // The parent may have died before the call above took effect, or
    // before this process started.
    if std::os::unix::process::parent_id() == 1 {
        std::process::exit(0);
    }
}
