//! Installed dependencies: which exact version of each package the bundle
//! uses (its `spec.dependencies` ranges, pinned by `goondan.lock.yaml`),
//! and the Tools, Extensions and Connectors of each, read from the
//! package's folder under the System Root's `packages/`.
//!
//! It never downloads or installs: a dependency that is not locked or not
//! unpacked is an `E_CONFIG_PACKAGE_NOT_FOUND` diagnostic telling the user
//! to run `gdn package install` (`gdn run` does that first unless
//! `--no-install`). A package's resources pass the same rules as the
//! bundle's own, with the package folder as their root, so a script entry
//! cannot leave its package; entries are then rewritten to absolute paths
//! inside the package folder, so the plugin host finds them whatever the
//! bundle root is.

use super::parse::{self, Parsed, Site};
use super::rules::Rules;
use crate::base_package::BASE_PACKAGE;
use crate::codes::Code;
use crate::discover::BundleFile;
use crate::env::EnvMap;
use crate::error::LoadError;
use crate::lockfile::{installed_package_dir, package_key, package_manifest, Lockfile};
use goondan_types::{Diagnostic, Entry};
use std::collections::{BTreeSet, VecDeque};
use std::path::Path;

/// One dependency, loaded: its name and the resources it offers.
pub(crate) struct InstalledPackage {
    /// The package name, as in `package: "@scope/name"`.
    pub(crate) name: String,
    /// Everything its manifest holds; only Tools, Extensions and
    /// Connectors are offered to the bundle.
    pub(crate) parsed: Parsed,
}

/// What [`load_dependencies`] needs besides the bundle.
pub(crate) struct DependencySources<'a> {
    /// The bundle root (where `goondan.lock.yaml` lives).
    pub(crate) root: &'a Path,
    /// `<System Root>/packages`, or `None` when the caller gave none.
    pub(crate) packages_root: Option<&'a Path>,
    /// The environment the packages' ValueSources resolve against.
    pub(crate) env: &'a EnvMap,
}

/// Loads every package the bundle's Package document depends on, and
/// theirs, each once. Problems become diagnostics on the dependency.
pub(crate) fn load_dependencies(
    parsed: &Parsed,
    sources: &DependencySources<'_>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Result<Vec<InstalledPackage>, LoadError> {
    let Some(package) = &parsed.package else {
        return Ok(Vec::new());
    };
    let wanted: Vec<(usize, &crate::spec::PackageDependency)> = package
        .resource
        .spec
        .dependencies
        .iter()
        .enumerate()
        .filter(|(_, dependency)| dependency.name != BASE_PACKAGE)
        .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let site = &package.site;
    let field = |index: usize, part: &str| format!("spec.dependencies[{index}].{part}");
    let lockfile = match Lockfile::read(sources.root) {
        Ok(Some(lockfile)) => lockfile,
        Ok(None) => {
            for (index, dependency) in &wanted {
                diagnostics.push(
                    site.at(
                        Code::PackageNotFound,
                        format!(
                            "package `{}` ({}) is not installed: there is no goondan.lock.yaml",
                            dependency.name, dependency.version
                        ),
                        &field(*index, "name"),
                    )
                    .with_suggestion("run `gdn package install`"),
                );
            }
            return Ok(Vec::new());
        }
        Err(error) => {
            diagnostics.push(
                Code::PackageLockfile
                    .diagnostic(error.to_string())
                    .with_file(crate::lockfile::LOCKFILE_NAME)
                    .with_suggestion(error.suggestion()),
            );
            return Ok(Vec::new());
        }
    };
    let Some(packages_root) = sources.packages_root else {
        diagnostics.push(
            site.at(
                Code::PackageNotFound,
                "the bundle has package dependencies, but no System Root was given to load them from",
                "spec.dependencies",
            )
            .with_suggestion("pass --state-root or set GOONDAN_STATE_ROOT"),
        );
        return Ok(Vec::new());
    };

    // Breadth-first over the locked tree: the bundle's ranges pick the
    // locked versions, the lockfile's own edges the rest.
    let mut queue: VecDeque<(String, String)> = VecDeque::new();
    for (index, dependency) in &wanted {
        match pick_locked(&lockfile, dependency) {
            Ok(version) => queue.push_back((dependency.name.clone(), version)),
            Err(problem) => diagnostics.push(problem.at(site, &field(*index, "version"))),
        }
    }
    let mut seen = BTreeSet::new();
    let mut installed = Vec::new();
    while let Some((name, version)) = queue.pop_front() {
        let key = package_key(&name, &version);
        if !seen.insert(key.clone()) {
            continue;
        }
        let Some(locked) = lockfile.packages.get(&key) else {
            diagnostics.push(
                Code::PackageLockfile
                    .diagnostic(format!("goondan.lock.yaml has no entry `{key}`"))
                    .with_file(crate::lockfile::LOCKFILE_NAME),
            );
            continue;
        };
        for (dependency, exact) in &locked.dependencies {
            queue.push_back((dependency.clone(), exact.clone()));
        }
        let dir = installed_package_dir(packages_root, &name, &version);
        let Some(manifest) = package_manifest(&dir) else {
            diagnostics.push(
                site.at(
                    Code::PackageNotFound,
                    format!(
                        "package `{key}` is locked but not installed: {} has no goondan.yaml",
                        dir.display()
                    ),
                    "spec.dependencies",
                )
                .with_suggestion("run `gdn package install`"),
            );
            continue;
        };
        installed.push(read_package(
            &name,
            &version,
            &dir,
            &manifest,
            sources.env,
            diagnostics,
        )?);
    }
    Ok(installed)
}

