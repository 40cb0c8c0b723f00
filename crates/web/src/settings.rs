//! The user's choices for the web tools (the `[web]` table of the settings file) and the search
//! backend they give. Keys come from the environment or that file, never from the command line
//! (where every user of the machine can read them), and are never logged or stored in a run.

use crate::FetchOptions;
use crate::chat::ChatEndpoint;
use crate::search::{ApiKey, LocalSearch, OnlineSearch, SearchBackend, SearchService};
use catena_search::{DocumentIndex, SearchError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

/// The `[web]` settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebSettings {
    /// The search backend: `local` (the default), `searxng`, `serper`, `brave` or `tavily`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
    /// The document index `local` searches (default: the only one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    /// Read web pages over the network. Off by default: a run with the local backend stays on
    /// the machine unless the user turns this on; choosing an online backend turns it on.
    pub online: bool,
    /// The user's SearXNG instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub searxng_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serper_key: Option<ApiKey>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub brave_key: Option<ApiKey>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tavily_key: Option<ApiKey>,
    /// Endpoints other than the documented ones (a proxy of one's own), by service name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub base_urls: BTreeMap<String, String>,
    /// Seconds the page reader waits for one page (default 20).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_timeout: Option<u64>,
    /// Let the page reader open loopback, private and link-local addresses.
    pub allow_private_addresses: bool,
    /// Private addresses the page reader may open, one by one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_addresses: Vec<IpAddr>,
    /// An OpenAI-compatible endpoint (`http://127.0.0.1:8080/v1`) whose model summarises the
    /// pages `<crawl_page>` reads, instead of the run's own model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summarizer_url: Option<String>,
    /// The model name the endpoint is asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summarizer_model: Option<String>,
    /// The endpoint's key (`CATENA_SUMMARIZER_KEY` in the environment comes first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summarizer_key: Option<ApiKey>,
}

/// The environment variable of the summariser endpoint's key.
pub const SUMMARIZER_KEY_ENV: &str = "CATENA_SUMMARIZER_KEY";

