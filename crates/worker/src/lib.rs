//! The model in a process of its own. llama.cpp aborts the whole process on some errors (a
//! failed GGML assertion, a GPU out of memory, a driver fault); in `catena serve` and the desktop
//! app that must cost the model, not the server, the user's open runs or their stored sessions.
//! So the server keeps llama.cpp in a child (`catena worker`), talks to it with small frames over
//! its standard input and output ([`protocol`]), and starts it again when it dies.
//!
//! The same child quantises a model file when its first frame asks for that instead of a model
//! ([`quantize_in_child`]): llama.cpp's quantiser aborts on some checkpoints too.
//!
//! The split: the worker owns the model and the kept KV caches ([`pool`]); the server owns
//! everything else (the store, the sandbox, the agent runner), and drives a
//! [`RemoteSession`](client::RemoteSession) that implements the engine's `Session` trait over the
//! pipe.

mod child;
mod client;
mod exit;
pub mod pool;
pub mod protocol;
mod quantize;
// Moves stdout aside with dup/dup2 (libc), which is unsafe.
#[allow(unsafe_code)]
mod stdio;

pub use child::{run_stdio, serve};
pub use client::{
    OpenedSession, RemoteSession, WorkerClient, WorkerCommand, WorkerStatus, describe_exit,
};
pub use exit::WorkerExit;
pub use protocol::{Prompt, QuantizeJob, WorkerConfig};
pub use quantize::{QuantizeError, quantize_in_child};
