//! A sandbox session: one CPython interpreter whose variables and imports survive from cell to
//! cell, like a notebook kernel. The AFM checkpoints expect stateless calls (a fresh interpreter
//! each time, which is what [`super::Sandbox::run`] gives); sessions are for callers that want
//! state, such as an interactive coding assistant.
//!
//! It uses the CPython build's session exports: `host_alloc(len)` reserves guest memory for a
//! cell's source and `turn(ptr, len)` runs it (0 ok, 1 an exception, n for `sys.exit(n)`, 256 and
//! above for `exit()`).

use super::scratch::Scratch;
use super::{CappedPipe, CapturedOutput, Exit, Guest, Sandbox, SandboxError, supervise};
use std::time::{Duration, Instant};
use wasmtime::{Instance, Store};

/// The outcome of one cell.
#[derive(Debug, Clone)]
pub struct CellOutcome {
    pub exit: Exit,
    pub stdout: CapturedOutput,
    pub stderr: CapturedOutput,
    pub elapsed: Duration,
}

/// One interpreter kept alive across cells.
pub struct SandboxSession<'s> {
    sandbox: &'s Sandbox,
    store: Store<Guest>,
    instance: Instance,
    scratch: Scratch,
    stdout: CappedPipe,
    stderr: CappedPipe,
    /// False once a cell was stopped mid-way: the interpreter's state is then unknown.
    alive: bool,
}

impl<'s> SandboxSession<'s> {
    pub(super) async fn open(sandbox: &'s Sandbox) -> Result<SandboxSession<'s>, SandboxError> {
        let scratch = Scratch::new(sandbox.spec.mount_points()).map_err(SandboxError::Scratch)?;
        let stdout = CappedPipe::new(sandbox.limits.output_bytes);
        let stderr = CappedPipe::new(sandbox.limits.output_bytes);
        let argv = vec![sandbox.spec.argv.first().cloned().unwrap_or_default()];
        let mut store = sandbox.new_store(&scratch, &argv, b"", &stdout, &stderr)?;
        let setup = |e: wasmtime::Error| SandboxError::Setup(format!("{e:#}"));
        let instance = sandbox
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(setup)?;
        for export in ["host_alloc", "turn"] {
            if instance.get_export(&mut store, export).is_none() {
                return Err(SandboxError::Setup(format!(
                    "{} has no `{export}` export: it cannot keep a session",
                    sandbox.spec.name
                )));
            }
        }
        if let Ok(init) = instance.get_typed_func::<(), ()>(&mut store, "_initialize") {
            init.call_async(&mut store, ()).await.map_err(setup)?;
        }
        Ok(SandboxSession {
            sandbox,
            store,
            instance,
            scratch,
            stdout,
            stderr,
            alive: true,
        })
    }

    /// Whether the interpreter can take another cell.
    pub fn is_alive(&self) -> bool {
        self.alive
    }

    /// Runs one cell under the sandbox's limits.
    pub async fn run_cell(&mut self, code: &str) -> Result<CellOutcome, SandboxError> {
        if !self.alive {
            return Err(SandboxError::Setup(
                "this session was stopped by a limit; open a new one".into(),
            ));
        }
        let started = Instant::now();
        let store = &mut self.store;
        let instance = self.instance;
        let cell = async move {
            let alloc = instance.get_typed_func::<i32, i32>(&mut *store, "host_alloc")?;
            let turn = instance.get_typed_func::<(i32, i32), i32>(&mut *store, "turn")?;
            let len = i32::try_from(code.len())
                .map_err(|_| wasmtime::Error::msg("the cell is too large"))?;
            let ptr = alloc.call_async(&mut *store, len).await?;
            let memory = instance
                .get_memory(&mut *store, "memory")
                .ok_or_else(|| wasmtime::Error::msg("the interpreter exports no memory"))?;
            memory.write(&mut *store, ptr as u32 as usize, code.as_bytes())?;
            turn.call_async(&mut *store, (ptr, len)).await
        };
        let exit = supervise(cell, &self.scratch, &self.sandbox.limits).await;
        if !matches!(exit, Exit::Status(_)) {
            self.alive = false;
        }
        let elapsed = started.elapsed();
        // The same line as a program's in `Sandbox::run_async`, so a profile sees cells too.
        tracing::debug!(micros = elapsed.as_micros() as u64, ?exit, "program ran");
        Ok(CellOutcome {
            exit,
            stdout: self.stdout.take(),
            stderr: self.stderr.take(),
            elapsed,
        })
    }
}
