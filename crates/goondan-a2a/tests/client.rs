//! The A2A client against real HTTP servers on 127.0.0.1 that speak the
//! wire as `a2a-sdk` 1.3 does, and against hostile ones: a huge body, an
//! endless stream, garbage, a card that leads elsewhere.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::future::BoxFuture;
use goondan_a2a::types::{StreamResponse, TaskState};
use goondan_a2a::{A2aError, EndpointGuard, RemoteAgent, RemoteConfig, SendArgs};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the fake agent answers a JSON-RPC call with.
enum Reply {
    Json(Value),
    /// SSE events, each a JSON-RPC response's `result`; `endless` keeps the
    /// stream open with comments afterwards.
    Stream {
        results: Vec<Value>,
        endless: bool,
    },
    Raw(&'static str, Vec<u8>),
    Status(StatusCode, Vec<(&'static str, String)>),
}

type Decide = dyn Fn(&Value) -> Reply + Send + Sync;

struct Fake {
    card: Mutex<Value>,
    decide: Box<Decide>,
    /// Every request: its method (`card` for the card) and headers.
    seen: Mutex<Vec<(String, HeaderMap, Value)>>,
}

async fn serve_card(State(fake): State<Arc<Fake>>, headers: HeaderMap) -> Json<Value> {
    fake.seen
        .lock()
        .unwrap()
        .push(("card".into(), headers, Value::Null));
    Json(fake.card.lock().unwrap().clone())
}

async fn rpc(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    Json(request): Json<Value>,
) -> Response {
    let method = request["method"].as_str().unwrap_or_default().to_string();
    fake.seen
        .lock()
        .unwrap()
        .push((method, headers, request.clone()));
    let id = request["id"].clone();
    match (fake.decide)(&request) {
        Reply::Json(body) => Json(body).into_response(),
        Reply::Stream { results, endless } => {
            let events = results.into_iter().map(move |result| {
                let line = json!({"jsonrpc": "2.0", "id": id, "result": result});
                Ok::<_, std::io::Error>(format!("data: {line}\n\n").into_bytes())
            });
            let head = futures_util::stream::iter(events);
            let body = if endless {
                let tail = futures_util::stream::unfold((), |()| async {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Some((Ok(b": keep-alive\n\n".to_vec()), ()))
                });
                Body::from_stream(futures_util::StreamExt::chain(head, tail))
            } else {
                Body::from_stream(head)
            };
            ([("content-type", "text/event-stream")], body).into_response()
        }
        Reply::Raw(content_type, bytes) => {
            ([("content-type", content_type)], bytes).into_response()
        }
        Reply::Status(status, headers) => {
            let mut response = status.into_response();
            for (name, value) in headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        }
    }
}

/// A fake agent serving `card_json(addr)` and answering with `decide`.
async fn serve(
    card_json: impl FnOnce(SocketAddr) -> Value,
    decide: impl Fn(&Value) -> Reply + Send + Sync + 'static,
) -> (SocketAddr, Arc<Fake>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let fake = Arc::new(Fake {
        card: Mutex::new(card_json(address)),
        decide: Box::new(decide),
        seen: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/.well-known/agent-card.json", get(serve_card))
        .route("/rpc", post(rpc))
        .with_state(fake.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (address, fake)
}

fn card_at(url: String, streaming: bool) -> Value {
    json!({
        "name": "echo", "description": "echoes", "version": "1",
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": streaming},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"], "skills": []
    })
}

fn card(streaming: bool) -> impl FnOnce(SocketAddr) -> Value {
    move |address| card_at(format!("http://{address}/rpc"), streaming)
}

/// A guard that records what it was asked and answers as told.
struct Guard {
    asked: Mutex<Vec<String>>,
    allow: bool,
}

impl EndpointGuard for Guard {
    fn check<'a>(
        &'a self,
        url: &'a goondan_a2a::Url,
    ) -> BoxFuture<'a, Result<Vec<SocketAddr>, String>> {
        Box::pin(async move {
            self.asked.lock().unwrap().push(url.to_string());
            if self.allow {
                Ok(vec!["127.0.0.1:0".parse().unwrap()])
            } else {
                Err("loopback address".into())
            }
        })
    }
}

fn guard(allow: bool) -> Arc<Guard> {
    Arc::new(Guard {
        asked: Mutex::new(Vec::new()),
        allow,
    })
}

fn agent(address: SocketAddr, guard: Arc<Guard>, timeout_ms: u64, max_bytes: u64) -> RemoteAgent {
    RemoteAgent::new(
        RemoteConfig {
            name: "remote".into(),
            url: format!("http://{address}").parse().unwrap(),
            headers: vec![("Authorization".into(), "Bearer s3cret".into())],
            timeout: Duration::from_millis(timeout_ms),
            max_answer_bytes: max_bytes,
        },
        guard,
    )
    .unwrap()
}

fn text_args(text: &str) -> SendArgs {
    SendArgs {
        text: text.into(),
        ..SendArgs::default()
    }
}

fn status(state: &str, text: Option<&str>) -> Value {
    let mut status = json!({"taskId": "t1", "contextId": "c1", "status": {"state": state}});
    if let Some(text) = text {
        status["status"]["message"] =
            json!({"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": text}]});
    }
    json!({"statusUpdate": status})
}

fn chunk(text: &str, append: bool) -> Value {
    json!({"artifactUpdate": {"taskId": "t1", "contextId": "c1", "append": append,
        "artifact": {"artifactId": "a1", "parts": [{"text": text}]}}})
}

async fn send(
    agent: &RemoteAgent,
    text: &str,
) -> (Result<goondan_a2a::Answer, A2aError>, Vec<StreamResponse>) {
    let updates = Mutex::new(Vec::new());
    let outcome = agent
        .send(&text_args(text), &|item: &StreamResponse| {
            updates.lock().unwrap().push(item.clone())
        })
        .await;
    (outcome, updates.into_inner().unwrap())
}

#[tokio::test]
async fn a_stream_is_folded_into_the_answer_and_every_item_is_shown() {
    let (address, fake) = serve(card(true), |request| {
        assert_eq!(request["method"], "SendStreamingMessage");
        let message = &request["params"]["message"];
        assert_eq!(message["role"], "ROLE_USER");
        let text = message["parts"][0]["text"].as_str().unwrap().to_string();
        Reply::Stream {
            results: vec![
                json!({"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_SUBMITTED"}}}),
                status("TASK_STATE_WORKING", Some("thinking")),
                chunk("echo: ", false),
                chunk(&text, true),
                status("TASK_STATE_COMPLETED", None),
            ],
            endless: true,
        }
    })
    .await;
    let agent = agent(address, guard(false), 5_000, 100_000);
    let (answer, updates) = send(&agent, "hi").await;
    let answer = answer.unwrap();
    assert_eq!(answer.text, "echo: hi");
    assert_eq!(answer.task_id.as_deref(), Some("t1"));
    assert_eq!(answer.context_id.as_deref(), Some("c1"));
    assert_eq!(answer.state, TaskState::Completed);
    assert_eq!(updates.len(), 5);
    // The stream was left at the final state, though the server kept it
    // open; a second call reuses the card.
    let (again, _) = send(&agent, "again").await;
    assert_eq!(again.unwrap().text, "echo: again");
    let seen = fake.seen.lock().unwrap();
    let methods: Vec<&str> = seen.iter().map(|(method, ..)| method.as_str()).collect();
    assert_eq!(
        methods,
        ["card", "SendStreamingMessage", "SendStreamingMessage"]
    );
    for (_, headers, _) in seen.iter() {
        assert_eq!(headers["a2a-version"], "1.0");
        assert_eq!(headers["authorization"], "Bearer s3cret");
    }
}

