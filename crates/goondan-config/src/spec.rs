//! Typed specs of the eight kinds and `Eval` (`spec/eval.rs`) (`resources.md` §7, `connector.md` §3,
//! `connection.md` §3, `bundle_package.md` §5), strict: a field not listed
//! here is a schema error. Free-form maps (`Model.spec.options`,
//! `Extension.spec.config`, extra model params) are the only exceptions, as
//! the spec allows.
//!
//! Only shape lives here, plus defaults a consumer needs (`maxStepsPerTurn`
//! 32, shutdown grace 300 s, `errorMessageLimit` 1000). Rules that span
//! fields or resources are checked in `validate`.

mod eval;

pub use eval::{Assertion, EvalCase, EvalSpec, ToolCallAssertion};

use goondan_types::{JsonObject, ObjectRefLike, RefItem, ValueSource};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// A list entry referring to a resource: `- ref: Kind/name` or the bare
/// reference (string or object), both seen in the original's examples.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum RefEntry {
    /// `{ ref: ... }`.
    Wrapped(RefItem),
    /// `"Kind/name"` or `{ kind, name, package?, apiVersion? }`.
    Direct(ObjectRefLike),
}

impl RefEntry {
    /// The reference itself.
    pub fn reference(&self) -> &ObjectRefLike {
        match self {
            RefEntry::Wrapped(item) => &item.reference,
            RefEntry::Direct(reference) => reference,
        }
    }
}

/// An entry of `Agent.spec.extensions`: a reference as in [`RefEntry`],
/// or `{ ref, config }`, whose `config` is merged over the Extension's own
/// `spec.config` for this agent (a shallow merge: the agent's top-level
/// keys win), as the original does.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ExtensionEntry {
    /// `{ ref: ..., config: {...} }`.
    Configured(ConfiguredRef),
    /// `- ref: Kind/name`, `"Kind/name"` or `{ kind, name, package? }`.
    Plain(RefEntry),
}

/// `{ ref: ..., config: {...} }` in `Agent.spec.extensions`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfiguredRef {
    /// The Extension.
    #[serde(rename = "ref")]
    pub reference: ObjectRefLike,
    /// Merged over the Extension's `spec.config` for this agent.
    pub config: JsonObject,
}

impl ExtensionEntry {
    /// The reference itself.
    pub fn reference(&self) -> &ObjectRefLike {
        match self {
            ExtensionEntry::Configured(configured) => &configured.reference,
            ExtensionEntry::Plain(entry) => entry.reference(),
        }
    }

    /// The agent's own config for this extension, when it gives one.
    pub fn config(&self) -> Option<&JsonObject> {
        match self {
            ExtensionEntry::Configured(configured) => Some(&configured.config),
            ExtensionEntry::Plain(_) => None,
        }
    }
}

/// `Model.spec`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelSpec {
    /// `anthropic`, `openai`, `google`, `scripted` or `replay`.
    pub provider: String,
    /// The provider's model id.
    pub model: String,
    /// The API key.
    #[serde(default)]
    pub api_key: Option<ValueSource>,
    /// Overrides the provider's base URL.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Provider-specific options (for `scripted`: `rulesFile`).
    #[serde(default)]
    pub options: JsonObject,
    /// Declared capabilities (`streaming`, `toolCalling`, ...).
    #[serde(default)]
    pub capabilities: BTreeMap<String, bool>,
    /// Prices that replace the vendored price list's for this Model (a
    /// Goondan-rs extension; `docs/observability.md`, "Usage and costs").
    #[serde(default)]
    pub pricing: Option<ModelPricing>,
}

/// `Model.spec.pricing`: what one million tokens cost, in US dollars.
/// Both fields are required, so a half-written override cannot silently
/// price one side at zero.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelPricing {
    /// US dollars per million input (prompt) tokens.
    pub input_usd_per_million_tokens: f64,
    /// US dollars per million output (completion) tokens.
    pub output_usd_per_million_tokens: f64,
}

impl ModelSpec {
    /// The declared capability, `None` when the model does not say.
    pub fn capability(&self, name: &str) -> Option<bool> {
        self.capabilities.get(name).copied()
    }
}

/// `Tool.spec`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSpec {
    /// `builtin:<name>` or a path relative to the bundle root.
    pub entry: String,
    /// Cap on error message length in tool results, as written; see
    /// [`ToolSpec::error_message_limit_or_default`].
    #[serde(default)]
    pub error_message_limit: Option<i64>,
    /// The functions this tool offers; each is exposed as `tool__export`.
    pub exports: Vec<ToolExport>,
}

