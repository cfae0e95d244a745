//! The chat platforms' HTTP APIs as clients: the Telegram Bot API
//! ([`telegram::TelegramApi`]) and the Slack Web API
//! ([`slack::SlackApi`]), one of each for the whole workspace. The
//! Telegram connector's long poll, the approval desk and
//! `@goondan/base`'s `telegram` and `slack` tools all call through them.
//!
//! What both clients share is here: a connection pool ([`ChatHttp`]), a
//! deadline on every call (the whole exchange, answer included), and
//! answers read up to a bound ([`MAX_ANSWER_BYTES`] for an API answer, the
//! caller's for a file). Each client turns what went wrong into its
//! platform's coded error, with the token masked.
//!
//! Which methods are called with which payloads is the caller's, and so
//! is the policy of where a token may go (the tools' refusal of internal
//! addresses a model names lives in `goondan-base`).

pub mod slack;
pub mod telegram;

use goondan_types::error_chain;
use std::time::Duration;

/// The most bytes of an API answer read (a page of history, or a
/// hundred updates, is well under this).
pub const MAX_ANSWER_BYTES: u64 = 8 * 1024 * 1024;

/// The connection pool chat API calls go through; a clone shares it.
#[derive(Debug, Clone)]
pub struct ChatHttp {
    client: reqwest::Client,
}

impl ChatHttp {
    /// A pool whose requests say `user_agent`.
    pub fn new(user_agent: &str) -> Result<ChatHttp, ChatHttpError> {
        reqwest::Client::builder()
            .user_agent(user_agent)
            .build()
            .map(|client| ChatHttp { client })
            .map_err(|error| ChatHttpError(error_chain(&error)))
    }
}

/// The HTTP client could not be built (the machine's TLS setup).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("E_CHAT_HTTP_CLIENT: cannot build the HTTP client: {0}")]
pub struct ChatHttpError(String);

impl ChatHttpError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        "E_CHAT_HTTP_CLIENT"
    }
}

/// A file fetched whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    /// The answer's `Content-Type`, when it gave a readable one.
    pub content_type: Option<String>,
    /// The file.
    pub body: Vec<u8>,
}

/// An answer read whole, within its bound.
struct Answer {
    status: reqwest::StatusCode,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    /// The answer's `Content-Type`, when it gave a readable one.
    fn content_type(&self) -> Option<String> {
        self.headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .filter(|value| !value.is_empty())
            .map(str::to_string)
    }
}

/// Why an exchange has no answer to read; each client makes its
/// platform's error of it.
enum Failure {
    /// No answer (connection refused, reset, TLS), as one line without
    /// the URL; the client masks it.
    Transport(String),
    /// The deadline passed first.
    Timeout(Duration),
    /// The answer is longer than the bound: `size` is what it declared or
    /// what was read before giving up; `status` is the answer's.
    TooLarge { status: u16, size: u64, limit: u64 },
}

/// Sends `request` and reads its answer, all within `timeout`, at most
/// `limit` bytes of body.
async fn exchange(
    request: reqwest::RequestBuilder,
    timeout: Duration,
    limit: u64,
) -> Result<Answer, Failure> {
    let transport = |error: reqwest::Error| Failure::Transport(error_chain(&error.without_url()));
    let work = async {
        let mut response = request.send().await.map_err(transport)?;
        let status = response.status();
        let headers = response.headers().clone();
        if let Some(declared) = response.content_length().filter(|length| *length > limit) {
            return Err(Failure::TooLarge {
                status: status.as_u16(),
                size: declared,
                limit,
            });
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(transport)? {
            let size = (body.len() + chunk.len()) as u64;
            if size > limit {
                return Err(Failure::TooLarge {
                    status: status.as_u16(),
                    size,
                    limit,
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer {
            status,
            headers,
            body,
        })
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or(Err(Failure::Timeout(timeout)))
}

/// Milliseconds of `duration`, for messages.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
