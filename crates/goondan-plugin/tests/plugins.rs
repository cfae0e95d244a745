//! Issue 19, script entries: real plugin processes (node, python3, an
//! executable) behind the `EntryResolver` seam. The same tool in three
//! forms answers alike; a plugin that crashes, hangs or prints garbage
//! gives a coded error and the next call works; a JavaScript extension's
//! middlewares interleave with Rust ones in one onion inside a real
//! `Agent` Turn.

use goondan_model::NoStream;
use goondan_plugin::host::HostOptions;
use goondan_plugin::launch::{self, LaunchOptions};
use goondan_plugin::{PluginConfig, PluginResolver};
use goondan_runtime::agents::AgentsFuture;
use goondan_runtime::extension::ToolHandlers;
use goondan_runtime::test_support::{user_event, RecordingJournal, ScriptedModel};
use goondan_runtime::tool::ToolContext;
use goondan_runtime::turn::{AgentDefinition, AgentServices, ExtensionDefinition, ToolDefinition};
use goondan_runtime::{
    handler_fn, Agent, AgentsApi, AskError, AskScope, DetachedAgents, EntryResolver,
    EntryResolvers, EntryTarget, ExtensionApi, ExtensionInitError, MapBuiltinCatalog,
    MiddlewareOptions, NoOperators, Operators, Question, ToolExportDefinition,
};
use goondan_store::MemoryExtensionState;
use goondan_types::{
    Entry, JsonObject, JsonValue, Message, MessageSource, ModelMessage, ScriptRuntime, TraceContext,
};
use serde_json::json;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn strip_types_command() -> Vec<String> {
    vec![
        "python3".to_string(),
        fixtures().join("strip-types.py").display().to_string(),
    ]
}

fn resolver_with_timeout(call_timeout: Duration) -> PluginResolver {
    PluginResolver::new(PluginConfig {
        bundle_root: fixtures(),
        launch: LaunchOptions {
            strip_types_command: Some(strip_types_command()),
            ..LaunchOptions::default()
        },
        host: HostOptions {
            call_timeout,
            ..HostOptions::default()
        },
    })
}

fn resolver() -> PluginResolver {
    resolver_with_timeout(Duration::from_secs(10))
}

fn exports(names: &[&str]) -> Vec<ToolExportDefinition> {
    names
        .iter()
        .map(|name| ToolExportDefinition {
            name: name.to_string(),
            description: None,
            parameters: None,
        })
        .collect()
}

async fn tool(resolver: &PluginResolver, file: &str, names: &[&str]) -> ToolHandlers {
    let entry = Entry::script(file);
    let declared = exports(names);
    match resolver
        .resolve_tool(EntryTarget::new("calc", &entry).with_exports(&declared))
        .await
    {
        Ok(handlers) => handlers,
        Err(error) => panic!("{file} did not resolve: [{}] {error}", error.code()),
    }
}

fn context() -> ToolContext {
    context_with(Arc::new(DetachedAgents))
}

fn context_with(runtime: Arc<dyn AgentsApi>) -> ToolContext {
    ToolContext {
        agent_name: "alpha".into(),
        instance_key: "main".into(),
        turn_id: "turn_1".into(),
        trace: TraceContext {
            trace_id: "trace_1".into(),
            span_id: "span_1".into(),
            parent_span_id: None,
        },
        tool_call_id: "call_1".into(),
        message: Arc::new(Message::new(ModelMessage::user("hi"), MessageSource::User)),
        workdir: PathBuf::from("/tmp/work"),
        logger: tracing::Span::none(),
        runtime,
        asks: AskScope::new(Arc::new(NoOperators), "turn_1", "evt_1", "call_1"),
        progress: goondan_runtime::ToolProgress::discard(),
    }
}

fn object(value: JsonValue) -> JsonObject {
    match value {
        JsonValue::Object(object) => object,
        other => panic!("not an object: {other}"),
    }
}

async fn call(
    handlers: &ToolHandlers,
    name: &str,
    args: JsonValue,
) -> Result<JsonValue, goondan_runtime::ToolFailure> {
    handlers[name].call(&context(), object(args)).await
}

