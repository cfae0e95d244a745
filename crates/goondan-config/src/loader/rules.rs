//! Stage two of loading: rules that look at one resource at a time (names,
//! ranges, exclusive fields, ValueSources, entry and prompt paths, tool
//! export schemas). Rules that follow references are in `resolve`.

use super::parse::{Local, Parsed, Site};
use crate::approvals::{compile_pattern, SHELL_TOOL};
use crate::base_package;
use crate::codes::Code;
use crate::env::EnvMap;
use crate::paths::{resolve_in_root, PathProblem};
use crate::resource::Kind;
use crate::spec::{AgentSpec, ConnectionSpec, ModelSpec, SwarmApprovals, SwarmSpec, ToolSpec};
use crate::suggest::closest;
use goondan_types::{
    Diagnostic, Entry, EntryParseError, ObjectRef, ScriptRuntime, ToolName, ValueSource,
};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// Model providers this build implements.
pub(crate) const PROVIDERS: [&str; 5] = ["anthropic", "openai", "google", "scripted", "replay"];

/// The single-resource rules, with what they need to see.
pub(crate) struct Rules<'a> {
    pub(crate) root: &'a Path,
    pub(crate) env: &'a EnvMap,
    /// [`crate::LoadOptions::check_script_syntax`].
    pub(crate) check_script_syntax: bool,
    pub(crate) diagnostics: &'a mut Vec<Diagnostic>,
}

