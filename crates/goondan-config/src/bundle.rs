//! The loaded, fully validated bundle and typed views over it.
//!
//! A `Bundle` exists only when loading found no error, so every reference
//! inside it resolves: views hand out resources, never `Option`s for links.
//! Resources from `@goondan/base` are present only when the bundle refers
//! to them; their [`Origin::package`](crate::Origin) says so.

use crate::env::EnvMap;
use crate::error::ResolveError;
use crate::resource::Resource;
use crate::spec::{
    AgentSpec, ConnectionSpec, ConnectorSpec, EvalSpec, ExtensionSpec, IngressRule, ModelSpec,
    PackageSpec, SwarmSpec, ToolSpec,
};
use goondan_types::{JsonObject, JsonValue, Secrets, ValueSource};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A validated bundle.
#[derive(Debug, Clone)]
pub struct Bundle {
    pub(crate) root: PathBuf,
    pub(crate) package: Option<Resource<PackageSpec>>,
    pub(crate) models: Vec<Resource<ModelSpec>>,
    pub(crate) agents: Vec<Resource<AgentSpec>>,
    pub(crate) swarms: Vec<Resource<SwarmSpec>>,
    pub(crate) tools: Vec<Resource<ToolSpec>>,
    pub(crate) extensions: Vec<Resource<ExtensionSpec>>,
    pub(crate) connectors: Vec<Resource<ConnectorSpec>>,
    pub(crate) connections: Vec<Resource<ConnectionSpec>>,
    pub(crate) evals: Vec<Resource<EvalSpec>>,
    pub(crate) agent_links: Vec<AgentLinks>,
    pub(crate) swarm_links: Vec<SwarmLinks>,
    pub(crate) connection_links: Vec<ConnectionLinks>,
    pub(crate) env: EnvMap,
}

/// Resolved references of one agent (indices into the bundle's lists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentLinks {
    pub(crate) model: usize,
    pub(crate) tools: Vec<usize>,
    pub(crate) extensions: Vec<usize>,
    /// Per extension, the agent's own `config` for it, when it gives one.
    pub(crate) extension_configs: Vec<Option<JsonObject>>,
    pub(crate) system_prompt: Option<String>,
}

/// Resolved references of one swarm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SwarmLinks {
    pub(crate) entry_agent: usize,
    pub(crate) agents: Vec<usize>,
}

/// Resolved references of one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectionLinks {
    pub(crate) connector: usize,
    pub(crate) swarm: usize,
    /// Per ingress rule, the target agent (`None`: the entry agent).
    pub(crate) rule_agents: Vec<Option<usize>>,
}

impl Bundle {
    /// The bundle root: the folder of `goondan.yaml`, against which
    /// `entry`, `systemRef` and other paths resolve.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The Eval resources (`gdn eval`), in file order.
    pub fn evals(&self) -> &[Resource<EvalSpec>] {
        &self.evals
    }

    /// The Package document, when `goondan.yaml` starts with one.
    pub fn package(&self) -> Option<&Resource<PackageSpec>> {
        self.package.as_ref()
    }

    /// The environment: process variables overlaid by `.env`,
    /// `.env.local` and `--env-file`.
    pub fn env(&self) -> &EnvMap {
        &self.env
    }

    /// Resolves a ValueSource against [`Bundle::env`].
    pub fn resolve(&self, source: &ValueSource) -> Result<String, ResolveError> {
        self.env.resolve(source)
    }

    /// The environment variables the bundle's ValueSources read
    /// (`valueFrom.env`, or the variables of a `valueFrom.secretRef`, of
    /// every Model's `apiKey` and every Connection's
    /// `config` and `secrets`, and every `{valueFrom: {env}}` object inside
    /// an Extension's `config` or an agent's config for an extension, such
    /// as the `mcp` extension's headers), sorted. The orchestrator treats
    /// them as secrets: it hands their values to its children over the
    /// spawn handshake and withholds them from their exec environment.
    pub fn env_references(&self) -> BTreeSet<String> {
        let mut names = self.typed_env_references();
        let extension_configs = self
            .extensions
            .iter()
            .map(|extension| &extension.spec.config)
            .chain(
                self.agent_links
                    .iter()
                    .flat_map(|links| links.extension_configs.iter().flatten()),
            );
        for config in extension_configs {
            for value in config.values() {
                collect_value_from_env(value, &mut names);
            }
        }
        names
    }

