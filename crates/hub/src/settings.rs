//! `<data>/settings.toml`, the user's settings file: one TOML table per part of Catena
//! (`[models]` here, `[web]` for the web tools), each read and saved on its own so that saving
//! one keeps every other table as it was.

use crate::config::Paths;
use crate::files::{ModelsError, write_atomic};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The user's settings about models, in the `[models]` table of `<data>/settings.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSettings {
    /// `id[:QUANT]`, a downloaded file's name, or a path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// A hub mirror's base URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<String>,
}

/// The settings file, `<data>/settings.toml`.
pub fn settings_path(paths: &Paths) -> PathBuf {
    paths.data_dir.join("settings.toml")
}

fn read_settings_table(path: &Path) -> Result<toml::Table, ModelsError> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .parse::<toml::Table>()
            .map_err(|e| ModelsError::Settings {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(toml::Table::new()),
        Err(source) => Err(ModelsError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Reads the model settings (defaults when there is no file).
pub fn settings(paths: &Paths) -> Result<ModelSettings, ModelsError> {
    settings_section(paths, "models")
}

/// Saves the model settings, keeping every other table of the file as it was.
pub fn save_settings(paths: &Paths, settings: &ModelSettings) -> Result<(), ModelsError> {
    save_settings_section(paths, "models", settings)
}

/// Reads the `[name]` table of the settings file (defaults when there is no file or no such
/// table).
pub fn settings_section<T: serde::de::DeserializeOwned + Default>(
    paths: &Paths,
    name: &str,
) -> Result<T, ModelsError> {
    let path = settings_path(paths);
    let table = read_settings_table(&path)?;
    match table.get(name) {
        None => Ok(T::default()),
        Some(value) => {
            value
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| ModelsError::Settings {
                    path,
                    message: format!("[{name}]: {e}"),
                })
        }
    }
}

/// Saves the `[name]` table, keeping every other table of the file as it was. The file is
/// readable by its owner only (it may hold API keys): the temporary file it is renamed from is
/// created that way.
pub fn save_settings_section<T: Serialize>(
    paths: &Paths,
    name: &str,
    section: &T,
) -> Result<(), ModelsError> {
    let path = settings_path(paths);
    let mut table = read_settings_table(&path)?;
    let value = toml::Value::try_from(section).map_err(|e| ModelsError::Settings {
        path: path.clone(),
        message: e.to_string(),
    })?;
    table.insert(name.into(), value);
    let text = toml::to_string(&table).map_err(|e| ModelsError::Settings {
        path: path.clone(),
        message: e.to_string(),
    })?;
    write_atomic(&path, text.as_bytes()).map_err(|source| ModelsError::Io { path, source })
}
