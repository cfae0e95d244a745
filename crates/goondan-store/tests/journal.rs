//! The on-disk journal through its public API, on real files: delta append
//! versus rewrite, recovery from torn lines and interrupted commits, Turn
//! separation, and the formats other readers depend on.

use goondan_store::{InstanceStore, StateRoot, SyncPolicy, TurnJournal};
use goondan_types::{Message, MessageEvent, MessageSource, ModelMessage};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn user(text: &str) -> Message {
    Message::new(ModelMessage::user(text), MessageSource::User)
}

fn append(message: &Message) -> MessageEvent {
    MessageEvent::Append {
        message: message.clone(),
    }
}

fn store(root: &Path) -> InstanceStore {
    InstanceStore::new(StateRoot::new(root).workspace("main:prod"))
}

fn ids(messages: &[Message]) -> Vec<&str> {
    messages.iter().map(|m| m.id.as_str()).collect()
}

/// Records `events` under `turn_id` and commits `next`.
fn turn(journal: &mut impl TurnJournal, turn_id: &str, events: &[MessageEvent], next: &[Message]) {
    for event in events {
        journal.record_event(turn_id, event).unwrap();
    }
    journal
        .commit_turn(turn_id, events, next, &Default::default())
        .unwrap();
}

#[test]
fn append_only_turns_append_to_base_and_mutations_rewrite_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut instance = store(dir.path()).open("coder", "user:123").unwrap();
    let base_path = instance.paths().base_log();
    let journal = instance.journal_mut();

    let first = [user("one"), user("two")];
    turn(
        journal,
        "t1",
        &[append(&first[0]), append(&first[1])],
        &first,
    );
    let before = std::fs::read(&base_path).unwrap();
    let inode_before = std::fs::metadata(&base_path).unwrap().ino();

    let third = user("three");
    let next: Vec<Message> = first.iter().cloned().chain([third.clone()]).collect();
    turn(journal, "t2", &[append(&third)], &next);
    let after = std::fs::read(&base_path).unwrap();
    assert!(
        after.starts_with(&before),
        "an append-only Turn must append, not rewrite"
    );
    assert_eq!(std::fs::metadata(&base_path).unwrap().ino(), inode_before);
    assert_eq!(String::from_utf8(after).unwrap().lines().count(), 3);

    let replacement = Message {
        id: "m1-v2".to_string(),
        ..user("ONE")
    };
    let replaced = vec![replacement.clone(), next[1].clone(), next[2].clone()];
    let event = MessageEvent::Replace {
        target_id: next[0].id.clone(),
        message: replacement,
    };
    turn(journal, "t3", &[event], &replaced);
    assert_ne!(
        std::fs::metadata(&base_path).unwrap().ino(),
        inode_before,
        "a mutation must rewrite (temp file + rename)"
    );
    let text = std::fs::read_to_string(&base_path).unwrap();
    let stored: Vec<Message> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(stored, replaced);
    assert!(!base_path.with_file_name("base.jsonl.tmp").exists());
    assert_eq!(std::fs::read(instance.paths().events_log()).unwrap(), b"");
}

