//! Shared setup of the public-API tests: an agent assembled from a
//! scripted model, extensions and tools given as Rust values, on an
//! in-memory journal.
#![allow(dead_code)]

pub mod mock_llm;

use goondan_runtime::events::CollectEvents;
use goondan_runtime::extension::ToolHandlers;
use goondan_runtime::test_support::{RecordingJournal, ScriptedModel};
use goondan_runtime::turn::{
    AgentDefinition, AgentServices, ExtensionDefinition, ToolDefinition, ToolExportDefinition,
};
use goondan_runtime::{Agent, EntryResolvers, Extension, MapBuiltinCatalog, ToolHandler};
use goondan_store::MemoryExtensionState;
use goondan_types::{Entry, JsonObject, JsonValue};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A shared, ordered log of what layers did.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    pub fn push(&self, line: impl Into<String>) {
        self.0.lock().unwrap().push(line.into());
    }

    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Everything a test needs to drive an agent and look at its effects.
pub struct Harness {
    pub model: ScriptedModel,
    pub journal: RecordingJournal,
    pub events: CollectEvents,
    pub definition: AgentDefinition,
    pub builtins: MapBuiltinCatalog,
    pub extension_state: MemoryExtensionState,
}

impl Harness {
    pub fn new() -> Self {
        let model = ScriptedModel::new();
        let definition =
            AgentDefinition::new("alpha", "main", Arc::new(model.clone()), "scripted-1");
        Harness {
            model,
            journal: RecordingJournal::new(),
            events: CollectEvents::new(),
            definition,
            builtins: MapBuiltinCatalog::new(),
            extension_state: MemoryExtensionState::default(),
        }
    }

    /// Adds an extension (in `spec.extensions` order).
    pub fn extension(&mut self, name: &str, extension: impl Extension + 'static) -> &mut Self {
        self.extension_with_config(name, extension, JsonValue::Null)
    }

    pub fn extension_with_config(
        &mut self,
        name: &str,
        extension: impl Extension + 'static,
        config: JsonValue,
    ) -> &mut Self {
        let builtins = std::mem::take(&mut self.builtins);
        self.builtins = builtins.with_extension(name, Arc::new(extension));
        self.definition.extensions.push(ExtensionDefinition {
            name: name.to_string(),
            entry: Entry::native(name),
            config,
        });
        self
    }

    /// Adds a Tool resource `name` with one export per `(export, schema,
    /// handler)`.
    pub fn tool(
        &mut self,
        name: &str,
        exports: Vec<(&str, Option<JsonValue>, Arc<dyn ToolHandler>)>,
        error_message_limit: Option<usize>,
    ) -> &mut Self {
        let mut handlers: ToolHandlers = HashMap::new();
        let mut definitions = Vec::new();
        for (export, schema, handler) in exports {
            handlers.insert(export.to_string(), handler);
            definitions.push(ToolExportDefinition {
                name: export.to_string(),
                description: Some(format!("{name} {export}")),
                parameters: schema.map(|schema| match schema {
                    JsonValue::Object(object) => object,
                    _ => JsonObject::new(),
                }),
            });
        }
        let builtins = std::mem::take(&mut self.builtins);
        self.builtins = builtins.with_tool(name, handlers);
        self.definition.tools.push(ToolDefinition {
            name: name.to_string(),
            entry: Entry::native(name),
            exports: definitions,
            error_message_limit,
        });
        self
    }

    pub fn services(&self) -> AgentServices {
        let mut services = AgentServices::new(
            self.journal.boxed(),
            Box::new(self.extension_state.clone()),
            Arc::new(EntryResolvers::new(Arc::new(self.builtins.clone()))),
        );
        services.runtime_events = Arc::new(self.events.clone());
        services
    }

    pub async fn start(&self) -> Agent {
        match Agent::start(self.definition.clone(), self.services()).await {
            Ok(agent) => agent,
            Err(error) => panic!("agent did not start: [{}] {error}", error.code()),
        }
    }
}
