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
//!
//! Tools the plugin registered call back into it with `tool.invoke`;
//! event subscriptions are forwarded as `events.dispatch` notifications.

use crate::ask::Asking;
use crate::host::{InvocationServer, PluginHost};
use crate::protocol::{
    error_codes, methods, ContextChanges, Registrations, RpcError, WireMiddlewareKind,
};
use crate::tool::{tool_failure, PluginTool, PluginToolHandler};
use futures_util::future::BoxFuture;
use goondan_runtime::pipeline::{LayerResult, Middleware, Next, PipelineContext, TurnInfo};
use goondan_runtime::tool::{ToolFailure, DEFAULT_ERROR_MESSAGE_LIMIT};
use goondan_runtime::{
    AskScope, Extension, ExtensionApi, ExtensionInitError, MiddlewareOptions, PipelineError,
    StepContext, ToolCallContext, TurnContext,
};
use goondan_types::{JsonValue, MessageEvent, ToolCallResult, ToolCallStatus};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The code of a middleware error the plugin's code threw without one.
const MIDDLEWARE_ERROR: &str = "E_PLUGIN_MIDDLEWARE";

/// An Extension whose `register` already ran in a plugin.
#[derive(Debug)]
pub struct PluginExtension {
    host: Arc<PluginHost>,
    registrations: Registrations,
}

impl PluginExtension {
    /// The extension `host`'s plugin registered as `registrations`.
    pub fn new(host: Arc<PluginHost>, registrations: Registrations) -> Self {
        PluginExtension {
            host,
            registrations,
        }
    }
}

impl Extension for PluginExtension {
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        _config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        // The config already went to the plugin's `register` while the
        // entry was resolved (`EntryTarget::config`).
        let extension = api.name().to_string();
        self.host
            .bind_extension(&extension, api.state().clone(), api.events().clone());
        for registered in &self.registrations.middlewares {
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
        for tool in &self.registrations.tools {
            let handler = PluginToolHandler::new(
                Arc::clone(&self.host),
                PluginTool::Registered(tool.item.name.clone()),
            );
            api.tools().register(tool.item.clone(), Arc::new(handler))?;
        }
        for subscription in &self.registrations.subscriptions {
            // Weak: the bus lives in the agent, and the agent's hold on
            // the host must stay the only one, so dropping the agent
            // stops the plugin.
            let host = Arc::downgrade(&self.host);
            let id = subscription.id.clone();
            let event = subscription.event.clone();
            // The subscription lasts as long as the agent; dropping the
            // handle does not end it.
            let _subscription = api.events().on(
                &subscription.event,
                Arc::new(move |payload: &JsonValue| {
                    if let Some(host) = host.upgrade() {
                        host.notify(
                            methods::EVENTS_DISPATCH,
                            &serde_json::json!({
                                "subscription": id,
                                "event": event,
                                "payload": payload,
                            }),
                        );
                    }
                }),
            );
        }
        Ok(())
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

fn conversation_json(messages: Vec<goondan_types::Message>) -> JsonValue {
    serde_json::json!({ "nextMessages": messages })
}

impl WireContext for TurnContext {
    fn ask_scope(&self) -> AskScope {
        ask_scope(self.turn(), &self.turn().input_event.id)
    }

    fn to_wire(&self) -> JsonValue {
        let messages = self.conversation_state().next_messages().to_vec();
        serde_json::json!({
            "agentName": self.agent_name(),
            "instanceKey": self.instance_key(),
            "turnId": self.turn_id(),
            "traceId": self.trace_id(),
            "inputEvent": self.input_event(),
            "runtime": self.runtime(),
            "conversationState": conversation_json(messages),
            "metadata": self.metadata,
        })
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
        let messages = self.conversation_state().next_messages().to_vec();
        serde_json::json!({
            "agentName": self.agent_name(),
            "instanceKey": self.instance_key(),
            "turnId": self.turn_id(),
            "traceId": self.trace_id(),
            "stepIndex": self.step_index(),
            "stepId": self.step_id(),
            "runtime": self.runtime(),
            "toolCatalog": self.tool_catalog,
            "conversationState": conversation_json(messages),
            "metadata": self.metadata,
        })
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
}

impl<C> InvocationServer for NextServer<'_, C>
where
    C: WireContext,
    C::Output: Serialize,
{
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
                    let reply = match &result {
                        Ok(output) => Ok(serde_json::json!({ "result": output })),
                        Err(error) => Err(RpcError {
                            code: error_codes::USER_ERROR,
                            message: error.to_string(),
                            data: Some(serde_json::json!({ "code": error.code() })),
                        }),
                    };
                    self.inner = Some(result);
                    reply
                }
                methods::MESSAGE_EMIT => {
                    let event: MessageEvent = params
                        .get("event")
                        .cloned()
                        .map(serde_json::from_value)
                        .transpose()
                        .ok()
                        .flatten()
                        .ok_or_else(|| {
                            RpcError::new(
                                error_codes::INVALID_PARAMS,
                                "`event` is not a message event (append, replace, remove, \
                                 truncate)",
                            )
                        })?;
                    self.ctx
                        .emit(event)
                        .map(|()| JsonValue::Null)
                        .map_err(|error| RpcError::new(error_codes::USER_ERROR, error.to_string()))
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

impl<C> Middleware<C> for PluginMiddleware
where
    C: WireContext,
    C::Output: Serialize + DeserializeOwned,
{
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
            let mut server = NextServer {
                ctx,
                next: Some(next),
                asking: Asking::of_middleware(asks.clone(), &self.id),
                inner: None,
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
                        (result, _) => serde_json::from_value(result).map_err(|error| {
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
