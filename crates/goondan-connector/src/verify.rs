//! The signature schemes of the platforms that post to a connector, each a
//! pure function of the request's bytes, the secret and the clock.
//!
//! Every comparison of a received value with an expected one is constant
//! time (`aws_lc_rs`'s HMAC verification and `verify_slices_are_equal`), so
//! how long a refusal takes says nothing about how much of a forged
//! signature was right.

use aws_lc_rs::{constant_time, hmac, signature};
use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How many keys a [`ReplayGuard`] remembers at most.
const REMEMBERED: usize = 65_536;

/// Why a request's signature was refused. Every variant answers 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A header the scheme needs is absent.
    #[error("the request has no {header} header")]
    Missing {
        /// The header.
        header: &'static str,
    },
    /// A header is there but cannot be a signature or timestamp.
    #[error("the {header} header is malformed")]
    Malformed {
        /// The header.
        header: &'static str,
    },
    /// The signature does not match the body and the secret.
    #[error("the signature does not match the request")]
    Mismatch,
    /// The timestamp is outside the replay window.
    #[error(
        "the request timestamp is {age_seconds} s away from now (the window is {window_seconds} s)"
    )]
    Stale {
        /// How far the timestamp is from now.
        age_seconds: u64,
        /// The accepted distance.
        window_seconds: u64,
    },
    /// The same signed request was accepted before, inside the window.
    #[error("the request was already accepted (a replay)")]
    Replayed,
}

/// Whether `received` (hex, case-insensitive, after an optional `prefix`
/// such as `sha256=`) is the HMAC-SHA256 of the concatenated `message`
/// parts under `secret`.
pub fn hmac_sha256_hex_matches(
    secret: &[u8],
    message: &[&[u8]],
    received: &str,
    header: &'static str,
) -> Result<(), SignatureError> {
    let tag = decode_hex(received).ok_or(SignatureError::Malformed { header })?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut context = hmac::Context::with_key(&key);
    for part in message {
        context.update(part);
    }
    constant_time::verify_slices_are_equal(context.sign().as_ref(), &tag)
        .map_err(|_| SignatureError::Mismatch)
}

/// The lowercase hex HMAC-SHA256 of `message` under `secret`: what a
/// sender computes (tests and examples use it).
pub fn hmac_sha256_hex(secret: &[u8], message: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    encode_hex(hmac::sign(&key, message).as_ref())
}

/// A GitHub delivery: `X-Hub-Signature-256: sha256=<hex>` over the body.
pub fn github(secret: &str, body: &[u8], signature: Option<&str>) -> Result<(), SignatureError> {
    const HEADER: &str = "X-Hub-Signature-256";
    let signature = signature.ok_or(SignatureError::Missing { header: HEADER })?;
    let hex = signature
        .strip_prefix("sha256=")
        .ok_or(SignatureError::Malformed { header: HEADER })?;
    hmac_sha256_hex_matches(secret.as_bytes(), &[body], hex, HEADER)
}

/// A Slack request (signing version `v0`): `X-Slack-Signature: v0=<hex>`
/// over `v0:<timestamp>:<body>`, with `X-Slack-Request-Timestamp` within
/// `window` of `now`.
pub fn slack(
    secret: &str,
    body: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
    now: SystemTime,
    window: Duration,
) -> Result<(), SignatureError> {
    const SIGNATURE: &str = "X-Slack-Signature";
    const TIMESTAMP: &str = "X-Slack-Request-Timestamp";
    let timestamp = timestamp.ok_or(SignatureError::Missing { header: TIMESTAMP })?;
    let signature = signature.ok_or(SignatureError::Missing { header: SIGNATURE })?;
    within_window(timestamp, TIMESTAMP, now, window)?;
    let hex = signature
        .strip_prefix("v0=")
        .ok_or(SignatureError::Malformed { header: SIGNATURE })?;
    hmac_sha256_hex_matches(
        secret.as_bytes(),
        &[b"v0:", timestamp.as_bytes(), b":", body],
        hex,
        SIGNATURE,
    )
}

/// A Discord interaction: `X-Signature-Ed25519` (hex) is the Ed25519
/// signature of `<X-Signature-Timestamp><body>` under the application's
/// public key (hex, from the developer portal).
pub fn discord(
    public_key_hex: &str,
    body: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
) -> Result<(), SignatureError> {
    const SIGNATURE: &str = "X-Signature-Ed25519";
    const TIMESTAMP: &str = "X-Signature-Timestamp";
    let timestamp = timestamp.ok_or(SignatureError::Missing { header: TIMESTAMP })?;
    let signature = signature.ok_or(SignatureError::Missing { header: SIGNATURE })?;
    let signature = decode_hex(signature).ok_or(SignatureError::Malformed { header: SIGNATURE })?;
    // A key that does not decode is a configuration error the connector
    // refuses at start (`Secrets` checks it); here it only fails closed.
    let public_key = decode_hex(public_key_hex).ok_or(SignatureError::Mismatch)?;
    let mut message = Vec::with_capacity(timestamp.len() + body.len());
    message.extend_from_slice(timestamp.as_bytes());
    message.extend_from_slice(body);
    signature::UnparsedPublicKey::new(&signature::ED25519, public_key)
        .verify(&message, &signature)
        .map_err(|_| SignatureError::Mismatch)
}

