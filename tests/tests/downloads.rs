//! The model downloader against a real HTTP server on loopback that misbehaves on purpose:
//! dropped connections, stalls, 404, a wrong digest, no range support, a file that changed
//! between runs, too little disk, a write error, and a process killed mid-download. In every
//! case the file ends complete, verified and listed, or the pull fails clearly and nothing is
//! listed.

mod common;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use catena_hub::config::Paths;
use catena_hub::download::{
    self, DownloadError, DownloadEvent, DownloadOptions, DownloadRequest, EventSink,
};
use catena_hub::installed::{self, DigestSource};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// The misbehaving server

/// What the server does wrong. "Data requests" are all but the downloader's 1-byte probe.
#[derive(Clone, Default)]
struct Faults {
    /// Abort the connection after this many body bytes, on the first `n` data requests.
    drop_after: Option<(usize, usize)>,
    /// Send this many bytes, then go silent, on the first `n` data requests.
    stall_after: Option<(usize, usize)>,
    not_found: bool,
    /// Ignore `Range` and always send the whole file with 200.
    no_ranges: bool,
    /// Claim the file has this many bytes (more than any disk).
    advertised_total: Option<u64>,
    /// Sleep this long between 16 KiB chunks.
    throttle: Option<Duration>,
    /// Publish this sha256 in `X-Linked-Etag`, as model hubs do.
    linked_sha: Option<String>,
    etag: String,
}

#[derive(Default)]
struct Log {
    /// The `Range` of every data request: (first byte, last byte), `None` without a range.
    data_ranges: Vec<Option<(u64, Option<u64>)>>,
    requests: usize,
}

struct Shared {
    payload: Bytes,
    faults: Mutex<Faults>,
    log: Mutex<Log>,
}

struct Server {
    base: String,
    shared: Arc<Shared>,
    _runtime: tokio::runtime::Runtime,
}

impl Server {
    fn start(faults: Faults, payload: &[u8]) -> Server {
        let shared = Arc::new(Shared {
            payload: Bytes::copy_from_slice(payload),
            faults: Mutex::new(faults),
            log: Mutex::new(Log::default()),
        });
        let state = shared.clone();
        let app = axum::Router::new().fallback(move |headers: HeaderMap| {
            let state = state.clone();
            async move { serve(state, headers) }
        });
        let (base, runtime) = common::serve_on_loopback(app);
        Server {
            base,
            shared,
            _runtime: runtime,
        }
    }

    fn url(&self, name: &str) -> String {
        format!("{}/files/{name}", self.base)
    }

    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.shared.faults.lock().unwrap()
    }

    fn data_ranges(&self) -> Vec<Option<(u64, Option<u64>)>> {
        self.shared.log.lock().unwrap().data_ranges.clone()
    }

    fn requests(&self) -> usize {
        self.shared.log.lock().unwrap().requests
    }
}

fn parse_range(headers: &HeaderMap) -> Option<(u64, Option<u64>)> {
    let value = headers.get(header::RANGE)?.to_str().ok()?;
    let (a, b) = value.strip_prefix("bytes=")?.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()))
}

