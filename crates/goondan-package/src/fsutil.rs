//! Writing files so that a crash never leaves a half-written one: a
//! temporary file beside the target, flushed, then renamed over it.

use crate::error::PackageError;
use std::io::Write;
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
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = parent.join(format!(".{file_name}.{}.tmp", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options
        .open(&temporary)
        .map_err(PackageError::io(&temporary))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(PackageError::io(&temporary))?;
    std::fs::rename(&temporary, path).map_err(PackageError::io(path))
}
