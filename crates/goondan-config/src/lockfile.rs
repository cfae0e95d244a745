//! `goondan.lock.yaml` (`bundle_package.md` §11) and where installed
//! packages live under the System Root (§9.1).
//!
//! The loader reads the lockfile to know which exact version of each
//! dependency to load; `goondan-package` writes it after an install. Both
//! use these types, so the format has one definition. This module does no
//! network and no installing: it reads, checks and prints the file, and
//! names the folders.

use crate::yaml;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The lockfile's name, beside the bundle's `goondan.yaml`.
pub const LOCKFILE_NAME: &str = "goondan.lock.yaml";
/// The one `lockfileVersion` this build reads and writes.
pub const LOCKFILE_VERSION: u64 = 1;

/// A parsed `goondan.lock.yaml`: every package of the resolved tree, each
/// once, keyed `name@version`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lockfile {
    /// Every package of the tree by [`package_key`].
    pub packages: BTreeMap<String, LockedPackage>,
}

/// One resolved package of the lockfile.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedPackage {
    /// The exact version.
    pub version: String,
    /// The tarball URL it was downloaded from.
    pub resolved: String,
    /// `sha512-<base64>` of the tarball.
    pub integrity: String,
    /// Its own dependencies: name to exact version (each also a key of
    /// the lockfile).
    #[serde(default)]
    pub dependencies: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LockfileDocument {
    lockfile_version: u64,
    #[serde(default)]
    packages: BTreeMap<String, LockedPackage>,
}

/// Why a lockfile cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LockfileError {
    /// The file exists but cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The lockfile.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not a lockfile of version 1.
    #[error("{} is not a valid lockfile: {problem}", path.display())]
    Invalid {
        /// The lockfile.
        path: PathBuf,
        /// What is wrong, with the field when known.
        problem: String,
    },
}

impl LockfileError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            LockfileError::Io { .. } => "E_PKG_LOCKFILE_UNREADABLE",
            LockfileError::Invalid { .. } => "E_PKG_LOCKFILE_INVALID",
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> &'static str {
        "delete goondan.lock.yaml and run `gdn package install` to write it again"
    }
}

impl Lockfile {
    /// Reads the lockfile of the bundle at `bundle_root`; `None` when
    /// there is none.
    pub fn read(bundle_root: &Path) -> Result<Option<Lockfile>, LockfileError> {
        let path = bundle_root.join(LOCKFILE_NAME);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(LockfileError::Io { path, source }),
        };
        Lockfile::parse(&text)
            .map(Some)
            .map_err(|problem| LockfileError::Invalid { path, problem })
    }

    /// Parses lockfile text; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Lockfile, String> {
        let mut documents = yaml::parse(text).map_err(|problem| problem.to_string())?;
        if documents.len() != 1 {
            return Err(format!(
                "expected one YAML document, found {}",
                documents.len()
            ));
        }
        let Some(root) = documents.remove(0).root else {
            return Err("the file is empty".into());
        };
        let document: LockfileDocument = serde_path_to_error::deserialize(root.to_json())
            .map_err(|error| format!("at `{}`: {}", error.path(), error.inner()))?;
        if document.lockfile_version != LOCKFILE_VERSION {
            return Err(format!(
                "lockfileVersion is {}; this build reads version {LOCKFILE_VERSION}",
                document.lockfile_version
            ));
        }
        for (key, package) in &document.packages {
            match split_package_key(key) {
                // The name and version become folders under the packages
                // root, so a hostile lockfile must not be able to name `..`.
                Some((name, version))
                    if version == package.version
                        && is_safe_name(name)
                        && semver::Version::parse(version).is_ok() => {}
                _ => {
                    return Err(format!(
                        "key `{key}` is not `<name>@{}` with a package name and a semver version",
                        package.version
                    ))
                }
            }
            for (name, version) in &package.dependencies {
                let dependency = package_key(name, version);
                if !document.packages.contains_key(&dependency) {
                    return Err(format!(
                        "`{key}` depends on `{dependency}`, which has no entry"
                    ));
                }
            }
        }
        Ok(Lockfile {
            packages: document.packages,
        })
    }

    /// The lockfile as YAML, keys sorted so the same tree always prints
    /// the same bytes. Strings are JSON-quoted, which YAML reads as
    /// double-quoted scalars.
    pub fn to_yaml(&self) -> String {
        let quote = |text: &str| serde_json::Value::String(text.to_string()).to_string();
        let mut out = format!("lockfileVersion: {LOCKFILE_VERSION}\n");
        if self.packages.is_empty() {
            out.push_str("packages: {}\n");
            return out;
        }
        out.push_str("packages:\n");
        for (key, package) in &self.packages {
            out.push_str(&format!("  {}:\n", quote(key)));
            out.push_str(&format!("    version: {}\n", quote(&package.version)));
            out.push_str(&format!("    resolved: {}\n", quote(&package.resolved)));
            out.push_str(&format!("    integrity: {}\n", quote(&package.integrity)));
            if !package.dependencies.is_empty() {
                out.push_str("    dependencies:\n");
                for (name, version) in &package.dependencies {
                    out.push_str(&format!("      {}: {}\n", quote(name), quote(version)));
                }
            }
        }
        out
    }

    /// The locked versions of package `name`.
    pub fn versions_of<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = &'a LockedPackage> + 'a {
        self.packages
            .iter()
            .filter(move |(key, _)| split_package_key(key).is_some_and(|(n, _)| n == name))
            .map(|(_, package)| package)
    }
}

