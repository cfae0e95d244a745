//! `api.events`: a synchronous in-process event bus shared by the
//! extensions of one agent. It is not durable and never crosses a process.
//! Besides what extensions emit, the runtime publishes each of its nine
//! runtime events here under its dot-notation name (`turn.completed`, ...)
//! with the event's JSON as payload.
//!
//! `emit(event, ...args)` in the original passes any number of arguments.
//! A Rust handler ([`EventBus::on`]) receives the first one (the runtime's
//! own events have exactly one); a handler that wants them all (a script
//! extension's, [`EventBus::on_all`]) receives every one.
//!
//! It names nothing else of the runtime, so the extensions' API, the
//! runtime events' fan-out ([`crate::events::RuntimeEvents`]) and the
//! tools all stand above it.

use goondan_types::JsonValue;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

/// A subscriber: the emission's first argument (`null` when none).
pub type EventHandler = Arc<dyn Fn(&JsonValue) + Send + Sync>;

/// A subscriber that receives every argument of an emission.
pub type ArgsHandler = Arc<dyn Fn(&[JsonValue]) + Send + Sync>;

/// One subscription's handler, by how many arguments it takes.
#[derive(Clone)]
enum Listener {
    First(EventHandler),
    All(ArgsHandler),
}

#[derive(Default)]
struct BusInner {
    next_id: u64,
    handlers: HashMap<String, Vec<(u64, Listener)>>,
}

/// The bus; cloning shares it.
#[derive(Clone, Default)]
pub struct EventBus {
    inner: Arc<Mutex<BusInner>>,
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_map()
            .entries(
                inner
                    .handlers
                    .iter()
                    .map(|(event, handlers)| (event, handlers.len())),
            )
            .finish()
    }
}

/// Returned by [`EventBus::on`]. Dropping it keeps the subscription; call
/// [`Subscription::unsubscribe`] to end it.
#[derive(Debug)]
#[must_use = "keep the subscription to be able to unsubscribe"]
pub struct Subscription {
    bus: EventBus,
    event: String,
    id: u64,
}

impl Subscription {
    /// Removes the handler. Returns false if it was already gone.
    pub fn unsubscribe(self) -> bool {
        let mut inner = self.bus.lock();
        let Some(handlers) = inner.handlers.get_mut(&self.event) else {
            return false;
        };
        let before = handlers.len();
        handlers.retain(|(id, _)| *id != self.id);
        before != handlers.len()
    }
}

impl EventBus {
    /// An empty bus.
    pub fn new() -> Self {
        EventBus::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BusInner> {
        // Handlers run outside the lock, so a poisoned lock only means a
        // panic during bookkeeping, which leaves the map consistent.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Subscribes `handler` to `event`; it receives the first argument.
    pub fn on(&self, event: &str, handler: EventHandler) -> Subscription {
        self.subscribe(event, Listener::First(handler))
    }

    /// Subscribes `handler` to `event`; it receives every argument.
    pub fn on_all(&self, event: &str, handler: ArgsHandler) -> Subscription {
        self.subscribe(event, Listener::All(handler))
    }

    fn subscribe(&self, event: &str, handler: Listener) -> Subscription {
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        inner
            .handlers
            .entry(event.to_string())
            .or_default()
            .push((id, handler));
        Subscription {
            bus: self.clone(),
            event: event.to_string(),
            id,
        }
    }

    /// Calls every handler of `event` in subscription order. Returns how
    /// many ran. Handlers may subscribe or emit themselves: the list is
    /// copied before any runs. A handler that panics is logged and does not
    /// stop the others.
    pub fn emit(&self, event: &str, payload: &JsonValue) -> usize {
        self.emit_all(event, std::slice::from_ref(payload))
    }

    /// [`EventBus::emit`] with any number of arguments: a handler from
    /// [`EventBus::on`] receives the first (`null` when there is none),
    /// one from [`EventBus::on_all`] all of them.
    pub fn emit_all(&self, event: &str, args: &[JsonValue]) -> usize {
        let handlers: Vec<Listener> = self
            .lock()
            .handlers
            .get(event)
            .map(|handlers| {
                handlers
                    .iter()
                    .map(|(_, handler)| handler.clone())
                    .collect()
            })
            .unwrap_or_default();
        let first = args.first().unwrap_or(&JsonValue::Null);
        for handler in &handlers {
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| match handler {
                Listener::First(handler) => handler(first),
                Listener::All(handler) => handler(args),
            }));
            if outcome.is_err() {
                tracing::warn!(
                    event,
                    "an extension event handler panicked; the others still ran"
                );
            }
        }
        handlers.len()
    }

    /// True when `event` has at least one handler, so a caller can skip
    /// building a payload nobody reads.
    pub fn has_subscribers(&self, event: &str) -> bool {
        self.lock()
            .handlers
            .get(event)
            .is_some_and(|handlers| !handlers.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn on_returns_a_handle_that_unsubscribes() {
        let bus = EventBus::new();
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&seen);
        let subscription = bus.on(
            "ping",
            Arc::new(move |payload| {
                counter.fetch_add(payload.as_u64().unwrap_or(0) as usize, Ordering::SeqCst);
            }),
        );
        assert_eq!(bus.emit("ping", &JsonValue::from(2)), 1);
        assert_eq!(bus.emit("other", &JsonValue::from(5)), 0);
        assert!(subscription.unsubscribe());
        assert_eq!(bus.emit("ping", &JsonValue::from(2)), 0);
        assert_eq!(seen.load(Ordering::SeqCst), 2);
        assert!(!bus.has_subscribers("ping"));
    }

    #[test]
    fn every_argument_reaches_an_all_arguments_handler_and_the_first_a_plain_one() {
        let bus = EventBus::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let all = Arc::clone(&seen);
        let _all = bus.on_all(
            "idle",
            Arc::new(move |args| all.lock().unwrap().push(JsonValue::from(args.to_vec()))),
        );
        let first = Arc::clone(&seen);
        let _first = bus.on(
            "idle",
            Arc::new(move |payload| first.lock().unwrap().push(payload.clone())),
        );
        let args = [JsonValue::from("a"), JsonValue::from(2)];
        assert_eq!(bus.emit_all("idle", &args), 2);
        assert_eq!(bus.emit_all("idle", &[]), 2);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![
                serde_json::json!(["a", 2]),
                serde_json::json!("a"),
                serde_json::json!([]),
                JsonValue::Null
            ]
        );
    }

    #[test]
    fn a_panicking_handler_does_not_stop_the_others() {
        let bus = EventBus::new();
        let seen = Arc::new(AtomicUsize::new(0));
        let _first = bus.on("x", Arc::new(|_| panic!("bad handler")));
        let counter = Arc::clone(&seen);
        let _second = bus.on(
            "x",
            Arc::new(move |_| {
                counter.fetch_add(1, Ordering::SeqCst);
            }),
        );
        assert_eq!(bus.emit("x", &JsonValue::Null), 2);
        assert_eq!(seen.load(Ordering::SeqCst), 1);
    }
}
