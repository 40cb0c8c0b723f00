//! The models folder's errors and its one way of writing a file (atomically), shared by the
//! installed models and their settings file.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ModelsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the settings file {path} is not valid: {message}")]
    Settings { path: PathBuf, message: String },
    #[error(transparent)]
    Catalog(#[from] crate::catalog::CatalogError),
    #[error(
        "`{0}` is neither an installed model (see `catena models list`) nor an existing GGUF file"
    )]
    NotFound(String),
    #[error(
        "`{0}` is not an installed model (see `catena models list`); only installed models can be chosen here, never a path"
    )]
    NotInstalled(String),
    #[error("the catalog entry `{0}` has no download URL")]
    NoUrl(String),
}

/// Writes `bytes` to `path` atomically (a temporary file in the same folder, synced, renamed).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
