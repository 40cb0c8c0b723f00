//! What is installed in the models folder, and which model is the user's default.
//!
//! A downloaded model counts as installed only when its record (`<file>.catena.json`, written
//! atomically after the sha256 was verified) sits beside it and the file still has the recorded
//! size. A file without a record (a download cut short between the rename and the record, a file
//! copied in by hand) is never listed as usable. Models from registry packages keep the asset
//! module's own `.verified` marker; [`crate::assets::is_installed`] answers for them.

use super::catalog::{Catalog, CatalogEntry, CatalogFile, Source};
use crate::assets::{self, Asset};
use crate::config::Paths;
pub use crate::files::ModelsError;
use crate::files::write_atomic;
use crate::settings::settings;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Suffix of the record written beside each verified download.
pub(crate) const RECORD_SUFFIX: &str = ".catena.json";
/// The folder (inside the models folder) of downloads in progress.
pub(crate) const PARTIAL_DIR: &str = ".partial";

/// Where the digest a file was verified against came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DigestSource {
    /// The model catalog.
    Catalog,
    /// The server's `X-Linked-Etag` / `ETag` header (the hub's LFS sha256).
    Server,
    /// The user (`--sha256`).
    User,
    /// A registry asset's pinned digest.
    Registry,
    /// Catena made the file here (a checkpoint converted and quantised by `catena models
    /// import`); the digest was computed from the installed bytes.
    Made,
}

impl std::fmt::Display for DigestSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DigestSource::Catalog => "the catalog",
            DigestSource::Server => "the server",
            DigestSource::User => "--sha256",
            DigestSource::Registry => "the registry asset",
            DigestSource::Made => "conversion on this machine",
        })
    }
}

/// The record of one verified model file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRecord {
    /// File name in the models folder.
    pub file: String,
    pub size: u64,
    pub sha256: String,
    pub digest_source: DigestSource,
    /// Where it was downloaded from (empty for registry assets).
    #[serde(default)]
    pub url: String,
    /// The catalog entry and quantisation, if it came from the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quant: Option<String>,
    /// The prompt profile runs use without `--profile` (an import's `--profile`; catalog models
    /// take their entry's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Seconds since the Unix epoch.
    #[serde(default)]
    pub installed_at: u64,
}

/// A usable model file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub path: PathBuf,
    pub record: ModelRecord,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ModelsError + '_ {
    move |source| ModelsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The record path of a model file.
pub(crate) fn record_path(model: &Path) -> PathBuf {
    let mut name = model.file_name().unwrap_or_default().to_os_string();
    name.push(RECORD_SUFFIX);
    model.with_file_name(name)
}

/// Records `record` as verified and installed (the model file must already be in place).
pub(crate) fn write_record(paths: &Paths, record: &ModelRecord) -> Result<PathBuf, ModelsError> {
    let model = paths.models_dir().join(&record.file);
    let path = record_path(&model);
    let json = serde_json::to_vec_pretty(record).unwrap_or_default();
    write_atomic(&path, &json).map_err(io(&path))?;
    Ok(model)
}

/// Bytes free for new files in `dir` (created when missing).
pub fn free_space(dir: &Path) -> Result<u64, ModelsError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    fs4::available_space(dir).map_err(io(dir))
}

/// What Catena made: the installed name and what to record about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    pub file: String,
    pub quant: String,
    pub catalog_id: Option<String>,
    pub profile: Option<String>,
}

/// Installs `made`, a model file Catena made in the models folder under a temporary name, as
/// `what.file`: its sha256 is computed, it is synced and renamed into place, then recorded. A
/// model is listed only once this has finished, so an interrupted import never shows a half
/// model.
pub fn install_made(paths: &Paths, made: &Path, what: &Made) -> Result<PathBuf, ModelsError> {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    let mut reader = std::fs::File::open(made).map_err(io(made))?;
    let size = std::io::copy(&mut reader, &mut hash).map_err(io(made))?;
    reader.sync_all().map_err(io(made))?;
    let target = paths.models_dir().join(&what.file);
    std::fs::rename(made, &target).map_err(io(&target))?;
    write_record(
        paths,
        &ModelRecord {
            file: what.file.clone(),
            size,
            sha256: hex::encode(hash.finalize()),
            digest_source: DigestSource::Made,
            url: String::new(),
            catalog_id: what.catalog_id.clone(),
            quant: Some(what.quant.clone()),
            profile: what.profile.clone(),
            installed_at: now_secs(),
        },
    )
}

