//! Typed reading of `spec.options`: each provider takes the keys it knows,
//! and whatever nobody took is passed into the request body.
//!
//! Owns the option names and defaults shared by the HTTP providers
//! ([`HttpOptions`]); provider-specific names are read by each wire module.

use crate::error::ModelError;
use goondan_types::{JsonObject, JsonValue};
use std::time::Duration;

/// Reads `spec.options`, remembering which keys were taken.
pub(crate) struct OptionReader<'a> {
    model_resource: &'a str,
    remaining: JsonObject,
}

impl<'a> OptionReader<'a> {
    pub(crate) fn new(model_resource: &'a str, options: &JsonObject) -> Self {
        OptionReader {
            model_resource,
            remaining: options.clone(),
        }
    }

    fn invalid(&self, key: &str, expected: &str) -> ModelError {
        ModelError::Config {
            message: format!(
                "Model/{}: spec.options.{key} must be {expected}",
                self.model_resource
            ),
            suggestion: Some(format!("fix or remove spec.options.{key}")),
        }
    }

    pub(crate) fn string(&mut self, key: &str) -> Result<Option<String>, ModelError> {
        match self.remaining.remove(key) {
            None | Some(JsonValue::Null) => Ok(None),
            Some(JsonValue::String(text)) => Ok(Some(text)),
            Some(_) => Err(self.invalid(key, "a string")),
        }
    }

    pub(crate) fn bool(&mut self, key: &str) -> Result<Option<bool>, ModelError> {
        match self.remaining.remove(key) {
            None | Some(JsonValue::Null) => Ok(None),
            Some(JsonValue::Bool(flag)) => Ok(Some(flag)),
            Some(_) => Err(self.invalid(key, "true or false")),
        }
    }

    pub(crate) fn u64(&mut self, key: &str) -> Result<Option<u64>, ModelError> {
        match self.remaining.remove(key) {
            None | Some(JsonValue::Null) => Ok(None),
            Some(JsonValue::Number(number)) => number
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.invalid(key, "a whole number >= 0")),
            Some(_) => Err(self.invalid(key, "a whole number >= 0")),
        }
    }

    pub(crate) fn object(&mut self, key: &str) -> Result<Option<JsonObject>, ModelError> {
        match self.remaining.remove(key) {
            None | Some(JsonValue::Null) => Ok(None),
            Some(JsonValue::Object(object)) => Ok(Some(object)),
            Some(_) => Err(self.invalid(key, "an object")),
        }
    }

    /// A map of strings, such as `headers`.
    pub(crate) fn string_map(&mut self, key: &str) -> Result<Vec<(String, String)>, ModelError> {
        let Some(object) = self.object(key)? else {
            return Ok(Vec::new());
        };
        object
            .into_iter()
            .map(|(name, value)| match value {
                JsonValue::String(text) => Ok((name, text)),
                _ => Err(self.invalid(&format!("{key}.{name}"), "a string")),
            })
            .collect()
    }

    /// The keys nobody took, for the request body.
    pub(crate) fn into_rest(self) -> JsonObject {
        self.remaining
    }
}

/// How often and how patiently to retry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RetryPolicy {
    /// Retries after the first attempt.
    pub(crate) max_retries: u32,
    /// The first backoff delay; it doubles per retry.
    pub(crate) base_delay: Duration,
    /// The cap on one backoff delay.
    pub(crate) max_delay: Duration,
    /// The cap on a wait the server asked for (`retry-after`,
    /// `retry-after-ms`), so a hostile or confused header cannot park an
    /// agent for hours.
    pub(crate) max_server_delay: Duration,
}

/// The options every HTTP provider understands.
#[derive(Debug, Clone)]
pub(crate) struct HttpOptions {
    pub(crate) stream: bool,
    pub(crate) connect_timeout: Duration,
    pub(crate) read_timeout: Duration,
    pub(crate) request_timeout: Option<Duration>,
    /// The deadline of one whole call: every attempt, the waits between
    /// them and the streamed answer. The connect and read timeouts only
    /// bound silences, so without it a server trickling a token (or a
    /// keep-alive) every few seconds would hold an agent forever.
    pub(crate) timeout: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) headers: Vec<(String, String)>,
    /// The most an answer may weigh, streamed or not, so a runaway or
    /// hostile server cannot make an agent buffer without bound.
    pub(crate) max_answer_bytes: u64,
    /// The most text, reasoning and tool-call argument bytes an answer may
    /// accumulate; SSE framing and keep-alives do not count here.
    pub(crate) max_content_bytes: u64,
    /// `options.body` plus every unknown option, merged into each request.
    pub(crate) body: JsonObject,
}

pub(crate) const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
pub(crate) const DEFAULT_READ_TIMEOUT_MS: u64 = 120_000;
pub(crate) const DEFAULT_MAX_RETRIES: u64 = 2;
pub(crate) const DEFAULT_RETRY_BASE_DELAY_MS: u64 = 500;
pub(crate) const DEFAULT_RETRY_MAX_DELAY_MS: u64 = 30_000;
pub(crate) const DEFAULT_RETRY_AFTER_MAX_MS: u64 = 60_000;
pub(crate) const DEFAULT_MAX_ANSWER_BYTES: u64 = 32 * 1024 * 1024;
pub(crate) const DEFAULT_TIMEOUT_MS: u64 = 300_000;
pub(crate) const DEFAULT_MAX_CONTENT_BYTES: u64 = 4 * 1024 * 1024;

