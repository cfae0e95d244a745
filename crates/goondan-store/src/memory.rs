//! In-memory storage: the same contracts as the on-disk store, for tests,
//! benchmarks and embedding without a System Root.

use crate::{CommitContext, ExtensionStateStore, LoadedConversation, StoreError, TurnJournal};
use goondan_types::{JsonValue, Message, MessageEvent};
use std::collections::HashMap;

/// A [`TurnJournal`] kept in memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryJournal {
    base: Vec<Message>,
    pending: Vec<(String, MessageEvent)>,
}

impl MemoryJournal {
    /// The committed messages.
    pub fn base(&self) -> &[Message] {
        &self.base
    }

    /// Events recorded but not yet committed.
    pub fn pending(&self) -> impl Iterator<Item = &MessageEvent> {
        self.pending.iter().map(|(_, event)| event)
    }
}

impl TurnJournal for MemoryJournal {
    fn load(&mut self) -> Result<LoadedConversation, StoreError> {
        Ok(LoadedConversation {
            base: self.base.clone(),
            pending_turn_id: self.pending.first().map(|(turn_id, _)| turn_id.clone()),
            pending_events: self
                .pending
                .iter()
                .map(|(_, event)| event.clone())
                .collect(),
            warnings: Vec::new(),
        })
    }

    fn record_event(&mut self, turn_id: &str, event: &MessageEvent) -> Result<(), StoreError> {
        self.pending.push((turn_id.to_string(), event.clone()));
        Ok(())
    }

    fn commit_turn(
        &mut self,
        _turn_id: &str,
        _events: &[MessageEvent],
        next_messages: &[Message],
        _context: &CommitContext,
    ) -> Result<(), StoreError> {
        self.base = next_messages.to_vec();
        self.pending.clear();
        Ok(())
    }
}

/// An [`ExtensionStateStore`] kept in memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryExtensionState {
    states: HashMap<String, JsonValue>,
}

impl ExtensionStateStore for MemoryExtensionState {
    fn load(&mut self, extension_name: &str) -> Result<Option<JsonValue>, StoreError> {
        Ok(self.states.get(extension_name).cloned())
    }

    fn save(&mut self, extension_name: &str, value: &JsonValue) -> Result<(), StoreError> {
        self.states
            .insert(extension_name.to_string(), value.clone());
        Ok(())
    }
}