#[test]
fn truncate_and_remove_rewrite_and_reload_matches() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let messages: Vec<Message> = (0..5).map(|i| user(&format!("m{i}"))).collect();
    {
        let mut instance = store.open("coder", "k").unwrap();
        let events: Vec<MessageEvent> = messages.iter().map(append).collect();
        turn(instance.journal_mut(), "t1", &events, &messages);
        let remove = MessageEvent::Remove {
            target_id: messages[2].id.clone(),
        };
        let mut after_remove = messages.clone();
        after_remove.remove(2);
        turn(instance.journal_mut(), "t2", &[remove], &after_remove);
        let fresh = user("fresh");
        turn(
            instance.journal_mut(),
            "t3",
            &[MessageEvent::Truncate, append(&fresh)],
            std::slice::from_ref(&fresh),
        );
    }
    let mut instance = store.open("coder", "k").unwrap();
    let loaded = instance.journal_mut().load().unwrap();
    assert_eq!(loaded.base.len(), 1);
    assert_eq!(loaded.base[0].data.text(), "fresh");
    assert!(loaded.pending_events.is_empty());
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn uncommitted_events_come_back_pending_with_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let committed = user("committed");
    let pending = user("pending");
    {
        let mut instance = store.open("coder", "k").unwrap();
        turn(
            instance.journal_mut(),
            "t1",
            &[append(&committed)],
            std::slice::from_ref(&committed),
        );
        instance
            .journal_mut()
            .record_event("t2", &append(&pending))
            .unwrap();
    }
    let mut instance = store.open("coder", "k").unwrap();
    let journal = instance.journal_mut();
    let loaded = journal.load().unwrap();
    assert_eq!(ids(&loaded.base), [committed.id.as_str()]);
    assert_eq!(loaded.pending_events, vec![append(&pending)]);
    assert_eq!(loaded.pending_turn_id.as_deref(), Some("t2"));

    // The documented recovery: fold the pending Turn before the next one.
    let next = vec![committed.clone(), pending.clone()];
    journal
        .commit_turn("t2", &loaded.pending_events, &next, &Default::default())
        .unwrap();
    drop(instance);
    let mut instance = store.open("coder", "k").unwrap();
    let loaded = instance.journal_mut().load().unwrap();
    assert_eq!(loaded.base, next);
    assert!(loaded.pending_events.is_empty());
}

#[test]
fn event_lines_keep_the_original_shape_plus_turn_id() {
    let dir = tempfile::tempdir().unwrap();
    let mut instance = store(dir.path()).open("coder", "k").unwrap();
    let message = user("hi");
    instance
        .journal_mut()
        .record_event("turn-9", &append(&message))
        .unwrap();
    let text = std::fs::read_to_string(instance.paths().events_log()).unwrap();
    let line: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(line["type"], "append");
    assert_eq!(line["turnId"], "turn-9");
    assert_eq!(line["message"]["id"], message.id.as_str());
    assert_eq!(line["message"]["data"]["role"], "user");
    assert!(text.ends_with('\n'));
}

#[test]
fn events_written_by_the_original_without_turn_id_are_pending() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let paths = store.workspace().instance("coder", "k");
    std::fs::create_dir_all(paths.messages_dir()).unwrap();
    std::fs::write(
        paths.base_log(),
        "{\"id\":\"m1\",\"data\":{\"role\":\"user\",\"content\":\"Hello\"},\"metadata\":{},\"createdAt\":\"2026-02-01T12:00:00Z\",\"source\":{\"type\":\"user\"}}\n",
    )
    .unwrap();
    std::fs::write(
        paths.events_log(),
        "{\"type\":\"replace\",\"targetId\":\"m1\",\"message\":{\"id\":\"m1-v2\",\"data\":{\"role\":\"user\",\"content\":\"Updated\"},\"metadata\":{},\"createdAt\":\"2026-02-01T12:01:01Z\",\"source\":{\"type\":\"extension\",\"extensionName\":\"compaction\"}}}\n",
    )
    .unwrap();
    let mut instance = store.open("coder", "k").unwrap();
    let loaded = instance.journal_mut().load().unwrap();
    assert_eq!(loaded.base[0].id, "m1");
    assert_eq!(loaded.pending_events.len(), 1);
    assert_eq!(loaded.pending_turn_id, None);
}

