//! Hugging Face checkpoints into installed GGUF models, with no tool but Catena: a folder on disk
//! ([`import_folder`]) or a repository on a model hub ([`pull_checkpoint`]) is converted to GGUF
//! F16 (`catena-convert`), quantised by llama.cpp's own quantiser (`catena-engine`) and installed
//! with a record (`catena-hub`), reporting [`ImportEvent`]s on the way.
//!
//! The promise to the user: an interrupted import or pull never lists a half model, and running
//! it again resumes or restarts only the stage that was cut. llama.cpp's quantiser runs in a child
//! process (an abort there fails the import, not the caller), and a model is installed only after
//! its file passed the checks llama.cpp's loader makes. A pull keeps its work in
//! `<models>/.checkpoints/<id>/` (downloaded files appear there only once verified, the F16 file
//! only once complete) and removes it when the model is installed. Every stage's disk needs are
//! checked before the first byte is fetched or written.

mod listing;
mod pull;
mod stages;

pub use listing::{FileDigest, Needed, RepoFile, git_blob_id, needed, parse_tree};
pub use pull::{CheckpointPull, PullOptions, pull_checkpoint, staging_dir};
pub use stages::{FolderImport, import_folder};

use catena_engine_api::QuantType;
use serde::Serialize;
use std::path::PathBuf;

/// A stage of an import; the CLI draws one bar per stage and the UI one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Fetching the checkpoint's files from the hub (pulls only).
    Download,
    /// Writing the GGUF F16 file, one tensor at a time.
    Convert,
    /// llama.cpp's quantiser (skipped for F16).
    Quantize,
}

/// Something worth showing while a checkpoint becomes a model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ImportEvent {
    /// A stage begins. `total` is in bytes (an estimate for [`Stage::Quantize`]);
    /// `done` bytes were kept from an earlier, interrupted run.
    Stage {
        stage: Stage,
        total: Option<u64>,
        done: u64,
        detail: String,
    },
    /// Bytes done in the current stage (at most a few times a second).
    Progress {
        stage: Stage,
        done: u64,
        total: Option<u64>,
    },
    /// A message for the user (a retry, a file kept from an earlier run).
    Note { text: String },
    /// The model is installed and listed.
    Done { path: PathBuf, file: String },
}

/// Receives [`ImportEvent`]s (from the importing thread and download tasks; keep it quick).
pub type ImportSink = std::sync::Arc<dyn Fn(ImportEvent) + Send + Sync>;

/// What can stop an import. Every message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("the repository {repo} at revision `{revision}` was not found on the hub")]
    NotFound { repo: String, revision: String },
    #[error("could not list the files of {repo} ({url}): {reason}")]
    Listing {
        repo: String,
        url: String,
        reason: String,
    },
    #[error(
        "the repository {repo} has no {file}, which a conversion needs; nothing was downloaded"
    )]
    MissingFile { repo: String, file: String },
    #[error(
        "the repository {repo} publishes no safetensors weights, so there is nothing to convert; \
         nothing was downloaded"
    )]
    NoWeights { repo: String },
    #[error("{file}: {reason}")]
    Fetch { file: String, reason: String },
    #[error(
        "{file} is corrupt: its digest is {actual}, the hub lists {expected}; it was deleted and \
         nothing was installed"
    )]
    Digest {
        file: String,
        expected: String,
        actual: String,
    },
    #[error(
        "{what} needs about {} MiB free in {dir} and {} MiB are free; nothing was {verb}",
        needed >> 20,
        available >> 20
    )]
    DiskFull {
        what: String,
        verb: &'static str,
        dir: PathBuf,
        needed: u64,
        available: u64,
    },
    #[error("{0} is already installed (`catena models rm {0}` removes it)")]
    AlreadyInstalled(String),
    #[error("another catena process is importing {0} right now")]
    Busy(String),
    #[error("--quant must be one of {}", QuantType::ALL.map(QuantType::name).join(", "))]
    BadQuant(String),
    #[error("the name `{0}` must be letters, digits, `-`, `_` and `.`")]
    BadName(String),
    #[error(transparent)]
    Download(#[from] catena_hub::download::DownloadError),
    #[error("converting the checkpoint failed: {0}")]
    Convert(#[from] catena_convert::ConvertError),
    #[error("quantising failed: {0}; nothing was installed and the work files were removed")]
    Quantize(catena_worker::QuantizeError),
    #[error(
        "{file} would not load in llama.cpp: {reason}; it was not installed and the work files \
         were removed"
    )]
    WouldNotLoad { file: String, reason: String },
    #[error(transparent)]
    Models(#[from] catena_hub::installed::ModelsError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub(crate) fn io_at(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
    move |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    }
}
