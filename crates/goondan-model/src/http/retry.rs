//! When to retry and how long to wait: exponential backoff with jitter,
//! and the server's `retry-after` / `retry-after-ms` when it sends one.

use crate::options::RetryPolicy;
use rand::Rng;
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
/// A server-given delay wins, capped at `max_delay` so a hostile or
/// confused header cannot park an agent for hours. Otherwise the delay is
/// `base * 2^(retry-1)`, capped, with "equal jitter": half fixed, half
/// random, so parallel agents hitting the same limit spread out.
pub(crate) fn delay_before_retry(
    policy: &RetryPolicy,
    retry: u32,
    server_delay: Option<Duration>,
) -> Duration {
    if let Some(server_delay) = server_delay {
        return server_delay.min(policy.max_delay);
    }
    let exponent = retry.saturating_sub(1).min(20);
    let backoff = policy
        .base_delay
        .saturating_mul(1u32 << exponent)
        .min(policy.max_delay);
    let half = backoff / 2;
    let jitter_nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
    let jitter = if jitter_nanos == 0 {
        Duration::ZERO
    } else {
        Duration::from_nanos(rand::thread_rng().gen_range(0..=jitter_nanos))
    };
    half + jitter
}

/// The delay a server asked for: `retry-after-ms` (OpenAI), else
/// `retry-after` as seconds or as an HTTP date.
pub(crate) fn server_delay(headers: &HeaderMap) -> Option<Duration> {
    if let Some(millis) = header_text(headers, "retry-after-ms")
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|millis| millis.is_finite() && *millis >= 0.0)
    {
        return Some(Duration::from_secs_f64(millis / 1000.0));
    }
    parse_retry_after(header_text(headers, "retry-after")?, chrono::Utc::now())
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// Parses a `retry-after` value relative to `now`; a date in the past
/// means "now".
pub(crate) fn parse_retry_after(
    value: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = date.with_timezone(&chrono::Utc) - now;
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
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
            delay_before_retry(&policy, 1, Some(Duration::from_secs(3600))),
            Duration::from_millis(1000)
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
            ("-1", None),
            ("soon", None),
        ];
        for (value, expected) in cases {
            assert_eq!(parse_retry_after(value, now), expected, "{value}");
        }
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