#[test]
fn torn_last_lines_are_dropped_with_a_warning_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let kept = user("kept");
    let paths = {
        let mut instance = store.open("coder", "k").unwrap();
        turn(
            instance.journal_mut(),
            "t1",
            &[append(&kept)],
            std::slice::from_ref(&kept),
        );
        instance
            .journal_mut()
            .record_event("t2", &append(&user("whole")))
            .unwrap();
        instance.paths().clone()
    };
    let mut events = std::fs::OpenOptions::new()
        .append(true)
        .open(paths.events_log())
        .unwrap();
    std::io::Write::write_all(&mut events, b"{\"type\":\"append\",\"mess").unwrap();
    let mut base = std::fs::OpenOptions::new()
        .append(true)
        .open(paths.base_log())
        .unwrap();
    std::io::Write::write_all(&mut base, b"{\"id\":\"torn\",\"da").unwrap();

    let mut instance = store.open("coder", "k").unwrap();
    let journal = instance.journal_mut();
    let loaded = journal.load().unwrap();
    assert_eq!(ids(&loaded.base), [kept.id.as_str()]);
    assert_eq!(loaded.pending_events.len(), 1);
    assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
    assert!(loaded.warnings.iter().all(|w| w.contains("torn")));
    // Appends after the repair start on a fresh line.
    let extra = user("extra");
    journal.record_event("t2", &append(&extra)).unwrap();
    let events_text = std::fs::read_to_string(paths.events_log()).unwrap();
    assert_eq!(events_text.lines().count(), 2);
    for line in events_text.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }
}

#[test]
fn a_corrupt_middle_line_fails_the_open_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let paths = store.workspace().instance("coder", "k");
    std::fs::create_dir_all(paths.messages_dir()).unwrap();
    std::fs::write(paths.base_log(), "not json\n{}\n").unwrap();
    let error = store.open("coder", "k").unwrap_err();
    assert_eq!(error.code(), "E_STORE_CORRUPT_LOG");
    assert!(error.to_string().contains("base.jsonl:1"), "{error}");
    assert!(error.suggestion().unwrap().contains("line 1"));
    // Nothing stored was touched.
    assert_eq!(
        std::fs::read_to_string(paths.base_log()).unwrap(),
        "not json\n{}\n"
    );
}

#[test]
fn events_of_an_abandoned_turn_are_set_aside_not_mixed() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let abandoned = user("abandoned");
    let current = user("current");
    let paths = {
        let mut instance = store.open("coder", "k").unwrap();
        let journal = instance.journal_mut();
        journal
            .record_event("t-failed", &append(&abandoned))
            .unwrap();
        journal.record_event("t-now", &append(&current)).unwrap();
        instance.paths().clone()
    };
    let mut instance = store.open("coder", "k").unwrap();
    let loaded = instance.journal_mut().load().unwrap();
    assert_eq!(loaded.pending_events, vec![append(&current)]);
    assert_eq!(loaded.pending_turn_id.as_deref(), Some("t-now"));
    assert!(
        loaded.warnings.iter().any(|w| w.contains("t-failed")),
        "{:?}",
        loaded.warnings
    );
    let orphaned = std::fs::read_to_string(paths.orphaned_events_log()).unwrap();
    assert!(orphaned.contains(&abandoned.id));
    let events = std::fs::read_to_string(paths.events_log()).unwrap();
    assert!(!events.contains(&abandoned.id));
    assert!(events.contains(&current.id));
}

