//! The server's side of the worker: spawns `catena worker`, speaks frames to it, notices when it
//! dies (and how), and restarts it. [`WorkerSession`] implements [`Session`] over the pipe, so the
//! agent runner drives a model in another process exactly as it drives one in its own.
//!
//! The worker has lanes (`WorkerConfig::parallel`), each one conversation: a thread reads the
//! worker's output and hands each lane its replies, so several threads can each drive a session
//! on a lane of their own through a shared `&WorkerClient`. Restarting or switching the model
//! takes `&mut WorkerClient`, which no open session can be holding.

use super::protocol::{
    FromWorker, Prompt, Reply, Request, ToWorker, TokensDelta, WorkerConfig, read_frame,
    write_frame,
};
use crate::last_words::{LAST_WORDS_WAIT, LastWords};
use catena_engine_api::plan::{PROTOCOL_CONTEXT, Plan};
use catena_engine_api::{
    Constraint, EngineError, GenerateLimits, Generation, ModelInfo, PromptPart, PromptStart,
    Session, SessionState, StartChat, StopMatcher, TaskChat,
};
use parking_lot::Mutex;
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

    /// The child's process, its three standard streams piped: requests in, replies out, and its
    /// log passed on to ours by [`LastWords`]. Since its log then goes to a pipe, a child whose
    /// log reaches a terminal through us is told to keep its colours (`CLICOLOR_FORCE`, which the
    /// log setup honours, as it does `NO_COLOR`).
    pub(crate) fn process(&self) -> Command {
        let mut process = Command::new(&self.program);
        process
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if anstream::AutoStream::choice(&io::stderr()) != anstream::ColorChoice::Never {
            process.env("CLICOLOR_FORCE", "1");
        }
        process
    }
}

