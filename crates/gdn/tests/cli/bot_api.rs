//! A mock of the chat platforms' Web APIs on 127.0.0.1, as the connectors
//! and the chat tools call them: the Telegram Bot API
//! (`/bot<token>/<method>`) and the Slack Web API (`/api/<method>` with a
//! bearer token). It records every call and answers what a test needs:
//! `getUpdates` from a script the test can add to while it runs, a
//! message id for `sendMessage` and a `ts` for `chat.postMessage`, `ok`
//! for every other method.

use axum::extract::{Path as UrlPath, State};
use axum::http::HeaderMap;
use axum::Json;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// The bot token the Telegram mock accepts.
pub(crate) const TELEGRAM_TOKEN: &str = "123456:tg-e2e-token-5d1f";
/// The bot token the Slack mock accepts.
pub(crate) const SLACK_TOKEN: &str = "xoxb-e2e-slack-7c2e";

/// What the mock saw and still has to give.
#[derive(Default)]
pub(crate) struct BotApi {
    /// Answers of `getUpdates`, in order: a status and a body.
    pub(crate) scripted: Vec<(u16, Value)>,
    /// Every call: the path's method and the query or JSON body.
    pub(crate) calls: Vec<(String, Value)>,
    /// Messages posted so far (their ids count up from 900).
    posted: i64,
}

pub(crate) type Shared = Arc<Mutex<BotApi>>;

/// The JSON bodies of every call of `method` so far.
pub(crate) fn calls_of(api: &Shared, method: &str) -> Vec<Value> {
    api.lock()
        .unwrap()
        .calls
        .iter()
        .filter(|(called, _)| called == method)
        .map(|(_, body)| body.clone())
        .collect()
}

/// Gives the next `getUpdates` these updates.
pub(crate) fn push_updates(api: &Shared, updates: Vec<Value>) {
    api.lock()
        .unwrap()
        .scripted
        .push((200, json!({"ok": true, "result": updates})));
}

async fn bot_method(
    State(shared): State<Shared>,
    UrlPath((prefix, method)): UrlPath<(String, String)>,
    headers: HeaderMap,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    body: axum::body::Bytes,
) -> (axum::http::StatusCode, Json<Value>) {
    let status = |code: u16| axum::http::StatusCode::from_u16(code).unwrap();
    let slack = prefix == "api";
    let authorized = if slack {
        headers
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            == Some(&format!("Bearer {SLACK_TOKEN}"))
    } else {
        prefix == format!("bot{TELEGRAM_TOKEN}")
    };
    if !authorized {
        return (
            status(401),
            Json(json!({"ok": false, "error_code": 401, "error": "invalid_auth"})),
        );
    }
    let query: serde_json::Map<String, Value> = query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.to_string(), Value::String(value.to_string())))
        .collect();
    let argument = serde_json::from_slice(&body).unwrap_or(Value::Object(query));
    let (scripted, posted) = {
        let mut api = shared.lock().unwrap();
        api.calls.push((method.clone(), argument.clone()));
        let scripted =
            (method == "getUpdates" && !api.scripted.is_empty()).then(|| api.scripted.remove(0));
        if matches!(method.as_str(), "sendMessage" | "chat.postMessage") {
            api.posted += 1;
        }
        (scripted, 899 + api.posted)
    };
    match (method.as_str(), scripted) {
        ("getUpdates", Some((code, body))) => (status(code), Json(body)),
        ("getUpdates", None) => {
            // A long poll with nothing new.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            (status(200), Json(json!({"ok": true, "result": []})))
        }
        ("sendMessage", _) => (
            status(200),
            Json(
                json!({"ok": true, "result": {"message_id": posted, "chat": {"id": argument["chat_id"]}}}),
            ),
        ),
        ("chat.postMessage", _) => (
            status(200),
            Json(
                json!({"ok": true, "channel": argument["channel"], "ts": format!("1700000000.000{posted}")}),
            ),
        ),
        (_, _)
            if slack
                || method.starts_with("answer")
                || method.starts_with("edit")
                || method == "sendChatAction" =>
        {
            (status(200), Json(json!({"ok": true, "result": true})))
        }
        _ => (status(404), Json(json!({"ok": false, "error_code": 404}))),
    }
}

/// Starts the mock; returns its base URL (the Bot API's; Slack's is it
/// plus `/api`) and state.
pub(crate) fn start_bot_api(scripted: Vec<(u16, Value)>) -> (String, Shared) {
    let shared: Shared = Arc::new(Mutex::new(BotApi {
        scripted,
        ..BotApi::default()
    }));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap();
    let state = shared.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let app = axum::Router::new()
                .route("/{prefix}/{method}", axum::routing::any(bot_method))
                .with_state(state);
            let _ = axum::serve(listener, app).await;
        });
    });
    (format!("http://{address}"), shared)
}
