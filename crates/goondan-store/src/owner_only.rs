//! Owner-only permissions for everything the runtime creates under the
//! System Root: folders are made `0700` and files `0600`, whatever the
//! process umask, because conversations, extension state and runtime logs
//! may hold anything a user or a tool said.
//!
//! Every writer of the state root creates its files and folders through
//! these two functions ([`create_dir_all`] and [`open_options`]), inside
//! this crate and in the binary (runtime logs, start locks). The modes are
//! given at creation, never fixed afterwards with `chmod`, so no file is
//! ever readable by others, not even for a moment. Files and folders that
//! already exist keep the mode they have.

use std::fs::{DirBuilder, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// The mode of every folder the runtime creates under the System Root.
pub const DIR_MODE: u32 = 0o700;

/// The mode of every file the runtime creates under the System Root.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` and its missing parents, each with [`DIR_MODE`].
pub fn create_dir_all(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Options that create files with [`FILE_MODE`]; the caller adds the
/// access flags (`append`, `write`, `create`, ...).
pub fn open_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE);
    options
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn folders_and_files_are_created_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b/c");
        create_dir_all(&nested).unwrap();
        for folder in ["a", "a/b", "a/b/c"] {
            assert_eq!(mode(&dir.path().join(folder)), DIR_MODE, "{folder}");
        }
        let file = nested.join("f.jsonl");
        open_options()
            .create(true)
            .append(true)
            .open(&file)
            .unwrap();
        assert_eq!(mode(&file), FILE_MODE);
    }
}
