//! A script Extension: what its `register(api, config)` did in the plugin,
//! replayed into the runtime's real [`ExtensionApi`].
//!
//! Each middleware the plugin registered becomes a Rust onion layer
//! ([`PluginMiddleware`]) at the plugin's priority, so plugin and Rust
//! layers interleave in one order. A layer sends `middleware.invoke` with
//! the context as JSON and serves the plugin's callbacks while it runs:
//!
//! * `middleware.next` applies the context changes the plugin made
//!   (`toolCatalog` for a step, `args` for a tool call, `metadata`), runs
//!   the real inner chain once, and answers its result. A second
//!   `middleware.next` in one invocation is answered with an error
//!   (`NEXT_TWICE`), as the Rust `Next` refuses it at compile time.
//! * `message.emit` emits a message event into the Turn's conversation.
//! * `agents.request` and `agents.send` (`turn` and `step` only) call
//!   other agents through the context's agents API ([`crate::agents`]).
//!
//! The conversation crosses the boundary once per invocation
//! (`conversationState.baseMessages` and `events` in `middleware.invoke`);
//! after that only what is new travels: the events the inner chain added
//! come back with `next`'s answer, and the plugin applies the events it
//! emits itself, so its `conversationState` reads as the Rust one does.
//!
//! Tools the plugin registered call back into it with `tool.invoke`;
//! event subscriptions are forwarded as `events.dispatch` notifications.

use crate::agents::AgentCalls;
use crate::ask::Asking;
use crate::host::{InvocationServer, PluginHost};
use crate::protocol::{
    error_codes, methods, ContextChanges, Registrations, RpcError, WireMiddlewareKind,
};
use crate::tool::{tool_failure, PluginTool, PluginToolHandler};
use futures_util::future::BoxFuture;
use goondan_runtime::pipeline::{LayerResult, Middleware, Next, PipelineContext, TurnInfo};
use goondan_runtime::tool::{ToolFailure, DEFAULT_ERROR_MESSAGE_LIMIT};
use goondan_runtime::{AgentsApi, ConversationState};
use goondan_runtime::{
    AskScope, Extension, ExtensionApi, ExtensionInitError, MiddlewareOptions, PipelineError,
    StepContext, ToolCallContext, TurnContext,
};
use goondan_types::{
    JsonValue, MessageEvent, StepResult, ToolCallResult, ToolCallStatus, TraceContext, TurnResult,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The code of a middleware error the plugin's code threw without one.
const MIDDLEWARE_ERROR: &str = "E_PLUGIN_MIDDLEWARE";

/// An Extension whose module runs in a plugin; its `register` runs there
/// when the agent registers its extensions.
#[derive(Debug)]
pub struct PluginExtension {
    host: Arc<PluginHost>,
}

impl PluginExtension {
    /// The extension whose module `host` runs.
    pub fn new(host: Arc<PluginHost>) -> Self {
        PluginExtension { host }
    }
}

impl PluginExtension {
    /// Replays what the plugin's `register` did into `api`.
    fn install(
        &self,
        api: &mut ExtensionApi<'_>,
        registrations: &Registrations,
    ) -> Result<(), ExtensionInitError> {
        for registered in &registrations.middlewares {
            let layer = PluginMiddleware {
                host: Arc::clone(&self.host),
                id: registered.id.clone(),
            };
            let options = MiddlewareOptions::priority(registered.priority);
            let pipeline = api.pipeline();
            match registered.kind {
                WireMiddlewareKind::Turn => {
                    pipeline.register::<TurnContext>(Arc::new(layer), options)
                }
                WireMiddlewareKind::Step => {
                    pipeline.register::<StepContext>(Arc::new(layer), options)
                }
                WireMiddlewareKind::ToolCall => {
                    pipeline.register::<ToolCallContext>(Arc::new(layer), options)
                }
            }
        }
        for tool in &registrations.tools {
            let handler = PluginToolHandler::new(
                Arc::clone(&self.host),
                PluginTool::Registered(tool.item.name.clone()),
            );
            api.tools().register(tool.item.clone(), Arc::new(handler))?;
        }
        for subscription in &registrations.subscriptions {
            // Weak: the bus lives in the agent, and the agent's hold on
            // the host must stay the only one, so dropping the agent
            // stops the plugin.
            let host = Arc::downgrade(&self.host);
            let id = subscription.id.clone();
            let event = subscription.event.clone();
            // The subscription lasts as long as the agent; dropping the
            // handle does not end it.
            let _subscription = api.events().on_all(
                &subscription.event,
                Arc::new(move |args: &[JsonValue]| {
                    if let Some(host) = host.upgrade() {
                        host.notify(
                            methods::EVENTS_DISPATCH,
                            &serde_json::json!({
                                "subscription": id,
                                "event": event,
                                "payload": args.first().unwrap_or(&JsonValue::Null),
                                "args": args,
                            }),
                        );
                    }
                }),
            );
        }
        Ok(())
    }
}

impl Extension for PluginExtension {
    /// Only [`Extension::register_async`] can run a script's `register`
    /// (it waits for the plugin); the agent always calls that one.
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        _config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        Err(ExtensionInitError::new(format!(
            "[E_PLUGIN_REGISTER_SYNC] the script extension {} of {} registers \
             asynchronously; call Extension::register_async",
            api.name(),
            self.host.label()
        )))
    }

    /// Runs the module's `register(api, config)` in the plugin now, in
    /// the agent's `extensions` order, with the extension's state and the
    /// agent's event bus bound first, so `api.state` and `api.events`
    /// work inside `register` as they do later.
    fn register_async<'a, 'r: 'a>(
        &'a self,
        api: &'a mut ExtensionApi<'r>,
        config: &'a JsonValue,
    ) -> BoxFuture<'a, Result<(), ExtensionInitError>> {
        Box::pin(async move {
            let extension = api.name().to_string();
            self.host
                .bind_extension(&extension, api.state().clone(), api.events().clone());
            let registrations = self
                .host
                .register_extension(&extension, config)
                .await
                .map_err(|error| ExtensionInitError::new(error.describe()))?;
            self.install(api, &registrations)
        })
    }
}

