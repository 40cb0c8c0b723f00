//! `catena models pull ID` for a model published as a Hugging Face checkpoint: list the
//! repository's files at the revision, fetch config and tokenizer (an unsupported architecture is
//! refused here), check the disk for the whole plan, fetch the weights with the resumable
//! downloader, convert, quantise, install.
//!
//! Work in progress lives in `<models>/.checkpoints/<id>/`:
//! - `listing.json`: the files and digests the hub listed; a file whose listing changed since an
//!   earlier run is fetched again.
//! - the checkpoint's files, each renamed into the folder only after its digest matched;
//!   `.partial/` holds downloads in flight (resumed by the next run).
//! - `model-F16.gguf`, renamed into place only when complete.
//!
//! A run killed while downloading resumes the file it was fetching; killed while converting, it
//! converts again from the kept files; killed while quantising, it quantises again from the kept
//! F16 file. A quantisation that fails (or a result llama.cpp would not load) removes the F16
//! file: the same file would fail the same way. The folder is removed once the model is
//! installed.
//!
//! The listing and the small files are read whole, so each read has a deadline and a cap on the
//! bytes that arrive (`catena_hub::body`): a page of the listing at most 4 MiB, a small file at
//! most the size the hub listed.

use crate::listing::{self, FileDigest, Needed, RepoFile};
use crate::stages::{self, HEADER_ALLOWANCE, MARGIN, Target, remove_if_exists};
use crate::{ImportError, ImportEvent, ImportSink, Stage, io_at};
use catena_engine_api::QuantType;
use catena_hub::body::{BodyError, Deadline, read_capped};
use catena_hub::config::Paths;
use catena_hub::download::{self, DownloadEvent, DownloadOptions, DownloadRequest, EventSink};
use catena_hub::installed::{self, DigestSource, Made};
use catena_worker::WorkerCommand;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A catalog model to fetch as a checkpoint and convert.
#[derive(Debug, Clone)]
pub struct CheckpointPull {
    /// The catalog id; the work folder and the record carry it.
    pub id: String,
    /// `owner/name` on the hub.
    pub repo: String,
    pub revision: String,
    /// The hub's base URL (its API and its `resolve` paths).
    pub base_url: String,
    pub quant: QuantType,
    /// The installed file's name.
    pub file: String,
    pub profile: Option<String>,
}

impl CheckpointPull {
    /// The pull of a catalog entry's checkpoint, as `catena_hub::pull::plan` planned it.
    pub fn from_plan(plan: catena_hub::pull::CheckpointPlan) -> Result<Self, ImportError> {
        let Some(quant) = QuantType::parse(&plan.quant) else {
            return Err(ImportError::BadQuant(plan.quant));
        };
        Ok(CheckpointPull {
            id: plan.id,
            repo: plan.repo,
            revision: plan.revision,
            base_url: plan.base_url,
            quant,
            file: plan.file,
            profile: Some(plan.profile),
        })
    }
}

/// How to fetch and quantise.
#[derive(Debug, Clone)]
pub struct PullOptions {
    pub download: DownloadOptions,
    /// Quantiser threads (0: all cores).
    pub threads: usize,
    /// The child process llama.cpp's quantiser runs in (`catena worker`).
    pub quantizer: WorkerCommand,
}

/// Where a pull of catalog model `id` keeps its work.
pub fn staging_dir(paths: &Paths, id: &str) -> PathBuf {
    paths.models_dir().join(".checkpoints").join(id)
}

const LISTING: &str = "listing.json";
const F16_FILE: &str = "model-F16.gguf";
/// Small files are fetched whole, in memory; a "small" file larger than this is refused.
const SMALL_FILE_LIMIT: u64 = 64 << 20;

/// How long one fetch of a small file of `size` bytes may take, connection to last byte: half a
/// minute, and a second for every 256 KiB (a 64 MiB tokenizer at that rate takes 4 minutes). A
/// hub that sends one byte every few seconds is cut off instead of holding the pull for days.
fn small_file_time(size: u64) -> Duration {
    Duration::from_secs(30 + size / (256 << 10))
}

