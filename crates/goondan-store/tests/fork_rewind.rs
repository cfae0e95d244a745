//! Issue 36, on real files: the history of an instance's Turns, a fork at
//! a Turn (the original untouched, the fork's log exactly the original's
//! prefix, extension state as of that Turn), a rewind (the cut lines
//! archived byte for byte, extension state rewound), and the refusals,
//! each leaving every file as it was.

use goondan_store::{
    ExtensionStateSource, ExtensionStateStore, InstanceStore, StateRoot, TurnJournal, TurnRef,
};
use goondan_types::{ContentPart, JsonValue, Message, MessageEvent, MessageSource, ModelMessage};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn store(root: &Path) -> InstanceStore {
    InstanceStore::new(StateRoot::new(root).workspace("main"))
}

fn input(text: &str, n: usize, with_turn_id: bool) -> Message {
    let mut message = Message::new(ModelMessage::user(text), MessageSource::User);
    message
        .metadata
        .insert("__goondanInbound".into(), JsonValue::Bool(true));
    message
        .metadata
        .insert("eventId".into(), format!("evt_{n}").into());
    if with_turn_id {
        message
            .metadata
            .insert("turnId".into(), format!("turn_{n}").into());
    }
    message
}

fn answer(text: &str) -> Message {
    Message::new(
        ModelMessage::assistant(vec![ContentPart::text(text)]),
        MessageSource::Assistant {
            step_id: "s".into(),
        },
    )
}

/// Runs Turn `n` of `coder:k` as the runtime would: its messages
/// committed, then the memo extension's state set to `memo` (when given)
/// and the Turn's end reported to the state store.
fn turn(store: &InstanceStore, n: usize, memo: Option<JsonValue>, with_turn_id: bool) {
    let mut instance = store.open("coder", "k").unwrap();
    let base = instance.journal_mut().load().unwrap().base;
    let new = [
        input(&format!("question {n}\nmore"), n, with_turn_id),
        answer("ok"),
    ];
    let events: Vec<MessageEvent> = new
        .iter()
        .map(|message| MessageEvent::Append {
            message: message.clone(),
        })
        .collect();
    let next: Vec<Message> = base.into_iter().chain(new).collect();
    let turn_id = format!("turn_{n}");
    instance
        .journal_mut()
        .commit_turn(&turn_id, &events, &next, &Default::default())
        .unwrap();
    let state = instance.extension_state_mut();
    state.load("memo").unwrap();
    if let Some(memo) = memo {
        state.save("memo", &memo).unwrap();
    }
    state.end_turn(&turn_id).unwrap();
}

/// Every file under `dir`, with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().unwrap() != "instance.lock" {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

fn three_turns(root: &Path) -> InstanceStore {
    let store = store(root);
    turn(&store, 1, Some(json!({"n": 1})), true);
    turn(&store, 2, None, true);
    turn(&store, 3, Some(json!({"n": 3})), true);
    store
}

fn memo_of(dir: &Path) -> Option<JsonValue> {
    let bytes = std::fs::read(dir.join("extensions/memo.json")).ok()?;
    Some(serde_json::from_slice(&bytes).unwrap())
}