impl ToolSpec {
    /// The default `errorMessageLimit`.
    pub const DEFAULT_ERROR_MESSAGE_LIMIT: usize = 1000;

    /// `errorMessageLimit`, defaulting to 1000 (validation guarantees it
    /// is positive).
    pub fn error_message_limit_or_default(&self) -> usize {
        self.error_message_limit
            .and_then(|limit| usize::try_from(limit).ok())
            .unwrap_or(Self::DEFAULT_ERROR_MESSAGE_LIMIT)
    }
}

/// One export of a Tool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolExport {
    /// Unique within the Tool; never contains `__`.
    pub name: String,
    /// What the LLM reads about it.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: JsonObject,
}

/// `Extension.spec`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtensionSpec {
    /// `builtin:<name>` or a path relative to the bundle root.
    pub entry: String,
    /// Passed to the extension as its configuration.
    #[serde(default)]
    pub config: JsonObject,
}

/// `Agent.spec`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentSpec {
    /// Which model and with what parameters.
    pub model_config: AgentModelConfig,
    /// The system prompt, inline or from a file.
    #[serde(default)]
    pub prompt: Option<AgentPrompt>,
    /// Tools the agent may call.
    #[serde(default)]
    pub tools: Vec<RefEntry>,
    /// Extensions wrapped around its turns, steps and tool calls.
    #[serde(default)]
    pub extensions: Vec<ExtensionEntry>,
    /// Tool calls (`tool__export`) of which a Turn must make at least one
    /// before it may end; enforced by the base `required-tools-guard`
    /// extension, which is added when the agent does not list it.
    #[serde(default)]
    pub required_tools: Vec<String>,
}

/// `Agent.spec.modelConfig`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentModelConfig {
    /// The Model resource.
    pub model_ref: ObjectRefLike,
    /// Sampling parameters.
    #[serde(default)]
    pub params: AgentModelParams,
}

/// `Agent.spec.modelConfig.params`: three known fields plus any
/// provider-specific ones.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentModelParams {
    /// 0 to 2.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Positive.
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// Nucleus sampling.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Anything else, passed to the provider.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `Agent.spec.prompt`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentPrompt {
    /// Inline system prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// File holding the system prompt, relative to the bundle root.
    #[serde(default)]
    pub system_ref: Option<String>,
}

/// `Swarm.spec`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwarmSpec {
    /// Receives events that name no agent.
    pub entry_agent: ObjectRefLike,
    /// The member agents.
    pub agents: Vec<RefEntry>,
    /// The orchestrator's instance key; `metadata.name` when absent.
    #[serde(default)]
    pub instance_key: Option<String>,
    /// Execution policy.
    #[serde(default)]
    pub policy: SwarmPolicy,
}

/// `Swarm.spec.policy`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwarmPolicy {
    /// Steps after which a turn is cut off; default 32.
    #[serde(default)]
    pub max_steps_per_turn: Option<i64>,
    /// Instance lifetime.
    #[serde(default)]
    pub lifecycle: Option<SwarmLifecycle>,
    /// Graceful shutdown.
    #[serde(default)]
    pub shutdown: Option<SwarmShutdown>,
    /// Bounds on what may wait (a Goondan-rs extension).
    #[serde(default)]
    pub queues: Option<SwarmQueues>,
    /// Bounds on agent processes (a Goondan-rs extension).
    #[serde(default)]
    pub processes: Option<SwarmProcesses>,
    /// Token and cost limits (a Goondan-rs extension).
    #[serde(default)]
    pub budget: Option<SwarmBudget>,
    /// One approval gate for every agent of the Swarm, or those it names
    /// (a Goondan-rs extension).
    #[serde(default)]
    pub approvals: Option<SwarmApprovals>,
    /// Whether every Step's `step.started` runtime event records the
    /// messages the Step sends its model (`llmInputMessages`, bounded per
    /// event), so the Studio shows what the model was sent; default true
    /// (a Goondan-rs extension).
    #[serde(default)]
    pub llm_input_messages: Option<bool>,
}

impl SwarmPolicy {
    /// `policy.llmInputMessages`, default true.
    pub fn records_llm_input(&self) -> bool {
        self.llm_input_messages.unwrap_or(true)
    }
}

