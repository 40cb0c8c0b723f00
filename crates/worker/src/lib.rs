//! The model in a process of its own. llama.cpp aborts the whole process on some errors (a
//! failed GGML assertion, a GPU out of memory, a driver fault); in `catena serve` and the desktop
//! app that must cost the model, not the server, the user's open runs or their stored sessions.
//! So the server keeps llama.cpp in a child (`catena worker`), talks to it with small frames over
//! its standard input and output ([`protocol`]), and starts it again when it dies.
//!
//! The same child quantises a model file when its first frame asks for that instead of a model
//! ([`quantize_in_child`]): llama.cpp's quantiser aborts on some checkpoints too. And it compiles
//! and renders a model's chat template ([`render_in_child`]): a template is code from the model
//! file, whose memory only a process of its own can bound.
//!
//! The split: this crate is the parent's side and the frames ([`protocol`]); it knows no
//! llama.cpp. The child's side, which loads the model and keeps the KV caches, is
//! `catena-worker-process`, linked only by the binaries that run it. The server owns everything
//! else (the store, the sandbox, the agent runner), and drives a
//! [`WorkerSession`](client::WorkerSession) that implements the engine's `Session` trait over the
//! pipe.

mod client;
mod exit;
mod last_words;
mod one_shot;
pub mod protocol;
mod quantize;
mod template;

pub use client::{
    OpenedSession, WorkerClient, WorkerCommand, WorkerSession, WorkerStatus, describe_exit,
};
pub use exit::WorkerExit;
pub use protocol::{Prompt, QuantizeJob, TemplateJob, TemplateRender, WorkerConfig};
pub use quantize::{QuantizeError, quantize_in_child};
pub use template::{
    RENDER_DEADLINE, RENDER_MEMORY, RenderedPrompt, TemplateError, render_in_child,
};
