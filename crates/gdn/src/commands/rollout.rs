//! The bundle a cluster's hosts run, distributed by digest
//! (`goondan_cluster::bundle`): what a host runs when it joins
//! ([`adopt`]), how it follows a rollout ([`BundleFollower`]), and
//! `gdn cluster deploy` ([`deploy`]), which starts one.
//!
//! The first host to join makes its own bundle the active one. Every
//! later host runs the active bundle, whatever its own folder holds
//! (a different one is fetched, checked against its digest, unpacked and
//! validated; the host says so on stderr), and `gdn cluster deploy`
//! replaces the active bundle on every host at once, each applying it as
//! `--watch` applies an edit: only what changed restarts.
//!
//! A host's children load the bundle through one link,
//! `<workspace>/cluster-bundles/current`, pointed at the host's own folder
//! or at a fetched bundle; a rollout re-points it before anything
//! restarts. Env files never travel (a packed bundle leaves them out):
//! the `.env` and `.env.local` of the folder a host was started in are
//! linked into every bundle it fetches, so each host keeps its own
//! secrets.

use super::cluster::{self, print_cluster_error, ClusterMode};
use super::reload::{Rollout, Source};
use crate::cli::GlobalArgs;
use crate::exit::Outcome;
use crate::project::Project;
use goondan_cluster::bundle::{self, short_digest, ActiveBundle};
use goondan_cluster::membership::{cluster_status, Membership};
use goondan_cluster::{Cluster, ClusterError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The folder of a host's workspace holding the bundles it fetched and
/// the link to the one it runs.
const BUNDLES_DIR: &str = "cluster-bundles";
/// The link, inside [`BUNDLES_DIR`].
const CURRENT_LINK: &str = "current";
/// Env files linked from a host's own folder into each bundle it fetches.
const ENV_FILES: [&str; 2] = [".env", ".env.local"];
/// Fetched bundles kept besides the running one, for a quick way back.
const KEEP_PREVIOUS: usize = 2;
/// How often `gdn cluster deploy` looks at the hosts while it waits.
const DEPLOY_POLL: Duration = Duration::from_millis(250);

/// The bundle a host runs and the link its children load it through.
#[derive(Debug, Clone)]
pub(crate) struct HostBundle {
    /// `<workspace>/cluster-bundles/current`.
    pub(crate) link: PathBuf,
    /// The digest of what it points at.
    pub(crate) digest: String,
}

/// The digest of `project`'s bundle packed for the cluster, with the
/// archive; `Err` after printing why it cannot be packed.
fn pack(project: &Project) -> Result<(Vec<u8>, String), Outcome> {
    match goondan_package::tarball::pack_bundle(project.bundle.root()) {
        Ok(archive) => {
            let digest = bundle::digest_of(&archive);
            Ok((archive, digest))
        }
        Err(error) => {
            eprintln!(
                "error[E_CLUSTER_BUNDLE]: cannot pack the bundle at {} for the cluster: {error}",
                project.bundle.root().display()
            );
            eprintln!("   = help: a cluster bundle holds plain files and folders, and links to files inside it; at most {} files", goondan_package::tarball::MAX_ENTRIES);
            Err(Outcome::ConfigError)
        }
    }
}

/// Decides what a joining host runs: its own bundle when none is active
/// yet (it becomes the active one) or when it is the active one, else the
/// active bundle, fetched. Returns the project to run (its System Root
/// and workspace stay this folder's) and the link to load it through;
/// `Err` after printing why the host cannot start.
pub(crate) async fn adopt(
    global: &GlobalArgs,
    cluster: &Cluster,
    mode: &ClusterMode,
    project: Project,
    source: &Source,
) -> Result<(Project, HostBundle), Outcome> {
    let (archive, local) = pack(&project)?;
    let link = link_of(&project);
    let bundles = link.parent().expect("the link sits in the bundles folder");
    let active = loop {
        let active = bundle::active(cluster)
            .await
            .map_err(|e| print_cluster_error(&e))?;
        if let Some(active) = active {
            break active;
        }
        // The first host: its bundle becomes the swarm's.
        bundle::upload(cluster, &archive)
            .await
            .map_err(|e| print_cluster_error(&e))?;
        let record = ActiveBundle::new(
            local.clone(),
            archive.len() as u64,
            mode.workspace_id.clone(),
            mode.host_id.clone(),
        );
        match bundle::activate(cluster, &record, None).await {
            Ok(Some(active)) => break active,
            // Another host was first: run what it made active.
            Ok(None) => continue,
            Err(error) => return Err(print_cluster_error(&error)),
        }
    };
    if active.workspace_id != mode.workspace_id {
        eprintln!(
            "error[E_CLUSTER_WORKSPACE]: this cluster runs workspace {} (Swarm instance key), this bundle's Swarm/{} is workspace {}",
            active.workspace_id, project.swarm_name, mode.workspace_id
        );
        eprintln!("   = help: run one swarm per cluster: start this host against another cluster, or deploy this bundle's swarm where it belongs");
        return Err(Outcome::ConfigError);
    }
    if active.digest == local {
        point_link(&link, project.bundle.root()).map_err(|error| link_error(&link, &error))?;
        return Ok((
            project,
            HostBundle {
                link,
                digest: local,
            },
        ));
    }
    eprintln!(
        "the cluster runs bundle {} (made active by {} at {}); this folder's bundle ({}) differs and is not run here. `gdn cluster deploy` rolls a bundle out to every host",
        short_digest(&active.digest),
        active.deployed_by,
        active.deployed_at,
        short_digest(&local)
    );
    let dir = fetch(cluster, bundles, &active.digest, project.bundle.root())
        .await
        .map_err(|e| print_cluster_error(&e))?;
    if let Err(error) = super::package::install_for_bundle(global, &dir).await {
        eprintln!(
            "error[{}]: installing the packages of the cluster's bundle {}: {error}",
            error.code(),
            short_digest(&active.digest)
        );
        eprintln!("   = help: {}", error.suggestion());
        return Err(Outcome::Failure);
    }
    let bundle = match source.load(&dir, project.state_root.packages_dir()) {
        Ok(bundle) => bundle,
        Err(not_loaded) => {
            eprintln!(
                "error[{}]: the cluster's bundle {} does not load on this host: {}",
                not_loaded.code(),
                short_digest(&active.digest),
                not_loaded.summary()
            );
            eprintln!("   = help: a host needs what the bundle reads from its environment (its own .env, variables); or deploy a bundle that loads here");
            return Err(not_loaded.outcome);
        }
    };
    match bundle.swarm(&project.swarm_name) {
        Some(swarm) if swarm.instance_key() == project.instance_key => {}
        _ => {
            eprintln!(
                "error[E_CLUSTER_WORKSPACE]: the cluster's bundle {} has no Swarm/{} with instanceKey {}",
                short_digest(&active.digest),
                project.swarm_name,
                project.instance_key
            );
            eprintln!("   = help: start the host with the Swarm the cluster runs (--swarm)");
            return Err(Outcome::ConfigError);
        }
    }
    point_link(&link, bundle.root()).map_err(|error| link_error(&link, &error))?;
    let project = Project { bundle, ..project };
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

fn link_error(link: &Path, error: &std::io::Error) -> Outcome {
    eprintln!(
        "error[E_CLUSTER_BUNDLE]: cannot point {} at the bundle: {error}",
        link.display()
    );
    Outcome::Failure
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
    global: GlobalArgs,
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
        global: &GlobalArgs,
        cluster: Cluster,
        mode: &ClusterMode,
        running: HostBundle,
        local_root: PathBuf,
        rollouts: mpsc::Sender<Rollout>,
    ) -> BundleFollower {
        BundleFollower {
            global: global.clone(),
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
                        eprintln!(
                            "rollout: bundle {} refused on this host: {problem}; it runs on with {}",
                            short_digest(&wanted.digest),
                            short_digest(&self.running.digest)
                        );
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
        super::package::install_for_bundle(&self.global, &dir)
            .await
            .map_err(|error| {
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

/// `gdn cluster deploy`: makes this folder's bundle the one every host
/// runs, then waits up to `wait` until every live host runs it.
pub(crate) fn deploy(global: &GlobalArgs, urls: &str, wait: Duration) -> anyhow::Result<Outcome> {
    let project = match crate::project::load(global, None, None)? {
        Ok(project) => project,
        Err(outcome) => return Ok(outcome),
    };
    let (archive, digest) = match pack(&project) {
        Ok(packed) => packed,
        Err(outcome) => return Ok(outcome),
    };
    let workspace_id = cluster::workspace_of(&project);
    let deployer = format!(
        "gdn cluster deploy on {}",
        cluster::host_name().unwrap_or_else(|| "an unnamed machine".into())
    );
    cluster::current_thread()?.block_on(async {
        let urls = match goondan_cluster::ClusterUrls::parse(urls) {
            Ok(urls) => urls,
            Err(error) => return Ok(print_cluster_error(&error)),
        };
        // A deploy may come before the first host (an init step): it
        // makes the layout like a host does.
        let connected = async {
            let cluster = cluster::connect_as(&urls, "gdn cluster deploy".to_string()).await?;
            cluster::ensure_layout(&cluster).await?;
            Ok::<_, ClusterError>(cluster)
        };
        let cluster = match connected.await {
            Ok(cluster) => cluster,
            Err(error) => return Ok(print_cluster_error(&error)),
        };
        let activated = async {
            let mut uploaded = false;
            loop {
                let current = bundle::active(&cluster).await?;
                if let Some(current) = &current {
                    if current.workspace_id != workspace_id {
                        return Ok(Err(current.workspace_id.clone()));
                    }
                    if current.digest == digest {
                        return Ok(Ok(false));
                    }
                }
                // Only a bundle this cluster may run is stored.
                if !uploaded {
                    bundle::upload(&cluster, &archive).await?;
                    uploaded = true;
                }
                let record = ActiveBundle::new(
                    digest.clone(),
                    archive.len() as u64,
                    workspace_id.clone(),
                    deployer.clone(),
                );
                let after = current.map(|current| current.revision);
                if bundle::activate(&cluster, &record, after).await?.is_some() {
                    return Ok(Ok(true));
                }
                // Another deploy came between the read and the write.
            }
        };
        match activated.await {
            Err(error) => return Ok(print_cluster_error(&error)),
            Ok(Err(theirs)) => {
                eprintln!(
                    "error[E_CLUSTER_WORKSPACE]: this cluster runs workspace {theirs}; this bundle's Swarm/{} is workspace {workspace_id}",
                    project.swarm_name
                );
                eprintln!("   = help: run one swarm per cluster: deploy to the cluster that runs this swarm");
                return Ok(Outcome::ConfigError);
            }
            Ok(Ok(true)) => println!(
                "deployed bundle {digest} ({} KiB) for Swarm/{}",
                archive.len().div_ceil(1024),
                project.swarm_name
            ),
            Ok(Ok(false)) => println!("bundle {digest} is already active"),
        }
        if wait.is_zero() {
            return Ok(Outcome::Success);
        }
        Ok(wait_for_hosts(&cluster, &digest, wait, global.quiet).await)
    })
}

/// Waits until every live host runs `digest` or refused it; prints each
/// host as it gets there.
async fn wait_for_hosts(cluster: &Cluster, digest: &str, wait: Duration, quiet: bool) -> Outcome {
    let deadline = tokio::time::Instant::now() + wait;
    let mut reported = std::collections::BTreeSet::new();
    loop {
        let status = match cluster_status(cluster).await {
            Ok(status) => status,
            Err(error) => return print_cluster_error(&error),
        };
        let mut behind = Vec::new();
        let mut refused = 0;
        for host in &status.hosts {
            let state = if host.bundle.as_deref() == Some(digest) {
                "runs it".to_string()
            } else if let Some(refusal) = host
                .bundle_refused
                .as_ref()
                .filter(|refusal| refusal.digest == digest)
            {
                refused += 1;
                format!("refused it: {}", refusal.problem)
            } else {
                behind.push(host.host.clone());
                continue;
            };
            if reported.insert(host.host.clone()) && !quiet {
                println!("  {}: {state}", host.host);
            }
        }
        if behind.is_empty() {
            if status.hosts.is_empty() {
                println!("no host is running; each host that starts runs this bundle");
            }
            if refused > 0 {
                eprintln!("error[E_CLUSTER_BUNDLE]: {refused} host(s) refused the bundle and run on with their previous one");
                eprintln!("   = help: fix what they report (`gdn cluster status` shows it) and deploy again");
                return Outcome::Failure;
            }
            return Outcome::Success;
        }
        if tokio::time::Instant::now() >= deadline {
            eprintln!(
                "error[E_CLUSTER_TIMEOUT]: after {}s, {} host(s) do not run the bundle yet: {}",
                wait.as_secs(),
                behind.len(),
                behind.join(", ")
            );
            eprintln!("   = help: `gdn cluster status` shows what each host runs; a host applies a rollout once its running Turns allow the restart");
            return Outcome::Failure;
        }
        tokio::time::sleep(DEPLOY_POLL).await;
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
