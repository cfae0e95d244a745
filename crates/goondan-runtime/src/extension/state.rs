//! `api.state`: JSON state per extension and instance, restored from the
//! store when the agent starts and written back at the end of a Turn only
//! when it changed (seed 003 §13.4).

use goondan_store::{ExtensionStateStore, StoreError};
use goondan_types::JsonValue;
use std::sync::{Arc, Mutex};

#[derive(Debug)]
struct Slot {
    value: JsonValue,
    dirty: bool,
}

/// One extension's state; cloning shares it, so middlewares can keep it.
#[derive(Debug, Clone)]
pub struct ExtensionState {
    name: Arc<str>,
    slot: Arc<Mutex<Slot>>,
}

impl ExtensionState {
    /// A state holding `value` (`null` when nothing was saved).
    pub fn new(name: &str, value: JsonValue) -> Self {
        ExtensionState {
            name: name.into(),
            slot: Arc::new(Mutex::new(Slot {
                value,
                dirty: false,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        // The slot is replaced whole, so a poisoned lock still holds a
        // complete value.
        self.slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The extension's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current value; `null` when nothing was ever set.
    pub fn get(&self) -> JsonValue {
        self.lock().value.clone()
    }

    /// Replaces the value; it is written at the end of the Turn.
    pub fn set(&self, value: JsonValue) {
        let mut slot = self.lock();
        if slot.value != value {
            slot.value = value;
            slot.dirty = true;
        }
    }
}

/// Every extension state of one instance.
#[derive(Debug, Default)]
pub struct ExtensionStates {
    states: Vec<ExtensionState>,
}

impl ExtensionStates {
    /// Restores the state of `name` from `store`.
    pub fn restore(
        &mut self,
        store: &mut dyn ExtensionStateStore,
        name: &str,
    ) -> Result<ExtensionState, StoreError> {
        let value = store.load(name)?.unwrap_or(JsonValue::Null);
        let state = ExtensionState::new(name, value);
        self.states.push(state.clone());
        Ok(state)
    }

    /// Writes every changed state to `store`. Returns how many were
    /// written.
    pub fn flush(&self, store: &mut dyn ExtensionStateStore) -> Result<usize, StoreError> {
        let mut written = 0;
        for state in &self.states {
            let mut slot = state.lock();
            if slot.dirty {
                store.save(&state.name, &slot.value)?;
                slot.dirty = false;
                written += 1;
            }
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_store::MemoryExtensionState;
    use serde_json::json;

    #[test]
    fn state_is_restored_and_written_only_when_changed() {
        let mut store = MemoryExtensionState::default();
        store.save("skills", &json!({"selected": ["a"]})).unwrap();
        let mut states = ExtensionStates::default();
        let skills = states.restore(&mut store, "skills").unwrap();
        let fresh = states.restore(&mut store, "fresh").unwrap();
        assert_eq!(skills.get(), json!({"selected": ["a"]}));
        assert_eq!(fresh.get(), JsonValue::Null);
        assert_eq!(states.flush(&mut store).unwrap(), 0, "nothing changed");
        skills.set(json!({"selected": ["a"]}));
        assert_eq!(
            states.flush(&mut store).unwrap(),
            0,
            "same value is no change"
        );
        fresh.set(json!(1));
        assert_eq!(states.flush(&mut store).unwrap(), 1);
        assert_eq!(store.load("fresh").unwrap(), Some(json!(1)));
        assert_eq!(states.flush(&mut store).unwrap(), 0);
    }
}
