//! Reloading a running swarm's bundle: after an edit under
//! `gdn run --watch`, and when an agent asks with `self-restart__request`.
//!
//! It owns the file watch (the bundle's YAML files, the files they name:
//! `spec.entry` scripts, prompt `systemRef`s, a scripted Model's
//! `rulesFile`, and `.env`, `.env.local`, `--env-file`), the debounce of
//! editor bursts, the comparison of the old and new bundle, the answer to
//! an agent's restart request, and the record of each reload (one console
//! [`Notice`] for the console and one [`SwarmEvent`] in the workspace's
//! `swarm-events.jsonl`,
//! which `gdn logs` shows). It does not restart anything itself: the
//! orchestrator's graceful restart does (`OrchestratorHandle::
//! restart_for_config`), so conversations, extension state and queued
//! events survive. Each child still loads the bundle itself when it starts.
//!
//! What an edit restarts (every resource is compared by a hash of its
//! parsed form plus the content of the files it names):
//!
//! * an Agent: its instances;
//! * a Model, Tool or Extension: the instances of every agent using it;
//! * a Connector or Connection: the Connection's ConnectorProcess;
//! * the selected Swarm, the Package or an env file: everything.
//!
//! An agent's restart request restarts everything, after the bundle is
//! validated: an invalid bundle is the request's error and nothing
//! restarts. The answer goes out before the restart, and a process
//! finishes its Turn before it stops, so the asking Turn still answers.
//!
//! The orchestrator's `SwarmInfo` is replaced on every valid reload
//! (`OrchestratorHandle::reconfigure`), which starts Connections that
//! appeared and stops those that went away.
//!
//! On a cluster host (`gdn run --cluster`) a third trigger is the rollout
//! of a new active bundle ([`Rollout`], from `crate::cluster::rollout`): the
//! bundle is loaded from the folder it was fetched to, the link the
//! host's children load through is pointed at it, and what changed
//! restarts as after an edit. A host's singleton Connections stay on the
//! host that owns them ([`ClusterReload::connections`]).

use crate::cluster::rollout::{point_link, Rollout};
use crate::cluster::SingletonConnections;
use crate::project::{swarm_info, BundleSource};
use crate::secrets::ChildSecrets;
use crate::{Notice, Notices, Project};
use goondan_config::{Bundle, Resource};
use goondan_ipc::protocol::{Failure, QueryAnswer};
use goondan_orchestrator::orchestrator::SwarmRestartRequest;
use goondan_orchestrator::OrchestratorHandle;
use goondan_types::{ProcessStatus, ReloadTrigger, SwarmEvent, SwarmEventBase};
use notify::Watcher;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long the files must stay quiet before a reload: an editor's save
/// is often several writes and renames in a row.
const QUIET_PERIOD: Duration = Duration::from_millis(150);
/// How often the restarted instances are checked for readiness.
const READY_POLL: Duration = Duration::from_millis(5);
/// How long past the grace period a reload waits for restarted instances.
const READY_SETTLE: Duration = Duration::from_secs(5);
/// How many agents' restart requests may wait for the bundle to be
/// re-read; more are refused with `E_RESTART_BUSY`.
pub(crate) const RESTART_REQUEST_CAPACITY: usize = 4;

/// What a cluster host's reloads need beyond a single host's.
pub(crate) struct ClusterReload {
    /// The link every child loads the bundle through; a rollout points it
    /// at the new bundle before anything restarts.
    pub(crate) link: PathBuf,
    /// Which Connections this host runs.
    pub(crate) connections: Arc<SingletonConnections>,
    /// The rollouts to apply, as the host's bundle follower finds them.
    pub(crate) rollouts: mpsc::Receiver<Rollout>,
}

