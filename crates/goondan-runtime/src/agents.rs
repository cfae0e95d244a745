//! The agents API (`shared-types.md` §8): how a Turn talks to other
//! agents, and the inbox through which async answers come back.
//!
//! The same [`AgentsApi`] trait object serves `ctx.agents()` in `turn` and
//! `step` middleware and `ToolContext::runtime` in tool handlers. The
//! orchestrator implements it over IPC; this module only defines the
//! contract, the detached implementation an agent gets when no
//! orchestrator is attached, and the [`AsyncResponseInbox`].

use futures_util::future::BoxFuture;
use goondan_types::agents::{
    AgentRuntimeCatalogResult, AgentRuntimeListOptions, AgentRuntimeListResult,
    AgentRuntimeRequestOptions, AgentRuntimeRequestResult, AgentRuntimeSendResult,
    AgentRuntimeSpawnOptions, AgentRuntimeSpawnResult, InterAgentResponseMetadata,
};
use goondan_types::AgentEvent;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use thiserror::Error;

/// A failed inter-agent call. In middleware it is an error (`?` turns it
/// into a [`crate::PipelineError`]); in a tool it becomes an error result.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum AgentsError {
    /// No orchestrator is attached to this agent.
    #[error("no orchestrator is attached, so '{operation}' cannot reach other agents")]
    Unavailable {
        /// `request`, `send`, `spawn`, `list`, `catalog` or `restart`.
        operation: &'static str,
    },
    /// The target did not answer in time.
    #[error("'{target}' did not answer within {timeout_ms} ms")]
    Timeout {
        /// The target routing key.
        target: String,
        /// The timeout that elapsed.
        timeout_ms: u64,
    },
    /// The request would call an agent already waiting in this chain.
    #[error("request to '{target}' would form a cycle: {}", chain.join(" -> "))]
    Cycle {
        /// The target routing key.
        target: String,
        /// The waiting chain, oldest first.
        chain: Vec<String>,
    },
    /// The target is not an agent of this swarm.
    #[error("'{target}' is not an agent of this swarm")]
    UnknownTarget {
        /// The name asked for.
        target: String,
    },
    /// The target answered with an error.
    #[error("'{target}' failed: {message}")]
    Failed {
        /// The target routing key.
        target: String,
        /// What it reported.
        message: String,
    },
    /// Too many requests of this instance are waiting for answers.
    #[error("{waiting} requests of '{caller}' already wait for answers (limit {limit})")]
    QueueFull {
        /// The calling instance.
        caller: String,
        /// How many wait.
        waiting: usize,
        /// The limit.
        limit: usize,
    },
    /// The request is too large for one IPC message.
    #[error("the request is {bytes} bytes, over the {limit}-byte IPC limit")]
    TooLarge {
        /// Its encoded size.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
    /// The transport to the orchestrator broke.
    #[error("inter-agent transport failed: {message}")]
    Transport {
        /// What happened.
        message: String,
    },
}

impl AgentsError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            AgentsError::Unavailable { .. } => "E_AGENTS_UNAVAILABLE",
            AgentsError::Timeout { .. } => "E_AGENT_REQUEST_TIMEOUT",
            AgentsError::QueueFull { .. } => "E_QUEUE_FULL",
            AgentsError::TooLarge { .. } => "E_IPC_TOO_LARGE",
            AgentsError::Cycle { .. } => "E_AGENT_CYCLE",
            AgentsError::UnknownTarget { .. } => "E_AGENT_UNKNOWN_TARGET",
            AgentsError::Failed { .. } => "E_AGENT_REQUEST_FAILED",
            AgentsError::Transport { .. } => "E_AGENT_TRANSPORT",
        }
    }

    /// How to fix it, when known.
    pub fn suggestion(&self) -> Option<&str> {
        match self {
            AgentsError::Unavailable { .. } => Some("run the agent through `gdn run`"),
            AgentsError::Timeout { .. } => Some("raise timeoutMs or use an async request"),
            AgentsError::Cycle { .. } => {
                Some("send a fire-and-forget event or an async request instead")
            }
            AgentsError::UnknownTarget { .. } => Some("list the swarm's agents with `catalog`"),
            AgentsError::TooLarge { .. } => {
                Some("write large content to a file and pass its path instead")
            }
            AgentsError::QueueFull { .. } => Some(
                "wait for earlier answers, or raise the Swarm's policy.queues.maxPendingRequests",
            ),
            AgentsError::Failed { .. } | AgentsError::Transport { .. } => None,
        }
    }
}

/// The result of one agents API call.
pub type AgentsFuture<'a, T> = BoxFuture<'a, Result<T, AgentsError>>;

