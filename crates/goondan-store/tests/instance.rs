//! Instances as the CLI and the runtime see them, on real files: folder
//! mapping of tricky keys, the single-writer lock, metadata and its epoch,
//! list/delete/reset with audit lines, extension state and the runtime
//! event log.

use goondan_store::{
    read_runtime_events, ExtensionStateStore, InstanceStatus, InstanceStore, RuntimeEventFilter,
    StateRoot, StoreError, TurnJournal,
};
use goondan_types::{
    Message, MessageEvent, MessageSource, ModelMessage, RuntimeEvent, RuntimeEventBase,
};
use serde_json::json;
use std::path::Path;

fn store(root: &Path) -> InstanceStore {
    InstanceStore::new(StateRoot::new(root).workspace("main:prod"))
}

#[test]
fn tricky_instance_keys_get_distinct_folders_inside_the_instance_tree() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let long = "x".repeat(300);
    let long_other = format!("{}y", "x".repeat(299));
    let keys = [
        "user:123",
        "../x",
        ".",
        "..",
        "",
        "a/b",
        "User:123",
        "user%3A123",
        "user:123 ",
        "키-🙂",
        &long,
        &long_other,
    ];
    let instances_dir = store.workspace().instances_dir();
    for key in keys {
        let mut instance = store.open("coder", key).unwrap();
        let dir = instance.paths().dir().to_path_buf();
        assert_eq!(
            dir.parent(),
            Some(instances_dir.as_path()),
            "{key:?} -> {}",
            dir.display()
        );
        let message = Message::new(ModelMessage::user(key), MessageSource::User);
        let events = [MessageEvent::Append {
            message: message.clone(),
        }];
        instance
            .journal_mut()
            .commit_turn(
                "t",
                &events,
                std::slice::from_ref(&message),
                &Default::default(),
            )
            .unwrap();
    }
    // Nothing escaped the instance tree.
    let workspace_entries: Vec<_> = std::fs::read_dir(store.workspace().dir())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(workspace_entries, ["instances"]);
    // Every key reads back its own conversation: no two keys share a folder.
    let listed = store.list().unwrap();
    assert_eq!(listed.len(), keys.len());
    for key in keys {
        let mut instance = store.open("coder", key).unwrap();
        let loaded = instance.journal_mut().load().unwrap();
        assert_eq!(loaded.base.len(), 1, "{key:?}");
        assert_eq!(loaded.base[0].data.text(), key);
        assert_eq!(instance.metadata().instance_key, key);
        assert!(listed
            .iter()
            .any(|s| s.instance_key == key && s.agent_name == "coder"));
    }
}

#[test]
fn two_agents_with_the_same_instance_key_keep_separate_conversations() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let coder = store.open("coder", "default").unwrap();
    let reviewer = store.open("reviewer", "default").unwrap();
    assert_ne!(coder.paths().dir(), reviewer.paths().dir());
    assert!(coder.paths().dir().ends_with("instances/coder:default"));
}

#[test]
fn a_second_writer_is_refused_until_the_first_lets_go() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let first = store.open("coder", "k").unwrap();
    assert_eq!(first.epoch(), 1);
    let error = store.open("coder", "k").unwrap_err();
    assert_eq!(error.code(), "E_STORE_INSTANCE_LOCKED");
    match &error {
        StoreError::InstanceLocked { holder_pid, .. } => {
            assert_eq!(*holder_pid, Some(std::process::id()))
        }
        other => panic!("unexpected {other:?}"),
    }
    // Delete and reset are refused too while the instance is open.
    assert_eq!(
        store.delete("coder", "k").unwrap_err().code(),
        "E_STORE_INSTANCE_LOCKED"
    );
    assert_eq!(
        store.reset_messages("coder", "k").unwrap_err().code(),
        "E_STORE_INSTANCE_LOCKED"
    );

    // Splitting the instance keeps the lock until the last part is gone.
    let parts = first.into_parts();
    drop(parts.runtime_events);
    drop(parts.extension_state);
    drop(parts.metadata);
    assert_eq!(
        store.open("coder", "k").unwrap_err().code(),
        "E_STORE_INSTANCE_LOCKED"
    );
    drop(parts.journal);
    let second = store.open("coder", "k").unwrap();
    assert_eq!(second.epoch(), 2, "every open bumps the epoch");
}

