//! The control socket: a Unix socket under the state root's
//! `runtime/sockets/` folder through which `gdn restart`, `gdn instance ...`,
//! the Studio's actions and a second `gdn run` (attach) talk to a running
//! orchestrator.
//!
//! Protocol: one JSON request line ([`ControlRequest`], at most
//! [`MAX_REQUEST_BYTES`]), one JSON response line ([`ControlResponse`],
//! tagged by `result`), per connection. Every line gets an answer, a refusal
//! a coded [`ControlResponse::Failed`].
//!
//! The socket is the orchestrator's edge, so it is hardened against its
//! own users: the folder is 0700 and the socket 0600; a connection has
//! [`REQUEST_LINE_TIMEOUT`] to send its line; at most
//! [`MAX_WAITING_CONNECTIONS`] wait for theirs (one more evicts the one that
//! waited longest, so idle connections can never lock out a real request)
//! and at most [`MAX_ACTIVE_REQUESTS`] are served at once (one more is
//! refused with `E_CONTROL_BUSY`); a failing `accept` (EMFILE) is logged and
//! retried, never fatal. What it does not own: who may start an
//! orchestrator (the caller holds the workspace's lock before binding),
//! and how a history is cut: a fork or a rewind asked here ([`rewrite`])
//! holds the instances and hands the rewriting to `goondan_store`.

mod operator;
mod rewrite;

use crate::ingress::Ingress;
use crate::orchestrator::{CancelledTurn, ConnectionStatus, InstanceStatus, RestartOutcome};
use crate::{OrchestratorError, OrchestratorHandle};
use goondan_store::{EditReport, ForkReport, InstanceStore, RewindReport};
use goondan_types::{AgentEvent, ConnectorEvent};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::future::Future;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedReadHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinSet;

