//! What the UI shows and edits about the tools: whether each tool call a model may make has
//! something behind it on this machine ([`tool_status`]), and the `[web]` settings without
//! their keys ([`WebSettingsView`], [`WebSettingsUpdate`]).

use crate::ServiceError;
use crate::web::web_settings;
use catena_hub::config::Paths;
use catena_hub::settings::{save_settings_section, settings_path};
use catena_protocol::Tag;
use catena_search::{IndexInfo, IndexKind};
use catena_web::{
    ApiKey, SUMMARIZER_KEY_ENV, SearchService, UrlRefused, WebSettings, check_settable_url,
    without_credentials,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use ts_rs::TS;

/// Whether a tool call gets a real answer here, and from what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
pub struct ToolStatus {
    /// The tag a model writes (`web_search`).
    pub tool: Tag,
    pub ready: bool,
    /// What answers it, or what to do so something does.
    pub detail: String,
}

/// The action tools, each with its status, as a run started now would have them.
pub fn tool_status(paths: &Paths) -> Vec<ToolStatus> {
    let indexes = catena_search::list(&paths.indexes_dir());
    let status = |tag: Tag, ready: bool, detail: String| ToolStatus {
        tool: tag,
        ready,
        detail,
    };
    let mut statuses = vec![status(
        Tag::Code,
        true,
        "Python in the WebAssembly sandbox".into(),
    )];
    let web = web_settings(paths)
        .map_err(|e| e.to_string())
        .and_then(|settings| {
            let setup = settings
                .setup(
                    None,
                    &paths.indexes_dir(),
                    &|name| std::env::var(name).ok(),
                    &settings_path(paths),
                )
                .map_err(|e| e.to_string())?;
            Ok((settings, setup))
        });
    match web {
        Ok((settings, setup)) => {
            let (ready, detail) = match (&setup.backend, &setup.local_index) {
                (Some(backend), Some(index)) if backend.name() == "local" => (
                    true,
                    format!(
                        "the local index `{}` ({})",
                        index.info.name,
                        count(&index.info)
                    ),
                ),
                (Some(backend), _) => {
                    let name = SearchService::from_name(backend.name())
                        .map_or(backend.name(), SearchService::display_name);
                    (true, format!("{name}, online"))
                }
                (None, _) => (false, choose_hint(&indexes, IndexKind::Documents)),
            };
            statuses.push(status(Tag::WebSearch, ready, detail));
            let mut sources = Vec::new();
            if let Some(index) = &setup.local_index {
                sources.push(format!("documents of `{}`", index.info.name));
            }
            if setup.online {
                sources.push("web pages (online)".into());
            }
            let reader = match settings.summarizer_url.as_deref() {
                Some(url) => format!("summarised by the model at {}", without_credentials(url)),
                None => "summarised by the run's own model".into(),
            };
            let detail = if sources.is_empty() {
                "nothing to read: build a document index or turn on reading web pages".into()
            } else {
                format!("{}, {reader}", sources.join(" and "))
            };
            statuses.push(status(Tag::CrawlPage, !sources.is_empty(), detail));
        }
        Err(reason) => {
            statuses.push(status(Tag::WebSearch, false, reason.clone()));
            statuses.push(status(Tag::CrawlPage, false, reason));
        }
    }
    let passages: Vec<&IndexInfo> = indexes
        .iter()
        .filter(|i| i.kind == IndexKind::Passages)
        .collect();
    statuses.push(match passages.as_slice() {
        [only] => status(
            Tag::WikiSearch,
            true,
            format!("the passage index `{}` ({})", only.name, count(only)),
        ),
        _ => status(
            Tag::WikiSearch,
            false,
            choose_hint(&indexes, IndexKind::Passages),
        ),
    });
    statuses.push(status(
        Tag::VisualInspector,
        false,
        "no backend in this version: its calls are answered so".into(),
    ));
    statuses
}

fn count(info: &IndexInfo) -> String {
    info.kind.count(info.entries)
}

/// What to do when no index of `kind` is chosen.
fn choose_hint(indexes: &[IndexInfo], kind: IndexKind) -> String {
    let of_kind = indexes.iter().filter(|i| i.kind == kind).count();
    match (kind, of_kind) {
        (IndexKind::Documents, 0) => {
            "no document index: `catena index add FOLDER` builds one, or choose an online backend"
                .into()
        }
        (IndexKind::Documents, _) => "several document indexes: choose one in Settings".into(),
        (IndexKind::Passages, 0) => {
            "no passage index: `catena index add passages.jsonl` (or a `.zim` archive with \
             `--kind passages`) builds one"
                .into()
        }
        (IndexKind::Passages, _) => {
            "several passage indexes: the server uses one only when it is the only one".into()
        }
    }
}

/// The `[web]` settings as the UI shows them: every key is left out, only whether it is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[ts(rename = "WebSettings")]
pub struct WebSettingsView {
    pub search: String,
    pub index: Option<String>,
    pub online: bool,
    pub searxng_url: Option<String>,
    pub summarizer_url: Option<String>,
    pub summarizer_model: Option<String>,
    pub page_timeout: Option<u64>,
    /// Per key: whether the settings file holds one and whether the environment sets one (which
    /// comes first).
    pub keys: KeyStates,
    /// The document indexes there are to choose from.
    pub document_indexes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
pub struct KeyState {
    pub in_settings: bool,
    pub in_environment: bool,
}

/// The state of every key the `[web]` settings can hold, one field per [`KeyName`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
pub struct KeyStates {
    pub serper: KeyState,
    pub brave: KeyState,
    pub tavily: KeyState,
    pub summarizer: KeyState,
}

/// The API keys the `[web]` settings hold: the three search services' and the summariser's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum KeyName {
    Serper,
    Brave,
    Tavily,
    Summarizer,
}

impl KeyName {
    const ALL: [KeyName; 4] = [
        KeyName::Serper,
        KeyName::Brave,
        KeyName::Tavily,
        KeyName::Summarizer,
    ];

    fn as_str(self) -> &'static str {
        match self {
            KeyName::Serper => "serper",
            KeyName::Brave => "brave",
            KeyName::Tavily => "tavily",
            KeyName::Summarizer => "summarizer",
        }
    }

    fn parse(name: &str) -> Option<KeyName> {
        KeyName::ALL.into_iter().find(|key| key.as_str() == name)
    }

    /// The variable of the environment that sets this key (and comes before the settings file).
    fn env_var(self) -> &'static str {
        match self {
            KeyName::Serper => SearchService::Serper.env_var(),
            KeyName::Brave => SearchService::Brave.env_var(),
            KeyName::Tavily => SearchService::Tavily.env_var(),
            KeyName::Summarizer => SUMMARIZER_KEY_ENV,
        }
    }

    /// Where `settings` keeps this key.
    fn slot(self, settings: &mut WebSettings) -> &mut Option<ApiKey> {
        match self {
            KeyName::Serper => &mut settings.serper_key,
            KeyName::Brave => &mut settings.brave_key,
            KeyName::Tavily => &mut settings.tavily_key,
            KeyName::Summarizer => &mut settings.summarizer_key,
        }
    }
}