/// The verified record of a model file, if it has one and the file still has its size.
pub fn record_of(model: &Path) -> Option<ModelRecord> {
    let text = std::fs::read(record_path(model)).ok()?;
    let record: ModelRecord = serde_json::from_slice(&text).ok()?;
    let size = std::fs::metadata(model).ok()?.len();
    (size == record.size).then_some(record)
}

/// The prompt profile a model was made for: its record's (an import's `--profile`), else its
/// catalog entry's. `None` for a file Catena knows nothing about.
pub fn profile_of(model: &Path, catalog: &crate::catalog::Catalog) -> Option<String> {
    let record = record_of(model)?;
    record.profile.or_else(|| {
        let id = record.catalog_id?;
        catalog.get(&id).map(|entry| entry.profile.clone())
    })
}

/// Every downloaded model with a valid record, sorted by file name.
pub fn list(paths: &Paths) -> Vec<Installed> {
    let dir = paths.models_dir();
    let Ok(read) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<Installed> = read
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let model = name.strip_suffix(RECORD_SUFFIX)?;
            let path = dir.join(model);
            let record = record_of(&path)?;
            (record.file == model).then_some(Installed { path, record })
        })
        .collect();
    out.sort_by(|a, b| a.record.file.cmp(&b.record.file));
    out
}

/// The registry asset a catalog entry names, if it is one Catena pins.
pub(crate) fn registry_asset(entry: &CatalogEntry) -> Option<&'static Asset> {
    let Source::Registry { asset } = &entry.source else {
        return None;
    };
    [&assets::DEFAULT_MODEL, &assets::GEMMA_TEST_MODEL]
        .into_iter()
        .find(|a| a.id == asset)
}

/// Where a catalog file is (or would be) installed, and whether it is installed and verified.
pub(crate) fn catalog_file_state(
    entry: &CatalogEntry,
    file: &CatalogFile,
    paths: &Paths,
) -> (PathBuf, bool) {
    if let Some(asset) = registry_asset(entry) {
        let path = assets::installed_path(asset, &asset.files[0], paths);
        return (path, assets::is_installed(asset, paths));
    }
    let path = paths.models_dir().join(&file.file);
    let ok = record_of(&path).is_some();
    (path, ok)
}

/// Splits `id[:QUANT]`.
pub fn split_reference(reference: &str) -> (&str, Option<&str>) {
    match reference.split_once(':') {
        Some((id, quant)) if !quant.is_empty() => (id, Some(quant)),
        _ => (reference, None),
    }
}

/// Resolves a model reference to a usable file: `id[:QUANT]` of an installed catalog model, the
/// name of a downloaded file, or a path to an existing file.
pub fn resolve(reference: &str, paths: &Paths) -> Result<PathBuf, ModelsError> {
    let catalog = Catalog::load(paths)?;
    let (id, quant) = split_reference(reference);
    if let Some(entry) = catalog.get(id) {
        let files: Vec<&CatalogFile> = match quant {
            Some(q) => vec![entry.file(Some(q))?],
            None => entry.files.iter().collect(),
        };
        for file in files {
            let (path, ok) = catalog_file_state(entry, file, paths);
            if ok {
                return Ok(path);
            }
        }
        return Err(ModelsError::NotFound(reference.to_string()));
    }
    if let Some(found) = list(paths).into_iter().find(|m| m.record.file == reference) {
        return Ok(found.path);
    }
    let path = PathBuf::from(reference);
    if path.is_file() {
        return Ok(std::fs::canonicalize(&path).unwrap_or(path));
    }
    Err(ModelsError::NotFound(reference.to_string()))
}

/// Like [`resolve`], but only a catalog id or an installed file's name: never a path. For
/// requests from a user interface or the server, which must not reach files outside Catena's
/// models.
pub fn resolve_installed(reference: &str, paths: &Paths) -> Result<PathBuf, ModelsError> {
    let catalog = Catalog::load(paths)?;
    let (id, _) = split_reference(reference);
    let installed_name = list(paths).iter().any(|m| m.record.file == reference);
    if catalog.get(id).is_some() || installed_name {
        resolve(reference, paths)
    } else {
        Err(ModelsError::NotInstalled(reference.to_string()))
    }
}

