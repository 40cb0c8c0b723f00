//! What the UI shows and edits about the tools: whether each tool call a model may make has
//! something behind it on this machine ([`tool_status`]), and the `[web]` settings without
//! their keys ([`WebSettingsView`], [`WebSettingsUpdate`]).

use crate::ServiceError;
use crate::web::web_settings;
use catena_hub::config::Paths;
use catena_hub::installed::{save_settings_section, settings_path};
use catena_protocol::Tag;
use catena_search::{IndexInfo, IndexKind};
use catena_web::{ApiKey, SUMMARIZER_KEY_ENV, Service as SearchService, WebSettings};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Whether a tool call gets a real answer here, and from what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolStatus {
    /// The tag a model writes (`web_search`).
    pub tool: &'static str,
    pub ready: bool,
    /// What answers it, or what to do so something does.
    pub detail: String,
}

/// The action tools, each with its status, as a run started now would have them.
pub fn tool_status(paths: &Paths) -> Vec<ToolStatus> {
    let indexes = catena_search::list(&paths.indexes_dir());
    let status = |tag: Tag, ready: bool, detail: String| ToolStatus {
        tool: tag.name(),
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
                Some(url) => format!("summarised by the model at {url}"),
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WebSettingsView {
    pub search: String,
    pub index: Option<String>,
    pub online: bool,
    pub searxng_url: Option<String>,
    pub summarizer_url: Option<String>,
    pub summarizer_model: Option<String>,
    pub page_timeout: Option<u64>,
    /// Per key (`serper`, `brave`, `tavily`, `summarizer`): whether the settings file holds one
    /// and whether the environment sets one (which comes first).
    pub keys: BTreeMap<&'static str, KeyState>,
    /// The document indexes there are to choose from.
    pub document_indexes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KeyState {
    pub in_settings: bool,
    pub in_environment: bool,
}

/// A change to the `[web]` settings from the UI. Fields left out keep their value; `keys` maps
/// a key's name to its new value, an empty one removing it. Keys are written to the settings
/// file (the owner's only) and never sent back.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSettingsUpdate {
    pub search: Option<String>,
    /// An empty name: the only index there is.
    pub index: Option<String>,
    pub online: Option<bool>,
    pub searxng_url: Option<String>,
    pub summarizer_url: Option<String>,
    pub summarizer_model: Option<String>,
    pub page_timeout: Option<u64>,
    #[serde(default)]
    pub keys: BTreeMap<String, String>,
}

const KEY_NAMES: [&str; 4] = ["serper", "brave", "tavily", "summarizer"];

fn key_slot<'s>(settings: &'s mut WebSettings, name: &str) -> Option<&'s mut Option<ApiKey>> {
    match name {
        "serper" => Some(&mut settings.serper_key),
        "brave" => Some(&mut settings.brave_key),
        "tavily" => Some(&mut settings.tavily_key),
        "summarizer" => Some(&mut settings.summarizer_key),
        _ => None,
    }
}

fn key_env(name: &str) -> &'static str {
    match name {
        "serper" => SearchService::Serper.env_var(),
        "brave" => SearchService::Brave.env_var(),
        "tavily" => SearchService::Tavily.env_var(),
        _ => SUMMARIZER_KEY_ENV,
    }
}

/// The `[web]` settings for the UI.
pub fn web_settings_view(paths: &Paths) -> Result<WebSettingsView, ServiceError> {
    let mut settings = web_settings(paths).map_err(|e| ServiceError::internal(e.to_string()))?;
    let keys = KEY_NAMES
        .iter()
        .map(|&name| {
            let in_settings = key_slot(&mut settings, name).is_some_and(|k| k.is_some());
            let in_environment = std::env::var(key_env(name)).is_ok_and(|v| !v.trim().is_empty());
            (
                name,
                KeyState {
                    in_settings,
                    in_environment,
                },
            )
        })
        .collect();
    let document_indexes = catena_search::list(&paths.indexes_dir())
        .into_iter()
        .filter(|i| i.kind == IndexKind::Documents)
        .map(|i| i.name)
        .collect();
    Ok(WebSettingsView {
        search: settings.search.clone().unwrap_or_else(|| "local".into()),
        index: settings.index.clone(),
        online: settings.online,
        searxng_url: settings.searxng_url.clone(),
        summarizer_url: settings.summarizer_url.clone(),
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
    for (field, value) in [
        (&mut settings.searxng_url, update.searxng_url),
        (&mut settings.summarizer_url, update.summarizer_url),
    ] {
        if let Some(url) = value {
            let url = url.trim().to_string();
            if !url.is_empty()
                && !url::Url::parse(&url).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
            {
                return Err(ServiceError::invalid(format!(
                    "`{url}` is not an http(s) address."
                )));
            }
            *field = (!url.is_empty()).then_some(url);
        }
    }
    if let Some(model) = update.summarizer_model {
        let model = model.trim().to_string();
        settings.summarizer_model = (!model.is_empty()).then_some(model);
    }
    if let Some(timeout) = update.page_timeout {
        settings.page_timeout = (timeout > 0).then_some(timeout);
    }
    for (name, value) in update.keys {
        let slot = key_slot(&mut settings, &name).ok_or_else(|| {
            ServiceError::invalid(format!(
                "Unknown key `{name}`: the keys are serper, brave, tavily and summarizer."
            ))
        })?;
        *slot = ApiKey::new(value);
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
        assert!(view.keys["serper"].in_settings);
        assert!(!serde_json::to_string(&view).unwrap().contains("sk-secret"));
        let file = std::fs::read_to_string(settings_path(&paths)).unwrap();
        assert!(file.contains("sk-secret"), "{file}");
        // The key works for the backend; removing it is an empty value.
        let statuses = tool_status(&paths);
        let web = statuses.iter().find(|s| s.tool == "web_search").unwrap();
        assert!(web.ready && web.detail.contains("Serper"), "{web:?}");
        let removed = WebSettingsUpdate {
            keys: [("serper".to_string(), String::new())].into(),
            ..Default::default()
        };
        assert!(!update_web_settings(&paths, removed).unwrap().keys["serper"].in_settings);
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

    #[test]
    fn without_indexes_the_search_tools_say_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::at(dir.path(), dir.path());
        let statuses = tool_status(&paths);
        let by_tool = |tool: &str| statuses.iter().find(|s| s.tool == tool).unwrap().clone();
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
