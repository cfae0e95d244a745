//! Seed 002 and seed 000 §3.2-§3.3: the catalog the model sees, the
//! arguments a handler receives, the catalog check, schema validation,
//! and failures (errors, panics) as results.

mod common;

use common::mock_llm::MockLlm;
use common::{Harness, Log};
use goondan_model::{ModelConfig, NoStream};
use goondan_runtime::test_support::user_event;
use goondan_runtime::tool::{ToolCallPolicy, DEFAULT_MAX_TOOL_CALLS_PER_STEP};
use goondan_runtime::{handler_fn, Agent, ExtensionApi, MiddlewareOptions, ToolFailure};
use goondan_types::{
    ContentPart, JsonValue, ModelMessage, RuntimeEvent, ToolCatalogItem, TurnFinishReason,
};
use serde_json::json;

/// The tool-result outputs of the conversation, in order.
fn tool_outputs(agent: &Agent) -> Vec<JsonValue> {
    let state = agent.conversation();
    state
        .next_messages()
        .iter()
        .filter_map(|message| match &message.data {
            ModelMessage::Tool { content, .. } => content.first().cloned(),
            _ => None,
        })
        .map(|part| match part {
            ContentPart::ToolResult { output, .. } => serde_json::to_value(output).unwrap(),
            other => panic!("unexpected part {other:?}"),
        })
        .collect()
}

/// A tool `name__run` whose handler logs its args and echoes them.
fn recording_tool(harness: &mut Harness, name: &str, log: Log, schema: Option<JsonValue>) {
    harness.tool(
        name,
        vec![(
            "run",
            schema,
            handler_fn(move |_ctx, args| {
                let log = log.clone();
                Box::pin(async move {
                    log.push(JsonValue::Object(args.clone()).to_string());
                    Ok(JsonValue::Object(args))
                })
            }),
        )],
        None,
    );
}

