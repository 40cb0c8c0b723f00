//! Search backends for `<web_search>`, behind one trait: the local document index (offline, the
//! default), a SearXNG instance, and Serper, Brave and Tavily with the user's key. Each online
//! client speaks its service's documented request and response shape; failures (a refused key,
//! a rate limit, a server error) come back as [`SearchFailure`]s the tool words for the model.

use crate::FetchError;
use crate::body::{Answer, BodyError, ReadLimits, error_message};
use crate::fetch::{Guard, GuardedResolver};
use catena_search::DocumentIndex;
use serde_json::Value;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// One search result.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WebHit {
    pub title: String,
    pub url: String,
    pub snippet: String,
    pub date: Option<String>,
    /// Where the hit came from, when the backend says (a SearXNG engine).
    pub source: Option<String>,
}

/// Why a search gave no results list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchFailure {
    #[error("{service} refused the API key (HTTP {status}); check the key")]
    Unauthorized { service: &'static str, status: u16 },
    #[error("{service} is rate limiting these searches (HTTP 429){}; wait before searching again", retry_after.map(|s| format!(", retry after {s} s")).unwrap_or_default())]
    RateLimited {
        service: &'static str,
        retry_after: Option<u64>,
    },
    #[error("{service} answered HTTP {status}: {message}")]
    Status {
        service: &'static str,
        status: u16,
        message: String,
    },
    #[error("{service} could not be reached: {reason}")]
    Network {
        service: &'static str,
        reason: String,
    },
    #[error("{service} answered in an unexpected shape: {reason}")]
    BadResponse {
        service: &'static str,
        reason: String,
    },
    #[error("the local index failed: {0}")]
    Local(String),
}

/// A web search backend.
pub trait SearchBackend: Send + Sync {
    /// Its name, as settings and `--search` write it.
    fn name(&self) -> &'static str;

    /// The first `count` results for `query`.
    fn search(&self, query: &str, count: usize) -> Result<Vec<WebHit>, SearchFailure>;
}

/// Search over a local document index.
pub struct LocalSearch {
    index: Arc<DocumentIndex>,
}

impl LocalSearch {
    pub fn new(index: Arc<DocumentIndex>) -> LocalSearch {
        LocalSearch { index }
    }
}

impl SearchBackend for LocalSearch {
    fn name(&self) -> &'static str {
        "local"
    }

    fn search(&self, query: &str, count: usize) -> Result<Vec<WebHit>, SearchFailure> {
        let hits = self
            .index
            .search(query, count)
            .map_err(|e| SearchFailure::Local(e.to_string()))?;
        Ok(hits
            .into_iter()
            .map(|h| WebHit {
                title: h.title,
                url: h.url,
                snippet: h.snippet,
                date: h.date,
                source: None,
            })
            .collect())
    }
}

/// An API key: never printed (its `Debug` hides it) and sent only to its own service.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ApiKey(String);

impl TryFrom<String> for ApiKey {
    type Error = &'static str;

    fn try_from(key: String) -> Result<ApiKey, Self::Error> {
        ApiKey::new(key).ok_or("an API key cannot be empty")
    }
}

impl From<ApiKey> for String {
    fn from(key: ApiKey) -> String {
        key.0
    }
}

impl ApiKey {
    /// `None` for an empty key.
    pub fn new(key: impl Into<String>) -> Option<ApiKey> {
        let key = key.into().trim().to_string();
        (!key.is_empty()).then_some(ApiKey(key))
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(hidden)")
    }
}

/// The online services, each with its documented endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchService {
    Searxng,
    Serper,
    Brave,
    Tavily,
}

