//! OpenAI Responses (`POST /responses`) against a mock speaking its wire
//! format as OpenAI's API reference gives it: a plain answer, a stream of
//! typed events, and a tool round trip that carries reasoning back. Also
//! which API a Model speaks by default and by `spec.options.api`.

use crate::support::*;
use goondan_model::{build, FinishReason, ModelParams, ModelRequest, NoStream, ToolSpec};
use goondan_types::{ContentPart, ModelMessage, ToolResultOutput};
use serde_json::{json, Value};

fn request(messages: Vec<ModelMessage>) -> ModelRequest {
    ModelRequest {
        model: "gpt-5-test".into(),
        messages,
        tools: vec![ToolSpec {
            name: "file__read".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}})
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

fn responses_config(base_url: &str, options: Value) -> goondan_model::ModelConfig {
    let mut merged = json!({"api": "responses"});
    for (key, value) in options.as_object().cloned().unwrap_or_default() {
        merged[key] = value;
    }
    http_config("openai", base_url, merged)
}

fn response(status: &str, output: Value) -> Value {
    json!({
        "id": "resp_1", "object": "response", "created_at": 1741476542, "status": status,
        "model": "gpt-5-test", "output": output,
        "usage": {"input_tokens": 36, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": 87, "output_tokens_details": {"reasoning_tokens": 64},
                  "total_tokens": 123}
    })
}

#[tokio::test]
async fn a_plain_answer_goes_to_responses_with_its_usage() {
    let server = MockServer::start(vec![Canned::json(
        200,
        response(
            "completed",
            json!([{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": "Hi!", "annotations": []}]}]),
        ),
    )])
    .await;
    let model = build(&responses_config(&server.base_url, json!({})), &no_env()).unwrap();
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
    let usage = answer.usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens
        ),
        (36, 87, 123)
    );
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/responses");
    assert_eq!(sent.headers["authorization"], format!("Bearer {SECRET}"));
    assert_eq!(sent.body["model"], "gpt-5-test");
    assert_eq!(sent.body["max_output_tokens"], 256);
    assert_eq!(
        sent.body["input"],
        json!([
            {"role": "system", "content": "sys"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}
        ])
    );
    assert_eq!(
        sent.body["tools"],
        json!([{"type": "function", "name": "file__read", "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
                "strict": false}])
    );
}

#[tokio::test]
async fn a_tool_round_trip_sends_the_call_its_output_and_the_reasoning_back() {
    let server = MockServer::start(vec![
        Canned::json(
            200,
            response(
                "completed",
                json!([
                    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Need the file."}],
                     "encrypted_content": "gAAAA-opaque"},
                    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "file__read",
                     "arguments": "{\"path\":\"a.txt\"}", "status": "completed"}
                ]),
            ),
        ),
        Canned::json(
            200,
            response(
                "completed",
                json!([{"type": "message", "id": "msg_2", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": "It says hi.", "annotations": []}]}]),
            ),
        ),
    ])
    .await;
    let model = build(&responses_config(&server.base_url, json!({})), &no_env()).unwrap();
    let first = model
        .generate(request(vec![ModelMessage::user("read a.txt")]), &NoStream)
        .await
        .unwrap();
    assert_eq!(first.finish_reason, FinishReason::ToolCalls);
    let call = first
        .content
        .iter()
        .find(|part| matches!(part, ContentPart::ToolCall { .. }))
        .unwrap()
        .clone();
    assert_eq!(
        call,
        ContentPart::tool_call("call_1", "file__read", json!({"path": "a.txt"}))
    );

    let second = model
        .generate(
            request(vec![
                ModelMessage::user("read a.txt"),
                ModelMessage::assistant(first.content.clone()),
                ModelMessage::tool(vec![ContentPart::tool_result(
                    "call_1",
                    "file__read",
                    ToolResultOutput::Text("hi".into()),
                )]),
            ]),
            &NoStream,
        )
        .await
        .unwrap();
    assert_eq!(second.text(), "It says hi.");
    let sent = &server.requests()[1].body;
    assert_eq!(
        sent["input"],
        json!([
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read a.txt"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Need the file."}],
             "encrypted_content": "gAAAA-opaque"},
            {"type": "function_call", "call_id": "call_1", "name": "file__read", "arguments": "{\"path\":\"a.txt\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "hi"}
        ])
    );
    assert_eq!(sent["store"], false);
    assert_eq!(sent["include"], json!(["reasoning.encrypted_content"]));
}

#[tokio::test]
async fn a_stream_of_typed_events_is_assembled_and_its_text_forwarded() {
    let final_output = json!([
        {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "file__read",
         "arguments": "{\"path\":\"b\"}", "status": "completed"}
    ]);
    let events: Vec<(&str, Value)> = vec![
        (
            "response.created",
            json!({"type": "response.created", "sequence_number": 0, "response": response("in_progress", json!([]))}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
            "item": {"type": "message", "id": "msg_1", "status": "in_progress", "role": "assistant", "content": []}}),
        ),
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "sequence_number": 2, "item_id": "msg_1",
            "output_index": 0, "content_index": 0, "delta": "Let me "}),
        ),
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "sequence_number": 3, "item_id": "msg_1",
            "output_index": 0, "content_index": 0, "delta": "check."}),
        ),
        (
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "sequence_number": 4,
            "item_id": "fc_1", "output_index": 1, "delta": "{\"path\":\"b\"}"}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "sequence_number": 5, "response": response("completed", final_output)}),
        ),
    ];
    let server = MockServer::start(vec![Canned::sse(&events)]).await;
    let model = build(
        &responses_config(&server.base_url, json!({"stream": true})),
        &no_env(),
    )
    .unwrap();
    let deltas = Deltas::default();
    let answer = model
        .generate(request(vec![ModelMessage::user("x")]), &deltas)
        .await
        .unwrap();
    assert_eq!(deltas.all(), ["Let me ", "check."]);
    assert_eq!(answer.text(), "Let me check.");
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    assert_eq!(answer.usage.unwrap().total_tokens, 123);
    assert_eq!(server.requests()[0].body["stream"], true);

    // A stream that breaks off before `response.completed` is an error,
    // not an empty answer.
    let cut: Vec<(&str, Value)> = events[..4].to_vec();
    let server = MockServer::start(vec![Canned::sse(&cut)]).await;
    let model = build(
        &responses_config(&server.base_url, json!({"stream": true})),
        &no_env(),
    )
    .unwrap();
    let error = model
        .generate(request(vec![ModelMessage::user("x")]), &NoStream)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("response.completed"), "{error}");
}

