//! The Anthropic Messages wire against a mock server speaking its format.

use crate::support::*;
use goondan_model::{build, FinishReason, ModelParams, ModelRequest, NoStream, ToolSpec};
use goondan_types::{ContentPart, ModelMessage, TokenUsage, ToolResultOutput};
use serde_json::json;

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "bash__exec".into(),
        description: "Run a command".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}})
            .as_object()
            .cloned()
            .unwrap(),
    }]
}

fn request(messages: Vec<ModelMessage>) -> ModelRequest {
    ModelRequest {
        model: "claude-test".into(),
        messages,
        tools: tools(),
        params: ModelParams {
            temperature: Some(0.5),
            ..ModelParams::default()
        },
    }
}

#[tokio::test]
async fn text_answer_with_headers_body_and_usage() {
    let server = MockServer::start(vec![Canned::json(
        200,
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": "Hello there"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 12, "output_tokens": 5, "cache_read_input_tokens": 3}
        }),
    )])
    .await;
    let model = build(
        &http_config("anthropic", &format!("{}/v1", server.base_url), json!({})),
        &no_env(),
    )
    .unwrap();
    let answer = model
        .generate(
            request(vec![
                ModelMessage::system("be brief"),
                ModelMessage::user("hi"),
            ]),
            &NoStream,
        )
        .await
        .unwrap();
    assert_eq!(answer.text(), "Hello there");
    assert_eq!(answer.finish_reason, FinishReason::Stop);
    assert_eq!(
        answer.usage,
        Some(TokenUsage {
            prompt_tokens: 15,
            completion_tokens: 5,
            total_tokens: 20
        })
    );
    let sent = &server.requests()[0];
    assert_eq!(sent.method, "POST");
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.headers["x-api-key"], SECRET);
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert_eq!(sent.headers["content-type"], "application/json");
    assert_eq!(
        sent.body,
        json!({
            "model": "claude-test",
            "max_tokens": 4096,
            "system": [{"type": "text", "text": "be brief"}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "tools": [{"name": "bash__exec", "description": "Run a command",
                       "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}],
            "temperature": 0.5
        })
    );
}

#[tokio::test]
async fn parallel_tool_calls_then_results_in_the_exact_wire_shape() {
    let server = MockServer::start(vec![
        Canned::json(200, json!({
            "content": [
                {"type": "text", "text": "Running both."},
                {"type": "tool_use", "id": "toolu_A", "name": "bash__exec", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "toolu_B", "name": "bash__exec", "input": {"command": "pwd"}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1}
        })),
        Canned::json(200, json!({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"})),
    ])
    .await;
    let model = build(
        &http_config("anthropic", &server.base_url, json!({})),
        &no_env(),
    )
    .unwrap();
    let first = model
        .generate(request(vec![ModelMessage::user("go")]), &NoStream)
        .await
        .unwrap();
    assert_eq!(first.finish_reason, FinishReason::ToolCalls);
    let calls = first.tool_calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].id.as_str(), calls[0].args["command"].as_str()),
        ("toolu_A", Some("ls"))
    );
    assert_eq!(
        (calls[1].id.as_str(), calls[1].args["command"].as_str()),
        ("toolu_B", Some("pwd"))
    );

    let conversation = vec![
        ModelMessage::user("go"),
        ModelMessage::assistant(first.content.clone()),
        ModelMessage::tool(vec![
            ContentPart::tool_result(
                "toolu_A",
                "bash__exec",
                ToolResultOutput::Json(json!({"stdout": "a b"})),
            ),
            ContentPart::tool_result(
                "toolu_B",
                "bash__exec",
                ToolResultOutput::ErrorText("denied".into()),
            ),
        ]),
    ];
    let second = model
        .generate(request(conversation), &NoStream)
        .await
        .unwrap();
    assert_eq!(second.text(), "done");
    let messages = &server.requests()[1].body["messages"];
    assert_eq!(messages.as_array().unwrap().len(), 3);
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(
        messages[1]["content"][0],
        json!({"type": "text", "text": "Running both."})
    );
    assert_eq!(
        messages[1]["content"][1],
        json!({"type": "tool_use", "id": "toolu_A", "name": "bash__exec", "input": {"command": "ls"}})
    );
    assert_eq!(messages[1]["content"][2]["id"], "toolu_B");
    assert_eq!(messages[2]["role"], "user");
    let results = messages[2]["content"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["type"], "tool_result");
    assert_eq!(results[0]["tool_use_id"], "toolu_A");
    assert_eq!(results[0]["content"], "{\"stdout\":\"a b\"}");
    assert!(results[0].get("is_error").is_none());
    assert_eq!(results[1]["tool_use_id"], "toolu_B");
    assert_eq!(results[1]["content"], "denied");
    assert_eq!(results[1]["is_error"], true);
}

#[tokio::test]
async fn rate_limit_then_success_honors_retry_after() {
    let server = MockServer::start(vec![
        Canned::json(
            429,
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
        )
        .header("retry-after", "0"),
        Canned::json(
            200,
            json!({"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}),
        ),
    ])
    .await;
    // A large base delay proves the server's `retry-after: 0` is what set
    // the wait: the test would take ten seconds otherwise.
    let config = http_config(
        "anthropic",
        &server.base_url,
        json!({"retryBaseDelayMs": 10_000}),
    );
    let model = build(&config, &no_env()).unwrap();
    let answer = model
        .generate(request(vec![ModelMessage::user("hi")]), &NoStream)
        .await
        .unwrap();
    assert_eq!(answer.text(), "ok");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn server_errors_exhaust_retries_with_the_providers_message() {
    let overloaded = Canned::json(
        500,
        json!({"type": "error", "error": {"type": "api_error", "message": "Internal trouble"}}),
    );
    let server = MockServer::start(vec![overloaded.clone(), overloaded.clone(), overloaded]).await;
    let model = build(
        &http_config("anthropic", &server.base_url, json!({})),
        &no_env(),
    )
    .unwrap();
    let error = model
        .generate(request(vec![ModelMessage::user("hi")]), &NoStream)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_MODEL_RETRIES_EXHAUSTED");
    assert!(error.to_string().contains("3 attempts"), "{error}");
    assert!(
        error.to_string().contains("api_error: Internal trouble"),
        "{error}"
    );
    assert!(error.is_transient());
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn client_errors_are_not_retried_and_keep_the_providers_message() {
    let server = MockServer::start(vec![Canned::json(400, json!({
        "type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too large"}
    }))])
    .await;
    let model = build(
        &http_config("anthropic", &server.base_url, json!({})),
        &no_env(),
    )
    .unwrap();
    let error = model
        .generate(request(vec![ModelMessage::user("hi")]), &NoStream)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_MODEL_HTTP");
    assert_eq!(
        error.to_string(),
        "anthropic returned HTTP 400: invalid_request_error: max_tokens: too large"
    );
    assert!(error.suggestion().is_some());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn malformed_answers_become_structured_errors() {
    let server = MockServer::start(vec![
        Canned::json(200, json!({"content": [{"type": "tool_use", "name": "bash__exec", "input": {}}], "stop_reason": "tool_use"})),
        Canned::json(200, json!({"stop_reason": "end_turn"})),
        Canned::sse(&[
            ("message_start", json!({"type": "message_start", "message": {"usage": {"input_tokens": 1, "output_tokens": 0}}})),
            ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "bash__exec", "input": {}}})),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"command\": \"ls"}})),
            ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            ("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}})),
            ("message_stop", json!({"type": "message_stop"})),
        ]),
    ])
    .await;
    let model = build(
        &http_config("anthropic", &server.base_url, json!({})),
        &no_env(),
    )
    .unwrap();
    let missing_id = model
        .generate(request(vec![ModelMessage::user("a")]), &NoStream)
        .await
        .unwrap_err();
    assert_eq!(missing_id.code(), "E_MODEL_MALFORMED_RESPONSE");
    assert!(missing_id.to_string().contains("`id`"), "{missing_id}");
    let missing_content = model
        .generate(request(vec![ModelMessage::user("b")]), &NoStream)
        .await
        .unwrap_err();
    assert_eq!(missing_content.code(), "E_MODEL_MALFORMED_RESPONSE");
    let streaming = build(
        &http_config("anthropic", &server.base_url, json!({"stream": true})),
        &no_env(),
    )
    .unwrap();
    let bad_json = streaming
        .generate(request(vec![ModelMessage::user("c")]), &NoStream)
        .await
        .unwrap();
    let mark = bad_json
        .invalid_arguments("t1")
        .expect("marked as invalid arguments");
    assert_eq!(mark.preview, "{\"command\": \"ls");
    assert_eq!(bad_json.tool_calls()[0].args, serde_json::Map::new());
}

