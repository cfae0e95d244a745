//! Shared types of Goondan: everything that crosses a process boundary or
//! lands on disk, with JSON field names identical to the original
//! implementation (`docs/specs/shared-types.md`).
//!
//! This crate owns data shapes only. It knows no file layout and holds no
//! behavior beyond small constructors and parsers; loading, storing and
//! running live in the crates to its right. Its one piece of IO is
//! [`atomic_file::write_atomically`], the file replacement every writer to
//! its right shares.
//!
//! Every type here that derives `Serialize` is a wire or disk promise:
//! renaming a field breaks stored logs and peers, so tests pin each shape
//! against literal JSON.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod agents;
pub mod approval;
pub mod atomic_file;
pub mod backoff;
pub mod connector;
pub mod diagnostic;
pub mod entry;
pub mod error_body;
pub mod error_chain;
pub mod event;
pub mod instance_key;
pub mod ipc;
pub mod json;
pub mod message;
pub mod placement;
pub mod refs;
pub mod result;
pub mod routing_key;
pub mod runtime_event;
pub mod secret;
pub mod sse;
pub mod swarm_event;
pub mod tool;
pub mod trace;
pub mod value_source;

pub use approval::{ApprovalDecision, ApprovalRequest, Verdict};
pub use connector::{ConnectorEvent, ConnectorMessage};
pub use diagnostic::{Diagnostic, Severity};
pub use entry::{Entry, EntryParseError, ScriptRuntime};
pub use error_body::ErrorBody;
pub use error_chain::error_chain;
pub use event::{
    new_event_id, AgentEvent, EventSource, EventSourceKind, ReplyChannel, TurnAuth,
    PRIOR_MESSAGES_KEY,
};
pub use ipc::{IpcMessage, IpcMessageType, ProcessStatus, ShutdownReason};
pub use json::{JsonObject, JsonValue};
pub use message::{
    ContentPart, Message, MessageContent, MessageEvent, MessageSource, ModelMessage,
    ToolResultOutput,
};
pub use refs::{ObjectRef, ObjectRefLike, ObjectRefParseError, RefItem};
pub use result::{StepResult, StepStatus, TokenUsage, TurnError, TurnFinishReason, TurnResult};
pub use routing_key::{RoutingKey, RoutingKeyError};
pub use runtime_event::{RuntimeEvent, RuntimeEventBase};
pub use secret::Secrets;
pub use swarm_event::{ReloadTrigger, SwarmEvent, SwarmEventBase};
pub use tool::{
    ExecutionContext, McpToolSource, ToolCall, ToolCallResult, ToolCallStatus, ToolCatalogItem,
    ToolError, ToolName, ToolSource, ToolSourceType,
};
pub use trace::{SpanId, TraceContext, TraceId};
pub use value_source::{SecretRef, ValueFrom, ValueSource};

/// The only `apiVersion` this runtime accepts on resources.
pub const API_VERSION: &str = "goondan.ai/v1";

/// Returns the current time as an ISO 8601 string with millisecond precision
/// in UTC, the form the original writes for every `createdAt` and `timestamp`.
pub fn now_iso() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// `time` as an RFC 3339 UTC timestamp with milliseconds, like [`now_iso`].
pub fn iso_at(time: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
