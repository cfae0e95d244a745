//! A mock OpenAI Chat Completions server on `127.0.0.1:0` for tests that
//! drive real agent processes. It stands in for the one thing outside this
//! machine: the LLM.
//!
//! A test gives it a `decide` function that picks each answer from the
//! request (usually from the agent's system prompt and the last message);
//! the server records every request (headers that matter and the JSON
//! body) so the test can assert what the agents sent. Answers are streamed
//! as SSE when the request asks for `stream: true` (the provider's
//! default), as one JSON body otherwise. [`Reply::Hang`] never answers,
//! which is how tests hold an agent mid-Turn.
//!
//! Each answer reports a `usage` block that differs per request (the
//! prompt tokens grow with the conversation, the completion tokens with
//! the request's number), and the server keeps what it reported
//! ([`ChatRequest::reported_usage`]), so ledger tests can compare sums. It
//! does not model rate limits: the provider's own tests in `goondan-model`
//! cover those.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// One request as the server received it.
#[derive(Debug, Clone)]
pub(crate) struct ChatRequest {
    /// The `Authorization` header, when sent.
    pub(crate) authorization: Option<String>,
    /// The JSON body.
    pub(crate) body: Value,
    /// The `(prompt_tokens, completion_tokens)` the answer reported;
    /// `None` when it did not answer with a completion (hang, error).
    pub(crate) reported_usage: Option<(u64, u64)>,
}

