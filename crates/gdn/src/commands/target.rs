//! The orchestrator a management command talks to ([`Target`]) and the
//! instances it acts on: found from the bundle (`--config` or the current
//! folder) when one loads, its workspace keyed by the bundle's identity;
//! else from the one record under `runtime/active/`. `gdn restart`,
//! `gdn stop`, `gdn instance`, its interactive screen, `gdn logs` and
//! `gdn usage` share it.

use crate::cli::GlobalArgs;
use crate::project;
use anyhow::Context;
use goondan_orchestrator::control::{ControlRequest, ControlResponse};
use goondan_orchestrator::orchestrator::InstanceStatus;
use goondan_store::{ActiveSwarm, InstanceStore, InstanceSummary, StateRoot, WorkspacePaths};
use goondan_types::JsonValue;
use std::path::{Path, PathBuf};

/// The orchestrator a management command talks to.
pub(crate) struct Target {
    /// The System Root, scoped to the bundle when one loaded.
    pub(crate) state_root: StateRoot,
    /// The Swarm's workspace, when known.
    pub(crate) workspace: Option<WorkspacePaths>,
    pub(crate) socket: Option<PathBuf>,
    /// Whether a bundle here (`--config` or the current folder) named the
    /// workspace; `false` when it was guessed from what runs, or is every
    /// workspace of the System Root.
    pub(crate) from_bundle: bool,
}

/// A Swarm as people named it, from the record its orchestrator leaves in
/// its workspace at each start (`swarm.json`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SwarmName {
    /// The bundle's Package name, when it has a Package.
    pub(crate) package: Option<String>,
    /// The Swarm's name; `None` for a workspace an older `gdn` started.
    pub(crate) swarm: Option<String>,
    /// The bundle folder.
    pub(crate) folder: Option<PathBuf>,
    /// The workspace id (what a name falls back to).
    pub(crate) workspace_id: String,
}

impl SwarmName {
    /// Reads the names recorded in `workspace`.
    pub(crate) fn of(workspace: &WorkspacePaths) -> SwarmName {
        let record = goondan_store::WorkspaceIdentity::read(&workspace.identity_file());
        SwarmName {
            package: record.as_ref().and_then(|record| record.package.clone()),
            swarm: record.as_ref().map(|record| record.swarm.clone()),
            folder: record.map(|record| record.bundle_dir),
            workspace_id: workspace.workspace_id().to_string(),
        }
    }

    /// `package/swarm`, the Swarm alone without a Package, or the
    /// workspace id when no names were recorded.
    pub(crate) fn short(&self) -> String {
        match (&self.package, &self.swarm) {
            (Some(package), Some(swarm)) => format!("{package}/{swarm}"),
            (None, Some(swarm)) => swarm.clone(),
            _ => self.workspace_id.clone(),
        }
    }

    /// The names as JSON fields (`package`, `swarmName`, `bundleDir`).
    pub(crate) fn json_fields(&self, object: &mut serde_json::Map<String, JsonValue>) {
        object.insert("package".into(), serde_json::json!(self.package));
        object.insert("swarmName".into(), serde_json::json!(self.swarm));
        object.insert("bundleDir".into(), serde_json::json!(self.folder));
    }
}

/// What to call each of `names` so people can tell them apart: the short
/// name, with the bundle folder when two workspaces share it.
pub(crate) fn shown_names(names: &[SwarmName]) -> Vec<String> {
    names
        .iter()
        .map(|name| {
            let short = name.short();
            let ambiguous = names
                .iter()
                .any(|other| other.short() == short && other.workspace_id != name.workspace_id);
            match (&name.folder, ambiguous) {
                (Some(folder), true) => format!("{short} ({})", folder.display()),
                (None, true) => format!("{short} ({})", name.workspace_id),
                _ => short,
            }
        })
        .collect()
}

/// Says on stderr, outside any bundle, which Swarms a command shows
/// instead (the running one, or all), so none is picked silently.
pub(crate) fn say_what_is_shown(global: &GlobalArgs, target: &Target) {
    if target.from_bundle || global.quiet {
        return;
    }
    let here = match &global.config {
        Some(config) => config.display().to_string(),
        None => std::env::current_dir()
            .map(|dir| dir.display().to_string())
            .unwrap_or_else(|_| ".".into()),
    };
    let shown = match &target.workspace {
        Some(workspace) => format!("the running Swarm {}", SwarmName::of(workspace).short()),
        None => format!("every Swarm under {}", target.state_root.path().display()),
    };
    eprintln!(
        "note: no bundle (goondan.yaml) in {here}; showing {shown}; pass --config to choose one"
    );
}