/// Writes the files a crash inside `commit_turn` leaves behind, for each
/// point of the protocol, and checks what the next open makes of them.
#[test]
fn interrupted_commits_resolve_to_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let m1 = user("one");
    let m2 = user("two");
    let line = |m: &Message| format!("{}\n", serde_json::to_string(m).unwrap());
    let event_line = |m: &Message| {
        let mut value = serde_json::to_value(append(m)).unwrap();
        value["turnId"] = "t2".into();
        format!("{value}\n")
    };
    let base1 = line(&m1);
    let n1 = base1.len();
    let n2 = n1 + line(&m2).len();
    let append_marker =
        format!("{{\"type\":\"commit\",\"turnId\":\"t2\",\"mode\":\"append\",\"baseBytes\":{n1},\"baseBytesAfter\":{n2}}}\n");
    let rewrite_marker =
        format!("{{\"type\":\"commit\",\"turnId\":\"t2\",\"mode\":\"rewrite\",\"baseBytes\":{n1},\"baseBytesAfter\":{}}}\n", line(&m2).len());
    let full = format!("{base1}{}", line(&m2));
    let half = format!("{base1}{}", &line(&m2)[..10]);
    // (base, events, temp base, expected base ids, expected pending count)
    type Case<'a> = (String, String, Option<String>, Vec<&'a str>, usize);
    let cases: Vec<Case> = vec![
        // Killed before the marker: nothing happened.
        (base1.clone(), event_line(&m2), None, vec![&m1.id], 1),
        // Marker written, append not started: rolled back.
        (
            base1.clone(),
            format!("{}{append_marker}", event_line(&m2)),
            None,
            vec![&m1.id],
            1,
        ),
        // Marker written, append cut short: rolled back, torn bytes gone.
        (
            half,
            format!("{}{append_marker}", event_line(&m2)),
            None,
            vec![&m1.id],
            1,
        ),
        // Append done, events not cleared: rolled forward, no duplicate.
        (
            full.clone(),
            format!("{}{append_marker}", event_line(&m2)),
            None,
            vec![&m1.id, &m2.id],
            0,
        ),
        // Rewrite: temp written, marker missing: old base stays.
        (
            base1.clone(),
            event_line(&m2),
            Some(line(&m2)),
            vec![&m1.id],
            1,
        ),
        // Rewrite: marker written, rename not done: new base.
        (
            base1.clone(),
            format!("{}{rewrite_marker}", event_line(&m2)),
            Some(line(&m2)),
            vec![&m2.id],
            0,
        ),
        // Rewrite: renamed, events not cleared: new base, no replay.
        (
            line(&m2),
            format!("{}{rewrite_marker}", event_line(&m2)),
            None,
            vec![&m2.id],
            0,
        ),
    ];
    for (index, (base, events, temp, expected_ids, expected_pending)) in
        cases.into_iter().enumerate()
    {
        let store = store(&dir.path().join(index.to_string()));
        let paths = store.workspace().instance("coder", "k");
        std::fs::create_dir_all(paths.messages_dir()).unwrap();
        std::fs::write(paths.base_log(), &base).unwrap();
        std::fs::write(paths.events_log(), &events).unwrap();
        if let Some(temp) = &temp {
            std::fs::write(paths.base_log().with_file_name("base.jsonl.tmp"), temp).unwrap();
        }
        let mut instance = store.open("coder", "k").unwrap();
        let loaded = instance.journal_mut().load().unwrap();
        assert_eq!(ids(&loaded.base), expected_ids, "case {index}");
        assert_eq!(
            loaded.pending_events.len(),
            expected_pending,
            "case {index}"
        );
        assert!(
            !paths.base_log().with_file_name("base.jsonl.tmp").exists(),
            "case {index}"
        );
        let events_after = std::fs::read_to_string(paths.events_log()).unwrap();
        assert!(
            !events_after.contains("\"commit\""),
            "case {index}: {events_after}"
        );
        let base_after = std::fs::read_to_string(paths.base_log()).unwrap();
        assert_eq!(
            base_after.lines().count(),
            expected_ids.len(),
            "case {index}"
        );
    }
}

/// The files of one instance written by hand: `base` messages, then
/// `events` lines (each an append of Turn `t2` unless given as raw text).
struct HandWritten {
    _dir: tempfile::TempDir,
    store: InstanceStore,
    paths: goondan_store::InstancePaths,
}

fn message_line(message: &Message) -> String {
    format!("{}\n", serde_json::to_string(message).unwrap())
}

fn event_line(turn_id: &str, event: &MessageEvent) -> String {
    let mut value = serde_json::to_value(event).unwrap();
    value["turnId"] = turn_id.into();
    format!("{value}\n")
}

