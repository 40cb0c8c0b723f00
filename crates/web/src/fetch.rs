//! Reading web pages for `<crawl_page>`: http(s) only, a total time limit, a size cap, a bounded
//! number of redirects, and no loopback, private or link-local address at any hop unless the
//! user allows them. Names are checked where they are resolved (so a name cannot point at the
//! machine), literal addresses before each request and each redirect.

use crate::address::private_kind;
use crate::body::{Answer, BodyError, ReadLimits};
use catena_search::extract::{absolute_links, html_page};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

/// Limits of the page fetcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOptions {
    /// The whole request, connection to last byte.
    pub timeout: Duration,
    /// Pages larger than this are refused.
    pub max_bytes: u64,
    pub max_redirects: usize,
    /// Read every loopback, private and link-local address too (the user's own choice, never
    /// the model's).
    pub allow_private: bool,
    /// Private addresses the user allows one by one (their own wiki on the home network).
    pub allowed_addresses: Vec<IpAddr>,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            timeout: Duration::from_secs(20),
            max_bytes: 5 << 20,
            max_redirects: 5,
            allow_private: false,
            allowed_addresses: Vec::new(),
        }
    }
}

/// Why a page could not be read; the text is what the model reads in its observation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("`{0}` is not a web address")]
    BadUrl(String),
    #[error("only http and https pages can be read, not `{0}:` addresses")]
    Scheme(String),
    #[error("{host} is {kind} ({ip}); pages on this machine or its private networks are not read")]
    Refused {
        host: String,
        ip: IpAddr,
        kind: &'static str,
    },
    #[error("the page did not arrive within {0} seconds")]
    Timeout(u64),
    #[error("the page is larger than {0} MiB")]
    TooLarge(u64),
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    #[error("the server answered HTTP {0}")]
    Status(u16),
    #[error("not a text page (content type {0})")]
    NotText(String),
    #[error("{0}")]
    Network(String),
}

/// A page read and turned into text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPage {
    /// Where the page was in the end, after redirects.
    pub url: String,
    pub title: Option<String>,
    pub text: String,
}

/// The page fetcher. One per run; it keeps connections between pages.
pub struct Fetcher {
    client: reqwest::blocking::Client,
    options: FetchOptions,
    guard: Guard,
}

impl Fetcher {
    pub fn new(options: FetchOptions) -> Result<Fetcher, FetchError> {
        crate::install_tls_provider();
        let max_redirects = options.max_redirects;
        let guard = Guard::new(options.allow_private, options.allowed_addresses.clone());
        let redirect_guard = guard.clone();
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > max_redirects {
                return attempt.error(FetchError::TooManyRedirects(max_redirects));
            }
            match redirect_guard.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(e),
            }
        });
        let client = reqwest::blocking::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(options.timeout.min(Duration::from_secs(10)))
            .redirect(redirects)
            .dns_resolver(Arc::new(GuardedResolver {
                guard: guard.clone(),
            }))
            // A proxy would resolve names itself, out of the resolver's sight.
            .no_proxy()
            .user_agent(concat!("catena/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FetchError::Network(e.to_string()))?;
        Ok(Fetcher {
            client,
            options,
            guard,
        })
    }

    /// Reads the page at `url` as text (HTML rendered, with its title).
    pub fn fetch(&self, url: &str) -> Result<FetchedPage, FetchError> {
        let parsed = url::Url::parse(url).map_err(|_| FetchError::BadUrl(url.to_string()))?;
        self.guard.check_url(&parsed)?;
        let request = self.client.get(parsed).header(
            reqwest::header::ACCEPT,
            "text/html, text/plain;q=0.9, */*;q=0.5",
        );
        let limits = ReadLimits {
            timeout: self.options.timeout,
            max_bytes: self.options.max_bytes,
        };
        let answer = Answer::send(request, limits).map_err(|e| self.request_error(e))?;
        let status = answer.response.status();
        if !status.is_success() {
            return Err(FetchError::Status(status.as_u16()));
        }
        let final_url = answer.response.url().to_string();
        let content_type = answer
            .response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let kind = TextKind::of(&content_type)?;
        let body = answer.body().map_err(|e| match e {
            BodyError::Timeout(_) => FetchError::Timeout(self.options.timeout.as_secs()),
            BodyError::TooLarge(limit) => FetchError::TooLarge(limit >> 20),
            BodyError::Broken(reason) => {
                FetchError::Network(format!("the page stopped arriving: {reason}"))
            }
        })?;
        let is_html = match kind {
            TextKind::Html => true,
            TextKind::Plain => false,
            TextKind::Unknown => looks_like_html(&body),
        };
        if kind == TextKind::Unknown && !is_html && std::str::from_utf8(&body).is_err() {
            return Err(FetchError::NotText(
                "none given, and the bytes are not text".into(),
            ));
        }
        let (title, text) = if is_html {
            let (metadata, text) = html_page(&body);
            let text = match url::Url::parse(&final_url) {
                Ok(base) => absolute_links(&text, &base),
                Err(_) => text,
            };
            (metadata.title, text)
        } else {
            (None, String::from_utf8_lossy(&body).into_owned())
        };
        Ok(FetchedPage {
            url: final_url,
            title,
            text,
        })
    }

    /// A failed request in the model's words: the refusal, limit or network failure under
    /// reqwest's wrapping.
    fn request_error(&self, error: reqwest::Error) -> FetchError {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        while let Some(e) = source {
            if let Some(ours) = e.downcast_ref::<FetchError>() {
                return ours.clone();
            }
            source = e.source();
        }
        if error.is_timeout() {
            return FetchError::Timeout(self.options.timeout.as_secs());
        }
        let mut reason = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(e) = source {
            reason = format!("{reason}: {e}");
            source = e.source();
        }
        FetchError::Network(reason)
    }
}

