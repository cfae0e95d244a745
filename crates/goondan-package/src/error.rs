//! [`PackageError`]: every way resolving, packing, installing or talking
//! to a registry can fail, each with a stable code (the `PKG_*` names of
//! `bundle_package.md` §12.3, prefixed `E_`) and a suggestion.

use std::path::PathBuf;

/// A failure of a package operation.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// A package name breaks the naming rules.
    #[error("`{name}` is not a valid package name: {problem}")]
    NameInvalid {
        /// The name as written.
        name: String,
        /// Which rule it breaks.
        problem: String,
    },
    /// A version or range does not parse as semver.
    #[error("`{text}` is not a valid semver {what} for `{name}`")]
    VersionInvalid {
        /// The package.
        name: String,
        /// The text as written.
        text: String,
        /// `version` or `range`.
        what: &'static str,
    },
    /// The registry has no such package (or no such version).
    #[error("package `{name}` was not found at {registry}")]
    NotFound {
        /// The package (with `@version` when one was asked for).
        name: String,
        /// The registry asked.
        registry: String,
    },
    /// No published version satisfies the range.
    #[error("no version of `{name}` matches `{range}` (published: {available})")]
    NoMatchingVersion {
        /// The package.
        name: String,
        /// The range asked for.
        range: String,
        /// The versions the registry has, comma-separated.
        available: String,
    },
    /// Two packages require versions of one package that no single version
    /// satisfies (§7.2: installing stops, nothing is picked silently).
    #[error("version conflict for `{name}`: {}", requirements.join("; "))]
    VersionConflict {
        /// The package required twice.
        name: String,
        /// `requirer requires name@range`, one per requirement.
        requirements: Vec<String>,
    },
    /// The dependency graph has a cycle (§7.1).
    #[error("circular dependency: {}", cycle.join(" -> "))]
    CircularDependency {
        /// The packages of the cycle, the first repeated at the end.
        cycle: Vec<String>,
    },
    /// A tarball's sha512 does not match the integrity it should have.
    #[error("integrity check failed for {what}: expected {expected}, got {actual}")]
    IntegrityMismatch {
        /// The package or tarball.
        what: String,
        /// The integrity recorded (lockfile or registry).
        expected: String,
        /// The integrity of the bytes received.
        actual: String,
    },
    /// A new resolution gives a version already in the lockfile another
    /// integrity: the registry changed the bytes of a published version,
    /// which should never happen.
    #[error(
        "the registry changed the integrity of a version goondan.lock.yaml already locks: {}",
        changes.join("; ")
    )]
    IntegrityChanged {
        /// `name@version (locked …, now …)`, one per changed version.
        changes: Vec<String>,
    },
    /// A tarball entry escapes its folder or is not a plain file or folder.
    #[error("unsafe tarball entry `{entry}`: {problem}")]
    UnsafeTarball {
        /// The entry's path as stored.
        entry: String,
        /// Why it is refused.
        problem: String,
    },
    /// A body, tarball or unpacked tree is larger than allowed.
    #[error("{what} is larger than the limit of {limit} bytes")]
    TooLarge {
        /// What was too large.
        what: String,
        /// The limit.
        limit: u64,
    },
    /// A package has no valid manifest, or its Package document is wrong.
    #[error("{problem}")]
    ManifestInvalid {
        /// What is wrong.
        problem: String,
    },
    /// The registry wants a token, or refused the one sent.
    #[error("{registry} refused the request: authentication required ({status})")]
    AuthRequired {
        /// The registry.
        registry: String,
        /// The HTTP status.
        status: u16,
    },
    /// The registry answered with an error.
    #[error("{url} answered {status}: {message}")]
    Registry {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The registry's message.
        message: String,
    },
    /// The registry cannot be reached.
    #[error("cannot reach {url}: {source}")]
    Unreachable {
        /// The URL asked.
        url: String,
        /// The transport error.
        source: reqwest::Error,
    },
    /// No registry is configured.
    #[error("no registry is configured")]
    NoRegistry,
    /// A registry or tarball URL is not an absolute http(s) URL.
    #[error("`{url}` cannot be used: {problem}")]
    UrlInvalid {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A registry's `--token-file` is unusable.
    #[error("{}: {problem}", path.display())]
    TokenFile {
        /// The token file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A file operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The lockfile cannot be used.
    #[error(transparent)]
    Lockfile(#[from] goondan_config::lockfile::LockfileError),
    /// `--frozen-lockfile` and the lockfile does not match the Package.
    #[error("goondan.lock.yaml is out of date: {problem}")]
    LockfileFrozen {
        /// What differs.
        problem: String,
    },
    /// The bundle has no Package document to hold dependencies.
    #[error("{} has no Package document", path.display())]
    NoPackageDocument {
        /// The `goondan.yaml` read.
        path: PathBuf,
    },
    /// The bundle being published does not validate.
    #[error("the package does not validate: {summary}")]
    BundleInvalid {
        /// The first error and how many there are.
        summary: String,
    },
}

impl PackageError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            PackageError::NameInvalid { .. } => "E_PKG_NAME_INVALID",
            PackageError::VersionInvalid { .. } => "E_PKG_VERSION_INVALID",
            PackageError::NotFound { .. } => "E_PKG_NOT_FOUND",
            PackageError::NoMatchingVersion { .. } => "E_PKG_NOT_FOUND",
            PackageError::VersionConflict { .. } => "E_PKG_VERSION_CONFLICT",
            PackageError::CircularDependency { .. } => "E_PKG_CIRCULAR_DEP",
            PackageError::IntegrityMismatch { .. } => "E_PKG_INTEGRITY_FAIL",
            PackageError::IntegrityChanged { .. } => "E_PKG_INTEGRITY_CHANGED",
            PackageError::UnsafeTarball { .. } => "E_PKG_PATH_TRAVERSAL",
            PackageError::TooLarge { .. } => "E_PKG_TOO_LARGE",
            PackageError::ManifestInvalid { .. } => "E_PKG_SCHEMA_INVALID",
            PackageError::AuthRequired { .. } => "E_PKG_AUTH_REQUIRED",
            PackageError::Registry { .. } => "E_PKG_REGISTRY",
            PackageError::Unreachable { .. } => "E_PKG_REGISTRY_UNREACHABLE",
            PackageError::NoRegistry => "E_PKG_NO_REGISTRY",
            PackageError::UrlInvalid { .. } => "E_PKG_URL_INVALID",
            PackageError::TokenFile { .. } => "E_PKG_TOKEN_FILE",
            PackageError::Io { .. } => "E_PKG_IO",
            PackageError::Lockfile(error) => error.code(),
            PackageError::LockfileFrozen { .. } => "E_PKG_LOCKFILE_FROZEN",
            PackageError::NoPackageDocument { .. } => "E_PKG_NO_PACKAGE",
            PackageError::BundleInvalid { .. } => "E_PKG_SCHEMA_INVALID",
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> String {
        match self {
            PackageError::NameInvalid { .. } => {
                "use lowercase letters, digits and `-`, optionally scoped: @scope/name".into()
            }
            PackageError::VersionInvalid { .. } => {
                "write a version like 1.2.0 or a range like ^1.2.0".into()
            }
            PackageError::NotFound { .. } => {
                "check the name and the registry (--registry, spec.registry.url)".into()
            }
            PackageError::NoMatchingVersion { .. } => {
                "widen the range or publish a matching version".into()
            }
            PackageError::VersionConflict { .. } => {
                "align the version ranges of the packages that require it".into()
            }
            PackageError::CircularDependency { .. } => {
                "remove one dependency of the cycle".into()
            }
            PackageError::IntegrityMismatch { .. } => {
                "the tarball changed since it was locked: check the registry, or delete the entry from goondan.lock.yaml and install again if the change is trusted".into()
            }
            PackageError::IntegrityChanged { .. } => {
                "a published version never changes, so the registry may be compromised: check it; if the change is trusted, run `gdn package update --accept-changed-integrity` to re-lock it".into()
            }
            PackageError::UnsafeTarball { .. } => {
                "pack the package with `gdn package pack`: only plain files and folders under package/".into()
            }
            PackageError::TooLarge { .. } => "make the package smaller".into(),
            PackageError::ManifestInvalid { .. } => {
                "a package needs goondan.yaml (or dist/goondan.yaml) whose first document is its Package, with metadata.name and spec.version".into()
            }
            PackageError::AuthRequired { .. } => {
                "set GOONDAN_REGISTRY_TOKEN or run `gdn package login --registry <url>`".into()
            }
            PackageError::Registry { .. } => "see the registry's message".into(),
            PackageError::Unreachable { .. } => {
                "check the registry URL and that it is running".into()
            }
            PackageError::NoRegistry => {
                "pass --registry <url>, set spec.registry.url in the Package, or set GOONDAN_REGISTRY".into()
            }
            PackageError::UrlInvalid { .. } => {
                "use an absolute http:// or https:// URL, such as http://127.0.0.1:4873".into()
            }
            PackageError::TokenFile { .. } => {
                "write one token per line, each at least 24 characters (for example from `openssl rand -hex 32`)".into()
            }
            PackageError::Io { .. } => "check the path and its permissions".into(),
            PackageError::Lockfile(error) => error.suggestion().into(),
            PackageError::LockfileFrozen { .. } => {
                "run `gdn package install` without --frozen-lockfile and commit goondan.lock.yaml".into()
            }
            PackageError::NoPackageDocument { .. } => {
                "add a Package document (apiVersion: goondan.ai/v1, kind: Package, metadata.name) as the first document of goondan.yaml".into()
            }
            PackageError::BundleInvalid { .. } => "run `gdn validate` and fix what it reports".into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> PackageError {
        let path = path.into();
        move |source| PackageError::Io { path, source }
    }
}
