//! One Turn per builtin tool: the model calls it through the runtime, the
//! result comes back as a tool-result message, and bad input comes back as
//! a coded error result instead of failing the Turn.

use crate::harness::{tool_outputs, Harness};
use goondan_config::{builtin_names, Kind};
use goondan_model::NoStream;
use goondan_runtime::test_support::user_event;
use goondan_runtime::BuiltinCatalog;
use goondan_types::{JsonValue, TurnFinishReason};
use serde_json::json;

fn assert_ok(output: &JsonValue) -> &JsonValue {
    assert_eq!(output["type"], "json", "{output}");
    &output["value"]
}

fn assert_error(output: &JsonValue, code: &str) {
    assert_eq!(output["type"], "error-json", "{output}");
    assert_eq!(output["value"]["code"], code, "{output}");
    assert!(output["value"]["message"].is_string());
}

#[test]
fn every_base_package_tool_and_extension_has_an_implementation() {
    let catalog = goondan_base::builtins();
    for name in builtin_names(Kind::Tool) {
        assert!(catalog.tool(name).is_some(), "tool {name}");
    }
    for name in builtin_names(Kind::Extension) {
        assert!(catalog.extension(name).is_some(), "extension {name}");
    }
    let bash = catalog.tool("bash").unwrap();
    let mut exports: Vec<&String> = bash.keys().collect();
    exports.sort();
    assert_eq!(exports, ["exec", "script"]);
}

#[tokio::test]
async fn bash_runs_in_the_workdir_and_refuses_bad_input_as_results() {
    let mut harness = Harness::new();
    harness.tool("bash", &["exec", "script"]);
    std::fs::write(
        harness.workdir.path().join("greet.sh"),
        "echo \"hello $1\"\n",
    )
    .unwrap();
    harness.model.tool_calls(&[
        (
            "c1",
            "bash__exec",
            json!({"command": "echo hi > out.txt && cat out.txt"}),
        ),
        (
            "c2",
            "bash__script",
            json!({"path": "greet.sh", "args": ["world"]}),
        ),
        ("c3", "bash__exec", json!({})),
        ("c4", "bash__exec", json!({"command": "ls", "cwd": "../.."})),
        (
            "c5",
            "bash__exec",
            json!({"command": "head -c 300000 /dev/zero | tr '\\0' x"}),
        ),
    ]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("run things"), &NoStream).await;
    assert_eq!(result.finish_reason, TurnFinishReason::TextResponse);
    let outputs = tool_outputs(&agent);
    assert_eq!(assert_ok(&outputs[0].1)["stdout"], "hi\n");
    assert!(harness.workdir.path().join("out.txt").exists());
    assert_eq!(assert_ok(&outputs[1].1)["stdout"], "hello world\n");
    assert_error(&outputs[2].1, "E_TOOL_INVALID_ARGS");
    assert_error(&outputs[3].1, "E_PATH_OUTSIDE_WORKDIR");
    let huge = assert_ok(&outputs[4].1);
    assert_eq!(huge["stdout"].as_str().unwrap().len(), 100_000);
    assert_eq!(huge["truncated"], true);
}

#[tokio::test]
async fn file_system_round_trip_stays_inside_the_workdir() {
    let mut harness = Harness::new();
    harness.tool("file-system", &["read", "write", "list", "mkdir"]);
    harness.model.tool_calls(&[
        ("c1", "file-system__mkdir", json!({"path": "notes"})),
        (
            "c2",
            "file-system__write",
            json!({"path": "notes/a.md", "content": "# title"}),
        ),
        (
            "c3",
            "file-system__read",
            json!({"path": "notes/a.md", "maxBytes": 3}),
        ),
        ("c4", "file-system__list", json!({"recursive": true})),
        (
            "c5",
            "file-system__read",
            json!({"path": "../../../etc/passwd"}),
        ),
        ("c6", "file-system__write", json!({"path": "x"})),
    ]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("write notes"), &NoStream).await;
    let outputs = tool_outputs(&agent);
    assert_eq!(assert_ok(&outputs[0].1)["created"], true);
    assert_eq!(assert_ok(&outputs[1].1)["size"], 7);
    let read = assert_ok(&outputs[2].1);
    assert_eq!(read["content"], "# t");
    assert_eq!(read["truncated"], true);
    assert_eq!(assert_ok(&outputs[3].1)["count"], 2);
    assert_error(&outputs[4].1, "E_PATH_OUTSIDE_WORKDIR");
    assert_error(&outputs[5].1, "E_TOOL_INVALID_ARGS");
}