/// Finds the orchestrator from the bundle, else from the only record under
/// `runtime/active/`.
pub(crate) fn target(global: &GlobalArgs) -> anyhow::Result<Target> {
    let state_root = project::state_root(global)?;
    let bundle_path = global.config.clone().unwrap_or_else(|| PathBuf::from("."));
    let bundle = goondan_config::load_bundle(&bundle_path, &Default::default())
        .ok()
        .and_then(|outcome| outcome.bundle);
    if let Some(bundle) = bundle {
        if let Some(swarm) = bundle.default_swarm() {
            let state_root = goondan_host::project::scoped_state_root(state_root, &bundle);
            let workspace = state_root.workspace(swarm.instance_key());
            return Ok(Target {
                state_root,
                socket: Some(workspace.control_socket()),
                workspace: Some(workspace),
                from_bundle: true,
            });
        }
    }
    let mut records = active_records(&state_root);
    let (workspace, socket) = match records.len() {
        1 => {
            let (workspace_id, record) = records.remove(0);
            (
                Some(state_root.workspace_by_id(&workspace_id)),
                Some(record.control_socket),
            )
        }
        0 => (None, None),
        _ => {
            let bundles: Vec<String> = records
                .iter()
                .map(|(_, record)| record.bundle_dir.display().to_string())
                .collect();
            anyhow::bail!(
                "several orchestrators run on {} (bundles {}); pass --config with one of them",
                state_root.path().display(),
                bundles.join(", ")
            );
        }
    };
    Ok(Target {
        state_root,
        workspace,
        socket,
        from_bundle: false,
    })
}

/// Every `runtime/active/<workspaceId>.json` that reads, with its id.
fn active_records(state_root: &StateRoot) -> Vec<(String, ActiveSwarm)> {
    let Ok(entries) = std::fs::read_dir(state_root.active_dir()) else {
        return Vec::new();
    };
    let mut records: Vec<(String, ActiveSwarm)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let path = entry.path();
            let workspace_id = path.file_stem()?.to_str()?.to_string();
            Some((workspace_id, ActiveSwarm::read(&path)?))
        })
        .collect();
    records.sort_by(|a, b| a.0.cmp(&b.0));
    records
}

/// One request to the orchestrator at `socket`: `None` when none listens
/// there; an orchestrator that took it and went away before answering is
/// `E_ORCHESTRATOR_STOPPED`, never taken for one that is not running.
pub(crate) async fn call(
    socket: &Path,
    request: ControlRequest,
) -> Result<Option<ControlResponse>, goondan_client::ClientError> {
    goondan_client::ControlSocket::new(socket)
        .call_if_running(&request)
        .await
}

/// Asks the running orchestrator to restart the instances `key` names;
/// `None` when none runs.
pub(crate) fn restart_live(
    target: &Target,
    key: &str,
    fresh: bool,
) -> anyhow::Result<Option<ControlResponse>> {
    let Some(socket) = &target.socket else {
        return Ok(None);
    };
    let (agent, instance_key) = crate::project::split_key(key);
    let request = ControlRequest::Restart {
        agent,
        instance_key: Some(instance_key),
        fresh,
        swarm: None,
    };
    Ok(crate::runtime::current_thread()?.block_on(call(socket, request))?)
}

/// Stops the processes of the instances `key` names (when an orchestrator
/// runs) and deletes their state: how many were deleted, and whether a
/// process was stopped.
pub(crate) fn delete_instances(target: &Target, key: &str) -> anyhow::Result<(usize, bool)> {
    let mut stopped = false;
    if let Some(socket) = &target.socket {
        if let Some(response) = crate::runtime::current_thread()?.block_on(call(
            socket,
            ControlRequest::Delete {
                key: key.to_string(),
            },
        ))? {
            stopped = matches!(response, ControlResponse::Deleted { stopped: true });
        }
    }
    let n_deleted = for_matching(target, key, |store, summary| {
        store.delete(&summary.agent_name, &summary.instance_key)
    })?;
    Ok((n_deleted, stopped))
}

fn matches(summary: &InstanceSummary, key: &str) -> bool {
    summary.routing_key().is_named_by(key)
}

