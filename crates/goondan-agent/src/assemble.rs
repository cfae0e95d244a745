//! Turns a validated bundle into a running [`Agent`]: the Model, the tool
//! and extension definitions, the prompt, the swarm context, and the
//! instance's durable store.

use crate::operators::OperatorDesk;
use crate::{IpcAgents, SwarmView};
use goondan_config::{Bundle, LoadOptions};
use goondan_ipc::RoutingKey;
use goondan_model::{ApiKey, EnvLookup, Model, ModelConfig, ModelParams};
use goondan_plugin::host::HostOptions;
use goondan_plugin::{LaunchOptions, PluginConfig, PluginResolver};
use goondan_runtime::pipeline::{RuntimeAgentContext, RuntimePrompt, RuntimeSwarmContext};
use goondan_runtime::turn::{
    Agent, AgentDefinition, AgentServices, ExtensionDefinition, ToolDefinition,
    ToolExportDefinition,
};
use goondan_runtime::{AsyncResponseInbox, BuiltinCatalog, EntryResolvers, RuntimeEventSink};
use goondan_runtime::{BudgetLimits, Ledger};
use goondan_store::{
    ApprovalLog, ApprovalStore, ExtensionStateStore, FileExtensionState, FileJournal,
    InstanceParts, InstancePaths, InstanceStore, MetadataFile, RuntimeEventLog, StateRoot,
    StateRootSources, SwarmUsageTally, SyncPolicy, TurnJournal,
};
use goondan_types::{Entry, JsonValue, RuntimeEvent, Secrets};
use std::path::PathBuf;
use std::sync::Arc;
use thiserror::Error;

/// The command-line contract of an AgentProcess (`runtime.md` §5.1).
#[derive(Debug, Clone)]
pub struct AgentProcessArgs {
    /// The bundle folder.
    pub bundle_dir: PathBuf,
    /// The Agent resource to run.
    pub agent_name: String,
    /// The instance to serve.
    pub instance_key: String,
    /// The swarm; the bundle's default swarm when absent.
    pub swarm: Option<String>,
    /// `--state-root`, before `GOONDAN_STATE_ROOT` and `~/.goondan`.
    pub state_root: Option<PathBuf>,
    /// `--env-file`.
    pub env_file: Option<PathBuf>,
    /// Where the model records its exchanges (`gdn run --record`).
    pub record_to: Option<PathBuf>,
    /// Run with this Model resource of the bundle instead of the agent's
    /// own (`gdn eval --models`: the same cases across Models).
    pub use_model: Option<String>,
    /// Answer from this cassette instead of calling the Model's provider
    /// (`gdn eval --replay`): the Model keeps its name and model id, so
    /// its recorded requests match and its usage is priced as recorded.
    pub replay_from: Option<PathBuf>,
    /// The instance's working folder relative to the bundle folder (the
    /// `cwd` of `agents__spawn`), created when missing; the bundle folder
    /// when `None`.
    pub workdir: Option<PathBuf>,
    /// How hard the store pushes writes to the disk, as operators write it
    /// (`GOONDAN_DURABILITY`); `turn-commit` when absent.
    pub durability: Option<String>,
    /// The secret variables the orchestrator handed over in the spawn
    /// handshake ([`crate::host::run_agent_process`] fills it). They join
    /// the bundle's environment as if they were process variables, never
    /// this process's real environment, and are masked in tool results.
    pub secrets: Secrets,
    /// The command that prints a TypeScript file as JavaScript (the file
    /// path is appended), for script entries on a Node that cannot strip
    /// types itself (`goondan_plugin::LaunchOptions::strip_types_command`).
    /// `gdn` fills it with its own `strip-types` subcommand once that
    /// exists; `None` leaves such entries to bun or Node 22.6+.
    pub strip_types_command: Option<Vec<String>>,
    /// Where the conversation lives when this instance runs on a cluster
    /// host (`gdn run --cluster`); the local System Root when `None`.
    pub cluster: Option<ClusterLog>,
}