/// What a middleware context looks like on the wire, and the changes a
/// plugin may make to it.
pub trait WireContext: PipelineContext {
    /// The context as the plugin's middleware sees it.
    fn to_wire(&self) -> JsonValue;
    /// Applies what the plugin changed before calling `next`.
    fn apply(&mut self, changes: ContextChanges);
    /// `ctx.emitMessageEvent(event)`.
    fn emit(&self, event: MessageEvent) -> Result<(), PipelineError>;
    /// The Turn's message events from index `seen` on, and how many there
    /// are in all: what the plugin's `conversationState` lacks.
    fn events_since(&self, seen: usize) -> (Vec<MessageEvent>, usize);
    /// `ctx.agents`, where this kind has it (not in a `toolCall`
    /// middleware, seed 000 §4.4): the agents API, the calling agent and
    /// the span a call's event hangs under.
    fn agents_api(&self) -> Option<(&dyn AgentsApi, &str, &TraceContext)>;
    /// The layer's result as the plugin sees it.
    fn output_to_wire(output: &Self::Output) -> Result<JsonValue, serde_json::Error>;
    /// The result the plugin returned; `inner` is what `next` answered,
    /// if it ran.
    fn output_from_wire(
        value: JsonValue,
        inner: Option<&Self::Output>,
    ) -> Result<Self::Output, serde_json::Error>;
    /// Where the middleware's questions to a person are keyed: under the
    /// tool call inside a `toolCall` layer (so a Turn cut short while one
    /// waits runs the call again), under the input event elsewhere (so a
    /// redelivered input asks again and finds them).
    fn ask_scope(&self) -> AskScope;
    /// The layer's result when the plugin failed before `next` ran, if
    /// this kind has one: a tool call gets an error result, so a broken
    /// extension fails the call, not the Turn. `None` makes it a pipeline
    /// error.
    fn failed_output(&self, _failure: ToolFailure) -> Option<Self::Output> {
        None
    }
}

