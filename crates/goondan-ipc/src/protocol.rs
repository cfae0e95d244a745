//! The typed protocol between the orchestrator and its children.
//!
//! The wire carries exactly the three [`IpcMessage`] types the spec fixes
//! (`event`, `shutdown`, `shutdown_ack`), and an `event`'s payload is an
//! [`AgentEvent`]. Everything the runtime itself says (the start-up
//! handshake, turn outcomes, streamed text, queries to the orchestrator and
//! their answers, refusals) travels as an `event` whose AgentEvent type
//! starts with `runtime.` and whose `metadata` holds the typed body; no user
//! event may use that prefix. Answers to requests are AgentEvents with
//! `metadata.inReplyTo` ([`Answer`]).
//!
//! This module is the only place that knows those shapes: [`decode`] turns
//! a wire message into an [`Inbound`], and the `to_message` constructors
//! build every message a process sends. A message that does not decode is a
//! [`ProtocolError`] with a code; callers log it, count it in
//! [`ProtocolStats`] and answer it ([`Rejected`]) instead of dropping it.

use crate::RoutingKey;
use goondan_types::agents::SpawnedAgentInfo;
use goondan_types::{
    AgentEvent, ConnectorEvent, EventSource, EventSourceKind, IpcMessage, IpcMessageType,
    JsonObject, JsonValue, ShutdownReason,
};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// The protocol version a child announces in its handshake. The
/// orchestrator refuses a child that speaks another one, and a child
/// refuses a [`SpawnHandshake`](crate::SpawnHandshake) of another one.
///
/// Version 2: the orchestrator writes the spawn handshake (with the
/// child's secrets) before any message. Version 3: the orchestrator pings
/// every ready child ([`RuntimeMessage::Ping`]) and kills one that stops
/// answering ([`RuntimeMessage::Pong`]). Version 4: an agent may ask for
/// a swarm restart ([`Query::Restart`]). Version 5: the orchestrator may
/// cancel a Turn ([`RuntimeMessage::Cancel`]). Version 6: the orchestrator
/// hands an agent a person's decision on one of its open approvals
/// ([`RuntimeMessage::Decide`], answered with [`RuntimeMessage::Decided`]).
/// Version 7: an agent tells of the approvals it asks and records
/// ([`RuntimeMessage::ApprovalAsked`], [`RuntimeMessage::ApprovalDecided`]),
/// which the orchestrator passes to the chat connectors, and a chat
/// connector hands the orchestrator a decision pressed in its chat
/// ([`Query::Decide`], answered with [`QueryAnswer::Decided`]).
pub const PROTOCOL_VERSION: u32 = 7;

/// The event-type prefix reserved for [`RuntimeMessage`]s.
pub const RUNTIME_PREFIX: &str = "runtime.";

/// The metadata key that makes an event an answer.
const IN_REPLY_TO: &str = "inReplyTo";

/// The body of a `shutdown` message (`runtime.md` §4.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShutdownPayload {
    /// How long the orchestrator waits for `shutdown_ack` before SIGKILL.
    pub grace_period_ms: u64,
    /// Why.
    pub reason: ShutdownReason,
}

