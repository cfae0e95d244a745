//! The seam between a resource's `spec.entry` and the code behind it.
//!
//! [`EntryResolver`] turns an [`Entry`] of a Tool or an Extension into
//! what runs it: a Tool's handlers by export name, an Extension's
//! implementation. A Connector's entry is not resolved here: it runs in
//! its Connection's ConnectorProcess, never inside an agent. [`EntryResolvers`]
//! picks a resolver by the kind of entry: `builtin:<name>` goes to the
//! [`BuiltinResolver`] over a [`BuiltinCatalog`]; a script file goes to the
//! script resolver when one is installed (the plugin host), and is refused
//! with `E_SCRIPT_ENTRY_UNSUPPORTED` when none is.
//!
//! Why a trait: the builtin catalog is one implementation; the plugin host
//! adds a second (JSON-RPC child processes for TypeScript, JavaScript,
//! Python and executables) by implementing [`EntryResolver`] and installing
//! it with [`EntryResolvers::with_scripts`], without touching
//! [`crate::turn::Agent::start`]. Resolution is async because that second
//! implementation starts processes.
//!
//! This module does not decide where a script path points on disk, how a
//! plugin host is spoken to, or how a connector process runs.

use super::builtin::{BuiltinCatalog, ToolHandlers};
use super::Extension;
use crate::tool::ToolExportDefinition;
use futures_util::future::{self, BoxFuture};
use goondan_types::{Entry, JsonValue};
use std::fmt;
use std::sync::Arc;
use thiserror::Error;

/// The kinds of resource that have an `entry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceKind {
    /// A Tool: its entry provides handlers by export name.
    Tool,
    /// An Extension: its entry provides `register(api, config)`.
    Extension,
    /// A Connector: its entry is what a connector process runs.
    Connector,
}

impl ResourceKind {
    /// The kind as resources spell it: `Tool`, `Extension` or `Connector`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Tool => "Tool",
            ResourceKind::Extension => "Extension",
            ResourceKind::Connector => "Connector",
        }
    }
}

impl fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The resource whose entry is being resolved.
///
/// The runtime may add fields in later versions (hence
/// `#[non_exhaustive]`); resolvers read the ones they need.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct EntryTarget<'a> {
    /// The resource's `metadata.name`.
    pub resource: &'a str,
    /// Its `spec.entry`.
    pub entry: &'a Entry,
    /// Its `spec.config` (`null` when absent or not an Extension).
    ///
    /// An Extension's `register(api, config)` needs it. A script
    /// extension's `register` is a call into another process, which is
    /// async, while [`Extension::register`] is sync; so the plugin
    /// resolver runs the remote `register` while resolving and replays
    /// what it registered in [`Extension::register`]. That is why the
    /// config travels with the target.
    pub config: &'a JsonValue,
    /// A Tool's declared exports (`spec.exports`), empty for other kinds.
    ///
    /// A resolver that can list what a module exports (the plugin host)
    /// checks them while resolving, so a missing export is reported with
    /// the file that lacks it.
    pub exports: &'a [ToolExportDefinition],
}

/// The config of a target that has none.
static NO_CONFIG: JsonValue = JsonValue::Null;

impl<'a> EntryTarget<'a> {
    /// The entry `entry` of resource `resource`, with no config.
    pub fn new(resource: &'a str, entry: &'a Entry) -> Self {
        EntryTarget {
            resource,
            entry,
            config: &NO_CONFIG,
            exports: &[],
        }
    }

    /// The same target with the Tool's declared `exports`.
    pub fn with_exports(mut self, exports: &'a [ToolExportDefinition]) -> Self {
        self.exports = exports;
        self
    }

    /// The same target with `spec.config` set to `config`.
    pub fn with_config(mut self, config: &'a JsonValue) -> Self {
        self.config = config;
        self
    }
}

/// Resolves entries to the code behind them.
///
/// # Contract
///
/// * Each method is asked only for resources of its kind, and answers
///   with a value or a typed [`EntryError`]; it never panics on an entry
///   it does not know.
/// * A resolver that does not handle an entry says so with
///   [`EntryError::NotFound`] (a native name it lacks) or
///   [`EntryError::ScriptUnsupported`] (a kind of entry it cannot run);
///   [`EntryError::Failed`] is for an entry it handles but could not load.
/// * A Tool's handlers are keyed by export name; the runtime checks every
///   export of the resource against them and ignores extra handlers.
/// * What a resolver returns stays valid for the life of the agent: the
///   runtime calls it for every Turn and never resolves again. A resolver
///   that starts a process ties the process to the returned handlers.
/// * Entries carry paths relative to the bundle root; a resolver that
///   needs the file knows the root itself.
pub trait EntryResolver: Send + Sync {
    /// The handlers of Tool `target`, by export name.
    fn resolve_tool<'a>(
        &'a self,
        target: EntryTarget<'a>,
    ) -> BoxFuture<'a, Result<ToolHandlers, EntryError>>;

    /// The implementation of Extension `target`, whose `register` the
    /// runtime runs once when the agent starts.
    fn resolve_extension<'a>(
        &'a self,
        target: EntryTarget<'a>,
    ) -> BoxFuture<'a, Result<Arc<dyn Extension>, EntryError>>;
}

