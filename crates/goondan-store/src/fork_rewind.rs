//! Fork and rewind: an instance whose history is another's up to the end
//! of one of its Turns ([`InstanceStore::fork`]), and an instance moved
//! back to the end of one of its Turns ([`InstanceStore::rewind`]), the
//! extension state following the conversation either way.
//!
//! Both work on an instance nobody writes: under its single-writer lock
//! (so a running agent process refuses them with
//! `E_STORE_INSTANCE_LOCKED`; an orchestrator stops it first, see
//! `goondan-orchestrator`'s hold), after the journal's crash recovery, so
//! `base.jsonl` is exactly what its commits made it.
//!
//! # The archive
//!
//! A rewind never deletes: what it cuts goes to
//! `messages/archive/<archiveId>/` (`<archiveId>` is the UTC time and a
//! random suffix, so folders sort by time), written in full under a
//! dot-name and renamed into place before the log is cut:
//!
//! - `base.jsonl`: the cut lines of `base.jsonl`, byte for byte;
//! - `events.jsonl`: the events of an interrupted Turn that were pending,
//!   byte for byte (only when there were some);
//! - `extension-snapshots.jsonl`: the cut lines of
//!   `extensions/snapshots.jsonl`;
//! - `extensions/<ext-name>.json`: each state file the rewind replaced or
//!   removed, as it was;
//! - `manifest.json`: [`RewindManifest`].
//!
//! A crash after the rename and before the cut leaves the archive and the
//! log both holding the Turns: nothing is lost, and the log is as before.

use crate::durability::{create_dir_all, sync_dir, sync_file, write_file_atomically};
use crate::extension_snapshots::{state_before, StateBefore};
use crate::extension_state::extension_state_files;
use crate::instance::InstanceStore;
use crate::jsonl::truncate;
use crate::lock::InstanceLock;
use crate::metadata::InstanceMetadata;
use crate::paths::InstancePaths;
use crate::tail::TailLimits;
use crate::turns::{delimit_turns, join_runtime_events, read_turn_history};

/// The history a fork or a rewind cuts by: the Turns of the log, joined
/// with the runtime events only when a Turn's input does not name it
/// (a log from before Turn ids were recorded), since nothing else of the
/// join (outcomes, costs) is needed to cut.
fn history_to_cut(paths: &InstancePaths) -> Result<TurnHistory, StoreError> {
    let mut history = delimit_turns(&paths.base_log(), TailLimits::default())?;
    if history.turns.iter().any(|turn| !turn.id_recorded) {
        join_runtime_events(
            &mut history.turns,
            &paths.runtime_events_log(),
            TailLimits::default(),
        )?;
    }
    Ok(history)
}
use crate::{StoreError, TurnHistory, TurnRecord, TurnRef};
use goondan_types::{JsonObject, JsonValue, RoutingKey};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the extension state of a fork or a rewind came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ExtensionStateSource {
    /// The snapshot of the state the Turn ended with.
    Snapshot,
    /// No later Turn changed it: the current state is the one the Turn
    /// ended with.
    Unchanged,
    /// A later Turn ran before per-Turn snapshots existed, so the state
    /// the Turn ended with is unknown; the current state was used.
    CurrentFallback,
}

impl ExtensionStateSource {
    /// True unless the state had to fall back to the current one.
    pub fn is_exact(self) -> bool {
        self != ExtensionStateSource::CurrentFallback
    }
}

/// A Turn as a fork or a rewind names it in the records they leave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnPoint {
    /// The Turn's id, when known.
    pub turn_id: Option<String>,
    /// Its 1-based position in the history.
    pub turn_index: usize,
}

/// What [`InstanceStore::fork`] made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkReport {
    /// The agent (the same as the original's).
    pub agent_name: String,
    /// The new instance.
    pub instance_key: String,
    /// Its folder.
    pub dir: PathBuf,
    /// The original instance.
    pub forked_from: String,
    /// The Turn its history ends with.
    pub at: TurnPoint,
    /// Messages it holds.
    pub n_messages: usize,
    /// Where its extension state came from.
    pub extension_state: ExtensionStateSource,
}

/// What [`InstanceStore::rewind`] did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RewindReport {
    /// The agent.
    pub agent_name: String,
    /// The instance.
    pub instance_key: String,
    /// The Turn the history now ends with.
    pub to: TurnPoint,
    /// Where what was cut went; `None` when the Turn already was the last
    /// and nothing was pending (nothing changed).
    pub archive: Option<ArchiveSummary>,
    /// Where its extension state came from.
    pub extension_state: ExtensionStateSource,
}

