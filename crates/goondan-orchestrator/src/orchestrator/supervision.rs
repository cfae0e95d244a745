//! Supervision: starting processes, their handshake, noticing their end,
//! redelivering what they held, crash-loop backoff and the periodic
//! comparison of desired and actual state.
//!
//! A process is over when both its exit and the end of its stream were
//! observed (the transport delivers every message before the end of the
//! stream, so nothing it said is lost). If one half does not follow the
//! other within [`ENDING_DEADLINE`](super::ENDING_DEADLINE), the process is
//! killed or declared over anyway.

use super::instance::{Instance, Queued};
use super::{CrashRecord, Orchestrator};
use crate::backoff::{respawn_delay, MAX_BACKOFF_MS};
use crate::OrchestratorError;
use goondan_ipc::protocol::{self, StartError, TurnFinished, PROTOCOL_VERSION};
use goondan_ipc::{Link, ProtocolError, RoutingKey, RuntimeMessage};
use goondan_types::ProcessStatus;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

impl Orchestrator {
    /// The instance of `key`, created (with its persisted crash record) on
    /// first use.
    pub(super) fn instance_for(&mut self, key: &RoutingKey) -> &mut Instance {
        // A ConnectorProcess has no instance folder to keep counters in.
        let ledger = self
            .crash_ledger
            .as_ref()
            .filter(|_| key.connection_name().is_none());
        self.instances.get_or_insert_with(key, || {
            let mut instance = Instance::new();
            if let Some(ledger) = ledger {
                let record = (ledger.load)(key);
                instance.consecutive_crashes = record.consecutive_crashes;
                // A deadline read from disk is clamped to the longest
                // backoff this orchestrator would ever set: a clock that
                // jumped, or a hand-edited file, must not park an instance
                // for years.
                let longest = Duration::from_millis(MAX_BACKOFF_MS);
                instance.next_spawn_at = record
                    .backoff_until
                    .and_then(|until| until.duration_since(SystemTime::now()).ok())
                    .map(|remaining| {
                        if remaining > longest {
                            tracing::warn!(key = %key, remaining_s = remaining.as_secs(), max_s = longest.as_secs(), "backoffUntil in metadata.json is further away than the longest backoff; clamped");
                            // Written back, so what `gdn instance list`
                            // shows is what applies.
                            (ledger.save)(
                                key,
                                CrashRecord {
                                    consecutive_crashes: record.consecutive_crashes,
                                    backoff_until: Some(SystemTime::now() + longest),
                                },
                            );
                        }
                        Instant::now() + remaining.min(longest)
                    });
            }
            instance
        })
    }

    /// Starts a process for `key` unless one runs, the orchestrator is
    /// stopping, or the instance is backing off.
    pub(super) fn ensure_spawned(&mut self, key: &RoutingKey) {
        let stopping = self.stopping.is_some();
        let room = self.has_room(key);
        let Some(instance) = self.instances.get_mut(key) else {
            return;
        };
        if instance.is_running() || stopping || instance.holds > 0 || instance.refused_by_config {
            return;
        }
        if let Some(at) = instance.next_spawn_at {
            if Instant::now() < at {
                instance.status = ProcessStatus::CrashLoopBackOff;
                return;
            }
        }
        if !room {
            // Started by `fill_free_slots` once a process ends.
            tracing::info!(key = %key, max_live = self.swarm.processes.max_live, "process cap reached; the instance waits for a free slot");
            return;
        }
        let link = Link {
            key: key.clone(),
            generation: self.next_generation,
        };
        self.next_generation += 1;
        let workdir = instance.cwd.clone();
        let spawned = self
            .spawner
            .spawn(&super::connectors::spawn_request(key, workdir))
            .and_then(|spawned| {
                self.transport
                    .open(link.clone(), spawned.endpoint)
                    .map_err(|error| OrchestratorError::Spawn {
                        key: key.to_string(),
                        source: std::io::Error::other(error.to_string()),
                    })?;
                Ok((spawned.control, spawned.exit))
            });
        match spawned {
            Ok((control, exit)) => {
                instance.status = ProcessStatus::Spawning;
                instance.link = Some(link.clone());
                instance.control = Some(control);
                instance.ending = Default::default();
                instance.next_spawn_at = None;
                instance.ready_at = None;
                instance.last_active = Instant::now();
                instance.liveness = Default::default();
                let inputs = self.inputs_tx.clone();
                tokio::spawn(async move {
                    let code = exit.await;
                    let _ = inputs.send(super::Input::Exited { link, code }).await;
                });
                tracing::info!(key = %key, generation = self.next_generation - 1, "spawned agent process");
            }
            Err(error) => {
                tracing::error!(key = %key, code = error.code(), "{error}");
                self.record_crash(key, None);
            }
        }
    }