/// A change to the `[web]` settings from the UI. Fields left out keep their value; `keys` maps
/// a key's name to its new value, an empty one removing it. Keys are written to the settings
/// file (the owner's only) and never sent back.
#[derive(Debug, Clone, Default, Deserialize, TS)]
#[serde(deny_unknown_fields)]
#[ts(optional_fields)]
pub struct WebSettingsUpdate {
    pub search: Option<String>,
    /// An empty name: the only index there is.
    pub index: Option<String>,
    pub online: Option<bool>,
    pub searxng_url: Option<String>,
    pub summarizer_url: Option<String>,
    pub summarizer_model: Option<String>,
    pub page_timeout: Option<u64>,
    // Read by name, not as `KeyName`, so that an unknown name gets an error listing the known
    // ones; the UI's type is `KeyName`'s.
    #[serde(default)]
    #[ts(as = "Option<BTreeMap<KeyName, String>>")]
    pub keys: BTreeMap<String, String>,
}

/// Whether the environment sets the key in `var`.
fn env_key(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.trim().is_empty())
}

/// The new value of a URL setting when `update` changes it (`Some(None)`: removed), else
/// `None`. The view shows URLs without credentials, so a UI sending back what it was shown
/// changes nothing.
fn changed_url(stored: &Option<String>, update: Option<String>) -> Option<Option<String>> {
    let url = update?.trim().to_string();
    let unchanged = stored
        .as_deref()
        .is_some_and(|old| old == url || without_credentials(old) == url)
        || (stored.is_none() && url.is_empty());
    (!unchanged).then(|| (!url.is_empty()).then_some(url))
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The `[web]` settings for the UI.
pub fn web_settings_view(paths: &Paths) -> Result<WebSettingsView, ServiceError> {
    let mut settings = web_settings(paths).map_err(|e| ServiceError::internal(e.to_string()))?;
    let mut state = |name: KeyName| KeyState {
        in_settings: name.slot(&mut settings).is_some(),
        in_environment: env_key(name.env_var()),
    };
    let keys = KeyStates {
        serper: state(KeyName::Serper),
        brave: state(KeyName::Brave),
        tavily: state(KeyName::Tavily),
        summarizer: state(KeyName::Summarizer),
    };
    let document_indexes = catena_search::list(&paths.indexes_dir())
        .into_iter()
        .filter(|i| i.kind == IndexKind::Documents)
        .map(|i| i.name)
        .collect();
    Ok(WebSettingsView {
        search: settings.search.clone().unwrap_or_else(|| "local".into()),
        index: settings.index.clone(),
        online: settings.online,
        searxng_url: settings.searxng_url.as_deref().map(without_credentials),
        summarizer_url: settings.summarizer_url.as_deref().map(without_credentials),
        summarizer_model: settings.summarizer_model.clone(),
        page_timeout: settings.page_timeout,
        keys,
        document_indexes,
    })
}

/// Applies `update` to the `[web]` settings after checking it, and saves them.
pub fn update_web_settings(
    paths: &Paths,
    update: WebSettingsUpdate,
) -> Result<WebSettingsView, ServiceError> {
    let mut settings = web_settings(paths).map_err(|e| ServiceError::internal(e.to_string()))?;
    if let Some(search) = update.search {
        if search != "local" && SearchService::from_name(&search).is_none() {
            return Err(ServiceError::invalid(format!(
                "Unknown search backend `{search}`: choose local, searxng, serper, brave or tavily."
            )));
        }
        settings.search = (search != "local").then_some(search);
    }
    if let Some(index) = update.index {
        let exists = catena_search::list(&paths.indexes_dir())
            .iter()
            .any(|i| i.name == index && i.kind == IndexKind::Documents);
        if !index.is_empty() && !exists {
            return Err(ServiceError::invalid(format!(
                "No document index named `{index}`."
            )));
        }
        settings.index = (!index.is_empty()).then_some(index);
    }
    if let Some(online) = update.online {
        settings.online = online;
    }
    let settings_file = settings_path(paths);
    let refused =
        |e: UrlRefused| ServiceError::invalid(format!("{}.", capitalised(&e.to_string())));
    if let Some(url) = changed_url(&settings.searxng_url, update.searxng_url) {
        if let Some(url) = &url {
            settings
                .check_searxng_url(url, &settings_file)
                .map_err(refused)?;
        }
        settings.searxng_url = url;
    }
    if let Some(url) = changed_url(&settings.summarizer_url, update.summarizer_url) {
        if let Some(url) = &url {
            check_settable_url(url).map_err(refused)?;
            if env_key(SUMMARIZER_KEY_ENV) {
                return Err(ServiceError::invalid(format!(
                    "The summariser's key comes from {SUMMARIZER_KEY_ENV} in the server's \
                     environment, and it goes only to the summariser address in {}: change \
                     `summarizer_url` there, or start the server without the variable.",
                    settings_file.display()
                )));
            }
        }
        // A key is bound to the address it was given for: a new address gets only a key given
        // with it (in this update's `keys`), never the old one.
        settings.summarizer_url = url;
        settings.summarizer_key = None;
    }
    if let Some(model) = update.summarizer_model {
        let model = model.trim().to_string();
        settings.summarizer_model = (!model.is_empty()).then_some(model);
    }
    if let Some(timeout) = update.page_timeout {
        settings.page_timeout = (timeout > 0).then_some(timeout);
    }
    for (name, value) in update.keys {
        let key = KeyName::parse(&name).ok_or_else(|| {
            ServiceError::invalid(format!(
                "Unknown key `{name}`: the keys are serper, brave, tavily and summarizer."
            ))
        })?;
        *key.slot(&mut settings) = ApiKey::new(value);
    }
    save_settings_section(paths, "web", &settings)
        .map_err(|e| ServiceError::internal(e.to_string()))?;
    web_settings_view(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_written_but_never_shown_and_bad_choices_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::at(dir.path(), dir.path());
        let update = WebSettingsUpdate {
            search: Some("serper".into()),
            online: Some(true),
            keys: [("serper".to_string(), "sk-secret".to_string())].into(),
            ..Default::default()
        };
        let view = update_web_settings(&paths, update).unwrap();
        assert_eq!(view.search, "serper");
        assert!(view.keys.serper.in_settings);
        assert!(!serde_json::to_string(&view).unwrap().contains("sk-secret"));
        let file = std::fs::read_to_string(settings_path(&paths)).unwrap();
        assert!(file.contains("sk-secret"), "{file}");
        // The key works for the backend; removing it is an empty value.
        let statuses = tool_status(&paths);
        let web = statuses.iter().find(|s| s.tool == Tag::WebSearch).unwrap();
        assert!(web.ready && web.detail.contains("Serper"), "{web:?}");
        let removed = WebSettingsUpdate {
            keys: [("serper".to_string(), String::new())].into(),
            ..Default::default()
        };
        assert!(
            !update_web_settings(&paths, removed)
                .unwrap()
                .keys
                .serper
                .in_settings
        );
        for bad in [
            WebSettingsUpdate {
                search: Some("google".into()),
                ..Default::default()
            },
            WebSettingsUpdate {
                index: Some("nothing".into()),
                ..Default::default()
            },
            WebSettingsUpdate {
                searxng_url: Some("file:///etc".into()),
                ..Default::default()
            },
            WebSettingsUpdate {
                keys: [("github".to_string(), "x".to_string())].into(),
                ..Default::default()
            },
        ] {
            assert!(update_web_settings(&paths, bad).is_err());
        }
    }

    fn update(paths: &Paths, json: serde_json::Value) -> Result<WebSettingsView, ServiceError> {
        update_web_settings(paths, serde_json::from_value(json).unwrap())
    }

    fn stored(paths: &Paths) -> WebSettings {
        web_settings(paths).unwrap()
    }

    #[test]
    fn a_key_stays_with_the_address_it_was_given_for() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::at(dir.path(), dir.path());
        let first = serde_json::json!({
            "summarizer_url": "http://127.0.0.1:8080/v1",
            "summarizer_model": "m",
            "keys": {"summarizer": "sk-bound"},
        });
        update(&paths, first).unwrap();
        // The same address, as the UI sends it back with every save: the key stays.
        update(
            &paths,
            serde_json::json!({"summarizer_url": "http://127.0.0.1:8080/v1", "online": true}),
        )
        .unwrap();
        assert!(stored(&paths).summarizer_key.is_some());
        // Another address: the key is forgotten, not sent there.
        let view = update(
            &paths,
            serde_json::json!({"summarizer_url": "http://127.0.0.1:9999/v1"}),
        )
        .unwrap();
        assert!(!view.keys.summarizer.in_settings);
        let file = std::fs::read_to_string(settings_path(&paths)).unwrap();
        assert!(!file.contains("sk-bound"), "{file}");
        // A new address with a new key in the same request keeps the new key.
        update(
            &paths,
            serde_json::json!({
                "summarizer_url": "http://127.0.0.1:7777/v1",
                "keys": {"summarizer": "sk-new"},
            }),
        )
        .unwrap();
        let settings = stored(&paths);
        assert_eq!(
            settings.summarizer_url.as_deref(),
            Some("http://127.0.0.1:7777/v1")
        );
        assert!(settings.summarizer_key.is_some());
        // Removing the address removes its key.
        update(&paths, serde_json::json!({"summarizer_url": ""})).unwrap();
        let settings = stored(&paths);
        assert!(settings.summarizer_url.is_none() && settings.summarizer_key.is_none());
    }

    #[test]
    fn credentials_in_addresses_are_refused_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::at(dir.path(), dir.path());
        for field in ["searxng_url", "summarizer_url"] {
            let err = update(
                &paths,
                serde_json::json!({field: "https://user:hunter2@search.example/"}),
            )
            .unwrap_err();
            assert!(err.message.contains("user name or password"), "{err:?}");
            assert!(!err.message.contains("hunter2"), "{err:?}");
        }
        // Written into the file by hand, they work but are shown without the password, and a
        // UI sending back what it was shown changes nothing.
        std::fs::write(
            settings_path(&paths),
            "[web]\nsearxng_url = \"https://me:hunter2@search.example/\"\n\
             summarizer_url = \"https://me:hunter2@llm.example/v1\"\n\
             summarizer_model = \"m\"\nsummarizer_key = \"sk-kept\"\n",
        )
        .unwrap();
        let view = web_settings_view(&paths).unwrap();
        let shown = serde_json::to_string(&view).unwrap();
        assert!(
            !shown.contains("hunter2") && !shown.contains("me:"),
            "{shown}"
        );
        assert_eq!(view.searxng_url.as_deref(), Some("https://search.example/"));
        let status = serde_json::to_string(&tool_status(&paths)).unwrap();
        assert!(!status.contains("hunter2"), "{status}");
        let sent_back = serde_json::json!({
            "searxng_url": view.searxng_url,
            "summarizer_url": view.summarizer_url,
        });
        update(&paths, sent_back).unwrap();
        let settings = stored(&paths);
        assert_eq!(
            settings.searxng_url.as_deref(),
            Some("https://me:hunter2@search.example/")
        );
        assert!(settings.summarizer_key.is_some());
    }

    #[test]
    fn the_api_sets_no_searxng_on_this_machine_unless_the_settings_allow_it() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::at(dir.path(), dir.path());
        for private in [
            "http://127.0.0.1:8888",
            "http://[::1]:8888",
            "http://2130706433:8888",
            "http://192.168.1.5/",
            "http://[::ffff:0:127.0.0.1]/",
        ] {
            let err = update(&paths, serde_json::json!({"searxng_url": private})).unwrap_err();
            assert!(
                err.message.contains("allowed_addresses"),
                "{private}: {err:?}"
            );
        }
        assert!(stored(&paths).searxng_url.is_none());
        update(
            &paths,
            serde_json::json!({"searxng_url": "https://search.example/"}),
        )
        .unwrap();
        // The user allowed the address in the settings file: then the API may name it.
        std::fs::write(
            settings_path(&paths),
            "[web]\nallowed_addresses = [\"127.0.0.1\"]\n",
        )
        .unwrap();
        update(
            &paths,
            serde_json::json!({"searxng_url": "http://127.0.0.1:8888"}),
        )
        .unwrap();
        assert!(
            update(
                &paths,
                serde_json::json!({"searxng_url": "http://127.0.0.2:8888"})
            )
            .is_err()
        );
        // An address already in the file, sent back unchanged, is kept.
        std::fs::write(
            settings_path(&paths),
            "[web]\nsearxng_url = \"http://127.0.0.1:8888\"\n",
        )
        .unwrap();
        update(
            &paths,
            serde_json::json!({"searxng_url": "http://127.0.0.1:8888", "online": true}),
        )
        .unwrap();
    }

    #[test]
    fn without_indexes_the_search_tools_say_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::at(dir.path(), dir.path());
        let statuses = tool_status(&paths);
        let by_tool = |tool: &str| {
            statuses
                .iter()
                .find(|s| s.tool.name() == tool)
                .unwrap()
                .clone()
        };
        assert!(by_tool("code").ready);
        let web = by_tool("web_search");
        assert!(
            !web.ready && web.detail.contains("catena index add FOLDER"),
            "{web:?}"
        );
        assert!(!by_tool("crawl_page").ready);
        assert!(by_tool("wiki_search").detail.contains("--kind passages"));
        assert!(!by_tool("visual_inspector").ready);
    }
}
