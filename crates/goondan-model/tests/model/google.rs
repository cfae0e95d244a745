//! Gemini `generateContent` against a mock server speaking its format.

use crate::support::*;
use goondan_model::{build, FinishReason, ModelParams, ModelRequest, NoStream, ToolSpec};
use goondan_types::{ContentPart, ModelMessage, TokenUsage, ToolResultOutput};
use serde_json::json;

fn request(messages: Vec<ModelMessage>) -> ModelRequest {
    ModelRequest {
        model: "gemini-test".into(),
        messages,
        tools: vec![
            ToolSpec {
                name: "weather__get".into(),
                description: "Weather for a city".into(),
                parameters: json!({"type": "object", "additionalProperties": false,
                    "properties": {"city": {"type": "string"}}, "required": ["city"]})
                .as_object()
                .cloned()
                .unwrap(),
            },
            ToolSpec {
                name: "clock__now".into(),
                description: "The time".into(),
                parameters: json!({"type": "object", "properties": {}})
                    .as_object()
                    .cloned()
                    .unwrap(),
            },
        ],
        params: ModelParams {
            temperature: Some(0.2),
            max_tokens: Some(100),
            ..ModelParams::default()
        },
    }
}

fn answer(parts: serde_json::Value, finish: &str) -> serde_json::Value {
    json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
        "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 8, "thoughtsTokenCount": 2, "totalTokenCount": 50}
    })
}

