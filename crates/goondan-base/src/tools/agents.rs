//! The `agents` tool: `request`, `send`, `spawn`, `list` and `catalog`
//! over the runtime's agents API (`ToolContext::runtime`), the same path
//! `ctx.agents()` takes in middleware (`shared-types.md` §8).
//!
//! A request carries the caller's trace id and its tool-call span as the
//! callee Turn's `parentSpanId`. Failures (timeout, cycle, unknown target)
//! come back as error results with the agents API's codes, never as
//! panics.

use crate::args::{parse, require_non_empty};
use crate::error::BuiltinToolError;
use futures_util::future::BoxFuture;
use goondan_runtime::extension::ToolHandlers;
use goondan_runtime::{AgentsError, ToolContext, ToolFailure};
use goondan_types::agents::{
    AgentRuntimeListOptions, AgentRuntimeRequestOptions, AgentRuntimeSpawnOptions,
};
use goondan_types::{AgentEvent, EventSource, EventSourceKind, JsonObject, JsonValue};
use serde::Deserialize;
use serde_json::json;

const REQUEST: &str = "agents__request";
const SEND: &str = "agents__send";
const SPAWN: &str = "agents__spawn";
const LIST: &str = "agents__list";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RequestArgs {
    target: String,
    input: String,
    instance_key: Option<String>,
    event_type: Option<String>,
    #[serde(default, deserialize_with = "crate::args::whole_number")]
    timeout_ms: Option<u64>,
    r#async: Option<bool>,
    metadata: Option<JsonObject>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SendArgs {
    target: String,
    input: String,
    instance_key: Option<String>,
    event_type: Option<String>,
    metadata: Option<JsonObject>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SpawnArgs {
    target: String,
    instance_key: Option<String>,
    cwd: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ListArgs {
    include_all: Option<bool>,
}

/// The event a request or send carries: the caller's trace, its tool-call
/// span as parent, and the target instance.
fn outgoing_event(
    ctx: &ToolContext,
    event_type: String,
    input: String,
    instance_key: Option<String>,
    metadata: Option<JsonObject>,
) -> AgentEvent {
    let mut event = AgentEvent::new(
        event_type,
        EventSource::new(EventSourceKind::Agent, ctx.agent_name.as_str()),
    );
    event.input = Some(input);
    event.trace_id = Some(ctx.trace.trace_id.clone());
    event.parent_span_id = Some(ctx.trace.span_id.clone());
    event.instance_key = instance_key;
    event.metadata = metadata;
    event
}

/// `target` with an explicit instance, as the agents API addresses it.
fn address(target: &str, instance_key: Option<&str>) -> String {
    match instance_key {
        Some(instance) => format!("{target}:{instance}"),
        None => target.to_string(),
    }
}

/// An agents API error as a tool failure, with its code and suggestion.
pub(crate) fn failure(error: AgentsError) -> ToolFailure {
    let mut failure = ToolFailure::new(error.code(), error.to_string()).with_name("AgentsError");
    if let Some(suggestion) = error.suggestion() {
        failure = failure.with_suggestion(suggestion);
    }
    failure
}

fn invalid(error: BuiltinToolError) -> ToolFailure {
    ToolFailure::from(error)
}

/// `request`: asks another agent and returns its answer.
pub async fn request(ctx: &ToolContext, raw: JsonObject) -> Result<JsonValue, ToolFailure> {
    let args: RequestArgs = parse(REQUEST, &raw).map_err(invalid)?;
    require_non_empty(REQUEST, "target", &args.target).map_err(invalid)?;
    let target = address(&args.target, args.instance_key.as_deref());
    let is_async = args.r#async.unwrap_or(false);
    let event = outgoing_event(
        ctx,
        args.event_type.unwrap_or_else(|| "agent.request".into()),
        args.input,
        args.instance_key,
        args.metadata,
    );
    let options = AgentRuntimeRequestOptions {
        timeout_ms: args.timeout_ms,
        r#async: Some(is_async),
    };
    let result = ctx
        .runtime
        .request(&target, event, options)
        .await
        .map_err(failure)?;
    Ok(json!({
        "target": result.target,
        "eventId": result.event_id,
        "correlationId": result.correlation_id,
        "accepted": result.accepted.unwrap_or(true),
        "async": result.r#async.unwrap_or(is_async),
        "response": result.response.unwrap_or(JsonValue::Null),
    }))
}

/// `send`: a one-way event.
pub async fn send(ctx: &ToolContext, raw: JsonObject) -> Result<JsonValue, ToolFailure> {
    let args: SendArgs = parse(SEND, &raw).map_err(invalid)?;
    require_non_empty(SEND, "target", &args.target).map_err(invalid)?;
    let target = address(&args.target, args.instance_key.as_deref());
    let event = outgoing_event(
        ctx,
        args.event_type.unwrap_or_else(|| "agent.send".into()),
        args.input,
        args.instance_key,
        args.metadata,
    );
    let result = ctx.runtime.send(&target, event).await.map_err(failure)?;
    // `sent` is the seed's answer (tool.md §11.1); the rest is ours.
    Ok(json!({
        "sent": true,
        "target": result.target,
        "eventId": result.event_id,
        "accepted": result.accepted,
    }))
}

/// `spawn`: prepares an instance of a swarm agent.
pub async fn spawn(ctx: &ToolContext, raw: JsonObject) -> Result<JsonValue, ToolFailure> {
    let args: SpawnArgs = parse(SPAWN, &raw).map_err(invalid)?;
    require_non_empty(SPAWN, "target", &args.target).map_err(invalid)?;
    let options = AgentRuntimeSpawnOptions {
        instance_key: args.instance_key,
        cwd: args.cwd,
    };
    let result = ctx
        .runtime
        .spawn(&args.target, options)
        .await
        .map_err(failure)?;
    Ok(json!({
        "target": result.target,
        "instanceKey": result.instance_key,
        "spawned": result.spawned,
        "cwd": result.cwd,
    }))
}

/// `list`: instances this agent (or anyone, with `includeAll`) spawned.
pub async fn list(ctx: &ToolContext, raw: JsonObject) -> Result<JsonValue, ToolFailure> {
    let args: ListArgs = parse(LIST, &raw).map_err(invalid)?;
    let result = ctx
        .runtime
        .list(AgentRuntimeListOptions {
            include_all: args.include_all,
        })
        .await
        .map_err(failure)?;
    Ok(json!({ "count": result.agents.len(), "agents": result.agents }))
}

/// `catalog`: the swarm's agents from the caller's point of view.
pub async fn catalog(ctx: &ToolContext, raw: JsonObject) -> Result<JsonValue, ToolFailure> {
    if !raw.is_empty() {
        return Err(invalid(crate::args::invalid(
            "agents__catalog",
            "takes no arguments",
        )));
    }
    let result = ctx.runtime.catalog().await.map_err(failure)?;
    Ok(json!({
        "swarmName": result.swarm_name,
        "entryAgent": result.entry_agent,
        "selfAgent": result.self_agent,
        "availableCount": result.available_agents.len(),
        "callableCount": result.callable_agents.len(),
        "availableAgents": result.available_agents,
        "callableAgents": result.callable_agents,
    }))
}

macro_rules! export {
    ($function:ident) => {{
        fn run<'a>(
            ctx: &'a ToolContext,
            args: JsonObject,
        ) -> BoxFuture<'a, Result<JsonValue, ToolFailure>> {
            Box::pin($function(ctx, args))
        }
        goondan_runtime::handler_fn(run)
    }};
}

/// The handlers of `builtin:agents` by export name.
pub(crate) fn handlers() -> ToolHandlers {
    let mut handlers = ToolHandlers::new();
    handlers.insert("request".into(), export!(request));
    handlers.insert("send".into(), export!(send));
    handlers.insert("spawn".into(), export!(spawn));
    handlers.insert("list".into(), export!(list));
    handlers.insert("catalog".into(), export!(catalog));
    handlers
}
