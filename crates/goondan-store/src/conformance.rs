//! The contract every [`TurnJournal`] keeps, as checks any implementation
//! runs against itself: the on-disk [`crate::FileJournal`] here, the
//! JetStream journal of `goondan-cluster` there.
//!
//! Each check gets a fresh instance from the caller's [`JournalUnderTest`]
//! and opens writers on it the way a process would: a crash is a writer
//! dropped without its commit, a restart is a new writer on the same
//! instance. What each check proves is in its name and its doc.

use crate::{CommitContext, OutboxMessage, StoreError, TurnJournal};
use goondan_types::{
    AgentEvent, EventSource, EventSourceKind, Message, MessageEvent, MessageSource, ModelMessage,
};

/// One instance of the implementation under test.
pub trait JournalUnderTest {
    /// Opens a new writer on the instance, as a starting process does.
    /// An implementation may refuse while an earlier writer still lives
    /// (a lock), or take over from it (a fence); see
    /// [`second_writer_is_refused_or_fences_the_first`].
    fn open(&mut self) -> Result<Box<dyn TurnJournal>, StoreError>;
}

/// Runs every check, each on a fresh instance from `fresh`.
pub fn check_all<T: JournalUnderTest>(mut fresh: impl FnMut() -> T) {
    committed_turns_come_back_in_order(&mut fresh());
    a_crash_before_the_commit_leaves_the_events_pending(&mut fresh());
    committing_the_pending_turn_folds_it_once(&mut fresh());
    a_later_turn_sets_an_abandoned_one_aside(&mut fresh());
    a_rewrite_replaces_the_base(&mut fresh());
    second_writer_is_refused_or_fences_the_first(&mut fresh());
    a_long_history_loads_whole(&mut fresh());
    a_commit_context_does_not_change_the_conversation(&mut fresh());
}

fn user(text: &str) -> Message {
    Message::new(ModelMessage::user(text), MessageSource::User)
}

fn append(message: &Message) -> MessageEvent {
    MessageEvent::Append {
        message: message.clone(),
    }
}

fn open(under_test: &mut impl JournalUnderTest) -> Box<dyn TurnJournal> {
    under_test
        .open()
        .unwrap_or_else(|e| panic!("opening a writer failed: {e}"))
}

/// Runs one whole Turn of appends and commits it.
fn commit_appends(
    journal: &mut dyn TurnJournal,
    turn_id: &str,
    base: &mut Vec<Message>,
    new: &[Message],
) {
    let events: Vec<MessageEvent> = new.iter().map(append).collect();
    for event in &events {
        journal.record_event(turn_id, event).expect("record");
    }
    base.extend_from_slice(new);
    journal
        .commit_turn(turn_id, &events, base, &Default::default())
        .expect("commit");
}

/// A commit with a [`CommitContext`] (an inbox cursor, an answer in the
/// outbox) folds exactly what one without does: a store keeps the context
/// or drops it, and loads the same conversation either way.
pub fn a_commit_context_does_not_change_the_conversation(under_test: &mut impl JournalUnderTest) {
    let question = user("q");
    {
        let mut journal = open(under_test);
        let events = [append(&question)];
        journal.record_event("t-1", &events[0]).expect("record");
        let context = CommitContext {
            inbox_seq: Some(3),
            outbox: vec![OutboxMessage {
                to: "orchestrator".to_string(),
                event: AgentEvent::new(
                    "response",
                    EventSource::new(EventSourceKind::Agent, "coder"),
                ),
            }],
        };
        journal
            .commit_turn("t-1", &events, std::slice::from_ref(&question), &context)
            .expect("commit with a context");
    }
    let loaded = open(under_test).load().expect("load");
    assert_eq!(loaded.base, [question]);
    assert!(loaded.pending_events.is_empty(), "{loaded:?}");
}

/// Two committed Turns read back by a new writer: the base in order,
/// nothing pending.
pub fn committed_turns_come_back_in_order(under_test: &mut impl JournalUnderTest) {
    let mut base = Vec::new();
    {
        let mut journal = open(under_test);
        assert_eq!(journal.load().expect("load empty"), Default::default());
        commit_appends(
            journal.as_mut(),
            "t-1",
            &mut base,
            &[user("one"), user("two")],
        );
        commit_appends(journal.as_mut(), "t-2", &mut base, &[user("three")]);
    }
    let loaded = open(under_test).load().expect("load");
    assert_eq!(loaded.base, base);
    assert!(loaded.pending_events.is_empty());
    assert_eq!(loaded.pending_turn_id, None);
}

/// A writer that dies after recording and before committing leaves its
/// events pending, in emission order, under its Turn's id; the base is
/// untouched.
pub fn a_crash_before_the_commit_leaves_the_events_pending(under_test: &mut impl JournalUnderTest) {
    let mut base = Vec::new();
    let (a, b) = (user("asked"), user("half an answer"));
    {
        let mut journal = open(under_test);
        commit_appends(journal.as_mut(), "t-1", &mut base, &[user("before")]);
        journal.record_event("t-2", &append(&a)).expect("record");
        journal.record_event("t-2", &append(&b)).expect("record");
    }
    let loaded = open(under_test).load().expect("load");
    assert_eq!(loaded.base, base);
    assert_eq!(loaded.pending_events, vec![append(&a), append(&b)]);
    assert_eq!(loaded.pending_turn_id.as_deref(), Some("t-2"));
}

