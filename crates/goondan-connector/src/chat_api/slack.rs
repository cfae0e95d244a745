//! The Slack Web API client: one app's bot token and address, any method
//! with a JSON body or (for the read methods, which Slack does not take
//! as JSON) a form, and downloads of a file URL with the token.
//!
//! The token travels only in the `Authorization` header and is masked in
//! every message (as `[REDACTED:SLACK_BOT_TOKEN]`, or the marker the
//! caller picks with [`SlackApi::masked_as`]). Which hosts a download may
//! send it to is the caller's to check.

use super::{exchange, millis, ChatHttp, Download, Failure, MAX_ANSWER_BYTES};
use crate::config::{ConnectorConfig, ConnectorConfigError};
use goondan_types::secret::mask_value;
use serde_json::{Map, Value};
use std::fmt;
use std::time::Duration;

/// The Web API's address (`SLACK_API_BASE_URL` overrides it).
pub const DEFAULT_API_BASE_URL: &str = "https://slack.com/api";
/// The settings the bot token is read from, in order.
pub const TOKEN_KEYS: [&str; 3] = ["SLACK_BOT_TOKEN", "SLACK_TOKEN", "BRAIN_SLACK_BOT_TOKEN"];
/// What stands for the token wherever it would have appeared, unless the
/// caller picks another marker.
const TOKEN_MARKER: &str = "[REDACTED:SLACK_BOT_TOKEN]";
/// The method name a file download is reported under.
const FILE_DOWNLOAD: &str = "file download";

/// A failed Web API call; its text never holds the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlackError {
    /// The request did not get an answer.
    #[error("E_SLACK_TRANSPORT: {method} failed: {message}")]
    Transport {
        /// The Web API method.
        method: &'static str,
        /// What the transport said, masked.
        message: String,
    },
    /// No answer within the call's deadline; a transport failure too.
    #[error("E_SLACK_TRANSPORT: {method} timed out after {timeout_ms} ms")]
    Timeout {
        /// The Web API method.
        method: &'static str,
        /// The deadline that passed.
        timeout_ms: u64,
    },
    /// Slack asked to slow down.
    #[error(
        "E_SLACK_RATE_LIMITED: {method}: too many requests (retry after {retry_after_seconds:?} s)"
    )]
    RateLimited {
        /// The Web API method.
        method: &'static str,
        /// `Retry-After`, when given.
        retry_after_seconds: Option<u64>,
    },
    /// Slack answered `ok: false`, or something unreadable.
    #[error("E_SLACK_API: {method}: HTTP {status}: {error}")]
    Api {
        /// The Web API method.
        method: &'static str,
        /// The HTTP status.
        status: u16,
        /// Slack's `error`, or what was wrong with the answer.
        error: String,
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

impl SlackError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            SlackError::Transport { .. } | SlackError::Timeout { .. } => "E_SLACK_TRANSPORT",
            SlackError::RateLimited { .. } => "E_SLACK_RATE_LIMITED",
            SlackError::Api { .. } => "E_SLACK_API",
            SlackError::TooLarge { .. } => "E_TOO_LARGE",
        }
    }
}

/// A Web API client for one bot. `Debug` never shows the token.
#[derive(Clone)]
pub struct SlackApi {
    http: ChatHttp,
    base_url: String,
    token: String,
    marker: &'static str,
}