/// What the runtime says across the process boundary, as opposed to the
/// users' events it routes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "metadata")]
pub enum RuntimeMessage {
    /// Child → orchestrator: initialized and ready for events (the
    /// handshake).
    #[serde(rename = "runtime.ready")]
    Ready(Ready),
    /// Child → orchestrator: could not start; the process exits after it.
    #[serde(rename = "runtime.start_error")]
    StartError(StartError),
    /// Child → orchestrator: a Turn ended and its events are folded.
    #[serde(rename = "runtime.turn_finished")]
    TurnFinished(TurnFinished),
    /// Child → orchestrator: streamed model text of the Turn answering one
    /// of the orchestrator's own requests.
    #[serde(rename = "runtime.text_delta")]
    TextDelta(TextDelta),
    /// Child → orchestrator: a question only the orchestrator can answer.
    #[serde(rename = "runtime.query")]
    Query(QueryRequest),
    /// Orchestrator → child: the answer to a [`RuntimeMessage::Query`].
    #[serde(rename = "runtime.query_answer")]
    QueryAnswer(QueryAnswerMessage),
    /// Either way: a message the receiver could not accept, and why.
    #[serde(rename = "runtime.rejected")]
    Rejected(Rejected),
    /// Orchestrator → child: a fire-and-forget event the child sent was
    /// handed to its target's process.
    #[serde(rename = "runtime.accepted")]
    Accepted(Accepted),
    /// Orchestrator → child: are you alive? Answered with a
    /// [`RuntimeMessage::Pong`] of the same sequence number by the child's
    /// IPC reader, even while a Turn runs.
    #[serde(rename = "runtime.ping")]
    Ping(Ping),
    /// Child → orchestrator: the answer to a [`RuntimeMessage::Ping`].
    #[serde(rename = "runtime.pong")]
    Pong(Ping),
    /// Orchestrator → agent: stop the Turn of this input event (or drop
    /// the event if its Turn has not started). The Turn ends as failed
    /// with `E_TURN_CANCELLED`, answering its requester with that; what
    /// it stored so far stays, as after a crash.
    #[serde(rename = "runtime.cancel")]
    Cancel(Cancel),
    /// Orchestrator → agent: a person decided one of the instance's open
    /// approvals. The agent records it (durably) before it answers with
    /// [`RuntimeMessage::Decided`], and the Turn waiting on it goes on.
    #[serde(rename = "runtime.decide")]
    Decide(Decide),
    /// Agent → orchestrator: the answer to a [`RuntimeMessage::Decide`].
    #[serde(rename = "runtime.decided")]
    Decided(Decided),
    /// Agent → orchestrator: a Turn asked a person and the request is
    /// recorded (sent once, when it is first asked). Orchestrator → a
    /// ConnectorProcess whose Connection delivers approvals: post it
    /// (also sent, for every request still undecided, when the connector
    /// becomes ready; a connector posts each request once).
    #[serde(rename = "runtime.approval_asked")]
    ApprovalAsked(ApprovalAsked),
    /// Agent → orchestrator: an approval was decided and the decision is
    /// recorded (a person's, or the deadline's). Orchestrator → a chat
    /// ConnectorProcess: the request's buttons are done with.
    #[serde(rename = "runtime.approval_decided")]
    ApprovalDecided(ApprovalDecided),
}

/// An approval request as it was recorded, for whoever shows it to people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalAsked {
    /// The request; its `agent` and `instanceKey` must be the sender's.
    pub request: Box<goondan_types::ApprovalRequest>,
}

/// A recorded decision, for whoever shows the request to people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalDecided {
    /// The decision (its `id` names the request).
    pub decision: goondan_types::ApprovalDecision,
}

/// A person's decision, for the agent holding the approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decide {
    /// Echoed by the [`Decided`] answer.
    pub correlation_id: String,
    /// The decision.
    pub decision: goondan_types::ApprovalDecision,
}

/// Whether a [`Decide`] was recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decided {
    /// The [`Decide`]'s correlation id.
    pub in_reply_to: String,
    /// Why it was not recorded (no open approval has its id, it was
    /// decided already, the store failed); `None` when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

/// Which Turn [`RuntimeMessage::Cancel`] stops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cancel {
    /// The id of the input event the Turn consumes.
    pub event_id: String,
    /// Who asked, when a person did (`cli` for `gdn instance cancel`):
    /// recorded with the cancelled Turn. Absent when the Turn's own
    /// requester gave up (a caller whose wait was dropped, an MCP client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<String>,
}

/// A liveness probe and its answer: the same sequence number both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ping {
    /// Increases with every ping the orchestrator sends to one process.
    pub seq: u64,
}

impl Ping {
    /// The answer to this ping.
    pub fn pong(self) -> RuntimeMessage {
        RuntimeMessage::Pong(self)
    }
}

/// A fire-and-forget event reached its target's process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    /// The event's id.
    pub event_id: String,
}

/// The handshake: the child's protocol version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ready {
    /// [`PROTOCOL_VERSION`] of the child.
    pub protocol_version: u32,
}

/// Why a child could not start: the shared `{code, message, suggestion}`
/// body.
pub type StartError = goondan_types::ErrorBody;

/// The exit status of a child that sent a [`RuntimeMessage::StartError`]
/// because its configuration says no (a Connection's missing secret, an
/// entry this build cannot run, a bundle that does not load): starting it
/// again cannot help until the bundle changes, so the orchestrator keeps
/// it down until a reload or a restart asks for it, instead of respawning
/// it with the crash backoff. A start failure that may pass by itself (a
/// port still taken) exits with [`EXIT_START_FAILED`].
pub const EXIT_REFUSED_BY_CONFIG: i32 = 3;

