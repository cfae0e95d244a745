//! The `@goondan/base` manifests the config loader embeds and the
//! implementations here agree: every export has a handler and nothing
//! more, every default config is accepted, and an agent assembled from the
//! manifests (schemas and configs as a bundle declares them) runs a Turn.

use crate::harness::{tool_outputs, Harness};
use goondan_config::{load_bundle, LoadOptions};
use goondan_model::NoStream;
use goondan_runtime::pipeline::RuntimePrompt;
use goondan_runtime::test_support::user_event;
use goondan_runtime::turn::{ExtensionDefinition, ToolDefinition, ToolExportDefinition};
use goondan_runtime::BuiltinCatalog;
use goondan_types::{Entry, JsonValue, TurnFinishReason};
use serde_json::json;

const TOOLS: [&str; 9] = [
    "agents",
    "bash",
    "file-system",
    "http-fetch",
    "json-query",
    "slack",
    "telegram",
    "text-transform",
    "wait",
];
const EXTENSIONS: [&str; 9] = [
    "a2a",
    "context-message",
    "inter-agent-response-format",
    "logging",
    "mcp",
    "message-compaction",
    "message-window",
    "required-tools-guard",
    "tool-search",
];

fn bundle_yaml() -> String {
    let tools: String = TOOLS
        .iter()
        .map(|name| format!("    - ref: Tool/{name}\n"))
        .collect();
    let extensions: String = EXTENSIONS
        .iter()
        .map(|name| format!("    - ref: Extension/{name}\n"))
        .collect();
    format!(
        r#"apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: scripted
spec:
  provider: scripted
  model: scripted-demo
  capabilities:
    toolCalling: true
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: assistant
spec:
  modelConfig:
    modelRef: Model/scripted
  prompt:
    system: Use the tools.
  tools:
{tools}  extensions:
{extensions}---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/assistant
  agents:
    - ref: Agent/assistant
"#
    )
}

#[tokio::test]
async fn an_agent_built_from_the_base_manifests_runs_a_turn() {
    let bundle_dir = tempfile::tempdir().unwrap();
    std::fs::write(bundle_dir.path().join("goondan.yaml"), bundle_yaml()).unwrap();
    let options = LoadOptions {
        env_file: None,
        inherit_process_env: false,
        ..LoadOptions::default()
    };
    let outcome = load_bundle(bundle_dir.path(), &options).unwrap();
    let errors: Vec<String> = outcome.errors().map(|error| error.to_string()).collect();
    let bundle = outcome
        .bundle
        .unwrap_or_else(|| panic!("bundle did not load: {errors:?}"));
    let agent_view = bundle.agent("assistant").unwrap();
    let catalog = goondan_base::builtins();

    let mut harness = Harness::new();
    for tool in agent_view.tools() {
        let builtin = tool.spec.entry.strip_prefix("builtin:").unwrap();
        let handlers = catalog
            .tool(builtin)
            .unwrap_or_else(|| panic!("no builtin {builtin}"));
        let mut declared: Vec<&str> = tool
            .spec
            .exports
            .iter()
            .map(|export| export.name.as_str())
            .collect();
        let mut implemented: Vec<&str> = handlers.keys().map(String::as_str).collect();
        declared.sort();
        implemented.sort();
        assert_eq!(declared, implemented, "exports of {}", tool.name());
        harness.definition.tools.push(ToolDefinition {
            name: tool.name().to_string(),
            entry: Entry::parse(&tool.spec.entry).unwrap(),
            exports: tool
                .spec
                .exports
                .iter()
                .map(|export| ToolExportDefinition {
                    name: export.name.clone(),
                    description: Some(export.description.clone()),
                    parameters: Some(export.parameters.clone()),
                })
                .collect(),
            error_message_limit: Some(tool.spec.error_message_limit_or_default()),
        });
    }
    for extension in agent_view.extensions() {
        harness.definition.extensions.push(ExtensionDefinition {
            name: extension.name().to_string(),
            entry: Entry::parse(&extension.spec.entry).unwrap(),
            config: JsonValue::Object(extension.spec.config.clone()),
        });
    }
    harness.definition.runtime_agent.prompt = Some(RuntimePrompt {
        system: agent_view.system_prompt().map(str::to_string),
    });
    assert_eq!(harness.definition.tools.len(), TOOLS.len());
    assert_eq!(harness.definition.extensions.len(), EXTENSIONS.len());

    harness.model.tool_calls(&[
        ("c1", "json-query__count", json!({"data": "[1, 2]"})),
        (
            "c2",
            "bash__exec",
            json!({"command": "echo ok", "timeoutMs": 5000}),
        ),
        (
            "c3",
            "text-transform__trim",
            json!({"text": "  x ", "mode": "both"}),
        ),
    ]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("go"), &NoStream).await;
    assert_eq!(result.finish_reason, TurnFinishReason::TextResponse);
    let outputs = tool_outputs(&agent);
    assert_eq!(outputs[0].1["value"]["count"], 2, "{outputs:?}");
    assert_eq!(outputs[1].1["value"]["stdout"], "ok\n", "{outputs:?}");
    assert_eq!(outputs[2].1["value"]["result"], "x", "{outputs:?}");
    let first_request = &harness.model.requests()[0];
    assert_eq!(first_request.messages[0].text(), "Use the tools.");
    assert!(first_request
        .tools
        .iter()
        .any(|tool| tool.name == "tool-search__search"));
}