/// Questions of the Turn `info` keyed under `anchor`.
fn ask_scope(info: &TurnInfo, anchor: &str) -> AskScope {
    AskScope::new(
        Arc::clone(&info.operators),
        &info.turn_id,
        &info.input_event.id,
        anchor,
    )
}

/// `conversationState` as it crosses into the plugin: the Turn's base
/// and its events so far. The plugin folds `nextMessages` from them (and
/// keeps folding the events that come later), so the messages travel
/// once, not twice.
fn conversation_json(state: &ConversationState) -> JsonValue {
    serde_json::json!({
        "baseMessages": state.base_messages(),
        "events": state.events(),
    })
}

/// The events of `state` from `seen` on, and their total.
fn events_after(state: &ConversationState, seen: usize) -> (Vec<MessageEvent>, usize) {
    let events = state.events();
    (
        events.get(seen..).unwrap_or_default().to_vec(),
        events.len(),
    )
}

impl WireContext for TurnContext {
    fn ask_scope(&self) -> AskScope {
        ask_scope(self.turn(), &self.turn().input_event.id)
    }

    fn to_wire(&self) -> JsonValue {
        let conversation = conversation_json(&self.conversation_state());
        serde_json::json!({
            "agentName": self.agent_name(),
            "instanceKey": self.instance_key(),
            "turnId": self.turn_id(),
            "traceId": self.trace_id(),
            "inputEvent": self.input_event(),
            "runtime": self.runtime(),
            "conversationState": conversation,
            "metadata": self.metadata,
        })
    }

    fn events_since(&self, seen: usize) -> (Vec<MessageEvent>, usize) {
        events_after(&self.conversation_state(), seen)
    }

    fn agents_api(&self) -> Option<(&dyn AgentsApi, &str, &TraceContext)> {
        Some((self.agents(), self.agent_name(), self.trace()))
    }

    fn output_to_wire(output: &TurnResult) -> Result<JsonValue, serde_json::Error> {
        serde_json::to_value(output)
    }

    fn output_from_wire(
        value: JsonValue,
        _inner: Option<&TurnResult>,
    ) -> Result<TurnResult, serde_json::Error> {
        serde_json::from_value(value)
    }

    fn apply(&mut self, changes: ContextChanges) {
        if let Some(metadata) = changes.metadata {
            self.metadata = metadata;
        }
    }

    fn emit(&self, event: MessageEvent) -> Result<(), PipelineError> {
        self.emit_message_event(event)
    }
}

impl WireContext for StepContext {
    fn ask_scope(&self) -> AskScope {
        ask_scope(self.turn(), &self.turn().input_event.id)
    }

    fn to_wire(&self) -> JsonValue {
        let conversation = conversation_json(&self.conversation_state());
        serde_json::json!({
            "agentName": self.agent_name(),
            "instanceKey": self.instance_key(),
            "turnId": self.turn_id(),
            "traceId": self.trace_id(),
            "stepIndex": self.step_index(),
            "stepId": self.step_id(),
            "runtime": self.runtime(),
            "toolCatalog": self.tool_catalog,
            "conversationState": conversation,
            "metadata": self.metadata,
        })
    }

    fn events_since(&self, seen: usize) -> (Vec<MessageEvent>, usize) {
        events_after(&self.conversation_state(), seen)
    }

    fn agents_api(&self) -> Option<(&dyn AgentsApi, &str, &TraceContext)> {
        Some((self.agents(), self.agent_name(), self.trace()))
    }

    fn output_to_wire(output: &StepResult) -> Result<JsonValue, serde_json::Error> {
        step_result_to_wire(output)
    }

    fn output_from_wire(
        value: JsonValue,
        inner: Option<&StepResult>,
    ) -> Result<StepResult, serde_json::Error> {
        step_result_from_wire(value, inner)
    }

    fn apply(&mut self, changes: ContextChanges) {
        if let Some(catalog) = changes.tool_catalog {
            self.tool_catalog = catalog;
        }
        if let Some(metadata) = changes.metadata {
            self.metadata = metadata;
        }
    }