/// Fetches, converts, quantises and installs `request`; returns the installed model's path.
pub fn pull_checkpoint(
    paths: &Paths,
    request: &CheckpointPull,
    options: &PullOptions,
    events: &ImportSink,
) -> Result<PathBuf, ImportError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| ImportError::Fetch {
            file: request.repo.clone(),
            reason: format!("could not start the network runtime: {e}"),
        })?;
    let models = paths.models_dir();
    if installed::record_of(&models.join(&request.file)).is_some() {
        return Err(ImportError::AlreadyInstalled(request.file.clone()));
    }
    let staging = staging_dir(paths, &request.id);
    std::fs::create_dir_all(&staging).map_err(io_at(&staging))?;
    let _lock = lock(&staging, &request.id)?;
    let f16 = staging.join(F16_FILE);

    let client = http_client(request, options)?;
    let (needed, config) = plan_files(&runtime, &client, request, &staging, &f16)?;

    // The whole plan's disk needs, before the first weight byte.
    let remaining: u64 = needed
        .weights
        .iter()
        .filter(|f| !is_fetched(&staging, f))
        .map(|f| f.size)
        .sum();
    let f16_bytes = f16_estimate(needed.weight_bytes(), config.source_dtype_bytes);
    let to_convert = if f16.is_file() { 0 } else { f16_bytes };
    stages::check_space(
        &models,
        remaining + to_convert + stages::result_bytes(f16_bytes, request.quant) + MARGIN,
        format!(
            "pulling {} (the weights, the F16 file and the {} file)",
            request.id,
            request.quant.name()
        ),
        "downloaded",
    )?;

    if !f16.is_file() {
        download_weights(&runtime, request, &needed, &staging, options, events)?;
        let mut checkpoint = catena_convert::open(&staging)?;
        stages::convert(&mut checkpoint, &f16, &request.id, events)?;
    } else {
        events(ImportEvent::Note {
            text: "the F16 file of an earlier run is complete; going on from it".into(),
        });
    }
    let target = Target {
        made: Made {
            file: request.file.clone(),
            quant: request.quant.name().to_string(),
            catalog_id: Some(request.id.clone()),
            profile: request.profile.clone(),
        },
        quant: request.quant,
        threads: options.threads,
        quantizer: options.quantizer.clone(),
    };
    let installed = stages::quantize_and_install(paths, &f16, &target, events)?;
    drop(_lock);
    if let Err(e) = std::fs::remove_dir_all(&staging) {
        events(ImportEvent::Note {
            text: format!("could not remove {}: {e}", staging.display()),
        });
    }
    Ok(installed)
}

/// The HTTP client of the listing and the small files (the weights go through the hub's
/// downloader, with its own clients).
fn http_client(
    request: &CheckpointPull,
    options: &PullOptions,
) -> Result<reqwest::Client, ImportError> {
    download::install_tls_provider();
    reqwest::Client::builder()
        .connect_timeout(options.download.connect_timeout)
        .timeout(Duration::from_secs(120))
        .user_agent(concat!("catena/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ImportError::Fetch {
            file: request.repo.clone(),
            reason: format!("the HTTP client could not start: {e}"),
        })
}

/// The files the pull needs and the checkpoint's configuration. The config and the tokenizer
/// are fetched first, so an architecture the converter refuses stops the pull before the
/// weights are fetched; the weights are narrowed to the shards the index names (a repository
/// may hold other safetensors files too).
fn plan_files(
    runtime: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    request: &CheckpointPull,
    staging: &Path,
    f16: &Path,
) -> Result<(Needed, catena_convert::ModelConfig), ImportError> {
    let files = runtime.block_on(listing::list(
        client,
        &request.base_url,
        &request.repo,
        &request.revision,
    ))?;
    let mut needed = listing::needed(&request.repo, &files)?;
    forget_changed_files(staging, &needed, f16)?;
    for file in std::iter::once(&needed.config).chain(&needed.small) {
        if !is_fetched(staging, file) {
            runtime.block_on(fetch_small(client, request, file, staging))?;
        }
    }
    let config = catena_convert::read_config(staging)?;
    let wanted = shards_named(staging)?;
    for shard in &wanted {
        if !needed.weights.iter().any(|f| &f.path == shard) {
            return Err(ImportError::MissingFile {
                repo: request.repo.clone(),
                file: shard.clone(),
            });
        }
    }
    needed.weights.retain(|f| wanted.contains(&f.path));
    Ok((needed, config))
}

