//! A loaded bundle with its selected Swarm ([`Project`]), how a bundle is
//! loaded as `gdn run` loads one ([`BundleSource`]), and everything the
//! orchestrator is told about the selected Swarm ([`swarm_info`]): its
//! agents, limits, ingress rules, the Connection that carries what is
//! typed at `gdn run`, and the Connections that run in processes of
//! their own. This module is the one place those derive from a bundle;
//! a start, a reload and a rollout all call it.
//!
//! The System Root is scoped to the bundle ([`scoped_state_root`]): two
//! projects whose swarms share an instance key get separate workspaces,
//! control sockets and orchestrators.

pub use crate::error::NotLoaded;
use crate::HostError;
use goondan_config::{load_bundle, Bundle, LoadOptions};
use goondan_orchestrator::orchestrator::ProcessPolicy;
use goondan_orchestrator::{IngressRule, SwarmInfo};
use goondan_store::paths::bundle_scope;
use goondan_store::{StateRoot, WorkspacePaths};
use goondan_types::Diagnostic;
use std::path::{Path, PathBuf};

/// A loaded bundle with its selected Swarm.
#[derive(Debug, Clone)]
pub struct Project {
    /// The validated bundle.
    pub bundle: Bundle,
    /// `Swarm.metadata.name`.
    pub swarm_name: String,
    /// `Swarm.spec.instanceKey ?? Swarm.metadata.name`.
    pub instance_key: String,
    /// The System Root, scoped to this bundle.
    pub state_root: StateRoot,
}

impl Project {
    /// Selects `swarm` (else `default`, else the only one) of `bundle`,
    /// with `state_root` scoped to the bundle; `Err` with a diagnostic
    /// naming the Swarms there are when none is selected.
    pub fn select(
        bundle: Bundle,
        swarm: Option<&str>,
        state_root: StateRoot,
    ) -> Result<Project, Box<Diagnostic>> {
        let selected = match swarm {
            Some(name) => bundle.swarm(name),
            None => bundle.default_swarm(),
        };
        let Some(selected) = selected else {
            let known: Vec<String> = bundle.swarms().map(|s| s.name().to_string()).collect();
            let message = match swarm {
                Some(name) => format!("Swarm/{name} is not defined"),
                None => "no Swarm named `default`, and more than one Swarm to choose from".into(),
            };
            return Err(Box::new(
                Diagnostic::error("E_CONFIG_REF_NOT_FOUND", message)
                    .with_suggestion(format!("pass --swarm with one of: {}", known.join(", "))),
            ));
        };
        let swarm_name = selected.name().to_string();
        let instance_key = selected.instance_key().to_string();
        let state_root = scoped_state_root(state_root, &bundle);
        Ok(Project {
            bundle,
            swarm_name,
            instance_key,
            state_root,
        })
    }

    /// The workspace of the selected Swarm: its conversations, control
    /// socket, lock, active record and process logs.
    pub fn workspace(&self) -> WorkspacePaths {
        self.state_root.workspace(&self.instance_key)
    }

    /// This project with `bundle` in place of its own (same Swarm,
    /// instance key and System Root): a reload's or rollout's candidate.
    pub fn with_bundle(&self, bundle: Bundle) -> Project {
        Project {
            bundle,
            ..self.clone()
        }
    }
}

/// The System Root scoped to `bundle`'s identity.
pub fn scoped_state_root(state_root: StateRoot, bundle: &Bundle) -> StateRoot {
    let package_name = bundle
        .package()
        .map(|package| package.metadata.name.as_str());
    let scope = bundle_scope(bundle.root(), package_name);
    state_root.with_bundle_scope(scope)
}

/// Where a running swarm's bundle is loaded from, as `gdn run` was told.
#[derive(Debug, Clone)]
pub struct BundleSource {
    /// The bundle file or folder (`--config`, or a cluster host's link).
    pub config: PathBuf,
    /// `--env-file`, absolute.
    pub env_file: Option<PathBuf>,
}

impl BundleSource {
    /// The bundle at `path` (a file or folder), loaded as `gdn run` loads
    /// one (the process environment, `.env`, `.env.local` and the env
    /// file), with packages from `packages_root`; or why it is refused.
    pub fn load(&self, path: &Path, packages_root: Option<PathBuf>) -> Result<Bundle, NotLoaded> {
        load(path, self.env_file.clone(), packages_root)
    }
}