#[test]
fn metadata_has_the_original_fields_and_stays_current() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let mut instance = store.open("coder", "user:123").unwrap();
    let path = instance.paths().metadata_file();
    let read = || {
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&path).unwrap()).unwrap()
    };
    let value = read();
    assert_eq!(value["status"], "idle");
    assert_eq!(value["agentName"], "coder");
    assert_eq!(value["instanceKey"], "user:123");
    assert!(value["createdAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(value["epoch"], 1);
    assert_eq!(value["consecutiveCrashes"], 0);

    instance
        .metadata_file_mut()
        .set_status(InstanceStatus::Processing)
        .unwrap();
    assert_eq!(read()["status"], "processing");
    drop(instance);

    // The orchestrator records a crash while nobody holds the instance.
    let updated = store
        .update_metadata("coder", "user:123", |metadata| {
            metadata.consecutive_crashes += 1;
            metadata.backoff_until = Some("2030-01-01T00:00:00.000Z".to_string());
        })
        .unwrap();
    assert_eq!(updated.consecutive_crashes, 1);
    let value = read();
    assert_eq!(value["consecutiveCrashes"], 1);
    assert_eq!(value["backoffUntil"], "2030-01-01T00:00:00.000Z");
    assert_eq!(value["createdAt"], updated.created_at.as_str());

    // Reopening resets the status a dead owner left behind and keeps the
    // crash counters.
    let instance = store.open("coder", "user:123").unwrap();
    assert_eq!(instance.metadata().status, InstanceStatus::Idle);
    assert_eq!(instance.metadata().consecutive_crashes, 1);
    assert_eq!(instance.epoch(), 2);
}

#[test]
fn recording_a_crash_over_a_damaged_metadata_file_rebuilds_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    drop(store.open("coder", "k").unwrap());
    let metadata_file = store.workspace().instance("coder", "k").metadata_file();
    std::fs::write(&metadata_file, b"{\"status\": \"idle\", \"agentN").unwrap();

    let updated = store
        .update_metadata("coder", "k", |metadata| metadata.consecutive_crashes = 3)
        .unwrap();
    assert_eq!(updated.agent_name, "coder");
    assert_eq!(updated.consecutive_crashes, 3);
    let damaged = metadata_file.with_file_name("metadata.json.damaged");
    assert_eq!(
        std::fs::read(damaged).unwrap(),
        b"{\"status\": \"idle\", \"agentN"
    );
    assert_eq!(
        store
            .open("coder", "k")
            .unwrap()
            .metadata()
            .consecutive_crashes,
        3
    );
}

#[test]
fn a_folder_holding_another_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let paths = store.workspace().instance("coder", "k");
    std::fs::create_dir_all(paths.dir()).unwrap();
    std::fs::write(
        paths.metadata_file(),
        r#"{"status":"idle","agentName":"coder","instanceKey":"K","createdAt":"x","updatedAt":"x"}"#,
    )
    .unwrap();
    let error = store.open("coder", "k").unwrap_err();
    assert_eq!(error.code(), "E_STORE_INSTANCE_KEY_CONFLICT");
    assert!(error.suggestion().is_some());
}

#[test]
fn delete_removes_the_instance_and_leaves_an_audit_line() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    {
        let mut instance = store.open("coder", "user:1").unwrap();
        instance
            .extension_state_mut()
            .save("compaction", &json!({"n": 1}))
            .unwrap();
        store.open("coder", "user:2").unwrap();
    }
    store.delete("coder", "user:1").unwrap();
    let listed = store.list().unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|s| s.instance_key.as_str())
            .collect::<Vec<_>>(),
        ["user:2"]
    );
    assert!(!store.workspace().instance("coder", "user:1").dir().exists());
    let audit = std::fs::read_to_string(store.workspace().audit_log()).unwrap();
    let line: serde_json::Value = serde_json::from_str(audit.trim_end()).unwrap();
    assert_eq!(line["action"], "instance.delete");
    assert_eq!(line["instanceKey"], "user:1");
    assert_eq!(line["agentName"], "coder");
    // No leftovers of the delete itself.
    let entries: Vec<_> = std::fs::read_dir(store.workspace().instances_dir())
        .unwrap()
        .collect();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        store.delete("coder", "user:1").unwrap_err().code(),
        "E_STORE_INSTANCE_NOT_FOUND"
    );
}