#[tokio::test]
async fn the_same_tool_in_javascript_typescript_python_and_an_executable_gives_the_same_results() {
    let resolver = resolver();
    // Cargo gives this test process many CARGO_* variables; none may
    // reach a plugin, as no provider key may. (Interpreter wrappers, such
    // as a pyenv shim, may add their own, like PWD.)
    let withheld: Vec<String> = std::env::vars()
        .map(|(name, _)| name)
        .filter(|name| name.starts_with("CARGO"))
        .collect();
    assert!(!withheld.is_empty());
    for file in ["calc.mjs", "calc.ts", "calc.py", "calc-exec"] {
        let handlers = tool(&resolver, file, &["add", "context", "env", "fail"]).await;
        assert_eq!(
            call(&handlers, "add", json!({"a": 2, "b": 3}))
                .await
                .unwrap(),
            json!({"sum": 5}),
            "{file}"
        );
        assert_eq!(
            call(&handlers, "context", json!({})).await.unwrap(),
            json!({
                "agentName": "alpha",
                "instanceKey": "main",
                "turnId": "turn_1",
                "traceId": "trace_1",
                "toolCallId": "call_1",
                "workdir": "/tmp/work",
            }),
            "{file}"
        );
        let failure = call(&handlers, "fail", json!({})).await.unwrap_err();
        assert_eq!(failure.code, "E_CALC_INPUT", "{file}");
        assert_eq!(failure.message, "the input was wrong", "{file}");
        assert_eq!(
            failure.suggestion.as_deref(),
            Some("pass two numbers"),
            "{file}"
        );
        let names = call(&handlers, "env", json!({})).await.unwrap();
        for name in names["names"].as_array().unwrap() {
            let name = name.as_str().unwrap();
            assert!(
                !withheld.iter().any(|withheld| withheld == name),
                "{file} inherited {name}, which is not on the allow-list"
            );
        }
    }
}

/// Answers every request with `pong: <input>` and records what it got.
#[derive(Default)]
struct Echo {
    seen: Mutex<Vec<(String, goondan_types::AgentEvent)>>,
}

impl AgentsApi for Echo {
    fn request<'a>(
        &'a self,
        target: &'a str,
        event: goondan_types::AgentEvent,
        _options: goondan_types::agents::AgentRuntimeRequestOptions,
    ) -> AgentsFuture<'a, goondan_types::agents::AgentRuntimeRequestResult> {
        let input = event.input.clone().unwrap_or_default();
        let event_id = event.id.clone();
        self.seen.lock().unwrap().push((target.to_string(), event));
        Box::pin(async move {
            Ok(goondan_types::agents::AgentRuntimeRequestResult {
                event_id,
                target: target.to_string(),
                response: Some(json!(format!("pong: {input}"))),
                correlation_id: "c1".into(),
                accepted: Some(true),
                r#async: Some(false),
            })
        })
    }

    fn send<'a>(
        &'a self,
        target: &'a str,
        event: goondan_types::AgentEvent,
    ) -> AgentsFuture<'a, goondan_types::agents::AgentRuntimeSendResult> {
        DetachedAgents.send(target, event)
    }

    fn spawn<'a>(
        &'a self,
        target: &'a str,
        options: goondan_types::agents::AgentRuntimeSpawnOptions,
    ) -> AgentsFuture<'a, goondan_types::agents::AgentRuntimeSpawnResult> {
        DetachedAgents.spawn(target, options)
    }

    fn list(
        &self,
        options: goondan_types::agents::AgentRuntimeListOptions,
    ) -> AgentsFuture<'_, goondan_types::agents::AgentRuntimeListResult> {
        DetachedAgents.list(options)
    }

    fn catalog(&self) -> AgentsFuture<'_, goondan_types::agents::AgentRuntimeCatalogResult> {
        DetachedAgents.catalog()
    }

    fn restart_swarm(&self, reason: String) -> AgentsFuture<'_, ()> {
        DetachedAgents.restart_swarm(reason)
    }
}

#[tokio::test]
async fn a_plugin_tool_asks_another_agent_through_ctx_agents() {
    let resolver = resolver();
    for file in ["calc.mjs", "calc.py"] {
        let echo = Arc::new(Echo::default());
        let handlers = tool(&resolver, file, &["ask"]).await;
        let output = handlers["ask"]
            .call(
                &context_with(echo.clone()),
                object(json!({"target": "researcher", "question": "ping"})),
            )
            .await
            .unwrap();
        assert_eq!(output, json!({"heard": "pong: ping"}), "{file}");
        let seen = echo.seen.lock().unwrap();
        let (target, event) = &seen[0];
        assert_eq!(target, "researcher", "{file}");
        assert_eq!(event.trace_id.as_deref(), Some("trace_1"), "{file}");
        assert_eq!(event.parent_span_id.as_deref(), Some("span_1"), "{file}");
        assert_eq!(event.source.name, "alpha", "{file}");
    }
}

