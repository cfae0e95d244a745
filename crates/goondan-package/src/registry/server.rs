//! The registry server of `gdn registry serve` (`bundle_package.md` §8.2):
//! package metadata, versions and tarballs from a folder, and publish,
//! unpublish and deprecate behind bearer tokens (§8.3).
//!
//! The port faces the network, so nothing is trusted:
//! - the accept loop caps connections and times out slow request heads
//!   (`goondan_http`); bodies are bounded in size and in time;
//! - writing needs a token from `--token-file` (compared in constant
//!   time); without a token file the registry is read-only; a
//!   `restricted` package is not even readable without one;
//! - names follow the naming rules before they become folders, a
//!   published version is immutable, and `@goondan/base` cannot be
//!   published;
//! - an upload's integrity must match its bytes, and its tarball must
//!   unpack cleanly (no links, no path outside `package/`, bounded size)
//!   and hold a Package document naming the same package and version;
//! - files are written through a temporary file and a rename, under one
//!   lock, so a crash leaves the previous state.
//!
//! Storage: `<dir>/<scope>/<name>/metadata.json` and the tarballs beside
//! it in `-/`. Tarball URLs are stored as paths and served under
//! [`RegistryConfig::public_url`].

use crate::error::PackageError;
use crate::metadata::{DeprecateBody, Dist, PackageMetadata, PublishBody, VersionMetadata};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use base64::Engine;
use goondan_types::ErrorBody;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Default bound on a request body: a 32 MiB tarball in base64 plus its
/// JSON envelope.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 48 * 1024 * 1024;
/// Default time a body may take to arrive.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// How a registry serves.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// The folder holding packages.
    pub dir: PathBuf,
    /// The bearer tokens that may write (empty: read-only).
    pub tokens: Vec<String>,
    /// The URL clients reach this registry at; tarball URLs start with it.
    pub public_url: url::Url,
    /// The largest request body.
    pub max_body_bytes: u64,
    /// How long a body may take.
    pub body_timeout: Duration,
    /// Accept-loop limits.
    pub limits: goondan_http::AcceptLimits,
}

/// Reads a token file: one token per line; blank lines and `#` comments
/// are skipped. A token shorter than every port's minimum
/// (`goondan_http::token::MIN_TOKEN_CHARS`, 24) is refused, so a guessable
/// one cannot guard publishing.
pub fn read_token_file(path: &Path) -> Result<Vec<String>, PackageError> {
    let text = std::fs::read_to_string(path).map_err(PackageError::io(path))?;
    let tokens: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_string)
        .collect();
    // The rule every port's tokens share, so publishing is no easier to
    // guess into than the Studio or `gdn mcp serve`.
    let weak = tokens.iter().enumerate().find_map(|(index, token)| {
        goondan_http::token::check_strength(token)
            .err()
            .map(|error| (index, error))
    });
    if let Some((index, error)) = weak {
        return Err(PackageError::TokenFile {
            path: path.to_path_buf(),
            problem: format!("token {} (counting non-comment lines): {error}", index + 1),
        });
    }
    if tokens.is_empty() {
        return Err(PackageError::TokenFile {
            path: path.to_path_buf(),
            problem: "it holds no token".into(),
        });
    }
    Ok(tokens)
}

struct Shared {
    config: RegistryConfig,
    /// One writer at a time: publish, unpublish and deprecate read, change
    /// and write a package's metadata.
    write_lock: tokio::sync::Mutex<()>,
}

/// The registry's routes, for serving or for in-process tests.
pub fn router(config: RegistryConfig) -> Router {
    let shared = Arc::new(Shared {
        config,
        write_lock: tokio::sync::Mutex::new(()),
    });
    Router::new().fallback(handle).with_state(shared)
}

/// Serves the registry on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    config: RegistryConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    std::fs::create_dir_all(&config.dir)?;
    let limits = config.limits;
    goondan_http::serve(listener, router(config), limits, shutdown).await
}

/// A refusal: status, code and message.
struct Refusal(StatusCode, &'static str, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = ErrorBody::new(self.1, self.2);
        (self.0, axum::Json(body)).into_response()
    }
}