#[tokio::test]
async fn send_message_polls_a_working_task_and_continues_a_conversation() {
    let polls = Arc::new(Mutex::new(0));
    let counted = polls.clone();
    let (address, fake) = serve(card(false), move |request| match request["method"].as_str() {
        Some("SendMessage") => Reply::Json(json!({"jsonrpc": "2.0", "id": request["id"],
            "result": {"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"}}}})),
        Some("GetTask") => {
            assert_eq!(request["params"]["id"], "t1");
            let mut polls = counted.lock().unwrap();
            *polls += 1;
            let state = if *polls < 2 { "TASK_STATE_WORKING" } else { "TASK_STATE_COMPLETED" };
            Reply::Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": {
                "id": "t1", "contextId": "c1", "status": {"state": state},
                "artifacts": [{"artifactId": "a", "parts": [{"text": "done"}]}]}}))
        }
        other => panic!("unexpected {other:?}"),
    })
    .await;
    let agent = agent(address, guard(false), 5_000, 100_000);
    let args = SendArgs {
        text: "go".into(),
        context_id: Some("c1".into()),
        task_id: Some("t0".into()),
    };
    let answer = agent.send(&args, &|_: &StreamResponse| {}).await.unwrap();
    assert_eq!(answer.text, "done");
    assert_eq!(*polls.lock().unwrap(), 2);
    let seen = fake.seen.lock().unwrap();
    let message = &seen[1].2["params"]["message"];
    assert_eq!(message["contextId"], "c1");
    assert_eq!(message["taskId"], "t0");
}

