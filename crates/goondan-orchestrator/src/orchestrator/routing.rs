//! Where a message goes: the orchestrator's own requests, events between
//! agents, answers, queries, and the bounded hand-off to each process.

use super::forwarding::Owed;
use super::input::{DeltaSink, Reply};
use super::instance::Queued;
use super::{Orchestrator, Waiter};
use crate::error::failed;
use crate::ingress::{self, Ingress};
use crate::OrchestratorError;
use goondan_ipc::protocol::{
    self, Answer, Failure, Query, QueryAnswer, QueryAnswerMessage, QueryRequest, Rejected,
};
use goondan_ipc::{Inbound, RoutingKey, RuntimeMessage, SendError, WireCode, ORCHESTRATOR};
use goondan_types::agents::SpawnedAgentInfo;
use goondan_types::{AgentEvent, IpcMessage, ProcessStatus, ReplyChannel};
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::oneshot;

impl Orchestrator {
    /// An input from outside the swarm, routed by its Connection's rules,
    /// answered to `reply`.
    pub(super) fn on_ingress(
        &mut self,
        ingress: Ingress,
        event_id: String,
        reply: Reply,
        deltas: Option<DeltaSink>,
    ) {
        if self.stopping.is_some() {
            let _ = reply.send(Err(OrchestratorError::Stopped));
            return;
        }
        match ingress::route(&self.swarm, &ingress) {
            Ok((key, routed)) => {
                let event = AgentEvent {
                    id: event_id,
                    ..routed
                };
                self.request(key, event, reply, deltas, None);
            }
            Err(error) => {
                let _ = reply.send(Err(error));
            }
        }
    }

    /// An event built for the instance `key` by its caller, answered to
    /// `reply`.
    pub(super) fn on_deliver(
        &mut self,
        key: RoutingKey,
        event: AgentEvent,
        reply: Reply,
        deltas: Option<DeltaSink>,
        stored: Option<oneshot::Sender<()>>,
    ) {
        if self.stopping.is_some() {
            let _ = reply.send(Err(OrchestratorError::Stopped));
            return;
        }
        // Checked here, not by the caller: the loop owns the swarm a
        // reload may have just replaced.
        if let Err(error) = self.swarm.check_agent(&key.agent_name) {
            let _ = reply.send(Err(error));
            return;
        }
        self.request(key, event, reply, deltas, stored);
    }

    /// Queues `event` for `key` as the orchestrator's own request, whose
    /// answer goes to `reply`; `stored` hears when it is durable.
    fn request(
        &mut self,
        key: RoutingKey,
        mut event: AgentEvent,
        reply: Reply,
        deltas: Option<DeltaSink>,
        stored: Option<oneshot::Sender<()>>,
    ) {
        // An instance backing off after crashes would hold the input
        // silently until the backoff ends: say so at once instead.
        if let Err(error) = self.refuse_if_backing_off(&key) {
            let _ = reply.send(Err(error));
            return;
        }
        let correlation_id = protocol::correlation_id_for(&event);
        event.reply_to = Some(ReplyChannel {
            target: ORCHESTRATOR.to_string(),
            correlation_id: correlation_id.clone(),
        });
        if let Err(error) = self.store_input(&key, ORCHESTRATOR, &event) {
            let _ = reply.send(Err(error));
            return;
        }
        let event_id = event.id.clone();
        match self.deliver(&key, Queued::turn(ORCHESTRATOR, event)) {
            Ok(()) => {
                if let Some(stored) = stored {
                    let _ = stored.send(());
                }
                self.waiters
                    .insert(correlation_id, Waiter { key, reply, deltas });
            }
            Err(error) => {
                self.input_withdrawn(&key, &event_id);
                let _ = reply.send(Err(error));
            }
        }
    }

    /// Cancels the Turn of the orchestrator's own request `event_id`: an
    /// event still in the orchestrator's queue is taken out and answered
    /// here; one already handed to its process is cancelled there
    /// (`runtime.cancel`), which answers. False when no request waits.
    pub(super) fn cancel(&mut self, event_id: &str) -> bool {
        let correlation_id = protocol::correlation_id_for_id(event_id);
        let Some(key) = self
            .waiters
            .get(&correlation_id)
            .map(|waiter| waiter.key.clone())
        else {
            return false;
        };
        tracing::info!(key = %key, event_id, "turn cancelled by its requester");
        if self.instance_for(&key).remove_queued(event_id) {
            self.input_left(&key, event_id);
            if let Some(waiter) = self.waiters.remove(&correlation_id) {
                let answer = Answer::failed(
                    correlation_id,
                    "E_TURN_CANCELLED",
                    &format!("event {event_id} was cancelled before its turn started"),
                );
                let _ = waiter
                    .reply
                    .send(Ok(answer.to_event(&key.agent_name, None)));
            }
            return true;
        }
        self.stop_turn(&key, event_id, None);
        true
    }

