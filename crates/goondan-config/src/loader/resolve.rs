//! Stage three of loading: names and references. Reports duplicate names,
//! resolves every ObjectRef against the bundle and `@goondan/base`
//! (parsing a built-in manifest only when something refers to it), and
//! checks the rules that span resources: swarm membership, model
//! capabilities, prompt consumers, declared connector events.

use super::packages::InstalledPackage;
use super::parse::{read_manifest, Local, Parsed, Site};
use crate::base_package::{self, BASE_PACKAGE, PROMPT_CONSUMER, REQUIRED_TOOLS_GUARD};
use crate::bundle::{AgentLinks, ConnectionLinks, SwarmLinks};
use crate::codes::Code;
use crate::resource::{Kind, Resource};
use crate::spec::{
    ApprovalPlatform, ConnectionApprovals, ConnectorSpec, EventSchema, ExtensionSpec, ToolSpec,
};
use crate::suggest::closest;
use goondan_types::entry::BUILTIN_PREFIX;
use goondan_types::{
    Diagnostic, Entry, JsonObject, JsonValue, ObjectRef, ObjectRefLike, API_VERSION,
};
use std::collections::HashMap;
use std::path::Path;

/// Connector entries whose events are named by their sender, so an ingress
/// rule may match any event name. (`cli` JSON lines may name theirs too,
/// but a rule for it is far more often a typo of `stdin_message`.)
const SENDER_NAMED_EVENTS: [&str; 1] = ["builtin:webhook"];

/// A resolved reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// Index into the bundle's own list of that kind.
    Local(usize),
    /// Index into the materialized `@goondan/base` list of that kind.
    Base(usize),
    /// Index into the installed packages' list of that kind.
    Package(usize),
}

/// Where each list of the bundle starts: its own resources, then the
/// materialized built-ins, then the installed packages' resources.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Offsets {
    pub(crate) base: usize,
    pub(crate) package: usize,
}

impl Offsets {
    fn place(self, target: Target) -> usize {
        match target {
            Target::Local(index) => index,
            Target::Base(index) => self.base + index,
            Target::Package(index) => self.package + index,
        }
    }
}

/// The Tools, Extensions and Connectors of the installed packages, with
/// the package each came from.
#[derive(Debug, Default)]
pub(crate) struct PackageStore {
    pub(crate) tools: Vec<Resource<ToolSpec>>,
    pub(crate) extensions: Vec<Resource<ExtensionSpec>>,
    pub(crate) connectors: Vec<Resource<ConnectorSpec>>,
    /// The loaded package names.
    names: Vec<String>,
}

impl PackageStore {
    fn new(packages: Vec<InstalledPackage>) -> PackageStore {
        let mut store = PackageStore::default();
        for package in packages {
            store.names.push(package.name);
            let parsed = package.parsed;
            store
                .tools
                .extend(parsed.tools.into_iter().map(|local| local.resource));
            store
                .extensions
                .extend(parsed.extensions.into_iter().map(|local| local.resource));
            store
                .connectors
                .extend(parsed.connectors.into_iter().map(|local| local.resource));
        }
        store
    }

    fn has_package(&self, name: &str) -> bool {
        self.names.iter().any(|known| known == name)
    }

    /// `(package, name)` of each resource of `kind`, in list order.
    fn entries(&self, kind: Kind) -> Vec<(&str, &str)> {
        fn of<S>(resources: &[Resource<S>]) -> Vec<(&str, &str)> {
            resources
                .iter()
                .map(|resource| {
                    (
                        resource.origin.package.as_deref().unwrap_or_default(),
                        resource.name(),
                    )
                })
                .collect()
        }
        match kind {
            Kind::Tool => of(&self.tools),
            Kind::Extension => of(&self.extensions),
            Kind::Connector => of(&self.connectors),
            _ => Vec::new(),
        }
    }

    /// Indices of the resources of `kind` named `name`, in `package` when
    /// given.
    fn find(&self, kind: Kind, name: &str, package: Option<&str>) -> Vec<usize> {
        self.entries(kind)
            .into_iter()
            .enumerate()
            .filter(|(_, (owner, candidate))| {
                *candidate == name && package.is_none_or(|package| package == *owner)
            })
            .map(|(index, _)| index)
            .collect()
    }
}