impl Rules<'_> {
    pub(crate) fn check_all(&mut self, parsed: &Parsed) {
        if let Some(package) = &parsed.package {
            self.check_package(package);
        }
        for model in &parsed.models {
            self.check_name(&model.site, model.resource.name(), Kind::Model);
            self.check_model(model);
        }
        for agent in &parsed.agents {
            self.check_name(&agent.site, agent.resource.name(), Kind::Agent);
            self.check_agent(agent);
        }
        for swarm in &parsed.swarms {
            self.check_name(&swarm.site, swarm.resource.name(), Kind::Swarm);
            self.check_swarm(swarm);
        }
        self.check_resources(parsed);
        for connection in &parsed.connections {
            self.check_name(
                &connection.site,
                connection.resource.name(),
                Kind::Connection,
            );
            self.check_connection(connection);
        }
    }

    /// The rules of the kinds a package offers to the bundles that depend
    /// on it: Tools, Extensions and Connectors (entries relative to
    /// [`Rules::root`]).
    pub(crate) fn check_resources(&mut self, parsed: &Parsed) {
        for tool in &parsed.tools {
            self.check_name(&tool.site, tool.resource.name(), Kind::Tool);
            self.check_entry(&tool.site, &tool.resource.spec.entry, Kind::Tool);
            self.check_tool(tool);
        }
        for extension in &parsed.extensions {
            self.check_name(&extension.site, extension.resource.name(), Kind::Extension);
            self.check_entry(
                &extension.site,
                &extension.resource.spec.entry,
                Kind::Extension,
            );
        }
        for connector in &parsed.connectors {
            self.check_name(&connector.site, connector.resource.name(), Kind::Connector);
            self.check_entry(
                &connector.site,
                &connector.resource.spec.entry,
                Kind::Connector,
            );
            let spec = &connector.resource.spec;
            if spec.events.is_empty() {
                self.push(
                    connector
                        .site
                        .at(
                            Code::Schema,
                            "a Connector must declare at least one event",
                            "spec.events",
                        )
                        .with_suggestion("add `events: [{ name: my_event }]`"),
                );
            }
            let mut seen = HashMap::new();
            for (index, event) in spec.events.iter().enumerate() {
                let field = format!("spec.events[{index}].name");
                if event.name.is_empty() {
                    self.push(connector.site.at(
                        Code::Schema,
                        "an event name must not be empty",
                        &field,
                    ));
                } else if let Some(first) = seen.insert(event.name.as_str(), index) {
                    self.push(
                        connector
                            .site
                            .at(
                                Code::DuplicateName,
                                format!("event `{}` is declared twice", event.name),
                                &field,
                            )
                            .with_suggestion(format!(
                                "remove one; the first is spec.events[{first}]"
                            )),
                    );
                }
            }
        }
    }

    fn push(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic);
    }

    fn check_name(&mut self, site: &Site, name: &str, kind: Kind) {
        if name.is_empty() {
            self.push(site.at(
                Code::Schema,
                "metadata.name must not be empty",
                "metadata.name",
            ));
            return;
        }
        if kind == Kind::Tool && name.contains("__") {
            self.push(
                site.at(
                    Code::ToolName,
                    format!("Tool name `{name}` contains `__`, the separator of LLM tool names"),
                    "metadata.name",
                )
                .with_suggestion(format!(
                    "rename it, for example `{}`",
                    name.replace("__", "-")
                )),
            );
        }
        if !follows_convention(name) {
            self.push(site.at(Code::NamingConvention, format!("{kind}/{name}: names should be lowercase letters, digits and `-`, start with a letter, and have at most 63 characters"), "metadata.name")
                .with_suggestion(format!("rename it to `{}`", conventional(name))));
        }
    }

    fn check_package(&mut self, package: &Local<crate::spec::PackageSpec>) {
        let name = package.resource.name();
        if name.is_empty() {
            self.push(package.site.at(
                Code::Schema,
                "metadata.name must not be empty",
                "metadata.name",
            ));
        } else {
            let bare = name
                .strip_prefix('@')
                .and_then(|scoped| scoped.split_once('/'));
            let parts_ok = match bare {
                Some((scope, rest)) => follows_convention(scope) && follows_convention(rest),
                None => follows_convention(name),
            };
            if !parts_ok {
                self.push(package.site.at(Code::NamingConvention, format!("Package name `{name}` should be lowercase letters, digits and `-`, optionally scoped as @scope/name"), "metadata.name")
                    .with_suggestion(format!("rename it to `{}`", conventional(name))));
            }
        }
        if let Some(registry) = &package.resource.spec.registry {
            self.check_url(&package.site, &registry.url, "spec.registry.url");
        }
    }

    fn check_url(&mut self, site: &Site, text: &str, field: &str) {
        match url::Url::parse(text) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            Ok(url) => self.push(site.at(
                Code::InvalidUrl,
                format!(
                    "`{text}` uses scheme `{}`; expected http or https",
                    url.scheme()
                ),
                field,
            )),
            Err(error) => self.push(
                site.at(
                    Code::InvalidUrl,
                    format!("`{text}` is not a URL: {error}"),
                    field,
                )
                .with_suggestion("write an absolute URL such as https://api.example.com/v1"),
            ),
        }
    }

    fn check_model(&mut self, model: &Local<ModelSpec>) {
        let spec = &model.resource.spec;
        let site = &model.site;
        if spec.provider.is_empty() {
            self.push(site.at(
                Code::Schema,
                "spec.provider must not be empty",
                "spec.provider",
            ));
        } else if !PROVIDERS.contains(&spec.provider.as_str()) {
            let suggestion = match closest(&spec.provider, PROVIDERS) {
                Some(provider) => format!("did you mean `{provider}`?"),
                None => format!("use one of {}", PROVIDERS.join(", ")),
            };
            self.push(
                site.at(
                    Code::UnsupportedProvider,
                    format!("provider `{}` is not supported", spec.provider),
                    "spec.provider",
                )
                .with_suggestion(suggestion),
            );
        }
        if spec.model.is_empty() {
            self.push(
                site.at(Code::Schema, "spec.model must not be empty", "spec.model")
                    .with_suggestion("write the provider's model id"),
            );
        }
        if let Some(endpoint) = &spec.endpoint {
            self.check_url(site, endpoint, "spec.endpoint");
        }
        if let Some(api_key) = &spec.api_key {
            self.check_value_source(site, api_key, "spec.apiKey");
        }
        if spec.provider == "scripted" {
            if let Some(Value::String(rules)) = spec.options.get("rulesFile") {
                self.check_bundle_file(site, rules, "spec.options.rulesFile");
            }
        }
        if let Some(pricing) = &spec.pricing {
            for (value, field) in [
                (
                    pricing.input_usd_per_million_tokens,
                    "spec.pricing.inputUsdPerMillionTokens",
                ),
                (
                    pricing.output_usd_per_million_tokens,
                    "spec.pricing.outputUsdPerMillionTokens",
                ),
            ] {
                if !value.is_finite() || value < 0.0 {
                    self.push(
                        site.at(
                            Code::OutOfRange,
                            format!("{field} is {value}; a price must be a finite number of US dollars, 0 or more"),
                            field,
                        )
                        .with_suggestion("write the provider's list price per million tokens, for example 3.0"),
                    );
                }
            }
        }
    }

    fn check_agent(&mut self, agent: &Local<AgentSpec>) {
        let spec = &agent.resource.spec;
        let site = &agent.site;
        let params = &spec.model_config.params;
        if let Some(temperature) = params.temperature {
            if !(0.0..=2.0).contains(&temperature) {
                self.push(site.at(
                    Code::OutOfRange,
                    format!("temperature {temperature} is outside 0.0 to 2.0"),
                    "spec.modelConfig.params.temperature",
                ));
            }
        }
        if let Some(max_tokens) = params.max_tokens {
            if max_tokens <= 0 {
                self.push(site.at(
                    Code::OutOfRange,
                    format!("maxTokens {max_tokens} must be a positive integer"),
                    "spec.modelConfig.params.maxTokens",
                ));
            }
        }
        if let Some(prompt) = &spec.prompt {
            match (&prompt.system, &prompt.system_ref) {
                (Some(_), Some(_)) => self.push(
                    site.at(
                        Code::MutuallyExclusive,
                        "prompt.system and prompt.systemRef cannot both be set",
                        "spec.prompt.systemRef",
                    )
                    .with_suggestion("keep the inline prompt or the file, not both"),
                ),
                (None, Some(system_ref)) => {
                    self.check_bundle_file(site, system_ref, "spec.prompt.systemRef");
                }
                _ => {}
            }
        }
    }

    fn check_swarm(&mut self, swarm: &Local<SwarmSpec>) {
        let spec = &swarm.resource.spec;
        let site = &swarm.site;
        if spec.agents.is_empty() {
            self.push(site.at(
                Code::Schema,
                "a Swarm must list at least one agent",
                "spec.agents",
            ));
        }
        if spec.instance_key.as_deref() == Some("") {
            self.push(
                site.at(
                    Code::Schema,
                    "spec.instanceKey must not be empty when given",
                    "spec.instanceKey",
                )
                .with_suggestion("remove it to use metadata.name as the instance key"),
            );
        }
        let policy = &spec.policy;
        let lifecycle = policy.lifecycle.clone().unwrap_or_default();
        let shutdown = policy.shutdown.clone().unwrap_or_default();
        let queues = policy.queues.clone().unwrap_or_default();
        let processes = policy.processes.clone().unwrap_or_default();
        let budget = policy.budget.clone().unwrap_or_default();
        for (value, field) in [
            (
                budget.max_tokens_per_turn,
                "spec.policy.budget.maxTokensPerTurn",
            ),
            (
                budget.max_tokens_per_instance,
                "spec.policy.budget.maxTokensPerInstance",
            ),
        ] {
            if let Some(value) = value.filter(|value| *value <= 0) {
                self.push(
                    site.at(
                        Code::OutOfRange,
                        format!("{field} is {value}; it must be a positive number of tokens"),
                        field,
                    )
                    .with_suggestion("remove the field for no limit"),
                );
            }
        }
        for (value, field) in [
            (
                budget.max_cost_usd_per_instance,
                "spec.policy.budget.maxCostUsdPerInstance",
            ),
            (
                budget.max_cost_usd_per_day,
                "spec.policy.budget.maxCostUsdPerDay",
            ),
        ] {
            if let Some(value) = value.filter(|value| !value.is_finite() || *value <= 0.0) {
                self.push(
                    site.at(
                        Code::OutOfRange,
                        format!("{field} is {value}; it must be a positive number of US dollars"),
                        field,
                    )
                    .with_suggestion("remove the field for no limit"),
                );
            }
        }
        if let Some(value) = processes.idle_seconds {
            if !(0..=i64::from(u32::MAX)).contains(&value) {
                self.push(site.at(
                    Code::OutOfRange,
                    format!("spec.policy.processes.idleSeconds is {value}; it must be 0 (never) or a positive integer"),
                    "spec.policy.processes.idleSeconds",
                ));
            }
        }
        for (value, field) in [
            (processes.max_live, "spec.policy.processes.maxLive"),
            (
                queues.max_queued_events,
                "spec.policy.queues.maxQueuedEvents",
            ),
            (
                queues.max_pending_requests,
                "spec.policy.queues.maxPendingRequests",
            ),
            (policy.max_steps_per_turn, "spec.policy.maxStepsPerTurn"),
            (lifecycle.ttl_seconds, "spec.policy.lifecycle.ttlSeconds"),
            (
                lifecycle.gc_grace_seconds,
                "spec.policy.lifecycle.gcGraceSeconds",
            ),
            (
                shutdown.grace_period_seconds,
                "spec.policy.shutdown.gracePeriodSeconds",
            ),
        ] {
            match value {
                Some(value) if value <= 0 || value > i64::from(u32::MAX) => {
                    self.push(site.at(
                        Code::OutOfRange,
                        format!("{field} is {value}; it must be a positive integer"),
                        field,
                    ));
                }
                _ => {}
            }
        }
        if let Some(approvals) = &policy.approvals {
            self.check_swarm_approvals(site, approvals);
        }
    }

    /// `spec.policy.approvals`: its patterns compile, it gates some tool,
    /// `unless` has the shell tool to read. Its `agents` are checked
    /// where the Swarm's members are resolved.
    fn check_swarm_approvals(&mut self, site: &Site, approvals: &SwarmApprovals) {
        if approvals.tools.iter().all(|tool| tool.trim().is_empty()) {
            self.push(
                site.at(
                    Code::ApprovalsGate,
                    "spec.policy.approvals gates no tool",
                    "spec.policy.approvals.tools",
                )
                .with_suggestion("list the export names to gate, e.g. `tools: [bash__exec]`"),
            );
        }
        if !approvals.unless.is_empty()
            && !approvals.tools.iter().any(|tool| tool.trim() == SHELL_TOOL)
        {
            self.push(
                site.at(
                    Code::ApprovalsGate,
                    format!("spec.policy.approvals.unless allows {SHELL_TOOL} commands, but tools does not list {SHELL_TOOL}"),
                    "spec.policy.approvals.unless",
                )
                .with_suggestion(format!("add {SHELL_TOOL} to spec.policy.approvals.tools, or remove unless")),
            );
        }
        let patterns = approvals
            .when
            .iter()
            .map(|(argument, pattern)| (format!("spec.policy.approvals.when.{argument}"), pattern))
            .chain(approvals.unless.iter().enumerate().map(|(index, pattern)| {
                (format!("spec.policy.approvals.unless[{index}]"), pattern)
            }));
        for (field, pattern) in patterns {
            if let Err(error) = compile_pattern(pattern) {
                self.push(
                    site.at(
                        Code::ApprovalsGate,
                        format!("{field} `{pattern}` is not a valid pattern: {error}"),
                        &field,
                    )
                    .with_suggestion(
                        "write a glob (`rm *`) or a regex that compiles (`re:^rm( |$)`)",
                    ),
                );
            }
        }
        if let Some(value) = approvals
            .timeout_seconds
            .filter(|value| *value <= 0 || *value > i64::from(u32::MAX))
        {
            self.push(
                site.at(
                    Code::OutOfRange,
                    format!("spec.policy.approvals.timeoutSeconds is {value}; it must be a positive integer"),
                    "spec.policy.approvals.timeoutSeconds",
                )
                .with_suggestion("remove it to wait for ever"),
            );
        }
    }

    fn check_tool(&mut self, tool: &Local<ToolSpec>) {
        let spec = &tool.resource.spec;
        let site = &tool.site;
        if let Some(limit) = spec.error_message_limit {
            if limit <= 0 {
                self.push(
                    site.at(
                        Code::OutOfRange,
                        format!("errorMessageLimit {limit} must be a positive integer"),
                        "spec.errorMessageLimit",
                    )
                    .with_suggestion(format!(
                        "remove it to use the default {}",
                        ToolSpec::DEFAULT_ERROR_MESSAGE_LIMIT
                    )),
                );
            }
        }
        if spec.exports.is_empty() {
            self.push(site.at(
                Code::Schema,
                "a Tool must declare at least one export",
                "spec.exports",
            ));
        }
        let mut seen = HashMap::new();
        for (index, export) in spec.exports.iter().enumerate() {
            let name_field = format!("spec.exports[{index}].name");
            if export.name.is_empty() {
                self.push(site.at(
                    Code::Schema,
                    "an export name must not be empty",
                    &name_field,
                ));
            } else if let Some(first) = seen.insert(export.name.as_str(), index) {
                self.push(
                    site.at(
                        Code::DuplicateName,
                        format!("export `{}` is declared twice", export.name),
                        &name_field,
                    )
                    .with_suggestion(format!("rename one; the first is spec.exports[{first}]")),
                );
            }
            if export.name.contains("__") {
                self.push(
                    site.at(
                        Code::ToolName,
                        format!(
                            "export name `{}` contains `__`, the separator of LLM tool names",
                            export.name
                        ),
                        &name_field,
                    )
                    .with_suggestion(format!(
                        "rename it, for example `{}`",
                        export.name.replace("__", "_")
                    )),
                );
            } else if !export.name.is_empty() && !ToolName::is_export_name(&export.name) {
                // tool.md §6.2: lowercase letters, digits, `_` and `-`.
                self.push(
                    site.at(
                        Code::ToolName,
                        format!(
                            "export name `{}` may hold only lowercase letters, digits, `_` and `-`",
                            export.name
                        ),
                        &name_field,
                    )
                    .with_suggestion(format!(
                        "rename it `{}` (and its handler); a model that calls the old name still reaches it",
                        ToolName::conforming_export(&export.name)
                    )),
                );
            }
            if export.description.trim().is_empty() {
                self.push(site.at(
                    Code::Schema,
                    "an export needs a description; the LLM reads it to choose tools",
                    &format!("spec.exports[{index}].description"),
                ));
            }
            let parameters_field = format!("spec.exports[{index}].parameters");
            if let Some(problem) = json_schema_problem(&export.parameters) {
                self.push(
                    site.at(
                        Code::JsonSchema,
                        format!("parameters is not a valid JSON Schema: {problem}"),
                        &parameters_field,
                    )
                    .with_suggestion("write `type: object` with `properties` and `required`"),
                );
            }
        }
    }

    fn check_connection(&mut self, connection: &Local<ConnectionSpec>) {
        let spec = &connection.resource.spec;
        let site = &connection.site;
        for (key, source) in &spec.config {
            self.check_value_source(site, source, &format!("spec.config.{key}"));
        }
        for (key, source) in &spec.secrets {
            self.check_value_source(site, source, &format!("spec.secrets.{key}"));
        }
        for (index, rule) in spec.ingress.rules.iter().enumerate() {
            let route = &rule.route;
            if route.instance_key.is_some() && route.instance_key_property.is_some() {
                self.push(
                    site.at(
                        Code::MutuallyExclusive,
                        "route.instanceKey and route.instanceKeyProperty cannot both be set",
                        &format!("spec.ingress.rules[{index}].route.instanceKeyProperty"),
                    )
                    .with_suggestion(
                        "use a fixed instanceKey or read it from an event property, not both",
                    ),
                );
            }
        }
    }

    fn check_value_source(&mut self, site: &Site, source: &ValueSource, field: &str) {
        match (&source.value, &source.value_from) {
            (Some(_), Some(_)) => self.push(
                site.at(
                    Code::ValueSource,
                    "value and valueFrom cannot both be set",
                    field,
                )
                .with_suggestion("keep one of them"),
            ),
            (None, None) => self.push(
                site.at(
                    Code::ValueSource,
                    "a value source needs value or valueFrom",
                    field,
                )
                .with_suggestion("write `valueFrom: { env: NAME }`"),
            ),
            (Some(_), None) => {}
            (None, Some(value_from)) => match (&value_from.env, &value_from.secret_ref) {
                (Some(_), Some(_)) => self.push(
                    site.at(
                        Code::ValueSource,
                        "valueFrom.env and valueFrom.secretRef cannot both be set",
                        &format!("{field}.valueFrom"),
                    )
                    .with_suggestion("keep one of them"),
                ),
                (None, None) => self.push(site.at(
                    Code::ValueSource,
                    "valueFrom needs env or secretRef",
                    &format!("{field}.valueFrom"),
                )),
                (Some(name), None) => {
                    if self.env.get(name).is_none() {
                        self.push(site.at(Code::EnvMissingWarning, format!("environment variable {name} is not set; starting this will fail"), &format!("{field}.valueFrom.env"))
                            .with_suggestion(format!("set {name} in the environment, .env, .env.local or an --env-file")));
                    }
                }
                (None, Some(secret)) => {
                    let well_formed = ObjectRef::parse(&secret.reference)
                        .is_ok_and(|reference| reference.kind == "Secret");
                    if !well_formed {
                        self.push(site.at(
                            Code::ValueSource,
                            format!(
                                "secretRef.ref `{}` must have the form Secret/<name>",
                                secret.reference
                            ),
                            &format!("{field}.valueFrom.secretRef.ref"),
                        ));
                        return;
                    }
                    let candidates = crate::env::secret_variables(secret);
                    if candidates.iter().all(|name| self.env.get(name).is_none()) {
                        self.push(
                            site.at(
                                Code::EnvMissingWarning,
                                format!(
                                    "secret {} (key {}) is not set; starting this will fail",
                                    secret.reference, secret.key
                                ),
                                &format!("{field}.valueFrom.secretRef"),
                            )
                            .with_suggestion(format!(
                                "set one of {} in the environment, .env, .env.local or an --env-file",
                                candidates.join(", ")
                            )),
                        );
                    }
                }
            },
        }
    }

    /// An `entry`, classified by [`Entry::parse`] as the runtime does: a
    /// known `builtin:` name, or an existing file inside the root that a
    /// plugin host can run (a known extension, or the executable bit).
    /// Python Connectors cannot run yet.
    fn check_entry(&mut self, site: &Site, entry: &str, kind: Kind) {
        let field = "spec.entry";
        match Entry::parse(entry) {
            Err(EntryParseError::Empty) => self.push(
                site.at(Code::Schema, "spec.entry must not be empty", field)
                    .with_suggestion("write `builtin:<name>`"),
            ),
            // `builtin:` alone is reported like any other unknown name.
            Err(EntryParseError::EmptyBuiltinName) => self.check_builtin(site, "", kind),
            Ok(Entry::Native { name }) => self.check_builtin(site, &name, kind),
            Ok(Entry::Script { path, runtime }) => {
                if !self.check_bundle_file(site, &path, field) {
                    return;
                }
                // The Python shim runs tools and extensions; a connector's
                // default export is a JavaScript shape.
                if kind == Kind::Connector && runtime == ScriptRuntime::Python {
                    let builtins: Vec<&str> = base_package::builtin_names(kind).collect();
                    self.push(site.at(Code::EntryUnsupported, format!("entry `{path}` is a Python script; script Connectors run as JavaScript, TypeScript or executables"), field)
                        .with_suggestion(format!("write the connector as `export default async function (ctx)` in a .js or .ts file, or use `entry: builtin:<name>` (one of {})", builtins.join(", "))));
                    return;
                }
                if runtime == ScriptRuntime::Executable && !self.is_executable(&path) {
                    self.push(site.at(Code::EntryNoRuntime, format!("entry `{path}` has no known extension and is not executable; looked for .ts/.mts/.cts (run by bun or node), .js/.mjs/.cjs (node), .py (python3), or a file with the executable bit that speaks the plugin protocol"), field)
                        .with_suggestion(format!("rename it to a known extension, or `chmod +x {path}` (see docs/plugin-protocol.md)")));
                }
                if self.check_script_syntax
                    && matches!(
                        runtime,
                        ScriptRuntime::TypeScript | ScriptRuntime::JavaScript
                    )
                {
                    self.check_script_syntax(site, &path);
                }
            }
        }
    }

    /// A TypeScript or JavaScript entry (already known to exist inside the
    /// root) must parse: a syntax error is reported here, at its line in
    /// the script, rather than when a plugin host fails to load it. An
    /// unreadable file is left to the plugin host, which names the cause.
    fn check_script_syntax(&mut self, site: &Site, written: &str) {
        let Ok(path) = resolve_in_root(self.root, written) else {
            return;
        };
        let Ok(source) = std::fs::read_to_string(&path) else {
            return;
        };
        let Err(error) = goondan_typescript::check_syntax(&source, Path::new(written)) else {
            return;
        };
        let file = written.strip_prefix("./").unwrap_or(written);
        let fallback = Code::EntrySyntax.default_suggestion();
        for problem in error.problems() {
            let suggestion = problem.help.as_deref().unwrap_or(fallback);
            self.push(
                Code::EntrySyntax
                    .diagnostic(format!(
                        "the entry of {} does not parse: {}",
                        site.label, problem.message
                    ))
                    .with_file(file)
                    .with_resource(site.label.clone())
                    .with_location(problem.line as usize, problem.column as usize)
                    .with_suggestion(suggestion),
            );
        }
    }

    /// Whether bundle file `written` (already known to exist inside the
    /// root) has an executable bit.
    fn is_executable(&self, written: &str) -> bool {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            resolve_in_root(self.root, written)
                .ok()
                .and_then(|path| std::fs::metadata(path).ok())
                .is_some_and(|metadata| metadata.permissions().mode() & 0o111 != 0)
        }
        #[cfg(not(unix))]
        {
            let _ = written;
            false
        }
    }

    /// A `builtin:<name>` entry: `name` must be a built-in of `kind`.
    fn check_builtin(&mut self, site: &Site, name: &str, kind: Kind) {
        if base_package::find(kind, name).is_some() {
            return;
        }
        let names: Vec<&str> = base_package::builtin_names(kind).collect();
        let suggestion = match closest(name, names.iter().copied()) {
            Some(candidate) => format!("did you mean `builtin:{candidate}`?"),
            None => format!("built-in {kind}s are: {}", names.join(", ")),
        };
        self.push(
            site.at(
                Code::BuiltinNotFound,
                format!("there is no built-in {kind} named `{name}`"),
                "spec.entry",
            )
            .with_suggestion(suggestion),
        );
    }

    /// Checks a file path of the bundle; true when it exists inside the
    /// root.
    fn check_bundle_file(&mut self, site: &Site, written: &str, field: &str) -> bool {
        match resolve_in_root(self.root, written) {
            Ok(_) => true,
            Err(PathProblem::NotFound) => {
                self.push(site.at(Code::FileNotFound, PathProblem::NotFound.describe(written), field)
                    .with_suggestion("create the file or fix the path; paths are relative to the folder of goondan.yaml"));
                false
            }
            Err(problem) => {
                self.push(site.at(Code::PathEscape, problem.describe(written), field)
                    .with_suggestion("keep the file inside the bundle folder and use a relative path without `..`"));
                false
            }
        }
    }
}

