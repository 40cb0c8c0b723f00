//! What Catena does for a user interface, whatever carries it: start an agent run, follow its
//! events (stored ones first, then live), cancel and rate it, list, read, delete and export
//! sessions, list models, report health. `catena serve` maps these onto HTTP (catena-server), the
//! desktop app onto Tauri commands and channels; neither adds behaviour of its own.

mod approvals;
mod contract;
mod downloads;
mod error;
mod inference;
mod live;
mod sandbox;
mod tool_status;
mod training;
#[cfg(test)]
mod typescript;
mod vote;
mod web;

pub use approvals::{APPROVAL_TIMEOUT, McpHost};
pub use catena_worker::{RenderedPrompt, TemplateError};
pub use contract::{
    Connection, DataFile, Health, LibraryModels, List, ProfileInfo, RunFeedback, RunView,
    ServedModel, Serving, SessionRuns, StartedRun, StartedStatus, TrainingData, WorkerHealth,
};
pub use downloads::{DownloadState, DownloadStatus};
pub use error::{ErrorKind, ServiceError};
pub use inference::{
    ChatEvent, ChatJob, ChatUsage, FinishReason, InferenceConfig, ServedTemplate,
    load_chat_template,
};
pub use sandbox::{WORKSPACE_GUEST_PATH, Workspace};
pub use tool_status::{
    KeyName, KeyState, KeyStates, ToolStatus, WebSettingsUpdate, WebSettingsView, tool_status,
    update_web_settings, web_settings_view,
};
pub use training::{StartTraining, TrainingStatus};
pub use vote::{Vote, VoteChain, VoteGroup, VoteRequest};
pub use web::{WebToolsError, add_web_tools, web_settings};

use crate::downloads::Downloads;
use crate::inference::{AgentJob, Inference, Job, SwitchJob};
use crate::live::LiveRuns;
use crate::training::Training;
use catena_agent::{Budgets, Decoding};
use catena_chat_format::{TemplateSource, ToolSpec, Turn};
use catena_engine_api::{EngineError, SamplingParams};
use catena_protocol::Profile;
use catena_store::{
    ExportFormat, ExportStats, Feedback, FeedbackFilter, NewRun, RunEnd, RunKind, SessionInfo,
    Store, StoredEvent,
};
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::broadcast::error::RecvError;
use ts_rs::TS;

/// Tokens a run may generate when the request does not say.
const DEFAULT_MAX_TOKENS: usize = 8192;

/// The model, the store and the live runs, shared by every request.
pub struct Service {
    inference: Inference,
    store: Arc<Store>,
    live: Arc<LiveRuns>,
    started: Instant,
    paths: catena_hub::config::Paths,
    downloads: Downloads,
    training: Training,
    /// The external MCP servers agent runs may call.
    mcp_host: Option<McpHost>,
}

/// A run to start. Catena's own API: a field it does not know is an error (a misspelt budget
/// would otherwise be dropped without a word).
#[derive(Debug, Default, Deserialize, TS)]
#[serde(deny_unknown_fields)]
#[ts(rename = "RunOptions", optional_fields)]
pub struct StartRun {
    pub task: String,
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub prefill: Option<String>,
    /// Continue an existing session.
    #[serde(default)]
    pub session_id: Option<String>,
    pub max_tool_calls: Option<u32>,
    pub max_tokens: Option<usize>,
    /// Seconds.
    pub max_time: Option<f64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub seed: Option<u32>,
    /// Let the model write freely instead of holding its chain to the protocol's grammar.
    #[serde(default)]
    pub free: Option<bool>,
    /// How many chains of the task to run, 1 to [`MAX_SAMPLES`]: each is a run of its own in
    /// one session, seeds `seed` to `seed + samples - 1`, for [`Service::vote`] to compare.
    /// More than one needs a temperature above 0 (greedy chains would all be the same).
    #[serde(default)]
    pub samples: Option<u32>,
}

/// The most chains one request may start: each holds a lane's context while it runs.
pub const MAX_SAMPLES: u32 = 16;

