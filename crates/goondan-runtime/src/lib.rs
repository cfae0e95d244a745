//! The Goondan execution core: the three onion middlewares, the Turn/Step
//! loop, tools, extensions and the agents API (seeds 000 to 003).
//!
//! Where to start:
//!
//! * [`pipeline`]: `turn ⊃ step ⊃ toolCall`, priorities and the `next`
//!   contract.
//! * [`conversation`]: `NextMessages = BaseMessages + SUM(Events)`.
//! * [`tool`]: handlers, the registry, the catalog check and error results.
//! * [`extension`]: `register(api, config)`, the builtin catalog and the
//!   [`EntryResolver`] seam through which entries become code.
//! * [`agents`]: calls to other agents and the async answer inbox.
//! * [`events`]: where the nine runtime events go.
//! * [`turn`]: [`Agent::start`] assembles an instance (entries, recovery,
//!   extension `register`s); [`Agent::run_turn`] runs one Turn.
//! * `test_support` (feature `test-support`): a scripted model and a
//!   recording journal for tests and benchmarks.
//!
//! The orchestrator and IPC live beside these modules and use them; none
//! of these modules knows about processes or pipes.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod agents;
pub mod conversation;
pub mod error;
pub mod event_bus;
pub mod events;
pub mod extension;
pub mod ledger;
pub mod operator;
pub mod pipeline;
pub mod tool;
pub mod turn;

#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

pub use agents::{AgentsApi, AgentsError, AsyncResponseInbox, DetachedAgents, InterAgentResponse};
pub use conversation::{Conversation, ConversationState, FoldWarning, MessagesView};
pub use error::PipelineError;
pub use events::{CollectEvents, DiscardEvents, RuntimeEventSink};
pub use extension::{
    BuiltinCatalog, BuiltinResolver, EntryError, EntryResolver, EntryResolvers, EntryTarget,
    EventBus, Extension, ExtensionApi, ExtensionInitError, ExtensionState, MapBuiltinCatalog,
    ResourceKind, Subscription, ToolHandlers,
};
pub use ledger::{BudgetExceeded, BudgetLimits, Ledger, BUDGET_EXCEEDED};
pub use operator::{AskError, AskScope, NoOperators, Operators, Question};
pub use pipeline::{
    Middleware, MiddlewareKind, MiddlewareOptions, Next, Pipeline, PipelineRegistry, StepContext,
    StepNext, ToolCallContext, ToolCallNext, TurnContext, TurnNext,
};
pub use tool::{
    handler_fn, ToolContext, ToolExportDefinition, ToolFailure, ToolHandler, ToolProgress,
    ToolRegistry,
};
pub use turn::{
    Agent, AgentDefinition, AgentError, AgentServices, ExtensionDefinition, ToolDefinition,
};
