//! A hostile model hub or checkpoint against the real binary, on loopback: a quantisation that
//! aborts llama.cpp, a model that quantises but would not load, a file listing of 256 MiB, a
//! config file much larger than listed, a listing sent one byte a second. Each pull fails with a
//! clear message; `catena serve` stays up; nothing is installed and no work file is left; what
//! the hub sent and what the process held stay bounded.
//!
//! The checkpoint converter refuses out-of-range numbers before llama.cpp sees them, so the
//! quantiser is reached here the way a resumed pull reaches it: a complete F16 file in the pull's
//! work folder (written directly, with a block count llama.cpp asserts on), beside the listing it
//! was made from.

mod common;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, Uri, header};
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How a repository on the test hub misbehaves.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// Files listed and served as they are.
    None,
    /// The listing is 256 MiB of entries without a length (and without an end).
    HugeListing,
    /// The listing arrives one byte a second.
    SlowListing,
    /// `config.json` is served with 32 MiB more than its listed size, without a length.
    OversizeConfig,
}

const HUGE_LISTING: u64 = 256 << 20;
const CONFIG_EXTRA: u64 = 32 << 20;

struct Hub {
    base: String,
    /// Body bytes the hub has handed to its connections.
    sent: Arc<AtomicU64>,
    _runtime: tokio::runtime::Runtime,
}

/// A tiny Qwen2 checkpoint's small files; the weights are listed but never fetched (the work
/// folder holds the F16 file made from them).
fn repo_files() -> Vec<(&'static str, Bytes, bool)> {
    let config = json!({
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "num_hidden_layers": 1,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": true,
        "torch_dtype": "bfloat16",
        "vocab_size": 32,
    });
    vec![
        ("config.json", Bytes::from(config.to_string()), false),
        ("tokenizer.json", Bytes::from_static(b"{}"), false),
        ("tokenizer_config.json", Bytes::from_static(b"{}"), false),
        ("model.safetensors", Bytes::from(vec![0u8; 4096]), true),
    ]
}

/// The hub's listing of [`repo_files`], as its API writes it.
fn listing_json() -> String {
    let entries: Vec<Value> = repo_files()
        .into_iter()
        .map(|(path, bytes, lfs)| {
            let size = bytes.len();
            if lfs {
                let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
                json!({"type": "file", "path": path, "size": size,
                       "oid": catena_import::git_blob_id(sha.as_bytes()),
                       "lfs": {"oid": sha, "size": size, "pointerSize": 134}})
            } else {
                json!({"type": "file", "path": path, "size": size,
                       "oid": catena_import::git_blob_id(&bytes)})
            }
        })
        .collect();
    Value::Array(entries).to_string()
}