    /// A child stopped waiting for its request `event_id` (its own Turn
    /// was cancelled): the request leaves its target's queue, or its Turn
    /// is cancelled there, and so on down the chain. Only the sender of a
    /// request can cancel it; an answered or unknown one is left alone.
    fn cancel_request_of(&mut self, from: &RoutingKey, event_id: &str) {
        let sender = from.to_string();
        let held = self.instances.iter().find_map(|(key, instance)| {
            instance
                .holds_event_from(event_id, &sender)
                .map(|handed_over| (key.clone(), handed_over))
        });
        let Some((key, handed_over)) = held else {
            return;
        };
        tracing::info!(from = %from, to = %key, event_id, "request cancelled by its caller");
        if !handed_over {
            self.instance_for(&key).remove_queued(event_id);
            self.input_left(&key, event_id);
            return;
        }
        self.stop_turn(&key, event_id, None);
    }

    /// `Err(E_AGENT_BACKOFF)` when `key` has no process and backs off
    /// after crashes.
    fn refuse_if_backing_off(&mut self, key: &RoutingKey) -> Result<(), OrchestratorError> {
        let instance = self.instance_for(key);
        let Some(remaining) = instance.backoff_remaining() else {
            return Ok(());
        };
        instance.status = ProcessStatus::CrashLoopBackOff;
        let until = goondan_types::iso_at(std::time::SystemTime::now() + remaining);
        let consecutive_crashes = instance.consecutive_crashes;
        // `reported`: the refusal is the sender's answer.
        tracing::warn!(key = %key, code = "E_AGENT_BACKOFF", until = %until, consecutive_crashes, reported = true, "input refused: the instance is backing off after crashes");
        Err(OrchestratorError::Backoff {
            key: key.to_string(),
            until,
            remaining_ms: remaining.as_millis() as u64,
            consecutive_crashes,
        })
    }

    /// A message from the process serving `key`.
    pub(super) fn on_child_message(&mut self, key: &RoutingKey, message: IpcMessage) {
        match protocol::decode(&message) {
            Ok(Inbound::Runtime(runtime)) => self.on_runtime(key, runtime),
            Ok(Inbound::Answer(answer, event)) if message.to == ORCHESTRATOR => {
                self.on_answer(key, answer, *event)
            }
            Ok(Inbound::Answer(_, event) | Inbound::Event(event))
                if key.connection_name().is_some() =>
            {
                let reason = "a ConnectorProcess sends its events as runtime.query ingest";
                self.fail_event(key, &event, "E_IPC_NOT_AN_AGENT", reason);
            }
            Ok(Inbound::Answer(_, event) | Inbound::Event(event)) => {
                self.route(key, &message.to, *event)
            }
            Ok(Inbound::ShutdownAck) => tracing::debug!(key = %key, "shutdown acknowledged"),
            Ok(Inbound::Shutdown(_)) => {
                self.refuse(
                    key,
                    goondan_ipc::ProtocolError::Malformed {
                        what: "shutdown from a child".into(),
                        reason: "only the orchestrator sends shutdown".into(),
                        event_id: None,
                    },
                );
            }
            Err(error) => self.refuse(key, error),
        }
    }

    /// Counts, logs and answers a message `key` sent that this side
    /// cannot accept.
    pub(super) fn refuse(&mut self, key: &RoutingKey, error: goondan_ipc::ProtocolError) {
        self.stats.count(&error);
        tracing::warn!(key = %key, code = error.code(), "{error}; refused");
        let _ = self.deliver(key, Queued::runtime(error.rejection()));
    }

    fn on_answer(&mut self, key: &RoutingKey, answer: Answer, mut event: AgentEvent) {
        match self.waiters.remove(&answer.in_reply_to) {
            Some(waiter) => {
                // The requester learns which instance answered (the rules
                // may have chosen it).
                event
                    .instance_key
                    .get_or_insert_with(|| key.instance_key.clone());
                let _ = waiter.reply.send(Ok(event));
            }
            None => {
                tracing::warn!(key = %key, event_id = %event.id, "answer matches no waiting request (late or duplicate); dropped")
            }
        }
    }