impl SearchService {
    pub const ALL: [SearchService; 4] = [
        SearchService::Searxng,
        SearchService::Serper,
        SearchService::Brave,
        SearchService::Tavily,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SearchService::Searxng => "searxng",
            SearchService::Serper => "serper",
            SearchService::Brave => "brave",
            SearchService::Tavily => "tavily",
        }
    }

    /// How the service is named to people.
    pub fn display_name(self) -> &'static str {
        match self {
            SearchService::Searxng => "SearXNG",
            SearchService::Serper => "Serper",
            SearchService::Brave => "Brave Search",
            SearchService::Tavily => "Tavily",
        }
    }

    pub fn from_name(name: &str) -> Option<SearchService> {
        SearchService::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The endpoint the service documents. These clients were tested against loopback servers
    /// speaking the documented shapes, not against the services themselves (no machine here
    /// reaches them); SearXNG has no public default: it is the user's own instance.
    pub fn documented_base_url(self) -> Option<&'static str> {
        match self {
            SearchService::Searxng => None,
            SearchService::Serper => Some("https://google.serper.dev"),
            SearchService::Brave => Some("https://api.search.brave.com"),
            SearchService::Tavily => Some("https://api.tavily.com"),
        }
    }

    /// The environment variable its key (or, for SearXNG, its instance's URL) is read from.
    pub fn env_var(self) -> &'static str {
        match self {
            SearchService::Searxng => "CATENA_SEARXNG_URL",
            SearchService::Serper => "SERPER_API_KEY",
            SearchService::Brave => "BRAVE_API_KEY",
            SearchService::Tavily => "TAVILY_API_KEY",
        }
    }
}

/// A client of one online service.
pub struct OnlineSearch {
    service: SearchService,
    base_url: String,
    key: Option<ApiKey>,
    client: reqwest::blocking::Client,
    limits: ReadLimits,
}

/// A search's whole answer: 30 seconds, connection to last byte.
const SEARCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest search answer read: twenty results with snippets are tens of kilobytes.
const SEARCH_MAX_BYTES: u64 = 4 << 20;

/// Redirects followed, each to the service's own address.
const MAX_REDIRECTS: usize = 3;

impl OnlineSearch {
    /// A client of `service` at `base_url` with `key` (SearXNG needs none; the others do, which
    /// the caller checks before offering the backend).
    pub fn new(
        service: SearchService,
        base_url: &str,
        key: Option<ApiKey>,
    ) -> Result<OnlineSearch, SearchFailure> {
        OnlineSearch::build(service, base_url, key, None)
    }

    /// As [`OnlineSearch::new`], with the page reader's address rule on every name the client
    /// resolves: for an address the settings API may have written (SearXNG's), which other
    /// programs on the machine can reach. A private address written literally in the URL is
    /// the user's own choice (the API refuses to write one) and is not checked.
    pub fn with_address_rule(
        service: SearchService,
        base_url: &str,
        key: Option<ApiKey>,
        allow_private: bool,
        allowed_addresses: Vec<IpAddr>,
    ) -> Result<OnlineSearch, SearchFailure> {
        let guard = Guard::new(allow_private, allowed_addresses);
        OnlineSearch::build(service, base_url, key, Some(guard))
    }