/// The settings an agent run was started with, kept with its stored record.
#[derive(Serialize)]
struct AgentRunOptions<'a> {
    temperature: f32,
    top_p: f32,
    top_k: i32,
    seed: u32,
    max_tool_calls: u32,
    max_tokens: usize,
    max_time: Option<f64>,
    prefill: Option<&'a str>,
    free: bool,
    /// How many runs of the task were started together, when more than one.
    #[serde(skip_serializing_if = "Option::is_none")]
    samples: Option<u32>,
}

/// One run recorded and queued.
struct QueuedRun {
    id: String,
    session_id: String,
}

/// An export asked for: which runs in which format, and how the result is named for saving.
#[derive(Debug, Clone, Copy)]
pub struct ExportRequest {
    format: ExportFormat,
    filter: FeedbackFilter,
    pub content_type: &'static str,
    pub file_name: &'static str,
}

impl ExportRequest {
    /// `format` is `sft` or `alpaca` (`sft` when not given), `feedback` one of `any` (the
    /// default), `good`, `bad`, `rated`, `unrated`.
    pub fn parse(format: Option<&str>, feedback: Option<&str>) -> Result<Self, ServiceError> {
        let (format, content_type, file_name) = match format.unwrap_or("sft") {
            "sft" => (
                ExportFormat::Sft,
                "application/x-ndjson",
                "catena-sft.jsonl",
            ),
            "alpaca" => (
                ExportFormat::Alpaca,
                "application/json",
                "catena-alpaca.json",
            ),
            other => {
                return Err(ServiceError::invalid(format!(
                    "Unknown export format `{other}` (sft or alpaca)."
                ))
                .param("format"));
            }
        };
        let filter = match feedback.unwrap_or("any") {
            "any" => FeedbackFilter::Any,
            "good" => FeedbackFilter::Good,
            "bad" => FeedbackFilter::Bad,
            "rated" => FeedbackFilter::Rated,
            "unrated" => FeedbackFilter::Unrated,
            other => {
                return Err(ServiceError::invalid(format!(
                    "Unknown feedback filter `{other}` (any, good, bad, rated, unrated)."
                ))
                .param("feedback"));
            }
        };
        Ok(ExportRequest {
            format,
            filter,
            content_type,
            file_name,
        })
    }
}

impl Service {
    /// Starts the model worker (waiting for it to load the model, so a bad model fails here).
    pub fn start(config: InferenceConfig, store: Arc<Store>) -> Result<Service, EngineError> {
        let live = Arc::new(LiveRuns::default());
        let paths = config.paths.clone();
        // The trainer is the same program as the worker (`catena` or `catena-desktop`).
        let training = Training::new(config.worker.program.clone(), paths.clone());
        // Downloads quantise in a child of the same program too (`worker`), never in the server.
        let downloads = Downloads::new(config.worker.clone());
        let mcp_host = config.mcp_host.clone();
        let inference = Inference::start(config, store.clone(), live.clone())?;
        Ok(Service {
            inference,
            store,
            live,
            started: Instant::now(),
            paths,
            downloads,
            training,
            mcp_host,
        })
    }

    /// The served model's name for clients.
    pub fn model_id(&self) -> String {
        self.inference.model_id()
    }

    /// The store of runs, sessions and Responses API conversations.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The served model's chat template (for requests with tools), or why it cannot be used.
    pub fn chat_template(&self) -> ServedTemplate {
        self.inference.serving().template
    }

    /// Renders a conversation with its tools through the served model's chat template, in a
    /// process of its own ([`Inference::render_template`]); blocking.
    pub fn render_template(
        &self,
        template: &TemplateSource,
        turns: Vec<Turn>,
        tools: Vec<ToolSpec>,
    ) -> Result<RenderedPrompt, TemplateError> {
        self.inference.render_template(template, turns, tools)
    }

    /// Queues a chat completion (the OpenAI API); its events arrive on the job's channel.
    pub fn chat(&self, job: ChatJob) -> Result<(), ServiceError> {
        self.inference.submit(Job::Chat(job))
    }

    /// Jobs waiting for or using the model.
    pub fn in_flight(&self) -> usize {
        self.inference.in_flight()
    }

    /// Asks every live run to stop (shutdown).
    pub fn cancel_all(&self) {
        self.live.cancel_all();
    }

