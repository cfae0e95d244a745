//! [`build`]: from a resolved Model resource to a ready [`Model`], choosing
//! the implementation by `spec.provider` and wrapping it in a recorder when
//! a cassette is requested.
//!
//! Owns API-key resolution (config first, then the provider's usual
//! variable) and the provider-specific options that become headers.

use crate::cassette::{Recorder, ReplayModel};
use crate::config::{ApiKey, EnvLookup, ModelConfig};
use crate::error::ModelError;
use crate::http::HttpModel;
use crate::options::{HttpOptions, OptionReader};
use crate::scripted::ScriptedModel;
use crate::wire::{anthropic, google, openai, openai_responses};
use crate::Model;
use std::sync::Arc;

/// The providers [`build`] knows, as `spec.provider` spells them.
pub const PROVIDERS: &[&str] = &["anthropic", "openai", "google", "scripted", "replay"];

/// The variables [`build`] falls back to for a Model without `apiKey`:
/// secrets whichever Model uses them, so the orchestrator withholds them
/// from every child's exec environment.
pub const DEFAULT_KEY_VARIABLES: &[&str] = &[
    ANTHROPIC_KEY_VARIABLE,
    OPENAI_KEY_VARIABLE,
    GOOGLE_KEY_VARIABLE,
];
const ANTHROPIC_KEY_VARIABLE: &str = "ANTHROPIC_API_KEY";
const OPENAI_KEY_VARIABLE: &str = "OPENAI_API_KEY";
const GOOGLE_KEY_VARIABLE: &str = "GOOGLE_GENERATIVE_AI_API_KEY";
/// Base URLs used when a Model has no `spec.endpoint`, under the names the
/// AI SDK (and so the original's users) read.
const ANTHROPIC_BASE_URL_VARIABLE: &str = "ANTHROPIC_BASE_URL";
const OPENAI_BASE_URL_VARIABLE: &str = "OPENAI_BASE_URL";
const GOOGLE_BASE_URL_VARIABLE: &str = "GOOGLE_GENERATIVE_AI_BASE_URL";

/// The variable [`build`] falls back to for a Model of `provider` without
/// `apiKey` (one of [`DEFAULT_KEY_VARIABLES`]); `None` for the offline
/// providers. The orchestrator hands an agent only its own Model's, so
/// one agent's process never holds another provider's key.
pub fn default_key_variable(provider: &str) -> Option<&'static str> {
    match provider.trim().to_ascii_lowercase().as_str() {
        "anthropic" => Some(ANTHROPIC_KEY_VARIABLE),
        "openai" => Some(OPENAI_KEY_VARIABLE),
        "google" => Some(GOOGLE_KEY_VARIABLE),
        _ => None,
    }
}

/// Whether `provider` calls a remote API and so needs a key; the offline
/// providers (`scripted`, `replay`) never read one, so a Model switched to
/// them keeps working without its key variable.
pub fn needs_api_key(provider: &str) -> bool {
    !matches!(
        provider.trim().to_ascii_lowercase().as_str(),
        "scripted" | "replay"
    )
}

/// Builds the model a Model resource describes.
///
/// `env` is consulted only for the provider's usual key variable
/// (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`, `GOOGLE_GENERATIVE_AI_API_KEY`)
/// when `config.api_key` is absent. Files (`rulesFile`, `cassette`) are
/// read here, once; a bad file fails the build, not the first call.
pub fn build(config: &ModelConfig, env: &dyn EnvLookup) -> Result<Arc<dyn Model>, ModelError> {
    let provider = config.provider.trim().to_ascii_lowercase();
    let model: Arc<dyn Model> = match provider.as_str() {
        "anthropic" => Arc::new(build_anthropic(config, env)?),
        "openai" => build_openai(config, env)?,
        "google" => Arc::new(build_google(config, env)?),
        "scripted" => Arc::new(ScriptedModel::load(config)?),
        "replay" => Arc::new(ReplayModel::load(config)?),
        _ => {
            return Err(ModelError::Config {
                message: format!(
                    "Model/{}: unknown provider `{}`",
                    config.name, config.provider
                ),
                suggestion: Some(format!("use one of: {}", PROVIDERS.join(", "))),
            })
        }
    };
    match &config.record_to {
        Some(path) => Ok(Arc::new(Recorder::open(model, path)?)),
        None => Ok(model),
    }
}

/// The key from the config, else from `variable`; `None` only when the
/// provider can do without one.
fn resolve_key(
    config: &ModelConfig,
    env: &dyn EnvLookup,
    provider: &str,
    variable: &str,
    required: bool,
) -> Result<Option<ApiKey>, ModelError> {
    let key = config
        .api_key
        .clone()
        .filter(|key| !key.expose().trim().is_empty())
        .or_else(|| {
            env.get(variable)
                .filter(|value| !value.trim().is_empty())
                .map(ApiKey::new)
        });
    match key {
        None if required => Err(ModelError::ApiKeyMissing {
            model_resource: config.name.clone(),
            provider: provider.to_string(),
            variable: variable.to_string(),
        }),
        key => Ok(key),
    }
}

/// Where a provider's API is: `spec.endpoint`, else the base-URL variable
/// the original's users set (`ANTHROPIC_BASE_URL`, ...), else the
/// provider's own address.
struct BaseUrl {
    url: String,
    /// Not the provider's own address: usually a local or compatible
    /// server, which may need no key and speaks the older dialect.
    custom: bool,
}