/// `Swarm.spec.policy.approvals`: the base `tool-approval` extension's
/// config, applied by every agent process of the Swarm (or of `agents`)
/// innermost around each tool call, whatever the agent itself lists.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwarmApprovals {
    /// Export names (`bash__exec`) whose calls wait for a person.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Argument name → pattern; a call is gated only when every one
    /// matches (for `bash__exec`'s `command`: any simple command in it).
    #[serde(default)]
    pub when: BTreeMap<String, String>,
    /// Patterns a `bash__exec` command's simple commands are allowed by:
    /// the call is gated unless every one matches one of them.
    #[serde(default)]
    pub unless: Vec<String>,
    /// Seconds before `onTimeout` decides; none waits for ever.
    #[serde(default)]
    pub timeout_seconds: Option<i64>,
    /// What the timeout decides: `deny` (the default) or `approve`.
    #[serde(default)]
    pub on_timeout: Option<goondan_types::Verdict>,
    /// The agents the gate applies to; absent, every agent of the Swarm.
    #[serde(default)]
    pub agents: Option<Vec<String>>,
}

/// `Swarm.spec.policy.budget`: limits past which the next model call is
/// refused with `E_BUDGET_EXCEEDED`. Every field is optional; an absent
/// one is no limit.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwarmBudget {
    /// Tokens (input plus output) one root Turn may use, counting every
    /// Turn of other agents it reached through inter-agent requests (one
    /// trace).
    #[serde(default)]
    pub max_tokens_per_turn: Option<i64>,
    /// Tokens one agent instance may use over its lifetime.
    #[serde(default)]
    pub max_tokens_per_instance: Option<i64>,
    /// US dollars one agent instance may spend over its lifetime.
    #[serde(default)]
    pub max_cost_usd_per_instance: Option<f64>,
    /// US dollars the whole Swarm may spend per UTC day.
    #[serde(default)]
    pub max_cost_usd_per_day: Option<f64>,
}

/// `Swarm.spec.policy.processes`: how many agent processes may run at
/// once, and when an idle one is stopped (its state stays on disk; the next
/// event starts it again).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwarmProcesses {
    /// Live agent processes per swarm (ConnectorProcesses not counted);
    /// default 256. At the cap, the least recently used idle instance is
    /// passivated; with none idle, a new instance is refused with
    /// `E_INSTANCE_LIMIT`.
    #[serde(default)]
    pub max_live: Option<i64>,
    /// Seconds without a Turn after which an instance's process is
    /// stopped; default 900, 0 never.
    #[serde(default)]
    pub idle_seconds: Option<i64>,
    /// Start the entry agent's process of the instance a `gdn run` chat or
    /// piped input talks to as soon as it starts, so the first line does
    /// not wait for a process to start; default true.
    #[serde(default)]
    pub warm_entry: Option<bool>,
}

/// `Swarm.spec.policy.queues`: every place a message can pile up has a
/// bound; one more is refused with `E_QUEUE_FULL`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwarmQueues {
    /// Events waiting for one instance (in the orchestrator and in the
    /// AgentProcess each); default 1024.
    #[serde(default)]
    pub max_queued_events: Option<i64>,
    /// Inter-agent requests of one instance waiting for answers; default
    /// 256.
    #[serde(default)]
    pub max_pending_requests: Option<i64>,
}

/// `Swarm.spec.policy.lifecycle`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwarmLifecycle {
    /// Maximum instance age in seconds.
    #[serde(default)]
    pub ttl_seconds: Option<i64>,
    /// Grace period before collection, in seconds.
    #[serde(default)]
    pub gc_grace_seconds: Option<i64>,
}

/// `Swarm.spec.policy.shutdown`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwarmShutdown {
    /// Seconds to wait for agents to finish; default 300.
    #[serde(default)]
    pub grace_period_seconds: Option<i64>,
}

impl SwarmSpec {
    /// The default `maxStepsPerTurn`.
    pub const DEFAULT_MAX_STEPS_PER_TURN: u32 = 32;
    /// The default shutdown grace period in seconds.
    pub const DEFAULT_GRACE_PERIOD_SECONDS: u64 = 300;

    /// `policy.maxStepsPerTurn`, default 32.
    pub fn max_steps_per_turn(&self) -> u32 {
        self.policy
            .max_steps_per_turn
            .and_then(|steps| u32::try_from(steps).ok())
            .unwrap_or(Self::DEFAULT_MAX_STEPS_PER_TURN)
    }

    /// The default `policy.queues.maxQueuedEvents`.
    pub const DEFAULT_MAX_QUEUED_EVENTS: usize = 1024;
    /// The default `policy.queues.maxPendingRequests`.
    pub const DEFAULT_MAX_PENDING_REQUESTS: usize = 256;

    /// `policy.queues.maxQueuedEvents`, default 1024.
    pub fn max_queued_events(&self) -> usize {
        self.queue_limit(|queues| queues.max_queued_events)
            .unwrap_or(Self::DEFAULT_MAX_QUEUED_EVENTS)
    }

