//! `catena models pull` of an AFM published as a Hugging Face checkpoint, against a model hub on
//! loopback: the hub's file-list API at a revision and its `resolve` paths with ranges, serving
//! a real checkpoint (the default model in the Hugging Face layout, `common/checkpoint.rs`).
//! Faults: a truncated shard, a wrong digest, a missing tokenizer, an unsupported architecture,
//! a repository without weights, a disk too small, and a kill during each stage. Each ends
//! verified and listed, or clearly failed and not listed.

mod common;
#[path = "common/checkpoint.rs"]
mod made_checkpoint;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// One file of a repository on the test hub.
#[derive(Clone)]
struct HubFile {
    path: String,
    bytes: Bytes,
    /// Listed with an LFS sha256 (weights); otherwise with its git blob id.
    lfs: bool,
    /// Listed with this size instead of the real one.
    listed_size: Option<u64>,
    /// Listed with this sha256 instead of the real one.
    listed_sha256: Option<String>,
    /// Served with only this many bytes.
    served_len: Option<usize>,
}

#[derive(Default)]
struct HubLog {
    /// Every `resolve` request: (file, first byte asked for).
    fetches: Vec<(String, u64)>,
}

struct HubState {
    repos: Mutex<HashMap<String, Vec<HubFile>>>,
    /// Pause between 64 KiB chunks of weight files.
    throttle: Mutex<Option<Duration>>,
    log: Mutex<HubLog>,
}

struct Hub {
    base: String,
    state: Arc<HubState>,
    _runtime: tokio::runtime::Runtime,
}

fn sha256(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn git_blob(data: &[u8]) -> String {
    catena_import::git_blob_id(data)
}

impl Hub {
    fn start() -> Hub {
        let state = Arc::new(HubState {
            repos: Mutex::new(HashMap::new()),
            throttle: Mutex::new(None),
            log: Mutex::new(HubLog::default()),
        });
        let shared = state.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap| {
            let state = shared.clone();
            async move { serve(state, uri, headers) }
        });
        let (base, runtime) = common::serve_on_loopback(app);
        Hub {
            base,
            state,
            _runtime: runtime,
        }
    }

    fn publish(&self, repo: &str, files: Vec<HubFile>) {
        self.state
            .repos
            .lock()
            .unwrap()
            .insert(repo.to_string(), files);
    }

    fn throttle(&self, pause: Option<Duration>) {
        *self.state.throttle.lock().unwrap() = pause;
    }

    fn fetches(&self) -> Vec<(String, u64)> {
        self.state.log.lock().unwrap().fetches.clone()
    }
}

fn serve(state: Arc<HubState>, uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path();
    let not_found = || {
        Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from("not found"))
            .unwrap()
    };
    let repos = state.repos.lock().unwrap();
    // /api/models/{owner}/{name}/tree/{revision}
    if let Some(rest) = path.strip_prefix("/api/models/") {
        let parts: Vec<&str> = rest.split('/').collect();
        let [owner, name, "tree", "main"] = parts.as_slice() else {
            return not_found();
        };
        let Some(files) = repos.get(&format!("{owner}/{name}")) else {
            return not_found();
        };
        let listing: Vec<Value> = files
            .iter()
            .map(|f| {
                let size = f.listed_size.unwrap_or(f.bytes.len() as u64);
                if f.lfs {
                    let sha = f.listed_sha256.clone().unwrap_or_else(|| sha256(&f.bytes));
                    json!({"type": "file", "path": f.path, "size": size,
                           "oid": git_blob(sha.as_bytes()),
                           "lfs": {"oid": sha, "size": size, "pointerSize": 134}})
                } else {
                    json!({"type": "file", "path": f.path, "size": size,
                           "oid": git_blob(&f.bytes)})
                }
            })
            .chain(std::iter::once(
                json!({"type": "directory", "path": "figures", "oid": git_blob(b"x"), "size": 0}),
            ))
            .collect();
        return Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(Value::Array(listing).to_string()))
            .unwrap();
    }
    // /{owner}/{name}/resolve/{revision}/{file}
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let [owner, name, "resolve", "main", file] = parts.as_slice() else {
        return not_found();
    };
    let Some(found) = repos
        .get(&format!("{owner}/{name}"))
        .and_then(|files| files.iter().find(|f| f.path == *file))
        .cloned()
    else {
        return not_found();
    };
    drop(repos);
    let body = found
        .bytes
        .slice(..found.served_len.unwrap_or(found.bytes.len()));
    let total = body.len() as u64;
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok())));
    let probe = range == Some((0, Some(0)));
    if !probe {
        state
            .log
            .lock()
            .unwrap()
            .fetches
            .push((file.to_string(), range.map_or(0, |r| r.0)));
    }
    let mut response = Response::builder()
        .header(header::ETAG, format!("\"{}\"", git_blob(&body)))
        .header(header::ACCEPT_RANGES, "bytes");
    let (start, end) = match range {
        Some((a, b)) if a < total => {
            let end = b.unwrap_or(total - 1).min(total - 1) + 1;
            response = response.status(StatusCode::PARTIAL_CONTENT).header(
                header::CONTENT_RANGE,
                format!("bytes {a}-{}/{total}", end - 1),
            );
            (a, end)
        }
        _ => (0, total),
    };
    let chunk = body.slice(start as usize..end as usize);
    let throttle = if probe || !found.lfs {
        None
    } else {
        *state.throttle.lock().unwrap()
    };
    let stream = futures_util::stream::unfold((chunk, 0usize), move |(bytes, sent)| async move {
        if sent >= bytes.len() {
            return None;
        }
        if let Some(pause) = throttle {
            tokio::time::sleep(pause).await;
        }
        let n = (64 << 10).min(bytes.len() - sent);
        let piece = bytes.slice(sent..sent + n);
        Some((Ok::<_, std::io::Error>(piece), (bytes, sent + n)))
    });
    response
        .header(header::CONTENT_LENGTH, end - start)
        .body(Body::from_stream(stream))
        .unwrap()
}