#[tokio::test]
async fn text_answer_with_key_header_body_and_usage() {
    let server = MockServer::start(vec![Canned::json(
        200,
        answer(json!([{"text": "Sunny"}]), "STOP"),
    )])
    .await;
    let model = build(
        &http_config("google", &format!("{}/v1beta", server.base_url), json!({})),
        &no_env(),
    )
    .unwrap();
    let reply = model
        .generate(
            request(vec![
                ModelMessage::system("be nice"),
                ModelMessage::user("weather?"),
            ]),
            &NoStream,
        )
        .await
        .unwrap();
    assert_eq!(reply.text(), "Sunny");
    assert_eq!(reply.finish_reason, FinishReason::Stop);
    assert_eq!(
        reply.usage,
        Some(TokenUsage {
            prompt_tokens: 40,
            completion_tokens: 10,
            total_tokens: 50
        })
    );
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1beta/models/gemini-test:generateContent");
    assert_eq!(sent.headers["x-goog-api-key"], SECRET);
    assert!(!sent.path.contains(SECRET));
    assert_eq!(
        sent.body,
        json!({
            "systemInstruction": {"parts": [{"text": "be nice"}]},
            "contents": [{"role": "user", "parts": [{"text": "weather?"}]}],
            "tools": [{"functionDeclarations": [
                {"name": "weather__get", "description": "Weather for a city",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
                {"name": "clock__now", "description": "The time"}
            ]}],
            "generationConfig": {"temperature": 0.2, "maxOutputTokens": 100}
        })
    );
}

#[tokio::test]
async fn parallel_function_calls_then_responses_in_the_exact_wire_shape() {
    let server = MockServer::start(vec![
        Canned::json(200, answer(json!([
            {"functionCall": {"name": "weather__get", "args": {"city": "Seoul"}}, "thoughtSignature": "sig-1"},
            {"functionCall": {"name": "weather__get", "args": {"city": "Busan"}}}
        ]), "STOP")),
        Canned::json(200, answer(json!([{"text": "Both sunny"}]), "STOP")),
    ])
    .await;
    let model = build(
        &http_config("google", &server.base_url, json!({})),
        &no_env(),
    )
    .unwrap();
    let first = model
        .generate(request(vec![ModelMessage::user("weather?")]), &NoStream)
        .await
        .unwrap();
    // Gemini reports STOP while calling functions; the content decides.
    assert_eq!(first.finish_reason, FinishReason::ToolCalls);
    let calls = first.tool_calls();
    assert_eq!(calls.len(), 2);
    assert_ne!(calls[0].id, calls[1].id);
    assert_eq!(calls[0].args["city"], "Seoul");
    assert_eq!(calls[1].args["city"], "Busan");

    let conversation = vec![
        ModelMessage::user("weather?"),
        ModelMessage::assistant(first.content.clone()),
        ModelMessage::tool(vec![
            ContentPart::tool_result(
                calls[0].id.clone(),
                "weather__get",
                ToolResultOutput::Json(json!({"sky": "clear"})),
            ),
            ContentPart::tool_result(
                calls[1].id.clone(),
                "weather__get",
                ToolResultOutput::Text("sunny".into()),
            ),
        ]),
        ModelMessage::user("summarize"),
    ];
    model
        .generate(request(conversation), &NoStream)
        .await
        .unwrap();
    let contents = server.requests()[1].body["contents"].clone();
    assert_eq!(contents.as_array().unwrap().len(), 3);
    assert_eq!(
        contents[1],
        json!({"role": "model", "parts": [
            {"functionCall": {"name": "weather__get", "args": {"city": "Seoul"}}, "thoughtSignature": "sig-1"},
            {"functionCall": {"name": "weather__get", "args": {"city": "Busan"}}}
        ]})
    );
    assert_eq!(
        contents[2],
        json!({"role": "user", "parts": [
            {"functionResponse": {"name": "weather__get", "response": {"name": "weather__get", "content": {"sky": "clear"}}}},
            {"functionResponse": {"name": "weather__get", "response": {"name": "weather__get", "content": "sunny"}}},
            {"text": "summarize"}
        ]})
    );
}

#[tokio::test]
async fn rate_limit_then_success_honors_retry_after_date() {
    let past = "Sun, 06 Nov 1994 08:49:37 GMT";
    let server = MockServer::start(vec![
        Canned::json(429, json!({"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}})).header("retry-after", past),
        Canned::json(200, answer(json!([{"text": "ok"}]), "STOP")),
    ])
    .await;
    let model = build(
        &http_config(
            "google",
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
        500,
        json!({"error": {"code": 500, "message": "Internal error encountered.", "status": "INTERNAL"}}),
    );
    let server = MockServer::start(vec![failing.clone(), failing.clone(), failing]).await;
    let model = build(
        &http_config("google", &server.base_url, json!({})),
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
            .contains("INTERNAL: Internal error encountered."),
        "{error}"
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn malformed_function_calls_are_a_structured_error() {
    let server = MockServer::start(vec![
        Canned::json(
            200,
            answer(
                json!([{"functionCall": {"name": "weather__get", "args": "{not json"}, "thoughtSignature": "sig"}]),
                "STOP",
            ),
        ),
        Canned::json(200, answer(json!([{"functionCall": {"args": {}}}]), "STOP")),
    ])
    .await;
    let model = build(
        &http_config("google", &server.base_url, json!({})),
        &no_env(),
    )
    .unwrap();
    // Args that are not an object go to the runtime as a marked call, so
    // the model is told and may try again (issue 16 #20).
    let bad_args = model
        .generate(request(vec![ModelMessage::user("x")]), &NoStream)
        .await
        .unwrap();
    let call = &bad_args.tool_calls()[0];
    assert_eq!(call.name, "weather__get");
    let mark = bad_args.invalid_arguments(&call.id).unwrap();
    assert_eq!(mark.preview, "\"{not json\"");
    assert!(
        matches!(&bad_args.content[0], ContentPart::ToolCall { provider_options: Some(options), .. }
            if options["google"]["thoughtSignature"] == "sig"),
        "{:?}",
        bad_args.content
    );
    let no_name = model
        .generate(request(vec![ModelMessage::user("y")]), &NoStream)
        .await
        .unwrap_err();
    assert_eq!(no_name.code(), "E_MODEL_MALFORMED_RESPONSE");
}

/// Issue 16 #21: a stream of chunks without candidates is not an empty
/// answer.
#[tokio::test]
async fn a_stream_without_candidates_is_malformed() {
    let server = MockServer::start(vec![Canned::sse(&[
        ("", json!({"candidates": []})),
        ("", json!({"usageMetadata": {"promptTokenCount": 3}})),
    ])])
    .await;
    let model = build(
        &http_config("google", &server.base_url, json!({"stream": true})),
        &no_env(),
    )
    .unwrap();
    let error = model
        .generate(request(vec![ModelMessage::user("x")]), &NoStream)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_MODEL_MALFORMED_RESPONSE");
    assert!(
        error.to_string().contains("without any candidate"),
        "{error}"
    );
}

#[tokio::test]
async fn streamed_chunks_are_assembled() {
    let server = MockServer::start(vec![Canned::sse(&[
        ("", json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "It is "}]}}]})),
        ("", json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "sunny. "}]}}]})),
        ("", json!({"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "clock__now", "args": {}}}]}, "finishReason": "STOP"}],
                    "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4, "totalTokenCount": 7}})),
    ])])
    .await;
    let model = build(
        &http_config("google", &server.base_url, json!({"stream": true})),
        &no_env(),
    )
    .unwrap();
    let deltas = Deltas::default();
    let reply = model
        .generate(request(vec![ModelMessage::user("x")]), &deltas)
        .await
        .unwrap();
    assert_eq!(deltas.all(), vec!["It is ", "sunny. "]);
    assert_eq!(reply.content.len(), 2);
    assert_eq!(reply.content[0], ContentPart::text("It is sunny. "));
    assert_eq!(reply.tool_calls()[0].name, "clock__now");
    assert_eq!(reply.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        reply.usage,
        Some(TokenUsage {
            prompt_tokens: 3,
            completion_tokens: 4,
            total_tokens: 7
        })
    );
    assert_eq!(
        server.requests()[0].path,
        "/models/gemini-test:streamGenerateContent?alt=sse"
    );
}

#[tokio::test]
async fn the_key_never_reaches_logs_or_errors() {
    let logs = LogCapture::default();
    let _guard = logs.install();
    let echo = format!("API key not valid: {SECRET}");
    let server = MockServer::start(vec![
        Canned::json(
            503,
            json!({"error": {"code": 503, "message": echo, "status": "UNAVAILABLE"}}),
        ),
        Canned::json(
            400,
            json!({"error": {"code": 400, "message": echo, "status": "INVALID_ARGUMENT"}}),
        ),
    ])
    .await;
    let model = build(
        &http_config("google", &server.base_url, json!({})),
        &no_env(),
    )
    .unwrap();
    let error = model
        .generate(request(vec![ModelMessage::user("x")]), &NoStream)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_MODEL_HTTP");
    let shown = format!("{error} {error:?}");
    assert!(shown.contains("API key not valid: ***"), "{shown}");
    assert!(!shown.contains(SECRET), "{shown}");
    let logged = logs.text();
    assert!(
        logged.contains("retrying") && logged.contains("***"),
        "{logged}"
    );
    assert!(!logged.contains(SECRET), "{logged}");
}
