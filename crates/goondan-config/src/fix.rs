//! `gdn validate --fix`: rewrites what a validation found and only one
//! answer can fix, in the bundle's own files, leaving everything else of
//! the text (comments, order, quoting, blank lines) as it was.
//!
//! Fixed today: a resource document without `apiVersion` (the line
//! `apiVersion: goondan.ai/v1` is inserted above its first key, as the
//! original's `--fix` does) and a document whose `apiVersion` names another
//! version (the value is replaced). Files are rewritten whole through a
//! temporary file and a rename, so a crash leaves either the old or the
//! new text; files outside the bundle folder (an installed package's) are
//! never touched.

use crate::codes::Code;
use goondan_types::atomic_file::{write_atomically, FileAccess, WriteOptions};
use goondan_types::{Diagnostic, API_VERSION};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// One change made to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedFix {
    /// The file, as diagnostics name it (relative to the bundle folder).
    pub file: String,
    /// The one-based line changed (before any line was inserted above it).
    pub line: usize,
    /// What was done, in a sentence.
    pub description: String,
}

/// Why `--fix` could not write its changes.
#[derive(Debug, thiserror::Error)]
#[error("cannot fix {path}: {source}")]
pub struct FixError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// One edit of one line.
enum Edit {
    /// Insert `apiVersion` above this line, at this column.
    InsertApiVersion { column: usize },
    /// Replace the value starting at this column with the right version.
    ReplaceApiVersion { column: usize },
}

/// Applies the fixes `diagnostics` (from loading the bundle at `path`, a
/// folder or a single file) call for, and says what changed. Load the
/// bundle again afterwards to see what remains.
pub fn fix_bundle(path: &Path, diagnostics: &[Diagnostic]) -> Result<Vec<AppliedFix>, FixError> {
    let io_error = |source| FixError {
        path: path.to_path_buf(),
        source,
    };
    let canonical = path.canonicalize().map_err(io_error)?;
    let root = if canonical.is_dir() {
        canonical
    } else {
        canonical
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"))
    };
    let mut edits: BTreeMap<String, BTreeMap<usize, Edit>> = BTreeMap::new();
    for diagnostic in diagnostics {
        let (Some(file), Some(line), Some(column)) =
            (&diagnostic.file, diagnostic.line, diagnostic.column)
        else {
            continue;
        };
        if diagnostic.code != Code::ApiVersion.as_str()
            || diagnostic.field.as_deref() != Some("apiVersion")
            || !is_inside(file)
        {
            continue;
        }
        let edit = if diagnostic.message.contains("missing") {
            Edit::InsertApiVersion { column }
        } else {
            Edit::ReplaceApiVersion { column }
        };
        edits.entry(file.clone()).or_default().insert(line, edit);
    }
    let mut applied = Vec::new();
    for (file, edits) in edits {
        let full = root.join(&file);
        let text = std::fs::read_to_string(&full).map_err(|source| FixError {
            path: full.clone(),
            source,
        })?;
        let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        // Bottom up, so an insertion never moves a line still to edit.
        for (&line, edit) in edits.iter().rev() {
            let Some(current) = lines.get(line - 1).cloned() else {
                continue;
            };
            match edit {
                Edit::InsertApiVersion { column } => {
                    let indent: String = current.chars().take(column - 1).collect();
                    if !indent.chars().all(|c| c == ' ') {
                        continue;
                    }
                    lines.insert(line - 1, format!("{indent}apiVersion: {API_VERSION}"));
                    applied.push(AppliedFix {
                        file: file.clone(),
                        line,
                        description: format!("added `apiVersion: {API_VERSION}`"),
                    });
                }
                Edit::ReplaceApiVersion { column } => {
                    let Some(fixed) = replace_value(&current, *column) else {
                        continue;
                    };
                    lines[line - 1] = fixed;
                    applied.push(AppliedFix {
                        file: file.clone(),
                        line,
                        description: format!("set `apiVersion: {API_VERSION}`"),
                    });
                }
            }
        }
        // The user's file keeps its permissions; a crash leaves the old
        // text or the new, never half of it.
        let options = WriteOptions {
            access: FileAccess::KeepExisting,
            durable: true,
        };
        write_atomically(&full, lines.join("\n").as_bytes(), options).map_err(|source| {
            FixError {
                path: full.clone(),
                source,
            }
        })?;
    }
    applied.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    Ok(applied)
}

/// Whether `file` (as diagnostics name it) is a plain relative path inside
/// the bundle folder.
fn is_inside(file: &str) -> bool {
    let path = Path::new(file);
    path.components()
        .all(|part| matches!(part, Component::Normal(_)))
        && path.components().next().is_some()
}

/// `line` with the scalar starting at one-based `column` replaced by the
/// supported version, keeping a trailing comment; `None` when the line
/// does not hold an `apiVersion:` key before that column.
fn replace_value(line: &str, column: usize) -> Option<String> {
    let start = line
        .char_indices()
        .nth(column - 1)
        .map(|(at, _)| at)
        .filter(|&at| line[..at].trim_end().ends_with("apiVersion:"))?;
    let rest = &line[start..];
    let comment = rest.find(" #").map(|at| &rest[at..]).unwrap_or("");
    Some(format!("{}{API_VERSION}{comment}", &line[..start]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_version_is_replaced_and_a_comment_kept() {
        assert_eq!(
            replace_value("apiVersion: goondan.ai/v1alpha1 # old", 13).as_deref(),
            Some("apiVersion: goondan.ai/v1 # old")
        );
        assert_eq!(
            replace_value("apiVersion: \"x\"", 13).as_deref(),
            Some("apiVersion: goondan.ai/v1")
        );
        assert_eq!(replace_value("kind: Agent", 7), None);
    }

    #[test]
    fn only_plain_relative_paths_are_edited() {
        assert!(is_inside("goondan.yaml"));
        assert!(is_inside("agents/a.yaml"));
        assert!(!is_inside("../elsewhere.yaml"));
        assert!(!is_inside("/etc/passwd"));
        assert!(!is_inside(""));
    }
}
