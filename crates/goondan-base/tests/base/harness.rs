//! An agent assembled from `goondan_base::builtins()` with a scripted model,
//! an in-memory journal and a temporary workdir.

use goondan_base::{BuiltinOptions, Summarizer, ToolOptions};
use goondan_runtime::test_support::{RecordingJournal, ScriptedModel};
use goondan_runtime::turn::{
    AgentDefinition, AgentServices, ExtensionDefinition, ToolDefinition, ToolExportDefinition,
};
use goondan_runtime::{Agent, EntryResolvers};
use goondan_store::MemoryExtensionState;
use goondan_types::{ContentPart, Entry, JsonValue, ModelMessage};
use std::sync::Arc;

pub struct Harness {
    pub model: ScriptedModel,
    pub journal: RecordingJournal,
    pub definition: AgentDefinition,
    pub summarizer: Option<Summarizer>,
    pub tool_options: ToolOptions,
    pub workdir: tempfile::TempDir,
}

impl Harness {
    pub fn new() -> Self {
        let model = ScriptedModel::new();
        let workdir = tempfile::tempdir().unwrap();
        let mut definition =
            AgentDefinition::new("alpha", "main", Arc::new(model.clone()), "scripted-1");
        definition.workdir = workdir.path().to_path_buf();
        Harness {
            model,
            journal: RecordingJournal::new(),
            definition,
            summarizer: None,
            tool_options: ToolOptions::default(),
            workdir,
        }
    }

    /// Adds builtin Tool `name` with `exports`, without parameter schemas so
    /// the tools' own strict parsing is what checks the arguments.
    pub fn tool(&mut self, name: &str, exports: &[&str]) -> &mut Self {
        self.definition.tools.push(ToolDefinition {
            name: name.to_string(),
            entry: Entry::native(name),
            exports: exports
                .iter()
                .map(|export| ToolExportDefinition {
                    name: export.to_string(),
                    description: Some(format!("{name} {export}")),
                    parameters: None,
                })
                .collect(),
            error_message_limit: None,
        });
        self
    }

    /// Adds builtin Extension `name` with `config`.
    pub fn extension(&mut self, name: &str, config: JsonValue) -> &mut Self {
        self.definition.extensions.push(ExtensionDefinition {
            name: name.to_string(),
            entry: Entry::native(name),
            config,
        });
        self
    }

    pub async fn start(&self) -> Agent {
        let builtins = goondan_base::builtins_with(BuiltinOptions {
            summarizer: self.summarizer.clone(),
            tools: self.tool_options.clone(),
        });
        let services = AgentServices::new(
            self.journal.boxed(),
            Box::new(MemoryExtensionState::default()),
            Arc::new(EntryResolvers::new(Arc::new(builtins))),
        );
        match Agent::start(self.definition.clone(), services).await {
            Ok(agent) => agent,
            Err(error) => panic!("agent did not start: [{}] {error}", error.code()),
        }
    }
}

/// The tool results of the conversation in order, as `(toolName, output)`
/// where output is the AI SDK `{type, value}` pair.
pub fn tool_outputs(agent: &Agent) -> Vec<(String, JsonValue)> {
    let state = agent.conversation();
    state
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
