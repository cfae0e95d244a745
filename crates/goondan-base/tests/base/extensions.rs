//! One Turn (or two) per builtin extension through the execution core,
//! configured as a bundle would configure it.

use crate::harness::Harness;
use goondan_base::Summarizer;
use goondan_model::{ModelParams, NoStream};
use goondan_runtime::pipeline::RuntimePrompt;
use goondan_runtime::test_support::{user_event, ScriptedModel};
use goondan_runtime::InterAgentResponse;
use goondan_types::{JsonValue, ModelMessage, TurnFinishReason};
use serde_json::json;
use std::io::Write;
use std::sync::{Arc, Mutex};

fn texts(messages: &[ModelMessage]) -> Vec<String> {
    messages
        .iter()
        .map(|message| format!("{}: {}", message.role(), message.text()))
        .collect()
}

#[tokio::test]
async fn context_message_injects_the_system_prompt_once() {
    let mut harness = Harness::new();
    harness.definition.runtime_agent.prompt = Some(RuntimePrompt {
        system: Some("You are terse.".into()),
    });
    harness.extension("context-message", json!({"includeAgentPrompt": true}));
    harness.model.text("one").text("two");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("first"), &NoStream).await;
    agent.run_turn(user_event("second"), &NoStream).await;
    let requests = harness.model.requests();
    assert_eq!(
        texts(&requests[0].messages),
        ["system: You are terse.", "user: first"]
    );
    assert_eq!(
        texts(&requests[1].messages),
        [
            "system: You are terse.",
            "user: first",
            "assistant: one",
            "user: second"
        ]
    );
}

#[tokio::test]
async fn message_window_drops_old_messages_but_never_half_a_tool_pair() {
    let mut harness = Harness::new();
    harness.tool("json-query", &["count"]);
    harness.extension("message-window", json!({"maxMessages": 2}));
    harness
        .model
        .tool_calls(&[("c1", "json-query__count", json!({"data": "[1]"}))])
        .text("one")
        .text("two");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("first"), &NoStream).await;
    agent.run_turn(user_event("second"), &NoStream).await;
    let requests = harness.model.requests();
    // Keeping the last two would start at the tool result; it goes with
    // its call.
    assert_eq!(
        texts(&requests[2].messages),
        ["assistant: one", "user: second"]
    );
}

#[tokio::test]
async fn message_compaction_summarizes_with_the_agents_model() {
    let summaries = ScriptedModel::new();
    summaries.text("The user said first and second.");
    let mut harness = Harness::new();
    harness.summarizer = Some(Summarizer::new(
        Arc::new(summaries.clone()),
        "scripted-1",
        ModelParams::default(),
    ));
    harness.extension(
        "message-compaction",
        json!({"maxMessages": 2, "retainLastMessages": 1, "mode": "remove", "appendSummary": true}),
    );
    harness.model.text("one").text("two").text("three");
    let mut agent = harness.start().await;
    for input in ["first", "second", "third"] {
        agent.run_turn(user_event(input), &NoStream).await;
    }
    let requests = harness.model.requests();
    assert_eq!(
        texts(&requests[2].messages),
        [
            "system: [message-compaction] The user said first and second.",
            "user: second",
            "assistant: two",
            "user: third"
        ]
    );
    let summary_requests = summaries.requests();
    assert_eq!(summary_requests.len(), 1, "only turn three was over budget");
    assert!(summary_requests[0].messages[1]
        .text()
        .contains("user: first"));
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn logging_reports_turn_step_and_tool_call_outcomes() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let mut harness = Harness::new();
    harness.tool("wait", &["seconds"]);
    harness.extension(
        "logging",
        json!({"level": "debug", "includeToolArgs": true}),
    );
    harness
        .model
        .tool_calls(&[("c1", "wait__seconds", json!({"seconds": 0}))])
        .text("done");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("go"), &NoStream).await;
    let output = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    for expected in [
        "[logging.turn] start",
        "[logging.step] start",
        "[logging.toolCall] start",
        "\"args\":{\"seconds\":0}",
        "[logging.toolCall] complete",
        "\"status\":\"ok\"",
        "[logging.step] complete",
        "[logging.turn] complete",
        "\"finishReason\":\"text_response\"",
    ] {
        assert!(
            output.contains(expected),
            "missing {expected} in:\n{output}"
        );
    }
}

