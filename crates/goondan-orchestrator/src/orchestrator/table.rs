//! The orchestrator's instances, and what changed among them since the
//! main loop last looked.
//!
//! The main loop does a little work for every message: hand queued
//! messages to ready processes, know whether the process cap has room,
//! know when to wake next. Done by passing over every instance, that work
//! grows with the number of instances, and a host with thousands of live
//! agents spent most of its time there (spawning slowed from 70 to 11 a
//! second past 4,000 agents). [`InstanceTable`] keeps the answers up to
//! date instead: every mutable access marks its instance as changed, and
//! [`InstanceTable::settle`] brings the cap count and the deadline index
//! up to date for just those, so the loop's per-message work follows what
//! changed, not how many instances there are.
//!
//! Reads go through `Deref` to the map; there is no `DerefMut`, so a
//! change cannot bypass the marking.

use super::capacity::counts;
use super::instance::Instance;
use goondan_ipc::RoutingKey;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Deref;
use std::time::Duration;
use tokio::time::Instant;

/// Every instance by routing key, with the bookkeeping of [`settle`].
///
/// [`settle`]: InstanceTable::settle
#[derive(Default)]
pub(crate) struct InstanceTable {
    instances: BTreeMap<RoutingKey, Instance>,
    /// Changed since the last settle.
    changed: HashSet<RoutingKey>,
    /// What the last settle recorded of each instance.
    books: HashMap<RoutingKey, Book>,
    /// How many instances count against the process cap, as of their
    /// last settle.
    live: usize,
    /// Every instance's next deadline, as of its last settle.
    deadlines: BTreeSet<(Instant, RoutingKey)>,
}

#[derive(Default, Clone, Copy)]
struct Book {
    counted: bool,
    deadline: Option<Instant>,
}

impl Deref for InstanceTable {
    type Target = BTreeMap<RoutingKey, Instance>;

    fn deref(&self) -> &Self::Target {
        &self.instances
    }
}

impl InstanceTable {
    /// The instance of `key`, to change.
    pub(crate) fn get_mut(&mut self, key: &RoutingKey) -> Option<&mut Instance> {
        let instance = self.instances.get_mut(key)?;
        if !self.changed.contains(key) {
            self.changed.insert(key.clone());
        }
        Some(instance)
    }

    /// The instance of `key`, made by `new` when there is none, to change.
    pub(crate) fn get_or_insert_with(
        &mut self,
        key: &RoutingKey,
        new: impl FnOnce() -> Instance,
    ) -> &mut Instance {
        if !self.changed.contains(key) {
            self.changed.insert(key.clone());
        }
        self.instances.entry(key.clone()).or_insert_with(new)
    }

    /// The instance of `key`, to change without marking it: for the main
    /// loop's own pass over the changed instances, which calls
    /// [`resettle`](Self::resettle) for them afterwards.
    pub(crate) fn get_mut_unmarked(&mut self, key: &RoutingKey) -> Option<&mut Instance> {
        self.instances.get_mut(key)
    }