    fn emit(&self, event: MessageEvent) -> Result<(), PipelineError> {
        self.emit_message_event(event)
    }
}

impl WireContext for ToolCallContext {
    fn ask_scope(&self) -> AskScope {
        ask_scope(self.turn(), self.tool_call_id())
    }

    fn to_wire(&self) -> JsonValue {
        serde_json::json!({
            "agentName": self.agent_name(),
            "instanceKey": self.instance_key(),
            "turnId": self.turn_id(),
            "traceId": self.trace_id(),
            "stepIndex": self.step_index(),
            "toolName": self.tool_name(),
            "toolCallId": self.tool_call_id(),
            "args": self.args,
            "metadata": self.metadata,
        })
    }

    fn apply(&mut self, changes: ContextChanges) {
        if let Some(args) = changes.args {
            self.args = args;
        }
        if let Some(metadata) = changes.metadata {
            self.metadata = metadata;
        }
    }

    fn events_since(&self, _seen: usize) -> (Vec<MessageEvent>, usize) {
        (Vec::new(), 0)
    }

    fn agents_api(&self) -> Option<(&dyn AgentsApi, &str, &TraceContext)> {
        None
    }

    fn output_to_wire(output: &ToolCallResult) -> Result<JsonValue, serde_json::Error> {
        serde_json::to_value(output)
    }

    fn output_from_wire(
        value: JsonValue,
        _inner: Option<&ToolCallResult>,
    ) -> Result<ToolCallResult, serde_json::Error> {
        serde_json::from_value(value)
    }

    fn emit(&self, _event: MessageEvent) -> Result<(), PipelineError> {
        Err(PipelineError::middleware(
            MIDDLEWARE_ERROR,
            "a toolCall middleware cannot emit message events",
        )
        .with_suggestion("emit from a step or turn middleware"))
    }

    fn failed_output(&self, failure: ToolFailure) -> Option<ToolCallResult> {
        Some(ToolCallResult {
            tool_call_id: self.tool_call_id().to_string(),
            tool_name: self.tool_name().to_string(),
            output: None,
            status: ToolCallStatus::Error,
            error: Some(failure.into_tool_error(DEFAULT_ERROR_MESSAGE_LIMIT)),
        })
    }
}

/// `StepResult.hasToolCalls` (seed 000 §4.7): the model asked for tools,
/// so the Turn runs another Step. The runtime's field for it is
/// `shouldContinue`, which the wire keeps as an alias.
const HAS_TOOL_CALLS: &str = "hasToolCalls";
const SHOULD_CONTINUE: &str = "shouldContinue";

/// A StepResult with both `hasToolCalls` and its alias `shouldContinue`.
fn step_result_to_wire(result: &StepResult) -> Result<JsonValue, serde_json::Error> {
    let mut value = serde_json::to_value(result)?;
    if let JsonValue::Object(fields) = &mut value {
        fields.insert(
            HAS_TOOL_CALLS.into(),
            JsonValue::Bool(result.should_continue),
        );
    }
    Ok(value)
}

/// A StepResult a plugin returned. Of `hasToolCalls` and
/// `shouldContinue`, the one the script changed from what `next`
/// answered wins (either may be set alone); with no inner result,
/// `hasToolCalls` wins.
fn step_result_from_wire(
    mut value: JsonValue,
    inner: Option<&StepResult>,
) -> Result<StepResult, serde_json::Error> {
    if let JsonValue::Object(fields) = &mut value {
        let has_tool_calls = fields.remove(HAS_TOOL_CALLS).and_then(|v| v.as_bool());
        let should_continue = fields.get(SHOULD_CONTINUE).and_then(JsonValue::as_bool);
        let original = inner.map(|result| result.should_continue);
        let decided = match (has_tool_calls, should_continue) {
            (Some(has), Some(cont)) if has != cont => match original {
                Some(original) if cont != original => cont,
                _ => has,
            },
            (Some(has), _) => has,
            (None, Some(cont)) => cont,
            (None, None) => original.unwrap_or(false),
        };
        fields.insert(SHOULD_CONTINUE.into(), JsonValue::Bool(decided));
    }
    serde_json::from_value(value)
}

