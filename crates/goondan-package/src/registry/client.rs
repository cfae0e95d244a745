//! The registry client: metadata, tarballs, publish, unpublish and
//! deprecate over the HTTP API of `bundle_package.md` §8.2, with the
//! bearer token of §8.3 when one is configured.
//!
//! Every answer is bounded (metadata and tarballs by size, every request
//! by time), and an error answer becomes a typed [`PackageError`]: 401 and
//! 403 are [`PackageError::AuthRequired`], 404 [`PackageError::NotFound`].

use crate::error::PackageError;
use crate::metadata::{DeprecateBody, PackageMetadata, PublishBody};
use goondan_types::ErrorBody;
use std::time::Duration;

/// The largest metadata document read.
const MAX_METADATA_BYTES: usize = 16 * 1024 * 1024;
/// The largest tarball downloaded.
pub const MAX_TARBALL_BYTES: usize = 64 * 1024 * 1024;

/// A client of one registry.
#[derive(Debug, Clone)]
pub struct RegistryClient {
    base: url::Url,
    token: Option<String>,
    http: reqwest::Client,
}

impl RegistryClient {
    /// A client of `base`, sending `token` as a bearer token when given.
    pub fn new(base: url::Url, token: Option<String>) -> Result<RegistryClient, PackageError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(|source| PackageError::Unreachable {
                url: base.to_string(),
                source,
            })?;
        Ok(RegistryClient { base, token, http })
    }

    /// The registry URL.
    pub fn base(&self) -> &url::Url {
        &self.base
    }

    /// The URL of `path` (segments after the registry's own path).
    fn url(&self, segments: &[&str]) -> url::Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty();
            for segment in segments {
                for part in segment.split('/') {
                    path.push(part);
                }
            }
        }
        url
    }

    fn authorize(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        url: &url::Url,
        what: &str,
        limit: usize,
    ) -> Result<Vec<u8>, PackageError> {
        let unreachable = |source| PackageError::Unreachable {
            url: url.to_string(),
            source,
        };
        let mut response = self.authorize(request).send().await.map_err(unreachable)?;
        let status = response.status();
        if let Some(length) = response.content_length() {
            if length > limit as u64 {
                return Err(PackageError::TooLarge {
                    what: what.to_string(),
                    limit: limit as u64,
                });
            }
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            if body.len() + chunk.len() > limit {
                return Err(PackageError::TooLarge {
                    what: what.to_string(),
                    limit: limit as u64,
                });
            }
            body.extend_from_slice(&chunk);
        }
        if status.is_success() {
            return Ok(body);
        }
        let message = serde_json::from_slice::<ErrorBody>(&body)
            .map(|error| error.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&body).chars().take(300).collect());
        Err(match status.as_u16() {
            401 | 403 => PackageError::AuthRequired {
                registry: self.base.to_string(),
                status: status.as_u16(),
            },
            404 => PackageError::NotFound {
                name: what.to_string(),
                registry: self.base.to_string(),
            },
            other => PackageError::Registry {
                url: url.to_string(),
                status: other,
                message,
            },
        })
    }

    /// `GET /<name>`.
    pub async fn metadata(&self, name: &str) -> Result<PackageMetadata, PackageError> {
        crate::name::check_registry_name(name)?;
        let url = self.url(&[name]);
        let body = self
            .send(self.http.get(url.clone()), &url, name, MAX_METADATA_BYTES)
            .await?;
        let metadata: PackageMetadata =
            serde_json::from_slice(&body).map_err(|error| PackageError::Registry {
                url: url.to_string(),
                status: 200,
                message: format!("the metadata is not valid JSON: {error}"),
            })?;
        if metadata.name != name {
            return Err(PackageError::Registry {
                url: url.to_string(),
                status: 200,
                message: format!("asked for `{name}`, got metadata of `{}`", metadata.name),
            });
        }
        Ok(metadata)
    }

    /// Downloads a tarball. The URL comes from metadata or a lockfile; the
    /// token is sent only when it points at this registry.
    pub async fn tarball(&self, url_text: &str) -> Result<Vec<u8>, PackageError> {
        let url = url::Url::parse(url_text).map_err(|_| PackageError::UrlInvalid {
            url: url_text.to_string(),
            problem: "the tarball URL is not absolute".into(),
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(PackageError::UrlInvalid {
                url: url_text.to_string(),
                problem: "the tarball URL must be http or https".into(),
            });
        }
        let request = self.http.get(url.clone());
        let same_origin = url.origin() == self.base.origin();
        let request = if same_origin {
            request
        } else {
            // Another host gets no token.
            return self
                .without_token()
                .send(request, &url, url_text, MAX_TARBALL_BYTES)
                .await;
        };
        self.send(request, &url, url_text, MAX_TARBALL_BYTES).await
    }

    fn without_token(&self) -> RegistryClient {
        RegistryClient {
            base: self.base.clone(),
            token: None,
            http: self.http.clone(),
        }
    }

    /// `PUT /<name>` with a new version.
    pub async fn publish(&self, body: &PublishBody) -> Result<(), PackageError> {
        let url = self.url(&[&body.name]);
        self.send(
            self.http.put(url.clone()).json(body),
            &url,
            &body.name,
            MAX_METADATA_BYTES,
        )
        .await
        .map(drop)
    }

    /// `DELETE /<name>/<version>`, or the whole package without a version;
    /// the registry's warnings (versions that still depend on it).
    pub async fn unpublish(
        &self,
        name: &str,
        version: Option<&str>,
    ) -> Result<Vec<String>, PackageError> {
        let mut segments = vec![name];
        segments.extend(version);
        let url = self.url(&segments);
        let body = self
            .send(
                self.http.delete(url.clone()),
                &url,
                name,
                MAX_METADATA_BYTES,
            )
            .await?;
        Ok(serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|answer| {
                answer["warnings"].as_array().map(|warnings| {
                    warnings
                        .iter()
                        .filter_map(|warning| warning.as_str().map(str::to_string))
                        .collect()
                })
            })
            .unwrap_or_default())
    }

    /// `PUT /<name>/<version>/deprecate`; an empty message clears it.
    pub async fn deprecate(
        &self,
        name: &str,
        version: &str,
        message: &str,
    ) -> Result<(), PackageError> {
        let url = self.url(&[name, version, "deprecate"]);
        let body = DeprecateBody {
            message: message.to_string(),
        };
        self.send(
            self.http.put(url.clone()).json(&body),
            &url,
            name,
            MAX_METADATA_BYTES,
        )
        .await
        .map(drop)
    }
}
