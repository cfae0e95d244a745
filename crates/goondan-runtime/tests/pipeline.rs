//! Seed 000 §2, §5, §6: onion order, priorities, skipping and
//! transforming through `next`, across real Turns.

mod common;

use common::{Harness, Log};
use goondan_model::NoStream;
use goondan_runtime::{ExtensionApi, ExtensionInitError, MiddlewareOptions};
use goondan_types::{JsonValue, TurnFinishReason};
use serde_json::json;

/// An extension registering one middleware of each kind that logs
/// `<name>.<kind>.pre/post`.
fn logging_extension(
    name: &'static str,
    log: Log,
    priority: i32,
) -> impl Fn(&mut ExtensionApi<'_>, &JsonValue) -> Result<(), ExtensionInitError> + Send + Sync {
    move |api, _config| {
        let options = MiddlewareOptions::priority(priority);
        let turn_log = log.clone();
        api.pipeline().turn(
            move |ctx, next| {
                let log = turn_log.clone();
                Box::pin(async move {
                    log.push(format!("{name}.turn.pre"));
                    let result = next.run(ctx).await;
                    log.push(format!("{name}.turn.post"));
                    result
                })
            },
            options,
        );
        let step_log = log.clone();
        api.pipeline().step(
            move |ctx, next| {
                let log = step_log.clone();
                Box::pin(async move {
                    log.push(format!("{name}.step.pre"));
                    let result = next.run(ctx).await;
                    log.push(format!("{name}.step.post"));
                    result
                })
            },
            options,
        );
        let call_log = log.clone();
        api.pipeline().tool_call(
            move |ctx, next| {
                let log = call_log.clone();
                Box::pin(async move {
                    log.push(format!("{name}.toolCall.pre"));
                    let result = next.run(ctx).await;
                    log.push(format!("{name}.toolCall.post"));
                    result
                })
            },
            options,
        );
        Ok(())
    }
}

fn echo_tool(harness: &mut Harness, log: Log) {
    harness.tool(
        "echo",
        vec![(
            "say",
            None,
            goondan_runtime::handler_fn(move |_ctx, args| {
                let log = log.clone();
                Box::pin(async move {
                    log.push("core.tool");
                    Ok(JsonValue::Object(args))
                })
            }),
        )],
        None,
    );
}

#[tokio::test]
async fn must_onion_order_first_registered_is_outermost_with_two_extensions() {
    let log = Log::default();
    let mut harness = Harness::new();
    harness.extension("a", logging_extension("A", log.clone(), 0));
    harness.extension("b", logging_extension("B", log.clone(), 0));
    echo_tool(&mut harness, log.clone());
    harness
        .model
        .tool_calls(&[("c1", "echo__say", json!({"x": 1}))]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    let result = agent
        .run_turn(goondan_runtime::test_support::user_event("hi"), &NoStream)
        .await;
    assert_eq!(result.finish_reason, TurnFinishReason::TextResponse);
    let expected = [
        "A.turn.pre",
        "B.turn.pre",
        "A.step.pre",
        "B.step.pre",
        "A.toolCall.pre",
        "B.toolCall.pre",
        "core.tool",
        "B.toolCall.post",
        "A.toolCall.post",
        "B.step.post",
        "A.step.post",
        "A.step.pre",
        "B.step.pre",
        "B.step.post",
        "A.step.post",
        "B.turn.post",
        "A.turn.post",
    ];
    assert_eq!(log.lines(), expected);
}

#[tokio::test]
async fn must_onion_order_with_three_extensions_pre_in_order_post_reversed() {
    let log = Log::default();
    let mut harness = Harness::new();
    for (id, name) in [("a", "A"), ("b", "B"), ("c", "C")] {
        harness.extension(id, logging_extension(name, log.clone(), 0));
    }
    harness.model.text("hello");
    let mut agent = harness.start().await;
    agent
        .run_turn(goondan_runtime::test_support::user_event("hi"), &NoStream)
        .await;
    let turn_lines: Vec<String> = log
        .lines()
        .into_iter()
        .filter(|line| line.contains(".turn."))
        .collect();
    assert_eq!(
        turn_lines,
        [
            "A.turn.pre",
            "B.turn.pre",
            "C.turn.pre",
            "C.turn.post",
            "B.turn.post",
            "A.turn.post"
        ]
    );
}

#[tokio::test]
async fn must_priority_lower_is_outer_and_ties_keep_registration_order() {
    // Seed 000 §6.2: A(10), B(5), C(10) registered in that order run as
    // B, A, C, then the core.
    let log = Log::default();
    let mut harness = Harness::new();
    harness.extension("a", logging_extension("A", log.clone(), 10));
    harness.extension("b", logging_extension("B", log.clone(), 5));
    harness.extension("c", logging_extension("C", log.clone(), 10));
    harness.model.text("hello");
    let mut agent = harness.start().await;
    agent
        .run_turn(goondan_runtime::test_support::user_event("hi"), &NoStream)
        .await;
    let step_lines: Vec<String> = log
        .lines()
        .into_iter()
        .filter(|line| line.contains(".step."))
        .collect();
    assert_eq!(
        step_lines,
        [
            "B.step.pre",
            "A.step.pre",
            "C.step.pre",
            "C.step.post",
            "A.step.post",
            "B.step.post"
        ]
    );
}

#[tokio::test]
async fn must_one_extension_may_register_several_of_one_kind() {
    let log = Log::default();
    let mut harness = Harness::new();
    let inner_log = log.clone();
    harness.extension("multi", move |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        for label in ["first", "second"] {
            let log = inner_log.clone();
            api.pipeline().turn(
                move |ctx, next| {
                    let log = log.clone();
                    Box::pin(async move {
                        log.push(label);
                        next.run(ctx).await
                    })
                },
                MiddlewareOptions::default(),
            );
        }
        Ok(())
    });
    harness.model.text("ok");
    let mut agent = harness.start().await;
    agent
        .run_turn(goondan_runtime::test_support::user_event("hi"), &NoStream)
        .await;
    assert_eq!(log.lines(), ["first", "second"]);
}