/// One archive a rewind wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveSummary {
    /// The archive's id (its folder name).
    pub id: String,
    /// Its folder.
    pub dir: PathBuf,
    /// Turns cut.
    pub n_turns: usize,
    /// Messages cut (pending events aside).
    pub n_messages: usize,
    /// Pending events of an interrupted Turn that were moved there.
    pub n_pending_events: usize,
}

/// `manifest.json` of an archive (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RewindManifest {
    /// When the rewind ran (ISO 8601).
    pub archived_at: String,
    /// Who ran it (`cli`).
    pub by: String,
    /// The agent.
    pub agent_name: String,
    /// The instance.
    pub instance_key: String,
    /// The Turn the history was moved back to.
    pub rewound_to: TurnPoint,
    /// The Turns cut, oldest first.
    pub turn_ids: Vec<Option<String>>,
    /// The length of `base.jsonl` before the rewind.
    pub base_bytes_before: u64,
    /// Its length after: where the archived `base.jsonl` was cut from.
    pub base_bytes_after: u64,
    /// Where the extension state the instance got came from.
    pub extension_state: ExtensionStateSource,
}

/// The Turns one rewind archived.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchivedTurns {
    /// The archive's id.
    pub id: String,
    /// Its folder.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: RewindManifest,
    /// Its Turns, numbered as they were in the history before the
    /// rewind.
    pub turns: Vec<TurnRecord>,
}

/// A new instance key for a fork of `instance_key` when the person
/// named none: `<instanceKey>-fork-<6 hex digits>`.
pub fn fork_key(instance_key: &str) -> String {
    format!(
        "{instance_key}-fork-{}",
        goondan_types::trace::random_hex(3)
    )
}

/// Prefix of folders being assembled; listings skip them.
const STAGING_PREFIX: &str = ".staging-";

impl InstanceStore {
    /// The Turns of the instance `agent_name` serves for `instance_key`,
    /// read within `limits` (see [`crate::read_turn_history`]). Read-only
    /// and lock-free: it may run while the instance's process writes.
    pub fn history(
        &self,
        agent_name: &str,
        instance_key: &str,
        limits: TailLimits,
    ) -> Result<TurnHistory, StoreError> {
        let paths = self.existing(agent_name, instance_key)?;
        read_turn_history(&paths, limits)
    }