    /// Routes an event (a request, a fire-and-forget event or an answer)
    /// from `from` to the routing key in `to`.
    fn route(&mut self, from: &RoutingKey, to: &str, event: AgentEvent) {
        let target = match RoutingKey::parse(to, &from.instance_key) {
            Ok(target) if self.swarm.agents.contains(&target.agent_name) => target,
            Ok(target) => {
                let reason = format!(
                    "agent `{}` is not part of swarm `{}`",
                    target.agent_name, self.swarm.swarm_name
                );
                self.fail_event(from, &event, "E_AGENT_NOT_FOUND", &reason);
                return;
            }
            Err(error) => {
                self.fail_event(from, &event, error.code(), &error.to_string());
                return;
            }
        };
        let sender = from.to_string();
        if let Some(remote) = self.served_elsewhere(&target) {
            let message = protocol::event_message(&sender, &target.to_string(), &event);
            if protocol::in_reply_to(&event).is_some() {
                // An answer owes nobody an acknowledgement: its request's
                // host acks the request once the answer is stored.
                drop(remote.forward(message));
            } else {
                // A send's sender is told it was accepted once the owner's
                // inbox stored it; a send or request it did not store
                // fails back at once.
                let owed = Owed::Delivery {
                    from: from.clone(),
                    target,
                    event: Box::new(event),
                };
                self.forward(remote.as_ref(), message, owed);
            }
            return;
        }
        if protocol::in_reply_to(&event).is_none() {
            match self.store_input(&target, &sender, &event) {
                Ok(()) => {}
                // Stored already: a send is accepted, a request gets its
                // answer from the Turn the first copy started.
                Err(OrchestratorError::Duplicate { .. }) if event.reply_to.is_none() => {
                    self.acknowledge(from, event.id.clone());
                    return;
                }
                Err(error) => {
                    self.fail_event(from, &event, error.code(), &error.to_string());
                    return;
                }
            }
        }
        // Kept to answer for the event if its target refuses it.
        let refusable = event.clone();
        let is_send = protocol::in_reply_to(&event).is_none() && event.reply_to.is_none();
        let queued = match protocol::in_reply_to(&event) {
            Some(_) => Queued::answer(sender, event),
            None => Queued::turn(sender, event),
        };
        if let Err(error) = self.deliver(&target, queued) {
            self.input_withdrawn(&target, &refusable.id);
            self.fail_event(from, &refusable, error.code(), &error.to_string());
        } else if is_send {
            // tool.md §11.1: a send is answered once the event is durably
            // accepted (stored in the target's inbox above and queued),
            // not once it reached a process: from the inbox it reaches
            // the target whatever becomes of either process.
            self.acknowledge(from, refusable.id);
        }
    }

    /// The door out when another host serves `key` (see
    /// [`crate::RemoteInstances`]); `None` when this orchestrator runs it.
    pub(super) fn served_elsewhere(
        &self,
        key: &RoutingKey,
    ) -> Option<Arc<dyn crate::RemoteInstances>> {
        self.remote.clone().filter(|remote| !remote.serves(key))
    }

    /// Tells `sender` that its event `event_id` was accepted (stored in
    /// its target's inbox, here or on the host that owns it).
    pub(super) fn acknowledge(&mut self, sender: &RoutingKey, event_id: String) {
        let accepted = RuntimeMessage::Accepted(protocol::Accepted { event_id });
        let _ = self.deliver(sender, Queued::runtime(accepted));
    }

    /// An event from an instance on another host for our instance `to`:
    /// an answer goes to its process as it is, a request or a send is a
    /// Turn. A refusal (a full queue) goes back the way it came.
    pub(super) fn on_from_remote(&mut self, to: RoutingKey, message: IpcMessage) {
        let event = match protocol::decode(&message) {
            Ok(Inbound::Answer(_, event) | Inbound::Event(event)) => event,
            Ok(_) | Err(_) => {
                tracing::warn!(to = %to, "a message from another host is not an event; dropped");
                return;
            }
        };
        let queued = match protocol::in_reply_to(&event) {
            Some(_) => Queued::answer(message.from, (*event).clone()),
            None => Queued::turn(message.from, (*event).clone()),
        };
        if let Err(error) = self.deliver(&to, queued) {
            tracing::warn!(to = %to, code = error.code(), "event {} from another host refused: {error}", event.id);
            if let (Some(reply_to), Some(remote)) = (&event.reply_to, &self.remote) {
                let answer = Answer::failed(
                    reply_to.correlation_id.clone(),
                    error.code(),
                    &error.to_string(),
                )
                .to_event(&to.agent_name, event.trace_id.clone());
                // An answer owes nobody an acknowledgement.
                drop(remote.forward(protocol::event_message(
                    &to.to_string(),
                    &reply_to.target,
                    &answer,
                )));
            }
        }
    }

