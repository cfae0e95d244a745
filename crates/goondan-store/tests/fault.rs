//! Deterministic crashes inside a fold: for every fault point (see
//! `goondan_store::fault`) a child process folds one Turn with that point
//! armed and aborts there; the parent reopens the instance and checks the
//! outcome the commit protocol promises at that point:
//!
//! - crashed before the commit marker was written: the fold is undone, the
//!   base is exactly the old one and the Turn's events are pending again;
//! - crashed after the marker was written: the fold is finished, the base
//!   is exactly the new one and nothing is pending; except for an append
//!   whose delta had not reached the base, which is undone like the first
//!   case (the marker records the byte lengths that tell them apart).
//!
//! Either way base plus pending events is the Turn's conversation, with no
//! message lost or twice, and the instance folds further Turns normally.
//! Each marker-leaving crash is replayed a second time with a crash inside
//! the recovery that resolves it, which must end the same way.
//!
//! The test is both parent and child: when `GOONDAN_STORE_FAULT_CHILD_ROOT`
//! is set, it plays the child and never returns.
#![cfg(unix)]

use goondan_store::fault::{FaultPoint, FAULT_ENV};
use goondan_store::{InstanceStore, StateRoot, TurnJournal};
use goondan_types::{Message, MessageEvent, MessageSource, ModelMessage};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

const TEST_NAME: &str = "a_crash_at_every_fault_point_leaves_the_fold_done_or_undone_never_half";
const ENV_CHILD_ROOT: &str = "GOONDAN_STORE_FAULT_CHILD_ROOT";
const ENV_CHILD_ACTION: &str = "GOONDAN_STORE_FAULT_CHILD_ACTION";
/// The Turn the child folds.
const TURN_ID: &str = "t-crashing";
/// `std::process::abort` raises SIGABRT (6 on every Unix we run on).
const SIGABRT: i32 = 6;

/// What the child does with the instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChildAction {
    /// Records the planned events and folds them.
    Fold,
    /// Only opens the instance, which runs recovery.
    Open,
}

impl ChildAction {
    fn name(self) -> &'static str {
        match self {
            ChildAction::Fold => "fold",
            ChildAction::Open => "open",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FoldKind {
    Append,
    Rewrite,
}

/// Where the conversation stands after the crash and the next open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The base is the old one; the Turn's events are pending.
    Undone,
    /// The base is the new one; nothing is pending.
    Finished,
}

/// What a crash at `point` must produce: the fold that reaches it, the
/// outcome, and whether the commit marker is left in `events.jsonl`.
/// `None` for the recovery point, which no fold reaches.
fn expectation(point: FaultPoint) -> Option<(FoldKind, Outcome, bool)> {
    match point {
        FaultPoint::RewriteTempWritten => Some((FoldKind::Rewrite, Outcome::Undone, false)),
        FaultPoint::RewriteMarkerWritten => Some((FoldKind::Rewrite, Outcome::Finished, true)),
        FaultPoint::RewriteRenamed => Some((FoldKind::Rewrite, Outcome::Finished, true)),
        FaultPoint::AppendMarkerWritten => Some((FoldKind::Append, Outcome::Undone, true)),
        FaultPoint::AppendBaseWritten => Some((FoldKind::Append, Outcome::Finished, true)),
        FaultPoint::RecoveryMarkerResolved => None,
    }
}

fn store(root: &Path) -> InstanceStore {
    InstanceStore::new(StateRoot::new(root).workspace("fault"))
}

fn plan_path(root: &Path) -> std::path::PathBuf {
    root.join("plan.json")
}

fn message(text: &str) -> Message {
    Message::new(ModelMessage::user(text.to_string()), MessageSource::User)
}

fn apply(state: &mut Vec<Message>, event: &MessageEvent) {
    match event {
        MessageEvent::Append { message } => state.push(message.clone()),
        MessageEvent::Replace { target_id, message } => {
            if let Some(slot) = state.iter_mut().find(|m| &m.id == target_id) {
                *slot = message.clone();
            }
        }
        MessageEvent::Remove { target_id } => state.retain(|m| &m.id != target_id),
        MessageEvent::Truncate => state.clear(),
    }
}

fn applied(base: &[Message], events: &[MessageEvent]) -> Vec<Message> {
    let mut state = base.to_vec();
    for event in events {
        apply(&mut state, event);
    }
    state
}

/// Records `events` as one Turn and folds them, as the runtime does.
fn run_turn(
    journal: &mut impl TurnJournal,
    turn_id: &str,
    base: &[Message],
    events: &[MessageEvent],
) {
    for event in events {
        journal.record_event(turn_id, event).unwrap();
    }
    journal
        .commit_turn(turn_id, events, &applied(base, events), &Default::default())
        .unwrap();
}

/// The child: opens the instance and, for [`ChildAction::Fold`], folds the
/// planned Turn. Reaching the armed point aborts it; otherwise it exits 0.
fn run_child(root: &Path, action: &str) -> ! {
    let mut instance = store(root).open("agent", "k").expect("child open");
    if action == ChildAction::Fold.name() {
        let events: Vec<MessageEvent> =
            serde_json::from_slice(&std::fs::read(plan_path(root)).unwrap()).unwrap();
        let journal = instance.journal_mut();
        let loaded = journal.load().unwrap();
        assert!(loaded.pending_events.is_empty());
        run_turn(journal, TURN_ID, &loaded.base, &events);
    }
    std::process::exit(0);
}

/// Runs a child with `point` armed and asserts that it died at it.
fn crash_child_at(root: &Path, action: ChildAction, point: FaultPoint) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(ENV_CHILD_ROOT, root)
        .env(ENV_CHILD_ACTION, action.name())
        .env(FAULT_ENV, point.name())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(
        status.signal(),
        Some(SIGABRT),
        "{action:?} with {} armed did not abort there: {status:?}",
        point.name()
    );
}

