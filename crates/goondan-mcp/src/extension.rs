//! The `mcp` Extension (`builtin:mcp`): an agent's MCP servers as tools.
//!
//! For each server of `config.servers` a task connects, lists the tools
//! and registers each exposed one as `<server>__<tool>` (its input schema
//! as parameters, `source: {type: mcp, name: <server>, mcp:
//! {extensionName, serverName}}`); it then follows
//! `notifications/tools/list_changed`, registering tools that appear. A
//! call goes to the server through its [`Session`] with the server's
//! deadline (a call past it is cancelled); every failure becomes a tool
//! error result with an `E_MCP_*` code ([`McpError`]), never an exception,
//! and a failure that breaks the connection (the process died, or it timed
//! out and the server then did not answer a `ping`) drops it, so the next
//! call starts the server again.
//!
//! # Why a task, and a turn middleware that waits for it
//!
//! `Extension::register` is synchronous and an AgentProcess runs a
//! current-thread tokio runtime, so register cannot block on the
//! connection (`block_in_place` panics there, and blocking the only thread
//! would starve the very IO it waits for). Register therefore spawns the
//! connection and returns; tools join the registry whenever they are
//! listed ([`goondan_runtime::extension::ExtensionTools::register`] works
//! at any time, from the next Step on). So that the first Turn still sees
//! them, a `turn` middleware waits, before the first Turn only, until each
//! server's first listing has succeeded or failed (at most its
//! `connectTimeoutMs`). Before a later Turn it starts a new listing in the
//! background for any server that has never listed its tools (it was down
//! at start), without delaying that Turn.
//!
//! A tool the server stops listing leaves the catalog at the next
//! listing (from the next Step on).

use crate::client::{McpConfig, ResolvedServer, Session};
use crate::McpError;
use futures_util::future::BoxFuture;
use goondan_runtime::extension::ExtensionTools;
use goondan_runtime::pipeline::{LayerResult, MiddlewareOptions};
use goondan_runtime::tool::{ToolOutcome, ToolRegistrationError};
use goondan_runtime::{
    Extension, ExtensionApi, ExtensionInitError, Middleware, ToolContext, ToolFailure, ToolHandler,
    TurnContext, TurnNext,
};
use goondan_types::{
    JsonObject, JsonValue, McpToolSource, Secrets, ToolCatalogItem, ToolSource, ToolSourceType,
};
use serde_json::json;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How long a server whose call timed out has to answer a `ping`.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// The notification after which a server's tools are listed again.
const TOOLS_CHANGED: &str = "notifications/tools/list_changed";

/// The tools standing for a server's resources and prompts.
const VIEW_SUFFIXES: [&str; 4] = [
    "list_resources",
    "read_resource",
    "list_prompts",
    "get_prompt",
];

/// The extension. `valueFrom.env` in its config reads the secrets the
/// orchestrator handed to the agent first, then the process environment.
#[derive(Debug, Clone, Default)]
pub struct McpExtension {
    secrets: Secrets,
}

impl McpExtension {
    /// The extension, resolving `valueFrom.env` in `secrets` first.
    pub fn new(secrets: Secrets) -> Self {
        McpExtension { secrets }
    }

    fn lookup(&self, name: &str) -> Option<String> {
        self.secrets
            .get(name)
            .map(str::to_string)
            .or_else(|| std::env::var(name).ok())
    }
}

fn init_error(error: McpError) -> ExtensionInitError {
    ExtensionInitError::new(format!("[{}] {error}", error.code()))
}

