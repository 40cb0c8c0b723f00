//! The model's threads: requests wait in a bounded queue and run on the worker's lanes, one
//! thread per lane (one lane by default; `catena serve --parallel N` decodes N requests together),
//! with the KV caches kept between them (in the worker process). A request that finds the queue
//! full is refused at once with a clear error instead of piling up. When the worker dies, the
//! requests it was serving fail with a clear error, and the worker is started again for the next
//! ones. A model switch waits until the requests already running have finished.

use crate::ServiceError;
use crate::approvals::{McpHost, RunQuestions};
use crate::live::LiveRuns;
use crate::sandbox::SharedSandbox;
use catena_agent::tools::{ToolBox, add_wiki_search, profile_tools};
use catena_agent::{Budgets, CutShort, Decoding};
use catena_chat_format::{TemplateSource, ToolSpec, Turn};
use catena_engine_api::{
    CancelFlag, EngineError, GenerateLimits, GenerationStop, ModelInfo, SamplingParams, Session,
    SessionOptions, StopMatcher,
};
use catena_engine_api::{ChatMessage, Constraint};
use catena_hub::assets;
use catena_hub::config::Paths;
use catena_protocol::Profile;
use catena_runner::{Engine, RunPlan, TaskRun, Update, run_task};
use catena_sandbox::Limits;
use catena_store::{NewRun, Recorder, RunEnd, RunKind, RunStatus, Store, Usage};
use catena_worker::{
    Prompt, RenderedPrompt, TemplateError, TemplateJob, TemplateRender, WorkerClient,
    WorkerCommand, WorkerConfig, WorkerStatus, render_in_child,
};
use parking_lot::{Mutex, RwLock};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tokio::sync::mpsc;

/// How the model is loaded and served.
#[derive(Debug, Clone)]
pub struct InferenceConfig {
    pub model_path: PathBuf,
    /// Whether the adapter Catena ships for a model (the default model's) is applied when that
    /// model is served, at the start and after a switch (`catena serve --no-adapter`: never).
    pub shipped_adapter: bool,
    pub gpu_layers: Option<u32>,
    /// Settings of each kept session (context size, threads).
    pub session: SessionOptions,
    /// Sessions (KV caches) kept at once, with one lane.
    pub sessions: usize,
    /// Requests decoded together (lanes of the worker); above 1, each lane's slot is a kept
    /// cache and `sessions` does not apply.
    pub parallel: usize,
    /// The KV cache type, when the user chose one.
    pub kv_cache: Option<catena_engine_api::KvCacheType>,
    /// Requests that may wait for the model; more are refused.
    pub queue_limit: usize,
    /// Where the sandbox runtime and its compiled form live.
    pub paths: Paths,
    pub sandbox_limits: Limits,
    /// How to start the model worker process.
    pub worker: WorkerCommand,
    /// The external MCP servers agent runs may call, started once by the caller.
    pub mcp_host: Option<McpHost>,
}

/// A chat completion to run.
pub struct ChatJob {
    /// The conversation, as stored with the run.
    pub messages: Vec<ChatMessage>,
    /// The prompt rendered by the model's chat template with the request's tools
    /// ([`Inference::render_template`]); `None`: the worker frames `messages` itself.
    pub prompt: Option<RenderedPrompt>,
    /// The grammar the answer follows (a tool call's schema, `response_format`).
    pub constraint: Option<Constraint>,
    pub sampling: SamplingParams,
    pub max_tokens: usize,
    pub stops: Vec<String>,
    /// The `max_tokens` the request gave (none: until the context is full), kept with the stored
    /// run.
    pub requested_max_tokens: Option<u32>,
    /// Whether the reply is streamed, kept with the stored run.
    pub stream: bool,
    pub reply: mpsc::UnboundedSender<ChatEvent>,
    pub cancel: CancelFlag,
}

/// What a chat completion streams back.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatEvent {
    /// Generated text (possibly ending in a stop sequence, which the HTTP layer strips).
    Text(String),
    Done {
        finish_reason: FinishReason,
        /// Whether a stop sequence ended the reply (it is then at the end of the text).
        stopped_by_string: bool,
        usage: ChatUsage,
    },
    /// The request could not be answered: a prompt too long for the context, a worker that
    /// died; the kind tells the HTTP layer which status and code to answer with.
    Failed(ServiceError),
}

/// Why a chat completion ended, in OpenAI's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model ended its turn, a stop sequence matched, or the client went away.
    Stop,
    /// A limit ended it: `max_tokens`, the context or a deadline.
    Length,
}

