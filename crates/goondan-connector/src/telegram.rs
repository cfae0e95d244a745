//! The `telegram` connector (`builtin:telegram`, also
//! `builtin:telegram-polling`): Telegram Bot API updates become
//! `telegram_message` events.
//!
//! **Long polling** (the default, `TELEGRAM_MODE: polling`) is a
//! [`Source`]: it calls `getUpdates` with the next offset and a long-poll
//! timeout, hands each update's event to the swarm and only then moves the
//! offset past it, so an update the swarm has not accepted is asked for
//! again and one it accepted is never emitted twice. A network error, a
//! 5xx or a malformed answer is retried after a wait that doubles from
//! `TELEGRAM_RETRY_DELAY_MS` (1000) up to `TELEGRAM_RETRY_MAX_DELAY_MS`
//! (60000); a 429 waits the `parameters.retry_after` Telegram asks for.
//! At shutdown the offset reached is confirmed to Telegram with one last
//! short call.
//!
//! **Webhook** (`TELEGRAM_MODE: webhook`) is a [`Platform`] behind the
//! shared HTTP front: each post must carry `X-Telegram-Bot-Api-Secret-Token`
//! equal to the `secret_token` given to `setWebhook`
//! (`TELEGRAM_WEBHOOK_SECRET`), compared in constant time; the connector
//! will not start without one unless `ALLOW_UNSIGNED: "true"`.
//!
//! A `callback_query` of an approval's button (in either mode) is a press
//! for the approval desk ([`crate::approvals::telegram`]), never an event.
//!
//! Both read updates as the original does: a `message` from a person (bot
//! senders are skipped) becomes `telegram_message` with its text (or
//! caption), instance key `telegram:<chat_id>` and the properties
//! `update_id`, `chat_id`, `chat_type`, `chat_title`, `chat_username`,
//! `message_id`, `date`, `from_id`, `from_username`, `from_first_name`,
//! `from_last_name` (those present).
//!
//! The bot token (`TELEGRAM_BOT_TOKEN`, `BOT_TOKEN` or `TELEGRAM_TOKEN`,
//! from secrets or config) and the API address (`TELEGRAM_API_BASE_URL`)
//! make the Bot API client ([`crate::chat_api::telegram`]), which never
//! logs a URL and masks every error before it is shown.

use crate::chat_api::telegram::{identifier, TelegramApi, TelegramError};
use crate::config::{ConnectorConfig, ConnectorConfigError};
use crate::http::{
    BadRequest, HttpFront, Platform, PlatformOutcome, PlatformReply, PlatformRequest,
};
use crate::source::{deliver, deliver_press, Delivery, Shutdown, Source};
use crate::verify::{self, SignatureError};
use crate::Emitter;
use futures_util::future::BoxFuture;
use goondan_types::{ConnectorEvent, ConnectorMessage};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The event every message becomes.
pub const EVENT_NAME: &str = "telegram_message";
/// The secret names the webhook's secret token is read from, in order.
pub const WEBHOOK_SECRET_KEYS: [&str; 3] = [
    "TELEGRAM_WEBHOOK_SECRET",
    "TELEGRAM_SECRET_TOKEN",
    "WEBHOOK_SECRET",
];
/// Default webhook port (`TELEGRAM_WEBHOOK_PORT`, `PORT`).
pub const DEFAULT_WEBHOOK_PORT: u16 = 8788;
/// The event an update describes; `None` for updates that are not a
/// person's message (edits, callbacks, bot senders, channel posts).
pub fn event_from_update(update: &Value) -> Option<ConnectorEvent> {
    let update_id = update.get("update_id")?.as_i64()?;
    let message = update.get("message")?;
    let chat = message.get("chat")?;
    let chat_id = identifier(chat.get("id")?)?;
    if message.pointer("/from/is_bot").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    let text_at = |value: &Value, key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .filter(|text| !text.is_empty())
            .map(str::to_string)
    };
    let mut properties = BTreeMap::from([
        ("update_id".to_string(), update_id.to_string()),
        ("chat_id".to_string(), chat_id.clone()),
    ]);
    let from = message.get("from");
    let optional = [
        ("chat_type", text_at(chat, "type")),
        ("chat_title", text_at(chat, "title")),
        ("chat_username", text_at(chat, "username")),
        (
            "message_id",
            message
                .get("message_id")
                .and_then(Value::as_i64)
                .map(|id| id.to_string()),
        ),
        (
            "date",
            message
                .get("date")
                .and_then(Value::as_i64)
                .map(|date| date.to_string()),
        ),
        ("from_id", from.and_then(|f| identifier(f.get("id")?))),
        ("from_username", from.and_then(|f| text_at(f, "username"))),
        (
            "from_first_name",
            from.and_then(|f| text_at(f, "first_name")),
        ),
        ("from_last_name", from.and_then(|f| text_at(f, "last_name"))),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            properties.insert(key.to_string(), value);
        }
    }
    let text = text_at(message, "text")
        .or_else(|| text_at(message, "caption"))
        .unwrap_or_default();
    Some(ConnectorEvent {
        name: EVENT_NAME.to_string(),
        message: ConnectorMessage::Text { text },
        properties,
        instance_key: Some(format!("telegram:{chat_id}")),
        delivery_id: Some(update_id.to_string()),
    })
}

