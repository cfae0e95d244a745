//! The AgentProcess loop (`runtime.md` §5, §4.6).
//!
//! Inbound messages are decoded ([`protocol::decode`]) and sorted by a
//! reader task the moment they arrive: answers to this instance's own
//! requests go straight to [`IpcAgents`] (a Turn may be blocked on one),
//! `shutdown` flips the process into draining, and every other event joins
//! the bounded FIFO queue (one more than it holds is answered with
//! `E_QUEUE_FULL`). A message that does not decode is counted, logged and
//! answered with `runtime.rejected`; a `runtime.ping` is answered with
//! `runtime.pong` by the reader itself, so a Turn in progress never makes
//! the process look dead. The loop takes one event at a time,
//! runs its Turn, answers the caller when the event asked for a reply, and
//! reports the Turn's outcome, naming the event it consumed, so the
//! orchestrator can stop keeping it for redelivery. A redelivered event
//! whose Turn already finished is answered from the conversation, never run
//! twice. When draining, it takes nothing new, lets the current Turn finish
//! (its events are folded by the Turn itself), sends `shutdown_ack` and
//! returns; a Turn that waits for a person's decision is not waited for
//! (its question is durable: the next process resumes the Turn there), so
//! `gdn stop` does not sit out the grace period for a person.

use crate::assemble::{assemble, AgentProcessArgs, AssembledAgent, BuiltinsFor};
use crate::operators::OperatorDesk;
use crate::{lock, IpcAgents};
use goondan_ipc::handshake::child_channel;
use goondan_ipc::protocol::{
    self, Answer, AnswerOutcome, Failure, ProtocolStats, Ready, StartError, TextDelta, TurnFinished,
};
use goondan_ipc::{
    framing, Inbound, IpcChannel, RoutingKey, RuntimeMessage, WireCode, ORCHESTRATOR,
};
use goondan_runtime::turn::{Cancellation, PriorTurn};
use goondan_runtime::Ledger;
use goondan_store::{InstanceStatus, MetadataFile, OutboxMessage, UsageTotals};
use goondan_types::{AgentEvent, IpcMessage, TokenUsage, TurnFinishReason, TurnResult};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How an AgentProcess ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostExit {
    /// Drained after `shutdown` and acknowledged it.
    Drained,
    /// The orchestrator went away (its end of the channel closed).
    OrphanedParentGone,
    /// Another process (on another host of a cluster) owns the instance
    /// now; the process exits with [`EXIT_TAKEN_OVER`] without running the
    /// event it holds, which the orchestrator hands to the next process.
    TakenOver,
}

impl HostExit {
    /// The process's exit status after this end.
    pub fn exit_code(self) -> i32 {
        match self {
            HostExit::Drained | HostExit::OrphanedParentGone => 0,
            HostExit::TakenOver => EXIT_TAKEN_OVER,
        }
    }
}

/// The sending half an AgentProcess uses for everything it says.
#[derive(Debug, Clone)]
pub struct Outbound {
    me: RoutingKey,
    sender: mpsc::Sender<IpcMessage>,
}

impl Outbound {
    /// Messages from `me` through `sender`.
    pub fn new(me: RoutingKey, sender: mpsc::Sender<IpcMessage>) -> Self {
        Outbound { me, sender }
    }

    /// Tells the orchestrator something about this process.
    pub async fn runtime(&self, message: RuntimeMessage) {
        self.send(message.to_message(&self.me.to_string(), ORCHESTRATOR))
            .await;
    }

    async fn event(&self, to: &str, event: &AgentEvent) {
        self.send(protocol::event_message(&self.me.to_string(), to, event))
            .await;
    }

    /// Sends `answer` and returns the event sent; one too large for an IPC
    /// frame is replaced by a failure saying so (the whole answer stays in
    /// the conversation), so the caller never waits for a message no reader
    /// would accept.
    async fn answer(&self, to: &str, answer: &Answer, trace_id: Option<String>) -> AgentEvent {
        let event = answer.to_event(&self.me.agent_name, trace_id.clone());
        let message = protocol::event_message(&self.me.to_string(), to, &event);
        if framing::fits(&message) {
            self.send(message).await;
            return event;
        }
        let bytes = framing::encoded_len(&message);
        tracing::warn!(
            code = "E_IPC_TOO_LARGE",
            bytes,
            "answer over the IPC frame bound replaced by an error"
        );
        let refusal = Answer::failed(
            answer.in_reply_to.clone(),
            "E_IPC_TOO_LARGE",
            &format!(
                "{} answered with {bytes} bytes, over the {}-byte IPC limit; the whole answer is kept in its conversation",
                self.me,
                framing::MAX_LINE_BYTES
            ),
        );
        let event = refusal.to_event(&self.me.agent_name, trace_id);
        self.event(to, &event).await;
        event
    }

