//! What each middleware kind sees (seed 000 §3, §4): the Turn, Step and
//! ToolCall contexts, and the runtime context extensions read to build
//! prompts (`ctx.runtime.*`).
//!
//! Readonly fields are methods; the fields a layer may change
//! (`metadata`, `tool_catalog`, `args`) are public. Every context of one
//! Turn shares the same [`Conversation`], so an event emitted anywhere is
//! seen everywhere at once.

use crate::agents::AgentsApi;
use crate::conversation::{Conversation, StateGuard};
use crate::error::PipelineError;
use goondan_types::{
    AgentEvent, EventSourceKind, JsonObject, Message, MessageEvent, ReplyChannel, StepResult,
    ToolCatalogItem, TraceContext,
};
use serde::Serialize;
use std::sync::Arc;

/// The materialized prompt of the agent (`systemRef` already read).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RuntimePrompt {
    /// The system prompt text, if the agent declares one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
}

/// `runtime.agent`: the running agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeAgentContext {
    /// The agent's name.
    pub name: String,
    /// The bundle root, when the agent came from one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundle_root: Option<String>,
    /// The prompt; the core never injects it, an extension may.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<RuntimePrompt>,
}

/// `runtime.swarm`: the swarm the agent belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSwarmContext {
    /// The swarm's name.
    pub swarm_name: String,
    /// Its entry agent.
    pub entry_agent: String,
    /// This agent.
    pub self_agent: String,
    /// Every agent, sorted.
    pub available_agents: Vec<String>,
    /// Every agent but this one, sorted.
    pub callable_agents: Vec<String>,
}

/// `runtime.inbound`: the event that started the Turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeInboundContext {
    /// The event id.
    pub event_id: String,
    /// The event type.
    pub event_type: String,
    /// `agent` or `connector`.
    pub source_kind: EventSourceKind,
    /// The sender's name.
    pub source_name: String,
    /// ISO 8601 creation time.
    pub created_at: String,
    /// The instance key the event named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_key: Option<String>,
    /// The event's metadata.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_metadata: Option<JsonObject>,
}

/// `runtime.call`: who called, when the Turn answers another agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeCallContext {
    /// The calling agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller_agent: Option<String>,
    /// Its instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller_instance_key: Option<String>,
    /// Its Turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller_turn_id: Option<String>,
    /// How it called (for example `tool` or `middleware`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_source: Option<String>,
    /// The chain of waiting callers, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub call_stack: Vec<String>,
    /// Where the answer goes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<ReplyChannel>,
}

/// `ctx.runtime`: facts about the run an extension may turn into messages.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuntimeContext {
    /// The agent.
    pub agent: RuntimeAgentContext,
    /// The swarm.
    pub swarm: RuntimeSwarmContext,
    /// The input event.
    pub inbound: RuntimeInboundContext,
    /// The caller, for inter-agent Turns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call: Option<RuntimeCallContext>,
}

impl RuntimeContext {
    /// Builds the inbound and call parts from the input event.
    pub fn for_event(
        agent: RuntimeAgentContext,
        swarm: RuntimeSwarmContext,
        event: &AgentEvent,
    ) -> Self {
        let inbound = RuntimeInboundContext {
            event_id: event.id.clone(),
            event_type: event.event_type.clone(),
            source_kind: event.source.kind,
            source_name: event.source.name.clone(),
            created_at: event.created_at.clone(),
            instance_key: event.instance_key.clone().filter(|key| !key.is_empty()),
            event_metadata: event
                .metadata
                .clone()
                .filter(|metadata| !metadata.is_empty()),
        };
        let text = |key: &str| {
            event
                .metadata_value(key)
                .and_then(|value| value.as_str())
                .filter(|text| !text.is_empty())
                .map(str::to_string)
        };
        let call = RuntimeCallContext {
            caller_agent: text("callerAgent"),
            caller_instance_key: text("callerInstanceKey"),
            caller_turn_id: text("callerTurnId"),
            call_source: text("callSource"),
            call_stack: event.call_chain.clone(),
            reply_to: event.reply_to.clone(),
        };
        let call = (call != RuntimeCallContext::default()).then_some(call);
        RuntimeContext {
            agent,
            swarm,
            inbound,
            call,
        }
    }
}

