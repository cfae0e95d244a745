//! Tools: the handler trait a library user implements, the context a
//! handler gets, how failures become results, and the registry and
//! catalog (seed 002).
//!
//! * [`ToolRegistry`] holds every callable tool of the agent: the exports
//!   of its Tool resources and tools extensions register at run time.
//! * The catalog of a Step is built from the registry and then shaped by
//!   step middleware; only tools in it may be called (see [`executor`]).
//!
//! # Output convention
//!
//! A handler returns any JSON value as its output. A handler that starts
//! work it cannot finish within the call returns [`pending_output`]:
//! `{"status": "pending", "handle": "<id>"}` with `status: ok` on the
//! result; the completion arrives later as an event or by polling with the
//! handle. The runtime does not interpret it further.

pub mod environment;
pub mod executor;
pub mod progress;
pub mod registry;

pub use crate::events::RuntimeEvents;
pub use executor::{
    argument_problems, gated_argument_problems, mask_tool_result, truncate_error_message,
    ToolCallPolicy, ToolExecutor, DEFAULT_ERROR_MESSAGE_LIMIT, DEFAULT_MAX_TOOL_CALLS_PER_STEP,
};
pub use progress::ToolProgress;
pub use registry::{RegisteredTool, ToolRegistrationError, ToolRegistry};

use crate::agents::AgentsApi;
use futures_util::future::BoxFuture;
use goondan_types::{JsonObject, JsonValue, Message, ToolError, TraceContext};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// One export of a Tool resource.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolExportDefinition {
    /// The export name (the part after `__`).
    pub name: String,
    /// Shown to the model.
    pub description: Option<String>,
    /// JSON Schema of the arguments.
    pub parameters: Option<JsonObject>,
}

/// Codes the runtime itself puts on tool results.
pub mod codes {
    /// The tool is not in the current Step's catalog.
    pub const NOT_IN_CATALOG: &str = "E_TOOL_NOT_IN_CATALOG";
    /// The arguments are not a JSON object, or do not match the catalog
    /// item's JSON Schema.
    pub const INVALID_ARGS: &str = "E_TOOL_INVALID_ARGS";
    /// The call was one too many for its Step
    /// ([`super::ToolCallPolicy::max_calls_per_step`]) and did not run.
    pub const CALL_LIMIT: &str = "E_TOOL_CALL_LIMIT";
    /// The catalog item's JSON Schema does not compile.
    pub const INVALID_SCHEMA: &str = "E_TOOL_INVALID_SCHEMA";
    /// The tool is in the catalog but nothing can run it.
    pub const HANDLER_MISSING: &str = "E_TOOL_HANDLER_MISSING";
    /// The handler panicked.
    pub const PANICKED: &str = "E_TOOL_PANICKED";

    /// True for codes meaning the runtime could not run the handler (as
    /// opposed to a handler that ran and failed).
    pub fn is_runtime_refusal(code: &str) -> bool {
        matches!(
            code,
            NOT_IN_CATALOG
                | INVALID_ARGS
                | INVALID_SCHEMA
                | HANDLER_MISSING
                | PANICKED
                | CALL_LIMIT
        )
    }
}

/// A handler's failure. It becomes a `ToolCallResult` with
/// `status: "error"`, its message cut to the tool's `errorMessageLimit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFailure {
    /// A stable code, for example `E_FILE_NOT_FOUND`.
    pub code: String,
    /// The error's class name, for example `ToolInputError`.
    pub name: Option<String>,
    /// What went wrong.
    pub message: String,
    /// How the model (or user) can recover.
    pub suggestion: Option<String>,
    /// Where to read more.
    pub help_url: Option<String>,
}

impl ToolFailure {
    /// A failure with a code and a message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ToolFailure {
            code: code.into(),
            name: None,
            message: message.into(),
            suggestion: None,
            help_url: None,
        }
    }

    /// Sets the class name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets the suggestion.
    pub fn with_suggestion(mut self, suggestion: impl Into<String>) -> Self {
        self.suggestion = Some(suggestion.into());
        self
    }

    /// Sets the help URL.
    pub fn with_help_url(mut self, help_url: impl Into<String>) -> Self {
        self.help_url = Some(help_url.into());
        self
    }

    /// The wire form, with the message cut to `error_message_limit`.
    pub fn into_tool_error(self, error_message_limit: usize) -> ToolError {
        ToolError {
            name: self.name,
            message: truncate_error_message(&self.message, error_message_limit),
            code: Some(self.code),
            suggestion: self.suggestion,
            help_url: self.help_url,
        }
    }
}

