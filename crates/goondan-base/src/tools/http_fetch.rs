//! The `http-fetch` tool: `get` and `post` over http and https only, with a
//! timeout covering the whole exchange and a cap on the body kept.
//!
//! The body is read chunk by chunk and the connection dropped once the cap
//! is reached, so a huge or endless answer costs at most the cap in memory.

use crate::args::{invalid, parse, primitive_map, require_non_empty, whole_number};
use crate::error::BuiltinToolError;
use crate::tools::capped_text::decode_prefix;
use goondan_types::{JsonObject, JsonValue};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::{Method, Url};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const GET: &str = "http-fetch__get";
const POST: &str = "http-fetch__post";

/// Options of the `http-fetch` tool, from the Tool's config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpFetchConfig {
    /// The timeout when a call gives none.
    pub default_timeout_ms: u64,
    /// `maxBytes` when a call gives none.
    pub default_max_bytes: u64,
}

impl Default for HttpFetchConfig {
    fn default() -> Self {
        HttpFetchConfig {
            default_timeout_ms: 30_000,
            default_max_bytes: 500_000,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GetArgs {
    url: String,
    #[serde(default)]
    headers: Option<JsonObject>,
    #[serde(default, deserialize_with = "whole_number")]
    timeout_ms: Option<u64>,
    #[serde(default, deserialize_with = "whole_number")]
    max_bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PostArgs {
    url: String,
    #[serde(default)]
    body: Option<JsonObject>,
    #[serde(default)]
    body_string: Option<String>,
    #[serde(default)]
    headers: Option<JsonObject>,
    #[serde(default, deserialize_with = "whole_number")]
    timeout_ms: Option<u64>,
    #[serde(default, deserialize_with = "whole_number")]
    max_bytes: Option<u64>,
}

/// One request, validated.
struct Exchange {
    method: Method,
    url: Url,
    headers: HeaderMap,
    body: Option<String>,
    timeout: Duration,
    max_bytes: u64,
}

/// The `http-fetch` tool. Cloning shares the connection pool.
#[derive(Debug, Clone)]
pub struct HttpFetchTool {
    config: HttpFetchConfig,
    /// The pool, or why it could not be built (no TLS roots, for example);
    /// that becomes each call's error rather than a panic at startup.
    client: Result<reqwest::Client, Arc<str>>,
}

impl HttpFetchTool {
    /// The tool with `config` and a fresh connection pool.
    pub fn new(config: HttpFetchConfig) -> Self {
        HttpFetchTool {
            config,
            client: reqwest::Client::builder()
                .user_agent(concat!("goondan-http-fetch/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|error| Arc::from(error_chain(&error))),
        }
    }

    /// `get`.
    pub async fn get(&self, raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
        let parsed: GetArgs = parse(GET, raw)?;
        let exchange = Exchange {
            method: Method::GET,
            url: parse_url(GET, &parsed.url)?,
            headers: headers(GET, parsed.headers.as_ref())?,
            body: None,
            timeout: self.timeout(GET, parsed.timeout_ms)?,
            max_bytes: self.max_bytes(GET, parsed.max_bytes)?,
        };
        self.send(exchange).await
    }

    /// `post`: `body` is sent as JSON (content type defaulting to
    /// `application/json`), else `bodyString` as it is.
    pub async fn post(&self, raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
        let parsed: PostArgs = parse(POST, raw)?;
        let mut request_headers = headers(POST, parsed.headers.as_ref())?;
        let body = match (parsed.body, parsed.body_string) {
            (Some(object), _) => {
                if !request_headers.contains_key(CONTENT_TYPE) {
                    request_headers
                        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                }
                Some(JsonValue::Object(object).to_string())
            }
            (None, text) => text,
        };
        let exchange = Exchange {
            method: Method::POST,
            url: parse_url(POST, &parsed.url)?,
            headers: request_headers,
            body,
            timeout: self.timeout(POST, parsed.timeout_ms)?,
            max_bytes: self.max_bytes(POST, parsed.max_bytes)?,
        };
        self.send(exchange).await
    }

    fn timeout(&self, tool: &str, requested: Option<u64>) -> Result<Duration, BuiltinToolError> {
        match requested.unwrap_or(self.config.default_timeout_ms) {
            0 => Err(invalid(tool, "`timeoutMs` must be at least 1")),
            millis => Ok(Duration::from_millis(millis)),
        }
    }

    fn max_bytes(&self, tool: &str, requested: Option<u64>) -> Result<u64, BuiltinToolError> {
        match requested.unwrap_or(self.config.default_max_bytes) {
            0 => Err(invalid(tool, "`maxBytes` must be at least 1")),
            bytes => Ok(bytes),
        }
    }

    async fn send(&self, exchange: Exchange) -> Result<JsonValue, BuiltinToolError> {
        let started = Instant::now();
        let method_name = if exchange.method == Method::GET {
            "GET"
        } else {
            "POST"
        };
        let url_text = exchange.url.to_string();
        let request_failed = |error: reqwest::Error| BuiltinToolError::HttpRequest {
            method: method_name,
            url: url_text.clone(),
            message: error_chain(&error),
        };
        let timeout = exchange.timeout;
        let max_bytes = exchange.max_bytes;
        let client = self
            .client
            .as_ref()
            .map_err(|message| BuiltinToolError::HttpRequest {
                method: method_name,
                url: url_text.clone(),
                message: message.to_string(),
            })?;
        let work = async {
            let mut request = client
                .request(exchange.method.clone(), exchange.url.clone())
                .headers(exchange.headers);
            if let Some(body) = exchange.body {
                request = request.body(body);
            }
            let mut response = request.send().await.map_err(request_failed)?;
            let status = response.status();
            let mut response_headers = JsonObject::new();
            for (name, value) in response.headers() {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                match response_headers.get_mut(name.as_str()) {
                    Some(JsonValue::String(existing)) => {
                        existing.push_str(", ");
                        existing.push_str(&value);
                    }
                    _ => {
                        response_headers
                            .insert(name.as_str().to_string(), JsonValue::String(value));
                    }
                }
            }
            let mut body = Vec::new();
            let mut truncated = false;
            while let Some(chunk) = response.chunk().await.map_err(request_failed)? {
                let room = usize::try_from(max_bytes)
                    .unwrap_or(usize::MAX)
                    .saturating_sub(body.len());
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            Ok::<_, BuiltinToolError>(json!({
                "url": url_text,
                "method": method_name,
                "status": status.as_u16(),
                "statusText": status.canonical_reason().unwrap_or(""),
                "headers": response_headers,
                "body": decode_prefix(&body),
                "truncated": truncated,
                "durationMs": started.elapsed().as_millis() as u64,
            }))
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(result) => result,
            Err(_elapsed) => Err(BuiltinToolError::HttpTimeout {
                method: method_name,
                url: exchange.url.to_string(),
                timeout_ms: timeout.as_millis() as u64,
            }),
        }
    }
}

impl Default for HttpFetchTool {
    fn default() -> Self {
        HttpFetchTool::new(HttpFetchConfig::default())
    }
}

fn parse_url(tool: &str, text: &str) -> Result<Url, BuiltinToolError> {
    require_non_empty(tool, "url", text)?;
    let url = Url::parse(text).map_err(|error| BuiltinToolError::InvalidUrl {
        url: text.to_string(),
        message: error.to_string(),
    })?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(BuiltinToolError::UnsupportedScheme {
            url: text.to_string(),
            scheme: other.to_string(),
        }),
    }
}

fn headers(tool: &str, object: Option<&JsonObject>) -> Result<HeaderMap, BuiltinToolError> {
    let mut map = HeaderMap::new();
    for (name, value) in primitive_map(tool, "headers", object)? {
        let header_name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| invalid(tool, format!("`headers.{name}` is not a valid header name")))?;
        let header_value = HeaderValue::from_str(&value).map_err(|_| {
            invalid(
                tool,
                format!("`headers.{name}` has a value that is not a valid header value"),
            )
        })?;
        map.insert(header_name, header_value);
    }
    Ok(map)
}

/// The error and its causes on one line; reqwest's top-level message alone
/// ("error sending request") hides the useful part.
fn error_chain(error: &reqwest::Error) -> String {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::HeaderMap as AxumHeaders;
    use axum::routing::{get, post};
    use axum::Router;

    fn object(value: JsonValue) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    fn app() -> Router {
        Router::new()
            .route(
                "/hello",
                get(|headers: AxumHeaders| async move {
                    let greeting = headers
                        .get("x-greeting")
                        .and_then(|value| value.to_str().ok())
                        .unwrap_or("none")
                        .to_string();
                    ([("x-served-by", "test")], format!("hello {greeting}"))
                }),
            )
            .route("/big", get(|| async { "x".repeat(1_000_000) }))
            .route(
                "/endless",
                get(|| async {
                    let chunks = futures_util::stream::repeat_with(|| {
                        Ok::<_, std::io::Error>(axum::body::Bytes::from_static(&[b'y'; 4096]))
                    });
                    Body::from_stream(chunks)
                }),
            )
            .route(
                "/echo",
                post(|headers: AxumHeaders, body: String| async move {
                    let content_type = headers
                        .get("content-type")
                        .and_then(|value| value.to_str().ok())
                        .unwrap_or("")
                        .to_string();
                    (
                        axum::http::StatusCode::CREATED,
                        format!("{content_type}|{body}"),
                    )
                }),
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            )
    }

    async fn serve() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app()).await.unwrap() });
        format!("http://{address}")
    }

    #[tokio::test]
    async fn get_returns_status_headers_and_body() {
        let base = serve().await;
        let tool = HttpFetchTool::default();
        let output = tool
            .get(&object(
                json!({"url": format!("{base}/hello"), "headers": {"x-greeting": "rust"}}),
            ))
            .await
            .unwrap();
        assert_eq!(output["status"], json!(200));
        assert_eq!(output["statusText"], json!("OK"));
        assert_eq!(output["body"], json!("hello rust"));
        assert_eq!(output["headers"]["x-served-by"], json!("test"));
        assert_eq!(output["truncated"], json!(false));
    }

    #[tokio::test]
    async fn post_sends_json_or_raw_bodies() {
        let base = serve().await;
        let tool = HttpFetchTool::default();
        let json_post = tool
            .post(&object(
                json!({"url": format!("{base}/echo"), "body": {"a": 1}}),
            ))
            .await
            .unwrap();
        assert_eq!(json_post["status"], json!(201));
        assert_eq!(json_post["body"], json!("application/json|{\"a\":1}"));
        let raw_post = tool
            .post(&object(json!({
                "url": format!("{base}/echo"),
                "bodyString": "plain",
                "headers": {"content-type": "text/plain"}
            })))
            .await
            .unwrap();
        assert_eq!(raw_post["body"], json!("text/plain|plain"));
    }

    #[tokio::test]
    async fn huge_and_endless_bodies_are_capped() {
        let base = serve().await;
        let tool = HttpFetchTool::default();
        let big = tool
            .get(&object(
                json!({"url": format!("{base}/big"), "maxBytes": 1000}),
            ))
            .await
            .unwrap();
        assert_eq!(big["body"].as_str().unwrap().len(), 1000);
        assert_eq!(big["truncated"], json!(true));
        let endless = tool
            .get(&object(json!({"url": format!("{base}/endless")})))
            .await
            .unwrap();
        assert_eq!(endless["body"].as_str().unwrap().len(), 500_000);
        assert_eq!(endless["truncated"], json!(true));
    }

    #[tokio::test]
    async fn timeouts_and_bad_input_are_structured_errors() {
        let base = serve().await;
        let tool = HttpFetchTool::default();
        let slow = tool
            .get(&object(
                json!({"url": format!("{base}/slow"), "timeoutMs": 100}),
            ))
            .await
            .unwrap_err();
        assert_eq!(slow.code(), "E_HTTP_TIMEOUT");
        let cases = [
            (
                json!({"url": "file:///etc/passwd"}),
                "E_HTTP_UNSUPPORTED_SCHEME",
            ),
            (
                json!({"url": "ftp://example.invalid/x"}),
                "E_HTTP_UNSUPPORTED_SCHEME",
            ),
            (json!({"url": "not a url"}), "E_HTTP_INVALID_URL"),
            (json!({}), "E_TOOL_INVALID_ARGS"),
            (
                json!({"url": format!("{base}/hello"), "headers": {"bad header": "x"}}),
                "E_TOOL_INVALID_ARGS",
            ),
            (
                json!({"url": format!("{base}/hello"), "maxBytes": 0}),
                "E_TOOL_INVALID_ARGS",
            ),
        ];
        for (input, code) in cases {
            let error = tool.get(&object(input.clone())).await.unwrap_err();
            assert_eq!(error.code(), code, "{input}");
        }
        // A closed port on loopback: the transport error names the cause.
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap()
        };
        let refused = tool
            .get(&object(json!({"url": format!("http://{closed}/")})))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), "E_HTTP_REQUEST");
    }
}
