//! Who may drive the server. Loopback is not a wall: every web page the user opens can send
//! requests to 127.0.0.1, and a page whose name is made to resolve to 127.0.0.1 (DNS rebinding)
//! can even read the answers. So, for every request:
//!
//! - a server bound to loopback answers only requests addressed to a loopback name on its own
//!   port (the `Host` header): a rebinding page sends its own name and is refused;
//! - a request that changes something (any method but GET, HEAD and OPTIONS) is refused when a
//!   browser says it comes from another origin (`Origin`, `Sec-Fetch-Site`) or has the shape of a
//!   cross-site form post (a form content type with no `Origin`);
//! - under `/v1`, when the server has an API key, the request must carry it (as
//!   `Authorization: Bearer`, or as `x-api-key` the way Anthropic's clients send it), or the
//!   per-launch token that the web UI is handed through the address `catena serve` prints.
//!
//! A refusal is worded in the shape the client speaks (Anthropic's when it sends
//! `anthropic-version`), so each official client raises its usual exception.

use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;

/// The rules of one listening server.
pub struct Boundary {
    /// The port clients must address (the one bound).
    port: u16,
    /// Whether the server listens on loopback only: then `Host` must name loopback.
    loopback: bool,
    /// When set, `/v1` requests need it (or the launch token) as a bearer token.
    api_key: Option<String>,
    /// A random secret made at start: the web UI's credential when there is an API key.
    launch_token: String,
}

impl Boundary {
    /// Fails only when the operating system cannot give random bytes for the launch token.
    pub fn new(port: u16, loopback: bool, api_key: Option<String>) -> std::io::Result<Boundary> {
        Ok(Boundary {
            port,
            loopback,
            api_key: api_key.filter(|k| !k.is_empty()),
            launch_token: random_token()?,
        })
    }

    /// The token the web UI presents when the server has an API key (`None` without a key: then
    /// the UI needs none).
    pub fn ui_token(&self) -> Option<&str> {
        self.api_key.as_ref().map(|_| self.launch_token.as_str())
    }

    /// Whether `host` (a `Host` header's value, or an origin's authority) names this server on
    /// loopback: `127.0.0.1`, any other 127/8 address, `[::1]` or `localhost`, with our port.
    fn is_our_loopback_authority(&self, authority: &str) -> bool {
        let (name, port) = split_authority(authority);
        let port_ok = match port {
            Some(p) => p.parse::<u16>().is_ok_and(|p| p == self.port),
            None => self.port == 80,
        };
        port_ok && is_loopback_name(name)
    }

    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        if !self.loopback {
            // Bound to a routable address on purpose: the names it is reached by are the user's
            // to choose, and the API key (which `catena serve` asks for there) guards it.
            return true;
        }
        match headers.get(header::HOST) {
            // HTTP/1.0 clients may omit it; a browser never does.
            None => true,
            Some(value) => value
                .to_str()
                .is_ok_and(|host| self.is_our_loopback_authority(host)),
        }
    }

    /// Why a state-changing request is refused, if it is.
    fn cross_site(&self, headers: &HeaderMap) -> Option<&'static str> {
        if let Some(site) = headers.get("sec-fetch-site")
            && site.as_bytes() != b"same-origin"
            && site.as_bytes() != b"none"
        {
            return Some("it was sent by a page of another site");
        }
        match headers.get(header::ORIGIN) {
            Some(origin) => {
                let ours = origin.to_str().ok().and_then(|o| o.strip_prefix("http://"));
                let same = match ours {
                    Some(authority) if self.loopback => self.is_our_loopback_authority(authority),
                    // Off loopback: the origin must be the address the request was sent to.
                    Some(authority) => headers
                        .get(header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .is_some_and(|host| host.eq_ignore_ascii_case(authority)),
                    None => false,
                };
                (!same).then_some("it comes from a page of another origin")
            }
            None => {
                let form = headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(|v| {
                        v.split(';')
                            .next()
                            .unwrap_or_default()
                            .trim()
                            .to_ascii_lowercase()
                    })
                    .is_some_and(|kind| {
                        matches!(
                            kind.as_str(),
                            "application/x-www-form-urlencoded"
                                | "multipart/form-data"
                                | "text/plain"
                        )
                    });
                form.then_some("it has the shape of a cross-site form post")
            }
        }
    }

    /// Whether the request carries the key (or the launch token): as `Authorization: Bearer`,
    /// which OpenAI's clients send, or as `x-api-key`, which Anthropic's clients send. Either
    /// header that carries it is enough.
    fn key_given(&self, headers: &HeaderMap) -> bool {
        let Some(key) = &self.api_key else {
            return true;
        };
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
        [bearer, x_api_key].into_iter().flatten().any(|given| {
            let given = given.trim().as_bytes();
            constant_time_eq(given, key.as_bytes())
                || constant_time_eq(given, self.launch_token.as_bytes())
        })
    }
}

/// Every request: the `Host` check, then the cross-site check for state-changing methods.
pub async fn guard(State(rules): State<Arc<Boundary>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if !rules.host_allowed(headers) {
        return ApiError::forbidden(format!(
            "This server answers only requests addressed to 127.0.0.1:{port} or localhost:{port}. \
             A page that reaches it under another name (DNS rebinding) is refused.",
            port = rules.port
        ))
        .for_client(headers);
    }
    let reads_only = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if !reads_only && let Some(why) = rules.cross_site(headers) {
        return ApiError::forbidden(format!(
            "Refused: {why}. Only Catena's own pages and programs on this machine may change \
             anything here."
        ))
        .for_client(headers);
    }
    next.run(request).await
}

