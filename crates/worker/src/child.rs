//! The worker process (`catena worker`): loads the model named in the first frame, keeps the KV
//! caches, and answers requests one at a time. A separate thread reads the input so a `Cancel`
//! reaches a running generation, and the end of the input (the server is gone) stops everything.

use super::pool::SessionPool;
use super::protocol::{Prompt, Reply, Request, TokensDelta, WorkerConfig, read_frame, write_frame};
use catena_engine::hardware::plan_for_model;
use catena_engine::llama::{LlamaEngine, LlamaSession, LoadOptions};
use catena_engine::plan::{Overrides, Plan};
use catena_engine::{
    CancelFlag, EngineError, GenerateLimits, Session, SessionOptions, StopMatcher, TokenRecord,
};
use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Why the worker process stopped other than by its input ending.
#[derive(Debug, thiserror::Error)]
pub enum WorkerExit {
    #[error("the first frame must start the worker")]
    NotStarted,
    #[error("the frame channel broke: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Load(EngineError),
}

/// Serves frames from standard input to a private copy of standard output until the input ends.
pub fn run_stdio() -> Result<(), WorkerExit> {
    let output = super::stdio::take_stdout()?;
    serve(io::stdin(), output)
}

/// Serves frames from `input` to `output` until the input ends.
pub fn serve(
    mut input: impl Read + Send + 'static,
    mut output: impl Write,
) -> Result<(), WorkerExit> {
    let config = match read_frame::<Request>(&mut input)? {
        Some(Request::Start(config)) => config,
        _ => return Err(WorkerExit::NotStarted),
    };
    let (engine, plan, session) = match load(&config) {
        Ok(loaded) => loaded,
        Err(e) => {
            write_frame(&mut output, &Reply::Error { error: (&e).into() })?;
            return Err(WorkerExit::Load(e));
        }
    };
    write_frame(
        &mut output,
        &Reply::Ready {
            info: engine.info().clone(),
            plan,
        },
    )?;
    let cancel = CancelFlag::default();
    let requests = spawn_reader(input, cancel.clone());
    let mut worker = Worker {
        engine,
        pool: SessionPool::new(engine, session, config.sessions),
        open: None,
        cancel,
        output,
    };
    while let Ok(request) = requests.recv() {
        worker.handle(request)?;
    }
    Ok(())
}

/// Plans the placement (GPU layers, context, KV cache; the user's choices kept), then loads.
fn load(
    config: &WorkerConfig,
) -> Result<(&'static LlamaEngine, Option<Plan>, SessionOptions), EngineError> {
    let mut session = config.session.clone();
    let overrides = Overrides {
        context: session.context_size,
        gpu_layers: config.gpu_layers,
        kv_cache: config.kv_cache,
        kv_caches: u32::try_from(config.sessions).unwrap_or(u32::MAX),
    };
    let plan = match plan_for_model(&config.model_path, overrides) {
        Ok(plan) => {
            for reason in &plan.reasons {
                tracing::info!("plan: {reason}");
            }
            for problem in &plan.problems {
                tracing::warn!("plan: {problem}");
            }
            session.context_size = Some(plan.context);
            session.kv_cache = plan.kv_cache;
            Some(plan)
        }
        Err(e) => {
            // The loader's own checks explain a bad file better; a file the planner cannot size
            // still loads with the user's settings.
            tracing::warn!(error = %e, "no placement plan; loading with the settings given");
            None
        }
    };
    let gpu_layers = plan.as_ref().map(|p| p.gpu_layers).or(config.gpu_layers);
    let engine = LlamaEngine::load(
        &config.model_path,
        &LoadOptions {
            gpu_layers,
            ..LoadOptions::default()
        },
    )?;
    // The model lives as long as the worker process; sessions borrow it.
    Ok((Box::leak(Box::new(engine)), plan, session))
}