/// Built-in resources parsed so far.
#[derive(Debug, Default)]
pub(crate) struct BaseStore {
    pub(crate) tools: Vec<Resource<ToolSpec>>,
    pub(crate) extensions: Vec<Resource<ExtensionSpec>>,
    pub(crate) connectors: Vec<Resource<ConnectorSpec>>,
    index: HashMap<(Kind, &'static str), usize>,
}

impl BaseStore {
    fn materialize(
        &mut self,
        manifest: &'static base_package::BaseManifest,
    ) -> Result<usize, Box<Diagnostic>> {
        if let Some(index) = self.index.get(&(manifest.kind, manifest.name)) {
            return Ok(*index);
        }
        let index = match manifest.kind {
            Kind::Tool => {
                self.tools.push(read_manifest(manifest, BASE_PACKAGE)?);
                self.tools.len() - 1
            }
            Kind::Extension => {
                self.extensions.push(read_manifest(manifest, BASE_PACKAGE)?);
                self.extensions.len() - 1
            }
            Kind::Connector => {
                self.connectors.push(read_manifest(manifest, BASE_PACKAGE)?);
                self.connectors.len() - 1
            }
            other => {
                return Err(Box::new(Code::Schema.diagnostic(format!(
                    "built-in manifests of kind {other} are not supported"
                ))))
            }
        };
        self.index.insert((manifest.kind, manifest.name), index);
        Ok(index)
    }
}

/// Names of the bundle's own resources: first index and place per name.
struct LocalIndex {
    names: HashMap<Kind, Vec<(String, usize, String)>>,
}

impl LocalIndex {
    fn find(&self, kind: Kind, name: &str) -> Option<usize> {
        self.names
            .get(&kind)?
            .iter()
            .find(|(candidate, _, _)| candidate == name)
            .map(|(_, index, _)| *index)
    }

    fn place(&self, kind: Kind, name: &str) -> Option<&str> {
        self.names
            .get(&kind)?
            .iter()
            .find(|(candidate, _, _)| candidate == name)
            .map(|(_, _, place)| place.as_str())
    }

    fn names(&self, kind: Kind) -> impl Iterator<Item = &str> {
        self.names
            .get(&kind)
            .into_iter()
            .flatten()
            .map(|(name, _, _)| name.as_str())
    }
}

fn index_kind<S>(
    kind: Kind,
    locals: &[Local<S>],
    index: &mut LocalIndex,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let entries = index.names.entry(kind).or_default();
    for (position, local) in locals.iter().enumerate() {
        let name = local.resource.name();
        if let Some((_, _, place)) = entries.iter().find(|(candidate, _, _)| candidate == name) {
            diagnostics.push(
                local
                    .site
                    .at(
                        Code::DuplicateName,
                        format!("{kind}/{name} is defined twice"),
                        "metadata.name",
                    )
                    .with_suggestion(format!("rename one; the first is at {place}")),
            );
            continue;
        }
        entries.push((name.to_string(), position, local.site.place()));
    }
}

/// Links of every resource, or `None` entries where resolution failed
/// (which always left an error behind).
pub(crate) struct Resolved {
    pub(crate) base: BaseStore,
    pub(crate) packages: PackageStore,
    pub(crate) agents: Vec<Option<PendingAgent>>,
    pub(crate) swarms: Vec<Option<PendingSwarm>>,
    pub(crate) connections: Vec<Option<PendingConnection>>,
}

pub(crate) struct PendingAgent {
    pub(crate) model: usize,
    pub(crate) tools: Vec<Target>,
    pub(crate) extensions: Vec<Target>,
    pub(crate) extension_configs: Vec<Option<JsonObject>>,
    pub(crate) system_prompt: Option<String>,
}

pub(crate) struct PendingSwarm {
    pub(crate) entry_agent: usize,
    pub(crate) agents: Vec<usize>,
}

pub(crate) struct PendingConnection {
    pub(crate) connector: Target,
    pub(crate) swarm: usize,
    pub(crate) rule_agents: Vec<Option<usize>>,
}

impl PendingAgent {
    pub(crate) fn finish(self, tools: Offsets, extensions: Offsets) -> AgentLinks {
        AgentLinks {
            model: self.model,
            tools: self.tools.into_iter().map(|t| tools.place(t)).collect(),
            extensions: self
                .extensions
                .into_iter()
                .map(|t| extensions.place(t))
                .collect(),
            extension_configs: self.extension_configs,
            system_prompt: self.system_prompt,
        }
    }
}

impl PendingSwarm {
    pub(crate) fn finish(self) -> SwarmLinks {
        SwarmLinks {
            entry_agent: self.entry_agent,
            agents: self.agents,
        }
    }
}

impl PendingConnection {
    pub(crate) fn finish(self, connectors: Offsets) -> ConnectionLinks {
        ConnectionLinks {
            connector: connectors.place(self.connector),
            swarm: self.swarm,
            rule_agents: self.rule_agents,
        }
    }
}

struct Resolver<'a> {
    index: LocalIndex,
    broken: &'a [(Option<Kind>, String)],
    base: BaseStore,
    packages: PackageStore,
    local_package: Option<String>,
    diagnostics: &'a mut Vec<Diagnostic>,
}