/// A body of `total` bytes: `first`, then `piece` over and over, each piece `pause` after the
/// last, counted into `sent` as it goes out.
fn stream(first: &[u8], piece: Bytes, total: u64, pause: Duration, sent: Arc<AtomicU64>) -> Body {
    let first = Bytes::copy_from_slice(first);
    let pieces = futures_util::stream::unfold(0u64, move |done| {
        let next = if done == 0 {
            first.clone()
        } else {
            piece.clone()
        };
        let sent = sent.clone();
        async move {
            if done >= total {
                return None;
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            let n = next.len().min((total - done) as usize);
            sent.fetch_add(n as u64, Ordering::Relaxed);
            Some((Ok::<_, std::io::Error>(next.slice(..n)), done + n as u64))
        }
    });
    Body::from_stream(pieces)
}

impl Hub {
    /// A hub serving `tester/ID` with the fault each id is given.
    fn start(faults: HashMap<&'static str, Fault>) -> Hub {
        let sent = Arc::new(AtomicU64::new(0));
        let counter = sent.clone();
        let app = axum::Router::new().fallback(move |uri: Uri| {
            let faults = faults.clone();
            let sent = counter.clone();
            async move { answer(&faults, uri.path(), sent) }
        });
        let (base, runtime) = common::serve_on_loopback(app);
        Hub {
            base,
            sent,
            _runtime: runtime,
        }
    }
}

fn answer(faults: &HashMap<&'static str, Fault>, path: &str, sent: Arc<AtomicU64>) -> Response {
    let not_found = || {
        Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from("not found"))
            .unwrap()
    };
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api", "models", "tester", id, "tree", "main"] => {
            let Some(fault) = faults.get(id) else {
                return not_found();
            };
            let body = match fault {
                Fault::HugeListing => {
                    let entry = format!(
                        r#"{{"type":"file","path":"f.bin","size":1,"oid":"{}"}},"#,
                        "0".repeat(40)
                    );
                    // Well-formed entries after the opening bracket, and no end.
                    let piece = Bytes::from(entry.repeat(512));
                    stream(b"[", piece, HUGE_LISTING, Duration::ZERO, sent)
                }
                Fault::SlowListing => {
                    let piece = Bytes::from_static(b" ");
                    stream(b"[", piece, 600, Duration::from_secs(1), sent)
                }
                _ => Body::from(listing_json()),
            };
            Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .body(body)
                .unwrap()
        }
        ["tester", id, "resolve", "main", file] => {
            let Some(fault) = faults.get(id) else {
                return not_found();
            };
            let Some((_, bytes, _)) = repo_files().into_iter().find(|(p, _, _)| p == file) else {
                return not_found();
            };
            if *fault == Fault::OversizeConfig && *file == "config.json" {
                // The real content, then spaces: valid JSON, but far more than was listed.
                let total = bytes.len() as u64 + CONFIG_EXTRA;
                let spaces = Bytes::from(vec![b' '; 64 << 10]);
                return Response::builder()
                    .body(stream(&bytes, spaces, total, Duration::ZERO, sent))
                    .unwrap();
            }
            Response::builder().body(Body::from(bytes)).unwrap()
        }
        _ => not_found(),
    }
}

/// A data folder whose catalog lists `tester/ID` checkpoints, one per id.
fn data_dir(ids: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut catalog = String::from("version = 1\n");
    for id in ids {
        catalog.push_str(&format!(
            "[[model]]\nid = \"{id}\"\nname = \"{id}\"\ndescription = \"A hostile hub.\"\n\
             profile = \"code\"\nparameters = 100000\ncontext = 4096\n\
             license = \"Apache-2.0\"\n\
             source = {{ kind = \"checkpoint\", repo = \"tester/{id}\" }}\n\
             [[model.files]]\nquant = \"Q8_0\"\nfile = \"{id}-Q8_0.gguf\"\n"
        ));
    }
    std::fs::write(dir.path().join("catalog.toml"), catalog).unwrap();
    dir
}

fn catena_in(data: &Path, hub: &Hub) -> Command {
    let mut cmd = Command::new(common::catena_bin());
    cmd.env("CATENA_DATA_DIR", data)
        .env("CATENA_CACHE_DIR", common::paths().cache_dir)
        .env("CATENA_STORE_DIR", data.join("sessions"))
        .env("CATENA_MODEL_BASE_URL", &hub.base);
    cmd
}