/// Issue 16 #21: an answer that says nothing (no block, no stop_reason)
/// is malformed, not an empty answer that ends the Turn.
#[tokio::test]
async fn an_answer_without_blocks_or_stop_reason_is_malformed() {
    let start = (
        "message_start",
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 1, "output_tokens": 0}}}),
    );
    let stop = ("message_stop", json!({"type": "message_stop"}));
    let server = MockServer::start(vec![
        Canned::json(200, json!({"content": []})),
        Canned::sse(&[start.clone(), stop.clone()]),
        Canned::sse(&[
            start,
            ("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 0}})),
            stop,
        ]),
    ])
    .await;
    for stream in [false, true] {
        let model = build(
            &http_config("anthropic", &server.base_url, json!({"stream": stream})),
            &no_env(),
        )
        .unwrap();
        let error = model
            .generate(request(vec![ModelMessage::user("x")]), &NoStream)
            .await
            .unwrap_err();
        assert_eq!(error.code(), "E_MODEL_MALFORMED_RESPONSE", "{error}");
        assert!(error.to_string().contains("stop_reason"), "{error}");
    }
    let streaming = build(
        &http_config("anthropic", &server.base_url, json!({"stream": true})),
        &no_env(),
    )
    .unwrap();
    let empty_but_finished = streaming
        .generate(request(vec![ModelMessage::user("y")]), &NoStream)
        .await
        .unwrap();
    assert!(empty_but_finished.content.is_empty());
    assert_eq!(empty_but_finished.finish_reason, FinishReason::Stop);
}