    /// Tells `from` that `event` went nowhere: its requester gets a failed
    /// answer at once instead of waiting for its timeout; a fire-and-forget
    /// sender gets a refusal naming the event.
    pub(super) fn fail_event(
        &mut self,
        from: &RoutingKey,
        event: &AgentEvent,
        code: &str,
        reason: &str,
    ) {
        tracing::warn!(from = %from, code, "{reason}; event {} refused", event.id);
        let queued = match &event.reply_to {
            Some(reply_to) => {
                let answer = Answer::failed(reply_to.correlation_id.clone(), code, reason);
                Queued::answer(
                    ORCHESTRATOR,
                    answer.to_event(ORCHESTRATOR, event.trace_id.clone()),
                )
            }
            None => Queued::runtime(RuntimeMessage::Rejected(Rejected {
                code: code.to_string(),
                message: reason.to_string(),
                event_id: Some(event.id.clone()),
            })),
        };
        let _ = self.deliver(from, queued);
    }

    fn on_runtime(&mut self, key: &RoutingKey, message: RuntimeMessage) {
        match message {
            RuntimeMessage::Query(query) => self.on_query(key, query),
            RuntimeMessage::TextDelta(delta) => {
                if let Some(Waiter {
                    deltas: Some(deltas),
                    ..
                }) = self.waiters.get(&delta.delta_for)
                {
                    let _ = deltas.send(delta.delta);
                }
            }
            RuntimeMessage::Rejected(rejected) => {
                tracing::warn!(key = %key, code = %rejected.code, event_id = ?rejected.event_id, "{} refused a message: {}", key, rejected.message);
                let waiter = rejected
                    .event_id
                    .as_deref()
                    .map(protocol::correlation_id_for_id)
                    .and_then(|correlation_id| self.waiters.remove(&correlation_id));
                if let Some(waiter) = waiter {
                    let error = if rejected.is(WireCode::QueueFull) {
                        OrchestratorError::QueueFull {
                            key: key.to_string(),
                            limit: self.swarm.max_queued_events,
                        }
                    } else {
                        OrchestratorError::AgentStart {
                            key: key.to_string(),
                            code: rejected.code,
                            message: rejected.message,
                            suggestion: None,
                        }
                    };
                    let _ = waiter.reply.send(Err(error));
                }
            }
            RuntimeMessage::QueryAnswer(_) | RuntimeMessage::Accepted(_) => self.refuse(
                key,
                goondan_ipc::ProtocolError::Malformed {
                    what: "query answer or acceptance from a child".into(),
                    reason: "only the orchestrator sends them".into(),
                    event_id: None,
                },
            ),
            RuntimeMessage::Cancel(cancel) => self.cancel_request_of(key, &cancel.event_id),
            RuntimeMessage::Decided(decided) => self.on_decided(key, decided),
            notice @ (RuntimeMessage::ApprovalAsked(_) | RuntimeMessage::ApprovalDecided(_)) => {
                self.on_approval_notice(key, notice)
            }
            lifecycle => self.on_lifecycle(key, lifecycle),
        }
    }

