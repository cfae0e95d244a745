//! OpenTelemetry export of Goondan's runtime spans over OTLP/HTTP
//! (`http/protobuf` or `http/json`), configured by the standard
//! `OTEL_*` variables.
//!
//! The runtime already records a span tree: a `traceId` kept along an
//! inter-agent chain and a `spanId` per Turn, Step and tool call, carried
//! by its runtime events. [`AgentSpans`] turns those events into spans
//! with the same ids, named and attributed per the GenAI semantic
//! conventions (`invoke_agent`, `chat`, `execute_tool`; see [`spans`]), and
//! [`SpanExport`] batches them to a collector on a thread of its own.
//!
//! This is the only crate that depends on the OpenTelemetry crates. A
//! process builds a [`SpanExport`] only when [`OtlpSettings::from_env`]
//! says export is on, so with no endpoint set nothing here runs.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod export;
mod settings;
pub mod spans;

pub use export::SpanExport;
pub use settings::{OtlpProtocol, OtlpSettings, TelemetryError, OTEL_SECRET_VARIABLES};
pub use spans::{AgentIdentity, AgentSpans};