/// Calls to other agents of the swarm, routed by the orchestrator.
///
/// `request` blocks until the answer (default timeout
/// [`goondan_types::agents::DEFAULT_REQUEST_TIMEOUT_MS`]) unless
/// `options.async` is set, in which case it returns an ack and the answer
/// is later pushed to the instance's [`AsyncResponseInbox`]. A request that
/// would form a cycle fails with [`AgentsError::Cycle`].
pub trait AgentsApi: Send + Sync {
    /// Sends `event` to `target` and waits for its answer.
    fn request<'a>(
        &'a self,
        target: &'a str,
        event: AgentEvent,
        options: AgentRuntimeRequestOptions,
    ) -> AgentsFuture<'a, AgentRuntimeRequestResult>;

    /// Sends `event` to `target` without waiting.
    fn send<'a>(
        &'a self,
        target: &'a str,
        event: AgentEvent,
    ) -> AgentsFuture<'a, AgentRuntimeSendResult>;

    /// Starts an instance of `target`.
    fn spawn<'a>(
        &'a self,
        target: &'a str,
        options: AgentRuntimeSpawnOptions,
    ) -> AgentsFuture<'a, AgentRuntimeSpawnResult>;

    /// Lists spawned instances.
    fn list(&self, options: AgentRuntimeListOptions) -> AgentsFuture<'_, AgentRuntimeListResult>;

    /// Describes the swarm from the caller's point of view.
    fn catalog(&self) -> AgentsFuture<'_, AgentRuntimeCatalogResult>;

    /// Asks the orchestrator to re-read the bundle and gracefully restart
    /// the whole swarm (`self-restart__request`). It answers once the
    /// re-read bundle is validated; the restart itself waits for the
    /// caller's Turn to commit, so its answer is still delivered. An
    /// invalid bundle fails with the first error's code, and the swarm
    /// runs on unchanged.
    fn restart_swarm(&self, reason: String) -> AgentsFuture<'_, ()>;
}

/// The agents API of an agent with no orchestrator: every call fails with
/// [`AgentsError::Unavailable`], so middleware and tools see a clear error
/// rather than a missing API.
#[derive(Debug, Clone, Copy, Default)]
pub struct DetachedAgents;

impl AgentsApi for DetachedAgents {
    fn request<'a>(
        &'a self,
        _target: &'a str,
        _event: AgentEvent,
        _options: AgentRuntimeRequestOptions,
    ) -> AgentsFuture<'a, AgentRuntimeRequestResult> {
        Box::pin(async {
            Err(AgentsError::Unavailable {
                operation: "request",
            })
        })
    }

    fn send<'a>(
        &'a self,
        _target: &'a str,
        _event: AgentEvent,
    ) -> AgentsFuture<'a, AgentRuntimeSendResult> {
        Box::pin(async { Err(AgentsError::Unavailable { operation: "send" }) })
    }

    fn spawn<'a>(
        &'a self,
        _target: &'a str,
        _options: AgentRuntimeSpawnOptions,
    ) -> AgentsFuture<'a, AgentRuntimeSpawnResult> {
        Box::pin(async { Err(AgentsError::Unavailable { operation: "spawn" }) })
    }

    fn list(&self, _options: AgentRuntimeListOptions) -> AgentsFuture<'_, AgentRuntimeListResult> {
        Box::pin(async { Err(AgentsError::Unavailable { operation: "list" }) })
    }

    fn catalog(&self) -> AgentsFuture<'_, AgentRuntimeCatalogResult> {
        Box::pin(async {
            Err(AgentsError::Unavailable {
                operation: "catalog",
            })
        })
    }

    fn restart_swarm(&self, _reason: String) -> AgentsFuture<'_, ()> {
        Box::pin(async {
            Err(AgentsError::Unavailable {
                operation: "restart",
            })
        })
    }
}

/// An answer to an async request, waiting to be injected.
#[derive(Debug, Clone, PartialEq)]
pub struct InterAgentResponse {
    /// The answer text the model will read.
    pub text: String,
    /// Stored under `metadata.__goondanInterAgentResponse` of the injected
    /// message.
    pub metadata: InterAgentResponseMetadata,
}

/// Where async answers wait until the next Step starts. Cloning shares the
/// same queue: the orchestrator side pushes, the Turn loop drains.
#[derive(Debug, Clone, Default)]
pub struct AsyncResponseInbox {
    queue: Arc<Mutex<VecDeque<InterAgentResponse>>>,
}

impl AsyncResponseInbox {
    /// An empty inbox.
    pub fn new() -> Self {
        AsyncResponseInbox::default()
    }

    /// Queues an answer; it is injected before the next Step of the
    /// current Turn, or at the start of the next Turn.
    pub fn push(&self, response: InterAgentResponse) {
        self.lock().push_back(response);
    }

    /// Takes every queued answer in arrival order.
    pub fn drain(&self) -> Vec<InterAgentResponse> {
        self.lock().drain(..).collect()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<InterAgentResponse>> {
        // The queue is only pushed to and drained; a poisoned lock still
        // holds a consistent queue.
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
