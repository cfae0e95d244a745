//! Runtime events become OpenTelemetry spans named and attributed per the
//! GenAI semantic conventions. The runtime already gives every Turn, Step
//! and tool call a span id in one trace; this module keeps those ids, so
//! a span exported here and the same unit in `runtime-events.jsonl` have
//! the same `traceId`/`spanId`, and a callee's Turn hangs under its
//! caller's `agents__request` span across processes with no new field.
//!
//! | runtime events | span name | `gen_ai.operation.name` |
//! |---|---|---|
//! | `turn.started` … `turn.completed`/`failed` | `invoke_agent {agent}` | `invoke_agent` |
//! | `step.started` … `step.completed`/`failed` | `chat {model}` | `chat` |
//! | `tool.called` … `tool.completed`/`failed` | `execute_tool {tool}` | `execute_tool` |

use goondan_types::runtime_event::StepStartedLlmInputMessage;
use goondan_types::{RuntimeEvent, RuntimeEventBase, Secrets, TokenUsage, ToolCallStatus};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks, SpanProcessor};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Spans open at once in one process (started, not yet ended). A Turn
/// holds one, a Step one, each running tool call one; the bound only
/// matters if end events go missing (a crash mid-Turn), and then the
/// oldest are forgotten rather than growing without end.
const MAX_OPEN_SPANS: usize = 1024;

/// Who produces the spans of one AgentProcess.
#[derive(Debug, Clone)]
pub struct AgentIdentity {
    /// `gen_ai.agent.name`.
    pub agent_name: String,
    /// The instance (`goondan.instance.key`).
    pub instance_key: String,
    /// `Model.spec.provider` as written in the bundle.
    pub provider: String,
    /// `Model.spec.model` (`gen_ai.request.model`).
    pub model: String,
    /// Masked out of every string put on a span.
    pub secrets: Secrets,
}

/// `gen_ai.provider.name` for a `Model.spec.provider` (the convention's
/// well-known values where one exists, the bundle's word otherwise).
pub fn provider_name(provider: &str) -> &str {
    match provider {
        "google" => "gcp.gemini",
        other => other,
    }
}

#[derive(Debug)]
struct OpenSpan {
    name: String,
    start: SystemTime,
    parent: Option<String>,
    attributes: Vec<KeyValue>,
    remote_parent: bool,
}

/// Turns one AgentProcess's runtime events into spans and hands each
/// finished one to the batch processor. Called inline on the Turn's task:
/// it only builds a small struct and `try_send`s it to the export thread.
#[derive(Debug)]
pub struct AgentSpans {
    processor: Arc<dyn SpanProcessor>,
    identity: AgentIdentity,
    scope: InstrumentationScope,
    capture_message_content: bool,
    open: Mutex<HashMap<String, OpenSpan>>,
}