/// OpenAI's own API speaks Responses; a custom endpoint (a compatible
/// server) speaks Chat Completions; `spec.options.api` chooses either way.
#[tokio::test]
async fn the_api_follows_the_endpoint_unless_the_model_chooses() {
    let chat_answer = json!({"choices": [{"message": {"role": "assistant", "content": "chat"}, "finish_reason": "stop"}]});
    let server = MockServer::start(vec![Canned::json(200, chat_answer)]).await;
    let model = build(
        &http_config("openai", &server.base_url, json!({})),
        &no_env(),
    )
    .unwrap();
    model
        .generate(request(vec![ModelMessage::user("x")]), &NoStream)
        .await
        .unwrap();
    assert_eq!(server.requests()[0].path, "/chat/completions");

    let mut config = http_config(
        "openai",
        "http://unused",
        json!({"api": "chat-completions"}),
    );
    config.endpoint = None;
    let env: std::collections::HashMap<String, String> =
        [("OPENAI_API_KEY".to_string(), "k".to_string())].into();
    assert!(build(&config, &env).is_ok());

    let config = http_config("openai", &server.base_url, json!({"api": "assistants"}));
    let error = match build(&config, &no_env()) {
        Err(error) => error,
        Ok(_) => panic!("an unknown api was accepted"),
    };
    assert_eq!(error.code(), "E_MODEL_CONFIG");
    assert!(error.to_string().contains("spec.options.api"), "{error}");
}
