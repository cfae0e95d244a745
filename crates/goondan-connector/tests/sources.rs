//! The connectors that are not (only) webhooks, run for real: Telegram
//! long polling against a mock Bot API on 127.0.0.1 that fails the way
//! the real one does, Telegram's webhook mode behind the HTTP front, and
//! the cron clock on a short interval; each with an emitter that records.

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::IntoResponse;
use futures_util::future::BoxFuture;
use goondan_connector::approvals::Press;
use goondan_connector::host::{connector_for, Connector};
use goondan_connector::http::serve;
use goondan_connector::source::Shutdown;
use goondan_connector::telegram::TelegramConnector;
use goondan_connector::{Accepted, ConnectorConfig, EmitError, Emitter};
use goondan_types::{ConnectorEvent, ConnectorMessage};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN: &str = "123456:AAH-test-bot-token";

/// Records events and presses; refuses the first `refuse_first`
/// attempts (of either) as a full queue.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<ConnectorEvent>>,
    presses: Mutex<Vec<Press>>,
    attempts: Mutex<usize>,
    refuse_first: usize,
}

impl Emitter for Recorder {
    fn emit(&self, event: ConnectorEvent) -> BoxFuture<'_, Result<Accepted, EmitError>> {
        Box::pin(async move {
            self.attempt()?;
            self.events.lock().unwrap().push(event);
            Ok(Accepted::default())
        })
    }

    fn press(&self, press: Press) -> BoxFuture<'_, Result<(), EmitError>> {
        Box::pin(async move {
            self.attempt()?;
            self.presses.lock().unwrap().push(press);
            Ok(())
        })
    }
}

impl Recorder {
    fn attempt(&self) -> Result<(), EmitError> {
        let mut attempts = self.attempts.lock().unwrap();
        *attempts += 1;
        if *attempts <= self.refuse_first {
            return Err(EmitError::QueueFull("telegram:42 holds 3 events".into()));
        }
        Ok(())
    }

    fn events(&self) -> Vec<ConnectorEvent> {
        self.events.lock().unwrap().clone()
    }

    fn presses(&self) -> Vec<Press> {
        self.presses.lock().unwrap().clone()
    }
}

/// A press of the approval button `data` by the user `from`.
fn callback_query(update_id: i64, from: i64, data: &str) -> Value {
    json!({
        "update_id": update_id,
        "callback_query": {
            "id": format!("cbq-{update_id}"),
            "from": {"id": from, "is_bot": false, "first_name": "Ann"},
            "message": {"message_id": 900, "chat": {"id": -100123}},
            "chat_instance": "1",
            "data": data,
        }
    })
}

fn config(pairs: &[(&str, &str)], secrets: &[(&str, &str)]) -> ConnectorConfig {
    let mut config = ConnectorConfig::default();
    for (key, value) in pairs {
        config.config.insert(key.to_string(), value.to_string());
    }
    for (key, value) in secrets {
        config.secrets.insert(*key, *value);
    }
    config
}

/// One request the mock saw.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    query: String,
    at: Instant,
}

/// A Bot API that answers `getUpdates` from a script, then with no
/// updates: after a short pause for `timeout=0`, and for a real long poll
/// not within any test's time.
#[derive(Default)]
struct MockBotApi {
    script: Mutex<VecDeque<(u16, Value)>>,
    seen: Mutex<Vec<Seen>>,
}

async fn answer(State(mock): State<Arc<MockBotApi>>, uri: Uri) -> impl IntoResponse {
    mock.seen.lock().unwrap().push(Seen {
        path: uri.path().to_string(),
        query: uri.query().unwrap_or_default().to_string(),
        at: Instant::now(),
    });
    let next = mock.script.lock().unwrap().pop_front();
    let (status, body) = match next {
        Some(scripted) => scripted,
        None => {
            let long_poll = !uri.query().unwrap_or_default().contains("timeout=0");
            let pause = if long_poll { 600.0 } else { 0.02 };
            tokio::time::sleep(Duration::from_secs_f64(pause)).await;
            (200, json!({"ok": true, "result": []}))
        }
    };
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json")],
        body.to_string(),
    )
}

