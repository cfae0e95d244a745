//! The Telegram Bot API client: one bot's token and address, `getUpdates`
//! for the long poll, any method with a JSON body, and file downloads.
//!
//! The token is part of every Bot API URL, so no URL is ever put into an
//! error or a log, and every message that could hold the token is masked
//! (as `[REDACTED:TELEGRAM_BOT_TOKEN]`, or the marker the caller picks
//! with [`TelegramApi::masked_as`]).

use super::{exchange, millis, ChatHttp, Download, Failure, MAX_ANSWER_BYTES};
use crate::config::{ConnectorConfig, ConnectorConfigError};
use goondan_types::secret::mask_value;
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

/// The Bot API's address (`TELEGRAM_API_BASE_URL` overrides it).
pub const DEFAULT_API_BASE_URL: &str = "https://api.telegram.org";
/// The settings the bot token is read from, in order.
pub const TOKEN_KEYS: [&str; 3] = ["TELEGRAM_BOT_TOKEN", "BOT_TOKEN", "TELEGRAM_TOKEN"];
/// What stands for the token wherever it would have appeared, unless the
/// caller picks another marker.
const TOKEN_MARKER: &str = "[REDACTED:TELEGRAM_BOT_TOKEN]";
/// The method name a file download is reported under.
const FILE_DOWNLOAD: &str = "file download";

/// A failed Bot API call; its text never holds the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TelegramError {
    /// The request did not get an answer (connection refused, reset).
    #[error("E_TELEGRAM_TRANSPORT: {method} failed: {message}")]
    Transport {
        /// The Bot API method.
        method: &'static str,
        /// What the transport said, masked.
        message: String,
    },
    /// No answer within the call's deadline; a transport failure too.
    #[error("E_TELEGRAM_TRANSPORT: {method} timed out after {timeout_ms} ms")]
    Timeout {
        /// The Bot API method.
        method: &'static str,
        /// The deadline that passed.
        timeout_ms: u64,
    },
    /// Telegram asked to slow down.
    #[error("E_TELEGRAM_RATE_LIMITED: {method}: too many requests (retry after {retry_after_seconds:?} s)")]
    RateLimited {
        /// The Bot API method.
        method: &'static str,
        /// `parameters.retry_after`, when given.
        retry_after_seconds: Option<u64>,
    },
    /// Telegram answered with an error or something unreadable.
    #[error("E_TELEGRAM_API: {method}: HTTP {status}: {description}")]
    Api {
        /// The Bot API method.
        method: &'static str,
        /// The HTTP status.
        status: u16,
        /// Telegram's `description`, or what was wrong with the answer.
        description: String,
    },
    /// A file is larger than the download allows.
    #[error("E_TOO_LARGE: {method}: the file is {size} bytes, over the limit of {limit}")]
    TooLarge {
        /// `file download`.
        method: &'static str,
        /// Its size, or the bytes read before giving up.
        size: u64,
        /// The limit.
        limit: u64,
    },
}

impl TelegramError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            TelegramError::Transport { .. } | TelegramError::Timeout { .. } => {
                "E_TELEGRAM_TRANSPORT"
            }
            TelegramError::RateLimited { .. } => "E_TELEGRAM_RATE_LIMITED",
            TelegramError::Api { .. } => "E_TELEGRAM_API",
            TelegramError::TooLarge { .. } => "E_TOO_LARGE",
        }
    }
}

/// A Bot API client for one bot. `Debug` never shows the token.
#[derive(Clone)]
pub struct TelegramApi {
    http: ChatHttp,
    base_url: String,
    token: String,
    marker: &'static str,
}

