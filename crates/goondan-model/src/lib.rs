//! LLM providers of Goondan behind one provider-neutral [`Model`] trait.
//!
//! The runtime builds a [`ModelRequest`] from the conversation and the
//! step's tool catalog and gets back a [`ModelResponse`]; how each provider
//! spells that on the wire is this crate's business and nobody else's.
//!
//! [`build`] turns a resolved Model resource ([`ModelConfig`]) into an
//! `Arc<dyn Model>`:
//!
//! | `spec.provider` | what answers |
//! |---|---|
//! | `anthropic` | the Messages API |
//! | `openai` | Chat Completions, and any server compatible with it via `spec.endpoint` |
//! | `google` | Gemini `generateContent` |
//! | `scripted` | rules from a YAML file, no network |
//! | `replay` | a cassette recorded earlier, no network |
//!
//! Options, the rules format, cassettes and the choice of thin adapters
//! over a multi-provider crate are described in the crate README.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod cassette;
pub mod config;
pub mod error;
mod http;
mod options;
pub mod pricing;
mod provider;
pub mod request;
mod scripted;
mod wire;

pub use cassette::CassetteEntry;
pub use config::{ApiKey, EnvLookup, ModelConfig, ProcessEnv};
pub use error::ModelError;
pub use pricing::{price_of, ModelPrice, PriceSource};
pub use provider::{build, default_key_variable, needs_api_key, DEFAULT_KEY_VARIABLES, PROVIDERS};
pub use request::{
    FinishReason, InvalidToolArguments, ModelParams, ModelRequest, ModelResponse, ToolSpec,
};
pub use scripted::DEFAULT_RULES_FILE;

use futures_util::future::BoxFuture;

/// Receives incremental output while a provider streams its answer.
///
/// Providers that do not stream never call it; the final
/// [`ModelResponse`] is complete either way. When deltas are reported,
/// they concatenate to the response's text (`scripted` and `replay` report
/// their whole text as one delta). Reasoning is never reported here.
pub trait StreamObserver: Send + Sync {
    /// A piece of assistant text, in order.
    fn on_text_delta(&self, delta: &str);

    /// A new model call of the same Turn starts (the runtime calls this
    /// before each Step's call), so a display can separate the text of
    /// one Step from the next. Does nothing unless overridden.
    fn on_model_call_start(&self) {}
}

/// A [`StreamObserver`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoStream;

impl StreamObserver for NoStream {
    fn on_text_delta(&self, _delta: &str) {}
}

/// One LLM behind its wire protocol.
///
/// Implementations are cheap to share (`Arc<dyn Model>`) and safe to call
/// concurrently. Dropping the returned future cancels the call.
pub trait Model: Send + Sync {
    /// Sends one request and returns the whole answer, reporting text
    /// deltas to `observer` as they arrive when the provider streams.
    fn generate<'a>(
        &'a self,
        request: ModelRequest,
        observer: &'a dyn StreamObserver,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>>;
}