/// Whether `name` is `name` or `@scope/name` with parts of lowercase
/// letters, digits and `-`: nothing that could leave a folder.
fn is_safe_name(name: &str) -> bool {
    let part_ok = |part: &str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    match name.strip_prefix('@').map(|scoped| scoped.split_once('/')) {
        Some(Some((scope, rest))) => part_ok(scope) && part_ok(rest),
        Some(None) => false,
        None => part_ok(name),
    }
}

/// `name@version`, the key of a lockfile entry.
pub fn package_key(name: &str, version: &str) -> String {
    format!("{name}@{version}")
}

/// Splits `name@version` (the name may itself start with `@`).
pub fn split_package_key(key: &str) -> Option<(&str, &str)> {
    let (name, version) = key.rsplit_once('@')?;
    (!name.is_empty() && !version.is_empty()).then_some((name, version))
}

/// Where version `version` of package `name` is unpacked:
/// `<packages_root>/<name>@<version>/` (`workspace.md` §8), so a scoped
/// package sits in its scope's folder (`@acme/tools@1.2.0/`). The caller
/// has checked the name against the naming rules and the version as
/// semver, so neither can hold `..`.
pub fn installed_package_dir(packages_root: &Path, name: &str, version: &str) -> PathBuf {
    let mut dir = packages_root.to_path_buf();
    let mut parts = name.split('/').peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_some() {
            dir.push(part);
        } else {
            dir.push(package_key(part, version));
        }
    }
    dir
}

/// The manifest of an unpacked package: `dist/goondan.yaml` when it
/// exists (it wins, §2.7), else `goondan.yaml`.
pub fn package_manifest(package_dir: &Path) -> Option<PathBuf> {
    ["dist/goondan.yaml", "goondan.yaml"]
        .into_iter()
        .map(|relative| package_dir.join(relative))
        .find(|path| path.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_yaml() {
        let mut lockfile = Lockfile::default();
        lockfile.packages.insert(
            package_key("@acme/tools", "1.2.0"),
            LockedPackage {
                version: "1.2.0".into(),
                resolved: "http://127.0.0.1:1/@acme/tools/-/tools-1.2.0.tgz".into(),
                integrity: "sha512-AAAA".into(),
                dependencies: BTreeMap::from([("util".to_string(), "0.5.2".to_string())]),
            },
        );
        lockfile.packages.insert(
            package_key("util", "0.5.2"),
            LockedPackage {
                version: "0.5.2".into(),
                resolved: "http://127.0.0.1:1/util/-/util-0.5.2.tgz".into(),
                integrity: "sha512-BBBB".into(),
                dependencies: BTreeMap::new(),
            },
        );
        let text = lockfile.to_yaml();
        assert_eq!(Lockfile::parse(&text).unwrap(), lockfile);
        assert_eq!(lockfile.versions_of("util").count(), 1);
    }

    #[test]
    fn refuses_broken_lockfiles() {
        let cases = [
            ("lockfileVersion: 2\npackages: {}\n", "lockfileVersion is 2"),
            (
                "lockfileVersion: 1\npackages:\n  \"a@1.0.0\":\n    version: \"2.0.0\"\n    resolved: x\n    integrity: y\n",
                "is not `<name>@2.0.0`",
            ),
            (
                "lockfileVersion: 1\npackages:\n  \"a@1.0.0\":\n    version: \"1.0.0\"\n    resolved: x\n    integrity: y\n    dependencies:\n      b: \"1.0.0\"\n",
                "`b@1.0.0`, which has no entry",
            ),
            ("lockfileVersion: 1\nextra: 1\n", "unknown field"),
            (
                "lockfileVersion: 1\npackages:\n  \"@a/../../etc@1.0.0\":\n    version: \"1.0.0\"\n    resolved: x\n    integrity: y\n",
                "is not `<name>@1.0.0`",
            ),
            (
                "lockfileVersion: 1\npackages:\n  \"a@../x\":\n    version: \"../x\"\n    resolved: x\n    integrity: y\n",
                "is not `<name>@../x`",
            ),
        ];
        for (text, expected) in cases {
            let problem = Lockfile::parse(text).unwrap_err();
            assert!(problem.contains(expected), "{text}: {problem}");
        }
    }

    #[test]
    fn splits_scoped_keys() {
        assert_eq!(
            split_package_key("@acme/tools@1.0.0"),
            Some(("@acme/tools", "1.0.0"))
        );
        assert_eq!(split_package_key("tools@1.0.0"), Some(("tools", "1.0.0")));
        assert_eq!(split_package_key("@acme/tools"), None);
        assert_eq!(
            installed_package_dir(Path::new("/p"), "@acme/tools", "1.0.0"),
            PathBuf::from("/p/@acme/tools@1.0.0")
        );
    }
}