/// Loads the bundle at `path` as `gdn run` does.
pub fn load(
    path: &Path,
    env_file: Option<PathBuf>,
    packages_root: Option<PathBuf>,
) -> Result<Bundle, NotLoaded> {
    let options = LoadOptions {
        env_file,
        inherit_process_env: true,
        packages_root,
        ..LoadOptions::default()
    };
    let base = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().map(PathBuf::from).unwrap_or_default()
    };
    let (diagnostics, invalid) = match load_bundle(path, &options) {
        Ok(loaded) => match loaded.bundle {
            Some(bundle) => return Ok(bundle),
            None => (loaded.diagnostics, true),
        },
        Err(error) => (vec![error.to_diagnostic()], false),
    };
    Err(NotLoaded {
        invalid,
        diagnostics,
        base,
    })
}

/// What the orchestrator needs to know about the selected Swarm of
/// `project` (also rebuilt by every reload).
pub fn swarm_info(project: &Project) -> Result<SwarmInfo, HostError> {
    let swarm =
        project
            .bundle
            .swarm(&project.swarm_name)
            .ok_or_else(|| HostError::SwarmMissing {
                swarm: project.swarm_name.clone(),
            })?;
    let agents: Vec<String> = swarm
        .agents()
        .map(|agent| agent.name().to_string())
        .collect();
    Ok(SwarmInfo {
        swarm_name: project.swarm_name.clone(),
        entry_agent: swarm.entry_agent().name().to_string(),
        agents,
        instance_key: project.instance_key.clone(),
        grace_period: swarm.shutdown_grace(),
        max_queued_events: swarm.max_queued_events(),
        processes: ProcessPolicy {
            max_live: swarm.max_live_processes(),
            idle_after: swarm.idle_passivation(),
        },
        ingress: ingress_rules(project),
        cli_connection: cli_connection(project),
        connections: connector_connections(project),
        approval_connections: approval_connections(project),
    })
}

/// The Connections of the running swarm whose connector posts approval
/// requests to a chat (`spec.approvals`; the loader made sure their
/// connector can).
fn approval_connections(project: &Project) -> Vec<String> {
    own_connections(project)
        .filter(|connection| connection.resource().spec.approvals.is_some())
        .map(|connection| connection.name().to_string())
        .collect()
}

/// The Connections that deliver to the running swarm.
fn own_connections(project: &Project) -> impl Iterator<Item = goondan_config::ConnectionView<'_>> {
    project
        .bundle
        .connections()
        .filter(|connection| connection.swarm().name() == project.swarm_name)
}

/// The Connection that runs the base `cli` connector for the running
/// swarm: its rules route what is typed at `gdn run`.
fn cli_connection(project: &Project) -> Option<String> {
    own_connections(project)
        .find(|connection| connection.connector().spec.entry == CLI_ENTRY)
        .map(|connection| connection.name().to_string())
}

/// The entry of the base `cli` connector, which is `gdn run`'s terminal
/// rather than a process of its own.
const CLI_ENTRY: &str = "builtin:cli";

/// The Connections of the running swarm that run in a ConnectorProcess of
/// their own: every one but `builtin:cli`.
fn connector_connections(project: &Project) -> Vec<String> {
    own_connections(project)
        .filter(|connection| connection.connector().spec.entry != CLI_ENTRY)
        .map(|connection| connection.name().to_string())
        .collect()
}

/// The ingress rules of every Connection that delivers to the running
/// swarm.
fn ingress_rules(project: &Project) -> Vec<IngressRule> {
    let mut rules = Vec::new();
    for connection in own_connections(project) {
        for (rule, agent) in connection.rules() {
            let matcher = rule.matcher.clone().unwrap_or_default();
            rules.push(IngressRule {
                connection: connection.name().to_string(),
                event: matcher.event,
                properties: matcher
                    .properties
                    .into_iter()
                    .map(|(key, value)| {
                        let value = match value {
                            serde_json::Value::String(text) => text,
                            other => other.to_string(),
                        };
                        (key, value)
                    })
                    .collect(),
                agent: Some(agent.name().to_string()),
                instance_key: rule.route.instance_key.clone(),
                instance_key_property: rule.route.instance_key_property.clone(),
                instance_key_prefix: rule.route.instance_key_prefix.clone(),
            });
        }
    }
    rules
}
