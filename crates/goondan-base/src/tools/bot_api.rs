//! What the chat tools ([`telegram`](super::telegram) and
//! [`slack`](super::slack)) share: where their calls go and with which
//! token, one connection pool, and the file results of their
//! `download-file` exports. The API methods and their payloads are each
//! tool's own; the HTTP calls themselves (deadlines, bounded reads, the
//! platforms' answers and errors) are the workspace's one Telegram and
//! one Slack client, `goondan_connector::chat_api`.
//!
//! # Where the token goes
//!
//! The operator's bot token (from [`BotApiConfig`], else the environment:
//! `TELEGRAM_BOT_TOKEN`, `SLACK_BOT_TOKEN` and their aliases) is only ever
//! sent to the operator's API address (`TELEGRAM_API_BASE_URL`,
//! `SLACK_API_BASE_URL`, else the platform's). A call may name another
//! `apiBaseUrl`, as the original allows, but then it must bring its own
//! `token`, and the address must not be internal (loopback, private,
//! link-local, metadata), checked as `http-fetch` checks its hops. So a
//! model cannot send the operator's token somewhere else, nor use a chat
//! tool to reach what `http-fetch` refuses.
//!
//! The token is part of Telegram's URLs, so no URL or transport error
//! leaves the clients unmasked (as `[REDACTED:token]`: the token may be
//! the call's own).

use crate::error::BuiltinToolError;
use crate::tools::http_fetch::blocked_category;
use crate::tools::workdir::Workdir;
use base64::Engine as _;
use goondan_connector::chat_api::slack::SlackApi;
use goondan_connector::chat_api::telegram::TelegramApi;
use goondan_connector::chat_api::{ChatHttp, ChatHttpError, Download};
use goondan_types::{JsonObject, JsonValue, Secrets};
use reqwest::Url;
use std::fmt;
use std::net::IpAddr;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

/// The default timeout of one call (`timeoutMs`), as in the original.
pub(crate) const DEFAULT_TIMEOUT_MS: u64 = 15_000;
/// The default and largest `maxBytes` of a download.
pub(crate) const DEFAULT_MAX_DOWNLOAD_BYTES: u64 = 3_000_000;
/// The largest `maxBytes` a call may ask for.
pub(crate) const MAX_DOWNLOAD_BYTES: u64 = 20_000_000;
/// What stands for the token in every message.
const TOKEN_MARKER: &str = "[REDACTED:token]";

/// Where a chat tool calls and with which token, as the operator sets
/// them; unset fields are read from the environment when the tool is
/// built. `Debug` never shows the token.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct BotApiConfig {
    /// The API's base URL.
    pub api_base_url: Option<String>,
    /// The bot token.
    pub token: Option<String>,
}

impl fmt::Debug for BotApiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BotApiConfig")
            .field("api_base_url", &self.api_base_url)
            .field("token", &self.token.as_ref().map(|_| TOKEN_MARKER))
            .finish()
    }
}

impl BotApiConfig {
    /// `self` with unset fields taken from `base_var` and the first set of
    /// `token_vars`, each read from `secrets` (the operator's, from the
    /// agent's spawn handshake), else from the environment.
    pub(crate) fn with_variables(
        mut self,
        secrets: &Secrets,
        base_var: &str,
        token_vars: &[&str],
    ) -> Self {
        let read = |name: &str| {
            secrets
                .get(name)
                .map(str::to_string)
                .or_else(|| std::env::var(name).ok())
                .filter(|value| !value.is_empty())
        };
        if self.api_base_url.is_none() {
            self.api_base_url = read(base_var);
        }
        if self.token.is_none() {
            self.token = token_vars.iter().find_map(|name| read(name));
        }
        self
    }
}

/// Where one call goes, with which token, and how long it may take.
pub(crate) struct Credentials {
    pub(crate) base_url: String,
    pub(crate) token: String,
    /// From the call's `timeoutMs` (default [`DEFAULT_TIMEOUT_MS`]).
    pub(crate) timeout: Duration,
}

/// One platform's client: its operator config and a connection pool.
pub(crate) struct BotClient {
    /// How the platform's env variables are named, for messages.
    pub(crate) token_vars: &'static [&'static str],
    default_base_url: &'static str,
    config: BotApiConfig,
    http: OnceLock<Result<ChatHttp, ChatHttpError>>,
}

