//! [`Instance`]: what the orchestrator knows about one routing key, and the
//! bounded queue of events waiting for it.
//!
//! An event is first *queued* (no process can take it yet), then *in
//! flight* (handed to the current process, whose Turn for it has not
//! finished), then forgotten when the process reports the Turn that
//! consumed it. When a process dies, its in-flight events go back to the
//! front of the queue, marked as redelivered, for the next process; an
//! event that has now been handed to [`MAX_DELIVERY_ATTEMPTS`] processes
//! that all died is given up instead of crashing processes forever.
//! Queued plus in-flight never exceeds the instance's limit: one more is
//! refused, never buffered.

use crate::spawner::ProcessControl;
use goondan_ipc::protocol;
use goondan_ipc::{Link, RuntimeMessage, ORCHESTRATOR};
use goondan_types::{AgentEvent, IpcMessage, ProcessStatus};
use std::collections::VecDeque;
use tokio::time::Instant;

/// How many processes may die holding one event before it is given up.
pub const MAX_DELIVERY_ATTEMPTS: u32 = 3;

/// What waits in a queue, typed until it is sent: the wire message is
/// built only when a process takes it ([`Queued::to_message`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Content {
    /// An event that starts a Turn there (a user event, a request, a
    /// send): counted against the bound, in flight until its Turn
    /// finishes, redelivered when its process dies.
    Turn(Box<AgentEvent>),
    /// An answer to one of the process's own requests: it ends work
    /// already counted.
    Answer(Box<AgentEvent>),
    /// A runtime message of the orchestrator's (a rejection, an
    /// acceptance, a query answer, a cancel).
    Runtime(RuntimeMessage),
}

/// One message waiting for, or handed to, an instance's process.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Queued {
    /// Who sent it, as the wire's `from` spells it (a routing key, or
    /// `orchestrator`).
    pub(crate) from: String,
    pub(crate) content: Content,
    /// Processes this event was handed to so far.
    pub(crate) attempts: u32,
    /// Its Turn was cancelled while a process had it: if that process
    /// dies, the event is not handed to the next one.
    pub(crate) cancelled: bool,
}

impl Queued {
    fn new(from: impl Into<String>, content: Content) -> Queued {
        Queued {
            from: from.into(),
            content,
            attempts: 0,
            cancelled: false,
        }
    }

    /// An event that starts a Turn, from `from`.
    pub(crate) fn turn(from: impl Into<String>, event: AgentEvent) -> Queued {
        Queued::new(from, Content::Turn(Box::new(event)))
    }

    /// An answer, from the instance that answered.
    pub(crate) fn answer(from: impl Into<String>, event: AgentEvent) -> Queued {
        Queued::new(from, Content::Answer(Box::new(event)))
    }

    /// A runtime message of the orchestrator's.
    pub(crate) fn runtime(message: RuntimeMessage) -> Queued {
        Queued::new(ORCHESTRATOR, Content::Runtime(message))
    }

    /// The event's id when it starts a Turn; answers and runtime messages
    /// have none and are not redelivered.
    pub(crate) fn event_id(&self) -> Option<&str> {
        match &self.content {
            Content::Turn(event) => Some(&event.id),
            Content::Answer(_) | Content::Runtime(_) => None,
        }
    }

    /// The event it carries, unless it is a runtime message.
    pub(crate) fn event(&self) -> Option<&AgentEvent> {
        match &self.content {
            Content::Turn(event) | Content::Answer(event) => Some(event),
            Content::Runtime(_) => None,
        }
    }

    /// The wire message for the process serving `to`.
    pub(crate) fn to_message(&self, to: &goondan_ipc::RoutingKey) -> IpcMessage {
        let to = to.to_string();
        match &self.content {
            Content::Turn(event) | Content::Answer(event) => {
                protocol::event_message(&self.from, &to, event)
            }
            Content::Runtime(message) => message.to_message(&self.from, &to),
        }
    }
}

/// An event was refused because its instance's queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueFull;

/// A graceful stop under way.
pub(crate) struct ShutdownIntent {
    pub(crate) respawn: bool,
    pub(crate) fresh: bool,
    pub(crate) kill_at: Instant,
    /// Set once SIGKILL was sent, so the passed deadline stops waking the
    /// loop while the exit is on its way.
    pub(crate) killed: bool,
}

/// How a process's end is being observed: its exit and the end of its
/// stream may arrive in either order, and it is over when both did.
#[derive(Debug, Default)]
pub(crate) struct Ending {
    pub(crate) exit: Option<Option<i32>>,
    pub(crate) stream_ended: bool,
    /// When to stop waiting for the other half.
    pub(crate) deadline: Option<Instant>,
}

