//! The journal contract (`goondan_store::conformance`) against the file
//! journal: a writer is a process holding the instance lock.

use goondan_store::conformance::{check_all, JournalUnderTest};
use goondan_store::{InstanceStore, StateRoot, StoreError, TurnJournal};
use std::time::Duration;

struct OnDisk {
    store: InstanceStore,
    _root: tempfile::TempDir,
}

impl JournalUnderTest for OnDisk {
    fn open(&mut self) -> Result<Box<dyn TurnJournal>, StoreError> {
        let instance = self.store.open("assistant", "user-1")?;
        Ok(Box::new(instance.into_parts().journal))
    }
}

#[test]
fn the_file_journal_keeps_the_contract() {
    check_all(|| {
        let root = tempfile::tempdir().unwrap();
        let state_root = StateRoot::new(root.path().join("state"));
        let store = InstanceStore::new(state_root.workspace("main"))
            // A second writer is refused at once instead of waiting.
            .with_lock_wait(Duration::ZERO);
        OnDisk { store, _root: root }
    });
}