#[tokio::test]
async fn streamed_text_and_tool_call_are_assembled() {
    let server = MockServer::start(vec![Canned::sse(&[
        ("message_start", json!({"type": "message_start", "message": {"id": "m", "content": [], "usage": {"input_tokens": 20, "output_tokens": 1}}})),
        ("ping", json!({"type": "ping"})),
        ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}})),
        ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo, 세계"}})),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        ("content_block_start", json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_S", "name": "bash__exec", "input": {}}})),
        ("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"comm"}})),
        ("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "and\": \"ls\"}"}})),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
        ("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}})),
        ("message_stop", json!({"type": "message_stop"})),
    ])])
    .await;
    let model = build(
        &http_config("anthropic", &server.base_url, json!({"stream": true})),
        &no_env(),
    )
    .unwrap();
    let deltas = Deltas::default();
    let answer = model
        .generate(request(vec![ModelMessage::user("hi")]), &deltas)
        .await
        .unwrap();
    assert_eq!(deltas.all(), vec!["Hel", "lo, 세계"]);
    assert_eq!(
        answer.content,
        vec![
            ContentPart::text("Hello, 세계"),
            ContentPart::tool_call("toolu_S", "bash__exec", json!({"command": "ls"})),
        ]
    );
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        answer.usage,
        Some(TokenUsage {
            prompt_tokens: 20,
            completion_tokens: 9,
            total_tokens: 29
        })
    );
    assert_eq!(server.requests()[0].body["stream"], true);
}

#[tokio::test]
async fn the_key_never_reaches_logs_or_errors() {
    let logs = LogCapture::default();
    let _guard = logs.install();
    let echo = format!("invalid x-api-key: {SECRET}");
    let server = MockServer::start(vec![
        Canned::json(
            429,
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": echo}}),
        )
        .header("retry-after", "0"),
        Canned::json(
            401,
            json!({"type": "error", "error": {"type": "authentication_error", "message": echo}}),
        ),
    ])
    .await;
    let model = build(
        &http_config("anthropic", &server.base_url, json!({})),
        &no_env(),
    )
    .unwrap();
    let error = model
        .generate(request(vec![ModelMessage::user("hi")]), &NoStream)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_MODEL_AUTH");
    let shown = format!("{error} {error:?}");
    assert!(shown.contains("invalid x-api-key: ***"), "{shown}");
    assert!(!shown.contains(SECRET), "{shown}");
    let logged = logs.text();
    assert!(logged.contains("retrying"), "{logged}");
    assert!(logged.contains("***"), "{logged}");
    assert!(!logged.contains(SECRET), "{logged}");
}

#[tokio::test]
async fn a_stream_that_breaks_off_is_a_transport_error() {
    let start = (
        "message_start",
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 1, "output_tokens": 0}}}),
    );
    let text = (
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "partial"}}),
    );
    let server = MockServer::start(vec![
        Canned::sse(&[start.clone(), ("error", json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))]),
        Canned::sse(&[start, text]),
    ])
    .await;
    let model = build(
        &http_config("anthropic", &server.base_url, json!({"stream": true})),
        &no_env(),
    )
    .unwrap();
    let overloaded = model
        .generate(request(vec![ModelMessage::user("a")]), &NoStream)
        .await
        .unwrap_err();
    assert_eq!(overloaded.code(), "E_MODEL_TRANSPORT");
    assert!(
        overloaded
            .to_string()
            .contains("overloaded_error: Overloaded"),
        "{overloaded}"
    );
    let deltas = Deltas::default();
    let truncated = model
        .generate(request(vec![ModelMessage::user("b")]), &deltas)
        .await
        .unwrap_err();
    assert_eq!(truncated.code(), "E_MODEL_TRANSPORT");
    assert!(
        truncated.to_string().contains("before message_stop"),
        "{truncated}"
    );
    assert_eq!(deltas.all(), vec!["partial"]);
}