fn hand_written(base: &str, events: &str, temp: Option<&str>) -> HandWritten {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let paths = store.workspace().instance("coder", "k");
    std::fs::create_dir_all(paths.messages_dir()).unwrap();
    std::fs::write(paths.base_log(), base).unwrap();
    std::fs::write(paths.events_log(), events).unwrap();
    if let Some(temp) = temp {
        std::fs::write(paths.base_log().with_file_name("base.jsonl.tmp"), temp).unwrap();
    }
    HandWritten {
        _dir: dir,
        store,
        paths,
    }
}

/// A marker that cannot describe the files (a hand edit, mismatched
/// copies) used to be followed anyway: `baseBytesAfter: 0` cut the base to
/// nothing, a huge `baseBytes` replayed a finished append a second time.
/// Now the open fails with the place and a way out, and no byte changes.
#[test]
fn issue_16_11_an_impossible_commit_marker_is_refused_and_nothing_is_cut() {
    let history: Vec<Message> = (0..3).map(|i| user(&format!("old {i}"))).collect();
    let turn_message = user("this turn");
    let old_base: String = history.iter().map(message_line).collect();
    let full_base = format!("{old_base}{}", message_line(&turn_message));
    let n_old = old_base.len();
    let n_full = full_base.len();
    let marker = |mode: &str, before: &str, after: &str| {
        format!(
            "{}{{\"type\":\"commit\",\"turnId\":\"t2\",\"mode\":\"{mode}\",\"baseBytes\":{before},\"baseBytesAfter\":{after}}}\n",
            event_line("t2", &append(&turn_message))
        )
    };
    let huge = "1000000000000000000";
    // (what, base, events, temp)
    let cases: Vec<(&str, String, String, Option<String>)> = vec![
        (
            "append to 0 bytes",
            full_base.clone(),
            marker("append", &n_old.to_string(), "0"),
            None,
        ),
        (
            "append from and to 0",
            full_base.clone(),
            marker("append", "0", "0"),
            None,
        ),
        (
            "append to 1e18 bytes",
            full_base.clone(),
            marker("append", &n_old.to_string(), huge),
            None,
        ),
        (
            "append to 1e18 as a float",
            full_base.clone(),
            marker("append", &n_old.to_string(), "1e18"),
            None,
        ),
        (
            "append from 1e18 bytes",
            full_base.clone(),
            marker("append", huge, &format!("{huge}1")),
            None,
        ),
        (
            "append claiming the whole history",
            full_base.clone(),
            marker("append", "0", &n_full.to_string()),
            None,
        ),
        (
            "append claiming history, cut short",
            full_base.clone(),
            marker("append", "0", &(n_full + 10).to_string()),
            None,
        ),
        (
            "append starting mid-line",
            full_base.clone(),
            marker("append", &(n_old - 5).to_string(), &n_full.to_string()),
            None,
        ),
        (
            "append shorter than the base",
            full_base.clone(),
            marker(
                "append",
                &(n_old - message_line(&history[2]).len()).to_string(),
                &n_old.to_string(),
            ),
            None,
        ),
        (
            "rewrite to 0 bytes",
            full_base.clone(),
            marker("rewrite", &n_old.to_string(), "0"),
            None,
        ),
        (
            "rewrite whose temp does not match",
            old_base.clone(),
            marker("rewrite", &n_old.to_string(), "0"),
            Some(message_line(&turn_message)),
        ),
    ];
    for (what, base, events, temp) in cases {
        let files = hand_written(&base, &events, temp.as_deref());
        let error = files.store.open("coder", "k").unwrap_err();
        assert_eq!(error.code(), "E_STORE_CORRUPT_LOG", "{what}: {error}");
        let text = error.to_string();
        assert!(text.contains("events.jsonl:2"), "{what}: {text}");
        assert!(error.suggestion().is_some(), "{what}");
        assert_eq!(
            std::fs::read_to_string(files.paths.base_log()).unwrap(),
            base,
            "{what}: the base must be left as it is"
        );
        assert_eq!(
            std::fs::read_to_string(files.paths.events_log()).unwrap(),
            events,
            "{what}: the events must be left as they are"
        );
        let temp_path = files.paths.base_log().with_file_name("base.jsonl.tmp");
        assert_eq!(
            std::fs::read_to_string(&temp_path).ok(),
            temp,
            "{what}: the temporary base must be left as it is"
        );
    }
}