/// Never answers a request: it says when one starts, and notes when the
/// wait for it is dropped (as a cancelled Turn drops it).
#[derive(Default)]
struct NeverAnswers {
    started: tokio::sync::Notify,
    dropped: Arc<std::sync::atomic::AtomicBool>,
}

/// Sets its flag when the wait it lives in is dropped.
struct DropFlag(Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl AgentsApi for NeverAnswers {
    fn request<'a>(
        &'a self,
        _target: &'a str,
        _event: goondan_types::AgentEvent,
        _options: goondan_types::agents::AgentRuntimeRequestOptions,
    ) -> AgentsFuture<'a, goondan_types::agents::AgentRuntimeRequestResult> {
        let flag = DropFlag(Arc::clone(&self.dropped));
        self.started.notify_one();
        Box::pin(async move {
            let _flag = flag;
            std::future::pending().await
        })
    }

    fn send<'a>(
        &'a self,
        target: &'a str,
        event: goondan_types::AgentEvent,
    ) -> AgentsFuture<'a, goondan_types::agents::AgentRuntimeSendResult> {
        DetachedAgents.send(target, event)
    }

    fn spawn<'a>(
        &'a self,
        target: &'a str,
        options: goondan_types::agents::AgentRuntimeSpawnOptions,
    ) -> AgentsFuture<'a, goondan_types::agents::AgentRuntimeSpawnResult> {
        DetachedAgents.spawn(target, options)
    }

    fn list(
        &self,
        options: goondan_types::agents::AgentRuntimeListOptions,
    ) -> AgentsFuture<'_, goondan_types::agents::AgentRuntimeListResult> {
        DetachedAgents.list(options)
    }

    fn catalog(&self) -> AgentsFuture<'_, goondan_types::agents::AgentRuntimeCatalogResult> {
        DetachedAgents.catalog()
    }

    fn restart_swarm(&self, reason: String) -> AgentsFuture<'_, ()> {
        DetachedAgents.restart_swarm(reason)
    }
}

#[tokio::test]
async fn a_middleware_agents_request_in_flight_ends_with_its_cancelled_turn() {
    // Seed 000 §4.4 through a script: the request is the agents API's, so
    // dropping the Turn drops its wait (the real API then cancels the
    // callee's Turn), and the next Turn runs on a fresh plugin.
    for file in ["waiting.mjs", "waiting.py"] {
        let never = Arc::new(NeverAnswers::default());
        let model = ScriptedModel::new();
        model.text("done");
        let mut definition = AgentDefinition::new("alpha", "main", Arc::new(model.clone()), "m");
        definition.extensions.push(ExtensionDefinition {
            name: "waiting".into(),
            entry: Entry::script(file),
            config: JsonValue::Null,
        });
        let entries = EntryResolvers::new(Arc::new(MapBuiltinCatalog::new()))
            .with_scripts(Arc::new(resolver()));
        let mut services = AgentServices::new(
            RecordingJournal::new().boxed(),
            Box::new(MemoryExtensionState::default()),
            Arc::new(entries),
        );
        services.agents = never.clone();
        let mut agent = match Agent::start(definition, services).await {
            Ok(agent) => agent,
            Err(error) => panic!(
                "{file}: the agent did not start: [{}] {error}",
                error.code()
            ),
        };
        {
            let turn = agent.run_turn(user_event("wait for slow"), &NoStream);
            tokio::select! {
                result = turn => panic!("{file}: the Turn ended without its answer: {result:?}"),
                () = never.started.notified() => {}
            }
        }
        assert!(
            never.dropped.load(std::sync::atomic::Ordering::SeqCst),
            "{file}: the request still waits after its Turn was dropped"
        );
        let result = agent.run_turn(user_event("plain"), &NoStream).await;
        assert!(result.error.is_none(), "{file}: {result:?}");
    }
}

/// A person who approves everything, remembering what was asked and
/// which questions were settled.
#[derive(Debug, Default)]
struct Yes {
    asked: Mutex<Vec<(String, String, Question)>>,
    settled: Mutex<Vec<String>>,
}

