//! The Tool Registry of one agent: every tool it can run, with its
//! handler, in registration order (Tool resources first, then tools that
//! extensions register). The catalog of each Step starts as a copy of it.

use super::{ToolHandler, DEFAULT_ERROR_MESSAGE_LIMIT};
use goondan_types::{ToolCatalogItem, ToolName};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use thiserror::Error;

/// A tool that cannot be registered.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ToolRegistrationError {
    /// The name is not `resource__export` with exactly one `__`.
    #[error("tool name '{name}' must have the form resource__export, with no other '__'")]
    InvalidName {
        /// The rejected name.
        name: String,
    },
    /// Another tool already has this name.
    #[error("a tool named '{name}' is already registered")]
    Duplicate {
        /// The name.
        name: String,
    },
}

impl ToolRegistrationError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            ToolRegistrationError::InvalidName { .. } => "E_TOOL_INVALID_NAME",
            ToolRegistrationError::Duplicate { .. } => "E_TOOL_DUPLICATE",
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> Option<&str> {
        match self {
            ToolRegistrationError::InvalidName { .. } => {
                Some("name it <resource>__<export>, for example weather__get")
            }
            ToolRegistrationError::Duplicate { .. } => Some("pick a different resource prefix"),
        }
    }
}

/// One callable tool.
#[derive(Clone)]
pub struct RegisteredTool {
    /// How the model sees it.
    pub item: ToolCatalogItem,
    /// What runs it.
    pub handler: Arc<dyn ToolHandler>,
    /// `Tool.spec.errorMessageLimit`, default 1000.
    pub error_message_limit: usize,
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("name", &self.item.name)
            .field("error_message_limit", &self.error_message_limit)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct RegistryInner {
    tools: Vec<RegisteredTool>,
    by_name: HashMap<String, usize>,
}

/// The registry; cloning shares it, so a tool an extension registers while
/// a Turn runs appears in the next Step's catalog.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    inner: Arc<RwLock<RegistryInner>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.read().tools.iter().map(|tool| tool.item.name.clone()))
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        ToolRegistry::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, RegistryInner> {
        // Writers only push complete entries, so a poisoned lock is
        // still consistent.
        self.inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a tool with the default error message limit.
    pub fn register(
        &self,
        item: ToolCatalogItem,
        handler: Arc<dyn ToolHandler>,
    ) -> Result<(), ToolRegistrationError> {
        self.register_with_limit(item, handler, DEFAULT_ERROR_MESSAGE_LIMIT)
    }

    /// Adds a tool; its name must follow `resource__export` and be new.
    pub fn register_with_limit(
        &self,
        item: ToolCatalogItem,
        handler: Arc<dyn ToolHandler>,
        error_message_limit: usize,
    ) -> Result<(), ToolRegistrationError> {
        if ToolName::parse(&item.name).is_none() {
            return Err(ToolRegistrationError::InvalidName { name: item.name });
        }
        let mut inner = self
            .inner
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if inner.by_name.contains_key(&item.name) {
            return Err(ToolRegistrationError::Duplicate { name: item.name });
        }
        let position = inner.tools.len();
        inner.by_name.insert(item.name.clone(), position);
        inner.tools.push(RegisteredTool {
            item,
            handler,
            error_message_limit,
        });
        Ok(())
    }

    /// Removes the tool named `name`; true when it was there. It leaves
    /// the catalog from the next Step on; a call the model makes to it
    /// later is refused like any unknown tool.
    pub fn unregister(&self, name: &str) -> bool {
        let mut inner = self
            .inner
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(position) = inner.by_name.remove(name) else {
            return false;
        };
        inner.tools.remove(position);
        for index in inner.by_name.values_mut() {
            if *index > position {
                *index -= 1;
            }
        }
        true
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<RegisteredTool> {
        let inner = self.read();
        inner
            .by_name
            .get(name)
            .map(|&position| inner.tools[position].clone())
    }

    /// Every tool as a catalog item, in registration order: the starting
    /// catalog of a Step.
    pub fn catalog(&self) -> Vec<ToolCatalogItem> {
        self.read()
            .tools
            .iter()
            .map(|tool| tool.item.clone())
            .collect()
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.read().tools.len()
    }

    /// True when no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::handler_fn;

    fn item(name: &str) -> ToolCatalogItem {
        ToolCatalogItem {
            name: name.to_string(),
            description: None,
            parameters: None,
            source: None,
        }
    }

    #[test]
    fn names_breaking_the_double_underscore_rule_are_refused() {
        let registry = ToolRegistry::new();
        let handler = handler_fn(|_, _| Box::pin(async { Ok(serde_json::Value::Null) }));
        for bad in ["weather", "a__b__c", "__get", "weather__"] {
            let error = registry.register(item(bad), handler.clone()).unwrap_err();
            assert_eq!(error.code(), "E_TOOL_INVALID_NAME", "{bad}");
        }
        registry
            .register(item("weather__get"), handler.clone())
            .unwrap();
        let error = registry
            .register(item("weather__get"), handler)
            .unwrap_err();
        assert_eq!(error.code(), "E_TOOL_DUPLICATE");
        assert_eq!(registry.catalog().len(), 1);
    }

    #[test]
    fn an_unregistered_tool_leaves_the_catalog_and_the_rest_stay_found() {
        let registry = ToolRegistry::new();
        let handler = handler_fn(|_, _| Box::pin(async { Ok(serde_json::Value::Null) }));
        for name in ["a__one", "a__two", "a__three"] {
            registry.register(item(name), handler.clone()).unwrap();
        }
        assert!(registry.unregister("a__two"));
        assert!(!registry.unregister("a__two"));
        let names: Vec<String> = registry.catalog().into_iter().map(|i| i.name).collect();
        assert_eq!(names, ["a__one", "a__three"]);
        assert_eq!(registry.get("a__three").unwrap().item.name, "a__three");
        assert!(registry.get("a__two").is_none());
        registry.register(item("a__two"), handler).unwrap();
        assert_eq!(registry.len(), 3);
    }
}
