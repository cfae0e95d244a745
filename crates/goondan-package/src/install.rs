//! Installing a bundle's dependencies (`bundle_package.md` §13.3): the
//! lockfile when it still answers the Package's ranges (no metadata
//! fetched, so a fresh machine gets the same tree), else a new resolution
//! against the registry; then every locked tarball is downloaded, checked
//! against its integrity, and unpacked under `<System Root>/packages/`.
//!
//! Nothing is half-installed: every tarball is downloaded and checked
//! before any is unpacked, each unpacks into a staging folder that is
//! renamed into place only when complete, and the lockfile is written
//! last. An installed folder carries its integrity in
//! `.goondan-integrity`, so a second install of the same tree downloads
//! nothing.

use crate::error::PackageError;
use crate::manifest::PackageManifest;
use crate::metadata::PackageMetadata;
use crate::registry::client::RegistryClient;
use crate::resolve::{self, Step};
use crate::settings::ClientSettings;
use goondan_config::lockfile::{
    installed_package_dir, package_manifest, split_package_key, Lockfile, LOCKFILE_NAME,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The file in an installed package folder holding its integrity.
pub const INTEGRITY_MARKER: &str = ".goondan-integrity";

/// How to install.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// `<System Root>/packages`.
    pub packages_root: PathBuf,
    /// `--registry`, which wins over the Package's `spec.registry.url`.
    pub registry: Option<String>,
    /// `--frozen-lockfile`: refuse to change the lockfile.
    pub frozen: bool,
    /// The System Root's `config.json` (registry and tokens).
    pub settings: ClientSettings,
    /// Re-lock a version whose integrity changed on the registry instead
    /// of refusing with [`PackageError::IntegrityChanged`].
    pub accept_changed_integrity: bool,
}

/// What an install did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstallReport {
    /// `name@version` downloaded and unpacked now.
    pub installed: Vec<String>,
    /// `name@version` already in place with the right integrity.
    pub cached: Vec<String>,
    /// Whether `goondan.lock.yaml` was written.
    pub lockfile_written: bool,
    /// `name@version: message` for each deprecated version in the tree.
    pub deprecated: Vec<String>,
    /// Versions re-locked with the integrity the registry has now (only
    /// with [`InstallOptions::accept_changed_integrity`]), each as
    /// `name@version (locked …, now …)`.
    pub relocked: Vec<String>,
}

/// Installs the dependencies of the bundle at `bundle_root`.
pub async fn install(
    bundle_root: &Path,
    options: &InstallOptions,
) -> Result<InstallReport, PackageError> {
    let existing = Lockfile::read(bundle_root)?;
    install_against(bundle_root, options, existing.clone(), existing).await
}

/// Resolves `name` (every dependency when `None`) again, ignoring the
/// lockfile's choice for it, and installs. The lockfile on disk is only
/// rewritten once the new tree is downloaded and checked, so a refusal
/// leaves it as it was.
pub async fn update(
    bundle_root: &Path,
    options: &InstallOptions,
    name: Option<&str>,
) -> Result<InstallReport, PackageError> {
    let existing = Lockfile::read(bundle_root)?;
    let pinned = existing.clone().map(|mut lockfile| {
        lockfile.packages.retain(|key, _| {
            name.is_some_and(|name| {
                split_package_key(key).is_some_and(|(locked, _)| locked != name)
            })
        });
        lockfile
    });
    install_against(bundle_root, options, pinned, existing).await
}

/// Installs with `existing` as the lockfile to keep where it still
/// answers the Package's ranges; `on_disk` is the lockfile as the bundle has it,
/// what a changed integrity and a rewrite are judged against.
async fn install_against(
    bundle_root: &Path,
    options: &InstallOptions,
    existing: Option<Lockfile>,
    on_disk: Option<Lockfile>,
) -> Result<InstallReport, PackageError> {
    let Some(manifest) = PackageManifest::read(bundle_root)? else {
        return Ok(InstallReport::default());
    };
    let root = manifest.registry_dependencies();
    let mut report = InstallReport::default();
    let lockfile = match &existing {
        Some(lockfile) if resolve::lockfile_satisfies(lockfile, &root)? => prune(lockfile, &root),
        Some(_) | None if root.is_empty() => Lockfile::default(),
        _ if options.frozen => {
            return Err(PackageError::LockfileFrozen {
                problem: match existing {
                    None => format!("there is no {LOCKFILE_NAME}"),
                    Some(_) => "a dependency range accepts none of the locked versions".into(),
                },
            })
        }
        _ => {
            let client = client_for(&manifest, options)?;
            let (lockfile, deprecated) = resolve_with(&client, &root).await?;
            report.deprecated = deprecated;
            lockfile
        }
    };
    if options.frozen && existing.as_ref() != Some(&lockfile) && !root.is_empty() {
        return Err(PackageError::LockfileFrozen {
            problem: "it holds packages the Package no longer needs".into(),
        });
    }
    let changed = changed_integrity(on_disk.as_ref(), &lockfile);
    if !changed.is_empty() {
        if !options.accept_changed_integrity {
            return Err(PackageError::IntegrityChanged { changes: changed });
        }
        report.relocked = changed;
    }
    let downloader = client_for(&manifest, options).ok();
    install_locked(
        &lockfile,
        &options.packages_root,
        downloader.as_ref(),
        &mut report,
    )
    .await?;
    if on_disk.as_ref() != Some(&lockfile) {
        write_lockfile(bundle_root, &lockfile)?;
        report.lockfile_written = true;
    }
    Ok(report)
}