impl Operators for Yes {
    fn ask(
        &self,
        turn_id: &str,
        event_id: &str,
        question: Question,
    ) -> futures_util::future::BoxFuture<'static, Result<goondan_types::ApprovalDecision, AskError>>
    {
        let decision = goondan_types::ApprovalDecision {
            id: format!("apv_{}", self.asked.lock().unwrap().len()),
            verdict: goondan_types::Verdict::Approve,
            arguments: None,
            reason: Some("fine by me".into()),
            by: "cli:ana".into(),
            decided_at: "2026-11-28T00:00:00.000Z".into(),
        };
        self.asked
            .lock()
            .unwrap()
            .push((turn_id.into(), event_id.into(), question));
        Box::pin(async move { Ok(decision) })
    }

    fn holds(&self, _call_id: &str) -> bool {
        false
    }

    fn settle(&self, key: &str) -> Result<(), AskError> {
        self.settled.lock().unwrap().push(key.into());
        Ok(())
    }
}

#[tokio::test]
async fn a_plugin_tool_asks_a_person_and_gets_the_decision_as_a_value() {
    let resolver = resolver();
    for file in ["calc.mjs", "calc.py"] {
        let person = Arc::new(Yes::default());
        let handlers = tool(&resolver, file, &["confirm"]).await;
        let mut ctx = context();
        ctx.asks = AskScope::new(person.clone(), "turn_1", "evt_1", "call_1");
        let output = handlers["confirm"]
            .call(&ctx, object(json!({"path": "/tmp/x"})))
            .await
            .unwrap();
        assert_eq!(
            output,
            json!({"deleted": true, "by": "cli:ana", "reason": "fine by me"}),
            "{file}"
        );
        let asked = person.asked.lock().unwrap();
        let (turn, event, first) = &asked[0];
        assert_eq!(
            (turn.as_str(), event.as_str()),
            ("turn_1", "evt_1"),
            "{file}"
        );
        // Keyed under the call, by order when unnamed, never the bare call
        // id (the gate's key).
        assert_eq!(first.key, "call_1/ask1", "{file}");
        assert_eq!(first.question.as_deref(), Some("delete /tmp/x?"), "{file}");
        assert_eq!(first.arguments, json!({"path": "/tmp/x"}), "{file}");
        assert_eq!(first.timeout, Some(Duration::from_secs(60)), "{file}");
        assert_eq!(first.on_timeout, goondan_types::Verdict::Deny, "{file}");
        let second = &asked[1].2;
        assert_eq!(second.key, "call_1/really", "{file}");
        assert_eq!(second.timeout, None, "{file}");
        assert_eq!(second.on_timeout, goondan_types::Verdict::Approve, "{file}");
        drop(asked);
        // The executor settles them when the call is over; the handler
        // alone leaves them open.
        assert!(person.settled.lock().unwrap().is_empty(), "{file}");
        ctx.asks.settle_asked().unwrap();
        assert_eq!(
            *person.settled.lock().unwrap(),
            vec!["call_1/ask1".to_string(), "call_1/really".to_string()],
            "{file}"
        );
    }
}

#[tokio::test]
async fn a_plugin_with_no_person_to_ask_gets_a_coded_error() {
    let handlers = tool(&resolver(), "calc.mjs", &["confirm"]).await;
    let failure = call(&handlers, "confirm", json!({"path": "/tmp/x"}))
        .await
        .unwrap_err();
    assert_eq!(failure.code, "E_APPROVAL_UNAVAILABLE", "{failure:?}");
}

#[tokio::test]
async fn a_plugin_that_exits_mid_call_is_e_plugin_crashed_and_the_next_call_works() {
    let resolver = resolver();
    for file in ["calc.mjs", "calc.py"] {
        let handlers = tool(&resolver, file, &["add", "crash"]).await;
        let failure = call(&handlers, "crash", json!({})).await.unwrap_err();
        assert_eq!(failure.code, "E_PLUGIN_CRASHED", "{file}: {failure}");
        assert!(
            failure.message.contains("exit status: 3"),
            "{file}: {failure}"
        );
        assert!(
            failure.message.contains("about to exit"),
            "{file}: {failure}"
        );
        assert_eq!(
            call(&handlers, "add", json!({"a": 1, "b": 1}))
                .await
                .unwrap(),
            json!({"sum": 2}),
            "{file}: the host was started again"
        );
    }
}

