//! What `catena models list` and the UI's models page show: every catalog file with its state,
//! and downloaded files that are not in the catalog.

use super::catalog::{Catalog, CatalogEntry, Source};
use super::installed;
use crate::assets;
use crate::config::Paths;
use std::path::PathBuf;

/// One model: a catalog file (installed or not) or a downloaded file outside the catalog.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(rename = "ModelRow"))]
pub struct Row {
    pub id: String,
    pub quant: Option<String>,
    pub file: String,
    /// Exact size if known (installed files, pinned entries), else the catalog's estimate.
    pub size: Option<u64>,
    pub size_is_estimate: bool,
    pub profile: Option<String>,
    pub license: Option<String>,
    pub installed: bool,
    pub default: bool,
    pub path: PathBuf,
    /// hub, url, registry, or download (not in the catalog).
    pub source: &'static str,
}

/// Every catalog file (with its install state), then installed files outside the catalog; the
/// default model is marked.
pub fn rows(catalog: &Catalog, paths: &Paths) -> Vec<Row> {
    let chosen = installed::chosen_default(paths).unwrap_or(None);
    let builtin_default = assets::installed_path(
        &assets::DEFAULT_MODEL,
        &assets::DEFAULT_MODEL.files[0],
        paths,
    );
    let default_path = chosen.unwrap_or(builtin_default);
    let mut rows = Vec::new();
    for entry in &catalog.entries {
        for file in &entry.files {
            let (path, ok) = installed::catalog_file_state(entry, file, paths);
            let size = if ok {
                std::fs::metadata(&path).ok().map(|m| m.len())
            } else {
                file.size()
            };
            rows.push(Row {
                id: format!("{}:{}", entry.id, file.quant),
                quant: Some(file.quant.clone()),
                file: file.file.clone(),
                size,
                size_is_estimate: !ok && file.size_bytes.is_none(),
                profile: Some(entry.profile.clone()),
                license: Some(entry.license.clone()),
                installed: ok,
                default: ok && path == default_path,
                path,
                source: source_kind(entry),
            });
        }
    }
    for model in installed::list(paths) {
        if rows.iter().any(|r| r.installed && r.path == model.path) {
            continue;
        }
        rows.push(Row {
            id: model.record.file.clone(),
            quant: model.record.quant.clone(),
            file: model.record.file.clone(),
            size: Some(model.record.size),
            size_is_estimate: false,
            profile: None,
            license: None,
            installed: true,
            default: model.path == default_path,
            path: model.path,
            source: "download",
        });
    }
    rows
}

fn source_kind(entry: &CatalogEntry) -> &'static str {
    match entry.source {
        Source::Hub { .. } => "hub",
        Source::Url { .. } => "url",
        Source::Registry { .. } => "registry",
        Source::Checkpoint { .. } => "checkpoint",
    }
}
