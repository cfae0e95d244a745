//! `gdn agent` (hidden): the AgentProcess an orchestrator spawns. Speaks
//! IPC on stdin/stdout and writes JSON log lines to stderr.

use crate::cli::AgentArgs;
use goondan_agent::assemble::AgentProcessArgs;
use std::sync::Arc;

/// The exit code of an AgentProcess that panicked.
const PANIC_EXIT_CODE: i32 = 101;

/// Runs one AgentProcess and exits with its code.
pub(crate) fn run(args: &AgentArgs, state_root: Option<std::path::PathBuf>) -> ! {
    crate::secrets::make_non_dumpable();
    exit_with_parent();
    crate::logging::init_json_stderr("info");
    // Everything this process starts carries the mark the control socket
    // refuses operator requests from (issue 47 #1).
    if let Err(error) = goondan_sandbox::peer::mark_turn_process() {
        tracing::warn!("could not set no_new_privs on the agent process: {error}");
    }
    let runtime = match crate::runtime::current_thread() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: {error:#}");
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
        use_model: args.use_model.clone(),
        replay_from: args.replay.clone(),
        workdir: args.workdir.clone(),
        durability: std::env::var("GOONDAN_DURABILITY").ok(),
        // Filled from the spawn handshake, never from the environment.
        secrets: goondan_types::Secrets::new(),
        strip_types_command: super::strip_types::command(),
        cluster: match goondan_host::cluster::agent_log() {
            Ok(log) => log,
            Err(error) => {
                crate::render::cluster_error(&error);
                std::process::exit(2);
            }
        },
    };
    let builtins_for = |model,
                        model_name: &str,
                        params: &goondan_model::ModelParams,
                        secrets: &goondan_types::Secrets| {
        let summarizer = goondan_base::Summarizer::new(model, model_name, params.clone());
        Arc::new(goondan_base::builtins_for_agent(
            summarizer,
            secrets.clone(),
        )) as Arc<dyn goondan_runtime::BuiltinCatalog>
    };
    let code = exit_code_of(
        &runtime,
        goondan_agent::host::run_agent_process(process_args, &builtins_for),
    );
    // Leave at once, whatever happened: the runtime may still hold a
    // blocked stdin read, and dropping it would wait for that read.
    std::process::exit(code)
}

/// Runs `process` to its exit code. A panic outside a tool call (tool
/// panics are caught and become tool errors) is [`PANIC_EXIT_CODE`], so
/// the process ends at once, the orchestrator sees a crash and redelivers
/// the event instead of waiting on a half-alive process.
fn exit_code_of(
    runtime: &tokio::runtime::Runtime,
    process: impl std::future::Future<Output = i32>,
) -> i32 {
    let run = std::panic::AssertUnwindSafe(|| runtime.block_on(process));
    match std::panic::catch_unwind(run) {
        Ok(code) => code,
        Err(_) => {
            tracing::error!(
                code = "E_AGENT_PANICKED",
                "the agent process panicked; exiting"
            );
            PANIC_EXIT_CODE
        }
    }
}

/// Makes sure a child process (an AgentProcess or a ConnectorProcess)
/// never outlives the orchestrator that spawned it.
///
/// On Linux the kernel sends this process SIGKILL when its parent dies
/// (`PR_SET_PDEATHSIG`), which covers an orchestrator that was itself
/// SIGKILLed. Other platforms (macOS, the BSDs) have no such signal and
/// rely on the IPC stream alone, which every platform also has: when the
/// orchestrator dies for any reason the kernel closes its end of this
/// process's stdin, the channel's reader sees the end of the stream, and
/// `goondan_agent::host::serve` returns `HostExit::OrphanedParentGone`
/// (after the running Turn, if any, ends), so this process exits.
pub(crate) fn exit_with_parent() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_panic_ends_the_run_at_once_even_with_a_blocked_read_pending() {
        let runtime = crate::runtime::current_thread().unwrap();
        let started = Instant::now();
        let code = exit_code_of(&runtime, async {
            // Stands for the stdin read that never returns.
            tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_secs(30)));
            tokio::task::yield_now().await;
            panic!("a bug outside any tool call");
        });
        assert_eq!(code, PANIC_EXIT_CODE);
        assert!(started.elapsed() < Duration::from_secs(5));
        // Dropping the runtime would wait for the blocked read; the
        // process exits instead.
        std::mem::forget(runtime);
    }
}
