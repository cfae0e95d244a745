//! OTLP export end to end: the real `gdn` runs the two-agent `pair` swarm
//! with the `OTEL_*` variables pointing at a small OTLP/HTTP receiver on
//! 127.0.0.1, which decodes what arrives (protobuf with the generated OTLP
//! messages, JSON by hand from the OTLP JSON mapping) into plain spans.
//! One delegation (`agents__request`) must arrive as one trace across
//! both agent processes, named and attributed per the GenAI semantic
//! conventions; a collector that is down, or that accepts and never
//! answers, must change nothing in the Turn.

use crate::swarm::{code, relay, run_with_deadline, stderr, stdout, wait_until, Swarm, API_KEY};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

/// One span as the receiver understood it, whatever the encoding.
#[derive(Debug, Clone)]
struct ReceivedSpan {
    service: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    /// Attribute values as text (`10`, `alpha`).
    attributes: BTreeMap<String, String>,
}

impl ReceivedSpan {
    fn attribute(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    /// `(content-type, authorization)` of each request.
    requests: Vec<(String, String)>,
}

/// An OTLP/HTTP traces receiver on `127.0.0.1:0`.
struct Collector {
    address: SocketAddr,
    received: Arc<Mutex<Received>>,
    _thread: std::thread::JoinHandle<()>,
}

impl Collector {
    fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        let received: Arc<Mutex<Received>> = Arc::default();
        let state = received.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let app = Router::new()
                    .route("/v1/traces", post(receive))
                    .with_state(state);
                axum::serve(listener, app).await.unwrap();
            });
        });
        Collector {
            address,
            received,
            _thread: thread,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    fn spans(&self) -> Vec<ReceivedSpan> {
        self.received.lock().unwrap().spans.clone()
    }

    fn requests(&self) -> Vec<(String, String)> {
        self.received.lock().unwrap().requests.clone()
    }
}

async fn receive(
    State(received): State<Arc<Mutex<Received>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let content_type = header("content-type");
    let spans = if content_type.starts_with("application/x-protobuf") {
        match ExportTraceServiceRequest::decode(body) {
            Ok(request) => from_protobuf(request),
            Err(_) => return StatusCode::BAD_REQUEST,
        }
    } else if content_type.starts_with("application/json") {
        match serde_json::from_slice::<Value>(&body) {
            Ok(request) => from_json(&request),
            Err(_) => return StatusCode::BAD_REQUEST,
        }
    } else {
        return StatusCode::UNSUPPORTED_MEDIA_TYPE;
    };
    let mut received = received.lock().unwrap();
    received
        .requests
        .push((content_type, header("authorization")));
    received.spans.extend(spans);
    StatusCode::OK
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_protobuf(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let text = |value: Option<AnyValue>| match value {
        Some(AnyValue::StringValue(text)) => text,
        Some(AnyValue::IntValue(n)) => n.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    };
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .into_iter()
            .flat_map(|resource| resource.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.and_then(|v| v.value)))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                spans.push(ReceivedSpan {
                    service: service.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    attributes: span
                        .attributes
                        .into_iter()
                        .map(|kv| (kv.key, text(kv.value.and_then(|v| v.value))))
                        .collect(),
                });
            }
        }
    }
    spans
}

/// The OTLP JSON mapping: lowerCamelCase fields, ids as hex strings,
/// 64-bit integers as decimal strings.
fn from_json(request: &Value) -> Vec<ReceivedSpan> {
    let text = |value: &Value| -> String {
        for kind in ["stringValue", "intValue", "boolValue", "doubleValue"] {
            match &value[kind] {
                Value::Null => continue,
                Value::String(text) => return text.clone(),
                other => return other.to_string(),
            }
        }
        value.to_string()
    };
    let attributes = |list: &Value| -> BTreeMap<String, String> {
        list.as_array()
            .into_iter()
            .flatten()
            .map(|kv| {
                (
                    kv["key"].as_str().unwrap_or_default().to_string(),
                    text(&kv["value"]),
                )
            })
            .collect()
    };
    let mut spans = Vec::new();
    for resource_spans in request["resourceSpans"].as_array().into_iter().flatten() {
        let service = attributes(&resource_spans["resource"]["attributes"])
            .remove("service.name")
            .unwrap_or_default();
        for scope_spans in resource_spans["scopeSpans"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for span in scope_spans["spans"].as_array().into_iter().flatten() {
                let id = |field: &str| span[field].as_str().unwrap_or_default().to_lowercase();
                spans.push(ReceivedSpan {
                    service: service.clone(),
                    trace_id: id("traceId"),
                    span_id: id("spanId"),
                    parent_span_id: id("parentSpanId"),
                    name: span["name"].as_str().unwrap_or_default().to_string(),
                    attributes: attributes(&span["attributes"]),
                });
            }
        }
    }
    spans
}