#[test]
fn reset_empties_the_message_history_but_keeps_extension_state() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let paths = {
        let mut instance = store.open("coder", "k").unwrap();
        let message = Message::new(ModelMessage::user("hi"), MessageSource::User);
        let event = MessageEvent::Append {
            message: message.clone(),
        };
        instance
            .journal_mut()
            .commit_turn(
                "t1",
                std::slice::from_ref(&event),
                &[message],
                &Default::default(),
            )
            .unwrap();
        instance.journal_mut().record_event("t2", &event).unwrap();
        instance
            .runtime_events()
            .append(&turn_started("coder", "trace-1"))
            .unwrap();
        instance
            .extension_state_mut()
            .save("memo", &json!({"kept": true}))
            .unwrap();
        instance.paths().clone()
    };
    store.reset_messages("coder", "k").unwrap();
    for log in [
        paths.base_log(),
        paths.events_log(),
        paths.runtime_events_log(),
    ] {
        assert_eq!(std::fs::read(&log).unwrap(), b"", "{}", log.display());
    }
    let mut instance = store.open("coder", "k").unwrap();
    let loaded = instance.journal_mut().load().unwrap();
    assert!(loaded.base.is_empty() && loaded.pending_events.is_empty());
    assert_eq!(
        instance.extension_state_mut().load("memo").unwrap(),
        Some(json!({"kept": true}))
    );
    let audit = std::fs::read_to_string(store.workspace().audit_log()).unwrap();
    assert!(audit.contains("\"instance.reset\""));
}

#[test]
fn extension_state_is_restored_and_written_only_when_changed() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let state_path = {
        let mut instance = store.open("coder", "k").unwrap();
        let extension_state = instance.extension_state_mut();
        assert_eq!(extension_state.load("basicCompaction").unwrap(), None);
        let value = json!({"processedSteps": 42, "lastCompactionStep": "step-0041"});
        extension_state.save("basicCompaction", &value).unwrap();
        extension_state.save("basicCompaction", &value).unwrap();
        assert_eq!(
            extension_state.n_writes(),
            1,
            "an unchanged save must not touch the disk"
        );
        extension_state
            .save("basicCompaction", &json!({"processedSteps": 43}))
            .unwrap();
        assert_eq!(extension_state.n_writes(), 2);
        instance.paths().extension_state_file("basicCompaction")
    };
    assert!(state_path.ends_with("extensions/basicCompaction.json"));
    let mut instance = store.open("coder", "k").unwrap();
    let extension_state = instance.extension_state_mut();
    assert_eq!(
        extension_state.load("basicCompaction").unwrap(),
        Some(json!({"processedSteps": 43}))
    );
    // Saving what the file already holds after a restart writes nothing.
    extension_state
        .save("basicCompaction", &json!({"processedSteps": 43}))
        .unwrap();
    assert_eq!(extension_state.n_writes(), 0);

    std::fs::write(&state_path, "{broken").unwrap();
    let error = extension_state.load("basicCompaction").unwrap_err();
    assert_eq!(error.code(), "E_STORE_CORRUPT_STATE");
}

#[test]
fn an_extension_name_cannot_escape_the_extensions_folder() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let mut instance = store.open("coder", "k").unwrap();
    instance
        .extension_state_mut()
        .save("../../evil", &json!(1))
        .unwrap();
    let file = instance.paths().extension_state_file("../../evil");
    assert_eq!(
        file.parent(),
        Some(instance.paths().extensions_dir().as_path())
    );
    assert!(file.exists());
}

fn event_base(agent: &str, trace: &str) -> RuntimeEventBase {
    RuntimeEventBase {
        timestamp: goondan_types::now_iso(),
        agent_name: agent.to_string(),
        instance_key: "k".to_string(),
        trace_id: trace.to_string(),
        span_id: "0123456789abcdef".to_string(),
        parent_span_id: None,
    }
}

fn turn_started(agent: &str, trace: &str) -> RuntimeEvent {
    RuntimeEvent::TurnStarted {
        base: event_base(agent, trace),
        turn_id: format!("turn-{agent}-{trace}"),
        source: None,
    }
}

