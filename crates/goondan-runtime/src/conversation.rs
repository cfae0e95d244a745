//! The conversation as event sourcing: `NextMessages = BaseMessages +
//! SUM(Events)` for one Turn, and the shared handle through which layers
//! emit events that are made durable before they become visible.
//!
//! This module owns the fold. Where the base and events are stored is the
//! store's business (`goondan_store::TurnJournal`).
//!
//! Cost model: emitting an `append` is O(1) (the new message goes to a tail
//! after the base; the base is never copied for appends). The first
//! `replace`/`remove` that touches a base message copies the base once for
//! that Turn. The id→position index is built lazily on the first
//! `replace`/`remove` and rebuilt only after removals shift positions.

use goondan_store::{CommitContext, StoreError, TurnJournal};
use goondan_types::{Message, MessageEvent, ModelMessage};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

/// A `replace`/`remove` whose target was not there. The event stays in the
/// log and the Turn goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldWarning {
    /// Always `E_MESSAGE_TARGET_NOT_FOUND`.
    pub code: &'static str,
    /// `replace` or `remove`.
    pub event_type: &'static str,
    /// The id that matched nothing.
    pub target_id: String,
    /// The position of the event in this Turn's events.
    pub event_index: usize,
}

/// The code of a [`FoldWarning`].
pub const TARGET_NOT_FOUND: &str = "E_MESSAGE_TARGET_NOT_FOUND";

/// How `next` relates to `base` this Turn.
#[derive(Debug, Clone)]
enum NextMessages {
    /// `next = base ++ tail`: only appends so far (or removals inside the
    /// tail), so the base is shared, not copied.
    Shared { tail: Vec<Message> },
    /// A replace/remove/truncate touched the base: `next` owns a copy.
    Owned(Vec<Message>),
}

/// A borrowed view of `nextMessages`, contiguous or not.
#[derive(Debug, Clone, Copy)]
pub struct MessagesView<'a> {
    head: &'a [Message],
    tail: &'a [Message],
}

impl<'a> MessagesView<'a> {
    /// The number of messages.
    pub fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// True when there is no message.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The messages in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &'a Message> + 'a {
        self.head.iter().chain(self.tail.iter())
    }

    /// The message at `index`.
    pub fn get(&self, index: usize) -> Option<&'a Message> {
        if index < self.head.len() {
            self.head.get(index)
        } else {
            self.tail.get(index - self.head.len())
        }
    }

    /// The last message.
    pub fn last(&self) -> Option<&'a Message> {
        self.tail.last().or_else(|| self.head.last())
    }

    /// Copies the messages out.
    pub fn to_vec(&self) -> Vec<Message> {
        self.iter().cloned().collect()
    }
}

/// The message state of one Turn (`shared-types.md` §4).
#[derive(Debug, Clone)]
pub struct ConversationState {
    base: Vec<Message>,
    events: Vec<MessageEvent>,
    next: NextMessages,
    /// id → position in `next`; `None` until a replace/remove needs it.
    index: Option<HashMap<String, usize>>,
    warnings: Vec<FoldWarning>,
}

impl Default for ConversationState {
    fn default() -> Self {
        ConversationState::new(Vec::new())
    }
}

impl ConversationState {
    /// A state whose base is `base` and which has no events yet.
    pub fn new(base: Vec<Message>) -> Self {
        ConversationState {
            base,
            events: Vec::new(),
            next: NextMessages::Shared { tail: Vec::new() },
            index: None,
            warnings: Vec::new(),
        }
    }

    /// The committed messages as they were when the Turn started.
    pub fn base_messages(&self) -> &[Message] {
        &self.base
    }

    /// This Turn's events in emission order.
    pub fn events(&self) -> &[MessageEvent] {
        &self.events
    }

