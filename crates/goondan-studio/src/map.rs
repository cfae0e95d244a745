//! A static picture of a swarm, read from the bundle it last started from
//! (the folder its `swarm.json` names): its agents with their Model, tools
//! and extensions, who may call whom, and its Connections with where
//! their ingress rules route. What runs is the live view's; this is only
//! what the bundle declares.
//!
//! The bundle is loaded the way `gdn validate` loads it, read-only; a
//! bundle that no longer loads (moved, or broken since) is answered `404`
//! `E_STUDIO_NO_BUNDLE` with the number of problems, never its paths.

use crate::data::{self, ReadError};
use goondan_config::{AgentView, Bundle};
use goondan_store::StateRoot;
use serde_json::{json, Value};

/// The `Tool` whose exports call other agents (`agents__request`,
/// `agents__send`, ...): an agent that has it may call every other agent
/// of its swarm.
const AGENTS_TOOL: &str = "agents";

/// `GET /api/swarms/<swarm>/map`.
pub(crate) fn swarm_map(root: &StateRoot, id: &str) -> Result<Value, ReadError> {
    let workspace = data::workspace(root, id)?;
    let identity = goondan_store::WorkspaceIdentity::read(&workspace.identity_file())
        .ok_or_else(|| {
            ReadError::NoBundle(format!(
                "swarm `{id}` was started by a `gdn` that records no bundle; start it again to see its map"
            ))
        })?;
    let folder = identity
        .bundle_dir
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let outcome =
        goondan_config::load_bundle(&identity.bundle_dir, &Default::default()).map_err(|_| {
            ReadError::NoBundle(format!(
                "the bundle `{folder}` swarm `{id}` started from does not load any more"
            ))
        })?;
    let Some(bundle) = outcome.bundle else {
        return Err(ReadError::NoBundle(format!(
            "the bundle `{folder}` swarm `{id}` started from has {} problem(s) now; `gdn validate` lists them",
            outcome.diagnostics.len()
        )));
    };
    let Some(swarm) = bundle.swarm(&identity.swarm) else {
        return Err(ReadError::NoBundle(format!(
            "the bundle `{folder}` no longer has Swarm `{}`",
            identity.swarm
        )));
    };
    let names: Vec<&str> = swarm.agents().map(|agent| agent.name()).collect();
    let entry = swarm.entry_agent().name().to_string();
    let agents: Vec<Value> = swarm
        .agents()
        .map(|agent| agent_map(&agent, &names, &entry))
        .collect();
    let connections: Vec<Value> = bundle
        .connections()
        .filter(|connection| connection.swarm().name() == swarm.name())
        .map(|connection| {
            let rules: Vec<Value> = connection
                .rules()
                .map(|(rule, agent)| {
                    json!({
                        "event": rule.matcher.as_ref().and_then(|matcher| matcher.event.clone()),
                        "agent": agent.name(),
                    })
                })
                .collect();
            json!({
                "name": connection.name(),
                "connector": connection.connector().name(),
                "rules": rules,
            })
        })
        .collect();
    Ok(json!({
        "swarm": swarm.name(),
        "package": package_name(&bundle),
        "folder": folder,
        "entryAgent": entry,
        "agents": agents,
        "connections": connections,
    }))
}

/// The bundle's Package name, when it has a Package.
fn package_name(bundle: &Bundle) -> Option<String> {
    bundle.package().map(|package| package.name().to_string())
}

/// One agent: its Model, tools (with their exports), extensions, and the
/// agents it may call.
fn agent_map(agent: &AgentView<'_>, swarm_agents: &[&str], entry: &str) -> Value {
    let model = agent.model();
    let tools: Vec<Value> = agent
        .tools()
        .map(|tool| {
            json!({
                "name": tool.name(),
                "exports": tool.spec.exports.iter().map(|export| format!("{}{}{}", tool.name(), goondan_types::tool::TOOL_NAME_SEPARATOR, export.name)).collect::<Vec<_>>(),
            })
        })
        .collect();
    let extensions: Vec<&str> = agent
        .extensions()
        .map(|extension| extension.name())
        .collect();
    let calls_agents = agent.tools().any(|tool| tool.name() == AGENTS_TOOL);
    let may_call: Vec<&str> = if calls_agents {
        swarm_agents
            .iter()
            .copied()
            .filter(|name| *name != agent.name())
            .collect()
    } else {
        Vec::new()
    };
    json!({
        "name": agent.name(),
        "entry": agent.name() == entry,
        "model": { "name": model.name(), "provider": model.spec.provider, "model": model.spec.model },
        "tools": tools,
        "extensions": extensions,
        "mayCall": may_call,
    })
}