    /// The handshake and the Turn outcomes of the process serving `key`.
    pub(super) fn on_lifecycle(&mut self, key: &RoutingKey, message: RuntimeMessage) {
        match message {
            RuntimeMessage::Ready(ready) if ready.protocol_version != PROTOCOL_VERSION => {
                let error = ProtocolError::Version {
                    expected: PROTOCOL_VERSION,
                    found: ready.protocol_version,
                };
                self.stats.count(&error);
                self.start_failed(
                    key,
                    StartError {
                        code: error.code().into(),
                        message: error.to_string(),
                        suggestion: Some(error.suggestion().into()),
                    },
                );
                if let Some(control) = self.instances.get_mut(key).and_then(|i| i.control.as_mut())
                {
                    control.kill();
                }
            }
            RuntimeMessage::Ready(_) => {
                if let Some(instance) = self.instances.get_mut(key) {
                    if instance.shutdown.is_none() {
                        instance.status = ProcessStatus::Idle;
                    }
                    instance.ready_at = Some(Instant::now());
                    instance.last_start_error = None;
                }
                self.start_pinging(key);
                tracing::info!(key = %key, "agent process ready");
                self.on_chat_connector_ready(key);
            }
            RuntimeMessage::TurnFinished(TurnFinished { ok, event_id }) => {
                let Some(instance) = self.instances.get_mut(key) else {
                    return;
                };
                if let Some(event_id) = &event_id {
                    instance.turn_finished(event_id);
                    self.input_left(key, event_id);
                }
                let Some(instance) = self.instances.get_mut(key) else {
                    return;
                };
                instance.last_active = Instant::now();
                let had_crashed = ok && instance.consecutive_crashes > 0;
                if ok {
                    instance.consecutive_crashes = 0;
                    instance.next_spawn_at = None;
                }
                if instance.status == ProcessStatus::Processing
                    && instance.waiting() == instance.queued()
                {
                    instance.status = ProcessStatus::Idle;
                }
                if had_crashed {
                    self.save_crashes(key, 0, None);
                }
                // An instance that just became idle may make room for one
                // waiting for a process slot.
                self.fill_free_slots();
            }
            RuntimeMessage::StartError(error) => self.start_failed(key, error),
            // An answer to a liveness ping: hearing anything from the
            // process already counted as a sign of life.
            RuntimeMessage::Pong(_) => {}
            other => {
                // Named by its wire type: a person may read this line.
                let kind = serde_json::to_value(&other)
                    .ok()
                    .and_then(|value| value["type"].as_str().map(str::to_string))
                    .unwrap_or_default();
                tracing::warn!(key = %key, code = "E_IPC_UNEXPECTED", "a child sent `{kind}`, which the orchestrator does not take from a child; ignored");
            }
        }
    }