fn serve(state: Arc<Shared>, headers: HeaderMap) -> Response {
    let faults = state.faults.lock().unwrap().clone();
    let range = parse_range(&headers);
    let probe = range == Some((0, Some(0)));
    let data_index = {
        let mut log = state.log.lock().unwrap();
        log.requests += 1;
        if !probe {
            log.data_ranges.push(range);
        }
        log.data_ranges.len().saturating_sub(1)
    };
    let mut response = Response::builder()
        .header(header::ETAG, format!("\"{}\"", faults.etag))
        .header(header::ACCEPT_RANGES, "bytes");
    if let Some(sha) = &faults.linked_sha {
        response = response.header("x-linked-etag", format!("\"{sha}\""));
    }
    if faults.not_found {
        return response
            .status(StatusCode::NOT_FOUND)
            .body(Body::from("no such file"))
            .unwrap();
    }
    let len = state.payload.len() as u64;
    let total = faults.advertised_total.unwrap_or(len);
    let (status, start, end) = match range {
        Some((a, b)) if !faults.no_ranges && a < total => (
            StatusCode::PARTIAL_CONTENT,
            a,
            b.unwrap_or(total - 1).min(total - 1) + 1,
        ),
        _ => (StatusCode::OK, 0, total),
    };
    if status == StatusCode::PARTIAL_CONTENT {
        response = response.header(
            header::CONTENT_RANGE,
            format!("bytes {start}-{}/{total}", end - 1),
        );
    }
    let body = state
        .payload
        .slice(start.min(len) as usize..end.min(len) as usize);
    let applies = |fault: Option<(usize, usize)>| {
        fault.and_then(|(after, first_n)| (!probe && data_index < first_n).then_some(after))
    };
    let plan = BodyPlan {
        body,
        sent: 0,
        drop_after: applies(faults.drop_after),
        stall_after: applies(faults.stall_after),
        throttle: if probe { None } else { faults.throttle },
    };
    let stream = futures_util::stream::unfold(plan, next_chunk);
    response
        .status(status)
        .header(header::CONTENT_LENGTH, end - start)
        .body(Body::from_stream(stream))
        .unwrap()
}

struct BodyPlan {
    body: Bytes,
    sent: usize,
    drop_after: Option<usize>,
    stall_after: Option<usize>,
    throttle: Option<Duration>,
}

