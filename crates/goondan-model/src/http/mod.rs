//! The HTTP transport shared by the Anthropic, OpenAI and Gemini wires:
//! one `reqwest` client per Model with connect and read timeouts, a total
//! deadline per call, size caps on what an answer may accumulate, retries
//! with backoff on 429 / 5xx / connection failures, streaming or whole
//! answers, and key scrubbing of every message that leaves.
//!
//! What goes in the body and how the answer reads is the [`Wire`]'s
//! business.

pub(crate) mod retry;

use crate::config::ApiKey;
use crate::error::ModelError;
use crate::options::{merge_json, HttpOptions};
use crate::request::{FinishReason, ModelRequest, ModelResponse};
use crate::wire::{provider_message, StreamAssembler, StreamProgress, Wire};
use crate::{Model, StreamObserver};
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use goondan_types::error_chain;
use goondan_types::{ContentPart, JsonValue};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};

/// A [`Model`] that speaks `W` over HTTP.
pub(crate) struct HttpModel<W> {
    wire: W,
    model_resource: String,
    client: reqwest::Client,
    base_url: String,
    default_model: String,
    headers: HeaderMap,
    options: HttpOptions,
    api_key: Option<ApiKey>,
}

impl<W: Wire> HttpModel<W> {
    /// Builds the client. `headers` are the wire's own (auth, version);
    /// `options.headers` are added on top and may override them.
    pub(crate) fn new(
        wire: W,
        model_resource: &str,
        default_model: &str,
        base_url: &str,
        auth_and_wire_headers: Vec<(String, String)>,
        options: HttpOptions,
        api_key: Option<ApiKey>,
    ) -> Result<Self, ModelError> {
        let mut headers = HeaderMap::new();
        for (name, value) in auth_and_wire_headers.iter().chain(options.headers.iter()) {
            let invalid = |what: &str| ModelError::Config {
                message: format!("Model/{model_resource}: header {name} has an invalid {what}"),
                suggestion: Some(
                    "use printable ASCII in spec.options.headers and spec.apiKey".into(),
                ),
            };
            let header_name =
                HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid("name"))?;
            let mut header_value = HeaderValue::from_str(value).map_err(|_| invalid("value"))?;
            header_value.set_sensitive(
                api_key
                    .as_ref()
                    .is_some_and(|key| value.contains(key.expose())),
            );
            headers.insert(header_name, header_value);
        }
        let mut builder = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .read_timeout(options.read_timeout)
            .user_agent(concat!("goondan/", env!("CARGO_PKG_VERSION")));
        if let Some(timeout) = options.request_timeout {
            builder = builder.timeout(timeout);
        }
        if base_url.starts_with("http://") {
            // A plain-HTTP endpoint (a model server on this machine or the
            // local network, a test's mock) never shows a certificate, so
            // the system's trust store (a few hundred KB of PEM, parsed by
            // every agent process at start) is not loaded for it.
            builder = builder.tls_certs_only(std::iter::empty());
        }
        let client = builder.build().map_err(|error| ModelError::Config {
            message: format!("Model/{model_resource}: cannot build an HTTP client: {error}"),
            suggestion: None,
        })?;
        Ok(HttpModel {
            wire,
            model_resource: model_resource.to_string(),
            client,
            base_url: base_url.trim_end_matches('/').to_string(),
            default_model: default_model.to_string(),
            headers,
            options,
            api_key,
        })
    }

    fn scrub(&self, text: &str) -> String {
        match &self.api_key {
            Some(key) => key.scrub(text),
            None => text.to_string(),
        }
    }

    fn transport(&self, error: &reqwest::Error) -> ModelError {
        ModelError::Transport {
            provider: self.wire.provider().to_string(),
            message: self.scrub(&error_chain(error)),
        }
    }

    /// One call under the Model's total deadline. Dropping the inner
    /// future on expiry closes the connection, so a trickling stream or a
    /// silent server costs at most `timeoutMs`.
    async fn call_with_deadline(
        &self,
        request: ModelRequest,
        observer: &dyn StreamObserver,
    ) -> Result<ModelResponse, ModelError> {
        let limit = self.options.timeout;
        match tokio::time::timeout(limit, self.call(request, observer)).await {
            Ok(outcome) => outcome,
            Err(_elapsed) => {
                tracing::warn!(
                    provider = self.wire.provider(),
                    model_resource = %self.model_resource,
                    limit_ms = limit.as_millis() as u64,
                    "model call cut at its deadline"
                );
                Err(ModelError::Timeout {
                    model_resource: self.model_resource.clone(),
                    provider: self.wire.provider().to_string(),
                    limit_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
                })
            }
        }
    }

    async fn call(
        &self,
        mut request: ModelRequest,
        observer: &dyn StreamObserver,
    ) -> Result<ModelResponse, ModelError> {
        // The request's model wins so middleware can switch models per step;
        // an empty one means "the Model resource's".
        if request.model.trim().is_empty() {
            request.model = self.default_model.clone();
        }
        let provider = self.wire.provider();
        let stream = self.options.stream;
        let mut body = self.wire.encode(&request, stream)?;
        merge_json(&mut body, self.options.body.clone());
        merge_json(&mut body, request.params.extra.clone());
        let body = serde_json::to_vec(&body).map_err(|error| ModelError::Config {
            message: format!("cannot serialize the {provider} request: {error}"),
            suggestion: None,
        })?;
        let url = self.wire.url(&self.base_url, &request.model, stream);
        let policy = self.options.retry;
        let mut attempts: u32 = 0;
        loop {
            attempts += 1;
            tracing::debug!(provider, model = %request.model, attempts, stream, "model request");
            let sent = self
                .client
                .post(&url)
                .headers(self.headers.clone())
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone())
                .send()
                .await;
            let response = match sent {
                Ok(response) => response,
                Err(error) => {
                    let retryable = error.is_connect() || error.is_timeout() || error.is_request();
                    let message = self.scrub(&error_chain(&error));
                    if retryable && attempts <= policy.max_retries {
                        let delay = retry::delay_before_retry(&policy, attempts, None);
                        tracing::warn!(provider, attempts, delay_ms = delay.as_millis() as u64, error = %message, "model request failed; retrying");
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                    if retryable && attempts > 1 {
                        return Err(ModelError::RetriesExhausted {
                            provider: provider.to_string(),
                            attempts,
                            status: None,
                            message,
                        });
                    }
                    return Err(ModelError::Transport {
                        provider: provider.to_string(),
                        message,
                    });
                }
            };
            let status = response.status();
            if status.is_success() {
                return self.read_answer(response, observer).await.map(normalize);
            }
            let server_delay = retry::server_delay(response.headers());
            let text = response.text().await.unwrap_or_default();
            let message = self.scrub(&provider_message(&text));
            if retry::is_retryable_status(status) {
                if attempts <= policy.max_retries {
                    let delay = retry::delay_before_retry(&policy, attempts, server_delay);
                    tracing::warn!(provider, attempts, status = status.as_u16(), delay_ms = delay.as_millis() as u64, error = %message, "model request failed; retrying");
                    tokio::time::sleep(delay).await;
                    continue;
                }
                return Err(ModelError::RetriesExhausted {
                    provider: provider.to_string(),
                    attempts,
                    status: Some(status.as_u16()),
                    message: format!("HTTP {}: {message}", status.as_u16()),
                });
            }
            return Err(ModelError::Http {
                provider: provider.to_string(),
                status: status.as_u16(),
                message,
            });
        }
    }

    async fn read_answer(
        &self,
        response: reqwest::Response,
        observer: &dyn StreamObserver,
    ) -> Result<ModelResponse, ModelError> {
        let provider = self.wire.provider();
        let is_event_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("text/event-stream"));
        let mut chunks = response.bytes_stream();
        let mut n_bytes: u64 = 0;
        let too_large = || ModelError::AnswerTooLarge {
            provider: provider.to_string(),
            what: "HTTP body",
            option: "maxAnswerBytes",
            limit: self.options.max_answer_bytes,
        };
        if !is_event_stream {
            // A server that ignores `stream: true` and answers with one JSON
            // body is still understood.
            let mut bytes = Vec::new();
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk.map_err(|error| self.transport(&error))?;
                n_bytes += chunk.len() as u64;
                if n_bytes > self.options.max_answer_bytes {
                    return Err(too_large());
                }
                bytes.extend_from_slice(&chunk);
            }
            let body: JsonValue = serde_json::from_slice(&bytes).map_err(|error| {
                crate::wire::malformed(
                    provider,
                    format!(
                        "the body is not JSON ({error}): {}",
                        self.scrub(&String::from_utf8_lossy(&bytes[..bytes.len().min(300)]))
                    ),
                )
            })?;
            let answer = self.wire.decode(body)?;
            self.check_content_bytes(crate::wire::content_bytes(&answer.content))?;
            return Ok(answer);
        }
        let mut assembler = self.wire.stream();
        let mut decoder = goondan_types::sse::SseDecoder::default();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|error| self.transport(&error))?;
            n_bytes += chunk.len() as u64;
            if n_bytes > self.options.max_answer_bytes {
                return Err(too_large());
            }
            for event in decoder.feed(&chunk) {
                let progress = assembler.on_event(event, observer)?;
                self.check_content_bytes(assembler.content_bytes())?;
                if progress == StreamProgress::Done {
                    return assembler.finish();
                }
            }
        }
        if let Some(event) = decoder.finish() {
            assembler.on_event(event, observer)?;
            self.check_content_bytes(assembler.content_bytes())?;
        }
        assembler.finish()
    }

    /// Refuses an answer whose text, reasoning and tool-call arguments
    /// passed `maxContentBytes`.
    fn check_content_bytes(&self, n_content_bytes: u64) -> Result<(), ModelError> {
        if n_content_bytes > self.options.max_content_bytes {
            return Err(ModelError::AnswerTooLarge {
                provider: self.wire.provider().to_string(),
                what: "text and tool-call arguments",
                option: "maxContentBytes",
                limit: self.options.max_content_bytes,
            });
        }
        Ok(())
    }
}

impl<W: Wire> Model for HttpModel<W> {
    fn generate<'a>(
        &'a self,
        request: ModelRequest,
        observer: &'a dyn StreamObserver,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(self.call_with_deadline(request, observer))
    }
}

/// Some OpenAI-compatible servers say `stop` while asking for tools; the
/// runtime keys on `tool-calls`, so the content decides.
fn normalize(mut response: ModelResponse) -> ModelResponse {
    let has_tool_calls = response
        .content
        .iter()
        .any(|part| matches!(part, ContentPart::ToolCall { .. }));
    if has_tool_calls && response.finish_reason == FinishReason::Stop {
        response.finish_reason = FinishReason::ToolCalls;
    }
    response
}
