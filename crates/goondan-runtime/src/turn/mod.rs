//! The agent instance and its Turn loop (`runtime.md` §7): assembling an
//! agent from its definition, recovering an interrupted Turn, running one
//! Turn through the `turn` chain, the Step loop inside it, folding and
//! committing the conversation, and the runtime events of it all.
//!
//! The Step itself (model call and tool calls) is in `turn/step.rs`.

pub mod definition;
mod error;
mod redelivery;
mod step;

pub use crate::tool::ToolExportDefinition;
pub use definition::{
    AgentDefinition, AgentServices, ExtensionDefinition, ToolDefinition, DEFAULT_MAX_STEPS_PER_TURN,
};
pub use error::AgentError;
pub use redelivery::{PriorTurn, TOOL_CANCELLED, TOOL_INTERRUPTED};

use crate::agents::{AgentsApi, AsyncResponseInbox};
use crate::conversation::{Conversation, ConversationState, StateGuard};
use crate::error::PipelineError;
use crate::extension::{EntryTarget, EventBus, ExtensionApi, ExtensionStates};
use crate::pipeline::context::StepParts;
use crate::pipeline::{
    Core, LayerResult, Pipeline, PipelineRegistry, RuntimeContext, StepContext, TurnContext,
    TurnInfo,
};
use crate::tool::{ToolExecutor, ToolRegistry};
use futures_util::future::BoxFuture;
use goondan_model::{Model, ModelParams, StreamObserver};
use goondan_store::{CommitContext, ExtensionStateStore, OutboxMessage, StoreError};
use goondan_types::agents::INTER_AGENT_RESPONSE_METADATA_KEY;
use goondan_types::trace::{new_span_id, new_trace_id, random_hex};
use goondan_types::{
    AgentEvent, JsonObject, JsonValue, Message, MessageEvent, MessageSource, ModelMessage,
    RuntimeEvent, RuntimeEventBase, StepResult, TokenUsage, ToolCatalogItem, ToolSource,
    ToolSourceType, TraceContext, TurnError, TurnFinishReason, TurnResult,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use step::{StepCore, StepOutcome};

/// The parts of an agent every Turn reads.
struct AgentCore {
    agent_name: String,
    instance_key: String,
    model: Arc<dyn Model>,
    model_name: String,
    model_params: ModelParams,
    max_steps_per_turn: u32,
    runtime_agent: crate::pipeline::RuntimeAgentContext,
    swarm: crate::pipeline::RuntimeSwarmContext,
    pipeline: Pipeline,
    executor: ToolExecutor,
    agents: Arc<dyn AgentsApi>,
    inbox: AsyncResponseInbox,
    /// Its runtime events' sink and the extensions' event bus.
    events: crate::tool::RuntimeEvents,
    ledger: Option<Arc<crate::ledger::Ledger>>,
    operators: Arc<dyn crate::Operators>,
}

impl AgentCore {
    fn emit(&self, event: RuntimeEvent) {
        self.events.emit(event);
    }

    /// Asks the ledger whether a model call of `trace` may go out; a
    /// refusal by a limit is reported as a `budget.exceeded` event.
    fn admit_model_call(&self, trace: &TraceContext, turn_id: &str) -> Result<(), PipelineError> {
        let Some(ledger) = &self.ledger else {
            return Ok(());
        };
        match ledger.admit(&trace.trace_id) {
            Ok(()) => Ok(()),
            Err(error) => {
                if let crate::ledger::AdmitError::Exceeded(exceeded) = &error {
                    tracing::warn!(code = exceeded.code(), "{exceeded}");
                    self.emit(RuntimeEvent::BudgetExceeded {
                        base: self.event_base(trace),
                        turn_id: turn_id.to_string(),
                        limit: exceeded.limit.field().to_string(),
                        limit_value: exceeded.limit_value,
                        used: exceeded.used,
                        error_message: exceeded.to_string(),
                    });
                }
                Err(PipelineError::Budget(error))
            }
        }
    }

    fn event_base(&self, trace: &TraceContext) -> RuntimeEventBase {
        RuntimeEventBase {
            timestamp: goondan_types::now_iso(),
            agent_name: self.agent_name.clone(),
            instance_key: self.instance_key.clone(),
            trace_id: trace.trace_id.clone(),
            span_id: trace.span_id.clone(),
            parent_span_id: trace.parent_span_id.clone(),
        }
    }
}

/// One running agent instance: its pipeline, tools, conversation and
/// extension state. Turns run one at a time (`&mut self`).
pub struct Agent {
    core: AgentCore,
    conversation: Conversation,
    extension_states: ExtensionStates,
    extension_store: Box<dyn ExtensionStateStore>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("agent_name", &self.core.agent_name)
            .field("instance_key", &self.core.instance_key)
            .field("pipeline", &self.core.pipeline)
            .finish_non_exhaustive()
    }
}

