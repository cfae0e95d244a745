//! Building models from config: key resolution, provider names, endpoints.

use crate::support::*;
use goondan_model::{build, ModelConfig, ModelError, ModelParams, ModelRequest, NoStream};
use goondan_types::ModelMessage;
use serde_json::json;
use std::collections::HashMap;

fn build_error(config: &ModelConfig, env: &HashMap<String, String>) -> ModelError {
    match build(config, env) {
        Err(error) => error,
        Ok(_) => panic!("{config:?} should not build"),
    }
}

#[test]
fn a_missing_key_names_the_model_resource_and_the_variable() {
    for (provider, variable) in [
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("openai", "OPENAI_API_KEY"),
        ("google", "GOOGLE_GENERATIVE_AI_API_KEY"),
    ] {
        let config = ModelConfig::new("claude-main", provider, "m", "/b");
        let error = build_error(&config, &no_env());
        assert_eq!(error.code(), "E_MODEL_API_KEY_MISSING");
        let text = error.to_string();
        assert!(
            text.contains("Model/claude-main") && text.contains(variable),
            "{text}"
        );
        assert!(error.suggestion().is_some());
    }
}

#[tokio::test]
async fn the_providers_variable_is_the_fallback_key() {
    let server = MockServer::start(vec![Canned::json(
        200,
        json!({"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}),
    )])
    .await;
    let mut config = http_config("Anthropic", &server.base_url, json!({}));
    config.api_key = None;
    let env: HashMap<String, String> =
        [("ANTHROPIC_API_KEY".to_string(), "from-env-key".to_string())].into();
    let model = build(&config, &env).unwrap();
    let request = ModelRequest {
        model: "m".into(),
        messages: vec![ModelMessage::user("hi")],
        tools: vec![],
        params: ModelParams::default(),
    };
    model.generate(request, &NoStream).await.unwrap();
    assert_eq!(server.requests()[0].headers["x-api-key"], "from-env-key");
}

#[test]
fn unknown_providers_and_bad_endpoints_are_config_errors() {
    let error = build_error(&ModelConfig::new("x", "mistral", "m", "/b"), &no_env());
    assert_eq!(error.code(), "E_MODEL_CONFIG");
    assert!(error.to_string().contains("unknown provider `mistral`"));
    assert!(error
        .suggestion()
        .unwrap()
        .contains("anthropic, openai, google, scripted, replay"));

    let mut config = http_config("openai", "localhost:11434/v1", json!({}));
    config.endpoint = Some("localhost:11434/v1".into());
    let error = build_error(&config, &no_env());
    assert_eq!(error.code(), "E_MODEL_CONFIG");
    assert!(error.to_string().contains("spec.endpoint"));

    let config = http_config(
        "openai",
        "http://127.0.0.1:1",
        json!({"headers": {"x-bad": 1}}),
    );
    let error = build_error(&config, &no_env());
    assert!(
        error.to_string().contains("spec.options.headers.x-bad"),
        "{error}"
    );
}

/// Without `spec.endpoint`, the base-URL variables the original's users
/// set (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`,
/// `GOOGLE_GENERATIVE_AI_BASE_URL`) point a provider elsewhere, such as a
/// proxy; `spec.endpoint` still wins, and a bad value is a config error
/// naming the variable.
#[tokio::test]
async fn base_url_variables_point_a_provider_without_an_endpoint() {
    let cases = [
        (
            "anthropic",
            "ANTHROPIC_BASE_URL",
            json!({"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}),
            "/messages",
        ),
        (
            "openai",
            "OPENAI_BASE_URL",
            json!({"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}),
            "/chat/completions",
        ),
        (
            "google",
            "GOOGLE_GENERATIVE_AI_BASE_URL",
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}]}),
            "/models/test-model-id:generateContent",
        ),
    ];
    for (provider, variable, reply, path) in cases {
        let server = MockServer::start(vec![Canned::json(200, reply)]).await;
        let mut config = http_config(provider, &server.base_url, json!({}));
        config.endpoint = None;
        let env: HashMap<String, String> =
            [(variable.to_string(), format!("{}/proxy", server.base_url))].into();
        let model = build(&config, &env).unwrap();
        let request = ModelRequest {
            model: "test-model-id".into(),
            messages: vec![ModelMessage::user("hi")],
            tools: vec![],
            params: ModelParams::default(),
        };
        model.generate(request, &NoStream).await.unwrap();
        assert_eq!(
            server.requests()[0].path,
            format!("/proxy{path}"),
            "{provider}"
        );

        // The Model's own endpoint wins over the variable.
        let mut pinned = http_config(provider, "ftp://nowhere", json!({}));
        pinned.endpoint = Some("ftp://nowhere".into());
        let error = build_error(&pinned, &env);
        assert!(error.to_string().contains("spec.endpoint"), "{error}");

        let bad: HashMap<String, String> =
            [(variable.to_string(), "proxy:8080".to_string())].into();
        let error = build_error(&config, &bad);
        assert_eq!(error.code(), "E_MODEL_CONFIG");
        assert!(error.to_string().contains(variable), "{error}");
    }
}