impl From<&GenerationStop> for FinishReason {
    fn from(stop: &GenerationStop) -> FinishReason {
        match stop {
            GenerationStop::StopString { .. }
            | GenerationStop::EndOfTurn
            | GenerationStop::Cancelled => FinishReason::Stop,
            GenerationStop::MaxTokens
            | GenerationStop::ContextFull
            | GenerationStop::Deadline
            | GenerationStop::Repetition { .. } => FinishReason::Length,
        }
    }
}

/// What a chat completion's stored run keeps of its request.
#[derive(serde::Serialize)]
struct ChatRunOptions<'a> {
    messages: &'a [ChatMessage],
    temperature: f32,
    top_p: f32,
    seed: u32,
    max_tokens: Option<u32>,
    stop: &'a [String],
    stream: bool,
}

/// Token counts of a chat completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChatUsage {
    pub prompt_tokens: usize,
    /// Prompt tokens that were already in a kept KV cache (not evaluated again).
    pub cached_tokens: usize,
    pub completion_tokens: usize,
}

/// An agent run to execute; its store record exists already.
pub struct AgentJob {
    pub run_id: String,
    pub profile: Profile,
    /// The task as the user wrote it; the profile frames it.
    pub task: String,
    pub prefill: Option<String>,
    pub budgets: Budgets,
    pub sampling: SamplingParams,
    pub cancel: CancelFlag,
    pub decoding: Decoding,
}

/// Serve another model (after the jobs queued before it).
pub struct SwitchJob {
    pub model_path: PathBuf,
    pub reply: tokio::sync::oneshot::Sender<Result<Serving, String>>,
}

pub enum Job {
    Chat(ChatJob),
    Agent(AgentJob),
    Switch(SwitchJob),
}

/// The model being served.
#[derive(Debug, Clone)]
pub struct Serving {
    /// Its name for clients.
    pub model_id: String,
    pub info: ModelInfo,
    /// The adapter applied on it (the one Catena ships for the default model), by name.
    pub adapter: Option<&'static str>,
    /// Its chat template, for requests with tools.
    pub template: ServedTemplate,
    /// The context window of each conversation, in tokens.
    pub context_size: u32,
}

/// The handle the HTTP layer holds.
pub struct Inference {
    tx: mpsc::Sender<Job>,
    /// Jobs accepted and not yet finished (waiting or running).
    in_flight: Arc<AtomicUsize>,
    queue_limit: usize,
    serving: Arc<RwLock<Serving>>,
    /// The worker process (pid, restarts).
    pub worker: Arc<WorkerStatus>,
    /// The agent runs' sandbox, which the MCP server's `run_python` shares.
    pub(crate) sandbox: Arc<SharedSandbox>,
    /// How to start a child process: each chat template render runs in one.
    child: WorkerCommand,
}

/// The served model's chat template, or why it cannot be used.
pub type ServedTemplate = Arc<Result<TemplateSource, String>>;