/// A control request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum ControlRequest {
    /// Who is running.
    Status,
    /// Sends `event`, as if typed at `gdn run`, to `agent` (else where the
    /// cli Connection's rules route it) and waits for the answer. Its
    /// `instanceKey` picks the instance (the Swarm's instance key when
    /// absent, or when a rule fixes the key).
    #[serde(rename_all = "camelCase")]
    Request {
        /// The target agent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
        /// The input.
        event: ConnectorEvent,
        /// Cancel the Turn (`E_TURN_CANCELLED`) when the client closes the
        /// connection before its answer; otherwise the Turn finishes
        /// whether or not anyone still waits. `gdn run` attached to a
        /// running swarm asks for the cancel, so its Ctrl-C cancels the
        /// Turn. The client must not half-close its side.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cancel_on_disconnect: bool,
    },
    /// Graceful restart of the matching instances.
    Restart {
        /// Only this agent's instances.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
        /// Only this instance key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance_key: Option<String>,
        /// Clear message history first.
        #[serde(default)]
        fresh: bool,
        /// The swarm as the client re-read it from the bundle: it replaces
        /// the one the orchestrator runs (new Connections start, removed
        /// ones stop) and every Connection's process restarts too.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        swarm: Option<Box<crate::SwarmInfo>>,
    },
    /// Every live instance.
    List,
    /// Every Connection's ConnectorProcess.
    Connections,
    /// Stops the processes of an instance.
    Delete {
        /// `agent:instance` or an instance key.
        key: String,
    },
    /// Sends `event` to exactly the instance `key` (`agent:instanceKey`),
    /// no ingress rule consulted, recorded as coming from `source` (the
    /// event's `source.name`, as a Connection's name is for its events:
    /// `studio` for the Studio), and waits for the answer.
    Deliver {
        /// `agent:instanceKey` of the instance.
        key: String,
        /// The input.
        event: ConnectorEvent,
        /// Who sent it.
        source: String,
    },
    /// [`ControlRequest::Deliver`] answered as it goes, in several lines:
    /// [`ControlResponse::Accepted`] once the event is durable in the
    /// instance's inbox, a [`ControlResponse::Delta`] per piece of text
    /// the model streams, then the [`ControlResponse::Answer`] (or one
    /// [`ControlResponse::Failed`] line at any point). Closing the
    /// connection before the answer cancels the Turn. Served beside the
    /// other requests, up to [`MAX_STREAMING_TURNS`] at once, since each
    /// holds its connection for a whole Turn (`gdn serve`).
    #[serde(rename_all = "camelCase")]
    DeliverStreaming {
        /// `agent:instanceKey` of the instance.
        key: String,
        /// The input.
        event: ConnectorEvent,
        /// Who sent it.
        source: String,
        /// Model messages (AI SDK shape) the instance takes as its
        /// history before the input when it has none yet.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        prior_messages: Vec<serde_json::Value>,
    },
    /// Hands a person's decision to the instance holding the approval
    /// and answers once the instance recorded it.
    Decide {
        /// `agent:instance` of the instance that holds the approval.
        key: String,
        /// The decision.
        decision: goondan_types::ApprovalDecision,
    },
    /// Drains and stops the orchestrator.
    Shutdown,
    /// Cancels the running Turn of the instances `key` names, for an
    /// operator (`gdn instance cancel`), and waits (a few seconds at most)
    /// until those Turns are over.
    Cancel {
        /// `agent:instance` or an instance key (every agent's).
        key: String,
        /// Who asks, recorded with the cancelled Turn (`cli`).
        by: String,
    },
    /// Makes a new instance of the same agent whose history is that of
    /// `key` up to the end of Turn `at` (`gdn instance fork`, the
    /// Studio's Fork). Both instances are held while it is written: their
    /// processes stop and get no successor, and events for them wait.
    /// Refused with `E_TURN_RUNNING` while `key` runs a Turn, unless
    /// `cancel`.
    #[serde(rename_all = "camelCase")]
    Fork {
        /// `agent:instanceKey` of the original.
        key: String,
        /// The Turn: its 1-based position, or its id.
        at: String,
        /// The new instance key; one is made up when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        new_key: Option<String>,
        /// Who asks, recorded in the fork's `forkedFrom` (`cli`).
        by: String,
        /// Cancel a running Turn first, in `by`'s name.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cancel: bool,
    },
    /// Moves the instance `key` back to the end of Turn `to`, archiving
    /// what came after (`gdn instance rewind`, the Studio's Rewind), held
    /// like a [`ControlRequest::Fork`] while it is rewritten.
    Rewind {
        /// `agent:instanceKey` of the instance.
        key: String,
        /// The Turn: its 1-based position, or its id.
        to: String,
        /// Who asks, recorded in the archive's manifest (`cli`).
        by: String,
        /// Cancel a running Turn first, in `by`'s name.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cancel: bool,
    },
    /// Changes one message's text or one extension's state of the
    /// instance `key` (`gdn instance edit`, the Studio's Edit), held like
    /// a [`ControlRequest::Fork`] while it is written; its next Turn runs
    /// on what was edited.
    Edit {
        /// `agent:instanceKey` of the instance.
        key: String,
        /// What to change.
        change: EditChange,
        /// Who asks, recorded in the edit's record (`cli`).
        by: String,
        /// Cancel a running Turn first, in `by`'s name.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cancel: bool,
    },
}

/// What a [`ControlRequest::Edit`] changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum EditChange {
    /// The text of one message (see `goondan_store::edited_message`).
    #[serde(rename_all = "camelCase")]
    Message {
        /// The message's id.
        message_id: String,
        /// Its new text.
        text: String,
    },
    /// The state of one extension.
    #[serde(rename_all = "camelCase")]
    ExtensionState {
        /// The extension's name.
        extension: String,
        /// Its new state.
        state: goondan_types::JsonValue,
    },
}

impl ControlRequest {
    /// Parses one request line as the control socket reads it (without
    /// its newline): UTF-8 JSON naming an `op`. A line that is not one
    /// is refused with the `E_CONTROL_BAD_REQUEST` answer its client
    /// gets (boxed: a response is large beside a request).
    pub fn from_line(line: &[u8]) -> Result<ControlRequest, Box<ControlResponse>> {
        let text = std::str::from_utf8(line).map_err(|error| {
            Box::new(failure(
                "E_CONTROL_BAD_REQUEST",
                &format!("the request line is not UTF-8: {error}"),
            ))
        })?;
        serde_json::from_str(text)
            .map_err(|error| Box::new(failure("E_CONTROL_BAD_REQUEST", &error.to_string())))
    }
}