#[tokio::test]
async fn must_not_calling_next_skips_inner_layers_and_the_core() {
    let log = Log::default();
    let mut harness = Harness::new();
    harness.extension("gate", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.pipeline().turn(
            |ctx, _next| {
                Box::pin(async move {
                    Ok(goondan_types::TurnResult {
                        turn_id: ctx.turn_id().to_string(),
                        response_message: None,
                        finish_reason: TurnFinishReason::TextResponse,
                        error: None,
                    })
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    harness.extension("inner", logging_extension("INNER", log.clone(), 0));
    let mut agent = harness.start().await;
    let result = agent
        .run_turn(goondan_runtime::test_support::user_event("hi"), &NoStream)
        .await;
    assert_eq!(result.finish_reason, TurnFinishReason::TextResponse);
    assert!(
        log.lines().is_empty(),
        "inner layers ran: {:?}",
        log.lines()
    );
    assert!(
        harness.model.requests().is_empty(),
        "the core called the model"
    );
    assert!(
        agent.conversation().next_messages().is_empty(),
        "the core appended the input"
    );
}

#[tokio::test]
async fn must_a_middleware_may_transform_the_result_of_next() {
    let mut harness = Harness::new();
    harness.extension("rewrite", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.pipeline().tool_call(
            |ctx, next| {
                Box::pin(async move {
                    let mut result = next.run(ctx).await?;
                    result.output = Some(json!({"wrapped": result.output.take()}));
                    Ok(result)
                })
            },
            MiddlewareOptions::default(),
        );
        api.pipeline().turn(
            |ctx, next| {
                Box::pin(async move {
                    let mut result = next.run(ctx).await?;
                    result.finish_reason = TurnFinishReason::MaxSteps;
                    Ok(result)
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    echo_tool(&mut harness, Log::default());
    harness
        .model
        .tool_calls(&[("c1", "echo__say", json!({"x": 1}))]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    let result = agent
        .run_turn(goondan_runtime::test_support::user_event("hi"), &NoStream)
        .await;
    assert_eq!(
        result.finish_reason,
        TurnFinishReason::MaxSteps,
        "turn result transformed"
    );
    // The second request carries the transformed tool result.
    let second = &harness.model.requests()[1];
    let tool_message = serde_json::to_value(second.messages.last().unwrap()).unwrap();
    assert_eq!(
        tool_message["content"][0]["output"]["value"],
        json!({"wrapped": {"x": 1}})
    );
}

#[tokio::test]
async fn must_metadata_is_shared_by_the_layers_of_one_chain() {
    let log = Log::default();
    let mut harness = Harness::new();
    let inner_log = log.clone();
    harness.extension("outer", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.pipeline().turn(
            |ctx, next| {
                Box::pin(async move {
                    ctx.metadata.insert("startedBy".into(), json!("outer"));
                    next.run(ctx).await
                })
            },
            MiddlewareOptions::default(),
        );
        api.pipeline().step(
            |ctx, next| {
                Box::pin(async move {
                    ctx.metadata.insert("step".into(), json!(ctx.step_index()));
                    next.run(ctx).await
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    harness.extension("inner", move |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        let log = inner_log.clone();
        api.pipeline().turn(
            move |ctx, next| {
                let log = log.clone();
                Box::pin(async move {
                    log.push(format!("turn sees {}", ctx.metadata["startedBy"]));
                    next.run(ctx).await
                })
            },
            MiddlewareOptions::default(),
        );
        let log = inner_log.clone();
        api.pipeline().step(
            move |ctx, next| {
                let log = log.clone();
                Box::pin(async move {
                    log.push(format!("step sees {}", ctx.metadata["step"]));
                    next.run(ctx).await
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    harness.model.text("ok");
    let mut agent = harness.start().await;
    agent
        .run_turn(goondan_runtime::test_support::user_event("hi"), &NoStream)
        .await;
    assert_eq!(log.lines(), [r#"turn sees "outer""#, "step sees 0"]);
}