/// Reads the chat template of the model at `path` (the GGUF's `tokenizer.chat_template`; a file
/// without one gets ChatML with Hermes tools) and compiles it once in a child started by
/// `child`, to know at start whether requests with tools can use it. It is never compiled in this
/// process: see [`Inference::render_template`].
pub fn load_chat_template(path: &std::path::Path, child: &WorkerCommand) -> ServedTemplate {
    let loaded = catena_gguf::GgufHeader::read(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
        .and_then(|header| {
            let source = TemplateSource::new(header.get_str("tokenizer.chat_template"));
            let job = TemplateJob {
                template: source.text().to_string(),
                render: None,
            };
            render_in_child(child, job)
                .map(|_| source)
                .map_err(|e| e.to_string())
        });
    if let Err(e) = &loaded {
        tracing::warn!(error = %e, "the model's chat template cannot be rendered; tools are off");
    }
    Arc::new(loaded)
}

impl Inference {
    /// Starts the worker and waits for it to load the model (so a bad model fails the start), then
    /// starts the thread that feeds it.
    pub fn start(
        config: InferenceConfig,
        store: Arc<Store>,
        live: Arc<LiveRuns>,
    ) -> Result<Inference, EngineError> {
        let status = Arc::new(WorkerStatus::default());
        let adapter = shipped_adapter(&config, &config.model_path)?;
        let client = WorkerClient::start(
            config.worker.clone(),
            WorkerConfig {
                model_path: config.model_path.clone(),
                adapter: adapter.as_ref().map(|(path, _)| path.clone()),
                gpu_layers: config.gpu_layers,
                session: SessionOptions {
                    // An agent run's summary carries its mean log-probability: the tie-break
                    // of a vote over runs started together (`samples`).
                    logprobs: true,
                    ..config.session.clone()
                },
                sessions: config.sessions,
                parallel: config.parallel.max(1),
                kv_cache: config.kv_cache,
                prompt_cache: config.paths.prompt_cache_dir(),
            },
            status.clone(),
        )?;
        let serving = Arc::new(RwLock::new(Serving {
            model_id: model_id(&config.model_path),
            info: client.info().clone(),
            adapter: adapter.map(|(_, name)| name),
            template: load_chat_template(&config.model_path, &config.worker),
            context_size: client.context_size(),
        }));
        let (tx, rx) = mpsc::channel(config.queue_limit.max(1));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let lanes = client.lanes();
        let sandbox = Arc::new(SharedSandbox::new(
            config.paths.clone(),
            config.sandbox_limits,
        ));
        let worker = Arc::new(Worker {
            client: RwLock::new(client),
            jobs: JobContext {
                store,
                live,
                sandbox: sandbox.clone(),
                config: config.clone(),
                serving: serving.clone(),
            },
            in_flight: in_flight.clone(),
        });
        let queue = Arc::new(Mutex::new(rx));
        for lane in 0..lanes {
            let (worker, queue) = (worker.clone(), queue.clone());
            std::thread::Builder::new()
                .name(format!("catena-inference-{lane}"))
                .spawn(move || worker.run(lane, &queue))
                .map_err(|e| {
                    EngineError::Backend(format!("cannot start an inference thread: {e}"))
                })?;
        }
        Ok(Inference {
            tx,
            in_flight,
            queue_limit: config.queue_limit,
            serving,
            worker: status,
            sandbox,
            child: config.worker,
        })
    }

    /// Renders `turns` with `tools` offered through the served model's chat template, in a
    /// process of its own whose memory and time are capped (`catena_worker::render_in_child`):
    /// the template is code from the model file. It blocks for that process's life (tens of
    /// milliseconds), so async callers run it on a blocking thread.
    pub fn render_template(
        &self,
        template: &TemplateSource,
        turns: Vec<Turn>,
        tools: Vec<ToolSpec>,
    ) -> Result<RenderedPrompt, TemplateError> {
        let job = TemplateJob {
            template: template.text().to_string(),
            render: Some(TemplateRender { turns, tools }),
        };
        render_in_child(&self.child, job)
    }

    /// Queues a job, or refuses it when the queue is full. The job is counted before it is
    /// sent: the model thread may finish it (and count it out) before `try_send` returns, and
    /// the count shutdown waits on must never go below zero.
    pub fn submit(&self, job: Job) -> Result<(), ServiceError> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let refused = match self.tx.try_send(job) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => ServiceError::queue_full(self.queue_limit),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                ServiceError::internal("the inference thread has stopped")
            }
        };
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Err(refused)
    }

    /// Jobs waiting or running.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    pub fn queue_limit(&self) -> usize {
        self.queue_limit
    }

    /// The model being served now.
    pub fn serving(&self) -> Serving {
        self.serving.read().clone()
    }

    pub fn model_id(&self) -> String {
        self.serving().model_id
    }
}

/// The adapter to serve `model` with, its file and name: the one Catena ships for it (written
/// out on first use), unless the configuration turns shipped adapters off.
fn shipped_adapter(
    config: &InferenceConfig,
    model: &std::path::Path,
) -> Result<Option<(PathBuf, &'static str)>, EngineError> {
    if !config.shipped_adapter {
        return Ok(None);
    }
    let Some(adapter) = assets::adapter_for_model(model, &config.paths) else {
        return Ok(None);
    };
    let path = adapter
        .ensure(&config.paths)
        .map_err(|e| EngineError::BadAdapter {
            path: adapter.path(&config.paths),
            reason: e.to_string(),
        })?;
    tracing::info!(
        adapter = adapter.name,
        "serving the model with Catena's adapter"
    );
    Ok(Some((path, adapter.name)))
}

/// The name clients use for the model: its file name without `.gguf`.
pub fn model_id(path: &std::path::Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("model")
        .to_string()
}

/// What the lanes' threads share: the worker process and what jobs need besides the model.
/// Each thread drives its own lane through a shared read guard of the client; a restart or a
/// model switch takes the write guard, so it waits until the jobs running have ended.
struct Worker {
    client: RwLock<WorkerClient>,
    jobs: JobContext,
    in_flight: Arc<AtomicUsize>,
}

