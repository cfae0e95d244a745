//! [`IpcAgents`]: the agents API over the orchestrator's IPC channel.
//!
//! A request is an `event` addressed to the target's routing key, carrying
//! `replyTo {target: <own key>, correlationId}`, the trace id, the caller's
//! span as `parentSpanId`, and the call chain. The caller owns the timeout.
//! Answers come back as [`Answer`]s; the host loop hands them to
//! [`IpcAgents::accept_answer`] before anything else sees them, even while
//! a Turn is blocked waiting for one. Every waiting request has a deadline
//! (async ones too: an expired async request leaves a timeout answer in the
//! inbox), and at most [`DEFAULT_MAX_PENDING_REQUESTS`] wait at once.

use crate::lock;
use futures_util::future::BoxFuture;
use goondan_ipc::protocol::{
    self, Answer, Failure, Query, QueryAnswer, QueryAnswerMessage, QueryRequest,
};
use goondan_ipc::{framing, RoutingKey, RuntimeMessage, ORCHESTRATOR};
use goondan_runtime::{AgentsApi, AgentsError, AsyncResponseInbox, InterAgentResponse};
use goondan_types::agents::{
    AgentRuntimeCatalogResult, AgentRuntimeListOptions, AgentRuntimeListResult,
    AgentRuntimeRequestOptions, AgentRuntimeRequestResult, AgentRuntimeSendResult,
    AgentRuntimeSpawnOptions, AgentRuntimeSpawnResult, InterAgentResponseMetadata,
    InterAgentResponseStatus, DEFAULT_REQUEST_TIMEOUT_MS,
};
use goondan_types::{
    AgentEvent, EventSource, EventSourceKind, IpcMessage, JsonValue, ReplyChannel,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The swarm as one agent sees it.
#[derive(Debug, Clone)]
pub struct SwarmView {
    /// The swarm's name.
    pub swarm_name: String,
    /// Its entry agent.
    pub entry_agent: String,
    /// Every agent of the swarm.
    pub agents: Vec<String>,
}

/// How many requests of one instance may wait for answers at once.
pub const DEFAULT_MAX_PENDING_REQUESTS: usize = 256;

enum Pending {
    /// A fire-and-forget event waiting for the orchestrator to accept it.
    Delivery(oneshot::Sender<Result<(), Failure>>),
    Blocking(oneshot::Sender<Answer>),
    Query(oneshot::Sender<QueryAnswer>),
    Async {
        request_event: Box<AgentEvent>,
        target: String,
    },
}

/// What the Turn being served inherited from its input event.
#[derive(Debug, Clone, Default)]
struct TurnScope {
    /// Routing keys waiting on this Turn's answer, oldest first.
    call_chain: Vec<String>,
    trace_id: Option<String>,
    auth: Option<goondan_types::TurnAuth>,
}

/// The agents API of an AgentProcess.
#[derive(Clone)]
pub struct IpcAgents {
    me: RoutingKey,
    swarm: Arc<SwarmView>,
    outbound: mpsc::Sender<IpcMessage>,
    pending: Arc<Mutex<HashMap<String, Pending>>>,
    scope: Arc<Mutex<TurnScope>>,
    inbox: AsyncResponseInbox,
    max_pending: usize,
}

impl IpcAgents {
    /// An agents API for instance `me`, sending through `outbound` and
    /// queueing async answers in `inbox`.
    pub fn new(
        me: RoutingKey,
        swarm: SwarmView,
        outbound: mpsc::Sender<IpcMessage>,
        inbox: AsyncResponseInbox,
    ) -> Self {
        IpcAgents {
            me,
            swarm: Arc::new(swarm),
            outbound,
            pending: Arc::default(),
            scope: Arc::default(),
            inbox,
            max_pending: DEFAULT_MAX_PENDING_REQUESTS,
        }
    }

    /// Caps how many requests may wait for answers at once (the Swarm's
    /// `policy.queues.maxPendingRequests`); one more fails with
    /// `E_QUEUE_FULL`.
    pub fn with_max_pending_requests(mut self, max_pending: usize) -> Self {
        self.max_pending = max_pending.max(1);
        self
    }

    /// Registers a waiting request, refusing it when too many wait.
    fn register(&self, correlation_id: &str, pending: Pending) -> Result<(), AgentsError> {
        let mut waiting = lock(&self.pending);
        if waiting.len() >= self.max_pending {
            return Err(AgentsError::QueueFull {
                caller: self.me.to_string(),
                waiting: waiting.len(),
                limit: self.max_pending,
            });
        }
        waiting.insert(correlation_id.to_string(), pending);
        Ok(())
    }

    /// Forgets a request whose deadline passed; an async one leaves a
    /// timeout answer in the inbox so the model learns of it.
    fn expire(&self, correlation_id: &str, timeout_ms: u64) {
        let pending = lock(&self.pending).remove(correlation_id);
        if let Some(Pending::Async {
            request_event,
            target,
        }) = pending
        {
            let error = AgentsError::Timeout {
                target: target.clone(),
                timeout_ms,
            };
            let answer = Answer::failed(correlation_id, error.code(), &error.to_string());
            self.inbox.push(async_answer(
                &self.me,
                &target,
                &request_event,
                &answer,
                None,
            ));
        }
    }

    /// Records what the next Turn inherits from `input`: the chain of
    /// callers waiting on it (only when it is a request), its trace and its
    /// auth, which requests pass along unchanged.
    pub fn begin_turn(&self, input: &AgentEvent) {
        let mut scope = lock(&self.scope);
        scope.call_chain = if input.reply_to.is_some() {
            input.call_chain.clone()
        } else {
            Vec::new()
        };
        scope.trace_id = input.trace_id.clone();
        scope.auth = input.auth.clone();
    }

    /// Hands `answer` (carried by `event`) to the request waiting for it;
    /// false when no request of this instance waits for it (late or
    /// unknown).
    pub fn accept_answer(&self, answer: Answer, event: &AgentEvent) -> bool {
        let pending = lock(&self.pending).remove(&answer.in_reply_to);
        match pending {
            Some(Pending::Blocking(waiter)) => {
                let _ = waiter.send(answer);
                true
            }
            Some(Pending::Async {
                request_event,
                target,
            }) => {
                self.inbox.push(async_answer(
                    &self.me,
                    &target,
                    &request_event,
                    &answer,
                    Some(&event.id),
                ));
                true
            }
            Some(other) => {
                // A query's correlation id answered by an ordinary event:
                // keep waiting for the real answer.
                lock(&self.pending).insert(answer.in_reply_to, other);
                false
            }
            None => false,
        }
    }

    /// Hands the orchestrator's answer to the query waiting for it; false
    /// when none waits.
    pub fn accept_query_answer(&self, message: QueryAnswerMessage) -> bool {
        let pending = lock(&self.pending).remove(&message.in_reply_to);
        match pending {
            Some(Pending::Query(waiter)) => {
                let _ = waiter.send(message.answer);
                true
            }
            Some(other) => {
                lock(&self.pending).insert(message.in_reply_to, other);
                false
            }
            None => false,
        }
    }

    /// Completes the `send` waiting for event `event_id` to reach its
    /// target's process; false when none waits.
    pub fn accepted(&self, event_id: &str) -> bool {
        let correlation_id = protocol::correlation_id_for_id(event_id);
        let pending = lock(&self.pending).remove(&correlation_id);
        match pending {
            Some(Pending::Delivery(waiter)) => {
                let _ = waiter.send(Ok(()));
                true
            }
            Some(other) => {
                lock(&self.pending).insert(correlation_id, other);
                false
            }
            None => false,
        }
    }

    /// Fails the request the orchestrator refused to route (it named the
    /// refused event); false when none waits for it.
    pub fn reject(&self, event_id: &str, failure: Failure) -> bool {
        let correlation_id = protocol::correlation_id_for_id(event_id);
        let pending = lock(&self.pending).remove(&correlation_id);
        match pending {
            Some(Pending::Delivery(waiter)) => {
                let _ = waiter.send(Err(failure));
                true
            }
            Some(Pending::Blocking(waiter)) => {
                let _ = waiter.send(Answer {
                    in_reply_to: correlation_id,
                    outcome: protocol::AnswerOutcome::Failed(failure),
                });
                true
            }
            Some(Pending::Query(waiter)) => {
                let _ = waiter.send(QueryAnswer::Failed(failure));
                true
            }
            Some(Pending::Async {
                request_event,
                target,
            }) => {
                let answer = Answer {
                    in_reply_to: correlation_id,
                    outcome: protocol::AnswerOutcome::Failed(failure),
                };
                self.inbox.push(async_answer(
                    &self.me,
                    &target,
                    &request_event,
                    &answer,
                    None,
                ));
                true
            }
            None => false,
        }
    }

    fn target_key(&self, target: &str) -> Result<RoutingKey, AgentsError> {
        let key = RoutingKey::parse(target, &self.me.instance_key).map_err(|_| {
            AgentsError::UnknownTarget {
                target: target.to_string(),
            }
        })?;
        if !self.swarm.agents.contains(&key.agent_name) {
            return Err(AgentsError::UnknownTarget {
                target: target.to_string(),
            });
        }
        Ok(key)
    }

    /// Fills what the caller may leave out and returns the chain the target
    /// will carry.
    fn prepare(&self, event: &mut AgentEvent) {
        let scope = lock(&self.scope).clone();
        if event.trace_id.is_none() {
            event.trace_id = scope.trace_id.clone();
        }
        if event.auth.is_none() {
            event.auth = scope.auth.clone();
        }
        event.source = EventSource::new(EventSourceKind::Agent, self.me.agent_name.as_str());
    }

    async fn post(&self, to: &str, event: &AgentEvent) -> Result<(), AgentsError> {
        let message = protocol::event_message(&self.me.to_string(), to, event);
        if !framing::fits(&message) {
            return Err(AgentsError::TooLarge {
                bytes: framing::encoded_len(&message),
                limit: framing::MAX_LINE_BYTES,
            });
        }
        self.send_message(message).await
    }

    async fn send_message(&self, message: IpcMessage) -> Result<(), AgentsError> {
        self.outbound
            .send(message)
            .await
            .map_err(|_| AgentsError::Transport {
                message: "the orchestrator channel is closed".into(),
            })
    }

    /// Sends a query to the orchestrator and waits for its answer.
    async fn ask_orchestrator(&self, query: Query) -> Result<QueryAnswer, AgentsError> {
        let correlation_id = protocol::new_correlation_id();
        let (waiter, answer) = oneshot::channel();
        self.register(&correlation_id, Pending::Query(waiter))?;
        let message = RuntimeMessage::Query(QueryRequest {
            correlation_id: correlation_id.clone(),
            query,
        })
        .to_message(&self.me.to_string(), ORCHESTRATOR);
        if let Err(error) = self.send_message(message).await {
            lock(&self.pending).remove(&correlation_id);
            return Err(error);
        }
        let timeout = Duration::from_millis(DEFAULT_REQUEST_TIMEOUT_MS);
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(QueryAnswer::Failed(failure))) => Err(AgentsError::Failed {
                target: ORCHESTRATOR.into(),
                message: format!("[{}] {}", failure.code, failure.message),
            }),
            Ok(Ok(answer)) => Ok(answer),
            _ => {
                lock(&self.pending).remove(&correlation_id);
                Err(AgentsError::Timeout {
                    target: ORCHESTRATOR.into(),
                    timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
                })
            }
        }
    }
}