/// Reads frames on a thread of its own: `Cancel` sets the flag at once, everything else is queued.
/// When the input ends or breaks, the flag is set and the queue closes, which ends the worker.
fn spawn_reader(
    mut input: impl Read + Send + 'static,
    cancel: CancelFlag,
) -> mpsc::Receiver<Request> {
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("catena-worker-input".into())
        .spawn(move || {
            loop {
                match read_frame::<Request>(&mut input) {
                    Ok(Some(Request::Cancel)) => cancel.store(true, Ordering::Relaxed),
                    Ok(Some(request)) => {
                        if tx.send(request).is_err() {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::error!(error = %e, "the worker's input broke");
                        break;
                    }
                }
            }
            cancel.store(true, Ordering::Relaxed);
        });
    if let Err(e) = spawned {
        // Without a reader the worker cannot hear anything: dropping the sender ends it cleanly.
        tracing::error!(error = %e, "cannot start the worker's input thread");
    }
    rx
}

/// The session a request is working on, and the tokens the server was last told about.
struct Open {
    session: LlamaSession<'static>,
    reported: Vec<TokenRecord>,
}

impl Open {
    /// What changed in the token list since the last report.
    fn delta(&mut self) -> TokensDelta {
        let current = self.session.tokens();
        let keep = self
            .reported
            .iter()
            .zip(current)
            .take_while(|(a, b)| same_token(a, b))
            .count();
        let append = current[keep..].to_vec();
        self.reported.truncate(keep);
        self.reported.extend_from_slice(&append);
        TokensDelta { keep, append }
    }
}

fn same_token(a: &TokenRecord, b: &TokenRecord) -> bool {
    a.id == b.id && a.logprob.map(f32::to_bits) == b.logprob.map(f32::to_bits)
}

struct Worker<W: Write> {
    engine: &'static LlamaEngine,
    pool: SessionPool,
    open: Option<Open>,
    cancel: CancelFlag,
    output: W,
}

impl<W: Write> Worker<W> {
    /// Answers one request; only a broken output is fatal.
    fn handle(&mut self, request: Request) -> io::Result<()> {
        let reply = match request {
            Request::Start(_) => Err(EngineError::Worker("the worker is already started".into())),
            Request::Cancel => return Ok(()),
            // Beside the open session, which an error here must not drop.
            Request::SideChat { chat } => {
                // On the physical cores, as the worker's own sessions (serve has no thread option).
                let reply = match self.engine.side_chat(&chat, None) {
                    Ok(text) => Reply::SideAnswer { text },
                    Err(e) => Reply::Error { error: (&e).into() },
                };
                return write_frame(&mut self.output, &reply);
            }
            Request::Open { prompt } => self.open(prompt),
            Request::Append { parts } => self.with_open(|open| {
                let added = open.session.append(&parts)?;
                Ok(Reply::Appended {
                    added,
                    tokens: open.delta(),
                    stats: open.session.stats(),
                })
            }),
            Request::Generate {
                stops,
                max_tokens,
                deadline_ms,
                sampling,
            } => self.generate(stops, max_tokens, deadline_ms, sampling),
            Request::Close { keep, conversation } => {
                if let Some(open) = self.open.take()
                    && keep
                {
                    self.pool.checkin(open.session, conversation);
                }
                Ok(Reply::Closed)
            }
        };
        let reply = reply.unwrap_or_else(|e| {
            // The session's state is unknown after an error: do not keep it.
            self.open = None;
            Reply::Error { error: (&e).into() }
        });
        write_frame(&mut self.output, &reply)
    }

    fn open(&mut self, prompt: Prompt) -> Result<Reply, EngineError> {
        // A session left open by a confused client is dropped, not reused.
        self.open = None;
        let parts = match &prompt {
            Prompt::Conversation { messages } => self.engine.conversation_prompt(messages)?,
            Prompt::Task { system, user } => self.engine.chat_prompt(system, user)?,
        };
        let tokens = self.engine.tokenize_parts(&parts);
        let checkout = self.pool.checkout(&tokens)?;
        let mut open = Open {
            session: checkout.session,
            reported: Vec::new(),
        };
        open.session.append_tokens(&tokens[checkout.cached..])?;
        let reply = Reply::Opened {
            prompt_tokens: tokens.len(),
            cached: checkout.cached,
            conversation: checkout.conversation,
            context_size: open.session.context_size(),
            tokens: open.delta(),
            stats: open.session.stats(),
        };
        self.open = Some(open);
        Ok(reply)
    }

    fn generate(
        &mut self,
        stops: Vec<String>,
        max_tokens: usize,
        deadline_ms: Option<u64>,
        sampling: catena_engine::SamplingParams,
    ) -> Result<Reply, EngineError> {
        let Some(mut open) = self.open.take() else {
            return Err(no_session());
        };
        self.cancel.store(false, Ordering::Relaxed);
        let limits = GenerateLimits {
            max_tokens,
            deadline: deadline_ms.map(|ms| Instant::now() + Duration::from_millis(ms)),
            cancel: Some(self.cancel.clone()),
        };
        open.session.set_sampling(sampling);
        let output = &mut self.output;
        let cancel = &self.cancel;
        let mut broken = None;
        let generation = open
            .session
            .generate(&StopMatcher::new(stops), limits, &mut |text| {
                if broken.is_none()
                    && let Err(e) = write_frame(
                        output,
                        &Reply::Text {
                            text: text.to_string(),
                        },
                    )
                {
                    // The server is gone: stop working for it.
                    broken = Some(e);
                    cancel.store(true, Ordering::Relaxed);
                }
            });
        if let Some(e) = broken {
            return Err(EngineError::Worker(format!(
                "the server stopped listening: {e}"
            )));
        }
        let generation = generation?;
        let reply = Reply::Generated {
            generation,
            tokens: open.delta(),
            stats: open.session.stats(),
        };
        self.open = Some(open);
        Ok(reply)
    }

    fn with_open(
        &mut self,
        op: impl FnOnce(&mut Open) -> Result<Reply, EngineError>,
    ) -> Result<Reply, EngineError> {
        let open = self.open.as_mut().ok_or_else(no_session)?;
        op(open)
    }
}

fn no_session() -> EngineError {
    EngineError::Worker("no session is open in the worker".into())
}