/// Why an entry did not resolve. The agent does not start.
#[derive(Debug, Clone, Error)]
pub enum EntryError {
    /// A `builtin:<name>` entry names nothing the catalog has.
    #[error("{kind} '{resource}' has entry '{entry}', which is not a known builtin")]
    NotFound {
        /// What kind of resource.
        kind: ResourceKind,
        /// The resource name.
        resource: String,
        /// The entry.
        entry: Entry,
        /// The nearest known name, or the known names.
        suggestion: String,
    },
    /// A script entry, and no resolver that runs scripts is installed.
    #[error("{kind} '{resource}' has script entry '{entry}', but no script resolver is installed")]
    ScriptUnsupported {
        /// What kind of resource.
        kind: ResourceKind,
        /// The resource name.
        resource: String,
        /// The entry.
        entry: Entry,
    },
    /// A resolver that handles the entry could not load it (for example,
    /// a plugin host that did not start).
    #[error("{kind} '{resource}' with entry '{entry}' could not be loaded: {message}")]
    Failed {
        /// What kind of resource.
        kind: ResourceKind,
        /// The resource name.
        resource: String,
        /// The entry.
        entry: Entry,
        /// What the resolver reported.
        message: String,
    },
}

impl EntryError {
    /// [`EntryError::NotFound`] for `target`.
    pub fn not_found(
        kind: ResourceKind,
        target: EntryTarget<'_>,
        suggestion: impl Into<String>,
    ) -> Self {
        EntryError::NotFound {
            kind,
            resource: target.resource.to_string(),
            entry: target.entry.clone(),
            suggestion: suggestion.into(),
        }
    }

    /// [`EntryError::ScriptUnsupported`] for `target`.
    pub fn script_unsupported(kind: ResourceKind, target: EntryTarget<'_>) -> Self {
        EntryError::ScriptUnsupported {
            kind,
            resource: target.resource.to_string(),
            entry: target.entry.clone(),
        }
    }

    /// [`EntryError::Failed`] for `target`.
    pub fn failed(kind: ResourceKind, target: EntryTarget<'_>, message: impl Into<String>) -> Self {
        EntryError::Failed {
            kind,
            resource: target.resource.to_string(),
            entry: target.entry.clone(),
            message: message.into(),
        }
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            EntryError::NotFound { .. } => "E_ENTRY_NOT_FOUND",
            EntryError::ScriptUnsupported { .. } => "E_SCRIPT_ENTRY_UNSUPPORTED",
            EntryError::Failed { .. } => "E_ENTRY_RESOLUTION_FAILED",
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> Option<&str> {
        match self {
            EntryError::NotFound { suggestion, .. } => Some(suggestion),
            EntryError::ScriptUnsupported { .. } => Some(
                "install a script resolver with EntryResolvers::with_scripts (the \
                 AgentProcess installs goondan_plugin::PluginResolver), or use a \
                 builtin:<name> entry",
            ),
            EntryError::Failed { .. } => Some("check the entry's log lines above"),
        }
    }
}

/// Resolves `builtin:<name>` entries in a [`BuiltinCatalog`].
///
/// It runs no scripts ([`EntryError::ScriptUnsupported`]); an unknown name gets
/// [`EntryError::NotFound`] with the nearest name the catalog has.
#[derive(Clone)]
pub struct BuiltinResolver {
    catalog: Arc<dyn BuiltinCatalog>,
}

impl fmt::Debug for BuiltinResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuiltinResolver").finish_non_exhaustive()
    }
}

impl BuiltinResolver {
    /// A resolver over `catalog`.
    pub fn new(catalog: Arc<dyn BuiltinCatalog>) -> Self {
        BuiltinResolver { catalog }
    }

    fn resolve<T>(
        &self,
        kind: ResourceKind,
        target: EntryTarget<'_>,
        lookup: impl FnOnce(&dyn BuiltinCatalog, &str) -> Option<T>,
        names: impl FnOnce(&dyn BuiltinCatalog) -> Vec<String>,
    ) -> Result<T, EntryError> {
        match target.entry {
            Entry::Native { name } => lookup(&*self.catalog, name).ok_or_else(|| {
                let known = names(&*self.catalog);
                EntryError::not_found(kind, target, suggest(kind, name, &known))
            }),
            Entry::Script { .. } => Err(EntryError::script_unsupported(kind, target)),
        }
    }
}