    /// The Turns rewinds of the instance archived, oldest rewind first,
    /// each numbered as it was before its rewind; joined with the
    /// instance's runtime events.
    pub fn archived_history(
        &self,
        agent_name: &str,
        instance_key: &str,
    ) -> Result<Vec<ArchivedTurns>, StoreError> {
        let paths = self.existing(agent_name, instance_key)?;
        let archive_dir = paths.archive_dir();
        let entries = match std::fs::read_dir(&archive_dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(StoreError::io("listing", archive_dir, source)),
        };
        let mut ids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|entry| entry.path().is_dir())
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| !name.starts_with('.'))
            .collect();
        ids.sort();
        let mut archives = Vec::with_capacity(ids.len());
        for id in ids {
            let dir = archive_dir.join(&id);
            let manifest_path = dir.join("manifest.json");
            let manifest: RewindManifest = match std::fs::read(&manifest_path) {
                Ok(bytes) => {
                    serde_json::from_slice(&bytes).map_err(|error| StoreError::CorruptState {
                        path: manifest_path.clone(),
                        reason: error.to_string(),
                    })?
                }
                Err(source) => return Err(StoreError::io("reading", manifest_path, source)),
            };
            let mut turns = delimit_turns(&dir.join("base.jsonl"), TailLimits::default())?.turns;
            for turn in &mut turns {
                turn.index = turn
                    .index
                    .map(|index| index + manifest.rewound_to.turn_index);
            }
            join_runtime_events(
                &mut turns,
                &paths.runtime_events_log(),
                TailLimits::default(),
            )?;
            archives.push(ArchivedTurns {
                id,
                dir,
                manifest,
                turns,
            });
        }
        Ok(archives)
    }

    /// Checks, without the lock and writing nothing, what
    /// [`InstanceStore::fork`] (with `new_instance_key`) or
    /// [`InstanceStore::rewind`] (without) would refuse first: Turn
    /// `turn` is not in the instance's log (`E_TURN_NOT_FOUND`), or the
    /// new key is taken (`E_INSTANCE_EXISTS`). A caller that must stop the
    /// instance's process before rewriting it checks first, so a wrong
    /// request stops nothing; both check again under the lock.
    pub fn check_rewrite(
        &self,
        agent_name: &str,
        instance_key: &str,
        turn: &TurnRef,
        new_instance_key: Option<&str>,
    ) -> Result<(), StoreError> {
        let paths = self.existing(agent_name, instance_key)?;
        find_turn(&history_to_cut(&paths)?, turn, agent_name, instance_key)?;
        if let Some(new_instance_key) = new_instance_key {
            let destination = self.workspace().instance(agent_name, new_instance_key);
            if new_instance_key == instance_key || destination.dir().exists() {
                return Err(StoreError::InstanceExists {
                    instance: RoutingKey::new(agent_name, new_instance_key).to_string(),
                    dir: destination.dir().to_path_buf(),
                });
            }
        }
        Ok(())
    }

    /// Makes instance `new_instance_key` of the same agent, whose history
    /// is exactly that of `instance_key` up to the end of Turn `at`, and
    /// whose extension state is the one that Turn ended with (see
    /// [`ExtensionStateSource`]). The original is only read. Its
    /// `metadata.json` records `forkedFrom` (`instanceKey`, `turnId`,
    /// `turnIndex`, `forkedAt`, `by`), and the workspace audit log an
    /// `instance.fork` line.
    ///
    /// Refused, with nothing written, when the original is open elsewhere
    /// (`E_STORE_INSTANCE_LOCKED`), the Turn is not in its log
    /// (`E_TURN_NOT_FOUND`) or the new key is taken (`E_INSTANCE_EXISTS`).
    pub fn fork(
        &self,
        agent_name: &str,
        instance_key: &str,
        at: &TurnRef,
        new_instance_key: &str,
        by: &str,
    ) -> Result<ForkReport, StoreError> {
        let destination = self.workspace().instance(agent_name, new_instance_key);
        let refuse_existing = || StoreError::InstanceExists {
            instance: RoutingKey::new(agent_name, new_instance_key).to_string(),
            dir: destination.dir().to_path_buf(),
        };
        if new_instance_key == instance_key || destination.dir().exists() {
            return Err(refuse_existing());
        }
        let (paths, _lock) = self.quiescent(agent_name, instance_key, Recovery::IfPending)?;
        let history = history_to_cut(&paths)?;
        let turn = find_turn(&history, at, agent_name, instance_key)?;
        let (state, source) = state_after(&paths, &history, turn)?;
        // Only a snapshot replaces the current state files.
        let snapshot = state
            .states
            .as_ref()
            .filter(|_| source == ExtensionStateSource::Snapshot);
        let durable = self.policy().syncs_commits();

        let staging = self.workspace().instances_dir().join(format!(
            "{STAGING_PREFIX}{}-{}",
            std::process::id(),
            goondan_types::trace::random_hex(6)
        ));
        let built = (|| {
            let staged = InstancePaths::from_dir(&staging);
            create_dir_all(&staged.messages_dir())?;
            create_dir_all(&staged.extensions_dir())?;
            copy_range(&paths.base_log(), 0, turn.end, &staged.base_log(), durable)?;
            let kept_snapshots = match source {
                ExtensionStateSource::Snapshot => state.keep_bytes,
                ExtensionStateSource::Unchanged => state.len,
                // Lines of Turns it does not hold would only mislead a
                // later fork of the fork; its first change starts anew.
                ExtensionStateSource::CurrentFallback => 0,
            };
            copy_range(
                &paths.extension_snapshots_log(),
                0,
                kept_snapshots,
                &staged.extension_snapshots_log(),
                durable,
            )?;
            for (name, file) in extension_state_files(&paths)? {
                let bytes = match snapshot.and_then(|states| states.get(&name)) {
                    Some(JsonValue::Null) => continue,
                    Some(value) => crate::encode_state(value)?,
                    None => read(&file)?,
                };
                write_file_atomically(&staged.extension_state_file(&name), &bytes, self.policy())?;
            }
            if let Some(states) = snapshot {
                for (name, value) in states.iter().filter(|(_, value)| !value.is_null()) {
                    let file = staged.extension_state_file(name);
                    if !file.exists() {
                        write_file_atomically(&file, &crate::encode_state(value)?, self.policy())?;
                    }
                }
            }
            let mut metadata = InstanceMetadata::new(agent_name, new_instance_key);
            metadata.extra.insert(
                "forkedFrom".into(),
                serde_json::json!({
                    "instanceKey": instance_key,
                    "turnId": turn.turn_id,
                    "turnIndex": turn.index,
                    "forkedAt": goondan_types::now_iso(),
                    "by": by,
                }),
            );
            metadata.write(&staged.metadata_file())?;
            sync_dir(&staged.messages_dir(), self.policy().syncs_commits())
        })();
        let placed = built.and_then(|()| {
            // A folder that appeared meanwhile is never replaced.
            if destination.dir().exists() {
                return Err(refuse_existing());
            }
            std::fs::rename(&staging, destination.dir())
                .map_err(|source| StoreError::io("moving into place", destination.dir(), source))
        });
        if let Err(error) = placed {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(error);
        }
        sync_dir(
            &self.workspace().instances_dir(),
            self.policy().syncs_commits(),
        )?;
        let at = TurnPoint {
            turn_id: turn.turn_id.clone(),
            turn_index: turn.index.unwrap_or_default(),
        };
        let mut details = JsonObject::new();
        details.insert("forkedFrom".into(), instance_key.into());
        details.insert("at".into(), serde_json::to_value(&at).unwrap_or_default());
        details.insert("by".into(), by.into());
        self.audit_with("instance.fork", agent_name, new_instance_key, details)?;
        Ok(ForkReport {
            agent_name: agent_name.to_string(),
            instance_key: new_instance_key.to_string(),
            dir: destination.dir().to_path_buf(),
            forked_from: instance_key.to_string(),
            at,
            n_messages: history
                .turns
                .iter()
                .take_while(|t| t.start < turn.end)
                .map(|t| t.n_messages)
                .sum::<usize>()
                + history.n_prelude_messages,
            extension_state: source,
        })
    }

    /// Moves the instance back to the end of Turn `to`: the lines after it
    /// (and the pending events of an interrupted Turn) go to an archive
    /// beside the log (see the module docs), and the extension state
    /// becomes the one that Turn ended with (see
    /// [`ExtensionStateSource`]). The workspace audit log gets an
    /// `instance.rewind` line.
    ///
    /// Refused, with nothing written, when the instance is open elsewhere
    /// (`E_STORE_INSTANCE_LOCKED`) or the Turn is not in its log
    /// (`E_TURN_NOT_FOUND`).
    pub fn rewind(
        &self,
        agent_name: &str,
        instance_key: &str,
        to: &TurnRef,
        by: &str,
    ) -> Result<RewindReport, StoreError> {
        let (paths, _lock) = self.quiescent(agent_name, instance_key, Recovery::Always)?;
        let history = history_to_cut(&paths)?;
        let turn = find_turn(&history, to, agent_name, instance_key)?;
        let point = TurnPoint {
            turn_id: turn.turn_id.clone(),
            turn_index: turn.index.unwrap_or_default(),
        };
        let pending = read(&paths.events_log())?;
        let (state, source) = state_after(&paths, &history, turn)?;
        let durable = self.policy().syncs_commits();
        let report = |archive| RewindReport {
            agent_name: agent_name.to_string(),
            instance_key: instance_key.to_string(),
            to: point.clone(),
            archive,
            extension_state: source,
        };
        if turn.end >= history.log_end && pending.is_empty() {
            return Ok(report(None));
        }
        let cut_turns: Vec<&TurnRecord> = history
            .turns
            .iter()
            .filter(|t| t.start >= turn.end)
            .collect();

        // Everything the rewind removes or replaces is archived first.
        let id = new_archive_id();
        let archive_dir = paths.archive_dir();
        let staging = archive_dir.join(format!("{STAGING_PREFIX}{id}"));
        let final_dir = archive_dir.join(&id);
        let restored: Vec<(String, PathBuf, Option<Vec<u8>>)> = match &state.states {
            Some(states) if source == ExtensionStateSource::Snapshot => states
                .iter()
                .map(|(name, value)| {
                    let bytes = match value {
                        JsonValue::Null => None,
                        value => Some(crate::encode_state(value)?),
                    };
                    Ok((name.clone(), paths.extension_state_file(name), bytes))
                })
                .collect::<Result<_, StoreError>>()?,
            _ => Vec::new(),
        };
        let staged = (|| {
            create_dir_all(&staging)?;
            copy_range(
                &paths.base_log(),
                turn.end,
                history.log_end,
                &staging.join("base.jsonl"),
                durable,
            )?;
            if !pending.is_empty() {
                write_file_atomically(&staging.join("events.jsonl"), &pending, self.policy())?;
            }
            if source == ExtensionStateSource::Snapshot {
                copy_range(
                    &paths.extension_snapshots_log(),
                    state.keep_bytes,
                    state.len,
                    &staging.join("extension-snapshots.jsonl"),
                    durable,
                )?;
            }
            for (_, file, target) in &restored {
                let current = read_optional(file)?;
                if current.is_some() && current != *target {
                    let kept = staging.join("extensions");
                    create_dir_all(&kept)?;
                    let name = file.file_name().unwrap_or_default();
                    write_file_atomically(
                        &kept.join(name),
                        current.as_deref().unwrap_or_default(),
                        self.policy(),
                    )?;
                }
            }
            let manifest = RewindManifest {
                archived_at: goondan_types::now_iso(),
                by: by.to_string(),
                agent_name: agent_name.to_string(),
                instance_key: instance_key.to_string(),
                rewound_to: point.clone(),
                turn_ids: cut_turns.iter().map(|t| t.turn_id.clone()).collect(),
                base_bytes_before: history.log_end,
                base_bytes_after: turn.end,
                extension_state: source,
            };
            let bytes = serde_json::to_vec_pretty(&manifest)
                .map_err(|e| StoreError::encode("a rewind manifest", e))?;
            write_file_atomically(&staging.join("manifest.json"), &bytes, self.policy())?;
            std::fs::rename(&staging, &final_dir)
                .map_err(|source| StoreError::io("moving into place", &final_dir, source))?;
            sync_dir(&archive_dir, self.policy().syncs_commits())
        })();
        if let Err(error) = staged {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(error);
        }

        // Then the log is cut: pending events first, so no recovery can
        // replay them onto the shorter base.
        truncate(&paths.events_log(), 0)?;
        truncate(&paths.base_log(), turn.end)?;
        sync_path(&paths.base_log(), self.policy().syncs_commits())?;
        if source == ExtensionStateSource::Snapshot {
            truncate(&paths.extension_snapshots_log(), state.keep_bytes)?;
            for (_, file, target) in &restored {
                match target {
                    Some(bytes) => write_file_atomically(file, bytes, self.policy())?,
                    None => match std::fs::remove_file(file) {
                        Ok(()) => {}
                        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                        Err(source) => return Err(StoreError::io("removing", file, source)),
                    },
                }
            }
        }
        let mut details = JsonObject::new();
        details.insert(
            "to".into(),
            serde_json::to_value(&point).unwrap_or_default(),
        );
        details.insert("archive".into(), id.clone().into());
        details.insert("by".into(), by.into());
        self.audit_with("instance.rewind", agent_name, instance_key, details)?;
        Ok(report(Some(ArchiveSummary {
            id,
            dir: final_dir,
            n_turns: cut_turns.len(),
            n_messages: cut_turns.iter().map(|t| t.n_messages).sum(),
            n_pending_events: pending
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .count(),
        })))
    }

    /// Takes the instance's lock and runs the journal's crash recovery, so
    /// its files are exactly what its commits made them, and nobody writes
    /// them while the lock is held.
    pub(crate) fn quiescent(
        &self,
        agent_name: &str,
        instance_key: &str,
        recovery: Recovery,
    ) -> Result<(InstancePaths, Arc<InstanceLock>), StoreError> {
        let paths = self.existing(agent_name, instance_key)?;
        let lock = Arc::new(InstanceLock::acquire(
            &paths.lock_file(),
            instance_key,
            self.lock_wait(),
        )?);
        // For a reader (a fork), only events (or a rewrite's temporary
        // base) can need recovery; without them the base is what its
        // commits made it, a torn last line aside, which no Turn reaches,
        // and skipping the open spares a parse of every message. A writer
        // (a rewind) always recovers, so a torn last line is settled by the
        // journal's rules before the log is cut.
        let pending = std::fs::metadata(paths.events_log()).is_ok_and(|m| m.len() > 0)
            || crate::durability::temp_path(&paths.base_log()).exists();
        if pending || recovery == Recovery::Always {
            drop(crate::journal::FileJournal::open(
                paths.clone(),
                self.policy(),
                lock.clone(),
            )?);
        }
        Ok((paths, lock))
    }
}

