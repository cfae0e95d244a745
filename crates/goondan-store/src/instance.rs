//! Instances as a whole: [`InstanceStore`] opens one under its single-writer
//! lock and hands out its journal, extension state, runtime event log and
//! metadata ([`Instance`]); it also lists, deletes and resets instances for
//! the CLI, leaving an audit line for each lifecycle operation.
//!
//! Every handle of an open instance shares the lock, so the lock lasts
//! until the last of them is dropped, however the runtime spreads them
//! around. Operations on an instance that is not open (delete, reset,
//! metadata updates by the orchestrator) take the lock for their duration
//! and fail with `E_STORE_INSTANCE_LOCKED` while a writer holds it.

use crate::durability::{create_dir_all, open_append, SyncPolicy};
use crate::extension_state::FileExtensionState;
use crate::journal::FileJournal;
use crate::jsonl::truncate;
use crate::lock::InstanceLock;
use crate::metadata::{InstanceMetadata, InstanceStatus};
use crate::paths::{decode_path_component, InstancePaths, WorkspacePaths};
use crate::runtime_events::RuntimeEventLog;
use crate::StoreError;
use goondan_types::JsonObject;
use goondan_types::RoutingKey;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Prefix of folders being deleted; listings skip them.
const DELETING_PREFIX: &str = ".deleting-";

/// The instances of one workspace.
#[derive(Debug, Clone)]
pub struct InstanceStore {
    workspace: WorkspacePaths,
    policy: SyncPolicy,
    lock_wait: Duration,
}

impl InstanceStore {
    /// A store over `workspace` with the default [`SyncPolicy`] and no
    /// waiting for a held lock.
    pub fn new(workspace: WorkspacePaths) -> Self {
        InstanceStore {
            workspace,
            policy: SyncPolicy::default(),
            lock_wait: Duration::ZERO,
        }
    }

