//! The one way the workspace replaces a whole file ([`write_atomically`]):
//! a temporary sibling is written, optionally flushed, and renamed over the
//! target, so a reader sees the old content or the new, never a mix, and a
//! crash never leaves a half-written file.
//!
//! It is the only IO in this crate. It lives here, at the left of the flow,
//! because every crate that writes files (the config fixer, the store, the
//! package installer, the plugin host's shim cache) depends on this one.
//! It does not create folders: the store makes its own owner-only, others
//! use `create_dir_all`. It does not map errors: each caller turns the
//! `io::Error` into its own typed error, naming the target path.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Who may read the file [`write_atomically`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAccess {
    /// What `File::create` gives: `0o666` minus the umask.
    Default,
    /// The Unix mode the file is created with, minus the umask. The mode
    /// applies from the creation on, so an owner-only file (`0o600`) is
    /// never readable by others, not even for a moment. Ignored elsewhere.
    Mode(u32),
    /// Exactly the permissions of the file being replaced, so an edit keeps
    /// them (`gdn validate --fix` on a user's file). Owner-only until the
    /// rename; [`FileAccess::Default`] when there is no file yet.
    KeepExisting,
}

/// How [`write_atomically`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Who may read the file.
    pub access: FileAccess,
    /// When true, the file is flushed (`fsync`) before the rename and its
    /// folder after it, so the new content survives a power loss; when
    /// false it still survives the death of the process.
    pub durable: bool,
}

/// Counts the temporary files of this process, so two threads replacing
/// the same file never share one.
static TEMPORARIES: AtomicU64 = AtomicU64::new(0);

/// How many names [`create_temporary`] tries before giving up; a name is
/// taken only by a leftover of an earlier process with the same id.
const TEMPORARY_ATTEMPTS: u32 = 16;

/// Replaces `path` with `bytes`: writes a temporary file in the same folder
/// (`.<name>.<pid>.<n>.tmp`), flushes it and renames it over `path`, then
/// flushes the folder (the last two flushes only when `options.durable`).
/// On failure the temporary file is removed and `path` is untouched.
///
/// The folder must exist. Writers in other processes or threads may replace
/// the same file at once: each has its own temporary file and the last
/// rename wins.
pub fn write_atomically(path: &Path, bytes: &[u8], options: WriteOptions) -> io::Result<()> {
    let existing = match options.access {
        FileAccess::KeepExisting => match std::fs::metadata(path) {
            Ok(metadata) => Some(metadata.permissions()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(error) => return Err(error),
        },
        FileAccess::Default | FileAccess::Mode(_) => None,
    };
    let (temporary, mut file) = create_temporary(path, options.access)?;
    let written = (|| {
        file.write_all(bytes)?;
        if let Some(permissions) = existing {
            file.set_permissions(permissions)?;
        }
        if options.durable {
            file.sync_all()?;
        }
        drop(file);
        std::fs::rename(&temporary, path)
    })();
    if let Err(error) = written {
        // The target is untouched; only the temporary file must go.
        let _ = std::fs::remove_file(&temporary);
        return Err(error);
    }
    if options.durable {
        sync_folder(folder_of(path))?;
    }
    Ok(())
}

/// Creates a fresh temporary sibling of `path`, never opening a file that
/// is already there (a leftover, or a link planted in a shared folder).
fn create_temporary(path: &Path, access: FileAccess) -> io::Result<(PathBuf, File)> {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        match access {
            FileAccess::Default => {}
            FileAccess::Mode(mode) => {
                options.mode(mode);
            }
            FileAccess::KeepExisting => {
                options.mode(0o600);
            }
        }
    }
    #[cfg(not(unix))]
    let _ = access;
    for _ in 0..TEMPORARY_ATTEMPTS {
        let number = TEMPORARIES.fetch_add(1, Ordering::Relaxed);
        let temporary = path.with_file_name(format!(".{name}.{}.{number}.tmp", std::process::id()));
        match options.open(&temporary) {
            Ok(file) => return Ok((temporary, file)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "no free temporary name beside {} after {TEMPORARY_ATTEMPTS} tries",
            path.display()
        ),
    ))
}

/// The folder `path` is in (`.` for a bare file name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Flushes a folder's entries so a rename inside it survives a power loss.
fn sync_folder(folder: &Path) -> io::Result<()> {
    File::open(folder)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DURABLE: WriteOptions = WriteOptions {
        access: FileAccess::Default,
        durable: true,
    };

    fn names_in(folder: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(folder)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_write_replaces_the_content_and_leaves_no_temporary_file() {
        let scratch = tempfile::tempdir().unwrap();
        let folder = scratch.path();
        let path = folder.join("state.json");
        std::fs::write(&path, "old").unwrap();
        for options in [
            DURABLE,
            WriteOptions {
                access: FileAccess::Mode(0o600),
                durable: false,
            },
        ] {
            write_atomically(&path, b"new", options).unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
            assert_eq!(names_in(folder), ["state.json"]);
        }
    }

    #[test]
    fn a_failed_write_keeps_the_old_content_and_removes_its_temporary_file() {
        let scratch = tempfile::tempdir().unwrap();
        let folder = scratch.path();
        // A folder with a file in it cannot be replaced by a file: the
        // rename fails after the temporary file was written.
        let path = folder.join("state.json");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("old"), "old").unwrap();
        write_atomically(&path, b"new", DURABLE).unwrap_err();
        assert_eq!(std::fs::read_to_string(path.join("old")).unwrap(), "old");
        assert_eq!(names_in(folder), ["state.json"]);
    }

    #[test]
    fn a_missing_folder_is_an_error() {
        let scratch = tempfile::tempdir().unwrap();
        let folder = scratch.path();
        let path = folder.join("missing/state.json");
        let error = write_atomically(&path, b"new", DURABLE).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }

    #[cfg(unix)]
    #[test]
    fn the_file_gets_the_mode_asked_for_or_keeps_its_own() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        let scratch = tempfile::tempdir().unwrap();
        let folder = scratch.path();
        let private = folder.join("settings.json");
        let owner_only = WriteOptions {
            access: FileAccess::Mode(0o600),
            durable: false,
        };
        write_atomically(&private, b"{}", owner_only).unwrap();
        assert_eq!(mode(&private), 0o600);

        let edited = folder.join("goondan.yaml");
        std::fs::write(&edited, "old").unwrap();
        std::fs::set_permissions(&edited, std::fs::Permissions::from_mode(0o640)).unwrap();
        let keep = WriteOptions {
            access: FileAccess::KeepExisting,
            durable: true,
        };
        write_atomically(&edited, b"new", keep).unwrap();
        assert_eq!(mode(&edited), 0o640);
        assert_eq!(std::fs::read_to_string(&edited).unwrap(), "new");
    }

    #[test]
    fn writers_in_many_threads_never_mix_their_bytes() {
        let scratch = tempfile::tempdir().unwrap();
        let folder = scratch.path();
        let path = folder.join("shared.txt");
        let contents: Vec<String> = (0..8).map(|n| n.to_string().repeat(4096)).collect();
        std::thread::scope(|scope| {
            for content in &contents {
                let path = &path;
                scope.spawn(move || {
                    for _ in 0..10 {
                        write_atomically(path, content.as_bytes(), DURABLE).unwrap();
                    }
                });
            }
        });
        let last = std::fs::read_to_string(&path).unwrap();
        assert!(contents.contains(&last));
        assert_eq!(names_in(folder), ["shared.txt"]);
    }
}
