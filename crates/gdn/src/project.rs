//! The high stage of arguments for commands that act on a running swarm:
//! the bundle, the selected Swarm, its instance key and the System Root,
//! resolved once. Failures are rendered here, as `gdn validate` renders
//! them, so every command fails the same way.
//!
//! The System Root is scoped to the bundle (`goondan_store::paths::bundle_scope`):
//! two projects whose swarms share an instance key get separate
//! workspaces, control sockets and orchestrators.

use crate::cli::{Format, GlobalArgs};
use crate::exit::Outcome;
use crate::render::{Renderer, Style};
use goondan_config::{load_bundle, Bundle, LoadOptions};
use goondan_store::paths::{bundle_scope, MAX_SOCKET_PATH_BYTES};
use goondan_store::{StateRoot, StateRootSources, WorkspacePaths};
use goondan_types::{Diagnostic, Severity};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A loaded bundle with its selected Swarm.
pub(crate) struct Project {
    /// The validated bundle.
    pub(crate) bundle: Bundle,
    /// `Swarm.metadata.name`.
    pub(crate) swarm_name: String,
    /// `Swarm.spec.instanceKey ?? Swarm.metadata.name`.
    pub(crate) instance_key: String,
    /// The System Root, scoped to this bundle.
    pub(crate) state_root: StateRoot,
}

impl Project {
    /// The workspace of the selected Swarm: its conversations, control
    /// socket, lock, active record and process logs.
    pub(crate) fn workspace(&self) -> WorkspacePaths {
        self.state_root.workspace(&self.instance_key)
    }
}

/// The System Root scoped to `bundle`'s identity.
pub(crate) fn scoped_state_root(state_root: StateRoot, bundle: &Bundle) -> StateRoot {
    let package_name = bundle
        .package()
        .map(|package| package.metadata.name.as_str());
    let scope = bundle_scope(bundle.root(), package_name);
    state_root.with_bundle_scope(scope)
}

/// The control socket of `workspace`, or, when the System Root lies too
/// deep for a Unix socket address, `Err` after printing a coded error:
/// nothing may start that no client could ever reach.
pub(crate) fn control_socket(workspace: &WorkspacePaths) -> Result<PathBuf, Outcome> {
    let socket = workspace.control_socket();
    if fits_socket_address(&socket) {
        return Ok(socket);
    }
    eprintln!(
        "error[E_STATE_ROOT_TOO_DEEP]: the control socket {} is {} bytes long; a Unix socket path holds at most {MAX_SOCKET_PATH_BYTES}",
        socket.display(),
        socket.as_os_str().len()
    );
    eprintln!(
        "   = help: use a shorter System Root (--state-root or GOONDAN_STATE_ROOT); nothing was started"
    );
    Err(Outcome::ConfigError)
}

fn fits_socket_address(socket: &Path) -> bool {
    socket.as_os_str().len() <= MAX_SOCKET_PATH_BYTES
}

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

/// A bundle that did not load: its diagnostics were printed.
#[derive(Debug, Clone)]
pub(crate) struct NotLoaded {
    /// What to exit with.
    pub(crate) outcome: Outcome,
    /// How many diagnostics were printed.
    pub(crate) diagnostics: usize,
    /// The first error among them, for a one-line summary.
    pub(crate) first_error: Option<Box<Diagnostic>>,
}

impl NotLoaded {
    /// The first error's code (`E_CONFIG_INVALID` when none had one).
    pub(crate) fn code(&self) -> &str {
        self.first_error
            .as_ref()
            .map_or("E_CONFIG_INVALID", |error| error.code.as_str())
    }

    /// One line for whoever cannot see the printed diagnostics (an agent
    /// that asked for a restart): the first error, where it is, how many
    /// more there are.
    pub(crate) fn summary(&self) -> String {
        let Some(error) = &self.first_error else {
            return "the bundle is invalid; run `gdn validate` to see why".into();
        };
        let mut line = error.message.clone();
        let place = match (&error.file, error.line, &error.path) {
            (Some(file), Some(number), _) => Some(format!("{file}:{number}")),
            (_, _, Some(path)) => Some(path.clone()),
            (Some(file), None, None) => Some(file.clone()),
            _ => None,
        };
        if let Some(place) = place {
            line.push_str(&format!(" (at {place})"));
        }
        if let Some(suggestion) = &error.suggestion {
            line.push_str(&format!("; {suggestion}"));
        }
        if self.diagnostics > 1 {
            line.push_str(&format!(
                "; {} more problem(s): run `gdn validate`",
                self.diagnostics - 1
            ));
        }
        line
    }
}