/// The work folder's lock, held for the whole pull.
fn lock(staging: &Path, id: &str) -> Result<std::fs::File, ImportError> {
    let path = staging.join(".lock");
    let file = std::fs::File::create(&path).map_err(io_at(&path))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(ImportError::Busy(id.to_string())),
        Err(std::fs::TryLockError::Error(e)) => Err(io_at(&path)(e)),
    }
}

/// The weight files a conversion reads: those `model.safetensors.index.json` maps tensors to, or
/// `model.safetensors` without an index.
fn shards_named(staging: &Path) -> Result<Vec<String>, ImportError> {
    let index = staging.join("model.safetensors.index.json");
    if !index.is_file() {
        return Ok(vec!["model.safetensors".to_string()]);
    }
    let bad = |reason: String| ImportError::Fetch {
        file: "model.safetensors.index.json".into(),
        reason,
    };
    let bytes = std::fs::read(&index).map_err(io_at(&index))?;
    let json: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let Some(map) = json.get("weight_map").and_then(|m| m.as_object()) else {
        return Err(bad("no `weight_map`".into()));
    };
    let mut shards: Vec<String> = map
        .values()
        .filter_map(|v| v.as_str())
        .map(str::to_string)
        .collect();
    shards.sort();
    shards.dedup();
    Ok(shards)
}

/// The F16 file's size from the weights' size and their element size (`torch_dtype`; 2 bytes
/// when `config.json` does not say).
fn f16_estimate(weight_bytes: u64, source_dtype_bytes: Option<u64>) -> u64 {
    weight_bytes / source_dtype_bytes.unwrap_or(2).max(1) * 2 + HEADER_ALLOWANCE
}

/// Whether `file` was fetched and verified by an earlier run (files are renamed into the folder
/// only after their digest matched).
fn is_fetched(staging: &Path, file: &RepoFile) -> bool {
    std::fs::metadata(staging.join(&file.path)).is_ok_and(|m| m.len() == file.size)
}