    /// Uses `policy` for the message logs and extension state written
    /// through this store (`metadata.json` is advisory and never synced).
    pub fn with_sync_policy(mut self, policy: SyncPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Retries a held lock for up to `wait` before failing, for a process
    /// that restarts an instance whose previous owner is still exiting.
    pub fn with_lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    /// The workspace.
    pub fn workspace(&self) -> &WorkspacePaths {
        &self.workspace
    }

    /// Opens (creating if needed) the instance `agent_name` serves for
    /// `instance_key`: takes the lock, bumps the epoch in `metadata.json`,
    /// and recovers the message log from any crash.
    pub fn open(&self, agent_name: &str, instance_key: &str) -> Result<Instance, StoreError> {
        let paths = self.workspace.instance(agent_name, instance_key);
        create_dir_all(paths.dir())?;
        let lock = Arc::new(InstanceLock::acquire(
            &paths.lock_file(),
            instance_key,
            self.lock_wait,
        )?);
        // Under the lock, so no other writer sees the file between the move
        // and the rewrite below.
        let (existing, metadata_warning) = InstanceMetadata::read_or_rebuild(
            &paths.metadata_file(),
            agent_name,
            instance_key,
            &paths.base_log(),
        )?;
        let mut metadata = match existing {
            Some(existing) => {
                check_owner(&existing, agent_name, instance_key, paths.dir())?;
                existing
            }
            None => InstanceMetadata::new(agent_name, instance_key),
        };
        metadata.epoch = metadata.epoch.saturating_add(1);
        // Whatever Turn the last owner was running is over now.
        metadata.status = InstanceStatus::Idle;
        metadata.updated_at = goondan_types::now_iso();
        metadata.write(&paths.metadata_file())?;
        create_dir_all(&paths.extensions_dir())?;

        let journal = FileJournal::open(paths.clone(), self.policy, lock.clone())?;
        let runtime_events = RuntimeEventLog::open(paths.runtime_events_log(), lock.clone())?;
        let extension_state = FileExtensionState::new(paths.clone(), self.policy, lock.clone());
        Ok(Instance {
            journal,
            extension_state,
            runtime_events,
            warnings: metadata_warning.into_iter().collect(),
            metadata: MetadataFile {
                paths,
                metadata,
                _lock: lock,
            },
        })
    }

    /// Every instance of the workspace, sorted by agent and key. A folder
    /// whose `metadata.json` is missing or unreadable is still listed, with
    /// the names decoded from the folder and no metadata.
    pub fn list(&self) -> Result<Vec<InstanceSummary>, StoreError> {
        let instances_dir = self.workspace.instances_dir();
        let entries = match std::fs::read_dir(&instances_dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(StoreError::io("listing", instances_dir, source)),
        };
        let mut summaries = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|source| StoreError::io("listing", &instances_dir, source))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !entry.path().is_dir() {
                continue;
            }
            let paths = InstancePaths::from_dir(entry.path());
            let metadata = InstanceMetadata::read(&paths.metadata_file())
                .ok()
                .flatten();
            let (agent_name, instance_key) = match &metadata {
                Some(metadata) => (metadata.agent_name.clone(), metadata.instance_key.clone()),
                None => split_folder_name(&name),
            };
            summaries.push(InstanceSummary {
                dir: entry.path(),
                agent_name,
                instance_key,
                metadata,
            });
        }
        summaries.sort_by(|a, b| {
            (&a.agent_name, &a.instance_key).cmp(&(&b.agent_name, &b.instance_key))
        });
        Ok(summaries)
    }

    /// Removes the instance folder (messages, extension state, metadata)
    /// and appends an `instance.delete` line to the workspace audit log.
    /// Refused while the instance is open anywhere.
    pub fn delete(&self, agent_name: &str, instance_key: &str) -> Result<(), StoreError> {
        let paths = self.existing(agent_name, instance_key)?;
        let lock = InstanceLock::acquire(&paths.lock_file(), instance_key, self.lock_wait)?;
        if let Some(existing) = InstanceMetadata::read(&paths.metadata_file())
            .ok()
            .flatten()
        {
            check_owner(&existing, agent_name, instance_key, paths.dir())?;
        }
        // Renaming first makes the instance vanish at once; a crash during
        // the removal leaves only a dot-folder that listings skip.
        let folder = paths
            .dir()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let doomed = self
            .workspace
            .instances_dir()
            .join(format!("{DELETING_PREFIX}{}-{folder}", std::process::id()));
        std::fs::rename(paths.dir(), &doomed)
            .map_err(|source| StoreError::io("moving aside", paths.dir(), source))?;
        std::fs::remove_dir_all(&doomed)
            .map_err(|source| StoreError::io("removing", &doomed, source))?;
        drop(lock);
        self.audit("instance.delete", agent_name, instance_key)
    }

    /// Empties the message history (`base.jsonl`, `events.jsonl`,
    /// `runtime-events.jsonl`) for `gdn instance restart --fresh`, keeping
    /// extension state and metadata, and appends an `instance.reset` audit
    /// line. Refused while the instance is open anywhere.
    pub fn reset_messages(&self, agent_name: &str, instance_key: &str) -> Result<(), StoreError> {
        let paths = self.existing(agent_name, instance_key)?;
        let _lock = InstanceLock::acquire(&paths.lock_file(), instance_key, self.lock_wait)?;
        for path in [
            paths.base_log(),
            paths.events_log(),
            paths.runtime_events_log(),
        ] {
            if path.exists() {
                truncate(&path, 0)?;
            }
        }
        for leftover in [
            crate::durability::temp_path(&paths.base_log()),
            paths.orphaned_events_log(),
        ] {
            if leftover.exists() {
                std::fs::remove_file(&leftover)
                    .map_err(|source| StoreError::io("removing", &leftover, source))?;
            }
        }
        self.audit("instance.reset", agent_name, instance_key)
    }

    /// Changes the metadata of an instance that is not open, under its
    /// lock: how the orchestrator records a child's crash and its backoff
    /// deadline after the child died.
    pub fn update_metadata(
        &self,
        agent_name: &str,
        instance_key: &str,
        change: impl FnOnce(&mut InstanceMetadata),
    ) -> Result<InstanceMetadata, StoreError> {
        let paths = self.existing(agent_name, instance_key)?;
        let _lock = InstanceLock::acquire(&paths.lock_file(), instance_key, self.lock_wait)?;
        // A damaged file is rebuilt here as on open; the bytes moved aside
        // beside it are the record of that, since no opener is there to
        // log it.
        let (existing, _) = InstanceMetadata::read_or_rebuild(
            &paths.metadata_file(),
            agent_name,
            instance_key,
            &paths.base_log(),
        )?;
        let mut metadata = match existing {
            Some(existing) => {
                check_owner(&existing, agent_name, instance_key, paths.dir())?;
                existing
            }
            None => InstanceMetadata::new(agent_name, instance_key),
        };
        change(&mut metadata);
        metadata.updated_at = goondan_types::now_iso();
        metadata.write(&paths.metadata_file())?;
        Ok(metadata)
    }

    /// The store's [`SyncPolicy`].
    pub(crate) fn policy(&self) -> SyncPolicy {
        self.policy
    }

    /// How long a held lock is retried.
    pub(crate) fn lock_wait(&self) -> Duration {
        self.lock_wait
    }

    /// The paths of an instance that has a folder, or
    /// `E_STORE_INSTANCE_NOT_FOUND`.
    pub(crate) fn existing(
        &self,
        agent_name: &str,
        instance_key: &str,
    ) -> Result<InstancePaths, StoreError> {
        let paths = self.workspace.instance(agent_name, instance_key);
        if !paths.dir().is_dir() {
            return Err(StoreError::InstanceNotFound {
                agent_name: agent_name.to_string(),
                instance_key: instance_key.to_string(),
                dir: paths.dir().to_path_buf(),
            });
        }
        Ok(paths)
    }

    fn audit(&self, action: &str, agent_name: &str, instance_key: &str) -> Result<(), StoreError> {
        self.audit_with(action, agent_name, instance_key, JsonObject::new())
    }

    /// Appends an audit line for `action` on the instance, with `details`
    /// (who did it, from where) beside the common fields.
    pub(crate) fn audit_with(
        &self,
        action: &str,
        agent_name: &str,
        instance_key: &str,
        details: JsonObject,
    ) -> Result<(), StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct AuditLine<'a> {
            timestamp: String,
            action: &'a str,
            agent_name: &'a str,
            instance_key: &'a str,
            pid: u32,
            #[serde(flatten)]
            details: JsonObject,
        }
        let line = AuditLine {
            timestamp: goondan_types::now_iso(),
            action,
            agent_name,
            instance_key,
            pid: std::process::id(),
            details,
        };
        let mut bytes =
            serde_json::to_vec(&line).map_err(|e| StoreError::encode("an audit line", e))?;
        bytes.push(b'\n');
        let path = self.workspace.audit_log();
        create_dir_all(self.workspace.dir())?;
        open_append(&path)?
            .write_all(&bytes)
            .map_err(|source| StoreError::io("appending to", path, source))
    }
}