fn milliseconds(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Agent {
    /// Assembles the agent: resolves tool and extension entries through
    /// `services.entries`, restores the conversation (folding and
    /// committing the events of an interrupted Turn) and extension state,
    /// then runs every extension's `register` in `spec.extensions` order.
    ///
    /// Every entry is resolved, in `spec.tools` then `spec.extensions`
    /// order, before the journal is read, so an entry that does not
    /// resolve ([`AgentError::Entry`]) leaves the instance untouched.
    /// An extension whose `register` fails stops the start with
    /// [`AgentError::ExtensionInit`] naming it.
    pub async fn start(
        definition: AgentDefinition,
        services: AgentServices,
    ) -> Result<Agent, AgentError> {
        let AgentServices {
            mut journal,
            mut extension_state,
            entries,
            agents,
            inbox,
            runtime_events,
            ledger,
            operators,
        } = services;

        // One at a time, not joined: a script resolver may start a process
        // per entry, and the first failure in spec order is the one
        // reported.
        let mut tool_handlers = Vec::with_capacity(definition.tools.len());
        for tool in &definition.tools {
            let target = EntryTarget::new(&tool.name, &tool.entry).with_exports(&tool.exports);
            tool_handlers.push(entries.resolve_tool(target).await?);
        }
        let mut implementations = Vec::with_capacity(definition.extensions.len());
        for extension in &definition.extensions {
            let target =
                EntryTarget::new(&extension.name, &extension.entry).with_config(&extension.config);
            implementations.push(entries.resolve_extension(target).await?);
        }

        let tools = ToolRegistry::new();
        for (tool, mut handlers) in definition.tools.iter().zip(tool_handlers) {
            for export in &tool.exports {
                let handler =
                    handlers
                        .remove(&export.name)
                        .ok_or_else(|| AgentError::MissingHandler {
                            tool: tool.name.clone(),
                            export: export.name.clone(),
                        })?;
                let item = ToolCatalogItem {
                    name: format!(
                        "{}{}{}",
                        tool.name,
                        goondan_types::tool::TOOL_NAME_SEPARATOR,
                        export.name
                    ),
                    description: export.description.clone(),
                    parameters: export.parameters.clone(),
                    source: Some(ToolSource::new(ToolSourceType::Config, &tool.name)),
                };
                tools.register_with_limit(
                    item,
                    handler,
                    tool.error_message_limit
                        .unwrap_or(crate::tool::DEFAULT_ERROR_MESSAGE_LIMIT),
                )?;
            }
        }

        let loaded = journal.load()?;
        for warning in &loaded.warnings {
            tracing::warn!(agent = %definition.agent_name, warning, "conversation restored with a warning");
        }
        let conversation = Conversation::new(ConversationState::new(loaded.base), journal);
        if !loaded.pending_events.is_empty() {
            let turn_id = loaded.pending_turn_id.unwrap_or_default();
            tracing::info!(
                agent = %definition.agent_name,
                turn_id,
                events = loaded.pending_events.len(),
                "folding the events of an interrupted turn"
            );
            conversation.replay(&turn_id, loaded.pending_events);
            // The fold of an interrupted Turn: whatever it consumed or
            // answered is not known here (its host decides from the log).
            conversation.commit(&CommitContext::default())?;
        }

        let mut registry = PipelineRegistry::new();
        let event_bus = EventBus::new();
        let mut extension_states = ExtensionStates::default();
        for (extension, implementation) in definition.extensions.iter().zip(implementations) {
            let state = extension_states.restore(&mut *extension_state, &extension.name)?;
            let mut api = ExtensionApi::new(
                &extension.name,
                &mut registry,
                tools.clone(),
                state,
                event_bus.clone(),
            );
            implementation
                .register_async(&mut api, &extension.config)
                .await
                .map_err(|error| AgentError::ExtensionInit {
                    extension: extension.name.clone(),
                    message: error.message,
                })?;
        }

        let executor = ToolExecutor::new(
            tools,
            definition.tool_call_policy,
            definition.workdir,
            Arc::clone(&agents),
        )
        .with_secrets(definition.secrets.clone());
        let secrets = definition.secrets;
        Ok(Agent {
            core: AgentCore {
                agent_name: definition.agent_name,
                instance_key: definition.instance_key,
                model: definition.model,
                model_name: definition.model_name,
                model_params: definition.model_params,
                max_steps_per_turn: definition.max_steps_per_turn,
                runtime_agent: definition.runtime_agent,
                swarm: definition.swarm,
                pipeline: registry.build(),
                executor,
                agents,
                inbox,
                events: crate::tool::RuntimeEvents::new(runtime_events, event_bus, secrets),
                ledger,
                operators,
            },
            conversation,
            extension_states,
            extension_store: extension_state,
        })
    }

    /// The agent's name.
    pub fn agent_name(&self) -> &str {
        &self.core.agent_name
    }

    /// The instance key.
    pub fn instance_key(&self) -> &str {
        &self.core.instance_key
    }

    /// Reads the conversation.
    pub fn conversation(&self) -> StateGuard<'_> {
        self.conversation.state()
    }

    /// The tool registry (config tools and extension tools).
    pub fn tools(&self) -> &ToolRegistry {
        self.core.executor.registry()
    }

    /// The in-process event bus extensions share.
    pub fn event_bus(&self) -> &EventBus {
        self.core.events.bus()
    }

    /// The inbox async answers are pushed to.
    pub fn inbox(&self) -> &AsyncResponseInbox {
        &self.core.inbox
    }

    /// Whether this process still is the only writer of the instance's
    /// conversation: an error means another process (on another host) has
    /// taken it over, and this one must not run a Turn on what it holds.
    pub fn confirm_writer(&self) -> Result<(), goondan_store::StoreError> {
        self.conversation.confirm_writer()
    }

    /// What became of the input event `event_id` if a Turn already
    /// consumed it (see [`PriorTurn`]); `None` when none did. Hosts ask
    /// this for redelivered events only: it reads the conversation from
    /// its end.
    pub fn prior_turn(&self, event_id: &str) -> Option<PriorTurn> {
        redelivery::prior_turn(&self.conversation.state().next_messages(), event_id)
    }

    /// Runs one Turn for `event`, reporting model text deltas to
    /// `observer`.
    ///
    /// On success the Turn's events are folded into the base and committed
    /// after the whole `turn` chain has returned. On failure the events
    /// stay pending in the journal (nothing emitted is lost), `turn.failed`
    /// is emitted, and the result has `finishReason: error`; the pending
    /// events are folded before the next Turn starts.
    pub async fn run_turn(
        &mut self,
        event: AgentEvent,
        observer: &dyn StreamObserver,
    ) -> TurnResult {
        self.run_turn_answering_early(
            event,
            observer,
            std::future::pending(),
            async |_: &TurnResult| Vec::new(),
        )
        .await
    }

    /// As [`Agent::run_turn`], calling `answer` with the Turn's result as
    /// soon as the `turn` chain has returned and before the fold is
    /// committed, so a host can send the answer without waiting for the
    /// disk. The answer is already recoverable then: every event is in the
    /// journal, and a crash before the commit folds them on the next start.
    /// What `answer` returns (the answers it sent) is committed with the
    /// Turn as its outbox, beside the event's `inbox_seq`
    /// ([`goondan_store::CommitContext`]).
    /// If the commit itself fails afterwards, the returned result (not the
    /// one answered) reports the failure and the events stay pending.
    ///
    /// When `cancelled` resolves while the Steps run, they are dropped
    /// where they stand (a running model call or tool call with them: a
    /// bash command's process group is killed, a plugin call given up),
    /// every tool call left without a result gets one saying the Turn was
    /// cancelled and by whom (`E_TOOL_CANCELLED`), and the `turn` chain's
    /// `next()` returns `E_TURN_CANCELLED`: each turn middleware's code
    /// after `next()` still runs, with that result, and may emit events
    /// (`001` §11.4; it runs to its end). When it resolves before the
    /// chain reached the Steps (a middleware still before its `next()`),
    /// the chain is dropped where it stands. Either way the Turn fails
    /// with `E_TURN_CANCELLED` unless a middleware answered otherwise,
    /// nothing it stored is undone, and it is committed as it stands, so
    /// the conversation is whole for every provider at once.
    /// `turn.failed` names who cancelled it (`cancelledBy`).
    pub async fn run_turn_answering_early(
        &mut self,
        event: AgentEvent,
        observer: &dyn StreamObserver,
        cancelled: impl std::future::Future<Output = Cancellation>,
        answer: impl AsyncFnOnce(&TurnResult) -> Vec<OutboxMessage>,
    ) -> TurnResult {
        let turn_id = format!("turn_{}", random_hex(12));
        let inbox_seq = event.inbox_seq;
        let started = Instant::now();
        let trace = TraceContext {
            trace_id: event
                .trace_id
                .clone()
                .filter(|id| !id.is_empty())
                .unwrap_or_else(new_trace_id),
            span_id: new_span_id(),
            parent_span_id: event.parent_span_id.clone(),
        };
        self.core.emit(RuntimeEvent::TurnStarted {
            base: self.core.event_base(&trace),
            turn_id: turn_id.clone(),
            source: Some(event.source.clone()),
        });
        let mut answer = Some(answer);
        let mut cancelled_by = None;
        let cancel = TurnCancel::default();
        let mut outcome = {
            let inner =
                std::pin::pin!(self.run_turn_inner(&turn_id, &trace, event, observer, &cancel));
            match futures_util::future::select(inner, std::pin::pin!(cancelled)).await {
                futures_util::future::Either::Left((outcome, _)) => outcome,
                futures_util::future::Either::Right((cancellation, inner)) => {
                    cancelled_by = cancellation.by.clone();
                    if cancel.steps_began.load(Ordering::Acquire) {
                        // The Steps stop; the turn middlewares' code after
                        // `next()` runs on (001 §11.4).
                        cancel.fire(cancellation);
                        inner.await
                    } else {
                        Err(PipelineError::Cancelled {
                            by: cancellation.by,
                        })
                    }
                }
            }
        };
        if let Err(PipelineError::Cancelled { by }) = &outcome {
            if let Err(error) = self.close_cancelled_turn(by.clone()) {
                tracing::error!(turn_id, code = error.code(), %error, "could not close the cancelled turn; the next turn closes it");
            }
        }
        if let Ok((result, _)) = &outcome {
            let outbox = match answer.take() {
                Some(answer) => answer(result).await,
                None => Vec::new(),
            };
            let context = CommitContext { inbox_seq, outbox };
            if let Err(error) = self.conversation.commit(&context) {
                outcome = Err(PipelineError::from(error));
            }
        }
        let flushed = self
            .extension_states
            .flush(&mut *self.extension_store)
            .and_then(|_| self.extension_store.end_turn(&turn_id));
        if let Err(error) = flushed {
            tracing::error!(code = error.code(), %error, "could not write extension state");
        }
        match outcome {
            Ok((result, stats)) => {
                self.core.emit(RuntimeEvent::TurnCompleted {
                    base: self.core.event_base(&trace),
                    turn_id,
                    step_count: stats.step_count,
                    duration: milliseconds(started),
                    token_usage: Some(stats.token_usage),
                    cost_usd: stats.cost_usd,
                });
                result
            }
            Err(error) => {
                if cancelled_by.is_some() || matches!(error, PipelineError::Cancelled { .. }) {
                    tracing::info!(turn_id, by = ?cancelled_by, "turn cancelled; closed and committed as it stood");
                } else {
                    tracing::warn!(turn_id, code = error.code(), %error, "turn failed; its events stay pending");
                }
                self.core.emit(RuntimeEvent::TurnFailed {
                    base: self.core.event_base(&trace),
                    turn_id: turn_id.clone(),
                    duration: milliseconds(started),
                    error_message: error.to_string(),
                    cancelled_by,
                });
                let result = TurnResult {
                    turn_id,
                    response_message: None,
                    finish_reason: TurnFinishReason::Error,
                    error: Some(TurnError {
                        message: error.to_string(),
                        code: Some(error.code().to_string()),
                        suggestion: error.suggestion().map(str::to_string),
                    }),
                };
                // A failed Turn commits nothing, so its answer is in no
                // outbox: the answer sent here is the only copy.
                if let Some(answer) = answer.take() {
                    answer(&result).await;
                }
                result
            }
        }
    }

    /// Ends a Turn whose chain was dropped by a cancel: every tool call it
    /// left without a result gets one saying so, and its events are
    /// committed (a recovered fold's context: the cancel is not an answer
    /// a cluster host should send again). Nothing is recorded when the
    /// Turn recorded nothing: the chain starts recording without an
    /// `await` in between (`begin_turn`, then the input), so a cancel can
    /// only win once the Turn's own events are the pending ones.
    fn close_cancelled_turn(&self, by: Option<String>) -> Result<(), StoreError> {
        if self.conversation.state().events().is_empty() {
            return Ok(());
        }
        let closing = redelivery::close_last_turn(
            &self.conversation.state().next_messages(),
            &redelivery::Closing::Cancelled { by },
        );
        for message in closing {
            self.conversation.emit(MessageEvent::Append { message })?;
        }
        self.conversation.commit(&CommitContext::default())
    }

    async fn run_turn_inner(
        &mut self,
        turn_id: &str,
        trace: &TraceContext,
        event: AgentEvent,
        observer: &dyn StreamObserver,
        cancel: &TurnCancel,
    ) -> Result<(TurnResult, TurnStats), PipelineError> {
        // Events a failed Turn left pending are folded first, exactly as
        // recovery after a crash does.
        if !self.conversation.state().events().is_empty() {
            self.conversation.commit(&CommitContext::default())?;
        }
        // A budget already reached refuses the Turn before its input is
        // recorded, so a refused input leaves the conversation as it was.
        self.core.admit_model_call(trace, turn_id)?;
        self.conversation.begin_turn(turn_id);
        let runtime = RuntimeContext::for_event(
            self.core.runtime_agent.clone(),
            self.core.swarm.clone(),
            &event,
        );
        let info = Arc::new(TurnInfo {
            agent_name: self.core.agent_name.clone(),
            instance_key: self.core.instance_key.clone(),
            turn_id: turn_id.to_string(),
            trace: trace.clone(),
            input_event: event,
            runtime,
            operators: Arc::clone(&self.core.operators),
            events: self.core.events.clone(),
        });
        let mut ctx = TurnContext::new(
            info,
            Arc::clone(&self.core.agents),
            self.conversation.clone(),
        );
        let turn_core = TurnCore {
            agent: &self.core,
            observer,
            stats: Mutex::new(TurnStats::default()),
            cancel,
        };
        let result = self.core.pipeline.run(&mut ctx, &turn_core).await?;
        let stats = turn_core
            .stats
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok((result, stats))
    }
}