impl From<PackageError> for Refusal {
    fn from(error: PackageError) -> Refusal {
        let status = match &error {
            PackageError::Io { .. } => {
                tracing::error!("registry storage: {error}");
                return Refusal(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "E_PKG_IO",
                    "the registry could not access its storage".into(),
                );
            }
            PackageError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            PackageError::NotFound { .. } => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_REQUEST,
        };
        Refusal(status, error.code(), error.to_string())
    }
}

/// What a request asks for, parsed from its path.
struct Target {
    name: String,
    rest: Vec<String>,
}

/// Decodes `%XX` escapes (a client may send `@scope%2fname`).
fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = segment.get(index + 1..index + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn parse_target(uri: &Uri) -> Result<Target, Refusal> {
    let bad = |message: &str| {
        Refusal(
            StatusCode::NOT_FOUND,
            "E_PKG_NOT_FOUND",
            message.to_string(),
        )
    };
    let segments: Vec<String> = uri
        .path()
        .trim_start_matches('/')
        .split('/')
        .map(percent_decode)
        .collect::<Option<_>>()
        .ok_or_else(|| bad("the path is not valid UTF-8"))?;
    let (name, rest) = match segments.first() {
        Some(first) if first.starts_with('@') && first.contains('/') => {
            (first.clone(), segments[1..].to_vec())
        }
        Some(first) if first.starts_with('@') && segments.len() >= 2 => {
            (format!("{first}/{}", segments[1]), segments[2..].to_vec())
        }
        Some(first) if !first.is_empty() => (first.clone(), segments[1..].to_vec()),
        _ => return Err(bad("name a package: /<scope>/<name>")),
    };
    crate::name::check_registry_name(&name).map_err(Refusal::from)?;
    Ok(Target { name, rest })
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match dispatch(&shared, &method, &uri, &headers, body).await {
        Ok(response) => response,
        Err(refusal) => refusal.into_response(),
    }
}

async fn dispatch(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Refusal> {
    let target = parse_target(uri)?;
    let rest: Vec<&str> = target.rest.iter().map(String::as_str).collect();
    let authorized = authorized(&shared.config.tokens, headers);
    match (method.clone(), rest.as_slice()) {
        (Method::GET, []) => {
            let metadata = shared.read_visible(&target.name, authorized)?;
            Ok(axum::Json(shared.public(metadata)).into_response())
        }
        (Method::GET, ["-", file]) => shared.tarball(&target.name, file, authorized),
        (Method::GET, [version]) => {
            let metadata = shared.public(shared.read_visible(&target.name, authorized)?);
            let found = metadata
                .versions
                .get(*version)
                .or_else(|| {
                    metadata
                        .dist_tags
                        .get(*version)
                        .and_then(|tagged| metadata.versions.get(tagged))
                })
                .cloned()
                .ok_or_else(|| not_found(&format!("{}@{version}", target.name)))?;
            Ok(axum::Json(found).into_response())
        }
        (Method::PUT, []) => {
            require(authorized, &shared.config.tokens)?;
            let bytes = read_body(shared, headers, body).await?;
            let publish: PublishBody = serde_json::from_slice(&bytes).map_err(|error| {
                Refusal(
                    StatusCode::BAD_REQUEST,
                    "E_PKG_SCHEMA_INVALID",
                    format!("the publish body is not valid: {error}"),
                )
            })?;
            let _guard = shared.write_lock.lock().await;
            shared.publish(&target.name, publish)?;
            Ok((
                StatusCode::CREATED,
                axum::Json(serde_json::json!({ "ok": true })),
            )
                .into_response())
        }
        (Method::PUT, [version, "deprecate"]) => {
            require(authorized, &shared.config.tokens)?;
            let bytes = read_body(shared, headers, body).await?;
            let deprecate: DeprecateBody = serde_json::from_slice(&bytes).map_err(|error| {
                Refusal(
                    StatusCode::BAD_REQUEST,
                    "E_PKG_SCHEMA_INVALID",
                    format!("the body is not valid: {error}"),
                )
            })?;
            let _guard = shared.write_lock.lock().await;
            let mut metadata = shared.read(&target.name)?;
            let entry = metadata
                .versions
                .get_mut(*version)
                .ok_or_else(|| not_found(&format!("{}@{version}", target.name)))?;
            entry.deprecated = deprecate.message.chars().take(1024).collect();
            shared.write_metadata(&metadata)?;
            Ok(axum::Json(serde_json::json!({ "ok": true })).into_response())
        }
        (Method::DELETE, []) => {
            require(authorized, &shared.config.tokens)?;
            let _guard = shared.write_lock.lock().await;
            shared.read(&target.name)?;
            let dir = shared.package_dir(&target.name);
            std::fs::remove_dir_all(&dir).map_err(PackageError::io(&dir))?;
            Ok(axum::Json(serde_json::json!({ "ok": true })).into_response())
        }
        (Method::DELETE, [version]) => {
            require(authorized, &shared.config.tokens)?;
            let _guard = shared.write_lock.lock().await;
            // Whoever still depends on it is told, not refused (§2.6.7).
            let dependents = shared.dependents(&target.name, version);
            shared.unpublish_version(&target.name, version)?;
            let warnings: Vec<String> = dependents
                .iter()
                .map(|dependent| format!("{dependent} depends on {}@{version}", target.name))
                .collect();
            Ok(axum::Json(serde_json::json!({ "ok": true, "warnings": warnings })).into_response())
        }
        (Method::GET | Method::PUT | Method::DELETE, _) => Err(not_found(uri.path())),
        _ => Err(Refusal(
            StatusCode::METHOD_NOT_ALLOWED,
            "E_PKG_METHOD",
            format!("{method} is not part of the registry API"),
        )),
    }
}

fn not_found(what: &str) -> Refusal {
    Refusal(
        StatusCode::NOT_FOUND,
        "E_PKG_NOT_FOUND",
        format!("`{what}` is not in this registry"),
    )
}

/// Whether the request carries one of `tokens`.
fn authorized(tokens: &[String], headers: &HeaderMap) -> bool {
    let Some(sent) = goondan_http::access::bearer_token(headers) else {
        return false;
    };
    // Every token is compared (no short circuit), so timing does not tell
    // which one matched or how many there are before it.
    let matches = tokens
        .iter()
        .filter(|token| goondan_http::token::same_secret(sent.as_bytes(), token.as_bytes()))
        .count();
    matches > 0
}

fn require(authorized: bool, tokens: &[String]) -> Result<(), Refusal> {
    if authorized {
        return Ok(());
    }
    let message = if tokens.is_empty() {
        "this registry is read-only: it was started without --token-file"
    } else {
        "a valid bearer token is required"
    };
    Err(Refusal(
        StatusCode::UNAUTHORIZED,
        "E_PKG_AUTH_REQUIRED",
        message.into(),
    ))
}

async fn read_body(shared: &Shared, headers: &HeaderMap, body: Body) -> Result<Vec<u8>, Refusal> {
    let limit = shared.config.max_body_bytes;
    let too_large = || {
        Refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "E_PKG_TOO_LARGE",
            format!("the body is over {limit} bytes or was cut short"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(too_large());
    }
    let read = axum::body::to_bytes(body, usize::try_from(limit).unwrap_or(usize::MAX));
    match tokio::time::timeout(shared.config.body_timeout, read).await {
        Err(_) => Err(Refusal(
            StatusCode::REQUEST_TIMEOUT,
            "E_PKG_TIMEOUT",
            "the body took too long to arrive".into(),
        )),
        Ok(Err(_)) => Err(too_large()),
        Ok(Ok(bytes)) => Ok(bytes.to_vec()),
    }
}

impl Shared {
    fn package_dir(&self, name: &str) -> PathBuf {
        let mut dir = self.config.dir.clone();
        for part in name.split('/') {
            dir.push(part);
        }
        dir
    }

    fn read(&self, name: &str) -> Result<PackageMetadata, Refusal> {
        let path = self.package_dir(name).join("metadata.json");
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(not_found(name))
            }
            Err(source) => return Err(PackageError::Io { path, source }.into()),
        };
        serde_json::from_slice(&text).map_err(|error| {
            tracing::error!("{}: {error}", path.display());
            Refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                "E_PKG_IO",
                "the registry's metadata for this package is damaged".into(),
            )
        })
    }

    /// The metadata, unless the package is restricted and the request
    /// carries no token (then it does not exist, as far as it can tell).
    fn read_visible(&self, name: &str, authorized: bool) -> Result<PackageMetadata, Refusal> {
        let metadata = self.read(name)?;
        if metadata.access == "restricted" && !authorized {
            return Err(not_found(name));
        }
        Ok(metadata)
    }

    /// Stored tarball paths made absolute under the public URL.
    fn public(&self, mut metadata: PackageMetadata) -> PackageMetadata {
        let base = self.config.public_url.as_str().trim_end_matches('/');
        for version in metadata.versions.values_mut() {
            if version.dist.tarball.starts_with('/') {
                version.dist.tarball = format!("{base}{}", version.dist.tarball);
            }
        }
        metadata
    }

    fn tarball(&self, name: &str, file: &str, authorized: bool) -> Result<Response, Refusal> {
        let metadata = self.read_visible(name, authorized)?;
        let stored = format!("/{name}/-/{file}");
        if !metadata
            .versions
            .values()
            .any(|version| version.dist.tarball == stored)
        {
            return Err(not_found(&stored));
        }
        let path = self.package_dir(name).join("-").join(file);
        let bytes = std::fs::read(&path).map_err(PackageError::io(&path))?;
        Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
    }

    fn write_metadata(&self, metadata: &PackageMetadata) -> Result<(), Refusal> {
        let path = self.package_dir(&metadata.name).join("metadata.json");
        let text = serde_json::to_vec_pretty(metadata).unwrap_or_default();
        crate::fsutil::write_atomic(&path, &text).map_err(Refusal::from)
    }

    fn publish(&self, name: &str, body: PublishBody) -> Result<(), Refusal> {
        let bad =
            |code: &'static str, message: String| Refusal(StatusCode::BAD_REQUEST, code, message);
        if body.name != name {
            return Err(bad(
                "E_PKG_NAME_INVALID",
                format!("the body names `{}`, the path `{name}`", body.name),
            ));
        }
        let version = semver::Version::parse(&body.version).map_err(|_| {
            bad(
                "E_PKG_VERSION_INVALID",
                format!("`{}` is not a semver version", body.version),
            )
        })?;
        if !matches!(body.access.as_str(), "public" | "restricted") {
            return Err(bad(
                "E_PKG_SCHEMA_INVALID",
                "access is `public` or `restricted`".into(),
            ));
        }
        for (tag, tagged) in &body.dist_tags {
            let tag_ok = tag.starts_with(|c: char| c.is_ascii_lowercase())
                && tag.len() <= 32
                && tag
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !tag_ok || tagged != &body.version {
                return Err(bad("E_PKG_SCHEMA_INVALID", format!("dist-tag `{tag}` must be lowercase letters, digits and `-` and point at {}", body.version)));
            }
        }
        let [(_, attachment)] =
            <[_; 1]>::try_from(body.attachments.into_iter().collect::<Vec<_>>())
                .map_err(|_| bad("E_PKG_SCHEMA_INVALID", "attach exactly one tarball".into()))?;
        let tarball = base64::engine::general_purpose::STANDARD
            .decode(attachment.data.as_bytes())
            .map_err(|_| {
                bad(
                    "E_PKG_SCHEMA_INVALID",
                    "the attachment is not base64".into(),
                )
            })?;
        if tarball.len() as u64 != attachment.length {
            return Err(bad(
                "E_PKG_SCHEMA_INVALID",
                "the attachment's length does not match its data".into(),
            ));
        }
        if !crate::integrity::matches(&tarball, &body.dist.integrity) {
            return Err(PackageError::IntegrityMismatch {
                what: format!("the upload of {name}@{version}"),
                expected: body.dist.integrity.clone(),
                actual: crate::integrity::integrity_of(&tarball),
            }
            .into());
        }
        // The whole tarball must unpack cleanly, not just its manifest.
        self.check_unpacks(&tarball)?;
        let manifest_text = crate::tarball::read_manifest(&tarball)?;
        let manifest = crate::manifest::PackageManifest::parse(
            &manifest_text,
            PathBuf::from("package/goondan.yaml"),
        )?
        .ok_or_else(|| {
            bad(
                "E_PKG_SCHEMA_INVALID",
                "the tarball's goondan.yaml has no Package document first".into(),
            )
        })?;
        if manifest.name != name || manifest.spec.version.as_deref() != Some(body.version.as_str())
        {
            return Err(bad(
                "E_PKG_SCHEMA_INVALID",
                format!(
                    "the tarball's Package is {}@{}, the upload says {name}@{}",
                    manifest.name,
                    manifest.spec.version.as_deref().unwrap_or("?"),
                    body.version
                ),
            ));
        }
        let mut metadata = match self.read(name) {
            Ok(metadata) => metadata,
            Err(Refusal(StatusCode::NOT_FOUND, ..)) => PackageMetadata {
                name: name.to_string(),
                description: String::new(),
                access: body.access.clone(),
                versions: Default::default(),
                dist_tags: Default::default(),
            },
            Err(other) => return Err(other),
        };
        let version_text = version.to_string();
        if metadata.versions.contains_key(&version_text) {
            return Err(Refusal(
                StatusCode::CONFLICT,
                "E_PKG_VERSION_EXISTS",
                format!("{name}@{version_text} is already published; versions are immutable, publish a new one"),
            ));
        }
        let file = format!("{}-{version_text}.tgz", crate::name::bare_name(name));
        let path = self.package_dir(name).join("-").join(&file);
        crate::fsutil::write_atomic(&path, &tarball)?;
        metadata.description = body.description.chars().take(1024).collect();
        metadata.access = body.access;
        metadata.versions.insert(
            version_text.clone(),
            VersionMetadata {
                version: version_text.clone(),
                dependencies: manifest.registry_dependencies(),
                deprecated: String::new(),
                dist: Dist {
                    tarball: format!("/{name}/-/{file}"),
                    shasum: crate::integrity::shasum_of(&tarball),
                    integrity: body.dist.integrity,
                },
            },
        );
        if body.dist_tags.is_empty() {
            metadata.dist_tags.insert("latest".into(), version_text);
        } else {
            metadata.dist_tags.extend(body.dist_tags);
        }
        self.write_metadata(&metadata)
    }

    fn check_unpacks(&self, tarball: &[u8]) -> Result<(), Refusal> {
        let scratch = self.config.dir.join(".scratch");
        std::fs::create_dir_all(&scratch).map_err(PackageError::io(&scratch))?;
        let dest = scratch.join(format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_nanos())
                .unwrap_or_default()
        ));
        let result = crate::tarball::unpack(tarball, &dest);
        let _ = std::fs::remove_dir_all(&dest);
        result.map_err(Refusal::from)
    }

    /// `name@version` of every published version whose dependency range
    /// accepts `version` of `target`.
    fn dependents(&self, target: &str, version: &str) -> Vec<String> {
        let Ok(version) = semver::Version::parse(version) else {
            return Vec::new();
        };
        let mut folders = Vec::new();
        for entry in std::fs::read_dir(&self.config.dir)
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('@') {
                folders.extend(
                    std::fs::read_dir(&path)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.path()),
                );
            } else {
                folders.push(path);
            }
        }
        let mut out = Vec::new();
        for folder in folders {
            let Ok(text) = std::fs::read(folder.join("metadata.json")) else {
                continue;
            };
            let Ok(metadata) = serde_json::from_slice::<PackageMetadata>(&text) else {
                continue;
            };
            for (published, entry) in &metadata.versions {
                let accepts = entry.dependencies.get(target).is_some_and(|range| {
                    semver::VersionReq::parse(range).is_ok_and(|range| range.matches(&version))
                });
                if accepts {
                    out.push(format!("{}@{published}", metadata.name));
                }
            }
        }
        out.sort();
        out
    }

    fn unpublish_version(&self, name: &str, version: &str) -> Result<(), Refusal> {
        let mut metadata = self.read(name)?;
        let removed = metadata
            .versions
            .remove(version)
            .ok_or_else(|| not_found(&format!("{name}@{version}")))?;
        if let Some(file) = removed.dist.tarball.rsplit('/').next() {
            let path = self.package_dir(name).join("-").join(file);
            let _ = std::fs::remove_file(path);
        }
        metadata.dist_tags.retain(|_, tagged| tagged != version);
        if !metadata.dist_tags.contains_key("latest") {
            if let Some(highest) = metadata
                .versions
                .keys()
                .filter_map(|text| semver::Version::parse(text).ok())
                .max()
            {
                metadata
                    .dist_tags
                    .insert("latest".into(), highest.to_string());
            }
        }
        if metadata.versions.is_empty() {
            let dir = self.package_dir(name);
            std::fs::remove_dir_all(&dir).map_err(PackageError::io(&dir))?;
            return Ok(());
        }
        self.write_metadata(&metadata)
    }
}
