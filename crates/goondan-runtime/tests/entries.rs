//! Issue "Entry resolution as a seam": tool and extension entries become
//! code through `AgentServices::entries`. A second resolver installed for
//! script entries (as the plugin host will be) runs a script Tool in a
//! Turn; without one, script entries are refused before the instance is
//! touched.

mod common;

use common::{Harness, Log};
use futures_util::future::BoxFuture;
use goondan_model::NoStream;
use goondan_runtime::test_support::user_event;
use goondan_runtime::turn::{ExtensionDefinition, ToolDefinition, ToolExportDefinition};
use goondan_runtime::{
    handler_fn, Agent, AgentError, EntryError, EntryResolver, EntryResolvers, EntryTarget,
    Extension, ExtensionApi, MiddlewareOptions, ResourceKind, ToolHandlers,
};
use goondan_types::{ContentPart, Entry, JsonValue, ModelMessage, ScriptRuntime};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

/// Stands in for the plugin host: resolves every script entry to an
/// in-process implementation after yielding once (as a resolver that
/// waits for a child process would), and logs what it was asked.
struct TestScripts {
    log: Log,
}

impl TestScripts {
    fn note(&self, kind: ResourceKind, target: EntryTarget<'_>) {
        let runtime = match target.entry {
            Entry::Script { runtime, .. } => *runtime,
            Entry::Native { .. } => panic!("a native entry reached the script resolver"),
        };
        self.log.push(format!(
            "{kind} {} {} {runtime}",
            target.resource, target.entry
        ));
    }
}

impl EntryResolver for TestScripts {
    fn resolve_tool<'a>(
        &'a self,
        target: EntryTarget<'a>,
    ) -> BoxFuture<'a, Result<ToolHandlers, EntryError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.note(ResourceKind::Tool, target);
            if target.resource == "broken" {
                return Err(EntryError::failed(
                    ResourceKind::Tool,
                    target,
                    "the plugin host exited with status 1",
                ));
            }
            let forecast = handler_fn(|_ctx, args| {
                Box::pin(async move { Ok(json!({"city": args["city"], "sky": "clear"})) })
            });
            Ok(HashMap::from([("forecast".to_string(), forecast)]))
        })
    }

    fn resolve_extension<'a>(
        &'a self,
        target: EntryTarget<'a>,
    ) -> BoxFuture<'a, Result<Arc<dyn Extension>, EntryError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.note(ResourceKind::Extension, target);
            let log = self.log.clone();
            let extension = move |api: &mut ExtensionApi<'_>, _: &JsonValue| {
                let log = log.clone();
                api.pipeline().turn(
                    move |ctx, next| {
                        log.push("script extension turn");
                        Box::pin(next.run(ctx))
                    },
                    MiddlewareOptions::default(),
                );
                Ok(())
            };
            Ok(Arc::new(extension) as Arc<dyn Extension>)
        })
    }
}

/// A Tool resource `name` with a script entry and one export `forecast`.
fn script_tool(harness: &mut Harness, name: &str, path: &str) {
    harness.definition.tools.push(ToolDefinition {
        name: name.to_string(),
        entry: Entry::script(path),
        exports: vec![ToolExportDefinition {
            name: "forecast".into(),
            description: Some("the weather".into()),
            parameters: None,
        }],
        error_message_limit: None,
    });
}

async fn start_with_scripts(harness: &Harness, log: &Log) -> Result<Agent, AgentError> {
    let mut services = harness.services();
    services.entries = Arc::new(
        EntryResolvers::new(Arc::new(harness.builtins.clone()))
            .with_scripts(Arc::new(TestScripts { log: log.clone() })),
    );
    Agent::start(harness.definition.clone(), services).await
}

fn start_error(result: Result<Agent, AgentError>) -> AgentError {
    match result {
        Ok(_) => panic!("the agent started"),
        Err(error) => error,
    }
}

