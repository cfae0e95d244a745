//! Where runtime events go. The runtime emits all nine `RuntimeEvent`s
//! (`shared-types.md` §9) to a [`RuntimeEventSink`]; the store appends
//! them to `runtime-events.jsonl`, a CLI may print them. They are never
//! read back to rebuild conversation state.

use goondan_types::RuntimeEvent;
use std::sync::{Arc, Mutex};

/// Receives runtime events in emission order. Must not block for long: it
/// is called inline on the Turn's task.
pub trait RuntimeEventSink: Send + Sync {
    /// One event.
    fn emit(&self, event: RuntimeEvent);
}

/// A sink that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiscardEvents;

impl RuntimeEventSink for DiscardEvents {
    fn emit(&self, _event: RuntimeEvent) {}
}

/// A sink that keeps events in memory, for embedding and tests.
#[derive(Debug, Clone, Default)]
pub struct CollectEvents {
    events: Arc<Mutex<Vec<RuntimeEvent>>>,
}

impl CollectEvents {
    /// An empty collector.
    pub fn new() -> Self {
        CollectEvents::default()
    }

    /// Takes every event collected so far.
    pub fn take(&self) -> Vec<RuntimeEvent> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<RuntimeEvent>> {
        // Pushing whole events cannot leave the vector inconsistent.
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl RuntimeEventSink for CollectEvents {
    fn emit(&self, event: RuntimeEvent) {
        self.lock().push(event);
    }
}