/// A Telegram webhook update: `X-Telegram-Bot-Api-Secret-Token` equals the
/// `secret_token` given to `setWebhook`.
pub fn telegram(secret_token: &str, received: Option<&str>) -> Result<(), SignatureError> {
    const HEADER: &str = "X-Telegram-Bot-Api-Secret-Token";
    let received = received.ok_or(SignatureError::Missing { header: HEADER })?;
    constant_time::verify_slices_are_equal(secret_token.as_bytes(), received.as_bytes())
        .map_err(|_| SignatureError::Mismatch)
}

/// Checks that `timestamp` (Unix seconds) is within `window` of `now`,
/// either way, and returns it.
pub fn within_window(
    timestamp: &str,
    header: &'static str,
    now: SystemTime,
    window: Duration,
) -> Result<u64, SignatureError> {
    if timestamp.is_empty() || !timestamp.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SignatureError::Malformed { header });
    }
    let seconds: u64 = timestamp
        .parse()
        .map_err(|_| SignatureError::Malformed { header })?;
    let age_seconds = unix_seconds(now).abs_diff(seconds);
    if age_seconds > window.as_secs() {
        return Err(SignatureError::Stale {
            age_seconds,
            window_seconds: window.as_secs(),
        });
    }
    Ok(seconds)
}

/// Remembers what was accepted recently (signatures, platform event ids)
/// so the same request is accepted once.
///
/// A key is kept while a request carrying it could still pass the replay
/// window (`2 × window` after its timestamp, since a timestamp may be
/// early or late by one window), and at most 65,536 keys are kept, the
/// oldest forgotten first.
#[derive(Debug, Default)]
pub struct ReplayGuard {
    seen: Mutex<Remembered>,
}

#[derive(Debug, Default)]
struct Remembered {
    order: VecDeque<(u64, String)>,
    keys: HashSet<String>,
}

impl ReplayGuard {
    /// Whether `key` (compared case-insensitively) is new; it is
    /// remembered as seen at `at_seconds` if so.
    pub fn first(&self, key: &str, at_seconds: u64, window: Duration) -> bool {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = key.to_ascii_lowercase();
        if seen.keys.contains(&key) {
            return false;
        }
        while let Some((oldest, _)) = seen.order.front() {
            let expired = at_seconds.saturating_sub(*oldest) > 2 * window.as_secs();
            if !expired && seen.order.len() < REMEMBERED {
                break;
            }
            if let Some((_, old)) = seen.order.pop_front() {
                seen.keys.remove(&old);
            }
        }
        seen.order.push_back((at_seconds, key.clone()));
        seen.keys.insert(key);
        true
    }

    /// Forgets `key` (compared case-insensitively), so it is new again: for
    /// a request that was remembered but then not accepted.
    pub fn forget(&self, key: &str) {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = key.to_ascii_lowercase();
        if seen.keys.remove(&key) {
            seen.order.retain(|(_, kept)| *kept != key);
        }
    }
}

/// Seconds since 1970 at `now`.
pub fn unix_seconds(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// Lowercase hex of `bytes`.
pub fn encode_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(DIGITS[usize::from(byte >> 4)] as char);
        text.push(DIGITS[usize::from(byte & 0x0f)] as char);
    }
    text
}