impl EntryResolver for BuiltinResolver {
    fn resolve_tool<'a>(
        &'a self,
        target: EntryTarget<'a>,
    ) -> BoxFuture<'a, Result<ToolHandlers, EntryError>> {
        Box::pin(future::ready(self.resolve(
            ResourceKind::Tool,
            target,
            |catalog, name| catalog.tool(name),
            |catalog| catalog.tool_names(),
        )))
    }

    fn resolve_extension<'a>(
        &'a self,
        target: EntryTarget<'a>,
    ) -> BoxFuture<'a, Result<Arc<dyn Extension>, EntryError>> {
        Box::pin(future::ready(self.resolve(
            ResourceKind::Extension,
            target,
            |catalog, name| catalog.extension(name),
            |catalog| catalog.extension_names(),
        )))
    }
}

/// "Did you mean" for an unknown builtin `name` among `known`, or the
/// list of known names. The closeness rule is the loader's (a third of
/// the name's length, or a prefix), so a typo gets the same hint whether
/// the loader or the runtime catches it.
fn suggest(kind: ResourceKind, name: &str, known: &[String]) -> String {
    let allowed = (name.chars().count() / 3).max(1);
    let closest = known
        .iter()
        .map(|candidate| (strsim::damerau_levenshtein(name, candidate), candidate))
        .filter(|(distance, candidate)| {
            *distance <= allowed
                || (name.len() >= 3
                    && (candidate.starts_with(name) || name.starts_with(*candidate)))
        })
        .min_by_key(|(distance, _)| *distance);
    match closest {
        Some((_, candidate)) => format!("did you mean `builtin:{candidate}`?"),
        None if known.is_empty() => format!("this agent has no builtin {kind}s"),
        None => format!("builtin {kind}s are: {}", known.join(", ")),
    }
}

/// The resolver an agent starts with: native entries go to the builtin
/// catalog, script entries to the script resolver when one is installed.
///
/// Without a script resolver, every script entry is refused with
/// [`EntryError::ScriptUnsupported`] (`E_SCRIPT_ENTRY_UNSUPPORTED`).
#[derive(Clone)]
pub struct EntryResolvers {
    builtins: BuiltinResolver,
    scripts: Option<Arc<dyn EntryResolver>>,
}

impl fmt::Debug for EntryResolvers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntryResolvers")
            .field("scripts", &self.scripts.is_some())
            .finish_non_exhaustive()
    }
}

impl EntryResolvers {
    /// Native entries from `builtins`, no script resolver.
    pub fn new(builtins: Arc<dyn BuiltinCatalog>) -> Self {
        EntryResolvers {
            builtins: BuiltinResolver::new(builtins),
            scripts: None,
        }
    }

    /// Sends script entries to `scripts` (replacing any earlier one).
    pub fn with_scripts(mut self, scripts: Arc<dyn EntryResolver>) -> Self {
        self.scripts = Some(scripts);
        self
    }

    /// The resolver for `entry`, `None` for a script with no script
    /// resolver installed.
    fn resolver_for(&self, entry: &Entry) -> Option<&dyn EntryResolver> {
        match entry {
            Entry::Native { .. } => Some(&self.builtins),
            Entry::Script { .. } => self.scripts.as_deref(),
        }
    }
}

