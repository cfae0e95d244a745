//! OpenAI Chat Completions (and compatible servers) against a mock server
//! speaking its format.

use crate::support::*;
use goondan_model::{build, FinishReason, ModelParams, ModelRequest, NoStream, ToolSpec};
use goondan_types::{ContentPart, ModelMessage, TokenUsage, ToolResultOutput};
use serde_json::json;

fn request(messages: Vec<ModelMessage>) -> ModelRequest {
    ModelRequest {
        model: "gpt-test".into(),
        messages,
        tools: vec![ToolSpec {
            name: "file__read".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
                .as_object()
                .cloned()
                .unwrap(),
        }],
        params: ModelParams {
            max_tokens: Some(256),
            ..ModelParams::default()
        },
    }
}

fn completion(message: serde_json::Value, finish_reason: &str) -> serde_json::Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}
    })
}

#[tokio::test]
async fn text_answer_with_bearer_organization_headers_and_usage() {
    let server = MockServer::start(vec![Canned::json(
        200,
        completion(json!({"role": "assistant", "content": "Hi!"}), "stop"),
    )])
    .await;
    let config = http_config(
        "openai",
        &format!("{}/v1", server.base_url),
        json!({"organization": "org-42", "project": "proj-7", "headers": {"x-extra": "yes"}, "seed": 11}),
    );
    let model = build(&config, &no_env()).unwrap();
    let answer = model
        .generate(
            request(vec![
                ModelMessage::system("sys"),
                ModelMessage::user("hello"),
            ]),
            &NoStream,
        )
        .await
        .unwrap();
    assert_eq!(answer.text(), "Hi!");
    assert_eq!(answer.finish_reason, FinishReason::Stop);
    assert_eq!(
        answer.usage,
        Some(TokenUsage {
            prompt_tokens: 30,
            completion_tokens: 7,
            total_tokens: 37
        })
    );
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.headers["authorization"], format!("Bearer {SECRET}"));
    assert_eq!(sent.headers["openai-organization"], "org-42");
    assert_eq!(sent.headers["openai-project"], "proj-7");
    assert_eq!(sent.headers["x-extra"], "yes");
    assert_eq!(
        sent.body,
        json!({
            "model": "gpt-test",
            "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}],
            "tools": [{"type": "function", "function": {"name": "file__read", "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}],
            "max_tokens": 256,
            "seed": 11
        })
    );
}

#[tokio::test]
async fn parallel_tool_calls_then_results_in_the_exact_wire_shape() {
    let server = MockServer::start(vec![
        Canned::json(200, completion(json!({
            "role": "assistant", "content": null,
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "file__read", "arguments": "{\"path\":\"a.txt\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "file__read", "arguments": "{\"path\":\"b.txt\"}"}}
            ]
        }), "tool_calls")),
        Canned::json(200, completion(json!({"role": "assistant", "content": "both read"}), "stop")),
    ])
    .await;
    let model = build(
        &http_config("openai", &server.base_url, json!({})),
        &no_env(),
    )
    .unwrap();
    let first = model
        .generate(request(vec![ModelMessage::user("read")]), &NoStream)
        .await
        .unwrap();
    assert_eq!(first.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        first.content,
        vec![
            ContentPart::tool_call("call_a", "file__read", json!({"path": "a.txt"})),
            ContentPart::tool_call("call_b", "file__read", json!({"path": "b.txt"})),
        ]
    );
    let conversation = vec![
        ModelMessage::user("read"),
        ModelMessage::assistant(first.content.clone()),
        ModelMessage::tool(vec![
            ContentPart::tool_result("call_a", "file__read", ToolResultOutput::Text("AAA".into())),
            ContentPart::tool_result(
                "call_b",
                "file__read",
                ToolResultOutput::ErrorJson(json!({"code": "ENOENT"})),
            ),
        ]),
    ];
    model
        .generate(request(conversation), &NoStream)
        .await
        .unwrap();
    let messages = server.requests()[1].body["messages"].clone();
    assert_eq!(messages.as_array().unwrap().len(), 4);
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["content"], serde_json::Value::Null);
    assert_eq!(
        messages[1]["tool_calls"][0],
        json!({"id": "call_a", "type": "function", "function": {"name": "file__read", "arguments": "{\"path\":\"a.txt\"}"}})
    );
    assert_eq!(messages[1]["tool_calls"][1]["id"], "call_b");
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "call_a", "content": "AAA"})
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_b", "content": "{\"code\":\"ENOENT\"}"})
    );
}