/// The span named `name`, once it arrived.
fn span_named(collector: &Collector, name: &str) -> ReceivedSpan {
    wait_until(&format!("the span `{name}` at the collector"), || {
        collector.spans().into_iter().find(|span| span.name == name)
    })
}

/// Runs one delegation with export on over `protocol` and checks the
/// trace the collector got against the runtime events on disk. With
/// `capture`, message content is asked for and the input carries the API
/// key, which must arrive masked.
fn delegation_arrives_as_one_trace(protocol: &str, expected_content_type: &str, capture: bool) {
    let collector = Collector::start();
    let swarm = Swarm::pair(2, relay);
    let input = if capture {
        format!("ping {API_KEY}")
    } else {
        "ping".to_string()
    };
    let output = run_with_deadline({
        let mut command = swarm.command(&["run", "--input", &input]);
        command
            .env(
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
                capture.to_string(),
            )
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
            .env(
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20collector-token-4711",
            )
            .env("OTEL_SERVICE_NAME", "otel-e2e")
            .env_remove("OTEL_SDK_DISABLED")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        command
    });
    assert_eq!(code(&output), 0, "stderr: {}", stderr(&output));
    assert!(
        stdout(&output).starts_with("alpha heard: pong(ping"),
        "{}",
        stdout(&output)
    );

    let alpha_turn = span_named(&collector, "invoke_agent alpha");
    let beta_turn = span_named(&collector, "invoke_agent beta");
    let tool = span_named(&collector, "execute_tool agents__request");
    let spans = collector.spans();

    // One trace, the one the runtime recorded on disk.
    let trace_id = swarm.runtime_events("alpha")[0]["traceId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        spans.iter().all(|span| span.trace_id == trace_id),
        "{spans:#?}"
    );
    // alpha's Turn is the root; beta's Turn hangs under alpha's tool call,
    // which hangs under alpha's chat span, which hangs under its Turn.
    assert_eq!(alpha_turn.parent_span_id, "");
    assert_eq!(beta_turn.parent_span_id, tool.span_id);
    let alpha_chats: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.name == "chat gpt-mock" && s.attribute("gen_ai.agent.name") == "alpha")
        .collect();
    assert_eq!(alpha_chats.len(), 2, "two model calls of alpha: {spans:#?}");
    assert!(alpha_chats
        .iter()
        .all(|s| s.parent_span_id == alpha_turn.span_id));
    assert!(alpha_chats.iter().any(|s| s.span_id == tool.parent_span_id));
    let beta_chat = spans
        .iter()
        .find(|s| s.name == "chat gpt-mock" && s.attribute("gen_ai.agent.name") == "beta")
        .expect("beta's chat span");
    assert_eq!(beta_chat.parent_span_id, beta_turn.span_id);
    // The same span ids as the runtime events.
    let beta_started = swarm
        .runtime_events("beta")
        .into_iter()
        .find(|e| e["type"] == "turn.started")
        .unwrap();
    assert_eq!(beta_started["spanId"], beta_turn.span_id.as_str());

    // GenAI attributes.
    assert_eq!(
        alpha_turn.attribute("gen_ai.operation.name"),
        "invoke_agent"
    );
    assert_eq!(alpha_turn.attribute("gen_ai.agent.name"), "alpha");
    assert_eq!(alpha_turn.attribute("gen_ai.provider.name"), "openai");
    assert_eq!(alpha_turn.attribute("gen_ai.request.model"), "gpt-mock");
    // The usage the mock reported: alpha's two calls summed on its Turn,
    // beta's one call on its chat span.
    let reported = |agent: &str| {
        swarm
            .mock
            .requests()
            .iter()
            .filter(|request| request.is_from(agent))
            .filter_map(|request| request.reported_usage)
            .fold((0, 0), |(input, output), (i, o)| (input + i, output + o))
    };
    let (alpha_in, alpha_out) = reported("agent ALPHA");
    let (beta_in, beta_out) = reported("agent BETA");
    assert_eq!(
        alpha_turn.attribute("gen_ai.usage.input_tokens"),
        alpha_in.to_string()
    );
    assert_eq!(
        alpha_turn.attribute("gen_ai.usage.output_tokens"),
        alpha_out.to_string()
    );
    assert_eq!(beta_chat.attribute("gen_ai.operation.name"), "chat");
    assert_eq!(
        beta_chat.attribute("gen_ai.usage.input_tokens"),
        beta_in.to_string()
    );
    assert_eq!(
        beta_chat.attribute("gen_ai.usage.output_tokens"),
        beta_out.to_string()
    );
    assert_eq!(tool.attribute("gen_ai.operation.name"), "execute_tool");
    assert_eq!(tool.attribute("gen_ai.tool.name"), "agents__request");
    let tool_called = swarm
        .runtime_events("alpha")
        .into_iter()
        .find(|e| e["type"] == "tool.called")
        .unwrap();
    assert_eq!(
        tool.attribute("gen_ai.tool.call.id"),
        tool_called["toolCallId"]
    );
    assert!(spans.iter().all(|span| span.service == "otel-e2e"));
    if capture {
        // Alpha's first model call: its system prompt and the user's
        // input, the key masked; the local runtime events stay without
        // content.
        let first = alpha_chats
            .iter()
            .find(|s| s.attribute("goondan.step.index") == "0")
            .unwrap();
        let messages: Value = serde_json::from_str(first.attribute("gen_ai.input.messages"))
            .expect("gen_ai.input.messages is JSON");
        let text = messages.to_string();
        assert!(text.contains("You are agent ALPHA."), "{text}");
        assert!(text.contains("ping [REDACTED:OPENAI_API_KEY]"), "{text}");
        assert!(!text.contains(API_KEY), "{text}");
        assert_eq!(messages[0]["parts"][0]["type"], "text");
    } else {
        assert!(spans
            .iter()
            .all(|span| !span.attributes.keys().any(|k| k.contains("messages"))));
    }

    let requests = collector.requests();
    assert!(!requests.is_empty());
    for (content_type, authorization) in &requests {
        assert!(
            content_type.starts_with(expected_content_type),
            "{content_type}"
        );
        assert_eq!(authorization, "Bearer collector-token-4711");
    }
}

