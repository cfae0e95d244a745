//! Every connector's request parser and signature check: the bytes as one
//! HTTP request (headers, a blank line, the body) through a platform's
//! `verify` and `handle` (`goondan_connector::Platform`), as the
//! connector's HTTP front calls them.
//!
//! Input: the first byte picks the platform; then `name: value` header
//! lines up to the first empty line; then the body. A header value of
//! `{signature}` is replaced by the body's valid signature (webhook,
//! GitHub, Slack), so the search also reaches what follows a passed check.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use goondan_connector::discord::Discord;
use goondan_connector::github::Github;
use goondan_connector::slack::Slack;
use goondan_connector::telegram::TelegramWebhook;
use goondan_connector::verify::hmac_sha256_hex;
use goondan_connector::webhook::Webhook;
use goondan_connector::{ConnectorConfig, Platform, PlatformRequest};
use std::time::{Duration, SystemTime};

/// The secret every signed platform is configured with.
const SECRET: &str = "fuzz-secret";
/// RFC 8032 §7.1 test 2's public key: its published signature of "r"
/// lets a corpus entry pass Discord's check.
const DISCORD_PUBLIC_KEY: &str = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
/// When every request arrives, so timestamps replay the same way.
const NOW_SECONDS: u64 = 1_700_000_000;
/// The header value the harness replaces with a valid signature.
const SIGNATURE_PLACEHOLDER: &str = "{signature}";

/// Which platform reads the request, and how its signature is made.
#[derive(Debug, Clone, Copy)]
enum Choice {
    SignedWebhook,
    UnsignedWebhook,
    SignedGithub,
    UnsignedGithub,
    Slack,
    Discord,
    Telegram,
}

const CHOICES: [Choice; 7] = [
    Choice::SignedWebhook,
    Choice::UnsignedWebhook,
    Choice::SignedGithub,
    Choice::UnsignedGithub,
    Choice::Slack,
    Choice::Discord,
    Choice::Telegram,
];

/// Runs one request through the platform its first byte picks: the
/// signature check, then the body's parser (whatever the check said, so
/// the parser is searched too without valid signatures).
pub fn connector_request(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let choice = CHOICES[usize::from(selector) % CHOICES.len()];
    let (head, body) = split_head(rest);
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(NOW_SECONDS);
    let headers = headers(head, choice, body);
    let request = PlatformRequest {
        headers: &headers,
        body,
        now,
    };
    let platform = platform(choice);
    // A replay guard remembers what passed: the same request twice must
    // not pass twice when the platform keeps a guard.
    let first = platform.verify(&request);
    let second = platform.verify(&request);
    if first.is_ok()
        && matches!(choice, Choice::SignedWebhook)
        && request.header("x-webhook-timestamp").is_some()
    {
        assert!(
            second.is_err(),
            "a signed, timestamped webhook passed twice"
        );
    }
    let _ = platform.handle(&request);
}

/// Splits at the first empty line: `(header lines, body)`.
fn split_head(rest: &[u8]) -> (&[u8], &[u8]) {
    match rest.windows(2).position(|pair| pair == b"\n\n") {
        Some(end) => (&rest[..end], &rest[end + 2..]),
        None => (rest, &[]),
    }
}

/// The headers `head` spells (lines that are no valid header are
/// skipped), with the signature placeholder filled in.
fn headers(head: &[u8], choice: Choice, body: &[u8]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let mut placeholders = Vec::new();
    for line in head.split(|&byte| byte == b'\n') {
        let Some(colon) = line.iter().position(|&byte| byte == b':') else {
            continue;
        };
        let value = line[colon + 1..].trim_ascii();
        let Ok(name) = HeaderName::from_bytes(line[..colon].trim_ascii()) else {
            continue;
        };
        if value == SIGNATURE_PLACEHOLDER.as_bytes() {
            placeholders.push(name);
        } else if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.append(name, value);
        }
    }
    // Timestamps as the platforms read them: present only when visible
    // ASCII.
    let timestamp = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let signature = match choice {
        Choice::SignedWebhook | Choice::UnsignedWebhook => match timestamp("x-webhook-timestamp") {
            Some(at) => {
                let signed = [at.as_bytes(), b".", body].concat();
                hmac_sha256_hex(SECRET.as_bytes(), &signed)
            }
            None => hmac_sha256_hex(SECRET.as_bytes(), body),
        },
        Choice::SignedGithub | Choice::UnsignedGithub => {
            format!("sha256={}", hmac_sha256_hex(SECRET.as_bytes(), body))
        }
        Choice::Slack => {
            let at = timestamp("x-slack-request-timestamp").unwrap_or_default();
            let signed = [b"v0:", at.as_bytes(), b":", body].concat();
            format!("v0={}", hmac_sha256_hex(SECRET.as_bytes(), &signed))
        }
        Choice::Discord | Choice::Telegram => SECRET.to_string(),
    };
    let value = HeaderValue::from_str(&signature).expect("hex is a valid header value");
    for name in placeholders {
        headers.append(name, value.clone());
    }
    headers
}

/// The platform for `choice`, configured as a Connection would be.
fn platform(choice: Choice) -> Box<dyn Platform> {
    let mut config = ConnectorConfig::default();
    let signed = !matches!(choice, Choice::UnsignedWebhook | Choice::UnsignedGithub);
    if signed {
        for key in [
            "SIGNING_SECRET",
            "GITHUB_WEBHOOK_SECRET",
            "SLACK_SIGNING_SECRET",
        ] {
            config.secrets.insert(key, SECRET);
        }
    }
    config
        .config
        .insert("REQUIRE_TIMESTAMP".into(), "false".into());
    config
        .config
        .insert("DISCORD_PUBLIC_KEY".into(), DISCORD_PUBLIC_KEY.into());
    let built: Box<dyn Platform> = match choice {
        Choice::SignedWebhook | Choice::UnsignedWebhook => Box::new(
            Webhook::from_config(&config)
                .expect("the webhook config is valid")
                .0,
        ),
        Choice::SignedGithub | Choice::UnsignedGithub => Box::new(
            Github::from_config(&config)
                .expect("the GitHub config is valid")
                .0,
        ),
        Choice::Slack => Box::new(
            Slack::from_config(&config)
                .expect("the Slack config is valid")
                .0,
        ),
        Choice::Discord => Box::new(
            Discord::from_config(&config)
                .expect("the Discord config is valid")
                .0,
        ),
        Choice::Telegram => Box::new(TelegramWebhook::new(Some(SECRET.into()))),
    };
    built
}