/// When [`InstanceStore::quiescent`] runs the journal's crash recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recovery {
    /// Only when something is pending (a reader).
    IfPending,
    /// Always (a writer).
    Always,
}

/// The Turn `turn` names in `history`, or `E_TURN_NOT_FOUND`.
fn find_turn<'h>(
    history: &'h TurnHistory,
    turn: &TurnRef,
    agent_name: &str,
    instance_key: &str,
) -> Result<&'h TurnRecord, StoreError> {
    history.find(turn).ok_or_else(|| StoreError::TurnNotFound {
        instance: RoutingKey::new(agent_name, instance_key).to_string(),
        turn: turn.to_string(),
        n_turns: history.turns.len(),
    })
}

/// The extension state Turn `turn` ended with, and where it comes from.
fn state_after(
    paths: &InstancePaths,
    history: &TurnHistory,
    turn: &TurnRecord,
) -> Result<(StateBefore, ExtensionStateSource), StoreError> {
    let later_turns: Vec<&TurnRecord> = history
        .turns
        .iter()
        .filter(|t| t.start >= turn.end)
        .collect();
    let later: HashSet<&str> = later_turns
        .iter()
        .filter_map(|t| t.turn_id.as_deref())
        .collect();
    let state = state_before(paths, &later)?;
    // Changes of a Turn that did not record its id were never snapshotted;
    // one of them after `turn` makes the snapshot's answer unknowable.
    let exact = later_turns.iter().all(|t| t.id_recorded);
    let source = match (&state.states, exact) {
        (_, false) => ExtensionStateSource::CurrentFallback,
        (Some(_), true) => ExtensionStateSource::Snapshot,
        (None, true) => ExtensionStateSource::Unchanged,
    };
    Ok((state, source))
}