/// Why the chosen backend cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WebSetupError {
    #[error("unknown search backend `{0}`: choose local, searxng, serper, brave or tavily")]
    UnknownBackend(String),
    #[error(
        "{service} needs {what}: set {env} in the environment or `{setting}` in the [web] table of {settings}"
    )]
    Missing {
        service: &'static str,
        what: &'static str,
        env: &'static str,
        setting: &'static str,
        settings: String,
    },
    #[error(
        "the summariser endpoint {url} needs the model to ask for: set `summarizer_model` in the [web] table of {settings}"
    )]
    SummarizerModel { url: String, settings: String },
    #[error("the summariser endpoint cannot be used: {0}")]
    Summarizer(#[from] crate::chat::EndpointError),
    #[error("the document index cannot be used: {0}")]
    Index(#[from] SearchError),
    #[error("{0}")]
    Client(String),
}

/// What the web tools of a run are built from.
pub struct WebSetup {
    /// `None` for the local backend with no document index yet (the tool then says how to
    /// build one).
    pub backend: Option<Arc<dyn SearchBackend>>,
    /// The document index `<crawl_page>` reads `file://` pages from.
    pub local_index: Option<Arc<DocumentIndex>>,
    /// Whether web pages are read over the network.
    pub online: bool,
    /// The endpoint that summarises pages; `None`: the run's own model does.
    pub summarizer: Option<Arc<ChatEndpoint>>,
}

impl WebSettings {
    /// The page reader's limits these settings give.
    pub fn fetch_options(&self) -> FetchOptions {
        let defaults = FetchOptions::default();
        FetchOptions {
            timeout: self
                .page_timeout
                .filter(|&s| s > 0)
                .map_or(defaults.timeout, std::time::Duration::from_secs),
            allow_private: self.allow_private_addresses,
            allowed_addresses: self.allowed_addresses.clone(),
            ..defaults
        }
    }

    /// The search backend named `chosen` (else the settings' choice, else `local`), with keys
    /// from `env` (the process environment in practice) before the settings file.
    /// `settings_file` is only named in errors.
    pub fn setup(
        &self,
        chosen: Option<&str>,
        indexes_dir: &Path,
        env: &dyn Fn(&str) -> Option<String>,
        settings_file: &Path,
    ) -> Result<WebSetup, WebSetupError> {
        let name = chosen.or(self.search.as_deref()).unwrap_or("local");
        let summarizer = self.summarizer(env, settings_file)?;
        let local_index = DocumentIndex::choose(indexes_dir, self.index.as_deref())?.map(Arc::new);
        if name == "local" {
            return Ok(WebSetup {
                backend: local_index
                    .clone()
                    .map(|index| Arc::new(LocalSearch::new(index)) as Arc<dyn SearchBackend>),
                local_index,
                online: self.online,
                summarizer,
            });
        }
        let service = SearchService::from_name(name)
            .ok_or_else(|| WebSetupError::UnknownBackend(name.into()))?;
        let missing = |what, setting| WebSetupError::Missing {
            service: service.display_name(),
            what,
            env: service.env_var(),
            setting,
            settings: settings_file.display().to_string(),
        };
        let from_env = env(service.env_var()).filter(|v| !v.trim().is_empty());
        let client = match service {
            SearchService::Searxng => match from_env {
                // The user's own environment: whatever address it names.
                Some(url) => OnlineSearch::new(service, &url, None),
                // The settings file, which the settings API writes too: names are checked
                // where they resolve, as the page reader's are.
                None => {
                    let url = self
                        .searxng_url
                        .clone()
                        .ok_or_else(|| missing("its instance's address", "searxng_url"))?;
                    OnlineSearch::with_address_rule(
                        service,
                        &url,
                        None,
                        self.allow_private_addresses,
                        self.allowed_addresses.clone(),
                    )
                }
            },
            _ => {
                let stored = match service {
                    SearchService::Serper => &self.serper_key,
                    SearchService::Brave => &self.brave_key,
                    _ => &self.tavily_key,
                };
                let key = from_env
                    .and_then(ApiKey::new)
                    .or_else(|| stored.clone())
                    .ok_or_else(|| {
                        missing(
                            "an API key",
                            match service {
                                SearchService::Serper => "serper_key",
                                SearchService::Brave => "brave_key",
                                _ => "tavily_key",
                            },
                        )
                    })?;
                let base = self
                    .base_urls
                    .get(service.name())
                    .cloned()
                    .or_else(|| service.documented_base_url().map(str::to_string))
                    .unwrap_or_default();
                OnlineSearch::new(service, &base, Some(key))
            }
        }
        .map_err(|e| WebSetupError::Client(e.to_string()))?;
        Ok(WebSetup {
            backend: Some(Arc::new(client)),
            local_index,
            online: true,
            summarizer,
        })
    }

    /// The summariser endpoint, when the settings name one.
    fn summarizer(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        settings_file: &Path,
    ) -> Result<Option<Arc<ChatEndpoint>>, WebSetupError> {
        let Some(url) = self
            .summarizer_url
            .as_deref()
            .filter(|u| !u.trim().is_empty())
        else {
            return Ok(None);
        };
        let model = self
            .summarizer_model
            .as_deref()
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| WebSetupError::SummarizerModel {
                url: url.to_string(),
                settings: settings_file.display().to_string(),
            })?;
        let key = env(SUMMARIZER_KEY_ENV)
            .and_then(ApiKey::new)
            .or_else(|| self.summarizer_key.clone());
        Ok(Some(Arc::new(ChatEndpoint::new(url, model, key)?)))
    }
}

/// Why an address given through the settings API is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefused {
    #[error("`{0}` is not an http(s) address")]
    NotHttp(String),
    /// The settings are shown back (`GET /v1/settings/web`) and an address is shown in the
    /// tools' status: a password inside one would be shown to whoever asks.
    #[error(
        "the address has a user name or password in it, which would be shown with the settings; \
         give the service's key in its key field instead"
    )]
    Credentials,
    /// The settings API is reachable by other programs on this machine; a private address there
    /// is the user's to write (the settings file, the environment) or to allow.
    #[error(
        "{ip} is {kind}: an address on this machine or its private networks is not set through \
         the settings API; write it in the [web] table of {settings} (or the service's \
         environment variable), or add {ip} to `allowed_addresses` there"
    )]
    Private {
        ip: IpAddr,
        kind: &'static str,
        settings: String,
    },
}

/// Checks an address the settings API was given: http(s), and no user name or password in it.
pub fn check_settable_url(url: &str) -> Result<url::Url, UrlRefused> {
    let parsed = url::Url::parse(url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| UrlRefused::NotHttp(without_credentials(url)))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(UrlRefused::Credentials);
    }
    Ok(parsed)
}