/// Everything a job needs besides the model.
struct JobContext {
    store: Arc<Store>,
    live: Arc<LiveRuns>,
    /// Created on the first agent run that needs `<code>`.
    sandbox: Arc<SharedSandbox>,
    config: InferenceConfig,
    serving: Arc<RwLock<Serving>>,
}

impl Worker {
    /// One lane's thread: takes the next job from the shared queue, runs it on `lane`.
    fn run(&self, lane: usize, queue: &Mutex<mpsc::Receiver<Job>>) {
        serve_lane(
            lane,
            queue,
            |job| match job {
                Job::Chat(job) => self.chat(lane, job),
                Job::Agent(job) => self.agent(lane, job),
                Job::Switch(job) => self.switch(job),
            },
            || {
                self.revive();
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
            },
        );
    }

    /// Loads another model in the worker's place (the kept KV caches go with the old one),
    /// once the jobs running on other lanes have ended.
    fn switch(&self, job: SwitchJob) {
        let mut client = self.client.write();
        let outcome = shipped_adapter(&self.jobs.config, &job.model_path)
            .and_then(|adapter| {
                let (path, name) = adapter.unzip();
                client.switch_model(job.model_path.clone(), path)?;
                Ok(name)
            })
            .map(|adapter| {
                let serving = Serving {
                    model_id: model_id(&job.model_path),
                    info: client.info().clone(),
                    adapter,
                    template: load_chat_template(&job.model_path, &self.jobs.config.worker),
                    context_size: client.context_size(),
                };
                *self.jobs.serving.write() = serving.clone();
                serving
            })
            .map_err(|e| e.to_string());
        let _ = job.reply.send(outcome);
    }

    /// Starts the worker again if the last job saw it die, so the next job finds it ready. A
    /// worker that cannot start (the model now fails to load) is tried again before the next job.
    fn revive(&self) {
        if let Err(e) = self.ready() {
            tracing::error!(error = %e, "the model worker could not be restarted");
        }
    }

    /// The worker, started again first if it died while idle, or died in the last job and the
    /// restart after it failed. Another lane may have restarted it meanwhile: checked again
    /// under the write guard.
    fn ready(&self) -> Result<(), EngineError> {
        if self.client.read().check() {
            return Ok(());
        }
        let mut client = self.client.write();
        if client.check() {
            Ok(())
        } else {
            client.restart()
        }
    }

    fn chat(&self, lane: usize, job: ChatJob) {
        if job.cancel.load(Ordering::Relaxed) {
            return;
        }
        let reply = job.reply.clone();
        if let Err(e) = self.try_chat(lane, job) {
            let _ = reply.send(ChatEvent::Failed(e.into()));
        }
    }

    fn try_chat(&self, lane: usize, job: ChatJob) -> Result<(), EngineError> {
        self.ready()?;
        let client = self.client.read();
        let prompt = match &job.prompt {
            Some(rendered) => Prompt::Parts {
                parts: rendered.parts.clone(),
                instructions: rendered.instructions.clone(),
            },
            None => Prompt::Conversation {
                messages: job.messages.clone(),
            },
        };
        let opened = client.open(lane, prompt)?;
        let mut session = opened.session;
        session.set_sampling(job.sampling);
        if let Some(constraint) = &job.constraint {
            session.constrain(constraint)?;
        }
        let stops = StopMatcher::new(job.stops.iter().cloned());
        let limits = GenerateLimits {
            max_tokens: job.max_tokens,
            deadline: None,
            cancel: Some(job.cancel.clone()),
            // An API client may ask for repeated text; it has `max_tokens` for loops.
            stop_on_repetition: false,
        };
        let cancel = job.cancel.clone();
        let reply = job.reply.clone();
        // On an error the session is dropped, in the worker too: its state is unknown.
        let generation = session.generate(&stops, limits, &mut |text| {
            if reply.send(ChatEvent::Text(text.to_string())).is_err() {
                // The client went away: stop generating for it.
                cancel.store(true, Ordering::Relaxed);
            }
        })?;
        let usage = ChatUsage {
            prompt_tokens: opened.prompt_tokens,
            cached_tokens: opened.cached,
            completion_tokens: generation.tokens,
        };
        let stopped_by_string = matches!(generation.stop, GenerationStop::StopString { .. });
        let _ = job.reply.send(ChatEvent::Done {
            finish_reason: FinishReason::from(&generation.stop),
            stopped_by_string,
            usage,
        });
        let conversation =
            self.jobs
                .record_chat(&job, opened.conversation, &generation.text, usage);
        session.close(true, conversation)
    }