#[tokio::test]
async fn must_catalog_changes_before_next_are_what_the_model_receives() {
    let mut harness = Harness::new();
    recording_tool(&mut harness, "keep", Log::default(), None);
    recording_tool(&mut harness, "drop", Log::default(), None);
    harness.extension("filter", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.pipeline().step(
            |ctx, next| {
                Box::pin(async move {
                    ctx.tool_catalog.retain(|item| item.name != "drop__run");
                    next.run(ctx).await
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    harness.model.text("ok");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("hi"), &NoStream).await;
    let requests = harness.model.requests();
    let names: Vec<&str> = requests[0]
        .tools
        .iter()
        .map(|tool| tool.name.as_str())
        .collect();
    assert_eq!(names, ["keep__run"]);
    assert_eq!(requests[0].tools[0].description, "keep run");
}

#[tokio::test]
async fn must_a_call_outside_the_step_catalog_is_refused_and_never_runs() {
    let log = Log::default();
    let mut harness = Harness::new();
    recording_tool(&mut harness, "hidden", log.clone(), None);
    harness.extension("filter", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.pipeline().step(
            |ctx, next| {
                Box::pin(async move {
                    ctx.tool_catalog.clear();
                    next.run(ctx).await
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    harness.model.tool_calls(&[
        ("c1", "hidden__run", json!({})),
        ("c2", "nowhere__run", json!({})),
    ]);
    harness.model.text("sorry");
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("hi"), &NoStream).await;
    assert!(result.error.is_none());
    assert!(log.lines().is_empty(), "handler ran: {:?}", log.lines());
    let outputs = tool_outputs(&agent);
    assert_eq!(outputs.len(), 2);
    for output in &outputs {
        assert_eq!(output["type"], "error-json");
        assert_eq!(output["value"]["code"], "E_TOOL_NOT_IN_CATALOG");
        assert_eq!(output["value"]["name"], "ToolNotInCatalogError");
        assert!(output["value"]["suggestion"].is_string());
    }
}

#[tokio::test]
async fn registry_direct_calls_run_only_behind_the_explicit_policy_flag() {
    let log = Log::default();
    let mut harness = Harness::new();
    recording_tool(&mut harness, "hidden", log.clone(), None);
    harness.extension("filter", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.pipeline().step(
            |ctx, next| {
                Box::pin(async move {
                    ctx.tool_catalog.clear();
                    next.run(ctx).await
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    harness.definition.tool_call_policy = ToolCallPolicy {
        allow_registry_direct: true,
        ..ToolCallPolicy::default()
    };
    harness
        .model
        .tool_calls(&[("c1", "hidden__run", json!({"n": 1}))]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("hi"), &NoStream).await;
    assert_eq!(log.lines(), [r#"{"n":1}"#]);
}

#[tokio::test]
async fn must_args_changes_before_next_are_what_the_handler_receives() {
    let log = Log::default();
    let mut harness = Harness::new();
    recording_tool(&mut harness, "bash", log.clone(), None);
    harness.extension("clamp", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.pipeline().tool_call(
            |ctx, next| {
                Box::pin(async move {
                    if ctx.tool_name() == "bash__run" {
                        ctx.args.insert("command".into(), json!("ls"));
                        ctx.args.insert("clamped".into(), json!(true));
                    }
                    next.run(ctx).await
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    harness
        .model
        .tool_calls(&[("c1", "bash__run", json!({"command": "rm -rf /"}))]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("hi"), &NoStream).await;
    assert_eq!(log.lines(), [r#"{"command":"ls","clamped":true}"#]);
}

#[tokio::test]
async fn must_schema_invalid_args_never_run_and_return_a_structured_error() {
    let log = Log::default();
    let mut harness = Harness::new();
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"]
    });
    recording_tool(&mut harness, "weather", log.clone(), Some(schema));
    harness
        .model
        .tool_calls(&[("c1", "weather__run", json!({"city": 7}))]);
    harness
        .model
        .tool_calls(&[("c2", "weather__run", json!({}))]);
    harness
        .model
        .tool_calls(&[("c3", "weather__run", json!({"city": "Seoul"}))]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("hi"), &NoStream).await;
    assert_eq!(
        log.lines(),
        [r#"{"city":"Seoul"}"#],
        "only the valid call ran"
    );
    let outputs = tool_outputs(&agent);
    for invalid in &outputs[..2] {
        assert_eq!(invalid["value"]["code"], "E_TOOL_INVALID_ARGS");
        assert_eq!(invalid["value"]["name"], "ToolInputError");
    }
    assert!(outputs[0]["value"]["message"]
        .as_str()
        .unwrap()
        .contains("/city"));
    assert_eq!(
        outputs[2],
        json!({"type": "json", "value": {"city": "Seoul"}})
    );
}

fn failing_tool(harness: &mut Harness, message: String, limit: Option<usize>) {
    harness.tool(
        "fail",
        vec![(
            "run",
            None,
            handler_fn(move |_ctx, _args| {
                let message = message.clone();
                Box::pin(async move {
                    Err(ToolFailure::new("E_UPSTREAM", message)
                        .with_name("UpstreamError")
                        .with_suggestion("retry later")
                        .with_help_url("https://docs.example/E_UPSTREAM"))
                })
            }),
        )],
        limit,
    );
}

async fn error_message_of(message: String, limit: Option<usize>) -> JsonValue {
    let mut harness = Harness::new();
    failing_tool(&mut harness, message, limit);
    harness.model.tool_calls(&[("c1", "fail__run", json!({}))]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("hi"), &NoStream).await;
    assert!(result.error.is_none(), "a tool error never fails the turn");
    tool_outputs(&agent).remove(0)
}

#[tokio::test]
async fn must_error_messages_are_cut_to_error_message_limit() {
    let at_limit = error_message_of("x".repeat(20), Some(20)).await;
    assert_eq!(at_limit["type"], "error-json");
    assert_eq!(
        at_limit["value"],
        json!({
            "name": "UpstreamError",
            "message": "x".repeat(20),
            "code": "E_UPSTREAM",
            "suggestion": "retry later",
            "helpUrl": "https://docs.example/E_UPSTREAM"
        })
    );
    let one_past = error_message_of("x".repeat(21), Some(20)).await;
    assert_eq!(
        one_past["value"]["message"],
        format!("{}... (truncated)", "x".repeat(5))
    );
}

#[tokio::test]
async fn must_error_message_limit_defaults_to_1000() {
    let at_limit = error_message_of("y".repeat(1000), None).await;
    assert_eq!(at_limit["value"]["message"], "y".repeat(1000));
    let one_past = error_message_of("y".repeat(1001), None).await;
    assert_eq!(
        one_past["value"]["message"],
        format!("{}... (truncated)", "y".repeat(985))
    );
}

#[tokio::test]
async fn must_a_panicking_handler_becomes_an_error_result() {
    let mut harness = Harness::new();
    harness.tool(
        "boom",
        vec![(
            "run",
            None,
            handler_fn(|_ctx, args| {
                Box::pin(async move {
                    if args.is_empty() {
                        panic!("handler exploded");
                    }
                    Ok(JsonValue::Null)
                })
            }),
        )],
        None,
    );
    harness.model.tool_calls(&[("c1", "boom__run", json!({}))]);
    harness.model.text("recovered");
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("hi"), &NoStream).await;
    assert!(result.error.is_none());
    assert_eq!(result.response_message.unwrap().data.text(), "recovered");
    let output = tool_outputs(&agent).remove(0);
    assert_eq!(output["value"]["code"], "E_TOOL_PANICKED");
    assert!(output["value"]["message"]
        .as_str()
        .unwrap()
        .contains("handler exploded"));
}

#[tokio::test]
async fn must_tool_context_carries_the_assistant_message_workdir_and_ids() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::default();
    let mut harness = Harness::new();
    harness.definition.workdir = dir.path().to_path_buf();
    let tool_log = log.clone();
    harness.tool(
        "probe",
        vec![(
            "run",
            None,
            handler_fn(move |ctx, _args| {
                let log = tool_log.clone();
                Box::pin(async move {
                    let holds_call = ctx.message.data.parts().iter().any(|part| {
                        matches!(part, ContentPart::ToolCall { tool_call_id, .. } if *tool_call_id == ctx.tool_call_id)
                    });
                    std::fs::write(ctx.workdir.join("probe.txt"), &ctx.agent_name).map_err(|error| {
                        ToolFailure::new("E_IO", error.to_string())
                    })?;
                    log.push(format!(
                        "{} {} {} {} {}",
                        ctx.agent_name,
                        ctx.instance_key,
                        ctx.tool_call_id,
                        holds_call,
                        ctx.trace_id().len()
                    ));
                    let catalog = ctx.runtime.catalog().await;
                    Ok(json!({"agentsAvailable": catalog.is_ok()}))
                })
            }),
        )],
        None,
    );
    harness.model.tool_calls(&[("c9", "probe__run", json!({}))]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("hi"), &NoStream).await;
    assert_eq!(log.lines(), ["alpha main c9 true 32"]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("probe.txt")).unwrap(),
        "alpha"
    );
    assert_eq!(
        tool_outputs(&agent)[0]["value"],
        json!({"agentsAvailable": false})
    );
}

#[tokio::test]
async fn must_extension_tools_join_the_catalog_and_bad_names_stop_the_start() {
    let log = Log::default();
    let mut harness = Harness::new();
    let tool_log = log.clone();
    harness.extension(
        "weather",
        move |api: &mut ExtensionApi<'_>, _: &JsonValue| {
            let log = tool_log.clone();
            api.tools().register(
                ToolCatalogItem {
                    name: "weather__get".into(),
                    description: Some("current weather".into()),
                    parameters: None,
                    source: None,
                },
                handler_fn(move |_ctx, args| {
                    let log = log.clone();
                    Box::pin(async move {
                        log.push(JsonValue::Object(args).to_string());
                        Ok(json!("sunny"))
                    })
                }),
            )?;
            Ok(())
        },
    );
    harness
        .model
        .tool_calls(&[("c1", "weather__get", json!({"city": "Seoul"}))]);
    harness.model.text("It is sunny.");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("weather?"), &NoStream).await;
    let request = &harness.model.requests()[0];
    assert_eq!(request.tools[0].name, "weather__get");
    assert_eq!(log.lines(), [r#"{"city":"Seoul"}"#]);
    assert_eq!(
        tool_outputs(&agent)[0],
        json!({"type": "text", "value": "sunny"})
    );
    let catalog = agent.tools().catalog();
    assert_eq!(
        serde_json::to_value(&catalog[0].source).unwrap(),
        json!({"type": "extension", "name": "weather"})
    );

    let mut bad = Harness::new();
    bad.extension("broken", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.tools().register(
            ToolCatalogItem {
                name: "no_separator".into(),
                description: None,
                parameters: None,
                source: None,
            },
            handler_fn(|_ctx, _args| Box::pin(async { Ok(JsonValue::Null) })),
        )?;
        Ok(())
    });
    let error = Agent::start(bad.definition.clone(), bad.services())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_EXTENSION_INIT");
    assert!(error.to_string().contains("broken"), "{error}");
    assert!(error.to_string().contains("E_TOOL_INVALID_NAME"), "{error}");
}

/// Issue 16 #19: one model answer asking for more calls than a Step runs
/// gets the first `max_calls_per_step` run and every other one answered
/// with `E_TOOL_CALL_LIMIT`, so each call still has its result.
#[tokio::test]
async fn calls_past_the_step_limit_are_answered_with_a_limit_error_and_not_run() {
    let log = Log::default();
    let mut harness = Harness::new();
    recording_tool(&mut harness, "rec", log.clone(), None);
    let calls: Vec<(String, JsonValue)> = (0..40)
        .map(|index| (format!("c{index}"), json!({"n": index})))
        .collect();
    let call_refs: Vec<(&str, &str, JsonValue)> = calls
        .iter()
        .map(|(id, args)| (id.as_str(), "rec__run", args.clone()))
        .collect();
    harness.model.tool_calls(&call_refs);
    harness.model.text("done");
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("go"), &NoStream).await;
    assert_eq!(result.finish_reason, TurnFinishReason::TextResponse);
    assert_eq!(log.lines().len(), DEFAULT_MAX_TOOL_CALLS_PER_STEP);
    assert_eq!(log.lines()[31], r#"{"n":31}"#);
    let outputs = tool_outputs(&agent);
    assert_eq!(outputs.len(), 40, "every call has a result");
    for refused in &outputs[32..] {
        assert_eq!(refused["type"], "error-json");
        assert_eq!(refused["value"]["code"], "E_TOOL_CALL_LIMIT");
        assert!(
            refused["value"]["message"]
                .as_str()
                .unwrap()
                .contains("at most 32 tool calls per step"),
            "{refused}"
        );
    }
    let n_failed = harness
        .events
        .take()
        .iter()
        .filter(|event| matches!(event, RuntimeEvent::ToolFailed { .. }))
        .count();
    assert_eq!(n_failed, 8);
}

#[tokio::test]
async fn the_step_limit_comes_from_the_tool_call_policy() {
    let log = Log::default();
    let mut harness = Harness::new();
    recording_tool(&mut harness, "rec", log.clone(), None);
    harness.definition.tool_call_policy = ToolCallPolicy {
        max_calls_per_step: 2,
        ..ToolCallPolicy::default()
    };
    harness.model.tool_calls(&[
        ("a", "rec__run", json!({"n": 1})),
        ("b", "rec__run", json!({"n": 2})),
        ("c", "rec__run", json!({"n": 3})),
    ]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("go"), &NoStream).await;
    assert_eq!(log.lines(), [r#"{"n":1}"#, r#"{"n":2}"#]);
    assert_eq!(
        tool_outputs(&agent)[2]["value"]["code"],
        "E_TOOL_CALL_LIMIT"
    );
}

/// Issue 16 #20: a provider answer whose tool-call arguments are not JSON
/// (`{not json`) gets an `E_TOOL_INVALID_ARGS` result quoting the text;
/// the handler does not run and the Turn goes on to the model's next
/// answer.
#[tokio::test]
async fn arguments_that_are_not_json_are_answered_and_the_turn_goes_on() {
    let server = MockLlm::start(vec![
        json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "rec__run", "arguments": "{not json"}}]
        }}]}),
        json!({"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "sorry, fixed"}}]}),
    ])
    .await;
    let mut config = ModelConfig::new("llm", "openai", "gpt-test", "/nonexistent");
    config.endpoint = Some(server.base_url.clone());
    config.options = json!({"stream": false, "maxRetries": 0})
        .as_object()
        .cloned()
        .unwrap();
    let model =
        goondan_model::build(&config, &std::collections::HashMap::<String, String>::new()).unwrap();
    let log = Log::default();
    let mut harness = Harness::new();
    harness.definition.model = model;
    recording_tool(&mut harness, "rec", log.clone(), None);
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("go"), &NoStream).await;
    assert_eq!(
        result.finish_reason,
        TurnFinishReason::TextResponse,
        "{result:?}"
    );
    assert!(log.lines().is_empty(), "the handler did not run");
    let outputs = tool_outputs(&agent);
    assert_eq!(outputs[0]["value"]["code"], "E_TOOL_INVALID_ARGS");
    let message = outputs[0]["value"]["message"].as_str().unwrap();
    assert!(message.contains("{not json"), "{message}");
    assert!(message.contains("not JSON"), "{message}");
    let second = &server.requests()[1]["messages"];
    let sent_back = second
        .as_array()
        .unwrap()
        .iter()
        .find(|message| message["role"] == "tool")
        .unwrap();
    assert_eq!(sent_back["tool_call_id"], "call_1");
    assert!(sent_back["content"]
        .as_str()
        .unwrap()
        .contains("E_TOOL_INVALID_ARGS"));
    let assistant = second
        .as_array()
        .unwrap()
        .iter()
        .find(|message| message["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["tool_calls"][0]["function"]["arguments"], "{}");
}

/// Issue 16 #1: a secret value in any tool result (text output, JSON
/// output, error message cut to the limit, or a result a `toolCall`
/// middleware substituted) is masked before it is stored or sent to the
/// model; short values and other text are left alone.
#[tokio::test]
async fn secrets_in_tool_results_are_masked_before_the_model_or_the_log_sees_them() {
    const KEY: &str = "sk-test-SECRET-9f3a7c2e1b";
    let mut harness = Harness::new();
    harness.definition.secrets = [("MY_KEY", KEY), ("SHORT", "abc")].into_iter().collect();
    harness.tool(
        "leak",
        vec![
            (
                "text",
                None,
                handler_fn(|_ctx, _args| {
                    Box::pin(async { Ok(JsonValue::String(format!("MY_KEY={KEY}\nabc"))) })
                }),
            ),
            (
                "json",
                None,
                handler_fn(|_ctx, _args| {
                    Box::pin(async { Ok(json!({"stdout": KEY, "nested": [{KEY: 1}]})) })
                }),
            ),
            (
                "fail",
                None,
                handler_fn(|_ctx, _args| {
                    // The secret straddles the 40-character limit.
                    Box::pin(async {
                        Err(ToolFailure::new(
                            "E_UPSTREAM",
                            format!("{}{KEY}{}", "x".repeat(20), "y".repeat(30)),
                        ))
                    })
                }),
            ),
        ],
        Some(40),
    );
    harness.extension("swap", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.pipeline().tool_call(
            |ctx, next| {
                Box::pin(async move {
                    let substitute = ctx.tool_name() == "leak__json";
                    let mut result = next.run(ctx).await?;
                    if substitute {
                        result.output = Some(json!(format!("middleware says {KEY}")));
                    }
                    Ok(result)
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    harness.model.tool_calls(&[
        ("c1", "leak__text", json!({})),
        ("c2", "leak__json", json!({})),
        ("c3", "leak__fail", json!({})),
    ]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("hi"), &NoStream).await;
    assert!(result.error.is_none());
    let outputs = tool_outputs(&agent);
    assert_eq!(
        outputs[0],
        json!({"type": "text", "value": "MY_KEY=[REDACTED:MY_KEY]\nabc"})
    );
    assert_eq!(
        outputs[1],
        json!({"type": "text", "value": "middleware says [REDACTED:MY_KEY]"})
    );
    // Masked before the cut: no piece of the key survives it.
    assert_eq!(
        outputs[2]["value"]["message"],
        format!("{}[REDA... (truncated)", "x".repeat(20))
    );
    let sent = serde_json::to_string(&harness.model.requests()).unwrap();
    assert!(!sent.contains(KEY), "the model saw the key: {sent}");
}
