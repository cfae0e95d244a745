//! The bundle a cluster's hosts run, distributed by digest
//! (`goondan_cluster::bundle`): what a host runs when it joins
//! ([`adopt`]) and how it follows a rollout ([`BundleFollower`]);
//! `gdn cluster deploy`, which starts one, is [`super::client::deploy`].
//!
//! The first host to join makes its own bundle the active one. Every
//! later host runs the active bundle, whatever its own folder holds
//! (a different one is fetched, checked against its digest, unpacked and
//! validated; the host says so with a [`Notice`]), and a deploy replaces
//! the active bundle on every host at once, each applying it as `--watch`
//! applies an edit: only what changed restarts.
//!
//! A host's children load the bundle through one link,
//! `<workspace>/cluster-bundles/current`, pointed at the host's own folder
//! or at a fetched bundle; a rollout re-points it before anything
//! restarts. Env files never travel (a packed bundle leaves them out):
//! the `.env` and `.env.local` of the folder a host was started in are
//! linked into every bundle it fetches, so each host keeps its own
//! secrets.

use super::ClusterMode;
use crate::project::BundleSource;
use crate::{HostError, Notice, Notices, Project};
use goondan_cluster::bundle::{self, short_digest, ActiveBundle};
use goondan_cluster::membership::Membership;
use goondan_cluster::{Cluster, ClusterError};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Installs the registry packages a bundle folder depends on and the
/// System Root lacks (a cluster host does it for every bundle it
/// fetches, as `gdn run` does for its own first).
pub type PackageInstaller = Arc<
    dyn Fn(
            PathBuf,
        )
            -> Pin<Box<dyn Future<Output = Result<(), goondan_package::PackageError>> + Send>>
        + Send
        + Sync,
>;

/// A new active bundle for a cluster host to apply: fetched and unpacked
/// into `dir`, not validated yet.
pub(crate) struct Rollout {
    /// Its digest.
    pub(crate) digest: String,
    /// Where it was unpacked.
    pub(crate) dir: PathBuf,
    /// `Ok` once it runs; the reason it was refused otherwise (the host
    /// runs on with its bundle).
    pub(crate) done: oneshot::Sender<Result<(), String>>,
}

/// The folder of a host's workspace holding the bundles it fetched and
/// the link to the one it runs.
const BUNDLES_DIR: &str = "cluster-bundles";
/// The link, inside [`BUNDLES_DIR`].
const CURRENT_LINK: &str = "current";
/// Env files linked from a host's own folder into each bundle it fetches.
const ENV_FILES: [&str; 2] = [".env", ".env.local"];
/// Fetched bundles kept besides the running one, for a quick way back.
const KEEP_PREVIOUS: usize = 2;

/// The bundle a host runs and the link its children load it through.
#[derive(Debug, Clone)]
pub(crate) struct HostBundle {
    /// `<workspace>/cluster-bundles/current`.
    pub(crate) link: PathBuf,
    /// The digest of what it points at.
    pub(crate) digest: String,
}

/// The archive of `project`'s bundle packed for the cluster, with its
/// digest.
pub(crate) fn pack(project: &Project) -> Result<(Vec<u8>, String), HostError> {
    match goondan_package::tarball::pack_bundle(project.bundle.root()) {
        Ok(archive) => {
            let digest = bundle::digest_of(&archive);
            Ok((archive, digest))
        }
        Err(error) => Err(HostError::ClusterBundle {
            message: format!(
                "cannot pack the bundle at {} for the cluster: {error}",
                project.bundle.root().display()
            ),
            suggestion: format!(
                "a cluster bundle holds plain files and folders, and links to files inside it; at most {} files",
                goondan_package::tarball::MAX_ENTRIES
            ),
        }),
    }
}