async fn mock_bot_api(script: Vec<(u16, Value)>) -> (String, Arc<MockBotApi>) {
    let mock = Arc::new(MockBotApi {
        script: Mutex::new(script.into()),
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

fn message(update_id: i64, chat_id: i64, text: &str, is_bot: bool) -> Value {
    json!({
        "update_id": update_id,
        "message": {
            "message_id": update_id * 10,
            "date": 1_764_000_000,
            "chat": {"id": chat_id, "type": "private", "username": "ann"},
            "from": {"id": chat_id, "is_bot": is_bot, "first_name": "Ann"},
            "text": text
        }
    })
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn telegram_polling_retries_500_and_429_and_emits_each_update_once() {
    let (base, mock) = mock_bot_api(vec![
        (500, json!({"ok": false, "error_code": 500, "description": "Internal Server Error"})),
        (
            429,
            json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1", "parameters": {"retry_after": 1}}),
        ),
        (
            200,
            json!({"ok": true, "result": [
                message(101, 42, "hello", false),
                message(102, 42, "I am a bot", true),
                message(103, 7, "second chat", false),
            ]}),
        ),
        // A server that sends an update again is not believed.
        (200, json!({"ok": true, "result": [message(103, 7, "second chat", false)]})),
    ])
    .await;
    let connector = TelegramConnector::from_config(
        &config(
            &[
                ("TELEGRAM_API_BASE_URL", &base),
                ("TELEGRAM_POLL_TIMEOUT_SECONDS", "0"),
                ("TELEGRAM_RETRY_DELAY_MS", "10"),
            ],
            &[("TELEGRAM_BOT_TOKEN", TOKEN)],
        ),
        false,
    )
    .unwrap();
    let TelegramConnector::Polling(polling) = connector else {
        panic!("polling is the default mode");
    };
    let recorder = Arc::new(Recorder {
        refuse_first: 1,
        ..Recorder::default()
    });
    let (trigger, shutdown) = Shutdown::new();
    let source: Box<dyn goondan_connector::Source> = Box::new(polling);
    let running = tokio::spawn(source.run(recorder.clone(), shutdown));

    let seen_offset = |offset: &str| {
        let wanted = format!("offset={offset}");
        let mock = mock.clone();
        move || {
            mock.seen
                .lock()
                .unwrap()
                .iter()
                .any(|seen| seen.query.split('&').any(|pair| pair == wanted))
        }
    };
    eventually("the offset past the last update", seen_offset("104")).await;
    // Let the scripted duplicate and a few empty polls go by.
    let requests_then = mock.seen.lock().unwrap().len();
    eventually("more polls", || {
        mock.seen.lock().unwrap().len() > requests_then + 2
    })
    .await;
    trigger.fire();
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("the source stops at shutdown")
        .unwrap();

    let events = recorder.events();
    let keys: Vec<_> = events
        .iter()
        .map(|event| event.instance_key.clone().unwrap())
        .collect();
    assert_eq!(keys, ["telegram:42", "telegram:7"], "{events:#?}");
    assert_eq!(
        events[0].message,
        ConnectorMessage::Text {
            text: "hello".into()
        }
    );
    assert_eq!(events[0].name, "telegram_message");
    assert_eq!(events[0].properties["update_id"], "101");
    assert_eq!(events[0].properties["chat_id"], "42");
    assert_eq!(events[0].properties["message_id"], "1010");
    assert_eq!(events[1].properties["chat_id"], "7");
    // The first emit met a full queue and was retried, not dropped.
    assert_eq!(*recorder.attempts.lock().unwrap(), 3);

    let seen = mock.seen.lock().unwrap().clone();
    assert!(seen
        .iter()
        .all(|s| s.path == format!("/bot{TOKEN}/getUpdates")));
    assert!(!seen[0].query.contains("offset"), "{seen:?}");
    assert!(seen[0].query.contains("timeout=0"), "{seen:?}");
    // After the 429 the poll waited the retry_after Telegram asked for.
    let waited = seen[2].at - seen[1].at;
    assert!(waited >= Duration::from_millis(950), "waited {waited:?}");
    // After the 500 it waited the (short) backoff only.
    assert!(seen[1].at - seen[0].at < Duration::from_millis(900));
    // The batch was asked for with no offset, and every later poll
    // starts past the last update of the batch.
    assert!(!seen[2].query.contains("offset"));
    assert!(
        seen[3..].iter().all(|s| s.query.contains("offset=104")),
        "{seen:?}"
    );
}

#[tokio::test]
async fn telegram_polling_starts_at_the_configured_offset_and_confirms_at_shutdown() {
    let (base, mock) = mock_bot_api(vec![(
        200,
        json!({"ok": true, "result": [message(500, 9, "late", false)]}),
    )])
    .await;
    // A real long poll, which the mock leaves hanging once the script is
    // spent, so the shutdown comes while a call is in flight.
    let TelegramConnector::Polling(polling) = TelegramConnector::from_config(
        &config(
            &[
                ("TELEGRAM_API_BASE_URL", &base),
                ("TELEGRAM_POLL_TIMEOUT_SECONDS", "30"),
                ("TELEGRAM_INITIAL_OFFSET", "500"),
            ],
            &[("TELEGRAM_TOKEN", TOKEN)],
        ),
        true,
    )
    .unwrap() else {
        panic!("telegram-polling polls");
    };
    let recorder = Arc::new(Recorder::default());
    let (trigger, shutdown) = Shutdown::new();
    let source: Box<dyn goondan_connector::Source> = Box::new(polling);
    let running = tokio::spawn(source.run(recorder.clone(), shutdown));
    eventually("the event and the next long poll", || {
        recorder.events().len() == 1 && mock.seen.lock().unwrap().len() == 2
    })
    .await;
    trigger.fire();
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .unwrap()
        .unwrap();
    let seen = mock.seen.lock().unwrap().clone();
    let queries: Vec<&str> = seen.iter().map(|s| s.query.as_str()).collect();
    assert_eq!(
        queries,
        [
            "timeout=30&offset=500",
            "timeout=30&offset=501",
            "timeout=0&offset=501"
        ],
        "the last call confirms the offset reached"
    );
}

#[tokio::test]
async fn telegram_webhook_refuses_a_missing_or_wrong_secret_token() {
    let TelegramConnector::Webhook(platform, mut front) = TelegramConnector::from_config(
        &config(
            &[
                ("TELEGRAM_MODE", "webhook"),
                ("TELEGRAM_WEBHOOK_PATH", "/tg"),
            ],
            &[("TELEGRAM_WEBHOOK_SECRET", "s3cret-token-value")],
        ),
        false,
    )
    .unwrap() else {
        panic!("webhook mode");
    };
    front.addr.set_port(0);
    let listener = front.bind().await.unwrap();
    let url = format!("http://{}/tg", listener.local_addr().unwrap());
    let recorder = Arc::new(Recorder::default());
    let (trigger, shutdown) = Shutdown::new();
    tokio::spawn(serve(
        listener,
        front,
        Arc::new(platform),
        recorder.clone(),
        shutdown.stopped(),
    ));
    let client = reqwest::Client::new();
    let body = message(77, 42, "via webhook", false).to_string();
    let post = |token: Option<&str>, body: String| {
        let mut request = client.post(&url).body(body);
        if let Some(token) = token {
            request = request.header("X-Telegram-Bot-Api-Secret-Token", token);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(post(None, body.clone()).await, 401);
    assert_eq!(post(Some("s3cret-token-valuX"), body.clone()).await, 401);
    assert_eq!(post(Some("s3cret"), body.clone()).await, 401);
    assert!(recorder.events().is_empty());

    assert_eq!(post(Some("s3cret-token-value"), body).await, 200);
    let edit = json!({"update_id": 78, "edited_message": {"chat": {"id": 42}, "text": "x"}});
    assert_eq!(
        post(Some("s3cret-token-value"), edit.to_string()).await,
        200
    );
    assert_eq!(post(Some("s3cret-token-value"), "[]".into()).await, 400);
    let events = recorder.events();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].instance_key.as_deref(), Some("telegram:42"));
    assert_eq!(events[0].properties["update_id"], "77");

    // A press of an approval button: refused without the secret token,
    // then a press for the desk, never an event.
    let press = callback_query(79, 42, "goondan:approve:apv_0123456789abcdef").to_string();
    assert_eq!(post(None, press.clone()).await, 401);
    assert_eq!(post(Some("wrong"), press.clone()).await, 401);
    assert!(recorder.presses().is_empty());
    assert_eq!(post(Some("s3cret-token-value"), press).await, 200);
    let presses = recorder.presses();
    assert_eq!(presses.len(), 1, "{presses:?}");
    assert_eq!(presses[0].approval_id, "apv_0123456789abcdef");
    assert_eq!(presses[0].callback_id.as_deref(), Some("cbq-79"));
    assert_eq!(recorder.events().len(), 1, "a press reached an agent");
    trigger.fire();
}

#[tokio::test]
async fn telegram_polling_hands_an_approval_press_to_the_desk_once_past_a_full_queue() {
    let (base, mock) = mock_bot_api(vec![(
        200,
        json!({"ok": true, "result": [
            callback_query(10, 42, "goondan:deny:apv_0123456789abcdef"),
            callback_query(11, 42, "someone-elses:button"),
            message(12, 42, "after the press", false),
        ]}),
    )])
    .await;
    let Some(Connector::Source(source)) = connector_for(
        "telegram",
        &config(
            &[
                ("TELEGRAM_API_BASE_URL", &base),
                ("TELEGRAM_RETRY_DELAY_MS", "10"),
            ],
            &[("TELEGRAM_BOT_TOKEN", TOKEN)],
        ),
    )
    .unwrap() else {
        panic!("long polling is a source");
    };
    let recorder = Arc::new(Recorder {
        refuse_first: 1,
        ..Recorder::default()
    });
    let (trigger, shutdown) = Shutdown::new();
    let running = tokio::spawn(source.run(recorder.clone(), shutdown));
    eventually("the message after the press", || {
        recorder.events().len() == 1
    })
    .await;
    let presses = recorder.presses();
    assert_eq!(presses.len(), 1, "{presses:?}");
    assert_eq!(presses[0].verdict, goondan_types::Verdict::Deny);
    assert_eq!(presses[0].user_id, "42");
    assert_eq!(presses[0].chat.as_deref(), Some("-100123"));
    trigger.fire();
    running.await.unwrap();
    let _ = mock;
}

#[tokio::test]
async fn cron_fires_on_a_short_interval_until_shutdown() {
    let Some(Connector::Source(cron)) = connector_for(
        "cron",
        &config(
            &[("EVERY", "100ms"), ("INSTANCE_KEY", "cron:heartbeat")],
            &[],
        ),
    )
    .unwrap() else {
        panic!("cron is a source");
    };
    assert_eq!(cron.name(), "cron");
    let recorder = Arc::new(Recorder::default());
    let (trigger, shutdown) = Shutdown::new();
    let started = Instant::now();
    let running = tokio::spawn(cron.run(recorder.clone(), shutdown));
    eventually("two ticks", || recorder.events().len() >= 2).await;
    assert!(started.elapsed() >= Duration::from_millis(190));
    trigger.fire();
    tokio::time::timeout(Duration::from_secs(2), running)
        .await
        .expect("cron stops at shutdown")
        .unwrap();
    let events = recorder.events();
    let event = &events[0];
    assert_eq!(event.name, "cron_tick");
    assert_eq!(event.instance_key.as_deref(), Some("cron:heartbeat"));
    assert_eq!(event.properties["schedule"], "@every 100ms");
    assert!(chrono::DateTime::parse_from_rfc3339(&event.properties["scheduled_at"]).is_ok());
    assert_eq!(
        event.message,
        ConnectorMessage::Text {
            text: "cron tick: @every 100ms".into()
        }
    );
}

#[test]
fn every_builtin_entry_builds_its_kind_of_connector() {
    let token = &[("TELEGRAM_BOT_TOKEN", TOKEN)][..];
    let cases: [(&str, ConnectorConfig, &str); 4] = [
        (
            "cron",
            config(&[("SCHEDULE", "*/5 * * * *")], &[]),
            "source",
        ),
        ("telegram", config(&[], token), "source"),
        ("telegram-polling", config(&[], token), "source"),
        (
            "telegram",
            config(
                &[("TELEGRAM_MODE", "webhook"), ("ALLOW_UNSIGNED", "true")],
                &[],
            ),
            "http",
        ),
    ];
    for (entry, config, kind) in cases {
        let built = connector_for(entry, &config).unwrap().unwrap();
        let built_kind = match built {
            Connector::Http(..) => "http",
            Connector::Source(_) => "source",
        };
        assert_eq!(built_kind, kind, "{entry}");
    }
    assert!(connector_for("carrier-pigeon", &ConnectorConfig::default())
        .unwrap()
        .is_none());
}