    async fn shutdown_ack(&self) {
        self.send(protocol::shutdown_ack_message(&self.me, ORCHESTRATOR))
            .await;
    }

    async fn send(&self, message: IpcMessage) {
        // A closed channel means the orchestrator is gone; the reader task
        // notices the same and ends the loop.
        let _ = self.sender.send(message).await;
    }
}

/// Sends a Turn's streamed model text to the orchestrator as
/// `runtime.text_delta` notices, in order, without blocking the provider.
struct DeltaForwarder {
    deltas: std::sync::Mutex<Option<mpsc::UnboundedSender<String>>>,
    forwarding: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Whether text was streamed, and whether a new model call started
    /// since: the next text then begins on a new line.
    streamed: std::sync::atomic::AtomicBool,
    new_call: std::sync::atomic::AtomicBool,
}

impl DeltaForwarder {
    fn start(outbound: &Outbound, correlation_id: &str) -> DeltaForwarder {
        let (deltas, mut pending) = mpsc::unbounded_channel::<String>();
        let outbound = outbound.clone();
        let in_reply_to = correlation_id.to_string();
        let forwarding = tokio::spawn(async move {
            while let Some(delta) = pending.recv().await {
                outbound
                    .runtime(RuntimeMessage::TextDelta(TextDelta {
                        delta_for: in_reply_to.clone(),
                        delta,
                    }))
                    .await;
            }
        });
        DeltaForwarder {
            deltas: std::sync::Mutex::new(Some(deltas)),
            forwarding: std::sync::Mutex::new(Some(forwarding)),
            streamed: Default::default(),
            new_call: Default::default(),
        }
    }

    /// Closes the stream and waits until every delta sent so far is
    /// handed to the IPC writer; later deltas are dropped.
    async fn finish(&self) {
        drop(lock(&self.deltas).take());
        let forwarding = lock(&self.forwarding).take();
        if let Some(forwarding) = forwarding {
            let _ = forwarding.await;
        }
    }
}

impl goondan_model::StreamObserver for DeltaForwarder {
    fn on_text_delta(&self, delta: &str) {
        use std::sync::atomic::Ordering::Relaxed;
        if delta.is_empty() {
            return;
        }
        let separate = self.new_call.swap(false, Relaxed) && self.streamed.load(Relaxed);
        self.streamed.store(true, Relaxed);
        let text = if separate {
            format!("\n{delta}")
        } else {
            delta.to_string()
        };
        if let Some(deltas) = lock(&self.deltas).as_ref() {
            let _ = deltas.send(text);
        }
    }

