//! The worker process (`catena worker`): loads the model named in the first frame, keeps the KV
//! caches, and answers requests on its lanes. A lane is one conversation with the server: one
//! open session, its requests answered in order. With one lane (the default) requests run one at
//! a time, each session a context of its own; with N lanes (`catena serve --parallel N`) the
//! worker decodes N sequences together in one context ([`LlamaEngine::with_sequences`]), each
//! lane on a thread of its own, and the N slots are the kept caches. A separate thread reads the
//! input so a `Cancel` reaches a running generation, and the end of the input (the server is
//! gone) stops everything.

use crate::pool::{MakeSession, SessionPool};
use catena_engine::hardware::plan_for_model;
use catena_engine::llama::{AdapterOptions, LlamaEngine, LoadOptions};
use catena_engine_api::plan::{Overrides, Plan, batched_kv_caches};
use catena_engine_api::{
    CancelFlag, EngineError, GenerateLimits, SessionOptions, StartPrompt, StopMatcher, TaskChat,
    TokenRecord,
};
use catena_worker::WorkerExit;
use catena_worker::protocol::{
    FromWorker, Prompt, Reply, Request, ToWorker, TokensDelta, WorkerConfig, read_frame,
    write_frame,
};
use parking_lot::Mutex;
use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Serves frames from standard input to a private copy of standard output until the input ends.
pub fn run_stdio() -> Result<(), WorkerExit> {
    let output = crate::stdio::take_stdout()?;
    serve(io::stdin(), output)
}

/// Serves frames from `input` to `output` until the input ends.
pub fn serve(
    mut input: impl Read + Send + 'static,
    output: impl Write + Send,
) -> Result<(), WorkerExit> {
    let config = match read_frame::<ToWorker>(&mut input)? {
        Some(ToWorker {
            request: Request::Start(config),
            ..
        }) => config,
        Some(ToWorker {
            request: Request::Quantize(job),
            ..
        }) => return crate::quantize::run_job(&job, input, output),
        Some(ToWorker {
            request: Request::Template(job),
            ..
        }) => return crate::template::run_job(&job, output),
        _ => return Err(WorkerExit::NotStarted),
    };
    let output = Output(Mutex::new(output));
    let (engine, plan, session) = match load(&config) {
        Ok(loaded) => loaded,
        Err(e) => {
            output.send(0, &Reply::Error { error: (&e).into() })?;
            return Err(WorkerExit::Load(e));
        }
    };
    let ready = Reply::Ready {
        info: engine.info().clone(),
        plan,
    };
    let lanes = spawn_reader(input, config.parallel.max(1));
    if lanes.len() == 1 {
        output.send(0, &ready)?;
        let make: MakeSession<_> = Box::new(move || engine.session(&session));
        let pool = Mutex::new(SessionPool::new(make, config.sessions));
        let (inbox, cancel) = lanes.into_iter().next().ok_or(WorkerExit::NotStarted)?;
        return Ok(Lane::new(0, engine, &pool, cancel, &output).serve(inbox)?);
    }
    let served = engine.with_sequences(&session, lanes.len(), |sequences| {
        // Ready only once the one context for every slot exists: a plan that does not fit
        // fails the start, with llama.cpp's reason, rather than the first request.
        output.send(0, &ready)?;
        let pool = Mutex::new(SessionPool::fixed(sequences));
        std::thread::scope(|scope| {
            let threads: Vec<_> = lanes
                .into_iter()
                .enumerate()
                .map(|(lane, (inbox, cancel))| {
                    let lane = Lane::new(lane, engine, &pool, cancel, &output);
                    std::thread::Builder::new()
                        .name(format!("catena-worker-lane-{}", lane.lane))
                        .spawn_scoped(scope, move || lane.serve(inbox))
                })
                .collect();
            let mut outcome = Ok(());
            for thread in threads {
                let ended = match thread {
                    Ok(thread) => thread
                        .join()
                        .unwrap_or_else(|_| Err(io::Error::other("a lane thread panicked"))),
                    Err(e) => Err(e),
                };
                if outcome.is_ok() {
                    outcome = ended;
                }
            }
            outcome
        })
    });
    match served {
        Ok(lanes_ended) => Ok(lanes_ended?),
        Err(e) => {
            output.send(0, &Reply::Error { error: (&e).into() })?;
            Err(WorkerExit::Load(e))
        }
    }
}