/// Why no locked version fits a dependency.
struct NotLocked {
    code: Code,
    message: String,
}

impl NotLocked {
    fn at(self, site: &Site, field: &str) -> Diagnostic {
        site.at(self.code, self.message, field)
    }
}

/// The locked version of `dependency`, which its range must accept.
fn pick_locked(
    lockfile: &Lockfile,
    dependency: &crate::spec::PackageDependency,
) -> Result<String, NotLocked> {
    let range = semver::VersionReq::parse(&dependency.version).map_err(|error| NotLocked {
        code: Code::Schema,
        message: format!(
            "`{}` is not a semver range for `{}`: {error}",
            dependency.version, dependency.name
        ),
    })?;
    let locked: Vec<&str> = lockfile
        .versions_of(&dependency.name)
        .map(|package| package.version.as_str())
        .collect();
    locked
        .iter()
        .filter_map(|text| semver::Version::parse(text).ok())
        .filter(|version| range.matches(version))
        .max()
        .map(|version| version.to_string())
        .ok_or_else(|| NotLocked {
            code: Code::PackageLockfile,
            message: if locked.is_empty() {
                format!(
                    "package `{}` ({}) is not in goondan.lock.yaml",
                    dependency.name, dependency.version
                )
            } else {
                format!(
                    "goondan.lock.yaml locks `{}` at {}, which `{}` does not accept",
                    dependency.name,
                    locked.join(", "),
                    dependency.version
                )
            },
        })
}

/// Reads one unpacked package: its manifest, checked by the bundle rules
/// with the package folder as root, its script entries made absolute.
fn read_package(
    name: &str,
    version: &str,
    dir: &Path,
    manifest: &Path,
    env: &EnvMap,
    diagnostics: &mut Vec<Diagnostic>,
) -> Result<InstalledPackage, LoadError> {
    let root = dir.canonicalize().map_err(|source| LoadError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let relative = manifest
        .strip_prefix(dir)
        .map(|path| path.to_string_lossy().replace('\\', "/"))
        .unwrap_or_else(|_| "goondan.yaml".to_string());
    let file = BundleFile {
        path: manifest.to_path_buf(),
        display: format!("{}/{relative}", package_key(name, version)),
        may_hold_package: true,
    };
    let mut parsed = Parsed::default();
    parse::read_file(&file, &mut parsed, diagnostics)?;
    Rules {
        root: &root,
        env,
        // A package's scripts were checked when it was published, and a
        // syntax error there is not the user's to fix.
        check_script_syntax: false,
        diagnostics,
    }
    .check_resources(&parsed);
    let origin_package = Some(name.to_string());
    let absolute = |entry: &mut String| {
        if let Ok(Entry::Script { path, .. }) = Entry::parse(entry) {
            *entry = root.join(path).to_string_lossy().into_owned();
        }
    };
    for tool in &mut parsed.tools {
        tool.resource.origin.package.clone_from(&origin_package);
        absolute(&mut tool.resource.spec.entry);
    }
    for extension in &mut parsed.extensions {
        extension
            .resource
            .origin
            .package
            .clone_from(&origin_package);
        absolute(&mut extension.resource.spec.entry);
    }
    for connector in &mut parsed.connectors {
        connector
            .resource
            .origin
            .package
            .clone_from(&origin_package);
        absolute(&mut connector.resource.spec.entry);
    }
    Ok(InstalledPackage {
        name: name.to_string(),
        parsed,
    })
}
