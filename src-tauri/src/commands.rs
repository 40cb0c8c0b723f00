//! The commands the UI invokes: each maps onto one [`catena_service::Service`] call, as the
//! HTTP handlers of `catena serve` do, so the two front ends cannot drift apart. A run's events
//! reach the UI through a Tauri channel, in order, stored ones first.

use crate::backend::{Backend, Loading};
use catena_service::{
    DownloadStatus, ExportRequest, Health, LibraryModels, List, ProfileInfo, RunFeedback,
    ServedModel, ServiceError, SessionRuns, StartRun, StartTraining, StartedRun, ToolStatus,
    TrainingData, TrainingStatus, Vote, VoteRequest,
};
use catena_store::{Feedback, SessionInfo};
use futures_util::StreamExt;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tauri::State;
use tauri::ipc::Channel;

/// An error as the UI receives it: the HTTP status the server would have answered, and the
/// message for the user.
#[derive(Debug, Serialize)]
pub struct CommandError {
    status: u16,
    message: String,
}

impl From<ServiceError> for CommandError {
    fn from(e: ServiceError) -> Self {
        CommandError {
            status: e.kind.http_status(),
            message: e.message,
        }
    }
}

type Reply<T> = Result<T, CommandError>;

/// When the app process started: the reference of the "interactive after" figure.
pub fn started() -> Instant {
    static STARTED: OnceLock<Instant> = OnceLock::new();
    *STARTED.get_or_init(Instant::now)
}

/// The UI has mounted and can be used. Logged with the time since start; with
/// `CATENA_DESKTOP_READY_FILE` set, also written there (the startup benchmark waits for it).
#[tauri::command]
pub fn window_ready() {
    let elapsed = started().elapsed();
    tracing::info!(
        "the window is interactive ({} ms after start)",
        elapsed.as_millis()
    );
    if let Some(path) = std::env::var_os("CATENA_DESKTOP_READY_FILE") {
        let line = json!({"pid": std::process::id(), "interactive_ms": elapsed.as_millis()});
        if let Err(e) = std::fs::write(&path, format!("{line}\n")) {
            tracing::warn!("cannot write the ready file: {e}");
        }
    }
}

/// Health of the model and its worker; while the model loads, `status` is `loading` and
/// `message` says what is happening.
#[tauri::command]
pub fn health(backend: State<'_, Backend>) -> Health {
    match backend.loading() {
        Loading::Ready(service) => service.health(),
        Loading::Starting(message) => Health::Loading { message },
        Loading::Failed(message) => Health::Failed { message },
    }
}

#[tauri::command]
pub async fn profiles(backend: State<'_, Backend>) -> Reply<List<ProfileInfo>> {
    Ok(backend.service().await?.profiles())
}

#[tauri::command]
pub async fn library_models(backend: State<'_, Backend>) -> Reply<LibraryModels> {
    let service = backend.service().await?;
    tauri::async_runtime::spawn_blocking(move || service.library_models())
        .await
        .map_err(|e| ServiceError::internal(format!("listing models failed: {e}")))?
        .map_err(Into::into)
}

/// Each action tool and whether something answers it.
#[tauri::command]
pub async fn tools(backend: State<'_, Backend>) -> Reply<List<ToolStatus>> {
    let service = backend.service().await?;
    tauri::async_runtime::spawn_blocking(move || service.tools())
        .await
        .map_err(|e| ServiceError::internal(format!("checking the tools failed: {e}")).into())
}

/// The `[web]` settings, without their keys.
#[tauri::command]
pub async fn web_settings(backend: State<'_, Backend>) -> Reply<catena_service::WebSettingsView> {
    Ok(backend.service().await?.web_settings()?)
}

/// Changes and saves the `[web]` settings.
#[tauri::command]
pub async fn update_web_settings(
    backend: State<'_, Backend>,
    update: catena_service::WebSettingsUpdate,
) -> Reply<catena_service::WebSettingsView> {
    Ok(backend.service().await?.update_web_settings(update)?)
}

/// Starts downloading a catalog model in the background.
#[tauri::command]
pub async fn pull_model(backend: State<'_, Backend>, id: String) -> Reply<DownloadStatus> {
    Ok(backend.service().await?.pull_model(&id)?)
}

