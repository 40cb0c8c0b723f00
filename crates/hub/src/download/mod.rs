//! The model downloader: several ranged connections into one `.part` file, resume after an
//! interruption or a restart, retries with backoff, stall detection, a free-disk check before
//! the first byte, and a sha256 check before the model is ever listed.
//!
//! The verification rule: a file is installed only after its sha256 matched a digest from the
//! catalog, from the server (a hub's LFS digest in `X-Linked-Etag`/`ETag`) or from the user
//! (`--sha256`). With none of the three the download does not even start. The installed
//! model's record says which digest it was checked against.
//!
//! Layout in the models folder:
//! - `<name>`: a verified model; `<name>.catena.json`: its record (written last).
//! - `.partial/<name>.part`: the bytes so far; `.partial/<name>.part.json`: the
//!   [`state::PartState`] (URL, size, validator, per-segment progress); `.partial/<name>.lock`:
//!   held while a process downloads it.
//!
//! What happens on failure: a 4xx answer stops at once; network errors, 5xx and stalls are
//! retried; a checksum mismatch deletes the partial file; a write error (disk full) keeps it for
//! a later resume. None of them leaves anything listed.

mod http;
mod plan;
mod state;
mod transfer;

pub(crate) use http::describe;
pub use http::install_tls_provider;

use super::installed::{self, DigestSource, Installed, ModelRecord, PARTIAL_DIR};
use http::{Clients, Failure, Probe};
use serde::Serialize;
use sha2::{Digest, Sha256};
use state::PartState;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use transfer::Transfer;

/// Something worth showing while a model downloads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum DownloadEvent {
    /// The transfer begins (`resumed_from` bytes were already on disk).
    Started {
        url: String,
        file: String,
        total: Option<u64>,
        resumed_from: u64,
        connections: usize,
    },
    /// Bytes on disk so far (at most ten times a second).
    Bytes { done: u64, total: Option<u64> },
    /// A connection failed and will try again after `wait_ms`.
    Retrying {
        attempt: u32,
        max: u32,
        cause: String,
        wait_ms: u64,
    },
    /// Earlier progress was thrown away.
    Restarting { reason: String },
    /// All bytes are in; the sha256 is being computed.
    Verifying { total: u64 },
    /// Verified and installed.
    Done {
        path: PathBuf,
        sha256: String,
        digest_source: DigestSource,
    },
}

/// Receives [`DownloadEvent`]s (from several tasks; keep it quick).
pub type EventSink = Arc<dyn Fn(DownloadEvent) + Send + Sync>;

/// How to download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownloadOptions {
    /// Parallel ranged connections (one if the server cannot do ranges).
    pub connections: usize,
    /// A connection that receives nothing this long is dropped and retried.
    pub stall_timeout: Duration,
    /// Fruitless attempts per connection before giving up.
    pub retries: u32,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    pub connect_timeout: Duration,
    /// Progress is saved at least this often (bytes or time, whichever comes first).
    pub persist_every_bytes: u64,
    pub persist_every: Duration,
    /// No connection is opened for less than this many bytes.
    pub min_segment: u64,
    /// Free disk space kept beyond the download itself.
    pub free_space_margin: u64,
}

impl Default for DownloadOptions {
    fn default() -> DownloadOptions {
        DownloadOptions {
            connections: 4,
            stall_timeout: Duration::from_secs(30),
            retries: 6,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(30),
            persist_every_bytes: 8 << 20,
            persist_every: Duration::from_secs(1),
            min_segment: 256 << 10,
            free_space_margin: 64 << 20,
        }
    }
}