impl EntryResolver for EntryResolvers {
    fn resolve_tool<'a>(
        &'a self,
        target: EntryTarget<'a>,
    ) -> BoxFuture<'a, Result<ToolHandlers, EntryError>> {
        match self.resolver_for(target.entry) {
            Some(resolver) => resolver.resolve_tool(target),
            None => Box::pin(future::ready(Err(EntryError::script_unsupported(
                ResourceKind::Tool,
                target,
            )))),
        }
    }

    fn resolve_extension<'a>(
        &'a self,
        target: EntryTarget<'a>,
    ) -> BoxFuture<'a, Result<Arc<dyn Extension>, EntryError>> {
        match self.resolver_for(target.entry) {
            Some(resolver) => resolver.resolve_extension(target),
            None => Box::pin(future::ready(Err(EntryError::script_unsupported(
                ResourceKind::Extension,
                target,
            )))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extension::{ExtensionApi, ExtensionInitError, MapBuiltinCatalog};
    use crate::tool::handler_fn;
    use goondan_types::JsonValue;
    use std::collections::HashMap;

    fn catalog() -> Arc<dyn BuiltinCatalog> {
        let bash: ToolHandlers = HashMap::from([(
            "exec".to_string(),
            handler_fn(|_ctx, _args| Box::pin(async { Ok(JsonValue::Null) })),
        )]);
        let window = |_: &mut ExtensionApi<'_>, _: &JsonValue| Ok::<(), ExtensionInitError>(());
        Arc::new(
            MapBuiltinCatalog::new()
                .with_tool("bash", bash)
                .with_extension("message-window", Arc::new(window)),
        )
    }

    /// A second implementation, as the plugin host will be: it answers
    /// every script Tool with one in-process handler, and fails
    /// `broken.py`.
    struct Scripts;

    impl EntryResolver for Scripts {
        fn resolve_tool<'a>(
            &'a self,
            target: EntryTarget<'a>,
        ) -> BoxFuture<'a, Result<ToolHandlers, EntryError>> {
            Box::pin(async move {
                if target.entry.to_string() == "broken.py" {
                    return Err(EntryError::failed(
                        ResourceKind::Tool,
                        target,
                        "the host exited with status 1",
                    ));
                }
                let run = handler_fn(|_ctx, _args| Box::pin(async { Ok(JsonValue::Null) }));
                Ok(HashMap::from([("run".to_string(), run)]))
            })
        }

        fn resolve_extension<'a>(
            &'a self,
            target: EntryTarget<'a>,
        ) -> BoxFuture<'a, Result<Arc<dyn Extension>, EntryError>> {
            Box::pin(future::ready(Err(EntryError::script_unsupported(
                ResourceKind::Extension,
                target,
            ))))
        }
    }

    fn parse(text: &str) -> Entry {
        Entry::parse(text).unwrap()
    }

    fn refusal<T>(result: Result<T, EntryError>) -> EntryError {
        match result {
            Ok(_) => panic!("the entry resolved"),
            Err(error) => error,
        }
    }

    #[tokio::test]
    async fn native_entries_resolve_in_the_catalog_with_or_without_scripts() {
        let plain = EntryResolvers::new(catalog());
        let with_scripts = EntryResolvers::new(catalog()).with_scripts(Arc::new(Scripts));
        for resolvers in [plain, with_scripts] {
            let bash = parse("builtin:bash");
            let handlers = resolvers
                .resolve_tool(EntryTarget::new("bash", &bash))
                .await
                .unwrap();
            assert_eq!(handlers.keys().collect::<Vec<_>>(), ["exec"]);
            let window = parse("builtin:message-window");
            resolvers
                .resolve_extension(EntryTarget::new("window", &window))
                .await
                .unwrap();
        }
    }

    #[tokio::test]
    async fn script_entries_resolve_only_through_an_installed_script_resolver() {
        let entry = parse("./tools/x.ts");
        let target = EntryTarget::new("x", &entry);

        let refused = refusal(EntryResolvers::new(catalog()).resolve_tool(target).await);
        assert_eq!(refused.code(), "E_SCRIPT_ENTRY_UNSUPPORTED");
        assert_eq!(
            refused.to_string(),
            "Tool 'x' has script entry './tools/x.ts', but no script resolver is installed"
        );

        let resolvers = EntryResolvers::new(catalog()).with_scripts(Arc::new(Scripts));
        let handlers = resolvers.resolve_tool(target).await.unwrap();
        assert_eq!(handlers.keys().collect::<Vec<_>>(), ["run"]);

        let broken = parse("broken.py");
        let failed = refusal(
            resolvers
                .resolve_tool(EntryTarget::new("broken", &broken))
                .await,
        );
        assert_eq!(failed.code(), "E_ENTRY_RESOLUTION_FAILED");
        assert!(
            failed.to_string().contains("exited with status 1"),
            "{failed}"
        );
    }

    #[tokio::test]
    async fn unknown_builtins_get_the_nearest_name() {
        let resolvers = EntryResolvers::new(catalog());
        let check = async |kind: ResourceKind, text: &str, suggestion: &str| {
            let entry = parse(text);
            let target = EntryTarget::new("r", &entry);
            let error = match kind {
                ResourceKind::Tool => resolvers.resolve_tool(target).await.err(),
                _ => resolvers.resolve_extension(target).await.err(),
            }
            .unwrap();
            assert_eq!(error.code(), "E_ENTRY_NOT_FOUND", "{text}");
            assert_eq!(error.suggestion(), Some(suggestion), "{text}");
        };
        check(
            ResourceKind::Tool,
            "builtin:bsh",
            "did you mean `builtin:bash`?",
        )
        .await;
        check(ResourceKind::Tool, "builtin:zzz", "builtin Tools are: bash").await;
        check(
            ResourceKind::Extension,
            "builtin:message-windw",
            "did you mean `builtin:message-window`?",
        )
        .await;
    }
}