/// The frame channel back to the server, shared by the lanes (a frame is written whole).
struct Output<W>(Mutex<W>);

impl<W: Write> Output<W> {
    fn send(&self, lane: usize, reply: &Reply) -> io::Result<()> {
        write_frame(&mut *self.0.lock(), &FromWorker { lane, reply })
    }
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
        // With lanes, the slots of the one batched context (and its spare stream) are the
        // caches.
        kv_caches: if config.parallel > 1 {
            batched_kv_caches(u32::try_from(config.parallel).unwrap_or(u32::MAX))
        } else {
            u32::try_from(config.sessions).unwrap_or(u32::MAX)
        },
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
            adapter: config
                .adapter
                .clone()
                .map(|path| AdapterOptions { path, scale: 1.0 }),
            prompt_cache: config.prompt_cache.clone(),
        },
    )?;
    // The model lives as long as the worker process; sessions borrow it.
    Ok((Box::leak(Box::new(engine)), plan, session))
}

/// Reads frames on a thread of its own and hands each lane its requests; `Cancel` sets the
/// lane's flag at once. When the input ends or breaks, or names a lane that does not exist (the
/// server broke the protocol), every flag is set and every lane's queue closes, which ends the
/// worker.
fn spawn_reader(
    mut input: impl Read + Send + 'static,
    lanes: usize,
) -> Vec<(mpsc::Receiver<Request>, CancelFlag)> {
    let (senders, lanes): (Vec<_>, Vec<_>) = (0..lanes)
        .map(|_| {
            let (tx, rx) = mpsc::channel();
            let cancel = CancelFlag::default();
            ((tx, cancel.clone()), (rx, cancel))
        })
        .unzip();
    let spawned = std::thread::Builder::new()
        .name("catena-worker-input".into())
        .spawn(move || {
            loop {
                let frame = match read_frame::<ToWorker>(&mut input) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::error!(error = %e, "the worker's input broke");
                        break;
                    }
                };
                let Some((queue, cancel)) = senders.get(frame.lane) else {
                    tracing::error!(
                        lane = frame.lane,
                        "a request for a lane that does not exist"
                    );
                    break;
                };
                match frame.request {
                    Request::Cancel => cancel.store(true, Ordering::Relaxed),
                    // A lane that has ended no longer listens; the others go on.
                    request => drop(queue.send(request)),
                }
            }
            for (_, cancel) in &senders {
                cancel.store(true, Ordering::Relaxed);
            }
        });
    if let Err(e) = spawned {
        // Without a reader the worker cannot hear anything: the senders are gone with the
        // closure, so every lane's queue is closed and the worker ends cleanly.
        tracing::error!(error = %e, "cannot start the worker's input thread");
    }
    lanes
}

/// The session a lane is working on, and the tokens the server was last told about.
struct Open<S> {
    session: S,
    reported: Vec<TokenRecord>,
}

impl<S: StartPrompt> Open<S> {
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

/// One lane: its requests, in order, against a session from the shared pool.
struct Lane<'w, S, W> {
    lane: usize,
    engine: &'w LlamaEngine,
    pool: &'w Mutex<SessionPool<S>>,
    open: Option<Open<S>>,
    cancel: CancelFlag,
    output: &'w Output<W>,
}

impl<'w, S: StartPrompt, W: Write> Lane<'w, S, W> {
    fn new(
        lane: usize,
        engine: &'w LlamaEngine,
        pool: &'w Mutex<SessionPool<S>>,
        cancel: CancelFlag,
        output: &'w Output<W>,
    ) -> Self {
        Lane {
            lane,
            engine,
            pool,
            open: None,
            cancel,
            output,
        }
    }

    /// Answers the lane's requests until its queue closes; only a broken output is fatal.
    fn serve(mut self, inbox: mpsc::Receiver<Request>) -> io::Result<()> {
        let served = inbox.iter().try_for_each(|request| self.handle(request));
        self.release(None, true);
        served
    }

