//! Issue 16 #15: `http-fetch` refuses internal addresses (checked after
//! DNS resolution and on every redirect) unless their host is allowed,
//! follows at most five redirects by hand and reports each one.

use crate::harness::{tool_outputs, Harness};
use axum::http::header::LOCATION;
use axum::http::StatusCode;
use axum::routing::{get, post};
use goondan_model::NoStream;
use goondan_runtime::test_support::user_event;
use goondan_types::JsonValue;
use serde_json::json;
use std::net::SocketAddr;

/// A server on 127.0.0.1 whose redirects point where the test says.
async fn serve(internal_target: String) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let localhost_target = format!("http://localhost:{}/status", address.port());
    let app = axum::Router::new()
        .route("/status", get(|| async { "all good" }))
        .route(
            "/hop",
            get(|| async { (StatusCode::FOUND, [(LOCATION, "/hop2")]) }),
        )
        .route(
            "/hop2",
            get(|| async { (StatusCode::MOVED_PERMANENTLY, [(LOCATION, "/status")]) }),
        )
        .route(
            "/loop",
            get(|| async { (StatusCode::FOUND, [(LOCATION, "/loop")]) }),
        )
        .route(
            "/submit",
            post(|| async { (StatusCode::SEE_OTHER, [(LOCATION, "/status")]) }),
        )
        .route(
            "/to-internal",
            get(move || {
                let target = internal_target.clone();
                async move { (StatusCode::FOUND, [(LOCATION, target)]) }
            }),
        )
        .route(
            "/to-localhost",
            get(move || {
                let target = localhost_target.clone();
                async move { (StatusCode::TEMPORARY_REDIRECT, [(LOCATION, target)]) }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    address
}

/// Runs one Turn calling `http-fetch__<export>` with each input; returns
/// the outputs.
async fn fetch_all(allow_hosts: Vec<String>, calls: Vec<(&str, JsonValue)>) -> Vec<JsonValue> {
    let mut harness = Harness::new();
    harness.tool("http-fetch", &["get", "post"]);
    harness.tool_options.http_fetch.allow_hosts = allow_hosts;
    let ids: Vec<String> = (0..calls.len()).map(|index| format!("c{index}")).collect();
    let call_refs: Vec<(&str, &str, JsonValue)> = calls
        .iter()
        .zip(&ids)
        .map(|((name, input), id)| (id.as_str(), *name, input.clone()))
        .collect();
    harness.model.tool_calls(&call_refs);
    harness.model.text("done");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("fetch"), &NoStream).await;
    tool_outputs(&agent)
        .into_iter()
        .map(|(_, output)| output)
        .collect()
}

fn blocked_message(output: &JsonValue) -> &str {
    assert_eq!(output["type"], "error-json", "{output}");
    assert_eq!(output["value"]["code"], "E_HTTP_FETCH_BLOCKED", "{output}");
    output["value"]["message"].as_str().unwrap()
}

#[tokio::test]
async fn internal_addresses_are_refused_by_default_naming_the_address() {
    let server = serve("http://127.0.0.1:1/".into()).await;
    let port = server.port();
    let outputs = fetch_all(
        Vec::new(),
        vec![
            (
                "http-fetch__get",
                json!({"url": format!("http://127.0.0.1:{port}/status")}),
            ),
            // A name is checked after resolution: localhost is loopback.
            (
                "http-fetch__get",
                json!({"url": format!("http://localhost:{port}/status")}),
            ),
            (
                "http-fetch__get",
                json!({"url": "http://169.254.169.254/latest/meta-data/"}),
            ),
            (
                "http-fetch__post",
                json!({"url": "http://[fd00:ec2::254]/"}),
            ),
            ("http-fetch__get", json!({"url": "http://10.0.0.1/"})),
            (
                "http-fetch__get",
                json!({"url": "http://[::ffff:127.0.0.1]/"}),
            ),
        ],
    )
    .await;
    let loopback = blocked_message(&outputs[0]);
    assert!(
        loopback.contains("127.0.0.1") && loopback.contains("loopback"),
        "{loopback}"
    );
    assert!(outputs[0]["value"]["suggestion"]
        .as_str()
        .unwrap()
        .contains("GOONDAN_HTTP_FETCH_ALLOW"));
    let by_name = blocked_message(&outputs[1]);
    assert!(
        by_name.contains("localhost is 127.0.0.1") || by_name.contains("localhost is ::1"),
        "{by_name}"
    );
    assert!(blocked_message(&outputs[2]).contains("169.254.169.254, a cloud metadata address"));
    assert!(blocked_message(&outputs[3]).contains("cloud metadata"));
    assert!(blocked_message(&outputs[4]).contains("private"));
    assert!(blocked_message(&outputs[5]).contains("loopback"));
}

#[tokio::test]
async fn a_redirect_from_an_allowed_host_to_an_internal_one_is_refused() {
    let unlisted = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let server = serve(format!("http://{unlisted}/secret")).await;
    let outputs = fetch_all(
        vec![server.to_string()],
        vec![
            (
                "http-fetch__get",
                json!({"url": format!("http://{server}/to-internal")}),
            ),
            (
                "http-fetch__get",
                json!({"url": format!("http://{server}/to-localhost")}),
            ),
        ],
    )
    .await;
    let to_port = blocked_message(&outputs[0]);
    assert!(
        to_port.contains(&format!("http://{unlisted}/secret")) && to_port.contains("loopback"),
        "{to_port}"
    );
    let to_name = blocked_message(&outputs[1]);
    assert!(to_name.contains("localhost"), "{to_name}");
}

#[tokio::test]
async fn an_allowed_host_is_reached_and_its_redirects_are_reported() {
    let server = serve("http://127.0.0.1:1/".into()).await;
    let base = format!("http://{server}");
    let outputs = fetch_all(
        vec![format!("127.0.0.1:{}", server.port())],
        vec![
            ("http-fetch__get", json!({"url": format!("{base}/hop")})),
            (
                "http-fetch__post",
                json!({"url": format!("{base}/submit"), "body": {"a": 1}}),
            ),
            ("http-fetch__get", json!({"url": format!("{base}/loop")})),
        ],
    )
    .await;
    let hop = &outputs[0]["value"];
    assert_eq!(outputs[0]["type"], "json", "{}", outputs[0]);
    assert_eq!(hop["status"], 200);
    assert_eq!(hop["body"], "all good");
    assert_eq!(hop["url"], format!("{base}/status"));
    assert_eq!(
        hop["redirects"],
        json!([
            {"status": 302, "url": format!("{base}/hop"), "location": format!("{base}/hop2")},
            {"status": 301, "url": format!("{base}/hop2"), "location": format!("{base}/status")},
        ])
    );
    let submitted = &outputs[1]["value"];
    assert_eq!(submitted["method"], "GET", "303 continues as a GET");
    assert_eq!(submitted["body"], "all good");
    assert_eq!(submitted["redirects"][0]["status"], 303);
    assert_eq!(outputs[2]["value"]["code"], "E_HTTP_REQUEST");
    assert!(outputs[2]["value"]["message"]
        .as_str()
        .unwrap()
        .contains("more than 5 redirects"));
}
