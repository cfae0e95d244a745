//! Writing the package files (manifests, lockfiles, tarballs, settings) so
//! that a crash never leaves a half-written one, through the workspace's
//! one atomic write ([`goondan_types::atomic_file`]), with the folder made
//! first and the error mapped to a [`PackageError`].

use crate::error::PackageError;
use goondan_types::atomic_file::{write_atomically, FileAccess, WriteOptions};
use std::path::Path;

/// Writes `bytes` to `path` atomically (readable by everyone).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), PackageError> {
    write_with_mode(path, bytes, 0o644)
}

/// Writes `bytes` to `path` atomically, readable only by its owner.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), PackageError> {
    write_with_mode(path, bytes, 0o600)
}

fn write_with_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<(), PackageError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(PackageError::io(parent))?;
    let options = WriteOptions {
        access: FileAccess::Mode(mode),
        durable: true,
    };
    write_atomically(path, bytes, options).map_err(PackageError::io(path))
}