/// What stopped a cancelled Turn, as [`Agent::run_turn_answering_early`]'s
/// `cancelled` future says when it resolves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cancellation {
    /// Who cancelled it, when a person did (`cli` for `gdn instance
    /// cancel`); `None` when its requester gave up.
    pub by: Option<String>,
}

/// Counters of one Turn for `turn.completed`.
#[derive(Debug, Default, Clone, Copy)]
struct TurnStats {
    step_count: u32,
    token_usage: TokenUsage,
    /// Summed over priced calls; `None` when no call was priced.
    cost_usd: Option<f64>,
}

/// How a cancel reaches the core of a running `turn` chain. Only the
/// core waits for it, so one waker is enough.
#[derive(Default)]
struct TurnCancel {
    /// Set once, when the Turn is cancelled while its Steps run.
    cancellation: Mutex<Option<Cancellation>>,
    waker: futures_util::task::AtomicWaker,
    /// Raised when the chain reaches its core: from then on a cancel stops
    /// the Steps and lets the chain return instead of dropping it.
    steps_began: AtomicBool,
}

impl TurnCancel {
    /// Cancels the Steps.
    fn fire(&self, cancellation: Cancellation) {
        *self
            .cancellation
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(cancellation);
        self.waker.wake();
    }

    /// Resolves when the Turn is cancelled; never when it is not.
    fn cancelled(&self) -> impl std::future::Future<Output = Cancellation> + Send + '_ {
        futures_util::future::poll_fn(move |cx| {
            // Registered before the check, so a cancel between the two
            // still wakes this task.
            self.waker.register(cx.waker());
            match self
                .cancellation
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone()
            {
                Some(cancellation) => std::task::Poll::Ready(cancellation),
                None => std::task::Poll::Pending,
            }
        })
    }
}