#[tokio::test]
async fn logging_below_its_level_stays_quiet() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let mut harness = Harness::new();
    harness.extension("logging", json!({"level": "error"}));
    harness.model.text("done");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("go"), &NoStream).await;
    let output = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(!output.contains("[logging."), "{output}");
}

#[tokio::test]
async fn tool_search_narrows_the_catalog_of_the_next_step() {
    let mut harness = Harness::new();
    harness
        .tool("json-query", &["query", "pick", "count", "flatten"])
        .tool("wait", &["seconds"]);
    harness.extension("tool-search", JsonValue::Null);
    harness
        .model
        .tool_calls(&[("c1", "tool-search__search", json!({"query": "json"}))])
        .text("found");
    let mut agent = harness.start().await;
    agent
        .run_turn(user_event("find a json tool"), &NoStream)
        .await;
    let requests = harness.model.requests();
    let names = |index: usize| -> Vec<String> {
        let mut names: Vec<String> = requests[index]
            .tools
            .iter()
            .map(|tool| tool.name.clone())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(0).len(), 6);
    assert_eq!(
        names(1),
        [
            "json-query__count",
            "json-query__flatten",
            "json-query__pick",
            "json-query__query",
            "tool-search__search"
        ]
    );
}

#[tokio::test]
async fn required_tools_guard_keeps_the_turn_going_until_the_tool_ran() {
    let mut harness = Harness::new();
    harness.tool("wait", &["seconds"]);
    harness.extension(
        "required-tools-guard",
        json!({"requiredTools": ["wait__seconds"], "errorMessage": "", "maxReminders": 1}),
    );
    harness
        .model
        .text("done early")
        .tool_calls(&[("c1", "wait__seconds", json!({"seconds": 0}))])
        .text("done");
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("wait a bit"), &NoStream).await;
    assert_eq!(result.finish_reason, TurnFinishReason::TextResponse);
    let requests = harness.model.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        texts(&requests[1].messages).last().unwrap(),
        "user: Before finishing, you must call one of these tools: wait__seconds"
    );

    // A new Turn starts from nothing, and the reminder limit lets it end.
    harness.model.text("no").text("still no");
    agent.run_turn(user_event("again"), &NoStream).await;
    assert_eq!(harness.model.requests().len(), 5);
    assert_eq!(harness.model.remaining(), 0);
}

#[tokio::test]
async fn inter_agent_response_format_rewrites_injected_answers() {
    let mut harness = Harness::new();
    harness.extension("inter-agent-response-format", JsonValue::Null);
    harness.model.text("thanks");
    let mut agent = harness.start().await;
    let metadata = serde_json::from_value(json!({
        "kind": "inter_agent_response", "version": 1, "requestId": "corr-1",
        "requestEventId": "evt-1", "fromAgentId": "worker", "toAgentId": "alpha",
        "async": true, "status": "ok", "receivedAt": "2026-01-01T00:00:00.000Z"
    }))
    .unwrap();
    agent.inbox().push(InterAgentResponse {
        text: "42 files".into(),
        metadata,
    });
    agent.run_turn(user_event("any news?"), &NoStream).await;
    let requests = harness.model.requests();
    assert_eq!(
        texts(&requests[0].messages),
        [
            "user: any news?",
            "user: [inter-agent response] worker -> alpha status=ok requestId=corr-1\n42 files"
        ]
    );
}

#[tokio::test]
async fn the_window_never_cuts_the_context_message() {
    let mut harness = Harness::new();
    harness.definition.runtime_agent.prompt = Some(RuntimePrompt {
        system: Some("Stay on topic.".into()),
    });
    harness
        .extension("context-message", JsonValue::Null)
        .extension("message-window", json!({"maxMessages": 2}));
    harness.model.text("a1").text("a2").text("a3");
    let mut agent = harness.start().await;
    for input in ["u1", "u2", "u3"] {
        agent.run_turn(user_event(input), &NoStream).await;
    }
    let requests = harness.model.requests();
    assert_eq!(
        texts(&requests[2].messages),
        [
            "system: Stay on topic.",
            "user: u2",
            "assistant: a2",
            "user: u3"
        ]
    );
}