impl Extension for McpExtension {
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        let servers = McpConfig::parse(config)
            .and_then(|config| config.resolve(&|name| self.lookup(name)))
            .map_err(init_error)?;
        if servers.is_empty() {
            return Ok(());
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            ExtensionInitError::new("mcp: the extension needs a tokio runtime to connect in")
        })?;
        let mut links = Vec::new();
        for server in servers {
            let (changes, changed) = mpsc::unbounded_channel();
            let (listed, first_listing) = watch::channel(false);
            let link = Arc::new(ServerLink {
                server,
                tools: api.tools().clone(),
                session: tokio::sync::Mutex::new(None),
                registered: Mutex::new(HashSet::new()),
                changes,
                first_listing,
                has_listed: AtomicBool::new(false),
                relisting: AtomicBool::new(false),
            });
            runtime.spawn(follow(Arc::downgrade(&link), listed, changed));
            links.push(link);
        }
        api.pipeline().register::<TurnContext>(
            Arc::new(AwaitListing { links }),
            // Outermost: every other turn middleware sees the tools.
            MiddlewareOptions::priority(i32::MIN),
        );
        Ok(())
    }
}

/// One configured server: its live session (if any) and the tools it has
/// registered.
struct ServerLink {
    server: ResolvedServer,
    tools: ExtensionTools,
    /// Held across connecting, so concurrent calls start one process.
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    registered: Mutex<HashSet<String>>,
    changes: mpsc::UnboundedSender<String>,
    first_listing: watch::Receiver<bool>,
    has_listed: AtomicBool,
    relisting: AtomicBool,
}

impl ServerLink {
    /// The live session, connecting a new one when there is none or the
    /// last one ended.
    async fn session(&self) -> Result<Arc<Session>, McpError> {
        let mut slot = self.session.lock().await;
        if let Some(session) = slot.as_ref().filter(|session| !session.is_closed()) {
            return Ok(session.clone());
        }
        *slot = None;
        let session = Session::connect(&self.server, self.changes.clone()).await?;
        *slot = Some(session.clone());
        Ok(session)
    }

