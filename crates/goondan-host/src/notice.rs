//! [`Notice`]: what a person watching a running swarm should be told,
//! handed to the caller's [`Notices`] sink to render (this crate prints
//! nothing).

use crate::project::NotLoaded;
use std::sync::Arc;
use std::time::Duration;

/// Something that happened to a running swarm that its operator should
/// see on the console.
#[derive(Debug, Clone)]
pub enum Notice {
    /// A reload applied: what changed and what restarted.
    Reloaded {
        /// What asked for it: `watch`, `self-restart` or `rollout`.
        trigger: &'static str,
        /// Who asked and why, or which bundle (empty for an edit).
        asked: String,
        /// How long it took.
        elapsed: Duration,
        /// The changed resources (`Kind/name`, `env`), or `nothing`.
        changed: String,
        /// The restarted keys, or `nothing`, with those not ready yet.
        restarted: String,
    },
    /// A reload refused: the swarm runs on unchanged.
    ReloadRefused {
        /// What asked for it: `watch`, `self-restart` or `rollout`.
        trigger: &'static str,
        /// `edit` or `bundle`.
        what: &'static str,
        /// The first problem's code.
        code: String,
        /// The first problem, in one line.
        message: String,
        /// The diagnostics of a bundle that did not load.
        not_loaded: Option<NotLoaded>,
    },
    /// A cluster host that joined runs the cluster's active bundle, not
    /// the one in the folder it was started in.
    RunsClusterBundle {
        /// The active bundle's digest.
        active: String,
        /// Who made it active.
        deployed_by: String,
        /// When.
        deployed_at: String,
        /// The digest of the bundle in this host's folder.
        local: String,
    },
    /// A rollout this host refused; it runs on with its bundle.
    RolloutRefused {
        /// The refused bundle's digest.
        digest: String,
        /// Why.
        problem: String,
        /// The digest it runs on with.
        running: String,
    },
}

/// Where a running swarm's [`Notice`]s go.
pub type Notices = Arc<dyn Fn(Notice) + Send + Sync>;
