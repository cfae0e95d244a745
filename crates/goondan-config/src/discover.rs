//! Finds the YAML files of a bundle (`bundle.md` §3.5): recognized names
//! only, searched recursively, skipping `dist`, `node_modules` and `.git`,
//! in a deterministic order (the root `goondan.yaml` first, then by path).

use crate::error::LoadError;
use std::path::{Path, PathBuf};

/// File stems the loader treats as resource files.
const RECOGNIZED_STEMS: &[&str] = &[
    "goondan",
    "model",
    "models",
    "agent",
    "agents",
    "tool",
    "tools",
    "extension",
    "extensions",
    "connector",
    "connectors",
    "connection",
    "connections",
    "swarm",
    "swarms",
    "resources",
];

/// Directories never searched.
const SKIPPED_DIRS: &[&str] = &["dist", "node_modules", ".git"];

/// One YAML file of the bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BundleFile {
    /// Absolute path.
    pub(crate) path: PathBuf,
    /// Path relative to the bundle root with `/` separators, for messages.
    pub(crate) display: String,
    /// True for the file whose first document may be the Package: the
    /// root `goondan.yaml`, or the single file given on the command line.
    pub(crate) may_hold_package: bool,
}

fn is_recognized(name: &str) -> bool {
    let Some((stem, extension)) = name.rsplit_once('.') else {
        return false;
    };
    matches!(extension, "yaml" | "yml") && RECOGNIZED_STEMS.contains(&stem)
}

/// Every YAML file under the root's `evals/` folder holds Eval documents
/// (issue 39), whatever its name.
fn is_eval_file(root: &Path, dir: &Path, name: &str) -> bool {
    let in_evals = dir
        .strip_prefix(root)
        .ok()
        .and_then(|relative| relative.components().next())
        .is_some_and(|first| first.as_os_str() == "evals");
    in_evals && (name.ends_with(".yaml") || name.ends_with(".yml"))
}

/// The bundle's YAML files under `root` (canonical).
pub(crate) fn discover(root: &Path) -> Result<Vec<BundleFile>, LoadError> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| LoadError::Io {
            path: dir.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| LoadError::Io {
                path: dir.clone(),
                source,
            })?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            // file_type does not follow symlinks, so a symlinked directory
            // is never walked (no loops, no escaping the root by walking).
            let file_type = entry.file_type().map_err(|source| LoadError::Io {
                path: entry.path(),
                source,
            })?;
            if file_type.is_dir() {
                if !SKIPPED_DIRS.contains(&name) {
                    pending.push(entry.path());
                }
            } else if is_recognized(name) || is_eval_file(root, &dir, name) {
                found.push(entry.path());
            }
        }
    }
    let main = ["goondan.yaml", "goondan.yml"].map(|name| root.join(name));
    let mut files: Vec<BundleFile> = found
        .into_iter()
        .map(|path| {
            let display = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .components()
                .map(|component| component.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            let may_hold_package = main.contains(&path);
            BundleFile {
                path,
                display,
                may_hold_package,
            }
        })
        .collect();
    files.sort_by(|a, b| {
        b.may_hold_package
            .cmp(&a.may_hold_package)
            .then_with(|| a.display.cmp(&b.display))
    });
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_recognized_files_in_order_and_skips_build_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for path in [
            "goondan.yaml",
            "tools/tools.yml",
            "agents.yaml",
            "docker-compose.yaml",
            "node_modules/x/tools.yaml",
            "dist/models.yaml",
            ".git/resources.yaml",
            "a/b/resources.yaml",
            "evals/smoke.yaml",
            "evals/deep/more.yml",
            "evals/notes.txt",
            "other/smoke.yaml",
        ] {
            let full = root.join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, "").unwrap();
        }
        let names: Vec<_> = discover(&root)
            .unwrap()
            .into_iter()
            .map(|file| file.display)
            .collect();
        assert_eq!(
            names,
            [
                "goondan.yaml",
                "a/b/resources.yaml",
                "agents.yaml",
                "evals/deep/more.yml",
                "evals/smoke.yaml",
                "tools/tools.yml"
            ]
        );
    }
}