/// A checkpoint folder the user chose in the app (the HTTP server has no such route: only the
/// person at the desktop names folders to read).
#[derive(serde::Deserialize)]
pub struct ImportRequest {
    dir: std::path::PathBuf,
    name: String,
    quant: String,
    profile: Option<String>,
}

/// Starts converting and installing a Hugging Face checkpoint folder in the background.
#[tauri::command]
pub async fn import_folder(
    backend: State<'_, Backend>,
    request: ImportRequest,
) -> Reply<DownloadStatus> {
    let Some(quant) = catena_engine_api::QuantType::parse(&request.quant) else {
        return Err(ServiceError::invalid(format!(
            "{} is not one of Q4_K_M, Q5_K_M, Q8_0, F16.",
            request.quant
        ))
        .param("quant")
        .into());
    };
    let profile = request.profile.filter(|p| !p.is_empty());
    Ok(backend
        .service()
        .await?
        .import_folder(catena_import::FolderImport {
            dir: request.dir,
            name: request.name.trim().to_string(),
            quant,
            profile,
            threads: 0,
        })?)
}

#[tauri::command]
pub async fn downloads(backend: State<'_, Backend>) -> Reply<List<DownloadStatus>> {
    Ok(backend.service().await?.downloads())
}

/// Serves another installed model from now on.
#[tauri::command]
pub async fn serve_model(backend: State<'_, Backend>, id: String) -> Reply<ServedModel> {
    Ok(backend.service().await?.serve_model(&id).await?)
}

/// Starts `catena-desktop train sft` as a child process.
#[tauri::command]
pub async fn start_training(
    backend: State<'_, Backend>,
    request: StartTraining,
) -> Reply<TrainingStatus> {
    Ok(backend.service().await?.start_training(request)?)
}

#[tauri::command]
pub async fn training_data(backend: State<'_, Backend>) -> Reply<TrainingData> {
    Ok(backend.service().await?.training_data()?)
}

#[tauri::command]
pub async fn training_runs(backend: State<'_, Backend>) -> Reply<List<TrainingStatus>> {
    Ok(backend.service().await?.training_runs())
}

/// A training run with its progress events from index `from` on.
#[tauri::command]
pub async fn training_run(
    backend: State<'_, Backend>,
    id: String,
    from: usize,
) -> Reply<TrainingStatus> {
    Ok(backend.service().await?.training_run(&id, from)?)
}

#[tauri::command]
pub async fn stop_training(backend: State<'_, Backend>, id: String) -> Reply<TrainingStatus> {
    Ok(backend.service().await?.stop_training(&id).await?)
}

#[tauri::command]
pub async fn start_run(backend: State<'_, Backend>, options: StartRun) -> Reply<StartedRun> {
    Ok(backend.service().await?.start_run(options).await?)
}

#[tauri::command]
pub async fn vote(backend: State<'_, Backend>, request: VoteRequest) -> Reply<Vote> {
    Ok(backend.service().await?.vote(request).await?)
}

/// The runs the UI follows, so it can stop following one.
#[derive(Default)]
pub struct Follows {
    next: AtomicU64,
    tasks: Mutex<HashMap<u64, tauri::async_runtime::JoinHandle<()>>>,
}

/// Sends the run's events after `after` to `on_event` as `{seq, event}`, then `{end: true}` when
/// the run has ended (or `{end: true, error}`). Returns an id for [`unfollow_run`].
#[tauri::command]
pub async fn follow_run(
    backend: State<'_, Backend>,
    follows: State<'_, Follows>,
    run_id: String,
    after: Option<u64>,
    on_event: Channel<Value>,
) -> Reply<u64> {
    let events = backend
        .service()
        .await?
        .follow(&run_id, after.unwrap_or(0))
        .await?;
    let id = follows.next.fetch_add(1, Ordering::Relaxed);
    let task = tauri::async_runtime::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    let _ = on_event.send(json!({"end": true, "error": error.message}));
                    return;
                }
            };
            if on_event
                .send(json!({"seq": event.seq, "event": event.data}))
                .is_err()
            {
                // The page went away (reloaded or closed): nobody is listening.
                return;
            }
        }
        let _ = on_event.send(json!({"end": true}));
    });
    let mut tasks = follows.tasks.lock();
    tasks.retain(|_, task| !task.inner().is_finished());
    tasks.insert(id, task);
    Ok(id)
}