/// Refuses a folder whose metadata names another instance.
fn check_owner(
    existing: &InstanceMetadata,
    agent_name: &str,
    instance_key: &str,
    dir: &Path,
) -> Result<(), StoreError> {
    if existing.agent_name == agent_name && existing.instance_key == instance_key {
        return Ok(());
    }
    // Metadata written by the original names the routing key as its
    // instance key; that is the same instance.
    if existing.agent_name == agent_name
        && existing.instance_key == RoutingKey::new(agent_name, instance_key).to_string()
    {
        return Ok(());
    }
    Err(StoreError::InstanceKeyConflict {
        instance_key: RoutingKey::new(agent_name, instance_key).to_string(),
        existing_key: RoutingKey::new(&existing.agent_name, &existing.instance_key).to_string(),
        dir: dir.to_path_buf(),
    })
}

/// The agent and instance key encoded in a folder name, as far as it can
/// be decoded.
fn split_folder_name(name: &str) -> (String, String) {
    let decoded = decode_path_component(name).unwrap_or_else(|| name.to_string());
    match RoutingKey::split_whole(&decoded) {
        Some(key) => (key.agent_name, key.instance_key),
        None => (String::new(), decoded),
    }
}

/// One row of [`InstanceStore::list`].
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceSummary {
    /// The instance folder.
    pub dir: PathBuf,
    /// The agent.
    pub agent_name: String,
    /// The instance key.
    pub instance_key: String,
    /// Status and timestamps; `None` when `metadata.json` is missing or
    /// unreadable.
    pub metadata: Option<InstanceMetadata>,
}