    fn build(
        service: SearchService,
        base_url: &str,
        key: Option<ApiKey>,
        guard: Option<Guard>,
    ) -> Result<OnlineSearch, SearchFailure> {
        crate::install_tls_provider();
        let mut builder = reqwest::blocking::Client::builder()
            .timeout(SEARCH_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .redirect(same_host_redirects())
            .user_agent(concat!("catena/", env!("CARGO_PKG_VERSION")));
        if let Some(guard) = guard {
            builder = builder
                .dns_resolver(Arc::new(GuardedResolver { guard }))
                // A proxy would resolve names itself, out of the resolver's sight.
                .no_proxy();
        }
        let client = builder.build().map_err(|e| SearchFailure::Network {
            service: service.display_name(),
            reason: e.to_string(),
        })?;
        Ok(OnlineSearch {
            service,
            base_url: base_url.trim_end_matches('/').to_string(),
            key,
            client,
            limits: ReadLimits {
                timeout: SEARCH_TIMEOUT,
                max_bytes: SEARCH_MAX_BYTES,
            },
        })
    }

    fn request(&self, query: &str, count: usize) -> reqwest::blocking::RequestBuilder {
        let key = self.key.as_ref().map_or("", ApiKey::expose);
        let base = &self.base_url;
        match self.service {
            SearchService::Searxng => self
                .client
                .get(format!("{base}/search"))
                .query(&[("q", query), ("format", "json")]),
            SearchService::Serper => self
                .client
                .post(format!("{base}/search"))
                .header("X-API-KEY", key)
                .json(&serde_json::json!({ "q": query, "num": count })),
            SearchService::Brave => self
                .client
                .get(format!("{base}/res/v1/web/search"))
                .header("X-Subscription-Token", key)
                .header(reqwest::header::ACCEPT, "application/json")
                .query(&[("q", query), ("count", &count.min(20).to_string())]),
            SearchService::Tavily => self
                .client
                .post(format!("{base}/search"))
                .bearer_auth(key)
                .json(&serde_json::json!({ "query": query, "max_results": count.min(20) })),
        }
    }

    /// The hits in a successful answer.
    fn hits(&self, body: &Value) -> Result<Vec<WebHit>, String> {
        let (list, title, url, snippet, dates): (Option<&Value>, &str, &str, &str, &[&str]) =
            match self.service {
                SearchService::Searxng => (
                    body.get("results"),
                    "title",
                    "url",
                    "content",
                    &["publishedDate"],
                ),
                SearchService::Serper => {
                    (body.get("organic"), "title", "link", "snippet", &["date"])
                }
                SearchService::Brave => (
                    body.get("web").and_then(|w| w.get("results")),
                    "title",
                    "url",
                    "description",
                    &["page_age", "age"],
                ),
                SearchService::Tavily => (
                    body.get("results"),
                    "title",
                    "url",
                    "content",
                    &["published_date"],
                ),
            };
        let Some(list) = list else {
            // Serper and Brave leave the list out when nothing was found.
            return match self.service {
                SearchService::Serper | SearchService::Brave => Ok(Vec::new()),
                _ => Err("no `results` list".into()),
            };
        };
        let list = list.as_array().ok_or("the results are not a list")?;
        let text = |item: &Value, key: &str| {
            item.get(key)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        Ok(list
            .iter()
            .filter_map(|item| {
                let url = text(item, url)?;
                Some(WebHit {
                    title: plain(&text(item, title).unwrap_or_else(|| url.clone())),
                    snippet: plain(&text(item, snippet).unwrap_or_default()),
                    date: dates.iter().find_map(|d| text(item, d)),
                    source: match self.service {
                        SearchService::Searxng => text(item, "engine"),
                        _ => None,
                    },
                    url,
                })
            })
            .collect())
    }
}

/// Snippets and titles come with markup (`<strong>`, `&amp;`) from some services: plain text.
fn plain(text: &str) -> String {
    if !text.contains(['<', '&']) {
        return text.to_string();
    }
    catena_search::extract::html_fragment_text(text)
}

impl SearchBackend for OnlineSearch {
    fn name(&self) -> &'static str {
        self.service.name()
    }

    fn search(&self, query: &str, count: usize) -> Result<Vec<WebHit>, SearchFailure> {
        let service = self.service.display_name();
        let timeout = self.limits.timeout.as_secs();
        let answer = Answer::send(self.request(query, count), self.limits).map_err(|e| {
            SearchFailure::Network {
                service,
                reason: network_reason(e, timeout),
            }
        })?;
        let status = answer.response.status().as_u16();
        let retry_after = answer
            .response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        match status {
            200..=299 => {}
            401 | 403 if self.service == SearchService::Searxng => {
                return Err(SearchFailure::Status {
                    service,
                    status,
                    message: "the instance refuses JSON answers: add `json` to `search.formats` \
                              in its settings.yml"
                        .into(),
                });
            }
            401 | 403 => return Err(SearchFailure::Unauthorized { service, status }),
            429 => {
                return Err(SearchFailure::RateLimited {
                    service,
                    retry_after,
                });
            }
            _ => {
                return Err(SearchFailure::Status {
                    service,
                    status,
                    message: error_message(&answer.error_start()),
                });
            }
        }
        let body = answer.body().map_err(|e| match e {
            BodyError::Timeout(_) => SearchFailure::Network {
                service,
                reason: format!("no answer within {timeout} seconds"),
            },
            e => SearchFailure::BadResponse {
                service,
                reason: format!("the answer {e}"),
            },
        })?;
        let json: Value =
            serde_json::from_slice(&body).map_err(|e| SearchFailure::BadResponse {
                service,
                reason: format!("not JSON: {e}"),
            })?;
        let mut hits = self
            .hits(&json)
            .map_err(|reason| SearchFailure::BadResponse { service, reason })?;
        hits.truncate(count);
        Ok(hits)
    }
}

/// Why a request failed, in words for the model: a refused redirect or address as it was
/// refused, a timeout with its limit, else reqwest's reason without the URL (for some services
/// it carries only the query string, but a user's own instance may have credentials in it).
fn network_reason(error: reqwest::Error, timeout: u64) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(e) = source {
        if let Some(refused) = e.downcast_ref::<RedirectRefused>() {
            return refused.to_string();
        }
        if let Some(refused) = e.downcast_ref::<FetchError>() {
            return refused.to_string();
        }
        source = e.source();
    }
    if error.is_timeout() {
        return format!("no answer within {timeout} seconds");
    }
    error.without_url().to_string()
}

