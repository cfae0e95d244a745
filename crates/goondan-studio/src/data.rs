//! Reading the System Root for the Studio, without locks and without
//! writing: the swarm list, one instance's conversation, runtime events
//! and history of Turns, and one trace's events across a swarm.
//!
//! A swarm or instance named in a URL is looked up among the folders that
//! exist (compared by name), never joined onto a path, so no URL can
//! reach outside the System Root.
//!
//! Logs are read from their end only (`goondan_store::tail`), within one
//! read budget per request and a line cap, so what a request costs does
//! not grow with the log (issue 35): each answer says whether the budget
//! or the cap left something out (`truncated`, `skippedLines`).

use goondan_store::tail::{scan_backwards, TailLimits, TailReport};
use goondan_store::{
    read_runtime_events_within, read_turn_history, InstancePaths, InstanceStore,
    RuntimeEventFilter, StateRoot, WorkspacePaths,
};
use serde_json::{json, Value};
use std::io::Read as _;
use std::ops::ControlFlow;
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
    /// The swarm's bundle is not there or does not load (its map).
    NoBundle(String),
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
        let summaries = store.list()?;
        let folder_of = |agent: &str, key: &str| -> Option<String> {
            summaries
                .iter()
                .find(|summary| summary.agent_name == agent && summary.instance_key == key)
                .and_then(|summary| summary.dir.file_name())
                .map(|name| name.to_string_lossy().into_owned())
        };
        for summary in &summaries {
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
                "forkedFrom": metadata.and_then(|m| forked_from(m, &summary.agent_name, &folder_of)),
            }));
        }
        let identity = swarm_identity(&workspace);
        swarms.push(json!({
            "id": workspace.workspace_id(),
            "package": identity.package,
            "swarm": identity.swarm,
            "folder": identity.folder,
            "running": identity.running,
            "instances": instances,
        }));
    }
    Ok(json!({ "swarms": swarms }))
}

/// Where a fork came from, as its `metadata.json` records it
/// (`forkedFrom`: the origin's key, the Turn, when and by whom), with the
/// origin's folder (`instance`) when the origin is still there, so the
/// page can link to it.
fn forked_from(
    metadata: &goondan_store::InstanceMetadata,
    agent_name: &str,
    folder_of: &dyn Fn(&str, &str) -> Option<String>,
) -> Option<Value> {
    let mut origin = metadata.extra.get("forkedFrom")?.as_object()?.clone();
    let folder = origin
        .get("instanceKey")
        .and_then(Value::as_str)
        .and_then(|key| folder_of(agent_name, key));
    origin.insert("instance".into(), folder.map_or(Value::Null, Value::String));
    Some(Value::Object(origin))
}

/// What names a swarm for a person: its Package, Swarm and bundle folder.
#[derive(Debug, Default, PartialEq)]
struct SwarmIdentity {
    package: Option<String>,
    swarm: Option<String>,
    folder: Option<String>,
    running: bool,
}

/// Names `workspace` from the record its orchestrator leaves at each
/// start (`swarm.json`: Package, Swarm, bundle folder); whether it runs
/// now comes from its active record. A workspace started by an older
/// `gdn` has no record and keeps only its id.
fn swarm_identity(workspace: &WorkspacePaths) -> SwarmIdentity {
    let running = goondan_store::ActiveSwarm::read(&workspace.active_file()).is_some();
    let Some(record) = goondan_store::WorkspaceIdentity::read(&workspace.identity_file()) else {
        return SwarmIdentity {
            running,
            ..SwarmIdentity::default()
        };
    };
    SwarmIdentity {
        package: record.package,
        swarm: Some(record.swarm),
        folder: record
            .bundle_dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned()),
        running,
    }
}