/// The exit status of a child that could not start for a reason that may
/// pass (a port still taken, a handshake that failed): it is respawned
/// with the crash backoff.
pub const EXIT_START_FAILED: i32 = 2;

/// The outcome of one Turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnFinished {
    /// True when the Turn completed without error; resets the crash
    /// counter.
    pub ok: bool,
    /// The id of the input event the Turn consumed. Once this arrives the
    /// orchestrator stops keeping the event for redelivery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
}

/// A piece of streamed model text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextDelta {
    /// The correlation id of the request being answered.
    pub delta_for: String,
    /// The text, in order.
    pub delta: String,
}

/// A question for the orchestrator, answered by a
/// [`QueryAnswerMessage`] with the same correlation id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryRequest {
    /// Matches the answer to the question.
    pub correlation_id: String,
    /// The question.
    pub query: Query,
}

/// What a child may ask the orchestrator (the agents API's `spawn`,
/// `list` and `restart_swarm`, a connector's ingress).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Query {
    /// Make sure an instance runs; `target` is `agent` or `agent:key`.
    #[serde(rename_all = "camelCase")]
    Spawn {
        /// The instance.
        target: String,
        /// Its working directory, recorded for `list`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
    },
    /// The instances spawned through the agents API.
    List,
    /// A ConnectorProcess's event, to route by its Connection's ingress
    /// rules and queue for the agent they pick. Only a ConnectorProcess
    /// may ask.
    Ingest {
        /// The event.
        event: ConnectorEvent,
    },
    /// Re-read the bundle and restart the whole swarm once the asking
    /// agent's Turn is over (`self-restart__request`). Only an agent may
    /// ask.
    Restart {
        /// Why, for the reload's swarm event.
        reason: String,
    },
    /// Hand a person's decision to the instance `target`
    /// (`agentName:instanceKey`) holding the approval, as the control
    /// socket's decide does; answered once the instance recorded it. Only
    /// a ConnectorProcess whose Connection delivers approvals may ask (a
    /// button pressed in its chat).
    Decide {
        /// The instance holding the approval.
        target: String,
        /// The decision.
        decision: Box<goondan_types::ApprovalDecision>,
    },
}

/// The orchestrator's answer to a [`QueryRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryAnswerMessage {
    /// The question's correlation id.
    pub in_reply_to: String,
    /// The answer.
    pub answer: QueryAnswer,
}

/// The typed answer to each [`Query`], or why it failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum QueryAnswer {
    /// Answers [`Query::Spawn`]: whether a new process was started.
    Spawned {
        /// False when the instance was already running.
        spawned: bool,
    },
    /// Answers [`Query::List`].
    Agents {
        /// The instances spawned through the agents API.
        agents: Vec<SpawnedAgentInfo>,
    },
    /// Answers [`Query::Ingest`]: the event is queued for `target`, or
    /// no rule routes it (`target` absent) and it was dropped, which is
    /// not an error for the connector.
    #[serde(rename_all = "camelCase")]
    Ingested {
        /// The AgentEvent's id, when queued.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event_id: Option<String>,
        /// The routing key it was queued for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
    },
    /// Answers [`Query::Restart`]: the re-read bundle is valid and the
    /// swarm restarts once the asking agent's Turn is over.
    RestartScheduled,
    /// Answers [`Query::Decide`]: the instance recorded the decision.
    Decided,
    /// The query failed.
    Failed(Failure),
}

/// A coded failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// A stable code.
    pub code: String,
    /// What happened.
    pub message: String,
    /// How to fix it, when the failing side knows (a Model's error names
    /// the setting to check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
}

impl Failure {
    /// Whether the failure carries `code`.
    pub fn is(&self, code: WireCode) -> bool {
        code.as_str() == self.code
    }
}