impl BotClient {
    pub(crate) fn new(
        default_base_url: &'static str,
        base_var: &str,
        token_vars: &'static [&'static str],
        config: BotApiConfig,
        secrets: &Secrets,
    ) -> BotClient {
        BotClient {
            token_vars,
            default_base_url,
            config: config.with_variables(secrets, base_var, token_vars),
            http: OnceLock::new(),
        }
    }

    /// The operator's base URL.
    pub(crate) fn operator_base_url(&self) -> &str {
        self.config
            .api_base_url
            .as_deref()
            .unwrap_or(self.default_base_url)
    }

    /// Where one call goes, with which token (see the module docs) and
    /// within which timeout (`timeout_ms`).
    pub(crate) async fn credentials(
        &self,
        tool: &str,
        token: Option<&str>,
        api_base_url: Option<&str>,
        timeout_ms: Option<u64>,
    ) -> Result<Credentials, BuiltinToolError> {
        let timeout = timeout(tool, timeout_ms)?;
        let token = token.map(str::trim).filter(|token| !token.is_empty());
        let base_url = match api_base_url.map(str::trim).filter(|url| !url.is_empty()) {
            None => self.operator_base_url().to_string(),
            Some(url) => {
                if token.is_none() {
                    return Err(BuiltinToolError::BotTokenMissing {
                        tool: tool.to_string(),
                        reason: "a call that sets its own apiBaseUrl must pass its own `token`; the operator's token only goes to the operator's API address".into(),
                    });
                }
                check_public(tool, url).await?;
                url.to_string()
            }
        };
        let token = token
            .map(str::to_string)
            .or_else(|| self.config.token.clone())
            .ok_or_else(|| BuiltinToolError::BotTokenMissing {
                tool: tool.to_string(),
                reason: format!(
                    "pass `token` or set {} in the agent's environment",
                    self.token_vars.join(", ")
                ),
            })?;
        Ok(Credentials {
            base_url: base_url.trim_end_matches('/').to_string(),
            token,
            timeout,
        })
    }

    /// The Bot API client for one call's credentials.
    pub(crate) fn telegram(
        &self,
        credentials: &Credentials,
    ) -> Result<TelegramApi, BuiltinToolError> {
        Ok(TelegramApi::with_http(
            self.http(credentials)?,
            &credentials.base_url,
            &credentials.token,
        )
        .masked_as(TOKEN_MARKER))
    }

    /// The Web API client for one call's credentials.
    pub(crate) fn slack(&self, credentials: &Credentials) -> Result<SlackApi, BuiltinToolError> {
        Ok(SlackApi::with_http(
            self.http(credentials)?,
            &credentials.base_url,
            &credentials.token,
        )
        .masked_as(TOKEN_MARKER))
    }

    /// The shared connection pool, built on first use.
    fn http(&self, credentials: &Credentials) -> Result<ChatHttp, BuiltinToolError> {
        self.http
            .get_or_init(|| ChatHttp::new(concat!("goondan-base/", env!("CARGO_PKG_VERSION"))))
            .clone()
            .map_err(|error| BuiltinToolError::HttpRequest {
                method: "POST",
                url: credentials.base_url.clone(),
                message: error.to_string(),
            })
    }
}

/// Refuses a model-supplied base URL that is not http(s) or leads to an
/// internal address.
async fn check_public(tool: &str, text: &str) -> Result<(), BuiltinToolError> {
    let url = Url::parse(text).map_err(|error| BuiltinToolError::InvalidUrl {
        url: text.to_string(),
        message: error.to_string(),
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(BuiltinToolError::UnsupportedScheme {
            url: text.to_string(),
            scheme: url.scheme().to_string(),
        });
    }
    let host = url
        .host_str()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let addresses: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(address) => vec![address],
        Err(_) => {
            tokio::net::lookup_host((host.as_str(), url.port_or_known_default().unwrap_or(443)))
                .await
                .map_err(|error| BuiltinToolError::HttpRequest {
                    method: "POST",
                    url: text.to_string(),
                    message: format!("cannot resolve {host}: {error}"),
                })?
                .map(|address| address.ip())
                .collect()
        }
    };
    for address in addresses {
        if let Some(category) = blocked_category(address) {
            return Err(BuiltinToolError::BotApiBlocked {
                tool: tool.to_string(),
                url: text.to_string(),
                address: address.to_string(),
                category,
            });
        }
    }
    Ok(())
}

/// A timeout from `timeoutMs` (default [`DEFAULT_TIMEOUT_MS`]).
fn timeout(tool: &str, requested: Option<u64>) -> Result<Duration, BuiltinToolError> {
    match requested.unwrap_or(DEFAULT_TIMEOUT_MS) {
        0 => Err(crate::args::invalid(tool, "`timeoutMs` must be at least 1")),
        millis => Ok(Duration::from_millis(millis)),
    }
}