/// What to download and how to check it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownloadRequest {
    pub url: String,
    /// The file name in the models folder.
    pub file_name: String,
    /// The expected digest (catalog or user), hex.
    pub sha256: Option<String>,
    /// Where `sha256` came from ([`DigestSource::Catalog`] or [`DigestSource::User`]).
    pub digest_source: DigestSource,
    pub catalog_id: Option<String>,
    pub quant: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("{url}: the server answered {status} {reason}; not retrying")]
    Status {
        url: String,
        status: u16,
        reason: String,
    },
    #[error("gave up on {url} after {attempts} failed attempts; the last: {cause}")]
    Exhausted {
        url: String,
        attempts: u32,
        cause: String,
    },
    #[error(
        "no sha256 is known for {url}: the catalog has none and the server sent none. Catena \
         installs no file it cannot verify; find the file's sha256 where it is published and run \
         again with --sha256 HEX"
    )]
    NoDigest { url: String },
    #[error(
        "the download of {url} is corrupt: its sha256 is {actual}, expected {expected} (from \
         {digest_from}); the partial file was deleted and nothing was installed"
    )]
    Checksum {
        url: String,
        expected: String,
        actual: String,
        digest_from: DigestSource,
    },
    #[error(
        "not enough free disk space in {dir}: the download needs {needed} more bytes \
         ({} MiB, with a margin) and {available} are free ({} MiB)",
        needed >> 20,
        available >> 20
    )]
    DiskFull {
        dir: PathBuf,
        needed: u64,
        available: u64,
    },
    #[error(
        "could not write {path}: {source}. The disk may be full or a file size limit reached; \
         the partial download is kept: make room and run the same command again to resume"
    )]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("another catena process is downloading {0} right now")]
    Busy(String),
    #[error("{0} is not an http(s) URL")]
    BadUrl(String),
    #[error("{0:?} cannot be a model file name (pass --name NAME)")]
    BadName(String),
    #[error("{0:?} is not a sha256 (64 hex digits)")]
    BadDigest(String),
    #[error("the HTTP client could not start: {0}")]
    Client(String),
    #[error(transparent)]
    Record(#[from] installed::ModelsError),
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> DownloadError + '_ {
    move |source| DownloadError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The file name a URL suggests: its last path segment.
pub fn file_name_from_url(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let last = parsed.path_segments()?.rev().find(|s| !s.is_empty())?;
    catena_protocol::names::is_file_name(last).then(|| last.to_string())
}

/// Paths of the partial download of `file_name`: (`.part`, `.part.json`, `.lock`).
pub fn partial_paths(models_dir: &Path, file_name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = models_dir.join(PARTIAL_DIR);
    (
        dir.join(format!("{file_name}.part")),
        dir.join(format!("{file_name}.part.json")),
        dir.join(format!("{file_name}.lock")),
    )
}

fn remove_if_exists(path: &Path) -> Result<(), DownloadError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_at(path)(e)),
        _ => Ok(()),
    }
}

/// The lock file of a partial download, held (and removed at the end) by the one process that
/// downloads it.
#[derive(Debug)]
struct LockGuard {
    _file: std::fs::File,
    path: PathBuf,
}

