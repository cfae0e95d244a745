//! When to retry and how long to wait: exponential backoff with jitter,
//! and the server's `retry-after` / `retry-after-ms` when it sends one.
//!
//! A server's hint is untrusted input. How each kind of value is read:
//!
//! | hint | wait |
//! |---|---|
//! | a number of seconds (or milliseconds) >= 0 | that long, capped at `retryAfterMaxMs` |
//! | too large to be a `Duration` (`1e20`), or `inf` | the cap |
//! | negative, `NaN`, or not a number nor a date | no hint: the backoff applies |
//! | an HTTP date in the past | no wait |
//! | an HTTP date in the future | until then, capped (year 9999 is the cap) |
//!
//! A huge value is read as "wait long" rather than ignored, since the
//! server clearly asked for patience; a negative or `NaN` one says nothing
//! about time, so the usual backoff is the better guess.

use crate::options::RetryPolicy;
use rand::RngExt;
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use std::time::Duration;

/// True for answers worth another attempt: rate limits, timeouts,
/// overload (Anthropic's 529) and other server errors.
pub(crate) fn is_retryable_status(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::CONFLICT
        || status.is_server_error()
}

/// The wait before retry number `retry` (1-based).
///
/// A server-given delay wins, capped at `max_server_delay`. Otherwise the
/// delay is `base * 2^(retry-1)`, capped at `max_delay`, with "equal
/// jitter": half fixed, half random, so parallel agents hitting the same
/// limit spread out.
pub(crate) fn delay_before_retry(
    policy: &RetryPolicy,
    retry: u32,
    server_delay: Option<Duration>,
) -> Duration {
    if let Some(server_delay) = server_delay {
        return server_delay.min(policy.max_server_delay);
    }
    let backoff = goondan_types::backoff::Backoff::new(policy.base_delay, policy.max_delay)
        .delay(retry.saturating_sub(1));
    let half = backoff / 2;
    let jitter_nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
    let jitter = if jitter_nanos == 0 {
        Duration::ZERO
    } else {
        Duration::from_nanos(rand::rng().random_range(0..=jitter_nanos))
    };
    half + jitter
}

/// The delay a server asked for: `retry-after-ms` (OpenAI), else
/// `retry-after` as seconds or as an HTTP date. Absurdly long delays come
/// back as [`Duration::MAX`]; [`delay_before_retry`] caps them.
pub(crate) fn server_delay(headers: &HeaderMap) -> Option<Duration> {
    if let Some(delay) = header_text(headers, "retry-after-ms")
        .and_then(|text| text.trim().parse::<f64>().ok())
        .and_then(|millis| seconds_to_wait(millis / 1000.0))
    {
        return Some(delay);
    }
    parse_retry_after(header_text(headers, "retry-after")?, chrono::Utc::now())
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// Parses a `retry-after` value relative to `now` (see the table in the
/// module header).
pub(crate) fn parse_retry_after(
    value: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return seconds_to_wait(seconds);
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = date.with_timezone(&chrono::Utc) - now;
    // A negative difference (a date in the past) fails the conversion.
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// A wait of `seconds`: `None` when negative or `NaN`, [`Duration::MAX`]
/// when too large to represent (infinity included). `from_secs_f64` would
/// panic on those, taking the agent process down.
fn seconds_to_wait(seconds: f64) -> Option<Duration> {
    if seconds.is_nan() || seconds < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
            max_server_delay: Duration::from_millis(2000),
        }
    }

    #[test]
    fn backoff_doubles_with_bounded_jitter_and_cap() {
        for (retry, full) in [
            (1, 100),
            (2, 200),
            (3, 400),
            (4, 800),
            (5, 1000),
            (40, 1000),
        ] {
            let delay = delay_before_retry(&policy(), retry, None);
            let full = Duration::from_millis(full);
            assert!(
                delay >= full / 2 && delay <= full,
                "retry {retry}: {delay:?}"
            );
        }
    }

    #[test]
    fn server_delay_wins_but_is_capped() {
        let policy = policy();
        assert_eq!(
            delay_before_retry(&policy, 1, Some(Duration::ZERO)),
            Duration::ZERO
        );
        assert_eq!(
            delay_before_retry(&policy, 1, Some(Duration::from_millis(1500))),
            Duration::from_millis(1500),
            "a server delay may exceed the backoff cap"
        );
        assert_eq!(
            delay_before_retry(&policy, 1, Some(Duration::from_secs(3600))),
            Duration::from_millis(2000)
        );
        assert_eq!(
            delay_before_retry(&policy, 1, Some(Duration::MAX)),
            Duration::from_millis(2000)
        );
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let cases = [
            ("0", Some(Duration::ZERO)),
            ("2", Some(Duration::from_secs(2))),
            ("0.25", Some(Duration::from_millis(250))),
            (
                "Sun, 22 Nov 2026 10:00:05 GMT",
                Some(Duration::from_secs(5)),
            ),
            ("Sun, 22 Nov 2026 09:00:00 GMT", Some(Duration::ZERO)),
            (
                "Fri, 31 Dec 9999 23:59:59 GMT",
                Some(Duration::from_secs(251_606_959_199)),
            ),
            ("1e20", Some(Duration::MAX)),
            ("1e400", Some(Duration::MAX)),
            ("inf", Some(Duration::MAX)),
            ("-1", None),
            ("-inf", None),
            ("NaN", None),
            ("soon", None),
            ("", None),
        ];
        for (value, expected) in cases {
            assert_eq!(parse_retry_after(value, now), expected, "{value}");
        }
    }

    #[test]
    fn absurd_server_hints_never_panic_and_wait_at_most_the_cap() {
        let policy = policy();
        let cap = policy.max_server_delay;
        let backoff_cap = policy.max_delay;
        // (header, value, the wait: exact, or `None` for "the backoff").
        let cases = [
            ("retry-after", "1e20", Some(cap)),
            ("retry-after", "1.7976931348623157e308", Some(cap)),
            ("retry-after", "inf", Some(cap)),
            ("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT", Some(cap)),
            ("retry-after", "1", Some(Duration::from_secs(1))),
            ("retry-after", "-5", None),
            ("retry-after", "NaN", None),
            ("retry-after-ms", "1e30", Some(cap)),
            ("retry-after-ms", "18446744073709551615000", Some(cap)),
            ("retry-after-ms", "250", Some(Duration::from_millis(250))),
            ("retry-after-ms", "-250", None),
            ("retry-after-ms", "nan", None),
        ];
        for (name, value, expected) in cases {
            let mut headers = HeaderMap::new();
            headers.insert(name, value.parse().unwrap());
            let delay = delay_before_retry(&policy, 1, server_delay(&headers));
            match expected {
                Some(expected) => assert_eq!(delay, expected, "{name}: {value}"),
                None => assert!(delay <= backoff_cap / 10, "{name}: {value} gave {delay:?}"),
            }
        }
    }

    #[test]
    fn an_invalid_retry_after_ms_falls_back_to_retry_after() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after-ms", "-1".parse().unwrap());
        headers.insert("retry-after", "3".parse().unwrap());
        assert_eq!(server_delay(&headers), Some(Duration::from_secs(3)));
    }

    #[test]
    fn retryable_statuses() {
        for (status, expected) in [
            (429, true),
            (500, true),
            (503, true),
            (529, true),
            (408, true),
            (400, false),
            (401, false),
            (404, false),
        ] {
            assert_eq!(
                is_retryable_status(StatusCode::from_u16(status).unwrap()),
                expected,
                "{status}"
            );
        }
    }
}
