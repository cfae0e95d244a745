//! An agent whose only extension is `mcp`, with a scripted model, and the
//! fixture server's command line.

use goondan_mcp::McpExtension;
use goondan_runtime::test_support::{RecordingJournal, ScriptedModel};
use goondan_runtime::turn::{AgentDefinition, AgentServices, ExtensionDefinition};
use goondan_runtime::{Agent, EntryResolvers, MapBuiltinCatalog};
use goondan_store::MemoryExtensionState;
use goondan_types::{ContentPart, Entry, JsonValue, ModelMessage, Secrets};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The fixture server's path.
pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_server.py")
}

/// A stdio server entry running the fixture.
pub fn stdio_server() -> JsonValue {
    json!({"command": "python3", "args": [fixture()]})
}

pub struct Harness {
    pub model: ScriptedModel,
    pub secrets: Secrets,
}

impl Harness {
    pub fn new() -> Self {
        Harness {
            model: ScriptedModel::new(),
            secrets: Secrets::new(),
        }
    }

    /// Starts an agent with the `mcp` extension configured by `config`.
    pub async fn start(&self, config: JsonValue) -> Agent {
        let mut definition =
            AgentDefinition::new("alpha", "main", Arc::new(self.model.clone()), "scripted-1");
        definition.extensions.push(ExtensionDefinition {
            name: "mcp".into(),
            entry: Entry::native("mcp"),
            config,
        });
        let catalog = MapBuiltinCatalog::new()
            .with_extension("mcp", Arc::new(McpExtension::new(self.secrets.clone())));
        let services = AgentServices::new(
            RecordingJournal::new().boxed(),
            Box::new(MemoryExtensionState::default()),
            Arc::new(EntryResolvers::new(Arc::new(catalog))),
        );
        match Agent::start(definition, services).await {
            Ok(agent) => agent,
            Err(error) => panic!("agent did not start: [{}] {error}", error.code()),
        }
    }
}

/// The tool results of the conversation in order, as `(toolName, output)`
/// where output is the AI SDK `{type, value}` pair.
pub fn tool_outputs(agent: &Agent) -> Vec<(String, JsonValue)> {
    agent
        .conversation()
        .next_messages()
        .iter()
        .filter_map(|message| match &message.data {
            ModelMessage::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .flatten()
        .filter_map(|part| match part {
            ContentPart::ToolResult {
                tool_name, output, ..
            } => Some((tool_name, serde_json::to_value(output).unwrap())),
            _ => None,
        })
        .collect()
}

/// Polls `condition` every few milliseconds until it holds or `limit`
/// passes.
pub async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    condition()
}