/// Recovery commits the pending Turn under its own id; a third writer sees
/// its messages exactly once.
pub fn committing_the_pending_turn_folds_it_once(under_test: &mut impl JournalUnderTest) {
    let pending = user("pending");
    {
        let mut journal = open(under_test);
        journal
            .record_event("t-1", &append(&pending))
            .expect("record");
    }
    {
        let mut journal = open(under_test);
        let loaded = journal.load().expect("load");
        let turn_id = loaded.pending_turn_id.expect("a pending turn");
        let next = vec![pending.clone()];
        journal
            .commit_turn(&turn_id, &loaded.pending_events, &next, &Default::default())
            .expect("commit the pending turn");
    }
    let loaded = open(under_test).load().expect("load");
    assert_eq!(loaded.base, vec![pending]);
    assert!(loaded.pending_events.is_empty());
}

/// A Turn that records on top of an earlier Turn's uncommitted events
/// abandons them: after its commit they are neither in the base nor
/// pending.
pub fn a_later_turn_sets_an_abandoned_one_aside(under_test: &mut impl JournalUnderTest) {
    {
        let mut journal = open(under_test);
        journal
            .record_event("t-1", &append(&user("abandoned")))
            .expect("record");
    }
    let kept = user("kept");
    {
        let mut journal = open(under_test);
        journal.load().expect("load");
        let mut base = Vec::new();
        commit_appends(
            journal.as_mut(),
            "t-2",
            &mut base,
            std::slice::from_ref(&kept),
        );
    }
    let loaded = open(under_test).load().expect("load");
    assert_eq!(loaded.base, vec![kept]);
    assert!(
        loaded.pending_events.is_empty(),
        "{:?}",
        loaded.pending_events
    );
}

/// A Turn that replaces and removes messages commits a base that is not an
/// extension of the old one; it reads back exactly.
pub fn a_rewrite_replaces_the_base(under_test: &mut impl JournalUnderTest) {
    let (first, second, third) = (user("first"), user("second"), user("third"));
    let mut base = Vec::new();
    {
        let mut journal = open(under_test);
        commit_appends(
            journal.as_mut(),
            "t-1",
            &mut base,
            &[first.clone(), second.clone(), third.clone()],
        );
        let mut edited = user("second, edited");
        edited.id = second.id.clone();
        let events = vec![
            MessageEvent::Remove {
                target_id: first.id.clone(),
            },
            MessageEvent::Replace {
                target_id: second.id.clone(),
                message: edited.clone(),
            },
        ];
        for event in &events {
            journal.record_event("t-2", event).expect("record");
        }
        base = vec![edited, third];
        journal
            .commit_turn("t-2", &events, &base, &Default::default())
            .expect("commit");
    }
    assert_eq!(open(under_test).load().expect("load").base, base);
    {
        let mut journal = open(under_test);
        journal.load().expect("load");
        journal
            .record_event("t-3", &MessageEvent::Truncate)
            .expect("record");
        journal
            .commit_turn("t-3", &[MessageEvent::Truncate], &[], &Default::default())
            .expect("commit");
    }
    assert_eq!(
        open(under_test).load().expect("load").base,
        Vec::<Message>::new()
    );
}

/// One writer at a time. While a writer lives, a second `open` is either
/// refused (a lock) or takes the instance over (a fence), in which case
/// every later write of the first fails and leaves no trace.
pub fn second_writer_is_refused_or_fences_the_first(under_test: &mut impl JournalUnderTest) {
    let mut base = Vec::new();
    let mut first = open(under_test);
    first.load().expect("load");
    commit_appends(first.as_mut(), "t-1", &mut base, &[user("by the first")]);
    match under_test.open() {
        Err(_) => {
            // Refused while the first lives; it goes on writing.
            commit_appends(first.as_mut(), "t-2", &mut base, &[user("still the first")]);
            drop(first);
        }
        Ok(mut second) => {
            second.load().expect("load by the second writer");
            let stale = user("by a stale writer");
            let recorded = first.record_event("t-2", &append(&stale));
            let committed = first.commit_turn(
                "t-2",
                &[append(&stale)],
                &[base.clone(), vec![stale]].concat(),
                &Default::default(),
            );
            assert!(
                recorded.is_err() && committed.is_err(),
                "a writer that was taken over must not write (record: {recorded:?}, commit: {committed:?})"
            );
            drop(first);
            commit_appends(second.as_mut(), "t-3", &mut base, &[user("by the second")]);
        }
    }
    let loaded = open(under_test).load().expect("load");
    assert_eq!(loaded.base, base);
    assert!(
        loaded.pending_events.is_empty(),
        "{:?}",
        loaded.pending_events
    );
}

/// 300 Turns of two messages each read back whole and in order.
pub fn a_long_history_loads_whole(under_test: &mut impl JournalUnderTest) {
    let mut base = Vec::new();
    {
        let mut journal = open(under_test);
        for turn in 0..300 {
            commit_appends(
                journal.as_mut(),
                &format!("t-{turn}"),
                &mut base,
                &[
                    user(&format!("question {turn}")),
                    user(&format!("answer {turn}")),
                ],
            );
        }
    }
    let loaded = open(under_test).load().expect("load");
    assert_eq!(loaded.base.len(), 600);
    assert_eq!(loaded.base, base);
}