/// The answer to a [`ControlRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum ControlResponse {
    /// Answers [`ControlRequest::Status`].
    #[serde(rename_all = "camelCase")]
    Status {
        /// The swarm.
        swarm: String,
        /// Its instance key.
        instance_key: String,
        /// Its entry agent.
        entry_agent: String,
        /// The orchestrator's pid.
        pid: u32,
        /// The IPC protocol version it speaks.
        protocol_version: u32,
        /// Messages from children refused as malformed so far.
        #[serde(default)]
        refused_malformed: u64,
        /// Messages from children refused as unknown so far.
        #[serde(default)]
        refused_unknown: u64,
        /// Which bundle it serves (absent from servers that do not say).
        #[serde(default, flatten)]
        identity: ControlIdentity,
    },
    /// Answers [`ControlRequest::Request`] and [`ControlRequest::Deliver`].
    Answer {
        /// The agent's answer event.
        response: Box<AgentEvent>,
    },
    /// The first line answering [`ControlRequest::DeliverStreaming`]: the
    /// input is durable.
    #[serde(rename_all = "camelCase")]
    Accepted {
        /// The id of the event the input became.
        event_id: String,
    },
    /// Text the model streamed, answering
    /// [`ControlRequest::DeliverStreaming`].
    Delta {
        /// The piece of text.
        text: String,
    },
    /// Answers [`ControlRequest::Restart`] once every old process has
    /// exited and its replacement is ready, or the wait ran out.
    Restarted {
        /// The keys of the instances asked to restart.
        restarted: Vec<String>,
        /// Where each of them stands (absent from servers that do not say).
        #[serde(default)]
        outcomes: Vec<RestartOutcome>,
    },
    /// Answers [`ControlRequest::List`].
    Instances {
        /// Every known instance.
        instances: Vec<InstanceStatus>,
    },
    /// Answers [`ControlRequest::Connections`].
    Connections {
        /// One per Connection of the swarm.
        connections: Vec<ConnectionStatus>,
    },
    /// Answers [`ControlRequest::Delete`].
    Deleted {
        /// True when a process was running.
        stopped: bool,
    },
    /// Answers [`ControlRequest::Decide`]: the instance recorded it.
    Decided,
    /// Answers [`ControlRequest::Shutdown`]: the drain has begun.
    Stopping,
    /// Answers [`ControlRequest::Cancel`].
    Cancelled(crate::orchestrator::CancelOutcome),
    /// Answers [`ControlRequest::Fork`]: the fork was made.
    Forked {
        /// What was made.
        report: ForkReport,
        /// The Turns cancelled first (with `cancel`).
        #[serde(default)]
        cancelled: Vec<CancelledTurn>,
    },
    /// Answers [`ControlRequest::Rewind`]: the instance was rewound.
    Rewound {
        /// What was done.
        report: RewindReport,
        /// The Turns cancelled first (with `cancel`).
        #[serde(default)]
        cancelled: Vec<CancelledTurn>,
    },
    /// Answers [`ControlRequest::Edit`]: the instance was edited.
    Edited {
        /// What was done.
        report: EditReport,
        /// The Turns cancelled first (with `cancel`).
        #[serde(default)]
        cancelled: Vec<CancelledTurn>,
    },
    /// The request failed: its code, what happened and how to fix it.
    Failed(goondan_types::ErrorBody),
}

/// Which bundle and workspace an orchestrator serves, reported by
/// [`ControlResponse::Status`] so a client attaches only to its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlIdentity {
    /// The workspace id (the Swarm's instance key and the bundle scope).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<String>,
    /// The bundle folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_dir: Option<PathBuf>,
}