impl fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.code, self.message)
    }
}

impl std::error::Error for ToolFailure {}

/// The output of a handler that finishes later; see the module docs.
pub fn pending_output(handle: &str) -> JsonValue {
    serde_json::json!({ "status": "pending", "handle": handle })
}

/// What a handler knows about the call it serves (seed 002 §7.3).
#[derive(Clone)]
pub struct ToolContext {
    /// The agent.
    pub agent_name: String,
    /// Its instance.
    pub instance_key: String,
    /// The Turn.
    pub turn_id: String,
    /// The call's span; `trace.trace_id` is the chain's trace id and
    /// `trace.span_id` is what a request to another agent carries as its
    /// `parentSpanId`.
    pub trace: TraceContext,
    /// The call id.
    pub tool_call_id: String,
    /// The assistant message holding this call.
    pub message: Arc<Message>,
    /// The instance's working directory; file and process tools start
    /// here.
    pub workdir: PathBuf,
    /// A span carrying agent, turn and tool call fields; log with
    /// `logger.in_scope(|| tracing::info!(..))`.
    pub logger: tracing::Span,
    /// The agents API (`request`, `send`, `spawn`, `list`, `catalog`).
    pub runtime: Arc<dyn AgentsApi>,
    /// Asking a person from inside this call (a `human-input` tool);
    /// its questions are settled when the call is over.
    pub asks: crate::AskScope,
    /// Reports how the call goes while it runs (`tool.progress` runtime
    /// events).
    pub progress: ToolProgress,
}

impl ToolContext {
    /// The trace id of the chain.
    pub fn trace_id(&self) -> &str {
        &self.trace.trace_id
    }
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("agent_name", &self.agent_name)
            .field("instance_key", &self.instance_key)
            .field("turn_id", &self.turn_id)
            .field("tool_call_id", &self.tool_call_id)
            .field("workdir", &self.workdir)
            .finish_non_exhaustive()
    }
}

/// What a handler's future resolves to.
pub type ToolOutcome = Result<JsonValue, ToolFailure>;

/// One tool export's implementation.
///
/// Implemented for every `Fn(&ToolContext, JsonObject) -> BoxFuture<..>`;
/// [`handler_fn`] turns such a closure into an `Arc<dyn ToolHandler>`.
///
/// # Panics
///
/// A panic inside `call` (or its future) does not escape: the runtime
/// catches it and returns an `E_TOOL_PANICKED` error result.
pub trait ToolHandler: Send + Sync {
    /// Runs the tool with validated arguments.
    fn call<'a>(&'a self, ctx: &'a ToolContext, args: JsonObject) -> BoxFuture<'a, ToolOutcome>;
}

impl<F> ToolHandler for F
where
    F: for<'a> Fn(&'a ToolContext, JsonObject) -> BoxFuture<'a, ToolOutcome> + Send + Sync,
{
    fn call<'a>(&'a self, ctx: &'a ToolContext, args: JsonObject) -> BoxFuture<'a, ToolOutcome> {
        self(ctx, args)
    }
}

/// Wraps a closure as a shared handler.
pub fn handler_fn<F>(handler: F) -> Arc<dyn ToolHandler>
where
    F: for<'a> Fn(&'a ToolContext, JsonObject) -> BoxFuture<'a, ToolOutcome>
        + Send
        + Sync
        + 'static,
{
    Arc::new(handler)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pending_results_carry_a_handle() {
        assert_eq!(
            pending_output("job-7"),
            json!({"status": "pending", "handle": "job-7"})
        );
    }

    #[test]
    fn failures_keep_code_name_suggestion_and_help_url_and_cut_the_message() {
        let error = ToolFailure::new("E_X", "abcdefghijklmnopqrst")
            .with_name("XError")
            .with_suggestion("retry")
            .with_help_url("https://docs.example/E_X")
            .into_tool_error(18);
        assert_eq!(
            serde_json::to_value(error).unwrap(),
            json!({"name": "XError", "message": "abc... (truncated)", "code": "E_X", "suggestion": "retry", "helpUrl": "https://docs.example/E_X"})
        );
    }
}