/// Starts reloading the bundle of `project`, whose swarm `handle` runs,
/// on every request from `requests`, with `watch_files` on every edit,
/// and on a cluster host on every rollout from `rollouts`. The task ends
/// when the orchestrator drops its end of `requests`, or when it is
/// aborted.
pub(crate) fn start(
    running: Running,
    project: &Project,
    source: BundleSource,
    watch_files: bool,
    requests: mpsc::Receiver<SwarmRestartRequest>,
    cluster: Option<ClusterReload>,
    notices: Notices,
) -> notify::Result<tokio::task::JoinHandle<()>> {
    let (cluster, rollouts) = cluster
        .map(|cluster| {
            let ClusterReload {
                link,
                connections,
                rollouts,
            } = cluster;
            (ClusterLink { link, connections }, rollouts)
        })
        .unzip();
    let snapshot = Snapshot::of(&project.bundle, &project.swarm_name, &source);
    let (events_tx, events) = mpsc::unbounded_channel();
    let watcher = if watch_files {
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                // The receiver is gone only when the reloader stopped.
                let _ = events_tx.send(event);
            })?;
        let mut watched_dirs = BTreeSet::new();
        watch_dirs(&mut watcher, &mut watched_dirs, &snapshot);
        Some(FileWatch {
            watcher,
            watched_dirs,
        })
    } else {
        None
    };
    let Running {
        handle,
        child_secrets,
    } = running;
    let reloader = Reloader {
        handle,
        child_secrets,
        project: project.clone(),
        source,
        notices,
        snapshot,
        watch: watcher,
        cluster,
    };
    Ok(tokio::spawn(reloader.run(events, requests, rollouts)))
}

/// The running swarm a reload changes.
pub(crate) struct Running {
    /// Its orchestrator, which restarts what changed.
    pub(crate) handle: OrchestratorHandle,
    /// What its spawner hands each child, replaced by the new bundle's
    /// before anything restarts.
    pub(crate) child_secrets: ChildSecrets,
}

/// The folders watched for edits (`--watch`).
struct FileWatch {
    watcher: notify::RecommendedWatcher,
    watched_dirs: BTreeSet<PathBuf>,
}

/// What asked for one reload.
enum Trigger {
    /// An edit, under `--watch`.
    Watch,
    /// An agent's `self-restart__request`.
    Request(SwarmRestartRequest),
    /// A new active bundle on a cluster host.
    Rollout(Rollout),
}

impl Trigger {
    /// The prefix of the console line.
    fn label(&self) -> &'static str {
        match self {
            Trigger::Watch => "watch",
            Trigger::Request(_) => "self-restart",
            Trigger::Rollout(_) => "rollout",
        }
    }

    /// Tells a rollout's sender how it went.
    fn finish(self, outcome: Result<(), String>) {
        if let Trigger::Rollout(rollout) = self {
            let _ = rollout.done.send(outcome);
        }
    }
}

/// The reload loop's state: the bundle now running and what is watched.
struct Reloader {
    handle: OrchestratorHandle,
    child_secrets: ChildSecrets,
    project: Project,
    source: BundleSource,
    notices: Notices,
    snapshot: Snapshot,
    watch: Option<FileWatch>,
    cluster: Option<ClusterLink>,
}

/// A cluster host's link and Connections, as the reload loop keeps them.
struct ClusterLink {
    link: PathBuf,
    connections: Arc<SingletonConnections>,
}