/// The bytes of an even-length hex string (either case); `None` for
/// anything else.
pub fn decode_hex(text: &str) -> Option<Vec<u8>> {
    fn nibble(digit: u8) -> Option<u8> {
        match digit {
            b'0'..=b'9' => Some(digit - b'0'),
            b'a'..=b'f' => Some(digit - b'a' + 10),
            b'A'..=b'F' => Some(digit - b'A' + 10),
            _ => None,
        }
    }
    let text = text.as_bytes();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks_exact(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    /// Slack's own example from "Verifying requests from Slack".
    #[test]
    fn slack_published_example_verifies() {
        let secret = "8f742231b10e8888abcd99yyyzzz85a5";
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let signature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        let window = Duration::from_secs(300);
        assert_eq!(
            slack(
                secret,
                body,
                Some("1531420618"),
                Some(signature),
                at(1_531_420_618),
                window
            ),
            Ok(())
        );
        assert_eq!(
            slack(
                secret,
                b"token=other",
                Some("1531420618"),
                Some(signature),
                at(1_531_420_618),
                window
            ),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            slack(
                secret,
                body,
                Some("1531420618"),
                Some(signature),
                at(1_531_420_618 + 301),
                window
            ),
            Err(SignatureError::Stale {
                age_seconds: 301,
                window_seconds: 300
            })
        );
        assert_eq!(
            slack(
                secret,
                body,
                None,
                Some(signature),
                at(1_531_420_618),
                window
            ),
            Err(SignatureError::Missing {
                header: "X-Slack-Request-Timestamp"
            })
        );
        assert_eq!(
            slack(
                secret,
                body,
                Some("1531420618"),
                Some("a2114d57"),
                at(1_531_420_618),
                window
            ),
            Err(SignatureError::Malformed {
                header: "X-Slack-Signature"
            })
        );
    }

    /// GitHub's example from "Validating webhook deliveries".
    #[test]
    fn github_published_example_verifies() {
        let signature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(
            github(
                "It's a Secret to Everybody",
                b"Hello, World!",
                Some(signature)
            ),
            Ok(())
        );
        assert_eq!(
            github(
                "It's a Secret to Everybody",
                b"Hello, World?",
                Some(signature)
            ),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            github("another secret", b"Hello, World!", Some(signature)),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            github(
                "It's a Secret to Everybody",
                b"Hello, World!",
                Some(&signature[7..])
            ),
            Err(SignatureError::Malformed {
                header: "X-Hub-Signature-256"
            })
        );
        assert_eq!(
            github("It's a Secret to Everybody", b"Hello, World!", None),
            Err(SignatureError::Missing {
                header: "X-Hub-Signature-256"
            })
        );
    }

    /// RFC 8032 §7.1 test 2: a one-byte message under a published key,
    /// split as Discord splits it (timestamp, then body).
    #[test]
    fn discord_rfc_8032_vector_verifies() {
        let public_key = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
        let signature = "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00";
        // The signed message is the single byte 0x72 ("r"): all timestamp.
        assert_eq!(discord(public_key, b"", Some("r"), Some(signature)), Ok(()));
        assert_eq!(discord(public_key, b"r", Some(""), Some(signature)), Ok(()));
        assert_eq!(
            discord(public_key, b"s", Some(""), Some(signature)),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            discord(public_key, b"r", Some(""), Some("zz")),
            Err(SignatureError::Malformed {
                header: "X-Signature-Ed25519"
            })
        );
        assert_eq!(
            discord(public_key, b"r", None, Some(signature)),
            Err(SignatureError::Missing {
                header: "X-Signature-Timestamp"
            })
        );
    }

    #[test]
    fn telegram_secret_token_must_be_equal() {
        assert_eq!(telegram("s3cret-token", Some("s3cret-token")), Ok(()));
        assert_eq!(
            telegram("s3cret-token", Some("s3cret-tokem")),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            telegram("s3cret-token", Some("s3cret")),
            Err(SignatureError::Mismatch)
        );
        assert!(matches!(
            telegram("s3cret-token", None),
            Err(SignatureError::Missing { .. })
        ));
    }

    #[test]
    fn a_replay_guard_accepts_a_key_once_and_forgets_it_after_the_window() {
        let guard = ReplayGuard::default();
        let window = Duration::from_secs(300);
        assert!(guard.first("AbC", 1000, window));
        assert!(!guard.first("abc", 1200, window));
        assert!(guard.first("other", 1601, window), "abc expires at 1600");
        assert!(guard.first("abc", 1601, window));
        // A key forgotten (its request was not accepted) is new again.
        guard.forget("ABC");
        assert!(guard.first("abc", 1602, window));
        assert!(!guard.first("other", 1603, window));
    }

    #[test]
    fn hex_round_trips_and_refuses_odd_or_foreign_digits() {
        assert_eq!(encode_hex(&[0x00, 0xab, 0xff]), "00abff");
        assert_eq!(decode_hex("00ABff"), Some(vec![0x00, 0xab, 0xff]));
        assert_eq!(decode_hex("abc"), None);
        assert_eq!(decode_hex("zz"), None);
        assert_eq!(decode_hex("é1"), None);
    }

    #[test]
    fn timestamps_outside_the_window_or_not_digits_are_refused() {
        let window = Duration::from_secs(300);
        assert_eq!(within_window("1000", "T", at(1300), window), Ok(1000));
        assert_eq!(within_window("1300", "T", at(1000), window), Ok(1300));
        assert!(matches!(
            within_window("999", "T", at(1300), window),
            Err(SignatureError::Stale { .. })
        ));
        for bad in ["", "-5", "1e9", " 1000", "99999999999999999999999"] {
            assert!(
                matches!(
                    within_window(bad, "T", at(1000), window),
                    Err(SignatureError::Malformed { .. })
                ),
                "{bad:?}"
            );
        }
    }
}