#[tauri::command]
pub fn unfollow_run(follows: State<'_, Follows>, follow_id: u64) {
    let task = follows.tasks.lock().remove(&follow_id);
    if let Some(task) = task {
        task.abort();
    }
}

#[tauri::command]
pub async fn cancel_run(backend: State<'_, Backend>, run_id: String) -> Reply<()> {
    Ok(backend.service().await?.cancel(&run_id).await?)
}

/// The user's answer to a run's question: may the external tool's call run?
#[tauri::command]
pub async fn answer_approval(
    backend: State<'_, Backend>,
    run_id: String,
    ask: u64,
    allow: bool,
) -> Reply<()> {
    Ok(backend
        .service()
        .await?
        .answer_approval(&run_id, ask, allow)?)
}

#[tauri::command]
pub async fn rate_run(
    backend: State<'_, Backend>,
    run_id: String,
    rating: Option<Feedback>,
) -> Reply<RunFeedback> {
    Ok(backend
        .service()
        .await?
        .feedback(&run_id, rating, None)
        .await?)
}

#[tauri::command]
pub async fn sessions(
    backend: State<'_, Backend>,
    search: Option<String>,
) -> Reply<List<SessionInfo>> {
    Ok(backend
        .service()
        .await?
        .sessions(search.as_deref(), None)
        .await?)
}

#[tauri::command]
pub async fn session(backend: State<'_, Backend>, id: String) -> Reply<SessionRuns> {
    Ok(backend.service().await?.session(&id).await?)
}

#[tauri::command]
pub async fn delete_session(backend: State<'_, Backend>, id: String) -> Reply<()> {
    Ok(backend.service().await?.delete_session(&id).await?)
}

/// Writes the export into the user's Downloads folder (a new file, never over an old one) and
/// returns its path: a web view has no download manager to hand a file to. The runs go to the
/// file as they are read; a file the export could not finish is removed.
#[tauri::command]
pub async fn export_data(
    backend: State<'_, Backend>,
    format: String,
    feedback: String,
) -> Reply<String> {
    let request = ExportRequest::parse(Some(&format), Some(&feedback))?;
    let service = backend.service().await?;
    let folder = downloads_folder();
    let cannot_save = |e: std::io::Error| {
        ServiceError::internal(format!(
            "cannot save the export in {}: {e}",
            folder.display()
        ))
    };
    let (file, path) = create_new_file(&folder, request.file_name).map_err(cannot_save)?;
    let written = service
        .export(request, std::io::BufWriter::new(file))
        .await
        .and_then(|(out, _)| {
            let file = out.into_inner().map_err(|e| cannot_save(e.into_error()))?;
            file.sync_all().map_err(cannot_save)
        });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&path);
        return Err(e.into());
    }
    Ok(path.display().to_string())
}

fn downloads_folder() -> PathBuf {
    directories::UserDirs::new()
        .and_then(|dirs| {
            dirs.download_dir()
                .map(Path::to_path_buf)
                .or_else(|| Some(dirs.home_dir().to_path_buf()))
        })
        .unwrap_or_else(std::env::temp_dir)
}

/// `name` in `folder`, or `stem-2.ext`, `stem-3.ext`, ... when taken; created exclusively so an
/// existing file is never replaced.
fn create_new_file(folder: &Path, name: &str) -> std::io::Result<(std::fs::File, PathBuf)> {
    std::fs::create_dir_all(folder)?;
    let (stem, extension) = name.rsplit_once('.').unwrap_or((name, ""));
    for n in 1..10_000 {
        let candidate = match (n, extension) {
            (1, _) => name.to_string(),
            (_, "") => format!("{stem}-{n}"),
            _ => format!("{stem}-{n}.{extension}"),
        };
        let path = folder.join(candidate);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("too many exports with this name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_never_replace_an_earlier_file() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("catena-export-{}", std::process::id()));
        let (mut file, first) = create_new_file(&dir, "catena-sft.jsonl").unwrap();
        file.write_all(b"one").unwrap();
        let (mut file, second) = create_new_file(&dir, "catena-sft.jsonl").unwrap();
        file.write_all(b"two").unwrap();
        assert_eq!(first.file_name().unwrap(), "catena-sft.jsonl");
        assert_eq!(second.file_name().unwrap(), "catena-sft-2.jsonl");
        assert_eq!(std::fs::read(&first).unwrap(), b"one");
        assert_eq!(std::fs::read(&second).unwrap(), b"two");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