    /// The model, the queue and the worker process.
    pub fn health(&self) -> Health {
        let serving = self.inference.serving();
        let worker = &self.inference.worker;
        Health::Ok(Serving {
            model: serving.model_id,
            architecture: serving.info.architecture,
            adapter: serving.adapter,
            context_size: serving.context_size,
            version: env!("CARGO_PKG_VERSION"),
            uptime_s: self.started.elapsed().as_secs(),
            in_flight: self.inference.in_flight(),
            queue_limit: self.inference.queue_limit(),
            live_runs: self.live.count(),
            worker: WorkerHealth {
                pid: worker.pid(),
                alive: worker.alive(),
                restarts: worker.restarts(),
            },
        })
    }

    /// The built-in prompt profiles.
    pub fn profiles(&self) -> List<ProfileInfo> {
        List::of(
            Profile::builtin_names()
                .filter_map(|name| Profile::builtin(name).ok())
                .map(|p| ProfileInfo {
                    name: p.name,
                    description: p.description,
                    tools: p.tools,
                    max_tool_calls: p.max_tool_calls,
                })
                .collect(),
        )
    }

    /// Each action tool with whether something answers it on this machine, as a run started
    /// now would have it. Reads files: call it off the async threads.
    pub fn tools(&self) -> List<ToolStatus> {
        List::of(tool_status(&self.paths))
    }

    /// The sandbox agent runs use, or, with `workspace`, a new one with the same limits and that
    /// folder mounted (its caller keeps it). Prepares the runtime on first use: call it off the
    /// async threads.
    pub fn python_sandbox(
        &self,
        workspace: Option<&Workspace>,
    ) -> Result<Arc<catena_sandbox::Sandbox>, ServiceError> {
        let shared = &self.inference.sandbox;
        match workspace {
            None => shared.get(),
            Some(folder) => shared.make(Some(folder)).map(Arc::new),
        }
        .map_err(ServiceError::internal)
    }

    /// The tools of `profile` as a run of the served model would have them (the web tools and
    /// the wiki index as the settings file sets them up, the same refusals). Reads files and may
    /// prepare the sandbox: call it off the async threads.
    pub fn toolbox(&self, profile: &Profile) -> Result<catena_agent::tools::ToolBox, ServiceError> {
        inference::profile_toolbox(&self.inference.sandbox, &self.paths, profile)
            .map_err(ServiceError::internal)
    }

    /// The `[web]` settings without their keys. Reads files.
    pub fn web_settings(&self) -> Result<WebSettingsView, ServiceError> {
        web_settings_view(&self.paths)
    }

    /// Changes and saves the `[web]` settings; later runs use them. Writes the settings file.
    pub fn update_web_settings(
        &self,
        update: WebSettingsUpdate,
    ) -> Result<WebSettingsView, ServiceError> {
        update_web_settings(&self.paths, update)
    }

    /// The models on this machine and in the catalog, the served one marked. Reads files: call
    /// it off the async threads.
    pub fn library_models(&self) -> Result<LibraryModels, ServiceError> {
        let catalog = catena_hub::catalog::Catalog::load(&self.paths)
            .map_err(|e| ServiceError::internal(e.to_string()))?;
        Ok(LibraryModels {
            object: "list",
            serving: self.inference.serving().info.path,
            data: catena_hub::listing::rows(&catalog, &self.paths),
        })
    }

    /// Starts downloading catalog model `reference` in the background (needs a Tokio runtime);
    /// [`Service::downloads`] shows its progress.
    pub fn pull_model(&self, reference: &str) -> Result<DownloadStatus, ServiceError> {
        self.downloads.start(&self.paths, reference)
    }

    /// Starts importing a Hugging Face checkpoint folder (the desktop app only: the HTTP server
    /// never lets a request name a folder to read) in the background; [`Service::downloads`]
    /// shows its stages.
    pub fn import_folder(
        &self,
        request: catena_import::FolderImport,
    ) -> Result<DownloadStatus, ServiceError> {
        self.downloads.start_import(&self.paths, request)
    }

    /// Starts `train sft` as a child process (one training run at a time).
    pub fn start_training(&self, request: StartTraining) -> Result<TrainingStatus, ServiceError> {
        self.training
            .start(request, &self.inference.serving().info.path)
    }

    /// The files a training run may read (the exports folder's).
    pub fn training_data(&self) -> Result<TrainingData, ServiceError> {
        self.training.data_files()
    }

