//! How a worker child ends, whichever job its first frame gave it (a model or a quantisation):
//! its own module so that both jobs report through it without importing each other.

use catena_engine_api::EngineError;
use std::io;

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