    /// Forgets `session` after a failure that broke it.
    async fn discard(&self, session: &Arc<Session>) {
        let mut slot = self.session.lock().await;
        if slot
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, session))
        {
            *slot = None;
        }
    }

    /// Runs `work` on the session. A breaking failure discards the
    /// session; after a timeout the server must answer a `ping` within
    /// [`PING_TIMEOUT`] to keep it, so a hung server is started afresh by
    /// the next call while a slow tool keeps its server's state.
    async fn with_session<T, F>(&self, work: impl FnOnce(Arc<Session>) -> F) -> Result<T, McpError>
    where
        F: std::future::Future<Output = Result<T, McpError>>,
    {
        let session = self.session().await?;
        let outcome = work(session.clone()).await;
        let broken = match &outcome {
            Err(error) if error.breaks_connection() => true,
            Err(McpError::Timeout { .. }) => session
                .request("ping", json!({}), self.server.timeout.min(PING_TIMEOUT))
                .await
                .is_err(),
            _ => false,
        };
        if broken {
            self.discard(&session).await;
        }
        outcome
    }

    /// Lists the server's tools and registers the exposed ones not yet
    /// registered.
    async fn refresh_tools(self: &Arc<Self>) -> Result<(), McpError> {
        let timeout = self.server.connect_timeout;
        let listed = self
            .with_session(|session| async move { session.list_tools(timeout).await })
            .await?;
        self.has_listed.store(true, Ordering::Release);
        let listed_names: HashSet<String> = listed
            .iter()
            .filter(|tool| self.server.exposes(&tool.name))
            .map(|tool| self.tool_name(&tool.name))
            .collect();
        self.forget_unlisted(&listed_names);
        for tool in listed {
            if self.server.exposes(&tool.name) {
                self.register(
                    &tool.name,
                    tool.description,
                    tool.input_schema,
                    McpCall::Tool(tool.name.clone()),
                );
            }
        }
        if self.server.resources {
            for call in [McpCall::ListResources, McpCall::ReadResource] {
                self.register_view(call);
            }
        }
        if self.server.prompts {
            for call in [McpCall::ListPrompts, McpCall::GetPrompt] {
                self.register_view(call);
            }
        }
        Ok(())
    }

    /// `<server>__<suffix>`.
    fn tool_name(&self, suffix: &str) -> String {
        format!("{}__{}", self.server.name, suffix)
    }

    /// Unregisters the server's tools that its latest listing no longer
    /// has (the resource and prompt tools stay: they stand for methods,
    /// not for listed tools).
    fn forget_unlisted(&self, listed: &HashSet<String>) {
        let views: Vec<String> = VIEW_SUFFIXES
            .iter()
            .map(|suffix| self.tool_name(suffix))
            .collect();
        let source = self.source();
        let mut registered = self
            .registered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        registered.retain(|name| {
            if listed.contains(name) || views.contains(name) {
                return true;
            }
            if self.tools.unregister(name, &source) {
                tracing::info!(
                    server = self.server.name,
                    tool = name,
                    "mcp: the server no longer lists this tool; removed"
                );
            }
            false
        });
    }

    fn source(&self) -> ToolSource {
        ToolSource {
            source_type: ToolSourceType::Mcp,
            name: self.server.name.clone(),
            mcp: Some(McpToolSource {
                extension_name: self.tools.extension_name().to_string(),
                server_name: Some(self.server.name.clone()),
            }),
        }
    }

    /// Registers one of the tools that stand for a server's resources or
    /// prompts.
    fn register_view(self: &Arc<Self>, call: McpCall) {
        let (suffix, description, parameters) = match &call {
            McpCall::ListResources => (
                "list_resources",
                "List the resources (files, records, documents) this MCP server offers, with their URIs.",
                json!({"type": "object", "properties": {}}),
            ),
            McpCall::ReadResource => (
                "read_resource",
                "Read one resource of this MCP server by its URI (from list_resources).",
                json!({"type": "object", "required": ["uri"], "properties": {"uri": {"type": "string"}}}),
            ),
            McpCall::ListPrompts => (
                "list_prompts",
                "List the prompt templates this MCP server offers, with their arguments.",
                json!({"type": "object", "properties": {}}),
            ),
            McpCall::GetPrompt => (
                "get_prompt",
                "Get one prompt template of this MCP server, filled with its arguments.",
                json!({"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"},
                    "arguments": {"type": "object", "additionalProperties": {"type": "string"}}
                }}),
            ),
            McpCall::Tool(_) => return,
        };
        let parameters = match parameters {
            JsonValue::Object(object) => object,
            _ => JsonObject::new(),
        };
        self.register(suffix, Some(description.to_string()), parameters, call);
    }

    fn register(
        self: &Arc<Self>,
        suffix: &str,
        description: Option<String>,
        input_schema: JsonObject,
        call: McpCall,
    ) {
        let name = self.tool_name(suffix);
        let mut registered = self
            .registered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if registered.contains(&name) {
            return;
        }
        let item = ToolCatalogItem {
            name: name.clone(),
            description,
            parameters: Some(input_schema),
            source: Some(self.source()),
        };
        let handler = Arc::new(McpToolHandler {
            link: self.clone(),
            call,
        });
        match self.tools.register(item, handler) {
            Ok(()) => {
                registered.insert(name);
            }
            Err(error @ ToolRegistrationError::InvalidName { .. })
            | Err(error @ ToolRegistrationError::Duplicate { .. }) => {
                // Kept out of the catalog; the rest of the server's tools
                // still serve.
                registered.insert(name);
                tracing::warn!(
                    code = error.code(),
                    server = self.server.name,
                    "an MCP tool was not registered: {error}"
                );
            }
        }
    }

    /// Before a Turn: wait for the first listing, or retry one that never
    /// succeeded in the background.
    async fn before_turn(self: &Arc<Self>) {
        let mut first_listing = self.first_listing.clone();
        if !*first_listing.borrow() {
            let _ = tokio::time::timeout(
                self.server.connect_timeout,
                first_listing.wait_for(|listed| *listed),
            )
            .await;
            return;
        }
        if self.has_listed.load(Ordering::Acquire) || self.relisting.swap(true, Ordering::AcqRel) {
            return;
        }
        let link = self.clone();
        tokio::spawn(async move {
            if let Err(error) = link.refresh_tools().await {
                link.warn("listing the tools again failed", &error);
            }
            link.relisting.store(false, Ordering::Release);
        });
    }

    fn warn(&self, what: &str, error: &McpError) {
        tracing::warn!(
            code = error.code(),
            server = self.server.name,
            "mcp: {what}: {error}"
        );
    }
}