/// How the long poll waits and retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollingOptions {
    /// `timeout` of each `getUpdates` (`TELEGRAM_POLL_TIMEOUT_SECONDS`, 30).
    pub poll_timeout: Duration,
    /// The bound on one whole call (`TELEGRAM_REQUEST_TIMEOUT_MS`, the
    /// poll timeout plus 5 s).
    pub request_timeout: Duration,
    /// The first wait after a failure (`TELEGRAM_RETRY_DELAY_MS`, 1000).
    pub retry_delay: Duration,
    /// The longest wait after failures (`TELEGRAM_RETRY_MAX_DELAY_MS`,
    /// 60000).
    pub max_retry_delay: Duration,
    /// The offset of the first call (`TELEGRAM_INITIAL_OFFSET`, 0: from
    /// the first unconfirmed update).
    pub initial_offset: i64,
}

impl PollingOptions {
    /// The wait after `failures` failures in a row (the first is 0).
    pub fn backoff(&self, failures: u32) -> Duration {
        goondan_types::backoff::Backoff::new(self.retry_delay, self.max_retry_delay).delay(failures)
    }
}

/// The long-polling source.
#[derive(Debug)]
pub struct TelegramPolling {
    api: TelegramApi,
    options: PollingOptions,
}

impl TelegramPolling {
    /// A source polling `api` with `options`.
    pub fn new(api: TelegramApi, options: PollingOptions) -> TelegramPolling {
        TelegramPolling { api, options }
    }

    async fn poll(self, emitter: Arc<dyn Emitter>, mut shutdown: Shutdown) {
        let options = self.options;
        let mut offset = options.initial_offset;
        let mut confirmed = offset;
        let mut failures = 0u32;
        'polling: loop {
            let call = self
                .api
                .get_updates(offset, options.poll_timeout, options.request_timeout);
            let answer = tokio::select! {
                answer = call => answer,
                () = shutdown.requested() => break 'polling,
            };
            let mut updates = match answer {
                Ok(updates) => {
                    // Telegram has seen this offset: what it confirms is
                    // gone from its queue.
                    confirmed = offset;
                    failures = 0;
                    updates
                }
                Err(error) => {
                    let wait = match &error {
                        TelegramError::RateLimited {
                            retry_after_seconds: Some(seconds),
                            ..
                        } => Duration::from_secs(*seconds),
                        _ => {
                            failures = failures.saturating_add(1);
                            options.backoff(failures - 1)
                        }
                    };
                    tracing::warn!(
                        connector = "telegram",
                        code = error.code(),
                        wait_ms = wait.as_millis() as u64,
                        "{error}"
                    );
                    if !shutdown.sleep(wait).await {
                        break 'polling;
                    }
                    continue;
                }
            };
            updates.sort_by_key(|update| update.get("update_id").and_then(Value::as_i64));
            for update in updates {
                let Some(update_id) = update.get("update_id").and_then(Value::as_i64) else {
                    tracing::warn!(
                        connector = "telegram",
                        "an update without update_id was skipped"
                    );
                    continue;
                };
                // Telegram never resends what an offset confirmed; a
                // server that does is not believed.
                if offset != 0 && update_id < offset {
                    continue;
                }
                let delivered = match crate::approvals::telegram::press_from_update(&update) {
                    Some(press) => {
                        deliver_press(emitter.as_ref(), press, &mut shutdown, "telegram").await
                    }
                    None => match event_from_update(&update) {
                        Some(event) => {
                            deliver(emitter.as_ref(), event, &mut shutdown, "telegram").await
                        }
                        None => Delivery::Accepted,
                    },
                };
                if delivered == Delivery::Stopped {
                    break 'polling;
                }
                offset = update_id + 1;
            }
        }
        if offset != confirmed {
            // Tell Telegram how far this run got, so the next does not
            // start over from an update already accepted.
            let confirm = self
                .api
                .get_updates(offset, Duration::ZERO, Duration::from_secs(5));
            if let Err(error) = confirm.await {
                tracing::warn!(
                    connector = "telegram",
                    code = error.code(),
                    "could not confirm offset {offset}: {error}"
                );
            }
        }
    }
}

