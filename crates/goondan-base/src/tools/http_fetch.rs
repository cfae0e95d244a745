//! The `http-fetch` tool: `get` and `post` over http and https only, with a
//! timeout covering the whole exchange and a cap on the body kept.
//!
//! The body is read chunk by chunk and the connection dropped once the cap
//! is reached, so a huge or endless answer costs at most the cap in memory.
//!
//! # Internal addresses
//!
//! A model that can fetch any URL can reach what only the agent's host
//! should: the cloud metadata service, a database's admin port, anything
//! on loopback or the private network. So every hop is checked *after*
//! DNS resolution: each address the host resolves to must be public (see
//! [`blocked_category`]), and the connection then goes to exactly the
//! addresses checked (the shared client's resolver answers a domain only
//! with the addresses its hop pinned, [`PinnedResolver`]), so a DNS answer
//! that changes between the check and the connect cannot swap them. Redirects are followed by hand, at most five, each hop checked the
//! same way and reported in the result (`redirects`).
//!
//! Hosts meant to be reachable anyway are listed in
//! [`HttpFetchConfig::allow_hosts`] or, for a running agent whose catalog
//! is built with default options, in the `GOONDAN_HTTP_FETCH_ALLOW`
//! environment variable: comma-separated `host` (any port) or `host:port`
//! entries, IPv6 hosts in brackets (`[::1]:8080`). A listed host is
//! matched as written in the URL and is not address-checked. The Tool
//! resource has no config field of its own, which is why the list comes
//! from the environment rather than from `goondan.yaml`.

use crate::args::{invalid, parse, primitive_map, require_non_empty, whole_number};
use crate::error::BuiltinToolError;
use crate::tools::capped_text::decode_prefix;
use goondan_types::error_chain;
use goondan_types::{JsonObject, JsonValue};
use reqwest::header::{
    HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, COOKIE, LOCATION,
    PROXY_AUTHORIZATION,
};
use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use serde_json::json;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const GET: &str = "http-fetch__get";
const POST: &str = "http-fetch__post";

/// The environment variable whose entries are added to
/// [`HttpFetchConfig::allow_hosts`] (see the module docs).
pub const ALLOW_ENV: &str = "GOONDAN_HTTP_FETCH_ALLOW";

/// How many redirects one call follows before giving up.
const MAX_REDIRECTS: usize = 5;

/// Options of the `http-fetch` tool, from the Tool's config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpFetchConfig {
    /// The timeout when a call gives none.
    pub default_timeout_ms: u64,
    /// `maxBytes` when a call gives none.
    pub default_max_bytes: u64,
    /// Hosts that may be reached even when they are internal addresses:
    /// `host` (any port) or `host:port`, IPv6 in brackets. The tool adds
    /// the entries of `GOONDAN_HTTP_FETCH_ALLOW`.
    pub allow_hosts: Vec<String>,
}

impl Default for HttpFetchConfig {
    fn default() -> Self {
        HttpFetchConfig {
            default_timeout_ms: 30_000,
            default_max_bytes: 500_000,
            allow_hosts: Vec::new(),
        }
    }
}

/// One allow-list entry, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AllowedHost {
    /// Lowercase, without IPv6 brackets.
    host: String,
    /// `None` allows every port.
    port: Option<u16>,
}

impl AllowedHost {
    fn parse(entry: &str) -> Option<AllowedHost> {
        let entry = entry.trim();
        if entry.is_empty() {
            return None;
        }
        let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
            let (host, after) = rest.split_once(']')?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':')?.parse().ok()?),
            };
            (host, port)
        } else {
            match entry.rsplit_once(':') {
                // One colon is host:port; more is a bare IPv6 address.
                Some((host, port)) if !host.contains(':') => (host, Some(port.parse().ok()?)),
                _ => (entry, None),
            }
        };
        if host.is_empty() {
            return None;
        }
        Some(AllowedHost {
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    fn matches(&self, host: &str, port: Option<u16>) -> bool {
        self.host == host && (self.port.is_none() || self.port == port)
    }
}

/// Why an address is internal, or `None` for a public one. IPv4 addresses
/// carried in IPv6 (mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::/96`) are
/// judged as the IPv4 address they reach.
pub fn blocked_category(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return blocked_v4(v4);
            }
            let segments = v6.segments();
            if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [a, b] = segments[6].to_be_bytes();
                let [c, d] = segments[7].to_be_bytes();
                return blocked_v4(Ipv4Addr::new(a, b, c, d));
            }
            blocked_v6(v6)
        }
    }
}