impl LockGuard {
    fn acquire(path: &Path, name: &str) -> Result<LockGuard, DownloadError> {
        let file = std::fs::File::create(path).map_err(io_at(path))?;
        match file.try_lock() {
            Ok(()) => Ok(LockGuard {
                _file: file,
                path: path.to_path_buf(),
            }),
            Err(std::fs::TryLockError::WouldBlock) => Err(DownloadError::Busy(name.into())),
            Err(std::fs::TryLockError::Error(e)) => Err(io_at(path)(e)),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Probes the URL, retrying transport failures like any connection.
async fn probe_with_retries(
    clients: &Clients,
    url: &str,
    options: &DownloadOptions,
    events: &EventSink,
) -> Result<Probe, DownloadError> {
    let mut attempt = 0;
    loop {
        let result = tokio::time::timeout(options.stall_timeout, http::probe(clients, url)).await;
        let cause = match result {
            Ok(Ok(probe)) => return Ok(probe),
            Ok(Err(Failure::Fatal(e))) => return Err(e),
            Ok(Err(Failure::Retry(cause))) => cause,
            Err(_) => format!(
                "no answer for {:.1} s (stalled)",
                options.stall_timeout.as_secs_f64()
            ),
        };
        attempt += 1;
        if attempt > options.retries {
            return Err(DownloadError::Exhausted {
                url: url.to_string(),
                attempts: attempt,
                cause,
            });
        }
        let wait = plan::backoff(
            attempt,
            options.backoff_base,
            options.backoff_max,
            plan::jitter_seed(),
        );
        events(DownloadEvent::Retrying {
            attempt,
            max: options.retries,
            cause,
            wait_ms: wait.as_millis() as u64,
        });
        tokio::time::sleep(wait).await;
    }
}

/// Downloads, verifies and installs one model file into `paths.models_dir()`.
pub async fn download(
    paths: &crate::config::Paths,
    request: &DownloadRequest,
    options: &DownloadOptions,
    events: EventSink,
) -> Result<Installed, DownloadError> {
    let models = paths.models_dir();
    let verified = fetch_verified(&models, request, options, &events).await?;
    // Into place: an old record goes first, the new record comes last.
    let target = models.join(&request.file_name);
    remove_if_exists(&installed::record_path(&target))?;
    let record = ModelRecord {
        file: request.file_name.clone(),
        size: verified.size,
        sha256: verified.sha256.clone(),
        digest_source: verified.digest_source,
        url: request.url.clone(),
        catalog_id: request.catalog_id.clone(),
        quant: request.quant.clone(),
        profile: None,
        installed_at: installed::now_secs(),
    };
    verified.move_to(&target)?;
    let path = installed::write_record(paths, &record)?;
    events(DownloadEvent::Done {
        path: path.clone(),
        sha256: record.sha256.clone(),
        digest_source: record.digest_source,
    });
    Ok(Installed { path, record })
}

/// A downloaded file whose sha256 matched, still under its partial name (and still locked):
/// [`Verified::move_to`] puts it where it belongs.
#[derive(Debug)]
pub struct Verified {
    part_path: PathBuf,
    state_path: PathBuf,
    _lock: LockGuard,
    pub size: u64,
    pub sha256: String,
    pub digest_source: DigestSource,
}

impl Verified {
    /// Renames the verified bytes to `target` (in the same file system) and forgets the
    /// partial download's state.
    pub fn move_to(self, target: &Path) -> Result<(), DownloadError> {
        std::fs::rename(&self.part_path, target).map_err(io_at(target))?;
        remove_if_exists(&self.state_path)
    }
}

/// Downloads `request.url` into `dir/.partial/` (resuming what an earlier run left there) and
/// checks its sha256; nothing is placed in `dir` itself. Shared by model downloads and the
/// files of a checkpoint a pull converts.
pub async fn fetch_verified(
    dir: &Path,
    request: &DownloadRequest,
    options: &DownloadOptions,
    events: &EventSink,
) -> Result<Verified, DownloadError> {
    let given = check_request(request)?;
    let url = request.url.as_str();
    let name = request.file_name.as_str();
    let (part_path, state_path, lock_path) = partial_paths(dir, name);
    let partial_dir = dir.join(PARTIAL_DIR);
    std::fs::create_dir_all(&partial_dir).map_err(io_at(&partial_dir))?;
    let lock = LockGuard::acquire(&lock_path, name)?;

    let clients = Clients::new(options.connect_timeout)?;
    let probe = probe_with_retries(&clients, url, options, events).await?;
    let (expected, digest_source) = match (given, &probe.sha256) {
        (Some(sha), _) => (sha, request.digest_source),
        (None, Some(sha)) => (sha.clone(), DigestSource::Server),
        (None, None) => return Err(DownloadError::NoDigest { url: url.into() }),
    };

    // Resume what can be resumed; otherwise start clean.
    let resumable = resumable_state(url, &probe, &part_path, &state_path, events);
    if resumable.is_none() {
        remove_if_exists(&part_path)?;
        remove_if_exists(&state_path)?;
    }
    let already = resumable.as_ref().map_or(0, PartState::done);
    check_room(&partial_dir, probe.total, already, options)?;

    let state = resumable.or_else(|| segmented_state(url, &probe, options));
    let file = open_part(&part_path, state.as_ref(), &state_path)?;
    events(DownloadEvent::Started {
        url: url.into(),
        file: name.into(),
        total: probe.total,
        resumed_from: already,
        connections: state.as_ref().map_or(1, |s| s.segments.len()),
    });

    let segments: Vec<(u64, u64)> = state
        .iter()
        .flat_map(|s| s.segments.iter().map(|seg| (seg.start, seg.end)))
        .collect();
    let transfer = Arc::new(Transfer::new(
        url.to_string(),
        clients.follow.clone(),
        file,
        part_path.clone(),
        options.clone(),
        events.clone(),
        probe.total,
        state.map(|s| (s, state_path.clone())),
    ));
    let total = if segments.is_empty() {
        transfer.run_stream().await?
    } else {
        run_segments(&transfer, segments).await?;
        probe.total.unwrap_or(0)
    };
    transfer.finish_progress();

    events(DownloadEvent::Verifying { total });
    let actual = sha256_of(&part_path).await?;
    if actual != expected {
        drop(transfer);
        remove_if_exists(&part_path)?;
        remove_if_exists(&state_path)?;
        return Err(DownloadError::Checksum {
            url: url.into(),
            expected,
            actual,
            digest_from: digest_source,
        });
    }
    transfer.file.sync_all().map_err(io_at(&part_path))?;
    drop(transfer);
    Ok(Verified {
        part_path,
        state_path,
        _lock: lock,
        size: total,
        sha256: expected,
        digest_source,
    })
}

/// Checks a request before anything is touched: an HTTP(S) URL, a file name that is one path
/// component, a digest (if given) of 64 hex digits. Returns that digest in lower case.
fn check_request(request: &DownloadRequest) -> Result<Option<String>, DownloadError> {
    let url = request.url.as_str();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(DownloadError::BadUrl(url.into()));
    }
    let name = request.file_name.as_str();
    if !catena_protocol::names::is_file_name(name) {
        return Err(DownloadError::BadName(name.into()));
    }
    match &request.sha256 {
        Some(sha) if !super::catalog::is_sha256_hex(sha) => {
            Err(DownloadError::BadDigest(sha.clone()))
        }
        Some(sha) => Ok(Some(sha.to_ascii_lowercase())),
        None => Ok(None),
    }
}

/// The state of an earlier partial download of `url` that this one can continue: the same URL,
/// size and validator, a server that still answers ranges, and the bytes still there. Says why
/// when an earlier download exists but cannot be continued.
fn resumable_state(
    url: &str,
    probe: &Probe,
    part_path: &Path,
    state_path: &Path,
    events: &EventSink,
) -> Option<PartState> {
    let saved = PartState::load(state_path);
    match (&saved, probe.ranges, probe.total) {
        (Some(state), true, Some(total)) => match state.conflict(url, total, &probe.validator) {
            None if part_path.exists() => Some(state.clone()),
            None => None,
            Some(reason) => {
                events(DownloadEvent::Restarting {
                    reason: format!("the partial download cannot be resumed: {reason}"),
                });
                None
            }
        },
        (Some(state), false, _) if state.done() > 0 => {
            events(DownloadEvent::Restarting {
                reason: "the server no longer supports resuming; starting again".into(),
            });
            None
        }
        _ => None,
    }
}

/// A fresh state split into segments for parallel connections, when the server answers ranges
/// and says the size; `None` means one stream, which cannot resume.
fn segmented_state(url: &str, probe: &Probe, options: &DownloadOptions) -> Option<PartState> {
    match (probe.ranges, probe.total) {
        (true, Some(total)) => Some(PartState::new(
            url,
            total,
            probe.validator.clone(),
            plan::split(total, options.connections, options.min_segment),
        )),
        _ => None,
    }
}

/// Opens (or creates) the partial file without truncating what an earlier run fetched, and
/// saves the state that says which of its bytes are there.
fn open_part(
    part_path: &Path,
    state: Option<&PartState>,
    state_path: &Path,
) -> Result<std::fs::File, DownloadError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(part_path)
        .map_err(io_at(part_path))?;
    if let Some(state) = state {
        state.save(state_path).map_err(io_at(state_path))?;
    }
    Ok(file)
}

/// Room for the rest of a download of `total` bytes with `already` of them on disk, checked
/// before the first byte is written.
fn check_room(
    partial_dir: &Path,
    total: Option<u64>,
    already: u64,
    options: &DownloadOptions,
) -> Result<(), DownloadError> {
    let Some(total) = total else {
        return Ok(());
    };
    let available = fs4::available_space(partial_dir).map_err(io_at(partial_dir))?;
    let remaining = total.saturating_sub(already);
    if !plan::enough_space(remaining, available, options.free_space_margin) {
        return Err(DownloadError::DiskFull {
            dir: partial_dir.to_path_buf(),
            needed: remaining.saturating_add(options.free_space_margin),
            available,
        });
    }
    Ok(())
}

/// Downloads the `(start, end)` segments over parallel connections; the first failure stops
/// the others. The state is saved either way, so a later run resumes what was fetched.
async fn run_segments(
    transfer: &Arc<Transfer>,
    segments: Vec<(u64, u64)>,
) -> Result<(), DownloadError> {
    let mut tasks = tokio::task::JoinSet::new();
    for (index, (start, end)) in segments.into_iter().enumerate() {
        tasks.spawn(transfer.clone().run_segment(index, start, end));
    }
    let mut failure = None;
    while let Some(joined) = tasks.join_next().await {
        let result = match joined {
            Ok(result) => result,
            // Tasks aborted after the first failure.
            Err(e) if e.is_cancelled() => continue,
            Err(e) => Err(DownloadError::Client(format!(
                "a download task failed: {e}"
            ))),
        };
        if let Err(e) = result
            && failure.is_none()
        {
            failure = Some(e);
            tasks.abort_all();
        }
    }
    transfer.persist(true);
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// [`download`] on a runtime of its own, for callers that are not async.
pub fn download_blocking(
    paths: &crate::config::Paths,
    request: &DownloadRequest,
    options: &DownloadOptions,
    events: EventSink,
) -> Result<Installed, DownloadError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| DownloadError::Client(e.to_string()))?;
    runtime.block_on(download(paths, request, options, events))
}

/// The sha256 of a file, read in a blocking thread.
async fn sha256_of(path: &Path) -> Result<String, DownloadError> {
    let owned = path.to_path_buf();
    let hashed = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        use std::io::Read;
        let mut file = std::fs::File::open(&owned)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        Ok(hex::encode(hasher.finalize()))
    })
    .await
    .map_err(|e| DownloadError::Client(format!("the checksum task failed: {e}")))?;
    hashed.map_err(io_at(path))
}
