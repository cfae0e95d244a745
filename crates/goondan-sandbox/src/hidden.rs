//! Paths a sandboxed child must not see (issue 47 #1): the System Root's
//! control sockets, conversations and settings. Inside the namespaces an
//! empty, read-only folder stands over each hidden folder and `/dev/null`
//! over each hidden file, mounted before the namespace's init makes every
//! mount locked, so nothing inside can unmount them to look underneath.
//!
//! The set is fixed once per process, before its first sandboxed child,
//! and read between `fork` and `exec` (an atomic load; no allocation).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One hidden path, ready for `mount` in a forked child.
#[derive(Debug)]
pub(crate) struct HiddenPath {
    pub(crate) path: CString,
    pub(crate) directory: bool,
}

static HIDDEN: OnceLock<Vec<HiddenPath>> = OnceLock::new();

/// The hidden paths of this process (none until [`hide_from_children`]).
pub(crate) fn hidden() -> &'static [HiddenPath] {
    HIDDEN.get().map_or(&[], Vec::as_slice)
}

/// Hides `paths` from every child this process starts in the namespaces
/// from now on (bash commands, plugin hosts, MCP servers). A path that does
/// not exist now is skipped: only what is there can be covered. Takes
/// effect once per process; a later call changes nothing and returns
/// false.
pub fn hide_from_children(paths: impl IntoIterator<Item = PathBuf>) -> bool {
    let prepared = paths
        .into_iter()
        .filter_map(|path| prepare(&path))
        .collect();
    HIDDEN.set(prepared).is_ok()
}

fn prepare(path: &Path) -> Option<HiddenPath> {
    // `mount` follows a symlink, so what is covered is where it leads.
    let path = std::fs::canonicalize(path).ok()?;
    Some(HiddenPath {
        directory: std::fs::metadata(&path).ok()?.is_dir(),
        path: CString::new(path.as_os_str().as_bytes()).ok()?,
    })
}
