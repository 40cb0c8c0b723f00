//! The web tools for every front end, from the `[web]` table of the settings file.

use catena_agent::tools::ToolBox;
use catena_hub::config::Paths;
use catena_hub::installed::ModelsError;
use catena_hub::settings::{settings_path, settings_section};
use catena_protocol::{Profile, Tag};
use catena_web::{FetchError, WebSettings, WebSetupError};

/// Why the web tools could not be given to a run.
#[derive(Debug, thiserror::Error)]
pub enum WebToolsError {
    #[error("the web settings cannot be read: {0}")]
    Settings(#[from] ModelsError),
    #[error("the web tools cannot be set up: {0}")]
    Setup(#[from] WebSetupError),
    #[error("the page reader cannot start: {0}")]
    Fetcher(#[from] FetchError),
}

/// Gives `tools` the web tools `profile` uses (nothing, and no settings read, when it uses
/// none), as the `[web]` settings ([`web_settings`]) set them up after `adjust` applied a
/// command's own choices, with `backend` when the command names one. Keys are looked up in the
/// environment first.
pub fn add_web_tools(
    tools: &mut ToolBox,
    profile: &Profile,
    paths: &Paths,
    adjust: impl FnOnce(&mut WebSettings),
    backend: Option<&str>,
) -> Result<(), WebToolsError> {
    if !profile.tools.contains(&Tag::WebSearch) && !profile.tools.contains(&Tag::CrawlPage) {
        return Ok(());
    }
    let mut settings = web_settings(paths)?;
    adjust(&mut settings);
    let setup = settings.setup(
        backend,
        &paths.indexes_dir(),
        &|name| std::env::var(name).ok(),
        &settings_path(paths),
    )?;
    catena_agent::tools::add_web_tools(tools, profile, &setup, settings.fetch_options())?;
    Ok(())
}

/// The `[web]` settings. When they hold API keys and the file is readable by other users, says
/// so (the file Catena writes is the owner's only; one written by hand may not be).
pub fn web_settings(paths: &Paths) -> Result<WebSettings, ModelsError> {
    let settings: WebSettings = settings_section(paths, "web")?;
    let has_keys = settings.serper_key.is_some()
        || settings.brave_key.is_some()
        || settings.tavily_key.is_some()
        || settings.summarizer_key.is_some();
    #[cfg(unix)]
    if has_keys {
        use std::os::unix::fs::PermissionsExt;
        let path = settings_path(paths);
        if let Ok(meta) = std::fs::metadata(&path)
            && meta.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(
                "{} holds API keys and other users can read it: chmod 600 it",
                path.display()
            );
        }
    }
    #[cfg(not(unix))]
    let _ = (has_keys, settings_path);
    Ok(settings)
}