#[tokio::test]
async fn entry_seam_a_script_tool_resolved_by_a_second_resolver_runs_in_a_turn() {
    let mut harness = Harness::new();
    let log = Log::default();
    script_tool(&mut harness, "weather", "./tools/weather.ts");
    harness.definition.extensions.push(ExtensionDefinition {
        name: "audit".into(),
        entry: Entry::script("extensions/audit.py"),
        config: JsonValue::Null,
    });
    harness
        .model
        .tool_calls(&[("c1", "weather__forecast", json!({"city": "Seoul"}))]);
    harness.model.text("clear skies");

    let mut agent = start_with_scripts(&harness, &log).await.unwrap();
    let result = agent.run_turn(user_event("weather?"), &NoStream).await;

    assert!(result.error.is_none(), "{:?}", result.error);
    assert_eq!(
        log.lines(),
        [
            "Tool weather ./tools/weather.ts TypeScript",
            "Extension audit extensions/audit.py Python",
            "script extension turn",
        ]
    );
    let outputs: Vec<JsonValue> = agent
        .conversation()
        .next_messages()
        .iter()
        .filter_map(|message| match &message.data {
            ModelMessage::Tool { content, .. } => content.first().cloned(),
            _ => None,
        })
        .map(|part| match part {
            ContentPart::ToolResult { output, .. } => serde_json::to_value(output).unwrap(),
            other => panic!("unexpected part {other:?}"),
        })
        .collect();
    assert_eq!(
        outputs,
        [json!({"type": "json", "value": {"city": "Seoul", "sky": "clear"}})]
    );
}

#[tokio::test]
async fn entry_seam_native_entries_still_go_to_the_builtin_catalog() {
    let mut harness = Harness::new();
    let log = Log::default();
    harness.tool(
        "echo",
        vec![(
            "run",
            None,
            handler_fn(|_ctx, args| Box::pin(async move { Ok(JsonValue::Object(args)) })),
        )],
        None,
    );
    harness
        .model
        .tool_calls(&[("c1", "echo__run", json!({"n": 1}))]);
    harness.model.text("done");

    let mut agent = start_with_scripts(&harness, &log).await.unwrap();
    let result = agent.run_turn(user_event("echo"), &NoStream).await;

    assert!(result.error.is_none(), "{:?}", result.error);
    assert!(log.lines().is_empty(), "{:?}", log.lines());
    let names: Vec<String> = agent
        .tools()
        .catalog()
        .into_iter()
        .map(|item| item.name)
        .collect();
    assert_eq!(names, ["echo__run"]);
}

#[tokio::test]
async fn entry_seam_script_entries_without_a_script_resolver_are_refused_before_the_journal_is_read(
) {
    let mut harness = Harness::new();
    script_tool(&mut harness, "weather", "./tools/weather.ts");

    let error = start_error(Agent::start(harness.definition.clone(), harness.services()).await);

    assert_eq!(error.code(), "E_SCRIPT_ENTRY_UNSUPPORTED");
    assert_eq!(
        error.to_string(),
        "Tool 'weather' has script entry './tools/weather.ts', but no script resolver is installed"
    );
    assert!(error.suggestion().unwrap().contains("PluginResolver"));
    assert!(
        harness.journal.calls().is_empty(),
        "{:?}",
        harness.journal.calls()
    );
}

#[tokio::test]
async fn entry_seam_unknown_builtins_and_failed_resolutions_have_codes() {
    let mut harness = Harness::new();
    harness.extension(
        "message-window",
        |_: &mut ExtensionApi<'_>, _: &JsonValue| Ok(()),
    );
    harness.definition.extensions[0].entry = Entry::native("message-windw");
    let error = start_error(Agent::start(harness.definition.clone(), harness.services()).await);
    assert_eq!(error.code(), "E_ENTRY_NOT_FOUND");
    assert_eq!(
        error.to_string(),
        "Extension 'message-window' has entry 'builtin:message-windw', which is not a known builtin"
    );
    assert_eq!(
        error.suggestion(),
        Some("did you mean `builtin:message-window`?")
    );

    let mut broken = Harness::new();
    let log = Log::default();
    script_tool(&mut broken, "broken", "bin/broken");
    let error = start_error(start_with_scripts(&broken, &log).await);
    assert_eq!(error.code(), "E_ENTRY_RESOLUTION_FAILED");
    assert!(matches!(
        &error,
        AgentError::Entry(EntryError::Failed {
            kind: ResourceKind::Tool,
            entry: Entry::Script {
                runtime: ScriptRuntime::Executable,
                ..
            },
            ..
        })
    ));
    assert!(
        error.to_string().contains("exited with status 1"),
        "{error}"
    );
}