    fn on_model_call_start(&self) {
        self.new_call
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

enum Control {
    Running,
    Draining,
    ParentGone,
}

/// How many cancelled events that have not reached their Turn yet are
/// remembered; an id beyond it (one the orchestrator named for an event
/// this process never got) is forgotten oldest first.
const MAX_PENDING_CANCELS: usize = 256;

/// The exit status of an AgentProcess whose instance another process (on
/// another host of a cluster) has taken over: `EX_TEMPFAIL`, since the
/// event it held is run again by the next process.
pub const EXIT_TAKEN_OVER: i32 = 75;

/// Turns to cancel (`runtime.cancel`), shared by the inbound reader, which
/// hears the cancel, and the Turn loop, which owns the Turns.
#[derive(Default)]
struct Cancellations(std::sync::Mutex<CancelState>);

#[derive(Default)]
struct CancelState {
    /// The event whose Turn runs now, and how to stop it (saying who
    /// asked).
    running: Option<(String, tokio::sync::oneshot::Sender<Cancellation>)>,
    /// The running Turn was cancelled: what stopped it.
    stopped: Option<Cancellation>,
    /// Events cancelled before their Turn started, oldest first.
    waiting: std::collections::VecDeque<String>,
}

impl Cancellations {
    /// Marks `event_id`'s Turn as running; `None` when it was cancelled
    /// while queued (its Turn must not run), else what resolves if it is
    /// cancelled now.
    fn begin(&self, event_id: &str) -> Option<impl std::future::Future<Output = Cancellation>> {
        let mut state = lock(&self.0);
        if let Some(at) = state.waiting.iter().position(|id| id == event_id) {
            state.waiting.remove(at);
            return None;
        }
        let (stop, stopped) = tokio::sync::oneshot::channel();
        state.running = Some((event_id.to_string(), stop));
        state.stopped = None;
        Some(async move {
            match stopped.await {
                Ok(cancellation) => cancellation,
                // A Turn that ends uncancelled drops the sender: never
                // resolve.
                Err(_) => std::future::pending().await,
            }
        })
    }

    /// The running Turn ended; what cancelled it, if something did.
    fn end(&self) -> Option<Cancellation> {
        let mut state = lock(&self.0);
        state.running = None;
        state.stopped.take()
    }

    /// Stops `event_id`'s Turn if it runs, else keeps it from starting;
    /// `by` names the person who asked, when one did.
    fn cancel(&self, event_id: &str, by: Option<String>) {
        let mut state = lock(&self.0);
        if state
            .running
            .as_ref()
            .is_some_and(|(running, _)| running == event_id)
        {
            if let Some((_, stop)) = state.running.take() {
                let cancellation = Cancellation { by };
                state.stopped = Some(cancellation.clone());
                let _ = stop.send(cancellation);
            }
            return;
        }
        if state.waiting.len() == MAX_PENDING_CANCELS {
            state.waiting.pop_front();
        }
        state.waiting.push_back(event_id.to_string());
    }
}

/// Serves Turns for `agent` until shutdown or parent death.
///
/// `receiver` is the inbound half of the process's [`IpcChannel`]; the
/// agent's [`IpcAgents`] and operator desk are the ones it was assembled
/// with (answers and decisions reach its waiting Turn through them); at
/// most `max_queued_events` events wait for their Turn.
pub async fn serve(
    assembled: AssembledAgent,
    outbound: Outbound,
    receiver: mpsc::Receiver<IpcMessage>,
) -> HostExit {
    let AssembledAgent {
        mut agent,
        agents,
        operators,
        metadata,
        ledger,
        max_queued_events: max_queued,
        ..
    } = assembled;
    // Watched while a Turn runs: a Turn that only waits for a person does
    // not hold up a shutdown.
    let parked = operators.parked();
    // The loop closes what a cancelled Turn left waiting for a person.
    let desk = operators.clone();
    let (mut metadata, ledger, operators) = (Some(metadata), Some(ledger), Some(operators));
    let (queue_tx, mut queue) = mpsc::channel::<AgentEvent>(max_queued.max(1));
    let (control_tx, mut control) = watch::channel(Control::Running);
    let cancellations = std::sync::Arc::new(Cancellations::default());
    let mut sorter = tokio::spawn(sort_inbound(
        receiver,
        agents.clone(),
        outbound.clone(),
        queue_tx,
        control_tx,
        cancellations.clone(),
        operators,
    ));
    outbound
        .runtime(RuntimeMessage::Ready(Ready {
            protocol_version: protocol::PROTOCOL_VERSION,
        }))
        .await;
    loop {
        if !matches!(*control.borrow(), Control::Running) {
            break;
        }
        let event = tokio::select! {
            biased;
            _ = control.changed() => continue,
            ended = &mut sorter => {
                // The reader never ends on its own while the channel is
                // open; if it panicked, so does the process.
                if let Err(error) = ended {
                    if error.is_panic() {
                        std::panic::resume_unwind(error.into_panic());
                    }
                }
                break;
            }
            event = queue.recv() => match event {
                Some(event) => event,
                None => break,
            },
        };
        let event_id = event.id.clone();
        if let Err(error) = agent.confirm_writer() {
            // Another host owns this instance now (it claimed the log after
            // this process loaded it). Running the Turn here would only be
            // refused at its first write; exiting hands the event back to
            // the orchestrator, whose next process reads the current log.
            tracing::error!(code = error.code(), event_id = %event_id, "{error}; exiting so a new process reads the current conversation");
            sorter.abort();
            return HostExit::TakenOver;
        }
        if event.redelivered {
            if let Some(PriorTurn::Answered { text }) = agent.prior_turn(&event_id) {
                tracing::info!(event_id = %event_id, "redelivered event was already answered; sending the recorded answer");
                if let Some(reply_to) = &event.reply_to {
                    let answer = Answer {
                        in_reply_to: reply_to.correlation_id.clone(),
                        outcome: AnswerOutcome::Ok {
                            text: Some(text),
                            finish_reason: Some("text_response".into()),
                            turn_id: None,
                            usage: None,
                        },
                    };
                    outbound
                        .answer(&reply_to.target, &answer, event.trace_id.clone())
                        .await;
                }
                outbound
                    .runtime(RuntimeMessage::TurnFinished(TurnFinished {
                        ok: true,
                        event_id: Some(event_id),
                    }))
                    .await;
                continue;
            }
        }
        let Some(cancelled) = cancellations.begin(&event_id) else {
            tracing::info!(event_id = %event_id, "event cancelled before its turn started; not run");
            // A Turn that waited for a person in an earlier process.
            desk.cancel_event(&event_id, None);
            let failure = Failure {
                code: "E_TURN_CANCELLED".into(),
                message: format!("event {event_id} was cancelled before its turn started"),
                suggestion: None,
            };
            refuse(&outbound, event, failure).await;
            continue;
        };
        agents.begin_turn(&event);
        let reply_to = event.reply_to.clone();
        let trace_id = event.trace_id.clone();
        set_status(&mut metadata, InstanceStatus::Processing);
        // Only the orchestrator's own requests (a person at a terminal)
        // want text as it streams; other agents read whole answers.
        let stream = reply_to
            .as_ref()
            .filter(|reply_to| reply_to.target == ORCHESTRATOR)
            .map(|reply_to| DeltaForwarder::start(&outbound, &reply_to.correlation_id));
        let observer: &dyn goondan_model::StreamObserver = match &stream {
            Some(stream) => stream,
            None => &goondan_model::NoStream,
        };
        // What this Turn spends is the ledger's growth while it runs.
        let spent_before = ledger.as_deref().map(Ledger::instance_totals);
        // The caller gets its answer as soon as the turn chain returns;
        // the fold's disk flush happens after it.
        let answer = async |result: &TurnResult| {
            if let Some(stream) = &stream {
                // Every delta is on the wire before the answer that ends it.
                stream.finish().await;
            }
            // What was sent is committed with the Turn as its outbox, so a
            // cluster host that finds the commit but not the input's ack
            // sends it again instead of waking this process.
            let Some(reply_to) = &reply_to else {
                return Vec::new();
            };
            let spent = spent_before
                .zip(ledger.as_deref().map(Ledger::instance_totals))
                .map(|(before, after)| spent_between(before, after));
            let answer = turn_answer(result, &reply_to.correlation_id, spent);
            let event = outbound.answer(&reply_to.target, &answer, trace_id).await;
            vec![OutboxMessage {
                to: reply_to.target.clone(),
                event,
            }]
        };
        let turn = agent.run_turn_answering_early(event, observer, cancelled, answer);
        let result = tokio::select! {
            result = turn => result,
            () = parked_while_stopping(control.clone(), parked.clone()) => {
                // Dropping the Turn here is what a kill would do at this
                // point, minus the kill: its question is recorded, nothing
                // of it runs, and no `turn_finished` names its input, so the
                // orchestrator keeps the input for the next process, whose
                // Turn finds the question (and any decision) where it was.
                tracing::info!(event_id = %event_id, "stopping while the Turn waits for a person's decision; the request stays pending and the Turn resumes in the next process");
                cancellations.end();
                break;
            }
        };
        if let Some(cancellation) = cancellations.end() {
            desk.cancel_event(&event_id, cancellation.by.as_deref());
        }
        finish_turn(&mut metadata, ledger.as_deref());
        let ok = result.finish_reason != TurnFinishReason::Error;
        outbound
            .runtime(RuntimeMessage::TurnFinished(TurnFinished {
                ok,
                event_id: Some(event_id),
            }))
            .await;
    }
    let exit = match *control.borrow() {
        Control::ParentGone => HostExit::OrphanedParentGone,
        _ => HostExit::Drained,
    };
    if exit == HostExit::Drained {
        outbound.shutdown_ack().await;
    }
    // The sorter holds a sender (through `agents`) and waits on stdin,
    // which the orchestrator closes only after this process exits; stop it
    // so the writer can drain and finish.
    sorter.abort();
    exit
}

/// Resolves once the process is to stop (a `shutdown`, or its parent gone)
/// while a Turn waits for a person's decision and nothing else.
async fn parked_while_stopping(
    mut control: watch::Receiver<Control>,
    mut parked: watch::Receiver<usize>,
) {
    loop {
        let stopping = !matches!(*control.borrow_and_update(), Control::Running);
        if stopping && *parked.borrow_and_update() > 0 {
            return;
        }
        // A sender gone means the process is ending anyway; the Turn then
        // ends as it would have.
        let changed = tokio::select! {
            changed = control.changed() => changed,
            changed = parked.changed() => changed,
        };
        if changed.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Keeps `metadata.json` current; a failed write is logged, not fatal,
/// because the conversation itself is already durable.
fn set_status(metadata: &mut Option<MetadataFile>, status: InstanceStatus) {
    if let Some(file) = metadata {
        if let Err(error) = file.set_status(status) {
            tracing::warn!(code = error.code(), "metadata.json not updated: {error}");
        }
    }
}

/// Marks the instance idle and stores the ledger's lifetime totals, in one
/// write; a failed write is logged like [`set_status`]'s.
fn finish_turn(metadata: &mut Option<MetadataFile>, ledger: Option<&Ledger>) {
    if let Some(file) = metadata {
        let usage = ledger.map(Ledger::instance_totals);
        let written = file.update(|metadata| {
            metadata.status = InstanceStatus::Idle;
            if usage.is_some() {
                metadata.usage = usage;
            }
        });
        if let Err(error) = written {
            tracing::warn!(code = error.code(), "metadata.json not updated: {error}");
        }
    }
}

/// Waits (bounded) until everything queued on `channel`'s writer is on the
/// wire, after every sender has been dropped.
pub async fn flush(channel_writer: Option<tokio::task::JoinHandle<()>>) {
    if let Some(writer) = channel_writer {
        let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
    }
}

async fn sort_inbound(
    mut receiver: mpsc::Receiver<IpcMessage>,
    agents: IpcAgents,
    outbound: Outbound,
    queue: mpsc::Sender<AgentEvent>,
    control: watch::Sender<Control>,
    cancellations: std::sync::Arc<Cancellations>,
    operators: Option<OperatorDesk>,
) {
    let stats = ProtocolStats::default();
    while let Some(message) = receiver.recv().await {
        match protocol::decode(&message) {
            Ok(Inbound::Shutdown(payload)) => {
                tracing::info!(reason = ?payload.reason, grace_period_ms = payload.grace_period_ms, "shutdown received; draining");
                let _ = control.send(Control::Draining);
            }
            Ok(Inbound::ShutdownAck) => {}
            Ok(Inbound::Answer(answer, event)) => {
                if !agents.accept_answer(answer, &event) {
                    tracing::warn!(event_id = %event.id, "answer to an unknown or expired request; dropped");
                }
            }
            Ok(Inbound::Runtime(RuntimeMessage::QueryAnswer(answer))) => {
                if !agents.accept_query_answer(answer) {
                    tracing::warn!("query answer for an unknown or expired query; dropped");
                }
            }
            Ok(Inbound::Runtime(RuntimeMessage::Accepted(accepted))) => {
                agents.accepted(&accepted.event_id);
            }
            // Answered here, by the reader, so a long Turn is not taken
            // for a dead process.
            Ok(Inbound::Runtime(RuntimeMessage::Ping(ping))) => {
                outbound.runtime(ping.pong()).await;
            }
            Ok(Inbound::Runtime(RuntimeMessage::Cancel(cancel))) => {
                tracing::info!(event_id = %cancel.event_id, by = ?cancel.cancelled_by, "cancel received");
                cancellations.cancel(&cancel.event_id, cancel.cancelled_by);
            }
            // Answered by the reader: the Turn it wakes is waiting, so it
            // cannot take it from the queue.
            Ok(Inbound::Runtime(RuntimeMessage::Decide(decide))) => {
                let failure = match &operators {
                    Some(desk) => desk.decide(decide.decision).err(),
                    None => Some(Failure {
                        code: crate::operators::APPROVAL_NOT_FOUND.into(),
                        message: "this process holds no approvals".into(),
                        suggestion: None,
                    }),
                };
                outbound
                    .runtime(RuntimeMessage::Decided(protocol::Decided {
                        in_reply_to: decide.correlation_id,
                        failure,
                    }))
                    .await;
            }
            Ok(Inbound::Runtime(RuntimeMessage::Rejected(rejected))) => {
                tracing::warn!(code = %rejected.code, event_id = ?rejected.event_id, "the orchestrator refused a message: {}", rejected.message);
                if let Some(event_id) = &rejected.event_id {
                    agents.reject(
                        event_id,
                        Failure {
                            code: rejected.code.clone(),
                            message: rejected.message.clone(),
                            suggestion: None,
                        },
                    );
                }
            }
            Ok(Inbound::Runtime(other)) => {
                tracing::warn!(
                    code = "E_IPC_UNEXPECTED",
                    "a child does not take {other:?}; refused"
                );
            }
            Ok(Inbound::Event(event)) => enqueue(&queue, &outbound, *event).await,
            Err(error) => {
                stats.count(&error);
                tracing::warn!(code = error.code(), "{error}; refused");
                outbound.runtime(error.rejection()).await;
            }
        }
    }
    let _ = control.send(Control::ParentGone);
}

/// Queues `event` for its Turn, or answers it with `E_QUEUE_FULL`.
async fn enqueue(queue: &mpsc::Sender<AgentEvent>, outbound: &Outbound, event: AgentEvent) {
    let Err(error) = queue.try_send(event) else {
        return;
    };
    let (mpsc::error::TrySendError::Full(event) | mpsc::error::TrySendError::Closed(event)) = error;
    let limit = queue.max_capacity();
    tracing::warn!(event_id = %event.id, code = "E_QUEUE_FULL", limit, "the event queue is full; event refused");
    let failure = Failure {
        code: WireCode::QueueFull.as_str().into(),
        message: format!(
            "{} has {limit} events waiting; event {} refused",
            outbound.me, event.id
        ),
        suggestion: None,
    };
    refuse(outbound, event, failure).await;
}

/// Answers `event` with `failure` instead of running its Turn, and tells
/// the orchestrator it is done with it.
async fn refuse(outbound: &Outbound, event: AgentEvent, failure: Failure) {
    match &event.reply_to {
        Some(reply_to) => {
            let answer = Answer {
                in_reply_to: reply_to.correlation_id.clone(),
                outcome: AnswerOutcome::Failed(failure),
            };
            outbound
                .answer(&reply_to.target, &answer, event.trace_id.clone())
                .await;
        }
        None => {
            outbound
                .runtime(RuntimeMessage::Rejected(protocol::Rejected {
                    code: failure.code,
                    message: failure.message,
                    event_id: Some(event.id.clone()),
                }))
                .await;
        }
    }
    // The Turn never runs: the orchestrator forgets it instead of
    // redelivering it.
    outbound
        .runtime(RuntimeMessage::TurnFinished(TurnFinished {
            ok: true,
            event_id: Some(event.id),
        }))
        .await;
}

/// The tokens counted between two readings of an instance's ledger.
fn spent_between(before: UsageTotals, after: UsageTotals) -> TokenUsage {
    let prompt_tokens = after.input_tokens.saturating_sub(before.input_tokens);
    let completion_tokens = after.output_tokens.saturating_sub(before.output_tokens);
    TokenUsage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
    }
}

/// The answer to a request: the Turn's response text, or its error, with
/// what it `spent`.
fn turn_answer(result: &TurnResult, correlation_id: &str, spent: Option<TokenUsage>) -> Answer {
    let outcome = match (&result.finish_reason, &result.error) {
        (TurnFinishReason::Error, error) => AnswerOutcome::Failed(match error {
            Some(error) => Failure {
                code: error.code.as_deref().unwrap_or("E_TURN_FAILED").to_string(),
                message: error.message.clone(),
                suggestion: error.suggestion.clone(),
            },
            None => Failure {
                code: "E_TURN_FAILED".into(),
                message: "the turn failed".into(),
                suggestion: None,
            },
        }),
        (reason, _) => AnswerOutcome::Ok {
            text: result
                .response_message
                .as_ref()
                .map(|message| message.data.text()),
            finish_reason: serde_json::to_value(reason)
                .ok()
                .and_then(|value| value.as_str().map(str::to_string)),
            turn_id: Some(result.turn_id.clone()),
            usage: spent,
        },
    };
    Answer {
        in_reply_to: correlation_id.to_string(),
        outcome,
    }
}

/// Runs a whole AgentProcess over this process's stdin and stdout: reads
/// the spawn handshake (its secrets; a missing or malformed one is a
/// `runtime.start_error` with the handshake's code), builds the agent,
/// performs the start-up handshake (`runtime.ready` or
/// `runtime.start_error`), serves Turns, and returns the exit code (0 after
/// a drained shutdown or a vanished parent, [`EXIT_TAKEN_OVER`] when
/// another process took the instance over, 2 when the agent could not
/// start). The caller exits with it at once: the inbound reader may still
/// be blocked on stdin.
pub async fn run_agent_process(mut args: AgentProcessArgs, builtins_for: &BuiltinsFor) -> i32 {
    let me = RoutingKey::new(args.agent_name.clone(), args.instance_key.clone());
    let (
        handshake,
        IpcChannel {
            sender,
            receiver,
            writer,
        },
    ) = child_channel(&me).await;
    let outbound = Outbound::new(me, sender.clone());
    let assembled = match handshake {
        Ok(handshake) => {
            args.secrets = handshake.secrets;
            assemble(&args, builtins_for, sender).await
        }
        Err(error) => Err(crate::assemble::StartError::new(
            error.code(),
            error.to_string(),
            Some(error.suggestion().to_string()),
        )),
    };
    let mut telemetry = None;
    let code = match assembled {
        Ok(mut assembled) => {
            telemetry = assembled.telemetry.take();
            let exit = serve(assembled, outbound, receiver).await;
            tracing::info!(?exit, "agent process stopping");
            exit.exit_code()
        }
        Err(error) => {
            tracing::error!(code = %error.code, "agent failed to start: {}", error.message);
            outbound
                .runtime(RuntimeMessage::StartError(StartError {
                    code: error.code,
                    message: error.message,
                    suggestion: error.suggestion,
                }))
                .await;
            drop(outbound);
            2
        }
    };
    flush(writer).await;
    // After the last IPC line: the orchestrator already has the
    // `shutdown_ack`, and a collector that does not answer delays only
    // this process's exit, by at most the bound.
    if let Some(export) = telemetry {
        export.shutdown(SPAN_FLUSH_BOUND);
    }
    code
}

/// How long a stopping AgentProcess waits for its last spans to be
/// exported. Well inside the 2 s the orchestrator gives a process between
/// the end of its stream and its exit.
const SPAN_FLUSH_BOUND: std::time::Duration = std::time::Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn a_cancel_stops_the_running_turn_or_keeps_a_queued_one_from_starting() {
        let cancellations = Cancellations::default();
        // Cancelled while queued: its Turn never starts, once.
        cancellations.cancel("evt_queued", None);
        assert!(cancellations.begin("evt_queued").is_none());
        let again = cancellations.begin("evt_queued");
        assert!(again.is_some(), "the mark is used up");
        cancellations.end();

        // Running: the future resolves when it is cancelled, not before.
        let running = cancellations.begin("evt_running").unwrap();
        let mut running = Box::pin(running);
        assert!((&mut running).now_or_never().is_none());
        cancellations.cancel("evt_running", Some("cli".into()));
        assert_eq!(
            running.now_or_never(),
            Some(Cancellation {
                by: Some("cli".into())
            }),
            "who cancelled reaches the Turn"
        );
        cancellations.end();

        // A Turn that ends uncancelled never resolves afterwards.
        let finished = Box::pin(cancellations.begin("evt_done").unwrap());
        cancellations.end();
        assert!(finished.now_or_never().is_none());

        // Marks for events that never come are bounded.
        for n in 0..MAX_PENDING_CANCELS + 10 {
            cancellations.cancel(&format!("evt_ghost_{n}"), None);
        }
        assert_eq!(lock(&cancellations.0).waiting.len(), MAX_PENDING_CANCELS);
        assert!(
            cancellations.begin("evt_ghost_0").is_some(),
            "the oldest were forgotten"
        );
    }
}