    /// `policy.queues.maxPendingRequests`, default 256.
    pub fn max_pending_requests(&self) -> usize {
        self.queue_limit(|queues| queues.max_pending_requests)
            .unwrap_or(Self::DEFAULT_MAX_PENDING_REQUESTS)
    }

    fn queue_limit(&self, field: impl Fn(&SwarmQueues) -> Option<i64>) -> Option<usize> {
        self.policy
            .queues
            .as_ref()
            .and_then(field)
            .and_then(|limit| usize::try_from(limit).ok())
            .filter(|limit| *limit > 0)
    }

    /// The default `policy.processes.maxLive`.
    pub const DEFAULT_MAX_LIVE_PROCESSES: usize = 256;
    /// The default `policy.processes.idleSeconds`.
    pub const DEFAULT_IDLE_SECONDS: u64 = 900;

    /// `policy.processes.maxLive`, default 256.
    pub fn max_live_processes(&self) -> usize {
        self.policy
            .processes
            .as_ref()
            .and_then(|processes| processes.max_live)
            .and_then(|limit| usize::try_from(limit).ok())
            .filter(|limit| *limit > 0)
            .unwrap_or(Self::DEFAULT_MAX_LIVE_PROCESSES)
    }

    /// `policy.processes.warmEntry`, default true.
    pub fn warm_entry(&self) -> bool {
        self.policy
            .processes
            .as_ref()
            .and_then(|processes| processes.warm_entry)
            .unwrap_or(true)
    }

    /// `policy.processes.idleSeconds`, default 900 s; `None` (never) for 0.
    pub fn idle_passivation(&self) -> Option<Duration> {
        let seconds = self
            .policy
            .processes
            .as_ref()
            .and_then(|processes| processes.idle_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            .unwrap_or(Self::DEFAULT_IDLE_SECONDS);
        (seconds > 0).then(|| Duration::from_secs(seconds))
    }

    /// `policy.shutdown.gracePeriodSeconds`, default 300 s.
    pub fn shutdown_grace(&self) -> Duration {
        let seconds = self
            .policy
            .shutdown
            .as_ref()
            .and_then(|shutdown| shutdown.grace_period_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            .unwrap_or(Self::DEFAULT_GRACE_PERIOD_SECONDS);
        Duration::from_secs(seconds)
    }
}

/// `Connector.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectorSpec {
    /// `builtin:<name>` or a path relative to the bundle root.
    pub entry: String,
    /// The events it can emit.
    pub events: Vec<EventSchema>,
}

/// One event a Connector declares.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSchema {
    /// Unique within the Connector; what ingress rules match.
    pub name: String,
    /// Declared properties.
    #[serde(default)]
    pub properties: BTreeMap<String, EventProperty>,
}

/// The declared type of an event property.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventProperty {
    /// `string`, `number` or `boolean`.
    #[serde(rename = "type")]
    pub kind: EventPropertyKind,
    /// True when the property may be absent.
    #[serde(default)]
    pub optional: bool,
}

/// The three property types an event may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventPropertyKind {
    /// A string.
    String,
    /// A number.
    Number,
    /// A boolean.
    Boolean,
}

/// `Connection.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConnectionSpec {
    /// The Connector to run.
    pub connector_ref: ObjectRefLike,
    /// The Swarm to deliver to; the bundle's first Swarm when absent.
    #[serde(default)]
    pub swarm_ref: Option<ObjectRefLike>,
    /// Settings handed to the connector.
    #[serde(default)]
    pub config: BTreeMap<String, ValueSource>,
    /// Secrets handed to the connector.
    #[serde(default)]
    pub secrets: BTreeMap<String, ValueSource>,
    /// Routing of connector events to agents.
    #[serde(default)]
    pub ingress: Ingress,
    /// Where the connector posts the swarm's approval requests as messages
    /// with buttons, and who may press them (Goondan's own key: the
    /// original's Connection has `auth`, `verify` and `ingress`, none of
    /// which this overlaps).
    #[serde(default)]
    pub approvals: Option<ConnectionApprovals>,
}

/// `Connection.spec.approvals`: a chat where approval requests are posted
/// with Approve and Deny buttons, for a Connection of the base Telegram or
/// Slack connector ([`ApprovalPlatform::of_entry`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionApprovals {
    /// Telegram: the chat id the bot posts to (a number, or `@channel`).
    #[serde(default)]
    pub chat: Option<PlatformId>,
    /// Slack: the channel id the bot posts to (`C0123…`).
    #[serde(default)]
    pub channel: Option<PlatformId>,
    /// The platform user ids whose presses decide; empty or absent:
    /// anyone who can press the button in that chat.
    #[serde(default)]
    pub deciders: Vec<PlatformId>,
}