    /// Fails every request waiting on `key`: its process cannot start, and
    /// nothing it would be handed could run.
    fn start_failed(&mut self, key: &RoutingKey, error: StartError) {
        let process = if key.connection_name().is_some() {
            "connector"
        } else {
            "agent process"
        };
        // Kept for `gdn run --detach`, which reports a Connection that
        // refused to start instead of saying only "started".
        if let Some(instance) = self.instances.get_mut(key) {
            instance.last_start_error = Some(error.clone());
        }
        // Requests from other agents fail now with the real cause rather
        // than at their callers' timeouts; a fire-and-forget sender learns
        // its event was refused.
        let queued = self
            .instances
            .get_mut(key)
            .map(Instance::drain_queued)
            .unwrap_or_default();
        let failed: Vec<String> = self
            .waiters
            .iter()
            .filter(|(_, waiter)| waiter.key == *key)
            .map(|(id, _)| id.clone())
            .collect();
        // `reported`: someone waits for an answer and gets this error as
        // one, so a console does not print it twice. A connector's refusal
        // is reported once its exit says whether it lasts
        // ([`Orchestrator::connector_refused`]).
        if process != "connector" {
            tracing::error!(key = %key, code = %error.code, suggestion = error.suggestion.as_deref().unwrap_or(""), reported = !queued.is_empty() || !failed.is_empty(), "{process} failed to start: {}", error.message);
        }
        for queued in queued {
            let cause = OrchestratorError::AgentStart {
                key: key.to_string(),
                code: error.code.clone(),
                message: error.message.clone(),
                suggestion: error.suggestion.clone(),
            };
            self.fail_queued(key, &queued, cause);
        }
        for id in failed {
            if let Some(waiter) = self.waiters.remove(&id) {
                let _ = waiter.reply.send(Err(OrchestratorError::AgentStart {
                    key: key.to_string(),
                    code: error.code.clone(),
                    message: error.message.clone(),
                    suggestion: error.suggestion.clone(),
                }));
            }
        }
    }

    /// A process exited; it is over once its stream has ended too.
    pub(super) fn on_exit_observed(&mut self, link: Link, code: Option<i32>) {
        self.finish_deletes(&link);
        self.finish_holds(&link);
        let Some(instance) = self.instances.get_mut(&link.key) else {
            return;
        };
        if instance.link.as_ref() != Some(&link) {
            return;
        }
        instance.ending.exit = Some(code);
        if instance.ending.stream_ended {
            self.process_over(&link.key);
        } else {
            instance.ending.deadline = Some(Instant::now() + super::ENDING_DEADLINE);
        }
    }

    /// A process's stream ended; it is over once it has exited too.
    pub(super) fn on_stream_ended(&mut self, link: Link) {
        let Some(instance) = self.instances.get_mut(&link.key) else {
            return;
        };
        if instance.link.as_ref() != Some(&link) {
            return;
        }
        instance.ending.stream_ended = true;
        if instance.ending.exit.is_some() {
            self.process_over(&link.key);
        } else {
            // A process that closed its output can no longer speak: stop
            // it if it does not exit by itself.
            instance.ending.deadline = Some(Instant::now() + super::ENDING_DEADLINE);
        }
    }

    /// Both halves of a process's end were seen (or one timed out):
    /// redeliver what it held, decide whether to respawn, and give the
    /// slot it held to an instance waiting for one.
    pub(super) fn process_over(&mut self, key: &RoutingKey) {
        self.end_process(key);
        self.fill_free_slots();
    }