/// The orchestrator's view of one routing key.
pub(crate) struct Instance {
    pub(crate) status: ProcessStatus,
    /// The link of the process serving it, while one runs.
    pub(crate) link: Option<Link>,
    pub(crate) control: Option<Box<dyn ProcessControl>>,
    pub(crate) ending: Ending,
    queue: VecDeque<Queued>,
    in_flight: VecDeque<Queued>,
    pub(crate) consecutive_crashes: u32,
    pub(crate) next_spawn_at: Option<Instant>,
    pub(crate) shutdown: Option<ShutdownIntent>,
    /// The instance that asked for this one through `agents__spawn`.
    pub(crate) owner: Option<goondan_ipc::RoutingKey>,
    pub(crate) cwd: Option<String>,
    pub(crate) created_at: String,
    /// Kept running whether or not anything waits for it (a
    /// ConnectorProcess).
    pub(crate) resident: bool,
    /// When the current process finished its handshake.
    pub(crate) ready_at: Option<Instant>,
    /// When a Turn last started or finished here, or its process started:
    /// the least recently used idle instance is passivated first.
    pub(crate) last_active: Instant,
    /// Whether the current process answers its pings.
    pub(crate) liveness: super::liveness::LivenessState,
    /// Why the last process refused to start (`runtime.start_error`),
    /// until a process becomes ready.
    pub(crate) last_start_error: Option<goondan_types::ErrorBody>,
    /// A ConnectorProcess whose bundle refused it
    /// ([`EXIT_REFUSED_BY_CONFIG`](goondan_ipc::protocol::EXIT_REFUSED_BY_CONFIG)):
    /// no process is started for it until a reload or a restart asks.
    pub(crate) refused_by_config: bool,
    /// Operators holding the instance while they rewrite its history
    /// (`gdn instance fork|rewind`): above 0, it gets no process and its
    /// events wait.
    pub(crate) holds: u32,
    /// The entry exists only because a hold named a key the orchestrator
    /// did not know; it is forgotten on release if nothing came for it.
    pub(crate) held_placeholder: bool,
}

impl Instance {
    pub(crate) fn new() -> Self {
        Instance {
            status: ProcessStatus::Terminated,
            link: None,
            control: None,
            ending: Ending::default(),
            queue: VecDeque::new(),
            in_flight: VecDeque::new(),
            consecutive_crashes: 0,
            next_spawn_at: None,
            shutdown: None,
            owner: None,
            cwd: None,
            created_at: goondan_types::now_iso(),
            resident: false,
            ready_at: None,
            last_active: Instant::now(),
            liveness: Default::default(),
            last_start_error: None,
            refused_by_config: false,
            holds: 0,
            held_placeholder: false,
        }
    }

    /// True when the process could stop now without losing or delaying
    /// anything: ready, no Turn running, nothing queued or in flight, not
    /// already stopping, and not a resident ConnectorProcess.
    pub(crate) fn is_idle(&self) -> bool {
        self.is_running()
            && !self.resident
            && self.status == ProcessStatus::Idle
            && self.shutdown.is_none()
            && self.waiting() == 0
            && self.ready_at.is_some()
    }

    /// How long the instance still backs off after crashes, when it does
    /// and no process runs.
    pub(crate) fn backoff_remaining(&self) -> Option<std::time::Duration> {
        if self.is_running() {
            return None;
        }
        self.next_spawn_at
            .map(|at| at.saturating_duration_since(Instant::now()))
            .filter(|remaining| !remaining.is_zero())
    }

    /// True when a process is being stopped and will not be replaced (a
    /// passivation), so its slot is about to be free.
    pub(crate) fn is_freeing_slot(&self) -> bool {
        self.is_running() && self.shutdown.as_ref().is_some_and(|intent| !intent.respawn)
    }

    /// True while a process is attached (started and not yet over).
    pub(crate) fn is_running(&self) -> bool {
        self.control.is_some()
    }

    /// True when the process finished its handshake and is not draining.
    pub(crate) fn takes_events(&self) -> bool {
        matches!(self.status, ProcessStatus::Idle | ProcessStatus::Processing)
            && self.shutdown.is_none()
            && self.link.is_some()
    }

    /// Events queued or in flight.
    pub(crate) fn waiting(&self) -> usize {
        self.queue.len() + self.in_flight.len()
    }

