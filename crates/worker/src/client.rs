//! The server's side of the worker: spawns `catena worker`, speaks frames to it, notices when it
//! dies (and how), and restarts it. [`RemoteSession`] implements [`Session`] over the pipe, so the
//! agent runner drives a model in another process exactly as it drives one in its own.

use super::protocol::{Prompt, Reply, Request, TokensDelta, WorkerConfig, read_frame, write_frame};
use catena_engine::{
    EngineError, GenerateLimits, Generation, ModelInfo, PromptPart, SamplingParams, Session,
    SessionStats, StopMatcher, TokenRecord,
};
use std::io::{self, BufReader, BufWriter};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How often a waiting client looks at its cancel flag.
const POLL: Duration = Duration::from_millis(20);

/// The program that runs a worker: normally this very binary with the `worker` subcommand.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl WorkerCommand {
    /// The running executable, with `worker` (and `-v` flags to keep the same log level).
    pub fn current_exe(verbosity: u8) -> io::Result<WorkerCommand> {
        let mut args = vec!["worker".to_string()];
        if verbosity > 0 {
            args.push(format!("-{}", "v".repeat(verbosity.into())));
        }
        Ok(WorkerCommand {
            program: std::env::current_exe()?,
            args,
        })
    }
}

/// What anyone may read about the worker while it runs (the health endpoint).
#[derive(Debug, Default)]
pub struct WorkerStatus {
    pid: AtomicU32,
    restarts: AtomicU32,
    alive: AtomicBool,
}

impl WorkerStatus {
    /// The worker's process id (0 before the first start).
    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::SeqCst)
    }

    /// Times the worker was started again after dying.
    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::SeqCst)
    }

    pub fn alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }
}

/// What the reader thread passes on.
enum Incoming {
    Reply(Reply),
    /// The output ended or broke: the worker is gone (or unusable).
    End(Option<io::Error>),
}

/// A running worker process.
pub struct WorkerClient {
    command: WorkerCommand,
    config: WorkerConfig,
    status: Arc<WorkerStatus>,
    process: Option<Process>,
    info: ModelInfo,
}

struct Process {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    replies: mpsc::Receiver<Incoming>,
}

impl WorkerClient {
    /// Starts a worker and waits until it has loaded the model (a model that cannot load fails
    /// here, with llama.cpp's reason).
    pub fn start(
        command: WorkerCommand,
        config: WorkerConfig,
        status: Arc<WorkerStatus>,
    ) -> Result<WorkerClient, EngineError> {
        let (process, info) = spawn(&command, &config, &status)?;
        Ok(WorkerClient {
            command,
            config,
            status,
            process: Some(process),
            info,
        })
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn is_alive(&self) -> bool {
        self.process.is_some()
    }

    /// Whether the worker is running, noticing one that died while idle (the out-of-memory
    /// killer does not wait for a request), so the next request does not fail on its corpse.
    pub fn check(&mut self) -> bool {
        let exited = match self.process.as_mut() {
            None => return false,
            Some(process) => matches!(process.child.try_wait(), Ok(Some(_))),
        };
        if exited {
            let _ = self.died(None);
        }
        !exited
    }

    /// Starts a fresh worker in place of a dead one.
    pub fn restart(&mut self) -> Result<(), EngineError> {
        if let Some(process) = self.process.take() {
            stop(process);
        }
        self.status.restarts.fetch_add(1, Ordering::SeqCst);
        let (process, info) = spawn(&self.command, &self.config, &self.status)?;
        tracing::warn!(pid = process.child.id(), "the model worker was restarted");
        self.process = Some(process);
        self.info = info;
        Ok(())
    }

    /// Serves another model: the running worker stops first (two models at once may not fit in
    /// memory), then a worker loads `model_path`. When that model cannot load, the previous one
    /// is loaded again and the error says why the new one failed.
    pub fn switch_model(&mut self, model_path: std::path::PathBuf) -> Result<(), EngineError> {
        if let Some(process) = self.process.take() {
            stop(process);
        }
        let previous = std::mem::replace(&mut self.config.model_path, model_path);
        match spawn(&self.command, &self.config, &self.status) {
            Ok((process, info)) => {
                tracing::info!(model = %self.config.model_path.display(), "now serving another model");
                self.process = Some(process);
                self.info = info;
                Ok(())
            }
            Err(e) => {
                self.config.model_path = previous;
                if let Err(again) = self.restart() {
                    tracing::error!(error = %again, "the previous model could not be loaded again");
                }
                Err(e)
            }
        }
    }

    /// Opens a session holding `prompt` (evaluated, or found in a kept KV cache).
    pub fn open(&mut self, prompt: Prompt) -> Result<OpenedSession<'_>, EngineError> {
        self.send(&Request::Open { prompt })?;
        match self.receive(&mut |_| {})? {
            Reply::Opened {
                prompt_tokens,
                cached,
                conversation,
                context_size,
                tokens,
                stats,
            } => {
                let mut session = RemoteSession {
                    client: self,
                    tokens: Vec::new(),
                    stats,
                    context_size,
                    sampling: SamplingParams::default(),
                    closed: false,
                };
                session.apply(tokens);
                Ok(OpenedSession {
                    session,
                    prompt_tokens,
                    cached,
                    conversation,
                })
            }
            other => Err(self.unexpected(&other)),
        }
    }