impl Reloader {
    async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<notify::Result<notify::Event>>,
        mut requests: mpsc::Receiver<SwarmRestartRequest>,
        mut rollouts: Option<mpsc::Receiver<Rollout>>,
    ) {
        let mut watching = self.watch.is_some();
        loop {
            tokio::select! {
                rollout = async { rollouts.as_mut()?.recv().await }, if rollouts.is_some() => match rollout {
                    Some(rollout) => self.reload(Trigger::Rollout(rollout)).await,
                    // The host stopped following the cluster.
                    None => rollouts = None,
                },
                event = events.recv(), if watching => match event {
                    Some(Ok(event)) if self.snapshot.concerns(&event) => {
                        // Wait for quiet: one reload per burst of saves.
                        while let Ok(Some(_)) =
                            tokio::time::timeout(QUIET_PERIOD, events.recv()).await
                        {}
                        self.reload(Trigger::Watch).await;
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => {
                        tracing::warn!(event = "watch.error", "file watch error: {error}");
                    }
                    None => watching = false,
                },
                request = requests.recv() => match request {
                    Some(request) => self.reload(Trigger::Request(request)).await,
                    // The orchestrator stopped.
                    None => return,
                },
            }
        }
    }

    /// Loads the bundle again and applies what changed (everything, for
    /// an agent's request).
    async fn reload(&mut self, trigger: Trigger) {
        let started = Instant::now();
        let label = trigger.label();
        let from = match &trigger {
            Trigger::Rollout(rollout) => rollout.dir.clone(),
            Trigger::Watch | Trigger::Request(_) => self.source.config.clone(),
        };
        let bundle = match self
            .source
            .load(&from, Some(self.project.state_root.packages_dir()))
        {
            Ok(bundle) => bundle,
            Err(not_loaded) => {
                let summary = not_loaded.summary();
                let code = not_loaded.code().to_string();
                self.reject(trigger, &code, &summary, Some(not_loaded))
                    .await;
                return;
            }
        };
        let swarm_name = self.project.swarm_name.clone();
        let Some(swarm) = bundle.swarm(&swarm_name) else {
            let message = format!("Swarm/{swarm_name} is no longer defined");
            self.reject(trigger, "E_CONFIG_REF_NOT_FOUND", &message, None)
                .await;
            return;
        };
        if let (Trigger::Rollout(_), Some(_)) = (&trigger, &self.cluster) {
            // The cluster's conversations are kept under the Swarm's
            // instance key: another key would be another swarm.
            if swarm.instance_key() != self.project.instance_key {
                let message = format!(
                    "Swarm/{swarm_name} has instanceKey {} in the new bundle; this cluster runs {}",
                    swarm.instance_key(),
                    self.project.instance_key
                );
                self.reject(trigger, "E_CLUSTER_WORKSPACE", &message, None)
                    .await;
                return;
            }
        }
        // Nothing changes until the new bundle is known to be usable.
        let candidate = self.project.with_bundle(bundle);
        let info = match swarm_info(&candidate) {
            Ok(info) => match &self.cluster {
                Some(cluster) => cluster.connections.select(&candidate, info),
                None => info,
            },
            Err(error) => {
                let message = error.to_string();
                self.reject(trigger, error.code(), &message, None).await;
                return;
            }
        };
        if let (Trigger::Rollout(_), Some(cluster)) = (&trigger, &self.cluster) {
            // New children load the new bundle from here on.
            if let Err(error) = point_link(&cluster.link, candidate.bundle.root()) {
                let message = format!("cannot point {} at it: {error}", cluster.link.display());
                self.reject(trigger, "E_CLUSTER_BUNDLE", &message, None)
                    .await;
                return;
            }
        }
        let snapshot = Snapshot::of(&candidate.bundle, &swarm_name, &self.source);
        let mut change = self.snapshot.compare(&snapshot);
        // Children started from here on (the restarted ones, new agents)
        // are handed what the new bundle's resources read.
        self.child_secrets.replace(&candidate.bundle);
        self.project = candidate;
        self.snapshot = snapshot;
        if let Some(watch) = &mut self.watch {
            watch_dirs(&mut watch.watcher, &mut watch.watched_dirs, &self.snapshot);
        }
        match &trigger {
            Trigger::Request(request) => {
                // Answered before anything restarts: messages to one
                // process keep their order, so the answer reaches it
                // ahead of its shutdown.
                let answered = self
                    .handle
                    .answer_query(
                        request.from.clone(),
                        request.correlation_id.clone(),
                        QueryAnswer::RestartScheduled,
                    )
                    .await;
                if answered.is_err() {
                    return;
                }
                change.agents = info.agents.clone();
                change.connections = info.connections.clone();
            }
            Trigger::Watch if change.changed.is_empty() => {
                tracing::debug!(
                    event = "watch.unchanged",
                    "files changed, the bundle did not"
                );
                return;
            }
            Trigger::Watch | Trigger::Rollout(_) => {}
        }
        let grace = info.grace_period;
        let outcome = self.apply(info, &change, grace).await;
        let elapsed = started.elapsed();
        let changed = if change.changed.is_empty() {
            "nothing".to_string()
        } else {
            change.changed.join(", ")
        };
        let restarted = match &outcome {
            Ok(restarted) if restarted.keys.is_empty() => "nothing".to_string(),
            Ok(restarted) if restarted.not_ready.is_empty() => restarted.keys.join(", "),
            Ok(restarted) => format!(
                "{} (not ready yet: {})",
                restarted.keys.join(", "),
                restarted.not_ready.join(", ")
            ),
            Err(error) => format!("nothing ({error})"),
        };
        let asked = match &trigger {
            Trigger::Request(request) => format!(" for {} ({})", request.from, request.reason),
            Trigger::Rollout(rollout) => format!(" to bundle {}", rollout.digest),
            Trigger::Watch => String::new(),
        };
        (self.notices)(Notice::Reloaded {
            trigger: label,
            asked,
            elapsed,
            changed: changed.clone(),
            restarted: restarted.clone(),
        });
        tracing::info!(
            event = "swarm.reloaded",
            trigger = label,
            changed = %changed,
            restarted = %restarted,
            elapsed_ms = elapsed.as_millis() as u64,
            "bundle reloaded"
        );
        let (restarted, not_ready) = outcome
            .map(|restarted| (restarted.keys, restarted.not_ready))
            .unwrap_or_default();
        self.record(SwarmEvent::Reloaded {
            base: self.event_base(&trigger),
            changed: change.changed,
            restarted,
            not_ready,
            duration: elapsed.as_millis() as u64,
        });
        trigger.finish(Ok(()));
    }

    /// Refuses a reload: the swarm runs on unchanged. An agent that asked
    /// gets the reason as its tool call's error.
    async fn reject(
        &self,
        trigger: Trigger,
        code: &str,
        message: &str,
        not_loaded: Option<crate::NotLoaded>,
    ) {
        let label = trigger.label();
        let what = match trigger {
            Trigger::Watch => "edit",
            Trigger::Request(_) | Trigger::Rollout(_) => "bundle",
        };
        (self.notices)(Notice::ReloadRefused {
            trigger: label,
            what,
            code: code.to_string(),
            message: message.to_string(),
            not_loaded,
        });
        tracing::warn!(
            event = "swarm.reload_rejected",
            trigger = label,
            code,
            // The notice above told the person.
            reported = true,
            "the reloaded bundle is invalid; nothing was restarted"
        );
        if let Trigger::Request(request) = &trigger {
            let answer = QueryAnswer::Failed(Failure {
                code: code.to_string(),
                message: format!("the bundle is invalid, so nothing restarts: {message}"),
                suggestion: None,
            });
            let _ = self
                .handle
                .answer_query(request.from.clone(), request.correlation_id.clone(), answer)
                .await;
        }
        self.record(SwarmEvent::ReloadRejected {
            base: self.event_base(&trigger),
            code: code.to_string(),
            error_message: message.to_string(),
        });
        trigger.finish(Err(format!("[{code}] {message}")));
    }

    fn event_base(&self, trigger: &Trigger) -> SwarmEventBase {
        let (trigger, reason) = match trigger {
            Trigger::Watch => (ReloadTrigger::Watch, None),
            Trigger::Request(request) => (
                ReloadTrigger::SelfRestart,
                Some(format!("{}: {}", request.from, request.reason)),
            ),
            Trigger::Rollout(rollout) => (ReloadTrigger::Rollout, Some(rollout.digest.clone())),
        };
        SwarmEventBase {
            timestamp: goondan_types::now_iso(),
            swarm_name: self.project.swarm_name.clone(),
            instance_key: self.project.instance_key.clone(),
            trigger,
            reason,
        }
    }

    /// Appends `event` to the workspace's swarm event log; a failure to
    /// record costs the record, not the reload.
    fn record(&self, event: SwarmEvent) {
        if let Err(error) = goondan_store::append_swarm_event(&self.project.workspace(), &event) {
            tracing::warn!(code = error.code(), "could not record the reload: {error}");
        }
    }

    /// Replaces the swarm and restarts what `change` affects; returns the
    /// restarted keys once the agents among them are ready again (or the
    /// wait ran out).
    async fn apply(
        &self,
        info: goondan_orchestrator::SwarmInfo,
        change: &Change,
        grace: Duration,
    ) -> Result<Restarted, goondan_orchestrator::OrchestratorError> {
        let before: HashMap<String, Option<u64>> = self
            .handle
            .list()
            .await?
            .into_iter()
            .map(|status| (status.key, status.generation))
            .collect();
        self.handle.reconfigure(info).await?;
        let keys = self
            .handle
            .restart_for_config(change.agents.clone(), change.connections.clone())
            .await?;
        let deadline = Instant::now() + grace + READY_SETTLE;
        loop {
            let now: HashMap<String, (Option<u64>, ProcessStatus)> = self
                .handle
                .list()
                .await?
                .into_iter()
                .map(|status| (status.key, (status.generation, status.status)))
                .collect();
            let not_ready: Vec<String> = keys
                .iter()
                .filter(|key| before.contains_key(*key))
                .filter(|key| match now.get(*key) {
                    Some((generation, status)) => {
                        generation.is_none()
                            || *generation == before[*key]
                            || !matches!(status, ProcessStatus::Idle | ProcessStatus::Processing)
                    }
                    None => false,
                })
                .cloned()
                .collect();
            if not_ready.is_empty() || Instant::now() >= deadline {
                return Ok(Restarted { keys, not_ready });
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }
}

/// What a reload restarted.
struct Restarted {
    /// Every restarted key (agent instances and `@connection:` keys).
    keys: Vec<String>,
    /// Agent instances not ready again when the wait ran out (the grace
    /// period plus [`READY_SETTLE`]): still draining, starting or backing
    /// off.
    not_ready: Vec<String>,
}

/// Starts watching the folders of every file `snapshot` names that is not
/// watched yet. A folder, not the file: editors save by renaming a new
/// file over the old one.
fn watch_dirs(
    watcher: &mut notify::RecommendedWatcher,
    watched: &mut BTreeSet<PathBuf>,
    snapshot: &Snapshot,
) {
    let dirs = snapshot
        .files
        .iter()
        .filter_map(|file| file.parent())
        .chain(std::iter::once(snapshot.root.as_path()));
    for dir in dirs {
        if watched.contains(dir) || !dir.is_dir() {
            continue;
        }
        match watcher.watch(dir, notify::RecursiveMode::NonRecursive) {
            Ok(()) => {
                watched.insert(dir.to_path_buf());
            }
            Err(error) => {
                tracing::warn!(event = "watch.error", dir = %dir.display(), "cannot watch: {error}");
            }
        }
    }
}

/// What a bundle looks like to the watch: a fingerprint per resource, per
/// agent of the swarm (with everything it uses), per Connection, and of
/// what concerns everything.
#[derive(Debug, Default)]
struct Snapshot {
    root: PathBuf,
    /// Every file whose change may matter.
    files: BTreeSet<PathBuf>,
    /// `Kind/name` to the fingerprint of that resource.
    resources: BTreeMap<String, u64>,
    /// Agent of the selected swarm to the fingerprint of everything it uses.
    agents: BTreeMap<String, u64>,
    /// Connection of the selected swarm to its fingerprint with its
    /// Connector's.
    connections: BTreeMap<String, u64>,
    /// The selected Swarm, the Package and the env files.
    everything: u64,
    /// The env files alone.
    env: u64,
}

/// What differs between two snapshots.
#[derive(Debug, Default, PartialEq)]
struct Change {
    /// `Kind/name` of each changed, added or removed resource; `env` for
    /// the env files.
    changed: Vec<String>,
    /// Agents to restart.
    agents: Vec<String>,
    /// Connections to restart.
    connections: Vec<String>,
}

impl Snapshot {
    fn of(bundle: &Bundle, swarm_name: &str, source: &BundleSource) -> Snapshot {
        let root = bundle.root().to_path_buf();
        let mut snapshot = Snapshot {
            root: root.clone(),
            ..Snapshot::default()
        };
        let mut env_files = vec![root.join(".env"), root.join(".env.local")];
        env_files.extend(source.env_file.iter().cloned());
        snapshot.env = fingerprint(&env_files.iter().map(|f| read(f)).collect::<Vec<_>>());
        snapshot.files.extend(env_files);
        snapshot.add("Model", bundle.models(), |spec| {
            spec.options
                .get("rulesFile")
                .and_then(|value| value.as_str())
                .map(str::to_string)
        });
        snapshot.add("Tool", bundle.tools(), |spec| local(&spec.entry));
        snapshot.add("Extension", bundle.extensions(), |spec| local(&spec.entry));
        snapshot.add("Connector", bundle.connectors(), |spec| local(&spec.entry));
        let agents: Vec<_> = bundle.agents().map(|agent| agent.resource()).collect();
        snapshot.add("Agent", agents.iter().copied(), |spec| {
            spec.prompt
                .as_ref()
                .and_then(|prompt| prompt.system_ref.clone())
        });
        let swarms: Vec<_> = bundle.swarms().map(|swarm| swarm.resource()).collect();
        snapshot.add("Swarm", swarms.iter().copied(), |_| None);
        let connections: Vec<_> = bundle.connections().map(|c| c.resource()).collect();
        snapshot.add("Connection", connections.iter().copied(), |_| None);
        snapshot.add("Package", bundle.package(), |_| None);
        let of = |kind: &str, name: &str| {
            snapshot
                .resources
                .get(&format!("{kind}/{name}"))
                .copied()
                .unwrap_or(0)
        };
        let mut agents = BTreeMap::new();
        let mut connections = BTreeMap::new();
        let mut everything = snapshot.env;
        if let Some(swarm) = bundle.swarm(swarm_name) {
            everything = fingerprint(&(
                snapshot.env,
                of("Swarm", swarm_name),
                bundle.package().map(|p| of("Package", p.name())),
            ));
            for agent in swarm.agents() {
                let uses = (
                    of("Agent", agent.name()),
                    of("Model", agent.model().name()),
                    agent
                        .tools()
                        .map(|t| of("Tool", t.name()))
                        .collect::<Vec<_>>(),
                    agent
                        .extensions()
                        .map(|e| of("Extension", e.name()))
                        .collect::<Vec<_>>(),
                );
                agents.insert(agent.name().to_string(), fingerprint(&uses));
            }
            for connection in bundle.connections() {
                if connection.swarm().name() == swarm_name {
                    let uses = (
                        of("Connection", connection.name()),
                        of("Connector", connection.connector().name()),
                    );
                    connections.insert(connection.name().to_string(), fingerprint(&uses));
                }
            }
        }
        snapshot.agents = agents;
        snapshot.connections = connections;
        snapshot.everything = everything;
        snapshot
    }

    /// Records each of `resources` under `kind`, with the content of the
    /// file `named` picks from its spec (relative to the bundle root).
    fn add<'a, S: Debug + 'a>(
        &mut self,
        kind: &str,
        resources: impl IntoIterator<Item = &'a Resource<S>>,
        named: impl Fn(&S) -> Option<String>,
    ) {
        for resource in resources {
            let own = resource.origin.package.is_none();
            if own {
                self.files.insert(self.root.join(&resource.origin.file));
            }
            let file = named(&resource.spec).map(|written| self.root.join(written));
            let content = file.as_deref().map(read);
            if let Some(file) = file.filter(|_| own) {
                self.files.insert(file);
            }
            let parsed = format!("{:?}{:?}", resource.metadata, resource.spec);
            self.resources.insert(
                format!("{kind}/{}", resource.name()),
                fingerprint(&(parsed, content)),
            );
        }
    }

    /// Whether `event` touches a file of the bundle (or may add one).
    fn concerns(&self, event: &notify::Event) -> bool {
        if matches!(event.kind, notify::EventKind::Access(_)) {
            return false;
        }
        event.paths.iter().any(|path| {
            self.files.contains(path)
                || (path.starts_with(&self.root)
                    && matches!(
                        path.extension().and_then(|e| e.to_str()),
                        Some("yaml" | "yml")
                    ))
        })
    }

    /// What changed from `self` to `new`, and what that restarts.
    fn compare(&self, new: &Snapshot) -> Change {
        let mut changed: Vec<String> = self
            .resources
            .keys()
            .chain(new.resources.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|key| self.resources.get(*key) != new.resources.get(*key))
            .cloned()
            .collect();
        if self.env != new.env {
            changed.push("env".to_string());
        }
        let everything = self.everything != new.everything;
        let restart = |old: &BTreeMap<String, u64>, now: &BTreeMap<String, u64>| {
            now.iter()
                .filter(|(name, fp)| everything || old.get(*name).is_some_and(|old| old != *fp))
                .map(|(name, _)| name.clone())
                .collect::<Vec<_>>()
        };
        Change {
            agents: restart(&self.agents, &new.agents),
            connections: restart(&self.connections, &new.connections),
            changed,
        }
    }
}

/// A path the bundle names that is a file of its own (not `builtin:`).
fn local(entry: &str) -> Option<String> {
    (!entry.starts_with(goondan_config::BUILTIN_PREFIX)).then(|| entry.to_string())
}

/// A file's content; a missing file reads as nothing.
fn read(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

fn fingerprint(value: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(agents: &[(&str, u64)], connections: &[(&str, u64)], everything: u64) -> Snapshot {
        let map = |pairs: &[(&str, u64)]| {
            pairs
                .iter()
                .map(|(name, fp)| (name.to_string(), *fp))
                .collect()
        };
        Snapshot {
            resources: agents
                .iter()
                .map(|(name, fp)| (format!("Agent/{name}"), *fp))
                .collect(),
            agents: map(agents),
            connections: map(connections),
            everything,
            ..Snapshot::default()
        }
    }

    #[test]
    fn compare_restarts_only_what_changed() {
        let cases = [
            // One agent changed: only it restarts.
            (
                snapshot(&[("a", 1), ("b", 1)], &[("hook", 1)], 1),
                snapshot(&[("a", 2), ("b", 1)], &[("hook", 1)], 1),
                (vec!["a"], vec![]),
            ),
            // A new agent needs no restart.
            (
                snapshot(&[("a", 1)], &[], 1),
                snapshot(&[("a", 1), ("b", 1)], &[], 1),
                (vec![], vec![]),
            ),
            // A Connection changed.
            (
                snapshot(&[("a", 1)], &[("hook", 1)], 1),
                snapshot(&[("a", 1)], &[("hook", 2)], 1),
                (vec![], vec!["hook"]),
            ),
            // The Swarm, Package or env changed: everything restarts.
            (
                snapshot(&[("a", 1)], &[("hook", 1)], 1),
                snapshot(&[("a", 1)], &[("hook", 1)], 2),
                (vec!["a"], vec!["hook"]),
            ),
        ];
        for (old, new, (agents, connections)) in cases {
            let change = old.compare(&new);
            assert_eq!(change.agents, agents);
            assert_eq!(change.connections, connections);
        }
    }
}
