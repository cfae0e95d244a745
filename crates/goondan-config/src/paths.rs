//! Paths a bundle names (`entry`, `systemRef`, `options.rulesFile`): always
//! relative to the bundle root, never leaving it (`bundle.md` §7).

use std::path::{Component, Path, PathBuf};

/// Why a bundle path is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PathProblem {
    /// The path is absolute.
    Absolute,
    /// The path contains `..`.
    ParentDir,
    /// The path exists but resolves (through a symlink) outside the root.
    OutsideRoot(PathBuf),
    /// Nothing exists there.
    NotFound,
}

impl PathProblem {
    /// A sentence about the problem for a diagnostic.
    pub(crate) fn describe(&self, written: &str) -> String {
        match self {
            PathProblem::Absolute => {
                format!(
                    "`{written}` is an absolute path; bundle paths are relative to the bundle root"
                )
            }
            PathProblem::ParentDir => {
                format!("`{written}` contains `..`; bundle paths may not leave the bundle root")
            }
            PathProblem::OutsideRoot(target) => format!(
                "`{written}` resolves to {} through a symlink, outside the bundle root",
                target.display()
            ),
            PathProblem::NotFound => format!("`{written}` does not exist"),
        }
    }
}

/// Resolves `written` inside `root`, which must already be canonical.
pub(crate) fn resolve_in_root(root: &Path, written: &str) -> Result<PathBuf, PathProblem> {
    let relative = Path::new(written);
    if relative.is_absolute() || written.starts_with('/') || written.starts_with('\\') {
        return Err(PathProblem::Absolute);
    }
    let mut has_prefix = false;
    for component in relative.components() {
        match component {
            Component::ParentDir => return Err(PathProblem::ParentDir),
            Component::Prefix(_) | Component::RootDir => has_prefix = true,
            Component::CurDir | Component::Normal(_) => {}
        }
    }
    if has_prefix {
        return Err(PathProblem::Absolute);
    }
    let joined = root.join(relative);
    let canonical = match joined.canonicalize() {
        Ok(canonical) => canonical,
        Err(_) => return Err(PathProblem::NotFound),
    };
    if !canonical.starts_with(root) {
        return Err(PathProblem::OutsideRoot(canonical));
    }
    Ok(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_escapes_and_accepts_files_inside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("a.md"), "x").unwrap();
        assert_eq!(resolve_in_root(&root, "./a.md").unwrap(), root.join("a.md"));
        assert_eq!(
            resolve_in_root(&root, "../a.md"),
            Err(PathProblem::ParentDir)
        );
        assert_eq!(
            resolve_in_root(&root, "x/../../a.md"),
            Err(PathProblem::ParentDir)
        );
        assert_eq!(
            resolve_in_root(&root, "/etc/passwd"),
            Err(PathProblem::Absolute)
        );
        assert_eq!(resolve_in_root(&root, "b.md"), Err(PathProblem::NotFound));
    }
}
