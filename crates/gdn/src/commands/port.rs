//! What every command that opens a port to a running swarm shares (`gdn
//! mcp serve`, `gdn serve`): reaching the bundle's orchestrator, starting
//! one in the background when none runs, and the bearer token named by
//! `--token-env`.

use crate::cli::GlobalArgs;
use crate::exit::Outcome;
use goondan_host::lock::{self, Claim};
use std::path::Path;

/// Makes sure an orchestrator serves the bundle at `socket`: when none
/// does, starts one with `gdn run --detach` (the same bundle, System
/// Root, Swarm and env file), unless `no_start`. The outcome to exit
/// with, after its error lines, when there is none.
pub(crate) async fn ensure_running(
    global: &GlobalArgs,
    project: &goondan_host::Project,
    socket: &Path,
    env_file: Option<&Path>,
    no_start: bool,
) -> Result<(), Outcome> {
    let workspace = project.workspace();
    match lock::claim(&workspace, socket).await {
        Ok(Claim::Running) => Ok(()),
        Err(error) => Err(crate::render::host_error(
            &error,
            crate::project::format(global),
        )),
        Ok(Claim::Won(_lock)) if no_start => {
            crate::render::error(
                "E_ORCHESTRATOR_NOT_RUNNING",
                &format!(
                    "no orchestrator is running Swarm/{} of this bundle",
                    project.swarm_name
                ),
                Some("start it first with `gdn run --detach` in the project folder (the same --config and --state-root), or leave out --no-start"),
            );
            Err(Outcome::Failure)
        }
        Ok(Claim::Won(start_lock)) => {
            // The detached orchestrator claims the lock itself.
            drop(start_lock);
            start_detached(global, project, env_file)
        }
    }
}

/// Starts the bundle's orchestrator in the background with `gdn run
/// --detach`, whose report goes to stderr (stdout carries only protocol
/// lines); the outcome it failed with, after its own error lines.
fn start_detached(
    global: &GlobalArgs,
    project: &goondan_host::Project,
    env_file: Option<&Path>,
) -> Result<(), Outcome> {
    eprintln!(
        "no orchestrator runs Swarm/{} of this bundle: starting one in the background (`gdn run --detach`; `gdn stop` stops it)",
        project.swarm_name
    );
    let started = std::env::current_exe().and_then(|program| {
        let mut command = std::process::Command::new(program);
        command
            .arg("--config")
            .arg(project.bundle.root())
            .arg("--state-root")
            .arg(project.state_root.path())
            .args(["run", "--detach", "--swarm", &project.swarm_name]);
        if let Some(env_file) = env_file {
            command
                .arg("--env-file")
                .arg(std::path::absolute(env_file)?);
        }
        if global.verbose > 0 {
            command.arg("-v");
        }
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::io::stderr())
            .status()
    });
    match started {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(match status.code() {
            Some(3) => Outcome::ConfigError,
            Some(4) => Outcome::ValidationFailed,
            _ => Outcome::Failure,
        }),
        Err(error) => {
            crate::render::error(
                "E_ORCHESTRATOR_START",
                &format_args!("cannot start `gdn run --detach`: {error}"),
                None,
            );
            Err(Outcome::Failure)
        }
    }
}

/// The bearer token in the variable `--token-env` names (from the
/// environment, else the bundle's `.env`), checked against every port's
/// minimum; `None` without `--token-env`. `door` names the command in
/// the error codes (`E_<door>_TOKEN_MISSING`, `E_<door>_TOKEN_WEAK`).
pub(crate) fn bearer_token(
    token_env: Option<&str>,
    project: &goondan_host::Project,
    door: &str,
) -> Result<Option<String>, Outcome> {
    let Some(name) = token_env else {
        return Ok(None);
    };
    let value = std::env::var(name)
        .ok()
        .or_else(|| project.bundle.env().get(name).map(str::to_string))
        .filter(|value| !value.is_empty());
    let Some(value) = value else {
        crate::render::error(
            &format!("E_{door}_TOKEN_MISSING"),
            &format_args!("--token-env names `{name}`, which is not set"),
            Some("set it in the environment or the bundle's .env"),
        );
        return Err(Outcome::BadArguments);
    };
    if let Err(goondan_http::HttpError::WeakToken { length, minimum }) =
        goondan_http::token::check_strength(&value)
    {
        crate::render::error(
            &format!("E_{door}_TOKEN_WEAK"),
            &format_args!("the token in `{name}` is {length} characters long; a token that guards a port needs at least {minimum}"),
            Some("set it to a random value of at least 24 characters, for example `export SWARM_TOKEN=$(openssl rand -hex 32)`"),
        );
        return Err(Outcome::BadArguments);
    }
    Ok(Some(value))
}

/// Resolves on SIGINT or SIGTERM.
pub(crate) async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
