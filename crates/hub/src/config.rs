//! Where Catena keeps things: the user's data directory (models, the Python runtime) and cache
//! directory (the compiled sandbox), from the `directories` crate, each overridable by an
//! environment variable (and by the CLI's flags, which set them).

use std::path::{Path, PathBuf};

/// Overrides the data directory.
pub const DATA_DIR_ENV: &str = "CATENA_DATA_DIR";
/// Overrides the cache directory.
pub const CACHE_DIR_ENV: &str = "CATENA_CACHE_DIR";
/// `off` keeps no prompt cache (docs/ARCHITECTURE.md, "The prompt cache").
pub const PROMPT_CACHE_ENV: &str = "CATENA_PROMPT_CACHE";
/// Overrides where the session store lives (default: the data directory).
pub(crate) const STORE_DIR_ENV: &str = "CATENA_STORE_DIR";

/// The directories of one Catena installation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub data_dir: PathBuf,
    pub cache_dir: PathBuf,
    /// The session store's folder.
    pub store_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "cannot find a home directory for Catena's data; set {DATA_DIR_ENV} and {CACHE_DIR_ENV}"
    )]
    NoHome,
}

impl Paths {
    /// The platform's standard directories, unless the environment overrides them.
    pub fn from_env() -> Result<Paths, ConfigError> {
        let env_dir = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let data = env_dir(DATA_DIR_ENV);
        let cache = env_dir(CACHE_DIR_ENV);
        let store = env_dir(STORE_DIR_ENV);
        let mut paths = match (&data, &cache) {
            (Some(data_dir), Some(cache_dir)) => Paths::at(data_dir, cache_dir),
            _ => {
                let dirs = directories::ProjectDirs::from("dev", "Catena", "catena")
                    .ok_or(ConfigError::NoHome)?;
                Paths::at(
                    data.as_deref().unwrap_or(dirs.data_dir()),
                    cache.as_deref().unwrap_or(dirs.cache_dir()),
                )
            }
        };
        if let Some(store_dir) = store {
            paths.store_dir = store_dir;
        }
        Ok(paths)
    }

    /// Paths rooted at the given directories (the store in the data directory).
    pub fn at(data_dir: &Path, cache_dir: &Path) -> Paths {
        Paths {
            data_dir: data_dir.to_path_buf(),
            cache_dir: cache_dir.to_path_buf(),
            store_dir: data_dir.to_path_buf(),
        }
    }

    /// Verified model files.
    pub fn models_dir(&self) -> PathBuf {
        self.data_dir.join("models")
    }

    /// Verified WebAssembly runtimes.
    pub(crate) fn runtimes_dir(&self) -> PathBuf {
        self.data_dir.join("runtimes")
    }

    /// Training data a user interface may train on, by file name.
    pub fn exports_dir(&self) -> PathBuf {
        self.data_dir.join("exports")
    }

    /// Adapters trained from a user interface or imported, one folder each.
    pub fn adapters_dir(&self) -> PathBuf {
        self.data_dir.join("adapters")
    }

    /// The search indexes `catena index` builds (one folder each).
    pub fn indexes_dir(&self) -> PathBuf {
        self.data_dir.join("indexes")
    }

    /// The MCP servers whose tools agent runs may use (a Cursor-style `mcp.json`).
    pub fn mcp_servers_file(&self) -> PathBuf {
        self.data_dir.join("mcp.json")
    }

    /// Compiled WebAssembly modules.
    pub fn sandbox_cache_dir(&self) -> PathBuf {
        self.cache_dir.join("sandbox")
    }

    /// The KV cells of prompt prefixes kept between runs, unless `CATENA_PROMPT_CACHE=off`.
    pub fn prompt_cache_dir(&self) -> Option<PathBuf> {
        let off = std::env::var(PROMPT_CACHE_ENV).is_ok_and(|v| v.eq_ignore_ascii_case("off"));
        (!off).then(|| self.cache_dir.join("prompts"))
    }
}