/// Compares the listing with the one an earlier run saved: files whose entry changed (a new
/// revision) are removed, and with them the F16 file made from them. Then saves the new one.
fn forget_changed_files(staging: &Path, needed: &Needed, f16: &Path) -> Result<(), ImportError> {
    let saved_path = staging.join(LISTING);
    let saved: Option<Needed> = std::fs::read(&saved_path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    if saved.as_ref() == Some(needed) {
        return Ok(());
    }
    let unchanged = |file: &RepoFile| {
        saved
            .as_ref()
            .is_some_and(|s| s.all().any(|old| old == file))
    };
    for file in needed.all() {
        if !unchanged(file) {
            remove_if_exists(&staging.join(&file.path))?;
        }
    }
    remove_if_exists(f16)?;
    let json = serde_json::to_vec_pretty(needed).unwrap_or_default();
    std::fs::write(&saved_path, json).map_err(io_at(&saved_path))
}

fn resolve_url(request: &CheckpointPull, file: &RepoFile) -> String {
    format!(
        "{}/{}/resolve/{}/{}",
        request.base_url.trim_end_matches('/'),
        request.repo,
        request.revision,
        file.path
    )
}

/// Fetches a small file whole, checks its digest, and writes it into the folder.
async fn fetch_small(
    client: &reqwest::Client,
    request: &CheckpointPull,
    file: &RepoFile,
    staging: &Path,
) -> Result<(), ImportError> {
    let failed = |reason: String| ImportError::Fetch {
        file: file.path.clone(),
        reason,
    };
    if file.size > SMALL_FILE_LIMIT {
        return Err(failed(format!(
            "listed with {} bytes, too large for a configuration file",
            file.size
        )));
    }
    let url = resolve_url(request, file);
    let mut last = String::new();
    for attempt in 0..4u32 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(250 << attempt)).await;
        }
        let deadline = Deadline::after(small_file_time(file.size));
        let response = match deadline.run(client.get(&url).send()).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                last = e.to_string();
                continue;
            }
            Err(e) => {
                last = format!("the answer was {e}");
                continue;
            }
        };
        let status = response.status();
        if status.is_client_error() {
            return Err(failed(format!("{url}: the hub answered {status}")));
        }
        if !status.is_success() {
            last = format!("the hub answered {status}");
            continue;
        }
        // Never more than the hub listed: the digest check needs the whole body in memory.
        let body = match read_capped(response, file.size, &deadline).await {
            Ok(b) => b,
            Err(e @ BodyError::TooLarge(_)) => {
                return Err(failed(format!(
                    "{url}: the answer was {e}, the size the hub listed; nothing was kept"
                )));
            }
            Err(e) => {
                last = format!("the answer was {e}");
                continue;
            }
        };
        let (expected, actual) = match &file.digest {
            FileDigest::GitBlob(hex) => (hex.clone(), listing::git_blob_id(&body)),
            FileDigest::Sha256(hex) => {
                use sha2::Digest as _;
                (hex.clone(), hex::encode(sha2::Sha256::digest(&body)))
            }
        };
        if expected != actual {
            return Err(ImportError::Digest {
                file: file.path.clone(),
                expected,
                actual,
            });
        }
        let target = staging.join(&file.path);
        let part = staging.join(format!(".{}.part", file.path));
        std::fs::write(&part, &body).map_err(io_at(&part))?;
        return std::fs::rename(&part, &target).map_err(io_at(&target));
    }
    Err(failed(format!("{url}: {last}")))
}

/// Fetches the weights not yet in the folder, one after another, each over several resumable
/// connections and checked against the hub's sha256.
fn download_weights(
    runtime: &tokio::runtime::Runtime,
    request: &CheckpointPull,
    needed: &Needed,
    staging: &Path,
    options: &PullOptions,
    events: &ImportSink,
) -> Result<(), ImportError> {
    let total = needed.weight_bytes();
    let kept: u64 = needed
        .weights
        .iter()
        .filter(|f| is_fetched(staging, f))
        .map(|f| f.size)
        .sum();
    if kept == total {
        events(ImportEvent::Note {
            text: "the weights fetched by an earlier run are all here".into(),
        });
        return Ok(());
    }
    events(ImportEvent::Stage {
        stage: Stage::Download,
        total: Some(total),
        done: kept,
        detail: format!(
            "downloading {} weight file{} of {} from {}",
            needed.weights.len(),
            if needed.weights.len() == 1 { "" } else { "s" },
            request.repo,
            request.base_url
        ),
    });
    let finished = Arc::new(AtomicU64::new(kept));
    for file in &needed.weights {
        if is_fetched(staging, file) {
            continue;
        }
        let FileDigest::Sha256(sha256) = &file.digest else {
            return Err(ImportError::Fetch {
                file: file.path.clone(),
                reason: "a weight file is listed without an LFS sha256; it cannot be verified"
                    .into(),
            });
        };
        let download_request = DownloadRequest {
            url: resolve_url(request, file),
            file_name: file.path.clone(),
            sha256: Some(sha256.clone()),
            digest_source: DigestSource::Server,
            catalog_id: Some(request.id.clone()),
            quant: None,
        };
        let sink = download_events(events.clone(), finished.clone(), total, file.path.clone());
        let verified = runtime.block_on(download::fetch_verified(
            staging,
            &download_request,
            &options.download,
            &sink,
        ))?;
        if verified.size != file.size {
            return Err(ImportError::Fetch {
                file: file.path.clone(),
                reason: format!(
                    "the hub lists {} bytes and sent {} with a matching digest",
                    file.size, verified.size
                ),
            });
        }
        verified.move_to(&staging.join(&file.path))?;
        finished.fetch_add(file.size, Ordering::Relaxed);
    }
    Ok(())
}