/// `/v1` requests: the API key (or the UI's launch token), when the server has a key.
pub async fn require_key(
    State(rules): State<Arc<Boundary>>,
    request: Request,
    next: Next,
) -> Response {
    if !rules.key_given(request.headers()) {
        return ApiError::unauthorized().for_client(request.headers());
    }
    next.run(request).await
}

/// `name` and `port` of `name:port`, `[v6]:port`, `name` or `[v6]`.
fn split_authority(authority: &str) -> (&str, Option<&str>) {
    if let Some(rest) = authority.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((v6, tail)) => (v6, tail.strip_prefix(':')),
            None => (authority, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (authority, None),
    }
}

fn is_loopback_name(name: &str) -> bool {
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// 32 random bytes from the operating system, as hex. No fallback: a guessable token would be
/// worse than not starting.
fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| std::io::Error::other(format!("no random bytes for the launch token: {e}")))?;
    Ok(hex::encode(bytes))
}

/// Compares secrets without leaking where they differ through timing.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn keys_compare_exactly() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secrets"));
    }

    #[test]
    fn only_loopback_names_on_our_port() {
        let rules = Boundary::new(8420, true, None).unwrap();
        for ok in [
            "127.0.0.1:8420",
            "localhost:8420",
            "LOCALHOST:8420",
            "[::1]:8420",
            "127.3.2.1:8420",
        ] {
            assert!(rules.host_allowed(&headers(&[("host", ok)])), "{ok}");
        }
        for bad in [
            "evil.example:8420",
            "127.0.0.1.evil.example:8420",
            "127.0.0.1:8421",
            "127.0.0.1",
            "localhost.:8420",
            "[::2]:8420",
            "0.0.0.0:8420",
        ] {
            assert!(!rules.host_allowed(&headers(&[("host", bad)])), "{bad}");
        }
        assert!(rules.host_allowed(&HeaderMap::new()));
        assert!(
            Boundary::new(8420, false, None)
                .unwrap()
                .host_allowed(&headers(&[("host", "box.lan:8420")]))
        );
    }

    #[test]
    fn cross_site_shapes_are_refused() {
        let rules = Boundary::new(8420, true, None).unwrap();
        assert!(
            rules
                .cross_site(&headers(&[("origin", "http://127.0.0.1:8420")]))
                .is_none()
        );
        assert!(
            rules
                .cross_site(&headers(&[("origin", "http://localhost:8420")]))
                .is_none()
        );
        assert!(
            rules
                .cross_site(&headers(&[("origin", "http://evil.example")]))
                .is_some()
        );
        assert!(
            rules
                .cross_site(&headers(&[("origin", "http://localhost:3000")]))
                .is_some()
        );
        assert!(rules.cross_site(&headers(&[("origin", "null")])).is_some());
        assert!(
            rules
                .cross_site(&headers(&[("sec-fetch-site", "cross-site")]))
                .is_some()
        );
        assert!(
            rules
                .cross_site(&headers(&[("sec-fetch-site", "same-site")]))
                .is_some()
        );
        assert!(
            rules
                .cross_site(&headers(&[("content-type", "text/plain;charset=UTF-8")]))
                .is_some()
        );
        assert!(
            rules
                .cross_site(&headers(&[(
                    "content-type",
                    "application/x-www-form-urlencoded"
                )]))
                .is_some()
        );
        // Programs (curl, the OpenAI clients) send JSON or nothing, and no Origin.
        assert!(
            rules
                .cross_site(&headers(&[("content-type", "application/json")]))
                .is_none()
        );
        assert!(rules.cross_site(&HeaderMap::new()).is_none());
    }

    #[test]
    fn the_launch_token_stands_in_for_the_key() {
        let rules = Boundary::new(8420, true, Some("k".into())).unwrap();
        let token = rules.ui_token().unwrap().to_string();
        assert_eq!(token.len(), 64);
        assert!(rules.key_given(&headers(&[("authorization", "Bearer k")])));
        assert!(rules.key_given(&headers(&[("authorization", &format!("Bearer {token}"))])));
        assert!(!rules.key_given(&headers(&[("authorization", "Bearer x")])));
        assert!(!rules.key_given(&HeaderMap::new()));
        assert!(
            Boundary::new(8420, true, None)
                .unwrap()
                .ui_token()
                .is_none()
        );
    }

    #[test]
    fn anthropic_clients_send_the_key_as_x_api_key() {
        let rules = Boundary::new(8420, true, Some("k".into())).unwrap();
        let token = rules.ui_token().unwrap().to_string();
        assert!(rules.key_given(&headers(&[("x-api-key", "k")])));
        assert!(rules.key_given(&headers(&[("x-api-key", " k ")])));
        assert!(rules.key_given(&headers(&[("x-api-key", &token)])));
        assert!(!rules.key_given(&headers(&[("x-api-key", "x")])));
        assert!(!rules.key_given(&headers(&[("x-api-key", "")])));
        // `x-api-key` is the key itself, not a bearer token.
        assert!(!rules.key_given(&headers(&[("x-api-key", "Bearer k")])));
        // Either header carrying the key is enough, whatever the other one says.
        assert!(rules.key_given(&headers(&[
            ("x-api-key", "k"),
            ("authorization", "Bearer wrong")
        ])));
        assert!(rules.key_given(&headers(&[
            ("x-api-key", "wrong"),
            ("authorization", "Bearer k")
        ])));
        assert!(!rules.key_given(&headers(&[
            ("x-api-key", "wrong"),
            ("authorization", "Bearer wrong")
        ])));
        // `anthropic-version` is no credential.
        assert!(!rules.key_given(&headers(&[("anthropic-version", "2023-06-01")])));
        // Without a key on the server, nothing is asked.
        assert!(
            Boundary::new(8420, true, None)
                .unwrap()
                .key_given(&HeaderMap::new())
        );
    }
}