/// Lowercase letters, digits and `-`, starting with a letter, at most 63.
fn follows_convention(name: &str) -> bool {
    name.len() <= 63
        && name.starts_with(|first: char| first.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A name that follows the convention, derived from one that does not.
fn conventional(name: &str) -> String {
    let mut out = String::new();
    for (index, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if index > 0 && !out.ends_with('-') {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed = out
        .trim_start_matches(|c: char| !c.is_ascii_lowercase())
        .trim_end_matches('-');
    let mut result: String = trimmed.chars().take(63).collect();
    if result.is_empty() {
        result = "resource".into();
    }
    result
}

/// Why a Tool export's `parameters` is not a usable JSON Schema.
pub(crate) fn json_schema_problem(parameters: &serde_json::Map<String, Value>) -> Option<String> {
    if let Some(kind) = parameters.get("type") {
        if kind != "object" {
            return Some(format!(
                "the top-level type must be \"object\", found {kind}"
            ));
        }
    }
    let schema = Value::Object(parameters.clone());
    jsonschema::validator_for(&schema)
        .err()
        .map(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn naming_convention_and_its_fix() {
        for good in ["a", "planner-2", "claude-sonnet"] {
            assert!(follows_convention(good), "{good}");
        }
        for bad in ["Slack_Bot", "-invalid", "2fast", "MyTool", &"a".repeat(64)] {
            assert!(!follows_convention(bad), "{bad}");
            assert!(
                follows_convention(&conventional(bad)),
                "{bad} -> {}",
                conventional(bad)
            );
        }
        assert_eq!(conventional("Slack_Bot"), "slack-bot");
        assert_eq!(conventional("MyTool"), "my-tool");
    }

    #[test]
    fn json_schema_problems() {
        let schema = |value: Value| value.as_object().unwrap().clone();
        assert_eq!(
            json_schema_problem(&schema(
                json!({"type": "object", "properties": {"a": {"type": "string"}}})
            )),
            None
        );
        assert!(json_schema_problem(&schema(json!({"type": "string"}))).is_some());
        assert!(json_schema_problem(&schema(
            json!({"type": "object", "properties": {"a": {"type": "strng"}}})
        ))
        .is_some());
        assert!(json_schema_problem(&schema(json!({"type": "object", "required": "a"}))).is_some());
    }
}