/// The cluster log an AgentProcess of a cluster host writes to.
#[derive(Debug, Clone)]
pub struct ClusterLog {
    /// The NATS servers.
    pub urls: goondan_cluster::ClusterUrls,
    /// The host, named in the log's claims.
    pub host_id: String,
    /// The swarm's workspace, the same on every host.
    pub workspace_id: String,
}

/// Reads a durability level:
/// `process-crash`, `turn-commit` (the default) or `every-event`.
pub fn parse_sync_policy(text: &str) -> Result<SyncPolicy, StartError> {
    match text {
        "process-crash" => Ok(SyncPolicy::ProcessCrash),
        "turn-commit" => Ok(SyncPolicy::TurnCommit),
        "every-event" => Ok(SyncPolicy::EveryEvent),
        other => Err(StartError::new(
            "E_CONFIG_DURABILITY",
            format!("unknown durability level `{other}`"),
            Some("use process-crash, turn-commit or every-event".into()),
        )),
    }
}

/// Why an AgentProcess could not start; sent to the orchestrator as a
/// `runtime.start_error` notice.
#[derive(Debug, Error)]
#[error("{message}")]
pub struct StartError {
    /// A stable code.
    pub code: String,
    /// What went wrong.
    pub message: String,
    /// How to fix it.
    pub suggestion: Option<String>,
}

impl StartError {
    /// A start error with a code, a message and an optional fix.
    pub fn new(code: &str, message: impl Into<String>, suggestion: Option<String>) -> Self {
        StartError {
            code: code.to_string(),
            message: message.into(),
            suggestion,
        }
    }
}

/// A started agent and what the host loop needs beside it.
pub struct AssembledAgent {
    /// The agent.
    pub agent: Agent,
    /// Its agents API.
    pub agents: IpcAgents,
    /// Its open approvals, which the orchestrator's decisions reach.
    pub operators: OperatorDesk,
    /// Its `metadata.json`, for status updates.
    pub metadata: MetadataFile,
    /// Its ledger, whose totals go to `metadata.json` after each Turn.
    pub ledger: Arc<Ledger>,
    /// How many events may wait for their Turn
    /// (`policy.queues.maxQueuedEvents`).
    pub max_queued_events: usize,
    /// Span export, when the `OTEL_*` variables turned it on; flushed when
    /// the process stops.
    pub telemetry: Option<goondan_telemetry::SpanExport>,
}

struct EnvLookupMap<'a>(&'a goondan_config::EnvMap);

impl EnvLookup for EnvLookupMap<'_> {
    fn get(&self, name: &str) -> Option<String> {
        self.0.get(name).map(str::to_string)
    }
}

/// Writes runtime events to `runtime-events.jsonl`. A failed append is
/// logged, never fatal: runtime events are observations, not state.
struct StoreEventSink {
    log: RuntimeEventLog,
    /// On a cluster host, the cluster's copy (`gdn logs --cluster`).
    cluster: Option<goondan_cluster::ClusterObserver>,
    /// Whether `step.started` keeps what its model is sent
    /// (`policy.llmInputMessages`).
    llm_input: bool,
}

impl RuntimeEventSink for StoreEventSink {
    fn emit(&self, event: RuntimeEvent) {
        if let Some(cluster) = &self.cluster {
            match serde_json::to_vec(&event) {
                Ok(line) => cluster.publish(line),
                Err(error) => tracing::warn!("runtime event not encoded: {error}"),
            }
        }
        if let Err(error) = self.log.append(&event) {
            tracing::warn!(code = error.code(), "runtime event not recorded: {error}");
        }
    }

    fn wants_llm_input(&self) -> bool {
        self.llm_input
    }
}

/// Writes runtime events to `runtime-events.jsonl` and exports them as
/// OTLP spans. Only built when export is on.
struct ExportingEventSink {
    store: StoreEventSink,
    spans: goondan_telemetry::AgentSpans,
}

