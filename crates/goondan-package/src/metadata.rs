//! The registry's JSON documents (`bundle_package.md` §8.2): a package's
//! metadata with its versions and dist-tags, and the publish body. These
//! are wire types: the server stores and serves them, the client reads
//! and sends them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `GET /<scope>/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageMetadata {
    /// The package name.
    pub name: String,
    /// What the package is.
    #[serde(default)]
    pub description: String,
    /// `public` or `restricted`.
    #[serde(default = "public")]
    pub access: String,
    /// Every published version.
    #[serde(default)]
    pub versions: BTreeMap<String, VersionMetadata>,
    /// Tags such as `latest`, each naming a version.
    #[serde(rename = "dist-tags", default)]
    pub dist_tags: BTreeMap<String, String>,
}

fn public() -> String {
    "public".into()
}

/// One version (`GET /<scope>/<name>/<version>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionMetadata {
    /// The exact version.
    pub version: String,
    /// Its dependencies: name to semver range.
    #[serde(default)]
    pub dependencies: BTreeMap<String, String>,
    /// Empty, or why the version should no longer be used.
    #[serde(default)]
    pub deprecated: String,
    /// Where its tarball is and what it hashes to.
    pub dist: Dist,
}

/// `dist` of a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dist {
    /// The tarball URL.
    pub tarball: String,
    /// SHA-1 hex (informative).
    #[serde(default)]
    pub shasum: String,
    /// `sha512-<base64>`: what is checked.
    pub integrity: String,
}

/// `PUT /<scope>/<name>`: one new version and its tarball.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PublishBody {
    /// The package name (must match the path and the manifest).
    pub name: String,
    /// The version (must match the manifest).
    pub version: String,
    /// What the package is.
    #[serde(default)]
    pub description: String,
    /// `public` or `restricted`.
    #[serde(default = "public")]
    pub access: String,
    /// Its dependencies: name to semver range.
    #[serde(default)]
    pub dependencies: BTreeMap<String, String>,
    /// The tags to point at this version (`latest` when empty).
    #[serde(rename = "dist-tags", default)]
    pub dist_tags: BTreeMap<String, String>,
    /// The integrity the client computed.
    pub dist: PublishDist,
    /// The tarball, keyed by its file name.
    #[serde(rename = "_attachments")]
    pub attachments: BTreeMap<String, Attachment>,
}

/// `dist` of a publish body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PublishDist {
    /// `sha512-<base64>` of the attached tarball.
    pub integrity: String,
    /// SHA-1 hex of the attached tarball.
    #[serde(default)]
    pub shasum: String,
}

/// An attached tarball.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attachment {
    /// `application/octet-stream`.
    #[serde(default)]
    pub content_type: String,
    /// The tarball, base64.
    pub data: String,
    /// Its length in bytes.
    pub length: u64,
}

/// `PUT /<scope>/<name>/<version>/deprecate`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeprecateBody {
    /// Why; empty clears the mark.
    pub message: String,
}
