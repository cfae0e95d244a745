//! The export pipeline of one process: an OTLP/HTTP exporter behind the
//! SDK's batch processor, which owns a thread of its own. Recording a span
//! is a `try_send` into a bounded queue; a full queue drops the span, and
//! a slow or dead collector only ever stalls that thread, never a Turn.

use crate::settings::{OtlpProtocol, OtlpSettings, TelemetryError};
use crate::spans::{AgentIdentity, AgentSpans};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SpanProcessor};
use opentelemetry_sdk::Resource;
use std::sync::Arc;
use std::time::Duration;

/// One process's span export. Built only when [`OtlpSettings`] exist, so
/// a process with export off never creates the thread, the HTTP client or
/// the queue.
#[derive(Debug, Clone)]
pub struct SpanExport {
    processor: Arc<BatchSpanProcessor>,
    scope: InstrumentationScope,
    capture_message_content: bool,
}

impl SpanExport {
    /// Builds the exporter and starts its batch thread. `process_kind`
    /// (`agent`, `orchestrator`) and `version` go on the resource.
    pub fn start(
        settings: &OtlpSettings,
        process_kind: &'static str,
        version: &'static str,
    ) -> Result<SpanExport, TelemetryError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(settings.traces_endpoint.clone())
            .with_protocol(match settings.protocol {
                OtlpProtocol::HttpProtobuf => Protocol::HttpBinary,
                OtlpProtocol::HttpJson => Protocol::HttpJson,
            })
            .with_headers(settings.headers.iter().cloned().collect())
            .with_timeout(settings.timeout)
            .build()
            .map_err(|error| TelemetryError::Exporter(error.to_string()))?;
        // Queue size, batch size and delay: the SDK's defaults, or the
        // `OTEL_BSP_*` variables, which its builder reads.
        let mut processor = BatchSpanProcessor::builder(exporter).build();
        processor.set_resource(
            &Resource::builder_empty()
                .with_service_name(settings.service_name.clone())
                .with_attributes([
                    KeyValue::new("service.version", version),
                    KeyValue::new("goondan.process.kind", process_kind),
                ])
                .build(),
        );
        Ok(SpanExport {
            processor: Arc::new(processor),
            scope: InstrumentationScope::builder("goondan")
                .with_version(version)
                .build(),
            capture_message_content: settings.capture_message_content,
        })
    }

    /// The recorder of one AgentProcess's runtime events.
    pub fn agent_spans(&self, identity: AgentIdentity) -> AgentSpans {
        AgentSpans::new(
            Arc::clone(&self.processor) as Arc<dyn SpanProcessor>,
            identity,
            self.scope.clone(),
            self.capture_message_content,
        )
    }

    /// Exports what is queued and stops the batch thread, waiting at most
    /// `bound` (a collector that does not answer costs a stopping process
    /// no more than that). Returns false when the bound ran out or the
    /// SDK reported a failure; spans still queued are then lost, by
    /// design.
    pub fn shutdown(&self, bound: Duration) -> bool {
        match self.processor.shutdown_with_timeout(bound) {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(
                    code = "E_OTEL_EXPORT",
                    "spans not exported at shutdown: {error}"
                );
                false
            }
        }
    }
}
