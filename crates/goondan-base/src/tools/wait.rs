//! The `wait` tool: `seconds` pauses the call for 0 to 300 seconds.
//!
//! The pause is a tokio timer, so an agent shutting down mid-wait drops it
//! at once.

use crate::args::{invalid, parse};
use crate::error::BuiltinToolError;
use goondan_types::{JsonObject, JsonValue};
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

const SECONDS: &str = "wait__seconds";

/// The longest pause one call may ask for.
pub const MAX_WAIT_SECONDS: f64 = 300.0;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SecondsArgs {
    seconds: f64,
}

/// `seconds`: sleeps, then reports how long.
pub async fn seconds(raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
    let parsed: SecondsArgs = parse(SECONDS, raw)?;
    if !parsed.seconds.is_finite() || !(0.0..=MAX_WAIT_SECONDS).contains(&parsed.seconds) {
        return Err(invalid(
            SECONDS,
            format!(
                "`seconds` must be between 0 and {MAX_WAIT_SECONDS}, got {}",
                parsed.seconds
            ),
        ));
    }
    let waited = Duration::from_secs_f64(parsed.seconds);
    tokio::time::sleep(waited).await;
    Ok(json!({"waitedSeconds": parsed.seconds, "waitedMs": waited.as_millis() as u64}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: JsonValue) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[tokio::test]
    async fn waits_the_requested_time() {
        let before = std::time::Instant::now();
        let output = seconds(&object(json!({"seconds": 0.05}))).await.unwrap();
        assert_eq!(output["waitedMs"], json!(50));
        assert!(before.elapsed() >= Duration::from_millis(50));
    }

    #[tokio::test]
    async fn out_of_range_or_missing_is_refused() {
        for input in [
            json!({}),
            json!({"seconds": -1}),
            json!({"seconds": 301}),
            json!({"seconds": "5"}),
        ] {
            let error = seconds(&object(input.clone())).await.unwrap_err();
            assert_eq!(error.code(), "E_TOOL_INVALID_ARGS", "{input}");
        }
    }
}