    fn end_process(&mut self, key: &RoutingKey) {
        let stopping = self.stopping.is_some();
        let Some(instance) = self.instances.get_mut(key) else {
            return;
        };
        let code = instance.ending.exit.flatten();
        let unresponsive = std::mem::take(&mut instance.liveness).unresponsive;
        if let Some(link) = instance.link.take() {
            self.transport.close(&link);
        }
        instance.control = None;
        instance.ending = Default::default();
        let not_redelivered = instance.redeliver_in_flight();
        let attempts = not_redelivered
            .iter()
            .find(|queued| !queued.cancelled)
            .map_or(0, |queued| queued.attempts);
        for queued in not_redelivered {
            if queued.cancelled {
                let error = OrchestratorError::TurnCancelled {
                    key: key.to_string(),
                };
                self.fail_queued(key, &queued, error);
            } else {
                self.give_up(key, queued, code, attempts);
            }
        }
        let Some(instance) = self.instances.get_mut(key) else {
            return;
        };
        if let Some(intent) = instance.shutdown.take() {
            instance.status = ProcessStatus::Terminated;
            tracing::info!(key = %key, exit = %crate::error::exit_text(code), "agent process stopped");
            if unresponsive {
                // Killed for its silence while draining: still a crash,
                // so a process that keeps wedging backs off.
                instance.consecutive_crashes += 1;
                let consecutive_crashes = instance.consecutive_crashes;
                let delay = respawn_delay(consecutive_crashes);
                instance.next_spawn_at = delay.map(|delay| Instant::now() + delay);
                tracing::warn!(key = %key, code = "E_AGENT_UNRESPONSIVE", consecutive_crashes, "unresponsive agent process killed while stopping; counted as a crash");
                self.save_crashes(key, consecutive_crashes, delay);
            }
            let Some(instance) = self.instances.get_mut(key) else {
                return;
            };
            if intent.respawn && !stopping {
                if intent.fresh {
                    if let Some(reset) = &self.reset_instance {
                        reset(key);
                    }
                }
                self.ensure_spawned(key);
            } else if instance.waiting() > 0 && !stopping {
                self.ensure_spawned(key);
            }
            return;
        }
        if code == Some(0) {
            instance.status = ProcessStatus::Terminated;
            tracing::info!(key = %key, "agent process exited");
            if instance.waiting() > 0 {
                self.ensure_spawned(key);
            }
            return;
        }
        if let (Some(_), Some(error)) = (key.connection_name(), instance.last_start_error.clone()) {
            if !unresponsive {
                self.connector_refused(key, &error, code);
                return;
            }
        }
        if unresponsive {
            tracing::warn!(key = %key, code = "E_AGENT_UNRESPONSIVE", "unresponsive agent process killed; counted as a crash");
        } else {
            // After a start failure the exit is its consequence; the
            // failure already said why.
            let reported = instance.last_start_error.is_some();
            tracing::warn!(key = %key, exit = %crate::error::exit_text(code), reported, "agent process crashed");
        }
        self.record_crash(key, code);
    }

    /// A ConnectorProcess that refused to start (`error`) exited with
    /// `code`. Said once: a refusal by the bundle
    /// ([`protocol::EXIT_REFUSED_BY_CONFIG`]) keeps the Connection down
    /// until a reload or a restart, since starting the same bundle again
    /// would only refuse again and flood the log; any other is a crash,
    /// retried with the backoff.
    fn connector_refused(&mut self, key: &RoutingKey, error: &StartError, code: Option<i32>) {
        let suggestion = error.suggestion.as_deref().unwrap_or("");
        if code != Some(protocol::EXIT_REFUSED_BY_CONFIG) {
            tracing::error!(key = %key, code = %error.code, suggestion, "connector failed to start: {}", error.message);
            self.record_crash(key, code);
            return;
        }
        tracing::error!(key = %key, code = %error.code, suggestion, "connector refused to start: {}; it stays down until the bundle changes or `gdn restart`", error.message);
        let Some(instance) = self.instances.get_mut(key) else {
            return;
        };
        instance.link = None;
        instance.control = None;
        instance.ready_at = None;
        instance.next_spawn_at = None;
        instance.status = ProcessStatus::Crashed;
        instance.refused_by_config = true;
    }

    /// An event every process died on: its requester is told, and it is
    /// not handed out again.
    fn give_up(&mut self, key: &RoutingKey, queued: Queued, code: Option<i32>, attempts: u32) {
        tracing::error!(key = %key, event_id = ?queued.event_id(), attempts, code = "E_AGENT_CRASHED", "every process handed this event died; it is given up");
        let error = OrchestratorError::AgentExited {
            attempts,
            key: key.to_string(),
            code,
        };
        self.fail_queued(key, &queued, error);
    }

    /// Tells whoever waits for `queued` (a request of the orchestrator's
    /// own, or of another agent) that it failed with `error`.
    pub(super) fn fail_queued(
        &mut self,
        key: &RoutingKey,
        queued: &Queued,
        error: OrchestratorError,
    ) {
        if let Some(event_id) = queued.event_id() {
            // Answered for good: it leaves the inbox whoever hears of it.
            self.input_left(key, event_id);
            if let Some(waiter) = self
                .waiters
                .remove(&protocol::correlation_id_for_id(event_id))
            {
                let _ = waiter.reply.send(Err(error));
                return;
            }
        }
        // A runtime message is the orchestrator's own: no one to tell.
        let Some(event) = queued.event() else {
            return;
        };
        if let Ok(from) = RoutingKey::parse(&queued.from, &key.instance_key) {
            self.fail_event(&from, event, error.code(), &error.to_string());
        }
    }

