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

/// Asks the kernel to kill this process when the orchestrator dies, so an
/// AgentProcess never outlives it, even when the orchestrator is
/// SIGKILLed. Closing stdin covers the orderly cases.
#[allow(unsafe_code)]
fn exit_with_parent() {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes plain integers and touches no
    // memory of this process.
    let result = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    if result != 0 {
        eprintln!("warning: could not set the parent-death signal");
    }
    // The parent may have died before the call above took effect.
    if std::os::unix::process::parent_id() == 1 {
        std::process::exit(0);
    }
}
