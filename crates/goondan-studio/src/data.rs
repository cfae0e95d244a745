//! Reading the System Root for the Studio, without locks and without
//! writing: the swarm list, one instance's conversation and runtime
//! events, and one trace's events across a swarm.
//!
//! A swarm or instance named in a URL is looked up among the folders that
//! exist (compared by name), never joined onto a path, so no URL can
//! reach outside the System Root.

use goondan_store::{
    read_runtime_events, InstancePaths, InstanceStore, RuntimeEventFilter, StateRoot,
    WorkspacePaths,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// At most this many messages of a conversation are sent (the newest).
pub(crate) const MAX_MESSAGES: usize = 500;
/// At most this many runtime events per instance or trace (the newest).
pub(crate) const MAX_EVENTS: usize = 5000;

/// A failure to read, as the HTTP answer will name it.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// No such swarm or instance.
    NotFound(String),
    /// The files could not be read.
    Store(goondan_store::StoreError),
}

impl From<goondan_store::StoreError> for ReadError {
    fn from(error: goondan_store::StoreError) -> Self {
        ReadError::Store(error)
    }
}

/// Every swarm (workspace) with its instances and their usage.
pub(crate) fn swarms(root: &StateRoot) -> Result<Value, ReadError> {
    let mut swarms = Vec::new();
    for workspace in root.list_workspaces()? {
        let store = InstanceStore::new(workspace.clone());
        let mut instances = Vec::new();
        for summary in store.list()? {
            let folder = summary
                .dir
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            let metadata = summary.metadata.as_ref();
            instances.push(json!({
                "id": folder,
                "agentName": summary.agent_name,
                "instanceKey": summary.instance_key,
                "status": metadata.map(|m| serde_json::to_value(m.status).unwrap_or(Value::Null)),
                "createdAt": metadata.map(|m| m.created_at.clone()),
                "updatedAt": metadata.map(|m| m.updated_at.clone()),
                "usage": metadata.and_then(|m| m.usage).map(|usage| serde_json::to_value(usage).unwrap_or(Value::Null)),
            }));
        }
        swarms.push(json!({
            "id": workspace.workspace_id(),
            "instances": instances,
        }));
    }
    Ok(json!({ "swarms": swarms }))
}

/// The workspace named `id`, if its folder exists.
pub(crate) fn workspace(root: &StateRoot, id: &str) -> Result<WorkspacePaths, ReadError> {
    root.list_workspaces()?
        .into_iter()
        .find(|workspace| workspace.workspace_id() == id)
        .ok_or_else(|| ReadError::NotFound(format!("no swarm `{id}` under the System Root")))
}

/// The folders of every instance of `workspace`, with their names.
pub(crate) fn instance_dirs(workspace: &WorkspacePaths) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(workspace.instances_dir()) else {
        return Vec::new();
    };
    let mut dirs: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter(|entry| entry.path().is_dir())
        .map(|entry| {
            (
                entry.file_name().to_string_lossy().into_owned(),
                entry.path(),
            )
        })
        .filter(|(name, _)| !name.starts_with('.'))
        .collect();
    dirs.sort();
    dirs
}

/// The folder of the instance named `id` in `workspace`.
pub(crate) fn instance_dir(workspace: &WorkspacePaths, id: &str) -> Result<PathBuf, ReadError> {
    instance_dirs(workspace)
        .into_iter()
        .find(|(name, _)| name == id)
        .map(|(_, dir)| dir)
        .ok_or_else(|| {
            ReadError::NotFound(format!(
                "no instance `{id}` in swarm `{}`",
                workspace.workspace_id()
            ))
        })
}

/// The conversation of the instance in `dir`: the committed base plus the
/// events of a Turn in progress, folded the way the store folds them
/// (an append of a message already in the base is skipped, since a fold
/// may be half done while this reads).
pub(crate) fn conversation(dir: &Path) -> Value {
    let paths = InstancePaths::from_dir(dir);
    let mut folded: Vec<Value> = read_json_lines(&paths.base_log());
    let base_len = folded.len();
    for event in read_json_lines(&paths.events_log()) {
        match event["type"].as_str() {
            Some("append") => {
                let id = &event["message"]["id"];
                if id.is_null() || !folded.iter().any(|message| message["id"] == *id) {
                    folded.push(event["message"].clone());
                }
            }
            Some("replace") => {
                for message in folded.iter_mut() {
                    if message["id"] == event["targetId"] {
                        *message = event["message"].clone();
                    }
                }
            }
            Some("remove") => folded.retain(|message| message["id"] != event["targetId"]),
            Some("truncate") => folded.clear(),
            _ => {}
        }
    }
    let n_total = folded.len();
    let skipped = n_total.saturating_sub(MAX_MESSAGES);
    json!({
        "messages": folded.split_off(skipped),
        "skipped": skipped,
        "pending": n_total.saturating_sub(base_len),
    })
}

/// Whole JSON lines of `path`; a torn or unreadable line is left out.
fn read_json_lines(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .collect()
}

/// The newest runtime events of the instance in `dir`, each tagged with
/// the instance's folder name (`instance`).
pub(crate) fn instance_events(dir: &Path, id: &str) -> Result<Value, ReadError> {
    let filter = RuntimeEventFilter {
        last: Some(MAX_EVENTS),
        ..RuntimeEventFilter::default()
    };
    let log = InstancePaths::from_dir(dir).runtime_events_log();
    let events: Vec<Value> = read_runtime_events(&log, &filter)?
        .records
        .into_iter()
        .filter_map(|record| tagged(&record.line, id))
        .collect();
    Ok(json!({ "events": events }))
}

/// Every runtime event of `trace_id` in `workspace`, in time order.
pub(crate) fn trace_events(workspace: &WorkspacePaths, trace_id: &str) -> Result<Value, ReadError> {
    let filter = RuntimeEventFilter {
        trace_id: Some(trace_id.to_string()),
        last: Some(MAX_EVENTS),
        ..RuntimeEventFilter::default()
    };
    let mut events: Vec<Value> = Vec::new();
    for (id, dir) in instance_dirs(workspace) {
        let log = InstancePaths::from_dir(&dir).runtime_events_log();
        events.extend(
            read_runtime_events(&log, &filter)?
                .records
                .into_iter()
                .filter_map(|record| tagged(&record.line, &id)),
        );
    }
    // ISO 8601 timestamps of one clock order as text.
    events.sort_by(|a, b| a["timestamp"].as_str().cmp(&b["timestamp"].as_str()));
    Ok(json!({ "traceId": trace_id, "events": events }))
}

/// One stored event line as JSON with `instance` added.
pub(crate) fn tagged(line: &str, instance: &str) -> Option<Value> {
    let mut value: Value = serde_json::from_str(line).ok()?;
    value
        .as_object_mut()?
        .insert("instance".into(), Value::String(instance.to_string()));
    Some(value)
}