/// The largest control request accepted, in bytes.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// How long a connection may take to send its request line.
pub const REQUEST_LINE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections waiting for their request line; one more evicts the oldest.
pub const MAX_WAITING_CONNECTIONS: usize = 64;
/// Requests being served at once; one more is refused with
/// `E_CONTROL_BUSY`.
pub const MAX_ACTIVE_REQUESTS: usize = 256;
/// Streaming deliveries being served at once, beside
/// [`MAX_ACTIVE_REQUESTS`]; one more is refused with `E_CONTROL_BUSY`.
/// Each holds one descriptor in the orchestrator for a Turn.
pub const MAX_STREAMING_TURNS: usize = 4096;
/// How long a restart waits, past the grace period, for the new process
/// to become ready.
const RESTART_SETTLE: Duration = Duration::from_secs(5);
/// How long a cancel waits for the Turns it stopped to be over (also
/// when a cluster host serves a person's cancel for an instance it owns).
pub const CANCEL_SETTLE: Duration = Duration::from_secs(5);
/// How long an answer may take to reach a client that stopped reading.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause after a failed `accept` (EMFILE, ENFILE), so a listener out
/// of descriptors does not spin.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Serves control requests at `path` until the task is dropped, with no
/// identity, forking and rewinding in `instances`; see [`ControlServer`]
/// for the full form.
pub async fn serve(
    path: PathBuf,
    handle: OrchestratorHandle,
    instances: InstanceStore,
) -> Result<(), OrchestratorError> {
    ControlServer::bind(path, ControlIdentity::default(), instances)?
        .run(handle, std::future::pending())
        .await;
    Ok(())
}

/// A bound control socket, not yet serving.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
    listener: UnixListener,
    identity: ControlIdentity,
    instances: InstanceStore,
}

impl ControlServer {
    /// Creates the socket's folder (0700) and binds the socket (0600),
    /// replacing a stale socket file. `instances` is the store of the
    /// workspace the orchestrator serves, where forks and rewinds are
    /// written. The caller must hold the workspace's lock: only then is a
    /// file at `path` known to be a dead orchestrator's and not a live
    /// one's. Needs a Tokio runtime.
    pub fn bind(
        path: PathBuf,
        identity: ControlIdentity,
        instances: InstanceStore,
    ) -> Result<Self, OrchestratorError> {
        let control_error = |source| OrchestratorError::Control {
            path: path.display().to_string(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(control_error)?;
            // A folder made before this rule is narrowed too: not every
            // system honors a socket file's own mode.
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700))
                .map_err(control_error)?;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(control_error(error)),
        }
        let listener = UnixListener::bind(&path).map_err(control_error)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(control_error)?;
        Ok(ControlServer {
            path,
            listener,
            identity,
            instances,
        })
    }

    /// Serves until `stop` completes, then closes: removes the socket file,
    /// serves the connections already queued behind the listener and waits
    /// until every accepted connection has its answer. Never fails: a
    /// failing `accept` is logged and retried.
    pub async fn run(self, handle: OrchestratorHandle, stop: impl Future<Output = ()>) {
        let ControlServer {
            path,
            listener,
            identity,
            instances,
        } = self;
        let mut admission = Admission {
            waiting: Arc::new(Mutex::new(VecDeque::new())),
            active: Arc::new(Semaphore::new(MAX_ACTIVE_REQUESTS)),
            streaming: Arc::new(Semaphore::new(MAX_STREAMING_TURNS)),
            next_id: 0,
        };
        let mut connections = JoinSet::new();
        let serving = Serving {
            handle,
            identity: Arc::new(identity),
            instances,
        };
        tokio::pin!(stop);
        loop {
            while connections.try_join_next().is_some() {}
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut stop => break,
            };
            match accepted {
                Ok((stream, _)) => admission.admit(stream, &serving, &mut connections),
                Err(error) => {
                    tracing::warn!(socket = %path.display(), "control socket accept failed: {error}");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                }
            }
        }
        // Unlinked first, so no new client can reach the listener; then
        // whatever connected before is accepted and answered, so a client
        // whose connect succeeded never loses its request.
        let _ = std::fs::remove_file(&path);
        if let Ok(listener) = listener.into_std() {
            while let Ok((stream, _)) = listener.accept() {
                let stream = stream
                    .set_nonblocking(true)
                    .and_then(|()| UnixStream::from_std(stream));
                match stream {
                    Ok(stream) => admission.admit(stream, &serving, &mut connections),
                    Err(error) => tracing::warn!("control connection failed: {error}"),
                }
            }
        }
        while connections.join_next().await.is_some() {}
    }
}

/// What every connection task needs.
#[derive(Clone)]
struct Serving {
    handle: OrchestratorHandle,
    identity: Arc<ControlIdentity>,
    instances: InstanceStore,
}

/// Connections waiting for their request line, oldest first, each with
/// the sender that evicts it.
type WaitingList = Arc<Mutex<VecDeque<(u64, oneshot::Sender<()>)>>>;

