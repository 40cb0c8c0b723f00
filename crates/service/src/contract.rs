//! What the service answers, as types: the server serialises them to JSON in its handlers and the
//! desktop app in its commands, and the UI's TypeScript types are generated from them (ts-rs;
//! `typescript.rs` holds the list and the drift check). A status is an enum here, so the three
//! places that used to spell it (service, desktop app, UI) cannot disagree.

use catena_hub::listing::Row;
use catena_protocol::Tag;
use catena_store::{Feedback, RunRecord};
use serde::Serialize;
use std::path::PathBuf;
use ts_rs::TS;

/// A list in the shape of OpenAI's list objects (`{"object": "list", "data": [...]}`), which
/// every list route of the server sends.
#[derive(Debug, Clone, Serialize, TS)]
pub struct List<T> {
    #[ts(type = "\"list\"")]
    pub object: &'static str,
    pub data: Vec<T>,
}

impl<T> List<T> {
    pub fn of(data: Vec<T>) -> List<T> {
        List {
            object: "list",
            data,
        }
    }
}

/// Whether a model is there to answer (`GET /health`, the desktop app's `health` command). The
/// desktop app opens its window before the model has loaded, so it can also be loading or have
/// failed to load; `catena serve` answers only once the model is loaded.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Health {
    Ok(Serving),
    /// `message` says what is being done.
    Loading {
        message: String,
    },
    /// `message` says why the model could not be loaded.
    Failed {
        message: String,
    },
}

/// The served model, the queue and the worker process.
#[derive(Debug, Clone, Serialize, TS)]
pub struct Serving {
    pub model: String,
    pub architecture: String,
    /// The adapter Catena ships for the served model (the default model's), when applied.
    pub adapter: Option<&'static str>,
    /// The context window each conversation gets, in tokens: a prompt and its answer together
    /// must fit in it (coding agents send prompts of 10,000 tokens and more).
    pub context_size: u32,
    pub version: &'static str,
    pub uptime_s: u64,
    /// Requests waiting for or using the model.
    pub in_flight: usize,
    pub queue_limit: usize,
    pub live_runs: usize,
    pub worker: WorkerHealth,
}

/// The model's worker process.
#[derive(Debug, Clone, Copy, Serialize, TS)]
pub struct WorkerHealth {
    pub pid: u32,
    pub alive: bool,
    pub restarts: u32,
}

/// How an editor or a coding agent reaches `catena serve` (`GET /v1/connection`, read by the
/// UI's page for connecting an editor). Only the server has it: the desktop app runs no HTTP
/// server of its own.
#[derive(Debug, Clone, Serialize, TS)]
pub struct Connection {
    /// The OpenAI-compatible API's base URL at the address the server listens on, e.g.
    /// `http://127.0.0.1:8420/v1` (loopback when it listens on every address).
    pub base_url: String,
    /// The key requests must carry as `Authorization: Bearer <key>`, when the server was started
    /// with one (`--api-key`, `CATENA_API_KEY`); `null` when it takes requests without. Sent only
    /// to a caller that already holds the key or the web UI's launch token (which may do all the
    /// key may while this server runs), so the user can hand it to an editor; the page shows it
    /// only when asked.
    pub api_key: Option<String>,
}

/// A built-in prompt profile, as the run form offers it.
#[derive(Debug, Clone, Serialize, TS)]
#[ts(rename = "Profile")]
pub struct ProfileInfo {
    pub name: String,
    pub description: String,
    /// The tools it gives a run.
    pub tools: Vec<Tag>,
    pub max_tool_calls: u32,
}

/// The models page: every catalog file and installed model, and the one being served.
#[derive(Debug, Clone, Serialize, TS)]
pub struct LibraryModels {
    #[ts(type = "\"list\"")]
    pub object: &'static str,
    /// The served model's file.
    pub serving: PathBuf,
    pub data: Vec<Row>,
}

/// The model served after a switch.
#[derive(Debug, Clone, Serialize, TS)]
pub struct ServedModel {
    pub model: String,
    pub architecture: String,
    pub path: PathBuf,
}

/// The files a training run may read: the exports folder's, by name (a request names a file,
/// never a path).
#[derive(Debug, Clone, Serialize, TS)]
pub struct TrainingData {
    pub folder: PathBuf,
    pub data: Vec<DataFile>,
}

/// One file of the exports folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
pub struct DataFile {
    pub name: String,
    pub bytes: u64,
}

/// A stored run, with whether it is still running in this process.
#[derive(Debug, Clone, Serialize, TS)]
pub struct RunView {
    #[serde(flatten)]
    pub run: RunRecord,
    pub live: bool,
}

/// A run's rating after it was set or cleared.
#[derive(Debug, Clone, Serialize, TS)]
pub struct RunFeedback {
    pub id: String,
    pub feedback: Option<Feedback>,
    pub feedback_note: Option<String>,
}

/// A session's runs, oldest first.
#[derive(Debug, Clone, Serialize, TS)]
pub struct SessionRuns {
    pub id: String,
    pub runs: Vec<RunRecord>,
}

/// Where a run just started stands: always queued, since the model takes requests in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum StartedStatus {
    Queued,
}

/// A run that was queued.
#[derive(Debug, Clone, Serialize, TS)]
pub struct StartedRun {
    /// The first run (the only one unless the request asked for samples).
    pub id: String,
    pub session_id: String,
    pub status: StartedStatus,
    /// Every run the request started, in seed order: `[id]` for one.
    pub samples: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The shapes the UI reads: `status` names the variant, the served model's fields beside it.
    #[test]
    fn health_keeps_its_wire_shape() {
        let loading = Health::Loading {
            message: "loading the model".into(),
        };
        assert_eq!(
            serde_json::to_value(&loading).unwrap(),
            json!({"status": "loading", "message": "loading the model"})
        );
        let ok = Health::Ok(Serving {
            model: "m".into(),
            architecture: "qwen2".into(),
            adapter: None,
            context_size: 8192,
            version: "1.0.0",
            uptime_s: 3,
            in_flight: 1,
            queue_limit: 64,
            live_runs: 0,
            worker: WorkerHealth {
                pid: 42,
                alive: true,
                restarts: 0,
            },
        });
        assert_eq!(
            serde_json::to_value(&ok).unwrap(),
            json!({
                "status": "ok",
                "model": "m",
                "architecture": "qwen2",
                "adapter": null,
                "context_size": 8192,
                "version": "1.0.0",
                "uptime_s": 3,
                "in_flight": 1,
                "queue_limit": 64,
                "live_runs": 0,
                "worker": {"pid": 42, "alive": true, "restarts": 0},
            })
        );
    }

    #[test]
    fn lists_and_started_runs_keep_their_wire_shape() {
        let list = List::of(vec![DataFile {
            name: "a.jsonl".into(),
            bytes: 7,
        }]);
        assert_eq!(
            serde_json::to_value(&list).unwrap(),
            json!({"object": "list", "data": [{"name": "a.jsonl", "bytes": 7}]})
        );
        let started = StartedRun {
            id: "r".into(),
            session_id: "s".into(),
            status: StartedStatus::Queued,
            samples: vec!["r".into()],
        };
        assert_eq!(
            serde_json::to_value(&started).unwrap(),
            json!({"id": "r", "session_id": "s", "status": "queued", "samples": ["r"]})
        );
    }
}
