//! Record and replay: round trips through a cassette file, id-insensitive
//! matching, and the miss diff.

use crate::scripted::{request, scripted_config, DELEGATION_RULES};
use crate::support::*;
use goondan_model::{build, CassetteEntry, ModelConfig, NoStream};
use goondan_types::{ContentPart, ModelMessage, ToolResultOutput};
use serde_json::json;

fn replay_config(dir: &std::path::Path, cassette: &str) -> ModelConfig {
    let mut config = ModelConfig::new("replayed", "replay", "scripted-1", dir);
    config.options.insert("cassette".into(), json!(cassette));
    config
}

fn conversation(call_id: &str) -> Vec<ModelMessage> {
    vec![
        ModelMessage::user("research tides"),
        ModelMessage::assistant(vec![ContentPart::tool_call(
            call_id,
            "agents__request",
            json!({"target": "researcher", "input": "Find facts about tides"}),
        )]),
        ModelMessage::tool(vec![ContentPart::tool_result(
            call_id,
            "agents__request",
            ToolResultOutput::Json(json!({"response": "the moon did it"})),
        )]),
    ]
}

#[tokio::test]
async fn record_then_replay_round_trip_ignores_random_ids() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "scripted-rules.yaml", DELEGATION_RULES);
    let mut recording = scripted_config(dir.path(), "coordinator");
    recording.record_to = Some(dir.path().join("cassettes/demo.jsonl"));
    let live = build(&recording, &no_env()).unwrap();
    let first = live
        .generate(
            request(vec![ModelMessage::user("research tides")]),
            &NoStream,
        )
        .await
        .unwrap();
    let second = live
        .generate(request(conversation("call_1_1")), &NoStream)
        .await
        .unwrap();

    let text = std::fs::read_to_string(dir.path().join("cassettes/demo.jsonl")).unwrap();
    let lines: Vec<CassetteEntry> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1].response, second);

    let replay = build(
        &replay_config(dir.path(), "cassettes/demo.jsonl"),
        &no_env(),
    )
    .unwrap();
    let deltas = Deltas::default();
    let replayed_first = replay
        .generate(request(vec![ModelMessage::user("research tides")]), &deltas)
        .await
        .unwrap();
    assert_eq!(replayed_first, first);
    assert_eq!(deltas.all(), vec!["Asking the researcher."]);
    // The same conversation with a provider's random id instead of ours.
    let replayed_second = replay
        .generate(request(conversation("toolu_01RANDOM")), &NoStream)
        .await
        .unwrap();
    assert_eq!(replayed_second, second);
    assert_eq!(
        replayed_second.text(),
        "The researcher says: the moon did it"
    );
}

#[tokio::test]
async fn an_http_provider_records_too() {
    let server = MockServer::start(vec![Canned::json(200, json!({
        "choices": [{"message": {"role": "assistant", "content": "recorded"}, "finish_reason": "stop"}]
    }))])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = http_config("openai", &server.base_url, json!({}));
    config.model = "scripted-1".into();
    config.record_to = Some(dir.path().join("http.jsonl"));
    let live = build(&config, &no_env()).unwrap();
    live.generate(request(vec![ModelMessage::user("hello")]), &NoStream)
        .await
        .unwrap();
    let cassette = std::fs::read_to_string(dir.path().join("http.jsonl")).unwrap();
    assert!(!cassette.contains(SECRET));
    let replay = build(&replay_config(dir.path(), "http.jsonl"), &no_env()).unwrap();
    let answer = replay
        .generate(request(vec![ModelMessage::user("hello")]), &NoStream)
        .await
        .unwrap();
    assert_eq!(answer.text(), "recorded");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_replay_miss_shows_where_the_request_drifted() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "scripted-rules.yaml", DELEGATION_RULES);
    let mut recording = scripted_config(dir.path(), "coordinator");
    recording.record_to = Some(dir.path().join("c.jsonl"));
    let live = build(&recording, &no_env()).unwrap();
    live.generate(
        request(vec![ModelMessage::user("research tides")]),
        &NoStream,
    )
    .await
    .unwrap();
    live.generate(request(conversation("call_1_1")), &NoStream)
        .await
        .unwrap();

    let replay = build(&replay_config(dir.path(), "c.jsonl"), &no_env()).unwrap();
    let mut drifted = conversation("x");
    drifted[2] = ModelMessage::tool(vec![ContentPart::tool_result(
        "x",
        "agents__request",
        ToolResultOutput::Json(json!({"response": "the sun did it"})),
    )]);
    let error = replay
        .generate(request(drifted), &NoStream)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_MODEL_REPLAY_MISS");
    let text = error.to_string();
    assert!(text.contains("c.jsonl"), "{text}");
    assert!(text.contains("nearest recording is line 2 of 2"), "{text}");
    assert!(
        text.contains(r#"messages[2].content[0].output.value.response: recorded "the moon did it", requested "the sun did it""#),
        "{text}"
    );
}

#[tokio::test]
async fn cassette_problems_are_reported_at_build() {
    let dir = tempfile::tempdir().unwrap();
    let no_option = match build(&ModelConfig::new("r", "replay", "m", dir.path()), &no_env()) {
        Err(error) => error,
        Ok(_) => panic!("replay without a cassette should not build"),
    };
    assert_eq!(no_option.code(), "E_MODEL_CONFIG");
    write_file(dir.path(), "bad.jsonl", "\n{\"request\": 1}\n");
    let corrupt = match build(&replay_config(dir.path(), "bad.jsonl"), &no_env()) {
        Err(error) => error,
        Ok(_) => panic!("a corrupt cassette should not build"),
    };
    assert_eq!(corrupt.code(), "E_MODEL_CASSETTE");
    assert!(corrupt.to_string().contains("line 2"), "{corrupt}");
}
