//! The guards every port applies to a request before reading its body:
//! a bearer token when one is configured (compared in constant time), an
//! `Origin` that, when present, must name a loopback host unless remote
//! clients are allowed (the defence against DNS rebinding of a local
//! server), and a `Host` that names this server: a loopback name, or
//! with remote clients allowed also an IP address or one of
//! [`HttpAccess::allowed_hosts`]. The `Host` check is the one a
//! rebinding page cannot dodge: its browser sends the attacker's own
//! name there, and may send no `Origin` at all.

use crate::token::same_secret;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;

/// Who may call a port: the guards every router applies before it reads
/// a body.
#[derive(Debug, Clone, Default)]
pub struct HttpAccess {
    /// Requests must carry `Authorization: Bearer <token>`.
    pub bearer_token: Option<String>,
    /// Whether clients beyond loopback are expected: an `Origin` other
    /// than a loopback host is accepted, and so is a `Host` that is an IP
    /// address or one of [`HttpAccess::allowed_hosts`]. Without it only
    /// loopback names pass.
    pub allow_remote_origins: bool,
    /// Host names (without port) clients may reach the server by, beside
    /// loopback names and IP addresses, when remote clients are allowed
    /// (`--allowed-host`); compared without regard to case.
    pub allowed_hosts: Vec<String>,
}

impl HttpAccess {
    /// Refuses a missing or wrong bearer token (401) and a foreign
    /// `Origin` or `Host` (403).
    pub fn admit(&self, headers: &HeaderMap) -> Result<(), StatusCode> {
        if let Some(token) = &self.bearer_token {
            let given = bearer_token(headers).unwrap_or("");
            if !same_secret(given.as_bytes(), token.as_bytes()) {
                return Err(StatusCode::UNAUTHORIZED);
            }
        }
        // Two `Origin` (or `Host`) headers are refused rather than one of
        // them read: a proxy and this server could read different ones.
        let origin = single(headers, header::ORIGIN)?;
        if !self.allow_remote_origins
            && origin.is_some_and(|origin| !is_loopback_origin(origin.to_str().unwrap_or("")))
        {
            return Err(StatusCode::FORBIDDEN);
        }
        let host = single(headers, header::HOST)?.and_then(|value| value.to_str().ok());
        if !host.is_some_and(|host| is_own_host(host, self)) {
            return Err(StatusCode::FORBIDDEN);
        }
        Ok(())
    }
}

/// The token of an `Authorization: Bearer <token>` header, the scheme's
/// name read without regard to case (RFC 7235 §2.1: `bearer`, `BEARER`
/// and `Bearer` are one scheme); `None` without such a header. Every port
/// that takes a bearer token reads it here.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_matches(' '))
}

/// The one value of header `name`, `None` without it; 403 when the
/// request repeats it.
pub fn single(
    headers: &HeaderMap,
    name: header::HeaderName,
) -> Result<Option<&header::HeaderValue>, StatusCode> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(StatusCode::FORBIDDEN);
    }
    Ok(first)
}

/// The bare answer to a request [`HttpAccess::admit`] refused; a 401 says
/// which scheme.
pub fn refusal(status: StatusCode) -> Response {
    if status == StatusCode::UNAUTHORIZED {
        return (status, [(header::WWW_AUTHENTICATE, "Bearer")]).into_response();
    }
    status.into_response()
}

/// Whether `origin` (`scheme://host[:port]`) names a loopback host.
fn is_loopback_origin(origin: &str) -> bool {
    let Some((_, rest)) = origin.split_once("://") else {
        return false;
    };
    is_loopback_name(host_of(rest.split('/').next().unwrap_or("")))
}

/// The host of an authority (`host[:port]`, `[v6][:port]`), without port
/// or brackets.
fn host_of(authority: &str) -> &str {
    if let Some(bracketed) = authority.strip_prefix('[') {
        bracketed.split(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    }
}

fn is_loopback_name(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<IpAddr>()
            .is_ok_and(|address| address.is_loopback())
}

/// Whether a `Host` header names this server. A loopback name always
/// does. With remote clients allowed, so does an IP address (a page
/// cannot rebind an address, only a name) and a configured name; any
/// other name is what a DNS-rebinding page would send.
fn is_own_host(host_header: &str, access: &HttpAccess) -> bool {
    let host = host_of(host_header);
    if is_loopback_name(host) {
        return true;
    }
    access.allow_remote_origins
        && (host.parse::<IpAddr>().is_ok()
            || access
                .allowed_hosts
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(host)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_read_without_regard_to_case() {
        let cases = [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("BEARER  abc", Some("abc")),
            ("Basic abc", None),
            ("Bearerabc", None),
            ("abc", None),
        ];
        for (value, expected) in cases {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            assert_eq!(bearer_token(&headers), expected, "{value}");
        }
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[test]
    fn a_repeated_origin_or_host_is_refused() {
        let access = HttpAccess::default();
        for name in [header::ORIGIN, header::HOST] {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, "127.0.0.1:1".parse().unwrap());
            headers.insert(header::ORIGIN, "http://127.0.0.1:1".parse().unwrap());
            assert_eq!(access.admit(&headers), Ok(()));
            let again = if name == header::HOST {
                "127.0.0.1:1"
            } else {
                "http://127.0.0.1:1"
            };
            headers.append(name.clone(), again.parse().unwrap());
            assert_eq!(access.admit(&headers), Err(StatusCode::FORBIDDEN), "{name}");
        }
    }

    #[test]
    fn only_loopback_origins_pass() {
        let cases = [
            ("http://localhost:3000", true),
            ("http://127.0.0.1", true),
            ("https://[::1]:8080", true),
            ("http://127.9.9.9:1", true),
            ("https://evil.example", false),
            ("http://localhost.evil.example", false),
            ("null", false),
        ];
        for (origin, expected) in cases {
            assert_eq!(is_loopback_origin(origin), expected, "{origin}");
        }
    }

    #[test]
    fn the_host_must_name_this_server() {
        let local = HttpAccess::default();
        let remote = HttpAccess {
            bearer_token: Some("t".repeat(32)),
            allow_remote_origins: true,
            allowed_hosts: vec!["mcp.example.com".into()],
        };
        let cases = [
            ("127.0.0.1:8765", true, true),
            ("localhost:8765", true, true),
            ("LOCALHOST", true, true),
            ("[::1]:8765", true, true),
            ("127.0.0.2", true, true),
            ("evil.example:8765", false, false),
            ("localhost.evil.example", false, false),
            ("192.0.2.7:8765", false, true),
            ("[2001:db8::1]:8765", false, true),
            ("mcp.example.com:443", false, true),
            ("MCP.example.com", false, true),
            ("mcp.example.com.evil.example", false, false),
            ("", false, false),
        ];
        for (host, on_loopback, with_remote) in cases {
            assert_eq!(is_own_host(host, &local), on_loopback, "{host} (loopback)");
            assert_eq!(is_own_host(host, &remote), with_remote, "{host} (remote)");
        }
    }
}
