//! Model downloads started from a UI: each runs as a task of its own while the model keeps
//! serving, and its progress is kept here for the UI to poll. The download itself (ranged,
//! resumable, verified by sha256 before it is listed) is catena-hub's; a checkpoint pull and a
//! folder import (fetch, convert, quantise) are catena-import's, reported stage by stage.

use crate::ServiceError;
use catena_hub::config::Paths;
use catena_hub::download::{self, DownloadEvent, DownloadOptions};
use catena_hub::pull::{self, CheckpointPlan, PullPlan};
use catena_import::{ImportEvent, ImportSink, Stage};
use catena_worker::WorkerCommand;
use parking_lot::{Mutex, MutexGuard};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Where one download stands.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum DownloadState {
    Running,
    Verifying,
    Done,
    Failed,
}

impl DownloadState {
    fn active(self) -> bool {
        matches!(self, DownloadState::Running | DownloadState::Verifying)
    }
}

/// One download or import, as the UI shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, ts_rs::TS)]
pub struct DownloadStatus {
    /// The catalog reference it was started with (or the imported model's name).
    pub id: String,
    pub state: DownloadState,
    /// For checkpoints: the stage running (download, convert, quantize); the bytes are that
    /// stage's.
    pub stage: Option<Stage>,
    pub done_bytes: u64,
    pub total_bytes: Option<u64>,
    /// The last retry or restart, while running; the reason, when failed.
    pub message: Option<String>,
    /// The installed file, when done.
    pub path: Option<PathBuf>,
}

/// The downloads of this process, newest last.
#[derive(Clone)]
pub struct Downloads {
    table: Arc<Mutex<BTreeMap<String, DownloadStatus>>>,
    /// The child process llama.cpp's quantiser runs in: it aborts on some checkpoints, which
    /// must cost the download, not the server.
    quantizer: WorkerCommand,
}