    /// `base + SUM(events)`, kept current after every event.
    pub fn next_messages(&self) -> MessagesView<'_> {
        match &self.next {
            NextMessages::Shared { tail } => MessagesView {
                head: &self.base,
                tail,
            },
            NextMessages::Owned(messages) => MessagesView {
                head: messages,
                tail: &[],
            },
        }
    }

    /// What the model receives: the `data` of every next message.
    pub fn to_llm_messages(&self) -> Vec<ModelMessage> {
        self.next_messages()
            .iter()
            .map(|message| message.data.clone())
            .collect()
    }

    /// Warnings left by replace/remove events whose target was missing.
    pub fn warnings(&self) -> &[FoldWarning] {
        &self.warnings
    }

    /// Applies one event and keeps it in the log.
    pub fn apply(&mut self, event: MessageEvent) {
        let event_index = self.events.len();
        match &event {
            MessageEvent::Append { message } => self.push(message.clone()),
            MessageEvent::Replace { target_id, message } => match self.position(target_id) {
                Some(position) => {
                    let slot = self.slot_mut(position);
                    let old_id = std::mem::replace(slot, message.clone()).id;
                    if old_id != message.id {
                        if let Some(index) = &mut self.index {
                            index.remove(&old_id);
                            index.insert(message.id.clone(), position);
                        }
                    }
                }
                None => self.warn("replace", target_id, event_index),
            },
            MessageEvent::Remove { target_id } => match self.position(target_id) {
                Some(position) => self.remove_at(position),
                None => self.warn("remove", target_id, event_index),
            },
            MessageEvent::Truncate => {
                self.next = NextMessages::Owned(Vec::new());
                self.index = Some(HashMap::new());
            }
        }
        self.events.push(event);
    }

    /// Makes `next` the new base and clears the events. Returns the events
    /// that were folded.
    pub fn fold(&mut self) -> Vec<MessageEvent> {
        let events = std::mem::take(&mut self.events);
        let folded: Result<(), std::convert::Infallible> = self.commit_with(|_, _| Ok(()));
        match folded {
            Ok(()) => events,
            Err(never) => match never {},
        }
    }

    /// Folds `next` into the base only if `write(events, next_messages)`
    /// succeeds; on failure the state is exactly as before, so nothing
    /// emitted is lost and the commit can be retried.
    pub(crate) fn commit_with<E>(
        &mut self,
        write: impl FnOnce(&[MessageEvent], &[Message]) -> Result<(), E>,
    ) -> Result<(), E> {
        match &mut self.next {
            NextMessages::Shared { tail } => {
                let base_len = self.base.len();
                self.base.append(tail);
                if let Err(error) = write(&self.events, &self.base) {
                    let tail = self.base.split_off(base_len);
                    self.next = NextMessages::Shared { tail };
                    return Err(error);
                }
            }
            NextMessages::Owned(messages) => {
                write(&self.events, messages)?;
                self.base = std::mem::take(messages);
                self.next = NextMessages::Shared { tail: Vec::new() };
            }
        }
        // Index positions referred to `next`, which is now the base.
        self.events.clear();
        self.warnings.clear();
        Ok(())
    }

    fn push(&mut self, message: Message) {
        let position = self.next_messages().len();
        if let Some(index) = &mut self.index {
            index.insert(message.id.clone(), position);
        }
        match &mut self.next {
            NextMessages::Shared { tail } => tail.push(message),
            NextMessages::Owned(messages) => messages.push(message),
        }
    }

    fn position(&mut self, id: &str) -> Option<usize> {
        if self.index.is_none() {
            let index = self
                .next_messages()
                .iter()
                .enumerate()
                .map(|(position, message)| (message.id.clone(), position))
                .collect();
            self.index = Some(index);
        }
        self.index.as_ref().and_then(|index| index.get(id).copied())
    }

    /// A mutable slot in `next`, copying the base first when the slot is
    /// inside it.
    fn slot_mut(&mut self, position: usize) -> &mut Message {
        let base_len = self.base.len();
        if matches!(self.next, NextMessages::Shared { .. }) && position < base_len {
            let tail = match std::mem::replace(&mut self.next, NextMessages::Owned(Vec::new())) {
                NextMessages::Shared { tail } | NextMessages::Owned(tail) => tail,
            };
            let mut owned = Vec::with_capacity(base_len + tail.len());
            owned.extend(self.base.iter().cloned());
            owned.extend(tail);
            self.next = NextMessages::Owned(owned);
        }
        match &mut self.next {
            NextMessages::Owned(messages) => &mut messages[position],
            NextMessages::Shared { tail } => &mut tail[position - base_len],
        }
    }

    fn remove_at(&mut self, position: usize) {
        let base_len = self.base.len();
        let removed = match &mut self.next {
            NextMessages::Shared { tail } if position >= base_len => {
                tail.remove(position - base_len)
            }
            _ => {
                // Make sure `next` owns its messages, then remove.
                self.slot_mut(position);
                match &mut self.next {
                    NextMessages::Owned(messages) => messages.remove(position),
                    NextMessages::Shared { tail } => tail.remove(position - base_len),
                }
            }
        };
        let is_last = position == self.next_messages().len();
        match &mut self.index {
            Some(index) if is_last => {
                index.remove(&removed.id);
            }
            // Later positions shifted; rebuild lazily on the next lookup.
            _ => self.index = None,
        }
    }

    fn warn(&mut self, event_type: &'static str, target_id: &str, event_index: usize) {
        tracing::warn!(
            code = TARGET_NOT_FOUND,
            event_type,
            target_id,
            event_index,
            "message event target not found; event ignored"
        );
        self.warnings.push(FoldWarning {
            code: TARGET_NOT_FOUND,
            event_type,
            target_id: target_id.to_string(),
            event_index,
        });
    }
}

