//! How hard the store pushes bytes towards the disk ([`SyncPolicy`]) and the
//! two primitives every writer here builds on: atomic replacement of a
//! whole file and folder syncs after renames.
//!
//! The tradeoff, measured by `benches/fold.rs`: `write(2)` alone makes a
//! record survive the death of the process (SIGKILL, panic, OOM kill),
//! because the bytes sit in the kernel's page cache; only `fsync` makes it
//! survive a power loss or kernel crash, at the price of a disk flush
//! (tens of microseconds on tmpfs, milliseconds on real disks).

use crate::owner_only;
use crate::StoreError;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// When the store calls `fsync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Never. Everything still survives a process crash; a power loss may
    /// drop recent writes or reorder them, so a commit interrupted by one
    /// can come back either folded or pending, and in rare cases with the
    /// Turn's messages twice.
    ProcessCrash,
    /// At the ordering points of a commit (commit marker, base append or
    /// temporary base, folder after rename) and on atomic replacements.
    /// A power loss loses at most the running Turn's events, never a
    /// committed message, and never mixes or duplicates a fold. Events
    /// themselves are written with `write(2)` only. The default.
    #[default]
    TurnCommit,
    /// As [`SyncPolicy::TurnCommit`], plus an `fsync` after every recorded
    /// event: nothing acknowledged is lost even to a power loss, at one disk
    /// flush per event.
    EveryEvent,
}

impl SyncPolicy {
    /// True when commits and replacements are flushed.
    pub(crate) fn syncs_commits(self) -> bool {
        !matches!(self, SyncPolicy::ProcessCrash)
    }

    /// True when every event is flushed.
    pub(crate) fn syncs_events(self) -> bool {
        matches!(self, SyncPolicy::EveryEvent)
    }
}

/// Flushes `file`'s data when `enabled`.
pub(crate) fn sync_file(file: &File, path: &Path, enabled: bool) -> Result<(), StoreError> {
    if enabled {
        file.sync_data()
            .map_err(|source| StoreError::io("syncing", path, source))?;
    }
    Ok(())
}

/// Flushes a folder's entries so a rename inside it survives a power loss.
pub(crate) fn sync_dir(dir: &Path, enabled: bool) -> Result<(), StoreError> {
    if enabled {
        let handle = File::open(dir).map_err(|source| StoreError::io("opening", dir, source))?;
        handle
            .sync_all()
            .map_err(|source| StoreError::io("syncing", dir, source))?;
    }
    Ok(())
}

/// The temporary sibling a replacement of `path` is written to.
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes `bytes` to a temporary sibling, flushes it (per `policy`) and
/// renames it over `path`: readers see the old content or the new, never a
/// mix.
pub(crate) fn write_file_atomically(
    path: &Path,
    bytes: &[u8],
    policy: SyncPolicy,
) -> Result<(), StoreError> {
    let temp = temp_path(path);
    let result = write_temp(&temp, bytes, policy).and_then(|()| {
        std::fs::rename(&temp, path).map_err(|source| StoreError::io("renaming into", path, source))
    });
    if result.is_err() {
        // The old file is untouched; only the half-written temp must go.
        let _ = std::fs::remove_file(&temp);
        return result;
    }
    if let Some(parent) = path.parent() {
        sync_dir(parent, policy.syncs_commits())?;
    }
    Ok(())
}

/// Creates or truncates `temp` with `bytes`, flushed per `policy`.
pub(crate) fn write_temp(temp: &Path, bytes: &[u8], policy: SyncPolicy) -> Result<(), StoreError> {
    let mut file = owner_only::open_options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(temp)
        .map_err(|source| StoreError::io("creating", temp, source))?;
    file.write_all(bytes)
        .map_err(|source| StoreError::io("writing", temp, source))?;
    sync_file(&file, temp, policy.syncs_commits())
}

/// Opens `path` for appending, creating it (owner-only) if needed.
pub(crate) fn open_append(path: &Path) -> Result<File, StoreError> {
    owner_only::open_options()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| StoreError::io("opening", path, source))
}

/// Creates `dir` and its parents, owner-only.
pub(crate) fn create_dir_all(dir: &Path) -> Result<(), StoreError> {
    owner_only::create_dir_all(dir).map_err(|source| StoreError::io("creating", dir, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_content_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "old").unwrap();
        write_file_atomically(&path, b"new", SyncPolicy::TurnCommit).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert!(!temp_path(&path).exists());
    }

    #[test]
    fn failed_atomic_write_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "old").unwrap();
        // A folder where the temp file must go makes the write fail.
        std::fs::create_dir(temp_path(&path)).unwrap();
        let error = write_file_atomically(&path, b"new", SyncPolicy::ProcessCrash).unwrap_err();
        assert_eq!(error.code(), "E_STORE_IO");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
    }
}