#[test]
fn runtime_events_are_appended_and_read_back_with_filters() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let instance = store.open("coder", "k").unwrap();
    let log = instance.runtime_events();
    // Enough lines to cross the backwards-scan chunk boundary several times.
    for index in 0..3000 {
        let agent = if index % 3 == 0 { "coder" } else { "reviewer" };
        let trace = format!("trace-{}", index % 10);
        if index % 2 == 0 {
            log.append(&turn_started(agent, &trace)).unwrap();
        } else {
            log.append(&RuntimeEvent::ToolCalled {
                base: event_base(agent, &trace),
                tool_call_id: format!("call-{index}"),
                tool_name: "bash__exec".to_string(),
                step_id: "s".to_string(),
                turn_id: "t".to_string(),
                input_summary: None,
            })
            .unwrap();
        }
    }
    // A writer caught in the middle of a line.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(log.path())
        .unwrap();
    std::io::Write::write_all(&mut file, b"{\"type\":\"turn.sta").unwrap();

    let all = read_runtime_events(log.path(), &RuntimeEventFilter::default()).unwrap();
    assert_eq!(all.records.len(), 3000);
    assert_eq!(all.n_unreadable, 0);
    assert_eq!(all.records[0].event.type_name(), "turn.started");

    let filter = RuntimeEventFilter {
        agent_name: Some("coder".to_string()),
        trace_id: Some("trace-3".to_string()),
        ..RuntimeEventFilter::default()
    };
    let page = read_runtime_events(log.path(), &filter).unwrap();
    // index % 3 == 0 and index % 10 == 3: 3, 33, 63, ... (100 of them).
    assert_eq!(page.records.len(), 100);
    assert!(page
        .records
        .iter()
        .all(|r| r.event.base().agent_name == "coder" && r.event.base().trace_id == "trace-3"));

    let last = RuntimeEventFilter {
        event_type: Some("tool.*".to_string()),
        last: Some(5),
        ..RuntimeEventFilter::default()
    };
    let page = read_runtime_events(log.path(), &last).unwrap();
    let ids: Vec<String> = page
        .records
        .iter()
        .map(|r| match &r.event {
            RuntimeEvent::ToolCalled { tool_call_id, .. } => tool_call_id.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        ids,
        [
            "call-2991",
            "call-2993",
            "call-2995",
            "call-2997",
            "call-2999"
        ]
    );
    assert!(page.records[0]
        .line
        .starts_with("{\"type\":\"tool.called\""));

    let exact = RuntimeEventFilter {
        event_type: Some("turn.started".to_string()),
        last: Some(1),
        ..RuntimeEventFilter::default()
    };
    let page = read_runtime_events(log.path(), &exact).unwrap();
    assert_eq!(page.records.len(), 1);
    assert_eq!(page.records[0].event.base().trace_id, "trace-8");

    let missing = read_runtime_events(
        &dir.path().join("none.jsonl"),
        &RuntimeEventFilter::default(),
    )
    .unwrap();
    assert!(missing.records.is_empty());
}

#[test]
fn the_state_root_must_not_sit_inside_the_project() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    let inside = StateRoot::new(project.join(".goondan"));
    assert_eq!(
        inside.ensure_outside_project(&project).unwrap_err().code(),
        "E_STORE_STATE_ROOT_IN_PROJECT"
    );
    StateRoot::new(dir.path().join("state"))
        .ensure_outside_project(&project)
        .unwrap();
    // Issue 47: `..` and symlinks are followed, not compared as text.
    std::fs::create_dir_all(&project).unwrap();
    StateRoot::new(project.join("../state"))
        .ensure_outside_project(&project)
        .unwrap();
    StateRoot::new(project.join("../state/./deeper/../st"))
        .ensure_outside_project(&project)
        .unwrap();
    let link = dir.path().join("link-into-project");
    std::os::unix::fs::symlink(&project, &link).unwrap();
    assert_eq!(
        StateRoot::new(link.join("state"))
            .ensure_outside_project(&project)
            .unwrap_err()
            .code(),
        "E_STORE_STATE_ROOT_IN_PROJECT"
    );
    let linked_project = dir.path().join("linked-project");
    std::os::unix::fs::symlink(&project, &linked_project).unwrap();
    assert_eq!(
        StateRoot::new(project.join("state"))
            .ensure_outside_project(&linked_project)
            .unwrap_err()
            .code(),
        "E_STORE_STATE_ROOT_IN_PROJECT"
    );
}