impl RuntimeEventSink for ExportingEventSink {
    fn emit(&self, mut event: RuntimeEvent) {
        self.spans.record(&event);
        // Message content goes where the operator asked for it: the spans
        // take it only when they capture content, the file only when the
        // Swarm records it.
        if !self.store.llm_input {
            if let RuntimeEvent::StepStarted {
                llm_input_messages, ..
            } = &mut event
            {
                *llm_input_messages = None;
            }
        }
        self.store.emit(event);
    }

    fn wants_llm_input(&self) -> bool {
        self.store.llm_input || self.spans.captures_message_content()
    }
}

/// Starts span export when the `OTEL_*` variables ask for it; `None`
/// otherwise, and then nothing of it is built. The header variables come
/// from the spawn handshake (the orchestrator withholds them from this
/// process's environment), the others from the environment. A setting
/// that cannot be used is logged with its code and export stays off: an
/// observer must not stop the agent (`gdn run` refuses it up front).
fn start_telemetry(secrets: &Secrets) -> Option<goondan_telemetry::SpanExport> {
    let lookup = |name: &str| {
        secrets
            .get(name)
            .map(str::to_string)
            .or_else(|| std::env::var(name).ok())
    };
    let started =
        goondan_telemetry::OtlpSettings::from_lookup(lookup, "goondan").and_then(|settings| {
            settings
                .map(|settings| {
                    goondan_telemetry::SpanExport::start(
                        &settings,
                        "agent",
                        env!("CARGO_PKG_VERSION"),
                    )
                })
                .transpose()
        });
    match started {
        Ok(export) => export,
        Err(error) => {
            tracing::warn!(
                code = error.code(),
                "span export stays off: {error} ({})",
                error.suggestion()
            );
            None
        }
    }
}

/// Builds the builtin catalog of one agent from its model (the
/// `message-compaction` extension summarizes with the agent's own model).
pub type BuiltinsFor =
    dyn Fn(Arc<dyn Model>, &str, &ModelParams, &Secrets) -> Arc<dyn BuiltinCatalog>;

/// Classifies a resource's entry. The loader classified it with the same
/// parser before the bundle existed, so this fails only if the two
/// disagree.
fn parse_entry(resource: &str, text: &str) -> Result<Entry, StartError> {
    Entry::parse(text).map_err(|error| {
        StartError::new(
            error.code(),
            format!("{resource}: {error}"),
            Some(error.suggestion().to_string()),
        )
    })
}