impl Source for TelegramPolling {
    fn name(&self) -> &'static str {
        "telegram"
    }

    fn run(
        self: Box<Self>,
        emitter: Arc<dyn Emitter>,
        shutdown: Shutdown,
    ) -> BoxFuture<'static, ()> {
        Box::pin(self.poll(emitter, shutdown))
    }
}

/// The webhook platform. `Debug` never shows the secret token.
pub struct TelegramWebhook {
    secret_token: Option<String>,
}

impl fmt::Debug for TelegramWebhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelegramWebhook")
            .field("signed", &self.secret_token.is_some())
            .finish()
    }
}

impl TelegramWebhook {
    /// A platform checking `secret_token` (none: unsigned posts pass).
    pub fn new(secret_token: Option<String>) -> TelegramWebhook {
        TelegramWebhook { secret_token }
    }
}

impl Platform for TelegramWebhook {
    fn name(&self) -> &'static str {
        "telegram"
    }

    fn verify(&self, request: &PlatformRequest<'_>) -> Result<(), SignatureError> {
        match &self.secret_token {
            None => Ok(()),
            Some(secret) => {
                verify::telegram(secret, request.header("x-telegram-bot-api-secret-token"))
            }
        }
    }

    fn handle(&self, request: &PlatformRequest<'_>) -> Result<PlatformOutcome, BadRequest> {
        let update: Value = serde_json::from_slice(request.body)
            .map_err(|error| BadRequest(format!("the body is not JSON: {error}")))?;
        if update.get("update_id").and_then(Value::as_i64).is_none() {
            return Err(BadRequest(
                "the body is not a Telegram update (no update_id)".into(),
            ));
        }
        // An approval button is the approval desk's, never an agent's.
        if let Some(press) = crate::approvals::telegram::press_from_update(&update) {
            return Ok(PlatformOutcome::Press {
                press,
                reply: PlatformReply::json(json!({"ok": true})),
            });
        }
        Ok(match event_from_update(&update) {
            Some(event) => PlatformOutcome::Emit {
                event,
                reply: PlatformReply::json(json!({"ok": true})),
            },
            None => {
                PlatformOutcome::Reply(PlatformReply::json(json!({"ok": true, "ignored": true})))
            }
        })
    }
}

/// What a Connection's config makes of the connector.
#[derive(Debug)]
pub enum TelegramConnector {
    /// Long polling.
    Polling(TelegramPolling),
    /// A webhook behind the HTTP front.
    Webhook(TelegramWebhook, HttpFront),
}