    /// A child's question: the agents API's `spawn`, `list` and
    /// `restart_swarm`, a connector's ingress, a chat connector's
    /// decision.
    fn on_query(&mut self, from: &RoutingKey, request: QueryRequest) {
        let answer = match request.query {
            Query::Restart { reason } => {
                match self.request_restart(from, &request.correlation_id, reason) {
                    // Answered later, through `OrchestratorHandle::answer_query`.
                    None => return,
                    Some(refused) => refused,
                }
            }
            Query::Spawn { cwd: Some(cwd), .. } if !is_bundle_relative(&cwd) => {
                QueryAnswer::Failed(Failure {
                    code: "E_AGENT_SPAWN_CWD".into(),
                    message: format!(
                        "cwd `{cwd}` is not a folder inside the bundle: give a relative path without `..`, such as `work/feature-a`"
                    ),
                    suggestion: None,
                })
            }
            Query::Spawn { target, cwd } => match RoutingKey::parse(&target, &from.instance_key) {
                Ok(key) if self.swarm.agents.contains(&key.agent_name) => {
                    let existed = self
                        .instances
                        .get(&key)
                        .is_some_and(super::Instance::is_running);
                    match self.make_room(&key) {
                        Ok(()) => {
                            let instance = self.instance_for(&key);
                            if instance.owner.is_none() && !existed {
                                instance.owner = Some(from.clone());
                                instance.cwd = cwd;
                            }
                            self.ensure_spawned(&key);
                            QueryAnswer::Spawned { spawned: !existed }
                        }
                        Err(error) => failed(error),
                    }
                }
                _ => QueryAnswer::Failed(Failure {
                    code: "E_AGENT_NOT_FOUND".into(),
                    message: format!(
                        "agent `{target}` is not part of swarm `{}`",
                        self.swarm.swarm_name
                    ),
                    suggestion: None,
                }),
            },
            Query::Ingest { event } => match self.ingest(from, &request.correlation_id, event) {
                // Answered once the instance's host stored the event.
                None => return,
                Some(answer) => answer,
            },
            Query::Decide { target, decision } => {
                match self.decide_for_chat(from, &request.correlation_id, &target, *decision) {
                    // Answered once the instance recorded it.
                    None => return,
                    Some(refused) => refused,
                }
            }
            Query::List => QueryAnswer::Agents {
                agents: self
                    .instances
                    .iter()
                    .filter_map(|(key, instance)| {
                        let owner = instance.owner.as_ref()?;
                        Some(SpawnedAgentInfo {
                            target: key.agent_name.clone(),
                            instance_key: key.instance_key.clone(),
                            owner_agent: owner.agent_name.clone(),
                            owner_instance_key: owner.instance_key.clone(),
                            created_at: instance.created_at.clone(),
                            cwd: instance.cwd.clone(),
                        })
                    })
                    .collect(),
            },
        };
        self.answer_query(from, request.correlation_id, answer);
    }

    /// Hands `decision` to `key`'s process (started if none runs); the
    /// reply waits for its [`RuntimeMessage::Decided`].
    pub(super) fn decide(
        &mut self,
        key: RoutingKey,
        decision: goondan_types::ApprovalDecision,
        reply: super::input::DecisionReply,
    ) {
        if !self.swarm.agents.contains(&key.agent_name) {
            let _ = reply.send(Err(OrchestratorError::UnknownAgent {
                agent: key.agent_name.clone(),
                swarm: self.swarm.swarm_name.clone(),
            }));
            return;
        }
        if self.served_elsewhere(&key).is_some() {
            let _ = reply.send(Err(OrchestratorError::Approval {
                key: key.to_string(),
                code: "E_APPROVAL_REMOTE".into(),
                message: "another host of the cluster serves this instance; decide with `--cluster URLS` (or GOONDAN_CLUSTER), which reaches whichever host owns it"
                    .into(),
            }));
            return;
        }
        let correlation_id = protocol::new_correlation_id();
        let decide = RuntimeMessage::Decide(protocol::Decide {
            correlation_id: correlation_id.clone(),
            decision,
        });
        match self.deliver(&key, Queued::runtime(decide)) {
            Ok(()) => {
                self.decisions.insert(correlation_id, (key, reply));
            }
            Err(error) => {
                let _ = reply.send(Err(error));
            }
        }
    }

    /// An instance's answer to a decision handed to it.
    fn on_decided(&mut self, key: &RoutingKey, decided: protocol::Decided) {
        let Some((asked, reply)) = self.decisions.remove(&decided.in_reply_to) else {
            tracing::warn!(key = %key, "an answer to no decision handed out; dropped");
            return;
        };
        let outcome = match decided.failure {
            None => Ok(()),
            Some(failure) => Err(OrchestratorError::Approval {
                key: asked.to_string(),
                code: failure.code,
                message: failure.message,
            }),
        };
        let _ = reply.send(outcome);
    }

    /// Sends `answer` to the query `correlation_id` of `to`.
    pub(super) fn answer_query(
        &mut self,
        to: &RoutingKey,
        correlation_id: String,
        answer: QueryAnswer,
    ) {
        let answer = RuntimeMessage::QueryAnswer(QueryAnswerMessage {
            in_reply_to: correlation_id,
            answer,
        });
        let _ = self.deliver(to, Queued::runtime(answer));
    }

