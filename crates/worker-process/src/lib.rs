//! The model worker's process (`catena worker`, `catena-desktop worker`): the child's side of
//! `catena-worker`'s frames. It loads the model with llama.cpp, keeps the KV caches ([`pool`]) and
//! answers each lane's requests, or quantises one file or renders one chat template when its
//! first frame asks for that. Only the binaries link it, so an edit in the llama.cpp backend
//! rebuilds them and nothing that merely talks to a worker (docs/ARCHITECTURE.md, code map:
//! `crates/engine`).

pub mod pool;
mod quantize;
mod serve;
mod template;
// Moves stdout aside with dup/dup2 (libc), which is unsafe.
#[allow(unsafe_code)]
mod stdio;

pub use serve::{run_stdio, serve};