/// `maxBytes` of a download, within its bounds.
pub(crate) fn max_download_bytes(
    tool: &str,
    requested: Option<u64>,
) -> Result<u64, BuiltinToolError> {
    match requested.unwrap_or(DEFAULT_MAX_DOWNLOAD_BYTES) {
        bytes @ 1..=MAX_DOWNLOAD_BYTES => Ok(bytes),
        _ => Err(crate::args::invalid(
            tool,
            format!("`maxBytes` must be between 1 and {MAX_DOWNLOAD_BYTES}"),
        )),
    }
}

/// How a download is returned.
pub(crate) struct FileOutput<'a> {
    pub(crate) include_base64: bool,
    pub(crate) include_data_url: bool,
    pub(crate) save_path: Option<&'a str>,
}

impl<'a> FileOutput<'a> {
    /// What a download call's arguments ask for: base64 and a data URL
    /// unless turned off, saved under `savePath` (or its alias
    /// `outputPath`) when given.
    pub(crate) fn from_args(
        include_base64: Option<bool>,
        include_data_url: Option<bool>,
        save_path: Option<&'a str>,
        output_path: Option<&'a str>,
    ) -> Self {
        FileOutput {
            include_base64: include_base64.unwrap_or(true),
            include_data_url: include_data_url.unwrap_or(true),
            save_path: save_path.or(output_path),
        }
    }
}

/// Adds a downloaded file's fields to `result`: `contentType`,
/// `sizeBytes`, `savedPath` (written under the workdir), `base64`,
/// `dataUrl`.
pub(crate) async fn add_file_fields(
    result: &mut JsonObject,
    workdir: &Path,
    answer: Download,
    output: FileOutput<'_>,
) -> Result<(), BuiltinToolError> {
    let content_type = answer.content_type;
    let saved_path = match output.save_path.map(str::trim).filter(|p| !p.is_empty()) {
        None => None,
        Some(requested) => {
            let workdir = workdir.to_path_buf();
            let requested_path = workdir.join(requested);
            let requested = requested.to_string();
            let bytes = answer.body.clone();
            let saved = tokio::task::spawn_blocking(move || {
                let target = Workdir::open(&workdir, false)?.resolve(&requested)?;
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(|source| {
                        BuiltinToolError::io("create directory", parent.to_path_buf(), source)
                    })?;
                }
                std::fs::write(&target, &bytes)
                    .map_err(|source| BuiltinToolError::io("write", target.clone(), source))?;
                Ok::<_, BuiltinToolError>(target)
            })
            .await
            .map_err(|error| BuiltinToolError::Io {
                operation: "write",
                path: requested_path,
                source: std::io::Error::other(error.to_string()),
            })??;
            Some(saved.display().to_string())
        }
    };
    let encoded = output
        .include_base64
        .then(|| base64::engine::general_purpose::STANDARD.encode(&answer.body));
    let data_url = match (&encoded, &content_type) {
        (Some(encoded), Some(content_type))
            if output.include_data_url && !answer.body.is_empty() =>
        {
            Some(format!("data:{content_type};base64,{encoded}"))
        }
        _ => None,
    };
    result.insert("contentType".into(), content_type.into());
    result.insert("sizeBytes".into(), (answer.body.len() as u64).into());
    result.insert("savedPath".into(), saved_path.into());
    result.insert("base64".into(), encoded.into());
    result.insert("dataUrl".into(), data_url.into());
    Ok(())
}

/// Reads a chat id: a non-empty string or an integer.
pub(crate) fn chat_id(
    tool: &str,
    field: &str,
    value: &JsonValue,
) -> Result<String, BuiltinToolError> {
    match value {
        JsonValue::String(text) if !text.trim().is_empty() => Ok(text.trim().to_string()),
        JsonValue::Number(number) if number.is_i64() => Ok(number.to_string()),
        _ => Err(crate::args::invalid(
            tool,
            format!("`{field}` must be a non-empty string or an integer"),
        )),
    }
}

