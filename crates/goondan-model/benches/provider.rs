//! Round trips through each wire to a mock on 127.0.0.1 (encode, HTTP,
//! decode or SSE assembly) for a 40-message conversation, the scripted
//! provider on the same conversation, and the resident memory that building
//! the three HTTP models costs.

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::post;
use criterion::{criterion_group, criterion_main, Criterion};
use goondan_model::{
    build, ApiKey, Model, ModelConfig, ModelParams, ModelRequest, NoStream, ToolSpec,
};
use goondan_types::{ContentPart, ModelMessage, ToolResultOutput};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

fn conversation() -> ModelRequest {
    let mut messages = vec![ModelMessage::system("You are a careful assistant.")];
    for turn in 0..13 {
        let id = format!("call_{turn}");
        messages.push(ModelMessage::user(format!(
            "Please look at file number {turn} and summarize it."
        )));
        messages.push(ModelMessage::assistant(vec![
            ContentPart::text("Reading it."),
            ContentPart::tool_call(
                &id,
                "file__read",
                json!({"path": format!("docs/{turn}.md")}),
            ),
        ]));
        messages.push(ModelMessage::tool(vec![ContentPart::tool_result(
            &id,
            "file__read",
            ToolResultOutput::Json(json!({"content": "lorem ipsum ".repeat(40)})),
        )]));
    }
    ModelRequest {
        model: "bench-model".into(),
        messages,
        tools: (0..8)
            .map(|index| ToolSpec {
                name: format!("tool{index}__run"),
                description: "A tool".into(),
                parameters: json!({"type": "object", "properties": {"x": {"type": "string"}}})
                    .as_object()
                    .cloned()
                    .unwrap(),
            })
            .collect(),
        params: ModelParams::default(),
    }
}

fn openai_stream_body() -> String {
    let mut body = String::new();
    for index in 0..200 {
        let chunk = json!({"choices": [{"index": 0, "delta": {"content": format!("word{index} ")}, "finish_reason": null}]});
        body.push_str(&format!("data: {chunk}\n\n"));
    }
    body.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    body
}

async fn start_mock() -> String {
    let app = axum::Router::new()
        .route("/anthropic/messages", post(|| async {
            axum::Json(json!({"content": [{"type": "text", "text": "Summary."}], "stop_reason": "end_turn", "usage": {"input_tokens": 900, "output_tokens": 3}}))
        }))
        .route("/openai/chat/completions", post(|| async {
            axum::Json(json!({"choices": [{"message": {"role": "assistant", "content": "Summary."}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 900, "completion_tokens": 3, "total_tokens": 903}}))
        }))
        .route("/stream/chat/completions", post(|| async {
            ([(CONTENT_TYPE, "text/event-stream")], openai_stream_body()).into_response()
        }))
        .route("/google/models/{model}", post(|| async {
            axum::Json(json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Summary."}]}, "finishReason": "STOP"}]}))
        }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}")
}

fn http_model(provider: &str, endpoint: String, stream: bool) -> Arc<dyn Model> {
    let mut config = ModelConfig::new("bench", provider, "bench-model", "/");
    config.endpoint = Some(endpoint);
    config.api_key = Some(ApiKey::new("bench-key"));
    config.options.insert("stream".into(), json!(stream));
    build(&config, &HashMap::<String, String>::new()).unwrap()
}

fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

fn providers(criterion: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let base = runtime.block_on(start_mock());
    let request = conversation();

    let before = resident_kib();
    let models = [
        (
            "anthropic",
            http_model("anthropic", format!("{base}/anthropic"), false),
        ),
        (
            "openai",
            http_model("openai", format!("{base}/openai"), false),
        ),
        (
            "google",
            http_model("google", format!("{base}/google"), false),
        ),
        (
            "openai-stream-200-deltas",
            http_model("openai", format!("{base}/stream"), true),
        ),
    ];
    for (_, model) in &models {
        runtime
            .block_on(model.generate(request.clone(), &NoStream))
            .unwrap();
    }
    let after = resident_kib();
    println!(
        "resident memory: {before} KiB before, {after} KiB after building 4 HTTP models and one call each (+{} KiB)",
        after.saturating_sub(before)
    );

    for (name, model) in &models {
        criterion.bench_function(&format!("round trip, 40 messages: {name}"), |bencher| {
            bencher.iter(|| {
                runtime
                    .block_on(model.generate(request.clone(), &NoStream))
                    .unwrap()
            })
        });
    }

    let dir = std::env::temp_dir().join(format!("goondan-model-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("scripted-rules.yaml"), "rules:\n  - when: { toolResult: { regex: \"lorem (ipsum)\" } }\n    reply: { text: \"Saw {{1}}.\" }\n").unwrap();
    let scripted = build(
        &ModelConfig::new("bench", "scripted", "m", &dir),
        &HashMap::<String, String>::new(),
    )
    .unwrap();
    criterion.bench_function("scripted answer, 40 messages", |bencher| {
        bencher.iter(|| {
            runtime
                .block_on(scripted.generate(request.clone(), &NoStream))
                .unwrap()
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, providers);
criterion_main!(benches);