impl Downloads {
    pub fn new(quantizer: WorkerCommand) -> Downloads {
        Downloads {
            table: Arc::default(),
            quantizer,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, DownloadStatus>> {
        self.table.lock()
    }

    pub fn list(&self) -> Vec<DownloadStatus> {
        self.lock().values().cloned().collect()
    }

    fn update(&self, id: &str, change: impl FnOnce(&mut DownloadStatus)) {
        if let Some(status) = self.lock().get_mut(id) {
            change(status);
        }
    }

    /// Starts fetching catalog model `reference` (needs a Tokio runtime); refuses a second
    /// download of the same model while one runs.
    pub fn start(&self, paths: &Paths, reference: &str) -> Result<DownloadStatus, ServiceError> {
        let reference = reference.trim();
        if reference.is_empty() {
            return Err(ServiceError::invalid("Name a catalog model to download.").param("id"));
        }
        let (plan, _note) = pull::plan(paths, reference, None, None, None)
            .map_err(|e| ServiceError::invalid(e.to_string()).param("id"))?;
        let status = self.register(reference)?;
        let downloads = self.clone();
        let paths = paths.clone();
        let id = reference.to_string();
        tokio::spawn(async move {
            let outcome = downloads.fetch(&paths, &id, plan).await;
            downloads.finish(&id, outcome);
        });
        Ok(status)
    }

    /// Starts importing the Hugging Face checkpoint in `request.dir` (the desktop app's "import a
    /// folder"), listed under the model's name while it runs.
    pub fn start_import(
        &self,
        paths: &Paths,
        request: catena_import::FolderImport,
    ) -> Result<DownloadStatus, ServiceError> {
        if !catena_protocol::names::is_plain_name(&request.name) {
            return Err(ServiceError::invalid(format!(
                "The name `{}` must be letters, digits, `-`, `_` and `.`.",
                request.name
            ))
            .param("name"));
        }
        if !request.dir.is_dir() {
            return Err(ServiceError::invalid(format!(
                "{} is not a folder.",
                request.dir.display()
            ))
            .param("dir"));
        }
        let key = request.name.clone();
        let status = self.register(&key)?;
        let downloads = self.clone();
        let paths = paths.clone();
        tokio::spawn(async move {
            let events = downloads.import_events(&request.name);
            let quantizer = downloads.quantizer.clone();
            let outcome = tokio::task::spawn_blocking(move || {
                catena_import::import_folder(&paths, &request, &quantizer, &events)
                    .map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| format!("the import task failed: {e}"))
            .and_then(|r| r);
            downloads.finish(&key, outcome);
        });
        Ok(status)
    }

    /// Lists a new job as running; refuses a second one of the same key while one runs.
    fn register(&self, key: &str) -> Result<DownloadStatus, ServiceError> {
        let status = DownloadStatus {
            id: key.to_string(),
            state: DownloadState::Running,
            stage: None,
            done_bytes: 0,
            total_bytes: None,
            message: None,
            path: None,
        };
        let mut table = self.lock();
        if table.get(key).is_some_and(|s| s.state.active()) {
            return Err(ServiceError::conflict(format!(
                "`{key}` is already downloading."
            )));
        }
        table.insert(key.to_string(), status.clone());
        Ok(status)
    }

    fn finish(&self, key: &str, outcome: Result<PathBuf, String>) {
        self.update(key, |s| match outcome {
            Ok(path) => {
                s.state = DownloadState::Done;
                s.message = None;
                s.path = Some(path);
            }
            Err(message) => {
                tracing::warn!(model = %key, "download failed: {message}");
                s.state = DownloadState::Failed;
                s.message = Some(message);
            }
        });
    }

    /// Import events as the status of `key`: each stage restarts the byte counts.
    fn import_events(&self, key: &str) -> ImportSink {
        let downloads = self.clone();
        let key = key.to_string();
        Arc::new(move |event| {
            downloads.update(&key, |s| match event {
                ImportEvent::Stage {
                    stage, total, done, ..
                } => {
                    s.stage = Some(stage);
                    s.total_bytes = total;
                    s.done_bytes = done;
                }
                ImportEvent::Progress { done, total, .. } => {
                    s.done_bytes = done;
                    s.total_bytes = total.or(s.total_bytes);
                }
                ImportEvent::Note { text } => s.message = Some(text),
                ImportEvent::Done { .. } => {}
            })
        })
    }

    /// Fetches, converts and installs a checkpoint (on a blocking thread: conversion and
    /// quantisation are long CPU work; quantisation in a child process).
    async fn pull_checkpoint(
        &self,
        paths: &Paths,
        key: &str,
        plan: CheckpointPlan,
    ) -> Result<PathBuf, String> {
        let request = catena_import::CheckpointPull::from_plan(plan).map_err(|e| e.to_string())?;
        let events = self.import_events(key);
        let paths = paths.clone();
        let options = catena_import::PullOptions {
            download: DownloadOptions::default(),
            threads: 0,
            quantizer: self.quantizer.clone(),
        };
        tokio::task::spawn_blocking(move || {
            catena_import::pull_checkpoint(&paths, &request, &options, &events)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| format!("the pull task failed: {e}"))?
    }

    async fn fetch(&self, paths: &Paths, id: &str, plan: PullPlan) -> Result<PathBuf, String> {
        match plan {
            PullPlan::Installed(path) => Ok(path),
            PullPlan::Registry(asset) => {
                let paths = paths.clone();
                tokio::task::spawn_blocking(move || {
                    catena_hub::assets::ensure(asset, &paths, &mut |_| {})
                        .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| format!("the download task failed: {e}"))?
            }
            PullPlan::Download(request) => {
                let downloads = self.clone();
                let key = id.to_string();
                let events: download::EventSink = Arc::new(move |event| {
                    downloads.update(&key, |s| match event {
                        DownloadEvent::Started {
                            total,
                            resumed_from,
                            ..
                        } => {
                            s.total_bytes = total;
                            s.done_bytes = resumed_from;
                        }
                        DownloadEvent::Bytes { done, total } => {
                            s.done_bytes = done;
                            s.total_bytes = total.or(s.total_bytes);
                        }
                        DownloadEvent::Retrying {
                            attempt,
                            max,
                            cause,
                            ..
                        } => {
                            s.message = Some(format!("retrying ({attempt}/{max}): {cause}"));
                        }
                        DownloadEvent::Restarting { reason } => {
                            s.message = Some(format!("starting again: {reason}"));
                        }
                        DownloadEvent::Verifying { total } => {
                            s.state = DownloadState::Verifying;
                            s.done_bytes = total;
                        }
                        DownloadEvent::Done { .. } => {}
                    });
                });
                download::download(paths, &request, &DownloadOptions::default(), events)
                    .await
                    .map(|installed| installed.path)
                    .map_err(|e| e.to_string())
            }
            PullPlan::Checkpoint(plan) => self.pull_checkpoint(paths, id, plan).await,
        }
    }
}