    fn send(&mut self, request: &Request) -> Result<(), EngineError> {
        let process = self.process.as_mut().ok_or_else(not_running)?;
        if let Err(e) = write_frame(&mut process.stdin, request) {
            return Err(self.died(Some(e)));
        }
        Ok(())
    }

    /// The next reply that is not streamed text; text goes to `on_text`.
    fn receive(&mut self, on_text: &mut dyn FnMut(&str)) -> Result<Reply, EngineError> {
        self.receive_until(on_text, &mut || false)
    }

    /// Like [`receive`](Self::receive), sending `Cancel` once when `cancelled` turns true.
    fn receive_until(
        &mut self,
        on_text: &mut dyn FnMut(&str),
        cancelled: &mut dyn FnMut() -> bool,
    ) -> Result<Reply, EngineError> {
        let mut cancel_sent = false;
        loop {
            let process = self.process.as_mut().ok_or_else(not_running)?;
            let incoming = match process.replies.recv_timeout(POLL) {
                Ok(incoming) => incoming,
                Err(RecvTimeoutError::Timeout) => {
                    if !cancel_sent && cancelled() {
                        cancel_sent = true;
                        self.send(&Request::Cancel)?;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => Incoming::End(None),
            };
            match incoming {
                Incoming::Reply(Reply::Text { text }) => on_text(&text),
                Incoming::Reply(Reply::Error { error }) => return Err(error.into()),
                Incoming::Reply(reply) => return Ok(reply),
                Incoming::End(cause) => return Err(self.died(cause)),
            }
        }
    }

    /// The worker broke the protocol: it cannot be trusted any more.
    fn unexpected(&mut self, reply: &Reply) -> EngineError {
        let what = format!("{reply:?}");
        let what: String = what.chars().take(120).collect();
        if let Some(process) = self.process.take() {
            stop(process);
        }
        self.status.alive.store(false, Ordering::SeqCst);
        EngineError::WorkerDied(format!("it broke the protocol (answered {what})"))
    }

    /// The worker is gone: collect how it ended.
    fn died(&mut self, cause: Option<io::Error>) -> EngineError {
        self.status.alive.store(false, Ordering::SeqCst);
        let Some(mut process) = self.process.take() else {
            return not_running();
        };
        let status = wait_briefly(&mut process.child);
        let reason = match (status, cause) {
            (Some(status), _) => describe_exit(status),
            (None, Some(e)) => format!("its pipe broke ({e}) and it was stopped"),
            (None, None) => "it closed its output and was stopped".to_string(),
        };
        stop(process);
        tracing::error!(%reason, "the model worker died");
        EngineError::WorkerDied(reason)
    }
}

impl Drop for WorkerClient {
    fn drop(&mut self) {
        if let Some(process) = self.process.take() {
            stop(process);
        }
    }
}

/// Starts a process and waits for `Ready`.
fn spawn(
    command: &WorkerCommand,
    config: &WorkerConfig,
    status: &WorkerStatus,
) -> Result<(Process, ModelInfo), EngineError> {
    let mut child = Command::new(&command.program)
        .args(&command.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            EngineError::WorkerDied(format!("cannot start {}: {e}", command.program.display()))
        })?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(EngineError::WorkerDied("its pipes were not created".into()));
    };
    let (tx, replies) = mpsc::channel();
    let reader = std::thread::Builder::new()
        .name("catena-worker-output".into())
        .spawn(move || {
            let mut stdout = BufReader::new(stdout);
            loop {
                let incoming = match read_frame::<Reply>(&mut stdout) {
                    Ok(Some(reply)) => Incoming::Reply(reply),
                    Ok(None) => Incoming::End(None),
                    Err(e) => Incoming::End(Some(e)),
                };
                let end = matches!(incoming, Incoming::End(_));
                if tx.send(incoming).is_err() || end {
                    break;
                }
            }
        });
    if let Err(e) = reader {
        let _ = child.kill();
        let _ = child.wait();
        return Err(EngineError::WorkerDied(format!(
            "cannot start the thread that reads it: {e}"
        )));
    }
    let mut process = Process {
        child,
        stdin: BufWriter::new(stdin),
        replies,
    };
    status.pid.store(process.child.id(), Ordering::SeqCst);
    let started = write_frame(&mut process.stdin, &Request::Start(config.clone()));
    let first = match started {
        Ok(()) => process.replies.recv().unwrap_or(Incoming::End(None)),
        Err(e) => Incoming::End(Some(e)),
    };
    match first {
        Incoming::Reply(Reply::Ready { info, plan }) => {
            status.alive.store(true, Ordering::SeqCst);
            if let Some(plan) = plan {
                tracing::info!(
                    gpu_layers = plan.gpu_layers,
                    context = plan.context,
                    kv_cache = plan.kv_cache.name(),
                    "the worker placed the model as planned"
                );
            }
            Ok((process, info))
        }
        Incoming::Reply(Reply::Error { error }) => {
            stop(process);
            Err(error.into())
        }
        Incoming::Reply(other) => {
            stop(process);
            Err(EngineError::WorkerDied(format!(
                "it answered the start with {other:?}"
            )))
        }
        Incoming::End(_) => {
            let status = wait_briefly(&mut process.child);
            stop(process);
            Err(EngineError::WorkerDied(format!(
                "it ended while loading the model: {}",
                status.map_or_else(|| "no exit status".to_string(), describe_exit)
            )))
        }
    }
}