/// How a content type is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TextKind {
    Html,
    Plain,
    /// No content type: decided by the bytes.
    Unknown,
}

impl TextKind {
    fn of(content_type: &str) -> Result<TextKind, FetchError> {
        let essence = content_type.split(';').next().unwrap_or("").trim();
        match essence {
            "" => Ok(TextKind::Unknown),
            "text/html" | "application/xhtml+xml" => Ok(TextKind::Html),
            "application/json" | "application/xml" | "application/javascript" => {
                Ok(TextKind::Plain)
            }
            t if t.starts_with("text/") => Ok(TextKind::Plain),
            "application/pdf" => Err(FetchError::NotText(
                "application/pdf: PDF pages are not read in this version".into(),
            )),
            other => Err(FetchError::NotText(other.to_string())),
        }
    }
}

fn looks_like_html(body: &[u8]) -> bool {
    let start = String::from_utf8_lossy(&body[..body.len().min(512)]).to_ascii_lowercase();
    let start = start.trim_start();
    start.starts_with("<!doctype html") || start.starts_with("<html") || start.contains("<body")
}

/// The address rule, shared by the resolver and the redirect policy (and by the SearXNG
/// client, whose address the settings API may set).
#[derive(Clone)]
pub(crate) struct Guard {
    allow_all: bool,
    allowed: Arc<Vec<IpAddr>>,
}

impl Guard {
    pub(crate) fn new(allow_all: bool, allowed: Vec<IpAddr>) -> Guard {
        Guard {
            allow_all,
            allowed: Arc::new(allowed),
        }
    }

    /// Refuses `ip` (of `host`) when it is private and not allowed.
    fn check(&self, host: &str, ip: IpAddr) -> Result<(), FetchError> {
        match private_kind(ip) {
            Some(kind) if !self.allow_all && !self.allowed.contains(&ip) => {
                Err(FetchError::Refused {
                    host: host.to_string(),
                    ip,
                    kind,
                })
            }
            _ => Ok(()),
        }
    }

    /// The scheme and, for a literal address, the address of `url`.
    fn check_url(&self, url: &url::Url) -> Result<(), FetchError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(FetchError::Scheme(url.scheme().to_string()));
        }
        let ip = match url.host() {
            Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
            Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
            Some(url::Host::Domain(_)) => return Ok(()),
            None => return Err(FetchError::BadUrl(url.to_string())),
        };
        self.check(&ip.to_string(), ip)
    }
}

/// Resolves names with the system's resolver and refuses a name with any refused address among
/// its answers (one private answer is enough to reach the machine).
pub(crate) struct GuardedResolver {
    pub guard: Guard,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.guard.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let lookup = host.clone();
            let found = tokio::task::spawn_blocking(move || {
                (lookup.as_str(), 0)
                    .to_socket_addrs()
                    .map(|addrs| addrs.collect::<Vec<SocketAddr>>())
            })
            .await
            .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { Box::new(e) })?
            .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> {
                Box::new(FetchError::Network(format!(
                    "{host} could not be resolved: {e}"
                )))
            })?;
            for address in &found {
                guard.check(&host, address.ip())?;
            }
            let addrs: Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_before_any_request() {
        let fetcher = Fetcher::new(FetchOptions::default()).unwrap();
        let refused = |url: &str| fetcher.fetch(url).unwrap_err();
        assert!(matches!(refused("file:///etc/passwd"), FetchError::Scheme(s) if s == "file"));
        assert!(matches!(refused("not a url"), FetchError::BadUrl(_)));
        assert!(matches!(
            refused("http://127.0.0.1:1/"),
            FetchError::Refused { .. }
        ));
        assert!(matches!(
            refused("http://[::1]:1/"),
            FetchError::Refused { .. }
        ));
        // The same address written as one number is still the machine.
        assert!(matches!(
            refused("http://2130706433:1/"),
            FetchError::Refused { .. }
        ));
        // A name is refused where it resolves.
        let err = refused("http://localhost:1/");
        assert!(
            matches!(err, FetchError::Refused { ref host, .. } if host == "localhost"),
            "{err:?}"
        );
        assert!(err.to_string().contains("loopback"), "{err}");
    }

    #[test]
    fn a_page_that_dribbles_is_cut_at_the_whole_request_deadline() {
        let base = crate::body::testing::dribbling(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain",
            Duration::from_millis(200),
        );
        let fetcher = Fetcher::new(FetchOptions {
            timeout: Duration::from_secs(2),
            allowed_addresses: vec![IpAddr::from([127, 0, 0, 1])],
            ..FetchOptions::default()
        })
        .unwrap();
        let started = std::time::Instant::now();
        assert_eq!(fetcher.fetch(&base), Err(FetchError::Timeout(2)));
        // Each byte came well within the two seconds; 10,000 of them would take half an hour.
        assert!(started.elapsed() < Duration::from_secs(60));
    }

    #[test]
    fn content_types() {
        assert_eq!(TextKind::of("text/html; charset=utf-8"), Ok(TextKind::Html));
        assert_eq!(TextKind::of("text/markdown"), Ok(TextKind::Plain));
        assert_eq!(TextKind::of(""), Ok(TextKind::Unknown));
        assert!(TextKind::of("image/png").is_err());
        assert!(
            TextKind::of("application/pdf")
                .unwrap_err()
                .to_string()
                .contains("PDF")
        );
    }
}