    /// Events queued, not yet handed to a process.
    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Queues `queued` unless `limit` events already wait (then it is
    /// dropped and the caller answers for it).
    pub(crate) fn enqueue(&mut self, queued: Queued, limit: usize) -> Result<(), QueueFull> {
        // Answers and runtime messages are never refused: they end work
        // that is already counted, and refusing them would strand it.
        if queued.event_id().is_some() && self.waiting() >= limit {
            return Err(QueueFull);
        }
        self.queue.push_back(queued);
        Ok(())
    }

    /// Whether the event `event_id` that `sender` sent waits here: `Some(true)`
    /// when a process has it, `Some(false)` while it is queued.
    pub(crate) fn holds_event_from(&self, event_id: &str, sender: &str) -> Option<bool> {
        let sent = |queued: &Queued| queued.event_id() == Some(event_id) && queued.from == sender;
        if self.in_flight.iter().any(sent) {
            return Some(true);
        }
        self.queue.iter().any(sent).then_some(false)
    }

    /// The event whose Turn the process runs (or starts next): the oldest
    /// one in flight, unless a cancel already stops it. The process takes
    /// its events one at a time, in the order they were handed over.
    pub(crate) fn running_turn(&self) -> Option<&str> {
        self.in_flight
            .front()
            .filter(|queued| !queued.cancelled)
            .and_then(Queued::event_id)
    }

    /// True while `event_id` is in flight here (handed to the process,
    /// its Turn not finished).
    pub(crate) fn holds_in_flight(&self, event_id: &str) -> bool {
        self.in_flight
            .iter()
            .any(|queued| queued.event_id() == Some(event_id))
    }

    /// Marks the in-flight event `event_id` as cancelled, so a crash of
    /// its process does not hand it to the next one.
    pub(crate) fn mark_cancelled(&mut self, event_id: &str) {
        if let Some(queued) = self
            .in_flight
            .iter_mut()
            .find(|queued| queued.event_id() == Some(event_id))
        {
            queued.cancelled = true;
        }
    }

    /// Takes the event `event_id` out of the queue if it has not been
    /// handed to a process yet; true when it was there.
    pub(crate) fn remove_queued(&mut self, event_id: &str) -> bool {
        let at = self
            .queue
            .iter()
            .position(|queued| queued.event_id() == Some(event_id));
        at.and_then(|at| self.queue.remove(at)).is_some()
    }

    /// Puts a message at the front of the queue (a send that found the
    /// link full).
    pub(crate) fn requeue_front(&mut self, queued: Queued) {
        self.queue.push_front(queued);
    }

    /// The next queued message, counted as handed over when it starts a
    /// Turn.
    pub(crate) fn next_to_send(&mut self) -> Option<Queued> {
        self.queue.pop_front()
    }

    /// True while the process drains its last Turn: it takes no new Turn,
    /// but answers to its own requests must still reach it, or that Turn
    /// could only end at the grace period's SIGKILL.
    pub(crate) fn takes_answers_only(&self) -> bool {
        self.status == ProcessStatus::Draining
            && self.shutdown.as_ref().is_some_and(|intent| !intent.killed)
            && self.link.is_some()
    }

    /// Takes the queued messages that start no Turn (answers, rejections,
    /// acceptances), in order, leaving the Turns queued.
    pub(crate) fn take_plain(&mut self) -> Vec<Queued> {
        let (plain, turns): (VecDeque<Queued>, VecDeque<Queued>) = std::mem::take(&mut self.queue)
            .into_iter()
            .partition(|queued| queued.event_id().is_none());
        self.queue = turns;
        plain.into()
    }

    /// Puts `plain` messages that could not be sent back ahead of the rest.
    pub(crate) fn requeue_plain(&mut self, plain: Vec<Queued>) {
        for queued in plain.into_iter().rev() {
            self.queue.push_front(queued);
        }
    }

    /// Records that `queued` was handed to the current process.
    pub(crate) fn handed_over(&mut self, mut queued: Queued) {
        if queued.event_id().is_some() {
            queued.attempts += 1;
            self.in_flight.push_back(queued);
        }
    }

    /// Drops every queued event (not those in flight), for a process that
    /// cannot start: nothing queued could run.
    pub(crate) fn drain_queued(&mut self) -> Vec<Queued> {
        let (turns, plain): (Vec<Queued>, Vec<Queued>) = self
            .queue
            .drain(..)
            .partition(|queued| queued.event_id().is_some());
        self.queue.extend(plain);
        turns
    }

    /// The Turn for `event_id` finished: the event is forgotten.
    pub(crate) fn turn_finished(&mut self, event_id: &str) -> bool {
        let before = self.in_flight.len();
        self.in_flight
            .retain(|queued| queued.event_id() != Some(event_id));
        before != self.in_flight.len()
    }

    /// The process died: its in-flight events go back to the front of the
    /// queue, marked as redelivered, except those that were already handed
    /// to [`MAX_DELIVERY_ATTEMPTS`] processes or were cancelled, which are
    /// returned.
    pub(crate) fn redeliver_in_flight(&mut self) -> Vec<Queued> {
        let mut given_up = Vec::new();
        for mut queued in std::mem::take(&mut self.in_flight).into_iter().rev() {
            if queued.cancelled || queued.attempts >= MAX_DELIVERY_ATTEMPTS {
                given_up.push(queued);
                continue;
            }
            if let Content::Turn(event) = &mut queued.content {
                event.redelivered = true;
            }
            self.queue.push_front(queued);
        }
        given_up.reverse();
        given_up
    }

    /// Drops every message, queued or in flight (the instance is deleted).
    pub(crate) fn drain_all(&mut self) -> Vec<Queued> {
        let mut all: Vec<Queued> = self.in_flight.drain(..).collect();
        all.extend(self.queue.drain(..));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_types::{EventSource, EventSourceKind};

    fn agent_event(id: &str) -> AgentEvent {
        AgentEvent {
            id: id.to_string(),
            ..AgentEvent::new(
                "user_message",
                EventSource::new(EventSourceKind::Connector, "cli"),
            )
        }
    }

    fn event(id: &str) -> Queued {
        Queued::turn(ORCHESTRATOR, agent_event(id))
    }

    fn ids(instance: &mut Instance) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(queued) = instance.next_to_send() {
            out.push(queued.event_id().unwrap_or_default().to_string());
            instance.handed_over(queued);
        }
        out
    }

    #[test]
    fn the_queue_refuses_past_its_limit_counting_in_flight_events() {
        let mut instance = Instance::new();
        instance.enqueue(event("a"), 2).unwrap();
        instance.enqueue(event("b"), 2).unwrap();
        assert!(instance.enqueue(event("c"), 2).is_err());
        assert_eq!(ids(&mut instance), ["a", "b"]);
        assert_eq!(instance.waiting(), 2, "in flight still counts");
        assert!(instance.enqueue(event("c"), 2).is_err());
        assert!(instance.turn_finished("a"));
        instance.enqueue(event("c"), 2).unwrap();
        // Messages that start no Turn are never refused.
        let answer = Queued::answer("beta:main", agent_event("x"));
        instance.enqueue(answer, 2).unwrap();
    }

    #[test]
    fn in_flight_events_are_redelivered_in_order_and_marked() {
        let mut instance = Instance::new();
        for id in ["a", "b", "c"] {
            instance.enqueue(event(id), 10).unwrap();
        }
        let a = instance.next_to_send().unwrap();
        instance.handed_over(a);
        let b = instance.next_to_send().unwrap();
        instance.handed_over(b);
        assert!(instance.redeliver_in_flight().is_empty());
        let order: Vec<_> = std::iter::from_fn(|| instance.next_to_send())
            .map(|queued| {
                let Content::Turn(event) = &queued.content else {
                    panic!("a Turn was queued");
                };
                (event.id.clone(), event.redelivered)
            })
            .collect();
        assert_eq!(
            order,
            [
                ("a".to_string(), true),
                ("b".to_string(), true),
                ("c".to_string(), false)
            ]
        );
    }

    #[test]
    fn an_event_that_kills_every_process_is_given_up() {
        let mut instance = Instance::new();
        instance.enqueue(event("poison"), 10).unwrap();
        for attempt in 1..=MAX_DELIVERY_ATTEMPTS {
            let queued = instance.next_to_send().unwrap();
            instance.handed_over(queued);
            let given_up = instance.redeliver_in_flight();
            if attempt < MAX_DELIVERY_ATTEMPTS {
                assert!(given_up.is_empty());
            } else {
                assert_eq!(given_up.len(), 1);
                assert_eq!(given_up[0].attempts, MAX_DELIVERY_ATTEMPTS);
            }
        }
        assert_eq!(instance.waiting(), 0);
    }

    #[test]
    fn a_cancelled_event_is_not_redelivered() {
        let mut instance = Instance::new();
        instance.enqueue(event("kept"), 8).unwrap();
        instance.enqueue(event("cancelled"), 8).unwrap();
        while let Some(queued) = instance.next_to_send() {
            instance.handed_over(queued);
        }
        instance.mark_cancelled("cancelled");
        let not_redelivered = instance.redeliver_in_flight();
        assert_eq!(not_redelivered.len(), 1);
        assert!(not_redelivered[0].cancelled);
        assert_eq!(instance.queued(), 1);
    }
}
