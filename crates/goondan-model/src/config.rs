//! What a Model resource resolves to ([`ModelConfig`]), the masked
//! [`ApiKey`], and the environment lookup used for the provider's usual key
//! variable.
//!
//! This module does no YAML and no process-environment reading: the config
//! loader fills [`ModelConfig`], and the binary decides which environment
//! the [`EnvLookup`] sees.

use goondan_types::JsonObject;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;

/// An API key. `Debug` and `Display` print `***`; only [`ApiKey::expose`]
/// gives the secret, and only the HTTP layer calls it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a secret.
    pub fn new(secret: impl Into<String>) -> Self {
        ApiKey(secret.into())
    }

    /// The secret itself, for a request header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the key replaced by `***`.
    ///
    /// Provider error bodies and transport errors sometimes echo the key
    /// (an "invalid key sk-..." message, a URL with `?key=`), so every
    /// message that leaves a provider passes through here first.
    pub fn scrub(&self, text: &str) -> String {
        // Keys shorter than four characters would turn ordinary words into
        // asterisks; such keys are test values, never real secrets.
        if self.0.len() < 4 {
            return text.to_string();
        }
        goondan_types::secret::mask_value(text, &self.0, "***").into_owned()
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("ApiKey(***)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("***")
    }
}

/// Reads environment variables for the provider's usual key variable.
///
/// The library never reads the process environment itself, so tests and
/// the orchestrator decide exactly what an agent sees.
pub trait EnvLookup {
    /// The value of `name`, if set.
    fn get(&self, name: &str) -> Option<String>;
}

impl EnvLookup for HashMap<String, String> {
    fn get(&self, name: &str) -> Option<String> {
        HashMap::get(self, name).cloned()
    }
}

impl EnvLookup for BTreeMap<String, String> {
    fn get(&self, name: &str) -> Option<String> {
        BTreeMap::get(self, name).cloned()
    }
}

impl<F> EnvLookup for F
where
    F: Fn(&str) -> Option<String>,
{
    fn get(&self, name: &str) -> Option<String> {
        self(name)
    }
}

/// The process environment, for the binary that owns it.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl EnvLookup for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

/// A Model resource resolved by the config loader.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// `metadata.name` of the Model resource, used in error messages.
    pub name: String,
    /// `spec.provider`: `anthropic`, `openai`, `google`, `scripted` or
    /// `replay` (case-insensitive).
    pub provider: String,
    /// `spec.model`, the provider's model id.
    pub model: String,
    /// `spec.endpoint`: the base URL, version path included
    /// (`https://api.openai.com/v1`), as the AI SDK's `baseURL`.
    pub endpoint: Option<String>,
    /// `spec.apiKey`, already resolved from its ValueSource.
    pub api_key: Option<ApiKey>,
    /// `spec.options`, provider-specific (see the crate README).
    pub options: JsonObject,
    /// The bundle root; relative `rulesFile` and `cassette` paths start
    /// here.
    pub base_dir: PathBuf,
    /// When set, every successful exchange is appended to this cassette.
    pub record_to: Option<PathBuf>,
    /// The agent that uses the model, when known; scripted rules may match
    /// on it.
    pub agent: Option<String>,
}

impl ModelConfig {
    /// A config with empty options, no endpoint, key, cassette or agent.
    pub fn new(
        name: impl Into<String>,
        provider: impl Into<String>,
        model: impl Into<String>,
        base_dir: impl Into<PathBuf>,
    ) -> Self {
        ModelConfig {
            name: name.into(),
            provider: provider.into(),
            model: model.into(),
            endpoint: None,
            api_key: None,
            options: JsonObject::new(),
            base_dir: base_dir.into(),
            record_to: None,
            agent: None,
        }
    }

    /// Resolves a path option against [`ModelConfig::base_dir`].
    pub(crate) fn resolve_path(&self, path: &str) -> PathBuf {
        let path = PathBuf::from(path);
        if path.is_absolute() {
            path
        } else {
            self.base_dir.join(path)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_never_prints() {
        let key = ApiKey::new("sk-secret-1234");
        assert_eq!(format!("{key:?}"), "ApiKey(***)");
        assert_eq!(format!("{key}"), "***");
        let mut config = ModelConfig::new("claude", "anthropic", "m", "/b");
        config.api_key = Some(key.clone());
        assert!(!format!("{config:?}").contains("sk-secret"));
        assert_eq!(
            key.scrub("bad key sk-secret-1234!"),
            "bad key ***!".to_string()
        );
    }

    #[test]
    fn env_lookups_agree() {
        let mut map = HashMap::new();
        map.insert("A".to_string(), "1".to_string());
        let closure = |name: &str| (name == "A").then(|| "1".to_string());
        assert_eq!(EnvLookup::get(&map, "A"), Some("1".into()));
        assert_eq!(closure.get("A"), Some("1".into()));
        assert_eq!(EnvLookup::get(&map, "B"), None);
    }
}