/// The bounds on connections: who is waiting for a line, and how many
/// requests are being served.
struct Admission {
    waiting: WaitingList,
    active: Arc<Semaphore>,
    streaming: Arc<Semaphore>,
    next_id: u64,
}

impl Admission {
    fn admit(&mut self, stream: UnixStream, serving: &Serving, connections: &mut JoinSet<()>) {
        let id = self.next_id;
        self.next_id += 1;
        let (evict, evicted) = oneshot::channel();
        {
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            if waiting.len() >= MAX_WAITING_CONNECTIONS {
                if let Some((_, oldest)) = waiting.pop_front() {
                    let _ = oldest.send(());
                }
            }
            waiting.push_back((id, evict));
        }
        let connection = Connection {
            id,
            evicted,
            waiting: self.waiting.clone(),
            active: self.active.clone(),
            streaming: self.streaming.clone(),
        };
        let serving = serving.clone();
        connections.spawn(async move {
            if let Err(error) = answer(stream, serving, connection).await {
                tracing::warn!("control connection failed: {error}");
            }
        });
    }
}

/// One connection's place in the [`Admission`] bounds.
struct Connection {
    id: u64,
    evicted: oneshot::Receiver<()>,
    waiting: WaitingList,
    active: Arc<Semaphore>,
    streaming: Arc<Semaphore>,
}

impl Connection {
    fn stop_waiting(&self) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.retain(|(id, _)| *id != self.id);
    }
}

enum RequestLine {
    Eof,
    Line(Vec<u8>),
    TooLong,
}

/// Reads one line, never more than [`MAX_REQUEST_BYTES`] of it: a longer
/// one is refused as soon as the bound is passed, without reading the rest.
async fn read_request_line(reader: &mut BufReader<OwnedReadHalf>) -> std::io::Result<RequestLine> {
    let mut line = Vec::new();
    let limit = MAX_REQUEST_BYTES as u64 + 1;
    let n_read = (&mut *reader)
        .take(limit)
        .read_until(b'\n', &mut line)
        .await?;
    if n_read == 0 {
        return Ok(RequestLine::Eof);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
    } else if line.len() > MAX_REQUEST_BYTES {
        return Ok(RequestLine::TooLong);
    }
    Ok(RequestLine::Line(line))
}

async fn answer(
    stream: UnixStream,
    serving: Serving,
    mut connection: Connection,
) -> std::io::Result<()> {
    let peer = stream.peer_cred();
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let line = tokio::select! {
        // A line already sent wins over an eviction decided meanwhile.
        biased;
        line = tokio::time::timeout(REQUEST_LINE_TIMEOUT, read_request_line(&mut reader)) => Some(line),
        _ = &mut connection.evicted => None,
    };
    connection.stop_waiting();
    let response = match line {
        None => failure(
            "E_CONTROL_BUSY",
            &format!(
                "more than {MAX_WAITING_CONNECTIONS} connections were waiting to send a request; this one waited longest"
            ),
        ),
        Some(Err(_elapsed)) => failure(
            "E_CONTROL_TIMEOUT",
            &format!("no request line within {} s", REQUEST_LINE_TIMEOUT.as_secs()),
        ),
        Some(Ok(Err(error))) => return Err(error),
        Some(Ok(Ok(RequestLine::Eof))) => return Ok(()),
        Some(Ok(Ok(RequestLine::TooLong))) => failure(
            "E_CONTROL_REQUEST_TOO_LARGE",
            &format!("the request line is longer than the {MAX_REQUEST_BYTES}-byte limit"),
        ),
        Some(Ok(Ok(RequestLine::Line(bytes)))) => match ControlRequest::from_line(&bytes)
            .and_then(|request| operator::admit(request, peer.as_ref().ok()))
        {
            Err(refusal) => *refusal,
            Ok(ControlRequest::DeliverStreaming {
                key,
                event,
                source,
                prior_messages,
            }) => match (connection.streaming.clone().try_acquire_owned(), exact_key(&key)) {
                (Ok(_permit), Ok(key)) => {
                    let mut event = crate::ingress::agent_event(&source, &event, &key.instance_key);
                    if !prior_messages.is_empty() {
                        event.metadata.get_or_insert_with(Default::default).insert(
                            goondan_types::PRIOR_MESSAGES_KEY.into(),
                            serde_json::Value::Array(prior_messages),
                        );
                    }
                    return stream_delivery(&serving.handle, key, event, &mut reader, write).await;
                }
                (Err(_), _) => failure(
                    "E_CONTROL_BUSY",
                    &format!("{MAX_STREAMING_TURNS} streaming deliveries are already being served"),
                ),
                (_, Err(refusal)) => *refusal,
            },
            Ok(request) => match connection.active.clone().try_acquire_owned() {
                Ok(_permit) => match execute(request, &serving, &mut reader).await {
                    Some(response) => response,
                    // Nobody is left to read an answer.
                    None => return Ok(()),
                },
                Err(_) => failure(
                    "E_CONTROL_BUSY",
                    &format!("{MAX_ACTIVE_REQUESTS} control requests are already being served"),
                ),
            },
        },
    };
    write_last_line(&mut write, &response).await
}