/// Loads the bundle and starts the agent instance named by `args`: the
/// bundle and the agent's place in it, its Model and definitions, its
/// instance on disk (or in the cluster), then [`Agent::start`].
pub async fn assemble(
    args: &AgentProcessArgs,
    builtins_for: &BuiltinsFor,
    outbound: tokio::sync::mpsc::Sender<goondan_types::IpcMessage>,
) -> Result<AssembledAgent, StartError> {
    let (state_root, bundle) = load_bundle(args)?;
    // Before any tool, plugin host or MCP server can start: none of them
    // may see the control sockets or the conversations (issue 47 #1).
    goondan_sandbox::hide_from_children(state_root.hidden_from_turns());
    let (swarm, agent_view) = find_agent(&bundle, args)?;
    let model_resource = match &args.use_model {
        None => agent_view.model(),
        Some(name) => bundle.model(name).ok_or_else(|| {
            StartError::new(
                "E_MODEL_NOT_FOUND",
                format!("Model/{name} (asked for with --use-model) is not in the bundle"),
                Some("name a Model the bundle defines".into()),
            )
        })?,
    };
    let model = build_model(&bundle, model_resource, args)?;
    let model_params = model_params(&agent_view.resource().spec.model_config.params);
    let tools = tool_definitions(&agent_view)?;
    let mut extensions = extension_definitions(&agent_view)?;
    extensions.extend(swarm_gate(&swarm, &args.agent_name)?);
    let swarm_context = swarm_context(&swarm, &args.agent_name);

    let (store, parts, local_approvals) = open_instance(&state_root, &bundle, &swarm, args)?;
    let stores = conversation_stores(
        args,
        LocalStores {
            journal: parts.journal,
            extension_state: parts.extension_state,
            approvals: local_approvals,
        },
    )?;
    let operators = OperatorDesk::new(
        &args.agent_name,
        &args.instance_key,
        stores.approvals,
        Some(outbound.clone()),
    );
    let ledger = Arc::new(ledger_for(
        &swarm,
        model_resource,
        &goondan_types::RoutingKey::new(&args.agent_name, &args.instance_key).to_string(),
        &store,
        parts.metadata.get().usage.unwrap_or_default(),
    ));

    let me = RoutingKey::new(args.agent_name.clone(), args.instance_key.clone());
    let inbox = AsyncResponseInbox::new();
    let agents = IpcAgents::new(
        me,
        SwarmView {
            swarm_name: swarm.name().to_string(),
            entry_agent: swarm.entry_agent().name().to_string(),
            agents: swarm_context.available_agents.clone(),
        },
        outbound,
        inbox.clone(),
    )
    .with_max_pending_requests(swarm.max_pending_requests());
    let builtins = builtins_for(
        model.clone(),
        &model_resource.spec.model,
        &model_params,
        &args.secrets,
    );
    // What the orchestrator handed over, and whatever else this process
    // resolved itself (an `--env-file` read here).
    let secrets: goondan_types::Secrets = bundle
        .secrets(goondan_model::DEFAULT_KEY_VARIABLES)
        .iter()
        .chain(args.secrets.iter())
        .collect();
    let scripts = script_resolver(&bundle, args, &secrets);
    let definition = AgentDefinition {
        agent_name: args.agent_name.clone(),
        instance_key: args.instance_key.clone(),
        model,
        model_name: model_resource.spec.model.clone(),
        model_params,
        max_steps_per_turn: swarm.max_steps_per_turn(),
        tools,
        extensions,
        runtime_agent: RuntimeAgentContext {
            name: args.agent_name.clone(),
            bundle_root: Some(bundle.root().display().to_string()),
            prompt: Some(RuntimePrompt {
                system: agent_view.system_prompt().map(str::to_string),
            }),
        },
        swarm: swarm_context,
        workdir: workdir(&bundle, args)?,
        tool_call_policy: Default::default(),
        secrets,
    };

    let telemetry = start_telemetry(&args.secrets);
    let store_events = StoreEventSink {
        log: parts.runtime_events,
        cluster: stores.observer,
        llm_input: swarm.resource().spec.policy.records_llm_input(),
    };
    let runtime_events = event_sink(store_events, telemetry.as_ref(), || {
        goondan_telemetry::AgentIdentity {
            agent_name: args.agent_name.clone(),
            instance_key: args.instance_key.clone(),
            provider: model_resource.spec.provider.clone(),
            model: model_resource.spec.model.clone(),
            secrets: definition.secrets.clone(),
        }
    });
    let services = AgentServices {
        journal: stores.journal,
        extension_state: stores.extension_state,
        entries: Arc::new(EntryResolvers::new(builtins).with_scripts(Arc::new(scripts))),
        agents: Arc::new(agents.clone()),
        inbox,
        runtime_events,
        ledger: Some(Arc::clone(&ledger)),
        operators: Arc::new(operators.clone()),
    };
    let agent = Agent::start(definition, services).await.map_err(|error| {
        StartError::new(
            error.code(),
            error.to_string(),
            error.suggestion().map(str::to_string),
        )
    })?;
    Ok(AssembledAgent {
        agent,
        agents,
        operators,
        metadata: parts.metadata,
        ledger,
        max_queued_events: swarm.max_queued_events(),
        telemetry,
    })
}