/// A GGUF metadata value.
enum Meta {
    U32(u32),
    F32(f32),
    Str(&'static str),
}

/// A GGUF file with `meta` and one F16 tensor, `token_embd.weight`, of 64 x 32 zeros.
fn gguf(meta: &[(&str, Meta)]) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(1u64.to_le_bytes());
    out.extend((meta.len() as u64).to_le_bytes());
    for (key, value) in meta {
        string(&mut out, key);
        match value {
            Meta::U32(v) => {
                out.extend(4u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Meta::F32(v) => {
                out.extend(6u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Meta::Str(s) => {
                out.extend(8u32.to_le_bytes());
                string(&mut out, s);
            }
        }
    }
    string(&mut out, "token_embd.weight");
    out.extend(2u32.to_le_bytes());
    out.extend(64u64.to_le_bytes());
    out.extend(32u64.to_le_bytes());
    out.extend(1u32.to_le_bytes()); // F16
    out.extend(0u64.to_le_bytes());
    out.resize(out.len().div_ceil(32) * 32, 0);
    out.resize(out.len() + 64 * 32 * 2, 0);
    out
}

/// A Qwen2 F16 file with `block_count` layers and a training context of `context`.
fn f16_file(block_count: u32, context: u32) -> Vec<u8> {
    gguf(&[
        ("general.architecture", Meta::Str("qwen2")),
        ("general.name", Meta::Str("hostile")),
        ("general.file_type", Meta::U32(1)),
        ("qwen2.block_count", Meta::U32(block_count)),
        ("qwen2.context_length", Meta::U32(context)),
        ("qwen2.embedding_length", Meta::U32(64)),
        ("qwen2.feed_forward_length", Meta::U32(128)),
        ("qwen2.attention.head_count", Meta::U32(2)),
        ("qwen2.attention.head_count_kv", Meta::U32(1)),
        ("qwen2.attention.layer_norm_rms_epsilon", Meta::F32(1e-6)),
        ("qwen2.rope.freq_base", Meta::F32(1e6)),
    ])
}

/// Puts `f16` into the work folder of a pull of `id` from the test hub, as a killed earlier run
/// leaves it: the F16 file complete, the listing it was made from saved. Returns the folder.
fn stage(data: &Path, id: &str, f16: &[u8]) -> PathBuf {
    let staging = data.join("models/.checkpoints").join(id);
    std::fs::create_dir_all(&staging).unwrap();
    let files = catena_import::parse_tree(listing_json().as_bytes()).unwrap();
    let needed = catena_import::needed(&format!("tester/{id}"), &files).unwrap();
    std::fs::write(
        staging.join("listing.json"),
        serde_json::to_vec(&needed).unwrap(),
    )
    .unwrap();
    std::fs::write(staging.join("model-F16.gguf"), f16).unwrap();
    staging
}

/// What an import or pull must not leave: `.import-*` files in the models folder, the F16 file
/// or a half-written result.
fn leftovers(data: &Path, staging: &Path) -> Vec<String> {
    let models = data.join("models");
    let mut left: Vec<String> = std::fs::read_dir(&models)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".import-") || n.ends_with(".gguf"))
        .collect();
    if staging.join("model-F16.gguf").exists() {
        left.push("model-F16.gguf".into());
    }
    left
}

const ABORTS: u32 = 600;
const WIDE_CONTEXT: u32 = u32::MAX;

#[test]
fn an_abort_in_the_quantiser_fails_the_download_and_the_server_stays_up() {
    let hub = Hub::start(HashMap::from([
        ("aborts", Fault::None),
        ("wont-load", Fault::None),
    ]));
    let data = data_dir(&["aborts", "wont-load"]);
    let data = data.path();
    // 600 layers: llama.cpp's quantiser asserts at most 512 while it reads the header.
    let aborts = stage(data, "aborts", &f16_file(ABORTS, 4096));
    // Quantises, but a context of 2^32 - 1 does not fit llama.cpp's int32: every load panics.
    let wont_load = stage(data, "wont-load", &f16_file(1, WIDE_CONTEXT));
    let served = common::serve(catena_in(data, &hub), |cmd| {
        cmd.args(["--ctx-size", "1024", "--sessions", "1"]);
    });
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::blocking::Client::new();
    let downloads = format!("{}/v1/library/downloads", served.base);
    let health = format!("{}/health", served.base);

    let finished = |id: &str| -> Value {
        let started = http
            .post(&downloads)
            .json(&json!({ "id": id }))
            .send()
            .unwrap();
        assert_eq!(started.status(), 202, "{id}");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let list: Value = http
                .get(&downloads)
                .send()
                .unwrap_or_else(|e| panic!("the server is gone during {id}: {e}"))
                .json()
                .unwrap();
            let status = list["data"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["id"] == id)
                .cloned()
                .unwrap();
            if status["state"] == "done" || status["state"] == "failed" {
                return status;
            }
            assert!(Instant::now() < deadline, "{status}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    let status = finished("aborts:Q8_0");
    assert_eq!(status["state"], "failed", "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(message.contains("quantising failed"), "{message}");
    assert!(message.contains("SIGABRT"), "{message}");
    // The check that failed, named without the build machine's folders.
    assert!(
        message.contains("llama.cpp stopped the process on a failed check: llama-model.cpp:")
            && message.contains("GGML_ASSERT"),
        "{message}"
    );
    let up = http.get(&health).send().unwrap();
    assert_eq!(up.status(), 200, "the server did not survive the abort");
    assert_eq!(leftovers(data, &aborts), Vec::<String>::new());

    let status = finished("wont-load:Q8_0");
    assert_eq!(status["state"], "failed", "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(message.contains("would not load"), "{message}");
    assert!(message.contains(&WIDE_CONTEXT.to_string()), "{message}");
    assert_eq!(leftovers(data, &wont_load), Vec::<String>::new());

    assert_eq!(http.get(&health).send().unwrap().status(), 200);
    assert!(common::installed_files(catena_in(data, &hub)).is_empty());
}

#[test]
fn an_abort_in_the_quantiser_fails_a_cli_pull_cleanly() {
    let hub = Hub::start(HashMap::from([("aborts", Fault::None)]));
    let data = data_dir(&["aborts"]);
    let data = data.path();
    let staging = stage(data, "aborts", &f16_file(ABORTS, 4096));
    let output = catena_in(data, &hub)
        .args(["models", "pull", "aborts", "--threads", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // 1 is an orderly error; the abort itself would be a signal.
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("quantising failed"), "{stderr}");
    assert!(stderr.contains("SIGABRT"), "{stderr}");
    assert_eq!(leftovers(data, &staging), Vec::<String>::new());
}

/// The most memory the child held (`VmHWM`, KiB), read until it exits: a sample, taken often
/// because a refused pull ends within milliseconds.
fn watch_peak(child: &mut std::process::Child) -> (std::process::ExitStatus, u64) {
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status_file)
            && let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().unwrap() {
            return (status, peak);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Pulls `id` and expects it to fail with `expected` in its message; returns the time it took,
/// the stderr, and the peak memory in KiB.
fn pull_fails(data: &Path, hub: &Hub, id: &str, expected: &str) -> (Duration, u64) {
    let started = Instant::now();
    let mut child = catena_in(data, hub)
        .args(["models", "pull", id])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
        text
    });
    let (status, peak) = watch_peak(&mut child);
    let took = started.elapsed();
    let stderr = reader.join().unwrap();
    eprintln!("{id}: ended after {took:?}, peak memory {peak} KiB");
    assert_eq!(status.code(), Some(1), "{id}: {stderr}");
    assert!(stderr.contains(expected), "{id}: {stderr}");
    (took, peak)
}

#[cfg(target_os = "linux")]
#[test]
fn a_hostile_hub_cannot_make_a_pull_read_without_bound() {
    let hub = Hub::start(HashMap::from([
        ("huge-listing", Fault::HugeListing),
        ("oversize-config", Fault::OversizeConfig),
        ("slow-listing", Fault::SlowListing),
    ]));
    let data = data_dir(&["huge-listing", "oversize-config", "slow-listing"]);
    let data = data.path();

    // 256 MiB of listing: refused after 4 MiB, and the process never held the rest.
    let (_, peak) = pull_fails(data, &hub, "huge-listing", "the answer was more than 4 MiB");
    let sent = hub.sent.swap(0, Ordering::Relaxed);
    eprintln!("huge-listing: the hub sent {sent} bytes");
    assert!(sent < 64 << 20, "the hub sent {sent} bytes of listing");
    assert!(peak < 128 << 10, "the pull held {peak} KiB");

    // A config file 32 MiB larger than listed: refused at the listed size.
    let (_, peak) = pull_fails(data, &hub, "oversize-config", "the size the hub listed");
    let sent = hub.sent.swap(0, Ordering::Relaxed);
    eprintln!("oversize-config: the hub sent {sent} bytes");
    assert!(sent < 16 << 20, "the hub sent {sent} bytes of config");
    assert!(peak < 128 << 10, "the pull held {peak} KiB");

    // One byte a second: cut off at the listing's deadline, not the client's 120 s.
    let (took, _) = pull_fails(
        data,
        &hub,
        "slow-listing",
        "the answer was not received within 30 seconds",
    );
    assert!(took < Duration::from_secs(100), "{took:?}");

    assert!(!data.join("models/oversize-config-Q8_0.gguf").exists());
    let kept = data.join("models/.checkpoints/oversize-config/config.json");
    assert!(!kept.exists(), "a config larger than listed was kept");
}