impl InstanceSummary {
    /// Its routing key, `agent:instanceKey`.
    pub fn routing_key(&self) -> RoutingKey {
        RoutingKey::new(&self.agent_name, &self.instance_key)
    }
}

/// An open instance: everything one AgentProcess writes.
#[derive(Debug)]
pub struct Instance {
    journal: FileJournal,
    extension_state: FileExtensionState,
    runtime_events: RuntimeEventLog,
    warnings: Vec<String>,
    metadata: MetadataFile,
}

impl Instance {
    /// What opening repaired outside the message log (a damaged
    /// `metadata.json` rebuilt, for example), for the opener to log; the
    /// journal reports its own recovery in
    /// [`crate::LoadedConversation::warnings`].
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The instance's files.
    pub fn paths(&self) -> &InstancePaths {
        &self.metadata.paths
    }

    /// The current metadata.
    pub fn metadata(&self) -> &InstanceMetadata {
        &self.metadata.metadata
    }

    /// The epoch this open got.
    pub fn epoch(&self) -> u64 {
        self.metadata.metadata.epoch
    }

    /// The message log.
    pub fn journal_mut(&mut self) -> &mut FileJournal {
        &mut self.journal
    }

    /// The extension state files.
    pub fn extension_state_mut(&mut self) -> &mut FileExtensionState {
        &mut self.extension_state
    }

    /// The runtime event log.
    pub fn runtime_events(&self) -> &RuntimeEventLog {
        &self.runtime_events
    }

    /// The metadata file.
    pub fn metadata_file_mut(&mut self) -> &mut MetadataFile {
        &mut self.metadata
    }

    /// Splits the instance into handles that can live in different parts
    /// of the runtime; the lock is held until all of them are dropped.
    pub fn into_parts(self) -> InstanceParts {
        InstanceParts {
            journal: self.journal,
            extension_state: self.extension_state,
            runtime_events: self.runtime_events,
            metadata: self.metadata,
        }
    }
}

/// The handles of an open instance, from [`Instance::into_parts`].
#[derive(Debug)]
pub struct InstanceParts {
    /// The message log.
    pub journal: FileJournal,
    /// The extension state files.
    pub extension_state: FileExtensionState,
    /// The runtime event log.
    pub runtime_events: RuntimeEventLog,
    /// The metadata file.
    pub metadata: MetadataFile,
}

/// `metadata.json` of an open instance, rewritten atomically on each change.
#[derive(Debug)]
pub struct MetadataFile {
    paths: InstancePaths,
    metadata: InstanceMetadata,
    _lock: Arc<InstanceLock>,
}

impl MetadataFile {
    /// The current content.
    pub fn get(&self) -> &InstanceMetadata {
        &self.metadata
    }

    /// Marks a Turn as running or finished.
    pub fn set_status(&mut self, status: InstanceStatus) -> Result<(), StoreError> {
        self.update(|metadata| metadata.status = status)
    }

    /// Applies `change`, stamps `updatedAt` and writes the file.
    pub fn update(&mut self, change: impl FnOnce(&mut InstanceMetadata)) -> Result<(), StoreError> {
        let mut next = self.metadata.clone();
        change(&mut next);
        next.updated_at = goondan_types::now_iso();
        next.write(&self.paths.metadata_file())?;
        self.metadata = next;
        Ok(())
    }
}