/// Resolves the System Root and loads the bundle; a bundle with an error
/// is refused with its first diagnostic.
fn load_bundle(args: &AgentProcessArgs) -> Result<(StateRoot, Bundle), StartError> {
    let state_root = StateRootSources::from_process_env(args.state_root.clone())
        .resolve()
        .map_err(|error| StartError::new(error.code(), error.to_string(), error.suggestion()))?;
    let outcome = goondan_config::load_bundle(
        &args.bundle_dir,
        &LoadOptions {
            env_file: args.env_file.clone(),
            process_env_overlay: args.secrets.clone(),
            packages_root: Some(state_root.packages_dir()),
            // The orchestrator checked the scripts' syntax before spawning
            // this process; the parser stays out of it.
            check_script_syntax: false,
            ..LoadOptions::default()
        },
    )
    .map_err(|error| {
        StartError::new(error.code().as_str(), error.to_string(), error.suggestion())
    })?;
    match outcome.bundle {
        Some(bundle) => Ok((state_root, bundle)),
        None => {
            let first = outcome.diagnostics.iter().find(|d| d.is_error());
            Err(StartError::new(
                first.map_or("E_CONFIG", |d| d.code.as_str()),
                first.map_or_else(
                    || "the bundle did not load".to_string(),
                    ToString::to_string,
                ),
                Some("run `gdn validate` on the bundle".into()),
            ))
        }
    }
}

/// The swarm `args` names (the bundle's default one when none) and the
/// agent in it.
fn find_agent<'a>(
    bundle: &'a Bundle,
    args: &AgentProcessArgs,
) -> Result<(goondan_config::SwarmView<'a>, goondan_config::AgentView<'a>), StartError> {
    let swarm = match &args.swarm {
        Some(name) => bundle.swarm(name),
        None => bundle.default_swarm(),
    }
    .ok_or_else(|| {
        StartError::new(
            "E_CONFIG_REF_NOT_FOUND",
            format!(
                "swarm `{}` is not defined",
                args.swarm.as_deref().unwrap_or("default")
            ),
            Some("pass --swarm with a Swarm of the bundle".into()),
        )
    })?;
    let agent_view = swarm
        .agents()
        .find(|agent| agent.name() == args.agent_name)
        .ok_or_else(|| {
            StartError::new(
                "E_AGENT_NOT_FOUND",
                format!(
                    "agent `{}` is not part of swarm `{}`",
                    args.agent_name,
                    swarm.name()
                ),
                None,
            )
        })?;
    Ok((swarm, agent_view))
}

/// Builds the agent's Model from its resource, with its API key resolved
/// from the bundle's environment.
fn build_model(
    bundle: &Bundle,
    model_resource: &goondan_config::Resource<goondan_config::spec::ModelSpec>,
    args: &AgentProcessArgs,
) -> Result<Arc<dyn Model>, StartError> {
    let api_key = match &model_resource.spec.api_key {
        // A replay needs no key, whatever the provider recorded.
        Some(_) if args.replay_from.is_some() => None,
        Some(_) if !goondan_model::needs_api_key(&model_resource.spec.provider) => None,
        Some(source) => Some(ApiKey::new(bundle.resolve(source).map_err(|error| {
            StartError::new(
                "E_MODEL_API_KEY_MISSING",
                format!("Model/{}: {error}", model_resource.metadata.name),
                Some("set the variable in the environment or in .env".into()),
            )
        })?)),
        None => None,
    };
    let (provider, options, api_key) = match &args.replay_from {
        None => (
            model_resource.spec.provider.clone(),
            model_resource.spec.options.clone(),
            api_key,
        ),
        Some(cassette) => {
            let mut options = goondan_types::JsonObject::new();
            options.insert(
                "cassette".into(),
                JsonValue::String(cassette.display().to_string()),
            );
            ("replay".to_string(), options, None)
        }
    };
    let model_config = ModelConfig {
        name: model_resource.metadata.name.clone(),
        provider,
        model: model_resource.spec.model.clone(),
        endpoint: model_resource.spec.endpoint.clone(),
        api_key,
        options,
        base_dir: bundle.root().to_path_buf(),
        record_to: args.record_to.clone(),
        agent: Some(args.agent_name.clone()),
    };
    goondan_model::build(&model_config, &EnvLookupMap(bundle.env())).map_err(|error| {
        StartError::new(
            error.code(),
            error.to_string(),
            error.suggestion().map(str::to_string),
        )
    })
}

