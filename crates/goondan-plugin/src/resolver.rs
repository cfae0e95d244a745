//! [`PluginResolver`]: the [`EntryResolver`] for script entries. It keeps
//! one [`PluginHost`] per entry file for the agent it serves, starts it
//! while resolving (so a module that does not load stops the agent's
//! start with the file's name), and hands out tool handlers and
//! extensions bound to it.
//!
//! It never sees a native entry: `EntryResolvers` sends those to the
//! builtin catalog.

use crate::error::PluginError;
use crate::extension::PluginExtension;
use crate::host::{HostOptions, PluginHost};
use crate::launch::{self, LaunchOptions};
use crate::tool::{PluginTool, PluginToolHandler};
use futures_util::future::BoxFuture;
use goondan_runtime::{
    EntryError, EntryResolver, EntryTarget, Extension, ResourceKind, ToolHandler, ToolHandlers,
};
use goondan_types::Entry;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Everything the plugin hosts of one agent share.
#[derive(Debug, Clone, Default)]
pub struct PluginConfig {
    /// The bundle root; script paths are relative to it.
    pub bundle_root: PathBuf,
    /// How processes start (strip-types command, granted variables,
    /// shim folder).
    pub launch: LaunchOptions,
    /// How hosts behave (call timeout, secrets to mask).
    pub host: HostOptions,
}

/// Resolves script entries to plugin-backed tools and extensions.
#[derive(Debug)]
pub struct PluginResolver {
    config: PluginConfig,
    hosts: Mutex<HashMap<PathBuf, Arc<PluginHost>>>,
}

impl PluginResolver {
    /// A resolver with no host started yet.
    pub fn new(config: PluginConfig) -> Self {
        PluginResolver {
            config,
            hosts: Mutex::new(HashMap::new()),
        }
    }

    /// The host of `target`'s file, created (not started) on first ask.
    pub fn host(
        &self,
        kind: ResourceKind,
        target: EntryTarget<'_>,
    ) -> Result<Arc<PluginHost>, EntryError> {
        let Entry::Script { path, runtime } = target.entry else {
            return Err(EntryError::script_unsupported(kind, target));
        };
        let file = self.config.bundle_root.join(path);
        let mut hosts = self
            .hosts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(host) = hosts.get(&file) {
            return Ok(Arc::clone(host));
        }
        let launch = launch::plan(&file, *runtime, path, &self.config.launch)
            .map_err(|error| failed(kind, target, &error))?;
        let host = Arc::new(PluginHost::new(
            path.clone(),
            launch,
            self.config.host.clone(),
        ));
        hosts.insert(file, Arc::clone(&host));
        Ok(host)
    }
}

fn failed(kind: ResourceKind, target: EntryTarget<'_>, error: &PluginError) -> EntryError {
    EntryError::failed(kind, target, error.describe())
}

/// The export a declared name maps to: itself when the module has it, or
/// the default export when the module has only that and one export is
/// declared (a single-export tool in the original's style).
fn export_for(declared: &str, n_declared: usize, exported: &[String]) -> Option<String> {
    if exported.iter().any(|name| name == declared) {
        return Some(declared.to_string());
    }
    let only_default = exported.iter().all(|name| name == "default") && !exported.is_empty();
    (only_default && n_declared == 1).then(|| "default".to_string())
}

impl EntryResolver for PluginResolver {
    fn resolve_tool<'a>(
        &'a self,
        target: EntryTarget<'a>,
    ) -> BoxFuture<'a, Result<ToolHandlers, EntryError>> {
        Box::pin(async move {
            let kind = ResourceKind::Tool;
            let host = self.host(kind, target)?;
            let exports = host
                .exports()
                .await
                .map_err(|error| failed(kind, target, &error))?;
            let declared: Vec<&str> = if target.exports.is_empty() {
                exports.tools.iter().map(String::as_str).collect()
            } else {
                target
                    .exports
                    .iter()
                    .map(|export| export.name.as_str())
                    .collect()
            };
            let mut handlers = ToolHandlers::new();
            for name in &declared {
                let Some(export) = export_for(name, declared.len(), &exports.tools) else {
                    let available = if exports.tools.is_empty() {
                        "nothing a tool can call".to_string()
                    } else {
                        exports.tools.join(", ")
                    };
                    return Err(failed(
                        kind,
                        target,
                        &PluginError::ExportMissing {
                            entry: host.label().to_string(),
                            export: name.to_string(),
                            available,
                        },
                    ));
                };
                let handler: Arc<dyn ToolHandler> = Arc::new(PluginToolHandler::new(
                    Arc::clone(&host),
                    PluginTool::Export(export),
                ));
                handlers.insert(name.to_string(), handler);
            }
            Ok(handlers)
        })
    }

    fn resolve_extension<'a>(
        &'a self,
        target: EntryTarget<'a>,
    ) -> BoxFuture<'a, Result<Arc<dyn Extension>, EntryError>> {
        Box::pin(async move {
            let kind = ResourceKind::Extension;
            let host = self.host(kind, target)?;
            // The module must load and have a `register` now, so a broken
            // file stops the start naming it; `register` itself runs when
            // the agent registers its extensions, in their declared order.
            let exports = host
                .exports()
                .await
                .map_err(|error| failed(kind, target, &error))?;
            if !exports.register {
                let error = PluginError::NoRegister {
                    entry: host.label().to_string(),
                };
                return Err(failed(kind, target, &error));
            }
            let extension: Arc<dyn Extension> = Arc::new(PluginExtension::new(host));
            Ok(extension)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_exports_map_to_module_exports_or_a_lone_default() {
        let exported = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            export_for("add", 2, &exported(&["add", "sub"])),
            Some("add".into())
        );
        assert_eq!(
            export_for("run", 1, &exported(&["default"])),
            Some("default".into())
        );
        assert_eq!(export_for("run", 2, &exported(&["default"])), None);
        assert_eq!(export_for("mul", 1, &exported(&["add"])), None);
        assert_eq!(export_for("run", 1, &exported(&[])), None);
    }
}
