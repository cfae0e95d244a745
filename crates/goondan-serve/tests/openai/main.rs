//! The OpenAI-compatible API over real HTTP on 127.0.0.1, against a swarm
//! in the test's process ([`double`]): every route with good and bad
//! input, streams read as a client reads them, a client that goes away
//! mid-Turn, and the official `openai` Python package as a client
//! ([`sdk`]).

mod double;
mod sdk;

use double::{usage_of, Ending, Server};
use futures_util::StreamExt;
use goondan_serve::{Limits, PriorRole};
use serde_json::{json, Value};
use std::time::Duration;

/// The status and JSON body of a finished request.
async fn answer(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| json!({"raw": text}));
    (status, body)
}

/// Asserts an OpenAI error body: its status, type and code, a message
/// that starts with `code_prefix`.
fn assert_error(status: u16, body: &Value, want: u16, kind: &str, code: &str, message_start: &str) {
    assert_eq!(status, want, "{body}");
    let error = &body["error"];
    assert_eq!(error["type"], kind, "{body}");
    assert_eq!(error["code"], code, "{body}");
    let message = error["message"].as_str().unwrap_or("");
    assert!(message.starts_with(message_start), "{body}");
    assert!(
        error.get("param").is_some(),
        "param is always there: {body}"
    );
}

/// The events of a finished SSE body: `(event name, data)`.
fn sse_events(text: &str) -> Vec<(Option<String>, String)> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .filter_map(|block| {
            let mut name = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event: ") {
                    name = Some(value.to_string());
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data.push(value);
                }
            }
            (!data.is_empty()).then(|| (name, data.join("\n")))
        })
        .collect()
}

fn chat(model: &str, messages: Value) -> String {
    json!({"model": model, "messages": messages}).to_string()
}

#[tokio::test]
async fn models_are_the_swarms_agents() {
    let server = Server::start().await;
    let (status, body) = answer(server.get("/v1/models")).await;
    assert_eq!(status, 200);
    assert_eq!(body["object"], "list");
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|model| model["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["helper", "writer"]);
    for model in body["data"].as_array().unwrap() {
        assert_eq!(model["object"], "model");
        assert_eq!(model["owned_by"], "goondan");
        assert!(model["created"].as_u64().unwrap() > 1_700_000_000);
    }
    let (status, one) = answer(server.get("/v1/models/writer")).await;
    assert_eq!(status, 200);
    assert_eq!(one, body["data"][1]);
    let (status, body) = answer(server.get("/v1/models/nobody")).await;
    assert_error(
        status,
        &body,
        404,
        "not_found_error",
        "model_not_found",
        "E_SERVE_UNKNOWN_MODEL",
    );
    assert_eq!(body["error"]["param"], "model");
}

#[tokio::test]
async fn a_chat_without_an_instance_is_replayed_into_a_fresh_one() {
    let server = Server::start().await;
    let messages = json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "question"}]},
        {"role": "assistant", "content": "first answer"},
        {"role": "developer", "content": "Answer in English."},
        {"role": "user", "content": "second question"},
    ]);
    let (status, body) =
        answer(server.post("/v1/chat/completions", chat("writer", messages))).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "writer");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "echo: second question"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let requests = server.requests();
    let [request] = requests.as_slice() else {
        panic!("{requests:?}")
    };
    let usage = usage_of(request, 3);
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": usage.prompt_tokens, "completion_tokens": 3, "total_tokens": usage.total_tokens})
    );
    assert_eq!(request.agent, "writer");
    assert_eq!(request.source, "openai");
    assert_eq!(request.text, "second question");
    assert!(request.instance_key.starts_with("openai-"), "{request:?}");
    let history: Vec<(PriorRole, &str)> = request
        .history
        .iter()
        .map(|message| (message.role, message.text.as_str()))
        .collect();
    assert_eq!(
        history,
        [
            (PriorRole::System, "Be brief."),
            (PriorRole::User, "first\nquestion"),
            (PriorRole::Assistant, "first answer"),
            (PriorRole::System, "Answer in English."),
        ]
    );
    // The next such request gets another fresh instance.
    let again = chat("writer", json!([{"role": "user", "content": "hi"}]));
    let (status, _) = answer(server.post("/v1/chat/completions", again)).await;
    assert_eq!(status, 200);
    let requests = server.requests();
    assert_ne!(requests[0].instance_key, requests[1].instance_key);
    assert!(requests[1].history.is_empty());
}