/// The Agent's `spec.modelConfig.params` as the model takes them.
fn model_params(params: &goondan_config::spec::AgentModelParams) -> ModelParams {
    ModelParams {
        temperature: params.temperature,
        max_tokens: params.max_tokens.and_then(|n| u64::try_from(n).ok()),
        top_p: params.top_p,
        extra: params.extra.clone(),
    }
}

/// The Tools the agent lists, with their exports.
fn tool_definitions(
    agent_view: &goondan_config::AgentView<'_>,
) -> Result<Vec<ToolDefinition>, StartError> {
    agent_view
        .tools()
        .map(|tool| {
            Ok(ToolDefinition {
                name: tool.metadata.name.clone(),
                entry: parse_entry(&format!("Tool/{}", tool.metadata.name), &tool.spec.entry)?,
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
                error_message_limit: tool
                    .spec
                    .error_message_limit
                    .and_then(|n| usize::try_from(n).ok()),
            })
        })
        .collect()
}

/// The Extensions the agent lists, each with its merged config.
fn extension_definitions(
    agent_view: &goondan_config::AgentView<'_>,
) -> Result<Vec<ExtensionDefinition>, StartError> {
    agent_view
        .extensions()
        .zip(agent_view.extension_configs())
        .map(|(extension, config)| {
            Ok(ExtensionDefinition {
                name: extension.metadata.name.clone(),
                entry: parse_entry(
                    &format!("Extension/{}", extension.metadata.name),
                    &extension.spec.entry,
                )?,
                config: JsonValue::Object(config),
            })
        })
        .collect()
}

/// The Swarm's `policy.approvals` gate, when it applies to `agent_name`:
/// registered after the agent's own extensions and innermost, so nothing
/// the agent lists can skip it or change a call's arguments behind it.
fn swarm_gate(
    swarm: &goondan_config::SwarmView<'_>,
    agent_name: &str,
) -> Result<Option<ExtensionDefinition>, StartError> {
    let Some(gate) = &swarm.resource().spec.policy.approvals else {
        return Ok(None);
    };
    if gate
        .agents
        .as_ref()
        .is_some_and(|agents| !agents.iter().any(|agent| agent == agent_name))
    {
        return Ok(None);
    }
    let mut config = serde_json::Map::new();
    config.insert("tools".into(), serde_json::json!(gate.tools));
    config.insert("when".into(), serde_json::json!(gate.when));
    config.insert("unless".into(), serde_json::json!(gate.unless));
    if let Some(seconds) = gate.timeout_seconds {
        config.insert("timeoutSeconds".into(), serde_json::json!(seconds));
    }
    if let Some(verdict) = gate.on_timeout {
        config.insert("onTimeout".into(), serde_json::json!(verdict.as_str()));
    }
    Ok(Some(ExtensionDefinition {
        entry: parse_entry(
            &format!("Swarm/{} spec.policy.approvals", swarm.name()),
            &format!(
                "{}{}",
                goondan_config::BUILTIN_PREFIX,
                goondan_config::approvals::SWARM_GATE_ENTRY
            ),
        )?,
        // Also its state's key (a file name): the gate keeps no state, and
        // no name with a `/` may reach the store.
        name: "policy.approvals".into(),
        config: JsonValue::Object(config),
    }))
}

