//! How `entry` strings of Tool and Extension resources resolve to code.
//!
//! `builtin:<name>` resolves through a [`BuiltinCatalog`], which the
//! embedded `@goondan/base` package fills. A file entry is a script for
//! the plugin host, which is a separate seam: [`Entry::Script`] is parsed
//! here and refused at assembly until that host exists.

use super::Extension;
use crate::tool::ToolHandler;
use std::collections::HashMap;
use std::sync::Arc;

/// The handlers of one Tool resource's entry, by export name.
pub type ToolHandlers = HashMap<String, Arc<dyn ToolHandler>>;

/// A resource's `spec.entry`, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// `builtin:<name>`.
    Builtin(String),
    /// A script file, run by the plugin host.
    Script(String),
}

/// The prefix of builtin entries.
pub const BUILTIN_PREFIX: &str = "builtin:";

impl Entry {
    /// Classifies an entry string.
    pub fn parse(text: &str) -> Entry {
        match text.strip_prefix(BUILTIN_PREFIX) {
            Some(name) => Entry::Builtin(name.to_string()),
            None => Entry::Script(text.to_string()),
        }
    }
}

/// Builtin implementations by name.
pub trait BuiltinCatalog: Send + Sync {
    /// The handlers of builtin tool `name`.
    fn tool(&self, name: &str) -> Option<ToolHandlers>;

    /// Builtin extension `name`.
    fn extension(&self, name: &str) -> Option<Arc<dyn Extension>>;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_builtin_or_script() {
        assert_eq!(Entry::parse("builtin:bash"), Entry::Builtin("bash".into()));
        assert_eq!(
            Entry::parse("./tools/x.ts"),
            Entry::Script("./tools/x.ts".into())
        );
    }
}