/// Runs stage three.
pub(crate) fn resolve(
    parsed: &Parsed,
    packages: Vec<InstalledPackage>,
    root: &Path,
    diagnostics: &mut Vec<Diagnostic>,
) -> Resolved {
    let mut index = LocalIndex {
        names: HashMap::new(),
    };
    index_kind(Kind::Model, &parsed.models, &mut index, diagnostics);
    index_kind(Kind::Agent, &parsed.agents, &mut index, diagnostics);
    index_kind(Kind::Swarm, &parsed.swarms, &mut index, diagnostics);
    index_kind(Kind::Tool, &parsed.tools, &mut index, diagnostics);
    index_kind(Kind::Extension, &parsed.extensions, &mut index, diagnostics);
    index_kind(Kind::Connector, &parsed.connectors, &mut index, diagnostics);
    index_kind(
        Kind::Connection,
        &parsed.connections,
        &mut index,
        diagnostics,
    );
    let mut resolver = Resolver {
        index,
        broken: &parsed.broken,
        base: BaseStore::default(),
        packages: PackageStore::new(packages),
        local_package: parsed
            .package
            .as_ref()
            .map(|package| package.resource.name().to_string()),
        diagnostics,
    };
    let agents = parsed
        .agents
        .iter()
        .map(|agent| resolver.agent(parsed, agent, root))
        .collect();
    let swarms = parsed
        .swarms
        .iter()
        .map(|swarm| resolver.swarm(swarm, &parsed.agents))
        .collect();
    let connections = parsed
        .connections
        .iter()
        .map(|connection| resolver.connection(parsed, connection))
        .collect();
    Resolved {
        base: resolver.base,
        packages: resolver.packages,
        agents,
        swarms,
        connections,
    }
}

/// Where a reference is looked for, decided by its `package` field.
struct SearchScope<'r> {
    /// The bundle's own resources.
    local: bool,
    /// The built-in `@goondan/base` manifests.
    base: bool,
    /// The installed packages.
    packages: bool,
    /// The one package searched, when the reference names an installed one.
    only_package: Option<&'r str>,
}

/// What a reference's name matched in each place of its scope.
struct Matches {
    local: Option<usize>,
    builtin: Option<&'static base_package::BaseManifest>,
    in_packages: Vec<usize>,
}