/// The journal and the Turn its events belong to. Beside the state, not
/// inside its lock, so an event is recorded the moment it is emitted, even
/// while a reader holds the state.
struct JournalSlot {
    journal: Box<dyn TurnJournal>,
    turn_id: String,
}

struct Shared {
    state: RwLock<ConversationState>,
    /// Lock order: `journal`, then `state`, then `deferred`; `state` is only
    /// ever *tried* for writing while `journal` is held.
    journal: Mutex<JournalSlot>,
    /// Events already recorded but not yet applied, because a
    /// [`StateGuard`] was alive when they were emitted; in emission order.
    deferred: Mutex<Vec<MessageEvent>>,
}

/// The conversation of one instance with its journal, shared by every
/// context of a Turn.
///
/// Emitting records the event in the journal first and applies it second,
/// so whatever a layer saw is already durable. Cloning shares the same
/// conversation.
///
/// Reading and emitting may interleave freely in one task: an event
/// emitted while a [`StateGuard`] is alive is recorded at once, listed by
/// that guard's [`StateGuard::events`] (seed 000 §4.5 rule 3), and applied
/// to `next_messages`, in order, as soon as the last guard drops (so a loop
/// over `next_messages()` may emit `remove` events for what it reads).
#[derive(Clone)]
pub struct Conversation {
    shared: Arc<Shared>,
}

/// Read access to the state. Do not hold it across an `.await`: it is not
/// `Send`, so the compiler refuses that in a middleware future.
pub type ConversationGuard<'a> = StateGuard<'a>;

/// A read lock on the conversation that reads as a [`ConversationState`].
pub struct StateGuard<'a> {
    guard: Option<RwLockReadGuard<'a, ConversationState>>,
    conversation: &'a Conversation,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = ConversationState;
    fn deref(&self) -> &ConversationState {
        match &self.guard {
            Some(guard) => guard,
            // The guard is only taken out in `drop`.
            None => unreachable!("StateGuard used after drop"),
        }
    }
}

impl StateGuard<'_> {
    /// The Turn's events in emission order, including those emitted while
    /// this or another guard was alive (recorded already; they reach
    /// `next_messages` once the last guard drops). Shadows
    /// [`ConversationState::events`], which lists applied events only.
    pub fn events(&self) -> Cow<'_, [MessageEvent]> {
        let deferred = self.conversation.deferred();
        let applied = (**self).events();
        if deferred.is_empty() {
            return Cow::Borrowed(applied);
        }
        Cow::Owned(applied.iter().chain(deferred.iter()).cloned().collect())
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.conversation.flush_deferred();
    }
}

