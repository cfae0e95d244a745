//! Packing and publishing a bundle as a package (`bundle_package.md`
//! §2.6, §13.4): the Package must name itself and a semver version, the
//! bundle must validate, and the tarball goes up with its integrity.

use crate::error::PackageError;
use crate::manifest::PackageManifest;
use crate::metadata::{Attachment, PublishBody, PublishDist};
use base64::Engine;
use std::collections::BTreeMap;
use std::path::Path;

/// A packed package, ready to write or publish.
#[derive(Debug, Clone)]
pub struct Packed {
    /// The package name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// `<bare name>-<version>.tgz`.
    pub file_name: String,
    /// The tarball.
    pub tarball: Vec<u8>,
    /// `sha512-...` of the tarball.
    pub integrity: String,
    /// The Package document it was packed from.
    pub manifest: PackageManifest,
}

/// Checks the Package document and packs the bundle at `bundle_root`.
pub fn pack(bundle_root: &Path) -> Result<Packed, PackageError> {
    let manifest =
        PackageManifest::read(bundle_root)?.ok_or_else(|| PackageError::NoPackageDocument {
            path: crate::manifest::manifest_path(bundle_root),
        })?;
    crate::name::check_registry_name(&manifest.name)?;
    let version_text =
        manifest
            .spec
            .version
            .clone()
            .ok_or_else(|| PackageError::ManifestInvalid {
                problem: format!(
                    "{} has no spec.version; publishing needs one",
                    manifest.name
                ),
            })?;
    let version =
        semver::Version::parse(&version_text).map_err(|_| PackageError::VersionInvalid {
            name: manifest.name.clone(),
            text: version_text.clone(),
            what: "version",
        })?;
    for (name, range) in manifest.registry_dependencies() {
        crate::name::check_registry_name(&name)?;
        semver::VersionReq::parse(&range).map_err(|_| PackageError::VersionInvalid {
            name,
            text: range,
            what: "range",
        })?;
    }
    let tarball = crate::tarball::pack(bundle_root)?;
    let integrity = crate::integrity::integrity_of(&tarball);
    Ok(Packed {
        file_name: format!("{}-{version}.tgz", crate::name::bare_name(&manifest.name)),
        name: manifest.name.clone(),
        version: version.to_string(),
        tarball,
        integrity,
        manifest,
    })
}

/// Validates the bundle as `gdn validate` would; the first error and the
/// count when it does not load.
pub fn validate(bundle_root: &Path, packages_root: &Path) -> Result<(), PackageError> {
    let options = goondan_config::LoadOptions {
        packages_root: Some(packages_root.to_path_buf()),
        ..goondan_config::LoadOptions::default()
    };
    let outcome = goondan_config::load_bundle(bundle_root, &options).map_err(|error| {
        PackageError::BundleInvalid {
            summary: error.to_string(),
        }
    })?;
    if outcome.bundle.is_some() {
        return Ok(());
    }
    let errors: Vec<_> = outcome.errors().collect();
    Err(PackageError::BundleInvalid {
        summary: match errors.first() {
            Some(first) => format!(
                "[{}] {}{}",
                first.code,
                first.message,
                if errors.len() > 1 {
                    format!(" (and {} more)", errors.len() - 1)
                } else {
                    String::new()
                }
            ),
            None => "the bundle did not load".into(),
        },
    })
}

/// The publish body of `packed`, pointing `tag` (default `latest`) at it.
pub fn publish_body(packed: &Packed, tag: Option<&str>, access: Option<&str>) -> PublishBody {
    let access = access
        .map(str::to_string)
        .or_else(|| {
            packed.manifest.spec.access.map(|access| match access {
                goondan_config::spec::PackageAccess::Public => "public".to_string(),
                goondan_config::spec::PackageAccess::Restricted => "restricted".to_string(),
            })
        })
        .unwrap_or_else(|| "public".into());
    PublishBody {
        name: packed.name.clone(),
        version: packed.version.clone(),
        description: packed.manifest.spec.description.clone().unwrap_or_default(),
        access,
        dependencies: packed.manifest.registry_dependencies(),
        dist_tags: BTreeMap::from([(tag.unwrap_or("latest").to_string(), packed.version.clone())]),
        dist: PublishDist {
            integrity: packed.integrity.clone(),
            shasum: crate::integrity::shasum_of(&packed.tarball),
        },
        attachments: BTreeMap::from([(
            packed.file_name.clone(),
            Attachment {
                content_type: "application/octet-stream".into(),
                data: base64::engine::general_purpose::STANDARD.encode(&packed.tarball),
                length: packed.tarball.len() as u64,
            },
        )]),
    }
}
