//! `shared-types.md` §9 and `runtime.md` §7.5: the nine runtime events, the
//! span tree they describe and their counters.

mod common;

use common::Harness;
use goondan_model::NoStream;
use goondan_runtime::test_support::user_event;
use goondan_runtime::{handler_fn, ToolFailure};
use goondan_types::trace::is_hex_id;
use goondan_types::{RuntimeEvent, TokenUsage, ToolCallStatus};
use serde_json::json;

#[tokio::test]
async fn must_span_tree_of_a_two_step_turn_with_two_tool_calls() {
    let mut harness = Harness::new();
    harness.tool(
        "calc",
        vec![
            (
                "add",
                None,
                handler_fn(|_, _| Box::pin(async { Ok(json!(3)) })),
            ),
            (
                "div",
                None,
                handler_fn(|_, _| {
                    Box::pin(async { Err(ToolFailure::new("E_DIV_ZERO", "division by zero")) })
                }),
            ),
        ],
        None,
    );
    harness.model.tool_calls(&[
        ("c1", "calc__add", json!({"a": 1, "b": 2})),
        ("c2", "calc__div", json!({"a": 1, "b": 0})),
    ]);
    harness.model.text("3, and you cannot divide by zero");
    let mut agent = harness.start().await;
    let mut event = user_event("compute");
    event.trace_id = Some("0123456789abcdef0123456789abcdef".into());
    event.parent_span_id = Some("fedcba9876543210".into());
    let result = agent.run_turn(event, &NoStream).await;
    assert!(result.error.is_none());

    let events = harness.events.take();
    let types: Vec<&str> = events.iter().map(|event| event.type_name()).collect();
    assert_eq!(
        types,
        [
            "turn.started",
            "step.started",
            "tool.called",
            "tool.completed",
            "tool.called",
            "tool.completed",
            "step.completed",
            "step.started",
            "step.completed",
            "turn.completed",
        ]
    );
    for event in &events {
        let base = event.base();
        assert_eq!(
            base.trace_id, "0123456789abcdef0123456789abcdef",
            "traceId kept from the input"
        );
        assert!(is_hex_id(&base.span_id, 16));
        assert_eq!(base.agent_name, "alpha");
        assert_eq!(base.instance_key, "main");
    }
    let turn_span = events[0].base().span_id.clone();
    assert_eq!(
        events[0].base().parent_span_id.as_deref(),
        Some("fedcba9876543210"),
        "turn parent = inputEvent.parentSpanId"
    );
    assert_eq!(events[9].base().span_id, turn_span);
    assert_eq!(
        events[9].base().parent_span_id.as_deref(),
        Some("fedcba9876543210")
    );

    let step0 = events[1].base().span_id.clone();
    let step1 = events[7].base().span_id.clone();
    assert_ne!(step0, step1);
    for index in [1, 6, 7, 8] {
        assert_eq!(
            events[index].base().parent_span_id.as_deref(),
            Some(turn_span.as_str()),
            "step {index}"
        );
    }
    assert_eq!(events[6].base().span_id, step0);
    assert_eq!(events[8].base().span_id, step1);

    let call1 = events[2].base().span_id.clone();
    let call2 = events[4].base().span_id.clone();
    assert_ne!(call1, call2);
    assert_eq!(events[3].base().span_id, call1);
    assert_eq!(events[5].base().span_id, call2);
    for (offset, event) in events[2..=5].iter().enumerate() {
        assert_eq!(
            event.base().parent_span_id.as_deref(),
            Some(step0.as_str()),
            "tool event {offset}"
        );
    }
    let mut all_spans = vec![turn_span, step0, step1, call1, call2];
    all_spans.sort();
    all_spans.dedup();
    assert_eq!(all_spans.len(), 5, "every unit has its own span");

    match &events[5] {
        RuntimeEvent::ToolCompleted {
            status, tool_name, ..
        } => {
            assert_eq!(*status, ToolCallStatus::Error);
            assert_eq!(tool_name, "calc__div");
        }
        other => panic!("expected tool.completed, got {other:?}"),
    }
    match &events[6] {
        RuntimeEvent::StepCompleted {
            tool_call_count,
            step_index,
            ..
        } => {
            assert_eq!((*tool_call_count, *step_index), (2, 0));
        }
        other => panic!("expected step.completed, got {other:?}"),
    }
    match &events[9] {
        RuntimeEvent::TurnCompleted {
            step_count,
            token_usage,
            turn_id,
            ..
        } => {
            assert_eq!(*step_count, 2);
            assert_eq!(turn_id, &result.turn_id);
            assert_eq!(
                *token_usage,
                Some(TokenUsage {
                    prompt_tokens: 30,
                    completion_tokens: 8,
                    total_tokens: 38
                }),
                "usage summed over both steps"
            );
        }
        other => panic!("expected turn.completed, got {other:?}"),
    }
}

