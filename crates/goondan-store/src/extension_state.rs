//! [`FileExtensionState`]: `extensions/<ext-name>.json` of one instance
//! (`workspace.md` §7.4). A state is read from disk the first time it is
//! asked for, and written (temporary file, flush, rename) only when its
//! serialized form differs from what the file already holds.
//!
//! A file that exists but is not valid JSON is an error, not an absent
//! state: treating it as absent would overwrite it at the next save.
//!
//! When a Turn's saves changed a file, the end of the Turn
//! ([`ExtensionStateStore::end_turn`]) appends a snapshot of every state
//! to `extensions/snapshots.jsonl` (`crate::extension_snapshots`), so a
//! fork or a rewind can restore the state an earlier Turn ended with.

use crate::durability::{create_dir_all, write_file_atomically, SyncPolicy};
use crate::lock::InstanceLock;
use crate::paths::{decode_path_component, InstancePaths};
use crate::{ExtensionStateStore, StoreError};
use goondan_types::JsonValue;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::Arc;

/// Extension state files of one instance, from [`crate::Instance`].
#[derive(Debug)]
pub struct FileExtensionState {
    paths: InstancePaths,
    policy: SyncPolicy,
    /// The bytes each file holds, as last read or written; `None` when the
    /// file does not exist.
    on_disk: HashMap<String, Option<Vec<u8>>>,
    /// `on_disk` as it was before the first change since the last
    /// snapshot; `None` while nothing changed.
    before_changes: Option<HashMap<String, Option<Vec<u8>>>>,
    n_writes: u64,
    _lock: Arc<InstanceLock>,
}

impl FileExtensionState {
    /// The caller holds the instance lock.
    pub(crate) fn new(paths: InstancePaths, policy: SyncPolicy, lock: Arc<InstanceLock>) -> Self {
        FileExtensionState {
            paths,
            policy,
            on_disk: HashMap::new(),
            before_changes: None,
            n_writes: 0,
            _lock: lock,
        }
    }

    /// How many files were written so far (saves of unchanged state do
    /// not count).
    pub fn n_writes(&self) -> u64 {
        self.n_writes
    }

    fn read_file(&self, extension_name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.paths.extension_state_file(extension_name);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StoreError::io("reading", path, source)),
        }
    }
}

/// The file form of a state (`extensions/<ext-name>.json`): pretty JSON and
/// a newline, like the original.
pub fn encode_state(value: &JsonValue) -> Result<Vec<u8>, StoreError> {
    let mut bytes =
        serde_json::to_vec_pretty(value).map_err(|e| StoreError::encode("extension state", e))?;
    bytes.push(b'\n');
    Ok(bytes)
}

impl ExtensionStateStore for FileExtensionState {
    fn load(&mut self, extension_name: &str) -> Result<Option<JsonValue>, StoreError> {
        let bytes = self.read_file(extension_name)?;
        let value =
            match &bytes {
                None => None,
                Some(bytes) => Some(serde_json::from_slice(bytes).map_err(|error| {
                    StoreError::CorruptState {
                        path: self.paths.extension_state_file(extension_name),
                        reason: error.to_string(),
                    }
                })?),
            };
        self.on_disk.insert(extension_name.to_string(), bytes);
        Ok(value)
    }

    fn save(&mut self, extension_name: &str, value: &JsonValue) -> Result<(), StoreError> {
        let bytes = encode_state(value)?;
        let known = match self.on_disk.get(extension_name) {
            Some(known) => known.clone(),
            None => self.read_file(extension_name)?,
        };
        if known.as_deref() == Some(bytes.as_slice()) {
            self.on_disk.insert(extension_name.to_string(), known);
            return Ok(());
        }
        if self.before_changes.is_none() {
            let mut before = self.on_disk.clone();
            before.insert(extension_name.to_string(), known);
            self.before_changes = Some(before);
        }
        create_dir_all(&self.paths.extensions_dir())?;
        write_file_atomically(
            &self.paths.extension_state_file(extension_name),
            &bytes,
            self.policy,
        )?;
        self.n_writes += 1;
        self.on_disk.insert(extension_name.to_string(), Some(bytes));
        Ok(())
    }

    fn end_turn(&mut self, turn_id: &str) -> Result<(), StoreError> {
        let Some(before) = self.before_changes.take() else {
            return Ok(());
        };
        let before = self.state_map(&before)?;
        let after = self.state_map(&self.on_disk)?;
        crate::extension_snapshots::record_turn(&self.paths, self.policy, turn_id, &before, &after)
    }
}

impl FileExtensionState {
    /// The states `files` holds (file bytes by extension name), parsed.
    fn state_map(
        &self,
        files: &HashMap<String, Option<Vec<u8>>>,
    ) -> Result<crate::extension_snapshots::StateMap, StoreError> {
        let mut states = crate::extension_snapshots::StateMap::new();
        for (name, bytes) in files {
            let value = match bytes {
                None => JsonValue::Null,
                Some(bytes) => {
                    serde_json::from_slice(bytes).map_err(|error| StoreError::CorruptState {
                        path: self.paths.extension_state_file(name),
                        reason: error.to_string(),
                    })?
                }
            };
            states.insert(name.clone(), value);
        }
        Ok(states)
    }
}

/// The extension state files (`extensions/<ext-name>.json`) of an
/// instance, by extension name, sorted; none when the folder is absent.
/// A name too long to be decoded (a cut file name) is given as it is on
/// disk.
pub fn extension_state_files(paths: &InstancePaths) -> Result<Vec<(String, PathBuf)>, StoreError> {
    let dir = paths.extensions_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(StoreError::io("listing", dir, source)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| StoreError::io("listing", &dir, source))?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some(encoded) = file_name.strip_suffix(".json") else {
            continue;
        };
        // A cut name cannot be decoded; its file is carried over as it is
        // under the same name.
        let name = decode_path_component(encoded).unwrap_or_else(|| encoded.to_string());
        files.push((name, entry.path()));
    }
    files.sort();
    Ok(files)
}