impl WebSettings {
    /// Checks a SearXNG address the settings API was given ([`check_settable_url`]), and that
    /// it names no loopback, private or link-local address literally unless these settings
    /// allow that address (`allow_private_addresses`, `allowed_addresses`): what SearXNG answers
    /// goes into a run, and other programs on the machine can reach the API. Names are checked
    /// where they resolve ([`OnlineSearch::with_address_rule`]). `settings_file` is only named
    /// in errors.
    pub fn check_searxng_url(
        &self,
        url: &str,
        settings_file: &Path,
    ) -> Result<url::Url, UrlRefused> {
        let parsed = check_settable_url(url)?;
        let ip = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
            Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
            _ => return Ok(parsed),
        };
        match crate::address::private_kind(ip) {
            Some(kind)
                if !self.allow_private_addresses && !self.allowed_addresses.contains(&ip) =>
            {
                Err(UrlRefused::Private {
                    ip,
                    kind,
                    settings: settings_file.display().to_string(),
                })
            }
            _ => Ok(parsed),
        }
    }
}

/// `url` as it may be shown: without a user name and password inside it
/// (`https://user:pass@host/` becomes `https://host/`). Text that is not a URL with a host is
/// shown from its last `@` on, which is where credentials would end.
pub fn without_credentials(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.has_host() => {
            if parsed.username().is_empty() && parsed.password().is_none() {
                return url.to_string();
            }
            // Only URLs that cannot have a user name fail here, and those have none.
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        _ => match url.rsplit_once('@') {
            Some((_, after)) => format!("...@{after}"),
            None => url.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_from_the_environment_first_and_missing_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("settings.toml");
        let settings: WebSettings =
            toml::from_str("search = \"serper\"\nserper_key = \"from-file\"\n").unwrap();
        assert!(!format!("{settings:?}").contains("from-file"));
        let no_env = |_: &str| None;
        let setup = settings.setup(None, dir.path(), &no_env, &file).unwrap();
        assert_eq!(setup.backend.unwrap().name(), "serper");
        assert!(setup.online);
        let err = WebSettings::default()
            .setup(Some("brave"), dir.path(), &no_env, &file)
            .err()
            .unwrap();
        let message = err.to_string();
        assert!(
            message.contains("BRAVE_API_KEY") && message.contains("brave_key"),
            "{message}"
        );
        let env = |name: &str| (name == "BRAVE_API_KEY").then(|| "k".to_string());
        assert!(
            WebSettings::default()
                .setup(Some("brave"), dir.path(), &env, &file)
                .is_ok()
        );
        assert!(matches!(
            WebSettings::default().setup(Some("bing"), dir.path(), &no_env, &file),
            Err(WebSetupError::UnknownBackend(_))
        ));
        // Local with no document index: no backend (the tool explains), and offline.
        let local = WebSettings::default()
            .setup(None, dir.path(), &no_env, &file)
            .unwrap();
        assert!(local.backend.is_none() && !local.online);
        assert!(toml::from_str::<WebSettings>("serch = \"local\"").is_err());
    }

    #[test]
    fn addresses_with_credentials_are_refused_and_shown_without_them() {
        assert_eq!(
            check_settable_url("https://me:hunter2@search.example/"),
            Err(UrlRefused::Credentials)
        );
        assert_eq!(
            check_settable_url("https://me@search.example/"),
            Err(UrlRefused::Credentials)
        );
        assert!(check_settable_url("https://search.example/").is_ok());
        let not_http = check_settable_url("ftp://me:hunter2@files.example/").unwrap_err();
        assert!(!not_http.to_string().contains("hunter2"), "{not_http}");
        assert_eq!(
            without_credentials("https://me:hunter2@search.example/x?q=1"),
            "https://search.example/x?q=1"
        );
        assert_eq!(
            without_credentials("http://127.0.0.1:8080/v1"),
            "http://127.0.0.1:8080/v1"
        );
        assert!(!without_credentials("me:hunter2@not a url").contains("hunter2"));
    }

    #[test]
    fn searxng_addresses_on_this_machine_need_the_users_leave() {
        let file = Path::new("settings.toml");
        let settings = WebSettings::default();
        for refused in [
            "http://127.0.0.1:8888",
            "http://[::127.0.0.1]/",
            "http://[64:ff9b:1::1]/",
            "http://10.0.0.2/",
        ] {
            let err = settings.check_searxng_url(refused, file).unwrap_err();
            assert!(
                matches!(err, UrlRefused::Private { .. }),
                "{refused}: {err:?}"
            );
        }
        // Names are checked where they resolve, when the client looks them up.
        assert!(
            settings
                .check_searxng_url("https://searx.example/", file)
                .is_ok()
        );
        let allowed = WebSettings {
            allowed_addresses: vec!["127.0.0.1".parse().unwrap()],
            ..WebSettings::default()
        };
        assert!(
            allowed
                .check_searxng_url("http://127.0.0.1:8888", file)
                .is_ok()
        );
        assert!(
            allowed
                .check_searxng_url("http://127.0.0.2:8888", file)
                .is_err()
        );
    }
}