#[tokio::test]
async fn must_a_trace_id_is_created_when_the_input_has_none_and_root_turns_have_no_parent() {
    let harness = Harness::new();
    harness.model.text("hi");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("x"), &NoStream).await;
    let events = harness.events.take();
    let trace_id = &events[0].base().trace_id;
    assert!(is_hex_id(trace_id, 32));
    assert!(events[0].base().parent_span_id.is_none());
    assert!(events
        .iter()
        .all(|event| &event.base().trace_id == trace_id));
    match events.last().unwrap() {
        RuntimeEvent::TurnCompleted { step_count, .. } => assert_eq!(*step_count, 1),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn refused_tool_calls_report_tool_failed() {
    let harness = Harness::new();
    harness.model.tool_calls(&[("c1", "ghost__run", json!({}))]);
    harness.model.text("ok");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("x"), &NoStream).await;
    let events = harness.events.take();
    let failed = events
        .iter()
        .find_map(|event| match event {
            RuntimeEvent::ToolFailed {
                error_message,
                tool_name,
                ..
            } => Some((tool_name.clone(), error_message.clone())),
            _ => None,
        })
        .expect("tool.failed");
    assert_eq!(failed.0, "ghost__run");
    assert!(failed.1.contains("not available"));
}

#[tokio::test]
async fn runtime_events_reach_extensions_on_the_event_bus() {
    let seen = common::Log::default();
    let mut harness = Harness::new();
    let log = seen.clone();
    harness.extension(
        "watcher",
        move |api: &mut goondan_runtime::ExtensionApi<'_>, _: &serde_json::Value| {
            let log = log.clone();
            let _subscription = api.events().on(
                "turn.completed",
                std::sync::Arc::new(move |payload| {
                    log.push(format!("{} steps", payload["stepCount"]))
                }),
            );
            Ok(())
        },
    );
    harness.model.text("hi");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("x"), &NoStream).await;
    assert_eq!(seen.lines(), ["1 steps"]);
}

#[tokio::test]
async fn a_tool_reports_progress_in_its_own_span_while_it_runs() {
    let mut harness = Harness::new();
    harness
        .definition
        .secrets
        .insert("REMOTE_TOKEN", "tok-0123456789abcdef");
    harness.tool(
        "remote",
        vec![(
            "send",
            None,
            handler_fn(|ctx, _| {
                Box::pin(async move {
                    ctx.progress.report(
                        "working",
                        Some(json!({"state": "working", "echo": "tok-0123456789abcdef"})),
                    );
                    ctx.progress.report("sent tok-0123456789abcdef", None);
                    Ok(json!("hello"))
                })
            }),
        )],
        None,
    );
    harness
        .model
        .tool_calls(&[("c1", "remote__send", json!({"text": "hi"}))]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("go"), &NoStream).await;
    let events = harness.events.take();
    let types: Vec<&str> = events.iter().map(|event| event.type_name()).collect();
    assert_eq!(
        types[2..6],
        [
            "tool.called",
            "tool.progress",
            "tool.progress",
            "tool.completed"
        ]
    );
    let RuntimeEvent::ToolProgress {
        tool_call_id,
        tool_name,
        message,
        data,
        ..
    } = &events[3]
    else {
        panic!("{:?}", events[3]);
    };
    assert_eq!(
        (tool_call_id.as_str(), tool_name.as_str(), message.as_str()),
        ("c1", "remote__send", "working")
    );
    let data = data.as_ref().unwrap();
    assert_eq!(data["state"], "working");
    assert_ne!(data["echo"], "tok-0123456789abcdef", "masked: {data}");
    let RuntimeEvent::ToolProgress { message, .. } = &events[4] else {
        panic!("{:?}", events[4]);
    };
    assert!(
        message.starts_with("sent ") && !message.contains("tok-0123456789abcdef"),
        "masked: {message}"
    );
    assert_eq!(events[3].base().span_id, events[2].base().span_id);
}