    fn typed_env_references(&self) -> BTreeSet<String> {
        let model_keys = self
            .models
            .iter()
            .filter_map(|model| model.spec.api_key.as_ref());
        let connection_values = self.connections.iter().flat_map(|connection| {
            connection
                .spec
                .config
                .values()
                .chain(connection.spec.secrets.values())
        });
        let mut names = BTreeSet::new();
        for source in model_keys.chain(connection_values) {
            add_source_variables(source, &mut names);
        }
        names
    }

    /// The values of the secret variables: every
    /// [`Bundle::env_references`] name and each of `extra_names` (the
    /// providers' usual key variables) that has a value in
    /// [`Bundle::env`].
    pub fn secrets(&self, extra_names: &[&str]) -> Secrets {
        let references = self.env_references();
        self.secret_values(
            references
                .iter()
                .map(String::as_str)
                .chain(extra_names.iter().copied()),
        )
    }

    /// The values of the variables `names` that have one in
    /// [`Bundle::env`]: what one child is handed when it should hold only
    /// the secrets its own resources read ([`AgentView::env_references`],
    /// [`ConnectionView::env_references`]).
    pub fn secret_values<'n>(&self, names: impl IntoIterator<Item = &'n str>) -> Secrets {
        names
            .into_iter()
            .filter_map(|name| Some((name, self.env.get(name)?)))
            .collect()
    }

    /// Every Model of the bundle (and the packages it uses).
    pub fn models(&self) -> &[Resource<ModelSpec>] {
        &self.models
    }

    /// A Model by name (local definitions first).
    pub fn model(&self, name: &str) -> Option<&Resource<ModelSpec>> {
        self.models.iter().find(|model| model.name() == name)
    }

    /// Every Tool the bundle defines or uses.
    pub fn tools(&self) -> &[Resource<ToolSpec>] {
        &self.tools
    }

    /// Every Extension the bundle defines or uses.
    pub fn extensions(&self) -> &[Resource<ExtensionSpec>] {
        &self.extensions
    }

    /// Every Connector the bundle defines or uses.
    pub fn connectors(&self) -> &[Resource<ConnectorSpec>] {
        &self.connectors
    }

    /// Every agent.
    pub fn agents(&self) -> impl ExactSizeIterator<Item = AgentView<'_>> {
        (0..self.agents.len()).map(move |index| AgentView {
            bundle: self,
            index,
        })
    }

    /// An agent by name.
    pub fn agent(&self, name: &str) -> Option<AgentView<'_>> {
        self.agents().find(|agent| agent.name() == name)
    }

    /// Every swarm, in load order (the first is the Connection default).
    pub fn swarms(&self) -> impl ExactSizeIterator<Item = SwarmView<'_>> {
        (0..self.swarms.len()).map(move |index| SwarmView {
            bundle: self,
            index,
        })
    }

    /// A swarm by name.
    pub fn swarm(&self, name: &str) -> Option<SwarmView<'_>> {
        self.swarms().find(|swarm| swarm.name() == name)
    }

    /// The swarm `gdn run` starts without `--swarm`: the one named
    /// `default`, else the only one; `None` when that is ambiguous.
    pub fn default_swarm(&self) -> Option<SwarmView<'_>> {
        self.swarm("default").or_else(|| {
            let mut swarms = self.swarms();
            match (swarms.next(), swarms.next()) {
                (Some(only), None) => Some(only),
                _ => None,
            }
        })
    }

    /// Every connection.
    pub fn connections(&self) -> impl ExactSizeIterator<Item = ConnectionView<'_>> {
        (0..self.connections.len()).map(move |index| ConnectionView {
            bundle: self,
            index,
        })
    }
}

/// Adds the variables a typed ValueSource reads (`valueFrom.env`, or those
/// of a `valueFrom.secretRef`) to `names`.
fn add_source_variables(source: &ValueSource, names: &mut BTreeSet<String>) {
    if let Some(value_from) = &source.value_from {
        names.extend(value_from.env.clone());
        if let Some(secret) = &value_from.secret_ref {
            names.extend(crate::env::secret_variables(secret));
        }
    }
}