/// Armed while a blocking request waits for its answer: when the wait is
/// dropped instead of finishing (the caller's own Turn was cancelled), the
/// request's Turn is cancelled too (`runtime.cancel` to the orchestrator),
/// so a cancelled chain does not go on spending below its root.
struct CancelOnDrop<'a> {
    agents: &'a IpcAgents,
    event_id: &'a str,
    correlation_id: &'a str,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        lock(&self.agents.pending).remove(self.correlation_id);
        let cancel = RuntimeMessage::Cancel(protocol::Cancel {
            event_id: self.event_id.to_string(),
            cancelled_by: None,
        })
        .to_message(&self.agents.me.to_string(), ORCHESTRATOR);
        // Best effort: a full or closed channel means the process is busy
        // writing or going away; the callee's Turn then finishes.
        let _ = self.agents.outbound.try_send(cancel);
    }
}

impl AgentsApi for IpcAgents {
    fn request<'a>(
        &'a self,
        target: &'a str,
        mut event: AgentEvent,
        options: AgentRuntimeRequestOptions,
    ) -> BoxFuture<'a, Result<AgentRuntimeRequestResult, AgentsError>> {
        Box::pin(async move {
            let key = self.target_key(target)?;
            let mut chain = lock(&self.scope).call_chain.clone();
            chain.push(self.me.to_string());
            if chain.contains(&key.to_string()) {
                return Err(AgentsError::Cycle {
                    target: key.to_string(),
                    chain,
                });
            }
            self.prepare(&mut event);
            event.call_chain = chain;
            event.instance_key = Some(key.instance_key.clone());
            let correlation_id = protocol::correlation_id_for(&event);
            event.reply_to = Some(ReplyChannel {
                target: self.me.to_string(),
                correlation_id: correlation_id.clone(),
            });
            let timeout_ms = options.timeout_ms.unwrap_or(DEFAULT_REQUEST_TIMEOUT_MS);
            let is_async = options.r#async.unwrap_or(false);
            if is_async {
                self.register(
                    &correlation_id,
                    Pending::Async {
                        request_event: Box::new(event.clone()),
                        target: key.to_string(),
                    },
                )?;
                if let Err(error) = self.post(&key.to_string(), &event).await {
                    lock(&self.pending).remove(&correlation_id);
                    return Err(error);
                }
                let agents = self.clone();
                let expiring = correlation_id.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(timeout_ms)).await;
                    agents.expire(&expiring, timeout_ms);
                });
                return Ok(AgentRuntimeRequestResult {
                    event_id: event.id,
                    target: key.to_string(),
                    response: None,
                    correlation_id,
                    accepted: Some(true),
                    r#async: Some(true),
                });
            }
            let (waiter, answer) = oneshot::channel();
            self.register(&correlation_id, Pending::Blocking(waiter))?;
            if let Err(error) = self.post(&key.to_string(), &event).await {
                lock(&self.pending).remove(&correlation_id);
                return Err(error);
            }
            let mut stop_waiting = CancelOnDrop {
                agents: self,
                event_id: &event.id,
                correlation_id: &correlation_id,
                armed: true,
            };
            let waited = tokio::time::timeout(Duration::from_millis(timeout_ms), answer).await;
            stop_waiting.armed = false;
            drop(stop_waiting);
            let answer = match waited {
                Ok(Ok(answer)) => answer,
                _ => {
                    lock(&self.pending).remove(&correlation_id);
                    return Err(AgentsError::Timeout {
                        target: key.to_string(),
                        timeout_ms,
                    });
                }
            };
            let text = match answer.outcome {
                protocol::AnswerOutcome::Ok { text, .. } => text,
                protocol::AnswerOutcome::Failed(Failure { code, message, .. }) => {
                    return Err(match code.as_str() {
                        "E_AGENT_NOT_FOUND" => AgentsError::UnknownTarget {
                            target: key.to_string(),
                        },
                        "E_AGENT_CYCLE" => AgentsError::Cycle {
                            target: key.to_string(),
                            chain: event.call_chain.clone(),
                        },
                        _ => AgentsError::Failed {
                            target: key.to_string(),
                            message: format!("[{code}] {message}"),
                        },
                    })
                }
            };
            Ok(AgentRuntimeRequestResult {
                event_id: event.id,
                target: key.to_string(),
                response: Some(JsonValue::String(text.unwrap_or_default())),
                correlation_id,
                accepted: None,
                r#async: None,
            })
        })
    }

    fn send<'a>(
        &'a self,
        target: &'a str,
        mut event: AgentEvent,
    ) -> BoxFuture<'a, Result<AgentRuntimeSendResult, AgentsError>> {
        Box::pin(async move {
            let key = self.target_key(target)?;
            self.prepare(&mut event);
            event.reply_to = None;
            event.call_chain = Vec::new();
            event.instance_key = Some(key.instance_key.clone());
            // The send returns once the orchestrator durably accepted the
            // event (stored it in the target's inbox, tool.md §11.1), or
            // refused it (an unknown agent, a full queue).
            let correlation_id = protocol::correlation_id_for(&event);
            let (waiter, delivered) = oneshot::channel();
            self.register(&correlation_id, Pending::Delivery(waiter))?;
            if let Err(error) = self.post(&key.to_string(), &event).await {
                lock(&self.pending).remove(&correlation_id);
                return Err(error);
            }
            let timeout = Duration::from_millis(DEFAULT_REQUEST_TIMEOUT_MS);
            match tokio::time::timeout(timeout, delivered).await {
                Ok(Ok(Ok(()))) => Ok(AgentRuntimeSendResult {
                    event_id: event.id,
                    target: key.to_string(),
                    accepted: true,
                }),
                Ok(Ok(Err(failure))) => Err(AgentsError::Failed {
                    target: key.to_string(),
                    message: format!("[{}] {}", failure.code, failure.message),
                }),
                _ => {
                    lock(&self.pending).remove(&correlation_id);
                    Err(AgentsError::Timeout {
                        target: key.to_string(),
                        timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
                    })
                }
            }
        })
    }

    fn spawn<'a>(
        &'a self,
        target: &'a str,
        options: AgentRuntimeSpawnOptions,
    ) -> BoxFuture<'a, Result<AgentRuntimeSpawnResult, AgentsError>> {
        Box::pin(async move {
            let mut key = self.target_key(target)?;
            if let Some(instance_key) = &options.instance_key {
                key.instance_key = instance_key.clone();
            }
            let answer = self
                .ask_orchestrator(Query::Spawn {
                    target: key.to_string(),
                    cwd: options.cwd.clone(),
                })
                .await?;
            let QueryAnswer::Spawned { spawned } = answer else {
                return Err(AgentsError::Transport {
                    message: format!("the orchestrator answered spawn with {answer:?}"),
                });
            };
            Ok(AgentRuntimeSpawnResult {
                target: key.agent_name,
                instance_key: key.instance_key,
                spawned,
                cwd: options.cwd,
            })
        })
    }

    fn list(
        &self,
        options: AgentRuntimeListOptions,
    ) -> BoxFuture<'_, Result<AgentRuntimeListResult, AgentsError>> {
        Box::pin(async move {
            let answer = self.ask_orchestrator(Query::List).await?;
            let QueryAnswer::Agents { agents } = answer else {
                return Err(AgentsError::Transport {
                    message: format!("the orchestrator answered list with {answer:?}"),
                });
            };
            let me = self.me.to_string();
            let agents = agents
                .into_iter()
                .filter(|info| {
                    options.include_all.unwrap_or(false)
                        || RoutingKey::new(&info.owner_agent, &info.owner_instance_key).to_string()
                            == me
                })
                .collect();
            Ok(AgentRuntimeListResult { agents })
        })
    }

    fn catalog(&self) -> BoxFuture<'_, Result<AgentRuntimeCatalogResult, AgentsError>> {
        Box::pin(async move {
            Ok(AgentRuntimeCatalogResult {
                swarm_name: self.swarm.swarm_name.clone(),
                entry_agent: self.swarm.entry_agent.clone(),
                self_agent: self.me.agent_name.clone(),
                available_agents: self.swarm.agents.clone(),
                callable_agents: self
                    .swarm
                    .agents
                    .iter()
                    .filter(|agent| **agent != self.me.agent_name)
                    .cloned()
                    .collect(),
            })
        })
    }

    fn restart_swarm(&self, reason: String) -> BoxFuture<'_, Result<(), AgentsError>> {
        Box::pin(async move {
            match self.ask_orchestrator(Query::Restart { reason }).await? {
                QueryAnswer::RestartScheduled => Ok(()),
                answer => Err(AgentsError::Transport {
                    message: format!("the orchestrator answered restart with {answer:?}"),
                }),
            }
        })
    }
}

