//! The `mcp` extension in a real Agent: tools listed and called, errors as
//! results, a crashed or hanging server, `tools/list_changed`, HTTP.

use crate::harness::{eventually, fixture, stdio_server, tool_outputs, Harness};
use goondan_model::NoStream;
use goondan_runtime::test_support::user_event;
use goondan_types::{JsonValue, McpToolSource, ToolSourceType};
use serde_json::json;
use std::time::Duration;

fn error_code(output: &JsonValue) -> Option<&str> {
    output
        .pointer("/value/error/code")
        .or_else(|| output.pointer("/value/code"))
        .and_then(JsonValue::as_str)
}

#[tokio::test]
async fn mcp_tools_are_registered_with_the_server_prefix_and_called_in_a_turn() {
    let harness = Harness::new();
    harness.model.tool_calls(&[
        ("c1", "fx__echo", json!({"text": "hi"})),
        ("c2", "fx__add", json!({"a": 1, "b": 2})),
        ("c3", "fx__fail", json!({})),
    ]);
    harness.model.text("done");
    let mut server = stdio_server();
    server["exclude"] = json!(["hidden"]);
    let mut agent = harness.start(json!({"servers": {"fx": server}})).await;
    let result = agent.run_turn(user_event("go"), &NoStream).await;
    assert!(result.error.is_none(), "{result:?}");

    let first_step = &harness.model.requests()[0];
    let offered: Vec<&str> = first_step.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(offered.contains(&"fx__echo"), "{offered:?}");
    assert!(
        !offered.contains(&"fx__hidden"),
        "exclude is applied: {offered:?}"
    );
    let echo = agent.tools().get("fx__echo").unwrap().item;
    // tool.md §13.1: an MCP tool's source names its extension and server.
    let source = echo.source.unwrap();
    assert_eq!(source.source_type, ToolSourceType::Mcp);
    assert_eq!(
        source.mcp,
        Some(McpToolSource {
            extension_name: "mcp".into(),
            server_name: Some("fx".into()),
        })
    );
    assert_eq!(echo.parameters.unwrap()["required"], json!(["text"]));

    let outputs = tool_outputs(&agent);
    assert_eq!(outputs[0].1["value"], json!("hi"), "{outputs:?}");
    assert_eq!(outputs[1].1["value"], json!({"sum": 3}), "{outputs:?}");
    assert_eq!(error_code(&outputs[2].1), Some("E_MCP_CALL"), "{outputs:?}");
    assert!(outputs[2].1.to_string().contains("this tool always fails"));
}

#[tokio::test]
async fn a_crashed_server_fails_one_call_and_the_next_call_starts_it_again() {
    let harness = Harness::new();
    harness.model.tool_calls(&[("c1", "fx__pid", json!({}))]);
    harness.model.tool_calls(&[("c2", "fx__crash", json!({}))]);
    harness.model.tool_calls(&[("c3", "fx__pid", json!({}))]);
    harness.model.text("done");
    let mut agent = harness
        .start(json!({"servers": {"fx": stdio_server()}}))
        .await;
    agent.run_turn(user_event("go"), &NoStream).await;
    let outputs = tool_outputs(&agent);
    assert_eq!(
        error_code(&outputs[1].1),
        Some("E_MCP_UNAVAILABLE"),
        "{outputs:?}"
    );
    let (first, second) = (&outputs[0].1["value"], &outputs[2].1["value"]);
    assert!(first.is_string() && second.is_string(), "{outputs:?}");
    assert_ne!(first, second, "a new server process answered");
}

#[tokio::test]
async fn a_call_past_its_deadline_is_a_timeout_result_and_is_cancelled_at_the_server() {
    let harness = Harness::new();
    harness
        .model
        .tool_calls(&[("c1", "fx__sleep", json!({"ms": 5000}))]);
    harness
        .model
        .tool_calls(&[("c2", "fx__cancelled", json!({}))]);
    harness.model.text("done");
    let mut server = stdio_server();
    server["timeoutMs"] = json!(300);
    let mut agent = harness.start(json!({"servers": {"fx": server}})).await;
    agent.run_turn(user_event("go"), &NoStream).await;
    let outputs = tool_outputs(&agent);
    assert_eq!(
        error_code(&outputs[0].1),
        Some("E_MCP_TIMEOUT"),
        "{outputs:?}"
    );
    // The server answered the ping, so the same process serves the next
    // call and reports the cancelled request.
    let cancelled: Vec<u64> =
        serde_json::from_str(outputs[1].1["value"].as_str().unwrap()).unwrap();
    assert_eq!(cancelled.len(), 1, "{outputs:?}");
}