/// Reads a positive integer given as a number or as digits.
pub(crate) fn positive_integer(
    tool: &str,
    field: &str,
    value: &JsonValue,
) -> Result<i64, BuiltinToolError> {
    let parsed = match value {
        JsonValue::Number(number) => number.as_i64().or_else(|| {
            number
                .as_f64()
                .filter(|f| f.fract() == 0.0)
                .map(|f| f as i64)
        }),
        JsonValue::String(text) => text.trim().parse::<i64>().ok(),
        _ => None,
    };
    parsed
        .filter(|n| *n > 0)
        .ok_or_else(|| crate::args::invalid(tool, format!("`{field}` must be a positive integer")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(config: BotApiConfig) -> BotClient {
        BotClient::new(
            "https://api.example.org",
            "GOONDAN_TEST_UNSET_BASE",
            &["GOONDAN_TEST_UNSET_TOKEN"],
            config,
            &Secrets::new(),
        )
    }

    #[tokio::test]
    async fn the_operator_token_and_address_come_from_the_handshake_secrets() {
        let secrets: Secrets = [
            ("GOONDAN_TEST_SECRET_TOKEN", "handshake-token-998877"),
            ("GOONDAN_TEST_SECRET_BASE", "https://bots.example.org"),
        ]
        .into_iter()
        .collect();
        let operator = BotClient::new(
            "https://api.example.org",
            "GOONDAN_TEST_SECRET_BASE",
            &["GOONDAN_TEST_UNSET_TOKEN", "GOONDAN_TEST_SECRET_TOKEN"],
            BotApiConfig::default(),
            &secrets,
        );
        let credentials = operator
            .credentials("t__send", None, None, None)
            .await
            .unwrap();
        assert_eq!(credentials.token, "handshake-token-998877");
        assert_eq!(
            credentials.timeout,
            Duration::from_millis(DEFAULT_TIMEOUT_MS)
        );
        let quick = operator
            .credentials("t__send", None, None, Some(250))
            .await
            .unwrap();
        assert_eq!(quick.timeout, Duration::from_millis(250));
        let refused = operator
            .credentials("t__send", None, None, Some(0))
            .await
            .err()
            .unwrap();
        assert_eq!(refused.code(), "E_TOOL_INVALID_ARGS");
        assert_eq!(credentials.base_url, "https://bots.example.org");
    }

    #[tokio::test]
    async fn the_operator_token_only_goes_to_the_operator_address() {
        let operator = client(BotApiConfig {
            api_base_url: None,
            token: Some("operator-token-123456".into()),
        });
        let plain = operator
            .credentials("t__send", None, None, None)
            .await
            .unwrap();
        assert_eq!(plain.base_url, "https://api.example.org");
        assert_eq!(plain.token, "operator-token-123456");

        let own = operator
            .credentials("t__send", Some("my-token"), None, None)
            .await
            .unwrap();
        assert_eq!(own.token, "my-token");

        let stolen = operator
            .credentials("t__send", None, Some("https://attacker.example/"), None)
            .await
            .err()
            .unwrap();
        assert_eq!(stolen.code(), "E_BOT_TOKEN_MISSING");

        for internal in [
            "http://127.0.0.1:9/",
            "http://169.254.169.254",
            "http://[::1]:80",
        ] {
            let error = operator
                .credentials("t__send", Some("my-token"), Some(internal), None)
                .await
                .err()
                .unwrap();
            assert_eq!(error.code(), "E_BOT_API_BLOCKED", "{internal}");
        }
        let scheme = operator
            .credentials("t__send", Some("my-token"), Some("file:///etc"), None)
            .await
            .err()
            .unwrap();
        assert_eq!(scheme.code(), "E_HTTP_UNSUPPORTED_SCHEME");

        let none = client(BotApiConfig::default())
            .credentials("t__send", None, None, None)
            .await
            .err()
            .unwrap();
        assert_eq!(none.code(), "E_BOT_TOKEN_MISSING");
        assert!(
            none.to_string().contains("GOONDAN_TEST_UNSET_TOKEN"),
            "{none}"
        );
    }

    #[test]
    fn debug_and_masks_hide_the_token() {
        let config = BotApiConfig {
            api_base_url: Some("http://x".into()),
            token: Some("999:very-secret".into()),
        };
        assert!(!format!("{config:?}").contains("very-secret"));
        let credentials = Credentials {
            base_url: "http://x".into(),
            token: "999:very-secret".into(),
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
        };
        let api = client(BotApiConfig::default())
            .telegram(&credentials)
            .unwrap();
        assert_eq!(
            api.mask("GET http://x/bot999:very-secret/getFile"),
            "GET http://x/bot[REDACTED:token]/getFile"
        );
    }

    #[test]
    fn ids_accept_numbers_and_digits() {
        use serde_json::json;
        assert_eq!(chat_id("t", "chatId", &json!(-100123)).unwrap(), "-100123");
        assert_eq!(
            chat_id("t", "chatId", &json!("@channel")).unwrap(),
            "@channel"
        );
        assert!(chat_id("t", "chatId", &json!("")).is_err());
        assert!(chat_id("t", "chatId", &json!(1.5)).is_err());
        assert_eq!(
            positive_integer("t", "messageId", &json!("42")).unwrap(),
            42
        );
        assert_eq!(
            positive_integer("t", "messageId", &json!(42.0)).unwrap(),
            42
        );
        assert!(positive_integer("t", "messageId", &json!(0)).is_err());
        assert!(positive_integer("t", "messageId", &json!("x")).is_err());
    }
}