    /// A training run and its progress events from index `from` on.
    pub fn training_run(&self, id: &str, from: usize) -> Result<TrainingStatus, ServiceError> {
        self.training.get(id, from)
    }

    /// The training runs this process started, newest first.
    pub fn training_runs(&self) -> List<TrainingStatus> {
        List::of(self.training.list())
    }

    /// Stops a training run after its current step, with a checkpoint.
    pub async fn stop_training(&self, id: &str) -> Result<TrainingStatus, ServiceError> {
        self.training.stop(id).await
    }

    /// The downloads this process started, with their progress.
    pub fn downloads(&self) -> List<DownloadStatus> {
        List::of(self.downloads.list())
    }

    /// Serves another installed model (a catalog id or a downloaded file's name, never a path:
    /// a request must not make the server open arbitrary files) from now on: after the requests
    /// queued before this one, the worker loads it in place of the current model. When it cannot
    /// load, the current model is loaded again and the error says why.
    pub async fn serve_model(&self, reference: &str) -> Result<ServedModel, ServiceError> {
        let paths = self.paths.clone();
        let wanted = reference.trim().to_string();
        let model_path = tokio::task::spawn_blocking(move || {
            catena_hub::installed::resolve_installed(&wanted, &paths)
        })
        .await
        .map_err(|e| ServiceError::internal(format!("resolving the model failed: {e}")))?
        .map_err(|e| ServiceError::invalid(e.to_string()).param("id"))?;
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.inference
            .submit(Job::Switch(SwitchJob { model_path, reply }))?;
        let serving = answer
            .await
            .map_err(|_| ServiceError::internal("the inference thread has stopped"))?
            .map_err(|e| {
                ServiceError::invalid(format!("The model could not be loaded: {e}")).param("id")
            })?;
        Ok(ServedModel {
            model: serving.model_id,
            architecture: serving.info.architecture,
            path: serving.info.path,
        })
    }

