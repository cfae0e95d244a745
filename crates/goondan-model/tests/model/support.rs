//! Test support: a mock LLM server on 127.0.0.1 that records every request
//! and answers from a queue of canned wire-format replies, a log capture,
//! and a delta-recording stream observer.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use goondan_model::{ApiKey, ModelConfig, StreamObserver};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The key every HTTP test uses; it must never show up in logs or errors.
pub const SECRET: &str = "sk-test-SECRET-0123456789";

/// One canned reply.
#[derive(Clone)]
pub struct Canned {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
    chunk_size: Option<usize>,
}

impl Canned {
    pub fn json(status: u16, body: Value) -> Self {
        Canned {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string(),
            chunk_size: None,
        }
    }

    /// An SSE body, sent in small chunks that split lines and events.
    pub fn sse(events: &[(&str, Value)]) -> Self {
        let mut body = String::new();
        for (name, data) in events {
            if !name.is_empty() {
                body.push_str(&format!("event: {name}\n"));
            }
            body.push_str(&format!("data: {data}\n\n"));
        }
        Self::sse_raw(body)
    }

    pub fn sse_raw(body: String) -> Self {
        Canned {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body,
            chunk_size: Some(7),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A request the mock received.
#[derive(Debug, Clone)]
pub struct Captured {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Value,
}

#[derive(Default)]
struct MockState {
    replies: Mutex<VecDeque<Canned>>,
    requests: Mutex<Vec<Captured>>,
}

/// The mock server; it lives as long as the test's runtime.
pub struct MockServer {
    pub base_url: String,
    state: Arc<MockState>,
}

impl MockServer {
    pub async fn start(replies: Vec<Canned>) -> Self {
        let state = Arc::new(MockState::default());
        state.replies.lock().unwrap().extend(replies);
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        MockServer {
            base_url: format!("http://{address}"),
            state,
        }
    }

    pub fn requests(&self) -> Vec<Captured> {
        self.state.requests.lock().unwrap().clone()
    }
}

async fn handle(
    State(state): State<Arc<MockState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let captured = Captured {
        method: method.to_string(),
        path: uri
            .path_and_query()
            .map(|pq| pq.as_str().to_string())
            .unwrap_or_default(),
        headers: headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_string(),
                    value.to_str().unwrap_or_default().to_string(),
                )
            })
            .collect(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    state.requests.lock().unwrap().push(captured);
    let Some(canned) = state.replies.lock().unwrap().pop_front() else {
        return (StatusCode::IM_A_TEAPOT, "no canned reply left").into_response();
    };
    let mut builder = Response::builder().status(canned.status);
    for (name, value) in &canned.headers {
        builder = builder.header(name, value);
    }
    let body = match canned.chunk_size {
        Some(size) => {
            let chunks: Vec<Result<Bytes, std::io::Error>> = canned
                .body
                .into_bytes()
                .chunks(size)
                .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
                .collect();
            Body::from_stream(futures_util::stream::iter(chunks))
        }
        None => Body::from(canned.body),
    };
    builder.body(body).unwrap()
}

/// A config pointing `provider` at the mock, with the test key, fast
/// retries and the given extra options.
pub fn http_config(provider: &str, endpoint: &str, options: Value) -> ModelConfig {
    let mut config = ModelConfig::new("test-model", provider, "test-model-id", "/nonexistent");
    config.endpoint = Some(endpoint.to_string());
    config.api_key = Some(ApiKey::new(SECRET));
    let mut merged = json!({"retryBaseDelayMs": 1, "stream": false});
    for (key, value) in options.as_object().cloned().unwrap_or_default() {
        merged[key] = value;
    }
    config.options = merged.as_object().cloned().unwrap();
    config
}

/// An empty environment.
pub fn no_env() -> HashMap<String, String> {
    HashMap::new()
}

/// Records text deltas.
#[derive(Default)]
pub struct Deltas(pub Mutex<Vec<String>>);

impl StreamObserver for Deltas {
    fn on_text_delta(&self, delta: &str) {
        self.0.lock().unwrap().push(delta.to_string());
    }
}

impl Deltas {
    pub fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Log lines written while the guard lives, at every level.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl Write for LogCapture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    pub fn install(&self) -> tracing::subscriber::DefaultGuard {
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Writes `text` to `dir/name`.
pub fn write_file(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}
