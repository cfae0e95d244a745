//! Resolving a model-supplied path against the instance workdir, with
//! symlinks followed, and refusing paths that end up outside it.
//!
//! Lexical checks alone are not enough: `notes/../../etc` is caught by
//! them, but `link/passwd` where `link -> /etc` is not. So the path is
//! walked component by component on the real file system, each existing
//! symlink replaced by its canonical target, and `..` applied to the
//! already-resolved prefix, which is what the kernel does. Components that
//! do not exist yet (a file about to be written) are appended as they are:
//! they cannot be symlinks.
//!
//! This is a blocking module; callers run it inside `spawn_blocking`.

use crate::error::BuiltinToolError;
use std::path::{Component, Path, PathBuf};

/// The instance workdir and whether paths may leave it.
#[derive(Debug, Clone)]
pub(crate) struct Workdir {
    root: PathBuf,
    allow_outside: bool,
}

impl Workdir {
    /// Canonicalizes `workdir`, which must exist.
    pub(crate) fn open(workdir: &Path, allow_outside: bool) -> Result<Self, BuiltinToolError> {
        let root = std::fs::canonicalize(workdir).map_err(|source| {
            BuiltinToolError::io("open workdir", workdir.to_path_buf(), source)
        })?;
        Ok(Workdir {
            root,
            allow_outside,
        })
    }

    /// Resolves `requested` (relative to the workdir, or absolute) and
    /// checks that it stays inside.
    pub(crate) fn resolve(&self, requested: &str) -> Result<PathBuf, BuiltinToolError> {
        let resolved = resolve_following_symlinks(&self.root, Path::new(requested))
            .map_err(|source| BuiltinToolError::io("resolve", self.root.join(requested), source))?;
        if !self.allow_outside && !resolved.starts_with(&self.root) {
            return Err(BuiltinToolError::PathOutsideWorkdir {
                requested: requested.to_string(),
                resolved,
                workdir: self.root.clone(),
            });
        }
        Ok(resolved)
    }
}

fn resolve_following_symlinks(root: &Path, requested: &Path) -> std::io::Result<PathBuf> {
    let mut resolved = if requested.is_absolute() {
        PathBuf::from("/")
    } else {
        root.to_path_buf()
    };
    let mut exists = true;
    for component in requested.components() {
        match component {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                resolved.pop();
            }
            Component::Normal(name) => {
                resolved.push(name);
                if !exists {
                    continue;
                }
                match std::fs::symlink_metadata(&resolved) {
                    Ok(metadata) if metadata.file_type().is_symlink() => {
                        // A dangling link fails here on purpose: writing
                        // through it would create its target, wherever
                        // that is.
                        resolved = std::fs::canonicalize(&resolved)?;
                    }
                    Ok(_) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => exists = false,
                    Err(error) => return Err(error),
                }
            }
        }
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, Workdir) {
        let work = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(work.path().join("sub")).unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), work.path().join("escape")).unwrap();
        std::os::unix::fs::symlink(work.path().join("sub"), work.path().join("inner")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/target", work.path().join("dangling")).unwrap();
        let workdir = Workdir::open(work.path(), false).unwrap();
        (work, outside, workdir)
    }

    #[test]
    fn paths_inside_resolve_and_escapes_are_refused() {
        let (work, _outside, workdir) = setup();
        let root = std::fs::canonicalize(work.path()).unwrap();
        for (requested, expected) in [
            ("a.txt", root.join("a.txt")),
            ("sub/../b.txt", root.join("b.txt")),
            ("./sub/new/deeper.txt", root.join("sub/new/deeper.txt")),
            ("inner/x", root.join("sub/x")),
            ("missing/../c", root.join("c")),
            (".", root.clone()),
        ] {
            assert_eq!(workdir.resolve(requested).unwrap(), expected, "{requested}");
        }
        let absolute_inside = root.join("sub").to_string_lossy().into_owned();
        assert_eq!(workdir.resolve(&absolute_inside).unwrap(), root.join("sub"));

        for requested in [
            "../x",
            "sub/../../x",
            "/etc/passwd",
            "escape/secret",
            "escape",
        ] {
            let error = workdir.resolve(requested).unwrap_err();
            assert_eq!(error.code(), "E_PATH_OUTSIDE_WORKDIR", "{requested}");
        }
        assert_eq!(
            workdir.resolve("dangling/x").unwrap_err().code(),
            "FILE_NOT_FOUND"
        );
    }

    #[test]
    fn allow_outside_lets_escapes_through() {
        let (work, outside, _) = setup();
        let workdir = Workdir::open(work.path(), true).unwrap();
        let resolved = workdir.resolve("escape/secret").unwrap();
        assert_eq!(
            resolved,
            std::fs::canonicalize(outside.path())
                .unwrap()
                .join("secret")
        );
    }
}