/// Writes the bundle's `goondan.lock.yaml` through a temporary file and a
/// rename.
pub fn write_lockfile(bundle_root: &Path, lockfile: &Lockfile) -> Result<(), PackageError> {
    crate::fsutil::write_atomic(
        &bundle_root.join(LOCKFILE_NAME),
        lockfile.to_yaml().as_bytes(),
    )
}

/// The registry client of a bundle: `--registry`, else the Package's
/// `spec.registry.url`, else the settings.
pub fn client_for(
    manifest: &PackageManifest,
    options: &InstallOptions,
) -> Result<RegistryClient, PackageError> {
    let explicit = options.registry.as_deref().or(manifest
        .spec
        .registry
        .as_ref()
        .map(|registry| registry.url.as_str()));
    let base = options.settings.registry(explicit)?;
    let token = options.settings.token(&base);
    RegistryClient::new(base, token)
}

/// Resolves `root` against the registry, fetching metadata as the
/// resolver asks for it.
pub async fn resolve_with(
    client: &RegistryClient,
    root: &BTreeMap<String, String>,
) -> Result<(Lockfile, Vec<String>), PackageError> {
    let mut known: BTreeMap<String, PackageMetadata> = BTreeMap::new();
    loop {
        match resolve::resolve(root, &known)? {
            Step::NeedMetadata(names) => {
                for name in names {
                    let metadata = client.metadata(&name).await?;
                    known.insert(name, metadata);
                }
            }
            Step::Done(resolution) => {
                let deprecated = resolution
                    .versions
                    .iter()
                    .filter_map(|(name, version)| {
                        let metadata = known.get(name)?.versions.get(&version.to_string())?;
                        (!metadata.deprecated.is_empty())
                            .then(|| format!("{name}@{version}: {}", metadata.deprecated))
                    })
                    .collect();
                return Ok((resolve::to_lockfile(&resolution, &known), deprecated));
            }
        }
    }
}

/// Each `name@version` that `before` and `after` both lock with different
/// integrities, as `name@version (locked …, now …)`.
fn changed_integrity(before: Option<&Lockfile>, after: &Lockfile) -> Vec<String> {
    let Some(before) = before else {
        return Vec::new();
    };
    after
        .packages
        .iter()
        .filter_map(|(key, now)| {
            let locked = before.packages.get(key)?;
            (locked.integrity != now.integrity)
                .then(|| format!("{key} (locked {}, now {})", locked.integrity, now.integrity))
        })
        .collect()
}

/// The entries of `lockfile` reachable from `root`.
fn prune(lockfile: &Lockfile, root: &BTreeMap<String, String>) -> Lockfile {
    let mut keep = BTreeSet::new();
    let mut queue: Vec<String> = Vec::new();
    for (name, range) in root {
        let Ok(range) = semver::VersionReq::parse(range) else {
            continue;
        };
        if let Some(best) = lockfile
            .versions_of(name)
            .filter_map(|locked| semver::Version::parse(&locked.version).ok())
            .filter(|version| range.matches(version))
            .max()
        {
            queue.push(goondan_config::lockfile::package_key(
                name,
                &best.to_string(),
            ));
        }
    }
    while let Some(key) = queue.pop() {
        if !keep.insert(key.clone()) {
            continue;
        }
        if let Some(locked) = lockfile.packages.get(&key) {
            for (name, version) in &locked.dependencies {
                queue.push(goondan_config::lockfile::package_key(name, version));
            }
        }
    }
    Lockfile {
        packages: lockfile
            .packages
            .iter()
            .filter(|(key, _)| keep.contains(*key))
            .map(|(key, locked)| (key.clone(), locked.clone()))
            .collect(),
    }
}