/// The codes a receiver of a [`Failure`] or a [`Rejected`] acts on; every
/// other code is only shown. The wire keeps the code as its string, so
/// both sides name it through this type instead of repeating the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireCode {
    /// `E_QUEUE_FULL`: the event's instance has as many events waiting as
    /// its bound allows; the sender may retry later (an HTTP connector
    /// answers 429).
    QueueFull,
    /// `E_FORWARD_FAILED`: the event is for an instance another host
    /// serves, and that instance's inbox did not store it; nothing holds
    /// it, so the sender may send it again (an HTTP connector answers 503,
    /// a source tries again).
    ForwardFailed,
    /// `E_IPC_MALFORMED`: [`ProtocolError::Malformed`].
    Malformed,
    /// `E_IPC_UNKNOWN_MESSAGE`: [`ProtocolError::Unknown`].
    UnknownMessage,
    /// `E_IPC_PROTOCOL_VERSION`: [`ProtocolError::Version`].
    ProtocolVersion,
}

impl WireCode {
    /// The code as the wire spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            WireCode::QueueFull => "E_QUEUE_FULL",
            WireCode::ForwardFailed => "E_FORWARD_FAILED",
            WireCode::Malformed => "E_IPC_MALFORMED",
            WireCode::UnknownMessage => "E_IPC_UNKNOWN_MESSAGE",
            WireCode::ProtocolVersion => "E_IPC_PROTOCOL_VERSION",
        }
    }
}

/// A message its receiver refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejected {
    /// The [`ProtocolError`] code.
    pub code: String,
    /// What was wrong.
    pub message: String,
    /// The refused event's id, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
}

impl Rejected {
    /// Whether the refusal carries `code`.
    pub fn is(&self, code: WireCode) -> bool {
        code.as_str() == self.code
    }
}

impl RuntimeMessage {
    /// The message as the AgentEvent that carries it, from `agent_name`
    /// (`orchestrator` for the orchestrator's own).
    pub fn to_event(&self, agent_name: &str) -> AgentEvent {
        // Serializing plain structs of strings, numbers and JSON values
        // cannot fail.
        let tagged = serde_json::to_value(self).unwrap_or(JsonValue::Null);
        let event_type = tagged["type"].as_str().unwrap_or_default().to_string();
        let mut event = AgentEvent::new(
            event_type,
            EventSource::new(EventSourceKind::Agent, agent_name),
        );
        if let JsonValue::Object(metadata) = &tagged["metadata"] {
            event.metadata = Some(metadata.clone());
        }
        event
    }

    /// The wire message carrying this from `from` to `to`.
    pub fn to_message(&self, from: &str, to: &str) -> IpcMessage {
        let agent_name = RoutingKey::split(from).0.unwrap_or(from);
        event_message(from, to, &self.to_event(agent_name))
    }

    /// Reads a runtime message out of `event`; `Ok(None)` for a user
    /// event.
    pub fn from_event(event: &AgentEvent) -> Result<Option<RuntimeMessage>, ProtocolError> {
        if !event.event_type.starts_with(RUNTIME_PREFIX) {
            return Ok(None);
        }
        let metadata = event.metadata.clone().unwrap_or_default();
        let tagged = serde_json::json!({ "type": event.event_type, "metadata": metadata });
        serde_json::from_value(tagged)
            .map(Some)
            .map_err(|error| ProtocolError::classify(&event.event_type, &event.id, error))
    }
}

/// The answer to a request that carried `replyTo`: the Turn's text, or
/// why there is none.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The request's correlation id.
    pub in_reply_to: String,
    /// What came of it.
    pub outcome: AnswerOutcome,
}

/// What came of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerOutcome {
    /// The Turn completed.
    Ok {
        /// The response text.
        text: Option<String>,
        /// The Turn's finish reason, as its wire string.
        finish_reason: Option<String>,
        /// The Turn that answered.
        turn_id: Option<String>,
        /// The model tokens the Turn spent, from its instance's ledger
        /// (`tokenUsage` in the answer's metadata; absent from answers
        /// not made by a Turn that ran now).
        usage: Option<goondan_types::TokenUsage>,
    },
    /// The request failed.
    Failed(Failure),
}

impl Answer {
    /// A failed answer.
    pub fn failed(in_reply_to: impl Into<String>, code: &str, message: &str) -> Answer {
        Answer {
            in_reply_to: in_reply_to.into(),
            outcome: AnswerOutcome::Failed(Failure {
                code: code.to_string(),
                message: message.to_string(),
                suggestion: None,
            }),
        }
    }