/// The readonly facts of one Turn, shared by every context in it.
#[derive(Debug, Clone)]
pub struct TurnInfo {
    /// The agent.
    pub agent_name: String,
    /// Its instance.
    pub instance_key: String,
    /// The Turn.
    pub turn_id: String,
    /// The Turn's span: `trace_id` kept from the input, a new `span_id`,
    /// `parent_span_id` from `inputEvent.parentSpanId`.
    pub trace: TraceContext,
    /// The input event.
    pub input_event: AgentEvent,
    /// `ctx.runtime`.
    pub runtime: RuntimeContext,
    /// The people a middleware can ask (see [`crate::operator`]).
    pub operators: Arc<dyn crate::Operators>,
    /// Where the agent's runtime events go (a tool call's progress
    /// reports among them).
    pub events: crate::events::RuntimeEvents,
}

/// The context of a `turn` middleware.
pub struct TurnContext {
    info: Arc<TurnInfo>,
    agents: Arc<dyn AgentsApi>,
    conversation: Conversation,
    /// Shared by the `turn` layers of this Turn.
    pub metadata: JsonObject,
}

/// The context of a `step` middleware.
pub struct StepContext {
    info: Arc<TurnInfo>,
    agents: Arc<dyn AgentsApi>,
    conversation: Conversation,
    step_index: u32,
    step_id: String,
    trace: TraceContext,
    previous_steps: Arc<[StepResult]>,
    /// The tools the model receives in this step, exactly as the layers
    /// leave it before `next`.
    pub tool_catalog: Vec<ToolCatalogItem>,
    /// Shared by the `step` layers of this Step.
    pub metadata: JsonObject,
}

/// The context of a `toolCall` middleware. It has no agents API by design
/// (seed 000 §4.4), so this does not compile:
///
/// ```compile_fail,E0599
/// use goondan_runtime::pipeline::{MiddlewareOptions, PipelineRegistry};
/// let mut registry = PipelineRegistry::new();
/// registry.tool_call(
///     |ctx, next| {
///         Box::pin(async move {
///             let _ = ctx.agents();
///             next.run(ctx).await
///         })
///     },
///     MiddlewareOptions::default(),
/// );
/// ```
pub struct ToolCallContext {
    info: Arc<TurnInfo>,
    step_index: u32,
    step_id: String,
    tool_name: String,
    tool_call_id: String,
    trace: TraceContext,
    message: Arc<Message>,
    /// The arguments the handler receives, exactly as the layers leave them
    /// before `next`.
    pub args: JsonObject,
    /// Shared by the `toolCall` layers of this call.
    pub metadata: JsonObject,
}

macro_rules! execution_accessors {
    () => {
        /// The agent's name.
        pub fn agent_name(&self) -> &str {
            &self.info.agent_name
        }

        /// The instance key.
        pub fn instance_key(&self) -> &str {
            &self.info.instance_key
        }

        /// The Turn's id.
        pub fn turn_id(&self) -> &str {
            &self.info.turn_id
        }

        /// The trace id, kept along the whole inter-agent chain.
        pub fn trace_id(&self) -> &str {
            &self.info.trace.trace_id
        }

        /// The Turn's facts (input event, runtime context, trace).
        pub fn turn(&self) -> &TurnInfo {
            &self.info
        }

        /// Asks a person and waits for the decision (see
        /// [`crate::operator`]); the question is recorded for this Turn
        /// and its input.
        pub fn ask_person(
            &self,
            question: crate::Question,
        ) -> futures_util::future::BoxFuture<
            'static,
            Result<goondan_types::ApprovalDecision, crate::AskError>,
        > {
            self.info
                .operators
                .ask(&self.info.turn_id, &self.info.input_event.id, question)
        }

        /// Closes the question `key`: the Turn acts on its decision now
        /// (see [`crate::Operators::settle`]).
        pub fn settle_question(&self, key: &str) -> Result<(), crate::AskError> {
            self.info.operators.settle(key)
        }

        /// `ctx.runtime`.
        pub fn runtime(&self) -> &RuntimeContext {
            &self.info.runtime
        }
    };
}

macro_rules! conversation_accessors {
    () => {
        /// The agents API (`request`, `send`, ...).
        pub fn agents(&self) -> &dyn AgentsApi {
            &*self.agents
        }

        /// A shared handle on the agents API, to keep beyond this call.
        pub fn agents_handle(&self) -> Arc<dyn AgentsApi> {
            Arc::clone(&self.agents)
        }

        /// Reads the conversation state. Drop the guard before awaiting
        /// (the compiler insists). Emitting while it is alive is fine: the
        /// event is recorded and applied when the last guard drops.
        pub fn conversation_state(&self) -> StateGuard<'_> {
            self.conversation.state()
        }

        /// Records `event` and applies it to the conversation; it is part of
        /// this Turn's `SUM(events)` from now on.
        pub fn emit_message_event(&self, event: MessageEvent) -> Result<(), PipelineError> {
            Ok(self.conversation.emit(event)?)
        }
    };
}