/// Serves `request`; `None` when its client went away and the request
/// asked for its Turn to be cancelled then.
async fn execute(
    request: ControlRequest,
    serving: &Serving,
    reader: &mut BufReader<OwnedReadHalf>,
) -> Option<ControlResponse> {
    let handle = &serving.handle;
    if let ControlRequest::Request {
        agent,
        event,
        cancel_on_disconnect: true,
    } = request
    {
        return answer_unless_disconnected(handle, Ingress::cli_event(event, agent), reader).await;
    }
    Some(execute_to_end(request, serving).await)
}

/// Waits for the answer to `ingress` while watching the connection: if
/// the client closes it first, the Turn is cancelled and `None` returned.
async fn answer_unless_disconnected(
    handle: &OrchestratorHandle,
    ingress: Ingress,
    reader: &mut BufReader<OwnedReadHalf>,
) -> Option<ControlResponse> {
    let pending = match handle.enqueue(ingress, None).await {
        Ok(pending) => pending,
        Err(error) => return Some(failed(&error)),
    };
    let event_id = pending.event_id().to_string();
    let answer = pending.answer();
    tokio::pin!(answer);
    let disconnected = client_left(reader);
    tokio::select! {
        answer = &mut answer => Some(match answer {
            Ok(answer) => ControlResponse::Answer { response: Box::new(answer) },
            Err(error) => failed(&error),
        }),
        () = disconnected => {
            let _ = handle.cancel(event_id).await;
            None
        }
    }
}

/// Serves a [`ControlRequest::DeliverStreaming`] on its connection:
/// `Accepted`, `Delta`s, then the answer, one line each; the client
/// closing the connection first cancels the Turn.
async fn stream_delivery(
    handle: &OrchestratorHandle,
    key: goondan_ipc::RoutingKey,
    event: AgentEvent,
    reader: &mut BufReader<OwnedReadHalf>,
    mut write: tokio::net::unix::OwnedWriteHalf,
) -> std::io::Result<()> {
    let (deltas, mut streamed) = tokio::sync::mpsc::unbounded_channel();
    let pending = match handle.deliver_stored(key, event, deltas).await {
        Ok(pending) => pending,
        Err(error) => return write_line(&mut write, &failed(&error)).await,
    };
    let event_id = pending.event_id().to_string();
    write_line(
        &mut write,
        &ControlResponse::Accepted {
            event_id: event_id.clone(),
        },
    )
    .await?;
    let answer = pending.answer();
    tokio::pin!(answer);
    let disconnected = client_left(reader);
    tokio::pin!(disconnected);
    let response = loop {
        tokio::select! {
            // Text before the answer that ends it.
            biased;
            Some(text) = streamed.recv() => {
                write_line(&mut write, &ControlResponse::Delta { text }).await?;
            }
            answer = &mut answer => break match answer {
                Ok(answer) => ControlResponse::Answer { response: Box::new(answer) },
                Err(error) => failed(&error),
            },
            () = &mut disconnected => {
                let _ = handle.cancel(event_id).await;
                return Ok(());
            }
        }
    };
    // Text still queued behind the answer went out before it on the
    // agent's side; keep that order here.
    while let Ok(text) = streamed.try_recv() {
        write_line(&mut write, &ControlResponse::Delta { text }).await?;
    }
    write_last_line(&mut write, &response).await
}