/// Ends a process: closing its input asks it to finish; it is killed if it does not.
fn stop(process: Process) {
    let Process {
        mut child, stdin, ..
    } = process;
    drop(stdin);
    if wait_briefly(&mut child).is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The exit status, if the process ends within a second.
fn wait_briefly(child: &mut Child) -> Option<ExitStatus> {
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

/// How a worker ended, in words a user can act on.
pub fn describe_exit(status: ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            let what = match signal {
                libc::SIGABRT => "SIGABRT: llama.cpp or ggml aborted",
                libc::SIGKILL => "SIGKILL: killed, perhaps by the out-of-memory killer",
                libc::SIGSEGV => "SIGSEGV: a memory fault in native code",
                libc::SIGBUS => "SIGBUS: a memory fault (is the model file on a removed disk?)",
                libc::SIGILL => "SIGILL: an instruction this CPU lacks",
                libc::SIGFPE => "SIGFPE: an arithmetic fault in native code",
                libc::SIGTERM => "SIGTERM: asked to stop",
                _ => "a signal",
            };
            return format!("killed by signal {signal} ({what})");
        }
    }
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => "ended without a status".to_string(),
    }
}

fn not_running() -> EngineError {
    EngineError::WorkerDied("it is not running".into())
}

/// A session the worker opened, with how its prompt was found.
pub struct OpenedSession<'c> {
    pub session: RemoteSession<'c>,
    pub prompt_tokens: usize,
    /// Leading prompt tokens that were already in a kept KV cache.
    pub cached: usize,
    /// The stored conversation the prompt continues.
    pub conversation: Option<String>,
}