impl AgentSpans {
    pub(crate) fn new(
        processor: Arc<dyn SpanProcessor>,
        identity: AgentIdentity,
        scope: InstrumentationScope,
        capture_message_content: bool,
    ) -> Self {
        AgentSpans {
            processor,
            identity,
            scope,
            capture_message_content,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// True when message content goes on spans
    /// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`): then
    /// `step.started` should carry its input messages.
    pub fn captures_message_content(&self) -> bool {
        self.capture_message_content
    }

    /// `gen_ai.input.messages`: the Step's input as the convention's
    /// `[{role, parts: [{type: "text", content}]}]`, secrets masked.
    fn input_messages(&self, messages: &[StepStartedLlmInputMessage]) -> KeyValue {
        let list: Vec<serde_json::Value> = messages
            .iter()
            .map(|message| {
                serde_json::json!({
                    "role": message.role,
                    "parts": [{"type": "text", "content": message.content}],
                })
            })
            .collect();
        let mut value = serde_json::Value::Array(list);
        self.identity.secrets.mask_json(&mut value);
        KeyValue::new("gen_ai.input.messages", value.to_string())
    }

    fn open_spans(&self) -> std::sync::MutexGuard<'_, HashMap<String, OpenSpan>> {
        // Inserting or removing one entry cannot leave the map torn.
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn common(&self, operation: &'static str) -> Vec<KeyValue> {
        vec![
            KeyValue::new("gen_ai.operation.name", operation),
            KeyValue::new("gen_ai.agent.name", self.identity.agent_name.clone()),
            KeyValue::new(
                "gen_ai.provider.name",
                provider_name(&self.identity.provider).to_string(),
            ),
            KeyValue::new("gen_ai.request.model", self.identity.model.clone()),
            KeyValue::new("goondan.instance.key", self.identity.instance_key.clone()),
        ]
    }

    /// The name and starting attributes of the span `event` belongs to,
    /// and whether its parent lives in another process (a Turn's parent
    /// is its caller's tool call).
    fn describe(&self, event: &RuntimeEvent) -> (String, Vec<KeyValue>, bool) {
        match event {
            RuntimeEvent::TurnStarted { turn_id, .. }
            | RuntimeEvent::TurnCompleted { turn_id, .. }
            | RuntimeEvent::TurnFailed { turn_id, .. }
            | RuntimeEvent::BudgetExceeded { turn_id, .. } => {
                let mut attributes = self.common("invoke_agent");
                attributes.push(KeyValue::new("goondan.turn.id", turn_id.clone()));
                (
                    format!("invoke_agent {}", self.identity.agent_name),
                    attributes,
                    true,
                )
            }
            RuntimeEvent::StepStarted {
                step_id,
                step_index,
                ..
            }
            | RuntimeEvent::StepCompleted {
                step_id,
                step_index,
                ..
            }
            | RuntimeEvent::StepFailed {
                step_id,
                step_index,
                ..
            } => {
                let mut attributes = self.common("chat");
                attributes.push(KeyValue::new("goondan.step.id", step_id.clone()));
                attributes.push(KeyValue::new("goondan.step.index", i64::from(*step_index)));
                (format!("chat {}", self.identity.model), attributes, false)
            }
            RuntimeEvent::ToolCalled {
                tool_call_id,
                tool_name,
                ..
            }
            | RuntimeEvent::ToolCompleted {
                tool_call_id,
                tool_name,
                ..
            }
            | RuntimeEvent::ToolFailed {
                tool_call_id,
                tool_name,
                ..
            }
            | RuntimeEvent::ToolProgress {
                tool_call_id,
                tool_name,
                ..
            } => {
                let mut attributes = self.common("execute_tool");
                attributes.push(KeyValue::new("gen_ai.tool.name", tool_name.clone()));
                attributes.push(KeyValue::new("gen_ai.tool.call.id", tool_call_id.clone()));
                attributes.push(KeyValue::new("gen_ai.tool.type", "function"));
                (format!("execute_tool {tool_name}"), attributes, false)
            }
        }
    }

    /// Records one runtime event: a `*.started`/`tool.called` opens a span,
    /// its `*.completed`/`*.failed` ends and exports it.
    pub fn record(&self, event: &RuntimeEvent) {
        let now = SystemTime::now();
        let (duration, extra, status) = match event {
            // A refused model call: noted on the Turn's span, which the
            // `turn.failed` that follows ends with the error.
            RuntimeEvent::BudgetExceeded {
                base,
                limit,
                limit_value,
                used,
                ..
            } => {
                if let Some(span) = self.open_spans().get_mut(&base.span_id) {
                    span.attributes.extend([
                        KeyValue::new("goondan.budget.limit", limit.clone()),
                        KeyValue::new("goondan.budget.limit_value", *limit_value),
                        KeyValue::new("goondan.budget.used", *used),
                    ]);
                }
                return;
            }
            // A call's progress neither opens nor ends its span; the
            // reports stay in `runtime-events.jsonl`.
            RuntimeEvent::ToolProgress { .. } => return,
            RuntimeEvent::TurnStarted { .. }
            | RuntimeEvent::StepStarted { .. }
            | RuntimeEvent::ToolCalled { .. } => {
                let (name, mut attributes, remote_parent) = self.describe(event);
                if let RuntimeEvent::StepStarted {
                    llm_input_messages: Some(messages),
                    ..
                } = event
                {
                    if self.capture_message_content {
                        attributes.push(self.input_messages(messages));
                    }
                }
                return self.open(event.base(), name, now, attributes, remote_parent);
            }
            RuntimeEvent::TurnCompleted {
                duration,
                step_count,
                token_usage,
                cost_usd,
                ..
            } => {
                let mut extra = usage_attributes(token_usage.as_ref());
                extra.extend(cost_usd.map(|cost| KeyValue::new("goondan.usage.cost_usd", cost)));
                extra.push(KeyValue::new(
                    "goondan.turn.step_count",
                    i64::from(*step_count),
                ));
                (*duration, extra, Status::Ok)
            }
            RuntimeEvent::StepCompleted {
                duration,
                tool_call_count,
                token_usage,
                cost_usd,
                ..
            } => {
                let mut extra = usage_attributes(token_usage.as_ref());
                extra.extend(cost_usd.map(|cost| KeyValue::new("goondan.usage.cost_usd", cost)));
                extra.push(KeyValue::new(
                    "goondan.step.tool_call_count",
                    i64::from(*tool_call_count),
                ));
                (*duration, extra, Status::Ok)
            }
            RuntimeEvent::ToolCompleted {
                duration, status, ..
            } => match status {
                ToolCallStatus::Ok => (*duration, Vec::new(), Status::Ok),
                ToolCallStatus::Error => (
                    *duration,
                    vec![KeyValue::new("error.type", "tool_error")],
                    Status::error("the tool returned an error result"),
                ),
            },
            RuntimeEvent::TurnFailed {
                duration,
                error_message,
                ..
            }
            | RuntimeEvent::StepFailed {
                duration,
                error_message,
                ..
            }
            | RuntimeEvent::ToolFailed {
                duration,
                error_message,
                ..
            } => (
                *duration,
                vec![KeyValue::new("error.type", event.type_name())],
                Status::error(self.identity.secrets.mask(error_message).into_owned()),
            ),
        };
        let base = event.base();
        let span = self.open_spans().remove(&base.span_id).unwrap_or_else(|| {
            // An end without its start (a Turn resumed after a crash ends
            // spans the dead process opened): the start is known from the
            // duration.
            let (name, attributes, remote_parent) = self.describe(event);
            OpenSpan {
                name,
                start: now
                    .checked_sub(Duration::from_millis(duration))
                    .unwrap_or(now),
                parent: base.parent_span_id.clone(),
                attributes,
                remote_parent,
            }
        });
        self.export(base, span, now, extra, status);
    }

    fn open(
        &self,
        base: &RuntimeEventBase,
        name: String,
        start: SystemTime,
        attributes: Vec<KeyValue>,
        remote_parent: bool,
    ) {
        let mut open = self.open_spans();
        if open.len() >= MAX_OPEN_SPANS {
            // Only reachable when end events were lost; the oldest spans
            // are the ones that will never end.
            if let Some(oldest) = open
                .iter()
                .min_by_key(|(_, span)| span.start)
                .map(|(id, _)| id.clone())
            {
                open.remove(&oldest);
            }
        }
        open.insert(
            base.span_id.clone(),
            OpenSpan {
                name,
                start,
                parent: base.parent_span_id.clone(),
                attributes,
                remote_parent,
            },
        );
    }

    fn export(
        &self,
        base: &RuntimeEventBase,
        mut span: OpenSpan,
        end: SystemTime,
        extra: Vec<KeyValue>,
        status: Status,
    ) {
        let (Ok(trace_id), Ok(span_id)) = (
            TraceId::from_hex(&base.trace_id),
            SpanId::from_hex(&base.span_id),
        ) else {
            tracing::debug!(span = %base.span_id, "span with a malformed id not exported");
            return;
        };
        let parent_span_id = span
            .parent
            .as_deref()
            .and_then(|id| SpanId::from_hex(id).ok())
            .unwrap_or(SpanId::INVALID);
        span.attributes.extend(extra);
        self.processor.on_end(SpanData {
            span_context: SpanContext::new(
                trace_id,
                span_id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id,
            parent_span_is_remote: span.remote_parent && parent_span_id != SpanId::INVALID,
            span_kind: SpanKind::Internal,
            name: span.name.into(),
            start_time: span.start,
            end_time: end,
            attributes: span.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        });
    }
}

fn usage_attributes(usage: Option<&TokenUsage>) -> Vec<KeyValue> {
    let Some(usage) = usage else {
        return Vec::new();
    };
    let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    vec![
        KeyValue::new("gen_ai.usage.input_tokens", clamp(usage.prompt_tokens)),
        KeyValue::new("gen_ai.usage.output_tokens", clamp(usage.completion_tokens)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::Span;

    /// Keeps every finished span.
    #[derive(Debug, Default)]
    struct Keep(Mutex<Vec<SpanData>>);

    impl SpanProcessor for Keep {
        fn on_start(&self, _span: &mut Span, _cx: &opentelemetry::Context) {}
        fn on_end(&self, span: SpanData) {
            self.0.lock().unwrap().push(span);
        }
        fn force_flush(&self) -> OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
            Ok(())
        }
    }

    const TRACE: &str = "0123456789abcdef0123456789abcdef";

    fn spans(capture: bool) -> (Arc<Keep>, AgentSpans) {
        let keep = Arc::new(Keep::default());
        let mut secrets = Secrets::new();
        secrets.insert("MY_TOKEN", "tok-1234567890");
        let spans = AgentSpans::new(
            keep.clone(),
            AgentIdentity {
                agent_name: "alpha".into(),
                instance_key: "default".into(),
                provider: "google".into(),
                model: "gemini-x".into(),
                secrets,
            },
            InstrumentationScope::builder("test").build(),
            capture,
        );
        (keep, spans)
    }

    fn base(span: &str, parent: Option<&str>) -> RuntimeEventBase {
        RuntimeEventBase {
            timestamp: "2026-01-01T00:00:00.000Z".into(),
            agent_name: "alpha".into(),
            instance_key: "default".into(),
            trace_id: TRACE.into(),
            span_id: span.into(),
            parent_span_id: parent.map(str::to_string),
        }
    }

    fn attribute(span: &SpanData, key: &str) -> Option<String> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    }

    #[test]
    fn a_failed_step_ends_its_chat_span_with_a_masked_error_and_the_turn_stays_open() {
        let (keep, spans) = spans(false);
        spans.record(&RuntimeEvent::TurnStarted {
            base: base("1111111111111111", Some("9999999999999999")),
            turn_id: "turn_1".into(),
            source: None,
        });
        spans.record(&RuntimeEvent::StepStarted {
            base: base("2222222222222222", Some("1111111111111111")),
            step_id: "step_1".into(),
            step_index: 0,
            turn_id: "turn_1".into(),
            llm_input_messages: None,
        });
        spans.record(&RuntimeEvent::StepFailed {
            base: base("2222222222222222", Some("1111111111111111")),
            step_id: "step_1".into(),
            step_index: 0,
            turn_id: "turn_1".into(),
            duration: 3,
            error_message: "provider said tok-1234567890 is invalid".into(),
        });
        let done = keep.0.lock().unwrap().clone();
        assert_eq!(done.len(), 1, "only the step ended");
        let chat = &done[0];
        assert_eq!(chat.name, "chat gemini-x");
        assert_eq!(
            chat.parent_span_id,
            SpanId::from_hex("1111111111111111").unwrap()
        );
        assert!(!chat.parent_span_is_remote);
        assert_eq!(
            attribute(chat, "gen_ai.provider.name").as_deref(),
            Some("gcp.gemini")
        );
        assert_eq!(
            attribute(chat, "error.type").as_deref(),
            Some("step.failed")
        );
        match &chat.status {
            Status::Error { description } => {
                assert!(description.contains("[REDACTED:MY_TOKEN]"), "{description}");
                assert!(!description.contains("tok-1234567890"));
            }
            other => panic!("{other:?}"),
        }
        assert!(chat.end_time >= chat.start_time);
        spans.record(&RuntimeEvent::TurnCompleted {
            base: base("1111111111111111", Some("9999999999999999")),
            turn_id: "turn_1".into(),
            step_count: 1,
            duration: 5,
            token_usage: Some(TokenUsage {
                prompt_tokens: 7,
                completion_tokens: 2,
                total_tokens: 9,
            }),
            cost_usd: Some(0.25),
        });
        let done = keep.0.lock().unwrap().clone();
        let turn = &done[1];
        assert_eq!(turn.name, "invoke_agent alpha");
        assert!(
            turn.parent_span_is_remote,
            "a Turn's parent is the caller's"
        );
        assert_eq!(
            attribute(turn, "gen_ai.usage.input_tokens").as_deref(),
            Some("7")
        );
        assert_eq!(
            attribute(turn, "goondan.usage.cost_usd").as_deref(),
            Some("0.25")
        );
        assert_eq!(
            attribute(turn, "gen_ai.usage.output_tokens").as_deref(),
            Some("2")
        );
        assert_eq!(
            turn.span_context.trace_id(),
            TraceId::from_hex(TRACE).unwrap()
        );
    }

    #[test]
    fn an_end_without_its_start_is_exported_with_its_duration_and_bad_ids_are_skipped() {
        let (keep, spans) = spans(false);
        spans.record(&RuntimeEvent::ToolCompleted {
            base: base("3333333333333333", Some("2222222222222222")),
            tool_call_id: "call_1".into(),
            tool_name: "bash__exec".into(),
            status: ToolCallStatus::Error,
            duration: 2_000,
            step_id: "step_1".into(),
            turn_id: "turn_1".into(),
            error_code: None,
            error_message: None,
        });
        spans.record(&RuntimeEvent::ToolCompleted {
            base: base("not-hex", None),
            tool_call_id: "call_2".into(),
            tool_name: "bash__exec".into(),
            status: ToolCallStatus::Ok,
            duration: 1,
            step_id: "step_1".into(),
            turn_id: "turn_1".into(),
            error_code: None,
            error_message: None,
        });
        let done = keep.0.lock().unwrap().clone();
        assert_eq!(done.len(), 1);
        let tool = &done[0];
        assert_eq!(tool.name, "execute_tool bash__exec");
        assert_eq!(
            attribute(tool, "gen_ai.tool.call.id").as_deref(),
            Some("call_1")
        );
        assert_eq!(attribute(tool, "error.type").as_deref(), Some("tool_error"));
        let took = tool.end_time.duration_since(tool.start_time).unwrap();
        assert_eq!(took, Duration::from_secs(2));
    }

    #[test]
    fn input_messages_go_on_the_chat_span_only_when_capture_is_on() {
        let started = RuntimeEvent::StepStarted {
            base: base("2222222222222222", Some("1111111111111111")),
            step_id: "step_1".into(),
            step_index: 0,
            turn_id: "turn_1".into(),
            llm_input_messages: Some(vec![StepStartedLlmInputMessage {
                role: "user".into(),
                content: "use tok-1234567890 please".into(),
                content_source: Some("verbatim".into()),
                parts: None,
            }]),
        };
        let completed = RuntimeEvent::StepCompleted {
            base: base("2222222222222222", Some("1111111111111111")),
            step_id: "step_1".into(),
            step_index: 0,
            turn_id: "turn_1".into(),
            tool_call_count: 0,
            duration: 1,
            token_usage: None,
            model: None,
            cost_usd: None,
        };
        for capture in [false, true] {
            let (keep, spans) = spans(capture);
            assert_eq!(spans.captures_message_content(), capture);
            spans.record(&started);
            spans.record(&completed);
            let done = keep.0.lock().unwrap().clone();
            let messages = attribute(&done[0], "gen_ai.input.messages");
            if capture {
                let messages = messages.expect("captured");
                assert!(
                    messages.contains("use [REDACTED:MY_TOKEN] please"),
                    "{messages}"
                );
                assert!(messages.contains(r#""role":"user""#), "{messages}");
            } else {
                assert_eq!(messages, None);
            }
        }
    }
}