    /// Every instance, to change (each is marked: a pass over all of them
    /// belongs in timer work, not in per-message work).
    pub(crate) fn iter_mut(
        &mut self,
    ) -> std::collections::btree_map::IterMut<'_, RoutingKey, Instance> {
        self.changed.extend(self.instances.keys().cloned());
        self.instances.iter_mut()
    }

    /// Removes `key`'s instance.
    pub(crate) fn remove(&mut self, key: &RoutingKey) -> Option<Instance> {
        self.changed.remove(key);
        if let Some(book) = self.books.remove(key) {
            self.live -= usize::from(book.counted);
            if let Some(deadline) = book.deadline {
                self.deadlines.remove(&(deadline, key.clone()));
            }
        }
        self.instances.remove(key)
    }

    /// How many instances count against the process cap now, changes not
    /// yet settled included.
    pub(crate) fn live(&self) -> usize {
        let mut live = self.live;
        for key in &self.changed {
            let counted_then = self.books.get(key).is_some_and(|book| book.counted);
            let counts_now = self
                .instances
                .get(key)
                .is_some_and(|instance| counts(key, instance));
            live = live + usize::from(counts_now) - usize::from(counted_then);
        }
        live
    }

    /// The earliest deadline of any instance as of the last settle.
    pub(crate) fn earliest_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Brings the cap count and the deadline index up to date for the
    /// instances changed since the last settle, and returns their keys
    /// (those that still exist).
    pub(crate) fn settle(&mut self, idle_after: Option<Duration>) -> Vec<RoutingKey> {
        let changed: Vec<RoutingKey> = self.changed.drain().collect();
        let mut settled = Vec::with_capacity(changed.len());
        for key in changed {
            if self.resettle_one(&key, idle_after) {
                settled.push(key);
            }
        }
        settled
    }

    /// Brings the bookkeeping of `keys` up to date after a change through
    /// [`get_mut_unmarked`](Self::get_mut_unmarked).
    pub(crate) fn resettle<'a>(
        &mut self,
        keys: impl IntoIterator<Item = &'a RoutingKey>,
        idle_after: Option<Duration>,
    ) {
        for key in keys {
            self.resettle_one(key, idle_after);
        }
    }

    fn resettle_one(&mut self, key: &RoutingKey, idle_after: Option<Duration>) -> bool {
        let Some(instance) = self.instances.get(key) else {
            return false;
        };
        let now = Book {
            counted: counts(key, instance),
            deadline: deadline_of(key, instance, idle_after),
        };
        let then = self.books.insert(key.clone(), now).unwrap_or_default();
        self.live = self.live + usize::from(now.counted) - usize::from(then.counted);
        if then.deadline != now.deadline {
            if let Some(deadline) = then.deadline {
                self.deadlines.remove(&(deadline, key.clone()));
            }
            if let Some(deadline) = now.deadline {
                self.deadlines.insert((deadline, key.clone()));
            }
        }
        true
    }

    /// Marks every instance changed (after a change of configuration that
    /// moves deadlines, such as `idleSeconds`).
    pub(crate) fn mark_all_changed(&mut self) {
        self.changed.extend(self.instances.keys().cloned());
    }
}

/// When the orchestrator must next look at `instance` without being asked:
/// its kill after a grace period, its respawn after a backoff, the end of
/// its exit's wait, its next liveness check, or its passivation when idle.
fn deadline_of(
    key: &RoutingKey,
    instance: &Instance,
    idle_after: Option<Duration>,
) -> Option<Instant> {
    let kill_at = instance
        .shutdown
        .as_ref()
        .filter(|intent| !intent.killed)
        .map(|intent| intent.kill_at);
    let idle_at = idle_after
        .filter(|_| counts(key, instance) && instance.is_idle())
        .map(|idle_after| instance.last_active + idle_after);
    [
        kill_at,
        instance.next_spawn_at,
        instance.ending.deadline,
        instance.liveness.next_check_at,
        idle_at,
    ]
    .into_iter()
    .flatten()
    .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(instance_key: &str) -> RoutingKey {
        RoutingKey::new("agent", instance_key)
    }

    #[test]
    fn the_count_and_the_deadlines_follow_changes_without_a_pass() {
        let mut table = InstanceTable::default();
        let soon = Instant::now() + Duration::from_secs(5);
        table
            .get_or_insert_with(&key("a"), Instance::new)
            .next_spawn_at = Some(soon);
        table.get_or_insert_with(&key("b"), Instance::new);
        assert_eq!(table.live(), 0);
        assert_eq!(table.settle(None).len(), 2);
        assert_eq!(table.earliest_deadline(), Some(soon));
        // A deadline moved later is found at its new place, not the old.
        let later = soon + Duration::from_secs(5);
        table.get_mut(&key("a")).unwrap().next_spawn_at = Some(later);
        assert_eq!(table.settle(None), vec![key("a")]);
        assert_eq!(table.earliest_deadline(), Some(later));
        // Nothing changed: nothing to settle.
        assert!(table.settle(None).is_empty());
        table.remove(&key("a"));
        assert_eq!(table.earliest_deadline(), None);
        assert!(table.settle(None).is_empty());
    }
}