impl HttpOptions {
    /// Takes the shared keys; call after the provider took its own, since
    /// the rest becomes body fields.
    pub(crate) fn read(mut reader: OptionReader<'_>) -> Result<HttpOptions, ModelError> {
        let millis = |value: u64| Duration::from_millis(value);
        let stream = reader.bool("stream")?.unwrap_or(true);
        let connect_timeout = millis(
            reader
                .u64("connectTimeoutMs")?
                .unwrap_or(DEFAULT_CONNECT_TIMEOUT_MS),
        );
        let read_timeout = millis(
            reader
                .u64("readTimeoutMs")?
                .unwrap_or(DEFAULT_READ_TIMEOUT_MS),
        );
        let request_timeout = reader.u64("requestTimeoutMs")?.map(millis);
        let timeout = millis(reader.u64("timeoutMs")?.unwrap_or(DEFAULT_TIMEOUT_MS));
        let max_retries = reader.u64("maxRetries")?.unwrap_or(DEFAULT_MAX_RETRIES);
        let retry = RetryPolicy {
            max_retries: u32::try_from(max_retries).unwrap_or(u32::MAX),
            base_delay: millis(
                reader
                    .u64("retryBaseDelayMs")?
                    .unwrap_or(DEFAULT_RETRY_BASE_DELAY_MS),
            ),
            max_delay: millis(
                reader
                    .u64("retryMaxDelayMs")?
                    .unwrap_or(DEFAULT_RETRY_MAX_DELAY_MS),
            ),
            max_server_delay: millis(
                reader
                    .u64("retryAfterMaxMs")?
                    .unwrap_or(DEFAULT_RETRY_AFTER_MAX_MS),
            ),
        };
        let headers = reader.string_map("headers")?;
        let max_answer_bytes = reader
            .u64("maxAnswerBytes")?
            .unwrap_or(DEFAULT_MAX_ANSWER_BYTES);
        let max_content_bytes = reader
            .u64("maxContentBytes")?
            .unwrap_or(DEFAULT_MAX_CONTENT_BYTES);
        let explicit_body = reader.object("body")?.unwrap_or_default();
        let mut body = reader.into_rest();
        merge_json(&mut body, explicit_body);
        Ok(HttpOptions {
            stream,
            connect_timeout,
            read_timeout,
            request_timeout,
            timeout,
            retry,
            headers,
            max_answer_bytes,
            max_content_bytes,
            body,
        })
    }
}

/// Merges `overlay` into `base`: objects merge key by key, recursively;
/// anything else in `overlay` replaces what `base` had.
pub(crate) fn merge_json(base: &mut JsonObject, overlay: JsonObject) {
    for (key, value) in overlay {
        match (base.get_mut(&key), value) {
            (Some(JsonValue::Object(existing)), JsonValue::Object(incoming)) => {
                merge_json(existing, incoming);
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: JsonValue) -> JsonObject {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn unknown_options_become_body_fields_and_body_wins() {
        let options = object(json!({
            "stream": false,
            "maxRetries": 5,
            "retryAfterMaxMs": 5,
            "headers": {"x-a": "1"},
            "seed": 7,
            "generationConfig": {"topK": 3},
            "body": {"generationConfig": {"candidateCount": 1}, "seed": 8}
        }));
        let parsed = HttpOptions::read(OptionReader::new("m", &options)).unwrap();
        assert!(!parsed.stream);
        assert_eq!(parsed.retry.max_retries, 5);
        assert_eq!(parsed.retry.max_server_delay, Duration::from_millis(5));
        assert_eq!(parsed.headers, vec![("x-a".to_string(), "1".to_string())]);
        assert_eq!(
            JsonValue::Object(parsed.body),
            json!({"seed": 8, "generationConfig": {"topK": 3, "candidateCount": 1}})
        );
    }

    #[test]
    fn wrong_types_name_the_option() {
        let options = object(json!({"maxRetries": "three"}));
        let error = HttpOptions::read(OptionReader::new("claude", &options)).unwrap_err();
        assert_eq!(error.code(), "E_MODEL_CONFIG");
        assert!(error
            .to_string()
            .contains("Model/claude: spec.options.maxRetries"));
    }

    #[test]
    fn defaults_apply() {
        let parsed = HttpOptions::read(OptionReader::new("m", &JsonObject::new())).unwrap();
        assert!(parsed.stream);
        assert_eq!(parsed.retry.max_retries, 2);
        assert_eq!(parsed.retry.max_server_delay, Duration::from_secs(60));
        assert_eq!(parsed.connect_timeout, Duration::from_secs(10));
        assert_eq!(parsed.timeout, Duration::from_secs(300));
        assert_eq!(parsed.max_content_bytes, 4 * 1024 * 1024);
        assert!(parsed.body.is_empty());
    }
}