/// The stores of the target's workspace, or of every workspace when no
/// bundle names one.
pub(crate) fn stores(target: &Target) -> anyhow::Result<Vec<InstanceStore>> {
    if let Some(workspace) = &target.workspace {
        return Ok(vec![InstanceStore::new(workspace.clone())]);
    }
    let workspaces = target.state_root.workspaces_dir();
    let mut stores = Vec::new();
    let entries = match std::fs::read_dir(&workspaces) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(stores),
        Err(error) => {
            return Err(error).with_context(|| format!("reading {}", workspaces.display()))
        }
    };
    let mut ids: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.path().is_dir())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    ids.sort();
    for id in ids {
        stores.push(InstanceStore::new(target.state_root.workspace_by_id(&id)));
    }
    Ok(stores)
}

pub(crate) fn for_matching(
    target: &Target,
    key: &str,
    mut action: impl FnMut(&InstanceStore, &InstanceSummary) -> Result<(), goondan_store::StoreError>,
) -> anyhow::Result<usize> {
    let mut count = 0;
    for store in stores(target)? {
        for summary in store.list()? {
            if matches(&summary, key) {
                action(&store, &summary)?;
                count += 1;
            }
        }
    }
    Ok(count)
}

/// The rows `gdn instance list` shows (JSON objects), the most recently
/// updated first, at most `limit`, and how many more there are.
pub(crate) fn instance_rows(
    target: &Target,
    agent: Option<&str>,
    limit: Option<usize>,
) -> anyhow::Result<(Vec<JsonValue>, usize)> {
    let live = match &target.socket {
        Some(socket) => {
            crate::runtime::current_thread()?.block_on(call(socket, ControlRequest::List))?
        }
        None => None,
    };
    let live_instances: Vec<InstanceStatus> = match live {
        Some(ControlResponse::Instances { instances }) => instances,
        _ => Vec::new(),
    };
    let mut rows = Vec::new();
    for store in stores(target)? {
        let name = SwarmName::of(store.workspace());
        for summary in store.list()? {
            if agent.is_some_and(|agent| agent != summary.agent_name) {
                continue;
            }
            let key = summary.routing_key().to_string();
            let process = live_instances.iter().find(|instance| instance.key == key);
            let metadata = summary.metadata.as_ref();
            // The live orchestrator's view wins; without one, what the
            // next one would apply: the stored deadline, clamped like it
            // clamps it, and only while it lies ahead.
            let backoff_until = match process {
                Some(process) => process.backoff_until.clone(),
                None => metadata.and_then(|m| stored_backoff(m.backoff_until.as_deref())),
            };
            let consecutive_crashes = process
                .map(|p| p.consecutive_crashes)
                .or_else(|| metadata.map(|m| m.consecutive_crashes));
            let mut row = serde_json::json!({
                "workspace": store.workspace().workspace_id(),
                "instanceKey": summary.instance_key,
                "agentName": summary.agent_name,
                "status": metadata.map(|m| serde_json::to_value(m.status).unwrap_or(JsonValue::Null)),
                "process": process.map(|p| p.status),
                "pid": process.and_then(|p| p.pid),
                "createdAt": metadata.map(|m| m.created_at.clone()),
                "updatedAt": metadata.map(|m| m.updated_at.clone()),
                "consecutiveCrashes": consecutive_crashes,
                "backoffUntil": backoff_until,
            });
            if let Some(object) = row.as_object_mut() {
                name.json_fields(object);
            }
            rows.push(row);
        }
    }
    // RFC 3339 timestamps order as text; a row without one goes last.
    rows.sort_by(|a, b| {
        let updated = |row: &JsonValue| row["updatedAt"].as_str().map(str::to_string);
        updated(b).cmp(&updated(a))
    });
    let n_hidden = limit.map_or(0, |limit| rows.len().saturating_sub(limit));
    rows.truncate(rows.len() - n_hidden);
    Ok((rows, n_hidden))
}

/// A `backoffUntil` read from `metadata.json` as an orchestrator would
/// apply it: `None` once past, at most `MAX_BACKOFF_MS` from now.
fn stored_backoff(text: Option<&str>) -> Option<String> {
    let until = chrono::DateTime::parse_from_rfc3339(text?).ok()?;
    let until = std::time::SystemTime::from(until);
    let now = std::time::SystemTime::now();
    let remaining = until.duration_since(now).ok()?;
    let longest = std::time::Duration::from_millis(goondan_orchestrator::backoff::MAX_BACKOFF_MS);
    Some(goondan_types::iso_at(now + remaining.min(longest)))
}
