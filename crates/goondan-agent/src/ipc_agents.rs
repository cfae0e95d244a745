//! [`IpcAgents`]: the agents API over the orchestrator's IPC channel.
//!
//! A request is an `event` addressed to the target's routing key, carrying
//! `replyTo {target: <own key>, correlationId}`, the trace id, the caller's
//! span as `parentSpanId`, and the call chain. The caller owns the timeout.
//! Answers come back as events with `metadata.inReplyTo`; the host loop
//! hands them to [`IpcAgents::accept_reply`] before anything else sees
//! them, even while a Turn is blocked waiting for one.

use crate::lock;
use futures_util::future::BoxFuture;
use goondan_ipc::answer::failure;
use goondan_ipc::{RoutingKey, ORCHESTRATOR};
use goondan_runtime::{AgentsApi, AgentsError, AsyncResponseInbox, InterAgentResponse};
use goondan_types::agents::{
    AgentRuntimeCatalogResult, AgentRuntimeListOptions, AgentRuntimeListResult,
    AgentRuntimeRequestOptions, AgentRuntimeRequestResult, AgentRuntimeSendResult,
    AgentRuntimeSpawnOptions, AgentRuntimeSpawnResult, InterAgentResponseMetadata,
    InterAgentResponseStatus, SpawnedAgentInfo, DEFAULT_REQUEST_TIMEOUT_MS,
};
use goondan_types::{
    AgentEvent, EventSource, EventSourceKind, IpcMessage, IpcMessageType, JsonObject, JsonValue,
    ReplyChannel,
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

enum Pending {
    Blocking(oneshot::Sender<AgentEvent>),
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

    /// Takes `event` if it answers one of this instance's requests; returns
    /// it back otherwise.
    pub fn accept_reply(&self, event: AgentEvent) -> Option<AgentEvent> {
        let Some(correlation_id) = event
            .metadata_value("inReplyTo")
            .and_then(JsonValue::as_str)
            .map(str::to_string)
        else {
            return Some(event);
        };
        let pending = lock(&self.pending).remove(&correlation_id);
        match pending {
            Some(Pending::Blocking(waiter)) => {
                let _ = waiter.send(event);
                None
            }
            Some(Pending::Async {
                request_event,
                target,
            }) => {
                self.inbox.push(async_answer(
                    &self.me,
                    &target,
                    &request_event,
                    &correlation_id,
                    &event,
                ));
                None
            }
            None => Some(event),
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
        let message = IpcMessage {
            message_type: IpcMessageType::Event,
            from: self.me.to_string(),
            to: to.to_string(),
            payload: serde_json::to_value(event).map_err(|error| AgentsError::Transport {
                message: error.to_string(),
            })?,
        };
        self.outbound
            .send(message)
            .await
            .map_err(|_| AgentsError::Transport {
                message: "the orchestrator channel is closed".into(),
            })
    }

    /// Sends a query to the orchestrator and waits for its answer.
    async fn ask_orchestrator(
        &self,
        event_type: &str,
        metadata: JsonObject,
    ) -> Result<AgentEvent, AgentsError> {
        let mut event = AgentEvent::new(
            event_type,
            EventSource::new(EventSourceKind::Agent, self.me.agent_name.as_str()),
        );
        event.metadata = Some(metadata);
        let correlation_id = format!("corr_{}", event.id);
        event.reply_to = Some(ReplyChannel {
            target: self.me.to_string(),
            correlation_id: correlation_id.clone(),
        });
        let (waiter, answer) = oneshot::channel();
        lock(&self.pending).insert(correlation_id.clone(), Pending::Blocking(waiter));
        if let Err(error) = self.post(ORCHESTRATOR, &event).await {
            lock(&self.pending).remove(&correlation_id);
            return Err(error);
        }
        let timeout = Duration::from_millis(DEFAULT_REQUEST_TIMEOUT_MS);
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(answer)) => match failure(&answer) {
                Some((code, message)) => Err(AgentsError::Failed {
                    target: ORCHESTRATOR.into(),
                    message: format!("[{code}] {message}"),
                }),
                None => Ok(answer),
            },
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
            let correlation_id = format!("corr_{}", event.id);
            event.reply_to = Some(ReplyChannel {
                target: self.me.to_string(),
                correlation_id: correlation_id.clone(),
            });
            let is_async = options.r#async.unwrap_or(false);
            if is_async {
                lock(&self.pending).insert(
                    correlation_id.clone(),
                    Pending::Async {
                        request_event: Box::new(event.clone()),
                        target: key.to_string(),
                    },
                );
                if let Err(error) = self.post(&key.to_string(), &event).await {
                    lock(&self.pending).remove(&correlation_id);
                    return Err(error);
                }
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
            lock(&self.pending).insert(correlation_id.clone(), Pending::Blocking(waiter));
            if let Err(error) = self.post(&key.to_string(), &event).await {
                lock(&self.pending).remove(&correlation_id);
                return Err(error);
            }
            let timeout_ms = options.timeout_ms.unwrap_or(DEFAULT_REQUEST_TIMEOUT_MS);
            let answer = match tokio::time::timeout(Duration::from_millis(timeout_ms), answer).await
            {
                Ok(Ok(answer)) => answer,
                _ => {
                    lock(&self.pending).remove(&correlation_id);
                    return Err(AgentsError::Timeout {
                        target: key.to_string(),
                        timeout_ms,
                    });
                }
            };
            if let Some((code, message)) = failure(&answer) {
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
                });
            }
            Ok(AgentRuntimeRequestResult {
                event_id: event.id,
                target: key.to_string(),
                response: Some(JsonValue::String(answer.input.unwrap_or_default())),
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
            self.post(&key.to_string(), &event).await?;
            Ok(AgentRuntimeSendResult {
                event_id: event.id,
                target: key.to_string(),
                accepted: true,
            })
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
            let mut metadata = JsonObject::new();
            metadata.insert("target".into(), key.to_string().into());
            if let Some(cwd) = &options.cwd {
                metadata.insert("cwd".into(), cwd.clone().into());
            }
            let answer = self.ask_orchestrator("runtime.spawn", metadata).await?;
            let spawned = answer
                .metadata_value("spawned")
                .and_then(JsonValue::as_bool)
                .unwrap_or(false);
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
            let answer = self
                .ask_orchestrator("runtime.list", JsonObject::new())
                .await?;
            let agents: Vec<SpawnedAgentInfo> = answer
                .metadata_value("agents")
                .cloned()
                .map(serde_json::from_value)
                .transpose()
                .map_err(|error| AgentsError::Transport {
                    message: format!("malformed list answer: {error}"),
                })?
                .unwrap_or_default();
            let me = self.me.to_string();
            let agents = agents
                .into_iter()
                .filter(|info| {
                    options.include_all.unwrap_or(false)
                        || format!("{}:{}", info.owner_agent, info.owner_instance_key) == me
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
}

fn async_answer(
    me: &RoutingKey,
    target: &str,
    request: &AgentEvent,
    correlation_id: &str,
    answer: &AgentEvent,
) -> InterAgentResponse {
    let failure = failure(answer);
    let metadata = InterAgentResponseMetadata {
        kind: "inter_agent_response".into(),
        version: 1,
        request_id: correlation_id.to_string(),
        request_event_id: request.id.clone(),
        response_event_id: Some(answer.id.clone()),
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
        error_code: failure.as_ref().map(|(code, _)| code.clone()),
        error_message: failure.as_ref().map(|(_, message)| message.clone()),
    };
    let text = match &failure {
        Some((code, message)) => format!("[{target}] failed: [{code}] {message}"),
        None => answer.input.clone().unwrap_or_default(),
    };
    InterAgentResponse { text, metadata }
}