async fn next_chunk(mut plan: BodyPlan) -> Option<(Result<Bytes, std::io::Error>, BodyPlan)> {
    if plan.sent >= plan.body.len() {
        return None;
    }
    if plan.drop_after.is_some_and(|k| plan.sent >= k) {
        // An error mid-body makes the server abort the connection.
        plan.drop_after = None;
        plan.sent = plan.body.len();
        return Some((Err(std::io::Error::other("dropped on purpose")), plan));
    }
    if plan.stall_after.is_some_and(|k| plan.sent >= k) {
        // Silence, far longer than any stall timeout used here; the client gives up first.
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    if let Some(pause) = plan.throttle {
        tokio::time::sleep(pause).await;
    }
    let mut n = (16 << 10).min(plan.body.len() - plan.sent);
    for limit in [plan.drop_after, plan.stall_after].into_iter().flatten() {
        if limit > plan.sent {
            n = n.min(limit - plan.sent);
        }
    }
    let chunk = plan.body.slice(plan.sent..plan.sent + n);
    plan.sent += n;
    Some((Ok(chunk), plan))
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// Deterministic pseudo-random bytes (xorshift), so every test serves a different-looking file.
fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn sha256(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

const MIB: usize = 1 << 20;

fn fast_options() -> DownloadOptions {
    DownloadOptions {
        connections: 4,
        stall_timeout: Duration::from_millis(500),
        retries: 4,
        backoff_base: Duration::from_millis(10),
        backoff_max: Duration::from_millis(50),
        connect_timeout: Duration::from_secs(5),
        min_segment: 64 << 10,
        ..DownloadOptions::default()
    }
}

fn request(url: String, name: &str, sha256: Option<String>) -> DownloadRequest {
    DownloadRequest {
        url,
        file_name: name.into(),
        sha256,
        digest_source: DigestSource::User,
        catalog_id: None,
        quant: None,
    }
}

/// Collects every event.
fn recorder() -> (EventSink, Arc<Mutex<Vec<DownloadEvent>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink_events = events.clone();
    let sink: EventSink = Arc::new(move |e| sink_events.lock().unwrap().push(e));
    (sink, events)
}

fn temp_paths() -> (tempfile::TempDir, Paths) {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::at(dir.path(), &dir.path().join("cache"));
    (dir, paths)
}

/// The model is installed, listed, verified, and nothing partial is left.
fn assert_installed(paths: &Paths, name: &str, data: &[u8], source: DigestSource) {
    let listed = installed::list(paths);
    let model = listed
        .iter()
        .find(|m| m.record.file == name)
        .unwrap_or_else(|| panic!("{name} is not listed: {listed:?}"));
    assert_eq!(model.record.sha256, sha256(data));
    assert_eq!(model.record.digest_source, source);
    assert_eq!(std::fs::read(&model.path).unwrap(), data);
    let partial = paths.models_dir().join(".partial");
    let left: Vec<_> = std::fs::read_dir(&partial)
        .map(|r| r.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in .partial: {left:?}");
}

/// Nothing is listed and no file of that name is in the models folder.
fn assert_not_installed(paths: &Paths, name: &str) {
    assert!(
        installed::list(paths).iter().all(|m| m.record.file != name),
        "{name} is listed"
    );
    assert!(!paths.models_dir().join(name).exists());
}

// ---------------------------------------------------------------------------------------------
// In-process tests of the library

#[test]
fn a_clean_download_uses_several_connections_and_is_verified() {
    let data = payload(2 * MIB + 12_345, 1);
    let server = Server::start(Faults::default(), &data);
    let (_dir, paths) = temp_paths();
    let (events, seen) = recorder();
    let req = request(server.url("clean.gguf"), "clean.gguf", Some(sha256(&data)));
    let model = download::download_blocking(&paths, &req, &fast_options(), events).unwrap();
    assert_eq!(model.record.size, data.len() as u64);
    assert_installed(&paths, "clean.gguf", &data, DigestSource::User);
    let ranges = server.data_ranges();
    assert_eq!(ranges.len(), 4, "{ranges:?}");
    assert!(ranges.iter().all(Option::is_some));
    let seen = seen.lock().unwrap();
    assert!(matches!(
        seen.first(),
        Some(DownloadEvent::Started { connections: 4, .. })
    ));
    assert!(matches!(seen.last(), Some(DownloadEvent::Done { .. })));
    assert!(
        seen.iter()
            .any(|e| matches!(e, DownloadEvent::Verifying { .. }))
    );
}

#[test]
fn the_servers_published_digest_is_used_and_recorded() {
    let data = payload(300_000, 2);
    let faults = Faults {
        linked_sha: Some(sha256(&data)),
        ..Faults::default()
    };
    let server = Server::start(faults, &data);
    let (_dir, paths) = temp_paths();
    let req = request(server.url("hub.gguf"), "hub.gguf", None);
    download::download_blocking(&paths, &req, &fast_options(), recorder().0).unwrap();
    assert_installed(&paths, "hub.gguf", &data, DigestSource::Server);
}

#[test]
fn without_any_digest_nothing_is_downloaded() {
    let data = payload(300_000, 3);
    let server = Server::start(Faults::default(), &data);
    let (_dir, paths) = temp_paths();
    let req = request(server.url("nodigest.gguf"), "nodigest.gguf", None);
    let err = download::download_blocking(&paths, &req, &fast_options(), recorder().0).unwrap_err();
    assert!(matches!(err, DownloadError::NoDigest { .. }), "{err}");
    assert!(err.to_string().contains("--sha256"), "{err}");
    assert!(
        server.data_ranges().is_empty(),
        "only the probe may be sent"
    );
    assert_not_installed(&paths, "nodigest.gguf");
}

#[test]
fn dropped_connections_resume_where_they_stopped() {
    let data = payload(2 * MIB, 4);
    let faults = Faults {
        drop_after: Some((100_000, 3)),
        // Paced, so the bytes before the drop leave the server's buffers.
        throttle: Some(Duration::from_millis(1)),
        ..Faults::default()
    };
    let server = Server::start(faults, &data);
    let (_dir, paths) = temp_paths();
    let (events, seen) = recorder();
    let req = request(server.url("drops.gguf"), "drops.gguf", Some(sha256(&data)));
    download::download_blocking(&paths, &req, &fast_options(), events).unwrap();
    assert_installed(&paths, "drops.gguf", &data, DigestSource::User);
    // The retries asked for the rest of their segment, not for the segment again.
    let ranges = server.data_ranges();
    let starts: Vec<u64> = ranges.iter().flatten().map(|r| r.0).collect();
    let segment_starts = &starts[..4];
    assert!(
        starts[4..].iter().any(|s| !segment_starts.contains(s)),
        "no request resumed mid-segment: {ranges:?}"
    );
    let retries = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, DownloadEvent::Retrying { .. }))
        .count();
    assert_eq!(retries, 3);
}

#[test]
fn a_stalled_connection_is_dropped_and_retried() {
    let data = payload(MIB, 5);
    let faults = Faults {
        stall_after: Some((50_000, 1)),
        ..Faults::default()
    };
    let server = Server::start(faults, &data);
    let (_dir, paths) = temp_paths();
    let (events, seen) = recorder();
    let req = request(server.url("stall.gguf"), "stall.gguf", Some(sha256(&data)));
    download::download_blocking(&paths, &req, &fast_options(), events).unwrap();
    assert_installed(&paths, "stall.gguf", &data, DigestSource::User);
    let seen = seen.lock().unwrap();
    let stalled = seen
        .iter()
        .any(|e| matches!(e, DownloadEvent::Retrying { cause, .. } if cause.contains("stalled")));
    assert!(stalled, "{seen:?}");
}

#[test]
fn not_found_fails_at_once_without_retries() {
    let data = payload(1000, 6);
    let faults = Faults {
        not_found: true,
        ..Faults::default()
    };
    let server = Server::start(faults, &data);
    let (_dir, paths) = temp_paths();
    let url = server.url("missing.gguf");
    let req = request(url.clone(), "missing.gguf", Some(sha256(&data)));
    let err = download::download_blocking(&paths, &req, &fast_options(), recorder().0).unwrap_err();
    assert!(
        matches!(err, DownloadError::Status { status: 404, .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("404") && text.contains(&url), "{text}");
    assert_eq!(server.requests(), 1, "a 404 is not retried");
    assert_not_installed(&paths, "missing.gguf");
    assert!(
        !paths
            .models_dir()
            .join(".partial/missing.gguf.part")
            .exists()
    );
}

#[test]
fn a_wrong_digest_deletes_the_download_and_names_both_digests() {
    let data = payload(700_000, 7);
    let server = Server::start(Faults::default(), &data);
    let (_dir, paths) = temp_paths();
    let wrong = "ab".repeat(32);
    let req = request(
        server.url("corrupt.gguf"),
        "corrupt.gguf",
        Some(wrong.clone()),
    );
    let err = download::download_blocking(&paths, &req, &fast_options(), recorder().0).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, DownloadError::Checksum { .. }), "{text}");
    assert!(
        text.contains(&wrong) && text.contains(&sha256(&data)),
        "{text}"
    );
    assert_not_installed(&paths, "corrupt.gguf");
    let partial = paths.models_dir().join(".partial");
    assert!(!partial.join("corrupt.gguf.part").exists());
    assert!(!partial.join("corrupt.gguf.part.json").exists());
}

#[test]
fn a_server_without_ranges_gets_one_connection_restarted_from_zero() {
    let data = payload(MIB, 8);
    let faults = Faults {
        no_ranges: true,
        drop_after: Some((200_000, 1)),
        throttle: Some(Duration::from_millis(1)),
        ..Faults::default()
    };
    let server = Server::start(faults, &data);
    let (_dir, paths) = temp_paths();
    let (events, seen) = recorder();
    let req = request(server.url("plain.gguf"), "plain.gguf", Some(sha256(&data)));
    download::download_blocking(&paths, &req, &fast_options(), events).unwrap();
    assert_installed(&paths, "plain.gguf", &data, DigestSource::User);
    assert!(server.data_ranges().iter().all(Option::is_none));
    let seen = seen.lock().unwrap();
    assert!(matches!(
        seen[0],
        DownloadEvent::Started { connections: 1, .. }
    ));
    assert!(
        seen.iter()
            .any(|e| matches!(e, DownloadEvent::Restarting { reason } if reason.contains("cannot resume"))),
        "{seen:?}"
    );
}

#[test]
fn a_file_changed_on_the_server_is_downloaded_again_from_zero() {
    let data = payload(2 * MIB, 9);
    let faults = Faults {
        // Every connection breaks after 200 KB, and no retry is allowed: the first run fails
        // with progress on disk.
        drop_after: Some((200_000, 100)),
        etag: "v1".into(),
        ..Faults::default()
    };
    let server = Server::start(faults, &data);
    let (_dir, paths) = temp_paths();
    let req = request(
        server.url("changed.gguf"),
        "changed.gguf",
        Some(sha256(&data)),
    );
    let no_retry = DownloadOptions {
        retries: 0,
        ..fast_options()
    };
    let err = download::download_blocking(&paths, &req, &no_retry, recorder().0).unwrap_err();
    assert!(matches!(err, DownloadError::Exhausted { .. }), "{err}");
    assert_not_installed(&paths, "changed.gguf");
    let state = paths.models_dir().join(".partial/changed.gguf.part.json");
    assert!(state.exists(), "the progress is kept for a resume");

    {
        let mut faults = server.faults();
        faults.drop_after = None;
        faults.etag = "v2".into();
    }
    let before = server.data_ranges().len();
    let (events, seen) = recorder();
    download::download_blocking(&paths, &req, &fast_options(), events).unwrap();
    assert_installed(&paths, "changed.gguf", &data, DigestSource::User);
    let seen = seen.lock().unwrap();
    assert!(
        seen.iter()
            .any(|e| matches!(e, DownloadEvent::Restarting { reason } if reason.contains("ETag"))),
        "{seen:?}"
    );
    assert!(
        matches!(
            seen[1],
            DownloadEvent::Started {
                resumed_from: 0,
                ..
            }
        ),
        "{seen:?}"
    );
    // Fresh segments: the second run's requests start at segment boundaries.
    let second: Vec<u64> = server.data_ranges()[before..]
        .iter()
        .flatten()
        .map(|r| r.0)
        .collect();
    assert_eq!(second.len(), 4);
    assert_eq!(second.iter().min(), Some(&0));
}

#[test]
fn too_little_disk_space_fails_before_a_byte_is_written() {
    let data = payload(1000, 10);
    let faults = Faults {
        advertised_total: Some(1 << 60),
        ..Faults::default()
    };
    let server = Server::start(faults, &data);
    let (_dir, paths) = temp_paths();
    let req = request(server.url("huge.gguf"), "huge.gguf", Some(sha256(&data)));
    let err = download::download_blocking(&paths, &req, &fast_options(), recorder().0).unwrap_err();
    assert!(matches!(err, DownloadError::DiskFull { .. }), "{err}");
    assert!(err.to_string().contains("free disk space"), "{err}");
    assert!(server.data_ranges().is_empty());
    assert_not_installed(&paths, "huge.gguf");
    assert!(!paths.models_dir().join(".partial/huge.gguf.part").exists());
}

// ---------------------------------------------------------------------------------------------
// The real binary: a process killed mid-download, a write error, and the other subcommands

/// A user catalog in `data_dir` with one GGUF model published on a hub (the AFM entries of the
/// shipped catalog are checkpoints, which `pull` does not download).
fn hub_catalog(data_dir: &Path) {
    std::fs::create_dir_all(data_dir).unwrap();
    std::fs::write(
        data_dir.join("catalog.toml"),
        "version = 1\n[[model]]\nid = \"hub-test-model\"\nname = \"Hub test model\"\n\
         description = \"A GGUF model on the test's loopback hub.\"\nprofile = \"code\"\n\
         parameters = 494032768\ncontext = 32768\nlicense = \"Apache-2.0\"\n\
         source = { kind = \"hub\", repo = \"tester/Hub-Test-GGUF\" }\n\
         [[model.files]]\nquant = \"Q8_0\"\nfile = \"Hub-Test-Q8_0.gguf\"\n",
    )
    .unwrap();
}

fn catena_in(data_dir: &Path) -> Command {
    let mut cmd = Command::new(common::catena_bin());
    cmd.env("CATENA_DATA_DIR", data_dir)
        .env("CATENA_CACHE_DIR", data_dir.join("cache"))
        .env_remove("CATENA_MODEL_BASE_URL");
    cmd
}

fn listed_files(data_dir: &Path) -> Vec<String> {
    common::installed_files(catena_in(data_dir))
}

/// Bytes the saved state says are on disk.
fn saved_progress(state: &Path) -> u64 {
    let Ok(text) = std::fs::read(state) else {
        return 0;
    };
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(&text) else {
        return 0;
    };
    json["segments"]
        .as_array()
        .map(|segs| segs.iter().filter_map(|s| s["done"].as_u64()).sum())
        .unwrap_or(0)
}

#[test]
fn a_killed_pull_resumes_when_run_again() {
    let data = payload(3 * MIB, 11);
    let faults = Faults {
        throttle: Some(Duration::from_millis(20)),
        ..Faults::default()
    };
    let server = Server::start(faults, &data);
    let dir = tempfile::tempdir().unwrap();
    let sha = sha256(&data);
    let url = server.url("killed.gguf");
    let pull = |dir: &Path| {
        let mut cmd = catena_in(dir);
        cmd.args(["models", "pull", "--url", &url, "--sha256", &sha])
            .args(["--connections", "1", "--json"]);
        cmd
    };
    let mut child = pull(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until progress was saved, then kill the process without warning.
    let state = dir.path().join("models/.partial/killed.gguf.part.json");
    while saved_progress(&state) == 0 {
        assert!(child.try_wait().unwrap().is_none(), "the pull ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!listed_files(dir.path()).contains(&"killed.gguf".to_string()));
    let saved = saved_progress(&state);

    server.faults().throttle = None;
    let output = pull(dir.path()).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let ranges = server.data_ranges();
    let last = ranges.last().unwrap().unwrap();
    assert!(last.0 >= saved && last.0 > 0, "not resumed: {ranges:?}");
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "started" && e["resumed_from"].as_u64() >= Some(saved)),
        "{events:?}"
    );
    let paths = Paths::at(dir.path(), &dir.path().join("cache"));
    assert_installed(&paths, "killed.gguf", &data, DigestSource::User);
    assert!(listed_files(dir.path()).contains(&"killed.gguf".to_string()));
}

#[cfg(unix)]
#[test]
fn a_write_error_fails_clearly_and_lists_nothing() {
    let data = payload(3 * MIB, 12);
    let server = Server::start(Faults::default(), &data);
    let dir = tempfile::tempdir().unwrap();
    let sha = sha256(&data);
    let url = server.url("toobig.gguf");
    // A file size limit of 1 MiB (ulimit counts 512- or 1024-byte blocks; 1024 of them is at
    // most 1 MiB) makes writes past it fail with EFBIG, as a full disk fails them with ENOSPC.
    // SIGXFSZ is ignored so the write returns the error instead of killing the process.
    let bin = common::catena_bin();
    let output = Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 1024 && exec \"$0\" \"$@\"")
        .arg(&bin)
        .args(["models", "pull", "--url", &url, "--sha256", &sha])
        .env("CATENA_DATA_DIR", dir.path())
        .env("CATENA_CACHE_DIR", dir.path().join("cache"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("could not write"), "{stderr}");
    assert!(stderr.contains("resume"), "{stderr}");
    assert!(!listed_files(dir.path()).contains(&"toobig.gguf".to_string()));
    assert!(!dir.path().join("models/toobig.gguf").exists());
    assert!(dir.path().join("models/.partial/toobig.gguf.part").exists());
}

#[test]
fn pulled_models_can_be_chosen_as_default_and_removed() {
    let data = payload(200_000, 13);
    let server = Server::start(Faults::default(), &data);
    let dir = tempfile::tempdir().unwrap();
    let sha = sha256(&data);
    let url = server.url("mine.gguf");
    let run = |args: &[&str]| catena_in(dir.path()).args(args).output().unwrap();

    let output = run(&[
        "models",
        "pull",
        "--url",
        &url,
        "--sha256",
        &sha,
        "--name",
        "mine.gguf",
    ]);
    assert!(output.status.success(), "{output:?}");
    assert!(listed_files(dir.path()).contains(&"mine.gguf".to_string()));
    // The bytes are intact (the digest matched) but they are not a model: the user is told.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a readable GGUF model"), "{stderr}");
    // A second pull does nothing.
    let requests = server.requests();
    let output = run(&[
        "models",
        "pull",
        "--url",
        &url,
        "--sha256",
        &sha,
        "--name",
        "mine.gguf",
    ]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(server.requests(), requests);

    let output = run(&["models", "default", "mine.gguf"]);
    assert!(output.status.success(), "{output:?}");
    let output = run(&["models", "default"]);
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(shown.trim().ends_with("mine.gguf"), "{shown}");
    let paths = Paths::at(dir.path(), &dir.path().join("cache"));
    assert_eq!(
        installed::default_model_path(&paths),
        Some(dir.path().join("models/mine.gguf"))
    );
    let output = run(&["models", "list", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let mine = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["file"] == "mine.gguf")
        .unwrap();
    assert_eq!(mine["default"], true);

    let output = run(&["models", "rm", "mine.gguf"]);
    assert!(output.status.success(), "{output:?}");
    assert!(!listed_files(dir.path()).contains(&"mine.gguf".to_string()));
    // The default now points nowhere: said clearly, not silently replaced.
    let output = run(&["models", "default"]);
    assert_eq!(output.status.code(), Some(1));
    let output = run(&["models", "rm", "mine.gguf"]);
    assert_eq!(output.status.code(), Some(1), "removing twice is an error");
}

#[test]
fn catalog_models_come_from_the_base_url_and_are_listed_under_their_id() {
    let data = payload(150_000, 14);
    // The hub publishes the digest; the catalog has none for this entry.
    let faults = Faults {
        linked_sha: Some(sha256(&data)),
        ..Faults::default()
    };
    let server = Server::start(faults, &data);
    let dir = tempfile::tempdir().unwrap();
    hub_catalog(dir.path());
    let output = catena_in(dir.path())
        .args([
            "models",
            "pull",
            "hub-test-model:Q8_0",
            "--base-url",
            &server.base,
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("checked against the server"), "{stderr}");
    let output = catena_in(dir.path())
        .args(["models", "list", "--json"])
        .output()
        .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let installed: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["installed"] == true)
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(installed, ["hub-test-model:Q8_0"]);
    // The hub's path layout: {base}/{repo}/resolve/{revision}/{file}.
    let paths = Paths::at(dir.path(), &dir.path().join("cache"));
    let record = &installed::list(&paths)[0].record;
    assert_eq!(
        record.url,
        format!(
            "{}/tester/Hub-Test-GGUF/resolve/main/Hub-Test-Q8_0.gguf",
            server.base
        )
    );
    assert_eq!(record.catalog_id.as_deref(), Some("hub-test-model"));
    assert_eq!(record.digest_source, DigestSource::Server);
}

#[test]
fn an_afm_pull_names_its_repository_and_licence_before_anything_is_fetched() {
    // This server answers every path with random bytes: no hub's file list.
    let server = Server::start(Faults::default(), &payload(1000, 3));
    let dir = tempfile::tempdir().unwrap();
    let output = catena_in(dir.path())
        .args([
            "models",
            "pull",
            "afm-mhqa-3b-sft",
            "--base-url",
            &server.base,
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    for expected in [
        "Hugging Face checkpoint",
        "PersonalAILab/AFM-MHQA-Agent-3B-sft",
        "Licence: Qwen Research License",
        "could not list the files of PersonalAILab/AFM-MHQA-Agent-3B-sft",
        "not a file listing",
    ] {
        assert!(stderr.contains(expected), "{expected:?} missing: {stderr}");
    }
    assert!(listed_files(dir.path()).is_empty());
}

// ---------------------------------------------------------------------------------------------
// The UI's calls: download a catalog model through `catena serve`, then serve it

/// `catena serve` in `data_dir` with the real default model; the process and its address.
fn serve_in(data_dir: &Path, base_url: &str) -> (common::Reaped, String) {
    let served = common::serve(catena_in(data_dir), |cmd| {
        cmd.args(["--ctx-size", "2048", "--sessions", "1", "--store-dir"])
            .arg(data_dir.join("store"))
            .env("CATENA_MODEL_BASE_URL", base_url);
    });
    (served.process, served.base)
}

#[test]
fn the_ui_downloads_a_catalog_model_and_serves_it() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The hub serves real GGUF bytes (the default model's) under a catalog name, with its digest.
    let model = std::fs::read(common::default_model()).unwrap();
    let faults = Faults {
        linked_sha: Some(sha256(&model)),
        ..Faults::default()
    };
    let hub = Server::start(faults, &model);
    let dir = tempfile::tempdir().unwrap();
    hub_catalog(dir.path());
    let (_server, base) = serve_in(dir.path(), &hub.base);
    let http = reqwest::blocking::Client::new();
    let post = |path: &str, body: serde_json::Value| {
        http.post(format!("{base}{path}"))
            .json(&body)
            .send()
            .unwrap()
    };
    let get = |path: &str| -> serde_json::Value {
        http.get(format!("{base}{path}"))
            .send()
            .unwrap()
            .json()
            .unwrap()
    };

    let id = "hub-test-model:Q8_0";
    let started = post("/v1/library/downloads", serde_json::json!({"id": id}));
    assert_eq!(started.status(), 202);
    // A second click while it runs is refused, not started twice.
    let again = post("/v1/library/downloads", serde_json::json!({"id": id}));
    let again_status = again.status();
    let again_body: serde_json::Value = again.json().unwrap();
    let finished_already = get("/v1/library/downloads")["data"][0]["state"] == "done";
    assert!(
        again_status == 409 || finished_already,
        "{again_status} {again_body}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let status = loop {
        let list = get("/v1/library/downloads");
        let status = list["data"][0].clone();
        if status["state"] == "done" || status["state"] == "failed" {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status["state"], "done", "{status}");
    assert_eq!(status["done_bytes"], model.len() as u64);
    let rows = get("/v1/library/models");
    let row = rows["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("{id} is not listed: {rows}"));
    assert_eq!(row["installed"], true, "{row}");

    // An unknown model, or any path (a model or not), is refused and the model stays: only
    // installed models are served, and nothing of the file is read or repeated.
    let unknown = post(
        "/v1/library/models/serve",
        serde_json::json!({"id": "no-such-model"}),
    );
    assert_eq!(unknown.status(), 400);
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"not a model at all").unwrap();
    let restarts_before = get("/health")["worker"]["restarts"].clone();
    for path in [
        junk.display().to_string(),
        common::default_model().display().to_string(),
    ] {
        let refused = post("/v1/library/models/serve", serde_json::json!({"id": path}));
        assert_eq!(refused.status(), 400);
        let message = refused.json::<serde_json::Value>().unwrap()["error"]["message"].to_string();
        assert!(message.contains("not an installed model"), "{message}");
        assert!(!message.contains("not a model at all"), "{message}");
    }
    let health = get("/health");
    assert_eq!(health["worker"]["restarts"], restarts_before, "{health}");
    assert_eq!(
        health["model"], "qwen2.5-coder-0.5b-instruct-q4_k_m",
        "{health}"
    );
    assert_eq!(health["worker"]["alive"], true, "{health}");

    // The downloaded model is served from now on: health, /v1/models and a chat say so.
    let switched = post("/v1/library/models/serve", serde_json::json!({"id": id}));
    assert_eq!(switched.status(), 200);
    let served = "Hub-Test-Q8_0";
    assert_eq!(
        switched.json::<serde_json::Value>().unwrap()["model"],
        served
    );
    assert_eq!(get("/health")["model"], served);
    assert_eq!(get("/v1/models")["data"][0]["id"], served);
    let chat: serde_json::Value = post(
        "/v1/chat/completions",
        serde_json::json!({
            "model": served,
            "messages": [{"role": "user", "content": "Say hi."}],
            "max_tokens": 8,
            "temperature": 0,
        }),
    )
    .json()
    .unwrap();
    assert_eq!(chat["model"], served, "{chat}");
    assert!(
        chat["usage"]["completion_tokens"].as_u64().unwrap() > 0,
        "{chat}"
    );
}