impl std::fmt::Debug for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let turn_id = self.journal().turn_id.clone();
        let state = self.read();
        f.debug_struct("Conversation")
            .field("turn_id", &turn_id)
            .field("base", &state.base.len())
            .field("events", &state.events.len())
            .finish()
    }
}

impl Conversation {
    /// Wraps a state and the journal its events go to.
    pub fn new(state: ConversationState, journal: Box<dyn TurnJournal>) -> Self {
        Conversation {
            shared: Arc::new(Shared {
                state: RwLock::new(state),
                journal: Mutex::new(JournalSlot {
                    journal,
                    turn_id: String::new(),
                }),
                deferred: Mutex::new(Vec::new()),
            }),
        }
    }

    // A panic while holding a lock cannot leave the state half applied:
    // `apply` has no await points and runs after recording, so poisoned
    // locks are taken over as they are.
    fn read(&self) -> RwLockReadGuard<'_, ConversationState> {
        self.shared
            .state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, ConversationState> {
        self.shared
            .state
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn try_write(&self) -> Option<RwLockWriteGuard<'_, ConversationState>> {
        match self.shared.state.try_write() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    fn journal(&self) -> MutexGuard<'_, JournalSlot> {
        self.shared
            .journal
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn deferred(&self) -> MutexGuard<'_, Vec<MessageEvent>> {
        self.shared
            .deferred
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies queued events, in order, once no guard is alive.
    fn flush_deferred(&self) {
        if self.deferred().is_empty() {
            return;
        }
        let Some(mut state) = self.try_write() else {
            return;
        };
        Self::apply_deferred(&mut state, &mut self.deferred());
    }

    fn apply_deferred(state: &mut ConversationState, deferred: &mut Vec<MessageEvent>) {
        for event in deferred.drain(..) {
            state.apply(event);
        }
    }

    /// Reads the state.
    pub fn state(&self) -> StateGuard<'_> {
        StateGuard {
            guard: Some(self.read()),
            conversation: self,
        }
    }

    /// Sets the Turn that recorded events belong to.
    pub(crate) fn begin_turn(&self, turn_id: &str) {
        self.journal().turn_id = turn_id.to_string();
    }

    /// Records `event` in the journal, then applies it; applied behind a
    /// live [`StateGuard`] (see the type docs).
    pub fn emit(&self, event: MessageEvent) -> Result<(), StoreError> {
        let mut slot = self.journal();
        let JournalSlot { journal, turn_id } = &mut *slot;
        journal.record_event(turn_id, &event)?;
        match self.try_write() {
            Some(mut state) => {
                Self::apply_deferred(&mut state, &mut self.deferred());
                state.apply(event);
            }
            None => self.deferred().push(event),
        }
        Ok(())
    }

    /// Asks the journal whether this process is still the instance's only
    /// writer (see `TurnJournal::confirm_writer`).
    pub(crate) fn confirm_writer(&self) -> Result<(), StoreError> {
        self.journal().journal.confirm_writer()
    }

    /// Commits the Turn's events in the journal with `context` (what the
    /// Turn consumed and answered), then folds them into the base. A failed
    /// commit leaves state and journal as they were.
    pub(crate) fn commit(&self, context: &CommitContext) -> Result<(), StoreError> {
        let mut slot = self.journal();
        let mut state = self.write();
        Self::apply_deferred(&mut state, &mut self.deferred());
        let JournalSlot { journal, turn_id } = &mut *slot;
        state.commit_with(|events, next_messages| {
            journal.commit_turn(turn_id, events, next_messages, context)
        })
    }