#[tokio::test]
async fn rate_limit_then_success_honors_retry_after_ms() {
    let server = MockServer::start(vec![
        Canned::json(
            429,
            json!({"error": {"message": "Rate limit reached", "type": "requests"}}),
        )
        .header("retry-after-ms", "1"),
        Canned::json(
            200,
            completion(json!({"role": "assistant", "content": "ok"}), "stop"),
        ),
    ])
    .await;
    let model = build(
        &http_config(
            "openai",
            &server.base_url,
            json!({"retryBaseDelayMs": 10_000}),
        ),
        &no_env(),
    )
    .unwrap();
    assert_eq!(
        model
            .generate(request(vec![ModelMessage::user("x")]), &NoStream)
            .await
            .unwrap()
            .text(),
        "ok"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn server_errors_exhaust_retries_with_the_providers_message() {
    let failing = Canned::json(
        503,
        json!({"error": {"message": "The server is overloaded", "type": "server_error"}}),
    );
    let server = MockServer::start(vec![failing.clone(), failing.clone(), failing]).await;
    let model = build(
        &http_config("openai", &server.base_url, json!({})),
        &no_env(),
    )
    .unwrap();
    let error = model
        .generate(request(vec![ModelMessage::user("x")]), &NoStream)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_MODEL_RETRIES_EXHAUSTED");
    assert!(
        error
            .to_string()
            .contains("HTTP 503: server_error: The server is overloaded"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 3);
}

/// Issue 16 #20: arguments that are not JSON reach the runtime as a
/// marked call (with empty arguments and the raw text's start), streamed
/// or not, instead of failing the whole Turn.
#[tokio::test]
async fn tool_call_arguments_that_are_not_json_are_marked_not_fatal() {
    let bad_call = json!({"id": "call_x", "type": "function", "function": {"name": "file__read", "arguments": "{not json"}});
    let server = MockServer::start(vec![
        Canned::json(200, completion(json!({
            "role": "assistant", "content": null, "tool_calls": [bad_call]
        }), "tool_calls")),
        Canned::sse_raw(format!(
            "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_x", "type": "function", "function": {"name": "file__read", "arguments": "{not "}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "json"}}]}, "finish_reason": "tool_calls"}]}),
        )),
    ])
    .await;
    for stream in [false, true] {
        let model = build(
            &http_config("openai", &server.base_url, json!({"stream": stream})),
            &no_env(),
        )
        .unwrap();
        let answer = model
            .generate(request(vec![ModelMessage::user("x")]), &NoStream)
            .await
            .unwrap();
        assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
        let calls = answer.tool_calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].id, "call_x");
        assert!(calls[0].args.is_empty());
        let mark = answer.invalid_arguments("call_x").unwrap();
        assert_eq!(mark.preview, "{not json");
        assert_eq!(mark.n_bytes, 9);
        assert!(mark.problem.contains("not JSON"), "{}", mark.problem);
    }
}