#[test]
fn history_lists_each_turn_with_its_position_id_input_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let store = three_turns(dir.path());
    let history = store.history("coder", "k", Default::default()).unwrap();
    assert!(history.complete);
    let rows: Vec<_> = history
        .turns
        .iter()
        .map(|t| (t.index, t.turn_id.clone(), t.input.clone(), t.n_messages))
        .collect();
    assert_eq!(
        rows,
        (1..=3)
            .map(|n| (
                Some(n),
                Some(format!("turn_{n}")),
                format!("question {n}"),
                2
            ))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_fork_holds_exactly_the_history_up_to_its_turn_and_the_state_as_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = three_turns(dir.path());
    let original = store.workspace().instance("coder", "k");
    let before = snapshot(original.dir());

    let report = store
        .fork("coder", "k", &TurnRef::parse("2"), "k-fork", "cli")
        .unwrap();
    assert_eq!(
        snapshot(original.dir()),
        before,
        "the original is untouched"
    );
    assert_eq!(report.at.turn_index, 2);
    assert_eq!(report.n_messages, 4);
    assert_eq!(report.extension_state, ExtensionStateSource::Snapshot);

    let history = store.history("coder", "k", Default::default()).unwrap();
    let base = std::fs::read(original.base_log()).unwrap();
    let forked = std::fs::read(report.dir.join("messages/base.jsonl")).unwrap();
    assert_eq!(forked, base[..history.turns[1].end as usize]);
    // Turn 2 changed nothing: the state Turn 1 left.
    assert_eq!(memo_of(&report.dir), Some(json!({"n": 1})));
    let metadata: JsonValue =
        serde_json::from_slice(&std::fs::read(report.dir.join("metadata.json")).unwrap()).unwrap();
    assert_eq!(metadata["forkedFrom"]["instanceKey"], "k");
    assert_eq!(metadata["forkedFrom"]["turnId"], "turn_2");
    assert_eq!(metadata["forkedFrom"]["turnIndex"], 2);
    assert_eq!(metadata["instanceKey"], "k-fork");

    // At Turn 1, before Turn 1's own change was undone: still n = 1; at
    // the last Turn, the current state.
    let first = store
        .fork("coder", "k", &TurnRef::parse("turn_1"), "k-first", "cli")
        .unwrap();
    assert_eq!(memo_of(&first.dir), Some(json!({"n": 1})));
    let last = store
        .fork("coder", "k", &TurnRef::parse("3"), "k-last", "cli")
        .unwrap();
    assert_eq!(last.extension_state, ExtensionStateSource::Unchanged);
    assert_eq!(memo_of(&last.dir), Some(json!({"n": 3})));
    // The fork runs on: it opens and loads like any instance.
    let mut fork = store.open("coder", "k-fork").unwrap();
    assert_eq!(fork.journal_mut().load().unwrap().base.len(), 4);
}

#[test]
fn a_rewind_archives_what_it_cuts_byte_for_byte_and_rewinds_extension_state() {
    let dir = tempfile::tempdir().unwrap();
    let store = three_turns(dir.path());
    let paths = store.workspace().instance("coder", "k");
    let base_before = std::fs::read(paths.base_log()).unwrap();
    let history = store.history("coder", "k", Default::default()).unwrap();
    let cut = history.turns[0].end as usize;

    let report = store
        .rewind("coder", "k", &TurnRef::parse("1"), "cli")
        .unwrap();
    let archive = report.archive.expect("something was cut");
    assert_eq!((archive.n_turns, archive.n_messages), (2, 4));
    assert_eq!(std::fs::read(paths.base_log()).unwrap(), base_before[..cut]);
    assert_eq!(
        std::fs::read(archive.dir.join("base.jsonl")).unwrap(),
        base_before[cut..]
    );
    assert_eq!(report.extension_state, ExtensionStateSource::Snapshot);
    assert_eq!(memo_of(paths.dir()), Some(json!({"n": 1})));
    assert_eq!(
        serde_json::from_slice::<JsonValue>(
            &std::fs::read(archive.dir.join("extensions/memo.json")).unwrap()
        )
        .unwrap(),
        json!({"n": 3}),
        "the state it replaced is archived"
    );
    assert_eq!(
        store
            .history("coder", "k", Default::default())
            .unwrap()
            .turns
            .len(),
        1
    );
    let archived = store.archived_history("coder", "k").unwrap();
    assert_eq!(archived.len(), 1);
    let indices: Vec<_> = archived[0].turns.iter().map(|t| t.index).collect();
    assert_eq!(indices, [Some(2), Some(3)]);
    assert_eq!(archived[0].manifest.by, "cli");

    // The instance goes on from Turn 1, and its snapshots with it: a new
    // Turn 2 that changes the state, then a rewind to it, is exact again.
    turn(&store, 4, Some(json!({"n": 4})), true);
    assert_eq!(memo_of(paths.dir()), Some(json!({"n": 4})));
    let again = store
        .rewind("coder", "k", &TurnRef::parse("1"), "cli")
        .unwrap();
    assert_eq!(again.extension_state, ExtensionStateSource::Snapshot);
    assert_eq!(memo_of(paths.dir()), Some(json!({"n": 1})));
    // Rewinding to the last Turn changes nothing.
    let nothing = store
        .rewind("coder", "k", &TurnRef::parse("1"), "cli")
        .unwrap();
    assert!(nothing.archive.is_none());
}

