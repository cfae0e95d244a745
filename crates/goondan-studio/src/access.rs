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
//! With actions allowed (`gdn studio --allow-actions`) a token exists on
//! loopback too: reads there still need none, but every action needs the
//! cookie ([`Access::may_act`]), so another user of this machine, or a
//! page that got past the `Host` check, cannot act.
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
    /// Bound to loopback: reads need no token, but the `Host` must be a
    /// loopback name with the bound port.
    Loopback {
        /// The bound port.
        port: u16,
        /// The token actions need, when actions are allowed.
        token: Option<String>,
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
    /// The access for a Studio bound to `addr`: loopback needs no token
    /// to read (and has one for actions when `actions` is set); any other
    /// address takes `token` (at least [`MIN_TOKEN_LENGTH`] characters)
    /// or a new random one.
    pub fn for_address(
        addr: SocketAddr,
        token: Option<String>,
        actions: bool,
    ) -> Result<Access, StudioError> {
        if addr.ip().is_loopback() {
            let token = match actions {
                true => Some(strong_or_generated(token)?),
                false => None,
            };
            return Ok(Access::Loopback {
                port: addr.port(),
                token,
            });
        }
        Ok(Access::Token {
            token: strong_or_generated(token)?,
        })
    }

    /// The token, when one exists (beyond loopback, or for actions).
    pub fn token(&self) -> Option<&str> {
        match self {
            Access::Loopback { token, .. } => token.as_deref(),
            Access::Token { token } => Some(token),
        }
    }

    /// Whether a request that [`Access::decide`] let in may also act: it
    /// carries the token in its cookie. Without a token nobody may.
    pub fn may_act(&self, headers: &HeaderMap) -> bool {
        let Some(token) = self.token() else {
            return false;
        };
        cookie_values(headers, COOKIE_NAME)
            .any(|offered| same_secret(offered.as_bytes(), token.as_bytes()))
    }

    /// Decides about one request.
    pub fn decide(&self, uri: &Uri, headers: &HeaderMap) -> Decision {
        match self {
            Access::Loopback { port, token } => {
                let host = headers
                    .get(header::HOST)
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or_default();
                if !is_loopback_host(host, *port) {
                    return Decision::Refuse(Refusal::ForeignHost);
                }
                // The token on the URL sets the cookie actions need;
                // reads go on without one.
                match (token, query_value(uri, "token")) {
                    (Some(token), Some(offered)) => token_on_url(uri, offered, token),
                    _ => Decision::Allow,
                }
            }
            Access::Token { token } => {
                if let Some(offered) = query_value(uri, "token") {
                    return token_on_url(uri, offered, token);
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

/// The answer to a token on the URL: the cookie and a redirect when it is
/// right.
fn token_on_url(uri: &Uri, offered: &str, token: &str) -> Decision {
    if same_secret(offered.as_bytes(), token.as_bytes()) {
        Decision::SetCookie {
            location: own_origin_path(uri.path()),
        }
    } else {
        Decision::Refuse(Refusal::Unauthorized)
    }
}

/// `token` when it is strong enough, a new random one when there is none.
fn strong_or_generated(token: Option<String>) -> Result<String, StudioError> {
    Ok(match token {
        Some(token) => {
            token::check_strength(&token).map_err(
                |goondan_http::HttpError::WeakToken { length, minimum }| StudioError::WeakToken {
                    length,
                    minimum,
                },
            )?;
            token
        }
        None => token::generate(),
    })
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
        let access = Access::for_address("127.0.0.1:4000".parse().unwrap(), None, false).unwrap();
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
            Access::for_address("0.0.0.0:4000".parse().unwrap(), Some(token.clone()), false)
                .unwrap();
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
        let error = Access::for_address("0.0.0.0:1".parse().unwrap(), Some("short".into()), false)
            .unwrap_err();
        assert_eq!(error.code(), "E_STUDIO_TOKEN_WEAK");
        let generated = Access::for_address("0.0.0.0:1".parse().unwrap(), None, false).unwrap();
        assert_eq!(generated.token().unwrap().len(), 64);
    }

    #[test]
    fn on_loopback_reads_need_no_token_but_actions_need_the_cookie() {
        let access = Access::for_address("127.0.0.1:4000".parse().unwrap(), None, true).unwrap();
        let token = access.token().unwrap().to_string();
        let host = ("host", "127.0.0.1:4000");
        let plain: Uri = "/".parse().unwrap();
        assert_eq!(access.decide(&plain, &headers(&[host])), Decision::Allow);
        assert!(!access.may_act(&headers(&[host])));
        let with_token: Uri = format!("/?token={token}").parse().unwrap();
        assert!(matches!(
            access.decide(&with_token, &headers(&[host])),
            Decision::SetCookie { .. }
        ));
        let cookie = format!("{COOKIE_NAME}={token}");
        assert!(access.may_act(&headers(&[host, ("cookie", &cookie)])));
        let wrong = format!("{COOKIE_NAME}={}", "b".repeat(64));
        assert!(!access.may_act(&headers(&[host, ("cookie", &wrong)])));
        // Without actions there is no token, so nobody may act.
        let read_only =
            Access::for_address("127.0.0.1:4000".parse().unwrap(), None, false).unwrap();
        assert!(!read_only.may_act(&headers(&[host, ("cookie", &cookie)])));
    }
}