impl Resolver<'_> {
    /// Resolves one reference of `expected` kind written at `field`: checks
    /// its form, decides where to look, and takes the one match, reporting
    /// a reference that matches in several places or in none.
    fn reference(
        &mut self,
        site: &Site,
        expected: Kind,
        written: &ObjectRefLike,
        field: &str,
    ) -> Option<Target> {
        let reference = self.checked_reference(site, expected, written, field)?;
        let name = reference.name.as_str();
        let scope = self.search_scope(site, expected, &reference, field)?;
        let matches = Matches {
            local: self.index.find(expected, name).filter(|_| scope.local),
            builtin: base_package::find(expected, name).filter(|_| scope.base),
            in_packages: if scope.packages {
                self.packages.find(expected, name, scope.only_package)
            } else {
                Vec::new()
            },
        };
        let n_matches = usize::from(matches.local.is_some())
            + usize::from(matches.builtin.is_some())
            + matches.in_packages.len();
        if n_matches > 1 {
            self.report_ambiguous(site, expected, name, &matches, field);
            return None;
        }
        if let Some(index) = matches.in_packages.first() {
            return Some(Target::Package(*index));
        }
        match (matches.local, matches.builtin) {
            (Some(index), _) => Some(Target::Local(index)),
            (None, Some(manifest)) => match self.base.materialize(manifest) {
                Ok(index) => Some(Target::Base(index)),
                Err(diagnostic) => {
                    self.diagnostics.push(*diagnostic);
                    None
                }
            },
            // A resource of that name that failed its own checks was
            // reported already; saying it is missing would mislead.
            (None, None)
                if scope.local
                    && self.broken.iter().any(|(kind, broken)| {
                        kind.is_none_or(|kind| kind == expected) && broken == name
                    }) =>
            {
                None
            }
            (None, None) => {
                self.report_not_found(site, expected, name, &scope, field);
                None
            }
        }
    }

    /// The reference as written, when it parses, names the `expected` kind
    /// and this `apiVersion`; else reports why not.
    fn checked_reference(
        &mut self,
        site: &Site,
        expected: Kind,
        written: &ObjectRefLike,
        field: &str,
    ) -> Option<ObjectRef> {
        let reference = match written.to_object_ref() {
            Ok(reference) => reference,
            Err(error) => {
                self.diagnostics.push(
                    site.at(Code::RefInvalid, error.to_string(), field)
                        .with_suggestion(format!("write `{expected}/<name>`")),
                );
                return None;
            }
        };
        let name = reference.name.as_str();
        if reference.kind != expected.as_str() {
            let suggestion = match Kind::parse(&reference.kind) {
                None => match closest(&reference.kind, Kind::ALL.map(Kind::as_str)) {
                    Some(kind) if kind == expected.as_str() => {
                        format!("did you mean {kind}/{name}?")
                    }
                    _ => format!("write {expected}/{name}"),
                },
                Some(_) => format!("{field} takes a {expected} reference"),
            };
            self.diagnostics.push(
                site.at(
                    Code::RefInvalid,
                    format!(
                        "{} refers to {}/{name}, but {field} must name a {expected}",
                        site.label, reference.kind
                    ),
                    field,
                )
                .with_suggestion(suggestion),
            );
            return None;
        }
        if let Some(api_version) = &reference.api_version {
            if api_version != API_VERSION {
                self.diagnostics.push(
                    site.at(
                        Code::ApiVersion,
                        format!("reference apiVersion `{api_version}` is not supported"),
                        field,
                    )
                    .with_suggestion(format!("use {API_VERSION} or drop apiVersion")),
                );
                return None;
            }
        }
        Some(reference)
    }

    /// Where `reference` is looked for: everywhere without a `package`,
    /// else only in the package it names; a package that is not loaded is
    /// reported.
    fn search_scope<'r>(
        &mut self,
        site: &Site,
        expected: Kind,
        reference: &'r ObjectRef,
        field: &str,
    ) -> Option<SearchScope<'r>> {
        let scope = |local, base, packages, only_package| SearchScope {
            local,
            base,
            packages,
            only_package,
        };
        match reference.package.as_deref() {
            None => Some(scope(true, true, true, None)),
            Some(BASE_PACKAGE) => Some(scope(false, true, false, None)),
            Some(package) if Some(package) == self.local_package.as_deref() => {
                Some(scope(true, false, false, None))
            }
            Some(package) if self.packages.has_package(package) => {
                Some(scope(false, false, true, Some(package)))
            }
            Some(package) => {
                let name = &reference.name;
                let mut available = vec![BASE_PACKAGE.to_string()];
                available.extend(self.packages.names.iter().cloned());
                self.diagnostics.push(
                        site.at(Code::PackageNotFound, format!("{} refers to {expected}/{name} in package `{package}`, which is not loaded", site.label), field)
                            .with_suggestion(format!("add `{package}` to the Package's spec.dependencies and run `gdn package install`; loaded now: {}", available.join(", "))),
                    );
                None
            }
        }
    }

    /// Reports a reference that `matches` in more than one place, naming
    /// each and the `package` field that would pick one.
    fn report_ambiguous(
        &mut self,
        site: &Site,
        expected: Kind,
        name: &str,
        matches: &Matches,
        field: &str,
    ) {
        let mut places = Vec::new();
        if matches.local.is_some() {
            let place = self.index.place(expected, name).unwrap_or("the bundle");
            places.push(format!("the bundle ({place})"));
        }
        if matches.builtin.is_some() {
            places.push(BASE_PACKAGE.to_string());
        }
        let entries = self.packages.entries(expected);
        let mut owners: Vec<&str> = matches
            .in_packages
            .iter()
            .map(|index| entries[*index].0)
            .collect();
        owners.dedup();
        places.extend(owners.iter().map(|owner| owner.to_string()));
        let first_package = if matches.builtin.is_some() {
            BASE_PACKAGE
        } else {
            owners.first().copied().unwrap_or(BASE_PACKAGE)
        };
        self.diagnostics.push(
            site.at(Code::RefAmbiguous, format!("{} refers to {expected}/{name}, which is defined in {}", site.label, places.join(" and ")), field)
                .with_suggestion(format!("add `package: \"{first_package}\"` (or the package you mean) to the reference, or rename the bundle's {expected}/{name}")),
        );
    }

    /// Reports a reference that matches nowhere in its `scope`, with the
    /// closest name there as a suggestion.
    fn report_not_found(
        &mut self,
        site: &Site,
        expected: Kind,
        name: &str,
        scope: &SearchScope<'_>,
        field: &str,
    ) {
        let diagnostic = site.at(
            Code::RefNotFound,
            format!(
                "{} refers to {expected}/{name}, which is not defined",
                site.label
            ),
            field,
        );
        let local_names: Vec<&str> = if scope.local {
            self.index.names(expected).collect()
        } else {
            Vec::new()
        };
        let base_names: Vec<&str> = if scope.base {
            base_package::builtin_names(expected).collect()
        } else {
            Vec::new()
        };
        let package_entries: Vec<(&str, &str)> = self
            .packages
            .entries(expected)
            .into_iter()
            .filter(|(owner, _)| {
                scope.packages && scope.only_package.is_none_or(|only| only == *owner)
            })
            .collect();
        let candidates = local_names
            .iter()
            .chain(base_names.iter())
            .copied()
            .chain(package_entries.iter().map(|(_, candidate)| *candidate));
        let diagnostic = match closest(name, candidates) {
            Some(candidate) => {
                let owner = package_entries
                    .iter()
                    .find(|(_, known)| *known == candidate)
                    .map(|(owner, _)| owner.to_string());
                let place = match self.index.place(expected, candidate) {
                    Some(place) if scope.local => place.to_string(),
                    _ if base_names.contains(&candidate) => BASE_PACKAGE.to_string(),
                    _ => owner.unwrap_or_else(|| BASE_PACKAGE.to_string()),
                };
                diagnostic
                    .with_suggestion(format!("did you mean {expected}/{candidate} ({place})?"))
            }
            None => diagnostic.with_suggestion(format!(
                "define {expected}/{name}, or check the kind, name and package"
            )),
        };
        self.diagnostics.push(diagnostic);
    }

    fn agent(
        &mut self,
        parsed: &Parsed,
        agent: &Local<crate::spec::AgentSpec>,
        root: &Path,
    ) -> Option<PendingAgent> {
        let spec = &agent.resource.spec;
        let site = &agent.site;
        let model = self.reference(
            site,
            Kind::Model,
            &spec.model_config.model_ref,
            "spec.modelConfig.modelRef",
        );
        let mut tools = Vec::new();
        let mut complete = model.is_some();
        for (position, entry) in spec.tools.iter().enumerate() {
            match self.reference(
                site,
                Kind::Tool,
                entry.reference(),
                &format!("spec.tools[{position}]"),
            ) {
                Some(target) => tools.push(target),
                None => complete = false,
            }
        }
        let mut extensions = Vec::new();
        let mut extension_configs = Vec::new();
        for (position, entry) in spec.extensions.iter().enumerate() {
            match self.reference(
                site,
                Kind::Extension,
                entry.reference(),
                &format!("spec.extensions[{position}]"),
            ) {
                Some(target) => {
                    extensions.push(target);
                    extension_configs.push(entry.config().cloned());
                }
                None => complete = false,
            }
        }
        let model = match model {
            Some(Target::Local(index)) => Some(index),
            _ => None,
        };
        if let Some(model_index) = model {
            let model_resource = &parsed.models[model_index].resource;
            if !spec.tools.is_empty()
                && model_resource.spec.capability("toolCalling") == Some(false)
            {
                self.diagnostics.push(
                    site.at(
                        Code::CapabilityMismatch,
                        format!(
                            "{} has tools, but Model/{} declares toolCalling: false",
                            site.label,
                            model_resource.name()
                        ),
                        "spec.tools",
                    )
                    .with_suggestion("remove the tools or use a model with tool calling"),
                );
            }
        }
        if complete && !spec.required_tools.is_empty() {
            self.require_tools(
                parsed,
                site,
                &spec.required_tools,
                &tools,
                &mut extensions,
                &mut extension_configs,
            );
        }
        let system_prompt = match &spec.prompt {
            None => None,
            Some(prompt) => {
                let consumed = extensions.iter().any(|target| {
                    let entry = match target {
                        Target::Local(index) => &parsed.extensions[*index].resource.spec.entry,
                        Target::Base(index) => &self.base.extensions[*index].spec.entry,
                        Target::Package(index) => &self.packages.extensions[*index].spec.entry,
                    };
                    matches!(Entry::parse(entry), Ok(Entry::Native { name }) if name == PROMPT_CONSUMER)
                });
                if complete && !consumed {
                    self.diagnostics.push(
                        site.at(
                            Code::PromptUnused,
                            format!(
                                "{} declares a prompt, but none of its extensions injects it",
                                site.label
                            ),
                            "spec.prompt",
                        )
                        .with_suggestion(format!(
                            "add `- ref: Extension/{PROMPT_CONSUMER}` to spec.extensions"
                        )),
                    );
                }
                match (&prompt.system, &prompt.system_ref) {
                    (Some(system), None) => Some(system.clone()),
                    (None, Some(system_ref)) => {
                        // Rules already reported a bad path; read only a good one.
                        crate::paths::resolve_in_root(root, system_ref)
                            .ok()
                            .and_then(|path| match std::fs::read_to_string(&path) {
                                Ok(text) => Some(text),
                                Err(error) => {
                                    self.diagnostics.push(site.at(
                                        Code::Unreadable,
                                        format!("cannot read `{system_ref}`: {error}"),
                                        "spec.prompt.systemRef",
                                    ));
                                    None
                                }
                            })
                    }
                    _ => None,
                }
            }
        };
        if !complete {
            return None;
        }
        Some(PendingAgent {
            model: model?,
            tools,
            extensions,
            extension_configs,
            system_prompt,
        })
    }

    /// `Agent.spec.requiredTools`: every name must be a tool the agent has
    /// (`tool__export`); the names are added to the `requiredTools` of its
    /// `required-tools-guard` extension, which is appended (innermost)
    /// when the agent does not list one, as the original does.
    fn require_tools(
        &mut self,
        parsed: &Parsed,
        site: &Site,
        required: &[String],
        tools: &[Target],
        extensions: &mut Vec<Target>,
        extension_configs: &mut Vec<Option<JsonObject>>,
    ) {
        let mut known = Vec::new();
        for target in tools {
            let tool = match target {
                Target::Local(index) => &parsed.tools[*index].resource,
                Target::Base(index) => &self.base.tools[*index],
                Target::Package(index) => &self.packages.tools[*index],
            };
            for export in &tool.spec.exports {
                known.push(format!("{}__{}", tool.name(), export.name));
            }
        }
        for (position, name) in required.iter().enumerate() {
            if !known.iter().any(|known| known == name) {
                let mut diagnostic = site.at(
                    Code::RequiredToolMissing,
                    format!(
                        "{} requires `{name}`, which none of its tools exports",
                        site.label
                    ),
                    &format!("spec.requiredTools[{position}]"),
                );
                if let Some(close) = closest(name, known.iter().map(String::as_str)) {
                    diagnostic = diagnostic.with_suggestion(format!("did you mean `{close}`?"));
                }
                self.diagnostics.push(diagnostic);
            }
        }
        let guard_position = extensions.iter().position(|target| {
            let extension = match target {
                Target::Local(index) => &parsed.extensions[*index].resource,
                Target::Base(index) => &self.base.extensions[*index],
                Target::Package(index) => &self.packages.extensions[*index],
            };
            extension.name() == REQUIRED_TOOLS_GUARD
                || extension.spec.entry == format!("{BUILTIN_PREFIX}{REQUIRED_TOOLS_GUARD}")
        });
        let position = match guard_position {
            Some(position) => position,
            None => {
                let guard = ObjectRefLike::Text(format!("Extension/{REQUIRED_TOOLS_GUARD}"));
                let Some(target) =
                    self.reference(site, Kind::Extension, &guard, "spec.requiredTools")
                else {
                    return;
                };
                extensions.push(target);
                extension_configs.push(None);
                extensions.len() - 1
            }
        };
        let own_config = |target: &Target| match target {
            Target::Local(index) => parsed.extensions[*index].resource.spec.config.clone(),
            Target::Base(index) => self.base.extensions[*index].spec.config.clone(),
            Target::Package(index) => self.packages.extensions[*index].spec.config.clone(),
        };
        let mut config = extension_configs[position]
            .clone()
            .unwrap_or_else(|| own_config(&extensions[position]));
        let mut names: Vec<JsonValue> = config
            .get("requiredTools")
            .and_then(JsonValue::as_array)
            .cloned()
            .unwrap_or_default();
        for name in required {
            let name = JsonValue::String(name.clone());
            if !names.contains(&name) {
                names.push(name);
            }
        }
        config.insert("requiredTools".into(), JsonValue::Array(names));
        extension_configs[position] = Some(config);
    }

    /// The index of a resolved bundle resource. Agents and Swarms only
    /// ever resolve locally (`@goondan/base` has none), so `Base` cannot
    /// occur for them.
    fn local_target(target: Option<Target>) -> Option<usize> {
        match target {
            Some(Target::Local(index)) => Some(index),
            _ => None,
        }
    }

    fn swarm(
        &mut self,
        swarm: &Local<crate::spec::SwarmSpec>,
        all_agents: &[Local<crate::spec::AgentSpec>],
    ) -> Option<PendingSwarm> {
        let spec = &swarm.resource.spec;
        let site = &swarm.site;
        let entry = Self::local_target(self.reference(
            site,
            Kind::Agent,
            &spec.entry_agent,
            "spec.entryAgent",
        ));
        let mut agents = Vec::new();
        let mut complete = entry.is_some();
        for (position, item) in spec.agents.iter().enumerate() {
            match Self::local_target(self.reference(
                site,
                Kind::Agent,
                item.reference(),
                &format!("spec.agents[{position}]"),
            )) {
                Some(index) => agents.push(index),
                None => complete = false,
            }
        }
        if let Some(entry) = entry {
            if complete && !agents.is_empty() && !agents.contains(&entry) {
                self.diagnostics.push(
                    site.at(
                        Code::NotSwarmMember,
                        format!("{}: entryAgent is not one of spec.agents", site.label),
                        "spec.entryAgent",
                    )
                    .with_suggestion("add the entry agent to spec.agents"),
                );
            }
        }
        if complete {
            let members: Vec<&str> = agents
                .iter()
                .map(|index| all_agents[*index].resource.name())
                .collect();
            self.check_gate_agents(site, &spec.policy, &members);
        }
        if !complete {
            return None;
        }
        Some(PendingSwarm {
            entry_agent: entry?,
            agents,
        })
    }

    /// Every agent `spec.policy.approvals.agents` names is a member of
    /// the Swarm: a gate for an agent that is not there gates nothing.
    fn check_gate_agents(
        &mut self,
        site: &Site,
        policy: &crate::spec::SwarmPolicy,
        members: &[&str],
    ) {
        let Some(named) = policy
            .approvals
            .as_ref()
            .and_then(|gate| gate.agents.as_ref())
        else {
            return;
        };
        for (position, name) in named.iter().enumerate() {
            if members.contains(&name.as_str()) {
                continue;
            }
            let field = format!("spec.policy.approvals.agents[{position}]");
            let suggestion = match closest(name, members.iter().copied()) {
                Some(candidate) => format!("did you mean `{candidate}`?"),
                None => format!("name one of the Swarm's agents: {}", members.join(", ")),
            };
            self.diagnostics.push(
                site.at(
                    Code::NotSwarmMember,
                    format!("spec.policy.approvals names agent `{name}`, which is not one of {}'s agents", site.label),
                    &field,
                )
                .with_suggestion(suggestion),
            );
        }
    }

    /// `Connection.spec.approvals` needs a connector that can post to a
    /// chat, the chat named the way that platform names it, and no empty
    /// decider.
    fn check_approvals(
        &mut self,
        site: &Site,
        approvals: &ConnectionApprovals,
        connector_name: &str,
        entry: &str,
    ) {
        let Some(platform) = ApprovalPlatform::of_entry(entry) else {
            self.diagnostics.push(
                site.at(
                    Code::ApprovalsUnsupported,
                    format!("Connector/{connector_name} (`{entry}`) cannot post approval requests to a chat"),
                    "spec.approvals",
                )
                .with_suggestion(Code::ApprovalsUnsupported.default_suggestion()),
            );
            return;
        };
        let (wanted, other) = match platform {
            ApprovalPlatform::Telegram => (&approvals.chat, &approvals.channel),
            ApprovalPlatform::Slack => (&approvals.channel, &approvals.chat),
        };
        let key = platform.target_key();
        if other.is_some() {
            let other_key = match platform {
                ApprovalPlatform::Telegram => "channel",
                ApprovalPlatform::Slack => "chat",
            };
            self.diagnostics.push(
                site.at(
                    Code::ApprovalsTarget,
                    format!(
                        "a {} Connection names where approvals go with `{key}`, not `{other_key}`",
                        platform.name()
                    ),
                    &format!("spec.approvals.{other_key}"),
                )
                .with_suggestion(format!("rename `{other_key}` to `{key}`")),
            );
        } else if wanted.as_ref().is_none_or(|id| id.to_string().is_empty()) {
            let example = match platform {
                ApprovalPlatform::Telegram => "approvals: { chat: -1001234567890 }",
                ApprovalPlatform::Slack => "approvals: { channel: C0123456789 }",
            };
            self.diagnostics.push(
                site.at(
                    Code::ApprovalsTarget,
                    format!(
                        "approvals on a {} Connection need `{key}`: where requests are posted",
                        platform.name()
                    ),
                    "spec.approvals",
                )
                .with_suggestion(format!("write `{example}`")),
            );
        }
        for (index, decider) in approvals.deciders.iter().enumerate() {
            if decider.to_string().is_empty() {
                self.diagnostics.push(
                    site.at(
                        Code::ApprovalsTarget,
                        "a decider is an empty id",
                        &format!("spec.approvals.deciders[{index}]"),
                    )
                    .with_suggestion(format!(
                        "write the {} user id of a person who may decide, or leave `deciders` out to let anyone in the chat decide",
                        platform.name()
                    )),
                );
            }
        }
    }

    fn connection(
        &mut self,
        parsed: &Parsed,
        connection: &Local<crate::spec::ConnectionSpec>,
    ) -> Option<PendingConnection> {
        let spec = &connection.resource.spec;
        let site = &connection.site;
        let connector = self.reference(
            site,
            Kind::Connector,
            &spec.connector_ref,
            "spec.connectorRef",
        );
        let swarm = match &spec.swarm_ref {
            Some(swarm_ref) => {
                Self::local_target(self.reference(site, Kind::Swarm, swarm_ref, "spec.swarmRef"))
            }
            None if parsed.swarms.is_empty() => {
                self.diagnostics.push(
                    site.at(
                        Code::RefNotFound,
                        format!(
                            "{} has no swarmRef and the bundle defines no Swarm",
                            site.label
                        ),
                        "spec",
                    )
                    .with_suggestion("define a Swarm or set spec.swarmRef"),
                );
                None
            }
            None => Some(0),
        };
        let connector_spec = connector.map(|target| match target {
            Target::Local(index) => &parsed.connectors[index].resource.spec,
            Target::Base(index) => &self.base.connectors[index].spec,
            Target::Package(index) => &self.packages.connectors[index].spec,
        });
        // The webhook connector takes the event name from what the sender
        // writes (`"event": "order_paid"`); what it declares is only its
        // default name, so any name can match.
        let events: Option<Vec<EventSchema>> = connector_spec
            .filter(|spec| !SENDER_NAMED_EVENTS.contains(&spec.entry.as_str()))
            .map(|spec| spec.events.clone());
        let connector_name = match connector {
            Some(Target::Local(index)) => parsed.connectors[index].resource.name().to_string(),
            Some(Target::Base(index)) => self.base.connectors[index].name().to_string(),
            Some(Target::Package(index)) => self.packages.connectors[index].name().to_string(),
            None => String::new(),
        };
        if let (Some(approvals), Some(connector_spec)) = (&spec.approvals, connector_spec) {
            let entry = connector_spec.entry.clone();
            self.check_approvals(site, approvals, &connector_name, &entry);
        }
        let mut rule_agents = Vec::new();
        let mut complete = connector.is_some() && swarm.is_some();
        for (position, rule) in spec.ingress.rules.iter().enumerate() {
            if let (Some(events), Some(event)) = (
                &events,
                rule.matcher.as_ref().and_then(|m| m.event.as_deref()),
            ) {
                if !events.iter().any(|declared| declared.name == event) {
                    let names: Vec<&str> = events
                        .iter()
                        .map(|declared| declared.name.as_str())
                        .collect();
                    let suggestion = match closest(event, names.iter().copied()) {
                        Some(candidate) => format!("did you mean `{candidate}`?"),
                        None => format!("Connector/{connector_name} emits {}", names.join(", ")),
                    };
                    self.diagnostics.push(
                        site.at(Code::EventUndeclared, format!("Connector/{connector_name} never emits `{event}`, so this rule never matches"), &format!("spec.ingress.rules[{position}].match.event"))
                            .with_suggestion(suggestion),
                    );
                }
            }
            match &rule.route.agent_ref {
                None => rule_agents.push(None),
                Some(agent_ref) => {
                    let field = format!("spec.ingress.rules[{position}].route.agentRef");
                    match Self::local_target(self.reference(site, Kind::Agent, agent_ref, &field)) {
                        Some(agent) => {
                            if let Some(swarm) = swarm {
                                let swarm_resource = &parsed.swarms[swarm];
                                let member =
                                    swarm_resource.resource.spec.agents.iter().any(|item| {
                                        item.reference().to_object_ref().is_ok_and(|reference| {
                                            reference.name == parsed.agents[agent].resource.name()
                                        })
                                    });
                                if !member {
                                    self.diagnostics.push(
                                        site.at(Code::NotSwarmMember, format!("route targets Agent/{}, which is not a member of Swarm/{}", parsed.agents[agent].resource.name(), swarm_resource.resource.name()), &field)
                                            .with_suggestion("add the agent to the swarm's agents or route to a member"),
                                    );
                                }
                            }
                            rule_agents.push(Some(agent));
                        }
                        None => complete = false,
                    }
                }
            }
        }
        if !complete {
            return None;
        }
        Some(PendingConnection {
            connector: connector?,
            swarm: swarm?,
            rule_agents,
        })
    }
}