/// Decides what a joining host runs: its own bundle when none is active
/// yet (it becomes the active one) or when it is the active one, else the
/// active bundle, fetched. Returns the project to run (its System Root
/// and workspace stay this folder's) and the link to load it through.
pub(crate) async fn adopt(
    cluster: &Cluster,
    mode: &ClusterMode,
    project: Project,
    source: &BundleSource,
    install: &PackageInstaller,
    notices: &Notices,
) -> Result<(Project, HostBundle), HostError> {
    let (archive, local) = pack(&project)?;
    let link = link_of(&project);
    let bundles = link.parent().expect("the link sits in the bundles folder");
    let active = loop {
        if let Some(active) = bundle::active(cluster).await? {
            break active;
        }
        // The first host: its bundle becomes the swarm's.
        bundle::upload(cluster, &archive).await?;
        let record = ActiveBundle::new(
            local.clone(),
            archive.len() as u64,
            mode.workspace_id.clone(),
            mode.host_id.clone(),
        );
        match bundle::activate(cluster, &record, None).await? {
            Some(active) => break active,
            // Another host was first: run what it made active.
            None => continue,
        }
    };
    if active.workspace_id != mode.workspace_id {
        return Err(HostError::ClusterWorkspace {
            message: format!(
                "this cluster runs workspace {} (Swarm instance key), this bundle's Swarm/{} is workspace {}",
                active.workspace_id, project.swarm_name, mode.workspace_id
            ),
            suggestion: "run one swarm per cluster: start this host against another cluster, or deploy this bundle's swarm where it belongs".into(),
        });
    }
    if active.digest == local {
        point_link(&link, project.bundle.root()).map_err(link_error(&link))?;
        return Ok((
            project,
            HostBundle {
                link,
                digest: local,
            },
        ));
    }
    notices(Notice::RunsClusterBundle {
        active: active.digest.clone(),
        deployed_by: active.deployed_by.clone(),
        deployed_at: active.deployed_at.clone(),
        local,
    });
    let dir = fetch(cluster, bundles, &active.digest, project.bundle.root()).await?;
    install(dir.clone())
        .await
        .map_err(|source| HostError::PackageInstall {
            digest: short_digest(&active.digest).to_string(),
            source,
        })?;
    let bundle = source
        .load(&dir, Some(project.state_root.packages_dir()))
        .map_err(|not_loaded| HostError::ClusterBundleNotLoaded {
            digest: short_digest(&active.digest).to_string(),
            summary: not_loaded.summary(),
            not_loaded: Box::new(not_loaded),
        })?;
    match bundle.swarm(&project.swarm_name) {
        Some(swarm) if swarm.instance_key() == project.instance_key => {}
        _ => {
            return Err(HostError::ClusterWorkspace {
                message: format!(
                    "the cluster's bundle {} has no Swarm/{} with instanceKey {}",
                    short_digest(&active.digest),
                    project.swarm_name,
                    project.instance_key
                ),
                suggestion: "start the host with the Swarm the cluster runs (--swarm)".into(),
            })
        }
    }
    point_link(&link, bundle.root()).map_err(link_error(&link))?;
    let project = project.with_bundle(bundle);
    Ok((
        project,
        HostBundle {
            link,
            digest: active.digest,
        },
    ))
}

/// The link a host of `project` loads its bundle through.
pub(crate) fn link_of(project: &Project) -> PathBuf {
    project
        .workspace()
        .dir()
        .join(BUNDLES_DIR)
        .join(CURRENT_LINK)
}

fn link_error(link: &Path) -> impl FnOnce(std::io::Error) -> HostError {
    HostError::io(format!("cannot point {} at the bundle", link.display()))
}

/// Points `link` at `target` atomically (a new link renamed over the old
/// one): a child starting meanwhile loads one bundle or the other, never
/// a mix.
pub(crate) fn point_link(link: &Path, target: &Path) -> std::io::Result<()> {
    let dir = link.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let staged = dir.join(format!(".{CURRENT_LINK}.{}", std::process::id()));
    let _ = std::fs::remove_file(&staged);
    std::os::unix::fs::symlink(target, &staged)?;
    std::fs::rename(&staged, link).inspect_err(|_| {
        let _ = std::fs::remove_file(&staged);
    })
}