#[tokio::test]
async fn what_a_plugin_prints_to_stderr_is_masked_in_its_crash_report() {
    let mut secrets = goondan_types::Secrets::new();
    secrets.insert("CALC_API_KEY", "sk-calc-0123456789");
    let resolver = PluginResolver::new(PluginConfig {
        bundle_root: fixtures(),
        launch: LaunchOptions::default(),
        host: HostOptions {
            secrets,
            ..HostOptions::default()
        },
    });
    let handlers = tool(&resolver, "calc.mjs", &["leak"]).await;
    let failure = call(&handlers, "leak", json!({"key": "sk-calc-0123456789"}))
        .await
        .unwrap_err();
    assert_eq!(failure.code, "E_PLUGIN_CRASHED", "{failure}");
    assert!(
        failure
            .message
            .contains("the key is [REDACTED:CALC_API_KEY]"),
        "{failure}"
    );
    assert!(!failure.message.contains("sk-calc"), "{failure}");
}

#[tokio::test]
async fn a_module_that_does_not_load_stops_resolution_naming_the_file() {
    let entry = Entry::script("broken.mjs");
    let error = resolver()
        .resolve_tool(EntryTarget::new("broken", &entry))
        .await
        .err()
        .expect("the module throws while loading");
    assert_eq!(error.code(), "E_ENTRY_RESOLUTION_FAILED");
    let text = error.to_string();
    assert!(text.contains("broken.mjs"), "{text}");
    assert!(text.contains("broken on purpose"), "{text}");
}

#[tokio::test]
async fn a_plugin_that_hangs_is_e_plugin_timeout_and_the_next_call_works() {
    let resolver = resolver_with_timeout(Duration::from_millis(400));
    let handlers = tool(&resolver, "calc.mjs", &["add", "hang"]).await;
    let failure = call(&handlers, "hang", json!({})).await.unwrap_err();
    assert_eq!(failure.code, "E_PLUGIN_TIMEOUT", "{failure}");
    assert!(failure.message.contains("tool.invoke"), "{failure}");
    assert_eq!(
        call(&handlers, "add", json!({"a": 4, "b": 5}))
            .await
            .unwrap(),
        json!({"sum": 9})
    );
}

#[tokio::test]
async fn a_call_dropped_mid_way_stops_its_plugin_and_the_next_call_starts_it_again() {
    // A cancelled Turn drops its tool call's future: what the plugin runs
    // for it must not go on (issue 36).
    let resolver = resolver();
    let handlers = tool(&resolver, "ticker-tool.mjs", &["tick", "add"]).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ticks");
    let ticking = call(&handlers, "tick", json!({"file": file}));
    let dropped = tokio::time::timeout(Duration::from_millis(300), ticking).await;
    assert!(dropped.is_err(), "the call never answers");
    assert!(file.exists(), "the plugin ran the call");
    // Give a kill time to land, then the file must stand still.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first = std::fs::read_to_string(&file).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        first,
        "the plugin process still runs the dropped call"
    );
    assert_eq!(
        call(&handlers, "add", json!({"a": 1, "b": 2}))
            .await
            .unwrap(),
        json!({"sum": 3})
    );
}

#[tokio::test]
async fn garbage_on_stdout_is_e_plugin_protocol_and_the_next_call_works() {
    let resolver = resolver();
    let handlers = tool(&resolver, "calc.mjs", &["add", "garbage"]).await;
    let failure = call(&handlers, "garbage", json!({})).await.unwrap_err();
    assert_eq!(failure.code, "E_PLUGIN_PROTOCOL", "{failure}");
    assert!(
        failure.message.contains("this is not JSON-RPC"),
        "{failure}"
    );
    assert!(failure.suggestion.unwrap().contains("stderr"));
    assert_eq!(
        call(&handlers, "add", json!({"a": 1, "b": 2}))
            .await
            .unwrap(),
        json!({"sum": 3})
    );
}

#[tokio::test]
async fn a_declared_export_the_module_lacks_is_a_resolution_error_naming_file_and_export() {
    let resolver = resolver();
    let entry = Entry::script("calc.py");
    let declared = exports(&["add", "multiply"]);
    let error = resolver
        .resolve_tool(EntryTarget::new("calc", &entry).with_exports(&declared))
        .await
        .err()
        .expect("multiply is not exported");
    assert_eq!(error.code(), "E_ENTRY_RESOLUTION_FAILED");
    let text = error.to_string();
    assert!(text.contains("E_PLUGIN_EXPORT_MISSING"), "{text}");
    assert!(
        text.contains("calc.py does not export `multiply`"),
        "{text}"
    );
    assert!(text.contains("(it exports: add, ask,"), "{text}");
}

