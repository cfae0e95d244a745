//! The AgentProcess loop (`runtime.md` §5, §4.6).
//!
//! Inbound messages are sorted by a reader task the moment they arrive:
//! answers to this instance's own requests go straight to [`IpcAgents`]
//! (a Turn may be blocked on one), `shutdown` flips the process into
//! draining, and every other event joins the FIFO queue. The loop takes one
//! event at a time, runs its Turn, answers the caller when the event asked
//! for a reply, and reports the Turn's outcome to the orchestrator. When
//! draining, it takes nothing new, lets the current Turn finish (its events
//! are folded by the Turn itself), sends `shutdown_ack` and returns.

use crate::assemble::{assemble, AgentProcessArgs, BuiltinsFor};
use crate::{lock, IpcAgents};
use goondan_ipc::{IpcChannel, Notice, RoutingKey, ORCHESTRATOR};
use goondan_runtime::turn::Agent;
use goondan_store::{InstanceStatus, MetadataFile};
use goondan_types::{
    AgentEvent, EventSource, EventSourceKind, IpcMessage, IpcMessageType, JsonObject, JsonValue,
    TurnFinishReason, TurnResult,
};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How an AgentProcess ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostExit {
    /// Drained after `shutdown` and acknowledged it.
    Drained,
    /// The orchestrator went away (its end of the channel closed).
    OrphanedParentGone,
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

    /// Tells the orchestrator about this process.
    pub async fn notice(&self, notice: Notice) {
        let event = notice.to_event(&self.me.agent_name);
        self.event(ORCHESTRATOR, &event).await;
    }

    async fn event(&self, to: &str, event: &AgentEvent) {
        let message = IpcMessage {
            message_type: IpcMessageType::Event,
            from: self.me.to_string(),
            to: to.to_string(),
            payload: serde_json::to_value(event).unwrap_or(JsonValue::Null),
        };
        // A closed channel means the orchestrator is gone; the reader task
        // notices the same and ends the loop.
        let _ = self.sender.send(message).await;
    }

    async fn shutdown_ack(&self) {
        let message = IpcMessage {
            message_type: IpcMessageType::ShutdownAck,
            from: self.me.to_string(),
            to: ORCHESTRATOR.to_string(),
            payload: JsonValue::Null,
        };
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
                    .notice(Notice::TextDelta {
                        in_reply_to: in_reply_to.clone(),
                        delta,
                    })
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

/// Serves Turns for `agent` until shutdown or parent death.
///
/// `receiver` is the inbound half of the process's [`IpcChannel`];
/// `agents` must be the same [`IpcAgents`] the agent was started with.
pub async fn serve(
    mut agent: Agent,
    agents: IpcAgents,
    outbound: Outbound,
    receiver: mpsc::Receiver<IpcMessage>,
    mut metadata: Option<MetadataFile>,
) -> HostExit {
    let (queue_tx, mut queue) = mpsc::unbounded_channel::<AgentEvent>();
    let (control_tx, mut control) = watch::channel(Control::Running);
    let sorter = tokio::spawn(sort_inbound(receiver, agents.clone(), queue_tx, control_tx));
    outbound.notice(Notice::Ready).await;
    loop {
        if !matches!(*control.borrow(), Control::Running) {
            break;
        }
        let event = tokio::select! {
            biased;
            _ = control.changed() => continue,
            event = queue.recv() => match event {
                Some(event) => event,
                None => break,
            },
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
        // The caller gets its answer as soon as the turn chain returns;
        // the fold's disk flush happens after it.
        let answer = async |result: &TurnResult| {
            if let Some(stream) = &stream {
                // Every delta is on the wire before the answer that ends it.
                stream.finish().await;
            }
            if let Some(reply_to) = &reply_to {
                let answer = answer_event(&outbound.me, result, &reply_to.correlation_id, trace_id);
                outbound.event(&reply_to.target, &answer).await;
            }
        };
        let result = agent
            .run_turn_answering_early(event, observer, answer)
            .await;
        set_status(&mut metadata, InstanceStatus::Idle);
        let ok = result.finish_reason != TurnFinishReason::Error;
        outbound.notice(Notice::TurnFinished { ok }).await;
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

/// Keeps `metadata.json` current; a failed write is logged, not fatal,
/// because the conversation itself is already durable.
fn set_status(metadata: &mut Option<MetadataFile>, status: InstanceStatus) {
    if let Some(file) = metadata {
        if let Err(error) = file.set_status(status) {
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
    queue: mpsc::UnboundedSender<AgentEvent>,
    control: watch::Sender<Control>,
) {
    while let Some(message) = receiver.recv().await {
        match message.message_type {
            IpcMessageType::Shutdown => {
                tracing::info!(payload = %message.payload, "shutdown received; draining");
                let _ = control.send(Control::Draining);
            }
            IpcMessageType::ShutdownAck => {}
            IpcMessageType::Event => {
                let event: AgentEvent = match serde_json::from_value(message.payload) {
                    Ok(event) => event,
                    Err(error) => {
                        tracing::warn!(
                            code = "E_IPC_MALFORMED",
                            "event payload is not an AgentEvent ({error}); dropped"
                        );
                        continue;
                    }
                };
                if let Some(event) = agents.accept_reply(event) {
                    if event.metadata_value("inReplyTo").is_some() {
                        tracing::warn!(event_id = %event.id, "answer to an unknown or expired request; dropped");
                        continue;
                    }
                    let _ = queue.send(event);
                }
            }
        }
    }
    let _ = control.send(Control::ParentGone);
}

/// The answer to a request: the Turn's response text, or its error.
fn answer_event(
    me: &RoutingKey,
    result: &TurnResult,
    correlation_id: &str,
    trace_id: Option<String>,
) -> AgentEvent {
    let mut answer = AgentEvent::new(
        "response",
        EventSource::new(EventSourceKind::Agent, me.agent_name.as_str()),
    );
    answer.trace_id = trace_id;
    answer.input = result
        .response_message
        .as_ref()
        .map(|message| message.data.text());
    let mut metadata = JsonObject::new();
    metadata.insert("inReplyTo".into(), correlation_id.into());
    metadata.insert("turnId".into(), result.turn_id.clone().into());
    match (&result.finish_reason, &result.error) {
        (TurnFinishReason::Error, error) => {
            let (code, message) =
                error
                    .as_ref()
                    .map_or(("E_TURN_FAILED", "the turn failed"), |e| {
                        (
                            e.code.as_deref().unwrap_or("E_TURN_FAILED"),
                            e.message.as_str(),
                        )
                    });
            goondan_ipc::answer::mark_failed(&mut metadata, code, message);
        }
        (reason, _) => {
            metadata.insert("status".into(), "ok".into());
            metadata.insert(
                "finishReason".into(),
                serde_json::to_value(reason).unwrap_or(JsonValue::Null),
            );
        }
    }
    answer.metadata = Some(metadata);
    answer
}

/// Runs a whole AgentProcess over this process's stdin and stdout: builds
/// the agent, performs the start-up handshake (`runtime.ready` or
/// `runtime.start_error`), serves Turns, and returns the exit code (0 after
/// a drained shutdown or a vanished parent, 2 when the agent could not
/// start).
pub async fn run_agent_process(args: AgentProcessArgs, builtins_for: &BuiltinsFor) -> i32 {
    let me = RoutingKey::new(args.agent_name.clone(), args.instance_key.clone());
    let IpcChannel {
        sender,
        receiver,
        writer,
    } = IpcChannel::from_io(
        tokio::io::stdin(),
        tokio::io::stdout(),
        format!("orchestrator->{me}"),
    );
    let outbound = Outbound::new(me, sender.clone());
    let code = match assemble(&args, builtins_for, sender) {
        Ok(assembled) => {
            let exit = serve(
                assembled.agent,
                assembled.agents,
                outbound,
                receiver,
                Some(assembled.metadata),
            )
            .await;
            tracing::info!(?exit, "agent process stopping");
            0
        }
        Err(error) => {
            tracing::error!(code = %error.code, "agent failed to start: {}", error.message);
            outbound
                .notice(Notice::StartError {
                    code: error.code,
                    message: error.message,
                    suggestion: error.suggestion,
                })
                .await;
            drop(outbound);
            2
        }
    };
    flush(writer).await;
    code
}