    pub(super) fn save_crashes(
        &self,
        key: &RoutingKey,
        consecutive_crashes: u32,
        delay: Option<Duration>,
    ) {
        if let Some(ledger) = &self.crash_ledger {
            (ledger.save)(
                key,
                CrashRecord {
                    consecutive_crashes,
                    backoff_until: delay.map(|delay| SystemTime::now() + delay),
                },
            );
        }
    }

    fn record_crash(&mut self, key: &RoutingKey, code: Option<i32>) {
        let Some(instance) = self.instances.get_mut(key) else {
            return;
        };
        instance.link = None;
        instance.control = None;
        let stable = instance
            .ready_at
            .take()
            .is_some_and(|at| at.elapsed() >= super::connectors::STABLE_AFTER);
        if instance.resident && stable {
            instance.consecutive_crashes = 0;
        }
        instance.consecutive_crashes += 1;
        let consecutive_crashes = instance.consecutive_crashes;
        let delay = respawn_delay(consecutive_crashes);
        self.save_crashes(key, consecutive_crashes, delay);
        let Some(instance) = self.instances.get_mut(key) else {
            return;
        };
        match delay {
            Some(delay) => {
                instance.status = ProcessStatus::CrashLoopBackOff;
                instance.next_spawn_at = Some(Instant::now() + delay);
                tracing::warn!(
                    key = %key,
                    status = "crashLoopBackOff",
                    exit = %crate::error::exit_text(code),
                    consecutive_crashes,
                    backoff_ms = delay.as_millis() as u64,
                    "agent process is crash-looping; next respawn after the backoff"
                );
            }
            None => {
                instance.status = ProcessStatus::Crashed;
                self.ensure_spawned(key);
            }
        }
    }

    /// Compares desired and actual state: kills children past their grace
    /// period or silent past their end, declares over the ones whose other
    /// half never came, and respawns instances whose backoff expired and
    /// that still have work or were running.
    pub(super) fn reconcile(&mut self) {
        let now = Instant::now();
        let mut to_spawn = Vec::new();
        let mut over = Vec::new();
        for (key, instance) in self.instances.iter_mut() {
            if instance
                .ending
                .deadline
                .is_some_and(|deadline| now >= deadline)
            {
                instance.ending.deadline = None;
                if instance.ending.exit.is_some() {
                    tracing::warn!(key = %key, "the process exited but its stream stayed open (a child of it holds the pipe?); treating it as over");
                    over.push(key.clone());
                } else if let Some(control) = instance.control.as_mut() {
                    tracing::warn!(key = %key, "the process closed its output but did not exit; killing it");
                    control.kill();
                }
            }
            if let Some(intent) = instance.shutdown.as_mut() {
                if now >= intent.kill_at && !intent.killed {
                    if let Some(control) = instance.control.as_mut() {
                        if key.connection_name().is_some() && instance.ready_at.is_none() {
                            // Nothing to lose: it has accepted no event
                            // (`request_shutdown` gave it no grace), so a
                            // swarm stopped while it starts is not a
                            // warning on the terminal.
                            tracing::info!(key = %key, "connector stopped before it was ready");
                        } else {
                            tracing::warn!(key = %key, "grace period over; killing agent process");
                        }
                        control.kill();
                        intent.killed = true;
                    }
                }
                continue;
            }
            let wants_process = !instance.refused_by_config
                && (instance.waiting() > 0
                    || instance.resident
                    || matches!(
                        instance.status,
                        ProcessStatus::Crashed | ProcessStatus::CrashLoopBackOff
                    ));
            let backoff_over = instance.next_spawn_at.is_none_or(|at| now >= at);
            if !instance.is_running() && wants_process && backoff_over {
                to_spawn.push(key.clone());
            }
        }
        for key in over {
            self.process_over(&key);
        }
        for key in to_spawn {
            self.ensure_spawned(&key);
        }
        self.fill_free_slots();
    }
}