#[tokio::test]
async fn a_typescript_tool_in_the_original_style_runs() {
    let resolver = resolver();
    let handlers = tool(&resolver, "weather.ts", &["forecast"]).await;
    assert_eq!(
        call(&handlers, "forecast", json!({"city": "Seoul"}))
            .await
            .unwrap(),
        json!({"city": "Seoul", "sky": "clear", "workdir": "/tmp/work"})
    );
}

#[test]
fn typescript_without_a_way_to_strip_types_names_what_was_looked_for() {
    let entry = fixtures().join("weather.ts");
    let planned = launch::plan(
        &entry,
        ScriptRuntime::TypeScript,
        "weather.ts",
        &LaunchOptions::default(),
    );
    // With bun or node ≥ 22.6 on this machine the file runs without a
    // stripper; the refusal is only observable without them.
    if let Err(error) = planned {
        assert_eq!(error.code(), "E_PLUGIN_RUNTIME_MISSING");
        let text = error.to_string();
        assert!(text.contains("weather.ts"), "{text}");
        assert!(text.contains("bun") && text.contains("22.6"), "{text}");
        assert!(
            error.suggestion().unwrap().contains("https://"),
            "{error:?}"
        );
    }
}

/// A shared, ordered log.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, line: impl Into<String>) {
        self.0.lock().unwrap().push(line.into());
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// A Rust extension logging `<name>.<kind>.pre/post` around `next`.
fn rust_layers(
    name: &'static str,
    priority: i32,
    log: Log,
) -> impl Fn(&mut ExtensionApi<'_>, &JsonValue) -> Result<(), ExtensionInitError> + Send + Sync {
    move |api: &mut ExtensionApi<'_>, _config: &JsonValue| {
        let options = MiddlewareOptions::priority(priority);
        let turn_log = log.clone();
        api.pipeline().turn(
            move |ctx, next| {
                let log = turn_log.clone();
                Box::pin(async move {
                    log.push(format!("{name}.turn.pre"));
                    let result = next.run(ctx).await;
                    log.push(format!("{name}.turn.post"));
                    result
                })
            },
            options,
        );
        let step_log = log.clone();
        api.pipeline().step(
            move |ctx, next| {
                let log = step_log.clone();
                Box::pin(async move {
                    log.push(format!("{name}.step.pre"));
                    if name == "inner" {
                        let names: Vec<&str> = ctx
                            .tool_catalog
                            .iter()
                            .map(|item| item.name.as_str())
                            .collect();
                        log.push(format!("inner sees catalog {}", names.join(",")));
                    }
                    let result = next.run(ctx).await;
                    log.push(format!("{name}.step.post"));
                    result
                })
            },
            options,
        );
        let call_log = log.clone();
        api.pipeline().tool_call(
            move |ctx, next| {
                let log = call_log.clone();
                Box::pin(async move {
                    log.push(format!("{name}.toolCall.pre"));
                    let result = next.run(ctx).await;
                    log.push(format!("{name}.toolCall.post"));
                    result
                })
            },
            options,
        );
        if name == "outer" {
            let trace_log = log.clone();
            let _subscription = api.events().on(
                "trace",
                Arc::new(move |payload: &JsonValue| {
                    trace_log.push(payload.as_str().unwrap_or_default().to_string());
                }),
            );
        }
        Ok(())
    }
}

struct Turn {
    log: Log,
    model: ScriptedModel,
    journal: RecordingJournal,
}