    /// Runs `call` with the store on Tokio's blocking pool: SQLite waits on the disk and on its
    /// connection's lock, and an async worker must not wait with it.
    async fn with_store<T: Send + 'static>(
        &self,
        call: impl FnOnce(&Store, &LiveRuns) -> Result<T, ServiceError> + Send + 'static,
    ) -> Result<T, ServiceError> {
        let store = self.store.clone();
        let live = self.live.clone();
        tokio::task::spawn_blocking(move || call(&store, &live))
            .await
            .map_err(|e| ServiceError::internal(format!("a session-store call failed: {e}")))?
    }

    /// Checks the request, records the run and queues it for the model. With `samples: N`,
    /// N runs of the task are recorded in one session and queued together, seeds `seed` to
    /// `seed + N - 1` (the server's lanes decode them side by side); [`Service::vote`] then
    /// puts their answers to a vote.
    pub async fn start_run(&self, start: StartRun) -> Result<StartedRun, ServiceError> {
        let checked = CheckedRun::from_request(&start)?;
        // Every run may use the external tools; its stored system prompt shows them.
        let profile = match &self.mcp_host {
            Some(host) => host.extend(&checked.profile),
            None => checked.profile.clone(),
        };
        let mut session = start.session_id.clone();
        let mut ids: Vec<String> = Vec::with_capacity(checked.samples as usize);
        for sample in 0..checked.samples {
            let mut sampling = checked.sampling;
            sampling.seed = sampling.seed.wrapping_add(sample);
            let queued = match self
                .queue_run(&start, &checked, &profile, sampling, session.clone())
                .await
            {
                Ok(queued) => queued,
                Err(refused) => {
                    // All or none: the chains queued before a refused one (a full queue) stop
                    // before they start, so no half-started vote runs on.
                    for id in &ids {
                        self.live.cancel(id);
                    }
                    return Err(refused);
                }
            };
            session = Some(queued.session_id);
            ids.push(queued.id);
        }
        let (Some(session_id), Some(id)) = (session, ids.first().cloned()) else {
            return Err(ServiceError::internal("no run was queued"));
        };
        Ok(StartedRun {
            id,
            session_id,
            status: StartedStatus::Queued,
            samples: ids,
        })
    }

    /// Records one run of a checked request, with `sampling`, in `session` (a new one when
    /// `None`) and queues it. A refused run is recorded as failed and its error returned.
    async fn queue_run(
        &self,
        start: &StartRun,
        checked: &CheckedRun,
        profile: &Profile,
        sampling: SamplingParams,
        session: Option<String>,
    ) -> Result<QueuedRun, ServiceError> {
        let budgets = checked.budgets;
        let options = serde_json::to_value(AgentRunOptions {
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            top_k: sampling.top_k,
            seed: sampling.seed,
            max_tool_calls: budgets.max_tool_calls,
            max_tokens: budgets.max_tokens,
            max_time: start.max_time,
            prefill: start.prefill.as_deref(),
            free: start.free == Some(true),
            samples: (checked.samples > 1).then_some(checked.samples),
        })
        .map_err(|e| ServiceError::internal(format!("recording the run's options: {e}")))?;
        // Recorded as served: the model and the adapter on it (the runs of a base model and of
        // its adapter are told apart in exports and evaluations).
        let serving = self.inference.serving();
        let (model, adapter) = (serving.model_id, serving.adapter);
        let (name, system, user) = (
            profile.name.clone(),
            profile.system.clone(),
            profile.user_message(&checked.task),
        );
        let task = checked.task.clone();
        let run_id = self
            .with_store(move |store, _| {
                Ok(store.start_run(&NewRun {
                    session: session.as_deref(),
                    kind: RunKind::Agent,
                    task: &task,
                    profile: Some(&name),
                    model: &model,
                    adapter,
                    options,
                    system_prompt: &system,
                    user_prompt: &user,
                })?)
            })
            .await?;
        let cancel = self.live.register(&run_id);
        let job = Job::Agent(AgentJob {
            run_id: run_id.clone(),
            profile: profile.clone(),
            task: checked.task.clone(),
            prefill: start.prefill.clone(),
            budgets,
            sampling,
            cancel,
            decoding: if start.free == Some(true) {
                Decoding::Free
            } else {
                Decoding::Protocol
            },
        });
        if let Err(refused) = self.inference.submit(job) {
            self.live.finish(&run_id);
            let message = refused.message.clone();
            let failed = run_id.clone();
            let recorded = self
                .with_store(move |store, _| {
                    Ok(store.finish_run(&failed, &RunEnd::failed(&message))?)
                })
                .await;
            if let Err(e) = recorded {
                tracing::error!(error = %e, "could not record a refused run as failed");
            }
            return Err(refused);
        }
        let id = run_id.clone();
        let run = self.with_store(move |store, _| Ok(store.run(&id)?)).await?;
        Ok(QueuedRun {
            id: run_id,
            session_id: run.session_id,
        })
    }

    /// A run as stored, with whether it is still live.
    pub async fn run(&self, id: &str) -> Result<RunView, ServiceError> {
        let id = id.to_string();
        self.with_store(move |store, live| {
            Ok(RunView {
                run: store.run(&id)?,
                live: live.is_live(&id),
            })
        })
        .await
    }

    /// A run's events after `after`: first what is stored, then live ones until the run ends.
    /// Nothing is lost or repeated between the two, and a follower that falls behind the live
    /// broadcast catches up from the store. If the store cannot be read, the stream ends with
    /// that error (never silently short): the follower can resume after the last event it got.
    pub async fn follow(
        &self,
        id: &str,
        after: u64,
    ) -> Result<impl Stream<Item = Result<StoredEvent, ServiceError>> + Send + 'static, ServiceError>
    {
        let known = id.to_string();
        self.with_store(move |store, _| Ok(store.run(&known)?))
            .await?;
        // Subscribe before reading the store, so nothing falls between the two.
        let live = self.live.subscribe(id);
        let store = self.store.clone();
        let id = id.to_string();
        Ok(async_stream::stream! {
            let mut last = after;
            let mut live = live;
            let mut ended = live.is_none();
            loop {
                // What is stored after `last`: at the start, after falling behind the broadcast,
                // and once the run has ended.
                let (reader, run) = (store.clone(), id.clone());
                let stored = tokio::task::spawn_blocking(move || reader.events(&run, last))
                    .await
                    .map_err(|e| ServiceError::internal(format!("reading the run's events failed: {e}")))
                    .and_then(|read| read.map_err(ServiceError::from));
                match stored {
                    Ok(events) => for event in events {
                        last = event.seq;
                        yield Ok(event);
                    },
                    Err(e) => {
                        yield Err(e);
                        return;
                    }
                }
                let Some(receiver) = live.as_mut().filter(|_| !ended) else {
                    return;
                };
                loop {
                    match receiver.recv().await {
                        Ok(event) if event.seq > last => {
                            last = event.seq;
                            yield Ok(StoredEvent::clone(&event));
                        }
                        Ok(_) => {}
                        Err(RecvError::Lagged(_)) => break,
                        Err(RecvError::Closed) => {
                            ended = true;
                            break;
                        }
                    }
                }
            }
        })
    }

    /// Asks a live run to stop.
    pub async fn cancel(&self, id: &str) -> Result<(), ServiceError> {
        let id = id.to_string();
        self.with_store(move |store, live| {
            let run = store.run(&id)?;
            approvals::decline_questions(store, live, &id);
            if !live.cancel(&id) {
                return Err(ServiceError::conflict(format!(
                    "Run `{id}` is not running (it is {}).",
                    run.status.as_str()
                )));
            }
            Ok(())
        })
        .await
    }

    /// Answers question `ask` of live run `id` (may an external tool's call run?); the run
    /// records the answer. Not found when no such question waits.
    pub fn answer_approval(&self, id: &str, ask: u64, allow: bool) -> Result<(), ServiceError> {
        if self.live.answer(id, ask, allow) {
            Ok(())
        } else {
            Err(ServiceError::not_found(format!(
                "Run `{id}` has no question {ask} waiting for an answer."
            )))
        }
    }

    /// Rates a run (`None` clears the rating); returns the stored rating and note.
    pub async fn feedback(
        &self,
        id: &str,
        rating: Option<Feedback>,
        note: Option<&str>,
    ) -> Result<RunFeedback, ServiceError> {
        let (id, note) = (id.to_string(), note.map(str::to_string));
        self.with_store(move |store, _| {
            store.set_feedback(&id, rating, note.as_deref())?;
            let run = store.run(&id)?;
            Ok(RunFeedback {
                id,
                feedback: run.feedback,
                feedback_note: run.feedback_note,
            })
        })
        .await
    }

    /// Sessions, newest first, optionally only those whose text matches `search`.
    pub async fn sessions(
        &self,
        search: Option<&str>,
        limit: Option<usize>,
    ) -> Result<List<SessionInfo>, ServiceError> {
        let search = search.filter(|s| !s.trim().is_empty()).map(str::to_string);
        let limit = limit.unwrap_or(100).min(1000);
        self.with_store(move |store, _| {
            Ok(List::of(store.list_sessions(search.as_deref(), limit)?))
        })
        .await
    }

    /// A session's runs, oldest first.
    pub async fn session(&self, id: &str) -> Result<SessionRuns, ServiceError> {
        let id = id.to_string();
        self.with_store(move |store, _| {
            let runs = store.session_runs(&id)?;
            Ok(SessionRuns { id, runs })
        })
        .await
    }

    /// Stops the session's live runs and deletes it.
    pub async fn delete_session(&self, id: &str) -> Result<(), ServiceError> {
        let id = id.to_string();
        self.with_store(move |store, live| {
            for run in store.session_runs(&id)? {
                approvals::decline_questions(store, live, &run.id);
                live.cancel(&run.id);
            }
            store.delete_session(&id)?;
            Ok(())
        })
        .await
    }

    /// Runs as training data, written to `out` one run at a time as they are read (an export of
    /// a store of coding-agent chats runs to hundreds of megabytes, which no caller should have
    /// to hold), then flushed; `out` is given back with the counts.
    pub async fn export<W: std::io::Write + Send + 'static>(
        &self,
        request: ExportRequest,
        mut out: W,
    ) -> Result<(W, ExportStats), ServiceError> {
        self.with_store(move |store, _| {
            let stats = store.export(request.format, request.filter, &mut out)?;
            out.flush().map_err(catena_store::StoreError::from)?;
            Ok((out, stats))
        })
        .await
    }
}

