//! Issue 17: the `telegram` and `slack` tools in real Turns, against mock
//! Bot API and Web API servers on 127.0.0.1 that record what arrives: the
//! method, the JSON (or form), the token; and the coded, masked errors
//! when the platform says no.

use crate::harness::{tool_outputs, Harness};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use goondan_base::tools::bot_api::BotApiConfig;
use goondan_model::NoStream;
use goondan_runtime::test_support::user_event;
use goondan_types::JsonValue;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const TELEGRAM_TOKEN: &str = "777:AAF-telegram-test-token";
const SLACK_TOKEN: &str = "xoxb-slack-test-token-123";

/// One request the mock saw.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    authorization: Option<String>,
    content_type: Option<String>,
    body: String,
}

impl Seen {
    fn json(&self) -> JsonValue {
        serde_json::from_str(&self.body).unwrap_or_else(|_| panic!("not JSON: {}", self.body))
    }
}

/// Answers by path: status, content type and body; 404 otherwise.
#[derive(Default)]
struct Mock {
    answers: HashMap<String, (u16, &'static str, Vec<u8>)>,
    seen: Mutex<Vec<Seen>>,
}

async fn answer(
    State(mock): State<Arc<Mock>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    mock.seen.lock().unwrap().push(Seen {
        method,
        path: uri.path().to_string(),
        authorization: header("authorization"),
        content_type: header("content-type"),
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    match mock.answers.get(uri.path()) {
        Some((status, content_type, body)) => (
            StatusCode::from_u16(*status).unwrap(),
            [("content-type", *content_type), ("retry-after", "7")],
            body.clone(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such method").into_response(),
    }
}

async fn serve(answers: Vec<(String, u16, &'static str, Vec<u8>)>) -> (String, Arc<Mock>) {
    let mock = Arc::new(Mock {
        answers: answers
            .into_iter()
            .map(|(path, status, content_type, body)| (path, (status, content_type, body)))
            .collect(),
        seen: Mutex::default(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .fallback(answer)
        .with_state(mock.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}"), mock)
}

fn json_answer(path: String, status: u16, body: JsonValue) -> (String, u16, &'static str, Vec<u8>) {
    (
        path,
        status,
        "application/json",
        body.to_string().into_bytes(),
    )
}

/// Runs one Turn calling `<tool>__<export>` with each input; returns the
/// outputs and the harness (for its workdir).
async fn call_all(
    tool: &str,
    exports: &[&str],
    config: BotApiConfig,
    calls: Vec<(&str, JsonValue)>,
) -> (Vec<JsonValue>, Harness) {
    let mut harness = Harness::new();
    harness.tool(tool, exports);
    match tool {
        "telegram" => harness.tool_options.telegram = config,
        _ => harness.tool_options.slack = config,
    }
    let ids: Vec<String> = (0..calls.len()).map(|index| format!("c{index}")).collect();
    let call_refs: Vec<(&str, &str, JsonValue)> = calls
        .iter()
        .zip(&ids)
        .map(|((name, input), id)| (id.as_str(), *name, input.clone()))
        .collect();
    harness.model.tool_calls(&call_refs);
    harness.model.text("done");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("chat"), &NoStream).await;
    let outputs = tool_outputs(&agent)
        .into_iter()
        .map(|(_, output)| output)
        .collect();
    (outputs, harness)
}

fn ok_value(output: &JsonValue) -> &JsonValue {
    assert_eq!(output["type"], "json", "{output}");
    &output["value"]
}

fn error_of(output: &JsonValue, code: &str) -> String {
    assert_eq!(output["type"], "error-json", "{output}");
    assert_eq!(output["value"]["code"], code, "{output}");
    output.to_string()
}

const TELEGRAM_EXPORTS: [&str; 6] = [
    "send",
    "edit",
    "delete",
    "react",
    "set-chat-action",
    "download-file",
];

#[tokio::test]
async fn telegram_tool_calls_reach_the_bot_api_with_the_right_json_and_token() {
    let method = |name: &str| format!("/bot{TELEGRAM_TOKEN}/{name}");
    let ok = |result: JsonValue| json!({"ok": true, "result": result});
    let (base, mock) = serve(vec![
        json_answer(
            method("sendMessage"),
            200,
            ok(json!({"message_id": 99, "date": 1_764_000_000, "text": "hi"})),
        ),
        json_answer(method("editMessageText"), 200, ok(json!({"message_id": 5}))),
        json_answer(method("deleteMessage"), 200, ok(json!(true))),
        json_answer(method("setMessageReaction"), 200, ok(json!(true))),
        json_answer(method("sendChatAction"), 200, ok(json!(true))),
        json_answer(
            method("getFile"),
            200,
            ok(json!({"file_id": "F1", "file_unique_id": "U1", "file_path": "photos/p.jpg", "file_size": 4})),
        ),
        (
            format!("/file/bot{TELEGRAM_TOKEN}/photos/p.jpg"),
            200,
            "image/jpeg",
            b"JPEG".to_vec(),
        ),
    ])
    .await;
    let config = BotApiConfig {
        api_base_url: Some(base),
        token: Some(TELEGRAM_TOKEN.into()),
    };
    let (outputs, harness) = call_all(
        "telegram",
        &TELEGRAM_EXPORTS,
        config,
        vec![
            (
                "telegram__send",
                json!({"chatId": 42, "text": "hi", "parseMode": "markdown-v2", "replyToMessageId": "7", "disableNotification": true}),
            ),
            (
                "telegram__edit",
                json!({"chatId": "42", "messageId": 5, "text": "hello"}),
            ),
            ("telegram__delete", json!({"chatId": -100, "messageId": "6"})),
            (
                "telegram__react",
                json!({"chatId": 42, "messageId": 5, "emoji": "👍", "emojis": ["👍", "🎉"]}),
            ),
            // The old spelling (before tool.md §6.2's names) still works.
            (
                "telegram__setChatAction",
                json!({"chatId": 42, "action": "Upload Photo"}),
            ),
            (
                "telegram__download-file",
                json!({"fileId": "F1", "savePath": "inbox/p.jpg"}),
            ),
        ],
    )
    .await;
    assert_eq!(outputs.len(), 6);
    let sent = ok_value(&outputs[0]);
    assert_eq!(sent["messageId"], 99);
    assert_eq!(sent["chatId"], "42");
    assert_eq!(ok_value(&outputs[1])["edited"], true);
    assert_eq!(ok_value(&outputs[2])["deleted"], true);
    assert_eq!(ok_value(&outputs[3])["reactionCount"], 2);
    assert_eq!(ok_value(&outputs[4])["action"], "upload_photo");
    let file = ok_value(&outputs[5]);
    assert_eq!(file["base64"], "SlBFRw==");
    assert_eq!(file["dataUrl"], "data:image/jpeg;base64,SlBFRw==");
    assert_eq!(file["sizeBytes"], 4);
    assert_eq!(file["fileUniqueId"], "U1");
    assert!(!file.to_string().contains(TELEGRAM_TOKEN), "{file}");
    assert_eq!(
        std::fs::read(harness.workdir.path().join("inbox/p.jpg")).unwrap(),
        b"JPEG"
    );

    let seen = mock.seen.lock().unwrap().clone();
    let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            method("sendMessage"),
            method("editMessageText"),
            method("deleteMessage"),
            method("setMessageReaction"),
            method("sendChatAction"),
            method("getFile"),
            format!("/file/bot{TELEGRAM_TOKEN}/photos/p.jpg"),
        ]
    );
    assert!(
        seen[..6]
            .iter()
            .all(|s| s.method == Method::POST
                && s.content_type.as_deref() == Some("application/json"))
    );
    let bodies: Vec<JsonValue> = seen[..6].iter().map(Seen::json).collect();
    assert_eq!(
        bodies,
        [
            json!({"chat_id": "42", "text": "hi", "parse_mode": "MarkdownV2", "reply_to_message_id": 7, "disable_notification": true}),
            json!({"chat_id": "42", "message_id": 5, "text": "hello"}),
            json!({"chat_id": "-100", "message_id": 6}),
            json!({"chat_id": "42", "message_id": 5, "reaction": [{"type": "emoji", "emoji": "👍"}, {"type": "emoji", "emoji": "🎉"}]}),
            json!({"chat_id": "42", "action": "upload_photo"}),
            json!({"file_id": "F1"}),
        ]
    );
    assert_eq!(seen[6].method, Method::GET);
}

#[tokio::test]
async fn telegram_failures_are_coded_and_never_show_the_token() {
    let method = |name: &str| format!("/bot{TELEGRAM_TOKEN}/{name}");
    let (base, _mock) = serve(vec![
        json_answer(
            method("sendMessage"),
            400,
            json!({"ok": false, "error_code": 400, "description": "Bad Request: chat not found"}),
        ),
        json_answer(
            method("deleteMessage"),
            429,
            json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 3", "parameters": {"retry_after": 3}}),
        ),
        json_answer(
            method("getFile"),
            200,
            json!({"ok": true, "result": {"file_id": "F", "file_path": "big.bin"}}),
        ),
        (
            format!("/file/bot{TELEGRAM_TOKEN}/big.bin"),
            200,
            "application/octet-stream",
            vec![0; 2048],
        ),
    ])
    .await;
    // A port nothing listens on, for the transport error.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let config = BotApiConfig {
        api_base_url: Some(base),
        token: Some(TELEGRAM_TOKEN.into()),
    };
    let (outputs, _harness) = call_all(
        "telegram",
        &TELEGRAM_EXPORTS,
        config,
        vec![
            ("telegram__send", json!({"chatId": 1, "text": "x"})),
            ("telegram__delete", json!({"chatId": 1, "messageId": 2})),
            ("telegram__download-file", json!({"fileId": "F", "maxBytes": 1000})),
            (
                "telegram__send",
                json!({"chatId": 1, "text": "x", "apiBaseUrl": "https://api.example.org"}),
            ),
            (
                "telegram__send",
                json!({"chatId": 1, "text": "x", "apiBaseUrl": format!("http://{closed}"), "token": "mine-123456"}),
            ),
            ("telegram__send", json!({"chatId": 1, "text": "x", "parseMode": "bbcode"})),
            ("telegram__react", json!({"chatId": 1, "messageId": 2})),
        ],
    )
    .await;
    let api = error_of(&outputs[0], "E_TELEGRAM_API");
    assert!(api.contains("chat not found"), "{api}");
    let limited = error_of(&outputs[1], "E_BOT_API_RATE_LIMITED");
    assert!(limited.contains("retry after 3 s"), "{limited}");
    let large = error_of(&outputs[2], "E_TOO_LARGE");
    assert!(large.contains("maxBytes 1000"), "{large}");
    error_of(&outputs[3], "E_BOT_TOKEN_MISSING");
    error_of(&outputs[4], "E_BOT_API_BLOCKED");
    error_of(&outputs[5], "E_TOOL_INVALID_ARGS");
    error_of(&outputs[6], "E_TOOL_INVALID_ARGS");
    for output in &outputs {
        assert!(!output.to_string().contains(TELEGRAM_TOKEN), "{output}");
    }

    // The operator's own address refusing connections: a transport error
    // whose URL is masked.
    let (outputs, _harness) = call_all(
        "telegram",
        &TELEGRAM_EXPORTS,
        BotApiConfig {
            api_base_url: Some(format!("http://{closed}")),
            token: Some(TELEGRAM_TOKEN.into()),
        },
        vec![("telegram__send", json!({"chatId": 1, "text": "x"}))],
    )
    .await;
    let transport = error_of(&outputs[0], "E_HTTP_REQUEST");
    assert!(!transport.contains(TELEGRAM_TOKEN), "{transport}");
}

const SLACK_EXPORTS: [&str; 6] = ["send", "read", "edit", "delete", "react", "download-file"];

#[tokio::test]
async fn slack_tool_calls_reach_the_web_api_with_the_bearer_token() {
    let (base, mock) = serve(vec![
        json_answer(
            "/api/chat.postMessage".into(),
            200,
            json!({"ok": true, "channel": "C1", "ts": "1.5", "message": {"text": "hi"}}),
        ),
        json_answer(
            "/api/conversations.replies".into(),
            200,
            json!({"ok": true, "messages": [{"ts": "1.0", "text": "root"}, {"ts": "1.5", "text": "hi"}], "has_more": true, "response_metadata": {"next_cursor": "n2"}}),
        ),
        json_answer(
            "/api/chat.update".into(),
            200,
            json!({"ok": true, "channel": "C1", "ts": "1.5"}),
        ),
        json_answer("/api/chat.delete".into(), 200, json!({"ok": true})),
        json_answer("/api/reactions.add".into(), 200, json!({"ok": true})),
        ("/files/F1/report.txt".into(), 200, "text/plain", b"report".to_vec()),
    ])
    .await;
    let config = BotApiConfig {
        api_base_url: Some(format!("{base}/api/")),
        token: Some(SLACK_TOKEN.into()),
    };
    let (outputs, _harness) = call_all(
        "slack",
        &SLACK_EXPORTS,
        config,
        vec![
            (
                "slack__send",
                json!({"channelId": "C1", "text": "hi", "threadTs": "1.0", "mrkdwn": false}),
            ),
            (
                "slack__read",
                json!({"channel": "C1", "threadTs": "1.0", "messageTs": "1.5"}),
            ),
            (
                "slack__edit",
                json!({"channelId": "C1", "ts": "1.5", "text": "hello"}),
            ),
            ("slack__delete", json!({"channelId": "C1", "messageTs": "1.5"})),
            (
                "slack__react",
                json!({"channelId": "C1", "messageTs": "1.5", "emojis": [":tada:", "eyes", "tada"]}),
            ),
            (
                "slack__downloadFile",
                json!({"url": format!("{base}/files/F1/report.txt"), "includeDataUrl": false}),
            ),
            (
                "slack__download-file",
                json!({"url": "https://files.example.net/F1/report.txt"}),
            ),
        ],
    )
    .await;
    let sent = ok_value(&outputs[0]);
    assert_eq!(
        (sent["channelId"].as_str(), sent["messageTs"].as_str()),
        (Some("C1"), Some("1.5"))
    );
    let read = ok_value(&outputs[1]);
    assert_eq!(read["method"], "conversations.replies");
    assert_eq!(read["found"]["text"], "hi");
    assert_eq!(read["nextCursor"], "n2");
    assert_eq!(ok_value(&outputs[2])["edited"], true);
    assert_eq!(ok_value(&outputs[3])["deleted"], true);
    assert_eq!(ok_value(&outputs[4])["emojis"], json!(["tada", "eyes"]));
    let file = ok_value(&outputs[5]);
    assert_eq!(file["base64"], "cmVwb3J0");
    assert_eq!(file["dataUrl"], JsonValue::Null);
    let refused = error_of(&outputs[6], "E_TOOL_INVALID_ARGS");
    assert!(refused.contains("not a Slack host"), "{refused}");

    let seen = mock.seen.lock().unwrap().clone();
    let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/api/chat.postMessage",
            "/api/conversations.replies",
            "/api/chat.update",
            "/api/chat.delete",
            "/api/reactions.add",
            "/api/reactions.add",
            "/files/F1/report.txt",
        ]
    );
    let bearer = format!("Bearer {SLACK_TOKEN}");
    assert!(seen
        .iter()
        .all(|s| s.authorization.as_deref() == Some(bearer.as_str())));
    assert_eq!(
        seen[0].json(),
        json!({"channel": "C1", "text": "hi", "thread_ts": "1.0", "mrkdwn": false})
    );
    assert_eq!(
        seen[1].content_type.as_deref(),
        Some("application/x-www-form-urlencoded")
    );
    let form: HashMap<String, String> = url::form_urlencoded::parse(seen[1].body.as_bytes())
        .into_owned()
        .collect();
    let expected: HashMap<String, String> = [
        ("channel", "C1"),
        ("ts", "1.0"),
        ("latest", "1.5"),
        ("inclusive", "true"),
        ("limit", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(form, expected);
    assert_eq!(
        seen[2].json(),
        json!({"channel": "C1", "ts": "1.5", "text": "hello"})
    );
    assert_eq!(seen[3].json(), json!({"channel": "C1", "ts": "1.5"}));
    assert_eq!(
        seen[4].json(),
        json!({"channel": "C1", "timestamp": "1.5", "name": "tada"})
    );
    assert_eq!(seen[5].json()["name"], "eyes");
}

#[tokio::test]
async fn slack_failures_are_coded() {
    let (base, _mock) = serve(vec![
        json_answer(
            "/chat.postMessage".into(),
            200,
            json!({"ok": false, "error": "channel_not_found"}),
        ),
        json_answer(
            "/chat.delete".into(),
            429,
            json!({"ok": false, "error": "ratelimited"}),
        ),
    ])
    .await;
    let (outputs, _harness) = call_all(
        "slack",
        &SLACK_EXPORTS,
        BotApiConfig {
            api_base_url: Some(base),
            token: Some(SLACK_TOKEN.into()),
        },
        vec![
            ("slack__send", json!({"channelId": "C404", "text": "x"})),
            (
                "slack__delete",
                json!({"channelId": "C1", "messageTs": "1"}),
            ),
            (
                "slack__edit",
                json!({"channelId": "C1", "messageTs": "1", "text": "x", "emoji": "tada"}),
            ),
            ("slack__read", json!({"channelId": "C1", "limit": 5000})),
        ],
    )
    .await;
    let api = error_of(&outputs[0], "E_SLACK_API");
    assert!(api.contains("channel_not_found"), "{api}");
    let limited = error_of(&outputs[1], "E_BOT_API_RATE_LIMITED");
    assert!(limited.contains("retry after 7 s"), "{limited}");
    error_of(&outputs[2], "E_TOOL_INVALID_ARGS");
    error_of(&outputs[3], "E_TOOL_INVALID_ARGS");
    for output in &outputs {
        assert!(!output.to_string().contains(SLACK_TOKEN), "{output}");
    }
}