/// Resolves when the client closed its side of the connection (or it
/// broke). Anything it sends after its request line is ignored.
async fn client_left(reader: &mut BufReader<OwnedReadHalf>) {
    let mut ignored = [0u8; 256];
    while matches!(reader.read(&mut ignored).await, Ok(n) if n > 0) {}
}

/// Writes the last response line and ends the connection.
async fn write_last_line(
    write: &mut tokio::net::unix::OwnedWriteHalf,
    response: &ControlResponse,
) -> std::io::Result<()> {
    write_line(write, response).await?;
    write.shutdown().await
}

/// Writes one response line, giving up after [`WRITE_TIMEOUT`] on a
/// client that stopped reading.
async fn write_line(
    write: &mut tokio::net::unix::OwnedWriteHalf,
    response: &ControlResponse,
) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(response).unwrap_or_default();
    bytes.push(b'\n');
    tokio::time::timeout(WRITE_TIMEOUT, write.write_all(&bytes))
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

fn failed(error: &OrchestratorError) -> ControlResponse {
    ControlResponse::Failed(error.to_body())
}

async fn execute_to_end(request: ControlRequest, serving: &Serving) -> ControlResponse {
    let handle = &serving.handle;
    let outcome = match request {
        ControlRequest::Status => {
            let swarm = handle.swarm();
            Ok(ControlResponse::Status {
                swarm: swarm.swarm_name.clone(),
                instance_key: swarm.instance_key.clone(),
                entry_agent: swarm.entry_agent.clone(),
                pid: std::process::id(),
                protocol_version: goondan_ipc::PROTOCOL_VERSION,
                refused_malformed: handle.protocol_stats().malformed(),
                refused_unknown: handle.protocol_stats().unknown(),
                identity: (*serving.identity).clone(),
            })
        }
        ControlRequest::Request { agent, event, .. } => handle
            .ask(Ingress::cli_event(event, agent), None)
            .await
            .map(|answer| ControlResponse::Answer {
                response: Box::new(answer),
            }),
        ControlRequest::Restart {
            agent,
            instance_key,
            fresh,
            swarm,
        } => {
            let reloaded = match swarm {
                Some(swarm) => reload(handle, *swarm).await,
                None => Ok(()),
            };
            if let Err(error) = reloaded {
                return failed(&error);
            }
            // Long enough for a Turn to finish inside its grace period, or
            // for the process to be killed at its end.
            let wait = handle.swarm().grace_period + RESTART_SETTLE;
            handle
                .restart_and_wait(agent, instance_key, fresh, wait)
                .await
                .map(|outcomes| ControlResponse::Restarted {
                    restarted: outcomes.iter().map(|outcome| outcome.key.clone()).collect(),
                    outcomes,
                })
        }
        ControlRequest::List => handle
            .list()
            .await
            .map(|instances| ControlResponse::Instances { instances }),
        ControlRequest::Connections => handle
            .connections()
            .await
            .map(|connections| ControlResponse::Connections { connections }),
        ControlRequest::Delete { key } => handle
            .delete(key)
            .await
            .map(|stopped| ControlResponse::Deleted { stopped }),
        ControlRequest::Deliver { key, event, source } => match exact_key(&key) {
            Ok(key) => deliver(handle, key, &event, &source).await,
            Err(refusal) => return *refusal,
        },
        // Answered line by line by `stream_delivery`; never gets here.
        ControlRequest::DeliverStreaming { .. } => {
            return failure(
                "E_CONTROL_BAD_REQUEST",
                "a streaming delivery is served on its own connection",
            )
        }
        ControlRequest::Decide { key, decision } => match exact_key(&key) {
            Ok(key) => handle
                .decide(key, decision)
                .await
                .map(|()| ControlResponse::Decided),
            Err(refusal) => return *refusal,
        },
        ControlRequest::Cancel { key, by } => handle
            .cancel_running(key, by, CANCEL_SETTLE)
            .await
            .map(ControlResponse::Cancelled),
        ControlRequest::Fork {
            key,
            at,
            new_key,
            by,
            cancel,
        } => match exact_key(&key) {
            Ok(key) => {
                let asked = rewrite::Asked { key, by, cancel };
                rewrite::fork(handle, &serving.instances, asked, &at, new_key).await
            }
            Err(refusal) => return *refusal,
        },
        ControlRequest::Rewind {
            key,
            to,
            by,
            cancel,
        } => match exact_key(&key) {
            Ok(key) => {
                let asked = rewrite::Asked { key, by, cancel };
                rewrite::rewind(handle, &serving.instances, asked, &to).await
            }
            Err(refusal) => return *refusal,
        },
        ControlRequest::Edit {
            key,
            change,
            by,
            cancel,
        } => match exact_key(&key) {
            Ok(key) => {
                let asked = rewrite::Asked { key, by, cancel };
                rewrite::edit(handle, &serving.instances, asked, change).await
            }
            Err(refusal) => return *refusal,
        },
        ControlRequest::Shutdown => {
            let handle = handle.clone();
            // Answer first; the drain may take the whole grace period.
            tokio::spawn(async move {
                let _ = handle.shutdown().await;
            });
            Ok(ControlResponse::Stopping)
        }
    };
    outcome.unwrap_or_else(|error| failed(&error))
}