/// What the agent knows of its swarm: every agent (sorted) and the ones it
/// may call (all but itself).
fn swarm_context(swarm: &goondan_config::SwarmView<'_>, agent_name: &str) -> RuntimeSwarmContext {
    let mut available_agents: Vec<String> = swarm.agents().map(|a| a.name().to_string()).collect();
    available_agents.sort();
    let callable_agents = available_agents
        .iter()
        .filter(|name| *name != agent_name)
        .cloned()
        .collect();
    RuntimeSwarmContext {
        swarm_name: swarm.name().to_string(),
        entry_agent: swarm.entry_agent().name().to_string(),
        self_agent: agent_name.to_string(),
        available_agents,
        callable_agents,
    }
}

/// Where the approvals of an instance on one host are, opened only when
/// the instance is not a cluster's.
struct LocalApprovals {
    paths: InstancePaths,
    sync_policy: SyncPolicy,
}

/// Opens the instance under the System Root (never inside the project),
/// with the durability `args` asks for.
fn open_instance(
    state_root: &StateRoot,
    bundle: &Bundle,
    swarm: &goondan_config::SwarmView<'_>,
    args: &AgentProcessArgs,
) -> Result<(InstanceStore, InstanceParts, LocalApprovals), StartError> {
    state_root
        .ensure_outside_project(bundle.root())
        .map_err(|error| StartError::new(error.code(), error.to_string(), error.suggestion()))?;
    let sync_policy = match args.durability.as_deref() {
        Some(level) => parse_sync_policy(level)?,
        None => SyncPolicy::default(),
    };
    let store = InstanceStore::new(state_root.workspace(swarm.instance_key()))
        .with_sync_policy(sync_policy);
    let instance = store
        .open(&args.agent_name, &args.instance_key)
        .map_err(|error| StartError::new(error.code(), error.to_string(), error.suggestion()))?;
    for warning in instance.warnings() {
        tracing::warn!(agent = %args.agent_name, warning, "instance opened with a warning");
    }
    let approvals = LocalApprovals {
        paths: instance.paths().clone(),
        sync_policy,
    };
    Ok((store, instance.into_parts(), approvals))
}

/// Where script entries run: plugin processes owned by this agent, so they
/// die with it, their stderr masked with the same secrets.
fn script_resolver(bundle: &Bundle, args: &AgentProcessArgs, secrets: &Secrets) -> PluginResolver {
    PluginResolver::new(PluginConfig {
        bundle_root: bundle.root().to_path_buf(),
        launch: LaunchOptions {
            strip_types_command: args.strip_types_command.clone(),
            ..LaunchOptions::default()
        },
        host: HostOptions {
            secrets: secrets.clone(),
            ..HostOptions::default()
        },
    })
}

/// The instance's working folder: `args.workdir` inside the bundle,
/// created when missing, else the bundle folder.
fn workdir(bundle: &Bundle, args: &AgentProcessArgs) -> Result<PathBuf, StartError> {
    let Some(relative) = &args.workdir else {
        return Ok(bundle.root().to_path_buf());
    };
    let workdir = bundle.root().join(relative);
    std::fs::create_dir_all(&workdir).map_err(|error| {
        StartError::new(
            "E_AGENT_WORKDIR",
            format!(
                "the working folder {} could not be created: {error}",
                workdir.display()
            ),
            Some("spawn the instance with a `cwd` inside the bundle that can be written".into()),
        )
    })?;
    Ok(workdir)
}

/// Where the conversation, the extension state and the approvals are
/// kept: the local instance's files, or on a cluster host the cluster's
/// log (with its observer, which copies runtime events to the cluster),
/// so all three move with the instance.
struct ConversationStores {
    journal: Box<dyn TurnJournal>,
    extension_state: Box<dyn ExtensionStateStore>,
    approvals: Box<dyn ApprovalLog>,
    observer: Option<goondan_cluster::ClusterObserver>,
}

/// The instance's stores on this host's disk.
struct LocalStores {
    journal: FileJournal,
    extension_state: FileExtensionState,
    approvals: LocalApprovals,
}