impl TurnContext {
    pub(crate) fn new(
        info: Arc<TurnInfo>,
        agents: Arc<dyn AgentsApi>,
        conversation: Conversation,
    ) -> Self {
        TurnContext {
            info,
            agents,
            conversation,
            metadata: JsonObject::new(),
        }
    }

    execution_accessors!();
    conversation_accessors!();

    /// The event that started this Turn.
    pub fn input_event(&self) -> &AgentEvent {
        &self.info.input_event
    }

    /// The Turn's trace context.
    pub fn trace(&self) -> &TraceContext {
        &self.info.trace
    }

    pub(crate) fn info_handle(&self) -> Arc<TurnInfo> {
        Arc::clone(&self.info)
    }

    pub(crate) fn conversation(&self) -> &Conversation {
        &self.conversation
    }
}

/// Everything a [`StepContext`] is made from.
pub(crate) struct StepParts {
    pub(crate) info: Arc<TurnInfo>,
    pub(crate) agents: Arc<dyn AgentsApi>,
    pub(crate) conversation: Conversation,
    pub(crate) step_index: u32,
    pub(crate) step_id: String,
    pub(crate) trace: TraceContext,
    pub(crate) previous_steps: Arc<[StepResult]>,
    pub(crate) tool_catalog: Vec<ToolCatalogItem>,
}

impl StepContext {
    pub(crate) fn new(parts: StepParts) -> Self {
        StepContext {
            info: parts.info,
            agents: parts.agents,
            conversation: parts.conversation,
            step_index: parts.step_index,
            step_id: parts.step_id,
            trace: parts.trace,
            previous_steps: parts.previous_steps,
            tool_catalog: parts.tool_catalog,
            metadata: JsonObject::new(),
        }
    }

    execution_accessors!();
    conversation_accessors!();

    /// The zero-based index of this Step in the Turn.
    pub fn step_index(&self) -> u32 {
        self.step_index
    }

    /// The Step's id.
    pub fn step_id(&self) -> &str {
        &self.step_id
    }

    /// The Step's span (parent: the Turn's span).
    pub fn trace(&self) -> &TraceContext {
        &self.trace
    }

    /// The results of the Steps before this one in the Turn.
    pub fn previous_steps(&self) -> &[StepResult] {
        &self.previous_steps
    }

    pub(crate) fn turn_info_handle(&self) -> &Arc<TurnInfo> {
        &self.info
    }
}

/// Everything a [`ToolCallContext`] is made from.
pub(crate) struct ToolCallParts {
    pub(crate) info: Arc<TurnInfo>,
    pub(crate) step_index: u32,
    pub(crate) step_id: String,
    pub(crate) tool_name: String,
    pub(crate) tool_call_id: String,
    pub(crate) trace: TraceContext,
    pub(crate) message: Arc<Message>,
    pub(crate) args: JsonObject,
}

impl ToolCallContext {
    pub(crate) fn new(parts: ToolCallParts) -> Self {
        ToolCallContext {
            info: parts.info,
            step_index: parts.step_index,
            step_id: parts.step_id,
            tool_name: parts.tool_name,
            tool_call_id: parts.tool_call_id,
            trace: parts.trace,
            message: parts.message,
            args: parts.args,
            metadata: JsonObject::new(),
        }
    }

    execution_accessors!();

    /// The Turn's facts, shared (a call's progress reports carry them).
    pub(crate) fn turn_handle(&self) -> Arc<TurnInfo> {
        Arc::clone(&self.info)
    }

    /// The index of the Step this call belongs to.
    pub fn step_index(&self) -> u32 {
        self.step_index
    }

    /// The Step's id.
    pub fn step_id(&self) -> &str {
        &self.step_id
    }

    /// The called tool (`resource__export`).
    pub fn tool_name(&self) -> &str {
        &self.tool_name
    }

    /// The call id.
    pub fn tool_call_id(&self) -> &str {
        &self.tool_call_id
    }

    /// The call's span (parent: the Step's span).
    pub fn trace(&self) -> &TraceContext {
        &self.trace
    }

    /// The assistant message holding this call.
    pub fn message(&self) -> &Arc<Message> {
        &self.message
    }
}

impl std::fmt::Debug for TurnContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnContext")
            .field("turn_id", &self.info.turn_id)
            .field("metadata", &self.metadata)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for StepContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepContext")
            .field("turn_id", &self.info.turn_id)
            .field("step_index", &self.step_index)
            .field("tool_catalog", &self.tool_catalog.len())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ToolCallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolCallContext")
            .field("tool_name", &self.tool_name)
            .field("tool_call_id", &self.tool_call_id)
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}