/// Why a search service's redirect was not followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum RedirectRefused {
    #[error(
        "it redirected to another address ({0}); requests to a search service stay where it \
         is, so that its key goes nowhere else"
    )]
    Elsewhere(String),
    #[error("more than {0} redirects")]
    TooMany(usize),
}

/// Redirects to the service's own scheme, host and port only (or from http to https on the
/// same host): reqwest drops `Authorization` on a redirect to another host but not the
/// services' own key headers (`X-API-KEY`, `X-Subscription-Token`), which would follow the
/// request wherever its server pointed it.
fn same_host_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let Some(first) = attempt.previous().first() else {
            return attempt.follow();
        };
        let next = attempt.url();
        let same_host = next.host_str() == first.host_str();
        let same_origin = same_host
            && next.scheme() == first.scheme()
            && next.port_or_known_default() == first.port_or_known_default();
        let upgrade = same_host
            && (first.scheme(), next.scheme()) == ("http", "https")
            && first.port().is_none()
            && next.port().is_none();
        let refused = if attempt.previous().len() > MAX_REDIRECTS {
            Some(RedirectRefused::TooMany(MAX_REDIRECTS))
        } else if !same_origin && !upgrade {
            let host = next.host_str().unwrap_or("no host");
            Some(RedirectRefused::Elsewhere(match next.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_string(),
            }))
        } else {
            None
        };
        match refused {
            Some(reason) => attempt.error(reason),
            None => attempt.follow(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_do_not_print() {
        let key = ApiKey::new(" secret-key ").unwrap();
        assert_eq!(format!("{key:?}"), "ApiKey(hidden)");
        assert_eq!(key.expose(), "secret-key");
        assert_eq!(ApiKey::new("  "), None);
    }

    #[test]
    fn markup_in_snippets_becomes_text() {
        assert_eq!(
            plain("The <strong>tide</strong> &amp; moon"),
            "The tide & moon"
        );
        assert_eq!(plain("plain"), "plain");
    }

    #[test]
    fn a_search_answer_is_read_within_its_deadline_and_cap() {
        use crate::body::testing::{dribbling, flood};
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json";
        let huge = OnlineSearch::new(SearchService::Searxng, &flood(head), None).unwrap();
        let failure = huge.search("tides", 5).unwrap_err();
        assert!(
            failure.to_string().contains("larger than 4 MiB"),
            "{failure}"
        );
        let base = dribbling(head, Duration::from_millis(100));
        let mut slow = OnlineSearch::new(SearchService::Serper, &base, ApiKey::new("k")).unwrap();
        slow.limits.timeout = Duration::from_secs(1);
        let started = std::time::Instant::now();
        assert_eq!(
            slow.search("tides", 5),
            Err(SearchFailure::Network {
                service: "Serper",
                reason: "no answer within 1 seconds".into()
            })
        );
        assert!(started.elapsed() < Duration::from_secs(60));
    }
}