    /// Queues a message for `key`, starting its process when none runs;
    /// refuses an event past the instance's limit.
    pub(super) fn deliver(
        &mut self,
        key: &RoutingKey,
        queued: Queued,
    ) -> Result<(), OrchestratorError> {
        let limit = self.swarm.max_queued_events;
        let event_id = queued.event_id().map(str::to_string);
        // A held instance gets no process until it is released, so its
        // events wait without taking (or being refused) a process slot.
        if event_id.is_some() && self.instance_for(key).holds == 0 {
            self.make_room(key)?;
        }
        let instance = self.instance_for(key);
        if instance.enqueue(queued, limit).is_err() {
            tracing::warn!(key = %key, code = "E_QUEUE_FULL", limit, event_id = ?event_id, reported = true, "queue full; event refused");
            return Err(OrchestratorError::QueueFull {
                key: key.to_string(),
                limit,
            });
        }
        if !instance.is_running() && instance.shutdown.is_none() {
            self.ensure_spawned(key);
        }
        Ok(())
    }

    /// Hands queued messages to ready processes, in order, as far as each
    /// link takes them, looking only at the instances that changed since
    /// the last call and those a full link held back; then brings the
    /// instance table's cap count and deadlines up to date.
    pub(super) fn flush_queues(&mut self) {
        // Each pass may queue acknowledgements to senders (plain messages
        // that raise none of their own), which the next pass sends. The
        // bound only guards the loop: whatever is left stays marked.
        const MAX_PASSES: usize = 8;
        let idle_after = self.swarm.processes.idle_after;
        let mut keys: BTreeSet<RoutingKey> = std::mem::take(&mut self.held_back);
        for _ in 0..MAX_PASSES {
            keys.extend(self.instances.settle(idle_after));
            if keys.is_empty() {
                return;
            }
            for key in &keys {
                self.flush_one(key);
            }
            self.instances.resettle(keys.iter(), idle_after);
            keys.clear();
        }
    }

    fn flush_one(&mut self, key: &RoutingKey) {
        let mut oversized = Vec::new();
        let Some(instance) = self.instances.get_mut_unmarked(key) else {
            return;
        };
        'flush: {
            if instance.takes_answers_only() {
                if let Some(link) = instance.link.clone() {
                    let mut plain = instance.take_plain().into_iter();
                    while let Some(queued) = plain.next() {
                        if self
                            .transport
                            .try_send(&link, queued.to_message(key))
                            .is_err()
                        {
                            instance.requeue_plain(std::iter::once(queued).chain(plain).collect());
                            if !self.held_back.contains(key) {
                                self.held_back.insert(key.clone());
                            }
                            break;
                        }
                    }
                }
                break 'flush;
            }
            if !instance.takes_events() {
                break 'flush;
            }
            let Some(link) = instance.link.clone() else {
                break 'flush;
            };
            while let Some(queued) = instance.next_to_send() {
                match self.transport.try_send(&link, queued.to_message(key)) {
                    Ok(()) => {
                        if queued.event_id().is_some() {
                            instance.last_active = tokio::time::Instant::now();
                            if instance.status == ProcessStatus::Idle {
                                instance.status = ProcessStatus::Processing;
                            }
                        }
                        instance.handed_over(queued);
                    }
                    Err(SendError::TooLarge { bytes, .. }) => {
                        oversized.push((key.clone(), queued, bytes));
                    }
                    Err(SendError::Full(_) | SendError::Closed(_) | SendError::Stale(_)) => {
                        instance.requeue_front(queued);
                        if !self.held_back.contains(key) {
                            self.held_back.insert(key.clone());
                        }
                        break;
                    }
                }
            }
        }
        // A message no process can take is refused to its sender at once
        // instead of waiting forever.
        for (key, queued, bytes) in oversized {
            tracing::warn!(key = %key, code = "E_IPC_TOO_LARGE", bytes, "message over the IPC frame bound refused");
            let error = OrchestratorError::TooLarge {
                key: key.to_string(),
                bytes,
                limit: goondan_ipc::framing::MAX_LINE_BYTES,
            };
            self.fail_queued(&key, &queued, error);
        }
    }
}

/// Whether `cwd` names a folder inside the bundle: relative, with no `..`
/// and not empty (an instance works there; the bundle root is the
/// default, so naming it is pointless but harmless: `.` passes).
fn is_bundle_relative(cwd: &str) -> bool {
    let path = std::path::Path::new(cwd);
    !cwd.is_empty()
        && path.components().all(|part| {
            matches!(
                part,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        })
}