impl ChatRequest {
    /// `body.messages`.
    pub(crate) fn messages(&self) -> &[Value] {
        self.body["messages"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// Every system message's text, joined by newlines.
    pub(crate) fn system(&self) -> String {
        self.messages()
            .iter()
            .filter(|message| message["role"] == "system")
            .filter_map(|message| message["content"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The last message of the conversation.
    pub(crate) fn last(&self) -> &Value {
        self.messages().last().unwrap_or(&Value::Null)
    }

    /// The text of the last `user` message.
    pub(crate) fn last_user_text(&self) -> String {
        self.messages()
            .iter()
            .rev()
            .find(|message| message["role"] == "user")
            .map(|message| match &message["content"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default()
    }

    /// The content of the last message when it is a tool result.
    pub(crate) fn tool_result(&self) -> Option<&str> {
        let last = self.last();
        (last["role"] == "tool")
            .then(|| last["content"].as_str())
            .flatten()
    }

    /// True when this request was made by the agent whose system prompt
    /// contains `marker`.
    pub(crate) fn is_from(&self, marker: &str) -> bool {
        self.system().contains(marker)
    }
}

/// What the mock answers.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// An assistant message with this text and `finish_reason: stop`.
    Text(String),
    /// One tool call (`finish_reason: tool_calls`).
    ToolCall {
        /// The tool name as the catalog spells it (`agents__request`).
        name: String,
        /// The arguments object.
        arguments: Value,
    },
    /// Never answers; the connection stays open until the client gives up
    /// or the server stops.
    Hang,
    /// An HTTP error with this status and an OpenAI-style error body.
    Status(u16),
    /// The inner reply, sent after this long (the request is recorded at
    /// once, so a test sees it while its answer is still to come).
    Delayed(Duration, Box<Reply>),
}

impl Reply {
    /// A text answer.
    pub(crate) fn text(text: impl Into<String>) -> Reply {
        Reply::Text(text.into())
    }

    /// A tool-call answer.
    pub(crate) fn tool(name: &str, arguments: Value) -> Reply {
        Reply::ToolCall {
            name: name.to_string(),
            arguments,
        }
    }
}

type Decide = Arc<dyn Fn(&ChatRequest) -> Reply + Send + Sync>;

#[derive(Clone)]
struct Shared {
    decide: Decide,
    requests: Arc<Mutex<Vec<ChatRequest>>>,
}

/// A running mock server; stops when dropped.
pub(crate) struct MockLlm {
    address: SocketAddr,
    requests: Arc<Mutex<Vec<ChatRequest>>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MockLlm {
    /// Starts a server on a free loopback port, answering with `decide`.
    pub(crate) fn start(decide: impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static) -> MockLlm {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding the mock LLM");
        listener.set_nonblocking(true).expect("non-blocking socket");
        let address = listener.local_addr().expect("the mock's address");
        let requests: Arc<Mutex<Vec<ChatRequest>>> = Arc::default();
        let shared = Shared {
            decide: Arc::new(decide),
            requests: requests.clone(),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the mock's runtime");
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                let app = Router::new()
                    .route("/v1/chat/completions", post(chat_completions))
                    .with_state(shared);
                // A hanging request would hold a graceful shutdown forever,
                // so the server is dropped (with its connections) instead.
                tokio::select! {
                    _ = axum::serve(listener, app) => {}
                    _ = stopped => {}
                }
            });
            runtime.shutdown_background();
        });
        MockLlm {
            address,
            requests,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The base URL a Model's `spec.endpoint` takes (`/v1` included).
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// A `Model` document named `mock-gpt` on this mock (OpenAI's wire,
    /// no retries: a failed call fails its Turn at once), ending with
    /// the `---` that starts the next document.
    pub(crate) fn model_yaml(&self) -> String {
        format!(
            "apiVersion: goondan.ai/v1\nkind: Model\nmetadata:\n  name: mock-gpt\nspec:\n  provider: openai\n  model: gpt-mock\n  endpoint: \"{}\"\n  options:\n    maxRetries: 0\n---\n",
            self.endpoint()
        )
    }

    /// Every request so far, oldest first.
    pub(crate) fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// Waits until some request satisfies `condition`, and returns it.
    pub(crate) fn wait_for(
        &self,
        what: &str,
        condition: impl Fn(&ChatRequest) -> bool,
    ) -> ChatRequest {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(found) = self.requests().into_iter().find(|r| condition(r)) {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "the mock LLM never received {what}; got {:#?}",
                self.requests()
                    .iter()
                    .map(|r| &r.body["messages"])
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn chat_completions(
    State(shared): State<Shared>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .body(Body::from(r#"{"error":{"message":"body is not JSON"}}"#))
            .unwrap();
    };
    let mut request = ChatRequest {
        authorization: headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .map(str::to_string),
        body,
        reported_usage: None,
    };
    let mut delay = Duration::ZERO;
    let mut reply = (shared.decide)(&request);
    while let Reply::Delayed(more, inner) = reply {
        delay += more;
        reply = *inner;
    }
    let stream = request.body["stream"] == Value::Bool(true);
    let model = request.body["model"].clone();
    let n_messages = request.messages().len() as u64;
    let (sequence, prompt_tokens, completion_tokens) = {
        let mut requests = shared.requests.lock().unwrap();
        let sequence = requests.len() + 1;
        let prompt_tokens = 10 * n_messages + 1;
        let completion_tokens = 3 + (sequence as u64 % 5);
        if matches!(reply, Reply::Text(_) | Reply::ToolCall { .. }) {
            request.reported_usage = Some((prompt_tokens, completion_tokens));
        }
        requests.push(request);
        (sequence, prompt_tokens, completion_tokens)
    };
    tokio::time::sleep(delay).await;
    let (message, finish_reason) =
        match reply {
            Reply::Hang => std::future::pending().await,
            Reply::Delayed(..) => unreachable!("unwrapped above"),
            Reply::Status(status) => return Response::builder()
                .status(status)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(
                    r#"{"error":{"message":"refused by the mock","type":"invalid_request_error"}}"#,
                ))
                .unwrap(),
            Reply::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
            Reply::ToolCall { name, arguments } => (
                json!({
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{
                        "id": format!("call_mock_{sequence}"),
                        "type": "function",
                        "function": {"name": name, "arguments": arguments.to_string()},
                    }],
                }),
                "tool_calls",
            ),
        };
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                       "total_tokens": prompt_tokens + completion_tokens});
    let id = format!("chatcmpl-mock-{sequence}");
    if !stream {
        let body = json!({
            "id": id,
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage,
        });
        return Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
    }
    let mut delta = message;
    if let Some(calls) = delta["tool_calls"].as_array_mut() {
        for (index, call) in calls.iter_mut().enumerate() {
            call["index"] = json!(index);
        }
    }
    let chunks = [
        json!({"id": id, "object": "chat.completion.chunk", "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": null}]}),
        json!({"id": id, "object": "chat.completion.chunk", "model": model,
               "choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]}),
        json!({"id": id, "object": "chat.completion.chunk", "model": model,
               "choices": [], "usage": usage}),
    ];
    let mut text = String::new();
    for chunk in chunks {
        text.push_str(&format!("data: {chunk}\n\n"));
    }
    text.push_str("data: [DONE]\n\n");
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from(text))
        .unwrap()
}