/// The server's background task: the first listing, then one listing per
/// `tools/list_changed`, until the agent (and with it the link) is gone.
async fn follow(
    link: Weak<ServerLink>,
    listed: watch::Sender<bool>,
    mut changed: mpsc::UnboundedReceiver<String>,
) {
    if let Some(link) = link.upgrade() {
        if let Err(error) = link.refresh_tools().await {
            link.warn("the first listing of tools failed", &error);
        }
    }
    let _ = listed.send(true);
    while let Some(method) = changed.recv().await {
        let Some(link) = link.upgrade() else {
            return;
        };
        if method == TOOLS_CHANGED {
            if let Err(error) = link.refresh_tools().await {
                link.warn("listing the changed tools failed", &error);
            }
        }
    }
}

/// What one registered tool asks the server.
enum McpCall {
    /// `tools/call` of this MCP tool.
    Tool(String),
    /// `resources/list`.
    ListResources,
    /// `resources/read` of the `uri` argument.
    ReadResource,
    /// `prompts/list`.
    ListPrompts,
    /// `prompts/get` of the `name` and `arguments` arguments.
    GetPrompt,
}

/// One registered tool's handler.
struct McpToolHandler {
    link: Arc<ServerLink>,
    call: McpCall,
}

/// A resource's contents: the text when every part is text, else the
/// parts as the server gave them.
fn resource_contents(mut result: JsonValue) -> JsonValue {
    let contents = result
        .get_mut("contents")
        .map(JsonValue::take)
        .unwrap_or(JsonValue::Array(Vec::new()));
    let texts: Option<Vec<&str>> = contents.as_array().and_then(|parts| {
        parts
            .iter()
            .map(|part| part.get("text")?.as_str())
            .collect()
    });
    match texts {
        Some(texts) if !texts.is_empty() => JsonValue::String(texts.join("\n")),
        _ => contents,
    }
}

impl ToolHandler for McpToolHandler {
    fn call<'a>(&'a self, _ctx: &'a ToolContext, args: JsonObject) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let timeout = self.link.server.timeout;
            let call = &self.call;
            self.link
                .with_session(|session| async move {
                    let field = |name: &str| args.get(name).cloned().unwrap_or(JsonValue::Null);
                    match call {
                        McpCall::Tool(tool) => session.call_tool(tool, args, timeout).await,
                        McpCall::ListResources => session
                            .request("resources/list", json!({}), timeout)
                            .await
                            .map(|mut result| result["resources"].take()),
                        McpCall::ReadResource => session
                            .request("resources/read", json!({"uri": field("uri")}), timeout)
                            .await
                            .map(resource_contents),
                        McpCall::ListPrompts => session
                            .request("prompts/list", json!({}), timeout)
                            .await
                            .map(|mut result| result["prompts"].take()),
                        McpCall::GetPrompt => {
                            let mut params = json!({"name": field("name")});
                            if let Some(arguments) = args.get("arguments") {
                                params["arguments"] = arguments.clone();
                            }
                            session.request("prompts/get", params, timeout).await
                        }
                    }
                })
                .await
                .map_err(|error| {
                    let mut failure =
                        ToolFailure::new(error.code(), error.to_string()).with_name("McpError");
                    if let Some(suggestion) = error.suggestion() {
                        failure = failure.with_suggestion(suggestion);
                    }
                    failure
                })
        })
    }
}

/// The `turn` middleware of [`ServerLink::before_turn`].
struct AwaitListing {
    links: Vec<Arc<ServerLink>>,
}

impl Middleware<TurnContext> for AwaitListing {
    fn handle<'a>(
        &'a self,
        ctx: &'a mut TurnContext,
        next: TurnNext<'a>,
    ) -> BoxFuture<'a, LayerResult<TurnContext>> {
        Box::pin(async move {
            futures_util::future::join_all(self.links.iter().map(|link| link.before_turn())).await;
            next.run(ctx).await
        })
    }
}
