//! The web tools' settings for every front end: the `[web]` table of the settings file.

use catena_hub::config::Paths;
use catena_hub::installed::{ModelsError, settings_path, settings_section};
use catena_web::WebSettings;

/// The `[web]` settings. When they hold API keys and the file is readable by other users, says
/// so (the file Catena writes is the owner's only; one written by hand may not be).
pub fn web_settings(paths: &Paths) -> Result<WebSettings, ModelsError> {
    let settings: WebSettings = settings_section(paths, "web")?;
    let has_keys = settings.serper_key.is_some()
        || settings.brave_key.is_some()
        || settings.tavily_key.is_some();
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