/// Issue 16 #21: `choices: []` is a malformed answer, streamed or not,
/// never an empty one.
#[tokio::test]
async fn an_answer_without_choices_is_malformed() {
    let server = MockServer::start(vec![
        Canned::json(200, json!({"id": "x", "choices": []})),
        Canned::sse_raw(format!(
            "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
            json!({"id": "x", "choices": []}),
            json!({"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 0}}),
        )),
    ])
    .await;
    for stream in [false, true] {
        let model = build(
            &http_config("openai", &server.base_url, json!({"stream": stream})),
            &no_env(),
        )
        .unwrap();
        let error = model
            .generate(request(vec![ModelMessage::user("x")]), &NoStream)
            .await
            .unwrap_err();
        assert_eq!(
            error.code(),
            "E_MODEL_MALFORMED_RESPONSE",
            "stream {stream}: {error}"
        );
        assert!(error.to_string().contains("choice"), "{error}");
    }
}

#[tokio::test]
async fn streamed_chunks_are_assembled_with_usage() {
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        (
            "",
            json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let mut events = vec![
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"content": "Let me "}), None),
        chunk(json!({"content": "check."}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "file__read", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"pa"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_2", "type": "function", "function": {"name": "file__read", "arguments": "{\"path\":\"z\"}"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "th\":\"y\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ];
    events.push(("", json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}})));
    let mut body = String::new();
    for (_, data) in &events {
        body.push_str(&format!("data: {data}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    let server = MockServer::start(vec![Canned::sse_raw(body)]).await;
    let model = build(
        &http_config("openai", &server.base_url, json!({"stream": true})),
        &no_env(),
    )
    .unwrap();
    let deltas = Deltas::default();
    let answer = model
        .generate(request(vec![ModelMessage::user("x")]), &deltas)
        .await
        .unwrap();
    assert_eq!(deltas.all(), vec!["Let me ", "check."]);
    assert_eq!(
        answer.content,
        vec![
            ContentPart::text("Let me check."),
            ContentPart::tool_call("call_1", "file__read", json!({"path": "y"})),
            ContentPart::tool_call("call_2", "file__read", json!({"path": "z"})),
        ]
    );
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        answer.usage,
        Some(TokenUsage {
            prompt_tokens: 5,
            completion_tokens: 6,
            total_tokens: 11
        })
    );
    let sent = &server.requests()[0].body;
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn a_server_that_ignores_stream_true_is_still_understood() {
    let server = MockServer::start(vec![Canned::json(
        200,
        completion(json!({"role": "assistant", "content": "whole"}), "stop"),
    )])
    .await;
    let model = build(
        &http_config("openai", &server.base_url, json!({"stream": true})),
        &no_env(),
    )
    .unwrap();
    assert_eq!(
        model
            .generate(request(vec![ModelMessage::user("x")]), &NoStream)
            .await
            .unwrap()
            .text(),
        "whole"
    );
}

#[tokio::test]
async fn the_key_never_reaches_logs_or_errors() {
    let logs = LogCapture::default();
    let _guard = logs.install();
    let echo = format!("Incorrect API key provided: {SECRET}.");
    let server = MockServer::start(vec![
        Canned::json(500, json!({"error": {"message": echo}})),
        Canned::json(
            401,
            json!({"error": {"message": echo, "type": "invalid_request_error"}}),
        ),
    ])
    .await;
    let model = build(
        &http_config("openai", &server.base_url, json!({})),
        &no_env(),
    )
    .unwrap();
    let error = model
        .generate(request(vec![ModelMessage::user("x")]), &NoStream)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_MODEL_AUTH");
    let shown = format!("{error} {error:?}");
    assert!(
        shown.contains("Incorrect API key provided: ***."),
        "{shown}"
    );
    assert!(!shown.contains(SECRET), "{shown}");
    let logged = logs.text();
    assert!(
        logged.contains("retrying") && logged.contains("***"),
        "{logged}"
    );
    assert!(!logged.contains(SECRET), "{logged}");
}

#[tokio::test]
async fn compatible_servers_need_no_key() {
    let server = MockServer::start(vec![Canned::json(
        200,
        completion(json!({"role": "assistant", "content": "local"}), "stop"),
    )])
    .await;
    let mut config = http_config("openai", &server.base_url, json!({}));
    config.api_key = None;
    let model = build(&config, &no_env()).unwrap();
    assert_eq!(
        model
            .generate(request(vec![ModelMessage::user("x")]), &NoStream)
            .await
            .unwrap()
            .text(),
        "local"
    );
    assert!(!server.requests()[0].headers.contains_key("authorization"));
}

#[tokio::test]
async fn an_oversized_answer_is_refused() {
    let big = "x".repeat(4096);
    let server = MockServer::start(vec![
        Canned::json(
            200,
            completion(json!({"role": "assistant", "content": big}), "stop"),
        ),
        Canned::sse_raw(format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"content": big}}]})
        )),
    ])
    .await;
    for stream in [false, true] {
        let config = http_config(
            "openai",
            &server.base_url,
            json!({"maxAnswerBytes": 1024, "stream": stream}),
        );
        let model = build(&config, &no_env()).unwrap();
        let error = model
            .generate(request(vec![ModelMessage::user("x")]), &NoStream)
            .await
            .unwrap_err();
        assert_eq!(error.code(), "E_MODEL_ANSWER_TOO_LARGE");
        assert!(
            error
                .to_string()
                .contains("larger than 1024 bytes of HTTP body"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn an_absurd_retry_after_waits_the_cap_instead_of_panicking() {
    let server = MockServer::start(vec![
        Canned::json(
            429,
            json!({"error": {"message": "Rate limit reached", "type": "requests"}}),
        )
        .header("retry-after", "1e20"),
        Canned::json(
            200,
            completion(json!({"role": "assistant", "content": "ok"}), "stop"),
        ),
    ])
    .await;
    // A tiny cap keeps the test fast; the base delay is large so only the
    // capped server hint can explain a quick retry.
    let model = build(
        &http_config(
            "openai",
            &server.base_url,
            json!({"retryAfterMaxMs": 20, "retryBaseDelayMs": 10_000}),
        ),
        &no_env(),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let answer = model
        .generate(request(vec![ModelMessage::user("x")]), &NoStream)
        .await
        .unwrap();
    assert_eq!(answer.text(), "ok");
    assert_eq!(server.requests().len(), 2);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Issue 16 #8: what a stream accumulates (text, tool-call arguments) is
/// capped apart from the HTTP body, whose framing may be much larger.
#[tokio::test]
async fn accumulated_text_and_arguments_are_capped() {
    let piece = "x".repeat(600);
    let text_chunk = json!({"choices": [{"index": 0, "delta": {"content": piece}}]});
    let argument_chunk = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "file__read", "arguments": piece}}]}}]});
    let server = MockServer::start(vec![
        Canned::sse_raw(format!(
            "data: {text_chunk}\n\n: keep-alive\n\ndata: {text_chunk}\n\n"
        )),
        Canned::sse_raw(format!(
            "data: {argument_chunk}\n\ndata: {argument_chunk}\n\n"
        )),
    ])
    .await;
    let config = http_config(
        "openai",
        &server.base_url,
        json!({"stream": true, "maxContentBytes": 1024}),
    );
    let model = build(&config, &no_env()).unwrap();
    for _ in 0..2 {
        let error = model
            .generate(request(vec![ModelMessage::user("x")]), &NoStream)
            .await
            .unwrap_err();
        assert_eq!(error.code(), "E_MODEL_ANSWER_TOO_LARGE");
        assert!(
            error
                .to_string()
                .contains("1024 bytes of text and tool-call arguments"),
            "{error}"
        );
    }
}