/// The model `catena models default` chose, resolved to a usable file; `None` when the user chose
/// none (callers then use the built-in default model). A choice that no longer resolves is an
/// error rather than a silent fallback, so the user learns their model went away.
pub fn chosen_default(paths: &Paths) -> Result<Option<PathBuf>, ModelsError> {
    match settings(paths)?.default {
        None => Ok(None),
        Some(reference) => resolve(&reference, paths).map(Some),
    }
}

/// The user's default model file, if they chose one and it is still usable (logged otherwise).
pub fn default_model_path(paths: &Paths) -> Option<PathBuf> {
    match chosen_default(paths) {
        Ok(path) => path,
        Err(e) => {
            tracing::warn!(
                "the default model chosen with `catena models default` is unusable: {e}"
            );
            None
        }
    }
}

/// Removes a model file from the models folder: its record first (so a removal cut short never
/// leaves a listed model without its file), then a registry asset's marker, then the file.
/// Returns what was removed.
pub fn remove_file(paths: &Paths, file: &str) -> Result<Vec<PathBuf>, ModelsError> {
    let model = paths.models_dir().join(file);
    let mut removed = Vec::new();
    for path in [
        record_path(&model),
        {
            let mut marker = model.clone().into_os_string();
            marker.push(".verified");
            PathBuf::from(marker)
        },
        model.clone(),
    ] {
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(ModelsError::Io { path, source }),
        }
    }
    Ok(removed)
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{ModelSettings, save_settings, settings_path};

    fn record(file: &str, size: u64) -> ModelRecord {
        ModelRecord {
            file: file.into(),
            size,
            sha256: "00".repeat(32),
            digest_source: DigestSource::User,
            url: "http://x/m.gguf".into(),
            catalog_id: None,
            quant: None,
            profile: None,
            installed_at: now_secs(),
        }
    }

    #[test]
    fn only_recorded_files_of_the_right_size_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::at(dir.path(), dir.path());
        std::fs::create_dir_all(paths.models_dir()).unwrap();
        std::fs::write(paths.models_dir().join("a.gguf"), b"1234").unwrap();
        std::fs::write(paths.models_dir().join("loose.gguf"), b"1234").unwrap();
        assert!(list(&paths).is_empty());
        write_record(&paths, &record("a.gguf", 4)).unwrap();
        let listed = list(&paths);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].record.file, "a.gguf");
        // A changed size unlists it.
        std::fs::write(paths.models_dir().join("a.gguf"), b"12345").unwrap();
        assert!(list(&paths).is_empty());
        // A record without its file is not listed either.
        write_record(&paths, &record("gone.gguf", 4)).unwrap();
        assert!(list(&paths).is_empty());
        let removed = remove_file(&paths, "a.gguf").unwrap();
        assert_eq!(removed.len(), 2);
        assert!(!paths.models_dir().join("a.gguf").exists());
    }

    #[test]
    fn settings_keep_other_tables_and_resolve_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::at(dir.path(), dir.path());
        assert_eq!(default_model_path(&paths), None);
        std::fs::write(settings_path(&paths), "[ui]\ntheme = \"dark\"\n").unwrap();
        let model = dir.path().join("own.gguf");
        std::fs::write(&model, b"x").unwrap();
        save_settings(
            &paths,
            &ModelSettings {
                default: Some(model.display().to_string()),
                mirror: None,
            },
        )
        .unwrap();
        let text = std::fs::read_to_string(settings_path(&paths)).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(settings_path(&paths))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "the settings file may hold keys");
        }
        assert!(text.contains("theme = \"dark\""), "{text}");
        assert_eq!(
            default_model_path(&paths),
            Some(std::fs::canonicalize(&model).unwrap())
        );
        std::fs::remove_file(&model).unwrap();
        assert!(chosen_default(&paths).is_err());
        assert_eq!(default_model_path(&paths), None);
    }

    #[test]
    fn references_split_on_the_quant() {
        assert_eq!(split_reference("afm-code-7b-rl"), ("afm-code-7b-rl", None));
        assert_eq!(
            split_reference("afm-code-7b-rl:Q8_0"),
            ("afm-code-7b-rl", Some("Q8_0"))
        );
    }
}