/// The whole file; empty when it does not exist.
fn read(path: &Path) -> Result<Vec<u8>, StoreError> {
    Ok(read_optional(path)?.unwrap_or_default())
}

/// The whole file; `None` when it does not exist.
fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StoreError::io("reading", path, source)),
    }
}

/// Copies bytes `start..end` of `from` (streamed) into a new file `to`,
/// flushed to the disk when `durable`.
fn copy_range(
    from: &Path,
    start: u64,
    end: u64,
    to: &Path,
    durable: bool,
) -> Result<(), StoreError> {
    let mut output = crate::owner_only::open_options()
        .write(true)
        .create_new(true)
        .open(to)
        .map_err(|source| StoreError::io("creating", to, source))?;
    if end > start {
        let mut input =
            std::fs::File::open(from).map_err(|source| StoreError::io("opening", from, source))?;
        input
            .seek(SeekFrom::Start(start))
            .map_err(|source| StoreError::io("reading", from, source))?;
        let copied = std::io::copy(&mut input.take(end - start), &mut output)
            .map_err(|source| StoreError::io("copying into", to, source))?;
        if copied != end - start {
            return Err(StoreError::io(
                "copying from",
                from,
                std::io::ErrorKind::UnexpectedEof.into(),
            ));
        }
    }
    output
        .flush()
        .map_err(|source| StoreError::io("writing", to, source))?;
    sync_file(&output, to, durable)
}

/// Flushes an existing file to the disk when `enabled`.
fn sync_path(path: &Path, enabled: bool) -> Result<(), StoreError> {
    if !enabled {
        return Ok(());
    }
    let file =
        std::fs::File::open(path).map_err(|source| StoreError::io("opening", path, source))?;
    sync_file(&file, path, true)
}

/// A new archive id: the UTC time and a random suffix
/// (`20261127T224329Z-6f7a36`), so the archives of one instance sort by
/// time, and a safe folder or object name. A cluster's rewind names its
/// archive object with one too.
pub fn new_archive_id() -> String {
    format!(
        "{}-{}",
        archive_stamp(),
        goondan_types::trace::random_hex(3)
    )
}

/// The UTC time as `YYYYMMDDTHHMMSSZ`, from the ISO time the workspace
/// uses everywhere else: sorts like the time, and is a safe folder name.
fn archive_stamp() -> String {
    goondan_types::now_iso()
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .take(15)
        .collect::<String>()
        + "Z"
}
