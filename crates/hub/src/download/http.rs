//! HTTP for the downloader: clients, the probe that learns a file's size, range support,
//! validator and published digest, and the classification of failures into "retry" and "stop".

use super::DownloadError;
use super::state::Validator;
use reqwest::header::{self, HeaderMap};
use std::time::Duration;

/// Installs rustls's `ring` crypto provider as the process default (once; later calls do
/// nothing). reqwest is built without a provider of its own (aws-lc-rs is slow to build), so
/// every process that builds a reqwest client must call this first.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A failure of one request: worth retrying, or final.
#[derive(Debug)]
pub enum Failure {
    Retry(String),
    Fatal(DownloadError),
}

impl From<DownloadError> for Failure {
    fn from(e: DownloadError) -> Failure {
        Failure::Fatal(e)
    }
}

/// The two clients: one that follows redirects (transfers), one that does not (the probe, which
/// reads the hub's headers on the redirect itself).
pub struct Clients {
    pub follow: reqwest::Client,
    pub manual: reqwest::Client,
}

impl Clients {
    pub fn new(connect_timeout: Duration) -> Result<Clients, DownloadError> {
        install_tls_provider();
        let build = |policy| {
            reqwest::Client::builder()
                .connect_timeout(connect_timeout)
                .user_agent(concat!("catena/", env!("CARGO_PKG_VERSION")))
                .redirect(policy)
                .build()
                .map_err(|e| DownloadError::Client(e.to_string()))
        };
        Ok(Clients {
            follow: build(reqwest::redirect::Policy::limited(10))?,
            manual: build(reqwest::redirect::Policy::none())?,
        })
    }
}

/// What the server told us about the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Size in bytes, if the server said.
    pub total: Option<u64>,
    /// Whether the server answers range requests (and so a download can resume).
    pub ranges: bool,
    pub validator: Validator,
    /// A sha256 the server published for the file (a hub's LFS digest), lower-case hex.
    pub sha256: Option<String>,
}

/// A status that no retry will fix.
pub fn status_is_final(status: reqwest::StatusCode) -> bool {
    status.is_client_error()
        && status != reqwest::StatusCode::REQUEST_TIMEOUT
        && status != reqwest::StatusCode::TOO_MANY_REQUESTS
}

/// Turns an unexpected status into a failure.
pub fn status_failure(url: &str, status: reqwest::StatusCode) -> Failure {
    if status_is_final(status) {
        Failure::Fatal(DownloadError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            reason: status.canonical_reason().unwrap_or("").to_string(),
        })
    } else {
        Failure::Retry(format!("the server answered {status}"))
    }
}

/// Describes a transport error with its causes (reqwest's own message is terse), without the
/// URL (the final error names it once).
pub fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A 64-hex digest in an ETag-like header value (quotes and a weak `W/` prefix stripped).
pub fn sha256_in_etag(value: &str) -> Option<String> {
    let v = value.trim().trim_start_matches("W/").trim_matches('"');
    crate::catalog::is_sha256_hex(v).then(|| v.to_ascii_lowercase())
}

fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `bytes START-END/TOTAL` → (START, TOTAL); TOTAL `None` for `*`.
pub fn parse_content_range(value: &str) -> Option<(u64, Option<u64>)> {
    let rest = value.trim().strip_prefix("bytes")?.trim_start();
    let (range, total) = rest.split_once('/')?;
    let (start, _end) = range.split_once('-')?;
    let start = start.trim().parse().ok()?;
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    Some((start, total))
}

/// Asks for the first byte of `url`, following redirects by hand so that a digest the hub puts
/// on the redirect (`X-Linked-Etag`) is seen. Learns size, range support, validator and digest.
pub async fn probe(clients: &Clients, url: &str) -> Result<Probe, Failure> {
    let mut current = reqwest::Url::parse(url).map_err(|_| DownloadError::BadUrl(url.into()))?;
    let mut linked_sha = None;
    let mut linked_size = None;
    for _ in 0..10 {
        let response = clients
            .manual
            .get(current.clone())
            .header(header::RANGE, "bytes=0-0")
            .send()
            .await
            .map_err(|e| Failure::Retry(describe(e)))?;
        let status = response.status();
        let headers = response.headers().clone();
        if let Some(v) = header_str(&headers, "x-linked-etag") {
            linked_sha = linked_sha.or_else(|| sha256_in_etag(&v));
        }
        if let Some(v) = header_str(&headers, "x-linked-size") {
            linked_size = linked_size.or_else(|| v.parse::<u64>().ok());
        }
        if status.is_redirection() {
            let location = header_str(&headers, header::LOCATION).ok_or_else(|| {
                Failure::Retry(format!("a redirect ({status}) without a location"))
            })?;
            current = current
                .join(&location)
                .map_err(|_| Failure::Retry(format!("a redirect to a bad URL: {location}")))?;
            continue;
        }
        let validator = Validator {
            etag: header_str(&headers, header::ETAG),
            last_modified: header_str(&headers, header::LAST_MODIFIED),
        };
        let sha256 = linked_sha.or_else(|| validator.etag.as_deref().and_then(sha256_in_etag));
        let content_length =
            header_str(&headers, header::CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok());
        drop(response);
        return match status.as_u16() {
            206 => {
                let range = header_str(&headers, header::CONTENT_RANGE)
                    .and_then(|v| parse_content_range(&v));
                match range {
                    Some((0, Some(total))) => Ok(Probe {
                        total: Some(total),
                        ranges: true,
                        validator,
                        sha256,
                    }),
                    _ => Ok(Probe {
                        total: linked_size,
                        ranges: false,
                        validator,
                        sha256,
                    }),
                }
            }
            200 => Ok(Probe {
                total: content_length.or(linked_size),
                ranges: false,
                validator,
                sha256,
            }),
            // An empty file has no byte 0.
            416 => Ok(Probe {
                total: None,
                ranges: false,
                validator,
                sha256,
            }),
            _ => Err(status_failure(url, status)),
        };
    }
    Err(Failure::Retry("more than 10 redirects".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_carry_digests_only_when_they_are_sha256() {
        let sha = "A".repeat(64);
        assert_eq!(sha256_in_etag(&format!("\"{sha}\"")), Some("a".repeat(64)));
        assert_eq!(
            sha256_in_etag(&format!("W/\"{sha}\"")),
            Some("a".repeat(64))
        );
        assert_eq!(sha256_in_etag("\"5d41402abc4b2a76b9719d911017c592\""), None);
        assert_eq!(sha256_in_etag("\"xyz\""), None);
    }

    #[test]
    fn content_ranges_parse() {
        assert_eq!(parse_content_range("bytes 0-0/1234"), Some((0, Some(1234))));
        assert_eq!(parse_content_range("bytes 10-20/*"), Some((10, None)));
        assert_eq!(parse_content_range("items 0-0/1"), None);
        assert_eq!(parse_content_range("bytes 0-0/x"), None);
    }

    #[test]
    fn client_errors_are_final_except_timeouts_and_throttling() {
        use reqwest::StatusCode;
        assert!(status_is_final(StatusCode::NOT_FOUND));
        assert!(status_is_final(StatusCode::FORBIDDEN));
        assert!(!status_is_final(StatusCode::TOO_MANY_REQUESTS));
        assert!(!status_is_final(StatusCode::SERVICE_UNAVAILABLE));
    }
}