/// Downloads, checks and unpacks every package of `lockfile` that is not
/// already in place.
pub async fn install_locked(
    lockfile: &Lockfile,
    packages_root: &Path,
    registry: Option<&RegistryClient>,
    report: &mut InstallReport,
) -> Result<(), PackageError> {
    let mut fetched = Vec::new();
    for (key, locked) in &lockfile.packages {
        let Some((name, version)) = split_package_key(key) else {
            continue;
        };
        crate::name::check_registry_name(name)?;
        semver::Version::parse(version).map_err(|_| PackageError::VersionInvalid {
            name: name.to_string(),
            text: version.to_string(),
            what: "version",
        })?;
        let dir = installed_package_dir(packages_root, name, version);
        let marker = std::fs::read_to_string(dir.join(INTEGRITY_MARKER)).unwrap_or_default();
        if marker.trim() == locked.integrity && package_manifest(&dir).is_some() {
            report.cached.push(key.clone());
            continue;
        }
        let bytes = match registry {
            Some(client) => client.tarball(&locked.resolved).await?,
            None => {
                let url =
                    url::Url::parse(&locked.resolved).map_err(|_| PackageError::NoRegistry)?;
                RegistryClient::new(url, None)?
                    .tarball(&locked.resolved)
                    .await?
            }
        };
        if !crate::integrity::matches(&bytes, &locked.integrity) {
            return Err(PackageError::IntegrityMismatch {
                what: format!("{key} ({})", locked.resolved),
                expected: locked.integrity.clone(),
                actual: crate::integrity::integrity_of(&bytes),
            });
        }
        fetched.push((key.clone(), dir, bytes, locked.integrity.clone()));
    }
    for (key, dir, bytes, integrity) in fetched {
        place(packages_root, &dir, &bytes, &integrity)?;
        report.installed.push(key);
    }
    Ok(())
}

/// Unpacks `bytes` into a staging folder, then renames it to `dir`
/// (replacing an older, incomplete or tampered copy).
fn place(
    packages_root: &Path,
    dir: &Path,
    bytes: &[u8],
    integrity: &str,
) -> Result<(), PackageError> {
    let staging_root = packages_root.join(".staging");
    std::fs::create_dir_all(&staging_root).map_err(PackageError::io(&staging_root))?;
    let unique = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or_default()
    );
    let staging = staging_root.join(&unique);
    let result = (|| {
        crate::tarball::unpack(bytes, &staging)?;
        if package_manifest(&staging).is_none() {
            return Err(PackageError::ManifestInvalid {
                problem:
                    "the tarball holds neither package/goondan.yaml nor package/dist/goondan.yaml"
                        .into(),
            });
        }
        crate::fsutil::write_atomic(&staging.join(INTEGRITY_MARKER), integrity.as_bytes())?;
        let parent = dir.parent().unwrap_or(packages_root);
        std::fs::create_dir_all(parent).map_err(PackageError::io(parent))?;
        if dir.exists() {
            let old = staging_root.join(format!("{unique}.old"));
            std::fs::rename(dir, &old).map_err(PackageError::io(dir))?;
            let _ = std::fs::remove_dir_all(&old);
        }
        std::fs::rename(&staging, dir).map_err(PackageError::io(dir))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_config::lockfile::LockedPackage;

    fn lockfile(entries: &[(&str, &str)]) -> Lockfile {
        Lockfile {
            packages: entries
                .iter()
                .map(|(key, integrity)| {
                    let version = split_package_key(key).unwrap().1.to_string();
                    let locked = LockedPackage {
                        version,
                        resolved: format!("http://127.0.0.1/{key}.tgz"),
                        integrity: integrity.to_string(),
                        dependencies: BTreeMap::new(),
                    };
                    (key.to_string(), locked)
                })
                .collect(),
        }
    }

    #[test]
    fn only_a_version_locked_before_with_another_integrity_is_a_change() {
        let before = lockfile(&[("@acme/a@1.0.0", "sha512-A"), ("@acme/b@1.0.0", "sha512-B")]);
        let cases: [(Option<&Lockfile>, Lockfile, Vec<&str>); 4] = [
            (None, lockfile(&[("@acme/a@1.0.0", "sha512-X")]), vec![]),
            (Some(&before), before.clone(), vec![]),
            // A new version is a new lock, not a changed one.
            (
                Some(&before),
                lockfile(&[("@acme/a@1.1.0", "sha512-X")]),
                vec![],
            ),
            (
                Some(&before),
                lockfile(&[("@acme/a@1.0.0", "sha512-X"), ("@acme/b@1.0.0", "sha512-B")]),
                vec!["@acme/a@1.0.0 (locked sha512-A, now sha512-X)"],
            ),
        ];
        for (before, after, expected) in cases {
            assert_eq!(changed_integrity(before, &after), expected);
        }
    }
}