/// The core of the `turn` chain: the user message, then the Step loop.
struct TurnCore<'a> {
    agent: &'a AgentCore,
    observer: &'a dyn StreamObserver,
    stats: Mutex<TurnStats>,
    cancel: &'a TurnCancel,
}

impl TurnCore<'_> {
    fn record(&self, usage: Option<TokenUsage>, cost_usd: Option<f64>) {
        let mut stats = self
            .stats
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        stats.step_count += 1;
        if let Some(usage) = usage {
            stats.token_usage += usage;
        }
        if let Some(cost_usd) = cost_usd {
            *stats.cost_usd.get_or_insert(0.0) += cost_usd;
        }
    }

    fn input_message(event: &AgentEvent, turn_id: &str) -> Message {
        let mut message = Message::new(
            ModelMessage::user(event.input.clone().unwrap_or_default()),
            MessageSource::User,
        );
        let metadata = &mut message.metadata;
        metadata.insert(redelivery::INBOUND_MARK.into(), JsonValue::Bool(true));
        metadata.insert("eventId".into(), JsonValue::String(event.id.clone()));
        // The Turn that consumed the input: how a reader of the log (`gdn
        // instance history`, fork, rewind) names the Turn it starts and
        // joins its runtime events and extension state snapshots.
        metadata.insert("turnId".into(), JsonValue::String(turn_id.to_string()));
        metadata.insert(
            "sourceKind".into(),
            serde_json::to_value(event.source.kind).unwrap_or(JsonValue::Null),
        );
        metadata.insert(
            "sourceName".into(),
            JsonValue::String(event.source.name.clone()),
        );
        if let Some(trace_id) = &event.trace_id {
            metadata.insert("traceId".into(), JsonValue::String(trace_id.clone()));
        }
        message
    }

    /// The conversation a client replayed before this input
    /// (`priorMessages` in the input's metadata: model messages, as `gdn
    /// serve` passes an OpenAI client's earlier messages), when the
    /// instance holds none yet. An instance with a history of its own
    /// keeps it: a replay there is left out with a warning, never mixed
    /// in.
    fn prior_messages(ctx: &TurnContext) -> Vec<Message> {
        let event = ctx.input_event();
        let Some(prior) = event.metadata_value(goondan_types::PRIOR_MESSAGES_KEY) else {
            return Vec::new();
        };
        // System messages are not a history: an extension such as
        // `context-message` puts the agent's prompt in before this runs,
        // in a fresh instance too.
        let holds_history = ctx
            .conversation()
            .state()
            .next_messages()
            .iter()
            .any(|message| !matches!(message.data, ModelMessage::System { .. }));
        if holds_history {
            tracing::warn!(event_id = %event.id, "the input replays a conversation into an instance that has one; the replay is left out");
            return Vec::new();
        }
        let Ok(prior) = serde_json::from_value::<Vec<ModelMessage>>(prior.clone()) else {
            tracing::warn!(event_id = %event.id, "`priorMessages` of the input are not model messages; left out");
            return Vec::new();
        };
        prior
            .into_iter()
            .map(|data| {
                let source = if matches!(data, ModelMessage::User { .. }) {
                    MessageSource::User
                } else {
                    MessageSource::System
                };
                let mut message = Message::new(data, source);
                message.metadata.insert(
                    "replayedBy".into(),
                    JsonValue::String(event.source.name.clone()),
                );
                message
            })
            .collect()
    }

    /// Appends every queued async answer as a user message.
    fn inject_async_answers(&self, ctx: &TurnContext) -> Result<(), PipelineError> {
        for answer in self.agent.inbox.drain() {
            let mut message = Message::new(ModelMessage::user(answer.text), MessageSource::System);
            let mut metadata = JsonObject::new();
            metadata.insert(
                INTER_AGENT_RESPONSE_METADATA_KEY.into(),
                serde_json::to_value(&answer.metadata).unwrap_or(JsonValue::Null),
            );
            if let Some(trace_id) = &answer.metadata.trace_id {
                metadata.insert("traceId".into(), JsonValue::String(trace_id.clone()));
            }
            message.metadata = metadata;
            ctx.emit_message_event(MessageEvent::Append { message })?;
        }
        Ok(())
    }

    /// Resumes a Turn that was cut short while a call waited for a
    /// person: when the first unanswered call of its last model answer is
    /// one an open question gates ([`crate::Operators::holds`]), that call
    /// never ran, nor did the calls after it (a Step runs its calls in
    /// order), so they run now, through the `toolCall` chain, where the
    /// gate finds its question again. False when the Turn did not stop at
    /// such a call (its unanswered calls are closed as interrupted then).
    async fn resume_waiting_calls(&self, ctx: &TurnContext) -> Result<bool, PipelineError> {
        let agent = self.agent;
        let waiting = {
            let state = ctx.conversation().state();
            let messages = state.next_messages();
            redelivery::unanswered_calls_of_last_answer(&messages)
        };
        let Some((message, calls)) = waiting else {
            return Ok(false);
        };
        if !calls
            .first()
            .is_some_and(|call| agent.operators.holds(&call.id))
        {
            return Ok(false);
        }
        let step_id = match &message.source {
            MessageSource::Assistant { step_id } => step_id.clone(),
            _ => format!("step_{}", random_hex(8)),
        };
        tracing::info!(
            turn_id = ctx.turn_id(),
            calls = calls.len(),
            "resuming the Turn at a call that waited for a person"
        );
        let step_ctx = StepContext::new(StepParts {
            info: ctx.info_handle(),
            agents: Arc::clone(&agent.agents),
            conversation: ctx.conversation().clone(),
            step_index: 0,
            step_id,
            trace: ctx.trace().child(),
            previous_steps: Arc::from([]),
            tool_catalog: agent.executor.registry().catalog(),
        });
        let message = Arc::new(message);
        step::run_tool_calls(agent, &step_ctx, &message, &calls, &[]).await?;
        Ok(true)
    }

    async fn step_loop(&self, ctx: &mut TurnContext) -> LayerResult<TurnContext> {
        let input = ctx.input_event();
        // A redelivered input whose Turn was cut short resumes that Turn:
        // its user message is already recorded, and the calls it left
        // unanswered are closed first.
        let resumed = input
            .redelivered
            .then(|| redelivery::prior_turn(&ctx.conversation().state().next_messages(), &input.id))
            .flatten();
        match resumed {
            Some(PriorTurn::Interrupted { dangling }) => {
                if !self.resume_waiting_calls(ctx).await? {
                    for message in dangling {
                        ctx.emit_message_event(MessageEvent::Append { message })?;
                    }
                }
            }
            _ => {
                // A Turn cut short whose input was not redelivered (the
                // orchestrator died too, or gave it up) left its calls
                // open; close them before the new input.
                let closing = redelivery::close_last_turn(
                    &ctx.conversation().state().next_messages(),
                    &redelivery::Closing::Interrupted,
                );
                for message in closing {
                    ctx.emit_message_event(MessageEvent::Append { message })?;
                }
                for message in Self::prior_messages(ctx) {
                    ctx.emit_message_event(MessageEvent::Append { message })?;
                }
                ctx.emit_message_event(MessageEvent::Append {
                    message: Self::input_message(ctx.input_event(), ctx.turn_id()),
                })?
            }
        }
        let agent = self.agent;
        let mut previous_steps: Vec<StepResult> = Vec::new();
        let mut response_message = None;
        let mut step_index: u32 = 0;
        let finish_reason = loop {
            if step_index >= agent.max_steps_per_turn {
                break TurnFinishReason::MaxSteps;
            }
            self.inject_async_answers(ctx)?;
            let step_id = format!("step_{}", random_hex(8));
            let step_trace = ctx.trace().child();
            let mut step_ctx = StepContext::new(StepParts {
                info: ctx.info_handle(),
                agents: Arc::clone(&agent.agents),
                conversation: ctx.conversation().clone(),
                step_index,
                step_id: step_id.clone(),
                trace: step_trace.clone(),
                previous_steps: previous_steps.clone().into(),
                tool_catalog: agent.executor.registry().catalog(),
            });
            agent.emit(RuntimeEvent::StepStarted {
                base: agent.event_base(&step_trace),
                step_id: step_id.clone(),
                step_index,
                turn_id: ctx.turn_id().to_string(),
                llm_input_messages: agent.events.sink().wants_llm_input().then(|| {
                    crate::events::llm_input_messages(
                        &ctx.conversation_state().to_llm_messages(),
                        agent.events.secrets(),
                    )
                }),
            });
            let started = Instant::now();
            let step_core = StepCore {
                agent,
                observer: self.observer,
                outcome: Mutex::new(StepOutcome::default()),
            };
            let result = agent.pipeline.run(&mut step_ctx, &step_core).await;
            let outcome = step_core
                .outcome
                .into_inner()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let result = match result {
                Ok(result) => result,
                Err(error) => {
                    agent.emit(RuntimeEvent::StepFailed {
                        base: agent.event_base(&step_trace),
                        step_id,
                        step_index,
                        turn_id: ctx.turn_id().to_string(),
                        duration: milliseconds(started),
                        error_message: error.to_string(),
                    });
                    return Err(error);
                }
            };
            let cost_usd = outcome
                .recorded
                .as_ref()
                .and_then(|recorded| recorded.cost_usd);
            self.record(outcome.usage, cost_usd);
            agent.emit(RuntimeEvent::StepCompleted {
                base: agent.event_base(&step_trace),
                step_id,
                step_index,
                turn_id: ctx.turn_id().to_string(),
                tool_call_count: u32::try_from(result.tool_calls.len()).unwrap_or(u32::MAX),
                duration: milliseconds(started),
                token_usage: outcome.usage,
                model: outcome.recorded.map(|recorded| recorded.model),
                cost_usd,
            });
            if outcome.assistant_message.is_some() {
                response_message = outcome.assistant_message;
            }
            let should_continue = result.should_continue;
            previous_steps.push(result);
            step_index += 1;
            if !should_continue {
                break TurnFinishReason::TextResponse;
            }
        };
        Ok(TurnResult {
            turn_id: ctx.turn_id().to_string(),
            response_message: response_message.map(|message| (*message).clone()),
            finish_reason,
            error: None,
        })
    }
}