/// Loads the bundle at `path` as `gdn run` does (the process environment,
/// `.env`, `.env.local` and `env_file`). When it does not load, its
/// diagnostics are printed to stderr as `gdn validate` prints them.
pub(crate) fn load_reporting(
    path: &Path,
    env_file: Option<PathBuf>,
    packages_root: Option<PathBuf>,
    format: Format,
    quiet: bool,
) -> anyhow::Result<Result<Bundle, NotLoaded>> {
    let options = LoadOptions {
        env_file,
        inherit_process_env: true,
        packages_root,
        ..LoadOptions::default()
    };
    let (diagnostics, outcome) = match load_bundle(path, &options) {
        Ok(loaded) => match loaded.bundle {
            Some(bundle) => return Ok(Ok(bundle)),
            None => (loaded.diagnostics, Outcome::ValidationFailed),
        },
        Err(error) => (vec![error.to_diagnostic()], Outcome::ConfigError),
    };
    let mut err = std::io::stderr().lock();
    renderer_for(path).report(&mut err, format, &diagnostics, quiet)?;
    err.flush()?;
    Ok(Err(NotLoaded {
        outcome,
        diagnostics: diagnostics.len(),
        first_error: diagnostics
            .iter()
            .find(|diagnostic| diagnostic.severity == Severity::Error)
            .cloned()
            .map(Box::new),
    }))
}

/// Renders diagnostics of the bundle at `path` (a folder or a file), with
/// locations relative to its folder.
fn renderer_for(path: &Path) -> Renderer {
    Renderer {
        style: Style { colored: false },
        base: if path.is_dir() {
            path.to_path_buf()
        } else {
            path.parent().map(PathBuf::from).unwrap_or_default()
        },
    }
}

/// Loads the bundle of `--config` (or the current folder) and selects
/// `swarm` (else `default`, else the only one). On failure the diagnostics
/// are printed to stderr and the outcome to exit with is returned.
pub(crate) fn load(
    global: &GlobalArgs,
    swarm: Option<&str>,
    env_file: Option<PathBuf>,
) -> anyhow::Result<Result<Project, Outcome>> {
    let path = global.config.clone().unwrap_or_else(|| PathBuf::from("."));
    let format = if global.json {
        Format::Json
    } else {
        Format::Text
    };
    let bundle = match load_reporting(&path, env_file, packages_root(global), format, global.quiet)?
    {
        Ok(bundle) => bundle,
        Err(not_loaded) => {
            if not_loaded.outcome == Outcome::ValidationFailed {
                eprintln!("nothing was started");
            }
            return Ok(Err(not_loaded.outcome));
        }
    };
    let selected = match swarm {
        Some(name) => bundle.swarm(name),
        None => bundle.default_swarm(),
    };
    let Some(selected) = selected else {
        let known: Vec<String> = bundle.swarms().map(|s| s.name().to_string()).collect();
        let diagnostic = Diagnostic::error(
            "E_CONFIG_REF_NOT_FOUND",
            match swarm {
                Some(name) => format!("Swarm/{name} is not defined"),
                None => {
                    "no Swarm named `default`, and more than one Swarm to choose from".to_string()
                }
            },
        )
        .with_suggestion(format!("pass --swarm with one of: {}", known.join(", ")));
        renderer_for(&path).report(
            &mut std::io::stderr().lock(),
            format,
            &[diagnostic],
            global.quiet,
        )?;
        return Ok(Err(Outcome::ConfigError));
    };
    let swarm_name = selected.name().to_string();
    let instance_key = selected.instance_key().to_string();
    let state_root = scoped_state_root(state_root(global)?, &bundle);
    Ok(Ok(Project {
        bundle,
        swarm_name,
        instance_key,
        state_root,
    }))
}