    fn agent(&self, lane: usize, job: AgentJob) {
        let store = self.jobs.store.clone();
        let mut recorder = Recorder::new(&store, job.run_id.clone());
        if job.cancel.load(Ordering::Relaxed) {
            let stored = recorder.raw(&serde_json::json!({
                "type": "error",
                "message": "cancelled before it started",
            }));
            self.jobs.live.publish(&job.run_id, stored);
            let end = RunEnd {
                status: RunStatus::Cancelled,
                answer: None,
                stop_reason: Some("cancelled"),
                trajectory: None,
                summary: None,
                error: Some("cancelled before it started"),
                usage: Usage::default(),
            };
            if let Err(e) = store.finish_run(&job.run_id, &end) {
                tracing::error!(error = %e, "could not save a cancelled run");
            }
        } else {
            let tried = std::panic::catch_unwind(AssertUnwindSafe(|| {
                self.try_agent(lane, &job, &mut recorder)
            }))
            .unwrap_or_else(|panic| {
                Err(format!(
                    "the run stopped on an internal error: {}",
                    panic_text(&*panic)
                ))
            });
            if let Err(message) = tried {
                let stored = recorder.fail(&message);
                self.jobs.live.publish(&job.run_id, stored);
            }
        }
        // Those following the run are the only ones who saw all of it: they hear so last.
        if let Some(notice) = recorder.not_saved_notice() {
            self.jobs.live.publish(&job.run_id, notice);
        }
        self.jobs.live.finish(&job.run_id);
    }

    /// Runs the job on `lane`. A failure before the run starts is returned, for the caller to
    /// record; the run's own failure is recorded by the runner (`Ok` either way).
    fn try_agent(
        &self,
        lane: usize,
        job: &AgentJob,
        recorder: &mut Recorder<'_>,
    ) -> Result<(), String> {
        let tools = self.jobs.tools(job)?;
        self.ready().map_err(|e| e.to_string())?;
        let client = self.client.read();
        let mut session = client.lane(lane).map_err(|e| e.to_string())?;
        let plan = RunPlan {
            profile: &job.profile,
            tools: &tools,
            model: self.jobs.model_id(),
            budgets: job.budgets,
            cancel: Some(job.cancel.clone()),
            decoding: job.decoding,
            cut_short: CutShort::Answer,
        };
        let run = TaskRun {
            id: &job.run_id,
            question: &job.task,
            sampling: job.sampling,
            prefill: job.prefill.as_deref(),
        };
        let live = &self.jobs.live;
        let ran = run_task(
            Engine::Chain(&mut session),
            &plan,
            &run,
            Some(recorder),
            &mut |update| match update {
                Update::Event(_, Some(stored)) | Update::Recorded(stored) => {
                    live.publish(&job.run_id, stored)
                }
                Update::Event(_, None) => {}
            },
        );
        match ran {
            Ok(_) => session.close(true, None).map_err(|e| e.to_string()),
            // Recorded and published as the run's end; the session is dropped in the worker.
            Err(e) => {
                tracing::debug!(run = %job.run_id, error = %e, "an agent run failed");
                Ok(())
            }
        }
    }
}

impl JobContext {
    fn model_id(&self) -> String {
        self.serving.read().model_id.clone()
    }

