//! [`HostError`]: why a swarm could not start or a cluster command failed,
//! each with the code a person and a script read; and [`NotLoaded`], a
//! bundle that did not load, with its diagnostics.

use goondan_cluster::ClusterError;
use goondan_types::{Diagnostic, Severity};
use std::path::PathBuf;

/// A failure of running a swarm on this host.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The System Root lies too deep for a Unix socket address: nothing
    /// may start that no client could ever reach.
    #[error("the control socket {} is {length} bytes long; a Unix socket path holds at most {limit}", socket.display())]
    StateRootTooDeep {
        /// The socket path.
        socket: PathBuf,
        /// Its length in bytes.
        length: usize,
        /// The longest a socket address may be.
        limit: usize,
    },
    /// The workspace's socket answers for another workspace.
    #[error("the control socket {} answers for workspace {theirs} (bundle {bundle}), not {ours}; not attaching", socket.display())]
    ControlSocketForeign {
        /// The socket path.
        socket: PathBuf,
        /// The workspace it serves.
        theirs: String,
        /// The bundle folder it serves.
        bundle: String,
        /// This bundle's workspace.
        ours: String,
    },
    /// An orchestrator holds the start lock but never answers.
    #[error("{what}")]
    OrchestratorStart {
        /// What did not happen.
        what: String,
        /// Where to look.
        logs: PathBuf,
    },
    /// The cluster refused or failed a request.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A bundle that cannot be packed, linked or run by a cluster host.
    #[error("{message}")]
    ClusterBundle {
        /// What went wrong.
        message: String,
        /// What to do.
        suggestion: String,
    },
    /// A bundle of another swarm than the cluster runs.
    #[error("{message}")]
    ClusterWorkspace {
        /// What differs.
        message: String,
        /// What to do.
        suggestion: String,
    },
    /// The cluster's bundle does not load on this host.
    #[error("the cluster's bundle {digest} does not load on this host: {summary}")]
    ClusterBundleNotLoaded {
        /// Its short digest.
        digest: String,
        /// The first problem, where it is and how many more there are.
        summary: String,
        /// Its diagnostics, for the caller to render.
        not_loaded: Box<NotLoaded>,
    },
    /// Installing the packages of a fetched bundle failed.
    #[error("installing the packages of the cluster's bundle {digest}: {source}")]
    PackageInstall {
        /// Its short digest.
        digest: String,
        /// Why.
        source: goondan_package::PackageError,
    },
    /// The System Root could not be laid out.
    #[error(transparent)]
    Store(#[from] goondan_store::StoreError),
    /// The orchestrator refused (the control socket could not be bound).
    #[error(transparent)]
    Orchestrator(#[from] goondan_orchestrator::OrchestratorError),
    /// A file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, and to which path.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The selected Swarm is missing from a bundle that loaded.
    #[error("Swarm/{swarm} is not defined")]
    SwarmMissing {
        /// Its name.
        swarm: String,
    },
}

impl HostError {
    /// The stable code of this error.
    pub fn code(&self) -> &str {
        match self {
            HostError::StateRootTooDeep { .. } => "E_STATE_ROOT_TOO_DEEP",
            HostError::ControlSocketForeign { .. } => "E_CONTROL_SOCKET_FOREIGN",
            HostError::OrchestratorStart { .. } => "E_ORCHESTRATOR_START",
            HostError::Cluster(error) => error.code(),
            HostError::ClusterBundle { .. } => "E_CLUSTER_BUNDLE",
            HostError::ClusterWorkspace { .. } => "E_CLUSTER_WORKSPACE",
            HostError::ClusterBundleNotLoaded { not_loaded, .. } => not_loaded.code(),
            HostError::PackageInstall { source, .. } => source.code(),
            HostError::Store(error) => error.code(),
            HostError::Orchestrator(error) => error.code(),
            HostError::Io { .. } => "E_HOST_IO",
            HostError::SwarmMissing { .. } => "E_CONFIG_REF_NOT_FOUND",
        }
    }

    /// What to do about it, when there is something to say.
    pub fn suggestion(&self) -> Option<String> {
        match self {
            HostError::StateRootTooDeep { .. } => Some(
                "use a shorter System Root (--state-root or GOONDAN_STATE_ROOT); nothing was started"
                    .into(),
            ),
            HostError::ControlSocketForeign { .. } => Some(
                "stop that orchestrator (`gdn --config <its bundle> instance list` finds it) or use another --state-root"
                    .into(),
            ),
            HostError::OrchestratorStart { logs, .. } => Some(format!(
                "try again; if it persists, read the logs under {}",
                logs.display()
            )),
            HostError::Cluster(error) => error.suggestion(),
            HostError::ClusterBundle { suggestion, .. }
            | HostError::ClusterWorkspace { suggestion, .. } => Some(suggestion.clone()),
            HostError::ClusterBundleNotLoaded { .. } => Some(
                "a host needs what the bundle reads from its environment (its own .env, variables); or deploy a bundle that loads here"
                    .into(),
            ),
            HostError::PackageInstall { source, .. } => Some(source.suggestion()),
            HostError::Store(error) => error.suggestion(),
            HostError::Orchestrator(error) => error.suggestion(),
            HostError::Io { .. } => None,
            HostError::SwarmMissing { .. } => Some("pass --swarm with a Swarm the bundle defines".into()),
        }
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HostError {
        let what = what.into();
        move |source| HostError::Io { what, source }
    }
}

/// A bundle that did not load, with its diagnostics for the caller to
/// render.
#[derive(Debug, Clone)]
pub struct NotLoaded {
    /// True when it was read and found invalid; false when it could not
    /// be read at all.
    pub invalid: bool,
    /// Every problem found.
    pub diagnostics: Vec<Diagnostic>,
    /// The folder the diagnostics' file names are relative to.
    pub base: PathBuf,
}

impl NotLoaded {
    /// The first error among the diagnostics.
    pub fn first_error(&self) -> Option<&Diagnostic> {
        self.diagnostics
            .iter()
            .find(|diagnostic| diagnostic.severity == Severity::Error)
    }

    /// The first error's code (`E_CONFIG_INVALID` when none had one).
    pub fn code(&self) -> &str {
        self.first_error()
            .map_or("E_CONFIG_INVALID", |error| error.code.as_str())
    }

    /// One line for whoever cannot see the diagnostics (an agent that
    /// asked for a restart, a cluster's heartbeat): the first error, where
    /// it is, how many more there are.
    pub fn summary(&self) -> String {
        let Some(error) = self.first_error() else {
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
        if self.diagnostics.len() > 1 {
            line.push_str(&format!(
                "; {} more problem(s): run `gdn validate`",
                self.diagnostics.len() - 1
            ));
        }
        line
    }
}
