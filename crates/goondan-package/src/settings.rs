//! Which registry to talk to and with which token (`bundle_package.md`
//! §8.1, §8.3): `--registry`, else the Package's `spec.registry.url`,
//! else `GOONDAN_REGISTRY`, else `registry` in the System Root's
//! `config.json`; the token from `GOONDAN_REGISTRY_TOKEN`, else
//! `registries.<url>.token` in `config.json` (where `${VAR}` reads the
//! environment, so the file need not hold the token itself).
//!
//! `gdn package login` and `logout` write that file; every other key in
//! it is kept as it was.

use crate::error::PackageError;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// The variable naming the registry when nothing else does.
pub const REGISTRY_ENV: &str = "GOONDAN_REGISTRY";
/// The variable holding a registry token (wins over `config.json`).
pub const TOKEN_ENV: &str = "GOONDAN_REGISTRY_TOKEN";

/// The System Root's `config.json`, read once.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    path: PathBuf,
    document: Map<String, Value>,
}

impl ClientSettings {
    /// Reads `config_file`; a missing file is an empty configuration.
    pub fn read(config_file: &Path) -> Result<ClientSettings, PackageError> {
        let document = match std::fs::read_to_string(config_file) {
            Ok(text) if text.trim().is_empty() => Map::new(),
            Ok(text) => match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(map)) => map,
                Ok(_) | Err(_) => {
                    return Err(PackageError::ManifestInvalid {
                        problem: format!("{} is not a JSON object", config_file.display()),
                    })
                }
            },
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Map::new(),
            Err(source) => {
                return Err(PackageError::Io {
                    path: config_file.to_path_buf(),
                    source,
                })
            }
        };
        Ok(ClientSettings {
            path: config_file.to_path_buf(),
            document,
        })
    }

    /// The registry: `explicit` (a flag or the Package's field), else the
    /// environment, else `config.json`.
    pub fn registry(&self, explicit: Option<&str>) -> Result<url::Url, PackageError> {
        let text = explicit
            .map(str::to_string)
            .or_else(|| std::env::var(REGISTRY_ENV).ok().filter(|v| !v.is_empty()))
            .or_else(|| {
                self.document
                    .get("registry")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .ok_or(PackageError::NoRegistry)?;
        parse_registry_url(&text)
    }

    /// The token for `registry`, if any.
    pub fn token(&self, registry: &url::Url) -> Option<String> {
        if let Ok(token) = std::env::var(TOKEN_ENV) {
            if !token.is_empty() {
                return Some(token);
            }
        }
        let configured = self
            .document
            .get("registries")?
            .get(registry_key(registry))?
            .get("token")?
            .as_str()?;
        let expanded = expand_env(configured);
        (!expanded.is_empty()).then_some(expanded)
    }

    /// Stores `token` for `registry` (`gdn package login`).
    pub fn login(&mut self, registry: &url::Url, token: &str) -> Result<(), PackageError> {
        let registries = self
            .document
            .entry("registries")
            .or_insert_with(|| Value::Object(Map::new()));
        if !registries.is_object() {
            *registries = Value::Object(Map::new());
        }
        if let Value::Object(registries) = registries {
            registries.insert(
                registry_key(registry),
                serde_json::json!({ "token": token }),
            );
        }
        self.write()
    }

    /// Forgets the token of `registry` (`gdn package logout`); whether
    /// there was one.
    pub fn logout(&mut self, registry: &url::Url) -> Result<bool, PackageError> {
        let removed = self
            .document
            .get_mut("registries")
            .and_then(Value::as_object_mut)
            .and_then(|registries| registries.remove(&registry_key(registry)))
            .is_some();
        if removed {
            self.write()?;
        }
        Ok(removed)
    }

    /// Writes the file through a temporary file and a rename, owner-only
    /// (it may hold tokens).
    fn write(&self) -> Result<(), PackageError> {
        let text = serde_json::to_string_pretty(&Value::Object(self.document.clone()))
            .unwrap_or_default()
            + "\n";
        crate::fsutil::write_private(&self.path, text.as_bytes())
    }
}

/// A registry URL: absolute http(s), no query or fragment; its path keeps
/// no trailing `/` so URLs join the same way whatever was typed.
pub fn parse_registry_url(text: &str) -> Result<url::Url, PackageError> {
    let invalid = |problem: &str| PackageError::UrlInvalid {
        url: text.to_string(),
        problem: problem.to_string(),
    };
    let mut url = url::Url::parse(text).map_err(|_| invalid("not an absolute URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("the registry URL must be http or https"));
    }
    url.set_query(None);
    url.set_fragment(None);
    let trimmed = url.path().trim_end_matches('/').to_string();
    url.set_path(&trimmed);
    Ok(url)
}

/// The key of a registry in `config.json`: its URL without a trailing `/`.
fn registry_key(registry: &url::Url) -> String {
    registry.as_str().trim_end_matches('/').to_string()
}

/// Replaces each `${VAR}` with the variable's value (empty when unset).
fn expand_env(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        match rest[start + 2..].find('}') {
            Some(end) => {
                let name = &rest[start + 2..start + 2 + end];
                out.push_str(&std::env::var(name).unwrap_or_default());
                rest = &rest[start + 3 + end..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_keeps_other_keys_and_logout_forgets() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        std::fs::write(&file, r#"{"telemetry": false}"#).unwrap();
        let registry = parse_registry_url("http://127.0.0.1:4873/").unwrap();
        let mut settings = ClientSettings::read(&file).unwrap();
        settings.login(&registry, "t0ken").unwrap();
        let reread = ClientSettings::read(&file).unwrap();
        assert_eq!(reread.document["telemetry"], Value::Bool(false));
        assert_eq!(
            reread.document["registries"]["http://127.0.0.1:4873"]["token"],
            "t0ken"
        );
        let mut settings = reread;
        assert!(settings.logout(&registry).unwrap());
        assert!(!settings.logout(&registry).unwrap());
    }

    #[test]
    fn registry_urls_are_checked() {
        assert!(parse_registry_url("ftp://x").is_err());
        assert!(parse_registry_url("not a url").is_err());
        assert_eq!(
            parse_registry_url("http://127.0.0.1:1/r/?q=1")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:1/r"
        );
        assert_eq!(expand_env("a${GOONDAN_TEST_UNSET_VARIABLE}b${"), "ab${");
    }
}