/// The downloader's events as the pull's: bytes become progress over all weight files.
fn download_events(
    events: ImportSink,
    finished: Arc<AtomicU64>,
    total: u64,
    file: String,
) -> EventSink {
    Arc::new(move |event| match event {
        DownloadEvent::Bytes { done, .. } => events(ImportEvent::Progress {
            stage: Stage::Download,
            done: finished.load(Ordering::Relaxed) + done,
            total: Some(total),
        }),
        DownloadEvent::Started { resumed_from, .. } if resumed_from > 0 => {
            events(ImportEvent::Note {
                text: format!("{file}: resuming at {} MiB", resumed_from >> 20),
            })
        }
        DownloadEvent::Retrying {
            attempt,
            max,
            cause,
            ..
        } => events(ImportEvent::Note {
            text: format!("{file}: retrying ({attempt}/{max}): {cause}"),
        }),
        DownloadEvent::Restarting { reason } => events(ImportEvent::Note {
            text: format!("{file}: starting over: {reason}"),
        }),
        DownloadEvent::Verifying { .. } => events(ImportEvent::Note {
            text: format!("{file}: verifying sha256"),
        }),
        _ => {}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shards_to_fetch_are_the_ones_the_index_names() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(shards_named(dir.path()).unwrap(), ["model.safetensors"]);
        std::fs::write(
            dir.path().join("model.safetensors.index.json"),
            r#"{"weight_map": {"a": "s-2.safetensors", "b": "s-1.safetensors", "c": "s-2.safetensors"}}"#,
        )
        .unwrap();
        assert_eq!(
            shards_named(dir.path()).unwrap(),
            ["s-1.safetensors", "s-2.safetensors"]
        );
        std::fs::write(dir.path().join("model.safetensors.index.json"), "{}").unwrap();
        assert!(shards_named(dir.path()).is_err());
    }

    #[test]
    fn the_f16_estimate_follows_the_source_type() {
        let gb = 1 << 30;
        assert_eq!(f16_estimate(gb, Some(2)), gb + HEADER_ALLOWANCE);
        assert_eq!(f16_estimate(gb, None), gb + HEADER_ALLOWANCE);
        assert_eq!(f16_estimate(2 * gb, Some(4)), gb + HEADER_ALLOWANCE);
    }

    fn file(path: &str, size: u64, hex: &str) -> RepoFile {
        RepoFile {
            path: path.into(),
            size,
            digest: FileDigest::GitBlob(hex.repeat(40)),
        }
    }

    #[test]
    fn files_of_a_changed_listing_are_fetched_again() {
        let dir = tempfile::tempdir().unwrap();
        let staging = dir.path();
        let needed = Needed {
            config: file("config.json", 2, "a"),
            small: vec![file("tokenizer.json", 3, "b")],
            weights: vec![file("model.safetensors", 4, "c")],
        };
        let f16 = staging.join(F16_FILE);
        forget_changed_files(staging, &needed, &f16).unwrap();
        std::fs::write(staging.join("config.json"), b"{}").unwrap();
        std::fs::write(staging.join("tokenizer.json"), b"abc").unwrap();
        std::fs::write(staging.join("model.safetensors"), b"abcd").unwrap();
        std::fs::write(&f16, b"f16").unwrap();
        assert!(needed.all().all(|f| is_fetched(staging, f)));
        // The same listing keeps everything.
        forget_changed_files(staging, &needed, &f16).unwrap();
        assert!(needed.all().all(|f| is_fetched(staging, f)));
        assert!(f16.exists());
        // A new revision of the weights: they and the F16 file go, the rest stays.
        let mut changed = needed.clone();
        changed.weights[0] = file("model.safetensors", 4, "d");
        forget_changed_files(staging, &changed, &f16).unwrap();
        assert!(!staging.join("model.safetensors").exists());
        assert!(!f16.exists());
        assert!(staging.join("config.json").exists());
        assert!(staging.join("tokenizer.json").exists());
    }
}