impl TelegramConnector {
    /// The connector a Connection's config describes; `force_polling` for
    /// the `telegram-polling` entry.
    pub fn from_config(
        config: &ConnectorConfig,
        force_polling: bool,
    ) -> Result<TelegramConnector, ConnectorConfigError> {
        match mode(config).as_deref() {
            None | Some("polling") => polling_from_config(config).map(TelegramConnector::Polling),
            Some("webhook") if !force_polling => webhook_from_config(config),
            Some("webhook") => Err(ConnectorConfigError {
                key: MODE_KEY.into(),
                problem: "builtin:telegram-polling only polls".into(),
                help: "use builtin:telegram for webhook mode".into(),
            }),
            Some(other) => Err(ConnectorConfigError {
                key: MODE_KEY.into(),
                problem: format!("`{other}` is not a mode"),
                help: "use polling (the default) or webhook".into(),
            }),
        }
    }
}

/// The Connection setting that picks long polling or a webhook.
const MODE_KEY: &str = "TELEGRAM_MODE";

/// `TELEGRAM_MODE` as the connector reads it: trimmed and in lower case;
/// `None` when it is not set.
fn mode(config: &ConnectorConfig) -> Option<String> {
    config
        .setting(MODE_KEY)
        .map(|mode| mode.trim().to_ascii_lowercase())
}

/// Whether the Connection's config puts `builtin:telegram` in webhook
/// mode (a server Telegram posts to).
pub(crate) fn is_webhook_mode(config: &ConnectorConfig) -> bool {
    mode(config).as_deref() == Some("webhook")
}

fn polling_from_config(config: &ConnectorConfig) -> Result<TelegramPolling, ConnectorConfigError> {
    let api = TelegramApi::from_config(config, "long polling")?;
    let whole = |key: &str, default: u64| -> Result<u64, ConnectorConfigError> {
        match config.setting(key) {
            None => Ok(default),
            Some(text) => text.trim().parse().map_err(|_| ConnectorConfigError {
                key: key.to_string(),
                problem: format!("{text:?} is not a whole number"),
                help: format!("leave it out for the default, {default}"),
            }),
        }
    };
    let poll_timeout = Duration::from_secs(whole("TELEGRAM_POLL_TIMEOUT_SECONDS", 30)?);
    let request_timeout_ms = whole(
        "TELEGRAM_REQUEST_TIMEOUT_MS",
        (poll_timeout.as_secs() + 5) * 1000,
    )?;
    let initial_offset = match config.setting("TELEGRAM_INITIAL_OFFSET") {
        None => 0,
        Some(text) => text.trim().parse().map_err(|_| ConnectorConfigError {
            key: "TELEGRAM_INITIAL_OFFSET".into(),
            problem: format!("{text:?} is not a whole number"),
            help: "leave it out to start from the first unconfirmed update".into(),
        })?,
    };
    let options = PollingOptions {
        poll_timeout,
        request_timeout: Duration::from_millis(request_timeout_ms.max(1)),
        retry_delay: Duration::from_millis(whole("TELEGRAM_RETRY_DELAY_MS", 1000)?.max(1)),
        max_retry_delay: Duration::from_millis(whole("TELEGRAM_RETRY_MAX_DELAY_MS", 60_000)?),
        initial_offset,
    };
    Ok(TelegramPolling::new(api, options))
}

