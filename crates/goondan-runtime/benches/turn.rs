//! The cost of the execution core itself: one Turn through 10 middlewares
//! of each kind with a zero-latency scripted model and in-memory storage.
//!
//! Prints criterion's numbers, then a summary line with the overhead per
//! Turn and per tool call. Run with
//! `cargo bench -p goondan-runtime --features test-support --bench turn`.

use criterion::{BatchSize, Criterion};
use goondan_model::NoStream;
use goondan_runtime::extension::ToolHandlers;
use goondan_runtime::test_support::{text_answer, tool_call_answer, user_event, ScriptedModel};
use goondan_runtime::turn::{
    AgentDefinition, AgentServices, ExtensionDefinition, ToolDefinition, ToolExportDefinition,
};
use goondan_runtime::{
    handler_fn, Agent, EntryResolvers, ExtensionApi, ExtensionInitError, MapBuiltinCatalog,
    MiddlewareOptions,
};
use goondan_store::{MemoryExtensionState, MemoryJournal};
use goondan_types::{Entry, JsonValue};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LAYERS: usize = 10;

fn pass_through(api: &mut ExtensionApi<'_>, _config: &JsonValue) -> Result<(), ExtensionInitError> {
    api.pipeline().turn(
        |ctx, next| Box::pin(next.run(ctx)),
        MiddlewareOptions::default(),
    );
    api.pipeline().step(
        |ctx, next| Box::pin(next.run(ctx)),
        MiddlewareOptions::default(),
    );
    api.pipeline().tool_call(
        |ctx, next| Box::pin(next.run(ctx)),
        MiddlewareOptions::default(),
    );
    Ok(())
}

/// An agent with `LAYERS` pass-through extensions whose model first asks
/// for `tool_calls` calls (if any), then answers with text.
fn agent(runtime: &tokio::runtime::Runtime, tool_calls: usize) -> Agent {
    let model = ScriptedModel::new();
    if tool_calls > 0 {
        let ids: Vec<String> = (0..tool_calls).map(|n| format!("c{n}")).collect();
        let calls: Vec<(&str, &str, JsonValue)> = ids
            .iter()
            .map(|id| (id.as_str(), "noop__run", json!({"n": 1})))
            .collect();
        model.push(tool_call_answer(&calls));
    }
    model.push(text_answer("done"));
    let mut definition = AgentDefinition::new("bench", "main", Arc::new(model), "scripted");
    let mut handlers: ToolHandlers = HashMap::new();
    handlers.insert(
        "run".into(),
        handler_fn(|_, args| Box::pin(async move { Ok(JsonValue::Object(args)) })),
    );
    let mut builtins = MapBuiltinCatalog::new()
        .with_tool("noop", handlers)
        .with_extension("pass", Arc::new(pass_through));
    definition.tools.push(ToolDefinition {
        name: "noop".into(),
        entry: Entry::native("noop"),
        exports: vec![ToolExportDefinition {
            name: "run".into(),
            description: Some("does nothing".into()),
            parameters: Some(
                json!({"type": "object", "properties": {"n": {"type": "integer"}}})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        }],
        error_message_limit: None,
    });
    for layer in 0..LAYERS {
        let name = format!("pass{layer}");
        builtins = builtins.with_extension(&name, Arc::new(pass_through));
        definition.extensions.push(ExtensionDefinition {
            name: name.clone(),
            entry: Entry::native(&name),
            config: JsonValue::Null,
        });
    }
    let services = AgentServices::new(
        Box::new(MemoryJournal::default()),
        Box::new(MemoryExtensionState::default()),
        Arc::new(EntryResolvers::new(Arc::new(builtins))),
    );
    match runtime.block_on(Agent::start(definition, services)) {
        Ok(agent) => agent,
        Err(error) => panic!("bench agent did not start: {error}"),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(error) => panic!("no tokio runtime: {error}"),
    }
}

fn run_one(runtime: &tokio::runtime::Runtime, mut agent: Agent) {
    let result = runtime.block_on(agent.run_turn(user_event("go"), &NoStream));
    assert!(result.error.is_none(), "{:?}", result.error);
}

/// Mean time of `iterations` fresh Turns, agent assembly excluded.
fn mean_turn(runtime: &tokio::runtime::Runtime, tool_calls: usize, iterations: u32) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iterations {
        let fresh = agent(runtime, tool_calls);
        let started = Instant::now();
        run_one(runtime, fresh);
        total += started.elapsed();
    }
    total / iterations
}

fn main() {
    let runtime = runtime();
    let mut criterion = Criterion::default().configure_from_args();
    for tool_calls in [0usize, 4] {
        criterion.bench_function(
            &format!("turn/10x3 middlewares/{tool_calls} tool calls"),
            |bencher| {
                bencher.iter_batched(
                    || agent(&runtime, tool_calls),
                    |fresh| run_one(&runtime, fresh),
                    BatchSize::SmallInput,
                )
            },
        );
    }
    let assembly = {
        let started = Instant::now();
        for _ in 0..200 {
            drop(agent(&runtime, 0));
        }
        started.elapsed() / 200
    };
    criterion.final_summary();

    // Warm up, then measure a text-only Turn (1 step) and a Turn with one
    // step of 8 tool calls plus a text step; the difference minus one step
    // is the cost of 8 tool calls through 10 toolCall layers.
    mean_turn(&runtime, 8, 200);
    let text_only = mean_turn(&runtime, 0, 2000);
    let with_tools = mean_turn(&runtime, 8, 2000);
    let per_tool_call = with_tools.saturating_sub(text_only * 2) / 8;
    println!(
        "summary: {LAYERS} middlewares of each kind; turn overhead {:.1} us (1 step, no tools); \
         turn with 8 tool calls {:.1} us; per tool call {:.2} us; agent assembly {:.1} us",
        text_only.as_secs_f64() * 1e6,
        with_tools.as_secs_f64() * 1e6,
        per_tool_call.as_secs_f64() * 1e6,
        assembly.as_secs_f64() * 1e6,
    );
}
