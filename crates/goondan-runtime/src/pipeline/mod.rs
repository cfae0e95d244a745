//! The three onion middlewares (`turn`, `step`, `toolCall`), their
//! registry and the `next` that links one layer to the next.
//!
//! This module owns ordering and chaining only. What a layer sees lives in
//! [`context`]; what the innermost core does lives in [`crate::turn`].
//!
//! # Order
//!
//! ```text
//!  priority:  B(5)        A(10)         C(10)
//!  turn  ┌──────────────────────────────────────────────────┐
//!        │ B.pre → A.pre → C.pre → [core: step loop]        │
//!        │   step ┌─────────────────────────────────────┐   │
//!        │        │ B.pre → A.pre → C.pre → [core: LLM] │   │
//!        │        │   toolCall ┌──────────────────────┐ │   │
//!        │        │            │ … → [core: handler]  │ │   │
//!        │        │            └──────────────────────┘ │   │
//!        │        │ C.post → A.post → B.post            │   │
//!        │        └─────────────────────────────────────┘   │
//!        │ C.post → A.post → B.post                         │
//!        └──────────────────────────────────────────────────┘
//! ```
//!
//! Lower `priority` is further out; equal priorities keep registration
//! order, and extensions register in the order of `Agent.spec.extensions`.
//! So with A(10), B(5), C(10) registered in that order the chain is
//! B, A, C, then the core.
//!
//! # The `next` contract
//!
//! A middleware gets `&mut` its context and a [`Next`]. Calling
//! [`Next::run`] runs every inner layer and the core, then returns their
//! result, which the middleware may change before returning it.
//!
//! * Changes made to the context before `next.run(ctx)` are exactly what
//!   inner layers and the core see (the step's `tool_catalog` is what the
//!   model receives; a tool call's `args` are what the handler receives).
//! * Not calling `next` skips every inner layer and the core; the value the
//!   middleware returns is the layer's result.
//! * `next` runs at most once. [`Next::run`] takes `self`, so a second call
//!   is refused by the compiler; nothing can run the inner chain twice. A
//!   retry is expressed by returning a changed result or an error, never by
//!   calling `next` again.
//!
//! A wrong middleware, which the compiler rejects:
//!
//! ```compile_fail,E0382
//! use goondan_runtime::pipeline::{PipelineRegistry, MiddlewareOptions};
//! let mut registry = PipelineRegistry::new();
//! registry.step(
//!     |ctx, next| {
//!         Box::pin(async move {
//!             let first = next.run(ctx).await;
//!             // Retrying by running the inner chain again: refused,
//!             // `next` was moved by the first call.
//!             let second = next.run(ctx).await;
//!             first.or(second)
//!         })
//!     },
//!     MiddlewareOptions::default(),
//! );
//! ```
//!
//! The fix hands the decision back to the runtime instead:
//!
//! ```
//! use goondan_runtime::pipeline::{PipelineRegistry, MiddlewareOptions};
//! let mut registry = PipelineRegistry::new();
//! registry.step(
//!     |ctx, next| {
//!         Box::pin(async move {
//!             let mut result = next.run(ctx).await?;
//!             // Ask for one more step rather than re-running this one.
//!             result.should_continue = true;
//!             Ok(result)
//!         })
//!     },
//!     MiddlewareOptions::default(),
//! );
//! ```

pub mod context;

pub use context::{
    RuntimeAgentContext, RuntimeCallContext, RuntimeContext, RuntimeInboundContext, RuntimePrompt,
    RuntimeSwarmContext, StepContext, ToolCallContext, TurnContext, TurnInfo,
};

use crate::error::PipelineError;
use futures_util::future::BoxFuture;
use goondan_types::{StepResult, ToolCallResult, TurnResult};
use std::fmt;
use std::sync::Arc;

/// The three middleware kinds; there are no others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MiddlewareKind {
    /// Wraps a whole Turn.
    Turn,
    /// Wraps one Step (model call plus its tool calls).
    Step,
    /// Wraps one tool call.
    ToolCall,
}

impl MiddlewareKind {
    /// The name the specs use.
    pub fn as_str(self) -> &'static str {
        match self {
            MiddlewareKind::Turn => "turn",
            MiddlewareKind::Step => "step",
            MiddlewareKind::ToolCall => "toolCall",
        }
    }
}

impl fmt::Display for MiddlewareKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Options of one registration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MiddlewareOptions {
    /// Lower is further out; ties keep registration order. Default 0.
    pub priority: i32,
}