/// One plugin middleware as a Rust onion layer.
#[derive(Debug)]
pub struct PluginMiddleware {
    host: Arc<PluginHost>,
    id: String,
}

/// Invocation ids, unique in the agent process.
static INVOCATIONS: AtomicU64 = AtomicU64::new(1);

/// Serves one invocation's `middleware.next` and `message.emit`.
struct NextServer<'n, C: PipelineContext> {
    ctx: &'n mut C,
    next: Option<Next<'n, C>>,
    /// The questions this invocation asks a person.
    asking: Asking,
    /// What the inner chain returned, once `next` ran.
    inner: Option<LayerResult<C>>,
    /// How many of the Turn's message events the plugin already has.
    seen_events: usize,
}

impl<C: WireContext> NextServer<'_, C> {
    /// The events the plugin has not seen yet, which it then has.
    fn new_events(&mut self) -> Vec<MessageEvent> {
        let (events, total) = self.ctx.events_since(self.seen_events);
        self.seen_events = total;
        events
    }
}

impl<C: WireContext> InvocationServer for NextServer<'_, C> {
    fn serve<'a>(
        &'a mut self,
        method: &'a str,
        params: JsonValue,
    ) -> BoxFuture<'a, Result<JsonValue, RpcError>> {
        Box::pin(async move {
            match method {
                methods::MIDDLEWARE_NEXT => {
                    let Some(next) = self.next.take() else {
                        return Err(RpcError {
                            code: error_codes::NEXT_TWICE,
                            message: "next() was already called in this middleware; call it \
                                      at most once and change its result instead of calling \
                                      it again"
                                .into(),
                            data: Some(serde_json::json!({ "code": "E_PLUGIN_NEXT_TWICE" })),
                        });
                    };
                    let changes: ContextChanges = params
                        .get("changes")
                        .cloned()
                        .map(serde_json::from_value)
                        .transpose()
                        .map_err(|error| {
                            RpcError::new(
                                error_codes::INVALID_PARAMS,
                                format!("`changes` is malformed: {error}"),
                            )
                        })?
                        .unwrap_or_default();
                    self.ctx.apply(changes);
                    let result = next.run(self.ctx).await;
                    let events = self.new_events();
                    let reply = match &result {
                        Ok(output) => C::output_to_wire(output)
                            .map(|output| {
                                serde_json::json!({
                                    "result": output,
                                    "conversationState": { "events": events },
                                })
                            })
                            .map_err(|error| {
                                RpcError::new(error_codes::USER_ERROR, error.to_string())
                            }),
                        Err(error) => Err(RpcError {
                            code: error_codes::USER_ERROR,
                            message: error.to_string(),
                            data: Some(serde_json::json!({
                                "code": error.code(),
                                "conversationState": { "events": events },
                            })),
                        }),
                    };
                    self.inner = Some(result);
                    reply
                }
                methods::AGENTS_REQUEST | methods::AGENTS_SEND => match self.ctx.agents_api() {
                    Some((agents, caller, trace)) => {
                        let calls = AgentCalls {
                            agents,
                            caller,
                            trace,
                        };
                        calls.serve(method, params).await
                    }
                    None => Err(RpcError::new(
                        error_codes::METHOD_NOT_FOUND,
                        format!(
                            "`{method}`: a {} middleware has no ctx.agents (only turn and step \
                             middlewares do)",
                            C::KIND
                        ),
                    )),
                },
                methods::MESSAGE_EMIT => {
                    let event: MessageEvent = serde_json::from_value(
                        params.get("event").cloned().unwrap_or(JsonValue::Null),
                    )
                    .map_err(|error| {
                        RpcError::new(
                            error_codes::INVALID_PARAMS,
                            format!(
                                "`event` is not a message event (append, replace, remove, \
                                 truncate): {error}"
                            ),
                        )
                    })?;
                    let (_, before) = self.ctx.events_since(self.seen_events);
                    self.ctx.emit(event).map_err(|error| {
                        RpcError::new(error_codes::USER_ERROR, error.to_string())
                    })?;
                    // The plugin applied its own event already; if nothing
                    // else came in between, it is up to date.
                    if before == self.seen_events {
                        self.seen_events = self.ctx.events_since(before).1;
                    }
                    Ok(JsonValue::Null)
                }
                methods::OPERATOR_ASK => self.asking.serve(params).await,
                other => Err(RpcError::new(
                    error_codes::METHOD_NOT_FOUND,
                    format!("`{other}` is not a method of a middleware invocation"),
                )),
            }
        })
    }
}