impl fmt::Debug for SlackApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlackApi")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl SlackApi {
    /// A client for `token` at `base_url` (no trailing slash needed)
    /// calling through `http`.
    pub fn with_http(http: ChatHttp, base_url: &str, token: &str) -> SlackApi {
        SlackApi {
            http,
            base_url: base_url.trim_end_matches('/').to_string(),
            token: token.to_string(),
            marker: TOKEN_MARKER,
        }
    }

    /// The same client, masking the token as `marker`.
    pub fn masked_as(mut self, marker: &'static str) -> SlackApi {
        self.marker = marker;
        self
    }

    /// The client a Connection's config describes.
    pub fn from_config(config: &ConnectorConfig) -> Result<SlackApi, ConnectorConfigError> {
        let token = TOKEN_KEYS
            .iter()
            .find_map(|key| config.setting(key))
            .ok_or_else(|| ConnectorConfigError {
                key: "SLACK_BOT_TOKEN".into(),
                problem: "posting approval requests needs the app's bot token".into(),
                help: "copy the Bot User OAuth Token (xoxb-…, scope chat:write) into secrets.SLACK_BOT_TOKEN (valueFrom.env)".into(),
            })?;
        let base_url = config
            .setting("SLACK_API_BASE_URL")
            .unwrap_or(DEFAULT_API_BASE_URL)
            .trim();
        match url::Url::parse(base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            _ => {
                return Err(ConnectorConfigError {
                    key: "SLACK_API_BASE_URL".into(),
                    problem: format!("`{base_url}` is not an http or https URL"),
                    help: format!("leave it out for {DEFAULT_API_BASE_URL}"),
                })
            }
        }
        let http = ChatHttp::new(concat!("goondan-connector/", env!("CARGO_PKG_VERSION")))
            .map_err(|error| ConnectorConfigError {
                key: "SLACK_API_BASE_URL".into(),
                problem: error.to_string(),
                help: "check the machine's TLS setup".into(),
            })?;
        Ok(SlackApi::with_http(http, base_url, token))
    }

    /// `text` with the token masked.
    pub fn mask(&self, text: &str) -> String {
        mask_value(text, &self.token, self.marker).into_owned()
    }

    /// Calls `method` with the JSON `body`; the answer when `ok`. The
    /// whole call is bounded by `timeout`.
    pub async fn call(
        &self,
        method: &'static str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, SlackError> {
        let request = self
            .request(method)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/json; charset=utf-8",
            )
            .body(body.to_string());
        self.api_call(method, request, timeout).await
    }

    /// Calls `method` with `fields` as a form (a string as it is, any
    /// other value as its JSON); the answer when `ok`.
    pub async fn call_form(
        &self,
        method: &'static str,
        fields: &Map<String, Value>,
        timeout: Duration,
    ) -> Result<Value, SlackError> {
        let request = self
            .request(method)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form(fields));
        self.api_call(method, request, timeout).await
    }

    /// Fetches `url` (a file's `url_private`) with the token, at most
    /// `max_bytes`, all within `timeout`. The caller checks that `url` is
    /// one the token may go to.
    pub async fn download(
        &self,
        url: &url::Url,
        max_bytes: u64,
        timeout: Duration,
    ) -> Result<Download, SlackError> {
        let request = self.http.client.get(url.as_str()).bearer_auth(&self.token);
        let answer = exchange(request, timeout, max_bytes)
            .await
            .map_err(|failure| self.failure(FILE_DOWNLOAD, failure))?;
        if !answer.status.is_success() {
            return Err(SlackError::Api {
                method: FILE_DOWNLOAD,
                status: answer.status.as_u16(),
                error: format!("HTTP {}", answer.status),
            });
        }
        Ok(Download {
            content_type: answer.content_type(),
            body: answer.body,
        })
    }

    fn request(&self, method: &str) -> reqwest::RequestBuilder {
        self.http
            .client
            .post(format!("{}/{method}", self.base_url))
            .bearer_auth(&self.token)
    }

    /// Sends a Web API request; the answer when `ok`.
    async fn api_call(
        &self,
        method: &'static str,
        request: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<Value, SlackError> {
        let answer = match exchange(request, timeout, MAX_ANSWER_BYTES).await {
            Ok(answer) => answer,
            Err(Failure::TooLarge { status, limit, .. }) => {
                return Err(SlackError::Api {
                    method,
                    status,
                    error: format!("the answer is over {limit} bytes"),
                })
            }
            Err(failure) => return Err(self.failure(method, failure)),
        };
        let status = answer.status.as_u16();
        if status == 429 {
            let retry_after_seconds = answer
                .headers
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|value| value.to_str().ok()?.trim().parse().ok());
            return Err(SlackError::RateLimited {
                method,
                retry_after_seconds,
            });
        }
        match serde_json::from_slice::<Value>(&answer.body).ok() {
            Some(answer)
                if (200..300).contains(&status)
                    && answer.get("ok").and_then(Value::as_bool) == Some(true) =>
            {
                Ok(answer)
            }
            Some(answer) => Err(SlackError::Api {
                method,
                status,
                error: self.mask(
                    answer
                        .get("error")
                        .and_then(Value::as_str)
                        .unwrap_or("the answer is not ok"),
                ),
            }),
            None => Err(SlackError::Api {
                method,
                status,
                error: "the answer is not JSON".into(),
            }),
        }
    }

    /// The error of an exchange that got no answer.
    fn failure(&self, method: &'static str, failure: Failure) -> SlackError {
        match failure {
            Failure::Transport(message) => SlackError::Transport {
                method,
                message: self.mask(&message),
            },
            Failure::Timeout(timeout) => SlackError::Timeout {
                method,
                timeout_ms: millis(timeout),
            },
            Failure::TooLarge { size, limit, .. } => SlackError::TooLarge {
                method,
                size,
                limit,
            },
        }
    }
}

/// `fields` as a form body: a string as it is, any other value as its
/// JSON.
fn form(fields: &Map<String, Value>) -> String {
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in fields {
        match value {
            Value::String(text) => form.append_pair(key, text),
            other => form.append_pair(key, &other.to_string()),
        };
    }
    form.finish()
}