/// A commit that finished but lost its marker (deleted by hand) leaves the
/// Turn's events pending; replaying them used to append their messages a
/// second time. Recovery now skips what the base already holds, by id.
#[test]
fn issue_16_11_a_lost_commit_marker_does_not_duplicate_messages() {
    let first = user("first");
    let second = user("second");
    let third = user("third");
    let base_two = format!("{}{}", message_line(&first), message_line(&second));

    // The append finished: nothing is pending and the events are cleared.
    let files = hand_written(&base_two, &event_line("t2", &append(&second)), None);
    let mut instance = files.store.open("coder", "k").unwrap();
    let loaded = instance.journal_mut().load().unwrap();
    assert_eq!(ids(&loaded.base), [first.id.as_str(), second.id.as_str()]);
    assert!(
        loaded.pending_events.is_empty(),
        "{:?}",
        loaded.pending_events
    );
    assert_eq!(loaded.pending_turn_id, None);
    assert!(
        loaded.warnings.iter().any(|w| w.contains("already folded")),
        "{:?}",
        loaded.warnings
    );
    assert_eq!(
        std::fs::read_to_string(files.paths.events_log()).unwrap(),
        ""
    );
    drop(instance);

    // Only part of the append reached the base: the rest stays pending,
    // and folding it gives each message once.
    let events = format!(
        "{}{}",
        event_line("t2", &append(&second)),
        event_line("t2", &append(&third))
    );
    let files = hand_written(&base_two, &events, None);
    let mut instance = files.store.open("coder", "k").unwrap();
    let journal = instance.journal_mut();
    let loaded = journal.load().unwrap();
    assert_eq!(loaded.pending_events, vec![append(&third)]);
    let next = vec![first.clone(), second.clone(), third.clone()];
    journal
        .commit_turn("t2", &loaded.pending_events, &next, &Default::default())
        .unwrap();
    drop(instance);
    let mut instance = files.store.open("coder", "k").unwrap();
    assert_eq!(instance.journal_mut().load().unwrap().base, next);
    drop(instance);

    // A rewrite (remove + append) that was renamed into place: the whole
    // Turn is done, the remove is not replayed against the new base.
    let events = format!(
        "{}{}",
        event_line(
            "t2",
            &MessageEvent::Remove {
                target_id: first.id.clone()
            }
        ),
        event_line("t2", &append(&third))
    );
    let rewritten = format!("{}{}", message_line(&second), message_line(&third));
    let files = hand_written(&rewritten, &events, None);
    let mut instance = files.store.open("coder", "k").unwrap();
    let loaded = instance.journal_mut().load().unwrap();
    assert_eq!(ids(&loaded.base), [second.id.as_str(), third.id.as_str()]);
    assert!(loaded.pending_events.is_empty());
}

#[test]
fn every_sync_policy_round_trips() {
    for policy in [
        SyncPolicy::ProcessCrash,
        SyncPolicy::TurnCommit,
        SyncPolicy::EveryEvent,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path()).with_sync_policy(policy);
        let message = user("x");
        {
            let mut instance = store.open("coder", "k").unwrap();
            turn(
                instance.journal_mut(),
                "t1",
                &[append(&message)],
                std::slice::from_ref(&message),
            );
        }
        let mut instance = store.open("coder", "k").unwrap();
        assert_eq!(
            instance.journal_mut().load().unwrap().base,
            vec![message],
            "{policy:?}"
        );
    }
}
