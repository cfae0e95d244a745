//! Who may read the Studio.
//!
//! On a loopback address anyone on this machine may, but only through a
//! loopback `Host` header: a web page elsewhere that rebinds its own
//! name to 127.0.0.1 (DNS rebinding) sends its own name as `Host` and is
//! refused. On any other address every request needs the token: either
//! `?token=` on the URL (answered with a redirect that sets it as an
//! `HttpOnly`, `SameSite=Strict` cookie, so it leaves the address bar and
//! history) or that cookie. Tokens are compared in constant time, and
//! must be as strong as every port's ([`goondan_http::token`]).
//!
//! The redirect keeps to the Studio's own origin: a path that a browser
//! would read as another host (`//evil.example`, `/\evil.example`, or one
//! that decodes to either) is sent to `/` instead, so a link with the
//! token cannot bounce a visitor to another site.

use crate::error::StudioError;
use axum::http::{header, HeaderMap, Uri};
use goondan_http::token::{self, same_secret};
use std::net::SocketAddr;

/// The cookie that carries the token after the first visit.
pub const COOKIE_NAME: &str = "gdn_studio";
/// The shortest token accepted from the environment: the rule every
/// port shares.
pub const MIN_TOKEN_LENGTH: usize = token::MIN_TOKEN_CHARS;

/// How requests are let in.
#[derive(Debug, Clone)]
pub enum Access {
    /// Bound to loopback: no token, but the `Host` must be a loopback
    /// name with the bound port.
    Loopback {
        /// The bound port.
        port: u16,
    },
    /// Bound beyond loopback: every request carries the token.
    Token {
        /// The secret.
        token: String,
    },
}

/// Why a request was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The `Host` header is not this loopback server (403).
    ForeignHost,
    /// No token, or a wrong one (401).
    Unauthorized,
}

/// What the gate decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Serve the request.
    Allow,
    /// The right token came on the URL: redirect to the same path without
    /// it, setting the cookie.
    SetCookie {
        /// Where to send the browser.
        location: String,
    },
    /// Refuse.
    Refuse(Refusal),
}

impl Access {
    /// The access for a Studio bound to `addr`: loopback needs no token;
    /// any other address takes `token` (at least [`MIN_TOKEN_LENGTH`]
    /// characters) or a new random one.
    pub fn for_address(addr: SocketAddr, token: Option<String>) -> Result<Access, StudioError> {
        if addr.ip().is_loopback() {
            return Ok(Access::Loopback { port: addr.port() });
        }
        let token = match token {
            Some(token) => {
                token::check_strength(&token).map_err(
                    |goondan_http::HttpError::WeakToken { length, minimum }| {
                        StudioError::WeakToken { length, minimum }
                    },
                )?;
                token
            }
            None => token::generate(),
        };
        Ok(Access::Token { token })
    }

    /// The token, when one is required.
    pub fn token(&self) -> Option<&str> {
        match self {
            Access::Loopback { .. } => None,
            Access::Token { token } => Some(token),
        }
    }

    /// Decides about one request.
    pub fn decide(&self, uri: &Uri, headers: &HeaderMap) -> Decision {
        match self {
            Access::Loopback { port } => {
                let host = headers
                    .get(header::HOST)
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or_default();
                if is_loopback_host(host, *port) {
                    Decision::Allow
                } else {
                    Decision::Refuse(Refusal::ForeignHost)
                }
            }
            Access::Token { token } => {
                if let Some(offered) = query_value(uri, "token") {
                    return if same_secret(offered.as_bytes(), token.as_bytes()) {
                        Decision::SetCookie {
                            location: own_origin_path(uri.path()),
                        }
                    } else {
                        Decision::Refuse(Refusal::Unauthorized)
                    };
                }
                let cookie_ok = cookie_values(headers, COOKIE_NAME)
                    .any(|offered| same_secret(offered.as_bytes(), token.as_bytes()));
                if cookie_ok {
                    Decision::Allow
                } else {
                    Decision::Refuse(Refusal::Unauthorized)
                }
            }
        }
    }
}

/// `path` when a browser resolves it on this origin, else `/`.
///
/// A browser reads a `Location` that starts with `//` (or `/\`, since it
/// treats `\` as `/`, and after dropping tabs and newlines) as
/// `//host/...` on another site. The decoded form is checked too
/// (`/%2F%2Fevil.example`), so no proxy or browser that decodes before
/// resolving turns it into one.
fn own_origin_path(path: &str) -> String {
    let leaves = |candidate: &str| {
        let kept: String = candidate
            .chars()
            .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
            .collect();
        let mut chars = kept.chars();
        chars.next() != Some('/') || matches!(chars.next(), Some('/' | '\\'))
    };
    if leaves(path) || leaves(&percent_decoded(path)) {
        "/".to_string()
    } else {
        path.to_string()
    }
}