    /// The AgentEvent carrying the answer, from `agent_name`, on `trace_id`.
    pub fn to_event(&self, agent_name: &str, trace_id: Option<String>) -> AgentEvent {
        let mut event = AgentEvent::new(
            "response",
            EventSource::new(EventSourceKind::Agent, agent_name),
        );
        event.trace_id = trace_id;
        let mut metadata = JsonObject::new();
        metadata.insert(IN_REPLY_TO.into(), self.in_reply_to.clone().into());
        match &self.outcome {
            AnswerOutcome::Ok {
                text,
                finish_reason,
                turn_id,
                usage,
            } => {
                event.input = text.clone();
                metadata.insert("status".into(), "ok".into());
                if let Some(turn_id) = turn_id {
                    metadata.insert("turnId".into(), turn_id.clone().into());
                }
                if let Some(finish_reason) = finish_reason {
                    metadata.insert("finishReason".into(), finish_reason.clone().into());
                }
                if let Some(usage) = usage {
                    metadata.insert(
                        "tokenUsage".into(),
                        serde_json::to_value(usage).unwrap_or(JsonValue::Null),
                    );
                }
            }
            AnswerOutcome::Failed(failure) => {
                metadata.insert("status".into(), "error".into());
                metadata.insert("errorCode".into(), failure.code.clone().into());
                metadata.insert("errorMessage".into(), failure.message.clone().into());
                if let Some(suggestion) = &failure.suggestion {
                    metadata.insert("errorSuggestion".into(), suggestion.clone().into());
                }
            }
        }
        event.metadata = Some(metadata);
        event
    }

    /// Reads an answer out of `event`; `None` when it answers nothing.
    pub fn from_event(event: &AgentEvent) -> Option<Answer> {
        let in_reply_to = in_reply_to(event)?.to_string();
        let text = |key: &str| {
            event
                .metadata_value(key)
                .and_then(JsonValue::as_str)
                .map(str::to_string)
        };
        let outcome = if text("status").as_deref() == Some("error") {
            AnswerOutcome::Failed(Failure {
                code: text("errorCode").unwrap_or_else(|| "E_AGENT_FAILED".into()),
                message: text("errorMessage").unwrap_or_default(),
                suggestion: text("errorSuggestion"),
            })
        } else {
            AnswerOutcome::Ok {
                text: event.input.clone(),
                finish_reason: text("finishReason"),
                turn_id: text("turnId"),
                usage: event
                    .metadata_value("tokenUsage")
                    .and_then(|usage| serde_json::from_value(usage.clone()).ok()),
            }
        };
        Some(Answer {
            in_reply_to,
            outcome,
        })
    }

    /// `(code, message)` when this answer reports a failure.
    pub fn failure(&self) -> Option<&Failure> {
        match &self.outcome {
            AnswerOutcome::Failed(failure) => Some(failure),
            AnswerOutcome::Ok { .. } => None,
        }
    }
}

/// The correlation id `event` answers, if it is an answer.
pub fn in_reply_to(event: &AgentEvent) -> Option<&str> {
    event
        .metadata_value(IN_REPLY_TO)
        .and_then(JsonValue::as_str)
}

/// The correlation id of the request carried by `event`.
pub fn correlation_id_for(event: &AgentEvent) -> String {
    correlation_id_for_id(&event.id)
}

/// The correlation id of the request carried by the event with `event_id`,
/// so a refusal that names only the event still finds its waiter.
pub fn correlation_id_for_id(event_id: &str) -> String {
    format!("corr_{event_id}")
}

/// A fresh correlation id for a [`QueryRequest`].
pub fn new_correlation_id() -> String {
    format!("corr_q{}", goondan_types::trace::random_hex(12))
}

/// What a wire message means to its receiver.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    /// A user event to route or to run a Turn for (it may carry `replyTo`).
    Event(Box<AgentEvent>),
    /// The answer to a request, with the event that carried it.
    Answer(Answer, Box<AgentEvent>),
    /// The runtime speaking.
    Runtime(RuntimeMessage),
    /// Drain and exit.
    Shutdown(ShutdownPayload),
    /// A drained shutdown was confirmed.
    ShutdownAck,
}