#[test]
fn a_delegation_reaches_an_otlp_protobuf_receiver_as_one_genai_trace() {
    delegation_arrives_as_one_trace("http/protobuf", "application/x-protobuf", false);
}

#[test]
fn a_delegation_reaches_an_otlp_json_receiver_as_one_genai_trace_with_masked_content() {
    delegation_arrives_as_one_trace("http/json", "application/json", true);
}

/// Runs the delegation with the collector at `endpoint` and returns what
/// the user and the store saw.
fn turn_with_collector_at(endpoint: &str) -> (String, Vec<Value>) {
    let swarm = Swarm::pair(2, relay);
    let output = run_with_deadline({
        let mut command = swarm.command(&["run", "--input", "ping"]);
        command
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            // Short enough that the test does not wait on the default
            // ten seconds if an export were on the Turn's path.
            .env("OTEL_BSP_SCHEDULE_DELAY", "50")
            .env_remove("OTEL_SDK_DISABLED");
        command
    });
    assert_eq!(code(&output), 0, "stderr: {}", stderr(&output));
    (stdout(&output), swarm.conversation("alpha"))
}

fn texts(conversation: &[Value]) -> Vec<String> {
    conversation
        .iter()
        .map(|data| format!("{}: {}", data["role"], data["content"]))
        .map(|line| {
            // Tool-call ids are random per run.
            line.split("\"toolCallId\"")
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn a_collector_that_is_down_or_never_answers_changes_nothing_in_the_turn() {
    let (baseline_out, baseline) = {
        let swarm = Swarm::pair(2, relay);
        let output = swarm.run(&["run", "--input", "ping"]);
        assert_eq!(code(&output), 0, "stderr: {}", stderr(&output));
        (stdout(&output), swarm.conversation("alpha"))
    };

    // A port nothing listens on.
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let (out, conversation) = turn_with_collector_at(&format!("http://{closed}"));
    assert_eq!(out, baseline_out);
    assert_eq!(texts(&conversation), texts(&baseline));

    // A collector that accepts connections and never reads or answers.
    let (silent_address, held) = crate::silent_server();
    let (out, conversation) = turn_with_collector_at(&format!("http://{silent_address}"));
    assert_eq!(out, baseline_out);
    assert_eq!(texts(&conversation), texts(&baseline));
    assert!(
        !held.lock().unwrap().is_empty(),
        "the agents did try to export to the silent collector"
    );
}

#[test]
fn an_unusable_otel_setting_starts_nothing_and_names_the_variable() {
    let swarm = Swarm::pair(2, relay);
    for (variable, value, code_text) in [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "E_OTEL_PROTOCOL"),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "collector:4318",
            "E_OTEL_ENDPOINT",
        ),
        ("OTEL_EXPORTER_OTLP_HEADERS", "api-key", "E_OTEL_HEADERS"),
    ] {
        let output = run_with_deadline({
            let mut command = swarm.command(&["run", "--input", "ping"]);
            command
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
                .env(variable, value)
                .env_remove("OTEL_SDK_DISABLED");
            command
        });
        assert_eq!(code(&output), 3, "{variable}={value}: {}", stderr(&output));
        let error = stderr(&output);
        assert!(
            error.contains(code_text) && error.contains(variable),
            "{error}"
        );
        assert!(error.contains("nothing was started"), "{error}");
        assert!(swarm.mock.requests().is_empty(), "no agent ran");
    }
}