/// Commits a three-message base and returns it with the events of the
/// Turn the child will fold.
fn prepare(root: &Path, fold: FoldKind) -> (Vec<Message>, Vec<MessageEvent>) {
    let mut instance = store(root).open("agent", "k").unwrap();
    let journal = instance.journal_mut();
    let setup: Vec<_> = ["one", "two", "three"]
        .map(|text| MessageEvent::Append {
            message: message(text),
        })
        .into();
    run_turn(journal, "t-setup", &[], &setup);
    let before = applied(&[], &setup);
    let events = match fold {
        FoldKind::Append => vec![
            MessageEvent::Append {
                message: message("four"),
            },
            MessageEvent::Append {
                message: message("five"),
            },
        ],
        FoldKind::Rewrite => vec![
            MessageEvent::Replace {
                target_id: before[1].id.clone(),
                message: message("two, edited"),
            },
            MessageEvent::Append {
                message: message("four"),
            },
        ],
    };
    std::fs::write(plan_path(root), serde_json::to_vec(&events).unwrap()).unwrap();
    (before, events)
}

fn ends_with_commit_marker(events_log: &Path) -> bool {
    let text = std::fs::read_to_string(events_log).unwrap_or_default();
    text.lines()
        .last()
        .and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .is_some_and(|line| line["type"] == "commit")
}

#[test]
fn a_crash_at_every_fault_point_leaves_the_fold_done_or_undone_never_half() {
    if let Some(root) = std::env::var_os(ENV_CHILD_ROOT) {
        let action = std::env::var(ENV_CHILD_ACTION).unwrap_or_default();
        run_child(Path::new(&root), &action);
    }
    let mut n_recovery_crashes = 0;
    for point in FaultPoint::ALL {
        let Some((fold, outcome, marker_left)) = expectation(point) else {
            continue;
        };
        for crash_in_recovery in [false, true] {
            if crash_in_recovery && !marker_left {
                // Without a marker recovery has nothing to resolve, so the
                // recovery point is never reached.
                continue;
            }
            let case = format!("{} (crash in recovery: {crash_in_recovery})", point.name());
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            let (before, events) = prepare(root, fold);
            let after = applied(&before, &events);
            crash_child_at(root, ChildAction::Fold, point);
            let paths = StateRoot::new(root)
                .workspace("fault")
                .instance("agent", "k");
            assert_eq!(
                ends_with_commit_marker(&paths.events_log()),
                marker_left,
                "{case}: commit marker on disk"
            );
            if crash_in_recovery {
                crash_child_at(root, ChildAction::Open, FaultPoint::RecoveryMarkerResolved);
                n_recovery_crashes += 1;
            }

            let mut instance = store(root).open("agent", "k").unwrap();
            let loaded = instance.journal_mut().load().unwrap();
            match outcome {
                Outcome::Undone => {
                    assert_eq!(loaded.base, before, "{case}: the old base");
                    assert_eq!(loaded.pending_events, events, "{case}: events pending");
                    assert_eq!(loaded.pending_turn_id.as_deref(), Some(TURN_ID), "{case}");
                }
                Outcome::Finished => {
                    assert_eq!(loaded.base, after, "{case}: the new base");
                    assert!(loaded.pending_events.is_empty(), "{case}: nothing pending");
                }
            }
            let conversation = applied(&loaded.base, &loaded.pending_events);
            assert_eq!(conversation, after, "{case}: nothing lost or twice");
            let mut ids = std::collections::HashSet::new();
            assert!(
                conversation.iter().all(|m| ids.insert(m.id.clone())),
                "{case}"
            );
            assert!(!ends_with_commit_marker(&paths.events_log()), "{case}");
            assert!(
                !paths.base_log().with_file_name("base.jsonl.tmp").exists(),
                "{case}: a temporary base is left"
            );

            // The instance goes on: the pending Turn is folded as the
            // runtime does on start, then a Turn that rewrites the base.
            let journal = instance.journal_mut();
            if !loaded.pending_events.is_empty() {
                journal
                    .commit_turn(TURN_ID, &loaded.pending_events, &after, &Default::default())
                    .unwrap();
            }
            let next = vec![
                MessageEvent::Remove {
                    target_id: after[0].id.clone(),
                },
                MessageEvent::Append {
                    message: message("six"),
                },
            ];
            run_turn(journal, "t-next", &after, &next);
            drop(instance);
            let mut reopened = store(root).open("agent", "k").unwrap();
            let reloaded = reopened.journal_mut().load().unwrap();
            assert_eq!(
                reloaded.base,
                applied(&after, &next),
                "{case}: a further fold"
            );
            assert!(reloaded.pending_events.is_empty(), "{case}");
            assert!(
                reloaded.warnings.is_empty(),
                "{case}: {:?}",
                reloaded.warnings
            );
        }
    }
    assert!(
        n_recovery_crashes > 0,
        "the recovery point was never reached"
    );
}