/// Decodes one wire message.
pub fn decode(message: &IpcMessage) -> Result<Inbound, ProtocolError> {
    match message.message_type {
        IpcMessageType::Shutdown => serde_json::from_value(message.payload.clone())
            .map(Inbound::Shutdown)
            .map_err(|error| ProtocolError::Malformed {
                what: "shutdown payload".into(),
                reason: error.to_string(),
                event_id: None,
            }),
        IpcMessageType::ShutdownAck => Ok(Inbound::ShutdownAck),
        IpcMessageType::Event => {
            let event: AgentEvent =
                serde_json::from_value(message.payload.clone()).map_err(|error| {
                    ProtocolError::Malformed {
                        what: "event payload".into(),
                        reason: error.to_string(),
                        event_id: message.payload["id"].as_str().map(str::to_string),
                    }
                })?;
            if let Some(runtime) = RuntimeMessage::from_event(&event)? {
                return Ok(Inbound::Runtime(runtime));
            }
            match Answer::from_event(&event) {
                Some(answer) => Ok(Inbound::Answer(answer, Box::new(event))),
                None => Ok(Inbound::Event(Box::new(event))),
            }
        }
    }
}

/// An `event` message carrying `event` from `from` to `to`.
pub fn event_message(from: &str, to: &str, event: &AgentEvent) -> IpcMessage {
    IpcMessage {
        message_type: IpcMessageType::Event,
        from: from.to_string(),
        to: to.to_string(),
        payload: serde_json::to_value(event).unwrap_or(JsonValue::Null),
    }
}

/// A `shutdown` message to `to`.
pub fn shutdown_message(from: &str, to: &RoutingKey, payload: &ShutdownPayload) -> IpcMessage {
    IpcMessage {
        message_type: IpcMessageType::Shutdown,
        from: from.to_string(),
        to: to.to_string(),
        payload: serde_json::to_value(payload).unwrap_or(JsonValue::Null),
    }
}

/// A `shutdown_ack` message from `from`.
pub fn shutdown_ack_message(from: &RoutingKey, to: &str) -> IpcMessage {
    IpcMessage {
        message_type: IpcMessageType::ShutdownAck,
        from: from.to_string(),
        to: to.to_string(),
        payload: JsonValue::Null,
    }
}

/// A message its receiver could not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// The message has the wrong shape.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// Which part.
        what: String,
        /// The decoder's reason.
        reason: String,
        /// The event's id, when one could be read.
        event_id: Option<String>,
    },
    /// A `runtime.` type this side does not know (a newer peer).
    #[error("unknown runtime message `{event_type}`")]
    Unknown {
        /// The type.
        event_type: String,
        /// The event's id.
        event_id: String,
    },
    /// The child speaks another protocol version.
    #[error("the child speaks protocol version {found}; this orchestrator speaks {expected}")]
    Version {
        /// Ours.
        expected: u32,
        /// Theirs.
        found: u32,
    },
}

impl ProtocolError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.wire_code().as_str()
    }

    /// The stable code, typed: what a [`Rejected`] built from this error
    /// is matched against.
    pub fn wire_code(&self) -> WireCode {
        match self {
            ProtocolError::Malformed { .. } => WireCode::Malformed,
            ProtocolError::Unknown { .. } => WireCode::UnknownMessage,
            ProtocolError::Version { .. } => WireCode::ProtocolVersion,
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> &'static str {
        match self {
            ProtocolError::Version { .. } | ProtocolError::Unknown { .. } => {
                "run the orchestrator and its children from the same `gdn` binary"
            }
            ProtocolError::Malformed { .. } => {
                "this is a bug in the sender; the message was refused and the sender told"
            }
        }
    }

    /// The id of the refused event, when known.
    pub fn event_id(&self) -> Option<&str> {
        match self {
            ProtocolError::Malformed { event_id, .. } => event_id.as_deref(),
            ProtocolError::Unknown { event_id, .. } => Some(event_id),
            ProtocolError::Version { .. } => None,
        }
    }

    /// The refusal to send back.
    pub fn rejection(&self) -> RuntimeMessage {
        RuntimeMessage::Rejected(Rejected {
            code: self.code().to_string(),
            message: self.to_string(),
            event_id: self.event_id().map(str::to_string),
        })
    }

    fn classify(event_type: &str, event_id: &str, error: serde_json::Error) -> ProtocolError {
        if error.to_string().starts_with("unknown variant") {
            ProtocolError::Unknown {
                event_type: event_type.to_string(),
                event_id: event_id.to_string(),
            }
        } else {
            ProtocolError::Malformed {
                what: format!("`{event_type}` message"),
                reason: error.to_string(),
                event_id: Some(event_id.to_string()),
            }
        }
    }
}