impl MiddlewareOptions {
    /// Options with the given priority.
    pub fn priority(priority: i32) -> Self {
        MiddlewareOptions { priority }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::TurnContext {}
    impl Sealed for super::StepContext {}
    impl Sealed for super::ToolCallContext {}
}

/// A context one of the three middleware kinds receives. Sealed: the three
/// contexts of this crate are the only ones.
pub trait PipelineContext: sealed::Sealed + Sized + Send + 'static {
    /// What the layer returns.
    type Output: Send + 'static;
    /// Which kind this context belongs to.
    const KIND: MiddlewareKind;

    #[doc(hidden)]
    fn entries(registry: &mut PipelineRegistry) -> &mut Vec<Entry<Self>>;

    #[doc(hidden)]
    fn layers(pipeline: &Pipeline) -> &[Arc<dyn Middleware<Self>>];
}

impl PipelineContext for TurnContext {
    type Output = TurnResult;
    const KIND: MiddlewareKind = MiddlewareKind::Turn;
    fn entries(registry: &mut PipelineRegistry) -> &mut Vec<Entry<Self>> {
        &mut registry.turn
    }
    fn layers(pipeline: &Pipeline) -> &[Arc<dyn Middleware<Self>>] {
        &pipeline.turn
    }
}

impl PipelineContext for StepContext {
    type Output = StepResult;
    const KIND: MiddlewareKind = MiddlewareKind::Step;
    fn entries(registry: &mut PipelineRegistry) -> &mut Vec<Entry<Self>> {
        &mut registry.step
    }
    fn layers(pipeline: &Pipeline) -> &[Arc<dyn Middleware<Self>>] {
        &pipeline.step
    }
}

impl PipelineContext for ToolCallContext {
    type Output = ToolCallResult;
    const KIND: MiddlewareKind = MiddlewareKind::ToolCall;
    fn entries(registry: &mut PipelineRegistry) -> &mut Vec<Entry<Self>> {
        &mut registry.tool_call
    }
    fn layers(pipeline: &Pipeline) -> &[Arc<dyn Middleware<Self>>] {
        &pipeline.tool_call
    }
}

/// What a layer's future resolves to.
pub type LayerResult<C> = Result<<C as PipelineContext>::Output, PipelineError>;

/// One onion layer of kind `C::KIND`.
///
/// Implemented for every `Fn(&mut C, Next<C>) -> BoxFuture<..>`, so a
/// closure returning `Box::pin(async move { .. })` is a middleware. See the
/// [module docs](self) for the `next` contract.
///
/// # Panics
///
/// A middleware that panics unwinds through the Turn like any Rust code;
/// the runtime does not turn middleware panics into results (it does for
/// tool handlers). Return a [`PipelineError`] instead.
pub trait Middleware<C: PipelineContext>: Send + Sync {
    /// Runs this layer: pre-processing, optionally `next.run(ctx)`, then
    /// post-processing.
    fn handle<'a>(&'a self, ctx: &'a mut C, next: Next<'a, C>) -> BoxFuture<'a, LayerResult<C>>;
}

impl<C, F> Middleware<C> for F
where
    C: PipelineContext,
    F: for<'a> Fn(&'a mut C, Next<'a, C>) -> BoxFuture<'a, LayerResult<C>> + Send + Sync,
{
    fn handle<'a>(&'a self, ctx: &'a mut C, next: Next<'a, C>) -> BoxFuture<'a, LayerResult<C>> {
        self(ctx, next)
    }
}

/// A `turn` middleware.
pub type TurnMiddleware = dyn Middleware<TurnContext>;
/// A `step` middleware.
pub type StepMiddleware = dyn Middleware<StepContext>;
/// A `toolCall` middleware.
pub type ToolCallMiddleware = dyn Middleware<ToolCallContext>;

/// The innermost logic a chain wraps (the step loop, the model call, the
/// tool handler). Implemented by the runtime.
pub trait Core<C: PipelineContext>: Send + Sync {
    /// Runs the core with the context as the layers left it.
    fn run<'a>(&'a self, ctx: &'a mut C) -> BoxFuture<'a, LayerResult<C>>;
}

/// The rest of the chain: every inner layer, then the core.
///
/// Consumed by [`Next::run`], so it runs at most once per layer.
#[must_use = "not running `next` skips every inner layer and the core"]
pub struct Next<'a, C: PipelineContext> {
    layers: &'a [Arc<dyn Middleware<C>>],
    core: &'a dyn Core<C>,
}

/// `next` of a `turn` middleware.
pub type TurnNext<'a> = Next<'a, TurnContext>;
/// `next` of a `step` middleware.
pub type StepNext<'a> = Next<'a, StepContext>;
/// `next` of a `toolCall` middleware.
pub type ToolCallNext<'a> = Next<'a, ToolCallContext>;

