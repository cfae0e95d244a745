//! The resolved description of one agent instance the runtime assembles:
//! what `gdn` builds from a validated bundle, or a library user builds by
//! hand. It names entries and holds plain values; resolving entries to code
//! happens in [`crate::turn::Agent::start`].

use crate::agents::{AgentsApi, AsyncResponseInbox, DetachedAgents};
use crate::events::{DiscardEvents, RuntimeEventSink};
use crate::extension::EntryResolver;
use crate::pipeline::{RuntimeAgentContext, RuntimeSwarmContext};
use crate::tool::{ToolCallPolicy, ToolExportDefinition};
use goondan_model::{Model, ModelParams};
use goondan_store::{ExtensionStateStore, TurnJournal};
use goondan_types::{Entry, JsonValue, Secrets};
use std::path::PathBuf;
use std::sync::Arc;

/// `policy.maxStepsPerTurn` when the agent does not set it.
pub const DEFAULT_MAX_STEPS_PER_TURN: u32 = 32;

/// A Tool resource the agent lists in `spec.tools`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    /// `metadata.name`.
    pub name: String,
    /// `spec.entry`, for example `builtin:bash`.
    pub entry: Entry,
    /// `spec.exports`.
    pub exports: Vec<ToolExportDefinition>,
    /// `spec.errorMessageLimit`; 1000 when absent.
    pub error_message_limit: Option<usize>,
}

/// An Extension resource the agent lists in `spec.extensions`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtensionDefinition {
    /// `metadata.name`; also the key of its state.
    pub name: String,
    /// `spec.entry`.
    pub entry: Entry,
    /// `spec.config`, `null` when absent.
    pub config: JsonValue,
}

/// What one agent instance is.
#[derive(Clone)]
pub struct AgentDefinition {
    /// The agent's name.
    pub agent_name: String,
    /// The instance key.
    pub instance_key: String,
    /// The model to call.
    pub model: Arc<dyn Model>,
    /// The provider's model id.
    pub model_name: String,
    /// Sampling parameters.
    pub model_params: ModelParams,
    /// `policy.maxStepsPerTurn`.
    pub max_steps_per_turn: u32,
    /// `spec.tools`, in order.
    pub tools: Vec<ToolDefinition>,
    /// `spec.extensions`, in order: the order middlewares register in.
    pub extensions: Vec<ExtensionDefinition>,
    /// `runtime.agent` (with the materialized system prompt).
    pub runtime_agent: RuntimeAgentContext,
    /// `runtime.swarm`.
    pub swarm: RuntimeSwarmContext,
    /// The instance's working directory.
    pub workdir: PathBuf,
    /// Which tool calls may run.
    pub tool_call_policy: ToolCallPolicy,
    /// The secret variables this process holds (from the spawn
    /// handshake): masked in every tool result before it is stored or
    /// sent to the model.
    pub secrets: Secrets,
}

impl std::fmt::Debug for AgentDefinition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentDefinition")
            .field("agent_name", &self.agent_name)
            .field("instance_key", &self.instance_key)
            .field("model_name", &self.model_name)
            .field("tools", &self.tools)
            .field("extensions", &self.extensions)
            .finish_non_exhaustive()
    }
}

impl AgentDefinition {
    /// A definition with no tools or extensions, the default step limit
    /// and a one-agent swarm.
    pub fn new(
        agent_name: &str,
        instance_key: &str,
        model: Arc<dyn Model>,
        model_name: &str,
    ) -> Self {
        AgentDefinition {
            agent_name: agent_name.to_string(),
            instance_key: instance_key.to_string(),
            model,
            model_name: model_name.to_string(),
            model_params: ModelParams::default(),
            max_steps_per_turn: DEFAULT_MAX_STEPS_PER_TURN,
            tools: Vec::new(),
            extensions: Vec::new(),
            runtime_agent: RuntimeAgentContext {
                name: agent_name.to_string(),
                bundle_root: None,
                prompt: None,
            },
            swarm: RuntimeSwarmContext {
                swarm_name: agent_name.to_string(),
                entry_agent: agent_name.to_string(),
                self_agent: agent_name.to_string(),
                available_agents: vec![agent_name.to_string()],
                callable_agents: Vec::new(),
            },
            workdir: PathBuf::from("."),
            tool_call_policy: ToolCallPolicy::default(),
            secrets: Secrets::new(),
        }
    }
}

/// What the agent runs against: storage, the code behind entries, other
/// agents, event output.
pub struct AgentServices {
    /// The conversation log.
    pub journal: Box<dyn TurnJournal>,
    /// Extension state files.
    pub extension_state: Box<dyn ExtensionStateStore>,
    /// Turns tool and extension entries into code, once, at start.
    pub entries: Arc<dyn EntryResolver>,
    /// Calls to other agents.
    pub agents: Arc<dyn AgentsApi>,
    /// Async answers to inject.
    pub inbox: AsyncResponseInbox,
    /// Where runtime events go.
    pub runtime_events: Arc<dyn RuntimeEventSink>,
    /// Prices and counts every model call and applies the Swarm's budget;
    /// `None` counts nothing (embedding, tests).
    pub ledger: Option<Arc<crate::ledger::Ledger>>,
    /// The people a `toolCall` middleware can ask
    /// ([`crate::operator`]); [`crate::NoOperators`] when nobody can be
    /// asked.
    pub operators: Arc<dyn crate::Operators>,
}

impl AgentServices {
    /// Services with no orchestrator, discarding runtime events.
    pub fn new(
        journal: Box<dyn TurnJournal>,
        extension_state: Box<dyn ExtensionStateStore>,
        entries: Arc<dyn EntryResolver>,
    ) -> Self {
        AgentServices {
            journal,
            extension_state,
            entries,
            agents: Arc::new(DetachedAgents),
            inbox: AsyncResponseInbox::new(),
            runtime_events: Arc::new(DiscardEvents),
            ledger: None,
            operators: Arc::new(crate::NoOperators),
        }
    }
}

impl std::fmt::Debug for AgentServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentServices").finish_non_exhaustive()
    }
}
