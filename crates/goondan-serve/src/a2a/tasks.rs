//! The Tasks the server remembers: one per input an A2A client sent,
//! its id the input event's id (so a Task names the Turn that ran it in
//! the instance's log), its context id the instance key.
//!
//! A Task is driven by [`drive`]: from the Turn's reports to its states
//! (submitted when the input is durable, working once the Turn speaks,
//! input-required while a person must decide an approval, then
//! completed, failed or canceled), an artifact `answer` grown by each
//! streamed piece of text and replaced by the whole answer at the end.
//! Every change goes to the Task's subscribers (streams) through a
//! bounded broadcast: a subscriber that falls behind misses updates but
//! still gets the final state, which [`Tasks::subscribe`] re-reads.
//!
//! The table is in memory and bounded: ended Tasks are forgotten oldest
//! first past [`crate::Limits::max_remembered_tasks`]; running ones
//! never. A restart of `gdn serve` forgets them all (their Turns, and
//! what they stored, stay in the swarm).

use crate::swarm::{Swarm, TurnFailure, TurnUpdate};
use crate::turn::Canceller;
use goondan_a2a::types::{
    Artifact, Message, Part, Role, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent,
};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, watch};

/// The id of the artifact that carries the answer.
pub(crate) const ANSWER_ARTIFACT: &str = "answer";

/// How many updates wait for a slow subscriber before it misses some.
const SUBSCRIBER_BACKLOG: usize = 64;

struct Entry {
    task: Task,
    agent: String,
    canceller: Option<Canceller>,
    updates: broadcast::Sender<StreamResponse>,
    /// The Task's state, for those who wait for a change.
    state: watch::Sender<TaskState>,
}

struct Table {
    entries: HashMap<String, Entry>,
    /// Ended Tasks, oldest first.
    ended: VecDeque<String>,
}

/// The Tasks, running and ended.
pub(crate) struct Tasks {
    limit: usize,
    table: Mutex<Table>,
    /// The Task each recent message (by agent, and context and
    /// `messageId`) became,
    /// once it did, so a client's retry of a message gets its Task.
    messages: crate::recent::Recent<(String, String), Arc<watch::Sender<Sent>>>,
}

/// What a message became: nothing yet (its Task is being started), its
/// Task's id, or the swarm's refusal.
pub(crate) type Sent = Option<Result<String, TurnFailure>>;

/// What a claim of a message id found.
pub(crate) enum MessageClaim {
    /// The first time: start its Task and say so through the sender.
    First(Arc<watch::Sender<Sent>>),
    /// Sent before: what it became, once it did.
    Again(watch::Receiver<Sent>),
}

/// What a subscriber to a Task gets: the Task as it is now, its updates
/// from now on, and its state.
pub(crate) struct Subscription {
    pub(crate) task: Task,
    pub(crate) updates: broadcast::Receiver<StreamResponse>,
    pub(crate) state: watch::Receiver<TaskState>,
}

/// Why a Task cannot be cancelled.
pub(crate) enum CancelRefused {
    NotFound,
    Ended(Box<Task>),
}

impl Tasks {
    pub(crate) fn new(limit: usize) -> Tasks {
        Tasks {
            limit,
            table: Mutex::new(Table {
                entries: HashMap::new(),
                ended: VecDeque::new(),
            }),
            messages: crate::recent::Recent::new(limit),
        }
    }

    /// Claims the message `message_id` (its context and id) sent to
    /// `agent`: the first claim
    /// starts its Task, any later one (a retry) follows it.
    pub(crate) fn claim_message(&self, agent: &str, message_id: &str) -> MessageClaim {
        let key = (agent.to_string(), message_id.to_string());
        let (slot, first) =
            self.messages
                .recall_or_remember(key, || Arc::new(watch::Sender::new(None)), |_| true);
        if first {
            MessageClaim::First(slot)
        } else {
            MessageClaim::Again(slot.subscribe())
        }
    }

