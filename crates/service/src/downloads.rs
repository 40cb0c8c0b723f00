//! Model downloads started from a UI: each runs as a task of its own while the model keeps
//! serving, and its progress is kept here for the UI to poll. The download itself (ranged,
//! resumable, verified by sha256 before it is listed) is `models::download`'s.

use crate::ServiceError;
use catena_hub::config::Paths;
use catena_hub::download::{self, DownloadEvent, DownloadOptions};
use catena_hub::pull::{self, PullPlan};
use parking_lot::{Mutex, MutexGuard};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Where one download stands.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DownloadStatus {
    /// The catalog reference it was started with.
    pub id: String,
    /// `running`, `verifying`, `done` or `failed`.
    pub state: &'static str,
    pub done_bytes: u64,
    pub total_bytes: Option<u64>,
    /// The last retry or restart, while running; the reason, when failed.
    pub message: Option<String>,
    /// The installed file, when done.
    pub path: Option<PathBuf>,
}

/// The downloads of this process, newest last.
#[derive(Default, Clone)]
pub struct Downloads {
    table: Arc<Mutex<BTreeMap<String, DownloadStatus>>>,
}

impl Downloads {
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
        let status = DownloadStatus {
            id: reference.to_string(),
            state: "running",
            done_bytes: 0,
            total_bytes: None,
            message: None,
            path: None,
        };
        {
            let mut table = self.lock();
            if table
                .get(reference)
                .is_some_and(|s| matches!(s.state, "running" | "verifying"))
            {
                return Err(ServiceError::conflict(format!(
                    "`{reference}` is already downloading."
                )));
            }
            table.insert(reference.to_string(), status.clone());
        }
        let downloads = self.clone();
        let paths = paths.clone();
        let id = reference.to_string();
        tokio::spawn(async move {
            let outcome = downloads.fetch(&paths, &id, plan).await;
            downloads.update(&id, |s| match outcome {
                Ok(path) => {
                    s.state = "done";
                    s.message = None;
                    s.path = Some(path);
                }
                Err(message) => {
                    tracing::warn!(model = %id, "download failed: {message}");
                    s.state = "failed";
                    s.message = Some(message);
                }
            });
        });
        Ok(status)
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
                            s.state = "verifying";
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
        }
    }
}