/// A run request's fields checked, with the defaults filled in.
struct CheckedRun {
    task: String,
    profile: Profile,
    sampling: SamplingParams,
    budgets: Budgets,
    /// 1 to [`MAX_SAMPLES`].
    samples: u32,
}

impl CheckedRun {
    fn from_request(start: &StartRun) -> Result<CheckedRun, ServiceError> {
        let task = start.task.trim().to_string();
        if task.is_empty() {
            return Err(ServiceError::invalid("`task` must not be empty.").param("task"));
        }
        let profile_name = start.profile.as_deref().unwrap_or("math");
        let profile = Profile::builtin(profile_name)
            .map_err(|e| ServiceError::invalid(e.to_string()).param("profile"))?;
        let max_time = match start.max_time.map(catena_protocol::units::positive_seconds) {
            Some(Some(limit)) => Some(limit),
            Some(None) => {
                return Err(ServiceError::invalid(
                    "`max_time` must be a positive number of seconds.",
                )
                .param("max_time"));
            }
            None => None,
        };
        let sampling = SamplingParams {
            temperature: start.temperature.unwrap_or(0.6),
            top_p: start.top_p.unwrap_or(0.95),
            top_k: start.top_k.unwrap_or(40),
            seed: start
                .seed
                .unwrap_or_else(|| uuid::Uuid::now_v7().as_u128() as u32),
            ..SamplingParams::default()
        };
        if let Some((field, why)) = sampling.out_of_range() {
            return Err(ServiceError::invalid(why).param(field));
        }
        // An agent run's top-k is a count: "no limit" is 0, not any negative number.
        if sampling.top_k < 0 {
            return Err(
                ServiceError::invalid("`top_k` must be 0 (no limit) or more.").param("top_k"),
            );
        }
        if start.max_tokens == Some(0) {
            return Err(
                ServiceError::invalid("`max_tokens` must be at least 1.").param("max_tokens")
            );
        }
        let budgets = Budgets {
            max_tool_calls: start.max_tool_calls.unwrap_or(profile.max_tool_calls),
            max_tokens: start.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            max_time,
        };
        let samples = start.samples.unwrap_or(1);
        if !(1..=MAX_SAMPLES).contains(&samples) {
            return Err(ServiceError::invalid(format!(
                "`samples` must be between 1 and {MAX_SAMPLES}."
            ))
            .param("samples"));
        }
        if samples > 1 && sampling.temperature == 0.0 {
            return Err(ServiceError::invalid(
                "`samples` above 1 needs a `temperature` above 0: greedy chains would all be the same.",
            )
            .param("samples"));
        }
        Ok(CheckedRun {
            task,
            profile,
            sampling,
            budgets,
            samples,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(body: serde_json::Value) -> Option<&'static str> {
        let start: StartRun = serde_json::from_value(body).unwrap();
        CheckedRun::from_request(&start)
            .err()
            .map(|e| e.param.unwrap())
    }

    #[test]
    fn an_agent_runs_settings_are_checked_before_it_is_queued() {
        for (body, param) in [
            (json!({"task": " "}), "task"),
            (json!({"task": "x", "profile": "nope"}), "profile"),
            (json!({"task": "x", "temperature": 2.5}), "temperature"),
            (json!({"task": "x", "top_p": 0}), "top_p"),
            (json!({"task": "x", "top_p": 1.5}), "top_p"),
            (json!({"task": "x", "top_k": -1}), "top_k"),
            (json!({"task": "x", "max_tokens": 0}), "max_tokens"),
            (json!({"task": "x", "max_time": -1}), "max_time"),
            (
                json!({"task": "x", "samples": 17, "temperature": 1}),
                "samples",
            ),
            (
                json!({"task": "x", "samples": 2, "temperature": 0}),
                "samples",
            ),
        ] {
            assert_eq!(refused(body.clone()), Some(param), "{body}");
        }
        assert_eq!(refused(json!({"task": "x", "top_p": 1, "top_k": 0})), None);
    }

    #[test]
    fn a_field_catenas_api_does_not_know_is_an_error() {
        let error = serde_json::from_value::<StartRun>(json!({"task": "x", "max_tool_call": 3}))
            .unwrap_err();
        assert!(error.to_string().contains("max_tool_call"), "{error}");
    }
}
