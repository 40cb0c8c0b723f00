//! Search backends for `<web_search>`, behind one trait: the local document index (offline, the
//! default), a SearXNG instance, and Serper, Brave and Tavily with the user's key. Each online
//! client speaks its service's documented request and response shape; failures (a refused key,
//! a rate limit, a server error) come back as [`SearchFailure`]s the tool words for the model.

use catena_search::DocumentIndex;
use serde_json::Value;
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
pub enum Service {
    Searxng,
    Serper,
    Brave,
    Tavily,
}

impl Service {
    pub const ALL: [Service; 4] = [
        Service::Searxng,
        Service::Serper,
        Service::Brave,
        Service::Tavily,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Service::Searxng => "searxng",
            Service::Serper => "serper",
            Service::Brave => "brave",
            Service::Tavily => "tavily",
        }
    }

    /// How the service is named to people.
    pub fn display_name(self) -> &'static str {
        match self {
            Service::Searxng => "SearXNG",
            Service::Serper => "Serper",
            Service::Brave => "Brave Search",
            Service::Tavily => "Tavily",
        }
    }

    pub fn from_name(name: &str) -> Option<Service> {
        Service::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The endpoint the service documents. These clients were tested against loopback servers
    /// speaking the documented shapes, not against the services themselves (no machine here
    /// reaches them); SearXNG has no public default: it is the user's own instance.
    pub fn documented_base_url(self) -> Option<&'static str> {
        match self {
            Service::Searxng => None,
            Service::Serper => Some("https://google.serper.dev"),
            Service::Brave => Some("https://api.search.brave.com"),
            Service::Tavily => Some("https://api.tavily.com"),
        }
    }

    /// The environment variable its key (or, for SearXNG, its instance's URL) is read from.
    pub fn env_var(self) -> &'static str {
        match self {
            Service::Searxng => "CATENA_SEARXNG_URL",
            Service::Serper => "SERPER_API_KEY",
            Service::Brave => "BRAVE_API_KEY",
            Service::Tavily => "TAVILY_API_KEY",
        }
    }
}

/// A client of one online service.
pub struct OnlineSearch {
    service: Service,
    base_url: String,
    key: Option<ApiKey>,
    client: reqwest::blocking::Client,
}

impl OnlineSearch {
    /// A client of `service` at `base_url` with `key` (SearXNG needs none; the others do, which
    /// the caller checks before offering the backend).
    pub fn new(
        service: Service,
        base_url: &str,
        key: Option<ApiKey>,
    ) -> Result<OnlineSearch, SearchFailure> {
        crate::install_tls_provider();
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::limited(3))
            .user_agent(concat!("catena/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| SearchFailure::Network {
                service: service.display_name(),
                reason: e.to_string(),
            })?;
        Ok(OnlineSearch {
            service,
            base_url: base_url.trim_end_matches('/').to_string(),
            key,
            client,
        })
    }

    fn request(&self, query: &str, count: usize) -> reqwest::blocking::RequestBuilder {
        let key = self.key.as_ref().map_or("", ApiKey::expose);
        let base = &self.base_url;
        match self.service {
            Service::Searxng => self
                .client
                .get(format!("{base}/search"))
                .query(&[("q", query), ("format", "json")]),
            Service::Serper => self
                .client
                .post(format!("{base}/search"))
                .header("X-API-KEY", key)
                .json(&serde_json::json!({ "q": query, "num": count })),
            Service::Brave => self
                .client
                .get(format!("{base}/res/v1/web/search"))
                .header("X-Subscription-Token", key)
                .header(reqwest::header::ACCEPT, "application/json")
                .query(&[("q", query), ("count", &count.min(20).to_string())]),
            Service::Tavily => self
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
                Service::Searxng => (
                    body.get("results"),
                    "title",
                    "url",
                    "content",
                    &["publishedDate"],
                ),
                Service::Serper => (body.get("organic"), "title", "link", "snippet", &["date"]),
                Service::Brave => (
                    body.get("web").and_then(|w| w.get("results")),
                    "title",
                    "url",
                    "description",
                    &["page_age", "age"],
                ),
                Service::Tavily => (
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
                Service::Serper | Service::Brave => Ok(Vec::new()),
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
                        Service::Searxng => text(item, "engine"),
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
        let response = self
            .request(query, count)
            .send()
            .map_err(|e| SearchFailure::Network {
                service,
                reason: if e.is_timeout() {
                    "no answer within 30 seconds".into()
                } else {
                    // Without the URL: for some services it carries the query string only, but
                    // a user's own instance may have credentials in it.
                    e.without_url().to_string()
                },
            })?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        let body = response.text().unwrap_or_default();
        match status {
            200..=299 => {}
            401 | 403 if self.service == Service::Searxng => {
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
                    message: error_message(&body),
                });
            }
        }
        let json: Value = serde_json::from_str(&body).map_err(|e| SearchFailure::BadResponse {
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

/// The message in an error body (`message`, `error`, `detail`), else its first 200 characters.
fn error_message(body: &str) -> String {
    let json: Option<Value> = serde_json::from_str(body).ok();
    let said = json.as_ref().and_then(|j| {
        ["message", "error", "detail"]
            .iter()
            .find_map(|k| match j.get(k) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Object(o)) => o
                    .get("detail")
                    .or_else(|| o.get("message"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                _ => None,
            })
    });
    let text = said.unwrap_or_else(|| body.chars().take(200).collect());
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() {
        "no message".into()
    } else {
        text
    }
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
    fn error_bodies_are_summarised() {
        assert_eq!(
            error_message(r#"{"message": "Quota exceeded"}"#),
            "Quota exceeded"
        );
        assert_eq!(
            error_message(r#"{"error": {"detail": "bad query"}}"#),
            "bad query"
        );
        assert_eq!(
            error_message("<html>\n oops </html>"),
            "<html> oops </html>"
        );
        assert_eq!(error_message(""), "no message");
    }

    #[test]
    fn markup_in_snippets_becomes_text() {
        assert_eq!(
            plain("The <strong>tide</strong> &amp; moon"),
            "The tide & moon"
        );
        assert_eq!(plain("plain"), "plain");
    }
}