/// `text` with every `%XX` escape decoded (bytes that are not UTF-8 are
/// replaced, which only matters for the checks above).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escaped = (bytes[index] == b'%')
            .then(|| bytes.get(index + 1..index + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match escaped {
            Some(byte) => {
                decoded.push(byte);
                index += 3;
            }
            None => {
                decoded.push(bytes[index]);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

fn is_loopback_host(host: &str, port: u16) -> bool {
    let names = ["127.0.0.1", "localhost", "[::1]"];
    names.iter().any(|name| host == format!("{name}:{port}"))
}

/// The value of `name` in the URL's query (no percent-decoding: tokens
/// are hex).
pub(crate) fn query_value<'a>(uri: &'a Uri, name: &str) -> Option<&'a str> {
    uri.query()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name).then_some(value)
    })
}

fn cookie_values<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|line| line.split(';'))
        .filter_map(move |pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then_some(value)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn loopback_checks_the_host() {
        let access = Access::for_address("127.0.0.1:4000".parse().unwrap(), None).unwrap();
        let uri: Uri = "/api/swarms".parse().unwrap();
        let cases = [
            ("127.0.0.1:4000", Decision::Allow),
            ("localhost:4000", Decision::Allow),
            ("evil.example:4000", Decision::Refuse(Refusal::ForeignHost)),
            ("127.0.0.1:4001", Decision::Refuse(Refusal::ForeignHost)),
            ("", Decision::Refuse(Refusal::ForeignHost)),
        ];
        for (host, expected) in cases {
            assert_eq!(
                access.decide(&uri, &headers(&[("host", host)])),
                expected,
                "{host}"
            );
        }
    }

    #[test]
    fn beyond_loopback_the_token_is_needed_on_the_url_or_in_the_cookie() {
        let token = "a".repeat(32);
        let access =
            Access::for_address("0.0.0.0:4000".parse().unwrap(), Some(token.clone())).unwrap();
        let plain: Uri = "/".parse().unwrap();
        let with_token: Uri = format!("/?token={token}").parse().unwrap();
        let wrong: Uri = "/?token=bbbb".parse().unwrap();
        assert_eq!(
            access.decide(&with_token, &HeaderMap::new()),
            Decision::SetCookie {
                location: "/".into()
            }
        );
        assert_eq!(
            access.decide(&wrong, &HeaderMap::new()),
            Decision::Refuse(Refusal::Unauthorized)
        );
        assert_eq!(
            access.decide(&plain, &HeaderMap::new()),
            Decision::Refuse(Refusal::Unauthorized)
        );
        let cookie = format!("other=1; {COOKIE_NAME}={token}");
        assert_eq!(
            access.decide(&plain, &headers(&[("cookie", &cookie)])),
            Decision::Allow
        );
        let bad_cookie = format!("{COOKIE_NAME}={}", "b".repeat(32));
        assert_eq!(
            access.decide(&plain, &headers(&[("cookie", &bad_cookie)])),
            Decision::Refuse(Refusal::Unauthorized)
        );
    }

    #[test]
    fn the_redirect_never_leaves_the_studio() {
        let cases = [
            ("/", "/"),
            ("/api/swarms", "/api/swarms"),
            ("/a//b", "/a//b"),
            ("/%2e%2e", "/%2e%2e"),
            ("//evil.example/%2e%2e", "/"),
            ("///evil.example", "/"),
            ("/\\evil.example", "/"),
            ("/\t/evil.example", "/"),
            ("/%2F%2Fevil.example", "/"),
            ("/%2fevil.example", "/"),
            ("/%5Cevil.example", "/"),
            ("/%09/evil.example", "/"),
            ("evil.example", "/"),
        ];
        for (path, expected) in cases {
            assert_eq!(own_origin_path(path), expected, "{path:?}");
        }
    }

    #[test]
    fn a_short_token_is_refused_and_none_gets_a_long_random_one() {
        let error =
            Access::for_address("0.0.0.0:1".parse().unwrap(), Some("short".into())).unwrap_err();
        assert_eq!(error.code(), "E_STUDIO_TOKEN_WEAK");
        let generated = Access::for_address("0.0.0.0:1".parse().unwrap(), None).unwrap();
        assert_eq!(generated.token().unwrap().len(), 64);
    }
}