#[tokio::test]
async fn a_server_that_stops_answering_is_replaced_by_the_next_call() {
    let harness = Harness::new();
    harness.model.tool_calls(&[("c1", "fx__pid", json!({}))]);
    harness.model.tool_calls(&[("c2", "fx__freeze", json!({}))]);
    harness.model.tool_calls(&[("c3", "fx__pid", json!({}))]);
    harness.model.text("done");
    let mut server = stdio_server();
    server["timeoutMs"] = json!(300);
    let mut agent = harness.start(json!({"servers": {"fx": server}})).await;
    agent.run_turn(user_event("go"), &NoStream).await;
    let outputs = tool_outputs(&agent);
    assert_eq!(
        error_code(&outputs[1].1),
        Some("E_MCP_TIMEOUT"),
        "{outputs:?}"
    );
    // The frozen server did not answer the ping either, so the next call
    // started a new one.
    let (first, second) = (&outputs[0].1["value"], &outputs[2].1["value"]);
    assert!(first.is_string() && second.is_string(), "{outputs:?}");
    assert_ne!(first, second, "a new server process answered");
}

#[tokio::test]
async fn a_server_that_hangs_or_cannot_start_leaves_the_agent_working() {
    let harness = Harness::new();
    harness.model.text("still here");
    harness.model.text("and again");
    let mut hanging = stdio_server();
    hanging["env"] = json!({"MCP_FIXTURE_HANG_START": "1"});
    hanging["connectTimeoutMs"] = json!(200);
    let mut agent = harness
        .start(json!({"servers": {
            "hung": hanging,
            "gone": {"command": "/nonexistent/mcp-server"}
        }}))
        .await;
    let started = std::time::Instant::now();
    let result = agent.run_turn(user_event("go"), &NoStream).await;
    assert!(result.error.is_none(), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(agent.tools().catalog().is_empty());
    // A later Turn retries in the background and does not wait for it.
    let started = std::time::Instant::now();
    agent.run_turn(user_event("again"), &NoStream).await;
    assert!(started.elapsed() < Duration::from_millis(150));
}

#[tokio::test]
async fn tools_list_changed_registers_new_tools_and_forgets_removed_ones() {
    let harness = Harness::new();
    harness.model.tool_calls(&[("c1", "fx__grow", json!({}))]);
    harness.model.text("grown");
    harness.model.tool_calls(&[("c2", "fx__extra", json!({}))]);
    harness.model.text("done");
    harness.model.tool_calls(&[("c3", "fx__shrink", json!({}))]);
    harness.model.text("shrunk");
    let mut agent = harness
        .start(json!({"servers": {"fx": stdio_server()}}))
        .await;
    assert!(agent.tools().get("fx__extra").is_none());
    agent.run_turn(user_event("grow"), &NoStream).await;
    assert!(
        eventually(Duration::from_secs(10), || agent
            .tools()
            .get("fx__extra")
            .is_some())
        .await
    );
    agent.run_turn(user_event("use it"), &NoStream).await;
    let outputs = tool_outputs(&agent);
    assert_eq!(
        outputs[1],
        (
            "fx__extra".to_string(),
            json!({"type": "text", "value": "extra"})
        ),
        "{outputs:?}"
    );
    agent.run_turn(user_event("shrink"), &NoStream).await;
    assert!(
        eventually(Duration::from_secs(10), || agent
            .tools()
            .get("fx__extra")
            .is_none())
        .await,
        "a tool the server stopped listing left the catalog"
    );
    assert!(agent.tools().get("fx__echo").is_some());
}

#[tokio::test]
async fn an_http_server_announces_new_tools_on_its_get_stream_between_requests() {
    let dir = tempfile::tempdir().unwrap();
    let port_file = dir.path().join("port");
    let _server = tokio::process::Command::new("python3")
        .arg(fixture())
        .arg("--http")
        .arg(&port_file)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || port_file.exists()).await);
    let port = std::fs::read_to_string(&port_file).unwrap();
    let harness = Harness::new();
    harness
        .model
        .tool_calls(&[("c1", "web__grow_later", json!({}))]);
    harness.model.text("asked");
    let mut agent = harness
        .start(json!({"servers": {"web": {"url": format!("http://127.0.0.1:{port}/mcp")}}}))
        .await;
    agent.run_turn(user_event("grow later"), &NoStream).await;
    // The POST that asked has been answered and closed; only the GET
    // stream can carry the notification that comes 200 ms later.
    assert!(
        eventually(Duration::from_secs(10), || agent
            .tools()
            .get("web__extra")
            .is_some())
        .await,
        "the tool announced on the GET stream was registered"
    );
}

