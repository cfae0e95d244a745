//! The bundle's Package document as this crate reads and edits it: name,
//! version, dependencies and registry from the first document of
//! `goondan.yaml`, and the edits `gdn package add`, `update` and `remove`
//! make.
//!
//! An edit changes only the dependency lines (`dependency_edit`); every
//! other byte of the file, comments and quoting included, is kept.

use crate::error::PackageError;
use goondan_config::spec::PackageSpec;
use goondan_config::yaml;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The Package document of a bundle.
#[derive(Debug, Clone)]
pub struct PackageManifest {
    /// `metadata.name`.
    pub name: String,
    /// `spec` as typed by the loader.
    pub spec: PackageSpec,
    /// The `goondan.yaml` it came from.
    path: PathBuf,
    /// The whole file's text, which edits change in place.
    text: String,
}

/// The `goondan.yaml` of a bundle folder.
pub fn manifest_path(bundle_root: &Path) -> PathBuf {
    bundle_root.join("goondan.yaml")
}

impl PackageManifest {
    /// Reads the Package document of the bundle at `bundle_root`; `None`
    /// when `goondan.yaml` has none.
    pub fn read(bundle_root: &Path) -> Result<Option<PackageManifest>, PackageError> {
        let path = manifest_path(bundle_root);
        let text = std::fs::read_to_string(&path).map_err(PackageError::io(&path))?;
        Self::parse(&text, path)
    }