    /// Stores a chat completion; returns the stored conversation (session) it belongs to.
    fn record_chat(
        &self,
        job: &ChatJob,
        conversation: Option<String>,
        reply: &str,
        usage: ChatUsage,
    ) -> Option<String> {
        let last_user = job
            .messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map_or("", |m| m.content.as_str());
        let system = job
            .messages
            .iter()
            .find(|m| m.role == "system")
            .map_or("", |m| m.content.as_str());
        let options = ChatRunOptions {
            messages: &job.messages,
            temperature: job.sampling.temperature,
            top_p: job.sampling.top_p,
            seed: job.sampling.seed,
            max_tokens: job.requested_max_tokens,
            stop: &job.stops,
            stream: job.stream,
        };
        // Text and numbers only: serialising cannot fail (a NaN would be stored as null).
        let options = serde_json::to_value(options).unwrap_or_default();
        let (model, adapter) = {
            let serving = self.serving.read();
            (serving.model_id.clone(), serving.adapter)
        };
        let run = NewRun {
            session: conversation.as_deref(),
            kind: RunKind::Chat,
            task: last_user,
            profile: None,
            model: &model,
            adapter,
            options,
            system_prompt: system,
            user_prompt: last_user,
        };
        let started = self.store.start_run(&run).or_else(|_| {
            // The remembered conversation may have been deleted meanwhile: start a new one.
            self.store.start_run(&NewRun {
                session: None,
                ..run
            })
        });
        let id = match started {
            Ok(id) => id,
            Err(e) => {
                tracing::error!(error = %e, "could not save a chat completion");
                return None;
            }
        };
        let end = RunEnd {
            status: RunStatus::Finished,
            answer: Some(reply),
            stop_reason: None,
            trajectory: Some(reply),
            summary: None,
            error: None,
            usage: Usage {
                prompt_tokens: usage.prompt_tokens as u64,
                generated_tokens: usage.completion_tokens as u64,
                context_tokens: (usage.prompt_tokens + usage.completion_tokens) as u64,
                cached_tokens: usage.cached_tokens as u64,
                tool_calls: 0,
            },
        };
        if let Err(e) = self.store.finish_run(&id, &end) {
            tracing::error!(error = %e, "could not save a chat completion");
        }
        self.store.session_of(&id).ok()
    }

    /// The tools of a run: its profile's, and the external MCP servers' when there are some
    /// (the run's profile then describes them: [`crate::Service::start_run`]).
    fn tools(&self, job: &AgentJob) -> Result<ToolBox, String> {
        let mut tools = profile_toolbox(&self.sandbox, &self.config.paths, &job.profile)?;
        if let Some(host) = &self.config.mcp_host {
            tools.add(Box::new(
                host.tools_for_run(RunQuestions {
                    run: job.run_id.clone(),
                    store: self.store.clone(),
                    live: self.live.clone(),
                    cancel: job.cancel.clone(),
                    // A limit too far off to reach is no limit.
                    deadline: job
                        .budgets
                        .max_time
                        .and_then(|limit| Instant::now().checked_add(limit)),
                }),
            ));
        }
        Ok(tools)
    }
}

/// The tools of `profile` as a run of the served model has them: `<code>` in the shared sandbox
/// (prepared once, on first need), the wiki index and the web tools as the settings file sets them
/// up (a request never names a backend, a key or an address).
pub(crate) fn profile_toolbox(
    sandbox: &SharedSandbox,
    paths: &Paths,
    profile: &Profile,
) -> Result<ToolBox, String> {
    let mut tools = profile_tools(profile, || sandbox.get())?;
    add_wiki_search(&mut tools, profile, &paths.indexes_dir(), None)
        .map_err(|e| format!("the wiki search index cannot be used: {e}"))?;
    crate::add_web_tools(&mut tools, profile, paths, |_| {}, None).map_err(|e| e.to_string())?;
    Ok(tools)
}

/// A lane's loop: takes jobs from `queue` (shared by the lanes; one thread waits at it at a time,
/// the others wait for the lock) until it closes, runs each with `handle`, then `after`. A panic
/// (a bug) ends its job, not the lane: a lane that died took every later job queued for it
/// along. The job's reply channel goes with it, which its client reads as the end; an agent run
/// is ended as failed in `Worker::agent`.
fn serve_lane<J>(
    lane: usize,
    queue: &Mutex<mpsc::Receiver<J>>,
    mut handle: impl FnMut(J),
    mut after: impl FnMut(),
) {
    loop {
        let Some(job) = queue.lock().blocking_recv() else {
            return;
        };
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| handle(job))) {
            tracing::error!(
                lane,
                "a job stopped on an internal error: {}",
                panic_text(&*panic)
            );
        }
        after();
    }
}

/// What a caught panic said.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_that_panics_ends_itself_and_the_lane_takes_the_next() {
        let (send, receive) = mpsc::channel(4);
        for job in [1, 2, 3] {
            send.try_send(job).unwrap();
        }
        drop(send);
        let queue = Mutex::new(receive);
        let (mut ran, mut ended) = (Vec::new(), 0);
        serve_lane(
            0,
            &queue,
            |job| {
                assert_ne!(job, 2, "job 2 stands for a bug");
                ran.push(job);
            },
            || ended += 1,
        );
        assert_eq!(ran, [1, 3]);
        assert_eq!(
            ended, 3,
            "each job, the one that panicked too, is counted as ended"
        );
    }
}
