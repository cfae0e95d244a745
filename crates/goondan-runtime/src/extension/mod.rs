//! Extensions (seed 003): the [`Extension`] trait a library user
//! implements, the [`ExtensionApi`] its `register` receives, and how
//! entries become code: the [`EntryResolver`] seam, the builtin catalog
//! behind `builtin:<name>` entries, and the composite that sends script
//! entries to a script resolver when one is installed.
//!
//! An extension registers middlewares, tools and event handlers once, when
//! the agent starts, in the order of `Agent.spec.extensions`. Handles it
//! keeps from the API ([`ExtensionState`], [`EventBus`], [`ToolRegistry`])
//! stay valid for the life of the agent.

pub mod builtin;
pub mod resolver;
pub mod state;

pub use crate::event_bus::{ArgsHandler, EventBus, EventHandler, Subscription};
pub use builtin::{BuiltinCatalog, MapBuiltinCatalog, ToolHandlers};
pub use resolver::{
    BuiltinResolver, EntryError, EntryResolver, EntryResolvers, EntryTarget, ResourceKind,
};
pub use state::{ExtensionState, ExtensionStates};

use crate::pipeline::PipelineRegistry;
use crate::tool::{ToolHandler, ToolRegistrationError, ToolRegistry};
use futures_util::future::BoxFuture;
use goondan_types::{JsonValue, ToolCatalogItem, ToolSource, ToolSourceType};
use std::fmt;
use std::sync::Arc;
use thiserror::Error;

/// Why an extension could not initialize. The agent does not start; the
/// runtime reports it as `E_EXTENSION_INIT` naming the extension.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{message}")]
pub struct ExtensionInitError {
    /// What went wrong.
    pub message: String,
}

impl ExtensionInitError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        ExtensionInitError {
            message: message.into(),
        }
    }
}

impl From<ToolRegistrationError> for ExtensionInitError {
    fn from(error: ToolRegistrationError) -> Self {
        ExtensionInitError::new(format!("[{}] {error}", error.code()))
    }
}

/// One extension's implementation.
pub trait Extension: Send + Sync {
    /// Registers middlewares, tools and event handlers. `config` is the
    /// resource's `spec.config` (`null` when absent).
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError>;

    /// What the agent calls, in `spec.extensions` order: registration
    /// that may wait, for an implementation whose `register` runs
    /// elsewhere (a script extension's runs in its plugin process, and
    /// its `api.state` and `api.events` calls must reach this agent
    /// while it runs). The default runs [`Extension::register`].
    fn register_async<'a, 'r: 'a>(
        &'a self,
        api: &'a mut ExtensionApi<'r>,
        config: &'a JsonValue,
    ) -> BoxFuture<'a, Result<(), ExtensionInitError>> {
        Box::pin(std::future::ready(self.register(api, config)))
    }
}

impl<F> Extension for F
where
    F: Fn(&mut ExtensionApi<'_>, &JsonValue) -> Result<(), ExtensionInitError> + Send + Sync,
{
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        self(api, config)
    }
}

/// `api.tools`: registers tools owned by one extension.
#[derive(Clone)]
pub struct ExtensionTools {
    extension_name: String,
    registry: ToolRegistry,
}

impl fmt::Debug for ExtensionTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtensionTools")
            .field("extension_name", &self.extension_name)
            .finish_non_exhaustive()
    }
}

impl ExtensionTools {
    /// Registers a tool; it joins the catalog from the next Step on. A
    /// missing `source` is set to this extension.
    pub fn register(
        &self,
        mut item: ToolCatalogItem,
        handler: Arc<dyn ToolHandler>,
    ) -> Result<(), ToolRegistrationError> {
        if item.source.is_none() {
            item.source = Some(ToolSource::new(
                ToolSourceType::Extension,
                &self.extension_name,
            ));
        }
        self.registry.register(item, handler)
    }

    /// The Extension resource these tools belong to.
    pub fn extension_name(&self) -> &str {
        &self.extension_name
    }

    /// Removes a tool registered through extensions with this `source`
    /// (the one it was registered with, or this extension's own when it
    /// had none); true when it was there. It leaves the catalog from the
    /// next Step on. The bundle's own tools (source `config`) are never
    /// removed, and a tool of another source stays: `false`.
    pub fn unregister(&self, name: &str, source: &ToolSource) -> bool {
        let owned = source.source_type != ToolSourceType::Config
            && self
                .registry
                .get(name)
                .is_some_and(|tool| tool.item.source.as_ref() == Some(source));
        owned && self.registry.unregister(name)
    }
}

/// What `register(api, config)` receives.
pub struct ExtensionApi<'r> {
    name: String,
    pipeline: &'r mut PipelineRegistry,
    tools: ExtensionTools,
    state: ExtensionState,
    events: EventBus,
    logger: tracing::Span,
}

impl fmt::Debug for ExtensionApi<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtensionApi")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<'r> ExtensionApi<'r> {
    /// The API for extension `name`.
    pub fn new(
        name: &str,
        pipeline: &'r mut PipelineRegistry,
        tools: ToolRegistry,
        state: ExtensionState,
        events: EventBus,
    ) -> Self {
        ExtensionApi {
            name: name.to_string(),
            pipeline,
            tools: ExtensionTools {
                extension_name: name.to_string(),
                registry: tools,
            },
            state,
            events,
            logger: tracing::info_span!("extension", extension = name),
        }
    }

    /// The extension's resource name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `api.pipeline`: registers middlewares.
    pub fn pipeline(&mut self) -> &mut PipelineRegistry {
        self.pipeline
    }

    /// `api.tools`: registers tools.
    pub fn tools(&self) -> &ExtensionTools {
        &self.tools
    }

    /// `api.state`: this extension's JSON state for this instance.
    pub fn state(&self) -> &ExtensionState {
        &self.state
    }

    /// `api.events`: the in-process event bus of the agent.
    pub fn events(&self) -> &EventBus {
        &self.events
    }

    /// `api.logger`: a span carrying the extension's name.
    pub fn logger(&self) -> &tracing::Span {
        &self.logger
    }
}