/// An agent with Rust extension `outer` (priority 0), the script
/// extension `extension` (`onion.mjs` or `onion.py`, priority 5) and Rust extension `inner` (10), Rust tools
/// `probe__add`, `probe__twice` and `hidden__x`; runs one Turn in which
/// the model calls `call` and then answers `done`.
async fn run_onion_turn(extension: &str, call: (&str, JsonValue)) -> Turn {
    let log = Log::default();
    let model = ScriptedModel::new();
    model.tool_calls(&[("call_1", call.0, call.1)]).text("done");
    let handler_log = log.clone();
    let probe = handler_fn(move |_ctx, args| {
        let log = handler_log.clone();
        Box::pin(async move {
            log.push(format!("handler args {}", JsonValue::Object(args.clone())));
            Ok(JsonValue::Object(args))
        })
    });
    let hidden = handler_fn(|_ctx, _args| Box::pin(async { Ok(JsonValue::Null) }));
    let builtins = MapBuiltinCatalog::new()
        .with_extension("outer", Arc::new(rust_layers("outer", 0, log.clone())))
        .with_extension("inner", Arc::new(rust_layers("inner", 10, log.clone())))
        .with_tool(
            "probe",
            [
                ("add".to_string(), probe.clone()),
                ("twice".to_string(), probe.clone()),
                ("crash".to_string(), probe),
            ]
            .into(),
        )
        .with_tool("hidden", [("x".to_string(), hidden)].into());
    let mut definition = AgentDefinition::new("alpha", "main", Arc::new(model.clone()), "m");
    for (name, entry, config) in [
        ("outer", Entry::native("outer"), JsonValue::Null),
        (
            "onion",
            Entry::script(extension),
            json!({"hide": "hidden__"}),
        ),
        ("inner", Entry::native("inner"), JsonValue::Null),
    ] {
        definition.extensions.push(ExtensionDefinition {
            name: name.into(),
            entry,
            config,
        });
    }
    for (name, names) in [
        ("probe", &["add", "twice", "crash"][..]),
        ("hidden", &["x"][..]),
    ] {
        definition.tools.push(ToolDefinition {
            name: name.into(),
            entry: Entry::native(name),
            exports: exports(names),
            error_message_limit: None,
        });
    }
    let journal = RecordingJournal::new();
    let state = MemoryExtensionState::default();
    let entries = EntryResolvers::new(Arc::new(builtins)).with_scripts(Arc::new(resolver()));
    let services = AgentServices::new(journal.boxed(), Box::new(state.clone()), Arc::new(entries));
    let mut agent = match Agent::start(definition, services).await {
        Ok(agent) => agent,
        Err(error) => panic!("the agent did not start: [{}] {error}", error.code()),
    };
    let result = agent.run_turn(user_event("hi"), &NoStream).await;
    assert!(result.error.is_none(), "{result:?}");
    Turn {
        log,
        model,
        journal,
    }
}

#[tokio::test]
async fn javascript_and_python_extensions_interleave_with_rust_middlewares_rewrite_args_and_filter_the_catalog(
) {
    for extension in ["onion.mjs", "onion.py"] {
        check_onion_turn(extension).await;
    }
}