/// Adds the `env` of every `{valueFrom: {env: NAME}}` object inside
/// `value` to `names`.
fn collect_value_from_env(value: &JsonValue, names: &mut BTreeSet<String>) {
    match value {
        JsonValue::Object(object) => {
            let env = object
                .get("valueFrom")
                .and_then(|from| from.get("env"))
                .and_then(JsonValue::as_str);
            if let Some(env) = env {
                names.insert(env.to_string());
            }
            for inner in object.values() {
                collect_value_from_env(inner, names);
            }
        }
        JsonValue::Array(items) => {
            for inner in items {
                collect_value_from_env(inner, names);
            }
        }
        _ => {}
    }
}

/// An agent with its resolved model, tools and extensions.
#[derive(Debug, Clone, Copy)]
pub struct AgentView<'a> {
    bundle: &'a Bundle,
    index: usize,
}

impl<'a> AgentView<'a> {
    fn links(&self) -> &'a AgentLinks {
        &self.bundle.agent_links[self.index]
    }

    /// The Agent resource.
    pub fn resource(&self) -> &'a Resource<AgentSpec> {
        &self.bundle.agents[self.index]
    }

    /// `metadata.name`.
    pub fn name(&self) -> &'a str {
        self.resource().name()
    }

    /// The Model `modelConfig.modelRef` resolves to.
    pub fn model(&self) -> &'a Resource<ModelSpec> {
        &self.bundle.models[self.links().model]
    }

    /// The Tools of `spec.tools`, in order; each Tool's
    /// [`Origin`](crate::Origin) tells whether it is local or from
    /// `@goondan/base`.
    pub fn tools(&self) -> impl ExactSizeIterator<Item = &'a Resource<ToolSpec>> {
        let tools = &self.bundle.tools;
        self.links().tools.iter().map(move |&index| &tools[index])
    }

    /// The Extensions of `spec.extensions`, in order (the first is the
    /// outermost middleware).
    pub fn extensions(&self) -> impl ExactSizeIterator<Item = &'a Resource<ExtensionSpec>> {
        let extensions = &self.bundle.extensions;
        self.links()
            .extensions
            .iter()
            .map(move |&index| &extensions[index])
    }

    /// The config each of [`AgentView::extensions`] runs with for this
    /// agent, in the same order: the Extension's `spec.config` with the
    /// agent's own `config` for it merged over it (top-level keys of the
    /// agent's win).
    pub fn extension_configs(&self) -> impl ExactSizeIterator<Item = JsonObject> + 'a {
        let links = self.links();
        self.extensions()
            .zip(&links.extension_configs)
            .map(|(extension, own)| {
                let mut config = extension.spec.config.clone();
                if let Some(own) = own {
                    config.extend(own.iter().map(|(key, value)| (key.clone(), value.clone())));
                }
                config
            })
    }

    /// The environment variables this agent's own resources read, sorted:
    /// its Model's `apiKey` and every `{valueFrom: {env}}` object in the
    /// config each of its Extensions runs with for it
    /// ([`AgentView::extension_configs`]). Tools declare no ValueSources.
    /// A subset of [`Bundle::env_references`]: what the orchestrator hands
    /// this agent's processes, so no agent holds another agent's key. The
    /// provider's usual key variable is not among them (the caller knows
    /// the provider's).
    pub fn env_references(&self) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        if let Some(api_key) = &self.model().spec.api_key {
            add_source_variables(api_key, &mut names);
        }
        for config in self.extension_configs() {
            for value in config.values() {
                collect_value_from_env(value, &mut names);
            }
        }
        names
    }

    /// The system prompt with `systemRef` already read; `None` when the
    /// agent declares no prompt.
    pub fn system_prompt(&self) -> Option<&'a str> {
        self.links().system_prompt.as_deref()
    }
}

/// A swarm with its resolved agents and policy.
#[derive(Debug, Clone, Copy)]
pub struct SwarmView<'a> {
    bundle: &'a Bundle,
    index: usize,
}