fn webhook_from_config(
    config: &ConnectorConfig,
) -> Result<TelegramConnector, ConnectorConfigError> {
    let front = HttpFront::from_config(
        config,
        &["TELEGRAM_WEBHOOK_PORT", "PORT"],
        DEFAULT_WEBHOOK_PORT,
        &["TELEGRAM_WEBHOOK_PATH", "WEBHOOK_PATH"],
        "/",
    )?;
    let secret = config
        .secret(&WEBHOOK_SECRET_KEYS)
        .map(|(_, value)| value.to_string());
    if secret.is_none() && !config.flag("ALLOW_UNSIGNED")? {
        return Err(ConnectorConfigError {
            key: "TELEGRAM_WEBHOOK_SECRET".into(),
            problem: "without a secret token anyone who finds the webhook can post updates".into(),
            help: "pass a secret_token to setWebhook and put it into secrets.TELEGRAM_WEBHOOK_SECRET, or set config.ALLOW_UNSIGNED: \"true\"".into(),
        });
    }
    Ok(TelegramConnector::Webhook(
        TelegramWebhook::new(secret),
        front,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_person_s_message_becomes_an_event_with_the_original_properties() {
        let event = event_from_update(&json!({
            "update_id": 9001,
            "message": {
                "message_id": 12, "date": 1_764_000_000,
                "chat": {"id": -100_123, "type": "supergroup", "title": "Ops"},
                "from": {"id": 42, "is_bot": false, "first_name": "Ann", "username": "ann"},
                "text": "deploy?"
            }
        }))
        .unwrap();
        assert_eq!(event.name, "telegram_message");
        assert_eq!(event.instance_key.as_deref(), Some("telegram:-100123"));
        assert_eq!(
            event.message,
            ConnectorMessage::Text {
                text: "deploy?".into()
            }
        );
        let expected: BTreeMap<String, String> = [
            ("update_id", "9001"),
            ("chat_id", "-100123"),
            ("chat_type", "supergroup"),
            ("chat_title", "Ops"),
            ("message_id", "12"),
            ("date", "1764000000"),
            ("from_id", "42"),
            ("from_username", "ann"),
            ("from_first_name", "Ann"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(event.properties, expected);

        let photo = event_from_update(
            &json!({"update_id": 1, "message": {"chat": {"id": 5}, "caption": "look"}}),
        )
        .unwrap();
        assert_eq!(
            photo.message,
            ConnectorMessage::Text {
                text: "look".into()
            }
        );
    }

    #[test]
    fn bots_edits_and_malformed_updates_are_skipped() {
        for update in [
            json!({"update_id": 1, "message": {"chat": {"id": 5}, "from": {"id": 9, "is_bot": true}, "text": "x"}}),
            json!({"update_id": 1, "edited_message": {"chat": {"id": 5}, "text": "x"}}),
            json!({"update_id": 1, "message": {"text": "no chat"}}),
            json!({"message": {"chat": {"id": 5}, "text": "no update id"}}),
        ] {
            assert_eq!(event_from_update(&update), None, "{update}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_ceiling() {
        let options = PollingOptions {
            poll_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(35),
            retry_delay: Duration::from_millis(500),
            max_retry_delay: Duration::from_secs(5),
            initial_offset: 0,
        };
        let waits: Vec<u128> = (0..6).map(|n| options.backoff(n).as_millis()).collect();
        assert_eq!(waits, [500, 1000, 2000, 4000, 5000, 5000]);
        assert_eq!(options.backoff(u32::MAX), Duration::from_secs(5));
    }

    #[test]
    fn config_needs_a_token_for_polling_and_a_secret_for_webhooks() {
        let mut config = ConnectorConfig::default();
        let error = TelegramConnector::from_config(&config, false).unwrap_err();
        assert_eq!(error.key, "TELEGRAM_BOT_TOKEN");
        config.secrets.insert("BOT_TOKEN", "123:abc-secret-token");
        assert!(matches!(
            TelegramConnector::from_config(&config, false),
            Ok(TelegramConnector::Polling(_))
        ));
        let polling = format!(
            "{:?}",
            TelegramConnector::from_config(&config, false).unwrap()
        );
        assert!(!polling.contains("abc-secret-token"), "{polling}");

        config
            .config
            .insert("TELEGRAM_MODE".into(), "webhook".into());
        let error = TelegramConnector::from_config(&config, false).unwrap_err();
        assert_eq!(error.key, "TELEGRAM_WEBHOOK_SECRET");
        assert!(TelegramConnector::from_config(&config, true).is_err());
        config
            .secrets
            .insert("TELEGRAM_WEBHOOK_SECRET", "s3cret-token");
        assert!(matches!(
            TelegramConnector::from_config(&config, false),
            Ok(TelegramConnector::Webhook(..))
        ));

        config
            .config
            .insert("TELEGRAM_MODE".into(), "carrier-pigeon".into());
        assert_eq!(
            TelegramConnector::from_config(&config, false)
                .unwrap_err()
                .key,
            "TELEGRAM_MODE"
        );
        config.config.remove("TELEGRAM_MODE");
        config
            .config
            .insert("TELEGRAM_API_BASE_URL".into(), "ftp://x".into());
        assert_eq!(
            TelegramConnector::from_config(&config, false)
                .unwrap_err()
                .key,
            "TELEGRAM_API_BASE_URL"
        );
    }
}
