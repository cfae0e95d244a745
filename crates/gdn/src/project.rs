//! The high stage of arguments for commands that act on a swarm: the
//! bundle of `--config` (or the current folder), its selected Swarm and
//! the System Root, resolved once (a [`goondan_host::Project`]). Failures
//! are rendered here, as `gdn validate` renders them, so every command
//! fails the same way.

use crate::cli::{Format, GlobalArgs};
use crate::exit::Outcome;
use goondan_host::Project;
use goondan_store::{StateRoot, StateRootSources};
use goondan_types::RoutingKey;
use std::path::PathBuf;

/// `<System Root>/packages`, where installed packages are unpacked;
/// `None` when the System Root cannot be resolved (the loader then
/// reports any package dependency as not loadable).
pub(crate) fn packages_root(global: &GlobalArgs) -> Option<PathBuf> {
    StateRootSources::from_process_env(global.state_root.clone())
        .resolve()
        .ok()
        .map(|root| root.packages_dir())
}

/// The System Root from `--state-root`, `GOONDAN_STATE_ROOT` or
/// `~/.goondan`.
pub(crate) fn state_root(global: &GlobalArgs) -> anyhow::Result<StateRoot> {
    Ok(StateRootSources::from_process_env(global.state_root.clone()).resolve()?)
}

/// How `global` asks for diagnostics to be printed.
pub(crate) fn format(global: &GlobalArgs) -> Format {
    if global.json {
        Format::Json
    } else {
        Format::Text
    }
}

/// Loads the bundle of `--config` (or the current folder) as `gdn run`
/// does and selects `swarm` (else `default`, else the only one). On
/// failure the diagnostics are printed to stderr and the outcome to exit
/// with is returned.
pub(crate) fn load(
    global: &GlobalArgs,
    swarm: Option<&str>,
    env_file: Option<PathBuf>,
) -> anyhow::Result<Result<Project, Outcome>> {
    let path = global.config.clone().unwrap_or_else(|| PathBuf::from("."));
    let format = format(global);
    let bundle = match goondan_host::project::load(&path, env_file, packages_root(global)) {
        Ok(bundle) => bundle,
        Err(not_loaded) => {
            crate::render::not_loaded(&not_loaded, format, global.quiet);
            if not_loaded.invalid {
                crate::render::after_error("nothing was started");
                return Ok(Err(Outcome::ValidationFailed));
            }
            return Ok(Err(Outcome::ConfigError));
        }
    };
    let base = bundle.root().to_path_buf();
    match Project::select(bundle, swarm, state_root(global)?) {
        Ok(project) => Ok(Ok(project)),
        Err(diagnostic) => {
            let not_loaded = goondan_host::NotLoaded {
                invalid: false,
                diagnostics: vec![*diagnostic],
                base,
            };
            crate::render::not_loaded(&not_loaded, format, global.quiet);
            Ok(Err(Outcome::ConfigError))
        }
    }
}

/// `agent:instance` or a bare instance key (the entry agent's: `None`).
pub(crate) fn split_key(key: &str) -> (Option<String>, String) {
    match RoutingKey::split(key) {
        (Some(agent), instance) if !agent.is_empty() && !instance.is_empty() => {
            (Some(agent.to_string()), instance.to_string())
        }
        _ => (None, key.to_string()),
    }
}