impl ConnectionApprovals {
    /// The chat or channel the requests go to, whichever is set.
    pub fn target(&self) -> Option<String> {
        self.chat
            .as_ref()
            .or(self.channel.as_ref())
            .map(PlatformId::to_string)
    }

    /// The deciders as the platform spells its ids.
    pub fn decider_ids(&self) -> Vec<String> {
        self.deciders.iter().map(PlatformId::to_string).collect()
    }
}

/// A chat, channel or user id as YAML may write it: Telegram's are
/// numbers (`-100123`), Slack's are strings (`C0123`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PlatformId {
    /// Written as a string.
    Text(String),
    /// Written as a whole number.
    Number(i64),
}

impl std::fmt::Display for PlatformId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlatformId::Text(text) => f.write_str(text.trim()),
            PlatformId::Number(number) => write!(f, "{number}"),
        }
    }
}

/// The chat platforms that deliver approval requests, by the entry of the
/// base connector that speaks to them. The one table of which connectors
/// can: the loader checks `approvals` against it, and the ConnectorProcess
/// picks its chat client with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalPlatform {
    /// `builtin:telegram` and `builtin:telegram-polling`: a message with
    /// an inline keyboard in `approvals.chat`.
    Telegram,
    /// `builtin:slack`: a message with an actions block in
    /// `approvals.channel`.
    Slack,
}

impl ApprovalPlatform {
    /// The platform a Connector's `entry` speaks to, when it can deliver
    /// approvals.
    pub fn of_entry(entry: &str) -> Option<ApprovalPlatform> {
        match entry {
            "builtin:telegram" | "builtin:telegram-polling" => Some(ApprovalPlatform::Telegram),
            "builtin:slack" => Some(ApprovalPlatform::Slack),
            _ => None,
        }
    }

    /// The key of `approvals` that names where requests go (`chat` or
    /// `channel`).
    pub fn target_key(self) -> &'static str {
        match self {
            ApprovalPlatform::Telegram => "chat",
            ApprovalPlatform::Slack => "channel",
        }
    }

    /// The platform's name, as decisions name their deciders
    /// (`telegram:<user id>`).
    pub fn name(self) -> &'static str {
        match self {
            ApprovalPlatform::Telegram => "telegram",
            ApprovalPlatform::Slack => "slack",
        }
    }
}

/// `Connection.spec.ingress`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ingress {
    /// Tried in order; the first match routes the event.
    #[serde(default)]
    pub rules: Vec<IngressRule>,
}

/// One ingress rule.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngressRule {
    /// What to match; absent matches every event.
    #[serde(default, rename = "match")]
    pub matcher: Option<IngressMatch>,
    /// Where to send a matching event.
    pub route: IngressRoute,
}

/// `ingress.rules[].match`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngressMatch {
    /// The connector event name.
    #[serde(default)]
    pub event: Option<String>,
    /// Property values that must all be equal.
    #[serde(default)]
    pub properties: JsonObject,
}

/// `ingress.rules[].route`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IngressRoute {
    /// The target agent; the Swarm's entry agent when absent.
    #[serde(default)]
    pub agent_ref: Option<ObjectRefLike>,
    /// A fixed instance key (excludes `instanceKeyProperty`).
    #[serde(default)]
    pub instance_key: Option<String>,
    /// The event property holding the instance key.
    #[serde(default)]
    pub instance_key_property: Option<String>,
    /// Prefix for a key read from `instanceKeyProperty`.
    #[serde(default)]
    pub instance_key_prefix: Option<String>,
}

/// `Package.spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PackageSpec {
    /// Semver, required for publishing only.
    #[serde(default)]
    pub version: Option<String>,
    /// What the package is.
    #[serde(default)]
    pub description: Option<String>,
    /// `public` (default) or `restricted`.
    #[serde(default)]
    pub access: Option<PackageAccess>,
    /// Packages this one depends on.
    #[serde(default)]
    pub dependencies: Vec<PackageDependency>,
    /// Where to publish and fetch.
    #[serde(default)]
    pub registry: Option<PackageRegistry>,
}

/// `Package.spec.access`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PackageAccess {
    /// Anyone may install it.
    Public,
    /// Installing needs authentication.
    Restricted,
}

/// One dependency.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageDependency {
    /// For example `@goondan/base`.
    pub name: String,
    /// A semver range.
    pub version: String,
}

/// `Package.spec.registry`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageRegistry {
    /// The registry URL.
    pub url: String,
}