fn blocked_v4(address: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, d] = address.octets();
    Some(match (a, b, c, d) {
        (169, 254, 169, 254) => "cloud metadata",
        (0, ..) => "unspecified",
        (127, ..) => "loopback",
        (10, ..) => "private",
        (172, 16..=31, ..) => "private",
        (192, 168, ..) => "private",
        (100, 64..=127, ..) => "carrier-grade NAT",
        (169, 254, ..) => "link-local",
        (224..=239, ..) => "multicast",
        (240..=255, ..) => "reserved or broadcast",
        _ => return None,
    })
}

fn blocked_v6(address: Ipv6Addr) -> Option<&'static str> {
    let first = address.segments()[0];
    Some(match address {
        // AWS's IPv6 instance metadata service.
        _ if address == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) => "cloud metadata",
        _ if address.is_unspecified() => "unspecified",
        _ if address.is_loopback() => "loopback",
        _ if first & 0xfe00 == 0xfc00 => "unique local (private)",
        _ if first & 0xffc0 == 0xfe80 => "link-local",
        _ if first & 0xffc0 == 0xfec0 => "site-local",
        _ if first & 0xff00 == 0xff00 => "multicast",
        _ => return None,
    })
}

/// Where one hop connects (the `a2a` extension checks a remote agent's
/// endpoint with the same [`HttpFetchTool::destination`]).
pub(crate) enum Destination {
    /// The URL names an IP address; the connection goes there.
    Literal,
    /// The URL names a domain, resolved to these (checked) addresses.
    Resolved {
        domain: String,
        addresses: Vec<SocketAddr>,
    },
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
    allowed: Arc<[AllowedHost]>,
    /// The connection pool of every hop, or why it could not be built (no
    /// TLS roots, for example); that becomes each call's error rather than
    /// a panic at startup. Built on first use: building a client reads the
    /// platform's certificate store, which an agent that never fetches
    /// should not pay for at start-up, and which one client reads once.
    client: Arc<OnceLock<Result<reqwest::Client, Arc<str>>>>,
    /// The client's DNS: the checked addresses of the hops under way.
    resolver: Arc<PinnedResolver>,
}

/// The shared client's DNS. A hop pins its domain to the addresses it
/// checked for as long as it connects ([`PinnedResolver::pin`]), and the
/// client then connects to exactly those. A name no hop pinned is one the
/// tool never asked for (a proxy named by `HTTPS_PROXY`, chosen by the
/// user), and the system resolves it.
#[derive(Debug, Default)]
struct PinnedResolver {
    pinned: Mutex<HashMap<String, PinnedName>>,
}

#[derive(Debug)]
struct PinnedName {
    addresses: Arc<[SocketAddr]>,
    /// Hops connecting to this name now; the pin goes with the last.
    hops: usize,
}

impl PinnedResolver {
    /// Pins `domain` to `addresses` until the guard is dropped. Two hops
    /// to one domain at once both pass their checks, so the later set is
    /// as safe to connect to as the earlier.
    fn pin(self: &Arc<Self>, domain: &str, addresses: &[SocketAddr]) -> PinGuard {
        let mut pinned = self.pinned.lock().unwrap_or_else(|e| e.into_inner());
        let entry = pinned.entry(domain.to_string()).or_insert(PinnedName {
            addresses: Arc::from(addresses),
            hops: 0,
        });
        entry.addresses = Arc::from(addresses);
        entry.hops += 1;
        PinGuard {
            resolver: self.clone(),
            domain: domain.to_string(),
        }
    }
}

impl reqwest::dns::Resolve for PinnedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let pinned = self
            .pinned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name.as_str())
            .map(|pin| pin.addresses.clone());
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = match pinned {
                Some(addresses) => addresses.to_vec(),
                // Port 0: the client puts the URL's port in.
                None => tokio::net::lookup_host((host.as_str(), 0)).await?.collect(),
            };
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Releases a hop's pin.
struct PinGuard {
    resolver: Arc<PinnedResolver>,
    domain: String,
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        let mut pinned = self
            .resolver
            .pinned
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = pinned.get_mut(&self.domain) {
            entry.hops -= 1;
            if entry.hops == 0 {
                pinned.remove(&self.domain);
            }
        }
    }
}

fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .user_agent(concat!("goondan-http-fetch/", env!("CARGO_PKG_VERSION")))
        // Redirects are followed by hand so each hop is checked.
        .redirect(reqwest::redirect::Policy::none())
}

fn method_name(method: &Method) -> &'static str {
    if method == Method::POST {
        "POST"
    } else {
        "GET"
    }
}

impl HttpFetchTool {
    /// The tool with `config`, the entries of `GOONDAN_HTTP_FETCH_ALLOW`
    /// added to its allow list, and a fresh connection pool.
    pub fn new(mut config: HttpFetchConfig) -> Self {
        if let Ok(entries) = std::env::var(ALLOW_ENV) {
            config
                .allow_hosts
                .extend(entries.split(',').map(str::to_string));
        }
        let allowed: Vec<AllowedHost> = config
            .allow_hosts
            .iter()
            .filter(|entry| !entry.trim().is_empty())
            .filter_map(|entry| {
                let parsed = AllowedHost::parse(entry);
                if parsed.is_none() {
                    tracing::warn!(entry = %entry, "http-fetch ignores an allow-list entry that is not host or host:port");
                }
                parsed
            })
            .collect();
        HttpFetchTool {
            config,
            allowed: allowed.into(),
            client: Arc::default(),
            resolver: Arc::default(),
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

    /// Checks where `url` leads: an allowed host passes as it is; anything
    /// else must resolve only to public addresses.
    pub(crate) async fn destination(
        &self,
        method: &'static str,
        url: &Url,
    ) -> Result<Destination, BuiltinToolError> {
        let port = url.port_or_known_default();
        let Some(host_str) = url.host_str() else {
            return Err(BuiltinToolError::InvalidUrl {
                url: url.to_string(),
                message: "the URL has no host".into(),
            });
        };
        // The URL parser lowercases domains and writes IPv6 in brackets.
        let host_text = host_str
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let literal = host_text.parse::<IpAddr>().ok();
        let allowed = self
            .allowed
            .iter()
            .any(|entry| entry.matches(&host_text, port));
        let blocked = |address: IpAddr, category: &'static str| BuiltinToolError::HttpBlocked {
            method,
            url: url.to_string(),
            host: url.host_str().unwrap_or_default().to_string(),
            address: address.to_string(),
            category,
        };
        if let Some(address) = literal {
            return match blocked_category(address) {
                Some(category) if !allowed => Err(blocked(address, category)),
                _ => Ok(Destination::Literal),
            };
        }
        let addresses: Vec<SocketAddr> =
            tokio::net::lookup_host((host_text.as_str(), port.unwrap_or(80)))
                .await
                .map_err(|error| BuiltinToolError::HttpRequest {
                    method,
                    url: url.to_string(),
                    message: format!("cannot resolve {host_text}: {error}"),
                })?
                .collect();
        if addresses.is_empty() {
            return Err(BuiltinToolError::HttpRequest {
                method,
                url: url.to_string(),
                message: format!("{host_text} resolves to no address"),
            });
        }
        if !allowed {
            for address in &addresses {
                if let Some(category) = blocked_category(address.ip()) {
                    return Err(blocked(address.ip(), category));
                }
            }
        }
        Ok(Destination::Resolved {
            domain: host_text,
            addresses,
        })
    }

    /// The shared client, built on first use.
    fn client(&self, method: &'static str, url: &Url) -> Result<reqwest::Client, BuiltinToolError> {
        let resolver = self.resolver.clone();
        self.client
            .get_or_init(|| {
                client_builder()
                    .dns_resolver(resolver)
                    .build()
                    .map_err(|error| Arc::from(error_chain(&error)))
            })
            .clone()
            .map_err(|message| BuiltinToolError::HttpRequest {
                method,
                url: url.to_string(),
                message: message.to_string(),
            })
    }

    async fn send(&self, exchange: Exchange) -> Result<JsonValue, BuiltinToolError> {
        let started = Instant::now();
        let first_method = method_name(&exchange.method);
        let first_url = exchange.url.to_string();
        let timeout = exchange.timeout;
        let max_bytes = exchange.max_bytes;
        let work = async {
            let mut url = exchange.url;
            let mut method = exchange.method;
            let mut headers = exchange.headers;
            let mut body = exchange.body;
            let mut redirects = Vec::new();
            let mut response = loop {
                let name = method_name(&method);
                let destination = self.destination(name, &url).await?;
                let client = self.client(name, &url)?;
                let _pin = match &destination {
                    Destination::Literal => None,
                    Destination::Resolved { domain, addresses } => {
                        Some(self.resolver.pin(domain, addresses))
                    }
                };
                let mut request = client
                    .request(method.clone(), url.clone())
                    .headers(headers.clone());
                if let Some(body) = &body {
                    request = request.body(body.clone());
                }
                let response =
                    request
                        .send()
                        .await
                        .map_err(|error| BuiltinToolError::HttpRequest {
                            method: name,
                            url: url.to_string(),
                            message: error_chain(&error),
                        })?;
                let status = response.status();
                let location = response
                    .headers()
                    .get(LOCATION)
                    .and_then(|value| value.to_str().ok())
                    .map(str::to_string);
                let Some(location) = location.filter(|_| status.is_redirection()) else {
                    break response;
                };
                if redirects.len() == MAX_REDIRECTS {
                    return Err(BuiltinToolError::HttpRequest {
                        method: name,
                        url: url.to_string(),
                        message: format!("more than {MAX_REDIRECTS} redirects"),
                    });
                }
                let next = url
                    .join(&location)
                    .map_err(|error| BuiltinToolError::InvalidUrl {
                        url: location.clone(),
                        message: format!("redirect from {url}: {error}"),
                    })?;
                if !matches!(next.scheme(), "http" | "https") {
                    return Err(BuiltinToolError::UnsupportedScheme {
                        url: next.to_string(),
                        scheme: next.scheme().to_string(),
                    });
                }
                redirects.push(json!({
                    "status": status.as_u16(),
                    "url": url.as_str(),
                    "location": next.as_str(),
                }));
                // What browsers (and reqwest) do: 303, and 301/302 after a
                // POST, continue as a GET without the body.
                let becomes_get = status == StatusCode::SEE_OTHER
                    || (method == Method::POST
                        && matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND));
                if becomes_get {
                    method = Method::GET;
                    body = None;
                    headers.remove(CONTENT_TYPE);
                }
                // Credentials meant for one origin do not follow to another.
                if next.origin() != url.origin() {
                    for secret in [AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION] {
                        headers.remove(secret);
                    }
                }
                url = next;
            };
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
            let mut response_body = Vec::new();
            let mut truncated = false;
            while let Some(chunk) =
                response
                    .chunk()
                    .await
                    .map_err(|error| BuiltinToolError::HttpRequest {
                        method: method_name(&method),
                        url: url.to_string(),
                        message: error_chain(&error),
                    })?
            {
                let room = usize::try_from(max_bytes)
                    .unwrap_or(usize::MAX)
                    .saturating_sub(response_body.len());
                if chunk.len() > room {
                    response_body.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break;
                }
                response_body.extend_from_slice(&chunk);
            }
            Ok::<_, BuiltinToolError>(json!({
                "url": url.as_str(),
                "method": method_name(&method),
                "status": status.as_u16(),
                "statusText": status.canonical_reason().unwrap_or(""),
                "headers": response_headers,
                "body": decode_prefix(&response_body),
                "truncated": truncated,
                "redirects": redirects,
                "durationMs": started.elapsed().as_millis() as u64,
            }))
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(result) => result,
            Err(_elapsed) => Err(BuiltinToolError::HttpTimeout {
                method: first_method,
                url: first_url,
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

    #[tokio::test]
    async fn a_pinned_domain_resolves_to_its_checked_addresses_while_a_hop_holds_it() {
        use reqwest::dns::Resolve;
        let resolver = Arc::new(PinnedResolver::default());
        let checked: SocketAddr = "93.184.216.34:0".parse().unwrap();
        let resolve =
            |resolver: &Arc<PinnedResolver>| resolver.resolve("example.invalid".parse().unwrap());
        let first = resolver.pin("example.invalid", &[checked]);
        let second = resolver.pin("example.invalid", &[checked]);
        let addresses: Vec<_> = resolve(&resolver).await.unwrap().collect();
        assert_eq!(addresses, vec![checked], "never a fresh DNS answer");
        drop(first);
        assert_eq!(resolve(&resolver).await.unwrap().count(), 1, "still pinned");
        drop(second);
        assert!(
            resolver.pinned.lock().unwrap().is_empty(),
            "the pin went with its last hop"
        );
        assert!(
            resolve(&resolver).await.is_err(),
            "an unpinned name goes to the system resolver (.invalid never resolves)"
        );
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

    /// The tool with the test server's `host:port` on its allow list, the
    /// only way it may reach loopback.
    fn tool_for(base: &str) -> HttpFetchTool {
        HttpFetchTool::new(HttpFetchConfig {
            allow_hosts: vec![base.trim_start_matches("http://").to_string()],
            ..HttpFetchConfig::default()
        })
    }

    #[test]
    fn internal_addresses_are_classified() {
        let cases = [
            ("127.0.0.1", Some("loopback")),
            ("127.8.9.10", Some("loopback")),
            ("10.1.2.3", Some("private")),
            ("172.16.0.1", Some("private")),
            ("172.31.255.255", Some("private")),
            ("172.32.0.1", None),
            ("192.168.1.1", Some("private")),
            ("100.64.0.1", Some("carrier-grade NAT")),
            ("100.127.255.255", Some("carrier-grade NAT")),
            ("100.128.0.1", None),
            ("169.254.169.254", Some("cloud metadata")),
            ("169.254.1.1", Some("link-local")),
            ("0.0.0.0", Some("unspecified")),
            ("224.0.0.1", Some("multicast")),
            ("255.255.255.255", Some("reserved or broadcast")),
            ("8.8.8.8", None),
            ("93.184.216.34", None),
            ("::1", Some("loopback")),
            ("::", Some("unspecified")),
            ("fd00:ec2::254", Some("cloud metadata")),
            ("fc00::1", Some("unique local (private)")),
            ("fdab::1", Some("unique local (private)")),
            ("fe80::1", Some("link-local")),
            ("ff02::1", Some("multicast")),
            ("::ffff:127.0.0.1", Some("loopback")),
            ("::ffff:169.254.169.254", Some("cloud metadata")),
            ("64:ff9b::a00:1", Some("private")),
            ("2606:4700::1111", None),
        ];
        for (address, expected) in cases {
            assert_eq!(
                blocked_category(address.parse().unwrap()),
                expected,
                "{address}"
            );
        }
    }

    #[test]
    fn allow_list_entries_parse_and_match() {
        let parse = |entry: &str| AllowedHost::parse(entry);
        let host = |host: &str, port: Option<u16>| {
            Some(AllowedHost {
                host: host.into(),
                port,
            })
        };
        assert_eq!(parse("Internal.Example"), host("internal.example", None));
        assert_eq!(parse(" 127.0.0.1:8080 "), host("127.0.0.1", Some(8080)));
        assert_eq!(parse("[::1]:8080"), host("::1", Some(8080)));
        assert_eq!(parse("[::1]"), host("::1", None));
        assert_eq!(parse("fd00::1"), host("fd00::1", None));
        for bad in ["", "host:port", "[::1", "[::1]x", ":80"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        let entry = parse("127.0.0.1:8080").unwrap();
        assert!(entry.matches("127.0.0.1", Some(8080)));
        assert!(!entry.matches("127.0.0.1", Some(8081)));
        assert!(parse("localhost").unwrap().matches("localhost", Some(1)));
    }

    #[tokio::test]
    async fn get_returns_status_headers_and_body() {
        let base = serve().await;
        let tool = tool_for(&base);
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
        let tool = tool_for(&base);
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
        let tool = tool_for(&base);
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
        let tool = tool_for(&base);
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
        // A closed (allowed) port on loopback: the transport error names
        // the cause.
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap()
        };
        let refused = tool_for(&closed.to_string())
            .get(&object(json!({"url": format!("http://{closed}/")})))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), "E_HTTP_REQUEST");
    }
}