fn async_answer(
    me: &RoutingKey,
    target: &str,
    request: &AgentEvent,
    answer: &Answer,
    response_event_id: Option<&str>,
) -> InterAgentResponse {
    let failure = answer.failure();
    let metadata = InterAgentResponseMetadata {
        kind: "inter_agent_response".into(),
        version: 1,
        request_id: answer.in_reply_to.clone(),
        request_event_id: request.id.clone(),
        response_event_id: response_event_id.map(str::to_string),
        from_agent_id: target.to_string(),
        to_agent_id: me.to_string(),
        r#async: true,
        status: if failure.is_some() {
            InterAgentResponseStatus::Error
        } else {
            InterAgentResponseStatus::Ok
        },
        received_at: goondan_types::now_iso(),
        trace_id: request.trace_id.clone(),
        request_event_type: Some(request.event_type.clone()),
        request_metadata: request.metadata.clone(),
        error_code: failure.map(|failure| failure.code.clone()),
        error_message: failure.map(|failure| failure.message.clone()),
    };
    let text = match (&answer.outcome, failure) {
        (_, Some(failure)) => format!("[{target}] failed: [{}] {}", failure.code, failure.message),
        (protocol::AnswerOutcome::Ok { text, .. }, None) => text.clone().unwrap_or_default(),
        (protocol::AnswerOutcome::Failed(_), None) => String::new(),
    };
    InterAgentResponse { text, metadata }
}