/// Counts what a process refused, for logs and `gdn instance list`.
#[derive(Debug, Default)]
pub struct ProtocolStats {
    malformed: AtomicU64,
    unknown: AtomicU64,
}

impl ProtocolStats {
    /// Counts one refusal.
    pub fn count(&self, error: &ProtocolError) {
        let counter = match error {
            ProtocolError::Unknown { .. } => &self.unknown,
            _ => &self.malformed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Messages refused as malformed so far (lines that were not JSON
    /// included).
    pub fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }

    /// Messages refused as unknown so far.
    pub fn unknown(&self) -> u64 {
        self.unknown.load(Ordering::Relaxed)
    }

    /// Counts a line that was not a message at all.
    pub fn count_bad_line(&self) {
        self.malformed.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(message: RuntimeMessage) {
        let wire = message.to_message("alpha:main", crate::ORCHESTRATOR);
        let line = crate::framing::encode(&wire);
        let back = crate::framing::decode(&line[..line.len() - 1]).unwrap();
        assert_eq!(decode(&back).unwrap(), Inbound::Runtime(message));
    }

    #[test]
    fn typed_codes_read_the_strings_the_wire_carries() {
        let failure: Failure =
            serde_json::from_value(serde_json::json!({"code": "E_QUEUE_FULL", "message": "full"}))
                .unwrap();
        assert!(failure.is(WireCode::QueueFull));
        assert!(!failure.is(WireCode::Malformed));
        let malformed = ProtocolError::Malformed {
            what: "event payload".into(),
            reason: "no id".into(),
            event_id: None,
        };
        let RuntimeMessage::Rejected(rejected) = malformed.rejection() else {
            panic!("a protocol error is refused with runtime.rejected");
        };
        assert!(rejected.is(WireCode::Malformed));
        assert_eq!(
            serde_json::to_value(&rejected).unwrap()["code"],
            "E_IPC_MALFORMED"
        );
    }

    #[test]
    fn every_runtime_message_round_trips_through_the_wire() {
        round_trip(RuntimeMessage::Ready(Ready {
            protocol_version: PROTOCOL_VERSION,
        }));
        round_trip(RuntimeMessage::StartError(StartError {
            code: "E_EXTENSION_INIT".into(),
            message: "boom".into(),
            suggestion: Some("fix it".into()),
        }));
        round_trip(RuntimeMessage::TurnFinished(TurnFinished {
            ok: true,
            event_id: Some("evt_1".into()),
        }));
        round_trip(RuntimeMessage::TextDelta(TextDelta {
            delta_for: "corr_1".into(),
            delta: "Hel".into(),
        }));
        round_trip(RuntimeMessage::Query(QueryRequest {
            correlation_id: "corr_2".into(),
            query: Query::Spawn {
                target: "beta:x".into(),
                cwd: None,
            },
        }));
        round_trip(RuntimeMessage::Query(QueryRequest {
            correlation_id: "corr_3".into(),
            query: Query::List,
        }));
        round_trip(RuntimeMessage::QueryAnswer(QueryAnswerMessage {
            in_reply_to: "corr_2".into(),
            answer: QueryAnswer::Spawned { spawned: true },
        }));
        round_trip(RuntimeMessage::Query(QueryRequest {
            correlation_id: "corr_4".into(),
            query: Query::Restart {
                reason: "edited my prompt".into(),
            },
        }));
        round_trip(RuntimeMessage::QueryAnswer(QueryAnswerMessage {
            in_reply_to: "corr_4".into(),
            answer: QueryAnswer::RestartScheduled,
        }));
        round_trip(RuntimeMessage::QueryAnswer(QueryAnswerMessage {
            in_reply_to: "corr_3".into(),
            answer: QueryAnswer::Failed(Failure {
                code: "E_AGENT_NOT_FOUND".into(),
                message: "no".into(),
                suggestion: None,
            }),
        }));
        round_trip(RuntimeMessage::Accepted(Accepted {
            event_id: "evt_3".into(),
        }));
        let decision = goondan_types::ApprovalDecision {
            id: "apv_1".into(),
            verdict: goondan_types::Verdict::Approve,
            arguments: None,
            reason: None,
            by: "telegram:42".into(),
            decided_at: "2026-11-27T00:00:01.000Z".into(),
        };
        round_trip(RuntimeMessage::ApprovalAsked(ApprovalAsked {
            request: Box::new(goondan_types::ApprovalRequest {
                id: "apv_1".into(),
                key: "call_1".into(),
                agent: "alpha".into(),
                instance_key: "main".into(),
                tool: Some("bash__exec".into()),
                arguments: serde_json::json!({"command": "ls"}),
                question: None,
                turn_id: "turn_1".into(),
                event_id: "evt_1".into(),
                requested_at: "2026-11-27T00:00:00.000Z".into(),
                deadline: None,
                on_timeout: goondan_types::Verdict::Deny,
                deciders: vec!["operator".into()],
            }),
        }));
        round_trip(RuntimeMessage::ApprovalDecided(ApprovalDecided {
            decision: decision.clone(),
        }));
        round_trip(RuntimeMessage::Query(QueryRequest {
            correlation_id: "corr_5".into(),
            query: Query::Decide {
                target: "alpha:main".into(),
                decision: Box::new(decision),
            },
        }));
        round_trip(RuntimeMessage::QueryAnswer(QueryAnswerMessage {
            in_reply_to: "corr_5".into(),
            answer: QueryAnswer::Decided,
        }));
        round_trip(RuntimeMessage::Ping(Ping { seq: 7 }));
        round_trip(Ping { seq: 7 }.pong());
        round_trip(RuntimeMessage::Rejected(Rejected {
            code: "E_IPC_MALFORMED".into(),
            message: "bad".into(),
            event_id: None,
        }));
    }

    #[test]
    fn answers_and_user_events_decode_to_their_own_variants() {
        let ok = Answer {
            in_reply_to: "corr_9".into(),
            outcome: AnswerOutcome::Ok {
                text: Some("hi".into()),
                finish_reason: Some("text_response".into()),
                turn_id: Some("t1".into()),
                usage: Some(goondan_types::TokenUsage {
                    prompt_tokens: 3,
                    completion_tokens: 4,
                    total_tokens: 7,
                }),
            },
        };
        let event = ok.to_event("beta", None);
        match decode(&event_message("beta:main", "alpha:main", &event)).unwrap() {
            Inbound::Answer(answer, _) => assert_eq!(answer, ok),
            other => panic!("not an answer: {other:?}"),
        }
        let failed = Answer::failed("corr_9", "E_X", "broke");
        assert_eq!(
            Answer::from_event(&failed.to_event("beta", None))
                .unwrap()
                .failure()
                .map(|failure| failure.code.as_str()),
            Some("E_X")
        );
        let user = AgentEvent::new(
            "user_message",
            EventSource::new(EventSourceKind::Connector, "cli"),
        );
        assert!(matches!(
            decode(&event_message("orchestrator", "alpha:main", &user)).unwrap(),
            Inbound::Event(_)
        ));
    }

    #[test]
    fn unknown_and_malformed_messages_are_coded_errors_not_panics() {
        let mut unknown = AgentEvent::new(
            "runtime.teleport",
            EventSource::new(EventSourceKind::Agent, "alpha"),
        );
        unknown.id = "evt_u".into();
        let error = decode(&event_message("alpha:main", "orchestrator", &unknown)).unwrap_err();
        assert_eq!(error.code(), "E_IPC_UNKNOWN_MESSAGE");
        assert_eq!(error.event_id(), Some("evt_u"));

        let mut malformed = AgentEvent::new(
            "runtime.turn_finished",
            EventSource::new(EventSourceKind::Agent, "alpha"),
        );
        malformed.metadata = Some(serde_json::from_str(r#"{"ok":"yes"}"#).unwrap());
        let error = decode(&event_message("alpha:main", "orchestrator", &malformed)).unwrap_err();
        assert_eq!(error.code(), "E_IPC_MALFORMED");

        let not_an_event = IpcMessage {
            message_type: IpcMessageType::Event,
            from: "alpha:main".into(),
            to: "orchestrator".into(),
            payload: serde_json::json!({"id": "evt_7", "nonsense": true}),
        };
        let error = decode(&not_an_event).unwrap_err();
        assert_eq!(error.event_id(), Some("evt_7"));
        let stats = ProtocolStats::default();
        stats.count(&error);
        assert_eq!(stats.malformed(), 1);
        assert!(matches!(error.rejection(), RuntimeMessage::Rejected(_)));
    }
}
