//! `catena worker`: the model in a process of its own, driven by `catena serve` or the desktop
//! app over its standard input and output. Not for people to run.

use anyhow::Result;
use catena_worker::WorkerExit;
use std::process::ExitCode;

pub fn run() -> Result<ExitCode> {
    match catena_worker_process::run_stdio() {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // The server went away mid-answer (it was stopped or killed): nobody is left to tell.
        Err(WorkerExit::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            tracing::debug!("the server closed the worker's pipe");
            Ok(ExitCode::SUCCESS)
        }
        // The server reads a load failure from the frames; this line is for the log.
        Err(e) => {
            tracing::error!(error = %e, "the model worker stopped");
            Ok(ExitCode::from(2))
        }
    }
}