async fn check_onion_turn(extension: &str) {
    let turn = run_onion_turn(extension, ("probe__add", json!({"a": 1, "b": 2}))).await;
    let step = |n: &str| {
        vec![
            "outer.step.pre".to_string(),
            "plugin.step.pre".into(),
            "inner.step.pre".into(),
            n.into(),
        ]
    };
    let catalog = "inner sees catalog probe__add,probe__twice,probe__crash,onion__shout";
    let mut expected = vec![
        "outer.turn.pre".to_string(),
        "plugin.turn.pre".into(),
        "inner.turn.pre".into(),
    ];
    expected.extend(step(catalog));
    expected.extend(
        [
            "outer.toolCall.pre",
            "plugin.toolCall.pre probe__add",
            "inner.toolCall.pre",
            r#"handler args {"a":1,"b":20}"#,
            "inner.toolCall.post",
            "plugin.toolCall.post",
            "outer.toolCall.post",
            "inner.step.post",
            "plugin.step.post",
            "outer.step.post",
        ]
        .map(String::from),
    );
    expected.extend(step(catalog));
    expected.extend(
        [
            "inner.step.post",
            "plugin.step.post",
            "outer.step.post",
            "inner.turn.post",
            "plugin.turn.post",
            "outer.turn.post",
        ]
        .map(String::from),
    );
    let (states, order): (Vec<String>, Vec<String>) = turn
        .log
        .lines()
        .into_iter()
        .partition(|line| line.starts_with("state "));
    assert_eq!(order, expected, "{extension}");
    // `api.state` reads back what it set, across Steps.
    assert_eq!(states, [r#"state {"steps":1}"#, r#"state {"steps":2}"#]);

    // The model saw the catalog as the JavaScript layer left it.
    let requests = turn.model.requests();
    let seen: Vec<&str> = requests[0]
        .tools
        .iter()
        .map(|tool| tool.name.as_str())
        .collect();
    assert_eq!(
        seen,
        ["probe__add", "probe__twice", "probe__crash", "onion__shout"]
    );
}

#[tokio::test]
async fn calling_next_twice_from_a_plugin_middleware_is_an_error_and_runs_the_tool_once() {
    for extension in ["onion.mjs", "onion.py"] {
        check_next_twice(extension).await;
    }
}

async fn check_next_twice(extension: &str) {
    let turn = run_onion_turn(extension, ("probe__twice", json!({"a": 1, "b": 2}))).await;
    let handler_runs = turn
        .log
        .lines()
        .iter()
        .filter(|line| line.starts_with("handler args"))
        .count();
    assert_eq!(handler_runs, 1);
    let base = turn.journal.base();
    let result = base
        .iter()
        .flat_map(|message| message.data.parts())
        .find_map(|part| match part {
            goondan_types::ContentPart::ToolResult { output, .. } => Some(output),
            _ => None,
        })
        .expect("a tool result");
    let text = serde_json::to_string(&result).unwrap();
    assert!(text.contains("E_PLUGIN_NEXT_TWICE"), "{text}");
    assert!(text.contains("already called"), "{text}");
}

#[tokio::test]
async fn an_extension_that_crashes_in_a_tool_call_fails_the_call_not_the_turn() {
    // `run_onion_turn` asserts the Turn ended without an error.
    let turn = run_onion_turn("onion.mjs", ("probe__crash", json!({"a": 1, "b": 2}))).await;
    assert!(
        !turn
            .log
            .lines()
            .iter()
            .any(|line| line.starts_with("handler args")),
        "the handler never ran"
    );
    let text = serde_json::to_string(&turn.journal.base()).unwrap();
    assert!(text.contains("E_PLUGIN_CRASHED"), "{text}");
}

/// Collects what a script connector emits; refuses events whose text is
/// `refused`.
#[derive(Default)]
struct Collect {
    events: Mutex<Vec<goondan_types::ConnectorEvent>>,
}

impl goondan_plugin::connector::ConnectorSink for Collect {
    fn emit(
        &self,
        event: goondan_types::ConnectorEvent,
    ) -> futures_util::future::BoxFuture<
        '_,
        Result<JsonValue, goondan_plugin::connector::EmitRefusal>,
    > {
        Box::pin(async move {
            if matches!(&event.message, goondan_types::ConnectorMessage::Text { text } if text == "refused")
            {
                return Err(goondan_plugin::connector::EmitRefusal {
                    code: "E_QUEUE_FULL".into(),
                    message: "the queue is full".into(),
                });
            }
            self.events.lock().unwrap().push(event);
            Ok(json!({"target": "alpha:clock"}))
        })
    }
}

#[tokio::test]
async fn a_javascript_connector_emits_events_with_its_config_and_secrets() {
    let resolver = resolver();
    let entry = Entry::script("ticker.mjs");
    let host = resolver
        .host(
            goondan_runtime::ResourceKind::Connector,
            EntryTarget::new("ticker", &entry),
        )
        .unwrap();
    let config = [("PREFIX".to_string(), "tick".to_string())].into();
    let mut secrets = goondan_types::Secrets::new();
    secrets.insert("TOKEN", "0123456789");
    let sink = Collect::default();
    goondan_plugin::connector::run_connector(&host, &config, &secrets, &sink)
        .await
        .unwrap();
    let events = sink.events.lock().unwrap();
    let texts: Vec<String> = events
        .iter()
        .map(|event| serde_json::to_value(&event.message).unwrap()["text"].to_string())
        .collect();
    assert_eq!(
        texts,
        [
            r#""tick 0""#,
            r#""tick 1""#,
            r#""tick 2""#,
            r#""E_QUEUE_FULL""#
        ]
    );
    assert_eq!(events[0].instance_key.as_deref(), Some("clock"));
    assert_eq!(events[0].properties["secretLength"], "10");
}

/// The process state letter of `pid` (`Z` for a zombie), `None` once it
/// is gone.
#[cfg(target_os = "linux")]
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// The agent dies without running a destructor (the thread that started
/// the plugin exits with its runtime and host leaked): the kernel kills
/// the plugin (`PR_SET_PDEATHSIG`), not `kill_on_drop`.
#[cfg(target_os = "linux")]
#[test]
fn a_plugin_process_dies_with_the_thread_of_its_agent() {
    let pid = std::thread::spawn(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let resolver = resolver();
        let pid = runtime.block_on(async {
            let handlers = tool(&resolver, "calc.mjs", &["add"]).await;
            let entry = Entry::script("calc.mjs");
            let host = resolver
                .host(
                    goondan_runtime::ResourceKind::Tool,
                    EntryTarget::new("calc", &entry),
                )
                .unwrap();
            let pid = host.process_id().await.expect("the plugin runs");
            std::mem::forget(handlers);
            pid
        });
        std::mem::forget(resolver);
        std::mem::forget(runtime);
        pid
    })
    .join()
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match process_state(pid) {
            None | Some('Z') | Some('X') => break,
            Some(state) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "plugin {pid} is still alive ({state}) after its agent thread exited"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}