#[tokio::test]
async fn a_named_instance_gets_only_the_last_message() {
    let server = Server::start().await;
    let messages = json!([
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "now"},
    ]);
    let with_user = json!({"model": "helper", "messages": messages, "user": "alice"}).to_string();
    let cases = [
        (
            Some("support-7"),
            chat("helper", messages.clone()),
            "support-7",
        ),
        (Some("support-8"), with_user, "support-8"),
    ];
    for (nth, (header, body, key)) in cases.into_iter().enumerate() {
        let mut request = server.post("/v1/chat/completions", body);
        if let Some(header) = header {
            request = request.header("X-Goondan-Instance", header);
        }
        let (status, body) = answer(request).await;
        assert_eq!(status, 200, "{body}");
        let sent = &server.requests()[nth];
        assert_eq!(sent.instance_key, key);
        assert_eq!(sent.text, "now");
        assert!(sent.history.is_empty(), "{sent:?}");
    }
}

#[tokio::test]
async fn a_streamed_chat_is_chunks_then_done() {
    let server = Server::start().await;
    let body = json!({
        "model": "helper",
        "messages": [{"role": "user", "content": "stream me"}],
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let response = server
        .post("/v1/chat/completions", body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let events = sse_events(&response.text().await.unwrap());
    let (last, chunks) = events.split_last().unwrap();
    assert_eq!(last.1, "[DONE]");
    let chunks: Vec<Value> = chunks
        .iter()
        .map(|(name, data)| {
            assert_eq!(*name, None, "chat chunks carry no event name");
            serde_json::from_str(data).unwrap()
        })
        .collect();
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"));
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["id"], id);
        assert_eq!(chunk["model"], "helper");
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let text: String = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "echo: stream me");
    let (usage_chunk, rest) = chunks.split_last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 3);
    assert_eq!(usage_chunk["usage"]["total_tokens"], 13);
    let stop = rest.last().unwrap();
    assert_eq!(stop["choices"][0]["finish_reason"], "stop");
    assert_eq!(stop["choices"][0]["delta"], json!({}));
    for chunk in &rest[..rest.len() - 1] {
        assert_eq!(chunk["choices"][0]["finish_reason"], Value::Null);
    }
    // Without `include_usage` no usage chunk: the stop chunk is last.
    let body =
        json!({"model": "helper", "messages": [{"role": "user", "content": "x"}], "stream": true});
    let text = server
        .post("/v1/chat/completions", body.to_string())
        .send()
        .await
        .unwrap();
    let events = sse_events(&text.text().await.unwrap());
    let stop: Value = serde_json::from_str(&events[events.len() - 2].1).unwrap();
    assert_eq!(stop["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn a_failed_turn_is_a_500_or_an_error_line_ending_the_stream() {
    let server = Server::start().await;
    let messages = json!([{"role": "user", "content": "please FAIL"}]);
    let (status, body) =
        answer(server.post("/v1/chat/completions", chat("helper", messages.clone()))).await;
    assert_error(
        status,
        &body,
        500,
        "server_error",
        "E_MODEL_HTTP",
        "E_MODEL_HTTP: the model answered 500",
    );

    let stream = json!({"model": "helper", "messages": messages, "stream": true});
    let response = server
        .post("/v1/chat/completions", stream.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "the stream had begun");
    let events = sse_events(&response.text().await.unwrap());
    let last: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(last["error"]["code"], "E_MODEL_HTTP", "{events:?}");
    assert_eq!(last["error"]["type"], "server_error");
    assert!(
        events.iter().all(|(_, data)| data != "[DONE]"),
        "{events:?}"
    );
    let partial: Value = serde_json::from_str(&events[1].1).unwrap();
    assert_eq!(partial["choices"][0]["delta"]["content"], "partial ");

    let (status, body) = answer(server.post(
        "/v1/responses",
        json!({"model": "helper", "input": "FAIL now"}).to_string(),
    ))
    .await;
    assert_error(
        status,
        &body,
        500,
        "server_error",
        "E_MODEL_HTTP",
        "E_MODEL_HTTP",
    );
}

#[tokio::test]
async fn a_refused_input_is_429_or_503_on_both_routes() {
    let server = Server::start().await;
    let cases = [
        (
            "QUEUE_FULL",
            429,
            "rate_limit_error",
            "E_QUEUE_FULL: the inbox is full (retry later)",
        ),
        (
            "NOT_RUNNING",
            503,
            "server_error",
            "E_ORCHESTRATOR_NOT_RUNNING: no swarm runs",
        ),
    ];
    for (text, status_wanted, kind, message) in cases {
        for stream in [false, true] {
            let bodies = [
                (
                    "/v1/chat/completions",
                    json!({"model": "helper", "messages": [{"role": "user", "content": text}], "stream": stream}),
                ),
                (
                    "/v1/responses",
                    json!({"model": "helper", "input": text, "stream": stream}),
                ),
            ];
            for (path, body) in bodies {
                let (status, body) = answer(server.post(path, body.to_string())).await;
                let code = message.split(':').next().unwrap();
                assert_error(status, &body, status_wanted, kind, code, message);
                assert_eq!(body["error"]["message"], message);
            }
        }
    }
}

#[tokio::test]
async fn bad_input_is_refused_on_every_route_in_openais_shape() {
    let server = Server::with_limits(Limits {
        max_body_bytes: 4096,
        ..Limits::default()
    })
    .await;
    let user = |text: &str| json!([{"role": "user", "content": text}]);
    let chat_cases: Vec<(String, u16, &str, &str, Value)> = vec![
        (
            "{not json".into(),
            400,
            "invalid_request_error",
            "E_SERVE_BAD_JSON",
            Value::Null,
        ),
        (
            "[1, 2]".into(),
            400,
            "invalid_request_error",
            "E_SERVE_BAD_JSON",
            Value::Null,
        ),
        (
            json!({"messages": user("x")}).to_string(),
            400,
            "invalid_request_error",
            "E_SERVE_BAD_REQUEST",
            json!("model"),
        ),
        (
            json!({"model": "helper"}).to_string(),
            400,
            "invalid_request_error",
            "E_SERVE_BAD_REQUEST",
            json!("messages"),
        ),
        (
            json!({"model": "helper", "messages": []}).to_string(),
            400,
            "invalid_request_error",
            "E_SERVE_BAD_REQUEST",
            json!("messages"),
        ),
        (
            json!({"model": "helper", "messages": "hi"}).to_string(),
            400,
            "invalid_request_error",
            "E_SERVE_BAD_REQUEST",
            json!("messages"),
        ),
        (
            chat("nobody", user("x")),
            404,
            "not_found_error",
            "model_not_found",
            json!("model"),
        ),
        (
            chat(
                "helper",
                json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]),
            ),
            400,
            "invalid_request_error",
            "E_SERVE_UNSUPPORTED_INPUT",
            json!("messages[0].content[0].type"),
        ),
        (
            chat(
                "helper",
                json!([{"role": "user", "content": "x"}, {"role": "tool", "content": "1", "tool_call_id": "c"}]),
            ),
            400,
            "invalid_request_error",
            "E_SERVE_UNSUPPORTED_INPUT",
            json!("messages[1].role"),
        ),
        (
            chat(
                "helper",
                json!([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]),
            ),
            400,
            "invalid_request_error",
            "E_SERVE_BAD_REQUEST",
            json!("messages[1].role"),
        ),
        (
            json!({"model": "helper", "messages": user("x"), "stream": "yes"}).to_string(),
            400,
            "invalid_request_error",
            "E_SERVE_BAD_REQUEST",
            json!("stream"),
        ),
        (
            json!({"model": "helper", "messages": user("x"), "n": 2}).to_string(),
            400,
            "invalid_request_error",
            "E_SERVE_BAD_REQUEST",
            json!("n"),
        ),
        (
            json!({"model": "helper", "messages": user("x"), "user": ""}).to_string(),
            400,
            "invalid_request_error",
            "E_SERVE_BAD_INSTANCE_KEY",
            json!("user"),
        ),
        (
            json!({"model": "helper", "messages": user(&"x".repeat(5000))}).to_string(),
            413,
            "invalid_request_error",
            "E_SERVE_BODY_TOO_LARGE",
            Value::Null,
        ),
    ];
    for (body, status, kind, code, param) in chat_cases {
        let (got, answer_body) = answer(server.post("/v1/chat/completions", body.clone())).await;
        let start = if code.starts_with("E_") {
            code
        } else {
            "E_SERVE_UNKNOWN_MODEL"
        };
        assert_error(got, &answer_body, status, kind, code, start);
        assert_eq!(answer_body["error"]["param"], param, "{body}");
    }
    let responses_cases: Vec<(String, u16, &str, Value)> = vec![
        ("{\"model\":".into(), 400, "E_SERVE_BAD_JSON", Value::Null),
        (json!({"model": "helper"}).to_string(), 400, "E_SERVE_BAD_REQUEST", json!("input")),
        (json!({"model": "helper", "input": 7}).to_string(), 400, "E_SERVE_BAD_REQUEST", json!("input")),
        (
            json!({"model": "helper", "input": [{"role": "user", "content": "x"}, {"type": "function_call_output", "call_id": "c", "output": "1"}]}).to_string(),
            400, "E_SERVE_UNSUPPORTED_INPUT", json!("input[1].type"),
        ),
        (
            json!({"model": "helper", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://example.com/a.png"}]}]}).to_string(),
            400, "E_SERVE_UNSUPPORTED_INPUT", json!("input[0].content[0].type"),
        ),
        (json!({"model": "helper", "input": "x", "instructions": 3}).to_string(), 400, "E_SERVE_BAD_REQUEST", json!("instructions")),
        (json!({"model": "nobody", "input": "x"}).to_string(), 404, "model_not_found", json!("model")),
        (json!({"model": "helper", "input": "x", "previous_response_id": "resp_nope"}).to_string(), 404, "previous_response_not_found", json!("previous_response_id")),
        (json!({"model": "helper", "input": "x".repeat(5000)}).to_string(), 413, "E_SERVE_BODY_TOO_LARGE", Value::Null),
    ];
    for (body, status, code, param) in responses_cases {
        let (got, answer_body) = answer(server.post("/v1/responses", body.clone())).await;
        assert_eq!(got, status, "{body}: {answer_body}");
        assert_eq!(answer_body["error"]["code"], code, "{body}");
        assert_eq!(answer_body["error"]["param"], param, "{body}");
        assert!(answer_body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("E_SERVE_"));
    }
    // A bad instance header, on both routes.
    for (path, body) in [
        ("/v1/chat/completions", chat("helper", user("x"))),
        (
            "/v1/responses",
            json!({"model": "helper", "input": "x"}).to_string(),
        ),
    ] {
        let request = server
            .post(path, body)
            .header("X-Goondan-Instance", "x".repeat(129));
        let (status, body) = answer(request).await;
        assert_error(
            status,
            &body,
            400,
            "invalid_request_error",
            "E_SERVE_BAD_INSTANCE_KEY",
            "E_SERVE_BAD_INSTANCE_KEY: the X-Goondan-Instance header",
        );
        assert_eq!(body["error"]["param"], Value::Null);
    }
    assert!(
        server.requests().is_empty(),
        "no bad request reached the swarm"
    );
}

#[tokio::test]
async fn the_guard_and_the_unknown_paths_answer_in_openais_shape() {
    let server = Server::start().await;
    let client = reqwest::Client::new();
    let routes = [
        ("GET", "/v1/models"),
        ("GET", "/v1/models/helper"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/responses"),
    ];
    for (method, path) in routes {
        let url = format!("{}{path}", server.base);
        for token in [None, Some("wrong-token-wrong-token-wrong")] {
            let mut request = client.request(method.parse().unwrap(), &url).body("{}");
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.headers()["www-authenticate"], "Bearer");
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap();
            assert_error(
                status,
                &body,
                401,
                "authentication_error",
                "invalid_api_key",
                "E_SERVE_UNAUTHORIZED",
            );
        }
        // A foreign Origin is refused too (a page on another site).
        let response = client
            .request(method.parse().unwrap(), &url)
            .bearer_auth(&server.token)
            .header("origin", "https://evil.example")
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        assert_error(
            status,
            &body,
            403,
            "permission_error",
            "E_SERVE_FORBIDDEN",
            "E_SERVE_FORBIDDEN",
        );
    }
    // Outside /v1 the guard's refusal stays bare.
    let response = client
        .get(format!("{}/elsewhere", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(response.text().await.unwrap(), "");

    let (status, body) = answer(server.get("/v1/chat/completions")).await;
    assert_error(
        status,
        &body,
        405,
        "invalid_request_error",
        "E_SERVE_METHOD_NOT_ALLOWED",
        "E_SERVE_METHOD_NOT_ALLOWED: GET",
    );
    let (status, body) = answer(server.post("/v1/models", "{}")).await;
    assert_eq!(status, 405, "{body}");
    for path in ["/v1/embeddings", "/v1", "/v1/models/helper/extra"] {
        let (status, body) = answer(server.post(path, "{}")).await;
        assert_error(
            status,
            &body,
            404,
            "not_found_error",
            "E_SERVE_NO_ROUTE",
            "E_SERVE_NO_ROUTE",
        );
    }
}

#[tokio::test]
async fn a_response_continues_its_instance_by_its_id() {
    let server = Server::start().await;
    let first = json!({
        "model": "helper",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": "earlier"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "reply"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "hello there"}]},
        ],
    });
    let (status, body) = answer(server.post("/v1/responses", first.to_string())).await;
    assert_eq!(status, 200, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("resp_"));
    assert_eq!(body["object"], "response");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["model"], "helper");
    assert_eq!(body["instructions"], "Be brief.");
    let output = &body["output"];
    assert_eq!(output.as_array().unwrap().len(), 1);
    assert_eq!(output[0]["type"], "message");
    assert_eq!(output[0]["role"], "assistant");
    assert_eq!(output[0]["status"], "completed");
    assert!(output[0]["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(output[0]["content"][0]["type"], "output_text");
    assert_eq!(output[0]["content"][0]["text"], "echo: hello there");
    let requests = server.requests();
    let usage = usage_of(&requests[0], 3);
    assert_eq!(body["usage"]["input_tokens"], usage.prompt_tokens);
    assert_eq!(body["usage"]["output_tokens"], 3);
    assert_eq!(body["usage"]["total_tokens"], usage.total_tokens);
    let history: Vec<(PriorRole, &str)> = requests[0]
        .history
        .iter()
        .map(|message| (message.role, message.text.as_str()))
        .collect();
    assert_eq!(
        history,
        [
            (PriorRole::System, "Be brief."),
            (PriorRole::User, "earlier"),
            (PriorRole::Assistant, "reply"),
        ]
    );
    assert_eq!(requests[0].text, "hello there");

    let follow = json!({"model": "helper", "input": "and then?", "previous_response_id": id, "instructions": "ignored here"});
    let (status, body) = answer(server.post("/v1/responses", follow.to_string())).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["previous_response_id"], id.as_str());
    let requests = server.requests();
    assert_eq!(requests[1].instance_key, requests[0].instance_key);
    assert!(requests[1].history.is_empty());
    assert_eq!(requests[1].text, "and then?");

    // A follow-up to another agent is refused; the header overrides.
    let other = json!({"model": "writer", "input": "x", "previous_response_id": id});
    let (status, body) = answer(server.post("/v1/responses", other.to_string())).await;
    assert_error(
        status,
        &body,
        400,
        "invalid_request_error",
        "E_SERVE_PREVIOUS_RESPONSE_AGENT",
        "E_SERVE_PREVIOUS_RESPONSE_AGENT",
    );
    let (status, _) = answer(
        server
            .post("/v1/responses", follow.to_string())
            .header("X-Goondan-Instance", "elsewhere"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(server.requests()[2].instance_key, "elsewhere");
    // `user` is not an instance key (issue 47): Bob gets a fresh instance
    // of his own.
    let user = json!({"model": "writer", "input": "x", "user": "bob"});
    let (status, _) = answer(server.post("/v1/responses", user.to_string())).await;
    assert_eq!(status, 200);
    let key = &server.requests()[3].instance_key;
    assert!(key.starts_with("openai-") && !key.contains("bob"), "{key}");
}

/// Issue 47: a chat front end resends the whole conversation with each
/// message; each chat stays one instance, to which only the new message
/// goes, and `user` keeps one person's chats apart from each other and
/// from everyone else's.
#[tokio::test]
async fn issue_47_a_resent_conversation_goes_on_in_its_instance_per_chat_and_per_user() {
    let server = Server::start().await;
    let send = |messages: Value, user: Option<&str>| {
        let mut body = json!({"model": "helper", "messages": messages});
        if let Some(user) = user {
            body["user"] = user.into();
        }
        server.post("/v1/chat/completions", body.to_string())
    };
    let said = |texts: &[&str]| {
        let messages: Vec<Value> = texts
            .iter()
            .enumerate()
            .map(|(at, text)| {
                let role = if at % 2 == 0 { "user" } else { "assistant" };
                json!({"role": role, "content": text})
            })
            .collect();
        Value::Array(messages)
    };
    for (user, one) in [(None, "one"), (Some("alice"), "uno")] {
        let before = server.requests().len();
        let (status, body) = answer(send(said(&[one]), user)).await;
        assert_eq!(status, 200, "{body}");
        let first = server.requests()[before].clone();
        let answered = body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(answered, format!("echo: {one}"));
        let (status, body) = answer(send(said(&[one, &answered, "two"]), user)).await;
        assert_eq!(status, 200, "{body}");
        let second = server.requests()[before + 1].clone();
        assert_eq!(second.instance_key, first.instance_key, "{user:?}");
        assert!(second.history.is_empty(), "{second:?}");
        assert_eq!(second.text, "two");
        // Another chat opening the same way is another instance.
        let (status, _) = answer(send(said(&[one]), user)).await;
        assert_eq!(status, 200);
        assert_ne!(
            server.requests()[before + 2].instance_key,
            first.instance_key
        );
    }
    // Alice's conversation sent by Bob, or without `user`, does not reach
    // her instance: it is replayed into a fresh one.
    let alices = server.requests()[3].instance_key.clone();
    for user in [Some("bob"), None] {
        let (status, _) = answer(send(
            said(&["uno", "echo: uno", "two", "echo: two", "three"]),
            user,
        ))
        .await;
        assert_eq!(status, 200);
        let sent = server.requests().last().unwrap().clone();
        assert_ne!(sent.instance_key, alices);
        assert_eq!(sent.history.len(), 4, "{sent:?}");
    }
    let (status, _) = answer(send(
        said(&["uno", "echo: uno", "two", "echo: two", "three"]),
        Some("alice"),
    ))
    .await;
    assert_eq!(status, 200);
    let sent = server.requests().last().unwrap().clone();
    assert_eq!(sent.instance_key, alices);
    assert!(sent.history.is_empty());
}

#[tokio::test]
async fn a_streamed_response_is_the_responses_event_sequence() {
    let server = Server::start().await;
    let body = json!({"model": "writer", "input": "stream this", "stream": true});
    let response = server
        .post("/v1/responses", body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let events = sse_events(&response.text().await.unwrap());
    let data: Vec<Value> = events
        .iter()
        .map(|(name, data)| {
            let data: Value = serde_json::from_str(data).unwrap();
            assert_eq!(
                name.as_deref(),
                data["type"].as_str(),
                "the event name is its type"
            );
            data
        })
        .collect();
    let kinds: Vec<&str> = data
        .iter()
        .map(|event| event["type"].as_str().unwrap())
        .collect();
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(["response.output_text.delta"; 3]);
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(kinds, expected);
    for (number, event) in data.iter().enumerate() {
        assert_eq!(event["sequence_number"], number as u64);
    }
    let id = data[0]["response"]["id"].as_str().unwrap();
    assert_eq!(data[0]["response"]["status"], "in_progress");
    assert_eq!(data[0]["response"]["output"], json!([]));
    let item_id = data[2]["item"]["id"].as_str().unwrap();
    for event in &data[3..9] {
        assert_eq!(event["item_id"], item_id);
        assert_eq!(event["output_index"], 0);
        assert_eq!(event["content_index"], 0);
    }
    let deltas: String = data[4..7]
        .iter()
        .map(|event| event["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "echo: stream this");
    assert_eq!(data[7]["text"], "echo: stream this");
    assert_eq!(data[8]["part"]["text"], "echo: stream this");
    assert_eq!(data[9]["item"]["status"], "completed");
    let completed = &data[10]["response"];
    assert_eq!(completed["id"], id);
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["output"][0], data[9]["item"]);
    assert_eq!(completed["usage"]["output_tokens"], 3);

    // A Turn failing mid-stream ends it with `response.failed`.
    let body = json!({"model": "writer", "input": "FAIL please", "stream": true});
    let response = server
        .post("/v1/responses", body.to_string())
        .send()
        .await
        .unwrap();
    let events = sse_events(&response.text().await.unwrap());
    let last: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(last["type"], "response.failed");
    assert_eq!(last["response"]["status"], "failed");
    assert_eq!(last["response"]["error"]["code"], "server_error");
    assert!(last["response"]["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("E_MODEL_HTTP: "));
    assert_eq!(
        last["response"]["output"][0]["content"][0]["text"],
        "partial "
    );
    assert_eq!(last["sequence_number"], events.len() as u64 - 1);
}

/// Reads `response` until its body holds `needle`, then drops it.
async fn read_until_then_drop(response: reqwest::Response, needle: &str) {
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    while let Some(chunk) = body.next().await {
        seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        if seen.contains(needle) {
            return;
        }
    }
    panic!("the stream ended before {needle:?}: {seen}");
}

#[tokio::test]
async fn a_stream_client_that_goes_away_leaves_the_turn_to_commit_once() {
    let server = Server::start().await;
    let streams = [
        (
            "/v1/chat/completions",
            json!({"model": "helper", "messages": [{"role": "user", "content": "SLOW one"}], "stream": true}),
        ),
        (
            "/v1/responses",
            json!({"model": "helper", "input": "SLOW two", "stream": true}),
        ),
    ];
    for (nth, (path, body)) in streams.into_iter().enumerate() {
        let response = server.post(path, body.to_string()).send().await.unwrap();
        assert_eq!(response.status(), 200);
        read_until_then_drop(response, "part0").await;
        assert_eq!(server.ending(nth + 1).await, Ending::Committed, "{path}");
    }
    assert_eq!(server.requests().len(), 2, "each Turn was asked for once");
    assert_eq!(server.endings().len(), 2, "and ended once");
}

/// A plain request whose client gives up before the answer cancels its
/// Turn, unless it named an `Idempotency-Key`: then the Turn goes on, and
/// the retry (same key, same body) gets its answer, never a second Turn.
#[tokio::test]
async fn a_plain_client_that_gives_up_cancels_its_turn_unless_a_retry_may_come() {
    let server = Server::start().await;
    for path in ["/v1/chat/completions", "/v1/responses"] {
        let nth = server.endings().len() + 1;
        let body = plain(path, "SLOW gone");
        let gave_up = server
            .post(path, body.clone())
            .timeout(Duration::from_millis(250))
            .send()
            .await;
        assert!(gave_up.is_err_and(|error| error.is_timeout()));
        assert_eq!(server.ending(nth).await, Ending::Cancelled, "{path}");

        let key = format!("retry-{nth}");
        let gave_up = server
            .post(path, body.clone())
            .header("Idempotency-Key", &key)
            .timeout(Duration::from_millis(250))
            .send()
            .await;
        assert!(gave_up.is_err_and(|error| error.is_timeout()));
        // Two retries, one while the Turn runs and one after it ended.
        let mut ids = Vec::new();
        for _ in 0..2 {
            let retried = server
                .post(path, body.clone())
                .header("Idempotency-Key", &key)
                .send()
                .await
                .unwrap();
            assert_eq!(retried.status(), 200, "{path}");
            let answer: Value = retried.json().await.unwrap();
            assert!(answer.to_string().contains("part9"), "{answer}");
            ids.push(answer["id"].clone());
        }
        assert_eq!(ids[0], ids[1], "one answer object for every retry");
        assert_eq!(server.ending(nth + 1).await, Ending::Committed, "{path}");
        assert_eq!(
            server.endings().len(),
            nth + 1,
            "{path}: one Turn for the key"
        );

        // The key with another body is refused, and starts nothing.
        let reused = server
            .post(path, plain(path, "SLOW other"))
            .header("Idempotency-Key", &key)
            .send()
            .await
            .unwrap();
        assert_eq!(reused.status(), 422);
        let error: Value = reused.json().await.unwrap();
        assert_eq!(error["error"]["code"], "E_SERVE_IDEMPOTENCY_KEY_REUSED");
        let bad = server
            .post(path, body)
            .header("Idempotency-Key", "two words")
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status(), 400);
        assert_eq!(server.endings().len(), nth + 1);
    }
}

/// A body for `path` asking `text`, not streamed.
fn plain(path: &str, text: &str) -> String {
    if path.ends_with("responses") {
        json!({"model": "helper", "input": text}).to_string()
    } else {
        json!({"model": "helper", "messages": [{"role": "user", "content": text}]}).to_string()
    }
}