fn base_url(
    config: &ModelConfig,
    env: &dyn EnvLookup,
    variable: &str,
    default: &str,
) -> Result<BaseUrl, ModelError> {
    let (url, source) = match config.endpoint.as_deref().map(str::trim) {
        Some(endpoint) => (endpoint.to_string(), "spec.endpoint".to_string()),
        None => match env.get(variable).filter(|value| !value.trim().is_empty()) {
            Some(value) => (value.trim().to_string(), variable.to_string()),
            None => {
                return Ok(BaseUrl {
                    url: default.to_string(),
                    custom: false,
                })
            }
        },
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ModelError::Config {
            message: format!(
                "Model/{}: {source} `{url}` is not an http(s) URL",
                config.name
            ),
            suggestion: Some(format!("use a base URL such as {default}")),
        });
    }
    Ok(BaseUrl { url, custom: true })
}

fn build_anthropic(
    config: &ModelConfig,
    env: &dyn EnvLookup,
) -> Result<HttpModel<anthropic::AnthropicWire>, ModelError> {
    let base = base_url(
        config,
        env,
        ANTHROPIC_BASE_URL_VARIABLE,
        anthropic::DEFAULT_BASE_URL,
    )?;
    let api_key = resolve_key(config, env, "anthropic", ANTHROPIC_KEY_VARIABLE, true)?;
    let mut reader = OptionReader::new(&config.name, &config.options);
    let version = reader
        .string("anthropicVersion")?
        .unwrap_or_else(|| anthropic::DEFAULT_VERSION.to_string());
    let beta = reader.string("anthropicBeta")?;
    let default_max_tokens = reader
        .u64("defaultMaxTokens")?
        .unwrap_or(anthropic::DEFAULT_MAX_TOKENS);
    let options = HttpOptions::read(reader)?;
    let mut headers = vec![("anthropic-version".to_string(), version)];
    if let Some(key) = &api_key {
        headers.push(("x-api-key".into(), key.expose().to_string()));
    }
    if let Some(beta) = beta {
        headers.push(("anthropic-beta".into(), beta));
    }
    HttpModel::new(
        anthropic::AnthropicWire { default_max_tokens },
        &config.name,
        &config.model,
        &base.url,
        headers,
        options,
        api_key,
    )
}

fn build_openai(config: &ModelConfig, env: &dyn EnvLookup) -> Result<Arc<dyn Model>, ModelError> {
    let base = base_url(
        config,
        env,
        OPENAI_BASE_URL_VARIABLE,
        openai::DEFAULT_BASE_URL,
    )?;
    // A custom endpoint is usually a local server (Ollama, vLLM) that needs
    // no key; OpenAI itself always does.
    let api_key = resolve_key(config, env, "openai", OPENAI_KEY_VARIABLE, !base.custom)?;
    let mut reader = OptionReader::new(&config.name, &config.options);
    // OpenAI's own API gets Responses (what it recommends, and what keeps
    // a reasoning model's reasoning between steps); a custom endpoint gets
    // Chat Completions, which compatible servers speak. `api` overrides.
    let api = match reader.string("api")?.as_deref() {
        None if base.custom => OpenAiApi::ChatCompletions,
        None | Some("responses") => OpenAiApi::Responses,
        Some("chat" | "chat-completions") => OpenAiApi::ChatCompletions,
        Some(other) => {
            return Err(ModelError::Config {
                message: format!(
                    "Model/{}: spec.options.api `{other}` is not an OpenAI API",
                    config.name
                ),
                suggestion: Some("use `responses` or `chat-completions`".into()),
            })
        }
    };
    let organization = reader.string("organization")?;
    let project = reader.string("project")?;
    let max_tokens_field = reader.string("maxTokensField")?.unwrap_or_else(|| {
        if !base.custom {
            "max_completion_tokens".into()
        } else {
            "max_tokens".into()
        }
    });
    let stream_usage = reader.bool("streamUsage")?.unwrap_or(true);
    let options = HttpOptions::read(reader)?;
    let mut headers = Vec::new();
    if let Some(key) = &api_key {
        headers.push((
            "authorization".to_string(),
            format!("Bearer {}", key.expose()),
        ));
    }
    if let Some(organization) = organization {
        headers.push(("openai-organization".into(), organization));
    }
    if let Some(project) = project {
        headers.push(("openai-project".into(), project));
    }
    Ok(match api {
        OpenAiApi::Responses => Arc::new(HttpModel::new(
            openai_responses::OpenAiResponsesWire,
            &config.name,
            &config.model,
            &base.url,
            headers,
            options,
            api_key,
        )?),
        OpenAiApi::ChatCompletions => Arc::new(HttpModel::new(
            openai::OpenAiWire {
                max_tokens_field,
                stream_usage,
            },
            &config.name,
            &config.model,
            &base.url,
            headers,
            options,
            api_key,
        )?),
    })
}

/// Which of OpenAI's two APIs a Model speaks (`spec.options.api`).
enum OpenAiApi {
    Responses,
    ChatCompletions,
}

fn build_google(
    config: &ModelConfig,
    env: &dyn EnvLookup,
) -> Result<HttpModel<google::GoogleWire>, ModelError> {
    let base = base_url(
        config,
        env,
        GOOGLE_BASE_URL_VARIABLE,
        google::DEFAULT_BASE_URL,
    )?;
    let api_key = resolve_key(config, env, "google", GOOGLE_KEY_VARIABLE, true)?;
    let options = HttpOptions::read(OptionReader::new(&config.name, &config.options))?;
    let mut headers = Vec::new();
    if let Some(key) = &api_key {
        headers.push(("x-goog-api-key".to_string(), key.expose().to_string()));
    }
    HttpModel::new(
        google::GoogleWire,
        &config.name,
        &config.model,
        &base.url,
        headers,
        options,
        api_key,
    )
}
