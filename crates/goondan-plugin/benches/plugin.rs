//! What a plugin costs: the warm round trip of one tool call to a Node and
//! a Python plugin (`tool.invoke` out, the answer back), and the start of
//! a host per runtime (spawn, shim, module import, `initialize`).
//!
//! Besides criterion's estimates it prints the p50 and p99 of 2,000 warm
//! calls per runtime, the figure the target is stated in (p50 < 300 µs).
//!
//! Run with `cargo bench -p goondan-plugin --bench plugin`.

use criterion::{criterion_group, criterion_main, Criterion};
use goondan_plugin::host::HostOptions;
use goondan_plugin::launch::{self, LaunchOptions};
use goondan_plugin::{PluginConfig, PluginHost, PluginResolver};
use goondan_runtime::extension::ToolHandlers;
use goondan_runtime::tool::ToolContext;
use goondan_runtime::{DetachedAgents, EntryResolver, EntryTarget};
use goondan_types::{
    Entry, JsonObject, Message, MessageSource, ModelMessage, ScriptRuntime, TraceContext,
};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn context() -> ToolContext {
    ToolContext {
        agent_name: "bench".into(),
        instance_key: "main".into(),
        turn_id: "turn_1".into(),
        trace: TraceContext {
            trace_id: "trace_1".into(),
            span_id: "span_1".into(),
            parent_span_id: None,
        },
        tool_call_id: "call_1".into(),
        message: Arc::new(Message::new(ModelMessage::user("hi"), MessageSource::User)),
        workdir: PathBuf::from("/tmp"),
        logger: tracing::Span::none(),
        runtime: Arc::new(DetachedAgents),
        asks: goondan_runtime::AskScope::new(
            Arc::new(goondan_runtime::NoOperators),
            "turn_1",
            "evt_1",
            "call_1",
        ),
        progress: goondan_runtime::ToolProgress::discard(),
    }
}

fn handlers(
    runtime: &tokio::runtime::Runtime,
    resolver: &PluginResolver,
    file: &str,
) -> ToolHandlers {
    let entry = Entry::script(file);
    runtime
        .block_on(resolver.resolve_tool(EntryTarget::new("calc", &entry)))
        .unwrap()
}

fn args() -> JsonObject {
    match json!({"a": 2, "b": 3}) {
        serde_json::Value::Object(object) => object,
        _ => unreachable!(),
    }
}

fn percentiles(runtime: &tokio::runtime::Runtime, handlers: &ToolHandlers, label: &str) {
    let ctx = context();
    let add = &handlers["add"];
    let mut samples: Vec<Duration> = (0..2_000)
        .map(|_| {
            let started = Instant::now();
            runtime.block_on(add.call(&ctx, args())).unwrap();
            started.elapsed()
        })
        .collect();
    samples.sort();
    println!(
        "{label}: warm tool.invoke p50 {:?}, p99 {:?} (2000 calls)",
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100]
    );
}

fn round_trip(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let resolver = PluginResolver::new(PluginConfig {
        bundle_root: fixtures(),
        ..PluginConfig::default()
    });
    let mut group = c.benchmark_group("warm tool call");
    for (label, file) in [("node", "calc.mjs"), ("python", "calc.py")] {
        let handlers = handlers(&runtime, &resolver, file);
        percentiles(&runtime, &handlers, label);
        let ctx = context();
        group.bench_function(label, |b| {
            b.iter(|| {
                runtime
                    .block_on(handlers["add"].call(&ctx, args()))
                    .unwrap()
            })
        });
    }
    group.finish();
}

fn start(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("host start");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(8));
    for (label, file, script_runtime) in [
        ("node", "calc.mjs", ScriptRuntime::JavaScript),
        ("python", "calc.py", ScriptRuntime::Python),
        ("executable", "calc-exec", ScriptRuntime::Executable),
    ] {
        let launch = launch::plan(
            &fixtures().join(file),
            script_runtime,
            file,
            &LaunchOptions::default(),
        )
        .unwrap();
        group.bench_function(label, |b| {
            b.iter(|| {
                let host = PluginHost::new(file, launch.clone(), HostOptions::default());
                runtime.block_on(host.start()).unwrap();
            })
        });
    }
    group.finish();
}

criterion_group!(benches, round_trip, start);
criterion_main!(benches);