impl<'a> SwarmView<'a> {
    fn links(&self) -> &'a SwarmLinks {
        &self.bundle.swarm_links[self.index]
    }

    /// The Swarm resource.
    pub fn resource(&self) -> &'a Resource<SwarmSpec> {
        &self.bundle.swarms[self.index]
    }

    /// `metadata.name`.
    pub fn name(&self) -> &'a str {
        self.resource().name()
    }

    /// The orchestrator's instance key: `spec.instanceKey`, else
    /// `metadata.name` (`resources.md` §7.5).
    pub fn instance_key(&self) -> &'a str {
        let resource = self.resource();
        resource
            .spec
            .instance_key
            .as_deref()
            .unwrap_or(resource.name())
    }

    /// The entry agent.
    pub fn entry_agent(&self) -> AgentView<'a> {
        AgentView {
            bundle: self.bundle,
            index: self.links().entry_agent,
        }
    }

    /// The member agents, in declaration order.
    pub fn agents(&self) -> impl ExactSizeIterator<Item = AgentView<'a>> {
        let bundle = self.bundle;
        self.links()
            .agents
            .iter()
            .map(move |&index| AgentView { bundle, index })
    }

    /// `policy.maxStepsPerTurn`, default 32.
    pub fn max_steps_per_turn(&self) -> u32 {
        self.resource().spec.max_steps_per_turn()
    }

    /// `policy.shutdown.gracePeriodSeconds`, default 300 s.
    pub fn shutdown_grace(&self) -> Duration {
        self.resource().spec.shutdown_grace()
    }

    /// `policy.queues.maxQueuedEvents`, default 1024.
    pub fn max_queued_events(&self) -> usize {
        self.resource().spec.max_queued_events()
    }

    /// `policy.queues.maxPendingRequests`, default 256.
    pub fn max_pending_requests(&self) -> usize {
        self.resource().spec.max_pending_requests()
    }

    /// `policy.processes.maxLive`, default 256.
    pub fn max_live_processes(&self) -> usize {
        self.resource().spec.max_live_processes()
    }

    /// `policy.processes.idleSeconds`, default 900 s; `None` when 0.
    pub fn idle_passivation(&self) -> Option<Duration> {
        self.resource().spec.idle_passivation()
    }

    /// `policy.processes.warmEntry`, default true.
    pub fn warm_entry(&self) -> bool {
        self.resource().spec.warm_entry()
    }
}

/// A connection with its resolved connector, swarm and routes.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionView<'a> {
    bundle: &'a Bundle,
    index: usize,
}

impl<'a> ConnectionView<'a> {
    fn links(&self) -> &'a ConnectionLinks {
        &self.bundle.connection_links[self.index]
    }

    /// The Connection resource.
    pub fn resource(&self) -> &'a Resource<ConnectionSpec> {
        &self.bundle.connections[self.index]
    }

    /// `metadata.name`.
    pub fn name(&self) -> &'a str {
        self.resource().name()
    }

    /// The environment variables this Connection reads (`valueFrom` in
    /// its `config` and `secrets`; a Connector declares none), sorted:
    /// what the orchestrator hands its ConnectorProcess, and nothing more.
    pub fn env_references(&self) -> BTreeSet<String> {
        let spec = &self.resource().spec;
        let mut names = BTreeSet::new();
        for source in spec.config.values().chain(spec.secrets.values()) {
            add_source_variables(source, &mut names);
        }
        names
    }

    /// The Connector it runs.
    pub fn connector(&self) -> &'a Resource<ConnectorSpec> {
        &self.bundle.connectors[self.links().connector]
    }

    /// The Swarm it delivers to (`swarmRef`, or the bundle's first Swarm).
    pub fn swarm(&self) -> SwarmView<'a> {
        SwarmView {
            bundle: self.bundle,
            index: self.links().swarm,
        }
    }

    /// The ingress rules, each with the agent it routes to (the swarm's
    /// entry agent when the rule names none).
    pub fn rules(&self) -> impl ExactSizeIterator<Item = (&'a IngressRule, AgentView<'a>)> {
        let bundle = self.bundle;
        let swarm = self.swarm();
        self.resource()
            .spec
            .ingress
            .rules
            .iter()
            .zip(self.links().rule_agents.iter())
            .map(move |(rule, agent)| {
                let agent = match agent {
                    Some(index) => AgentView {
                        bundle,
                        index: *index,
                    },
                    None => swarm.entry_agent(),
                };
                (rule, agent)
            })
    }
}