/// A child that runs `script` in the shell in place of `catena worker`: the tests' stand-in.
#[cfg(all(test, unix))]
pub(crate) fn shell(script: &str) -> WorkerCommand {
    WorkerCommand {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
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

/// What the reader thread passes on to a lane.
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
    /// The context each lane's conversation gets, as the worker placed the model.
    context_size: u32,
}

/// A worker that has loaded its model.
struct Started {
    process: Process,
    info: ModelInfo,
    context_size: u32,
}

struct Process {
    child: Mutex<Child>,
    stdin: Mutex<BufWriter<ChildStdin>>,
    /// Each lane's replies, in order.
    lanes: Vec<Mutex<mpsc::Receiver<Incoming>>>,
    /// Why the process can no longer be used (it died, or broke the protocol); the first lane
    /// to notice says, the others repeat it.
    dead: Mutex<Option<String>>,
    /// Its standard error, passed on to ours, and what in it explains an abort.
    last_words: Option<LastWords>,
}

impl Process {
    fn pid(&self) -> u32 {
        self.child.lock().id()
    }

    /// How the process ended, with the line of its standard error that explains an abort.
    fn ended(&self, status: ExitStatus) -> String {
        let said = self
            .last_words
            .as_ref()
            .and_then(|w| w.said(LAST_WORDS_WAIT));
        match said {
            Some(said) => format!("{}; it said: {said}", describe_exit(status)),
            None => describe_exit(status),
        }
    }
}

impl WorkerClient {
    /// Starts a worker and waits until it has loaded the model (a model that cannot load fails
    /// here, with llama.cpp's reason).
    pub fn start(
        command: WorkerCommand,
        config: WorkerConfig,
        status: Arc<WorkerStatus>,
    ) -> Result<WorkerClient, EngineError> {
        let started = spawn(&command, &config, &status)?;
        Ok(WorkerClient {
            command,
            config,
            status,
            process: Some(started.process),
            info: started.info,
            context_size: started.context_size,
        })
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The context window of each conversation in tokens: what the worker's placement plan
    /// chose (it may be less than asked for when memory is short), so a client is told the
    /// size its prompts really meet.
    pub fn context_size(&self) -> u32 {
        self.context_size
    }

    fn adopt(&mut self, started: Started) {
        self.process = Some(started.process);
        self.info = started.info;
        self.context_size = started.context_size;
    }

    /// Lanes the worker serves at once (at least 1); a session's lane is below this.
    pub fn lanes(&self) -> usize {
        self.config.parallel.max(1)
    }

    pub fn is_alive(&self) -> bool {
        self.process
            .as_ref()
            .is_some_and(|process| process.dead.lock().is_none())
    }

    /// Whether the worker is running, noticing one that died while idle (the out-of-memory
    /// killer does not wait for a request), so the next request does not fail on its corpse.
    pub fn check(&self) -> bool {
        let Some(process) = self.process.as_ref() else {
            return false;
        };
        if process.dead.lock().is_some() {
            return false;
        }
        let exited = matches!(process.child.lock().try_wait(), Ok(Some(_)));
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
        let started = spawn(&self.command, &self.config, &self.status)?;
        tracing::warn!(
            pid = started.process.pid(),
            "the model worker was restarted"
        );
        self.adopt(started);
        Ok(())
    }

    /// Serves another model (with its adapter, if any): the running worker stops first (two
    /// models at once may not fit in memory), then a worker loads `model_path`. When that model
    /// cannot load, the previous one is loaded again and the error says why the new one failed.
    pub fn switch_model(
        &mut self,
        model_path: std::path::PathBuf,
        adapter: Option<std::path::PathBuf>,
    ) -> Result<(), EngineError> {
        if let Some(process) = self.process.take() {
            stop(process);
        }
        let previous = (
            std::mem::replace(&mut self.config.model_path, model_path),
            std::mem::replace(&mut self.config.adapter, adapter),
        );
        match spawn(&self.command, &self.config, &self.status) {
            Ok(started) => {
                tracing::info!(model = %self.config.model_path.display(), "now serving another model");
                self.adopt(started);
                Ok(())
            }
            Err(e) => {
                (self.config.model_path, self.config.adapter) = previous;
                if let Err(again) = self.restart() {
                    tracing::error!(error = %again, "the previous model could not be loaded again");
                }
                Err(e)
            }
        }
    }

    /// Opens a session on `lane` holding `prompt` (evaluated, or found in a kept KV cache). A
    /// lane carries one session at a time: a caller drives each lane from one thread.
    pub fn open(&self, lane: usize, prompt: Prompt) -> Result<OpenedSession<'_>, EngineError> {
        let mut session = self.lane(lane)?;
        let opened = session.open(prompt)?;
        Ok(OpenedSession {
            session,
            prompt_tokens: opened.prompt_tokens,
            cached: opened.cached,
            conversation: opened.conversation,
        })
    }

    /// `lane`'s session before it holds a prompt: [`StartChat::start_chat`] opens it with a
    /// task's prompt, so the worker can give it the kept KV cache that shares the most with it.
    pub fn lane(&self, lane: usize) -> Result<WorkerSession<'_>, EngineError> {
        if lane >= self.lanes() {
            return Err(EngineError::Worker(format!(
                "lane {lane} does not exist (the worker has {})",
                self.lanes()
            )));
        }
        Ok(WorkerSession {
            client: self,
            lane,
            state: SessionState::default(),
            closed: true,
            constraint: None,
        })
    }

    fn process(&self) -> Result<&Process, EngineError> {
        let process = self.process.as_ref().ok_or_else(not_running)?;
        if let Some(reason) = process.dead.lock().as_ref() {
            return Err(EngineError::WorkerDied(reason.clone()));
        }
        Ok(process)
    }

    fn send(&self, lane: usize, request: &Request) -> Result<(), EngineError> {
        let process = self.process()?;
        let sent = write_frame(&mut *process.stdin.lock(), &ToWorker { lane, request });
        sent.map_err(|e| self.died(Some(e)))
    }

    /// The lane's next reply that is not streamed text; text goes to `on_text`.
    fn receive(&self, lane: usize, on_text: &mut dyn FnMut(&str)) -> Result<Reply, EngineError> {
        self.receive_until(lane, on_text, &mut || false)
    }

    /// Like [`receive`](Self::receive), sending `Cancel` once when `cancelled` turns true.
    fn receive_until(
        &self,
        lane: usize,
        on_text: &mut dyn FnMut(&str),
        cancelled: &mut dyn FnMut() -> bool,
    ) -> Result<Reply, EngineError> {
        let process = self.process()?;
        let replies = process
            .lanes
            .get(lane)
            .ok_or_else(|| EngineError::Worker(format!("lane {lane} does not exist")))?
            .lock();
        let mut cancel_sent = false;
        loop {
            let incoming = match replies.recv_timeout(POLL) {
                Ok(incoming) => incoming,
                Err(RecvTimeoutError::Timeout) => {
                    if !cancel_sent && cancelled() {
                        cancel_sent = true;
                        self.send(lane, &Request::Cancel)?;
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
    fn unexpected(&self, reply: &Reply) -> EngineError {
        let what = format!("{reply:?}");
        let what: String = what.chars().take(120).collect();
        let reason = format!("it broke the protocol (answered {what})");
        if let Some(process) = self.process.as_ref() {
            let mut dead = process.dead.lock();
            if dead.is_none() {
                kill(&mut process.child.lock());
                *dead = Some(reason.clone());
            }
        }
        self.status.alive.store(false, Ordering::SeqCst);
        EngineError::WorkerDied(reason)
    }

    /// The worker is gone: collect how it ended (once; every lane that notices gets the same
    /// reason).
    fn died(&self, cause: Option<io::Error>) -> EngineError {
        self.status.alive.store(false, Ordering::SeqCst);
        let Some(process) = self.process.as_ref() else {
            return not_running();
        };
        let mut dead = process.dead.lock();
        if let Some(reason) = dead.as_ref() {
            return EngineError::WorkerDied(reason.clone());
        }
        let mut child = process.child.lock();
        let status = wait_briefly(&mut child);
        let reason = match (status, cause) {
            (Some(status), _) => process.ended(status),
            (None, Some(e)) => format!("its pipe broke ({e}) and it was stopped"),
            (None, None) => "it closed its output and was stopped".to_string(),
        };
        kill(&mut child);
        tracing::error!(%reason, "the model worker died");
        *dead = Some(reason.clone());
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

/// The context each lane gets: the plan's, or without a plan the settings given, else the
/// engine's default (the trained context, capped at the protocol's).
fn placed_context(config: &WorkerConfig, info: &ModelInfo, plan: Option<&Plan>) -> u32 {
    plan.map_or_else(
        || {
            config
                .session
                .context_size
                .unwrap_or(info.context_train.min(PROTOCOL_CONTEXT))
        },
        |plan| plan.context,
    )
}

/// Starts a process with a reader thread for its lanes, and waits for `Ready`.
fn spawn(
    command: &WorkerCommand,
    config: &WorkerConfig,
    status: &WorkerStatus,
) -> Result<Started, EngineError> {
    let mut child = command.process().spawn().map_err(|e| {
        EngineError::WorkerDied(format!("cannot start {}: {e}", command.program.display()))
    })?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        kill(&mut child);
        return Err(EngineError::WorkerDied("its pipes were not created".into()));
    };
    let (senders, lanes): (Vec<_>, Vec<_>) = (0..config.parallel.max(1))
        .map(|_| {
            let (tx, rx) = mpsc::channel();
            (tx, Mutex::new(rx))
        })
        .unzip();
    let reader = std::thread::Builder::new()
        .name("catena-worker-output".into())
        .spawn(move || route_replies(BufReader::new(stdout), &senders));
    if let Err(e) = reader {
        kill(&mut child);
        return Err(EngineError::WorkerDied(format!(
            "cannot start the thread that reads it: {e}"
        )));
    }
    let last_words = child.stderr.take().and_then(LastWords::relay);
    let process = Process {
        child: Mutex::new(child),
        stdin: Mutex::new(BufWriter::new(stdin)),
        lanes,
        dead: Mutex::new(None),
        last_words,
    };
    status.pid.store(process.pid(), Ordering::SeqCst);
    let started = write_frame(
        &mut *process.stdin.lock(),
        &ToWorker {
            lane: 0,
            request: &Request::Start(config.clone()),
        },
    );
    let first = match (started, process.lanes.first()) {
        (Ok(()), Some(lane)) => lane.lock().recv().unwrap_or(Incoming::End(None)),
        (Ok(()), None) => Incoming::End(None),
        (Err(e), _) => Incoming::End(Some(e)),
    };
    match first {
        Incoming::Reply(Reply::Ready { info, plan }) => {
            status.alive.store(true, Ordering::SeqCst);
            let context_size = placed_context(config, &info, plan.as_ref());
            if let Some(plan) = plan {
                tracing::info!(
                    gpu_layers = plan.gpu_layers,
                    context = plan.context,
                    kv_cache = plan.kv_cache.name(),
                    lanes = config.parallel.max(1),
                    "the worker placed the model as planned"
                );
            }
            Ok(Started {
                process,
                info,
                context_size,
            })
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
            let status = wait_briefly(&mut process.child.lock());
            let ended = status.map_or_else(|| "no exit status".to_string(), |s| process.ended(s));
            stop(process);
            Err(EngineError::WorkerDied(format!(
                "it ended while loading the model: {ended}"
            )))
        }
    }
}

/// The reader thread: each reply to its lane's queue. The end of the output (or a reply on a
/// lane that does not exist: the worker broke the protocol) ends every lane.
fn route_replies(mut stdout: impl io::Read, lanes: &[mpsc::Sender<Incoming>]) {
    let end = loop {
        match read_frame::<FromWorker>(&mut stdout) {
            Ok(Some(FromWorker { lane, reply })) => match lanes.get(lane) {
                // A lane whose client is gone (the server shutting down) hears nothing more.
                Some(queue) => drop(queue.send(Incoming::Reply(reply))),
                None => {
                    break Some(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the worker answered on lane {lane}, which does not exist"),
                    ));
                }
            },
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    for queue in lanes {
        let cause = end
            .as_ref()
            .map(|e| io::Error::new(e.kind(), e.to_string()));
        let _ = queue.send(Incoming::End(cause));
    }
}

/// Ends a process: closing its input asks it to finish; it is killed if it does not.
fn stop(process: Process) {
    let Process { child, stdin, .. } = process;
    drop(stdin);
    let mut child = child.into_inner();
    if wait_briefly(&mut child).is_none() {
        kill(&mut child);
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
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
    pub session: WorkerSession<'c>,
    pub prompt_tokens: usize,
    /// Leading prompt tokens that were already in a kept KV cache.
    pub cached: usize,
    /// The stored conversation the prompt continues.
    pub conversation: Option<String>,
}

/// A session living in the worker process, mirrored here (tokens, counters).
pub struct WorkerSession<'c> {
    client: &'c WorkerClient,
    lane: usize,
    state: SessionState,
    closed: bool,
    /// The grammar the next generation follows, sent with it (built in the worker).
    constraint: Option<Constraint>,
}

/// What the worker said about a prompt it opened a session with.
struct Opened {
    prompt_tokens: usize,
    cached: usize,
    conversation: Option<String>,
}

impl WorkerSession<'_> {
    /// Opens this lane's session with `prompt`, closing (and keeping) the one it held.
    fn open(&mut self, prompt: Prompt) -> Result<Opened, EngineError> {
        if !self.closed {
            self.closed = true;
            self.finish(true, None)?;
        }
        self.client.send(self.lane, &Request::Open { prompt })?;
        match self.client.receive(self.lane, &mut |_| {})? {
            Reply::Opened {
                prompt_tokens,
                cached,
                conversation,
                context_size,
                tokens,
                stats,
            } => {
                self.state.tokens.clear();
                self.apply(tokens);
                self.state.stats = stats;
                self.state.context_size = context_size;
                self.closed = false;
                Ok(Opened {
                    prompt_tokens,
                    cached,
                    conversation,
                })
            }
            other => Err(self.client.unexpected(&other)),
        }
    }

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
        self.client
            .send(self.lane, &Request::Close { keep, conversation })?;
        match self.client.receive(self.lane, &mut |_| {})? {
            Reply::Closed => Ok(()),
            other => Err(self.client.unexpected(&other)),
        }
    }

    fn apply(&mut self, delta: TokensDelta) {
        self.state.tokens.truncate(delta.keep);
        self.state.tokens.extend(delta.append);
    }
}

impl Drop for WorkerSession<'_> {
    /// A session dropped without `close` (an error path) is dropped in the worker too.
    fn drop(&mut self) {
        if !self.closed
            && let Err(e) = self.finish(false, None)
        {
            tracing::debug!(error = %e, "closing a remote session failed");
        }
    }
}

impl StartChat for WorkerSession<'_> {
    fn start_chat(&mut self, chat: &TaskChat<'_>) -> Result<PromptStart, EngineError> {
        let opened = self.open(Prompt::Task {
            system: chat.system.to_string(),
            user: chat.user.to_string(),
            user_shared: chat.user_shared,
        })?;
        Ok(PromptStart {
            prompt_tokens: opened.prompt_tokens,
            cached_tokens: opened.cached,
        })
    }
}

impl Session for WorkerSession<'_> {
    fn side_chat(&mut self, chat: &catena_engine_api::SideChat) -> Result<String, EngineError> {
        self.client
            .send(self.lane, &Request::SideChat { chat: chat.clone() })?;
        match self.client.receive(self.lane, &mut |_| {})? {
            Reply::SideAnswer { text } => Ok(text),
            other => Err(self.client.unexpected(&other)),
        }
    }

    fn append(&mut self, parts: &[PromptPart]) -> Result<usize, EngineError> {
        self.client.send(
            self.lane,
            &Request::Append {
                parts: parts.to_vec(),
            },
        )?;
        match self.client.receive(self.lane, &mut |_| {})? {
            Reply::Appended {
                added,
                tokens,
                stats,
            } => {
                self.apply(tokens);
                self.state.stats = stats;
                Ok(added)
            }
            other => Err(self.client.unexpected(&other)),
        }
    }

    /// Kept and sent with the next `Generate`: the worker builds the grammar and answers a bad one
    /// with an error before it samples.
    fn constrain(&mut self, constraint: &Constraint) -> Result<(), EngineError> {
        self.constraint = Some(constraint.clone());
        Ok(())
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
        self.client.send(
            self.lane,
            &Request::Generate {
                stops: stops.stops().to_vec(),
                max_tokens: limits.max_tokens,
                deadline_ms,
                sampling: self.state.sampling,
                constraint: self.constraint.take(),
                stop_on_repetition: limits.stop_on_repetition,
            },
        )?;
        match self
            .client
            .receive_until(self.lane, on_text, &mut || limits.is_cancelled())?
        {
            Reply::Generated {
                generation,
                tokens,
                stats,
            } => {
                self.apply(tokens);
                self.state.stats = stats;
                Ok(generation)
            }
            other => Err(self.client.unexpected(&other)),
        }
    }

    fn state(&self) -> &SessionState {
        &self.state
    }

    fn state_mut(&mut self) -> &mut SessionState {
        &mut self.state
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use catena_engine_api::{LLAMA_ABORT_LINE, SessionOptions};

    fn config() -> WorkerConfig {
        WorkerConfig {
            model_path: "model.gguf".into(),
            adapter: None,
            gpu_layers: None,
            session: SessionOptions::default(),
            sessions: 1,
            parallel: 1,
            kv_cache: None,
            prompt_cache: None,
        }
    }

    /// A child's log goes to a pipe we pass on, so it keeps its colours only when ours has them.
    #[test]
    fn a_child_keeps_its_colours_when_our_log_has_them() {
        let told = |choice: anstream::ColorChoice| {
            choice.write_global();
            let output = shell("printf %s \"$CLICOLOR_FORCE\"")
                .process()
                .output()
                .unwrap();
            String::from_utf8(output.stdout).unwrap()
        };
        let (always, never) = (
            told(anstream::ColorChoice::Always),
            told(anstream::ColorChoice::Never),
        );
        anstream::ColorChoice::Auto.write_global();
        // Without colours the child has only what it inherits.
        let inherited = std::env::var("CLICOLOR_FORCE").unwrap_or_default();
        assert_eq!((always.as_str(), never.as_str()), ("1", inherited.as_str()));
    }

    /// A worker that fails one of llama.cpp's checks while it loads the model (what the engine's
    /// abort callback writes, then SIGABRT): the error names the check, not only the signal.
    #[test]
    fn a_worker_that_aborts_while_loading_is_named_with_its_last_words() {
        // A GGML_ABORT names no assertion: the engine's line is found by its beginning.
        let aborts = shell(&format!(
            "echo '{LLAMA_ABORT_LINE}: llama-vocab.cpp:3279: unsupported vocab type' >&2; \
             kill -ABRT $$"
        ));
        let Err(err) = WorkerClient::start(aborts, config(), Arc::default()) else {
            panic!("the stand-in started");
        };
        let text = err.to_string();
        assert!(
            text.contains("SIGABRT")
                && text.contains(&format!("it said: {LLAMA_ABORT_LINE}"))
                && text.contains("unsupported vocab type"),
            "{text}"
        );
        // One that ends without a word says only how it ended.
        let Err(err) = WorkerClient::start(shell("exit 3"), config(), Arc::default()) else {
            panic!("the stand-in started");
        };
        assert!(!err.to_string().contains("it said"), "{err}");
    }
}