    /// Gives the open session back to the pool: kept for reuse, or emptied (`forget`).
    fn release(&mut self, conversation: Option<String>, forget: bool) {
        if let Some(open) = self.open.take() {
            self.pool.lock().checkin(open.session, conversation, forget);
        }
    }

    /// Answers one request.
    fn handle(&mut self, request: Request) -> io::Result<()> {
        let reply = match request {
            Request::Start(_) | Request::Quantize(_) | Request::Template(_) => {
                Err(EngineError::Worker("the worker is already started".into()))
            }
            Request::Cancel => return Ok(()),
            // Beside the open session, which an error here must not drop.
            Request::SideChat { chat } => {
                // On the physical cores, as the worker's own sessions (serve has no thread option).
                let reply = match self.engine.side_chat(&chat, None) {
                    Ok(text) => Reply::SideAnswer { text },
                    Err(e) => Reply::Error { error: (&e).into() },
                };
                return self.output.send(self.lane, &reply);
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
                constraint,
                stop_on_repetition,
            } => self.generate(
                stops,
                GenerateLimits {
                    max_tokens,
                    deadline: deadline_ms.map(|ms| Instant::now() + Duration::from_millis(ms)),
                    cancel: None,
                    stop_on_repetition,
                },
                sampling,
                constraint,
            ),
            Request::Close { keep, conversation } => {
                self.release(conversation, !keep);
                Ok(Reply::Closed)
            }
        };
        let reply = reply.unwrap_or_else(|e| {
            // The session's state is unknown after an error: do not keep what it holds.
            self.release(None, true);
            Reply::Error { error: (&e).into() }
        });
        self.output.send(self.lane, &reply)
    }

    fn open(&mut self, prompt: Prompt) -> Result<Reply, EngineError> {
        // A session left open by a confused client is emptied, not reused.
        self.release(None, true);
        let engine = self.engine;
        let (tokens, shared) = match &prompt {
            Prompt::Conversation { messages } => engine.conversation_task_prompt(messages)?,
            Prompt::Task {
                system,
                user,
                user_shared,
            } => engine.task_prompt(&TaskChat {
                system,
                user,
                user_shared: *user_shared,
            })?,
            Prompt::Parts {
                parts,
                instructions,
            } => engine.parts_task_prompt(parts, instructions),
        };
        let checkout = self.pool.lock().checkout(&tokens, shared)?;
        let mut open = Open {
            session: checkout.session,
            reported: Vec::new(),
        };
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
        limits: GenerateLimits,
        sampling: catena_engine_api::SamplingParams,
        constraint: Option<catena_engine_api::Constraint>,
    ) -> Result<Reply, EngineError> {
        let lane = self.lane;
        let output = self.output;
        let cancel = self.cancel.clone();
        let open = self.open.as_mut().ok_or_else(no_session)?;
        cancel.store(false, Ordering::Relaxed);
        // The lane's own flag, which a `Cancel` request sets.
        let limits = GenerateLimits {
            cancel: Some(cancel.clone()),
            ..limits
        };
        open.session.set_sampling(sampling);
        if let Some(constraint) = &constraint {
            match open.session.constrain(constraint) {
                // A lazy grammar only guards a call the model starts: an engine that cannot
                // constrain answers without it, and the call is parsed as written.
                Err(EngineError::Unsupported(why)) if constraint.trigger.is_some() => {
                    tracing::debug!(why, "answering without the lazy grammar");
                }
                other => other?,
            }
        }
        let mut broken = None;
        let generation = open
            .session
            .generate(&StopMatcher::new(stops), limits, &mut |text| {
                if broken.is_none()
                    && let Err(e) = output.send(
                        lane,
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
        Ok(Reply::Generated {
            generation,
            tokens: open.delta(),
            stats: open.session.stats(),
        })
    }

    fn with_open(
        &mut self,
        op: impl FnOnce(&mut Open<S>) -> Result<Reply, EngineError>,
    ) -> Result<Reply, EngineError> {
        let open = self.open.as_mut().ok_or_else(no_session)?;
        op(open)
    }
}

fn no_session() -> EngineError {
    EngineError::Worker("no session is open on this lane of the worker".into())
}