/// The files of the test checkpoint, read once.
fn checkpoint_files() -> &'static Vec<HubFile> {
    static FILES: OnceLock<Vec<HubFile>> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = made_checkpoint::checkpoint();
        let mut files: Vec<HubFile> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.'))
            .map(|name| HubFile {
                bytes: Bytes::from(std::fs::read(dir.join(&name)).unwrap()),
                lfs: name.ends_with(".safetensors"),
                path: name,
                listed_size: None,
                listed_sha256: None,
                served_len: None,
            })
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        assert!(files.iter().filter(|f| f.lfs).count() >= 2, "two shards");
        files
    })
}

/// The checkpoint with `change` applied to its files.
fn variant(change: impl FnOnce(&mut Vec<HubFile>)) -> Vec<HubFile> {
    let mut files = checkpoint_files().clone();
    change(&mut files);
    files
}

fn file_mut<'a>(files: &'a mut [HubFile], name: &str) -> &'a mut HubFile {
    files.iter_mut().find(|f| f.path == name).unwrap()
}

/// A data folder with a user catalog of checkpoint entries on the test hub, one per fault.
fn data_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut catalog = String::from("version = 1\n");
    for id in [
        "truncated",
        "wrong-digest",
        "no-tokenizer",
        "mamba",
        "no-weights",
        "huge",
        "absent",
        "shard-missing",
    ] {
        catalog.push_str(&format!(
            "[[model]]\nid = \"{id}\"\nname = \"{id}\"\ndescription = \"A fault.\"\n\
             profile = \"code\"\nparameters = 494032768\ncontext = 32768\n\
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

fn installed_files(data: &Path, hub: &Hub) -> Vec<String> {
    common::installed_files(catena_in(data, hub))
}

/// Pulls `id` and expects a failure whose message contains `expected`; nothing is listed.
fn pull_fails(hub: &Hub, data: &Path, id: &str, expected: &str) -> String {
    let output = catena_in(data, hub)
        .args(["models", "pull", id])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{id}: {stderr}");
    assert!(stderr.contains(expected), "{id}: {stderr}");
    assert!(
        !installed_files(data, hub).iter().any(|f| f.starts_with(id)),
        "{id} is listed after a failed pull"
    );
    stderr
}

fn weight_fetches(hub: &Hub, repo_files: &[HubFile]) -> usize {
    let weights: Vec<&str> = repo_files
        .iter()
        .filter(|f| f.lfs)
        .map(|f| f.path.as_str())
        .collect();
    hub.fetches()
        .iter()
        .filter(|(f, _)| weights.contains(&f.as_str()))
        .count()
}

#[test]
fn broken_repositories_fail_clearly_and_list_nothing() {
    let hub = Hub::start();
    let data = data_dir();
    let data = data.path();
    let first_shard = checkpoint_files()
        .iter()
        .find(|f| f.lfs)
        .unwrap()
        .path
        .clone();

    // Refused from the listing or the config, before a weight byte is fetched.
    hub.publish(
        "tester/no-tokenizer",
        variant(|f| f.retain(|f| f.path != "tokenizer.json")),
    );
    pull_fails(&hub, data, "no-tokenizer", "has no tokenizer.json");
    hub.publish("tester/no-weights", variant(|f| f.retain(|f| !f.lfs)));
    pull_fails(&hub, data, "no-weights", "publishes no safetensors weights");
    hub.publish(
        "tester/mamba",
        variant(|f| {
            file_mut(f, "config.json").bytes =
                Bytes::from_static(br#"{"architectures": ["MambaForCausalLM"]}"#)
        }),
    );
    pull_fails(&hub, data, "mamba", "MambaForCausalLM is not supported");
    hub.publish(
        "tester/huge",
        variant(|f| file_mut(f, &first_shard).listed_size = Some(1 << 50)),
    );
    pull_fails(&hub, data, "huge", "free in");
    pull_fails(&hub, data, "absent", "was not found on the hub");
    let last_shard = checkpoint_files()
        .iter()
        .rfind(|f| f.lfs)
        .unwrap()
        .path
        .clone();
    hub.publish(
        "tester/shard-missing",
        variant(|f| f.retain(|f| f.path != last_shard)),
    );
    pull_fails(&hub, data, "shard-missing", &format!("has no {last_shard}"));
    assert_eq!(
        weight_fetches(&hub, checkpoint_files()),
        0,
        "{:?}",
        hub.fetches()
    );

    // Fetched, then refused by the digest check.
    hub.publish(
        "tester/wrong-digest",
        variant(|f| file_mut(f, &first_shard).listed_sha256 = Some("ab".repeat(32))),
    );
    pull_fails(&hub, data, "wrong-digest", "is corrupt");
    hub.publish(
        "tester/truncated",
        variant(|f| {
            let shard = file_mut(f, &first_shard);
            shard.served_len = Some(shard.bytes.len() - 4096);
        }),
    );
    pull_fails(&hub, data, "truncated", "is corrupt");
    // A corrupt download is deleted, not kept for a resume.
    let partial = data.join("models/.checkpoints/truncated/.partial");
    let kept: Vec<_> = std::fs::read_dir(&partial)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        !kept.iter().any(|n| n.to_string_lossy().ends_with(".part")),
        "{kept:?}"
    );
}

/// Runs a pull with `--json` and kills it at the first event `stop_at` accepts; returns the
/// events it printed.
fn pull_until(cmd: &mut Command, stop_at: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut child = common::Reaped(
        cmd.args(["--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let mut events = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let stop = stop_at(&event);
        events.push(event);
        if stop {
            child.0.kill().unwrap();
            child.0.wait().unwrap();
            return events;
        }
    }
    panic!("the pull ended before it was killed: {events:?}");
}

/// Bytes the downloader's saved states in `partial` say are on disk.
fn saved_progress(partial: &Path) -> u64 {
    let Ok(dir) = std::fs::read_dir(partial) else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".part.json"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .map(|state| {
            state["segments"]
                .as_array()
                .map(|segs| segs.iter().filter_map(|s| s["done"].as_u64()).sum::<u64>())
                .unwrap_or(0)
        })
        .sum()
}

fn stage_is(event: &Value, kind: &str, stage: &str) -> bool {
    event["event"] == kind && event["stage"] == stage
}

#[test]
fn an_afm_pulled_from_the_hub_survives_kills_in_every_stage_and_runs_a_code_task() {
    let hub = Hub::start();
    hub.publish(
        "PersonalAILab/AFM-CodeAgent-7B-rl",
        checkpoint_files().clone(),
    );
    let data = data_dir();
    let data = data.path();
    let file = "afm-code-7b-rl-Q4_K_M.gguf";
    let staging = data.join("models/.checkpoints/afm-code-7b-rl");
    let pull = || {
        let mut cmd = catena_in(data, &hub);
        cmd.args(["models", "pull", "afm-code-7b-rl", "--threads", "2"]);
        cmd
    };

    // 1. Killed while downloading, once the downloader has saved some progress.
    hub.throttle(Some(Duration::from_millis(5)));
    let events = pull_until(&mut pull(), |e| {
        stage_is(e, "progress", "download") && saved_progress(&staging.join(".partial")) > 0
    });
    assert!(events.iter().any(|e| stage_is(e, "stage", "download")));
    assert!(!installed_files(data, &hub).contains(&file.to_string()));
    hub.throttle(None);

    // 2. Killed while converting: the download resumed where it stopped.
    let fetched_before = hub.fetches().len();
    let events = pull_until(&mut pull(), |e| {
        stage_is(e, "progress", "convert") && e["done"].as_u64() > Some(64 << 20)
    });
    let resumed = hub.fetches()[fetched_before..]
        .iter()
        .filter(|(f, from)| f.ends_with(".safetensors") && *from > 0)
        .count();
    assert!(resumed > 0, "no ranged resume: {:?}", hub.fetches());
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "note" && e["text"].as_str().unwrap().contains("resuming")),
        "{events:?}"
    );
    assert!(!staging.join("model-F16.gguf").exists(), "a half F16 file");
    assert!(!installed_files(data, &hub).contains(&file.to_string()));

    // 3. Killed while quantising: the conversion ran again from the kept files, nothing was
    //    downloaded again.
    let weights_fetched = weight_fetches(&hub, checkpoint_files());
    let events = pull_until(&mut pull(), |e| stage_is(e, "stage", "quantize"));
    assert!(!events.iter().any(|e| stage_is(e, "stage", "download")));
    assert!(events.iter().any(|e| stage_is(e, "stage", "convert")));
    assert_eq!(weight_fetches(&hub, checkpoint_files()), weights_fetched);
    assert!(staging.join("model-F16.gguf").is_file());
    assert!(!installed_files(data, &hub).contains(&file.to_string()));

    // 4. To the end: quantised from the kept F16 file, installed, the work folder gone.
    let output = pull().args(["--json"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("Licence: Apache-2.0"), "{stderr}");
    let events = common::json_lines(&output);
    assert!(!events.iter().any(|e| stage_is(e, "stage", "convert")));
    let done = events.iter().find(|e| e["event"] == "done").unwrap();
    assert_eq!(done["file"], file);
    assert!(!staging.exists(), "the work folder is left");
    assert!(installed_files(data, &hub).contains(&file.to_string()));
    let record: Value = serde_json::from_slice(
        &std::fs::read(data.join(format!("models/{file}.catena.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(record["catalog_id"], "afm-code-7b-rl");
    assert_eq!(record["profile"], "code");
    let header = catena_gguf::GgufHeader::read(&data.join("models").join(file)).unwrap();
    assert_eq!(header.get_u64("general.file_type"), Some(15), "Q4_K_M");

    // A second pull finds it installed.
    let again = pull().output().unwrap();
    assert!(String::from_utf8_lossy(&again.stderr).contains("Already installed"));

    // The pulled model answers a code task with the sandbox's observation, in its own profile.
    let run = catena_in(data, &hub)
        .args([
            "run",
            "--model",
            "afm-code-7b-rl",
            "--json",
            "--seed",
            "11",
            "--max-tokens",
            "48",
            "--prefill",
            "<plan>compute it</plan>\n<think>use code</think>\n<code>\n```py\nprint(sum(range(1, 101)))\n```\n</code>",
            "What is the sum of the integers from 1 to 100?",
        ])
        .output()
        .unwrap();
    let observation = common::first_observation(&run);
    assert!(observation.contains("5050"), "{observation}");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("profile: code"), "{stderr}");
}

#[test]
fn the_ui_pulls_an_afm_through_catena_serve_stage_by_stage() {
    let hub = Hub::start();
    hub.publish(
        "PersonalAILab/AFM-MHQA-Agent-3B-rl",
        checkpoint_files().clone(),
    );
    let data = data_dir();
    let data = data.path();
    let served = common::serve(catena_in(data, &hub), |cmd| {
        cmd.args(["--ctx-size", "2048", "--sessions", "1"]);
    });
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::blocking::Client::new();
    let downloads = format!("{}/v1/library/downloads", served.base);
    let id = "afm-mhqa-3b-rl:Q8_0";
    let started = http
        .post(&downloads)
        .json(&json!({ "id": id }))
        .send()
        .unwrap();
    assert_eq!(started.status(), 202);
    // Every state the page could have drawn, until the pull ends.
    let mut stages = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    let status = loop {
        let list: Value = http.get(&downloads).send().unwrap().json().unwrap();
        let status = list["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} is not among {list}"));
        if let Some(stage) = status["stage"].as_str()
            && stages.last().map(String::as_str) != Some(stage)
        {
            stages.push(stage.to_string());
        }
        if status["state"] == "done" || status["state"] == "failed" {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status["state"], "done", "{status}");
    assert_eq!(stages, ["download", "convert", "quantize"], "{status}");
    let file = "afm-mhqa-3b-rl-Q8_0.gguf";
    assert!(status["path"].as_str().unwrap().ends_with(file), "{status}");
    assert!(installed_files(data, &hub).contains(&file.to_string()));
    assert!(!data.join("models/.checkpoints/afm-mhqa-3b-rl").exists());
}
