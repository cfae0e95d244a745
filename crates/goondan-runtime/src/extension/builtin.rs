//! The catalog of builtin implementations: what `builtin:<name>` entries
//! resolve to. The embedded `@goondan/base` package fills one; a library
//! user embedding the runtime may fill their own.
//!
//! The catalog only looks names up. Classifying an entry is
//! [`goondan_types::Entry`]'s job, and turning entries into code is the
//! [`super::resolver`]'s, whose [`super::BuiltinResolver`] reads this
//! catalog.

use super::Extension;
use crate::tool::ToolHandler;
use std::collections::HashMap;
use std::sync::Arc;

/// The handlers of one Tool resource's entry, by export name.
pub type ToolHandlers = HashMap<String, Arc<dyn ToolHandler>>;

/// Builtin implementations by name.
pub trait BuiltinCatalog: Send + Sync {
    /// The handlers of builtin tool `name`.
    fn tool(&self, name: &str) -> Option<ToolHandlers>;

    /// Builtin extension `name`.
    fn extension(&self, name: &str) -> Option<Arc<dyn Extension>>;

    /// The names of every builtin tool, sorted; unknown names are
    /// suggested from these.
    fn tool_names(&self) -> Vec<String>;

    /// The names of every builtin extension, sorted.
    fn extension_names(&self) -> Vec<String>;
}

/// A [`BuiltinCatalog`] filled by hand, for example by `goondan-base` or
/// by a library user embedding the runtime with their own tools.
#[derive(Default, Clone)]
pub struct MapBuiltinCatalog {
    tools: HashMap<String, ToolHandlers>,
    extensions: HashMap<String, Arc<dyn Extension>>,
}

impl std::fmt::Debug for MapBuiltinCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapBuiltinCatalog")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("extensions", &self.extensions.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl MapBuiltinCatalog {
    /// An empty catalog.
    pub fn new() -> Self {
        MapBuiltinCatalog::default()
    }

    /// Adds builtin tool `name` with its handlers by export name.
    pub fn with_tool(mut self, name: &str, handlers: ToolHandlers) -> Self {
        self.tools.insert(name.to_string(), handlers);
        self
    }

    /// Adds builtin extension `name`.
    pub fn with_extension(mut self, name: &str, extension: Arc<dyn Extension>) -> Self {
        self.extensions.insert(name.to_string(), extension);
        self
    }
}

impl BuiltinCatalog for MapBuiltinCatalog {
    fn tool(&self, name: &str) -> Option<ToolHandlers> {
        self.tools.get(name).cloned()
    }

    fn extension(&self, name: &str) -> Option<Arc<dyn Extension>> {
        self.extensions.get(name).cloned()
    }

    fn tool_names(&self) -> Vec<String> {
        sorted_keys(&self.tools)
    }

    fn extension_names(&self) -> Vec<String> {
        sorted_keys(&self.extensions)
    }
}

fn sorted_keys<V>(map: &HashMap<String, V>) -> Vec<String> {
    let mut names: Vec<String> = map.keys().cloned().collect();
    names.sort();
    names
}