impl fmt::Debug for TelegramApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelegramApi")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl TelegramApi {
    /// A client for `token` at `base_url` (no trailing slash needed),
    /// with a connection pool of its own.
    pub fn new(base_url: &str, token: &str) -> Result<TelegramApi, TelegramError> {
        let http = ChatHttp::new(concat!("goondan-connector/", env!("CARGO_PKG_VERSION")))
            .map_err(|error| TelegramError::Transport {
                method: "client",
                message: error.to_string(),
            })?;
        Ok(TelegramApi::with_http(http, base_url, token))
    }

    /// A client for `token` at `base_url` calling through `http`.
    pub fn with_http(http: ChatHttp, base_url: &str, token: &str) -> TelegramApi {
        TelegramApi {
            http,
            base_url: base_url.trim_end_matches('/').to_string(),
            token: token.to_string(),
            marker: TOKEN_MARKER,
        }
    }

    /// The same client, masking the token as `marker`.
    pub fn masked_as(mut self, marker: &'static str) -> TelegramApi {
        self.marker = marker;
        self
    }

    /// The client a Connection's config describes: its token
    /// (`TELEGRAM_BOT_TOKEN` or an alias) and address
    /// (`TELEGRAM_API_BASE_URL`); `purpose` says what needs the token,
    /// for the error when there is none.
    pub fn from_config(
        config: &ConnectorConfig,
        purpose: &str,
    ) -> Result<TelegramApi, ConnectorConfigError> {
        let token = TOKEN_KEYS
            .iter()
            .find_map(|key| config.setting(key))
            .ok_or_else(|| ConnectorConfigError {
                key: "TELEGRAM_BOT_TOKEN".into(),
                problem: format!("{purpose} needs the bot's token"),
                help:
                    "put the token BotFather gave into secrets.TELEGRAM_BOT_TOKEN (valueFrom.env)"
                        .into(),
            })?;
        let base_url = config
            .setting("TELEGRAM_API_BASE_URL")
            .unwrap_or(DEFAULT_API_BASE_URL)
            .trim();
        match url::Url::parse(base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            _ => {
                return Err(ConnectorConfigError {
                    key: "TELEGRAM_API_BASE_URL".into(),
                    problem: format!("`{base_url}` is not an http or https URL"),
                    help: format!("leave it out for {DEFAULT_API_BASE_URL}"),
                })
            }
        }
        TelegramApi::new(base_url, token).map_err(|error| ConnectorConfigError {
            key: "TELEGRAM_API_BASE_URL".into(),
            problem: error.to_string(),
            help: "check the machine's TLS setup".into(),
        })
    }

    /// `text` with the token masked.
    pub fn mask<'t>(&self, text: &'t str) -> Cow<'t, str> {
        mask_value(text, &self.token, self.marker)
    }

    /// The address of a file (`file_path` from `getFile`), with the token
    /// masked: what may be shown of it.
    pub fn masked_file_url(&self, file_path: &str) -> String {
        self.mask(&self.file_url(file_path)).into_owned()
    }

    fn file_url(&self, file_path: &str) -> String {
        format!("{}/file/bot{}/{file_path}", self.base_url, self.token)
    }

    /// `getUpdates` from `offset` (left out when 0), long-polling up to
    /// `poll_timeout`; the whole call is bounded by `request_timeout`.
    pub async fn get_updates(
        &self,
        offset: i64,
        poll_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Vec<Value>, TelegramError> {
        const METHOD: &str = "getUpdates";
        let mut url = format!(
            "{}/bot{}/{METHOD}?timeout={}",
            self.base_url,
            self.token,
            poll_timeout.as_secs()
        );
        if offset != 0 {
            url.push_str(&format!("&offset={offset}"));
        }
        let request = self.http.client.get(url);
        match self.api_call(METHOD, request, request_timeout).await? {
            (Value::Array(updates), _) => Ok(updates),
            (_, status) => Err(TelegramError::Api {
                method: METHOD,
                status,
                description: "the answer's result is not a list of updates".into(),
            }),
        }
    }

    /// Calls `method` with the JSON `body` and returns its `result`; the
    /// whole call is bounded by `timeout`.
    pub async fn call(
        &self,
        method: &'static str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, TelegramError> {
        let url = format!("{}/bot{}/{method}", self.base_url, self.token);
        let request = self.http.client.post(url).json(body);
        let (result, _status) = self.api_call(method, request, timeout).await?;
        Ok(result)
    }

    /// Fetches a file (`file_path` from `getFile`) of at most `max_bytes`,
    /// all within `timeout`.
    pub async fn download_file(
        &self,
        file_path: &str,
        max_bytes: u64,
        timeout: Duration,
    ) -> Result<Download, TelegramError> {
        let request = self.http.client.get(self.file_url(file_path));
        let answer = exchange(request, timeout, max_bytes)
            .await
            .map_err(|failure| self.failure(FILE_DOWNLOAD, failure))?;
        if !answer.status.is_success() {
            return Err(TelegramError::Api {
                method: FILE_DOWNLOAD,
                status: answer.status.as_u16(),
                description: format!("HTTP {}", answer.status),
            });
        }
        Ok(Download {
            content_type: answer.content_type(),
            body: answer.body,
        })
    }

    /// Sends a Bot API request; its `result` and the HTTP status.
    async fn api_call(
        &self,
        method: &'static str,
        request: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<(Value, u16), TelegramError> {
        let answer = match exchange(request, timeout, MAX_ANSWER_BYTES).await {
            Ok(answer) => answer,
            Err(Failure::TooLarge { status, limit, .. }) => {
                return Err(TelegramError::Api {
                    method,
                    status,
                    description: format!("the answer is over {limit} bytes"),
                })
            }
            Err(failure) => return Err(self.failure(method, failure)),
        };
        let status = answer.status.as_u16();
        Ok((self.result(method, status, &answer.body)?, status))
    }

    /// The error of an exchange that got no answer.
    fn failure(&self, method: &'static str, failure: Failure) -> TelegramError {
        match failure {
            Failure::Transport(message) => TelegramError::Transport {
                method,
                message: self.mask(&message).into_owned(),
            },
            Failure::Timeout(timeout) => TelegramError::Timeout {
                method,
                timeout_ms: millis(timeout),
            },
            Failure::TooLarge { size, limit, .. } => TelegramError::TooLarge {
                method,
                size,
                limit,
            },
        }
    }

    /// The `result` of a Bot API answer, or why there is none.
    fn result(
        &self,
        method: &'static str,
        status: u16,
        body: &[u8],
    ) -> Result<Value, TelegramError> {
        let answer: Option<Value> = serde_json::from_slice(body).ok();
        let field = |pointer: &str| answer.as_ref().and_then(|a| a.pointer(pointer));
        let ok = field("/ok").and_then(Value::as_bool) == Some(true);
        if ok && (200..300).contains(&status) {
            return Ok(field("/result").cloned().unwrap_or(Value::Null));
        }
        if status == 429 || field("/error_code").and_then(Value::as_u64) == Some(429) {
            return Err(TelegramError::RateLimited {
                method,
                retry_after_seconds: field("/parameters/retry_after").and_then(Value::as_u64),
            });
        }
        let description = field("/description").and_then(Value::as_str).map_or_else(
            || {
                if answer.is_some() {
                    "the answer is not ok".to_string()
                } else {
                    "the answer is not JSON".to_string()
                }
            },
            str::to_string,
        );
        Err(TelegramError::Api {
            method,
            status,
            description: self.mask(&description).into_owned(),
        })
    }
}

/// A chat or user id, which Telegram sends as a number.
pub fn identifier(value: &Value) -> Option<String> {
    match value {
        Value::Number(number) => number.as_i64().map(|id| id.to_string()),
        Value::String(text) if !text.is_empty() => Some(text.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn transport_errors_never_show_the_token() {
        // A port nothing listens on: bind one, note it, close it.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let token = "424242:AAE-very-secret-token";
        let api = TelegramApi::new(&format!("http://{address}"), token).unwrap();
        let error = api
            .get_updates(7, Duration::ZERO, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(error.code(), "E_TELEGRAM_TRANSPORT");
        let shown = format!("{error} {error:?} {api:?}");
        assert!(!shown.contains("very-secret"), "{shown}");
        assert_eq!(
            api.mask(&format!("http://x/bot{token}/getUpdates")),
            "http://x/bot[REDACTED:TELEGRAM_BOT_TOKEN]/getUpdates"
        );
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_is_a_transport_timeout() {
        // A listener that accepts and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                open.push(stream);
            }
        });
        let api = TelegramApi::new(&format!("http://{address}"), "1:secret-token-value").unwrap();
        let error = api
            .call(
                "sendMessage",
                &serde_json::json!({}),
                Duration::from_millis(50),
            )
            .await
            .unwrap_err();
        assert_eq!(
            error,
            TelegramError::Timeout {
                method: "sendMessage",
                timeout_ms: 50
            }
        );
        assert_eq!(error.code(), "E_TELEGRAM_TRANSPORT");
        held.abort();
    }
}