#[tokio::test]
async fn a_direct_message_is_an_answer() {
    let (address, _) = serve(card(false), |request| {
        Reply::Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": {"message": {
            "messageId": "m1", "contextId": "c9", "role": "ROLE_AGENT", "parts": [{"text": "hello"}]}}}))
    })
    .await;
    let (answer, _) = send(&agent(address, guard(false), 5_000, 100_000), "x").await;
    let answer = answer.unwrap();
    assert_eq!(
        (
            answer.text.as_str(),
            answer.context_id.as_deref(),
            answer.task_id
        ),
        ("hello", Some("c9"), None)
    );
}

#[tokio::test]
async fn tasks_that_end_without_an_answer_are_coded_errors_with_their_ids() {
    for (state, code) in [
        ("TASK_STATE_FAILED", "E_A2A_TASK_FAILED"),
        ("TASK_STATE_REJECTED", "E_A2A_TASK_REJECTED"),
        ("TASK_STATE_CANCELED", "E_A2A_TASK_CANCELED"),
        ("TASK_STATE_INPUT_REQUIRED", "E_A2A_INPUT_REQUIRED"),
    ] {
        let (address, _) = serve(card(true), move |_| Reply::Stream {
            results: vec![status(state, Some("why not"))],
            endless: true,
        })
        .await;
        let (outcome, _) = send(&agent(address, guard(false), 5_000, 100_000), "x").await;
        let error = outcome.unwrap_err();
        assert_eq!(error.code(), code);
        let text = error.to_string();
        assert!(
            text.contains("task t1 (contextId c1)") && text.contains("why not"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_json_rpc_refusal_is_a_remote_error() {
    let (address, _) = serve(card(true), |request| {
        Reply::Json(json!({"jsonrpc": "2.0", "id": request["id"],
            "error": {"code": -32602, "message": "bad params"}}))
    })
    .await;
    let (outcome, _) = send(&agent(address, guard(false), 5_000, 100_000), "x").await;
    let error = outcome.unwrap_err();
    assert_eq!(error.code(), "E_A2A_REMOTE");
    assert!(error.to_string().contains("-32602") && error.to_string().contains("bad params"));
}

#[tokio::test]
async fn hostile_answers_are_bounded_and_coded() {
    // A body far past the limit.
    let (address, _) = serve(card(false), |_| {
        Reply::Raw("application/json", vec![b' '; 1 << 20])
    })
    .await;
    let (outcome, _) = send(&agent(address, guard(false), 5_000, 10_000), "x").await;
    assert_eq!(outcome.unwrap_err().code(), "E_A2A_TOO_LARGE");

    // A stream that never says anything final: the deadline ends it.
    let (address, _) = serve(card(true), |_| Reply::Stream {
        results: vec![status("TASK_STATE_WORKING", None)],
        endless: true,
    })
    .await;
    let (outcome, updates) = send(&agent(address, guard(false), 300, 1 << 30), "x").await;
    assert_eq!(outcome.unwrap_err().code(), "E_A2A_TIMEOUT");
    assert_eq!(updates.len(), 1);

    // The same stream with a byte limit: refused at the limit, not later.
    let (address, _) = serve(card(true), |_| Reply::Stream {
        results: vec![status("TASK_STATE_WORKING", None)],
        endless: true,
    })
    .await;
    let (outcome, _) = send(&agent(address, guard(false), 30_000, 2_000), "x").await;
    assert_eq!(outcome.unwrap_err().code(), "E_A2A_TOO_LARGE");

    // Garbage, plain and streamed.
    let (address, _) = serve(card(false), |_| {
        Reply::Raw("application/json", b"{not json".to_vec())
    })
    .await;
    let (outcome, _) = send(&agent(address, guard(false), 5_000, 10_000), "x").await;
    let error = outcome.unwrap_err();
    assert_eq!(error.code(), "E_A2A_PROTOCOL", "{error}");
    assert!(error.to_string().contains("{not json"), "{error}");
    let (address, _) = serve(card(true), |_| {
        Reply::Raw("text/event-stream", b"data: [1, 2\n\n".to_vec())
    })
    .await;
    let (outcome, _) = send(&agent(address, guard(false), 5_000, 10_000), "x").await;
    assert_eq!(outcome.unwrap_err().code(), "E_A2A_PROTOCOL");
}

#[tokio::test]
async fn cards_that_cannot_be_used_are_refused_and_fetched_again_next_time() {
    let (address, fake) = serve(
        |address| {
            json!({"name": "old", "url": format!("http://{address}/rpc"), "preferredTransport": "JSONRPC",
                "supportedInterfaces": [{"url": format!("http://{address}/g"), "protocolBinding": "GRPC"}]})
        },
        |_| panic!("never called"),
    )
    .await;
    let agent = agent(address, guard(false), 5_000, 10_000);
    let (outcome, _) = send(&agent, "x").await;
    let error = outcome.unwrap_err();
    assert_eq!(error.code(), "E_A2A_CARD");
    assert!(error.to_string().contains("offered: [GRPC]"), "{error}");
    *fake.card.lock().unwrap() = card_at("not a url at all::".into(), false);
    let (outcome, _) = send(&agent, "x").await;
    assert_eq!(outcome.unwrap_err().code(), "E_A2A_CARD");
    let fetched = fake
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(method, ..)| method == "card")
        .count();
    assert_eq!(fetched, 2, "a refused card is not kept");
}

#[tokio::test]
async fn nothing_listening_is_unreachable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let (outcome, _) = send(&agent(address, guard(false), 5_000, 10_000), "x").await;
    let error = outcome.unwrap_err();
    assert_eq!(error.code(), "E_A2A_UNREACHABLE", "{error}");
    assert!(!format!("{error:?}").contains("s3cret"));
}

#[tokio::test]
async fn an_endpoint_on_another_origin_passes_the_guard_and_redirects_stay_home() {
    // The card names `localhost`, another origin than `127.0.0.1`.
    let (address, _) = serve(
        |address| card_at(format!("http://localhost:{}/rpc", address.port()), false),
        |request| {
            Reply::Json(
                json!({"jsonrpc": "2.0", "id": request["id"], "result": {"message": {
                "messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "via localhost"}]}}}),
            )
        },
    )
    .await;
    let refusing = guard(false);
    let (outcome, _) = send(&agent(address, refusing.clone(), 5_000, 10_000), "x").await;
    let error = outcome.unwrap_err();
    assert_eq!(error.code(), "E_A2A_BLOCKED", "{error}");
    assert_eq!(
        *refusing.asked.lock().unwrap(),
        [format!("http://localhost:{}/rpc", address.port())]
    );
    // Allowed, it is reached at the address the guard checked.
    let (outcome, _) = send(&agent(address, guard(true), 5_000, 10_000), "x").await;
    assert_eq!(outcome.unwrap().text, "via localhost");

    // A redirect out of the configured origin is not followed.
    let (address, _) = serve(card(false), |_| {
        Reply::Status(
            StatusCode::TEMPORARY_REDIRECT,
            vec![("location", "http://169.254.169.254/latest".into())],
        )
    })
    .await;
    let (outcome, _) = send(&agent(address, guard(true), 5_000, 10_000), "x").await;
    let error = outcome.unwrap_err();
    assert_eq!(error.code(), "E_A2A_BLOCKED", "{error}");
    assert!(error.to_string().contains("169.254.169.254"), "{error}");
}
