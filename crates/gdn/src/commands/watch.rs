//! `gdn run --watch`: reloads the bundle after an edit and restarts only
//! what the edit affects.
//!
//! It owns the file watch (the bundle's YAML files, the files they name:
//! `spec.entry` scripts, prompt `systemRef`s, a scripted Model's
//! `rulesFile`, and `.env`, `.env.local`, `--env-file`), the debounce of
//! editor bursts, the comparison of the old and new bundle and the one
//! line each reload prints. It does not restart anything itself: the
//! orchestrator's graceful restart does (`OrchestratorHandle::
//! restart_for_config`), so conversations, extension state and queued
//! events survive. Each child still loads the bundle itself when it starts.
//!
//! What restarts (every resource is compared by a hash of its parsed form
//! plus the content of the files it names):
//!
//! * an Agent: its instances;
//! * a Model, Tool or Extension: the instances of every agent using it;
//! * a Connector or Connection: the Connection's ConnectorProcess;
//! * the selected Swarm, the Package or an env file: everything.
//!
//! The orchestrator's `SwarmInfo` is replaced on every valid change
//! (`OrchestratorHandle::reconfigure`), which starts Connections that
//! appeared and stops those that went away.

use crate::cli::{Format, GlobalArgs};
use crate::project::Project;
use goondan_config::{Bundle, Resource};
use goondan_orchestrator::OrchestratorHandle;
use goondan_types::ProcessStatus;
use notify::Watcher;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
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

/// Starts watching the bundle of `project`, whose swarm `handle` runs; the
/// task runs until it is aborted.
pub(crate) fn start(
    handle: OrchestratorHandle,
    project: &Project,
    global: &GlobalArgs,
    env_file: Option<PathBuf>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let env_file = env_file.map(std::path::absolute).transpose()?;
    let source = Source {
        config: global.config.clone().unwrap_or_else(|| PathBuf::from(".")),
        env_file,
        format: if global.json {
            Format::Json
        } else {
            Format::Text
        },
        quiet: global.quiet,
    };
    let snapshot = Snapshot::of(&project.bundle, &project.swarm_name, &source);
    let (events_tx, events) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // The receiver is gone only when the watch stopped.
        let _ = events_tx.send(event);
    })?;
    let mut watched_dirs = BTreeSet::new();
    watch_dirs(&mut watcher, &mut watched_dirs, &snapshot);
    let reloader = Reloader {
        handle,
        project: Project {
            bundle: project.bundle.clone(),
            swarm_name: project.swarm_name.clone(),
            instance_key: project.instance_key.clone(),
            state_root: project.state_root.clone(),
        },
        source,
        snapshot,
        watcher,
        watched_dirs,
    };
    Ok(tokio::spawn(reloader.run(events)))
}

/// Where the bundle is loaded from, as `gdn run` was told.
struct Source {
    config: PathBuf,
    env_file: Option<PathBuf>,
    format: Format,
    quiet: bool,
}

/// The watch loop's state: the bundle now running and what is watched.
struct Reloader {
    handle: OrchestratorHandle,
    project: Project,
    source: Source,
    snapshot: Snapshot,
    watcher: notify::RecommendedWatcher,
    watched_dirs: BTreeSet<PathBuf>,
}

impl Reloader {
    async fn run(mut self, mut events: mpsc::UnboundedReceiver<notify::Result<notify::Event>>) {
        loop {
            // Wait for a change to a watched file, then for quiet.
            loop {
                match events.recv().await {
                    Some(Ok(event)) if self.snapshot.concerns(&event) => break,
                    Some(Ok(_)) => continue,
                    Some(Err(error)) => {
                        tracing::warn!(event = "watch.error", "file watch error: {error}");
                    }
                    None => return,
                }
            }
            loop {
                match tokio::time::timeout(QUIET_PERIOD, events.recv()).await {
                    Ok(Some(_)) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            self.reload().await;
        }
    }

    /// Loads the bundle again and applies what changed.
    async fn reload(&mut self) {
        let started = Instant::now();
        let Some(bundle) = self.load() else {
            return;
        };
        let swarm_name = self.project.swarm_name.clone();
        if bundle.swarm(&swarm_name).is_none() {
            eprintln!(
                "watch: error[E_CONFIG_REF_NOT_FOUND]: Swarm/{swarm_name} is no longer defined; the swarm runs on unchanged"
            );
            tracing::warn!(event = "watch.rejected", swarm = %swarm_name, "the running swarm vanished from the bundle");
            return;
        }
        let snapshot = Snapshot::of(&bundle, &swarm_name, &self.source);
        let change = self.snapshot.compare(&snapshot);
        self.project.bundle = bundle;
        self.snapshot = snapshot;
        watch_dirs(&mut self.watcher, &mut self.watched_dirs, &self.snapshot);
        if change.changed.is_empty() {
            tracing::debug!(
                event = "watch.unchanged",
                "files changed, the bundle did not"
            );
            return;
        }
        let info = match super::run::swarm_info(&self.project) {
            Ok(info) => info,
            Err(error) => {
                eprintln!("watch: error: {error:#}");
                return;
            }
        };
        let grace = info.grace_period;
        let outcome = self.apply(info, &change, grace).await;
        let elapsed = started.elapsed();
        let changed = change.changed.join(", ");
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
        eprintln!(
            "watch: reloaded in {} ms: changed {changed}; restarted {restarted}",
            elapsed.as_millis()
        );
        tracing::info!(
            event = "watch.reloaded",
            changed = %changed,
            restarted = %restarted,
            elapsed_ms = elapsed.as_millis() as u64,
            "bundle reloaded"
        );
    }

    /// The new bundle, or `None` after printing why it is refused.
    fn load(&self) -> Option<Bundle> {
        let loaded = crate::project::load_reporting(
            &self.source.config,
            self.source.env_file.clone(),
            self.source.format,
            self.source.quiet,
        );
        let diagnostics = match loaded {
            Ok(Ok(bundle)) => return Some(bundle),
            Ok(Err(not_loaded)) => not_loaded.diagnostics,
            // Printing the diagnostics failed; the edit is refused all the same.
            Err(_) => 0,
        };
        eprintln!("watch: the edit is invalid; the swarm runs on unchanged");
        tracing::warn!(
            event = "watch.rejected",
            errors = diagnostics,
            "the edited bundle is invalid; nothing was restarted"
        );
        None
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
    fn of(bundle: &Bundle, swarm_name: &str, source: &Source) -> Snapshot {
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