impl<'a, C: PipelineContext> Next<'a, C> {
    /// Runs the inner layers and the core with `ctx`, once.
    pub fn run<'b>(self, ctx: &'b mut C) -> BoxFuture<'b, LayerResult<C>>
    where
        'a: 'b,
    {
        match self.layers.split_first() {
            Some((outermost, rest)) => outermost.handle(
                ctx,
                Next {
                    layers: rest,
                    core: self.core,
                },
            ),
            None => self.core.run(ctx),
        }
    }

    /// How many middlewares are still inside this point.
    pub fn remaining_layers(&self) -> usize {
        self.layers.len()
    }
}

impl<C: PipelineContext> fmt::Debug for Next<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Next")
            .field("kind", &C::KIND)
            .field("remaining_layers", &self.layers.len())
            .finish()
    }
}

#[doc(hidden)]
pub struct Entry<C: PipelineContext> {
    middleware: Arc<dyn Middleware<C>>,
    priority: i32,
}

/// Collects middlewares while extensions register, then freezes into a
/// [`Pipeline`].
#[derive(Default)]
pub struct PipelineRegistry {
    turn: Vec<Entry<TurnContext>>,
    step: Vec<Entry<StepContext>>,
    tool_call: Vec<Entry<ToolCallContext>>,
}

impl PipelineRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        PipelineRegistry::default()
    }

    /// Registers a middleware of the kind its context names.
    pub fn register<C: PipelineContext>(
        &mut self,
        middleware: Arc<dyn Middleware<C>>,
        options: MiddlewareOptions,
    ) {
        C::entries(self).push(Entry {
            middleware,
            priority: options.priority,
        });
    }

    /// Registers a `turn` middleware written as a closure.
    pub fn turn<F>(&mut self, middleware: F, options: MiddlewareOptions)
    where
        F: for<'a> Fn(&'a mut TurnContext, TurnNext<'a>) -> BoxFuture<'a, LayerResult<TurnContext>>
            + Send
            + Sync
            + 'static,
    {
        self.register::<TurnContext>(Arc::new(middleware), options);
    }

    /// Registers a `step` middleware written as a closure.
    pub fn step<F>(&mut self, middleware: F, options: MiddlewareOptions)
    where
        F: for<'a> Fn(&'a mut StepContext, StepNext<'a>) -> BoxFuture<'a, LayerResult<StepContext>>
            + Send
            + Sync
            + 'static,
    {
        self.register::<StepContext>(Arc::new(middleware), options);
    }

    /// Registers a `toolCall` middleware written as a closure.
    pub fn tool_call<F>(&mut self, middleware: F, options: MiddlewareOptions)
    where
        F: for<'a> Fn(
                &'a mut ToolCallContext,
                ToolCallNext<'a>,
            ) -> BoxFuture<'a, LayerResult<ToolCallContext>>
            + Send
            + Sync
            + 'static,
    {
        self.register::<ToolCallContext>(Arc::new(middleware), options);
    }

    /// How many middlewares of `kind` are registered.
    pub fn len(&self, kind: MiddlewareKind) -> usize {
        match kind {
            MiddlewareKind::Turn => self.turn.len(),
            MiddlewareKind::Step => self.step.len(),
            MiddlewareKind::ToolCall => self.tool_call.len(),
        }
    }

    /// Sorts each kind by priority (stable, so ties keep registration
    /// order) and freezes the result.
    pub fn build(self) -> Pipeline {
        fn sorted<C: PipelineContext>(mut entries: Vec<Entry<C>>) -> Vec<Arc<dyn Middleware<C>>> {
            entries.sort_by_key(|entry| entry.priority);
            entries.into_iter().map(|entry| entry.middleware).collect()
        }
        Pipeline {
            turn: sorted(self.turn),
            step: sorted(self.step),
            tool_call: sorted(self.tool_call),
        }
    }
}

impl fmt::Debug for PipelineRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipelineRegistry")
            .field("turn", &self.turn.len())
            .field("step", &self.step.len())
            .field("toolCall", &self.tool_call.len())
            .finish()
    }
}

/// The frozen, ordered chains of one agent, outermost first.
#[derive(Default, Clone)]
pub struct Pipeline {
    turn: Vec<Arc<dyn Middleware<TurnContext>>>,
    step: Vec<Arc<dyn Middleware<StepContext>>>,
    tool_call: Vec<Arc<dyn Middleware<ToolCallContext>>>,
}

impl Pipeline {
    /// Runs the chain of kind `C::KIND` around `core`.
    pub fn run<'a, C: PipelineContext>(
        &'a self,
        ctx: &'a mut C,
        core: &'a dyn Core<C>,
    ) -> BoxFuture<'a, LayerResult<C>> {
        Next {
            layers: C::layers(self),
            core,
        }
        .run(ctx)
    }
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("turn", &self.turn.len())
            .field("step", &self.step.len())
            .field("toolCall", &self.tool_call.len())
            .finish()
    }
}