/// A session living in the worker process, mirrored here (tokens, counters).
pub struct RemoteSession<'c> {
    client: &'c mut WorkerClient,
    tokens: Vec<TokenRecord>,
    stats: SessionStats,
    context_size: usize,
    sampling: SamplingParams,
    closed: bool,
}

impl RemoteSession<'_> {
    /// Ends the session; `keep` leaves its KV cache in the worker's pool for a later request,
    /// tagged with the stored conversation it belongs to.
    pub fn close(mut self, keep: bool, conversation: Option<String>) -> Result<(), EngineError> {
        self.closed = true;
        self.finish(keep, conversation)
    }

    fn finish(&mut self, keep: bool, conversation: Option<String>) -> Result<(), EngineError> {
        if !self.client.is_alive() {
            return Ok(());
        }
        self.client.send(&Request::Close { keep, conversation })?;
        match self.client.receive(&mut |_| {})? {
            Reply::Closed => Ok(()),
            other => Err(self.client.unexpected(&other)),
        }
    }

    fn apply(&mut self, delta: TokensDelta) {
        self.tokens.truncate(delta.keep);
        self.tokens.extend(delta.append);
    }
}

impl Drop for RemoteSession<'_> {
    /// A session dropped without `close` (an error path) is dropped in the worker too.
    fn drop(&mut self) {
        if !self.closed
            && let Err(e) = self.finish(false, None)
        {
            tracing::debug!(error = %e, "closing a remote session failed");
        }
    }
}

impl Session for RemoteSession<'_> {
    fn side_chat(&mut self, chat: &catena_engine::SideChat) -> Result<String, EngineError> {
        self.client
            .send(&Request::SideChat { chat: chat.clone() })?;
        match self.client.receive(&mut |_| {})? {
            Reply::SideAnswer { text } => Ok(text),
            other => Err(self.client.unexpected(&other)),
        }
    }

    fn append(&mut self, parts: &[PromptPart]) -> Result<usize, EngineError> {
        self.client.send(&Request::Append {
            parts: parts.to_vec(),
        })?;
        match self.client.receive(&mut |_| {})? {
            Reply::Appended {
                added,
                tokens,
                stats,
            } => {
                self.apply(tokens);
                self.stats = stats;
                Ok(added)
            }
            other => Err(self.client.unexpected(&other)),
        }
    }

    fn generate(
        &mut self,
        stops: &StopMatcher,
        limits: GenerateLimits,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation, EngineError> {
        let deadline_ms = limits.deadline.map(|deadline| {
            let left = deadline.saturating_duration_since(Instant::now());
            u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
        });
        self.client.send(&Request::Generate {
            stops: stops.stops().to_vec(),
            max_tokens: limits.max_tokens,
            deadline_ms,
            sampling: self.sampling,
        })?;
        match self
            .client
            .receive_until(on_text, &mut || limits.is_cancelled())?
        {
            Reply::Generated {
                generation,
                tokens,
                stats,
            } => {
                self.apply(tokens);
                self.stats = stats;
                Ok(generation)
            }
            other => Err(self.client.unexpected(&other)),
        }
    }

    fn stats(&self) -> SessionStats {
        self.stats.clone()
    }

    fn set_sampling(&mut self, sampling: SamplingParams) {
        self.sampling = sampling;
    }

    fn context_size(&self) -> usize {
        self.context_size
    }

    fn tokens(&self) -> &[TokenRecord] {
        &self.tokens
    }
}