/// The one instance `text` names, `agent:instanceKey` exactly, or the
/// refusal its client gets (`E_IPC_ROUTING_KEY`; boxed, as in
/// [`ControlRequest::from_line`]).
fn exact_key(text: &str) -> Result<goondan_ipc::RoutingKey, Box<ControlResponse>> {
    goondan_ipc::RoutingKey::parse(text, "")
        .map_err(|error| Box::new(failure(error.code(), &error.to_string())))
}

/// Queues `event` for the instance `key` as coming from `source`, and
/// waits for its answer.
async fn deliver(
    handle: &OrchestratorHandle,
    key: goondan_ipc::RoutingKey,
    event: &ConnectorEvent,
    source: &str,
) -> Result<ControlResponse, OrchestratorError> {
    let event = crate::ingress::agent_event(source, event, &key.instance_key);
    let answer = handle
        .enqueue_request(Some(key.agent_name), event)
        .await?
        .answer()
        .await?;
    Ok(ControlResponse::Answer {
        response: Box::new(answer),
    })
}

/// Replaces the swarm the orchestrator runs with `swarm` and restarts
/// every Connection's process, so the next processes run the re-read
/// bundle (agents are restarted by the caller).
async fn reload(
    handle: &OrchestratorHandle,
    swarm: crate::SwarmInfo,
) -> Result<(), OrchestratorError> {
    let connections = swarm.connections.clone();
    handle.reconfigure(swarm).await?;
    handle.restart_for_config(Vec::new(), connections).await?;
    Ok(())
}

fn failure(code: &str, message: &str) -> ControlResponse {
    ControlResponse::Failed(goondan_types::ErrorBody::new(code, message))
}

/// One request to the orchestrator at `path` and its response, for this
/// crate's own unit tests. Every other client is `goondan_client`'s
/// `ControlSocket`, which a unit test here cannot use: it would link a
/// second copy of this crate, whose `ControlRequest` is another type.
#[cfg(test)]
pub(crate) async fn call(
    path: &std::path::Path,
    request: &ControlRequest,
) -> std::io::Result<ControlResponse> {
    let (read, mut write) = UnixStream::connect(path).await?.into_split();
    let mut bytes = serde_json::to_vec(request)?;
    bytes.push(b'\n');
    write.write_all(&bytes).await?;
    let line = BufReader::new(read)
        .lines()
        .next_line()
        .await?
        .ok_or(std::io::ErrorKind::UnexpectedEof)?;
    Ok(serde_json::from_str(&line)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal_code(line: &[u8]) -> String {
        match *ControlRequest::from_line(line).expect_err("the line is refused") {
            ControlResponse::Failed(body) => body.code,
            other => panic!("a refusal is `failed`, not {other:?}"),
        }
    }

    #[test]
    fn a_request_line_parses_and_anything_else_is_a_bad_request() {
        assert_eq!(
            ControlRequest::from_line(br#"{"op":"delete","key":"coder:main"}"#),
            Ok(ControlRequest::Delete {
                key: "coder:main".into()
            })
        );
        for line in [&b"\xff{}"[..], b"", b"{}", b"{\"op\":\"launch\"}", b"[1]"] {
            assert_eq!(refusal_code(line), "E_CONTROL_BAD_REQUEST", "{line:?}");
        }
    }
}