    /// Puts a Package document in front of the bundle's `goondan.yaml`
    /// (creating the file when there is none), named after the bundle
    /// folder, for `gdn package add` in a bundle without one
    /// (`bundle_package.md` §13.2). The rest of the file is kept as it was.
    pub fn create(bundle_root: &Path) -> Result<PackageManifest, PackageError> {
        let path = manifest_path(bundle_root);
        let existing = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(PackageError::Io { path, source }),
        };
        let folder = bundle_root
            .canonicalize()
            .ok()
            .and_then(|root| {
                root.file_name()
                    .map(|name| name.to_string_lossy().into_owned())
            })
            .unwrap_or_default();
        let mut text = format!(
            "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: {}\nspec:\n  dependencies: []\n",
            Value::String(package_name_for(&folder))
        );
        if !existing.trim().is_empty() {
            text.push_str("---\n");
            text.push_str(&existing);
        }
        let manifest =
            Self::parse(&text, path.clone())?.ok_or_else(|| PackageError::ManifestInvalid {
                problem: "the new Package document did not parse".into(),
            })?;
        crate::fsutil::write_atomic(&path, text.as_bytes())?;
        Ok(manifest)
    }

    /// Parses the text of a `goondan.yaml`.
    pub fn parse(text: &str, path: PathBuf) -> Result<Option<PackageManifest>, PackageError> {
        let invalid = |problem: String| PackageError::ManifestInvalid {
            problem: format!("{}: {problem}", path.display()),
        };
        let documents = yaml::parse(text).map_err(|problem| invalid(problem.to_string()))?;
        let Some(first) = documents.into_iter().next() else {
            return Ok(None);
        };
        let Some(root) = first.root else {
            return Ok(None);
        };
        let Value::Object(document) = root.to_json() else {
            return Ok(None);
        };
        if document.get("kind").and_then(Value::as_str) != Some("Package") {
            return Ok(None);
        }
        let name = document
            .get("metadata")
            .and_then(|metadata| metadata.get("name"))
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("the Package has no metadata.name".into()))?
            .to_string();
        let spec: PackageSpec = serde_json::from_value(
            document
                .get("spec")
                .cloned()
                .unwrap_or(Value::Object(Map::new())),
        )
        .map_err(|error| invalid(format!("the Package spec is invalid: {error}")))?;
        Ok(Some(PackageManifest {
            name,
            spec,
            path,
            text: text.to_string(),
        }))
    }

    /// The dependencies other than the built-in `@goondan/base`: name to
    /// range.
    pub fn registry_dependencies(&self) -> BTreeMap<String, String> {
        self.spec
            .dependencies
            .iter()
            .filter(|dependency| dependency.name != goondan_config::BASE_PACKAGE)
            .map(|dependency| (dependency.name.clone(), dependency.version.clone()))
            .collect()
    }

    /// Sets (or adds) dependency `name` to `range` and writes the file.
    pub fn set_dependency(&mut self, name: &str, range: &str) -> Result<(), PackageError> {
        let edited = crate::dependency_edit::set(&self.text, name, range)
            .map_err(|problem| self.invalid(problem))?;
        self.save(edited)
    }

    /// Removes dependency `name` and writes the file; whether it was there.
    pub fn remove_dependency(&mut self, name: &str) -> Result<bool, PackageError> {
        match crate::dependency_edit::remove(&self.text, name)
            .map_err(|problem| self.invalid(problem))?
        {
            Some(edited) => {
                self.save(edited)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn invalid(&self, problem: String) -> PackageError {
        PackageError::ManifestInvalid {
            problem: format!("{}: {problem}", self.path.display()),
        }
    }

    fn save(&mut self, text: String) -> Result<(), PackageError> {
        // Re-read so `spec` follows the text (and a broken edit fails here
        // rather than at the next load).
        let reread = Self::parse(&text, self.path.clone())?
            .ok_or_else(|| self.invalid("the edited Package document did not parse".into()))?;
        crate::fsutil::write_atomic(&self.path, text.as_bytes())?;
        *self = reread;
        Ok(())
    }
}

/// A package name that follows the naming rules, derived from a folder
/// name: lowercase, other characters as `-`, starting with a letter.
fn package_name_for(folder: &str) -> String {
    let mut name: String = folder
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    while name.contains("--") {
        name = name.replace("--", "-");
    }
    let name = name.trim_matches('-').to_string();
    let name = if name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name
    } else {
        format!("bundle-{name}").trim_end_matches('-').to_string()
    };
    name.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUNDLE: &str = "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: app\nspec:\n  version: \"0.1.0\"\n---\n# the model\napiVersion: goondan.ai/v1\nkind: Model\nmetadata:\n  name: m\nspec:\n  provider: openai\n  model: gpt\n";

    #[test]
    fn a_package_document_is_created_in_front_when_missing() {
        let dir = tempfile::tempdir().unwrap();
        let rest = &BUNDLE[BUNDLE.find("---").unwrap() + 4..];
        std::fs::write(dir.path().join("goondan.yaml"), rest).unwrap();
        assert!(PackageManifest::read(dir.path()).unwrap().is_none());
        let mut manifest = PackageManifest::create(dir.path()).unwrap();
        crate::name::check_name(&manifest.name).unwrap();
        manifest.set_dependency("@acme/tools", "^1.0.0").unwrap();
        let text = std::fs::read_to_string(dir.path().join("goondan.yaml")).unwrap();
        assert!(text.ends_with(rest), "{text}");
        assert_eq!(package_name_for("My Project_2"), "my-project-2");
        assert_eq!(package_name_for("42"), "bundle-42");
        assert_eq!(package_name_for("---"), "bundle");
    }

    #[test]
    fn adding_a_dependency_keeps_the_other_documents() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("goondan.yaml"), BUNDLE).unwrap();
        let mut manifest = PackageManifest::read(dir.path()).unwrap().unwrap();
        manifest.set_dependency("@acme/tools", "^1.2.0").unwrap();
        manifest.set_dependency("@acme/tools", "^1.3.0").unwrap();
        let text = std::fs::read_to_string(dir.path().join("goondan.yaml")).unwrap();
        assert!(
            text.ends_with(&BUNDLE[BUNDLE.find("---").unwrap()..]),
            "{text}"
        );
        let reread = PackageManifest::read(dir.path()).unwrap().unwrap();
        assert_eq!(
            reread.registry_dependencies(),
            BTreeMap::from([("@acme/tools".to_string(), "^1.3.0".to_string())])
        );
        assert_eq!(reread.spec.version.as_deref(), Some("0.1.0"));
        let mut manifest = reread;
        assert!(manifest.remove_dependency("@acme/tools").unwrap());
        assert!(!manifest.remove_dependency("@acme/tools").unwrap());
        assert!(PackageManifest::read(dir.path())
            .unwrap()
            .unwrap()
            .registry_dependencies()
            .is_empty());
    }
}