/// Every approval not decided yet, across the System Root, oldest first,
/// each with its swarm and instance folder.
pub(crate) fn pending_approvals(root: &StateRoot) -> Result<Value, ReadError> {
    let mut waiting: Vec<(String, Value)> = Vec::new();
    for workspace in root.list_workspaces()? {
        for (instance, dir) in instance_dirs(&workspace) {
            let Ok(undecided) = goondan_store::undecided_approvals(&InstancePaths::from_dir(&dir))
            else {
                // One unreadable file must not hide every other request.
                continue;
            };
            for request in undecided {
                let mut row = serde_json::to_value(&request).unwrap_or(Value::Null);
                if let Some(object) = row.as_object_mut() {
                    object.insert("swarm".into(), workspace.workspace_id().into());
                    object.insert("instance".into(), instance.clone().into());
                }
                waiting.push((request.requested_at, row));
            }
        }
    }
    waiting.sort_by(|a, b| a.0.cmp(&b.0));
    let approvals: Vec<Value> = waiting.into_iter().map(|(_, row)| row).collect();
    Ok(json!({ "approvals": approvals }))
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

/// The newest messages of the instance in `dir`: the tail of the
/// committed base plus the events of a Turn in progress, folded the way
/// the store folds them (an append of a message already in the base is
/// skipped, since a fold may be half done while this reads).
///
/// Only the tail of the base is read, and the fold of that tail is still
/// the tail of the whole fold: `events.jsonl` is read first (it holds one
/// Turn's events, and is read from its end within the same budget), an
/// `append` or `replace` acts on the newest messages only, each `remove`
/// may take one of the newest away (so one more base message is read per
/// `remove`), and after a `truncate` the base is not needed at all. An
/// append already in the base is recognised among the messages read: a
/// half-done fold's appends are the newest lines of the base.
pub(crate) fn conversation(dir: &Path, limits: TailLimits) -> Result<Value, ReadError> {
    let paths = InstancePaths::from_dir(dir);
    let mut events: Vec<Value> = Vec::new();
    let mut report = scan_backwards(&paths.events_log(), limits, |line| {
        if let Ok(event) = serde_json::from_slice::<Value>(line.bytes) {
            events.push(event);
        }
        ControlFlow::Continue(())
    })?;
    events.reverse();
    let n_removes = events
        .iter()
        .filter(|event| event["type"] == "remove")
        .count();
    let has_truncate = events.iter().any(|event| event["type"] == "truncate");
    let mut folded: Vec<Value> = Vec::new();
    let mut has_older = false;
    if !has_truncate {
        let wanted = MAX_MESSAGES + n_removes;
        let base_limits = TailLimits {
            max_read_bytes: limits.max_read_bytes.saturating_sub(report.bytes_read),
            ..limits
        };
        let base_report = scan_backwards(&paths.base_log(), base_limits, |line| {
            if let Ok(message) = serde_json::from_slice::<Value>(line.bytes) {
                folded.push(message);
            }
            if folded.len() >= wanted {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        folded.reverse();
        has_older = base_report.unread_bytes > 0;
        report.absorb(&base_report);
    }
    let base_len = folded.len();
    for event in events {
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
    let n_hidden = n_total.saturating_sub(MAX_MESSAGES);
    Ok(json!({
        "messages": folded.split_off(n_hidden),
        "older": has_older || n_hidden > 0,
        "pending": n_total.saturating_sub(base_len),
        "truncated": report.cut(),
        "skippedLines": report.n_long_lines,
        "bytesRead": report.bytes_read,
    }))
}

/// The newest runtime events of the instance in `dir`, each tagged with
/// the instance's folder name (`instance`).
pub(crate) fn instance_events(
    dir: &Path,
    id: &str,
    limits: TailLimits,
) -> Result<Value, ReadError> {
    let filter = RuntimeEventFilter {
        last: Some(MAX_EVENTS),
        ..RuntimeEventFilter::default()
    };
    let log = InstancePaths::from_dir(dir).runtime_events_log();
    let page = read_runtime_events_within(&log, &filter, limits)?;
    let events: Vec<Value> = page
        .records
        .into_iter()
        .filter_map(|record| tagged(&record.line, id))
        .collect();
    Ok(json!({
        "events": events,
        "truncated": page.tail.cut(),
        "skippedLines": page.tail.n_long_lines,
        "bytesRead": page.tail.bytes_read,
    }))
}

/// The Turns the conversation of the instance in `dir` holds now (what
/// `gdn instance history` lists), oldest first, read from the logs' ends
/// within `limits` (the budget halved between its two logs, the messages
/// and the runtime events): when it stopped short of the log's start, the
/// newest Turns come with no position (`complete` false), and are named
/// by their ids.
pub(crate) fn instance_history(dir: &Path, limits: TailLimits) -> Result<Value, ReadError> {
    let per_log = TailLimits {
        max_read_bytes: limits.max_read_bytes / 2,
        ..limits
    };
    let history = read_turn_history(&InstancePaths::from_dir(dir), per_log)?;
    Ok(json!({
        "turns": history.turns,
        "complete": history.complete,
        "truncated": history.tail.cut(),
        "skippedLines": history.tail.n_long_lines,
    }))
}

/// At most this many extension states of an instance are read.
pub(crate) const MAX_EXTENSION_STATES: usize = 64;
/// A state file larger than this is listed with its size, not read.
pub(crate) const MAX_EXTENSION_STATE_BYTES: u64 = 256 * 1024;

/// The extension states of the instance in `dir`
/// (`extensions/<ext-name>.json`), by name: what an operator edits
/// before resuming. A file over [`MAX_EXTENSION_STATE_BYTES`] is listed
/// with `tooLarge` and its size, a file that is not JSON with `error`;
/// past [`MAX_EXTENSION_STATES`] files the rest are left out (`more`).
pub(crate) fn extension_states(dir: &Path) -> Result<Value, ReadError> {
    let files = goondan_store::extension_state_files(&InstancePaths::from_dir(dir))?;
    let more = files.len() > MAX_EXTENSION_STATES;
    let mut states = Vec::new();
    for (name, path) in files.into_iter().take(MAX_EXTENSION_STATES) {
        // The file may be replaced (a rename) between these reads; the
        // read is bounded whatever its size became.
        let Ok(file) = std::fs::File::open(&path) else {
            continue;
        };
        let mut bytes = Vec::new();
        if file
            .take(MAX_EXTENSION_STATE_BYTES + 1)
            .read_to_end(&mut bytes)
            .is_err()
        {
            continue;
        }
        let size = bytes.len() as u64;
        states.push(if size > MAX_EXTENSION_STATE_BYTES {
            json!({ "name": name, "tooLarge": true, "limitBytes": MAX_EXTENSION_STATE_BYTES })
        } else {
            match serde_json::from_slice::<Value>(&bytes) {
                Ok(state) => json!({ "name": name, "bytes": size, "state": state }),
                Err(error) => json!({ "name": name, "bytes": size, "error": format!("not valid JSON: {error}") }),
            }
        });
    }
    Ok(json!({ "extensions": states, "more": more }))
}

/// The runtime events of `trace_id` in `workspace`, in time order: a
/// bounded scan backwards through the newest part of each instance's log
/// (there is no index by trace). The request's read budget is shared out
/// among the instances still to read, so a trace costs one budget
/// whatever the number of instances; a trace older than what the budget
/// reaches is answered `truncated` with what was found.
pub(crate) fn trace_events(
    workspace: &WorkspacePaths,
    trace_id: &str,
    limits: TailLimits,
) -> Result<Value, ReadError> {
    let filter = RuntimeEventFilter {
        trace_id: Some(trace_id.to_string()),
        last: Some(MAX_EVENTS),
        ..RuntimeEventFilter::default()
    };
    let mut events: Vec<Value> = Vec::new();
    let mut report = TailReport::default();
    let dirs = instance_dirs(workspace);
    let n_dirs = dirs.len() as u64;
    for (index, (id, dir)) in dirs.into_iter().enumerate() {
        let budget_left = limits.max_read_bytes.saturating_sub(report.bytes_read);
        let file_limits = TailLimits {
            max_read_bytes: budget_left / (n_dirs - index as u64),
            ..limits
        };
        let log = InstancePaths::from_dir(&dir).runtime_events_log();
        let page = read_runtime_events_within(&log, &filter, file_limits)?;
        report.absorb(&page.tail);
        events.extend(
            page.records
                .into_iter()
                .filter_map(|record| tagged(&record.line, &id)),
        );
    }
    // ISO 8601 timestamps of one clock order as text.
    events.sort_by(|a, b| a["timestamp"].as_str().cmp(&b["timestamp"].as_str()));
    let n_older = events.len().saturating_sub(MAX_EVENTS);
    Ok(json!({
        "traceId": trace_id,
        "events": events.split_off(n_older),
        "truncated": report.cut(),
        "skippedLines": report.n_long_lines,
        "bytesRead": report.bytes_read,
    }))
}

/// One stored event line as JSON with `instance` added.
pub(crate) fn tagged(line: &str, instance: &str) -> Option<Value> {
    let mut value: Value = serde_json::from_str(line).ok()?;
    value
        .as_object_mut()?
        .insert("instance".into(), Value::String(instance.to_string()));
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str, text: &str) -> Value {
        json!({"id": id, "data": {"role": "user", "content": text}})
    }

    /// The fold of the tail of the base is the tail of the fold of the
    /// whole base, for each kind of pending event.
    #[test]
    fn the_fold_of_the_tail_is_the_tail_of_the_fold() {
        let n_base = MAX_MESSAGES + 200;
        let base: Vec<Value> = (0..n_base)
            .map(|i| message(&format!("m{i}"), "old"))
            .collect();
        let near_end = format!("m{}", n_base - 5);
        let events = vec![
            json!({"type": "remove", "targetId": "m10"}),
            json!({"type": "remove", "targetId": format!("m{}", n_base - 2)}),
            json!({"type": "remove", "targetId": format!("m{}", n_base - 3)}),
            json!({"type": "replace", "targetId": near_end, "message": message(&near_end, "new")}),
            json!({"type": "append", "message": message(&format!("m{}", n_base - 1), "dup")}),
            json!({"type": "append", "message": message("fresh", "hi")}),
            json!({"type": "commit", "turnId": "t"}),
        ];
        let dir = tempfile::tempdir().unwrap();
        let paths = InstancePaths::from_dir(dir.path());
        std::fs::create_dir_all(paths.base_log().parent().unwrap()).unwrap();
        let lines = |values: &[Value]| -> String {
            values.iter().map(|value| format!("{value}\n")).collect()
        };
        std::fs::write(paths.base_log(), lines(&base)).unwrap();
        std::fs::write(paths.events_log(), lines(&events)).unwrap();

        let mut expected = base.clone();
        expected.retain(|m| {
            ![
                "m10".to_string(),
                format!("m{}", n_base - 2),
                format!("m{}", n_base - 3),
            ]
            .contains(&m["id"].as_str().unwrap().to_string())
        });
        for m in expected.iter_mut() {
            if m["id"] == near_end.as_str() {
                *m = message(&near_end, "new");
            }
        }
        expected.push(message("fresh", "hi"));
        let expected = expected.split_off(expected.len() - MAX_MESSAGES);

        let answer = conversation(dir.path(), TailLimits::default()).unwrap();
        assert_eq!(answer["messages"], Value::Array(expected));
        assert_eq!(answer["older"], true);
        assert_eq!(answer["truncated"], false);

        // After a `truncate`, only what came after it is shown, and the
        // base is not read.
        let truncated = vec![
            json!({"type": "truncate"}),
            json!({"type": "append", "message": message("after", "x")}),
        ];
        std::fs::write(paths.events_log(), lines(&truncated)).unwrap();
        let answer = conversation(dir.path(), TailLimits::default()).unwrap();
        assert_eq!(answer["messages"], json!([message("after", "x")]));
        assert_eq!(answer["older"], false);
    }

    #[test]
    fn extension_states_are_read_bounded_and_a_bad_file_is_named_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let paths = InstancePaths::from_dir(dir.path());
        std::fs::create_dir_all(paths.extensions_dir()).unwrap();
        std::fs::write(paths.extension_state_file("memory"), r#"{"facts":["a"]}"#).unwrap();
        std::fs::write(paths.extension_state_file("broken"), "{").unwrap();
        let big = vec![b' '; MAX_EXTENSION_STATE_BYTES as usize + 10];
        std::fs::write(paths.extension_state_file("huge"), big).unwrap();
        std::fs::write(paths.extension_snapshots_log(), "{}\n").unwrap();
        let answer = extension_states(dir.path()).unwrap();
        let names: Vec<&str> = answer["extensions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|state| state["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["broken", "huge", "memory"]);
        assert_eq!(answer["extensions"][2]["state"], json!({"facts": ["a"]}));
        assert!(answer["extensions"][0]["error"]
            .as_str()
            .unwrap()
            .starts_with("not valid JSON"));
        assert_eq!(answer["extensions"][1]["tooLarge"], true);
        assert!(answer["extensions"][1].get("state").is_none());
        assert_eq!(answer["more"], false);
    }
}
