//! How hard the store pushes bytes towards the disk ([`SyncPolicy`]) and the
//! primitives every writer here builds on: atomic replacement of a whole
//! file (the workspace's one atomic write, owner-only), the staged base of
//! a rewrite fold, and folder syncs after renames.
//!
//! The tradeoff, measured by `benches/fold.rs`: `write(2)` alone makes a
//! record survive the death of the process (SIGKILL, panic, OOM kill),
//! because the bytes sit in the kernel's page cache; only `fsync` makes it
//! survive a power loss or kernel crash, at the price of a disk flush
//! (tens of microseconds on tmpfs, milliseconds on real disks).

use crate::owner_only;
use crate::StoreError;
use goondan_types::atomic_file::{write_atomically, FileAccess, WriteOptions};
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

/// The temporary sibling a rewrite fold stages the new base in. Unlike
/// [`write_file_atomically`]'s temporary files its name is fixed, because
/// the commit marker's recovery must find it after a crash.
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Replaces `path` with `bytes` through the workspace's one atomic write:
/// owner-only, file and folder flushed when `policy` flushes commits.
/// Readers see the old content or the new, never a mix.
pub(crate) fn write_file_atomically(
    path: &Path,
    bytes: &[u8],
    policy: SyncPolicy,
) -> Result<(), StoreError> {
    let options = WriteOptions {
        access: FileAccess::Mode(owner_only::FILE_MODE),
        durable: policy.syncs_commits(),
    };
    write_atomically(path, bytes, options)
        .map_err(|source| StoreError::io("replacing", path, source))
}

/// Creates or truncates `temp` (a [`temp_path`]) with `bytes`, flushed per
/// `policy`.
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
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "old").unwrap();
        write_file_atomically(&path, b"new", SyncPolicy::TurnCommit).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state.json"]);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, owner_only::FILE_MODE);
    }

    #[test]
    fn failed_atomic_write_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        // A folder holding a file cannot be replaced by a file: the write
        // fails at the rename, after the temporary file was written.
        let path = dir.path().join("state.json");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("old"), "old").unwrap();
        let error = write_file_atomically(&path, b"new", SyncPolicy::ProcessCrash).unwrap_err();
        assert_eq!(error.code(), "E_STORE_IO");
        assert_eq!(std::fs::read_to_string(path.join("old")).unwrap(), "old");
    }
}