    /// Applies events recovered from an interrupted Turn without recording
    /// them again (they are already in the journal).
    pub(crate) fn replay(&self, turn_id: &str, events: Vec<MessageEvent>) {
        let mut slot = self.journal();
        slot.turn_id = turn_id.to_string();
        let mut state = self.write();
        for event in events {
            state.apply(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_types::MessageSource;

    fn message(id: &str, text: &str) -> Message {
        let mut message = Message::new(ModelMessage::user(text), MessageSource::User);
        message.id = id.to_string();
        message
    }

    fn texts(state: &ConversationState) -> Vec<String> {
        state
            .next_messages()
            .iter()
            .map(|m| m.data.text())
            .collect()
    }

    /// Recomputes `base + SUM(events)` from scratch, the slow way.
    fn refold(base: &[Message], events: &[MessageEvent]) -> Vec<String> {
        let mut messages = base.to_vec();
        for event in events {
            match event {
                MessageEvent::Append { message } => messages.push(message.clone()),
                MessageEvent::Replace { target_id, message } => {
                    if let Some(slot) = messages.iter_mut().find(|m| &m.id == target_id) {
                        *slot = message.clone();
                    }
                }
                MessageEvent::Remove { target_id } => messages.retain(|m| &m.id != target_id),
                MessageEvent::Truncate => messages.clear(),
            }
        }
        messages.iter().map(|m| m.data.text()).collect()
    }

    #[test]
    fn next_messages_equal_base_plus_sum_of_events_after_every_event() {
        let base = vec![message("a", "A"), message("b", "B"), message("c", "C")];
        let events = vec![
            MessageEvent::Append {
                message: message("d", "D"),
            },
            MessageEvent::Replace {
                target_id: "d".into(),
                message: message("d2", "D2"),
            },
            MessageEvent::Remove {
                target_id: "b".into(),
            },
            MessageEvent::Replace {
                target_id: "a".into(),
                message: message("a2", "A2"),
            },
            MessageEvent::Append {
                message: message("e", "E"),
            },
            MessageEvent::Remove {
                target_id: "e".into(),
            },
            MessageEvent::Remove {
                target_id: "c".into(),
            },
            MessageEvent::Truncate,
            MessageEvent::Append {
                message: message("f", "F"),
            },
            MessageEvent::Replace {
                target_id: "f".into(),
                message: message("f2", "F2"),
            },
        ];
        let mut state = ConversationState::new(base.clone());
        for (n, event) in events.iter().enumerate() {
            state.apply(event.clone());
            assert_eq!(
                texts(&state),
                refold(&base, &events[..=n]),
                "after event {n}"
            );
            assert_eq!(state.events().len(), n + 1);
            assert_eq!(
                state.base_messages().len(),
                3,
                "base is the turn-start snapshot"
            );
        }
        assert!(state.warnings().is_empty());
        let folded = state.fold();
        assert_eq!(folded.len(), events.len());
        assert_eq!(texts(&state), vec!["F2"]);
        assert_eq!(state.base_messages().len(), 1);
        assert!(state.events().is_empty());
    }

    #[test]
    fn replace_or_remove_of_a_missing_target_leaves_a_warning_and_goes_on() {
        let mut state = ConversationState::new(vec![message("a", "A")]);
        state.apply(MessageEvent::Remove {
            target_id: "nope".into(),
        });
        state.apply(MessageEvent::Replace {
            target_id: "gone".into(),
            message: message("x", "X"),
        });
        state.apply(MessageEvent::Append {
            message: message("b", "B"),
        });
        assert_eq!(texts(&state), vec!["A", "B"]);
        assert_eq!(state.events().len(), 3, "the events stay in the log");
        let warnings = state.warnings();
        assert_eq!(warnings.len(), 2);
        assert_eq!(warnings[0].code, TARGET_NOT_FOUND);
        assert_eq!(warnings[0].event_type, "remove");
        assert_eq!(warnings[0].target_id, "nope");
        assert_eq!(warnings[1].event_type, "replace");
        assert_eq!(warnings[1].event_index, 1);
    }

    #[test]
    fn a_failed_commit_leaves_the_state_unchanged_and_can_be_retried() {
        for touch_base in [false, true] {
            let mut state = ConversationState::new(vec![message("a", "A")]);
            state.apply(MessageEvent::Append {
                message: message("b", "B"),
            });
            if touch_base {
                state.apply(MessageEvent::Replace {
                    target_id: "a".into(),
                    message: message("a2", "A2"),
                });
            }
            let before = texts(&state);
            let failed: Result<(), &str> = state.commit_with(|_, _| Err("disk full"));
            assert_eq!(failed, Err("disk full"));
            assert_eq!(texts(&state), before);
            assert_eq!(state.base_messages().len(), 1);
            assert_eq!(state.events().len(), 1 + usize::from(touch_base));
            let mut written = Vec::new();
            state
                .commit_with(|events, next| {
                    written = next.iter().map(|m| m.data.text()).collect();
                    assert_eq!(events.len(), 1 + usize::from(touch_base));
                    Ok::<(), &str>(())
                })
                .unwrap();
            assert_eq!(written, before);
            assert_eq!(state.base_messages().len(), 2);
            assert!(state.events().is_empty());
            state.apply(MessageEvent::Remove {
                target_id: "b".into(),
            });
            assert_eq!(
                texts(&state).len(),
                1,
                "the index still matches after the commit"
            );
        }
    }

    #[test]
    fn events_emitted_while_reading_are_applied_in_order_when_the_last_guard_drops() {
        let journal = goondan_store::MemoryJournal::default();
        let conversation = Conversation::new(
            ConversationState::new(vec![message("a", "A"), message("b", "B")]),
            Box::new(journal),
        );
        conversation.begin_turn("t1");
        {
            let outer = conversation.state();
            let inner = conversation.state();
            for message in outer.next_messages().iter() {
                conversation
                    .emit(MessageEvent::Remove {
                        target_id: message.id.clone(),
                    })
                    .unwrap();
            }
            assert_eq!(
                inner.next_messages().len(),
                2,
                "not applied while guards live"
            );
            // Seed 000 §4.5 rule 3: listed (and recorded) at once.
            assert_eq!(inner.events().len(), 2, "listed while guards live");
            drop(inner);
            assert_eq!(outer.next_messages().len(), 2, "still one guard alive");
        }
        conversation
            .emit(MessageEvent::Append {
                message: message("c", "C"),
            })
            .unwrap();
        let state = conversation.state();
        assert_eq!(texts(&state), vec!["C"]);
        assert_eq!(state.events().len(), 3);
    }

    #[test]
    fn must_list_an_event_emitted_through_a_live_guard_in_events_at_once() {
        let journal = crate::test_support::RecordingJournal::new();
        let conversation =
            Conversation::new(ConversationState::default(), Box::new(journal.clone()));
        conversation.begin_turn("t1");
        let guard = conversation.state();
        assert!(guard.events().is_empty());
        conversation
            .emit(MessageEvent::Append {
                message: message("a", "A"),
            })
            .unwrap();
        let listed: Vec<String> = guard
            .events()
            .iter()
            .map(|event| match event {
                MessageEvent::Append { message } => message.id.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(listed, ["a"], "the guard sees what was just emitted");
        assert_eq!(journal.pending().len(), 1, "and it is durable already");
        drop(guard);
        let state = conversation.state();
        assert_eq!(state.events().len(), 1, "listed once, not twice");
        assert_eq!(texts(&state), vec!["A"]);
    }

    #[test]
    fn appends_do_not_copy_the_base() {
        let mut state = ConversationState::new(vec![message("a", "A")]);
        state.apply(MessageEvent::Append {
            message: message("b", "B"),
        });
        assert!(matches!(state.next, NextMessages::Shared { .. }));
        assert!(
            state.index.is_none(),
            "no index until a replace/remove needs it"
        );
        state.apply(MessageEvent::Remove {
            target_id: "b".into(),
        });
        assert!(
            matches!(state.next, NextMessages::Shared { .. }),
            "tail removals stay shared"
        );
        assert_eq!(texts(&state), vec!["A"]);
    }

    #[test]
    fn to_llm_messages_are_the_data_of_next_messages() {
        let mut state = ConversationState::new(vec![message("a", "A")]);
        state.apply(MessageEvent::Append {
            message: message("b", "B"),
        });
        assert_eq!(
            state.to_llm_messages(),
            vec![ModelMessage::user("A"), ModelMessage::user("B")]
        );
    }
}