/// The folder holding the bundle `digest`, fetched, checked and unpacked
/// into `bundles` unless it already is; this host's env files
/// (`local_root`'s) are linked into it.
async fn fetch(
    cluster: &Cluster,
    bundles: &Path,
    digest: &str,
    local_root: &Path,
) -> Result<PathBuf, ClusterError> {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    let dir = bundles.join(hex);
    if dir.is_dir() {
        return Ok(dir);
    }
    let archive = bundle::download(cluster, digest).await?;
    let staged = bundles.join(format!(".{hex}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staged);
    let unpacked = goondan_package::tarball::unpack(&archive, &staged)
        .map_err(|error| error.to_string())
        .and_then(|()| {
            for name in ENV_FILES {
                let own = local_root.join(name);
                if own.is_file() {
                    std::os::unix::fs::symlink(&own, staged.join(name))
                        .map_err(|error| format!("linking {}: {error}", own.display()))?;
                }
            }
            std::fs::rename(&staged, &dir).map_err(|error| error.to_string())
        });
    unpacked.map_err(|reason| {
        let _ = std::fs::remove_dir_all(&staged);
        ClusterError::Corrupt {
            what: format!("bundle {digest}"),
            reason,
        }
    })?;
    Ok(dir)
}

/// Removes fetched bundles other than `running`, the [`KEEP_PREVIOUS`]
/// most recently fetched, and any a child of this host still runs in (an
/// agent whose resources did not change keeps running from the bundle it
/// started with).
fn prune(bundles: &Path, running: &Path) {
    let Ok(entries) = std::fs::read_dir(bundles) else {
        return;
    };
    let mut fetched: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
        .filter(|entry| entry.path() != running)
        .filter_map(|entry| Some((entry.metadata().ok()?.modified().ok()?, entry.path())))
        .collect();
    fetched.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
    let Some(in_use) = children_working_dirs() else {
        // Without /proc, nothing tells which are in use: keep them all.
        return;
    };
    for (_, old) in fetched.into_iter().skip(KEEP_PREVIOUS) {
        let canonical = old.canonicalize().unwrap_or_else(|_| old.clone());
        if in_use.iter().any(|cwd| cwd.starts_with(&canonical)) {
            continue;
        }
        if let Err(error) = std::fs::remove_dir_all(&old) {
            tracing::warn!(dir = %old.display(), "cannot remove an old bundle: {error}");
        }
    }
}

/// The working folders of this process's children (`/proc`), or `None`
/// where there is no `/proc` to read.
fn children_working_dirs() -> Option<Vec<PathBuf>> {
    let me = std::process::id().to_string();
    let entries = std::fs::read_dir("/proc").ok()?;
    Some(
        entries
            .flatten()
            .filter(|entry| {
                entry
                    .file_name()
                    .to_string_lossy()
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
            .filter(|entry| {
                // `pid (comm) state ppid ...`; comm may hold spaces.
                std::fs::read_to_string(entry.path().join("stat"))
                    .ok()
                    .and_then(|stat| {
                        let after = &stat[stat.rfind(')')? + 1..];
                        after.split_whitespace().nth(1).map(|ppid| ppid == me)
                    })
                    .unwrap_or(false)
            })
            .filter_map(|entry| std::fs::read_link(entry.path().join("cwd")).ok())
            .collect(),
    )
}

/// Follows the cluster's active bundle for a host: a new one is fetched
/// and handed to the host's reloader; the outcome goes into the host's
/// heartbeat.
pub(crate) struct BundleFollower {
    install: PackageInstaller,
    notices: Notices,
    cluster: Cluster,
    workspace_id: String,
    running: HostBundle,
    /// The folder the host was started in: its env files.
    local_root: PathBuf,
    rollouts: mpsc::Sender<Rollout>,
}

impl BundleFollower {
    /// A follower for the host running `running`, handing rollouts to
    /// `rollouts`.
    pub(crate) fn new(
        cluster: Cluster,
        mode: &ClusterMode,
        running: HostBundle,
        local_root: PathBuf,
        rollouts: mpsc::Sender<Rollout>,
        install: PackageInstaller,
        notices: Notices,
    ) -> BundleFollower {
        BundleFollower {
            install,
            notices,
            cluster,
            workspace_id: mode.workspace_id.clone(),
            running,
            local_root,
            rollouts,
        }
    }

    /// Applies every new active bundle until the host stops (the task is
    /// aborted) or the reloader is gone.
    pub(crate) async fn run(mut self, membership: Arc<Membership>) {
        let mut active = loop {
            match bundle::follow_active(&self.cluster).await {
                Ok(active) => break active,
                Err(error) => {
                    tracing::warn!(
                        code = error.code(),
                        "following the active bundle: {error}; trying again"
                    );
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        let mut refused: Option<String> = None;
        loop {
            let wanted = active.borrow_and_update().clone();
            let announce = match wanted {
                // Back to what this host runs (a deploy undone): nothing
                // to apply, and nothing refused any more.
                Some(wanted) if wanted.digest == self.running.digest => {
                    refused.take().map(|_| None)
                }
                Some(wanted) if refused.as_ref() == Some(&wanted.digest) => None,
                Some(wanted) => match self.apply(&wanted).await {
                    Ok(()) => {
                        self.running.digest = wanted.digest.clone();
                        refused = None;
                        Some(None)
                    }
                    Err(None) => return,
                    Err(Some(problem)) => {
                        (self.notices)(Notice::RolloutRefused {
                            digest: wanted.digest.clone(),
                            problem: problem.clone(),
                            running: self.running.digest.clone(),
                        });
                        refused = Some(wanted.digest.clone());
                        Some(Some(bundle::Refusal {
                            digest: wanted.digest.clone(),
                            problem,
                        }))
                    }
                },
                None => None,
            };
            if let Some(refusal) = announce {
                if let Err(error) = membership.set_bundle(&self.running.digest, refusal).await {
                    tracing::warn!(code = error.code(), "announcing the bundle: {error}");
                }
            }
            if active.changed().await.is_err() {
                return;
            }
        }
    }

    /// Fetches `wanted` and has the reloader apply it: `Err(Some(why))`
    /// when this host refused it, `Err(None)` when the host is stopping.
    async fn apply(&self, wanted: &ActiveBundle) -> Result<(), Option<String>> {
        if wanted.workspace_id != self.workspace_id {
            return Err(Some(format!(
                "[E_CLUSTER_WORKSPACE] it runs workspace {}, this host's swarm is {}",
                wanted.workspace_id, self.workspace_id
            )));
        }
        let bundles = self
            .running
            .link
            .parent()
            .expect("the link sits in the bundles folder");
        let dir = fetch(&self.cluster, bundles, &wanted.digest, &self.local_root)
            .await
            .map_err(|error| Some(format!("[{}] {error}", error.code())))?;
        (self.install)(dir.clone()).await.map_err(|error| {
            Some(format!(
                "[{}] installing its packages: {error}",
                error.code()
            ))
        })?;
        let (done, outcome) = oneshot::channel();
        let rollout = Rollout {
            digest: wanted.digest.clone(),
            dir: dir.clone(),
            done,
        };
        if self.rollouts.send(rollout).await.is_err() {
            return Err(None);
        }
        match outcome.await {
            Ok(Ok(())) => {
                prune(bundles, &dir);
                Ok(())
            }
            Ok(Err(problem)) => Err(Some(problem)),
            Err(_) => Err(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_a_child_still_runs_in_is_kept() {
        let bundles = tempfile::tempdir().unwrap();
        let dir = |name: &str| {
            let dir = bundles.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            // Oldest first.
            std::thread::sleep(std::time::Duration::from_millis(20));
            dir
        };
        let [in_use, old, previous, last, running] =
            ["in-use", "old", "previous", "last", "running"].map(dir);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(&in_use)
            .spawn()
            .unwrap();
        prune(bundles.path(), &running);
        let _ = child.kill();
        let _ = child.wait();
        assert!(in_use.exists(), "a child runs there");
        assert!(!old.exists(), "older than the two kept");
        for kept in [previous, last, running] {
            assert!(kept.exists(), "{}", kept.display());
        }
    }
}