impl TurnCore<'_> {
    /// The Step loop until it ends or the Turn is cancelled. A cancel
    /// drops the loop where it stands and closes every tool call it left
    /// without a result before the turn middlewares see `E_TURN_CANCELLED`,
    /// so what they emit after `next()` follows a whole conversation.
    async fn steps_until_cancelled(&self, ctx: &mut TurnContext) -> LayerResult<TurnContext> {
        self.cancel.steps_began.store(true, Ordering::Release);
        let steps = Box::pin(self.step_loop(ctx));
        let cancelled = Box::pin(self.cancel.cancelled());
        let cancellation = match futures_util::future::select(steps, cancelled).await {
            futures_util::future::Either::Left((result, _)) => return result,
            futures_util::future::Either::Right((cancellation, steps)) => {
                drop(steps);
                cancellation
            }
        };
        let closing = redelivery::close_last_turn(
            &ctx.conversation().state().next_messages(),
            &redelivery::Closing::Cancelled {
                by: cancellation.by.clone(),
            },
        );
        for message in closing {
            ctx.emit_message_event(MessageEvent::Append { message })?;
        }
        Err(PipelineError::Cancelled {
            by: cancellation.by,
        })
    }
}

impl Core<TurnContext> for TurnCore<'_> {
    fn run<'a>(&'a self, ctx: &'a mut TurnContext) -> BoxFuture<'a, LayerResult<TurnContext>> {
        Box::pin(self.steps_until_cancelled(ctx))
    }
}