/// Picks the [`ConversationStores`] `args` asks for.
fn conversation_stores(
    args: &AgentProcessArgs,
    local: LocalStores,
) -> Result<ConversationStores, StartError> {
    let Some(log) = &args.cluster else {
        // Opened under the instance's lock, which the local journal holds.
        let approvals = ApprovalStore::open(&local.approvals.paths, local.approvals.sync_policy)
            .map_err(|error| {
                StartError::new(error.code(), error.to_string(), error.suggestion())
            })?;
        return Ok(ConversationStores {
            journal: Box::new(local.journal),
            extension_state: Box::new(local.extension_state),
            approvals: Box::new(approvals),
            observer: None,
        });
    };
    let journal = open_cluster_log(log, &args.agent_name, &args.instance_key)?;
    Ok(ConversationStores {
        extension_state: Box::new(journal.extension_state()),
        approvals: Box::new(journal.approvals()),
        observer: Some(journal.observer()),
        journal: Box::new(journal),
    })
}

/// The sink of the agent's runtime events: the store's, behind the span
/// exporter when export is on (`identity` names the spans' agent).
fn event_sink(
    store_events: StoreEventSink,
    telemetry: Option<&goondan_telemetry::SpanExport>,
    identity: impl FnOnce() -> goondan_telemetry::AgentIdentity,
) -> Arc<dyn RuntimeEventSink> {
    match telemetry {
        Some(export) => Arc::new(ExportingEventSink {
            store: store_events,
            spans: export.agent_spans(identity()),
        }),
        None => Arc::new(store_events),
    }
}

/// The instance's ledger: its Model's price (`spec.pricing`, else the
/// vendored list), the Swarm's `policy.budget`, and the lifetime totals
/// stored in `metadata.json`.
fn ledger_for(
    swarm: &goondan_config::SwarmView<'_>,
    model: &goondan_config::Resource<goondan_config::spec::ModelSpec>,
    instance: &str,
    store: &InstanceStore,
    totals: goondan_store::UsageTotals,
) -> Ledger {
    let price = goondan_model::price_of(
        &model.spec.provider,
        &model.spec.model,
        model.spec.pricing.as_ref(),
    );
    if price.is_none() && goondan_model::needs_api_key(&model.spec.provider) {
        tracing::info!(
            model = %model.metadata.name,
            "no price known for {}/{}; tokens are counted, costs are not (set Model.spec.pricing)",
            model.spec.provider,
            model.spec.model
        );
    }
    let ledger =
        Ledger::new(instance, model.metadata.name.clone(), price).with_instance_totals(totals);
    match &swarm.resource().spec.policy.budget {
        Some(budget) => {
            // The loader refused non-positive limits, so the casts keep
            // every value.
            let limits = BudgetLimits {
                max_tokens_per_turn: budget.max_tokens_per_turn.map(|value| value as u64),
                max_tokens_per_instance: budget.max_tokens_per_instance.map(|value| value as u64),
                max_cost_usd_per_instance: budget.max_cost_usd_per_instance,
                max_cost_usd_per_day: budget.max_cost_usd_per_day,
            };
            ledger.with_budget(limits, SwarmUsageTally::new(store.workspace()))
        }
        None => ledger,
    }
}

/// Opens the instance's log in the cluster, fencing every earlier owner:
/// from here on, only this process writes to it.
fn open_cluster_log(
    log: &ClusterLog,
    agent_name: &str,
    instance_key: &str,
) -> Result<goondan_cluster::ClusterJournal, StartError> {
    let cluster_error = |error: goondan_cluster::ClusterError| {
        StartError::new(error.code(), error.to_string(), error.suggestion())
    };
    let options = goondan_cluster::ClusterOptions::from_process_env().map_err(cluster_error)?;
    let address =
        goondan_cluster::subject::InstanceAddress::new(&log.workspace_id, agent_name, instance_key);
    goondan_cluster::ClusterJournal::open(&log.urls, options, address, &log.host_id)
        .map_err(cluster_error)
}