#[tokio::test]
async fn http_fetch_talks_to_a_local_server_and_refuses_other_schemes() {
    use axum::routing::{get, post};
    let app = axum::Router::new()
        .route(
            "/status",
            get(|| async { ([("x-kind", "test")], "all good") }),
        )
        .route("/echo", post(|body: String| async move { body }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let mut harness = Harness::new();
    harness.tool("http-fetch", &["get", "post"]);
    // Loopback is refused unless allowed (issue 16 #15).
    harness.tool_options.http_fetch.allow_hosts = vec![base.trim_start_matches("http://").into()];
    harness.model.tool_calls(&[
        (
            "c1",
            "http-fetch__get",
            json!({"url": format!("{base}/status")}),
        ),
        (
            "c2",
            "http-fetch__post",
            json!({"url": format!("{base}/echo"), "body": {"n": 1}}),
        ),
        (
            "c3",
            "http-fetch__get",
            json!({"url": "file:///etc/passwd"}),
        ),
    ]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("fetch"), &NoStream).await;
    let outputs = tool_outputs(&agent);
    let status = assert_ok(&outputs[0].1);
    assert_eq!(status["status"], 200);
    assert_eq!(status["body"], "all good");
    assert_eq!(status["headers"]["x-kind"], "test");
    assert_eq!(assert_ok(&outputs[1].1)["body"], "{\"n\":1}");
    assert_error(&outputs[2].1, "E_HTTP_UNSUPPORTED_SCHEME");
}

#[tokio::test]
async fn json_query_text_transform_and_wait_answer_through_a_turn() {
    let mut harness = Harness::new();
    harness
        .tool("json-query", &["query", "pick", "count", "flatten"])
        .tool(
            "text-transform",
            &["replace", "slice", "split", "join", "trim", "case"],
        )
        .tool("wait", &["seconds"]);
    harness.model.tool_calls(&[
        (
            "c1",
            "json-query__query",
            json!({"data": "{\"a\": [1, {\"b\": 2}]}", "path": "a[1].b"}),
        ),
        ("c2", "json-query__count", json!({"data": "[1,2,3]"})),
        (
            "c3",
            "text-transform__case",
            json!({"text": "Shout", "to": "upper"}),
        ),
        (
            "c4",
            "text-transform__split",
            json!({"text": "a,b", "delimiter": ","}),
        ),
        ("c5", "wait__seconds", json!({"seconds": 0.01})),
        ("c6", "json-query__query", json!({"data": "not json"})),
        ("c7", "wait__seconds", json!({"seconds": 1000})),
    ]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("transform"), &NoStream).await;
    let outputs = tool_outputs(&agent);
    assert_eq!(assert_ok(&outputs[0].1)["value"], 2);
    assert_eq!(assert_ok(&outputs[1].1)["count"], 3);
    assert_eq!(assert_ok(&outputs[2].1)["result"], "SHOUT");
    assert_eq!(assert_ok(&outputs[3].1)["parts"], json!(["a", "b"]));
    assert_eq!(assert_ok(&outputs[4].1)["waitedMs"], 10);
    assert_error(&outputs[5].1, "E_JSON_PARSE");
    assert_error(&outputs[6].1, "E_TOOL_INVALID_ARGS");
}

#[tokio::test]
async fn file_system_may_leave_the_workdir_only_when_the_options_allow_it() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("shared.txt");
    std::fs::write(&secret, "shared data").unwrap();
    let path = secret.to_string_lossy().into_owned();
    for allow in [false, true] {
        let mut harness = Harness::new();
        harness.tool_options.file_system.allow_outside_workdir = allow;
        harness.tool("file-system", &["read"]);
        harness
            .model
            .tool_calls(&[("c1", "file-system__read", json!({"path": path}))])
            .text("done");
        let mut agent = harness.start().await;
        agent.run_turn(user_event("read it"), &NoStream).await;
        let outputs = tool_outputs(&agent);
        if allow {
            assert_eq!(assert_ok(&outputs[0].1)["content"], "shared data");
        } else {
            assert_error(&outputs[0].1, "E_PATH_OUTSIDE_WORKDIR");
        }
    }
}

/// Whether a live process has `marker` among its arguments. In the bash
/// sandbox `$!` is a PID of the command's own namespace, meaningless here,
/// so a job is found by a unique argument (`sleep 30.0201`). A zombie
/// counts as dead: killed, only its reaping is left, and in a container
/// nobody may reap it.
fn running_with(marker: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let path = entry.path();
        let cmdline = std::fs::read(path.join("cmdline")).unwrap_or_default();
        let zombie = std::fs::read_to_string(path.join("stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        !zombie
            && cmdline
                .split(|byte| *byte == 0)
                .any(|argument| argument == marker.as_bytes())
    })
}

#[tokio::test]
async fn dropping_a_turn_mid_command_kills_the_commands_process_group() {
    let marker = "30.0201";
    let mut harness = Harness::new();
    harness.tool("bash", &["exec"]);
    harness.model.tool_calls(&[(
        "c1",
        "bash__exec",
        json!({"command": format!("sleep {marker} & echo started > job.started; wait"), "timeoutMs": 1e15}),
    )]);
    let mut agent = harness.start().await;
    let turn = agent.run_turn(user_event("start a long job"), &NoStream);
    // The agent shuts down while the command runs: its Turn is dropped.
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(500), turn)
            .await
            .is_err()
    );
    assert!(
        harness.workdir.path().join("job.started").exists(),
        "the job never started"
    );
    let mut dead = false;
    for _ in 0..100 {
        if !running_with(marker) {
            dead = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(dead, "the background job outlived the dropped Turn");
}