#[tokio::test]
async fn a_streamable_http_server_is_reached_with_its_headers() {
    let dir = tempfile::tempdir().unwrap();
    let port_file = dir.path().join("port");
    let mut server = tokio::process::Command::new("python3")
        .arg(fixture())
        .arg("--http")
        .arg(&port_file)
        .env("MCP_FIXTURE_EXPECT_AUTH", "Bearer t0ken-for-tests")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || port_file.exists()).await);
    let port = std::fs::read_to_string(&port_file).unwrap();

    let mut harness = Harness::new();
    harness
        .secrets
        .insert("FIXTURE_TOKEN", "Bearer t0ken-for-tests");
    harness.model.tool_calls(&[
        ("c1", "web__echo", json!({"text": "over http"})),
        ("c2", "web__fail", json!({})),
    ]);
    harness.model.text("done");
    let mut agent = harness
        .start(json!({"servers": {"web": {
            "url": format!("http://127.0.0.1:{port}/mcp"),
            "headers": {"Authorization": {"valueFrom": {"env": "FIXTURE_TOKEN"}}}
        }}}))
        .await;
    agent.run_turn(user_event("go"), &NoStream).await;
    let outputs = tool_outputs(&agent);
    assert_eq!(outputs[0].1["value"], json!("over http"), "{outputs:?}");
    assert_eq!(error_code(&outputs[1].1), Some("E_MCP_CALL"), "{outputs:?}");
    server.kill().await.unwrap();
}

#[tokio::test]
async fn resources_and_prompts_are_tools_when_asked() {
    let harness = Harness::new();
    harness.model.tool_calls(&[
        ("c1", "fx__list_resources", json!({})),
        ("c2", "fx__read_resource", json!({"uri": "memo://today"})),
        ("c3", "fx__read_resource", json!({"uri": "memo://never"})),
        ("c4", "fx__list_prompts", json!({})),
        (
            "c5",
            "fx__get_prompt",
            json!({"name": "greet", "arguments": {"who": "Ada"}}),
        ),
    ]);
    harness.model.text("done");
    let mut server = stdio_server();
    server["resources"] = json!(true);
    server["prompts"] = json!(true);
    let mut agent = harness.start(json!({"servers": {"fx": server}})).await;
    let result = agent.run_turn(user_event("go"), &NoStream).await;
    assert!(result.error.is_none(), "{result:?}");
    let outputs = tool_outputs(&agent);
    assert_eq!(
        outputs[0].1["value"][0]["uri"],
        json!("memo://today"),
        "{outputs:?}"
    );
    assert_eq!(outputs[1].1["value"], json!("buy milk"), "{outputs:?}");
    assert_eq!(error_code(&outputs[2].1), Some("E_MCP_CALL"), "{outputs:?}");
    assert_eq!(
        outputs[3].1["value"][0]["name"],
        json!("greet"),
        "{outputs:?}"
    );
    assert_eq!(
        outputs[4].1["value"]["messages"][0]["content"]["text"],
        json!("Say hello to Ada"),
        "{outputs:?}"
    );

    // Not asked for: no such tools.
    let harness = Harness::new();
    harness.model.text("done");
    let mut agent = harness
        .start(json!({"servers": {"fx": stdio_server()}}))
        .await;
    agent.run_turn(user_event("go"), &NoStream).await;
    assert!(agent.tools().get("fx__read_resource").is_none());
}