    /// The message `message_id` to `agent` was refused with `failure`:
    /// whoever follows it is told, and the id is forgotten, so a retry
    /// sends it again.
    pub(crate) fn message_refused(
        &self,
        agent: &str,
        message_id: &str,
        slot: &watch::Sender<Sent>,
        failure: TurnFailure,
    ) {
        let key = (agent.to_string(), message_id.to_string());
        if let Some(held) = self.messages.take(&key) {
            if !std::ptr::eq(Arc::as_ptr(&held), slot) {
                self.messages.remember(key, held);
            }
        }
        slot.send_replace(Some(Err(failure)));
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Remembers a submitted `task` of `agent`, and subscribes to it.
    pub(crate) fn insert(&self, task: Task, agent: String, canceller: Canceller) -> Subscription {
        let (updates, receiver) = broadcast::channel(SUBSCRIBER_BACKLOG);
        let (state, state_receiver) = watch::channel(task.status.state);
        let subscription = Subscription {
            task: task.clone(),
            updates: receiver,
            state: state_receiver,
        };
        self.table().entries.insert(
            task.id.clone(),
            Entry {
                task,
                agent,
                canceller: Some(canceller),
                updates,
                state,
            },
        );
        subscription
    }

    /// The Task `id` as it is now, with `history_length` messages of its
    /// history at most.
    pub(crate) fn get(&self, id: &str, history_length: Option<u32>) -> Option<Task> {
        let table = self.table();
        let mut task = table.entries.get(id)?.task.clone();
        if let Some(length) = history_length {
            let keep = usize::try_from(length).unwrap_or(usize::MAX);
            let cut = task.history.len().saturating_sub(keep);
            task.history.drain(..cut);
        }
        Some(task)
    }

    /// The agent Task `id` was sent to, and its context (instance key).
    pub(crate) fn scope_of(&self, id: &str) -> Option<(String, String)> {
        self.table()
            .entries
            .get(id)
            .map(|entry| (entry.agent.clone(), entry.task.context_id.clone()))
    }

    /// The Task `id` and its updates from now on.
    pub(crate) fn subscribe(&self, id: &str) -> Option<Subscription> {
        let table = self.table();
        let entry = table.entries.get(id)?;
        Some(Subscription {
            task: entry.task.clone(),
            updates: entry.updates.subscribe(),
            state: entry.state.subscribe(),
        })
    }

    /// Cancels the running Task `id`; its state turns canceled when its
    /// Turn is over.
    pub(crate) fn cancel(&self, id: &str) -> Result<watch::Receiver<TaskState>, CancelRefused> {
        let mut table = self.table();
        let entry = table.entries.get_mut(id).ok_or(CancelRefused::NotFound)?;
        if entry.task.status.state.is_terminal() {
            return Err(CancelRefused::Ended(Box::new(entry.task.clone())));
        }
        if let Some(canceller) = entry.canceller.take() {
            canceller.cancel();
        }
        Ok(entry.state.subscribe())
    }

    /// Applies `change` to Task `id` and tells its subscribers `update`.
    fn update(&self, id: &str, change: impl FnOnce(&mut Task) -> StreamResponse) {
        let mut table = self.table();
        let Some(entry) = table.entries.get_mut(id) else {
            return;
        };
        let update = change(&mut entry.task);
        let state = entry.task.status.state;
        let _ = entry.updates.send(update);
        entry.state.send_replace(state);
        if state.is_terminal() {
            entry.canceller = None;
            table.ended.push_back(id.to_string());
            while table.ended.len() > self.limit {
                if let Some(oldest) = table.ended.pop_front() {
                    table.entries.remove(&oldest);
                }
            }
        }
    }

    fn set_status(&self, id: &str, status: TaskStatus) {
        self.update(id, |task| {
            task.status = status.clone();
            if let Some(message) = &status.message {
                task.history.push(message.clone());
            }
            StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                status,
                metadata: None,
            })
        });
    }

    fn grow_answer(&self, id: &str, piece: String, replace: bool, last: bool) {
        self.update(id, |task| {
            let first = task.artifacts.is_empty();
            if first || replace {
                task.artifacts = vec![answer_artifact(vec![Part::text(piece.clone())])];
            } else {
                task.artifacts[0].parts.push(Part::text(piece.clone()));
            }
            StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                artifact: answer_artifact(vec![Part::text(piece)]),
                append: !first && !replace,
                last_chunk: last,
                metadata: None,
            })
        });
    }
}

fn answer_artifact(parts: Vec<Part>) -> Artifact {
    Artifact {
        artifact_id: ANSWER_ARTIFACT.into(),
        name: Some("answer".into()),
        description: Some("The agent's answer".into()),
        parts,
        metadata: None,
    }
}

/// Now, as A2A writes times (RFC 3339, UTC).
pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A status with `state` and, when there is something to say, an agent
/// message saying it.
pub(crate) fn status(state: TaskState, task: &Task, said: Option<String>) -> TaskStatus {
    TaskStatus {
        state,
        message: said.map(|text| Message {
            message_id: goondan_types::new_event_id(),
            context_id: Some(task.context_id.clone()),
            task_id: Some(task.id.clone()),
            role: Role::Agent,
            parts: vec![Part::text(text)],
            ..Message::default()
        }),
        timestamp: Some(now()),
    }
}

/// Follows Task `task`'s Turn (sent to `agent` in instance `task.context_id`)
/// through `updates` until it ends, keeping the Task's state and
/// answer; looks for a pending approval every `approval_poll`.
pub(crate) async fn drive(
    tasks: Arc<Tasks>,
    swarm: Arc<dyn Swarm>,
    task: Task,
    agent: String,
    mut updates: mpsc::Receiver<TurnUpdate>,
    approval_poll: Duration,
) {
    let id = task.id.clone();
    let mut state = TaskState::Submitted;
    let mut poll = tokio::time::interval(approval_poll);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let finished = loop {
        let update = tokio::select! {
            update = updates.recv() => update,
            _ = poll.tick() => {
                let waiting = swarm.waiting_for(&agent, &task.context_id);
                let wanted = if waiting.is_some() {
                    TaskState::InputRequired
                } else if state == TaskState::InputRequired {
                    TaskState::Working
                } else {
                    state
                };
                if wanted != state {
                    state = wanted;
                    tasks.set_status(&id, status(state, &task, waiting));
                }
                continue;
            }
        };
        match update {
            Some(TurnUpdate::Text(piece)) => {
                if state != TaskState::Working {
                    state = TaskState::Working;
                    tasks.set_status(&id, status(state, &task, None));
                }
                tasks.grow_answer(&id, piece, false, false);
            }
            Some(TurnUpdate::Finished(finished)) => break finished,
            None => {
                break Err(TurnFailure::new(
                    "E_ORCHESTRATOR_STOPPED",
                    "the swarm went away before the Turn answered",
                ))
            }
        }
    };
    match finished {
        Ok(answer) => {
            tasks.grow_answer(&id, answer.text, true, true);
            tasks.set_status(&id, status(TaskState::Completed, &task, None));
        }
        Err(failure) => {
            let state = if failure.code == "E_TURN_CANCELLED" {
                TaskState::Canceled
            } else {
                TaskState::Failed
            };
            let failure = failure.for_port();
            let said = format!("error[{}]: {}", failure.code, failure.message);
            tasks.set_status(&id, status(state, &task, Some(said)));
        }
    }
}
