//! Finds the YAML files of a bundle (`bundle.md` §3.5): recognized names
//! only, searched recursively, skipping `dist`, `node_modules` and `.git`,
//! in a deterministic order (the root `goondan.yaml` first, then by path).
//! A folder below the root with its own `goondan.yaml` is another
//! project: it is skipped and named, never merged into this bundle (a
//! folder of examples is not one bundle with every example's errors).

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

/// The names of a project's main file.
const MAIN_FILES: [&str; 2] = ["goondan.yaml", "goondan.yml"];

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

/// What [`discover`] found.
#[derive(Debug)]
pub(crate) struct Discovered {
    /// The bundle's files, in loading order.
    pub(crate) files: Vec<BundleFile>,
    /// Folders below the root that hold their own `goondan.yaml`, relative
    /// to the root with `/` separators, sorted; none of their files is in
    /// `files`.
    pub(crate) nested_projects: Vec<String>,
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
pub(crate) fn discover(root: &Path) -> Result<Discovered, LoadError> {
    let mut found = Vec::new();
    let mut nested_projects = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        if dir != root && MAIN_FILES.iter().any(|name| dir.join(name).is_file()) {
            nested_projects.push(relative_display(root, &dir));
            continue;
        }
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
    let main = MAIN_FILES.map(|name| root.join(name));
    let mut files: Vec<BundleFile> = found
        .into_iter()
        .map(|path| {
            let display = relative_display(root, &path);
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
    nested_projects.sort();
    Ok(Discovered {
        files,
        nested_projects,
    })
}

/// `path` relative to `root`, with `/` separators, for messages.
fn relative_display(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|component| component.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
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
            .files
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

    #[test]
    fn a_folder_with_its_own_goondan_yaml_is_another_project_and_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for path in [
            "examples/a/goondan.yaml",
            "examples/a/tools.yaml",
            "examples/b/goondan.yml",
            "models.yaml",
        ] {
            let full = root.join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, "").unwrap();
        }
        let discovered = discover(&root).unwrap();
        let names: Vec<_> = discovered
            .files
            .into_iter()
            .map(|file| file.display)
            .collect();
        assert_eq!(names, ["models.yaml"]);
        assert_eq!(discovered.nested_projects, ["examples/a", "examples/b"]);
    }
}