impl<C: WireContext> Middleware<C> for PluginMiddleware {
    fn handle<'a>(&'a self, ctx: &'a mut C, next: Next<'a, C>) -> BoxFuture<'a, LayerResult<C>> {
        Box::pin(async move {
            let invocation = format!("i{}", INVOCATIONS.fetch_add(1, Ordering::Relaxed));
            let params = serde_json::json!({
                "middleware": self.id,
                "invocation": invocation,
                "kind": C::KIND.as_str(),
                "context": ctx.to_wire(),
            });
            let asks = ctx.ask_scope();
            let seen_events = ctx.events_since(usize::MAX).1;
            let mut server = NextServer {
                ctx,
                next: Some(next),
                asking: Asking::of_middleware(asks.clone(), &self.id),
                inner: None,
                seen_events,
            };
            let answer = self
                .host
                .call_with(
                    methods::MIDDLEWARE_INVOKE,
                    params,
                    Some((&invocation, &mut server)),
                )
                .await;
            let inner = server.inner.take();
            if let Err(error) = asks.settle_asked() {
                tracing::warn!(middleware = %self.id, code = error.code(), %error, "the middleware's questions stay open");
            }
            match answer {
                Ok(value) => {
                    let result = value.get("result").cloned().unwrap_or(JsonValue::Null);
                    match (result, inner) {
                        // `return ctx.next()` forgotten, or `await ctx.next()`
                        // without a return: the inner result stands.
                        (JsonValue::Null, Some(inner)) => inner,
                        (JsonValue::Null, None) => Err(PipelineError::middleware(
                            MIDDLEWARE_ERROR,
                            format!(
                                "middleware {} of {} returned nothing and did not call next()",
                                self.id,
                                self.host.label()
                            ),
                        )
                        .with_suggestion("return ctx.next(), or return a result")),
                        (result, inner) => C::output_from_wire(
                            result,
                            inner.as_ref().and_then(|inner| inner.as_ref().ok()),
                        )
                        .map_err(|error| {
                            PipelineError::middleware(
                                "E_PLUGIN_PROTOCOL",
                                format!(
                                    "middleware {} of {} returned a malformed {} result: {error}",
                                    self.id,
                                    self.host.label(),
                                    C::KIND
                                ),
                            )
                        }),
                    }
                }
                Err(error) => match inner {
                    // The plugin rethrew what `next` raised: keep the
                    // original error, with its own code.
                    Some(Err(original)) => Err(original),
                    // The process died after the inner chain ran: what
                    // the plugin would have done afterwards is lost, the
                    // inner result is not.
                    Some(Ok(output)) if error.ends_the_process() => {
                        tracing::warn!(
                            plugin = self.host.label(),
                            middleware = %self.id,
                            code = error.code(),
                            %error,
                            "the plugin failed after next(); keeping the inner result"
                        );
                        Ok(output)
                    }
                    _ => {
                        if let Some(output) = server.ctx.failed_output(tool_failure(error.clone()))
                        {
                            return Ok(output);
                        }
                        let mut failure = PipelineError::middleware(
                            error.code().to_string(),
                            format!("middleware {} of {}: {error}", self.id, self.host.label()),
                        );
                        if let Some(suggestion) = error.suggestion() {
                            failure = failure.with_suggestion(suggestion);
                        }
                        Err(failure)
                    }
                },
            }
        })
    }
}
