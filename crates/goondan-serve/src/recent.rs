//! A bounded map that forgets its oldest entry first: what the server
//! remembers between requests (the instance of each response for
//! `previous_response_id`, the conversations of `/v1` clients) without
//! growing with the traffic.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

/// At most `limit` entries; a new one past the limit forgets the one
/// remembered longest ago.
pub(crate) struct Recent<K, V> {
    limit: usize,
    inner: Mutex<Held<K, V>>,
}

struct Held<K, V> {
    /// Keys in the order they were remembered, with the number of the
    /// remembering, so an entry taken and remembered again is not forgotten
    /// for its earlier place.
    order: VecDeque<(K, u64)>,
    by_key: HashMap<K, (V, u64)>,
    next: u64,
}

impl<K: Hash + Eq + Clone, V: Clone> Recent<K, V> {
    pub(crate) fn new(limit: usize) -> Recent<K, V> {
        Recent {
            limit,
            inner: Mutex::new(Held {
                order: VecDeque::new(),
                by_key: HashMap::new(),
                next: 0,
            }),
        }
    }

    fn held(&self) -> MutexGuard<'_, Held<K, V>> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Remembers `value` under `key`, in place of what was there.
    pub(crate) fn remember(&self, key: K, value: V) {
        let mut held = self.held();
        self.remember_held(&mut held, key, value);
    }

    fn remember_held(&self, held: &mut Held<K, V>, key: K, value: V) {
        if self.limit == 0 {
            return;
        }
        held.by_key.remove(&key);
        while held.by_key.len() >= self.limit {
            let Some((oldest, number)) = held.order.pop_front() else {
                break;
            };
            if held
                .by_key
                .get(&oldest)
                .is_some_and(|(_, at)| *at == number)
            {
                held.by_key.remove(&oldest);
            }
        }
        // Places left by taken entries are dropped once they outnumber
        // the entries, so the order stays within twice the limit.
        if held.order.len() >= 2 * self.limit {
            let by_key = &held.by_key;
            held.order
                .retain(|(key, number)| by_key.get(key).is_some_and(|(_, at)| at == number));
        }
        let number = held.next;
        held.next += 1;
        held.order.push_back((key.clone(), number));
        held.by_key.insert(key, (value, number));
    }

    /// What is remembered under `key` while `still_good` holds for it,
    /// else `make()` remembered in its place; true when it was made.
    /// One lock for both, so two callers never both make one.
    pub(crate) fn recall_or_remember(
        &self,
        key: K,
        make: impl FnOnce() -> V,
        still_good: impl FnOnce(&V) -> bool,
    ) -> (V, bool) {
        let mut held = self.held();
        if let Some((value, _)) = held.by_key.get(&key) {
            if still_good(value) {
                return (value.clone(), false);
            }
        }
        let value = make();
        self.remember_held(&mut held, key, value.clone());
        (value, true)
    }

    /// What is remembered under `key`.
    pub(crate) fn recall(&self, key: &K) -> Option<V> {
        self.held().by_key.get(key).map(|(value, _)| value.clone())
    }

    /// What is remembered under `key`, forgetting it.
    pub(crate) fn take(&self, key: &K) -> Option<V> {
        self.held().by_key.remove(key).map(|(value, _)| value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_is_forgotten_first_and_a_taken_key_keeps_no_place() {
        let recent = Recent::new(2);
        recent.remember("r1", 1);
        recent.remember("r2", 2);
        recent.remember("r3", 3);
        assert_eq!(recent.recall(&"r1"), None);
        assert_eq!(recent.recall(&"r2"), Some(2));
        assert_eq!(recent.take(&"r2"), Some(2));
        assert_eq!(recent.take(&"r2"), None);
        // r2's old place is not r2's any more: remembered again, it is the
        // newest and r3 goes first.
        recent.remember("r2", 22);
        recent.remember("r4", 4);
        assert_eq!(recent.recall(&"r3"), None);
        assert_eq!(recent.recall(&"r2"), Some(22));
        assert_eq!(recent.recall(&"r4"), Some(4));
    }

    #[test]
    fn taking_and_remembering_again_and_again_stays_bounded() {
        let recent = Recent::new(3);
        for round in 0..1000 {
            recent.remember(round % 5, round);
            let _ = recent.take(&((round + 2) % 5));
        }
        let held = recent.held();
        assert!(held.by_key.len() <= 3);
        assert!(held.order.len() <= 6, "{}", held.order.len());
    }
}