#[test]
fn a_turn_older_than_snapshots_falls_back_to_the_current_state_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    // Two Turns of a runtime that did not record Turn ids: their state
    // changes were never snapshotted.
    turn(&store, 1, None, false);
    turn(&store, 2, None, false);
    std::fs::write(
        store
            .workspace()
            .instance("coder", "k")
            .extension_state_file("memo"),
        "{\"n\": 2}\n",
    )
    .unwrap();
    let report = store
        .fork("coder", "k", &TurnRef::parse("1"), "old", "cli")
        .unwrap();
    assert_eq!(
        report.extension_state,
        ExtensionStateSource::CurrentFallback
    );
    assert!(!report.extension_state.is_exact());
    assert_eq!(memo_of(&report.dir), Some(json!({"n": 2})));
}

#[test]
fn bad_requests_are_refused_with_codes_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = three_turns(dir.path());
    store.open("coder", "taken").unwrap();
    let before = snapshot(store.workspace().dir());
    let cases = [
        (
            store
                .fork("coder", "k", &TurnRef::parse("4"), "new", "cli")
                .unwrap_err(),
            "E_TURN_NOT_FOUND",
        ),
        (
            store
                .rewind("coder", "k", &TurnRef::parse("0"), "cli")
                .unwrap_err(),
            "E_TURN_NOT_FOUND",
        ),
        (
            store
                .rewind("coder", "k", &TurnRef::parse("turn_nope"), "cli")
                .unwrap_err(),
            "E_TURN_NOT_FOUND",
        ),
        (
            store
                .fork("coder", "k", &TurnRef::parse("1"), "taken", "cli")
                .unwrap_err(),
            "E_INSTANCE_EXISTS",
        ),
        (
            store
                .fork("coder", "nope", &TurnRef::parse("1"), "x", "cli")
                .unwrap_err(),
            "E_STORE_INSTANCE_NOT_FOUND",
        ),
    ];
    for (error, code) in cases {
        assert_eq!(error.code(), code, "{error}");
        assert!(error.suggestion().is_some(), "{error}");
    }
    // The same refusals, checked without the lock: what a caller that
    // stops the instance's process first asks before stopping it.
    let checks = [
        ("k", "4", None, Some("E_TURN_NOT_FOUND")),
        ("k", "turn_nope", None, Some("E_TURN_NOT_FOUND")),
        ("k", "1", Some("taken"), Some("E_INSTANCE_EXISTS")),
        ("k", "1", Some("k"), Some("E_INSTANCE_EXISTS")),
        ("nope", "1", None, Some("E_STORE_INSTANCE_NOT_FOUND")),
        ("k", "turn_2", Some("free"), None),
        ("k", "3", None, None),
    ];
    for (key, turn, new_key, expected) in checks {
        let checked = store.check_rewrite("coder", key, &TurnRef::parse(turn), new_key);
        assert_eq!(
            checked.as_ref().err().map(|error| error.code()),
            expected,
            "{key} {turn} {new_key:?}: {checked:?}"
        );
    }
    assert!(goondan_store::fork_key("k").starts_with("k-fork-"));
    assert_ne!(goondan_store::fork_key("k"), goondan_store::fork_key("k"));
    // An open instance (its agent process runs) is not rewritten.
    let held = store.open("coder", "k").unwrap();
    let locked = store
        .rewind("coder", "k", &TurnRef::parse("1"), "cli")
        .unwrap_err();
    assert_eq!(locked.code(), "E_STORE_INSTANCE_LOCKED");
    drop(held);
    let mut after = snapshot(store.workspace().dir());
    // Opening the instance above rewrote its metadata (epoch, time) only.
    let metadata = store.workspace().instance("coder", "k").metadata_file();
    after.remove(&metadata);
    let mut before = before;
    before.remove(&metadata);
    assert_eq!(after, before);
}
